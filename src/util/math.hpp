// Integer helpers the host code shares (grid sizes, tile counts).
#pragma once

#include <cstdint>

namespace kjit::util {

// a / b rounded up, for a >= 0 and b > 0.
constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace kjit::util
