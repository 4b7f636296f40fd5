// kjit_moe_forward: the whole MoE layer as the family's ops in sequence (route, permute, gate_up
// grouped GEMM, silu_and_mul, down grouped GEMM, finalize) over one caller-given workspace. Each
// step is an op's own function on views of the workspace (the gate_up GEMM in its SwiGLU form
// where the wgmma path serves it, so silu_and_mul costs no pass of its own); this file only checks
// the layer's contract before the first launch and lays out the workspace.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "gemm/gemm_fp8_params.h"
#include "moe/moe_params.h"
#include "ops/activation/activation.hpp"
#include "ops/attention/attention_common.hpp"
#include "ops/gemm/gemm.hpp"
#include "ops/moe/moe.hpp"
#include "ops/gemm/gemm_fp8.hpp"
#include "ops/moe/moe_checks.hpp"
#include "ops/quant/fused_quant_fp8.hpp"
#include "ops/quant/quant_fp8.hpp"
#include "ops/tensor.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using moe_detail::matrix_2d;

constexpr size_t kRegionAlign = 256;  // every region starts TMA-ready (16 bytes) and then some

// a * b for non-negative a, b; throws on overflow of int64.
int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overflows", what);
  }
  return r;
}

// A DLTensor over `rows` x `cols` (cols < 0: a 1-D [rows]) elements of `dtype` at `offset` bytes
// into the workspace, compact. Not copyable: the tensor points at its own shape.
struct WorkspaceView {
  int64_t shape[2] = {0, 0};
  DLTensor t{};
  WorkspaceView(const RowMatrix& ws, size_t offset, DLDataType dtype, int64_t rows, int64_t cols) {
    shape[0] = rows;
    shape[1] = cols;
    t.data = static_cast<char*>(ws.data) + offset;
    t.device = DLDevice{kDLCUDA, ws.device};
    t.ndim = cols < 0 ? 1 : 2;
    t.dtype = dtype;
    t.shape = shape;
  }
  WorkspaceView(const WorkspaceView&) = delete;
  WorkspaceView& operator=(const WorkspaceView&) = delete;
};

constexpr DLDataType kInt32{kDLInt, 32, 1};
constexpr DLDataType kFloat32{kDLFloat, 32, 1};

// `t` as a compact [d0, d1, d2] of `dtype` (w13, w2: x's dtype, or e4m3 for fp8 experts).
RowMatrix weights_3d(const DLTensor* t, const char* name, DType dtype, int64_t d0, int64_t d1,
                     int64_t d2) {
  const RowMatrix m = as_row_matrix(t, name);
  if (t->ndim != 3 || t->shape[0] != d0 || t->shape[1] != d1 || t->shape[2] != d2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}, {}, {}]", name, d0, d1, d2);
  }
  if (m.dtype != dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}{}, not {}", name,
         dtype == DType::kE4M3 ? "" : "x's dtype ", dtype_name(dtype), dtype_name(m.dtype));
  }
  if (m.rows > 1 && m.row_stride != d2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be compact (row stride {}, {} columns)", name,
         m.row_stride, d2);
  }
  return m;
}

}  // namespace

