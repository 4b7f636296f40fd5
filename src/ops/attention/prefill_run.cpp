// Prefill attention's runs: the tensors checked against the plan, the kernel parameters and the
// launch (device code: kernels/attention/prefill.cuh).
#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "attention/attention_params.h"
#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "cuda/tensor_map.hpp"
#include "ops/attention/attention_common.hpp"
#include "ops/attention/decode_internal.hpp"
#include "ops/attention/prefill.hpp"
#include "diag/trace_dump.hpp"
#include "ops/attention/prefill_desc.hpp"
#include "ops/tensor.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using attention::PrefillParams;
using attention_detail::check_device;
using attention_detail::int_vector;
using attention_detail::no_view;

// The run's tensors as views (absent ones: views of nothing).
struct PrefillViews {
  StridedView q, k, v, qo_indptr, indices, indptr, last, out, lse, ws;
  int slot_dim = 1,
      head_dim_index = 2;  // k / v slot and head dims (NHD; HND: 2 and 1; ragged: 0, 1)
};

// A tensor of the plan's dtype (kv: its k / v dtype, fp8 e4m3 in a kv_fp8 plan) on its device,
// `ndim`-D, rows `align`-byte aligned. An fp8 tensor exported as raw bytes (kDLUInt, 8 bits) is
// taken as e4m3, as decode takes it.
StridedView data_view(const PrefillPlanData& pl, const DLTensor* t, const char* name, int ndim,
                      const char* shape_text, int align, bool kv = false) {
  const DType want = kv && pl.cfg.kv_fp8 != 0 ? DType::kE4M3 : pl.cfg.dtype;
  DLTensor as_e4m3;
  if (t != nullptr && want == DType::kE4M3 && decode_detail::is_e4m3(t->dtype)) {
    as_e4m3 = *t;
    as_e4m3.dtype = DLDataType{KJIT_DL_FLOAT8_E4M3FN, 8, 1};
    t = &as_e4m3;
  }
  const StridedView v = as_strided_view(t, name);
  if (v.ndim != ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, got ndim {}", name, shape_text, v.ndim);
  }
  if (v.dtype != want) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but the plan's {}dtype is {}", name,
         dtype_name(v.dtype), kv ? "kv " : "", dtype_name(want));
  }
  check_device(v, name, pl.device);
  if (v.shape[ndim - 1] != pl.head_dim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has head_dim {} but the plan has {}", name,
         v.shape[ndim - 1], pl.head_dim);
  }
  if (v.numel() > 0 && view_alignment(v) < align) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "{} rows are only {}-byte aligned; prefill attention needs {} (strides multiples of {} "
         "elements)",
         name, view_alignment(v), align, align / static_cast<int>(dtype_size(want)));
  }
  return v;
}

void check_q_out(const PrefillPlanData& pl, PrefillViews& w, const DLTensor* q, DLTensor* out,
                 DLTensor* lse) {
  const char* shape = "[total_q, num_qo_heads, head_dim]";
  w.q = data_view(pl, q, "q", 3, shape, 16);
  w.out = data_view(pl, out, "out", 3, shape, 4);
  if (w.q.shape[1] != pl.num_qo_heads) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q has {} heads but the plan has {}", w.q.shape[1],
         pl.num_qo_heads);
  }
  if (w.out.shape[0] != w.q.shape[0] || w.out.shape[1] != w.q.shape[1]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out is [{}, {}, {}] but q is [{}, {}, {}]", w.out.shape[0],
         w.out.shape[1], w.out.shape[2], w.q.shape[0], w.q.shape[1], w.q.shape[2]);
  }
  if (w.q.shape[0] > INT_MAX / pl.group) {
    fail(KJIT_ERROR_UNSUPPORTED, "q has {} rows; prefill attention supports up to {} at group {}",
         w.q.shape[0], INT_MAX / pl.group, pl.group);
  }
  w.lse = no_view();
  if (lse != nullptr) {
    w.lse = as_strided_view(lse, "lse");
    if (w.lse.ndim != 2 || w.lse.shape[0] != w.q.shape[0] || w.lse.shape[1] != pl.num_qo_heads) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "lse must be [{}, {}] (total_q, num_qo_heads)",
           w.q.shape[0], pl.num_qo_heads);
    }
    if (w.lse.dtype != DType::kF32) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "lse must be fp32, got {}", dtype_name(w.lse.dtype));
    }
    check_device(w.lse, "lse", pl.device);
  }
}

