// The fused fp8 quantizations on the GPU against fp64 CPU references on fresh random inputs:
// kjit_rmsnorm_quant_fp8 / kjit_fused_add_rmsnorm_quant_fp8 (per-row scales) and
// kjit_silu_and_mul_quant_fp8 (1 x 128 group scales), odd widths, strided rows, outputs poisoned.
// The fused ops quantize the fp32 value they compute (no bf16 / fp16 rounding in between), so
// the reference is that value in fp64: each scale within fp32's rounding of amax / 448, each code
// exactly the e4m3 rounding of y / scale except within 2^-16 of a rounding midpoint, where
// fp32's last bits may pick either neighbour (counted: a handful). The rounding of the unfused
// path (y rounded to the dtype first) is shown to differ on many codes, so the check tells the
// two apart. The residual is checked bit for bit, and both outputs go through kjit_gemm_fp8.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "reference/fp8_ref.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

constexpr double kMidpointSlack = 0x1p-16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// What the fused op must give for one group: y (fp64 of the fp32 computation), the scale, and
// the codes, compared with the kernel's. Returns how many codes the dtype-rounded path would
// have changed (the unfused op's rounding).
struct GroupCheck {
  long bad_scales = 0, bad_codes = 0, ambiguous = 0, unfused_differs = 0, saturated = 0;

  void check(const std::vector<double>& y, const std::string& dtype, float got_scale,
             const uint8_t* got_codes, const char* what) {
    double amax = 0.0;
    for (double v : y) amax = std::max(amax, std::fabs(v));
    const double want_scale = amax / 448.0;
    if (!(std::fabs(got_scale - want_scale) <= 0x1p-18 * want_scale) && bad_scales++ < 3) {
      UNSCOPED_INFO(what << " scale " << got_scale << " want " << want_scale);
    }
    double unfused_amax = 0.0;
    for (double v : y) unfused_amax = std::max(unfused_amax, std::fabs(ref::round_elem(v, dtype)));
    for (size_t i = 0; i < y.size(); ++i) {
      const double q = want_scale > 0.0 ? y[i] / want_scale : 0.0;
      const auto [lo, hi] = ref::e4m3_code_range(q, kMidpointSlack);
      ambiguous += lo != hi;
      saturated += (got_codes[i] & 0x7F) == 0x7E;
      if (got_codes[i] != lo && got_codes[i] != hi && bad_codes++ < 5) {
        UNSCOPED_INFO(what << " element " << i << " y " << y[i] << " code " << int(got_codes[i])
                           << " want " << int(lo));
      }
      const double unfused_q =
          unfused_amax > 0.0 ? ref::round_elem(y[i], dtype) / (unfused_amax / 448.0) : 0.0;
      unfused_differs += lo == hi && ref::e4m3_code(static_cast<float>(unfused_q)) != lo;
    }
  }
  void expect(long elements, const std::string& dtype) const {
    CHECK(bad_scales == 0);
    CHECK(bad_codes == 0);
    CHECK(ambiguous * 100 < elements);  // the slack stays a few elements wide
    CHECK(saturated > 0);               // each group's amax lands on +-448
    // A dtype rounding in between would be caught: it moves about 16 u of the codes (a relative
    // shift of up to u against midpoints 2^-3 apart); checked where that is dozens of codes.
    if (static_cast<double>(elements) * 16.0 * ref::unit_roundoff(dtype) >= 30.0) {
      CHECK(unfused_differs > 0);
    }
  }
};

struct Rows {
  std::vector<unsigned char> bytes;  // as stored, row stride `stride`
  std::vector<double> v;             // the values, compact
};

Rows random_rows(int64_t m, int64_t k, int64_t stride, const std::string& dtype,
                 std::mt19937_64& rng, double spread) {
  Rows r;
  r.bytes.assign(static_cast<size_t>(((m - 1) * stride + k)) * ref::elem_size(dtype), 0);
  r.v.resize(static_cast<size_t>(m * k));
  std::normal_distribution<double> dist(0.0, 1.0);
  std::uniform_real_distribution<double> mag(-spread, spread);
  for (int64_t i = 0; i < m; ++i) {
    const double row_scale = std::exp2(mag(rng));
    for (int64_t j = 0; j < k; ++j) {
      ref::store_elem(r.bytes.data(), static_cast<size_t>(i * stride + j), dist(rng) * row_scale,
                      dtype);
      r.v[i * k + j] = ref::load_elem(r.bytes.data(), static_cast<size_t>(i * stride + j), dtype);
    }
  }
  return r;
}

