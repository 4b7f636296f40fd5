#include <catch2/catch.hpp>

#include <fstream>

#include "jit/settings.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"

using namespace kjit;
using kjit::test::ScopedEnv;

TEST_CASE("settings: cache dir from KJIT_CACHE_DIR, then XDG, then HOME", "[settings]") {
  ScopedEnv a("KJIT_CACHE_DIR", "/tmp/kjit-a");
  ScopedEnv g("KJIT_GEN_DIR", nullptr);
  ScopedEnv x("XDG_CACHE_HOME", "/tmp/xdg");
  ScopedEnv h("HOME", "/tmp/home");
  CHECK(jit::Settings::from_env().cache_dir == "/tmp/kjit-a");
  CHECK(jit::Settings::from_env().gen_dir == "/tmp/kjit-a/generated");
  CHECK_FALSE(jit::Settings::from_env().gen_dir_explicit);
  {
    ScopedEnv unset("KJIT_CACHE_DIR", nullptr);
    CHECK(jit::Settings::from_env().cache_dir == "/tmp/xdg/kjit");
    ScopedEnv unset_xdg("XDG_CACHE_HOME", nullptr);
    CHECK(jit::Settings::from_env().cache_dir == "/tmp/home/.cache/kjit");
  }
  ScopedEnv gen("KJIT_GEN_DIR", "/tmp/gen");
  CHECK(jit::Settings::from_env().gen_dir == "/tmp/gen");
  CHECK(jit::Settings::from_env().gen_dir_explicit);
}

TEST_CASE("settings: flags", "[settings]") {
  ScopedEnv a("KJIT_DISABLE_JIT", "1");
  ScopedEnv b("KJIT_JIT_CACHE", "0");
  ScopedEnv c("KJIT_JIT_VERBOSE", "true");
  ScopedEnv d("KJIT_JIT_DEBUG", "on");
  ScopedEnv e("KJIT_JIT_LINEINFO", "yes");
  ScopedEnv f("KJIT_CUDA_ARCH_LIST", "8.0 9.0a");
  auto s = jit::Settings::from_env();
  CHECK(s.disable_jit);
  CHECK_FALSE(s.disk_cache);
  CHECK(s.verbose);
  CHECK(s.debug);
  CHECK(s.lineinfo);
  CHECK(jit::format_arch_list(s.arch_list) == "sm_80 sm_90a");
  ScopedEnv off("KJIT_DISABLE_JIT", "0");
  ScopedEnv on("KJIT_JIT_CACHE", nullptr);
  CHECK_FALSE(jit::Settings::from_env().disable_jit);
  CHECK(jit::Settings::from_env().disk_cache);
  ScopedEnv bad("KJIT_CUDA_ARCH_LIST", "sm_90 nonsense");
  CHECK_THROWS_AS(jit::Settings::from_env(), Error);
}

TEST_CASE("settings: CUDA home search order and error", "[settings]") {
  test::TempDir fake;
  std::filesystem::create_directories(fake.path() / "include");
  std::ofstream(fake.path() / "include" / "cuda_bf16.h") << "// fake\n";
  {
    ScopedEnv k("KJIT_CUDA_HOME", fake.path().c_str());
    CHECK(jit::find_cuda_home() == fake.path());
  }
  {
    ScopedEnv k("KJIT_CUDA_HOME", "/nonexistent-kjit");
    ScopedEnv c("CUDA_HOME", fake.path().c_str());
    CHECK(jit::find_cuda_home() == fake.path());
  }
  {
    // Nothing usable set: the build-time toolkit is the fallback.
    ScopedEnv k("KJIT_CUDA_HOME", "/nonexistent-kjit");
    ScopedEnv c("CUDA_HOME", nullptr);
    ScopedEnv p("CUDA_PATH", nullptr);
    CHECK(std::filesystem::exists(jit::find_cuda_home() / "include" / "cuda_bf16.h"));
  }
}
