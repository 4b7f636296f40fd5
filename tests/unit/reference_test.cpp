// The references are only as good as their own correctness: check them against known values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "reference/half.hpp"
#include "reference/norm_ref.hpp"

using namespace kjit::ref;

TEST_CASE("reference: bf16 conversions round to nearest even", "[reference]") {
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(-2.0f) == 0xC000);
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);  // tie -> even
  CHECK(float_to_bf16(1.0f + 0x1p-7f) == 0x3F81);
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);  // tie -> even (up)
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST_CASE("reference: fp16 conversions round-trip every half", "[reference]") {
  CHECK(float_to_fp16(1.0f) == 0x3C00);
  CHECK(float_to_fp16(65504.0f) == 0x7BFF);
  CHECK(float_to_fp16(65536.0f) == 0x7C00);
  CHECK(float_to_fp16(0x1p-24f) == 0x0001);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(float_to_fp16(f) == h);
  }
}

TEST_CASE("reference: rmsnorm of a known row", "[reference]") {
  // x = [3, 4]: mean square 12.5, rsqrt = 1/sqrt(12.5).
  auto y = rmsnorm({3, 4}, {1, 2}, 1, 2, 0.0);
  CHECK(y[0] == Approx(3 / std::sqrt(12.5)));
  CHECK(y[1] == Approx(8 / std::sqrt(12.5)));
  auto g = rmsnorm({3, 4}, {1, 2}, 1, 2, 0.0, 1.0);
  CHECK(g[1] == Approx(12 / std::sqrt(12.5)));
}

namespace {

float round_to(const std::string& dtype, float v) {
  unsigned char b[4];
  store_elem(b, 0, v, dtype);
  return static_cast<float>(load_elem(b, 0, dtype));
}

}  // namespace

// The rmsnorm GPU test's tolerance (one_rounding_tolerance: half an output ulp plus fp32 slack)
// simulated on the CPU: an fp32 kernel that rounds once passes it on every element, one that
// rounds x * rsqrt to the output type before the weight multiply (an extra rounding, up to a
// whole ulp) fails it. The tolerance the test used before, 2u + 1e-5, passed both.
TEST_CASE("reference: the norm tolerance passes one rounding and rejects two", "[reference]") {
  std::mt19937_64 rng(33);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  for (const std::string dt : {"bf16", "fp16"}) {
    const int64_t rows = 4, hidden = 4096;
    std::vector<double> x(static_cast<size_t>(rows * hidden)), w(static_cast<size_t>(hidden));
    for (auto& v : x) v = round_to(dt, static_cast<float>(dist(rng)));
    for (auto& v : w) v = round_to(dt, static_cast<float>(dist(rng)));
    const std::vector<double> want = rmsnorm(x, w, rows, hidden, 1e-6);
    long bad_once = 0, bad_twice = 0, old_twice = 0;
    const double u = unit_roundoff(dt);
    for (int64_t r = 0; r < rows; ++r) {
      float ss = 0.0f;
      for (int64_t i = 0; i < hidden; ++i) {
        const float f = static_cast<float>(x[static_cast<size_t>(r * hidden + i)]);
        ss += f * f;
      }
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + 1e-6f);
      for (int64_t i = 0; i < hidden; ++i) {
        const size_t e = static_cast<size_t>(r * hidden + i);
        const float xf = static_cast<float>(x[e]),
                    wf = static_cast<float>(w[static_cast<size_t>(i)]);
        const double once = round_to(dt, xf * inv * wf);
        const double twice = round_to(dt, round_to(dt, xf * inv) * wf);
        const double tol = one_rounding_tolerance(dt, want[e]);
        bad_once += !(std::fabs(once - want[e]) <= tol);
        bad_twice += !(std::fabs(twice - want[e]) <= tol);
        old_twice += !(std::fabs(twice - want[e]) <= (2 * u + 1e-5) * std::fabs(want[e]) + 1e-6);
      }
    }
    INFO(dt << ": " << bad_twice << " of " << rows * hidden << " twice-rounded elements rejected");
    CHECK(bad_once == 0);
    CHECK(bad_twice > rows * hidden / 50);
    CHECK(old_twice == 0);  // what the test could not see
  }
}
