#include <catch2/catch.hpp>

#include "jit/compiler.hpp"
#include "cache/metadata.hpp"
#include "jit/sources.hpp"
#include "ops/norm/norm.hpp"

using namespace kjit;
using namespace kjit::jit;

namespace {

struct KeyFixture {
  Spec spec = ops::rmsnorm_spec(ops::select_rmsnorm(ops::DType::kBF16, 4096, 16));
  std::vector<SourceFile> sources = sources_for(spec.kernel_dirs);
  ArchTarget target{9, 0, true};
  Settings settings;

  std::string key() const {
    return compute_key(make_key_inputs(spec, sources, semantic_options(spec, target, settings),
                                       target, "13.0", "0.1.0"))
        .hex();
  }
};

}  // namespace

TEST_CASE("cache key: stable for equal inputs", "[cache_key]") {
  KeyFixture a, b;
  CHECK(a.key() == b.key());
  CHECK(a.key().size() == 32);
}

TEST_CASE("cache key: changes when any source byte changes", "[cache_key]") {
  KeyFixture f;
  const std::string base = f.key();
  REQUIRE(!f.sources.empty());
  for (size_t i = 0; i < f.sources.size(); ++i) {
    KeyFixture g;
    g.sources[i].content += " ";
    CHECK(g.key() != base);
    KeyFixture h;
    h.sources[i].content[h.sources[i].content.size() / 2] ^= 1;
    CHECK(h.key() != base);
  }
  KeyFixture g;
  g.spec.config += "\n";
  CHECK(g.key() != base);
  KeyFixture m;
  m.spec.includes.push_back("common/vec.cuh");
  CHECK(m.key() != base);
}

TEST_CASE("cache key: changes with options, arch, params, NVRTC and kjit versions", "[cache_key]") {
  KeyFixture f;
  const std::string base = f.key();
  {
    KeyFixture g;
    g.spec.extra_options.push_back("-DFOO");
    CHECK(g.key() != base);
  }
  {
    KeyFixture g;
    g.settings.debug = true;
    CHECK(g.key() != base);
  }
  {
    KeyFixture g;
    g.settings.lineinfo = true;
    CHECK(g.key() != base);
  }
  {
    KeyFixture g;
    g.target = {9, 0, false};
    CHECK(g.key() != base);
  }
  {
    KeyFixture g;
    g.spec.params[1].second = "4095";
    CHECK(g.key() != base);
  }
  auto with_versions = [&](const char* nvrtc, const char* kjit_v) {
    return compute_key(make_key_inputs(f.spec, f.sources,
                                       semantic_options(f.spec, f.target, f.settings), f.target,
                                       nvrtc, kjit_v))
        .hex();
  };
  CHECK(with_versions("13.0", "0.1.0") == base);
  CHECK(with_versions("13.1", "0.1.0") != base);
  CHECK(with_versions("13.0", "0.1.1") != base);
}

TEST_CASE("cache key: field boundaries are unambiguous", "[cache_key]") {
  KeyInputs a, b;
  a.params = {{"ab", "c"}};
  b.params = {{"a", "bc"}};
  CHECK(compute_key(a).hex() != compute_key(b).hex());
}
