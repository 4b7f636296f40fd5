// The autotuner's GPU timer (src/tune/gpu_timer.*): every mode returns one positive sample per
// request, and the samples scale with the work (a memset eight times larger takes several times
// longer), so a tactic's time is the tactic's, not the harness's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/driver.hpp"
#include "support/gpu.hpp"
#include "tune/autotuner.hpp"
#include "tune/gpu_timer.hpp"

using namespace kjit;

TEST_CASE("tune gpu: the timer measures the work in every mode", "[gpu][tune]") {
  test::DeviceBuffer buf(size_t{512} << 20);
  const auto d_ptr = reinterpret_cast<CUdeviceptr>(buf.get());
  auto memset_of = [&](size_t bytes) {
    return [d_ptr, bytes](CUstream s) {
      KJIT_CU_CHECK(cuda::driver().cuMemsetD8Async(d_ptr, 0x5a, bytes, s));
    };
  };
  for (const char* name : {"eager-cold", "eager-hot", "graph-cold", "graph-hot"}) {
    INFO(name);
    const tune::TimingMode mode = tune::TimingMode::parse(name);
    CHECK(mode.name() == name);
    const std::vector<double> small = tune::time_on_gpu(0, memset_of(size_t{64} << 20), mode, 9);
    const std::vector<double> large = tune::time_on_gpu(0, memset_of(size_t{512} << 20), mode, 9);
    REQUIRE(small.size() == 9);
    REQUIRE(large.size() == 9);
    for (double x : small) CHECK((std::isfinite(x) && x > 0));
    const double s = tune::summarize("small", small).median_us;
    const double l = tune::summarize("large", large).median_us;
    INFO("64 MB " << s << " us, 512 MB " << l << " us");
    CHECK(l > 4 * s);
    // 64 MB written in more than 5 us would be over 13 TB/s: not a real measurement.
    CHECK(s > 5.0);
  }
  CHECK_THROWS(tune::TimingMode::parse("graph"));
}
