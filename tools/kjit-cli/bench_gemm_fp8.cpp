// `kjit-cli bench` cases of the fp8 GEMM and the fp8 quantization.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "ops/gemm/gemm_fp8.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "ops/quant/quant_fp8.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

namespace kjit::cli {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Quantization codes the bench checks one by one (the reference encoder searches 127 values).
constexpr int kSampledCodes = 1 << 16;

int bench_gemm_fp8(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string mode = args.at("scales");
  const std::string out_dtype = args.count("out_dtype") != 0 ? args.at("out_dtype") : "bf16";
  const int64_t m = ops::positive_int_arg(args, "m", 1 << 24);
  const int64_t n = ops::positive_int_arg(args, "n", 1 << 24);
  const int64_t k = ops::positive_int_arg(args, "k", 1 << 24);
  if (mode != "tensor" && mode != "row" && mode != "block") {
    throw UsageError("gemm_fp8: scales is tensor, row or block");
  }
  if (out_dtype != "bf16" && out_dtype != "fp16" && out_dtype != "fp32") {
    throw UsageError("gemm_fp8: out_dtype is bf16, fp16 or fp32");
  }
  // The decode path's K split (default: the library's) and a forced tactic (sm90, or decode at
  // the call's token tile with a named ring depth).
  ops::GemmFp8Tuning tuning;
  if (args.count("split") != 0) {
    tuning.split =
        static_cast<int>(ops::positive_int_arg(args, "split", gemm::kGemmDecodeMaxSplit));
  }
  if (args.count("tactic") != 0) {
    tuning.tactic = args.at("tactic");
    const std::optional<ops::GemmTactic> t = ops::GemmTactic::parse(tuning.tactic);
    // Widths and depths are the library's to judge (gemm_fp8_forced_config), per call.
    if (!t || (t->path != ops::GemmPath::kSm90 && t->path != ops::GemmPath::kSm90Decode)) {
      throw UsageError("gemm_fp8: tactic '" + tuning.tactic +
                       "' is not an sm90 or decode tactic (sm90_bn128_s6_p, sm90_bn192_s5, "
                       "sm90_bn256_s4, decode_t64_s9_split4)");
    }
  }
  const int split = tuning.split;
  check_gpu();
  const bool block = mode == "block";
  const int64_t kc = ceil_div(k, 128);
  const std::vector<int64_t> sa_shape = block           ? std::vector<int64_t>{m, kc}
                                        : mode == "row" ? std::vector<int64_t>{m}
                                                        : std::vector<int64_t>{1};
  const std::vector<int64_t> sb_shape = block           ? std::vector<int64_t>{ceil_div(n, 128), kc}
                                        : mode == "row" ? std::vector<int64_t>{n}
                                                        : std::vector<int64_t>{1};
  const size_t sa_count = static_cast<size_t>(sa_shape[0] * (block ? kc : 1));
  const size_t sb_count = static_cast<size_t>(sb_shape[0] * (block ? kc : 1));
  std::mt19937_64 rng(std::random_device{}());

  // Operands as kjit_quant_fp8 would leave them: codes of magnitude 2^-3 .. 2^3, scales 2^-3 ..
  // 2^3; a, b and the scales in one allocation for the copy baseline.
  Packed in;
  const size_t a_at = in.add(static_cast<size_t>(m * k));
  const size_t b_at = in.add(static_cast<size_t>(n * k));
  const size_t sa_at = in.add(sa_count * sizeof(float));
  const size_t sb_at = in.add(sb_count * sizeof(float));
  std::uniform_int_distribution<int> byte(0, 255), exp(4, 10);
  auto fill_codes = [&](size_t at, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const int r = byte(rng);
      in.host[at + i] = static_cast<unsigned char>((r & 0x80) | exp(rng) << 3 | (r & 7));
    }
  };
  fill_codes(a_at, m * k);
  fill_codes(b_at, n * k);
  std::uniform_real_distribution<float> e(-3.0f, 3.0f);
  auto* sa = reinterpret_cast<float*>(in.host.data() + sa_at);
  auto* sb = reinterpret_cast<float*>(in.host.data() + sb_at);
  for (size_t i = 0; i < sa_count; ++i) sa[i] = std::exp2(e(rng));
  for (size_t i = 0; i < sb_count; ++i) sb[i] = std::exp2(e(rng));
  in.upload();
  const size_t os = ref::elem_size(out_dtype);
  test::DeviceBuffer y(static_cast<size_t>(m * n) * os);
  y.fill(0xFF);
  auto at = test::make_tensor(in.at(a_at), {m, k}, test::dl_dtype("e4m3"));
  auto bt = test::make_tensor(in.at(b_at), {n, k}, test::dl_dtype("e4m3"));
  auto sat = test::make_tensor(in.at(sa_at), sa_shape, test::dl_dtype("fp32"));
  auto sbt = test::make_tensor(in.at(sb_at), sb_shape, test::dl_dtype("fp32"));
  auto yt = test::make_tensor(y.get(), {m, n}, test::dl_dtype(out_dtype));

