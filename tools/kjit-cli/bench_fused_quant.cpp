// `kjit-cli bench` cases of the fused fp8 quantizations: rmsnorm_quant_fp8 (with or without the
// residual add) and silu_and_mul_quant_fp8. The check recomputes the fp32 value each op
// quantizes in fp64: scales within fp32's rounding of amax / 448, codes exactly e4m3(y / scale)
// away from rounding midpoints (ref::e4m3_code_range), the residual bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "ops/quant/fused_quant_fp8.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "util/math.hpp"

namespace kjit::cli {
namespace {

// One quantization group against the fp64 values `y` the op quantizes: its scale, and its
// codes (all of them: the encoder is a search over 127 magnitudes, fine at bench sizes only on a
// sample, so `stride` > 1 checks every stride-th code).
void check_group(Check& chk, const std::vector<double>& y, float got_scale, const uint8_t* codes,
                 size_t stride) {
  double amax = 0.0;
  for (double v : y) amax = std::max(amax, std::fabs(v));
  const double want_scale = amax / 448.0;
  chk.add(got_scale, want_scale, 0x1p-18 * want_scale);
  for (size_t i = 0; i < y.size(); i += stride) {
    const auto [lo, hi] = ref::e4m3_code_range(want_scale > 0.0 ? y[i] / want_scale : 0.0);
    chk.add(ref::e4m3_value(codes[i]), ref::e4m3_value(lo),
            std::fabs(ref::e4m3_value(hi) - ref::e4m3_value(lo)));
  }
}

// Codes checked per row / group at most: the whole of a decode-size call, a sample of a big one.
size_t code_stride(int64_t elements) {
  return static_cast<size_t>(std::max<int64_t>(1, elements / (1 << 18)));
}

int bench_rmsnorm_quant_fp8(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const bool residual = flag_arg(args, "residual");
  const int64_t m = ops::positive_int_arg(args, "m", 1 << 24);
  const int64_t hidden = ops::positive_int_arg(args, "hidden", 1 << 20);
  if (dtype != "bf16" && dtype != "fp16") {
    throw UsageError("rmsnorm_quant_fp8: dtype is bf16 or fp16");
  }
  check_gpu();
  const float eps = 1e-6f;
  const size_t n = static_cast<size_t>(m * hidden), es = ref::elem_size(dtype);
  std::mt19937_64 rng(std::random_device{}());
  Packed in;
  const size_t x_at = in.add(n * es), r_at = in.add(residual ? n * es : 0),
               w_at = in.add(static_cast<size_t>(hidden) * es);
  // x, the residual and the weight in one allocation (the copy baseline reads from it).
  std::vector<unsigned char> x_host, r_host, w_host;
  const std::vector<double> x = random_elems(x_host, n, dtype, rng, -4.0, 4.0);
  const std::vector<double> r0 =
      residual ? random_elems(r_host, n, dtype, rng, -4.0, 4.0) : std::vector<double>{};
  const std::vector<double> w =
      random_elems(w_host, static_cast<size_t>(hidden), dtype, rng, 0.5, 1.5);
  for (const auto& [host, at] : {std::pair{&x_host, x_at}, {&r_host, r_at}, {&w_host, w_at}}) {
    std::copy(host->begin(), host->end(), in.host.begin() + static_cast<int64_t>(at));
  }
  in.upload();
  test::DeviceBuffer y(n), s(static_cast<size_t>(m) * 4);
  y.fill(0x7F);
  s.fill(0xFF);
  auto xt = test::make_tensor(in.at(x_at), {m, hidden}, test::dl_dtype(dtype));
  auto rt = test::make_tensor(in.at(r_at), {m, hidden}, test::dl_dtype(dtype));
  auto wt = test::make_tensor(in.at(w_at), {hidden}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {m, hidden}, test::dl_dtype("e4m3"));
  auto st = test::make_tensor(s.get(), {m}, test::dl_dtype("fp32"));
  BenchCase c;
  c.op = "rmsnorm_quant_fp8";
  c.dtype = dtype;
  c.shape = {{"m", m}, {"hidden", hidden}, {"residual", residual ? 1 : 0}};
  c.label =
      fmt::format("{}rmsnorm_quant_fp8 {} {} x {}", residual ? "fused_add_" : "", dtype, m, hidden);
  const ops::ElementwiseLaunch& how = bench_elementwise_launch();
  c.launch = [&](CUstream stream) {
    ops::rmsnorm_quant_fp8(xt.get(), wt.get(), residual ? rt.get() : nullptr, yt.get(), st.get(),
                           eps, stream, how);
  };
  // Reads x (and the residual, which it writes back), writes one byte a code.
  c.bytes = static_cast<double>(n) * (es * (residual ? 3.0 : 1.0) + 1.0) + hidden * es + m * 4.0;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<uint8_t> yh(n);
    std::vector<float> sh(static_cast<size_t>(m));
    std::vector<unsigned char> rh(residual ? n * es : 0);
    y.download(yh.data(), yh.size());
    s.download(sh.data(), sh.size() * 4);
    if (residual) in.dev->download(rh.data(), rh.size(), r_at);
    const size_t stride = code_stride(m * hidden);
    std::vector<double> src(static_cast<size_t>(hidden)), yr(src.size());
    for (int64_t i = 0; i < m; ++i) {
      double ss = 0.0;
      for (int64_t j = 0; j < hidden; ++j) {
        const size_t e = static_cast<size_t>(i * hidden + j);
        src[j] = residual
                     ? ref::round_elem(static_cast<float>(x[e]) + static_cast<float>(r0[e]), dtype)
                     : x[e];
        if (residual) chk.add(ref::load_elem(rh.data(), e, dtype), src[j], 0.0);
        ss += src[j] * src[j];
      }
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
      for (int64_t j = 0; j < hidden; ++j) yr[j] = src[j] * inv * w[j];
      check_group(chk, yr, sh[i], &yh[i * hidden], stride);
    }
  }
  return report(c, chk, first_ms, opts);
}

int bench_silu_and_mul_quant_fp8(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const int64_t m = ops::positive_int_arg(args, "m", 1 << 24);
  const int64_t d = ops::positive_int_arg(args, "d", 1 << 20);
  if (dtype != "bf16" && dtype != "fp16") {
    throw UsageError("silu_and_mul_quant_fp8: dtype is bf16 or fp16");
  }
  check_gpu();
  const int64_t groups = util::ceil_div(d, 128);
  const size_t n = static_cast<size_t>(m * 2 * d), es = ref::elem_size(dtype);
  std::mt19937_64 rng(std::random_device{}());
  Packed in;
  const size_t x_at = in.add(n * es);
  const std::vector<double> x = random_elems(in.host, n, dtype, rng, -4.0, 4.0);
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(m * d)), s(static_cast<size_t>(m * groups) * 4);
  y.fill(0x7F);
  s.fill(0xFF);
  auto xt = test::make_tensor(in.at(x_at), {m, 2 * d}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {m, d}, test::dl_dtype("e4m3"));
  auto st = test::make_tensor(s.get(), {m, groups}, test::dl_dtype("fp32"));
  BenchCase c;
  c.op = "silu_and_mul_quant_fp8";
  c.dtype = dtype;
  c.shape = {{"m", m}, {"d", d}};
  c.label = fmt::format("silu_and_mul_quant_fp8 {} {} x {}", dtype, m, d);
  const ops::ElementwiseLaunch& how = bench_elementwise_launch();
  c.launch = [&](CUstream stream) {
    ops::silu_and_mul_quant_fp8(xt.get(), yt.get(), st.get(), stream, how);
  };
  c.bytes = static_cast<double>(n) * es + static_cast<double>(m * d) + m * groups * 4.0;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<uint8_t> yh(static_cast<size_t>(m * d));
    std::vector<float> sh(static_cast<size_t>(m * groups));
    y.download(yh.data(), yh.size());
    s.download(sh.data(), sh.size() * 4);
    const size_t stride = code_stride(m * d);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        std::vector<double> yg;
        for (int64_t j = g * 128; j < std::min(d, g * 128 + 128); ++j) {
          const double gate = x[i * 2 * d + j], up = x[i * 2 * d + d + j];
          yg.push_back(gate / (1.0 + std::exp(-gate)) * up);
        }
        check_group(chk, yg, sh[i * groups + g], &yh[i * d + g * 128], stride);
      }
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_fused_quant_benches(std::vector<BenchEntry>& out) {
  out.push_back({"rmsnorm_quant_fp8",
                 {"dtype", "m", "hidden"},
                 {"residual"},
                 bench_rmsnorm_quant_fp8,
                 "dtype (bf16|fp16), m, hidden; residual (0|1, default 0: 1 adds it first)"});
  out.push_back({"silu_and_mul_quant_fp8",
                 {"dtype", "m", "d"},
                 {},
                 bench_silu_and_mul_quant_fp8,
                 "dtype (bf16|fp16), m, d (input [m, 2 d])"});
}

}  // namespace kjit::cli
