#include "ops/kv_cache/kv_cache.hpp"

#include <algorithm>
#include <climits>
#include <utility>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "kv_cache/kv_cache_params.h"
#include "ops/fastdiv.hpp"
#include "ops/kv_cache/kv_cache_desc.hpp"
#include "ops/pdl.hpp"
#include "ops/tensor.hpp"
#include "ops/vector_width.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

// The caches of kjit_append_paged_kv_cache hold the append dtype; an 8-bit one is well-formed
// (FlashInfer has fp8 e4m3 / e5m2 caches) but needs the scales of the fp8 entry point: say so
// instead of calling its dtype unknown. Those of the fp8 entry point are float8 e4m3.
StridedView cache_view(const DLTensor* t, const char* name, bool fp8) {
  if (!fp8 && t != nullptr && t->dtype.bits == 8 && t->dtype.lanes == 1) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "{} has an 8-bit dtype (code {}): fp8 caches are written by "
         "kjit_append_paged_kv_cache_fp8 (with scales), this entry point takes bf16 / fp16 / fp32",
         name, t->dtype.code);
  }
  if (fp8 && t != nullptr &&
      !(t->dtype.code == KJIT_DL_FLOAT8_E4M3FN && t->dtype.bits == 8 && t->dtype.lanes == 1)) {
    fail(t->dtype.bits == 8 ? KJIT_ERROR_UNSUPPORTED : KJIT_ERROR_INVALID_ARGUMENT,
         "{} must be float8_e4m3fn (DLPack code {}, 8 bits), got code {} with {} bits", name,
         KJIT_DL_FLOAT8_E4M3FN, t->dtype.code, t->dtype.bits);
  }
  return as_strided_view(t, name);
}

// An fp8 cache's scales: fp32 on the append's device, [1] (per tensor) or [heads] (per kv head),
// contiguous.
StridedView scale_vector(const DLTensor* t, const char* name, int device, int64_t heads) {
  StridedView v = as_strided_view(t, name);
  if (v.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be fp32, got {}", name, dtype_name(v.dtype));
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but append_k is on cuda:{}", name, v.device,
         device);
  }
  if (v.ndim != 1 || (v.shape[0] != 1 && v.shape[0] != heads)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "{} must be [1] (per tensor) or [num_kv_heads = {}] (per head), got ndim {} with {} "
         "elements",
         name, heads, v.ndim, v.numel());
  }
  return v;
}

StridedView int_vector(const DLTensor* t, const char* name, int device) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim != 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 1-D, got ndim {}", name, v.ndim);
  if (v.dtype != DType::kI32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, got {}", name, dtype_name(v.dtype));
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but append_k is on cuda:{}", name, v.device,
         device);
  }
  return v;
}

// Same dtype, device and shape.
void check_like(const StridedView& a, const char* an, const StridedView& b, const char* bn) {
  check_same_dtype_device(a, an, b, bn);
  if (b.ndim != a.ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has ndim {} but {} has {}", bn, b.ndim, an, a.ndim);
  }
  for (int i = 0; i < a.ndim; ++i) {
    if (a.shape[i] != b.shape[i]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} dim {} is {} but {} dim {} is {}", bn, i, b.shape[i],
           an, i, a.shape[i]);
    }
  }
}

}  // namespace

AppendPagedKvConfig select_append_paged_kv(DType dtype, int64_t head_dim, int align_bytes,
                                           int64_t tokens, bool early_indices, bool cache_fp8,
                                           int cache_align_bytes) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "append_paged_kv supports bf16, fp16 and fp32, not {}",
         dtype_name(dtype));
  }
  if (head_dim < 1 || head_dim > kAppendPagedKvMaxHeadDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "append_paged_kv supports head_dim 1..{}, not {}",
         kAppendPagedKvMaxHeadDim, head_dim);
  }
  AppendPagedKvConfig c;
  c.dtype = dtype;
  c.head_dim = static_cast<int>(head_dim);
  c.cache_fp8 = cache_fp8 ? 1 : 0;
  c.vec = widest_vector(dtype, c.head_dim, align_bytes);
  // An e4m3 cache stores vec bytes per vector: its own alignment may narrow it further.
  const int cache_elem = cache_fp8 ? 1 : static_cast<int>(dtype_size(dtype));
  while (c.vec > 1 && c.vec * cache_elem > cache_align_bytes) c.vec /= 2;
  c.early_indices = early_indices && tokens <= kAppendPagedKvEarlyMaxTokens ? 1 : 0;
  return c;
}

std::string append_paged_kv_uri(const AppendPagedKvConfig& c) {
  return append_paged_kv_spec(c).uri;
}