  const auto scales = block ? ops::Fp8Scales::kBlock : ops::Fp8Scales::kTensorRow;
  const ops::GemmTarget target = ops::gemm_target(0, k % 16 == 0);
  const ops::GemmFp8Config selected =
      ops::select_gemm_fp8(ops::dtype_from_name(out_dtype), scales, m, n, k, target);
  const ops::GemmFp8Config cfg =
      tuning.tactic.empty() ? selected
                            : ops::gemm_fp8_forced_config(tuning.tactic, selected, m, n, k, target);
  BenchCase c;
  c.op = "gemm_fp8";
  c.uri = ops::gemm_fp8_spec(cfg).uri;
  c.dtype = "e4m3";
  c.shape = {{"m", m}, {"n", n}, {"k", k}, {"scales", mode}, {"out_dtype", out_dtype}};
  if (split != 0) c.shape["split"] = split;
  if (!tuning.tactic.empty()) c.shape["tactic"] = tuning.tactic;
  c.label =
      fmt::format("gemm_fp8 {} ->{} m={} n={} k={} ({}{}{})", mode, out_dtype, m, n, k,
                  ops::gemm_path_name(cfg.path), split != 0 ? fmt::format(", split {}", split) : "",
                  tuning.tactic.empty() ? "" : ", tactic " + tuning.tactic);
  c.launch = [&](CUstream stream) {
    ops::gemm_fp8(at.get(), bt.get(), sat.get(), sbt.get(), yt.get(), 1.0f, 0.0f, stream, tuning);
  };
  c.bytes = static_cast<double>(m * k + n * k + m * n * static_cast<int64_t>(os) +
                                static_cast<int64_t>((sa_count + sb_count) * sizeof(float)));
  c.flops = 2.0 * static_cast<double>(m) * n * k;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms_naming_kernel(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(static_cast<size_t>(m * n) * os);
    y.download(yh.data(), yh.size());
    auto scale_a = [&](int64_t r, int64_t i) {
      return block ? sa[r * kc + i / 128] : sa[mode == "row" ? r : 0];
    };
    auto scale_b = [&](int64_t j, int64_t i) {
      return block ? sb[(j / 128) * kc + i / 128] : sb[mode == "row" ? j : 0];
    };
    std::vector<double> a_row(static_cast<size_t>(k)), b_row(static_cast<size_t>(k));
    for (const auto& pick : gemm_check_picks(m, n, k, rng)) {
      // Plain locals: a C++17 lambda may not capture structured bindings (clang refuses).
      const int64_t r = pick.first, j = pick.second;
      for (int64_t i = 0; i < k; ++i) {
        a_row[i] = ref::e4m3_value(in.host[a_at + r * k + i]) * scale_a(r, i);
        b_row[i] = ref::e4m3_value(in.host[b_at + j * k + i]) * scale_b(j, i);
      }
      double sum_abs = 0.0;
      const double want =
          ref::gemm_element(a_row.data(), b_row.data(), k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      const double bound = ref::gemm_fp8_error_bound(
          &in.host[a_at + r * k], &in.host[b_at + j * k], k,
          [&](int64_t c) { return scale_a(r, c * 128) * scale_b(j, c * 128); }, 1.0, want, sum_abs,
          out_dtype);
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * n + j), out_dtype), want, bound);
    }
  }
  return report(c, chk, first_ms, opts);
}