MoeForwardLayout moe_forward_layout(int64_t tokens, int64_t experts, int64_t top_k, int64_t hidden,
                                    int64_t intermediate, DType dtype) {
  if (tokens < 0 || experts < 1 || hidden < 0 || intermediate < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tokens {}, experts {}, hidden {}, intermediate {} (experts >= 1, the rest >= 0)", tokens,
         experts, hidden, intermediate);
  }
  if (top_k < 1 || top_k > experts) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "top_k ({}) must be in 1 .. experts ({})", top_k, experts);
  }
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kE4M3) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "moe_forward: the experts are bf16 or fp16 (as x) or e4m3 (fp8 experts), not {}",
         dtype_name(dtype));
  }
  const bool fp8 = dtype == DType::kE4M3;
  const int64_t pairs = checked_mul(tokens, top_k, "tokens x top_k");
  if (pairs > INT32_MAX) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tokens x top_k must be below 2^31");
  }
  const int64_t es = 2;  // x's and the intermediates' bf16 / fp16 (also beside fp8 experts)
  MoeForwardLayout l;
  int64_t at = 0;
  auto region = [&](int64_t elems, int64_t elem_bytes) {
    const int64_t bytes = checked_mul(elems, elem_bytes, "the workspace");
    const int64_t start = at;
    if (bytes > INT64_MAX / 2 - at) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "the workspace overflows");
    }
    at += (bytes + int64_t{kRegionAlign} - 1) / int64_t{kRegionAlign} * int64_t{kRegionAlign};
    return static_cast<size_t>(start);
  };
  l.topk_ids = region(pairs, 4);
  l.topk_weights = region(pairs, 4);
  l.offsets = region(experts + 1, 4);
  l.permuted_to_src = region(pairs, 4);
  l.src_to_permuted = region(pairs, 4);
  l.rows = region(checked_mul(pairs, hidden, "pairs x hidden"), es);
  l.gate_up = region(
      checked_mul(pairs, checked_mul(2, intermediate, "2 intermediate"), "pairs x 2 intermediate"),
      es);
  l.act = region(checked_mul(pairs, intermediate, "pairs x intermediate"), es);
  if (fp8) {
    const int64_t chunk = gemm::kFp8ChunkK;
    l.rows_fp8 = region(checked_mul(pairs, hidden, "pairs x hidden"), 1);
    l.rows_scale = region(checked_mul(pairs, (hidden + chunk - 1) / chunk, "pairs x groups"), 4);
    l.act_fp8 = region(checked_mul(pairs, intermediate, "pairs x intermediate"), 1);
    l.act_scale =
        region(checked_mul(pairs, (intermediate + chunk - 1) / chunk, "pairs x groups"), 4);
  }
  l.bytes = static_cast<size_t>(at);
  return l;
}