void check_paged_kv(const PrefillPlanData& pl, PrefillViews& w, const DLTensor* k_cache,
                    const DLTensor* v_cache) {
  const bool nhd = pl.layout == KJIT_KV_LAYOUT_NHD;
  const char* shape = nhd ? "[num_pages, page_size, num_kv_heads, head_dim] (NHD)"
                          : "[num_pages, num_kv_heads, page_size, head_dim] (HND)";
  w.k = data_view(pl, k_cache, "k_cache", 4, shape, 16, true);
  w.v = data_view(pl, v_cache, "v_cache", 4, shape, 16, true);
  w.slot_dim = nhd ? 1 : 2;
  w.head_dim_index = nhd ? 2 : 1;
  for (const auto& [c, cn] : {std::pair{&w.k, "k_cache"}, std::pair{&w.v, "v_cache"}}) {
    if (c->shape[w.slot_dim] != pl.page_size || c->shape[w.head_dim_index] != pl.num_kv_heads) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "{} has page_size {} and {} kv heads ({} layout) but the plan has {} and {}", cn,
           c->shape[w.slot_dim], c->shape[w.head_dim_index], nhd ? "NHD" : "HND", pl.page_size,
           pl.num_kv_heads);
    }
  }
  if (w.v.shape[0] != w.k.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "v_cache has {} pages but k_cache has {}", w.v.shape[0],
         w.k.shape[0]);
  }
}

void check_ragged_kv(const PrefillPlanData& pl, PrefillViews& w, const DLTensor* k,
                     const DLTensor* v) {
  const char* shape = "[total_kv, num_kv_heads, head_dim]";
  w.k = data_view(pl, k, "k", 3, shape, 16, true);
  w.v = data_view(pl, v, "v", 3, shape, 16, true);
  w.slot_dim = 0;
  w.head_dim_index = 1;
  if (w.k.shape[1] != pl.num_kv_heads || w.v.shape[1] != pl.num_kv_heads) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k and v must have {} kv heads (the plan's), got {} and {}",
         pl.num_kv_heads, w.k.shape[1], w.v.shape[1]);
  }
  if (w.v.shape[0] != w.k.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "v has {} rows but k has {}", w.v.shape[0], w.k.shape[0]);
  }
}

void check_indptrs(const PrefillPlanData& pl, PrefillViews& w, const DLTensor* qo_indptr,
                   const DLTensor* kv_indptr) {
  w.qo_indptr = int_vector(qo_indptr, "qo_indptr", pl.device);
  w.indptr = int_vector(kv_indptr, "kv_indptr", pl.device);
  for (const auto& [v, name] : {std::pair{&w.qo_indptr, "qo_indptr"}, {&w.indptr, "kv_indptr"}}) {
    if (v->shape[0] != pl.batch + 1) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has {} elements but the plan has batch {} (+ 1)", name,
           v->shape[0], pl.batch);
    }
  }
}

