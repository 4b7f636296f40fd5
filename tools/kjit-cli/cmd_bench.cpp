// `kjit-cli bench <op>` (rmsnorm, act_and_mul, fused_add_rmsnorm, layernorm): run an op on the
// GPU on fresh random inputs, check it against the fp64 CPU reference (a failed check is reported
// as a failure, never as a speed), then time it beside a device-to-device copy of the same bytes
// measured in the same run.
//
// Timer: CUDA events around a batch of back-to-back launches sized to fill >= ~1 ms, so launch
// latency is hidden by the queue; per-launch time = batch time / batch size; L2 stays hot for
// inputs that fit in it. The mechanism is recorded with every figure.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "jit/arch.hpp"
#include "jit/jit_core.hpp"
#include "kjit/kjit.h"
#include "ops/activation.hpp"
#include "ops/layernorm.hpp"
#include "ops/norm.hpp"
#include "ops/registry.hpp"
#include "reference/activation_ref.hpp"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

struct Timing {
  double median_us = 0, min_us = 0, p10_us = 0, p90_us = 0;
  int samples = 0;
  int batch = 0;
};

// Times `launch` with events: `samples` batches of `batch` launches each.
Timing time_batches(const std::function<void()>& launch, int warmup, int samples) {
  const auto& d = cuda::driver();
  CUevent a, b;
  KJIT_CU_CHECK(d.cuEventCreate(&a, CU_EVENT_DEFAULT));
  KJIT_CU_CHECK(d.cuEventCreate(&b, CU_EVENT_DEFAULT));
  for (int i = 0; i < warmup; ++i) launch();
  // Size the batch so one sample takes about a millisecond.
  KJIT_CU_CHECK(d.cuEventRecord(a, nullptr));
  launch();
  KJIT_CU_CHECK(d.cuEventRecord(b, nullptr));
  KJIT_CU_CHECK(d.cuEventSynchronize(b));
  float one_ms = 0;
  KJIT_CU_CHECK(d.cuEventElapsedTime(&one_ms, a, b));
  int batch = std::clamp(static_cast<int>(1.0 / std::max(one_ms, 1e-4f)), 1, 2000);
  std::vector<double> us;
  for (int s = 0; s < samples; ++s) {
    KJIT_CU_CHECK(d.cuEventRecord(a, nullptr));
    for (int i = 0; i < batch; ++i) launch();
    KJIT_CU_CHECK(d.cuEventRecord(b, nullptr));
    KJIT_CU_CHECK(d.cuEventSynchronize(b));
    float ms = 0;
    KJIT_CU_CHECK(d.cuEventElapsedTime(&ms, a, b));
    us.push_back(1000.0 * ms / batch);
  }
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1) + 0.5)]; };
  return {at(0.5), us.front(), at(0.1), at(0.9), samples, batch};
}

// Reference agreement of one run's output: elements outside tolerance (NaN counts), largest
// errors.
struct Check {
  double max_abs = 0, max_rel = 0;
  long bad = 0;
  void add(double got, double want, double tol) {
    double err = std::fabs(got - want);
    if (!(err <= tol)) ++bad;
    if (std::isnan(err)) err = INFINITY;
    max_abs = std::max(max_abs, err);
    max_rel = std::max(max_rel, err / std::max(std::fabs(want), 1e-3));
  }
  bool pass() const { return bad == 0; }
};

// What one op's bench hands to the shared part: how to launch it, what it moves, and how to
// describe it.
struct BenchCase {
  std::string op;
  std::string uri;
  std::string dtype;
  nlohmann::json shape;  // {"rows": ..., ...}
  std::string label;     // "rmsnorm bf16 rows=64 hidden=5120" for the console
  std::function<void()> launch;
  double bytes = 0;                // HBM bytes one launch reads and writes
  const void* copy_src = nullptr;  // device bytes the copy baseline reads ...
  size_t copy_bytes = 0;           // ... and as many it writes: ~bytes / 2 for the same traffic
};

void check_gpu() {
  std::string why;
  if (!test::gpu_available(&why)) throw Error(KJIT_ERROR_NO_DEVICE, why);
  cuda::make_current(0);  // events and copies below use the driver API directly
}

