// GPU tests run where a driver and a device exist; elsewhere each test exits 77, which CTest
// counts as skipped (SKIP_RETURN_CODE), so a machine without a GPU reports the skips explicitly.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/device.hpp"
#include "support/gpu.hpp"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  std::string why;
  if (!listing && !kjit::test::gpu_available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 77;
  }
  // Like cudaSetDevice(0): the tests use the driver API (streams, events) directly.
  if (!listing) kjit::cuda::make_current(0);
  return Catch::Session().run(argc, argv);
}
