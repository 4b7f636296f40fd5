// Decode attention's run: the tensors checked against the plan, the kernel parameters and the
// launches (device code: kernels/attention/decode.cuh).
#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>

#include "attention/attention_params.h"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "ops/attention/attention_common.hpp"
#include "ops/attention/attention_desc.hpp"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_internal.hpp"
#include "ops/tensor.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using attention::DecodeParams;
using attention_detail::check_device;
using attention_detail::check_scale;
using attention_detail::int_vector;
using attention_detail::no_view;
using attention_detail::prefer_max_shared;
using decode_detail::dl_name;
using decode_detail::is_e4m3;

// ---- Run-time argument checks -------------------------------------------------------------------

// A cache as a strided view. An fp8 cache is seen as 16-bit pairs (last dim and strides halved)
// so the generic view checks, alignment and overlap tests apply to its bytes; *elem_scale is then
// 2 (view strides times 2 = fp8 element strides).
StridedView cache_view(const DLTensor* t, const char* name, const DecodePlanData& pl,
                       int* elem_scale) {
  if (t == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
  const bool fp8 = pl.cfg.kv_fp8 != 0;
  const bool t_fp8 = is_e4m3(t->dtype);
  if (fp8 != t_fp8) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but the plan's kv dtype is {}", name,
         dl_name(t->dtype), dl_name(pl.kv_dtype));
  }
  *elem_scale = 1;
  if (!fp8) {
    StridedView v = as_strided_view(t, name);
    if (v.dtype != pl.cfg.q_dtype) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but the plan's kv dtype is {}", name,
           dtype_name(v.dtype), dl_name(pl.kv_dtype));
    }
    return v;
  }
  if (t->ndim != 4 || t->shape == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 4-D, got ndim {}", name, t->ndim);
  }
  if (t->shape[3] != pl.head_dim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has head_dim {} but the plan has {}", name, t->shape[3],
         pl.head_dim);
  }
  DLTensor pair = *t;
  int64_t shape[4], strides[4];
  for (int i = 0; i < 4; ++i) shape[i] = t->shape[i];
  shape[3] /= 2;
  if (t->strides != nullptr) {
    for (int i = 0; i < 4; ++i) {
      const int64_t s = t->strides[i];
      if (i == 3) {
        if (t->shape[3] > 1 && s != 1) {
          fail(KJIT_ERROR_INVALID_ARGUMENT, "{} last dim has stride {} (must be contiguous)", name,
               s);
        }
        strides[3] = 1;
      } else {
        if (t->shape[i] > 1 && s % 2 != 0) {
          fail(KJIT_ERROR_UNSUPPORTED,
               "{} dim {} has an odd stride {}: fp8 cache rows must be "
               "at least 4-byte aligned",
               name, i, s);
        }
        strides[i] = s / 2;
      }
    }
    pair.strides = strides;
  }
  pair.shape = shape;
  pair.dtype = DLDataType{kDLBfloat, 16, 1};
  if ((reinterpret_cast<uintptr_t>(t->data) + t->byte_offset) % 2 != 0) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "{} data is not 2-byte aligned: fp8 cache rows must be at least "
         "4-byte aligned",
         name);
  }
  *elem_scale = 2;
  return as_strided_view(&pair, name);
}

// The run's tensors as views, checked against the plan (absent ones: views of nothing).
struct DecodeViews {
  StridedView q, k, v, indices, indptr, last, out, lse, ws;
  int k_elem = 1, v_elem = 1;        // view strides times these are element strides (fp8 caches: 2)
  int slot_dim = 1, head_index = 2;  // the caches' slot and head dims (NHD; HND: 2 and 1)
};

StridedView check_q(const DecodePlanData& pl, const DLTensor* q) {
  const int64_t batch = pl.batch, qo = pl.num_qo_heads, hd = pl.head_dim;
  const StridedView qv = as_strided_view(q, "q");
  if (qv.ndim != 3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q must be [batch, num_qo_heads, head_dim], got ndim {}",
         qv.ndim);
  }
  if (qv.dtype != pl.cfg.q_dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q is {} but the plan's q dtype is {}", dtype_name(qv.dtype),
         dtype_name(pl.cfg.q_dtype));
  }
  check_device(qv, "q", pl.device);
  if (qv.shape[0] != batch || qv.shape[1] != qo || qv.shape[2] != hd) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q is [{}, {}, {}] but the plan is for [{}, {}, {}]",
         qv.shape[0], qv.shape[1], qv.shape[2], batch, qo, hd);
  }
  return qv;
}