// The first launch, synchronized: includes compiling or loading the specialization.
double first_call_ms(const BenchCase& c) {
  auto t0 = std::chrono::steady_clock::now();
  c.launch();
  test::device_synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Times a case that passed its check beside a device-to-device copy of the same traffic measured
// in the same run, prints one line and appends one JSON row. A failed check is reported, never
// timed.
int report(const BenchCase& c, const Check& chk, double first_ms, int warmup, int samples,
           const std::string& json_path) {
  const cuda::DeviceInfo& dev = cuda::device_info(0);
  nlohmann::json row = {
      {"op", c.op},
      {"uri", c.uri},
      {"backend", "kjit"},
      {"shape", c.shape},
      {"dtype", c.dtype},
      {"arch", fmt::format("sm_{}{}", dev.major, dev.minor)},
      {"gpu", dev.name},
      {"driver", cuda::driver().version},
      {"first_call_ms", first_ms},
      {"check",
       {{"pass", chk.pass()},
        {"bad", chk.bad},
        {"max_abs", chk.max_abs},
        {"max_rel", chk.max_rel}}},
  };
  if (chk.pass()) {
    Timing t = time_batches(c.launch, warmup, samples);
    test::DeviceBuffer dst(c.copy_bytes);
    Timing cp = time_batches(
        [&] {
          KJIT_CU_CHECK(cuda::driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst.get()),
                                                         reinterpret_cast<CUdeviceptr>(c.copy_src),
                                                         c.copy_bytes, nullptr));
        },
        warmup, samples);
    const double gbps = c.bytes / (t.median_us * 1e3);
    const double copy_gbps = 2.0 * c.copy_bytes / (cp.median_us * 1e3);
    row["timer"] = fmt::format("cuda-events, {} back-to-back launches per sample, hot L2", t.batch);
    row["warmup"] = warmup;
    row["samples"] = t.samples;
    row["median_us"] = t.median_us;
    row["min_us"] = t.min_us;
    row["p10_us"] = t.p10_us;
    row["p90_us"] = t.p90_us;
    row["gbps"] = gbps;
    row["copy_median_us"] = cp.median_us;
    row["copy_gbps"] = copy_gbps;
    row["pct_of_copy"] = 100.0 * gbps / copy_gbps;
    fmt::print(
        "{}: {:.2f} us median (p10 {:.2f}, p90 {:.2f}, {} x {}), {:.0f} GB/s = {:.1f}% of copy "
        "({:.0f} GB/s); check pass (max abs {:.3g}, max rel {:.3g}); first call {:.1f} ms\n",
        c.label, t.median_us, t.p10_us, t.p90_us, t.samples, t.batch, gbps,
        100.0 * gbps / copy_gbps, copy_gbps, chk.max_abs, chk.max_rel, first_ms);
  } else {
    fmt::print("{}: CHECK FAILED ({} bad, max abs {:.3g}): not timed\n", c.label, chk.bad,
               chk.max_abs);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path, std::ios::app);
    f << row.dump() << "\n";
  }
  return chk.pass() ? kExitOk : kExitFailure;
}