// out = a . b^T through kjit_gemm_fp8 with a's codes and scales from a fused op and b random
// (per row, or 128 x 128 blocks), against the dequantized fp64 reference under
// ref::gemm_fp8_error_bound, and loosely against y . b^T.
void gemm_round_trip(const std::vector<uint8_t>& a_codes, const std::vector<float>& a_scales,
                     const std::vector<double>& y, int64_t m, int64_t k, bool block,
                     std::mt19937_64& rng) {
  const int64_t n = 192, kc = ceil_div(k, 128);
  std::vector<uint8_t> b(static_cast<size_t>(n * k));
  std::uniform_int_distribution<int> bits(0, 255), exp(4, 10);
  for (auto& x : b) {
    const int r = bits(rng);
    x = static_cast<uint8_t>((r & 0x80) | exp(rng) << 3 | (r & 7));
  }
  std::vector<float> sb(static_cast<size_t>(block ? ceil_div(n, 128) * kc : n));
  for (auto& s : sb) s = std::exp2(static_cast<float>(bits(rng) % 7) - 3.0f);
  DeviceBuffer a_dev(a_codes.size()), b_dev(b.size()), sa_dev(a_scales.size() * 4),
      sb_dev(sb.size() * 4), out_dev(static_cast<size_t>(m * n) * 4);
  a_dev.upload(a_codes.data(), a_codes.size());
  b_dev.upload(b.data(), b.size());
  sa_dev.upload(a_scales.data(), a_scales.size() * 4);
  sb_dev.upload(sb.data(), sb.size() * 4);
  out_dev.fill(0xFF);
  auto at = make_tensor(a_dev.get(), {m, k}, dl_dtype("e4m3"));
  auto bt = make_tensor(b_dev.get(), {n, k}, dl_dtype("e4m3"));
  auto sat =
      make_tensor(sa_dev.get(), block ? std::vector<int64_t>{m, kc} : std::vector<int64_t>{m},
                  dl_dtype("fp32"));
  auto sbt = make_tensor(
      sb_dev.get(), block ? std::vector<int64_t>{ceil_div(n, 128), kc} : std::vector<int64_t>{n},
      dl_dtype("fp32"));
  auto ot = make_tensor(out_dev.get(), {m, n}, dl_dtype("fp32"));
  REQUIRE(kjit_gemm_fp8(at.get(), bt.get(), sat.get(), sbt.get(), ot.get(), nullptr, nullptr) ==
          KJIT_SUCCESS);
  device_synchronize();
  std::vector<float> out(static_cast<size_t>(m * n));
  out_dev.download(out.data(), out.size() * 4);
  long bad = 0;
  double err2 = 0.0, ref2 = 0.0;
  std::vector<double> ad(static_cast<size_t>(k)), bd(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      auto sa_at = [&](int64_t c) { return block ? a_scales[i * kc + c] : a_scales[i]; };
      auto sb_at = [&](int64_t c) { return block ? sb[(j / 128) * kc + c] : sb[j]; };
      double exact = 0.0;
      for (int64_t t = 0; t < k; ++t) {
        ad[t] = ref::e4m3_value(a_codes[i * k + t]) * sa_at(t / 128);
        bd[t] = ref::e4m3_value(b[j * k + t]) * sb_at(t / 128);
        exact += y[i * k + t] * bd[t];
      }
      double sum_abs = 0.0;
      const double want = ref::gemm_element(ad.data(), bd.data(), k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      const double bound = ref::gemm_fp8_error_bound(
          &a_codes[i * k], &b[j * k], k, [&](int64_t c) { return sa_at(c) * sb_at(c); }, 1.0, want,
          sum_abs, "fp32");
      const double got = out[i * n + j];
      if (!(std::fabs(got - want) <= bound) && bad++ < 5) {
        UNSCOPED_INFO("gemm row " << i << " col " << j << " got " << got << " want " << want);
      }
      err2 += (got - exact) * (got - exact);
      ref2 += exact * exact;
    }
  }
  CHECK(bad == 0);
  CHECK(std::sqrt(err2 / ref2) < 0.05);  // e4m3's 3 mantissa bits, averaged over k
}

