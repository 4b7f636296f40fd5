// Definitions: what an op computes at one set of constant sizes, in the shape of flashinfer-bench's
// definitions. A definition names the op and its const axes (`rmsnorm_h4096`), lists its axes
// (const with a value, or var: known per call), its inputs and outputs with shapes in axis names,
// and points at the CPU fp64 reference the tests use. `kjit-cli defs export` writes them as JSON
// (bench/definitions/); KJIT_TRACE_DUMP writes the ones an engine actually calls (trace_dump.hpp).
// This is the generic part; each family's descriptor (src/ops/<family>/<family>_desc.cpp) builds
// its ops' definitions with the helpers below. Names are op + const axes, with the activation
// dtype as a suffix unless it is bf16 (so the bf16 names match flashinfer-bench's:
// `rmsnorm_h4096`, `rmsnorm_h4096_fp16`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/dtype.hpp"

namespace kjit::ops {

struct DefAxis {
  std::string name;
  bool is_const = false;
  int64_t value = 0;  // const axes only
  std::string description;
};

struct DefTensor {
  std::string name;
  std::vector<std::string> shape;  // axis names; empty for a scalar
  bool scalar = false;
  std::string dtype;  // "bfloat16", "float16", "float32", "int32", ...
  std::string description;
};

struct Definition {
  std::string name;     // op + const axes: "rmsnorm_h4096", "rmsnorm_h4096_fp16"
  std::string op_type;  // the operation: "rmsnorm", "gemma_rmsnorm", "silu_and_mul", ...
  std::string op;       // the registry op (OpDef::name) whose kernels serve it
  std::string entry;    // the C entry point: "kjit_rmsnorm"
  std::string description;
  std::vector<DefAxis> axes;
  std::vector<DefTensor> inputs, outputs;
  std::string reference;  // "tools/devkit/reference/norm_ref.hpp: ref::rmsnorm"

  const DefAxis* axis(const std::string& axis_name) const;
  // The value of const axis `axis_name`, or KJIT_ERROR_INVALID_ARGUMENT naming the definition.
  int64_t const_axis(const std::string& axis_name) const;
  // The dtype name ("bfloat16", ...) of input `tensor_name`, else of that output; "" when there
  // is neither.
  std::string tensor_dtype_name(const std::string& tensor_name) const;
  // tensor_dtype_name as a kjit DType, or KJIT_ERROR_INVALID_ARGUMENT naming the definition (no
  // such tensor, or an fp8 or bool one).
  DType tensor_dtype(const std::string& tensor_name) const;
};

// The JSON text of a definition: 2-space indent, fields in a fixed order, trailing newline; the
// exact bytes `kjit-cli defs export` writes.
std::string definition_json(const Definition& d);

// flashinfer-bench's dtype spelling: "bfloat16", "float16", "float32", "int32", "int64".
const char* def_dtype_name(DType t);

// A definition read back from its JSON (definition_json's fields; a file under bench/definitions/
// or a trace's definitions/). Throws KJIT_ERROR_INVALID_ARGUMENT naming the missing or mistyped
// field.
Definition definition_from_json(const nlohmann::json& j);

// Builders the family descriptors share.
namespace def {
// "" for bf16, else "_" + dtype_name: the suffix a definition name carries for its dtype.
std::string dtype_suffix(DType t);
DefAxis var(const char* name, const char* description);
DefAxis constant(const char* name, int64_t value, const char* description);
DefTensor tensor(const char* name, std::vector<std::string> shape, DType t,
                 const char* description);
DefTensor scalar(const char* name, const char* description);  // a float32 scalar
}  // namespace def

}  // namespace kjit::ops