void check_caches(const DecodePlanData& pl, DecodeViews& w, const DLTensor* k_cache,
                  const DLTensor* v_cache) {
  const int64_t kvh = pl.num_kv_heads, hd = pl.head_dim;
  const bool nhd = pl.layout == KJIT_KV_LAYOUT_NHD;
  w.k = cache_view(k_cache, "k_cache", pl, &w.k_elem);
  w.v = cache_view(v_cache, "v_cache", pl, &w.v_elem);
  w.slot_dim = nhd ? 1 : 2;
  w.head_index = nhd ? 2 : 1;
  for (const auto& [c, cn] : {std::pair{&w.k, "k_cache"}, std::pair{&w.v, "v_cache"}}) {
    if (c->ndim != 4) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, got ndim {}", cn,
           nhd ? "[num_pages, page_size, num_kv_heads, head_dim] (NHD)"
               : "[num_pages, num_kv_heads, page_size, head_dim] (HND)",
           c->ndim);
    }
    check_device(*c, cn, pl.device);
    const int64_t c_hd = c->shape[3] * (c == &w.k ? w.k_elem : w.v_elem);
    if (c->shape[w.slot_dim] != pl.page_size || c->shape[w.head_index] != kvh || c_hd != hd) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "{} has page_size {}, {} kv heads of {} ({} layout) but the plan has {}, {} of {}", cn,
           c->shape[w.slot_dim], c->shape[w.head_index], c_hd, nhd ? "NHD" : "HND", pl.page_size,
           kvh, hd);
    }
  }
  if (w.v.shape[0] != w.k.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "v_cache has {} pages but k_cache has {}", w.v.shape[0],
         w.k.shape[0]);
  }
}

void check_page_table(const DecodePlanData& pl, DecodeViews& w, const DLTensor* kv_indices,
                      const DLTensor* kv_indptr, const DLTensor* kv_last_page_len) {
  const int64_t batch = pl.batch;
  const int dev = pl.device;
  w.indices = int_vector(kv_indices, "kv_indices", dev);
  w.indptr = int_vector(kv_indptr, "kv_indptr", dev);
  w.last = int_vector(kv_last_page_len, "kv_last_page_len", dev);
  if (w.indptr.shape[0] != batch + 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr has {} elements but the plan has batch {} (+ 1)",
         w.indptr.shape[0], batch);
  }
  if (w.last.shape[0] != batch) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_last_page_len has {} elements but the plan has batch {}",
         w.last.shape[0], batch);
  }
  if (w.indices.shape[0] > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "kv_indices has more than {} entries", INT_MAX);
  }
}

void check_outputs(const DecodePlanData& pl, DecodeViews& w, DLTensor* out, DLTensor* lse,
                   DLTensor* workspace) {
  const int64_t batch = pl.batch, qo = pl.num_qo_heads, hd = pl.head_dim;
  const int dev = pl.device;
  w.out = as_strided_view(out, "out");
  if (w.out.ndim != 3 || w.out.shape[0] != batch || w.out.shape[1] != qo || w.out.shape[2] != hd) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be [{}, {}, {}] like q", batch, qo, hd);
  }
  if (w.out.dtype != w.q.dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out is {} but q is {}", dtype_name(w.out.dtype),
         dtype_name(w.q.dtype));
  }
  check_device(w.out, "out", dev);
  w.lse = no_view();
  if (lse != nullptr) {
    w.lse = as_strided_view(lse, "lse");
    if (w.lse.ndim != 2 || w.lse.shape[0] != batch || w.lse.shape[1] != qo) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "lse must be [{}, {}] (batch, num_qo_heads)", batch, qo);
    }
    if (w.lse.dtype != DType::kF32) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "lse must be fp32, got {}", dtype_name(w.lse.dtype));
    }
    check_device(w.lse, "lse", dev);
  }
  w.ws = no_view();
  if (pl.workspace_bytes > 0)
    w.ws = attention_detail::workspace_view(workspace, pl.workspace_bytes, pl.device);
}