namespace {

// The layer's arguments, validated against its contract (kjit.h): shapes, dtypes, devices, the
// workspace and who may overlap whom.
struct Layer {
  RowMatrix xm, lm, w13m, w2m, ym, sm, bm, ws, w13s, w2s;
  int64_t tokens = 0, hidden = 0, experts = 0, inter = 0, pairs = 0;
  MoeForwardLayout l;
};

// `weights`: x's dtype, or e4m3 with w13_scale / w2_scale (null otherwise).
Layer check_layer(const DLTensor* x, const DLTensor* router_logits, const DLTensor* bias,
                  const DLTensor* w13, const DLTensor* w2, const DLTensor* shared_out,
                  DLTensor* workspace, DLTensor* out, int top_k,
                  const kjit_moe_route_options& route, bool fp8, const DLTensor* w13_scale,
                  const DLTensor* w2_scale) {
  Layer g;
  g.xm = matrix_2d(x, "x");
  g.tokens = x->shape[0];
  g.hidden = x->shape[1];
  g.lm = matrix_2d(router_logits, "router_logits");
  if (router_logits->shape[0] != g.tokens) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "router_logits has {} rows but x has {} tokens",
         router_logits->shape[0], g.tokens);
  }
  g.experts = router_logits->shape[1];
  as_row_matrix(w13, "w13");  // checked before its shape is read
  if (w13->ndim != 3 || w13->shape[1] % 2 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "w13 must be [experts, 2 intermediate, hidden] (gate rows, then up rows)");
  }
  g.inter = w13->shape[1] / 2;
  const DType wdt = fp8 ? DType::kE4M3 : g.xm.dtype;
  g.w13m = weights_3d(w13, "w13", wdt, g.experts, 2 * g.inter, g.hidden);
  g.w2m = weights_3d(w2, "w2", wdt, g.experts, g.hidden, g.inter);
  if (fp8) {
    const int64_t chunk = gemm::kFp8ChunkK;
    const auto blocks = [&](int64_t v) { return (v + chunk - 1) / chunk; };
    g.w13s = scale_matrix(w13_scale, "w13_scale", g.xm.device, "x");
    moe_detail::check_shape(w13_scale, "w13_scale",
                            {g.experts, blocks(2 * g.inter), blocks(g.hidden)},
                            "[experts, ceil(2 intermediate / 128), ceil(hidden / 128)]");
    g.w2s = scale_matrix(w2_scale, "w2_scale", g.xm.device, "x");
    moe_detail::check_shape(w2_scale, "w2_scale", {g.experts, blocks(g.hidden), blocks(g.inter)},
                            "[experts, ceil(hidden / 128), ceil(intermediate / 128)]");
  }
  g.ym = matrix_2d(out, "out");
  if (out->shape[0] != g.tokens || out->shape[1] != g.hidden) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be x's shape [{}, {}]", g.tokens, g.hidden);
  }
  check_same_dtype(g.xm, "x", g.ym, "out");
  if (shared_out != nullptr) {
    g.sm = matrix_2d(shared_out, "shared_out");
    if (shared_out->shape[0] != g.tokens || shared_out->shape[1] != g.hidden) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "shared_out must be x's shape [{}, {}]", g.tokens,
           g.hidden);
    }
    check_same_dtype(g.xm, "x", g.sm, "shared_out");
    check_same_device(g.xm, "x", g.sm, "shared_out");
  }
  if (bias != nullptr) {
    g.bm = moe_detail::compact(bias, "bias", DType::kF32, -1, g.experts);
    check_same_device(g.xm, "x", g.bm, "bias");
  }
  for (const auto& [m, name] :
       {std::pair{&g.lm, "router_logits"}, {&g.w13m, "w13"}, {&g.w2m, "w2"}, {&g.ym, "out"}}) {
    check_same_device(g.xm, "x", *m, name);
  }
  if (top_k < 1 || top_k > moe::kMoeMaxTopK || top_k > g.experts) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "top_k ({}) must be in 1 .. min({}, experts = {})", top_k,
         moe::kMoeMaxTopK, g.experts);
  }
  check_moe_route_options(route, g.experts, top_k);
  if (fp8 && g.xm.dtype != DType::kBF16 && g.xm.dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_forward: x is bf16 or fp16, not {}", dtype_name(g.xm.dtype));
  }
  g.l = moe_forward_layout(g.tokens, g.experts, top_k, g.hidden, g.inter, wdt);
  // 1-D, then the decode / prefill runs' rules (any dtype, contiguous, 16-byte aligned).
  if (workspace != nullptr && workspace->ndim != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace must be 1-D (ndim {})", workspace->ndim);
  }
  const StridedView wsv =
      attention_detail::workspace_view(workspace, g.l.bytes, g.xm.device, "the call");
  // The bytes used, as int32 words (l.bytes is a multiple of kRegionAlign).
  g.ws.data = wsv.data;
  g.ws.rows = 1;
  g.ws.cols = wsv.shape[0];
  g.ws.row_stride = g.ws.cols;
  g.ws.dtype = DType::kI32;
  g.ws.device = g.xm.device;
  // out may be shared_out itself (finalize reads each element before writing it); out and the
  // workspace share no byte with anything else. Inputs may overlap each other (they are only
  // read).
  const std::initializer_list<std::pair<const RowMatrix*, const char*>> inputs = {
      {&g.xm, "x"},
      {&g.lm, "router_logits"},
      {bias != nullptr ? &g.bm : nullptr, "bias"},
      {&g.w13m, "w13"},
      {&g.w2m, "w2"},
      {fp8 ? &g.w13s : nullptr, "w13_scale"},
      {fp8 ? &g.w2s : nullptr, "w2_scale"}};
  for (const auto& [m, name] : inputs) {
    if (m == nullptr) continue;
    if (overlaps(g.ym, *m)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps {}", name);
    if (overlaps(g.ws, *m)) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace overlaps {}", name);
  }
  if (overlaps(g.ym, g.ws)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps workspace");
  if (shared_out != nullptr) {
    if (overlaps(g.ws, g.sm)) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace overlaps shared_out");
    if (partially_overlaps(g.ym, g.sm)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps shared_out");
    }
  }
  g.pairs = g.tokens * top_k;
  select_moe_route(g.lm.dtype, g.experts, top_k);
  return g;
}

// The workspace regions every layer uses.
struct LayerViews {
  WorkspaceView ids, weights, offsets, p2s, s2p, rows, gate_up, act;
  LayerViews(const Layer& g, DLDataType dt, int top_k)
      : ids(g.ws, g.l.topk_ids, kInt32, g.tokens, top_k),
        weights(g.ws, g.l.topk_weights, kFloat32, g.tokens, top_k),
        offsets(g.ws, g.l.offsets, kInt32, g.experts + 1, -1),
        p2s(g.ws, g.l.permuted_to_src, kInt32, g.pairs, -1),
        s2p(g.ws, g.l.src_to_permuted, kInt32, g.tokens, top_k),
        rows(g.ws, g.l.rows, dt, g.pairs, g.hidden),
        gate_up(g.ws, g.l.gate_up, dt, g.pairs, 2 * g.inter),
        act(g.ws, g.l.act, dt, g.pairs, g.inter) {}
};

// Route, permute x into v.rows, `experts(v)` (the experts' outputs into v.rows: the permuted x
// is read only by the gate_up GEMM), finalize.
template <class Experts>
void run_layer(const Layer& g, const DLTensor* x, const DLTensor* router_logits,
               const DLTensor* bias, const DLTensor* shared_out, DLTensor* out, int top_k,
               const kjit_moe_route_options& route, void* stream, Experts experts) {
  LayerViews v(g, x->dtype, top_k);
  moe_route(router_logits, bias, &v.ids.t, &v.weights.t, route, stream);
  moe_permute(x, &v.ids.t, &v.rows.t, &v.offsets.t, &v.p2s.t, &v.s2p.t, stream);
  experts(v);
  moe_finalize(&v.rows.t, &v.s2p.t, &v.weights.t, shared_out, out, stream);
}

}  // namespace

