// `kjit-cli bench <op>` (rmsnorm, act_and_mul, fused_add_rmsnorm, layernorm, rope,
// append_paged_kv, empty): run an op on the GPU on fresh random inputs, check it against the CPU
// reference (a failed check is reported as a failure, never as a speed), then time it beside a
// device-to-device copy of the same bytes measured in the same run. `empty` times a kernel that
// does nothing: the launch floor every other figure sits on.
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
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "jit/arch.hpp"
#include "jit/jit_core.hpp"
#include "kjit/kjit.h"
#include "ops/activation.hpp"
#include "ops/kv_cache.hpp"
#include "ops/layernorm.hpp"
#include "ops/norm.hpp"
#include "ops/registry.hpp"
#include "ops/rope.hpp"
#include "reference/activation_ref.hpp"
#include "reference/half.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/norm_ref.hpp"
#include "reference/rope_ref.hpp"
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
// errors. `note` replaces the figures for an op with nothing to compare.
struct Check {
  double max_abs = 0, max_rel = 0;
  long bad = 0;
  std::string note;
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
  size_t copy_bytes = 0;           // ... and as many it writes: ~bytes / 2; 0: no baseline
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
      {"check", chk.note.empty() ? nlohmann::json{{"pass", chk.pass()},
                                                  {"bad", chk.bad},
                                                  {"max_abs", chk.max_abs},
                                                  {"max_rel", chk.max_rel}}
                                 : nlohmann::json{{"pass", chk.pass()}, {"note", chk.note}}},
  };
  if (chk.pass()) {
    Timing t = time_batches(c.launch, warmup, samples);
    row["timer"] = fmt::format("cuda-events, {} back-to-back launches per sample, hot L2", t.batch);
    row["warmup"] = warmup;
    row["samples"] = t.samples;
    row["median_us"] = t.median_us;
    row["min_us"] = t.min_us;
    row["p10_us"] = t.p10_us;
    row["p90_us"] = t.p90_us;
    std::string vs_copy;
    if (c.copy_bytes > 0) {
      test::DeviceBuffer dst(c.copy_bytes);
      Timing cp = time_batches(
          [&] {
            KJIT_CU_CHECK(cuda::driver().cuMemcpyDtoDAsync(
                reinterpret_cast<CUdeviceptr>(dst.get()), reinterpret_cast<CUdeviceptr>(c.copy_src),
                c.copy_bytes, nullptr));
          },
          warmup, samples);
      const double gbps = c.bytes / (t.median_us * 1e3);
      const double copy_gbps = 2.0 * c.copy_bytes / (cp.median_us * 1e3);
      row["gbps"] = gbps;
      row["copy_median_us"] = cp.median_us;
      row["copy_gbps"] = copy_gbps;
      row["pct_of_copy"] = 100.0 * gbps / copy_gbps;
      vs_copy = fmt::format(", {:.0f} GB/s = {:.1f}% of copy ({:.0f} GB/s)", gbps,
                            100.0 * gbps / copy_gbps, copy_gbps);
    }
    const std::string check =
        chk.note.empty()
            ? fmt::format("check pass (max abs {:.3g}, max rel {:.3g})", chk.max_abs, chk.max_rel)
            : "no check (" + chk.note + ")";
    fmt::print(
        "{}: {:.2f} us median (p10 {:.2f}, p90 {:.2f}, {} x {}){}; {}; first call {:.1f} ms\n",
        c.label, t.median_us, t.p10_us, t.p90_us, t.samples, t.batch, vs_copy, check, first_ms);
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

// Fills `n` elements of `dtype` at `dst` uniformly in [lo, hi).
void fill_uniform(unsigned char* dst, size_t n, const std::string& dtype, std::mt19937_64& rng,
                  double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (size_t i = 0; i < n; ++i) ref::store_elem(dst, i, dist(rng), dtype);
}

// Fills `n` elements of a host image of `dtype` uniformly in [lo, hi) and returns their values.
std::vector<double> random_elems(std::vector<unsigned char>& host, size_t n,
                                 const std::string& dtype, std::mt19937_64& rng, double lo,
                                 double hi) {
  host.resize(n * ref::elem_size(dtype));
  fill_uniform(host.data(), n, dtype, rng, lo, hi);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = ref::load_elem(host.data(), i, dtype);
  return v;
}

// The host image of several arrays in one device allocation, each at a 256-byte boundary: the
// copy baseline then reads as many input bytes as the op does from a single buffer.
struct Packed {
  std::vector<unsigned char> host;
  std::unique_ptr<test::DeviceBuffer> dev;
  size_t add(size_t bytes) {
    const size_t at = (host.size() + 255) / 256 * 256;
    host.resize(at + bytes);
    return at;
  }
  void upload() {
    dev = std::make_unique<test::DeviceBuffer>(host.size());
    dev->upload(host.data(), host.size());
  }
  char* at(size_t offset) const { return static_cast<char*>(dev->get()) + offset; }
};

size_t add_int32s(Packed& p, const std::vector<int32_t>& v) {
  const size_t at = p.add(v.size() * 4);
  if (!v.empty()) std::memcpy(p.host.data() + at, v.data(), v.size() * 4);
  return at;
}

// A "0" / "1" flag, "0" when absent.
bool flag_arg(const ops::SetArgs& args, const std::string& name) {
  auto it = args.find(name);
  if (it == args.end() || it->second == "0") return false;
  if (it->second != "1") throw UsageError(name + " must be 0 or 1");
  return true;
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

int bench_rope(const ops::SetArgs& args, int warmup, int samples, const std::string& json_path) {
  const std::string dtype = args.at("dtype");
  if (dtype == "fp32") throw UsageError("rope supports dtype bf16 or fp16");
  const int64_t tokens = ops::positive_int_arg(args, "tokens", 1 << 24);
  const int64_t hq = ops::positive_int_arg(args, "qo_heads", 1024);
  const int64_t hk = ops::positive_int_arg(args, "kv_heads", 1024);
  const int64_t D = ops::positive_int_arg(args, "head_dim", ops::kRopeMaxHeadDim);
  const int64_t rot = args.count("rotary_dim") ? ops::positive_int_arg(args, "rotary_dim", D) : D;
  if (rot % 2 != 0) throw UsageError("rotary_dim must be even");
  const bool interleave = flag_arg(args, "interleave");
  const size_t es = ref::elem_size(dtype);
  const size_t nq = static_cast<size_t>(tokens * hq * D), nk = static_cast<size_t>(tokens * hk * D);
  check_gpu();

  // Inputs q | k | pos_ids in one buffer, outputs q_out | k_out (poisoned) in another.
  std::mt19937_64 rng(std::random_device{}());
  Packed in;
  const size_t q_at = in.add(nq * es), k_at = in.add(nk * es);
  fill_uniform(in.host.data() + q_at, nq, dtype, rng, -2.0, 2.0);
  fill_uniform(in.host.data() + k_at, nk, dtype, rng, -2.0, 2.0);
  // Positions over the whole range, with both ends present.
  const int32_t max_pos = 131072;
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pos_dist(0, max_pos - 1);
  for (auto& p : pos) p = pos_dist(rng);
  pos[0] = max_pos - 1;
  if (tokens > 1) pos[1] = 0;
  const size_t pos_at = add_int32s(in, pos);
  in.upload();
  Packed out;
  const size_t qo_at = out.add(nq * es), ko_at = out.add(nk * es);
  out.upload();
  out.dev->fill(0xFF);  // poison: NaN in every float format
  const DLDataType dl = test::dl_dtype(dtype);
  auto qt = test::make_tensor(in.at(q_at), {tokens, hq, D}, dl);
  auto kt = test::make_tensor(in.at(k_at), {tokens, hk, D}, dl);
  auto qot = test::make_tensor(out.at(qo_at), {tokens, hq, D}, dl);
  auto kot = test::make_tensor(out.at(ko_at), {tokens, hk, D}, dl);
  auto pt = test::make_tensor(in.at(pos_at), {tokens}, test::dl_dtype("int32"));
  const float scale = 1.0f, theta = 10000.0f;

  ops::RopeConfig cfg =
      ops::select_rope(ops::RopeMode::kFreq, *ops::dtype_of(dl), D, rot, interleave, 16);
  BenchCase c;
  c.op = "rope";
  c.uri = ops::rope_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"tokens", tokens}, {"qo_heads", hq},    {"kv_heads", hk},
             {"head_dim", D},    {"rotary_dim", rot}, {"interleave", interleave}};
  c.label = fmt::format("rope {} tokens={} qo_heads={} kv_heads={} head_dim={} rot={} {}", dtype,
                        tokens, hq, hk, D, rot, interleave ? "gptj" : "neox");
  c.launch = [&] {
    kjit_status st =
        kjit_apply_rope_pos_ids(qt.get(), kt.get(), qot.get(), kot.get(), pt.get(),
                                static_cast<int>(rot), interleave ? 1 : 0, scale, theta, nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = 2.0 * (nq + nk) * es + 4.0 * tokens;  // reads q, k, pos_ids; writes q_out, k_out
  c.copy_src = in.dev->get();
  c.copy_bytes = (nq + nk) * es + 2 * static_cast<size_t>(tokens);

  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(out.host.size());
  out.dev->download(got.data(), got.size());
  // Tolerance as in tests/gpu/rope_gpu_test.cpp: one output rounding plus 1e-6 per unit of the
  // two inputs (the kernel's angle error); the copied dims beyond rot are exact.
  const double u = ref::unit_roundoff(dtype);
  const std::vector<double> inv_freq = ref::rope_inv_freq(static_cast<int>(rot), scale, theta);
  std::vector<double> cs(static_cast<size_t>(rot / 2)), sn(cs.size());
  std::vector<double> x(static_cast<size_t>(D)), y(x.size());
  Check chk;
  for (int64_t t = 0; t < tokens; ++t) {
    for (size_t i = 0; i < cs.size(); ++i) {
      const double a = static_cast<double>(pos[static_cast<size_t>(t)]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    for (const auto& [src, dst, heads] :
         {std::tuple{q_at, qo_at, hq}, std::tuple{k_at, ko_at, hk}}) {
      for (int64_t h = 0; h < heads; ++h) {
        const size_t row = static_cast<size_t>((t * heads + h) * D);
        for (int64_t d = 0; d < D; ++d) {
          x[d] = ref::load_elem(in.host.data() + src, row + d, dtype);
        }
        ref::rope_head(x.data(), y.data(), static_cast<int>(D), static_cast<int>(rot), interleave,
                       cs.data(), sn.data());
        for (int64_t d = 0; d < D; ++d) {
          const int partner =
              ref::rope_partner(static_cast<int>(d), static_cast<int>(rot), interleave);
          const double tol = d >= rot ? 0.0
                                      : 2 * u * std::fabs(y[d]) +
                                            1e-6 * (std::fabs(x[d]) + std::fabs(x[partner])) + 1e-7;
          chk.add(ref::load_elem(got.data() + dst, row + d, dtype), y[d], tol);
        }
      }
    }
  }
  return report(c, chk, first_ms, warmup, samples, json_path);
}

int bench_append_paged_kv(const ops::SetArgs& args, int warmup, int samples,
                          const std::string& json_path) {
  const std::string dtype = args.at("dtype");
  const int64_t tokens = ops::positive_int_arg(args, "tokens", 1 << 24);
  const int64_t H = ops::positive_int_arg(args, "kv_heads", 1024);
  const int64_t D = ops::positive_int_arg(args, "head_dim", ops::kAppendPagedKvMaxHeadDim);
  const int64_t ps = ops::positive_int_arg(args, "page_size", 1024);
  const int64_t batch = args.count("batch") ? ops::positive_int_arg(args, "batch", tokens)
                                            : std::max<int64_t>(1, tokens / 512);
  const std::string layout = args.count("layout") ? args.at("layout") : "nhd";
  if (layout != "nhd" && layout != "hnd") throw UsageError("layout must be nhd or hnd");
  const bool nhd = layout == "nhd";
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(tokens * H * D);  // elements of append_k (and append_v)
  check_gpu();

  // Requests: each appends its share of the tokens after an existing prefix of up to 1024
  // tokens, on distinct pages in random order.
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int32_t> prefix_dist(0, 1023);
  std::vector<int32_t> bi, pos, indptr{0}, last;
  int64_t num_pages = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t prefix = prefix_dist(rng);
    const int64_t share = tokens / batch + (b < tokens % batch ? 1 : 0);
    for (int64_t i = 0; i < share; ++i) {
      bi.push_back(static_cast<int32_t>(b));
      pos.push_back(static_cast<int32_t>(prefix + i));
    }
    const int64_t len = prefix + share, pages = (len + ps - 1) / ps;
    num_pages += pages;
    indptr.push_back(static_cast<int32_t>(num_pages));
    last.push_back(static_cast<int32_t>(len - (pages - 1) * ps));
  }
  std::vector<int32_t> indices(static_cast<size_t>(num_pages));
  std::iota(indices.begin(), indices.end(), 0);
  std::shuffle(indices.begin(), indices.end(), rng);

  // Inputs append_k | append_v | index arrays in one buffer; the caches poisoned.
  Packed in;
  const size_t ak_at = in.add(n * es), av_at = in.add(n * es);
  fill_uniform(in.host.data() + ak_at, n, dtype, rng, -4.0, 4.0);
  fill_uniform(in.host.data() + av_at, n, dtype, rng, -4.0, 4.0);
  const size_t bi_at = add_int32s(in, bi), pos_at = add_int32s(in, pos);
  const size_t idx_at = add_int32s(in, indices), ptr_at = add_int32s(in, indptr);
  const size_t last_at = add_int32s(in, last);
  in.upload();
  const size_t cache_elems = static_cast<size_t>(num_pages * ps * H * D);
  Packed caches;
  const size_t kc_at = caches.add(cache_elems * es), vc_at = caches.add(cache_elems * es);
  caches.upload();
  caches.dev->fill(0xFF);  // poison: NaN in every float format
  const DLDataType dl = test::dl_dtype(dtype), i32 = test::dl_dtype("int32");
  auto akt = test::make_tensor(in.at(ak_at), {tokens, H, D}, dl);
  auto avt = test::make_tensor(in.at(av_at), {tokens, H, D}, dl);
  const std::vector<int64_t> cshape =
      nhd ? std::vector<int64_t>{num_pages, ps, H, D} : std::vector<int64_t>{num_pages, H, ps, D};
  auto kct = test::make_tensor(caches.at(kc_at), cshape, dl);
  auto vct = test::make_tensor(caches.at(vc_at), cshape, dl);
  auto bt = test::make_tensor(in.at(bi_at), {tokens}, i32);
  auto pt = test::make_tensor(in.at(pos_at), {tokens}, i32);
  auto it = test::make_tensor(in.at(idx_at), {num_pages}, i32);
  auto ipt = test::make_tensor(in.at(ptr_at), {batch + 1}, i32);
  auto lt = test::make_tensor(in.at(last_at), {batch}, i32);

  ops::AppendPagedKvConfig cfg = ops::select_append_paged_kv(*ops::dtype_of(dl), D, 16);
  BenchCase c;
  c.op = "append_paged_kv";
  c.uri = ops::append_paged_kv_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"tokens", tokens}, {"kv_heads", H},  {"head_dim", D},
             {"page_size", ps},  {"batch", batch}, {"layout", layout}};
  c.label = fmt::format("append_paged_kv {} {} tokens={} batch={} kv_heads={} head_dim={} page={}",
                        dtype, layout, tokens, batch, H, D, ps);
  c.launch = [&] {
    kjit_status st = kjit_append_paged_kv_cache(
        akt.get(), avt.get(), bt.get(), pt.get(), kct.get(), vct.get(), it.get(), ipt.get(),
        lt.get(), nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  // Reads append_k / append_v, batch_indices, positions and the page table; writes as many
  // cache bytes as it reads append bytes.
  const size_t index_bytes = 4 * (bi.size() + pos.size() + indices.size() + indptr.size());
  c.bytes = 4.0 * n * es + index_bytes;
  c.copy_src = in.dev->get();
  c.copy_bytes = 2 * n * es + index_bytes / 2;

  // Every appended row must sit in its (page, slot) bit for bit, and every other cache element
  // must still be poison.
  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(caches.host.size());
  caches.dev->download(got.data(), got.size());
  Check chk;
  const size_t row_bytes = static_cast<size_t>(D) * es;
  for (int64_t t = 0; t < tokens; ++t) {
    const auto target = ref::append_target(bi, pos, indptr, indices, t, ps, num_pages);
    if (!target) throw Error(KJIT_ERROR_INTERNAL, "bench built a token the append skips");
    for (int64_t h = 0; h < H; ++h) {
      const int64_t cache_row = nhd ? (target->page * ps + target->slot) * H + h
                                    : (target->page * H + h) * ps + target->slot;
      const size_t app_elem = static_cast<size_t>((t * H + h) * D);
      for (const auto& [src, dst] : {std::pair{ak_at, kc_at}, std::pair{av_at, vc_at}}) {
        unsigned char* slot = got.data() + dst + static_cast<size_t>(cache_row) * row_bytes;
        for (int64_t d = 0; d < D; ++d) {
          chk.add(ref::load_elem(slot, static_cast<size_t>(d), dtype),
                  ref::load_elem(in.host.data() + src, app_elem + d, dtype), 0.0);
        }
        std::memset(slot, 0xFF, row_bytes);  // checked: must not count as a stray write below
      }
    }
  }
  for (const size_t at : {kc_at, vc_at}) {
    for (size_t i = 0; i < cache_elems * es; ++i) chk.bad += got[at + i] != 0xFF;
  }
  return report(c, chk, first_ms, warmup, samples, json_path);
}

// The launch floor: an empty kernel, compiled through the JIT like any op and launched directly.
int bench_empty(const ops::SetArgs&, int warmup, int samples, const std::string& json_path) {
  check_gpu();
  jit::Spec spec;
  spec.op = "empty";
  spec.uri = jit::make_uri(spec.op, spec.params);
  spec.kernel_dirs = {"common"};
  spec.includes = {"common/prelude.cuh"};
  spec.config = "extern \"C\" __global__ void kjit_empty_kernel() {}\n";
  spec.entry_names = {"kjit_empty_kernel"};
  spec.arch_families = {"sm_80+"};
  CUfunction fn = nullptr;
  cuda::LaunchConfig lc;
  lc.block_x = 32;
  const int unused = 0;  // the kernel takes no parameters; launch wants an address anyway

  BenchCase c;
  c.op = "empty";
  c.uri = spec.uri;
  c.dtype = "none";
  c.shape = {{"grid", 1}, {"block", 32}};
  c.label = "empty kernel grid=1 block=32";
  c.launch = [&] {
    if (fn == nullptr)
      fn = jit::JitCore::global().kernel(spec.uri, 0, [&] { return spec; }).functions.at(0);
    cuda::launch(fn, lc, &unused);
  };
  const double first_ms = first_call_ms(c);
  Check chk;
  chk.note = "no output";
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
  cmd->add_option("op", opts->op,
                  "op to run (rmsnorm, act_and_mul, fused_add_rmsnorm, layernorm, rope, "
                  "append_paged_kv, empty)")
      ->required();
  cmd->add_option("--set", opts->sets,
                  "name=value (rmsnorm, fused_add_rmsnorm: dtype, hidden, rows; act_and_mul: "
                  "act, dtype, d, rows; layernorm: dtype, hidden, rows, optional wdtype; rope: "
                  "dtype, tokens, qo_heads, kv_heads, head_dim, optional rotary_dim, interleave; "
                  "append_paged_kv: dtype, tokens, kv_heads, head_dim, page_size, optional batch "
                  "(default max(1, tokens / 512)), layout (nhd|hnd); empty: none)");
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
        {"rope", {"dtype", "tokens", "qo_heads", "kv_heads", "head_dim"}, bench_rope},
        {"append_paged_kv",
         {"dtype", "tokens", "kv_heads", "head_dim", "page_size"},
         bench_append_paged_kv},
        {"empty", {}, bench_empty},
    };
    const Entry* e = nullptr;
    for (const auto& b : kBenches) e = opts->op == b.op ? &b : e;
    if (e == nullptr) {
      std::string ops;
      for (const auto& b : kBenches) ops += std::string(ops.empty() ? "" : ", ") + b.op;
      throw UsageError("bench supports: " + ops);
    }
    ops::SetArgs args = parse_sets(opts->sets);
    for (const auto& k : e->keys) {
      if (!args.count(k)) throw UsageError("bench " + opts->op + " needs --set " + k + "=...");
    }
    if (args.count("dtype") && args["dtype"] != "bf16" && args["dtype"] != "fp16" &&
        args["dtype"] != "fp32") {
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
