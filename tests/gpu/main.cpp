// GPU tests run where a driver and a device of sm_80 or newer exist; elsewhere each test exits
// 77, which CTest counts as skipped (SKIP_RETURN_CODE), so a machine without a GPU reports the
// skips explicitly. Tests that need more than sm_80 carry a capability tag (`[sm90]`, `[sm90a]`,
// see support/gpu.hpp): where the device lacks it they are left out and named, and a run whose
// every selected test is left out (CTest runs one test case per entry) exits 77 too.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "support/gpu.hpp"

namespace {

constexpr int kSkipped = 77;

// A test name as a literal Catch test-spec pattern: its special characters escaped.
std::string literal_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::strchr(",[]*~\"\\", c)) out += '\\';
    out += c;
  }
  return out;
}

// Leaves out the selected tests whose capability tags this device lacks (printing each and why).
// Returns false when nothing is left to run.
bool drop_tests_beyond_device(Catch::Session& session) {
  const Catch::IConfig& config = session.config();
  const auto selected =
      Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
  std::vector<std::string> runnable;
  size_t dropped = 0;
  for (const auto& tc : selected) {
    const std::string why = kjit::test::missing_capability(tc.tags);
    if (why.empty()) {
      runnable.push_back(literal_name(tc.name));
    } else {
      std::printf("SKIPPED: %s (%s)\n", tc.name.c_str(), why.c_str());
      ++dropped;
    }
  }
  if (dropped == 0) return true;
  if (runnable.empty()) return false;
  std::string spec;
  for (const auto& n : runnable) spec += (spec.empty() ? "" : ",") + n;
  session.configData().testsOrTags = {spec};
  session.useConfigData(session.configData());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  std::string why;
  if (!listing && !kjit::test::gpu_available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return kSkipped;
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  if (listing) return session.run();
  if (!drop_tests_beyond_device(session)) return kSkipped;
  // Like cudaSetDevice(0): the tests use the driver API (streams, events) directly.
  kjit::cuda::make_current(0);
  return session.run();
}
