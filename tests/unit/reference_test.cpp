// The references are only as good as their own correctness: check them against known values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

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
