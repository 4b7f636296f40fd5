// `kjit-cli bench` cases of the norm family (rmsnorm, fused_add_rmsnorm, layernorm).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "jit/arch.hpp"
#include "runtime/jit_core.hpp"
#include "kjit/kjit.h"
#include "ops/norm/layernorm.hpp"
#include "ops/norm/norm.hpp"
#include "reference/norm_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

// --set per_thread=N: rows longer than 128 vectors give each thread N vectors instead of the
// library's choice (one at decode sizes, about four otherwise), as an explicit ops::NormTuning;
// the label then names the threads per row.
struct PerThreadChoice {
  ops::NormTuning tuning;
  explicit PerThreadChoice(const ops::SetArgs& args) {
    if (args.count("per_thread") == 0) return;
    tuning.vectors_per_thread = static_cast<int>(ops::positive_int_arg(args, "per_thread", 64));
  }
  std::string suffix(int threads_per_row) const {
    const int n = tuning.vectors_per_thread;
    return n == 0 ? "" : fmt::format(" per_thread={} tpr={}", n, threads_per_row);
  }
};

int bench_rmsnorm(const ops::SetArgs& args, const BenchOptions& opts) {
  const PerThreadChoice per_thread(args);
  const std::string dtype = args.at("dtype");
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kRmsNormMaxHidden);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
  const bool gemma = flag_arg(args, "gemma");
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(rows * hidden);
  check_gpu();

  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  std::vector<unsigned char> xh(n * es), wh(static_cast<size_t>(hidden) * es), yh(n * es);
  for (size_t i = 0; i < n; ++i) ref::store_elem(xh.data(), i, dist(rng), dtype);
  for (int64_t i = 0; i < hidden; ++i) ref::store_elem(wh.data(), i, dist(rng), dtype);
  test::DeviceBuffer x(xh.size()), w(wh.size()), y(yh.size());
  x.upload(xh.data(), xh.size());
  w.upload(wh.data(), wh.size());
  y.fill(0xFF);  // poison: NaN in every float format
  auto xt = test::make_tensor(x.get(), {rows, hidden}, test::dl_dtype(dtype));
  auto wt = test::make_tensor(w.get(), {hidden}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {rows, hidden}, test::dl_dtype(dtype));
  const float eps = 1e-6f;

  ops::RmsNormConfig cfg = ops::select_rmsnorm(*ops::dtype_of(test::dl_dtype(dtype)), hidden, 16,
                                               rows, per_thread.tuning);
  BenchCase c;
  c.op = "rmsnorm";
  c.uri = ops::rmsnorm_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"hidden", hidden}, {"gemma", gemma}};
  c.label =
      fmt::format("{}rmsnorm {} rows={} hidden={}", gemma ? "gemma_" : "", dtype, rows, hidden) +
      per_thread.suffix(cfg.threads_per_row);
  // The ops-layer call: what kjit_rmsnorm / kjit_gemma_rmsnorm run, in the bench's launch mode.
  c.launch = [&](CUstream stream) {
    ops::rmsnorm(xt.get(), wt.get(), yt.get(), eps, stream, gemma ? 1.0f : 0.0f,
                 bench_elementwise_launch(), per_thread.tuning);
  };
  c.bytes = 2.0 * n * es + hidden * es;
  // Per element: square, accumulate, scale by rsqrt, multiply by the weight (+ 1 for Gemma).
  c.flops = (gemma ? 5.0 : 4.0) * n;
  // The activation bytes: the op reads and writes as much, minus the tiny weight.
  c.copy_src = x.get();
  c.copy_bytes = n * es;

  // Reference check on the first run's output.
  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    y.download(yh.data(), yh.size());
    std::vector<double> xd(n), wd(static_cast<size_t>(hidden));
    for (size_t i = 0; i < n; ++i) xd[i] = ref::load_elem(xh.data(), i, dtype);
    for (int64_t i = 0; i < hidden; ++i) wd[i] = ref::load_elem(wh.data(), i, dtype);
    std::vector<double> want = ref::rmsnorm(xd, wd, rows, hidden, eps, gemma ? 1.0 : 0.0);
    const double u = ref::unit_roundoff(dtype);
    for (size_t i = 0; i < n; ++i) {
      chk.add(ref::load_elem(yh.data(), i, dtype), want[i],
              (2 * u + 1e-5) * std::fabs(want[i]) + 1e-6);
    }
  }
  return report(c, chk, first_ms, opts);
}

