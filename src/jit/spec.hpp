// A compilation specification: everything that determines one cubin except the target arch.
// Ops build Specs (src/ops); the JIT core (jit_core.hpp) turns a Spec + target into a loaded
// kernel through the in-process cache, the disk cache, or NVRTC.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kjit::jit {

// Specialization parameters in the op's canonical order (the order is part of the URI).
using Params = std::vector<std::pair<std::string, std::string>>;

// "rmsnorm" + {dtype: bf16, hidden: 4096} -> "rmsnorm_dtype_bf16_hidden_4096". Names and values
// must be [a-z0-9.] (throws KJIT_ERROR_INVALID_ARGUMENT otherwise) so a URI is a safe file name.
std::string make_uri(const std::string& op, const Params& params);

struct Spec {
  std::string op;
  Params params;
  std::string uri;                       // make_uri(op, params)
  std::vector<std::string> kernel_dirs;  // embedded folders handed to NVRTC, e.g. {"common","norm"}
  std::vector<std::string> includes;     // kernel headers the main source includes
  // Generated code after the includes: the specialization's values (namespace kjit_spec). It is
  // part of the main source, not a header, because NVRTC's automatic PCH matches headers by
  // name: a per-spec header under one name would be served stale from the first compile.
  std::string config;
  std::vector<std::string> entry_names;    // NVRTC name expressions of the __global__ entries
  std::vector<std::string> extra_options;  // op-specific NVRTC options (kept in the cache key)
  std::vector<std::string> arch_families;  // e.g. {"sm_80+"} or {"sm_90a"}
};

// The main source NVRTC compiles: "#include" of each spec.includes entry, then spec.config.
std::string main_source(const Spec& spec);

}  // namespace kjit::jit
