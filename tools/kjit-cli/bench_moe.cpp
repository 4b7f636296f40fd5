// `kjit-cli bench` cases of the MoE family: the grouped GEMM (contiguous layout) over routed
// tokens, its SwiGLU form (silu_and_mul in the epilogue), and the whole layer (kjit_moe_forward).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "moe/moe_params.h"
#include "ops/moe/moe.hpp"
#include "util/error.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "reference/moe_ref.hpp"
#include "support/gpu.hpp"

namespace kjit::cli {
namespace {

// Rows per expert of `tokens` tokens routed to top_k of `experts` each. even: token t's slots go
// to experts (t * top_k + j) % experts, so every expert gets the same share (+-1); skew: the
// first slot of 90% of the tokens goes to expert 0, the rest as even.
std::vector<int64_t> routed_rows(int64_t tokens, int64_t top_k, int64_t experts, bool skew) {
  std::vector<int64_t> rows(static_cast<size_t>(experts), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t e = (t * top_k + j) % experts;
      if (skew && j == 0 && t % 10 != 9) e = 0;
      ++rows[static_cast<size_t>(e)];
    }
  }
  return rows;
}

// The grouped GEMM benches' shared arguments (experts, top_k, tokens, n, k, routing, swiglu) and
// the routing they imply: rows per expert as offsets, the active experts.
struct GroupedBench {
  int64_t experts = 0, top_k = 0, tokens = 0, n = 0, k = 0, rows = 0, active = 0;
  std::string routing;
  bool swiglu = false;
  // path: auto (the selection's), decode or sm90 (the 128-row tile kernel) forced; split: the
  // decode kernel's split of K (0: chosen).
  std::string path;
  ops::MoeGemmTuning tuning;
  // layout masked (kjit_moe_grouped_gemm_masked, the CUDA-graph decode form): a and out
  // [experts, max_rows, ..] with max_rows = tokens (no expert gets more), counts on the device.
  bool masked = false;
  int64_t max_rows = 0;
  std::vector<int32_t> offsets;
  int64_t out_n() const { return swiglu ? n / 2 : n; }
  // The expert of permuted row r.
  int64_t expert_of(int64_t r) const {
    return std::upper_bound(offsets.begin(), offsets.end(), static_cast<int32_t>(r)) -
           offsets.begin() - 1;
  }
  // Rows of a and out in the call's layout, and the one routed row r sits in.
  int64_t call_rows() const { return masked ? experts * max_rows : rows; }
  int64_t call_row(int64_t r) const {
    if (!masked) return r;
    const int64_t e = expert_of(r);
    return e * max_rows + (r - offsets[static_cast<size_t>(e)]);
  }
  // The schedule tensor: counts (masked) or offsets.
  std::vector<int32_t> sched() const {
    if (!masked) return offsets;
    std::vector<int32_t> counts;
    for (size_t e = 0; e + 1 < offsets.size(); ++e) counts.push_back(offsets[e + 1] - offsets[e]);
    return counts;
  }
};

GroupedBench grouped_bench(const std::string& op, const ops::SetArgs& args) {
  GroupedBench g;
  g.experts = ops::positive_int_arg(args, "experts", 1024);
  g.top_k = ops::positive_int_arg(args, "top_k", 64);
  g.tokens = ops::positive_int_arg(args, "tokens", 1 << 20);
  g.n = ops::positive_int_arg(args, "n", 1 << 20);
  g.k = ops::positive_int_arg(args, "k", 1 << 20);
  g.routing = args.count("routing") != 0 ? args.at("routing") : "even";
  // swiglu: b is w13 [experts, n = 2 I, k], out [rows, I] = silu(gate) * up from the epilogue.
  g.swiglu = flag_arg(args, "swiglu");
  if (g.swiglu && g.n % 2 != 0) throw UsageError(op + ": swiglu takes an even n (2 I)");
  if (g.routing != "even" && g.routing != "skew") {
    throw UsageError(op + ": routing is even or skew");
  }
  if (g.top_k > g.experts) throw UsageError(op + ": top_k exceeds experts");
  g.path = args.count("path") != 0 ? args.at("path") : "auto";
  if (g.path != "auto" && g.path != "decode" && g.path != "sm90") {
    throw UsageError(op + ": path is auto, decode or sm90");
  }
  g.tuning.force = g.path == "decode" ? ops::MoeGemmForce::kDecode
                   : g.path == "sm90" ? ops::MoeGemmForce::kTiles
                                      : ops::MoeGemmForce::kNone;
  if (args.count("split") != 0) {
    g.tuning.split = static_cast<int>(ops::positive_int_arg(args, "split", 8));
  }
  // persistent: the 128-row tile kernel's persistent form (a tile kernel forced, as path=sm90).
  g.tuning.persistent = flag_arg(args, "persistent");
  // pair: its pairs of blocks sharing a's rows (MoeGemmTuning::pair).
  g.tuning.pair = flag_arg(args, "pair");
  if ((g.tuning.persistent || g.tuning.pair) && g.path == "decode") {
    throw UsageError(op + ": persistent is the 128-row tile kernel's form, not path=decode");
  }
  // bn: the tile kernel's width (ops::MoeGemmTuning::bn; the library refuses the rest).
  if (args.count("bn") != 0) g.tuning.bn = static_cast<int>(ops::positive_int_arg(args, "bn", 256));
  const std::string layout = args.count("layout") != 0 ? args.at("layout") : "contiguous";
  if (layout != "contiguous" && layout != "masked") {
    throw UsageError(op + ": layout is contiguous or masked");
  }
  g.masked = layout == "masked";
  g.max_rows = g.tokens;
  const std::vector<int64_t> counts =
      routed_rows(g.tokens, g.top_k, g.experts, g.routing == "skew");
  g.offsets = {0};
  for (int64_t c : counts) g.offsets.push_back(g.offsets.back() + static_cast<int32_t>(c));
  g.rows = g.tokens * g.top_k;
  g.active = std::count_if(counts.begin(), counts.end(), [](int64_t c) { return c > 0; });
  return g;
}

// The host's bound on an expert's rows for the decode kernel's choice, as the op computes it
// (contiguous layout) or as the forced path sets it.
int64_t bench_decode_rows(const GroupedBench& g) {
  return ops::moe_tuned_decode_rows(g.tuning, g.masked, g.call_rows(), g.max_rows, g.experts);
}

int bench_moe_grouped_gemm(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.count("dtype") != 0 ? args.at("dtype") : "bf16";
  const GroupedBench g = grouped_bench("moe_grouped_gemm", args);
  const int64_t experts = g.experts, top_k = g.top_k, tokens = g.tokens, n = g.n, k = g.k;
  const int64_t rows = g.rows, active = g.active, out_n = g.out_n();
  const std::string& routing = g.routing;
  const bool swiglu = g.swiglu;
  if (dtype != "bf16" && dtype != "fp16")
    throw UsageError("moe_grouped_gemm: dtype is bf16 or fp16");
  check_gpu();
  const size_t es = ref::elem_size(dtype);
  std::mt19937_64 rng(std::random_device{}());

  const bool masked = g.masked;
  const int64_t call_rows = g.call_rows(), max_rows = g.max_rows;
  Packed in;
  const size_t a_at = in.add(static_cast<size_t>(call_rows * k) * es);
  const size_t b_at = in.add(static_cast<size_t>(experts * n * k) * es);
  const size_t off_at = add_int32s(in, g.sched());
  fill_uniform(in.host.data() + a_at, static_cast<size_t>(call_rows * k), dtype, rng, -1.0, 1.0);
  fill_uniform(in.host.data() + b_at, static_cast<size_t>(experts * n * k), dtype, rng, -1.0, 1.0);
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(call_rows * out_n) * es);
  y.fill(0xFF);
  const DLDataType dt = test::dl_dtype(dtype);
  auto at = masked ? test::make_tensor(in.at(a_at), {experts, max_rows, k}, dt)
                   : test::make_tensor(in.at(a_at), {rows, k}, dt);
  auto bt = test::make_tensor(in.at(b_at), {experts, n, k}, dt);
  auto ot =
      test::make_tensor(in.at(off_at), {masked ? experts : experts + 1}, test::dl_dtype("int32"));
  auto yt = masked ? test::make_tensor(y.get(), {experts, max_rows, out_n}, dt)
                   : test::make_tensor(y.get(), {rows, out_n}, dt);
  ops::MoeGemmConfig cfg = ops::select_moe_gemm(
      ops::dtype_from_name(dtype), ops::dtype_from_name(dtype), call_rows,
      masked ? max_rows : rows / experts, n, k, experts,
      ops::gemm_target(0, (k * static_cast<int64_t>(es)) % 16 == 0), bench_decode_rows(g));
  cfg.swiglu = swiglu ? 1 : 0;
  if (swiglu && cfg.path == ops::GemmPath::kSimt) {
    throw UsageError(
        "moe_grouped_gemm: swiglu runs on the sm90 path only (sm_90a, k * 2 bytes "
        "a multiple of 16)");
  }
  ops::moe_gemm_tune(cfg, g.tuning, masked ? max_rows : rows / experts, n, k);

