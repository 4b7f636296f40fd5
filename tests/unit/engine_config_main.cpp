// kjit_configure in a fresh process (the runtime is process-wide): `cache DIR` configures the
// cache dir, precompiles rmsnorm for KJIT_CUDA_ARCH_LIST, and checks that the cubin landed in
// DIR and that a second kjit_configure is refused; `nojit DIR` configures disable_jit = 1 and
// checks that a precompile of an uncached spec fails with KJIT_ERROR_JIT_DISABLED.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "kjit/kjit.h"

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "FAILED: %s (last error: %s)\n", what, kjit_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: engine_config_test cache|nojit DIR");
  const std::string mode = argv[1], dir = argv[2];
  std::filesystem::remove_all(dir);
  kjit_config c;
  kjit_config_init(&c);
  c.cache_dir = dir.c_str();
  if (mode == "nojit") c.disable_jit = 1;
  if (kjit_configure(&c) != KJIT_SUCCESS) return fail("kjit_configure");
  const kjit_status s = kjit_precompile("rmsnorm", "dtype=bf16,hidden=4096", -1);
  if (mode == "nojit") {
    if (s != KJIT_ERROR_JIT_DISABLED) return fail("precompile under disable_jit");
    std::printf("disable_jit: %s\n", kjit_last_error());
    return 0;
  }
  if (s != KJIT_SUCCESS) return fail("kjit_precompile");
  bool found = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    found = found || (name.rfind("rmsnorm_", 0) == 0 && e.path().extension() == ".cubin");
  }
  if (!found) return fail("no rmsnorm cubin under the configured cache dir");
  if (kjit_configure(&c) != KJIT_ERROR_INVALID_ARGUMENT) return fail("a second kjit_configure");
  std::printf("configured cache dir %s holds the precompiled cubin\n", dir.c_str());
  return 0;
}
