// fp64 CPU references for the activation family, written from the textbook formulas (not from the
// kernel's rewritten forms) so a wrong identity in the kernel would show.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kjit::ref {

enum class ActKind { kSilu, kGelu, kGeluTanh, kSigmoid };
inline constexpr ActKind kAllActKinds[] = {ActKind::kSilu, ActKind::kGelu, ActKind::kGeluTanh,
                                           ActKind::kSigmoid};

inline const char* act_kind_name(ActKind a) {
  switch (a) {
    case ActKind::kSilu: return "silu";
    case ActKind::kGelu: return "gelu";
    case ActKind::kGeluTanh: return "gelu_tanh";
    case ActKind::kSigmoid: return "sigmoid";
  }
  return "?";
}

// The kind act_kind_name names `name` ("gelu_tanh"); throws std::invalid_argument for none.
inline ActKind act_kind_named(const std::string& name) {
  for (ActKind a : kAllActKinds) {
    if (name == act_kind_name(a)) return a;
  }
  throw std::invalid_argument("no reference activation " + name);
}

inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

inline double gelu(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

inline double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

inline double activate(ActKind a, double x) {
  switch (a) {
    case ActKind::kSilu: return silu(x);
    case ActKind::kGelu: return gelu(x);
    case ActKind::kGeluTanh: return gelu_tanh(x);
    case ActKind::kSigmoid: return sigmoid(x);
  }
  return NAN;
}

// x: rows x 2d (gate then up, compact); returns rows x d: act(gate) * up, in double.
inline std::vector<double> act_and_mul(ActKind a, const std::vector<double>& x, int64_t rows,
                                       int64_t d) {
  std::vector<double> y(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * 2 * d;
    for (int64_t i = 0; i < d; ++i) {
      y[static_cast<size_t>(r * d + i)] = activate(a, xr[i]) * xr[d + i];
    }
  }
  return y;
}

// The documented bound for |got - want| (kjit.h, docs/c-api.md): one rounding to the output dtype,
// a few fp32 ulp of the result, and an absolute term for the tails, where exp / erf lose relative
// accuracy on results that are tiny next to |gate * up| (1 + erf cancels below x = -4; __expf's
// error grows with |x|). `half_subnormal` covers fp16 results below its normal range, where one
// rounding is an absolute 2^-25 rather than a relative u.
inline double act_and_mul_tolerance(const std::string& dtype, double want, double gate, double up) {
  const double u = dtype == "fp32" ? 0x1p-24 : dtype == "fp16" ? 0x1p-11 : 0x1p-8;
  const double half_subnormal = dtype == "fp16" ? 0x1p-25 : 0.0;
  return (u + 0x1p-19) * std::fabs(want) + 0x1p-22 * std::fabs(gate * up) + half_subnormal;
}

}  // namespace kjit::ref