  BenchCase c;
  c.op = "moe_grouped_gemm";
  c.uri = ops::moe_gemm_spec(cfg).uri;
  c.dtype = dtype;
  c.shape = {
      {"experts", experts}, {"top_k", top_k},          {"tokens", tokens}, {"n", n}, {"k", k},
      {"routing", routing}, {"active_experts", active}};
  if (swiglu) c.shape["swiglu"] = 1;
  if (masked) c.shape["layout"] = "masked";
  c.shape["path"] = ops::gemm_path_name(cfg.path);
  if (g.tuning.split != 0) c.shape["split"] = g.tuning.split;
  if (cfg.persistent != 0) c.shape["persistent"] = 1;
  if (cfg.persistent == 2) c.shape["pair"] = 1;
  if (g.tuning.bn != 0) c.shape["bn"] = cfg.bn;
  c.label = fmt::format("moe_grouped_gemm {} e={} top{} tokens={} n={} k={} {}{}{} ({}{})", dtype,
                        experts, top_k, tokens, n, k, routing, swiglu ? " swiglu" : "",
                        masked ? " masked" : "", ops::gemm_path_name(cfg.path),
                        cfg.tokens != 0       ? fmt::format(" {} tokens", cfg.tokens)
                        : cfg.persistent == 2 ? std::string(" persistent pairs")
                        : cfg.persistent != 0 ? std::string(" persistent")
                                              : std::string());
  const ops::MoeGemmTuning tuning = g.tuning;
  c.launch = [&](CUstream stream) {
    bool served = true;
    if (masked) {
      if (swiglu) {
        served = ops::moe_grouped_gemm_swiglu_masked(at.get(), bt.get(), ot.get(), yt.get(), stream,
                                                     tuning);
      } else {
        ops::moe_grouped_gemm_masked(at.get(), bt.get(), ot.get(), yt.get(), stream, tuning);
      }
    } else if (swiglu) {
      served = ops::moe_grouped_gemm_swiglu(at.get(), bt.get(), ot.get(), yt.get(), stream, tuning);
    } else {
      ops::moe_grouped_gemm(at.get(), bt.get(), ot.get(), yt.get(), stream, tuning);
    }
    if (!served) {
      fail(KJIT_ERROR_UNSUPPORTED, "moe_grouped_gemm: the SwiGLU epilogue did not serve the call");
    }
  };
  // The active experts' weights are read once; a and out once.
  c.bytes = static_cast<double>((rows * k + active * n * k + rows * out_n) * es);
  c.flops = 2.0 * static_cast<double>(rows) * n * k;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms_naming_kernel(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(static_cast<size_t>(call_rows * out_n) * es);
    y.download(yh.data(), yh.size());
    // b_row: the output's row of b; swiglu: its gate row, then its up row.
    std::vector<double> a_row(static_cast<size_t>(k)), b_row(static_cast<size_t>(2 * k));
    for (const auto& pick : gemm_check_picks(rows, out_n, k, rng)) {
      // The routed row's expert, then its row of a / out in the call's layout.
      const int64_t e = g.expert_of(pick.first), j = pick.second, r = g.call_row(pick.first);
      for (int64_t i = 0; i < k; ++i) {
        a_row[i] = ref::load_elem(in.host.data() + a_at, static_cast<size_t>(r * k + i), dtype);
        for (int64_t h = 0; h < (swiglu ? 2 : 1); ++h) {
          b_row[h * k + i] = ref::load_elem(
              in.host.data() + b_at, static_cast<size_t>((e * n + h * out_n + j) * k + i), dtype);
        }
      }
      if (swiglu) {
        const ref::MoeValues v =
            ref::moe_swiglu_act(a_row.data(), b_row.data(), k, 1, 0.0, ref::unit_roundoff(dtype));
        chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * out_n + j), dtype), v.v[0],
                v.err[0]);
        continue;
      }
      double sum_abs = 0.0;
      const double want =
          ref::gemm_element(a_row.data(), b_row.data(), k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * n + j), dtype), want,
              ref::gemm_tolerance(dtype, want, sum_abs, k));
    }
  }
  return report(c, chk, first_ms, opts);
}

