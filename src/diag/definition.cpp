// See definition.hpp.
#include "diag/definition.hpp"

#include <nlohmann/json.hpp>

#include "util/error.hpp"

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

int64_t Definition::const_axis(const std::string& axis_name) const {
  const DefAxis* a = axis(axis_name);
  if (a == nullptr || !a->is_const) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {} has no const axis '{}'", name, axis_name);
  }
  return a->value;
}

std::string Definition::tensor_dtype_name(const std::string& tensor_name) const {
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& t : *list) {
      if (t.name == tensor_name) return t.dtype;
    }
  }
  return "";
}

DType Definition::tensor_dtype(const std::string& tensor_name) const {
  const std::string dt = tensor_dtype_name(tensor_name);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kE4M3}) {
    if (dt == def_dtype_name(t)) return t;
  }
  fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: tensor '{}' {}", name, tensor_name,
       dt.empty() ? "is missing" : "has dtype " + dt + ", which no kjit kernel reads as a DType");
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

Definition definition_from_json(const nlohmann::json& j) {
  const std::string name = j.is_object() && j.contains("name") && j["name"].is_string()
                               ? j["name"].get<std::string>()
                               : std::string("(unnamed)");
  auto text = [&](const nlohmann::json& o, const char* key) -> std::string {
    if (!o.is_object() || !o.contains(key) || !o[key].is_string()) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: needs a string \"{}\"", name, key);
    }
    return o[key].get<std::string>();
  };
  Definition d;
  d.name = text(j, "name");
  d.op_type = text(j, "op_type");
  d.op = text(j, "kjit_op");
  d.entry = j.value("kjit_entry", "");
  d.description = j.value("description", "");
  d.reference = j.value("reference", "");
  if (!j.contains("axes") || !j["axes"].is_object()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: needs an \"axes\" object", name);
  }
  for (const auto& [axis_name, a] : j["axes"].items()) {
    const std::string type = text(a, "type");
    if (type != "const" && type != "var") {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: axis {} has type '{}' (const or var)", name,
           axis_name, type);
    }
    DefAxis ax{axis_name, type == "const", 0, a.value("description", "")};
    if (ax.is_const) {
      if (!a.contains("value") || !a["value"].is_number_integer()) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: const axis {} needs an integer value",
             name, axis_name);
      }
      ax.value = a["value"].get<int64_t>();
    }
    d.axes.push_back(std::move(ax));
  }
  for (const auto& [key, list] :
       {std::pair{"inputs", &d.inputs}, std::pair{"outputs", &d.outputs}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_object()) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: \"{}\" is not an object", name, key);
    }
    for (const auto& [tensor_name, t] : j[key].items()) {
      DefTensor dt{tensor_name, {}, true, text(t, "dtype"), t.value("description", "")};
      if (t.contains("shape") && t["shape"].is_array()) {
        dt.scalar = false;
        for (const auto& ax : t["shape"]) {
          if (!ax.is_string()) {
            fail(KJIT_ERROR_INVALID_ARGUMENT,
                 "definition {}: {} has a shape entry that is not an "
                 "axis name",
                 name, tensor_name);
          }
          dt.shape.push_back(ax.get<std::string>());
        }
      }
      list->push_back(std::move(dt));
    }
  }
  return d;
}

}  // namespace kjit::ops