void moe_forward(const DLTensor* x, const DLTensor* router_logits, const DLTensor* bias,
                 const DLTensor* w13, const DLTensor* w2, const DLTensor* shared_out,
                 DLTensor* workspace, DLTensor* out, int top_k, const kjit_moe_route_options& route,
                 void* stream) {
  // The layer's contract first, so a bad argument fails before the first launch; the ops check
  // their own (routing options included) again on the views below.
  const Layer g = check_layer(x, router_logits, bias, w13, w2, shared_out, workspace, out, top_k,
                              route, false, nullptr, nullptr);
  // What the later steps could still reject as unsupported, before anything runs.
  const DType dt = g.xm.dtype;
  select_moe_gemm(dt, dt, g.pairs, 0, 2 * g.inter, g.hidden, g.experts, GemmTarget{});
  select_moe_gemm(dt, dt, g.pairs, 0, g.hidden, g.inter, g.experts, GemmTarget{});
  if (g.inter > 0) select_act_and_mul(Act::kSilu, dt, g.inter, 1);
  if (g.tokens == 0) return;  // after validation: a zero-size call is still checked
  run_layer(g, x, router_logits, bias, shared_out, out, top_k, route, stream, [&](LayerViews& v) {
    // silu_and_mul in the gate_up GEMM's epilogue where the wgmma path serves the call (no
    // [pairs, 2 I] round trip through memory); the GEMM then the activation kernel elsewhere.
    if (!moe_grouped_gemm_swiglu(&v.rows.t, w13, &v.offsets.t, &v.act.t, stream)) {
      moe_grouped_gemm(&v.rows.t, w13, &v.offsets.t, &v.gate_up.t, stream);
      act_and_mul(Act::kSilu, &v.gate_up.t, &v.act.t, stream);
    }
    moe_grouped_gemm(&v.act.t, w2, &v.offsets.t, &v.rows.t, stream);
  });
}

