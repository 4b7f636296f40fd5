// kjit_moe_forward: the whole MoE layer as the family's ops in sequence (route, permute, gate_up
// grouped GEMM, silu_and_mul, down grouped GEMM, finalize) over one caller-given workspace. Each
// step is an op's own function on views of the workspace (the gate_up GEMM in its SwiGLU form
// where the wgmma path serves it, so silu_and_mul costs no pass of its own); this file only checks
// the layer's contract before the first launch and lays out the workspace.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "moe/moe_params.h"
#include "ops/activation/activation.hpp"
#include "ops/attention/attention_common.hpp"
#include "ops/gemm/gemm.hpp"
#include "ops/moe/moe.hpp"
#include "ops/moe/moe_checks.hpp"
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

// `t` as a compact [d0, d1, d2] of `dtype` (w13, w2).
RowMatrix weights_3d(const DLTensor* t, const char* name, DType dtype, int64_t d0, int64_t d1,
                     int64_t d2) {
  const RowMatrix m = as_row_matrix(t, name);
  if (t->ndim != 3 || t->shape[0] != d0 || t->shape[1] != d1 || t->shape[2] != d2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}, {}, {}]", name, d0, d1, d2);
  }
  if (m.dtype != dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be x's dtype {}, not {}", name, dtype_name(dtype),
         dtype_name(m.dtype));
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
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_forward: x is bf16 or fp16, not {}", dtype_name(dtype));
  }
  const int64_t pairs = checked_mul(tokens, top_k, "tokens x top_k");
  if (pairs > INT32_MAX) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tokens x top_k must be below 2^31");
  }
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
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
  l.bytes = static_cast<size_t>(at);
  return l;
}

