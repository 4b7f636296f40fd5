// The host model of kernels/common/fastdiv.cuh against true division.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>

#include "ops/fastdiv.hpp"

using kjit::ops::fast_div;
using kjit::ops::make_fast_div;

TEST_CASE("fastdiv: exact for every dividend below 2^31", "[fastdiv]") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> any(0, 0x7fffffffu);
  auto check = [&](uint32_t d) {
    const kjit::ops::FastDiv fd = make_fast_div(d);
    auto ok = [&](uint32_t n) { return fast_div(n, fd) == n / d; };
    // Around every multiple near the ends of the range and at random points.
    for (uint32_t q : {0u, 1u, 2u, 3u, 0x7fffffffu / d - 1, 0x7fffffffu / d}) {
      for (int64_t delta = -2; delta <= 2; ++delta) {
        const int64_t n = static_cast<int64_t>(q) * d + delta;
        if (n < 0 || n > 0x7fffffff) continue;
        if (!ok(static_cast<uint32_t>(n))) {
          FAIL_CHECK("d=" << d << " n=" << n);
          return;
        }
      }
    }
    for (int i = 0; i < 200; ++i) {
      const uint32_t n = any(rng);
      if (!ok(n)) {
        FAIL_CHECK("d=" << d << " n=" << n);
        return;
      }
    }
  };
  for (uint32_t d = 1; d <= 4096; ++d) check(d);
  for (uint32_t d : {5000u, 65535u, 65536u, 65537u, 1000003u, 0x40000000u, 0x40000001u, 0x7ffffffeu,
                     0x7fffffffu}) {
    check(d);
  }
  for (int i = 0; i < 2000; ++i) check(any(rng) | 1u);
}

TEST_CASE("fastdiv: powers of two and 1 are plain shifts", "[fastdiv]") {
  for (uint32_t s = 0; s < 31; ++s) {
    const kjit::ops::FastDiv fd = make_fast_div(1u << s);
    CHECK(fd.mul == 0);
    CHECK(fd.shift == s);
  }
}
