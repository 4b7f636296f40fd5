#include "jit/settings.hpp"

#include "util/env.hpp"
#include "util/error.hpp"

#ifndef KJIT_BUILD_CUDA_HOME
#define KJIT_BUILD_CUDA_HOME "/usr/local/cuda"
#endif

namespace kjit::jit {

namespace fs = std::filesystem;
using util::env_flag;
using util::env_get;

Settings Settings::from_env() {
  Settings s;
  if (auto v = env_get("KJIT_CACHE_DIR"); v && !v->empty()) {
    s.cache_dir = *v;
  } else if (auto x = env_get("XDG_CACHE_HOME"); x && !x->empty()) {
    s.cache_dir = fs::path(*x) / "kjit";
  } else if (auto h = env_get("HOME"); h && !h->empty()) {
    s.cache_dir = fs::path(*h) / ".cache" / "kjit";
  } else {
    s.cache_dir = fs::temp_directory_path() / "kjit-cache";
  }
  if (auto v = env_get("KJIT_GEN_DIR"); v && !v->empty()) {
    s.gen_dir = *v;
    s.gen_dir_explicit = true;
  } else {
    s.gen_dir = s.cache_dir / "generated";
  }
  s.disable_jit = env_flag("KJIT_DISABLE_JIT");
  s.disk_cache = env_flag("KJIT_JIT_CACHE", true);
  s.verbose = env_flag("KJIT_JIT_VERBOSE");
  s.debug = env_flag("KJIT_JIT_DEBUG");
  s.lineinfo = env_flag("KJIT_JIT_LINEINFO");
  s.use_pch = env_flag("KJIT_JIT_PCH", true);
  if (auto v = env_get("KJIT_CUDA_ARCH_LIST")) s.arch_list = parse_arch_list(*v);
  return s;
}

fs::path find_cuda_home() {
  std::string tried;
  auto has_headers = [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p / "include" / "cuda_bf16.h", ec);
  };
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = env_get(var); v && !v->empty()) {
      if (has_headers(*v)) return *v;
      tried += fmt::format(" {}={}", var, *v);
    }
  }
  if (has_headers(KJIT_BUILD_CUDA_HOME)) return KJIT_BUILD_CUDA_HOME;
  tried += fmt::format(" build-time={}", KJIT_BUILD_CUDA_HOME);
  fail(KJIT_ERROR_COMPILE,
       "CUDA headers not found (need <home>/include/cuda_bf16.h); tried:{}. Set KJIT_CUDA_HOME.",
       tried);
}

}  // namespace kjit::jit