// The whole layer: softmax routing (renormalized, as Mixtral and Qwen3), permutation, the gate_up
// GEMM with silu_and_mul, the down GEMM and finalize, one kjit_moe_forward call.
int bench_moe_forward(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.count("dtype") != 0 ? args.at("dtype") : "bf16";
  const int64_t experts = ops::positive_int_arg(args, "experts", moe::kMoeMaxExperts);
  const int64_t top_k = ops::positive_int_arg(args, "top_k", moe::kMoeMaxTopK);
  const int64_t tokens = ops::positive_int_arg(args, "tokens", 1 << 20);
  const int64_t hidden = ops::positive_int_arg(args, "hidden", 1 << 16);
  const int64_t inter = ops::positive_int_arg(args, "inter", 1 << 16);
  const std::string routing = args.count("routing") != 0 ? args.at("routing") : "even";
  if (dtype != "bf16" && dtype != "fp16") throw UsageError("moe_forward: dtype is bf16 or fp16");
  if (routing != "even" && routing != "skew") {
    throw UsageError("moe_forward: routing is even or skew");
  }
  if (top_k > experts) throw UsageError("moe_forward: top_k exceeds experts");
  check_gpu();
  const size_t es = ref::elem_size(dtype);
  const ops::DType dt = ops::dtype_from_name(dtype);
  std::mt19937_64 rng(std::random_device{}());
  const int64_t pairs = tokens * top_k;
  const ops::MoeForwardLayout layout =
      ops::moe_forward_layout(tokens, experts, top_k, hidden, inter, dt);

  Packed in;
  const size_t x_at = in.add(static_cast<size_t>(tokens * hidden) * es);
  const size_t l_at = in.add(static_cast<size_t>(tokens * experts) * 4);
  const size_t w13_at = in.add(static_cast<size_t>(experts * 2 * inter * hidden) * es);
  const size_t w2_at = in.add(static_cast<size_t>(experts * hidden * inter) * es);
  fill_uniform(in.host.data() + x_at, static_cast<size_t>(tokens * hidden), dtype, rng, -1.0, 1.0);
  std::vector<double> logits(static_cast<size_t>(tokens * experts));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) {
      double v = u(rng) + (routing == "skew" && e == 0 && t % 10 != 9 ? 8.0 : 0.0);
      ref::store_elem(in.host.data() + l_at, static_cast<size_t>(t * experts + e), v, "fp32");
      logits[static_cast<size_t>(t * experts + e)] = v;
    }
  }
  const double s13 = 2.0 / std::sqrt(static_cast<double>(hidden));
  const double s2 = 2.0 / std::sqrt(static_cast<double>(inter));
  fill_uniform(in.host.data() + w13_at, static_cast<size_t>(experts * 2 * inter * hidden), dtype,
               rng, -s13, s13);
  fill_uniform(in.host.data() + w2_at, static_cast<size_t>(experts * hidden * inter), dtype, rng,
               -s2, s2);
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(tokens * hidden) * es);
  y.fill(0xFF);
  test::DeviceBuffer ws(layout.bytes);
  const DLDataType ddt = test::dl_dtype(dtype);
  auto xt = test::make_tensor(in.at(x_at), {tokens, hidden}, ddt);
  auto lt = test::make_tensor(in.at(l_at), {tokens, experts}, test::dl_dtype("fp32"));
  auto w13t = test::make_tensor(in.at(w13_at), {experts, 2 * inter, hidden}, ddt);
  auto w2t = test::make_tensor(in.at(w2_at), {experts, hidden, inter}, ddt);
  auto wst =
      test::make_tensor(ws.get(), {static_cast<int64_t>(layout.bytes)}, DLDataType{kDLUInt, 8, 1});
  auto yt = test::make_tensor(y.get(), {tokens, hidden}, ddt);
  kjit_moe_route_options route;
  kjit_moe_route_options_init(&route);
  route.renormalize = 1;

  BenchCase c;
  c.op = "moe_forward";
  c.dtype = dtype;
  c.launch = [&](CUstream stream) {
    ops::moe_forward(xt.get(), lt.get(), nullptr, w13t.get(), w2t.get(), nullptr, wst.get(),
                     yt.get(), static_cast<int>(top_k), route, stream);
  };
  const double first_ms = first_call_ms(c);
  // The routing the call chose, from its workspace: the active experts set the weight bytes.
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  std::vector<float> weights(static_cast<size_t>(pairs));
  ws.download(ids.data(), ids.size() * 4, layout.topk_ids);
  ws.download(weights.data(), weights.size() * 4, layout.topk_weights);
  const std::set<int32_t> active(ids.begin(), ids.end());
  const ops::MoeGemmConfig gate_up =
      ops::select_moe_gemm(dt, dt, pairs, pairs / experts, 2 * inter, hidden, experts,
                           ops::gemm_target(0, (hidden * static_cast<int64_t>(es)) % 16 == 0));
  c.uri = ops::moe_gemm_spec(gate_up).uri;
  c.shape = {{"experts", experts},
             {"top_k", top_k},
             {"tokens", tokens},
             {"hidden", hidden},
             {"inter", inter},
             {"routing", routing},
             {"active_experts", static_cast<int64_t>(active.size())}};
  c.label = fmt::format("moe_forward {} e={} top{} tokens={} hidden={} inter={} {} (gate_up {})",
                        dtype, experts, top_k, tokens, hidden, inter, routing,
                        ops::gemm_path_name(gate_up.path));
  // x, logits and out once, the active experts' weights once, and the rows between the steps
  // (permuted x, silu(gate) * up and the experts' out, each written and read once).
  c.bytes = static_cast<double>((2 * tokens * hidden +
                                 static_cast<int64_t>(active.size()) * 3 * inter * hidden +
                                 2 * pairs * (2 * hidden + inter)) *
                                    static_cast<int64_t>(es) +
                                tokens * experts * 4);
  c.flops = 6.0 * static_cast<double>(pairs) * static_cast<double>(inter) * hidden;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(static_cast<size_t>(tokens * hidden) * es);
    y.download(yh.data(), yh.size());
    // A few whole tokens (each a top_k of full expert FFNs in fp64), through the call's own
    // routing, whose weights are checked against the reference's scores first.
    std::set<int64_t> picks = {0, tokens - 1};
    std::uniform_int_distribution<int64_t> pick(0, tokens - 1);
    while (static_cast<int64_t>(picks.size()) < std::min<int64_t>(tokens, 6))
      picks.insert(pick(rng));
    ref::MoeRouteOptions ro;
    ro.renormalize = true;
    const double ur = ref::unit_roundoff(dtype);
    std::vector<double> x(static_cast<size_t>(hidden)),
        w13(static_cast<size_t>(2 * inter * hidden)), w2(static_cast<size_t>(hidden * inter));
    for (int64_t t : picks) {
      const ref::MoeRouteToken r =
          ref::moe_route_token(&logits[static_cast<size_t>(t * experts)], nullptr,
                               static_cast<int>(experts), static_cast<int>(top_k), ro);
      double sum = 0.0;
      for (int64_t j = 0; j < top_k; ++j) sum += r.score[ids[static_cast<size_t>(t * top_k + j)]];
      for (int64_t i = 0; i < hidden; ++i) {
        x[i] = ref::load_elem(in.host.data() + x_at, static_cast<size_t>(t * hidden + i), dtype);
      }
      std::vector<double> want(static_cast<size_t>(hidden), 0.0), err(want.size(), 0.0),
          mag(want.size(), 0.0);
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = ids[static_cast<size_t>(t * top_k + j)];
        const double w = weights[static_cast<size_t>(t * top_k + j)];
        chk.add(w, r.score[e] / sum, 1e-5);
        for (size_t i = 0; i < w13.size(); ++i) {
          w13[i] = ref::load_elem(in.host.data() + w13_at, e * w13.size() + i, dtype);
        }
        for (size_t i = 0; i < w2.size(); ++i) {
          w2[i] = ref::load_elem(in.host.data() + w2_at, e * w2.size() + i, dtype);
        }
        const ref::MoeValues v =
            ref::moe_swiglu_expert(x.data(), w13.data(), w2.data(), hidden, inter, ur, ur);
        for (int64_t i = 0; i < hidden; ++i) {
          want[i] += w * v.v[i];
          err[i] += std::fabs(w) * v.err[i];
          mag[i] += std::fabs(w * v.v[i]);
        }
      }
      for (int64_t i = 0; i < hidden; ++i) {
        chk.add(ref::load_elem(yh.data(), static_cast<size_t>(t * hidden + i), dtype), want[i],
                err[i] + ur * (std::fabs(want[i]) + err[i]) + 0x1p-22 * (top_k + 1) * mag[i]);
      }
    }
  }
  return report(c, chk, first_ms, opts);
}