int bench_fused_add_rmsnorm(const ops::SetArgs& args, const BenchOptions& opts) {
  const PerThreadChoice per_thread(args);
  const std::string dtype = args.at("dtype");
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kRmsNormMaxHidden);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
  const bool gemma = flag_arg(args, "gemma");
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(rows * hidden);
  check_gpu();

  std::mt19937_64 rng(std::random_device{}());
  std::vector<unsigned char> xh, rh, wh;
  const std::vector<double> xd = random_elems(xh, n, dtype, rng, -2.0, 2.0);
  const std::vector<double> rd = random_elems(rh, n, dtype, rng, -2.0, 2.0);
  const std::vector<double> wd = random_elems(wh, static_cast<size_t>(hidden), dtype, rng, -2, 2);
  // input and residual back to back, so the copy baseline moves the same 2n elements.
  test::DeviceBuffer xr(2 * n * es), w(wh.size());
  xr.upload(xh.data(), n * es);
  xr.upload(rh.data(), n * es, n * es);
  w.upload(wh.data(), wh.size());
  char* x_ptr = static_cast<char*>(xr.get());
  auto xt = test::make_tensor(x_ptr, {rows, hidden}, test::dl_dtype(dtype));
  auto rt = test::make_tensor(x_ptr + n * es, {rows, hidden}, test::dl_dtype(dtype));
  auto wt = test::make_tensor(w.get(), {hidden}, test::dl_dtype(dtype));
  const float eps = 1e-6f;

  ops::RmsNormConfig cfg = ops::select_fused_add_rmsnorm(*ops::dtype_of(test::dl_dtype(dtype)),
                                                         hidden, 16, rows, per_thread.tuning);
  BenchCase c;
  c.op = "fused_add_rmsnorm";
  c.uri = ops::fused_add_rmsnorm_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"hidden", hidden}, {"gemma", gemma}};
  c.label = fmt::format("{}fused_add_rmsnorm {} rows={} hidden={}", gemma ? "gemma_" : "", dtype,
                        rows, hidden) +
            per_thread.suffix(cfg.threads_per_row);
  // In place: later launches run on the previous one's results. The work per byte is the same,
  // and only the first launch is checked.
  // The ops-layer call: what kjit_fused_add_rmsnorm / kjit_gemma_fused_add_rmsnorm run.
  c.launch = [&](CUstream stream) {
    ops::fused_add_rmsnorm(xt.get(), rt.get(), wt.get(), eps, stream, gemma ? 1.0f : 0.0f,
                           bench_elementwise_launch(), per_thread.tuning);
  };
  c.bytes = 4.0 * n * es + hidden * es;  // reads input and residual, writes both
  c.flops = (gemma ? 6.0 : 5.0) * n;     // the residual add, then as rmsnorm
  c.copy_src = xr.get();
  c.copy_bytes = 2 * n * es;

  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> out(2 * n * es);
    xr.download(out.data(), out.size());
    const std::vector<double> res_want = ref::residual_add(xd, rd, dtype);
    const std::vector<double> want =
        ref::rmsnorm(res_want, wd, rows, hidden, eps, gemma ? 1.0 : 0.0);
    for (size_t i = 0; i < n; ++i) {
      chk.add(ref::load_elem(out.data(), n + i, dtype), res_want[i], 0.0);  // exact: fp32 add
      chk.add(ref::load_elem(out.data(), i, dtype), want[i],
              ref::one_rounding_tolerance(dtype, want[i]));
    }
  }
  return report(c, chk, first_ms, opts);
}