// One name a setting, from the config field to the kernel's template parameter (in upper case).
jit::Spec append_paged_kv_spec(const AppendPagedKvConfig& c) {
  jit::SpecBuilder b("append_paged_kv", {"common", "kv_cache"}, "kv_cache/append_paged.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("head_dim", c.head_dim).value("vec", c.vec);
  b.flag("early_indices", c.early_indices != 0, /*omit_false=*/true);
  b.flag("cache_fp8", c.cache_fp8 != 0, /*omit_false=*/true);
  b.entry("kjit::kv_cache::append_paged_kv_kernel");
  return b.build();
}

void append_paged_kv_cache(const DLTensor* append_k, const DLTensor* append_v,
                           const DLTensor* batch_indices, const DLTensor* positions,
                           DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                           const DLTensor* kv_indices, const DLTensor* kv_indptr,
                           const DLTensor* kv_last_page_len, int layout, void* stream,
                           const ElementwiseLaunch& launch, const AppendKvScales& scales) {
  const StridedView ak = as_strided_view(append_k, "append_k");
  const StridedView av = as_strided_view(append_v, "append_v");
  if (ak.ndim != 3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "append_k must be [nnz, num_kv_heads, head_dim], got ndim {}",
         ak.ndim);
  }
  check_like(ak, "append_k", av, "append_v");
  const int64_t nnz = ak.shape[0], heads = ak.shape[1], head_dim = ak.shape[2];
  const int dev = ak.device;

  const StridedView bi = int_vector(batch_indices, "batch_indices", dev);
  const StridedView pos = int_vector(positions, "positions", dev);
  for (const auto& [v, name] : {std::pair{&bi, "batch_indices"}, std::pair{&pos, "positions"}}) {
    if (v->shape[0] != nnz) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has {} elements but append_k has {} tokens", name,
           v->shape[0], nnz);
    }
  }

  if (layout != KJIT_KV_LAYOUT_NHD && layout != KJIT_KV_LAYOUT_HND) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "layout must be KJIT_KV_LAYOUT_NHD (0) or _HND (1), got {}",
         layout);
  }
  const bool fp8 = scales.k_scale != nullptr || scales.v_scale != nullptr;
  const StridedView kc = cache_view(paged_k_cache, "paged_k_cache", fp8);
  const StridedView vc = cache_view(paged_v_cache, "paged_v_cache", fp8);
  const bool nhd = layout == KJIT_KV_LAYOUT_NHD;
  if (kc.ndim != 4) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "paged_k_cache must be {}, got ndim {}",
         nhd ? "[num_pages, page_size, num_kv_heads, head_dim] (NHD)"
             : "[num_pages, num_kv_heads, page_size, head_dim] (HND)",
         kc.ndim);
  }
  if (fp8) {
    if (kc.device != dev) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "paged_k_cache is on cuda:{} but append_k is on cuda:{}",
           kc.device, dev);
    }
  } else {
    check_same_dtype_device(ak, "append_k", kc, "paged_k_cache");
  }
  check_like(kc, "paged_k_cache", vc, "paged_v_cache");
  const int slot_dim = nhd ? 1 : 2, head_dim_index = nhd ? 2 : 1;
  const int64_t num_pages = kc.shape[0], page_size = kc.shape[slot_dim];
  if (kc.shape[head_dim_index] != heads || kc.shape[3] != head_dim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "paged_k_cache has {} heads of {} ({} layout) but append_k has {} heads of {}",
         kc.shape[head_dim_index], kc.shape[3], nhd ? "NHD" : "HND", heads, head_dim);
  }
  if (page_size < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "page_size (paged_k_cache dim {}) must be >= 1, got {}",
         slot_dim, page_size);
  }

  StridedView ks, vs;
  if (fp8) {
    ks = scale_vector(scales.k_scale, "k_scale", dev, heads);
    vs = scale_vector(scales.v_scale, "v_scale", dev, heads);
    // The kernel reads both with one head stride.
    if (ks.shape[0] != vs.shape[0]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "k_scale has {} elements but v_scale has {}: both per tensor or both per head",
           ks.shape[0], vs.shape[0]);
    }
  }

  const StridedView indices = int_vector(kv_indices, "kv_indices", dev);
  const StridedView indptr = int_vector(kv_indptr, "kv_indptr", dev);
  const StridedView last = int_vector(kv_last_page_len, "kv_last_page_len", dev);
  if (indptr.shape[0] < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr must have batch + 1 >= 1 elements, got 0");
  }
  const int64_t batch = indptr.shape[0] - 1;
  if (last.shape[0] != batch) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "kv_last_page_len has {} elements but kv_indptr says batch = {}", last.shape[0], batch);
  }

  for (const auto& [c, cn] : {std::pair{&kc, "paged_k_cache"}, std::pair{&vc, "paged_v_cache"}}) {
    if (self_overlaps(*c)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has strides under which elements overlap", cn);
    }
    const std::pair<const StridedView*, const char*> inputs[] = {
        {&ak, "append_k"},          {&av, "append_v"},        {&bi, "batch_indices"},
        {&pos, "positions"},        {&indices, "kv_indices"}, {&indptr, "kv_indptr"},
        {&last, "kv_last_page_len"}};
    for (const auto& [in, in_name] : inputs) {
      if (views_overlap(*c, *in)) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", cn, in_name);
    }
    if (fp8) {
      for (const auto& [in, in_name] : {std::pair{&ks, "k_scale"}, std::pair{&vs, "v_scale"}}) {
        if (views_overlap(*c, *in)) {
          fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", cn, in_name);
        }
      }
    }
  }
  if (views_overlap(kc, vc)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "paged_v_cache overlaps paged_k_cache");
  }

  if (nnz == 0 || heads == 0 || head_dim == 0) return;  // after validation
  if (!is_float(ak.dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "append_paged_kv supports bf16, fp16 and fp32, not {}",
         dtype_name(ak.dtype));
  }
  if (nnz * heads > INT_MAX || page_size > INT_MAX || indices.shape[0] > INT_MAX ||
      batch > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "append_paged_kv supports up to {} (token, head) rows, page slots, pages and requests",
         INT_MAX);
  }
  int align = 16, cache_align = 16;
  for (const StridedView* t : {&ak, &av}) align = std::min(align, view_alignment(*t));
  for (const StridedView* t : {&kc, &vc}) cache_align = std::min(cache_align, view_alignment(*t));
  if (!fp8) align = cache_align = std::min(align, cache_align);
  const AppendPagedKvConfig cfg = select_append_paged_kv(
      ak.dtype, head_dim, align, nnz, pdl_early_indices(dev, launch), fp8, cache_align);
  if (trace::enabled()) {
    trace::append_paged_kv(ak.dtype, fp8 ? ks.shape[0] : 0, heads, head_dim, page_size, nhd, nnz,
                           batch, indices.shape[0], num_pages);
  }

  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "append_paged_kv", cfg, dev, [&] { return append_paged_kv_spec(cfg); });

  kv_cache::AppendPagedKvParams p{};
  p.append_k = ak.data;
  p.append_v = av.data;
  p.batch_indices = reinterpret_cast<const int*>(bi.data);
  p.positions = reinterpret_cast<const int*>(pos.data);
  p.k_cache = kc.data;
  p.v_cache = vc.data;
  p.kv_indices = reinterpret_cast<const int*>(indices.data);
  p.kv_indptr = reinterpret_cast<const int*>(indptr.data);
  p.ak_st = ak.strides[0];
  p.ak_sh = ak.strides[1];
  p.av_st = av.strides[0];
  p.av_sh = av.strides[1];
  p.kc_sp = kc.strides[0];
  p.kc_ss = kc.strides[slot_dim];
  p.kc_sh = kc.strides[head_dim_index];
  p.vc_sp = vc.strides[0];
  p.vc_ss = vc.strides[slot_dim];
  p.vc_sh = vc.strides[head_dim_index];
  p.num_pages = num_pages;
  p.rows = static_cast<int>(nnz * heads);
  p.num_heads = static_cast<int>(heads);
  p.page_size = static_cast<int>(page_size);
  p.batch = static_cast<int>(batch);
  p.nnz_pages = static_cast<int>(indices.shape[0]);
  if (fp8) {
    p.k_scale = reinterpret_cast<const float*>(ks.data);
    p.v_scale = reinterpret_cast<const float*>(vs.data);
    p.scale_head_stride = ks.shape[0] == 1 ? 0 : 1;
  }
  p.heads_div = make_fast_div(static_cast<uint32_t>(heads));
  p.page_size_div = make_fast_div(static_cast<uint32_t>(page_size));

  const int vecs = cfg.head_dim / cfg.vec;
  const int threads_per_row = std::min(vecs, 32);
  const int rows_per_block = std::max(1, kAppendPagedKvBlockThreads / threads_per_row);
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>((p.rows + rows_per_block - 1) / rows_per_block);
  lc.block_x = static_cast<unsigned>(threads_per_row * rows_per_block);
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(dev);
  launch_elementwise(kernel.functions.at(0), lc, &p, dev, launch);
}

}  // namespace kjit::ops
