// `kjit-cli bench` cases of the GEMM family.
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

namespace kjit::cli {
namespace {

// The check covers every output of a small call; a large one (a CPU triple loop of hours) is
// checked on its corners, its first and last rows and columns' samples and random elements.
constexpr double kFullCheckFmas = 1 << 28;
constexpr int kSampledOutputs = 4096;

int bench_gemm(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const std::string out_dtype = args.count("out_dtype") != 0 ? args.at("out_dtype") : dtype;
  const int64_t m = ops::positive_int_arg(args, "m", 1 << 24);
  const int64_t n = ops::positive_int_arg(args, "n", 1 << 24);
  const int64_t k = ops::positive_int_arg(args, "k", 1 << 24);
  ops::GemmTuning tuning;  // split: the decode path's K split (default: the library's choice)
  if (args.count("split") != 0) {
    tuning.split =
        static_cast<int>(ops::positive_int_arg(args, "split", kjit::gemm::kGemmDecodeMaxSplit));
  }
  if (args.count("tactic") != 0) {
    tuning.tactic = args.at("tactic");
    if (!ops::GemmTactic::parse(tuning.tactic)) {
      throw UsageError("gemm: tactic '" + tuning.tactic +
                       "' is not a tactic name (docs/autotune.md)");
    }
  }
  // weights_early: each call a programmatic dependent of the one before (which reads b only), so
  // only back-to-back timers measure what it overlaps; under the others a call would wait inside
  // for the flush kernel and the sample would include that wait.
  tuning.weights_early = flag_arg(args, "weights_early");
  if (tuning.weights_early && !back_to_back(opts)) {
    throw UsageError(
        "gemm: weights_early=1 is timed back to back: --timer events-batched or graph");
  }
  if (dtype != "bf16" && dtype != "fp16") throw UsageError("gemm: dtype is bf16 or fp16");
  if (out_dtype != "bf16" && out_dtype != "fp16" && out_dtype != "fp32") {
    throw UsageError("gemm: out_dtype is bf16, fp16 or fp32");
  }
  check_gpu();
  const size_t es = ref::elem_size(dtype);
  const size_t os = ref::elem_size(out_dtype);
  std::mt19937_64 rng(std::random_device{}());

  // a and b in one allocation, so the copy baseline reads input bytes from one buffer.
  Packed in;
  const size_t a_at = in.add(static_cast<size_t>(m * k) * es);
  const size_t b_at = in.add(static_cast<size_t>(n * k) * es);
  fill_uniform(in.host.data() + a_at, static_cast<size_t>(m * k), dtype, rng, -1.0, 1.0);
  fill_uniform(in.host.data() + b_at, static_cast<size_t>(n * k), dtype, rng, -1.0, 1.0);
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(m * n) * os);
  y.fill(0xFF);  // poison: NaN in every float format
  auto at = test::make_tensor(in.at(a_at), {m, k}, test::dl_dtype(dtype));
  auto bt = test::make_tensor(in.at(b_at), {n, k}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {m, n}, test::dl_dtype(out_dtype));

  // 256-byte aligned allocations with compact rows: k decides whether TMA can describe them.
  const ops::GemmTarget target = ops::gemm_target(0, (k * static_cast<int64_t>(es)) % 16 == 0);
  const ops::DType dt = ops::dtype_from_name(dtype), ot = ops::dtype_from_name(out_dtype);
  const ops::GemmConfig cfg =
      tuning.tactic.empty()
          ? ops::select_gemm(dt, ot, m, n, k, target)
          : ops::gemm_config_of(*ops::GemmTactic::parse(tuning.tactic), dt, ot, target);

  BenchCase c;
  c.op = "gemm";
  c.uri = ops::gemm_spec(cfg).uri;
  c.dtype = dtype;
  c.shape = {{"m", m}, {"n", n}, {"k", k}, {"out_dtype", out_dtype}};
  if (tuning.split != 0) c.shape["split"] = tuning.split;
  if (!tuning.tactic.empty()) c.shape["tactic"] = tuning.tactic;
  if (tuning.weights_early) c.shape["weights_early"] = 1;
  c.label = fmt::format("gemm {}->{} m={} n={} k={} ({}{}{}{})", dtype, out_dtype, m, n, k,
                        ops::gemm_path_name(cfg.path),
                        tuning.split != 0 ? fmt::format(", split {}", tuning.split) : "",
                        tuning.tactic.empty() ? "" : ", tactic " + tuning.tactic,
                        tuning.weights_early ? ", weights early" : "");
  // What kjit_gemm runs with the default options (and the split or tactic, when given).
  c.launch = [&](CUstream stream) {
    ops::gemm(at.get(), bt.get(), nullptr, yt.get(), 1.0f, 0.0f, stream, tuning);
  };
  c.bytes = static_cast<double>((m * k + n * k) * es + m * n * os);
  c.flops = 2.0 * static_cast<double>(m) * n * k;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms_naming_kernel(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(static_cast<size_t>(m * n) * os);
    y.download(yh.data(), yh.size());
    const auto picks = gemm_check_picks(m, n, k, rng);
    std::vector<double> a_row(static_cast<size_t>(k)), b_row(static_cast<size_t>(k));
    for (const auto& [r, j] : picks) {
      for (int64_t i = 0; i < k; ++i) {
        a_row[i] = ref::load_elem(in.host.data() + a_at, static_cast<size_t>(r * k + i), dtype);
        b_row[i] = ref::load_elem(in.host.data() + b_at, static_cast<size_t>(j * k + i), dtype);
      }
      double sum_abs = 0.0;
      const double want =
          ref::gemm_element(a_row.data(), b_row.data(), k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * n + j), out_dtype), want,
              ref::gemm_tolerance(out_dtype, want, sum_abs, k));
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> gemm_check_picks(int64_t m, int64_t n, int64_t k,
                                                          std::mt19937_64& rng) {
  std::vector<std::pair<int64_t, int64_t>> picks;
  if (static_cast<double>(m) * n * k <= kFullCheckFmas) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) picks.emplace_back(r, j);
    }
    return picks;
  }
  std::uniform_int_distribution<int64_t> rr(0, m - 1), cc(0, n - 1);
  for (int64_t r : {int64_t{0}, m - 1}) {
    for (int64_t j : {int64_t{0}, n - 1}) picks.emplace_back(r, j);
  }
  for (int i = 0; i < kSampledOutputs; ++i) picks.emplace_back(rr(rng), cc(rng));
  return picks;
}

void add_gemm_benches(std::vector<BenchEntry>& out) {
  out.push_back({"gemm",
                 {"dtype", "m", "n", "k"},
                 {"out_dtype", "split", "tactic", "weights_early"},
                 bench_gemm,
                 "dtype (bf16|fp16), m, n, k; out_dtype (bf16|fp16|fp32, default dtype), split "
                 "(the decode path's K split, 1..8; default the library's), tactic (an "
                 "autotuner tactic such as sm90_bn256_s3, run instead of the library's choice), "
                 "weights_early (0|1: kjit_gemm_options::weights_early; back-to-back timers "
                 "only)"});
}

}  // namespace kjit::cli