int bench_layernorm(const ops::SetArgs& args, const BenchOptions& opts) {
  const PerThreadChoice per_thread(args);
  const std::string dtype = args.at("dtype");
  const std::string wdtype = args.count("wdtype") ? args.at("wdtype") : dtype;
  if (wdtype != dtype && wdtype != "fp32") throw UsageError("wdtype must be dtype or fp32");
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kLayerNormMaxHidden);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(rows * hidden);
  check_gpu();

  std::mt19937_64 rng(std::random_device{}());
  std::vector<unsigned char> xh, gh, bh;
  const std::vector<double> xd = random_elems(xh, n, dtype, rng, -2.0, 2.0);
  const std::vector<double> gd = random_elems(gh, static_cast<size_t>(hidden), wdtype, rng, -2, 2);
  const std::vector<double> bd = random_elems(bh, static_cast<size_t>(hidden), wdtype, rng, -2, 2);
  test::DeviceBuffer x(xh.size()), g(gh.size()), b(bh.size()), y(n * es);
  x.upload(xh.data(), xh.size());
  g.upload(gh.data(), gh.size());
  b.upload(bh.data(), bh.size());
  y.fill(0xFF);  // poison: NaN in every float format
  auto xt = test::make_tensor(x.get(), {rows, hidden}, test::dl_dtype(dtype));
  auto gt = test::make_tensor(g.get(), {hidden}, test::dl_dtype(wdtype));
  auto bt = test::make_tensor(b.get(), {hidden}, test::dl_dtype(wdtype));
  auto yt = test::make_tensor(y.get(), {rows, hidden}, test::dl_dtype(dtype));
  const float eps = 1e-5f;

  ops::LayerNormConfig cfg = ops::select_layernorm(*ops::dtype_of(test::dl_dtype(dtype)),
                                                   *ops::dtype_of(test::dl_dtype(wdtype)), hidden,
                                                   16, 16, rows, per_thread.tuning);
  BenchCase c;
  c.op = "layernorm";
  c.uri = ops::layernorm_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"hidden", hidden}, {"wdtype", wdtype}};
  c.label = fmt::format("layernorm {}/{} rows={} hidden={}", dtype, wdtype, rows, hidden) +
            per_thread.suffix(cfg.threads_per_row);
  // The ops-layer call: what kjit_layernorm runs, in the bench's launch mode.
  c.launch = [&](CUstream stream) {
    ops::layernorm(xt.get(), gt.get(), bt.get(), yt.get(), eps, stream, bench_elementwise_launch(),
                   per_thread.tuning);
  };
  c.bytes = 2.0 * n * es + 2.0 * hidden * ref::elem_size(wdtype);
  // Per element: mean (add), variance (sub, mul, add), normalize (sub, mul), gamma, beta.
  c.flops = 8.0 * n;
  c.copy_src = x.get();
  c.copy_bytes = n * es;

  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(n * es);
    y.download(yh.data(), yh.size());
    std::vector<double> mean, rstd;
    const std::vector<double> want = ref::layernorm(xd, gd, bd, rows, hidden, eps, &mean, &rstd);
    for (size_t i = 0; i < n; ++i) {
      const size_t r = i / static_cast<size_t>(hidden), col = i % static_cast<size_t>(hidden);
      chk.add(ref::load_elem(yh.data(), i, dtype), want[i],
              ref::layernorm_tolerance(dtype, want[i], xd[i], mean[r], rstd[r], gd[col]));
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_norm_benches(std::vector<BenchEntry>& out) {
  out.push_back({"rmsnorm",
                 {"dtype", "hidden", "rows"},
                 {"gemma", "per_thread"},
                 bench_rmsnorm,
                 "dtype, hidden, rows, optional gemma (0|1: weight + 1), per_thread"});
  out.push_back({"fused_add_rmsnorm",
                 {"dtype", "hidden", "rows"},
                 {"gemma", "per_thread"},
                 bench_fused_add_rmsnorm,
                 "dtype, hidden, rows, optional gemma (0|1: weight + 1), per_thread"});
  out.push_back({"layernorm",
                 {"dtype", "hidden", "rows"},
                 {"wdtype", "per_thread"},
                 bench_layernorm,
                 "dtype, hidden, rows, optional wdtype, per_thread"});
}
}  // namespace kjit::cli
