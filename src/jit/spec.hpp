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

// "rmsnorm" + {dtype: bf16, hidden: 4096} -> "rmsnorm_dtype_bf16_hidden_4096". Values must be
// [a-z0-9.], names [a-z0-9.] words joined by single '_' (throws KJIT_ERROR_INVALID_ARGUMENT
// otherwise), so a URI is a safe file name. A URI is never parsed back: each op has a fixed list
// of names in a fixed order, and values hold no '_', so it names one specialization.
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

// Builds a Spec from one typed parameter table, so that a setting has one name from the URI to the
// kernel's template argument: each parameter gives its URI pair ("stage_tokens_16"), its line of
// the generated config ("constexpr int stage_tokens = 16;", in namespace kjit_spec) and its place
// in the entries' template argument lists ("kjit_spec::stage_tokens"), all from the same name.
//
//   jit::SpecBuilder b("rmsnorm", {"common", "norm"}, "norm/rmsnorm.cuh");
//   b.type("dtype", "bf16", "__nv_bfloat16").value("hidden", 4096).flag("early_params", false);
//   b.entry("kjit::norm::rmsnorm_kernel");  // <kjit_spec::dtype, kjit_spec::hidden, ...>
//   jit::Spec s = b.build();
class SpecBuilder {
 public:
  SpecBuilder(std::string op, std::vector<std::string> kernel_dirs, std::string include,
              std::vector<std::string> arch_families = {"sm_80+"});

  // A type: URI value `uri_value` ("bf16"), config "using <name> = <cpp_type>;".
  SpecBuilder& type(const std::string& name, const std::string& uri_value,
                    const std::string& cpp_type);
  // An int: URI value v, config "constexpr int <name> = v;". With `uri_default`, the pair is left
  // out of the URI when v equals it, so a parameter added later keeps the existing URIs.
  SpecBuilder& value(const std::string& name, long long v);
  SpecBuilder& value(const std::string& name, long long v, long long uri_default);
  // An enumerator: URI value `uri_value`, a word for it ("silu"), config "constexpr int <name> =
  // v;" (the kernel's int template argument).
  SpecBuilder& choice(const std::string& name, const std::string& uri_value, long long v);
  // A bool: URI value 0 / 1, config "constexpr bool <name> = ...;"; left out of the URI when false
  // if `omit_false`.
  SpecBuilder& flag(const std::string& name, bool v, bool omit_false = false);
  // An entry whose template arguments are the named parameters in that order (all parameters in
  // table order when `args` is empty).
  SpecBuilder& entry(const std::string& kernel, const std::vector<std::string>& args = {});
  SpecBuilder& extra_option(std::string option);

  Spec build() const;

 private:
  struct Param {
    std::string name, uri_value, decl;
    bool in_uri = true;
  };
  SpecBuilder& add(Param p);
  Spec spec_;
  std::vector<Param> params_;
  std::vector<std::pair<std::string, std::vector<std::string>>> entries_;
};

// The main source NVRTC compiles: "#include" of each spec.includes entry, then spec.config.
std::string main_source(const Spec& spec);

}  // namespace kjit::jit