// The fp8 block-scaled grouped GEMM (kjit_moe_grouped_gemm_fp8): random e4m3 a and b, a's
// scales per 1 x 128 group, b's per 128 x 128 block of each expert (DeepSeek-V3's layout).
int bench_moe_grouped_gemm_fp8(const ops::SetArgs& args, const BenchOptions& opts) {
  const GroupedBench g = grouped_bench("moe_grouped_gemm_fp8", args);
  const int64_t experts = g.experts, n = g.n, k = g.k, rows = g.rows, active = g.active;
  const int64_t out_n = g.out_n();
  const bool swiglu = g.swiglu;
  if (swiglu && n % 128 != 0) {
    throw UsageError("moe_grouped_gemm_fp8: swiglu takes n = 2 I with I a multiple of 64");
  }
  check_gpu();
  const int64_t chunks = (k + 127) / 128, n_blocks = (n + 127) / 128;
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int32_t>& offsets = g.offsets;

  Packed in;
  const size_t a_at = in.add(static_cast<size_t>(rows * k));
  const size_t b_at = in.add(static_cast<size_t>(experts * n * k));
  const size_t sa_at = in.add(static_cast<size_t>(rows * chunks) * 4);
  const size_t sb_at = in.add(static_cast<size_t>(experts * n_blocks * chunks) * 4);
  const size_t off_at = add_int32s(in, offsets);
  // Codes of magnitude 2^-3 .. 2^3 (exponent field 4 .. 10, never NaN) from 8 random bytes a
  // draw (DeepSeek-V3's 7.5 GB of weights fill in seconds), scales 2^-4 .. 2^-2.
  const size_t codes = static_cast<size_t>(rows * k + experts * n * k);
  for (size_t i = 0; i < codes; i += 8) {
    uint64_t r = rng();
    for (size_t j = i; j < std::min(i + 8, codes); ++j, r >>= 8) {
      const unsigned byte = static_cast<unsigned>(r & 0xff);
      in.host[a_at + j] = static_cast<unsigned char>((byte & 0x87) | (4 + (byte >> 3) % 7) << 3);
    }
  }
  std::uniform_real_distribution<float> su(-4.0f, -2.0f);
  auto* sa = reinterpret_cast<float*>(in.host.data() + sa_at);
  auto* sb = reinterpret_cast<float*>(in.host.data() + sb_at);
  for (int64_t i = 0; i < rows * chunks; ++i) sa[i] = std::exp2(su(rng));
  for (int64_t i = 0; i < experts * n_blocks * chunks; ++i) sb[i] = std::exp2(su(rng));
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(rows * out_n) * 2);
  y.fill(0xFF);
  const DLDataType f8 = test::dl_dtype("e4m3"), f32 = test::dl_dtype("fp32");
  auto at = test::make_tensor(in.at(a_at), {rows, k}, f8);
  auto bt = test::make_tensor(in.at(b_at), {experts, n, k}, f8);
  auto sat = test::make_tensor(in.at(sa_at), {rows, chunks}, f32);
  auto sbt = test::make_tensor(in.at(sb_at), {experts, n_blocks, chunks}, f32);
  auto ot = test::make_tensor(in.at(off_at), {experts + 1}, test::dl_dtype("int32"));
  auto yt = test::make_tensor(y.get(), {rows, out_n}, test::dl_dtype("bf16"));
  ops::MoeGemmFp8Config cfg =
      ops::select_moe_gemm_fp8(ops::DType::kBF16, rows, n, k, experts, swiglu,
                               ops::gemm_target(0, k % 16 == 0), bench_decode_rows(g));
  ops::moe_gemm_fp8_tune(cfg, g.tuning, rows / experts, n, k, swiglu);
  const ops::MoeGemmTuning tuning = g.tuning;

  BenchCase c;
  c.op = "moe_grouped_gemm_fp8";
  c.uri = ops::moe_gemm_fp8_spec(cfg).uri;
  c.dtype = "e4m3";
  c.shape = {
      {"experts", experts},   {"top_k", g.top_k},        {"tokens", g.tokens}, {"n", n}, {"k", k},
      {"routing", g.routing}, {"active_experts", active}};
  if (swiglu) c.shape["swiglu"] = 1;
  c.shape["path"] = cfg.tokens != 0 ? "decode" : "sm90";
  if (g.tuning.split != 0) c.shape["split"] = g.tuning.split;
  if (cfg.persistent != 0) c.shape["persistent"] = 1;
  if (cfg.persistent == 2) c.shape["pair"] = 1;
  if (cfg.bn != 128) c.shape["bn"] = cfg.bn;
  c.label = fmt::format("moe_grouped_gemm_fp8 e={} top{} tokens={} n={} k={} {}{} ({})", experts,
                        g.top_k, g.tokens, n, k, g.routing, swiglu ? " swiglu" : "",
                        cfg.tokens != 0       ? fmt::format("decode {} tokens", cfg.tokens)
                        : cfg.persistent == 2 ? std::string("sm90 persistent pairs")
                        : cfg.persistent != 0 ? std::string("sm90 persistent")
                                              : std::string("sm90"));
  c.launch = [&](CUstream stream) {
    if (!swiglu) {
      ops::moe_grouped_gemm_fp8(at.get(), bt.get(), sat.get(), sbt.get(), ot.get(), yt.get(),
                                stream, tuning);
    } else if (!ops::moe_grouped_gemm_fp8_swiglu(at.get(), bt.get(), sat.get(), sbt.get(), ot.get(),
                                                 yt.get(), stream, tuning)) {
      fail(KJIT_ERROR_UNSUPPORTED, "moe_grouped_gemm_fp8: the SwiGLU epilogue did not serve");
    }
  };
  // The active experts' weights (and their scales) are read once; a, its scales and out once.
  c.bytes = static_cast<double>(rows * k + active * n * k + rows * chunks * 4 +
                                active * n_blocks * chunks * 4 + rows * out_n * 2);
  c.flops = 2.0 * static_cast<double>(rows) * n * k;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms_naming_kernel(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(static_cast<size_t>(rows * out_n) * 2);
    y.download(yh.data(), yh.size());
    const auto* a = reinterpret_cast<const uint8_t*>(in.host.data() + a_at);
    const auto* b = reinterpret_cast<const uint8_t*>(in.host.data() + b_at);
    for (const auto& pick : gemm_check_picks(rows, out_n, k, rng)) {
      // Named, not a structured binding: C++17 lambdas cannot capture bindings (clang refuses).
      const int64_t r = pick.first, j = pick.second;
      const int64_t e = g.expert_of(r);
      // Output j's row of b (swiglu: its gate row, then its up row I further).
      const auto element = [&](int64_t brow, const std::string& od) {
        return ref::moe_gemm_fp8_element(a + r * k, sa + r * chunks, b + (e * n + brow) * k,
                                         sb + (e * n_blocks + brow / 128) * chunks, k, od);
      };
      const ref::Fp8Element want =
          swiglu ? ref::moe_swiglu_of(element(j, "fp32"), element(out_n + j, "fp32"),
                                      ref::unit_roundoff("bf16"))
                 : element(j, "bf16");
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * out_n + j), "bf16"), want.want,
              want.bound);
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_moe_benches(std::vector<BenchEntry>& out) {
  out.push_back(
      {"moe_grouped_gemm",
       {"experts", "top_k", "tokens", "n", "k"},
       {"dtype", "routing", "swiglu", "path", "split", "layout", "persistent", "pair", "bn"},
       bench_moe_grouped_gemm,
       "experts, top_k, tokens, n, k (b is [experts, n, k]); dtype (bf16|fp16, default "
       "bf16), routing (even|skew: 90% of first slots to expert 0; default even), swiglu "
       "(0|1: b is w13 with n = 2 I, out silu(gate) * up [rows, I]; default 0), path "
       "(auto|decode|sm90: the weight-streaming decode kernel or the 128-row tiles "
       "forced, one block per item; default auto), split (the decode kernel's K split, 1 "
       ".. 8), layout "
       "(contiguous|masked: [experts, tokens, k] with device counts, the CUDA-graph "
       "decode form; default contiguous), persistent (1: the 128-row tile kernel's "
       "persistent form forced, min(items, SMs) blocks, no pairs; the library's choice on "
       "the tile path, in pairs where ops::moe_pairs_pay), pair (1: that form in clusters "
       "of two blocks sharing a's rows, forced), bn "
       "(128|256: the tile kernel's width; default the selection's)"});
  out.push_back({"moe_forward",
                 {"experts", "top_k", "tokens", "hidden", "inter"},
                 {"dtype", "routing"},
                 bench_moe_forward,
                 "experts, top_k, tokens, hidden, inter (w13 [experts, 2 inter, hidden], w2 "
                 "[experts, hidden, inter]); dtype (bf16|fp16, default bf16), routing (even|skew: "
                 "logits favour expert 0 for 90% of the tokens; default even)"});
  out.push_back(
      {"moe_grouped_gemm_fp8",
       {"experts", "top_k", "tokens", "n", "k"},
       {"routing", "swiglu", "path", "split", "persistent", "pair", "bn"},
       bench_moe_grouped_gemm_fp8,
       "experts, top_k, tokens, n, k (e4m3 b [experts, n, k] with 128 x 128 block "
       "scales, a with 1 x 128 group scales, bf16 out; sm_90a); routing (even|skew; "
       "default even), swiglu (0|1: b is w13 with n = 2 I, I a multiple of 64; default "
       "0), path (auto|decode|sm90: sm90 forces the 128-row tiles, one block per item; "
       "default auto), split (the decode kernel's K split, 1 .. 8), persistent (1: the "
       "tile kernel's persistent form forced, no pairs; the library's choice on the tile path, "
       "in pairs where ops::moe_pairs_pay), pair (1: that form in clusters of two blocks "
       "sharing a's rows, forced), bn (128|256: "
       "the tile kernel's width; 256 needs I a multiple of 128 with swiglu)"});
}

}  // namespace kjit::cli