void moe_forward(const DLTensor* x, const DLTensor* router_logits, const DLTensor* bias,
                 const DLTensor* w13, const DLTensor* w2, const DLTensor* shared_out,
                 DLTensor* workspace, DLTensor* out, int top_k, const kjit_moe_route_options& route,
                 void* stream) {
  // The layer's contract first, so a bad argument fails before the first launch; the ops check
  // their own (routing options included) again on the views below.
  const RowMatrix xm = matrix_2d(x, "x");
  const int64_t tokens = x->shape[0];
  const int64_t hidden = x->shape[1];
  const RowMatrix lm = matrix_2d(router_logits, "router_logits");
  if (router_logits->shape[0] != tokens) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "router_logits has {} rows but x has {} tokens",
         router_logits->shape[0], tokens);
  }
  const int64_t experts = router_logits->shape[1];
  as_row_matrix(w13, "w13");  // checked before its shape is read
  if (w13->ndim != 3 || w13->shape[1] % 2 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "w13 must be [experts, 2 intermediate, hidden] (gate rows, then up rows)");
  }
  const int64_t inter = w13->shape[1] / 2;
  const RowMatrix w13m = weights_3d(w13, "w13", xm.dtype, experts, 2 * inter, hidden);
  const RowMatrix w2m = weights_3d(w2, "w2", xm.dtype, experts, hidden, inter);
  const RowMatrix ym = matrix_2d(out, "out");
  if (out->shape[0] != tokens || out->shape[1] != hidden) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be x's shape [{}, {}]", tokens, hidden);
  }
  check_same_dtype(xm, "x", ym, "out");
  RowMatrix sm, bm;
  if (shared_out != nullptr) {
    sm = matrix_2d(shared_out, "shared_out");
    if (shared_out->shape[0] != tokens || shared_out->shape[1] != hidden) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "shared_out must be x's shape [{}, {}]", tokens, hidden);
    }
    check_same_dtype(xm, "x", sm, "shared_out");
    check_same_device(xm, "x", sm, "shared_out");
  }
  if (bias != nullptr) {
    bm = moe_detail::compact(bias, "bias", DType::kF32, -1, experts);
    check_same_device(xm, "x", bm, "bias");
  }
  for (const auto& [m, name] :
       {std::pair{&lm, "router_logits"}, {&w13m, "w13"}, {&w2m, "w2"}, {&ym, "out"}}) {
    check_same_device(xm, "x", *m, name);
  }
  if (top_k < 1 || top_k > moe::kMoeMaxTopK || top_k > experts) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "top_k ({}) must be in 1 .. min({}, experts = {})", top_k,
         moe::kMoeMaxTopK, experts);
  }
  check_moe_route_options(route, experts, top_k);
  const MoeForwardLayout l = moe_forward_layout(tokens, experts, top_k, hidden, inter, xm.dtype);
  // 1-D, then the decode / prefill runs' rules (any dtype, contiguous, 16-byte aligned).
  if (workspace != nullptr && workspace->ndim != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace must be 1-D (ndim {})", workspace->ndim);
  }
  const StridedView wsv =
      attention_detail::workspace_view(workspace, l.bytes, xm.device, "the call");
  RowMatrix ws;  // the bytes used, as int32 words (l.bytes is a multiple of kRegionAlign)
  ws.data = wsv.data;
  ws.rows = 1;
  ws.cols = wsv.shape[0];
  ws.row_stride = ws.cols;
  ws.dtype = DType::kI32;
  ws.device = xm.device;
  const RowMatrix* shared = shared_out != nullptr ? &sm : nullptr;
  const RowMatrix* biased = bias != nullptr ? &bm : nullptr;
  // out may be shared_out itself (finalize reads each element before writing it); out and the
  // workspace share no byte with anything else. Inputs may overlap each other (they are only
  // read).
  const std::initializer_list<std::pair<const RowMatrix*, const char*>> inputs = {
      {&xm, "x"},
      {&lm, "router_logits"},
      {bias != nullptr ? &bm : nullptr, "bias"},
      {&w13m, "w13"},
      {&w2m, "w2"}};
  for (const auto& [m, name] : inputs) {
    if (m == nullptr) continue;
    if (overlaps(ym, *m)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps {}", name);
    if (overlaps(ws, *m)) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace overlaps {}", name);
  }
  if (overlaps(ym, ws)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps workspace");
  if (shared_out != nullptr) {
    if (overlaps(ws, sm)) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace overlaps shared_out");
    if (partially_overlaps(ym, sm)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps shared_out");
  }
  // What the later steps could still reject as unsupported, before anything runs.
  const int64_t pairs = tokens * top_k;
  select_moe_route(lm.dtype, experts, top_k);
  select_moe_gemm(xm.dtype, xm.dtype, pairs, 0, 2 * inter, hidden, experts, GemmTarget{});
  select_moe_gemm(xm.dtype, xm.dtype, pairs, 0, hidden, inter, experts, GemmTarget{});
  if (inter > 0) select_act_and_mul(Act::kSilu, xm.dtype, inter, 1);
  if (tokens == 0) return;  // after validation: a zero-size call is still checked

  const DLDataType dt = x->dtype;
  WorkspaceView ids(ws, l.topk_ids, kInt32, tokens, top_k);
  WorkspaceView weights(ws, l.topk_weights, kFloat32, tokens, top_k);
  WorkspaceView offsets(ws, l.offsets, kInt32, experts + 1, -1);
  WorkspaceView p2s(ws, l.permuted_to_src, kInt32, pairs, -1);
  WorkspaceView s2p(ws, l.src_to_permuted, kInt32, tokens, top_k);
  WorkspaceView rows(ws, l.rows, dt, pairs, hidden);
  WorkspaceView gate_up(ws, l.gate_up, dt, pairs, 2 * inter);
  WorkspaceView act(ws, l.act, dt, pairs, inter);
  moe_route(router_logits, bias, &ids.t, &weights.t, route, stream);
  moe_permute(x, &ids.t, &rows.t, &offsets.t, &p2s.t, &s2p.t, stream);
  // silu_and_mul in the gate_up GEMM's epilogue where the wgmma path serves the call (no
  // [pairs, 2 I] round trip through memory); the GEMM then the activation kernel elsewhere.
  if (!moe_grouped_gemm_swiglu(&rows.t, w13, &offsets.t, &act.t, stream)) {
    moe_grouped_gemm(&rows.t, w13, &offsets.t, &gate_up.t, stream);
    act_and_mul(Act::kSilu, &gate_up.t, &act.t, stream);
  }
  // The permuted x is read only by the gate_up GEMM: its rows take the experts' outputs.
  moe_grouped_gemm(&act.t, w2, &offsets.t, &rows.t, stream);
  moe_finalize(&rows.t, &s2p.t, &weights.t, shared_out, out, stream);
}

}  // namespace kjit::ops