int bench_rmsnorm(const ops::SetArgs& args, int warmup, int samples, const std::string& json_path) {
  const std::string dtype = args.at("dtype");
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kRmsNormMaxHidden);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
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

  ops::RmsNormConfig cfg = ops::select_rmsnorm(*ops::dtype_of(test::dl_dtype(dtype)), hidden, 16);
  BenchCase c;
  c.op = "rmsnorm";
  c.uri = ops::rmsnorm_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"hidden", hidden}};
  c.label = fmt::format("rmsnorm {} rows={} hidden={}", dtype, rows, hidden);
  c.launch = [&] {
    kjit_status st = kjit_rmsnorm(xt.get(), wt.get(), yt.get(), eps, nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = 2.0 * n * es + hidden * es;
  // The activation bytes: the op reads and writes as much, minus the tiny weight.
  c.copy_src = x.get();
  c.copy_bytes = n * es;

  // Reference check on the first run's output.
  const double first_ms = first_call_ms(c);
  y.download(yh.data(), yh.size());
  std::vector<double> xd(n), wd(static_cast<size_t>(hidden));
  for (size_t i = 0; i < n; ++i) xd[i] = ref::load_elem(xh.data(), i, dtype);
  for (int64_t i = 0; i < hidden; ++i) wd[i] = ref::load_elem(wh.data(), i, dtype);
  std::vector<double> want = ref::rmsnorm(xd, wd, rows, hidden, eps);
  Check chk;
  const double u = ref::unit_roundoff(dtype);
  for (size_t i = 0; i < n; ++i) {
    chk.add(ref::load_elem(yh.data(), i, dtype), want[i],
            (2 * u + 1e-5) * std::fabs(want[i]) + 1e-6);
  }
  return report(c, chk, first_ms, warmup, samples, json_path);
}

int bench_act_and_mul(const ops::SetArgs& args, int warmup, int samples,
                      const std::string& json_path) {
  const std::string act = args.at("act");
  const std::string dtype = args.at("dtype");
  const int64_t d = ops::positive_int_arg(args, "d", ops::kActAndMulMaxD);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(rows * d);  // output elements; the input has 2n
  check_gpu();

  const ops::Act op_act = act == "silu"   ? ops::Act::kSilu
                          : act == "gelu" ? ops::Act::kGelu
                                          : ops::Act::kGeluTanh;
  const ref::ActKind ref_act = act == "silu"   ? ref::ActKind::kSilu
                               : act == "gelu" ? ref::ActKind::kGelu
                                               : ref::ActKind::kGeluTanh;
  using Fn = kjit_status (*)(const DLTensor*, DLTensor*, void*);
  const Fn fn = act == "silu"   ? kjit_silu_and_mul
                : act == "gelu" ? kjit_gelu_and_mul
                                : kjit_gelu_tanh_and_mul;

  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> dist(-4.0, 4.0);
  std::vector<unsigned char> xh(2 * n * es), yh(n * es);
  for (size_t i = 0; i < 2 * n; ++i) ref::store_elem(xh.data(), i, dist(rng), dtype);
  test::DeviceBuffer x(xh.size()), y(yh.size());
  x.upload(xh.data(), xh.size());
  y.fill(0xFF);  // poison: NaN in every float format
  auto xt = test::make_tensor(x.get(), {rows, 2 * d}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {rows, d}, test::dl_dtype(dtype));

  ops::ActAndMulConfig cfg =
      ops::select_act_and_mul(op_act, *ops::dtype_of(test::dl_dtype(dtype)), d, 16);
  BenchCase c;
  c.op = "act_and_mul";
  c.uri = ops::act_and_mul_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"d", d}};
  c.label = fmt::format("act_and_mul {} {} rows={} d={}", act, dtype, rows, d);
  c.launch = [&] {
    kjit_status st = fn(xt.get(), yt.get(), nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = 3.0 * n * es;  // reads [rows, 2d], writes [rows, d]
  c.copy_src = x.get();
  c.copy_bytes = 3 * n * es / 2;

  const double first_ms = first_call_ms(c);
  y.download(yh.data(), yh.size());
  Check chk;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i) {
      const size_t g_at = static_cast<size_t>(r * 2 * d + i);
      const double gate = ref::load_elem(xh.data(), g_at, dtype);
      const double up = ref::load_elem(xh.data(), g_at + static_cast<size_t>(d), dtype);
      const double want = ref::activate(ref_act, gate) * up;
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * d + i), dtype), want,
              ref::act_and_mul_tolerance(dtype, want, gate, up));
    }
  }
  return report(c, chk, first_ms, warmup, samples, json_path);
}

// Fills `n` elements of a host image of `dtype` uniformly in [lo, hi) and returns their values.
std::vector<double> random_elems(std::vector<unsigned char>& host, size_t n,
                                 const std::string& dtype, std::mt19937_64& rng, double lo,
                                 double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  host.resize(n * ref::elem_size(dtype));
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    ref::store_elem(host.data(), i, dist(rng), dtype);
    v[i] = ref::load_elem(host.data(), i, dtype);
  }
  return v;
}