void run_rmsnorm_quant(const std::string& dtype, int64_t m, int64_t hidden, bool residual,
                       int64_t stride, std::mt19937_64& rng, bool round_trip) {
  INFO(dtype << " m=" << m << " hidden=" << hidden << " residual=" << residual
             << " stride=" << stride);
  const float eps = 1e-6f;
  const Rows x = random_rows(m, hidden, stride, dtype, rng, 3.0);
  const Rows r0 = random_rows(m, hidden, stride, dtype, rng, 3.0);
  const Rows w = random_rows(1, hidden, hidden, dtype, rng, 0.0);
  DeviceBuffer x_dev(x.bytes.size()), r_dev(r0.bytes.size()), w_dev(w.bytes.size()),
      y_dev(static_cast<size_t>(m * stride)), s_dev(static_cast<size_t>(m) * 4);
  x_dev.upload(x.bytes.data(), x.bytes.size());
  r_dev.upload(r0.bytes.data(), r0.bytes.size());
  w_dev.upload(w.bytes.data(), w.bytes.size());
  y_dev.fill(0x7F);  // e4m3 NaN
  s_dev.fill(0xFF);  // fp32 NaN
  auto xt = make_tensor(x_dev.get(), {m, hidden}, dl_dtype(dtype), {stride, 1});
  auto rt = make_tensor(r_dev.get(), {m, hidden}, dl_dtype(dtype), {stride, 1});
  auto wt = make_tensor(w_dev.get(), {hidden}, dl_dtype(dtype));
  auto yt = make_tensor(y_dev.get(), {m, hidden}, dl_dtype("e4m3"), {stride, 1});
  auto st = make_tensor(s_dev.get(), {m}, dl_dtype("fp32"));
  const kjit_status status =
      residual ? kjit_fused_add_rmsnorm_quant_fp8(xt.get(), wt.get(), rt.get(), yt.get(), st.get(),
                                                  eps, nullptr)
               : kjit_rmsnorm_quant_fp8(xt.get(), wt.get(), yt.get(), st.get(), eps, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(status == KJIT_SUCCESS);
  device_synchronize();
  std::vector<uint8_t> codes(static_cast<size_t>(m * stride));
  std::vector<float> scales(static_cast<size_t>(m));
  std::vector<unsigned char> r_got(r0.bytes.size());
  y_dev.download(codes.data(), codes.size());
  s_dev.download(scales.data(), scales.size() * 4);
  r_dev.download(r_got.data(), r_got.size());

  GroupCheck g;
  long bad_residual = 0, touched = 0;
  std::vector<uint8_t> compact(static_cast<size_t>(m * hidden));
  std::vector<double> y_all(static_cast<size_t>(m * hidden));
  for (int64_t i = 0; i < m; ++i) {
    std::vector<double> s(static_cast<size_t>(hidden)), y(s.size());
    double ss = 0.0;
    for (int64_t j = 0; j < hidden; ++j) {
      s[j] = x.v[i * hidden + j];
      if (residual) {
        // The fp32 add, rounded to the dtype: kjit_fused_add_rmsnorm's new residual.
        s[j] = ref::round_elem(
            static_cast<float>(x.v[i * hidden + j]) + static_cast<float>(r0.v[i * hidden + j]),
            dtype);
        const size_t at = static_cast<size_t>(i * stride + j);
        bad_residual += ref::load_elem(r_got.data(), at, dtype) != s[j];
      }
      ss += s[j] * s[j];
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
    for (int64_t j = 0; j < hidden; ++j) y[j] = s[j] * inv * w.v[j];
    g.check(y, dtype, scales[i], &codes[i * stride], "row");
    for (int64_t j = 0; j < hidden; ++j) {
      compact[i * hidden + j] = codes[i * stride + j];
      y_all[i * hidden + j] = y[j];
    }
    for (int64_t j = hidden; i + 1 < m && j < stride; ++j) touched += codes[i * stride + j] != 0x7F;
  }
  g.expect(static_cast<long>(m * hidden), dtype);
  CHECK(bad_residual == 0);
  CHECK(touched == 0);
  if (round_trip) gemm_round_trip(compact, scales, y_all, m, hidden, false, rng);
}

void run_silu_quant(const std::string& dtype, int64_t m, int64_t d, int64_t in_stride,
                    int64_t out_stride, std::mt19937_64& rng, bool round_trip) {
  INFO(dtype << " m=" << m << " d=" << d << " in_stride=" << in_stride
             << " out_stride=" << out_stride);
  const int64_t groups = ceil_div(d, 128);
  const Rows x = random_rows(m, 2 * d, in_stride, dtype, rng, 2.0);
  DeviceBuffer x_dev(x.bytes.size()), y_dev(static_cast<size_t>((m - 1) * out_stride + d)),
      s_dev(static_cast<size_t>(m * groups) * 4);
  x_dev.upload(x.bytes.data(), x.bytes.size());
  y_dev.fill(0x7F);
  s_dev.fill(0xFF);
  auto xt = make_tensor(x_dev.get(), {m, 2 * d}, dl_dtype(dtype), {in_stride, 1});
  auto yt = make_tensor(y_dev.get(), {m, d}, dl_dtype("e4m3"), {out_stride, 1});
  auto st = make_tensor(s_dev.get(), {m, groups}, dl_dtype("fp32"));
  const kjit_status status = kjit_silu_and_mul_quant_fp8(xt.get(), yt.get(), st.get(), nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(status == KJIT_SUCCESS);
  device_synchronize();
  std::vector<uint8_t> codes(static_cast<size_t>((m - 1) * out_stride + d));
  std::vector<float> scales(static_cast<size_t>(m * groups));
  y_dev.download(codes.data(), codes.size());
  s_dev.download(scales.data(), scales.size() * 4);
  GroupCheck g;
  long touched = 0;
  std::vector<uint8_t> compact(static_cast<size_t>(m * d));
  std::vector<double> y_all(static_cast<size_t>(m * d));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      std::vector<double> y;
      for (int64_t j = gi * 128; j < std::min(d, gi * 128 + 128); ++j) {
        const double gate = x.v[i * 2 * d + j], up = x.v[i * 2 * d + d + j];
        y.push_back(gate / (1.0 + std::exp(-gate)) * up);
        y_all[i * d + j] = y.back();
      }
      g.check(y, dtype, scales[i * groups + gi], &codes[i * out_stride + gi * 128], "group");
    }
    for (int64_t j = 0; j < d; ++j) compact[i * d + j] = codes[i * out_stride + j];
    for (int64_t j = d; i + 1 < m && j < out_stride; ++j) {
      touched += codes[i * out_stride + j] != 0x7F;
    }
  }
  g.expect(static_cast<long>(m * d), dtype);
  CHECK(touched == 0);
  if (round_trip) gemm_round_trip(compact, scales, y_all, m, d, true, rng);
}

}  // namespace