int bench_quant_fp8(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const ops::QuantScaling scaling = ops::quant_scaling_from_name(args.at("scaling"));
  const int64_t m = ops::positive_int_arg(args, "m", 1 << 24);
  const int64_t k = ops::positive_int_arg(args, "k", 1 << 24);
  if (dtype != "bf16" && dtype != "fp16") throw UsageError("quant_fp8: dtype is bf16 or fp16");
  check_gpu();
  const int64_t groups = ceil_div(k, 128);
  const int64_t n_scales = scaling == ops::QuantScaling::kTensor ? 1
                           : scaling == ops::QuantScaling::kRow  ? m
                                                                 : m * groups;
  const size_t es = ref::elem_size(dtype);
  std::mt19937_64 rng(std::random_device{}());
  Packed in;
  const size_t x_at = in.add(static_cast<size_t>(m * k) * es);
  const std::vector<double> x =
      random_elems(in.host, static_cast<size_t>(m * k), dtype, rng, -8.0, 8.0);
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(m * k)), s(static_cast<size_t>(n_scales) * 4);
  y.fill(0x7F);
  s.fill(0xFF);
  auto xt = test::make_tensor(in.at(x_at), {m, k}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {m, k}, test::dl_dtype("e4m3"));
  auto st = test::make_tensor(s.get(),
                              scaling == ops::QuantScaling::kGroup ? std::vector<int64_t>{m, groups}
                                                                   : std::vector<int64_t>{n_scales},
                              test::dl_dtype("fp32"));
  BenchCase c;
  c.op = "quant_fp8";
  c.uri = ops::quant_fp8_spec({ops::dtype_from_name(dtype), scaling}).uri;
  c.dtype = dtype;
  c.shape = {{"m", m}, {"k", k}, {"scaling", ops::quant_scaling_name(scaling)}};
  c.label = fmt::format("quant_fp8 {} {} m={} k={}", ops::quant_scaling_name(scaling), dtype, m, k);
  c.launch = [&](CUstream stream) {
    ops::quant_fp8(xt.get(), yt.get(), st.get(), static_cast<kjit_fp8_scaling>(scaling), stream);
  };
  // Per tensor reads the input twice (the amax, then the conversion).
  const double reads = scaling == ops::QuantScaling::kTensor ? 2.0 : 1.0;
  c.bytes = static_cast<double>(m * k) * (reads * es + 1) + static_cast<double>(n_scales) * 4;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<uint8_t> yh(static_cast<size_t>(m * k));
    std::vector<float> sh(static_cast<size_t>(n_scales));
    y.download(yh.data(), yh.size());
    s.download(sh.data(), sh.size() * 4);
    auto group_of = [&](int64_t r, int64_t i) -> size_t {
      return scaling == ops::QuantScaling::kTensor ? 0
             : scaling == ops::QuantScaling::kRow  ? static_cast<size_t>(r)
                                                   : static_cast<size_t>(r * groups + i / 128);
    };
    std::vector<float> amax(sh.size(), 0.0f);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        float& a = amax[group_of(r, i)];
        a = std::max(a, static_cast<float>(std::fabs(x[r * k + i])));
      }
    }
    // Scales exactly; codes exactly on a sample (a code's step is its tolerance: 0).
    for (size_t g = 0; g < sh.size(); ++g) chk.add(sh[g], ref::fp8_scale(amax[g]), 0.0);
    std::uniform_int_distribution<int64_t> pick(0, m * k - 1);
    const bool all = m * k <= kSampledCodes;
    for (int64_t i = 0; i < (all ? m * k : kSampledCodes); ++i) {
      const int64_t e = all ? i : pick(rng);
      const float sc = ref::fp8_scale(amax[group_of(e / k, e % k)]);
      chk.add(ref::e4m3_value(yh[e]),
              ref::e4m3_value(ref::quantize_e4m3(static_cast<float>(x[e]), sc)), 0.0);
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_gemm_fp8_benches(std::vector<BenchEntry>& out) {
  out.push_back(
      {"gemm_fp8",
       {"scales", "m", "n", "k"},
       {"out_dtype", "split", "tactic"},
       bench_gemm_fp8,
       "scales (tensor|row|block), m, n, k; out_dtype (bf16|fp16|fp32, default bf16), "
       "split (the decode path's K split, 1..8; default the library's), tactic (the "
       "sm90 kernel forced: sm90_bn128_s<stages>, sm90_bn128_s6_p for its persistent form, "
       "sm90_bn192_s<4|5>[_p] (not block; 4 stages leave room for the TMA-store epilogue), "
       "sm90_bn256_s4[_p]; or the decode kernel at the call's token tile with a named ring "
       "depth and split, decode_t<tokens>_s<stages>_split<s>)"});
  out.push_back({"quant_fp8",
                 {"dtype", "scaling", "m", "k"},
                 {},
                 bench_quant_fp8,
                 "dtype (bf16|fp16), scaling (tensor|row|group), m, k"});
}

}  // namespace kjit::cli
