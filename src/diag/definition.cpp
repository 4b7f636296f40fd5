// See definition.hpp.
#include "diag/definition.hpp"

#include <nlohmann/json.hpp>

namespace kjit::ops {

namespace def {

std::string dtype_suffix(DType t) {
  return t == DType::kBF16 ? "" : std::string("_") + dtype_name(t);
}

DefAxis var(const char* name, const char* description) {
  return {name, false, 0, description};
}
DefAxis constant(const char* name, int64_t value, const char* description) {
  return {name, true, value, description};
}
DefTensor tensor(const char* name, std::vector<std::string> shape, DType t,
                 const char* description) {
  return {name, std::move(shape), false, def_dtype_name(t), description};
}
DefTensor scalar(const char* name, const char* description) {
  return {name, {}, true, "float32", description};
}

}  // namespace def

const DefAxis* Definition::axis(const std::string& axis_name) const {
  for (const auto& a : axes) {
    if (a.name == axis_name) return &a;
  }
  return nullptr;
}

const char* def_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kE4M3: return "float8_e4m3fn";
  }
  return "unknown";
}

std::string definition_json(const Definition& d) {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["name"] = d.name;
  j["op_type"] = d.op_type;
  j["kjit_op"] = d.op;
  j["kjit_entry"] = d.entry;
  j["description"] = d.description;
  j["axes"] = ojson::object();
  for (const auto& a : d.axes) {
    ojson ax = {{"type", a.is_const ? "const" : "var"}};
    if (a.is_const) ax["value"] = a.value;
    ax["description"] = a.description;
    j["axes"][a.name] = ax;
  }
  for (const auto& [key, list] :
       {std::pair{"inputs", &d.inputs}, std::pair{"outputs", &d.outputs}}) {
    j[key] = ojson::object();
    for (const auto& t : *list) {
      j[key][t.name] = {{"shape", t.scalar ? ojson(nullptr) : ojson(t.shape)},
                        {"dtype", t.dtype},
                        {"description", t.description}};
    }
  }
  j["reference"] = d.reference;
  return j.dump(2) + "\n";
}

}  // namespace kjit::ops