void check_scales_and_overlap(const PrefillPlanData& pl, PrefillViews& w, DLTensor* workspace,
                              float k_scale, float v_scale) {
  attention_detail::check_scale(k_scale, "k_scale");
  attention_detail::check_scale(v_scale, "v_scale");
  w.ws = no_view();
  // A workspace handed over is checked even while the plan needs none (the Hopper kernel's
  // plans will), so a broken one is refused the same way for every plan.
  if (workspace != nullptr || pl.workspace_bytes > 0) {
    w.ws = attention_detail::workspace_view(workspace, pl.workspace_bytes, pl.device);
  }
  attention_detail::check_disjoint({{&w.q, "q"},
                                    {&w.k, "k"},
                                    {&w.v, "v"},
                                    {&w.qo_indptr, "qo_indptr"},
                                    {&w.indices, "kv_indices"},
                                    {&w.indptr, "kv_indptr"},
                                    {&w.last, "kv_last_page_len"}},
                                   {{&w.out, "out"}, {&w.lse, "lse"}, {&w.ws, "workspace"}});
}

PrefillParams prefill_params(const PrefillPlanData& pl, const PrefillViews& w, float k_scale,
                             float v_scale, bool paged) {
  const attention_detail::ScoreScales s =
      attention_detail::score_scales(pl.sm_scale, pl.soft_cap, k_scale, v_scale,
                                     pl.cfg.kv_fp8 != 0 ? attention_detail::kFp8KvUnscale : 1.0f);
  PrefillParams p{};
  p.q = w.q.data;
  p.k = w.k.data;
  p.v = w.v.data;
  p.qo_indptr = reinterpret_cast<const int*>(w.qo_indptr.data);
  p.kv_indptr = reinterpret_cast<const int*>(w.indptr.data);
  if (paged) {
    p.kv_indices = reinterpret_cast<const int*>(w.indices.data);
    p.kv_last_page_len = reinterpret_cast<const int*>(w.last.data);
    p.k_sp = w.k.strides[0];
    p.v_sp = w.v.strides[0];
    p.nnz_pages = static_cast<int>(w.indices.shape[0]);
  }
  p.out = w.out.data;
  p.lse = w.lse.numel() > 0 ? reinterpret_cast<float*>(w.lse.data) : nullptr;
  p.q_sn = w.q.strides[0];
  p.q_sh = w.q.strides[1];
  p.o_sn = w.out.strides[0];
  p.o_sh = w.out.strides[1];
  p.lse_sn = w.lse.strides[0];
  p.lse_sh = w.lse.strides[1];
  p.k_ss = w.k.strides[w.slot_dim];
  p.k_sh = w.k.strides[w.head_dim_index];
  p.v_ss = w.v.strides[w.slot_dim];
  p.v_sh = w.v.strides[w.head_dim_index];
  p.num_pages = w.k.shape[0];
  p.batch = pl.batch;
  p.total_q = static_cast<int>(w.q.shape[0]);
  p.group = pl.group;
  p.kv_heads = pl.num_kv_heads;
  p.head_inner = pl.head_inner;
  p.tiles = static_cast<int>(pl.tiles);  // the plan keeps tiles x kv heads <= INT_MAX
  p.page_size = pl.page_size;
  p.causal = pl.causal;
  p.window_left = pl.window_left;
  p.score_scale = s.score;
  p.cap_out = s.cap_out;
  p.v_scale = s.v;
  return p;
}

// The wgmma kernel's argument: K and V as TMA tensors where prefill_kv_tma_view describes both
// and the driver encodes them, else cp.async (kv_tma 0).
attention::PrefillSm90Params prefill_sm90_params(const PrefillPlanData& pl, const PrefillViews& w,
                                                 const PrefillParams& p) {
  attention::PrefillSm90Params a{};
  a.p = p;
  a.box_rows = prefill_box_rows(pl);
  a.slot_major = pl.page_size != 0 && pl.layout == KJIT_KV_LAYOUT_HND ? 1 : 0;
  cuda::TensorMapNd km, vm;
  // fp8 keys and values: the producer converts each tile (produce_fp8), so no TMA boxes.
  if (pl.cfg.kv_fp8 != 0 || a.box_rows == 0 ||
      !prefill_kv_tma_view(pl, w.k.data, w.k.shape, w.k.strides, km) ||
      !prefill_kv_tma_view(pl, w.v.data, w.v.shape, w.v.strides, vm)) {
    return a;
  }
  try {
    const CUtensorMap k_map = cuda::make_tensor_map(km), v_map = cuda::make_tensor_map(vm);
    std::memcpy(&a.k_map, &k_map, sizeof a.k_map);
    std::memcpy(&a.v_map, &v_map, sizeof a.v_map);
    a.kv_tma = 1;
  } catch (const Error&) {
    // A driver that refuses a map the rules allow: the cp.async path serves any tensor.
  }
  return a;
}