void check_no_overlap(const DecodeViews& w) {
  attention_detail::check_disjoint({{&w.q, "q"},
                                    {&w.k, "k_cache"},
                                    {&w.v, "v_cache"},
                                    {&w.indices, "kv_indices"},
                                    {&w.indptr, "kv_indptr"},
                                    {&w.last, "kv_last_page_len"}},
                                   {{&w.out, "out"}, {&w.lse, "lse"}, {&w.ws, "workspace"}});
}

using DecodeScales = attention_detail::ScoreScales;

DecodeScales run_scales(const DecodePlanData& pl, float k_scale, float v_scale) {
  return attention_detail::score_scales(pl.sm_scale, pl.soft_cap, k_scale, v_scale,
                                        pl.cfg.kv_fp8 ? attention_detail::kFp8KvUnscale : 1.0f);
}

// The variant the run compiles: the plan's, with the copy width the rows' alignment allows and
// 64-bit lookups for caches past 4 GB.
DecodeConfig run_config(const DecodePlanData& pl, const DecodeViews& w) {
  const int64_t hd = pl.head_dim;
  // Rows are read in cp.async copies of 16 bytes when every row address allows, else 8 or 4.
  const int align = std::min(view_alignment(w.k), view_alignment(w.v));
  if (align < 4) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "k_cache / v_cache rows are only {}-byte aligned; decode attention needs 4", align);
  }
  DecodeConfig cfg = pl.cfg;
  cfg.cp_bytes = std::min(align, 16);
  if (cfg.addr == 2) {
    // 32-bit lookups hold (page, slot, head) byte offsets from the cache's start, and all ones
    // marks a masked row: every row must end below 2^32 - 1 (views have no negative strides).
    const uint64_t kv_bytes = pl.cfg.kv_fp8 ? 1 : 2;
    auto row_end = [&](const StridedView& v, int scale) {
      uint64_t elems = static_cast<uint64_t>(hd);
      for (int d = 0; d < 3; ++d) {
        elems += static_cast<uint64_t>(std::max<int64_t>(v.shape[d] - 1, 0)) *
                 static_cast<uint64_t>(v.strides[d]) * static_cast<uint64_t>(scale);
      }
      return elems * kv_bytes;
    };
    if (row_end(w.k, w.k_elem) >= 0xffffffffull || row_end(w.v, w.v_elem) >= 0xffffffffull) {
      cfg.addr = 1;
    }
  }
  return cfg;
}

DecodeParams decode_params(const DecodePlanData& pl, const DecodeViews& w, const DecodeScales& s,
                           bool has_lse) {
  DecodeParams p{};
  p.q = w.q.data;
  p.k_cache = w.k.data;
  p.v_cache = w.v.data;
  p.kv_indices = reinterpret_cast<const int*>(w.indices.data);
  p.kv_indptr = reinterpret_cast<const int*>(w.indptr.data);
  p.kv_last_page_len = reinterpret_cast<const int*>(w.last.data);
  p.out = w.out.data;
  p.lse = has_lse ? reinterpret_cast<float*>(w.lse.data) : nullptr;
  if (pl.split.max_splits > 1) {
    p.ws_o = reinterpret_cast<float*>(w.ws.data);
    p.ws_lse = reinterpret_cast<float*>(w.ws.data + pl.ws_lse_offset);
    if (pl.fused_merge != 0) p.counters = reinterpret_cast<int*>(w.ws.data + pl.counters_offset);
  }
  p.q_sb = w.q.strides[0];
  p.q_sh = w.q.strides[1];
  p.o_sb = w.out.strides[0];
  p.o_sh = w.out.strides[1];
  if (has_lse) {
    p.lse_sb = w.lse.strides[0];
    p.lse_sh = w.lse.strides[1];
  }
  p.k_sp = w.k.strides[0] * w.k_elem;
  p.k_ss = w.k.strides[w.slot_dim] * w.k_elem;
  p.k_sh = w.k.strides[w.head_index] * w.k_elem;
  p.v_sp = w.v.strides[0] * w.v_elem;
  p.v_ss = w.v.strides[w.slot_dim] * w.v_elem;
  p.v_sh = w.v.strides[w.head_index] * w.v_elem;
  p.num_pages = w.k.shape[0];
  p.batch = pl.batch;
  p.num_qo_heads = pl.num_qo_heads;
  p.num_kv_heads = pl.num_kv_heads;
  p.group = pl.group;
  p.page_size = pl.page_size;
  p.nnz_pages = static_cast<int>(w.indices.shape[0]);
  p.chunk = pl.split.chunk;
  p.max_splits = pl.split.max_splits;
  p.window_left = pl.window_left;
  p.score_scale = s.score;
  p.cap_out = s.cap_out;
  p.v_scale = s.v;
  return p;
}

