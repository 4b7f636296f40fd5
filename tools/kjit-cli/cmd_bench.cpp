// `kjit-cli bench rmsnorm`: run an op on the GPU on fresh random inputs, check it against the
// fp64 CPU reference (a failed check is reported as a failure, never as a speed), then time it
// beside a device-to-device copy of the same bytes measured in the same run.
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
#include "ops/norm.hpp"
#include "ops/registry.hpp"
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

struct Check {
  double max_abs = 0, max_rel = 0;
  long bad = 0;
};

int bench_rmsnorm(const ops::SetArgs& args, int warmup, int samples, const std::string& json_path) {
  const std::string dtype = args.at("dtype");
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kRmsNormMaxHidden);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(rows * hidden);
  std::string why;
  if (!test::gpu_available(&why)) throw Error(KJIT_ERROR_NO_DEVICE, why);
  const cuda::DeviceInfo& dev = cuda::device_info(0);

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
  auto launch = [&] {
    kjit_status st = kjit_rmsnorm(xt.get(), wt.get(), yt.get(), eps, nullptr);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };

  // Reference check on the first run's output.
  auto t0 = std::chrono::steady_clock::now();
  launch();
  test::device_synchronize();
  double first_call_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  y.download(yh.data(), yh.size());
  std::vector<double> xd(n), wd(static_cast<size_t>(hidden));
  for (size_t i = 0; i < n; ++i) xd[i] = ref::load_elem(xh.data(), i, dtype);
  for (int64_t i = 0; i < hidden; ++i) wd[i] = ref::load_elem(wh.data(), i, dtype);
  std::vector<double> want = ref::rmsnorm(xd, wd, rows, hidden, eps);
  Check chk;
  const double u = ref::unit_roundoff(dtype);
  for (size_t i = 0; i < n; ++i) {
    double got = ref::load_elem(yh.data(), i, dtype);
    double err = std::fabs(got - want[i]);
    double tol = (2 * u + 1e-5) * std::fabs(want[i]) + 1e-6;
    if (!(err <= tol)) ++chk.bad;
    if (std::isnan(err)) err = INFINITY;
    chk.max_abs = std::max(chk.max_abs, err);
    chk.max_rel = std::max(chk.max_rel, err / std::max(std::fabs(want[i]), 1e-3));
  }
  const bool pass = chk.bad == 0;

  ops::RmsNormConfig cfg = ops::select_rmsnorm(*ops::dtype_of(test::dl_dtype(dtype)), hidden, 16);
  const double bytes = 2.0 * n * es + hidden * es;
  nlohmann::json row = {
      {"op", "rmsnorm"},
      {"uri", ops::rmsnorm_uri(cfg)},
      {"backend", "kjit"},
      {"shape", {{"rows", rows}, {"hidden", hidden}}},
      {"dtype", dtype},
      {"arch", fmt::format("sm_{}{}", dev.major, dev.minor)},
      {"gpu", dev.name},
      {"driver", cuda::driver().version},
      {"first_call_ms", first_call_ms},
      {"check",
       {{"pass", pass}, {"bad", chk.bad}, {"max_abs", chk.max_abs}, {"max_rel", chk.max_rel}}},
  };
  if (pass) {
    Timing t = time_batches(launch, warmup, samples);
    // The hardware limit in the same run: a device-to-device copy of the activation bytes
    // (reads and writes the same amount as the op, minus the tiny weight).
    test::DeviceBuffer dst(n * es);
    Timing c = time_batches(
        [&] {
          KJIT_CU_CHECK(cuda::driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst.get()),
                                                         reinterpret_cast<CUdeviceptr>(x.get()),
                                                         n * es, nullptr));
        },
        warmup, samples);
    const double gbps = bytes / (t.median_us * 1e3);
    const double copy_gbps = 2.0 * n * es / (c.median_us * 1e3);
    row["timer"] = fmt::format("cuda-events, {} back-to-back launches per sample, hot L2", t.batch);
    row["warmup"] = warmup;
    row["samples"] = t.samples;
    row["median_us"] = t.median_us;
    row["min_us"] = t.min_us;
    row["p10_us"] = t.p10_us;
    row["p90_us"] = t.p90_us;
    row["gbps"] = gbps;
    row["copy_median_us"] = c.median_us;
    row["copy_gbps"] = copy_gbps;
    row["pct_of_copy"] = 100.0 * gbps / copy_gbps;
    fmt::print(
        "rmsnorm {} rows={} hidden={}: {:.2f} us median (p10 {:.2f}, p90 {:.2f}, {} x {}), "
        "{:.0f} GB/s = {:.1f}% of copy ({:.0f} GB/s); check pass (max abs {:.3g}, max rel "
        "{:.3g}); first call {:.1f} ms\n",
        dtype, rows, hidden, t.median_us, t.p10_us, t.p90_us, t.samples, t.batch, gbps,
        100.0 * gbps / copy_gbps, copy_gbps, chk.max_abs, chk.max_rel, first_call_ms);
  } else {
    fmt::print("rmsnorm {} rows={} hidden={}: CHECK FAILED ({} bad, max abs {:.3g}): not timed\n",
               dtype, rows, hidden, chk.bad, chk.max_abs);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path, std::ios::app);
    f << row.dump() << "\n";
  }
  return pass ? kExitOk : kExitFailure;
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
  cmd->add_option("op", opts->op, "op to run (rmsnorm)")->required();
  cmd->add_option("--set", opts->sets, "name=value (rmsnorm: dtype, hidden, rows)");
  cmd->add_option("--warmup", opts->warmup, "untimed launches first")->check(CLI::Range(0, 10000));
  cmd->add_option("--samples", opts->samples, "timed batches")->check(CLI::Range(3, 100000));
  cmd->add_option("--json", opts->json, "append one JSON line per result to this file");
  cmd->callback([opts, &exit_code] {
    if (opts->op != "rmsnorm") throw UsageError("bench supports: rmsnorm");
    ops::SetArgs args;
    for (const auto& s : opts->sets) {
      auto eq = s.find('=');
      if (eq == std::string::npos) throw UsageError("--set wants name=value, got '" + s + "'");
      args[s.substr(0, eq)] = s.substr(eq + 1);
    }
    for (const char* k : {"dtype", "hidden", "rows"}) {
      if (!args.count(k)) throw UsageError(std::string("bench rmsnorm needs --set ") + k + "=...");
    }
    if (args["dtype"] != "bf16" && args["dtype"] != "fp16" && args["dtype"] != "fp32") {
      throw UsageError("dtype must be bf16, fp16 or fp32");
    }
    exit_code = bench_rmsnorm(args, opts->warmup, opts->samples, opts->json);
  });
}

}  // namespace kjit::cli