void moe_forward_fp8(const DLTensor* x, const DLTensor* router_logits, const DLTensor* bias,
                     const DLTensor* w13, const DLTensor* w13_scale, const DLTensor* w2,
                     const DLTensor* w2_scale, const DLTensor* shared_out, DLTensor* workspace,
                     DLTensor* out, int top_k, const kjit_moe_route_options& route, void* stream) {
  const Layer g = check_layer(x, router_logits, bias, w13, w2, shared_out, workspace, out, top_k,
                              route, true, w13_scale, w2_scale);
  const DType dt = g.xm.dtype;
  select_quant_fp8(dt, QuantScaling::kGroup, g.pairs, g.hidden);
  select_quant_fp8(dt, QuantScaling::kGroup, g.pairs, g.inter);
  check_silu_and_mul_quant_fp8(dt, g.pairs, g.inter);
  if (g.tokens == 0) return;  // after validation: a zero-size call is still checked
  // The fp8 GEMMs' device and operand rules (sm_90a, TMA-ready rows: the quantized rows in the
  // workspace are hidden and intermediate bytes long) before the first launch.
  const bool tma_ok =
      g.hidden % 16 == 0 && g.inter % 16 == 0 && tma_describable(g.w13m) && tma_describable(g.w2m);
  const GemmTarget target = gemm_target(g.xm.device, tma_ok);
  select_moe_gemm_fp8(dt, g.pairs, 2 * g.inter, g.hidden, g.experts, false, target);
  select_moe_gemm_fp8(dt, g.pairs, g.hidden, g.inter, g.experts, false, target);
  run_layer(g, x, router_logits, bias, shared_out, out, top_k, route, stream, [&](LayerViews& v) {
    constexpr DLDataType kE4m3{KJIT_DL_FLOAT8_E4M3FN, 8, 1};
    const int64_t chunk = gemm::kFp8ChunkK;
    WorkspaceView xq(g.ws, g.l.rows_fp8, kE4m3, g.pairs, g.hidden);
    WorkspaceView xs(g.ws, g.l.rows_scale, kFloat32, g.pairs, (g.hidden + chunk - 1) / chunk);
    WorkspaceView aq(g.ws, g.l.act_fp8, kE4m3, g.pairs, g.inter);
    WorkspaceView as(g.ws, g.l.act_scale, kFloat32, g.pairs, (g.inter + chunk - 1) / chunk);
    quant_fp8(&v.rows.t, &xq.t, &xs.t, KJIT_FP8_PER_GROUP_128, stream);
    // silu_and_mul in the gate_up GEMM's epilogue (gate and up kept in fp32), then the group
    // quantization of the activation; where the epilogue cannot serve (I not a multiple of 64),
    // the GEMM then silu_and_mul quantized in one kernel.
    if (moe_grouped_gemm_fp8_swiglu(&xq.t, w13, &xs.t, w13_scale, &v.offsets.t, &v.act.t, stream)) {
      quant_fp8(&v.act.t, &aq.t, &as.t, KJIT_FP8_PER_GROUP_128, stream);
    } else {
      moe_grouped_gemm_fp8(&xq.t, w13, &xs.t, w13_scale, &v.offsets.t, &v.gate_up.t, stream);
      silu_and_mul_quant_fp8(&v.gate_up.t, &aq.t, &as.t, stream);
    }
    moe_grouped_gemm_fp8(&aq.t, w2, &as.t, w2_scale, &v.offsets.t, &v.rows.t, stream);
  });
}

}  // namespace kjit::ops