int bench_fused_add_rmsnorm(const ops::SetArgs& args, int warmup, int samples,
                            const std::string& json_path) {
  const std::string dtype = args.at("dtype");
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kRmsNormMaxHidden);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
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

  ops::RmsNormConfig cfg =
      ops::select_fused_add_rmsnorm(*ops::dtype_of(test::dl_dtype(dtype)), hidden, 16);
  BenchCase c;
  c.op = "fused_add_rmsnorm";
  c.uri = ops::fused_add_rmsnorm_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"hidden", hidden}};
  c.label = fmt::format("fused_add_rmsnorm {} rows={} hidden={}", dtype, rows, hidden);
  // In place: later launches run on the previous one's results. The work per byte is the same,
  // and only the first launch is checked.
  c.launch = [&] {
    kjit_status st = kjit_fused_add_rmsnorm(xt.get(), rt.get(), wt.get(), eps, nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = 4.0 * n * es + hidden * es;  // reads input and residual, writes both
  c.copy_src = xr.get();
  c.copy_bytes = 2 * n * es;

  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> out(2 * n * es);
  xr.download(out.data(), out.size());
  const std::vector<double> res_want = ref::residual_add(xd, rd, dtype);
  const std::vector<double> want = ref::rmsnorm(res_want, wd, rows, hidden, eps);
  Check chk;
  for (size_t i = 0; i < n; ++i) {
    chk.add(ref::load_elem(out.data(), n + i, dtype), res_want[i], 0.0);  // exact: fp32 add
    chk.add(ref::load_elem(out.data(), i, dtype), want[i],
            ref::one_rounding_tolerance(dtype, want[i]));
  }
  return report(c, chk, first_ms, warmup, samples, json_path);
}

int bench_layernorm(const ops::SetArgs& args, int warmup, int samples,
                    const std::string& json_path) {
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

  ops::LayerNormConfig cfg =
      ops::select_layernorm(*ops::dtype_of(test::dl_dtype(dtype)),
                            *ops::dtype_of(test::dl_dtype(wdtype)), hidden, 16, 16);
  BenchCase c;
  c.op = "layernorm";
  c.uri = ops::layernorm_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"rows", rows}, {"hidden", hidden}, {"wdtype", wdtype}};
  c.label = fmt::format("layernorm {}/{} rows={} hidden={}", dtype, wdtype, rows, hidden);
  c.launch = [&] {
    kjit_status st = kjit_layernorm(xt.get(), gt.get(), bt.get(), yt.get(), eps, nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = 2.0 * n * es + 2.0 * hidden * ref::elem_size(wdtype);
  c.copy_src = x.get();
  c.copy_bytes = n * es;

  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> yh(n * es);
  y.download(yh.data(), yh.size());
  std::vector<double> mean, rstd;
  const std::vector<double> want = ref::layernorm(xd, gd, bd, rows, hidden, eps, &mean, &rstd);
  Check chk;
  for (size_t i = 0; i < n; ++i) {
    const size_t r = i / static_cast<size_t>(hidden), col = i % static_cast<size_t>(hidden);
    chk.add(ref::load_elem(yh.data(), i, dtype), want[i],
            ref::layernorm_tolerance(dtype, want[i], xd[i], mean[r], rstd[r], gd[col]));
  }
  return report(c, chk, first_ms, warmup, samples, json_path);
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Run an op on the GPU, check it, and time it");
  struct Opts {
    std::string op;
    std::vector<std::string> sets;
    int warmup = 10;
    int samples = 30;
    std::string json;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("op", opts->op, "op to run (rmsnorm, act_and_mul, fused_add_rmsnorm, layernorm)")
      ->required();
  cmd->add_option("--set", opts->sets,
                  "name=value (rmsnorm, fused_add_rmsnorm: dtype, hidden, rows; act_and_mul: "
                  "act, dtype, d, rows; layernorm: dtype, hidden, rows, optional wdtype)");
  cmd->add_option("--warmup", opts->warmup, "untimed launches first")->check(CLI::Range(0, 10000));
  cmd->add_option("--samples", opts->samples, "timed batches")->check(CLI::Range(3, 100000));
  cmd->add_option("--json", opts->json, "append one JSON line per result to this file");
  cmd->callback([opts, &exit_code] {
    using Bench = int (*)(const ops::SetArgs&, int, int, const std::string&);
    struct Entry {
      const char* op;
      std::vector<std::string> keys;
      Bench run;
    };
    static const Entry kBenches[] = {
        {"rmsnorm", {"dtype", "hidden", "rows"}, bench_rmsnorm},
        {"act_and_mul", {"act", "dtype", "d", "rows"}, bench_act_and_mul},
        {"fused_add_rmsnorm", {"dtype", "hidden", "rows"}, bench_fused_add_rmsnorm},
        {"layernorm", {"dtype", "hidden", "rows"}, bench_layernorm},
    };
    const Entry* e = nullptr;
    for (const auto& b : kBenches) e = opts->op == b.op ? &b : e;
    if (e == nullptr) {
      std::string ops;
      for (const auto& b : kBenches) ops += std::string(ops.empty() ? "" : ", ") + b.op;
      throw UsageError("bench supports: " + ops);
    }
    ops::SetArgs args;
    for (const auto& s : opts->sets) {
      auto eq = s.find('=');
      if (eq == std::string::npos) throw UsageError("--set wants name=value, got '" + s + "'");
      args[s.substr(0, eq)] = s.substr(eq + 1);
    }
    for (const auto& k : e->keys) {
      if (!args.count(k)) throw UsageError("bench " + opts->op + " needs --set " + k + "=...");
    }
    if (args["dtype"] != "bf16" && args["dtype"] != "fp16" && args["dtype"] != "fp32") {
      throw UsageError("dtype must be bf16, fp16 or fp32");
    }
    if (args.count("act") && args["act"] != "silu" && args["act"] != "gelu" &&
        args["act"] != "gelutanh") {
      throw UsageError("act must be silu, gelu or gelutanh");
    }
    exit_code = e->run(args, opts->warmup, opts->samples, opts->json);
  });
}

}  // namespace kjit::cli
