// `kjit-cli bench` cases of the gated activations (act_and_mul).
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
#include "ops/activation/activation.hpp"
#include "reference/activation_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

int bench_act_and_mul(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string act = args.at("act");
  const std::string dtype = args.at("dtype");
  const int64_t d = ops::positive_int_arg(args, "d", ops::kActAndMulMaxD);
  const int64_t rows = ops::positive_int_arg(args, "rows", 1 << 24);
  const size_t es = ref::elem_size(dtype);
  const size_t n = static_cast<size_t>(rows * d);  // output elements; the input has 2n
  check_gpu();

  const ops::ActivationInfo* info = ops::find_activation(act);
  if (info == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "act_and_mul: no activation '{}'", act);
  const ops::Act op_act = info->act;
  // The reference names each activation by its formula ("gelu_tanh"), written independently of
  // the ops' table.
  const ref::ActKind ref_act = ref::act_kind_named(info->formula);

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
  // The ops-layer call: what kjit_<act>_and_mul runs, in the bench's launch mode.
  c.launch = [&](CUstream stream) {
    ops::act_and_mul(op_act, xt.get(), yt.get(), stream, bench_elementwise_launch());
  };
  c.bytes = 3.0 * n * es;  // reads [rows, 2d], writes [rows, d]
  c.flops = info->flops * n;
  c.copy_src = x.get();
  c.copy_bytes = 3 * n * es / 2;

  const double first_ms = first_call_ms(c);
  if (opts.check) y.download(yh.data(), yh.size());
  const Check all = check_rows(opts.check ? rows : 0, [&](int64_t r, Check& chk) {
    for (int64_t i = 0; i < d; ++i) {
      const size_t g_at = static_cast<size_t>(r * 2 * d + i);
      const double gate = ref::load_elem(xh.data(), g_at, dtype);
      const double up = ref::load_elem(xh.data(), g_at + static_cast<size_t>(d), dtype);
      const double want = ref::activate(ref_act, gate) * up;
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * d + i), dtype), want,
              ref::act_and_mul_tolerance(dtype, want, gate, up));
    }
  });
  return report(c, all, first_ms, opts);
}

}  // namespace

void add_activation_benches(std::vector<BenchEntry>& out) {
  // "act (silu|gelu|...), dtype, d, rows": set_help outlives this call.
  static const std::string help = [] {
    std::string acts;
    for (const ops::ActivationInfo& a : ops::kActivations) {
      acts += (acts.empty() ? "" : "|") + std::string(a.name);
    }
    return "act (" + acts + "), dtype, d, rows";
  }();
  out.push_back(
      {"act_and_mul", {"act", "dtype", "d", "rows"}, {}, bench_act_and_mul, help.c_str()});
}
}  // namespace kjit::cli