TEST_CASE("fused quant gpu: rmsnorm -> fp8 per row, with and without the residual add",
          "[gpu][quant][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    for (bool residual : {false, true}) {
      run_rmsnorm_quant(dt, 33, 4096, residual, 4096, rng, false);  // 16-byte vectors
      run_rmsnorm_quant(dt, 7, 1000, residual, 1000, rng, false);   // 8 divides 1000
      run_rmsnorm_quant(dt, 5, 77, residual, 80, rng, false);       // odd width: scalar access
      run_rmsnorm_quant(dt, 2, 8192, residual, 8192 + 8, rng, false);
    }
  }
}

TEST_CASE("fused quant gpu: silu_and_mul -> fp8 per 128 group", "[gpu][quant][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    run_silu_quant(dt, 9, 1408, 2816, 1408, rng, false);
    run_silu_quant(dt, 3, 300, 600, 300, rng, false);  // the last group 44 wide
    run_silu_quant(dt, 4, 77, 160, 81, rng, false);    // odd d, strided rows
    run_silu_quant(dt, 1, 14336, 28672, 14336, rng, false);
  }
}

TEST_CASE("fused quant gpu: round trips through kjit_gemm_fp8 with the scales they wrote",
          "[gpu][gemm][quant][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  run_rmsnorm_quant("bf16", 70, 640, true, 640, rng, true);  // per-row scale_a
  run_silu_quant("bf16", 70, 640, 1280, 640, rng, true);     // block scale_a
}
