// `kjit-cli bench` cases of the RoPE family.
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
#include "ops/pdl.hpp"
#include "ops/rope/rope.hpp"
#include "reference/rope_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

int bench_rope(const ops::SetArgs& args, const BenchOptions& opts) {
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
  // --set batch=N: positions from indptr and offsets (kjit_apply_rope) for N requests of
  // tokens / N tokens each (the first ones one longer), at random offsets.
  const int64_t batch = args.count("batch") ? ops::positive_int_arg(args, "batch", tokens) : 0;
  std::vector<int32_t> indptr = {0}, offsets;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t n = static_cast<int32_t>(tokens / batch + (b < tokens % batch ? 1 : 0));
    indptr.push_back(indptr.back() + n);
    offsets.push_back(std::uniform_int_distribution<int32_t>(0, std::max(0, max_pos - n))(rng));
    for (int32_t t = 0; t < n; ++t) pos[static_cast<size_t>(indptr[b] + t)] = offsets.back() + t;
  }
  const size_t pos_at = add_int32s(in, pos);
  const size_t indptr_at = add_int32s(in, indptr), offsets_at = add_int32s(in, offsets);
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
  auto it = test::make_tensor(in.at(indptr_at), {batch + 1}, test::dl_dtype("int32"));
  auto ot = test::make_tensor(in.at(offsets_at), {batch}, test::dl_dtype("int32"));
  const float scale = 1.0f, theta = 10000.0f;

  // --set layout=auto|slot|unit|decode: the kernel the op would pick by token count, or one forced
  // (an explicit ops::RopeTuning), to time them side by side. decode falls back as the op does
  // where the decode kernel does not serve the shape.
  const std::string layout = args.count("layout") ? args.at("layout") : "auto";
  if (layout != "auto" && layout != "slot" && layout != "unit" && layout != "decode") {
    throw UsageError("layout must be auto, slot, unit or decode");
  }
  ops::RopeTuning tuning;
  tuning.layout = layout == "auto"   ? ops::RopeLayout::kAuto
                  : layout == "slot" ? ops::RopeLayout::kSlotMajor
                  : layout == "unit" ? ops::RopeLayout::kUnitMajor
                                     : ops::RopeLayout::kDecode;
  const ops::RopeConfig cfg =
      ops::plan_rope(ops::select_rope(batch > 0 ? ops::RopeMode::kIndptr : ops::RopeMode::kFreq,
                                      *ops::dtype_of(dl), D, rot, interleave, 16),
                     tokens, ops::pdl_early_indices(0, bench_elementwise_launch()), tuning);
  BenchCase c;
  c.op = "rope";
  c.uri = ops::rope_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"tokens", tokens}, {"qo_heads", hq},    {"kv_heads", hk},
             {"head_dim", D},    {"rotary_dim", rot}, {"interleave", interleave}};
  if (batch > 0) c.shape["batch"] = batch;
  c.label = fmt::format("rope {} tokens={}{} qo_heads={} kv_heads={} head_dim={} rot={} {} {}",
                        dtype, tokens, batch > 0 ? fmt::format(" indptr batch={}", batch) : "", hq,
                        hk, D, rot, interleave ? "gptj" : "neox",
                        cfg.decode       ? (cfg.early_pos ? "decode early-pos" : "decode")
                        : cfg.unit_major ? "unit-major"
                                         : "slot-major");
  // The ops-layer call: what kjit_apply_rope_pos_ids (kjit_apply_rope with batch) runs, in the
  // bench's launch mode and layout.
  c.launch = [&](CUstream stream) {
    if (batch > 0) {
      ops::apply_rope_indptr(qt.get(), kt.get(), qot.get(), kot.get(), it.get(), ot.get(),
                             static_cast<int>(rot), interleave ? 1 : 0, scale, theta, stream,
                             bench_elementwise_launch(), tuning);
    } else {
      ops::apply_rope_pos_ids(qt.get(), kt.get(), qot.get(), kot.get(), pt.get(),
                              static_cast<int>(rot), interleave ? 1 : 0, scale, theta, stream,
                              bench_elementwise_launch(), tuning);
    }
  };
  // Reads q, k and pos_ids (or indptr and offsets); writes q_out, k_out.
  c.bytes = 2.0 * (nq + nk) * es + (batch > 0 ? 8.0 * batch + 4.0 : 4.0 * tokens);
  // Two multiplies and an add per rotated element (the angles are per token, not counted).
  c.flops = 3.0 * static_cast<double>(tokens) * static_cast<double>(hq + hk) * rot;
  c.copy_src = in.dev->get();
  c.copy_bytes = (nq + nk) * es + 2 * static_cast<size_t>(tokens);

  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(out.host.size());
  if (opts.check) out.dev->download(got.data(), got.size());
  // Tolerance as in tests/gpu/rope_gpu_test.cpp: one output rounding plus 2e-6 per unit of the
  // two inputs (the kernel's angle error); the copied dims beyond rot are exact.
  const double u = ref::unit_roundoff(dtype);
  const std::vector<double> inv_freq = ref::rope_inv_freq(static_cast<int>(rot), scale, theta);
  const Check all = check_rows(opts.check ? tokens : 0, [&](int64_t t, Check& chk) {
    std::vector<double> cs(static_cast<size_t>(rot / 2)), sn(cs.size());
    std::vector<double> x(static_cast<size_t>(D)), y(x.size());
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
                                            2e-6 * (std::fabs(x[d]) + std::fabs(x[partner])) + 1e-7;
          chk.add(ref::load_elem(got.data() + dst, row + d, dtype), y[d], tol);
        }
      }
    }
  });
  return report(c, all, first_ms, opts);
}

}  // namespace

void add_rope_benches(std::vector<BenchEntry>& out) {
  out.push_back({"rope",
                 {"dtype", "tokens", "qo_heads", "kv_heads", "head_dim"},
                 {"rotary_dim", "interleave", "layout", "batch"},
                 bench_rope,
                 "dtype, tokens, qo_heads, kv_heads, head_dim, optional rotary_dim, interleave, "
                 "layout=auto|slot|unit|decode, batch (positions from indptr and offsets of that "
                 "many requests: kjit_apply_rope)"});
}
}  // namespace kjit::cli
