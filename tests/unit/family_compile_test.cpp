// Each kernel family compiled for sm_90a, in process and in memory (no cache that could serve a
// stale cubin): a syntax or template error in kernels/<family>/ fails here, in the unit tests, in
// seconds, not only in the full `cli: compile --all` run. Per op of the family, the first catalog
// row of each distinct set of included headers, so every header the catalog uses is compiled at
// least once. KJIT_KERNEL_DIR points the compiles at an edited copy of kernels/ (how a mutant is
// tried).
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "jit/arch.hpp"
#include "runtime/jit_core.hpp"
#include "jit/settings.hpp"
#include "ops/registry.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"

using namespace kjit;

namespace {

// The specializations that cover the family's headers: one per (op, include set).
std::vector<jit::Spec> family_specs(const std::string& family) {
  std::vector<jit::Spec> specs;
  for (const ops::OpDef& def : ops::op_registry()) {
    std::set<std::vector<std::string>> seen;
    for (const ops::SetArgs& args : def.catalog()) {
      jit::Spec spec = def.make_spec(args);
      const auto& dirs = spec.kernel_dirs;
      if (std::find(dirs.begin(), dirs.end(), family) == dirs.end()) break;  // not this family
      std::vector<std::string> inc = spec.includes;
      std::sort(inc.begin(), inc.end());
      if (seen.insert(inc).second) specs.push_back(std::move(spec));
    }
  }
  return specs;
}

void compile_family(const std::string& family) {
  const std::vector<jit::Spec> specs = family_specs(family);
  INFO("family " << family);
  REQUIRE_FALSE(specs.empty());
  test::TempDir dir;
  jit::Settings s = jit::Settings::from_env();
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = dir.path() / "gen";
  s.artifact_dir = dir.path() / "artifacts";
  s.aot_dirs.clear();
  s.artifact_url.clear();
  s.disk_cache = false;
  s.disable_jit = false;
  jit::JitCore core(s);
  const jit::ArchTarget sm90a{9, 0, true};
  for (const jit::Spec& spec : specs) {
    INFO(spec.uri);
    try {
      const jit::Artifact a = core.build(spec, sm90a);
      CHECK_FALSE(a.cubin.empty());
    } catch (const Error& e) {
      FAIL_CHECK(e.what());
    }
  }
}

}  // namespace

TEST_CASE("compile: the activation kernels compile for sm_90a", "[compile]") {
  compile_family("activation");
}
TEST_CASE("compile: the attention kernels compile for sm_90a", "[compile]") {
  compile_family("attention");
}
TEST_CASE("compile: the kv_cache kernels compile for sm_90a", "[compile]") {
  compile_family("kv_cache");
}
TEST_CASE("compile: the norm kernels compile for sm_90a", "[compile]") {
  compile_family("norm");
}
TEST_CASE("compile: the rope kernels compile for sm_90a", "[compile]") {
  compile_family("rope");
}
TEST_CASE("compile: the sampling kernels compile for sm_90a", "[compile]") {
  compile_family("sampling");
}

TEST_CASE("compile: the gemm kernels compile for sm_90a", "[compile]") {
  compile_family("gemm");
}

TEST_CASE("compile: the quant kernels compile for sm_90a", "[compile]") {
  compile_family("quant");
}

TEST_CASE("compile: the embedding kernels compile for sm_90a", "[compile]") {
  compile_family("embedding");
}

TEST_CASE("compile: the moe kernels compile for sm_90a", "[compile]") {
  compile_family("moe");
}

TEST_CASE("compile: the comm kernels compile for sm_90a", "[compile]") {
  compile_family("comm");
}

TEST_CASE("compile: every kernel family has a compile test", "[compile]") {
  // A new folder under kernels/ needs its TEST_CASE above.
  const std::set<std::string> tested = {"activation", "attention", "gemm", "kv_cache",
                                        "norm",       "quant",     "rope", "sampling",
                                        "embedding",  "moe",       "comm"};
  std::set<std::string> used;
  for (const ops::OpDef& def : ops::op_registry()) {
    for (const ops::SetArgs& args : def.catalog()) {
      for (const auto& d : def.make_spec(args).kernel_dirs) used.insert(d);
      break;
    }
  }
  used.erase("common");
  CHECK(used == tested);
}
