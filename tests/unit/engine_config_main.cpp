// kjit_configure in a fresh process (the runtime is process-wide): `cache DIR` configures the
// cache dir, precompiles rmsnorm for KJIT_CUDA_ARCH_LIST, and checks that the cubin landed in
// DIR and that a second kjit_configure is refused; `nojit DIR` configures disable_jit = 1 and
// checks that a precompile of an uncached spec fails with KJIT_ERROR_JIT_DISABLED; `file DIR`
// configures the cache dir, warms up from a workload file (kjit_precompile_file: two lines, two
// specializations), and checks the counts: all compiled, then, a second time, all cached.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "kjit/kjit.h"

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "FAILED: %s (last error: %s)\n", what, kjit_last_error());
  return 1;
}

// Two workload lines whose definitions kjit has built in (the file has no definitions/ beside it).
int warm_up_from_file(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/warm.jsonl";
  std::ofstream(file) << "{\"definition\": \"rmsnorm_h4096\", \"axes\": {\"batch_size\": 4096}}\n"
                      << "# decode\n"
                      << "{\"definition\": \"rmsnorm_h4096\", \"axes\": {\"batch_size\": 1}}\n";
  for (int round = 0; round < 2; ++round) {
    kjit_precompile_counts n;
    n.struct_size = sizeof n;
    if (kjit_precompile_file(file.c_str(), -1, &n) != KJIT_SUCCESS) {
      return fail("kjit_precompile_file");
    }
    std::printf("round %d: %d compiled, %d cached, %d skipped, %d failed\n", round, n.compiled,
                n.cached, n.skipped, n.failed);
    const int want_compiled = round == 0 ? 2 : 0;
    if (n.compiled != want_compiled || n.cached != 2 - want_compiled || n.skipped != 0 ||
        n.failed != 0) {
      return fail("the counts");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: engine_config_test cache|nojit|file DIR");
  const std::string mode = argv[1], dir = argv[2];
  std::filesystem::remove_all(dir);
  kjit_config c;
  kjit_config_init(&c);
  c.cache_dir = dir.c_str();
  if (mode == "nojit") c.disable_jit = 1;
  if (kjit_configure(&c) != KJIT_SUCCESS) return fail("kjit_configure");
  if (mode == "file") return warm_up_from_file(dir);
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