void launch_prefill(const PrefillPlanData& pl, const PrefillViews& w, const PrefillParams& p,
                    void* stream) {
  if (pl.batch == 0 || pl.tiles == 0 || w.q.shape[0] == 0) return;  // after validation
  if (trace::enabled()) {
    trace::batch_prefill({pl.cfg.dtype, pl.num_qo_heads, pl.num_kv_heads, pl.head_dim, pl.page_size,
                          pl.layout == KJIT_KV_LAYOUT_NHD, pl.causal != 0},
                         pl.batch, w.q.shape[0], w.indices.shape[0], w.k.shape[0],
                         pl.kv_total * std::max(pl.page_size, 1) / pl.batch);
  }
  const PrefillConfig& cfg = pl.cfg;
  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "prefill_attention", cfg, pl.device, [&] { return prefill_spec(cfg); });
  cuda::LaunchConfig lc;
  const int64_t ctas = pl.tiles * pl.num_kv_heads;  // plan: <= INT_MAX
  // The persistent form: a CTA an SM at most (one fits by shared memory), each walking the tiles.
  lc.grid_x = static_cast<unsigned>(
      cfg.persistent != 0 && pl.sms > 0 ? std::min<int64_t>(ctas, pl.sms) : ctas);
  lc.block_x = static_cast<unsigned>(
      cfg.kernel == PrefillKernel::kWgmmaSm90a ? attention::kPrefillSm90Threads : 32 * cfg.warps);
  lc.smem_bytes = static_cast<unsigned>(prefill_smem_bytes(cfg));
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(pl.device);
  attention_detail::prefer_max_shared(kernel.functions.at(0));
  if (cfg.kernel == PrefillKernel::kWgmmaSm90a) {
    const attention::PrefillSm90Params a = prefill_sm90_params(pl, w, p);
    cuda::launch(kernel.functions.at(0), lc, &a);
  } else {
    cuda::launch(kernel.functions.at(0), lc, &p);
  }
}

}  // namespace

int prefill_box_rows(const PrefillPlanData& pl) {
  const int ps = pl.page_size;
  if (ps == 0) return pl.cfg.kv_tile;
  // A box fills whole 8-row groups of the 128-byte swizzle and a key tile holds whole boxes.
  if (ps < 8 || (ps & (ps - 1)) != 0) return 0;
  return std::min(ps, pl.cfg.kv_tile);
}