// The split kernel (one cluster per (request, head set) under the cluster merge), then the merge
// kernel when the splits are not merged in the split kernel itself.
void launch_decode(const jit::LoadedKernel& kernel, const DecodeConfig& cfg,
                   const DecodePlanData& pl, const DecodeParams& p, void* stream) {
  const int dev = pl.device;
  const int64_t batch = pl.batch, qo = pl.num_qo_heads, kvh = pl.num_kv_heads;
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(batch * (kvh / cfg.heads_per_cta) * pl.split.max_splits);
  lc.block_x = static_cast<unsigned>(32 * cfg.warps);
  lc.smem_bytes = static_cast<unsigned>(decode_smem_bytes(cfg));
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(dev);
  prefer_max_shared(kernel.functions.at(0));
  if (cfg.cluster_merge != 0) {
    // One cluster per (request, head set): its max_splits CTAs merge their partials themselves.
    cuda::launch_cluster(kernel.functions.at(0), lc, static_cast<unsigned>(pl.split.max_splits),
                         &p);
    return;
  }
  cuda::launch(kernel.functions.at(0), lc, &p);
  if (pl.split.max_splits > 1 && pl.fused_merge == 0) {
    cuda::LaunchConfig mc;
    mc.grid_x = static_cast<unsigned>(batch * qo);
    mc.block_x = 128;
    mc.stream = lc.stream;
    if (pl.pdl != 0 && cuda::device_info(dev).major >= 9) {
      // Its blocks start as the split CTAs start and wait in griddepcontrol.wait for their results.
      cuda::launch_dependent(kernel.functions.at(1), mc, &p);
    } else {
      cuda::launch(kernel.functions.at(1), mc, &p);
    }
  }
}

}  // namespace

void batch_decode_run(const DecodePlanData& pl, const DLTensor* q, const DLTensor* k_cache,
                      const DLTensor* v_cache, const DLTensor* kv_indices,
                      const DLTensor* kv_indptr, const DLTensor* kv_last_page_len,
                      DLTensor* workspace, DLTensor* out, DLTensor* lse, float k_scale,
                      float v_scale, void* stream) {
  DecodeViews w;
  w.q = check_q(pl, q);
  check_caches(pl, w, k_cache, v_cache);
  check_page_table(pl, w, kv_indices, kv_indptr, kv_last_page_len);
  check_outputs(pl, w, out, lse, workspace);
  check_scale(k_scale, "k_scale");
  check_scale(v_scale, "v_scale");
  check_no_overlap(w);
  const DecodeScales scales = run_scales(pl, k_scale, v_scale);
  if (pl.batch == 0) return;  // after validation

  const DecodeConfig cfg = run_config(pl, w);
  if (trace::enabled()) {
    trace::batch_decode({pl.cfg.q_dtype, pl.cfg.kv_fp8 != 0, pl.num_qo_heads, pl.num_kv_heads,
                         pl.head_dim, pl.page_size, pl.layout == KJIT_KV_LAYOUT_NHD},
                        pl.batch, w.indices.shape[0], w.k.shape[0],
                        pl.kv_pages * pl.page_size / pl.batch);
  }
  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "decode_attention", cfg, pl.device, [&] { return decode_spec(cfg); });
  launch_decode(kernel, cfg, pl, decode_params(pl, w, scales, lse != nullptr), stream);
}

}  // namespace kjit::ops