bool prefill_kv_tma_view(const PrefillPlanData& pl, const void* data, const int64_t* shape,
                         const int64_t* strides, cuda::TensorMapNd& m) {
  const int box_rows = prefill_box_rows(pl);
  if (box_rows == 0) return false;
  const bool ragged = pl.page_size == 0, hnd = !ragged && pl.layout == KJIT_KV_LAYOUT_HND;
  const int slot_dim = ragged ? 0 : (hnd ? 2 : 1), head_dim_index = ragged ? 1 : (hnd ? 1 : 2);
  const int64_t slots = shape[slot_dim], heads = shape[head_dim_index];
  const int64_t pages = ragged ? 1 : shape[0];
  const int64_t x1 = hnd ? slots : heads, x2 = hnd ? heads : slots;
  int64_t s1 = (hnd ? strides[slot_dim] : strides[head_dim_index]) * 2;
  int64_t s2 = (hnd ? strides[head_dim_index] : strides[slot_dim]) * 2;
  // A dimension of one element has no meaningful stride in a view; TMA still wants a valid one.
  if (x1 == 1) s1 = int64_t{pl.head_dim} * 2;
  if (x2 == 1) s2 = s1 * x1;
  const int64_t s3 = pages == 1 ? s2 * x2 : strides[0] * 2;
  // A box no larger than the tensor (TMA leaves that case to the driver; kjit avoids it).
  if (heads < 1 || pages < 1 || slots < box_rows || s1 <= 0 || s2 <= 0 || s3 <= 0) return false;
  m = cuda::TensorMapNd{};
  m.ptr = data;
  m.elem_bytes = 2;
  m.rank = 4;
  m.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  m.dims[0] = static_cast<uint64_t>(pl.head_dim);
  m.dims[1] = static_cast<uint64_t>(x1);
  m.dims[2] = static_cast<uint64_t>(x2);
  m.dims[3] = static_cast<uint64_t>(pages);
  m.strides_bytes[0] = static_cast<uint64_t>(s1);
  m.strides_bytes[1] = static_cast<uint64_t>(s2);
  m.strides_bytes[2] = static_cast<uint64_t>(s3);
  m.box[0] = 64;
  m.box[1] = hnd ? static_cast<uint32_t>(box_rows) : 1;
  m.box[2] = hnd ? 1 : static_cast<uint32_t>(box_rows);
  m.box[3] = 1;
  return cuda::tensor_map_problem(m).empty();
}

void batch_prefill_run(const PrefillPlanData& pl, const DLTensor* q, const DLTensor* k_cache,
                       const DLTensor* v_cache, const DLTensor* qo_indptr,
                       const DLTensor* kv_indices, const DLTensor* kv_indptr,
                       const DLTensor* kv_last_page_len, DLTensor* workspace, DLTensor* out,
                       DLTensor* lse, float k_scale, float v_scale, void* stream) {
  if (pl.page_size == 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "the plan is for a ragged KV (page_size 0): run it with kjit_batch_prefill_ragged_run");
  }
  PrefillViews w;
  check_q_out(pl, w, q, out, lse);
  check_paged_kv(pl, w, k_cache, v_cache);
  check_indptrs(pl, w, qo_indptr, kv_indptr);
  w.indices = int_vector(kv_indices, "kv_indices", pl.device);
  w.last = int_vector(kv_last_page_len, "kv_last_page_len", pl.device);
  if (w.last.shape[0] != pl.batch) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_last_page_len has {} elements but the plan has batch {}",
         w.last.shape[0], pl.batch);
  }
  if (w.indices.shape[0] > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "kv_indices has more than {} entries", INT_MAX);
  }
  check_scales_and_overlap(pl, w, workspace, k_scale, v_scale);
  launch_prefill(pl, w, prefill_params(pl, w, k_scale, v_scale, true), stream);
}

void batch_prefill_ragged_run(const PrefillPlanData& pl, const DLTensor* q, const DLTensor* k,
                              const DLTensor* v, const DLTensor* qo_indptr,
                              const DLTensor* kv_indptr, DLTensor* workspace, DLTensor* out,
                              DLTensor* lse, float k_scale, float v_scale, void* stream) {
  if (pl.page_size != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "the plan is for a paged KV (page_size {}): run it with kjit_batch_prefill_run",
         pl.page_size);
  }
  PrefillViews w;
  check_q_out(pl, w, q, out, lse);
  check_ragged_kv(pl, w, k, v);
  check_indptrs(pl, w, qo_indptr, kv_indptr);
  w.indices = no_view();
  w.last = no_view();
  check_scales_and_overlap(pl, w, workspace, k_scale, v_scale);
  launch_prefill(pl, w, prefill_params(pl, w, k_scale, v_scale, false), stream);
}

}  // namespace kjit::ops
