#include "ops/kv_cache/kv_cache.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <utility>
#include <vector>

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
StridedView scale_vector(const DLTensor* t, const char* name, int device, const char* rows_name,
                         int64_t heads) {
  StridedView v = as_strided_view(t, name);
  if (v.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be fp32, got {}", name, dtype_name(v.dtype));
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", name, v.device,
         rows_name, device);
  }
  if (v.ndim != 1 || (v.shape[0] != 1 && v.shape[0] != heads)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "{} must be [1] (per tensor) or [num_kv_heads = {}] (per head), got ndim {} with {} "
         "elements",
         name, heads, v.ndim, v.numel());
  }
  return v;
}

StridedView int_vector(const DLTensor* t, const char* name, int device, const char* rows_name) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim != 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 1-D, got ndim {}", name, v.ndim);
  if (v.dtype != DType::kI32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, got {}", name, dtype_name(v.dtype));
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", name, v.device,
         rows_name, device);
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

PagedKvTarget check_paged_kv_target(const StridedView& rows, const char* rows_name,
                                    const DLTensor* batch_indices, const DLTensor* positions,
                                    DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                                    const DLTensor* kv_indices, const DLTensor* kv_indptr,
                                    const DLTensor* kv_last_page_len, int layout,
                                    const char* layout_name, const AppendKvScales& scales) {
  const int64_t nnz = rows.shape[0], heads = rows.shape[1], head_dim = rows.shape[2];
  const int dev = rows.device;
  PagedKvTarget t;
  t.batch_indices = int_vector(batch_indices, "batch_indices", dev, rows_name);
  t.positions = int_vector(positions, "positions", dev, rows_name);
  for (const auto& [v, name] :
       {std::pair{&t.batch_indices, "batch_indices"}, std::pair{&t.positions, "positions"}}) {
    if (v->shape[0] != nnz) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has {} elements but {} has {} tokens", name,
           v->shape[0], rows_name, nnz);
    }
  }

  if (layout != KJIT_KV_LAYOUT_NHD && layout != KJIT_KV_LAYOUT_HND) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be KJIT_KV_LAYOUT_NHD (0) or _HND (1), got {}",
         layout_name, layout);
  }
  t.fp8 = scales.k_scale != nullptr || scales.v_scale != nullptr;
  t.k_cache = cache_view(paged_k_cache, "paged_k_cache", t.fp8);
  t.v_cache = cache_view(paged_v_cache, "paged_v_cache", t.fp8);
  const StridedView& kc = t.k_cache;
  t.nhd = layout == KJIT_KV_LAYOUT_NHD;
  if (kc.ndim != 4) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "paged_k_cache must be {}, got ndim {}",
         t.nhd ? "[num_pages, page_size, num_kv_heads, head_dim] (NHD)"
               : "[num_pages, num_kv_heads, page_size, head_dim] (HND)",
         kc.ndim);
  }
  if (t.fp8) {
    if (kc.device != dev) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "paged_k_cache is on cuda:{} but {} is on cuda:{}",
           kc.device, rows_name, dev);
    }
  } else {
    check_same_dtype_device(rows, rows_name, kc, "paged_k_cache");
  }
  check_like(kc, "paged_k_cache", t.v_cache, "paged_v_cache");
  t.slot_dim = t.nhd ? 1 : 2;
  t.head_dim_index = t.nhd ? 2 : 1;
  t.num_pages = kc.shape[0];
  t.page_size = kc.shape[t.slot_dim];
  if (kc.shape[t.head_dim_index] != heads || kc.shape[3] != head_dim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "paged_k_cache has {} heads of {} ({} layout) but {} has {} heads of {}",
         kc.shape[t.head_dim_index], kc.shape[3], t.nhd ? "NHD" : "HND", rows_name, heads,
         head_dim);
  }
  if (t.page_size < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "page_size (paged_k_cache dim {}) must be >= 1, got {}",
         t.slot_dim, t.page_size);
  }

  if (t.fp8) {
    t.k_scale = scale_vector(scales.k_scale, "k_scale", dev, rows_name, heads);
    t.v_scale = scale_vector(scales.v_scale, "v_scale", dev, rows_name, heads);
    // The kernel reads both with one head stride.
    if (t.k_scale.shape[0] != t.v_scale.shape[0]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "k_scale has {} elements but v_scale has {}: both per tensor or both per head",
           t.k_scale.shape[0], t.v_scale.shape[0]);
    }
  }

  t.kv_indices = int_vector(kv_indices, "kv_indices", dev, rows_name);
  t.kv_indptr = int_vector(kv_indptr, "kv_indptr", dev, rows_name);
  t.kv_last_page_len = int_vector(kv_last_page_len, "kv_last_page_len", dev, rows_name);
  if (t.kv_indptr.shape[0] < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr must have batch + 1 >= 1 elements, got 0");
  }
  t.batch = t.kv_indptr.shape[0] - 1;
  if (t.kv_last_page_len.shape[0] != t.batch) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "kv_last_page_len has {} elements but kv_indptr says batch = {}",
         t.kv_last_page_len.shape[0], t.batch);
  }
  return t;
}

void check_caches_disjoint(const PagedKvTarget& t, std::initializer_list<NamedView> inputs) {
  for (const auto& [c, cn] :
       {std::pair{&t.k_cache, "paged_k_cache"}, std::pair{&t.v_cache, "paged_v_cache"}}) {
    if (self_overlaps(*c)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has strides under which elements overlap", cn);
    }
    std::vector<NamedView> read(inputs);
    read.insert(read.end(), {{&t.batch_indices, "batch_indices"},
                             {&t.positions, "positions"},
                             {&t.kv_indices, "kv_indices"},
                             {&t.kv_indptr, "kv_indptr"},
                             {&t.kv_last_page_len, "kv_last_page_len"}});
    if (t.fp8) read.insert(read.end(), {{&t.k_scale, "k_scale"}, {&t.v_scale, "v_scale"}});
    for (const auto& [in, in_name] : read) {
      if (views_overlap(*c, *in)) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", cn, in_name);
    }
  }
  if (views_overlap(t.k_cache, t.v_cache)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "paged_v_cache overlaps paged_k_cache");
  }
}

void check_paged_kv_sizes(const PagedKvTarget& t, int64_t rows, const char* op) {
  if (rows > INT_MAX || t.page_size > INT_MAX || t.kv_indices.shape[0] > INT_MAX ||
      t.batch > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "{} supports up to {} (token, head) rows, page slots, pages and requests", op, INT_MAX);
  }
}

int cache_alignment(const PagedKvTarget& t) {
  return std::min({16, view_alignment(t.k_cache), view_alignment(t.v_cache)});
}

void fill_paged_kv_params(const PagedKvTarget& t, kv_cache::AppendPagedKvParams* p) {
  p->batch_indices = reinterpret_cast<const int*>(t.batch_indices.data);
  p->positions = reinterpret_cast<const int*>(t.positions.data);
  p->k_cache = t.k_cache.data;
  p->v_cache = t.v_cache.data;
  p->kv_indices = reinterpret_cast<const int*>(t.kv_indices.data);
  p->kv_indptr = reinterpret_cast<const int*>(t.kv_indptr.data);
  p->kc_sp = t.k_cache.strides[0];
  p->kc_ss = t.k_cache.strides[t.slot_dim];
  p->kc_sh = t.k_cache.strides[t.head_dim_index];
  p->vc_sp = t.v_cache.strides[0];
  p->vc_ss = t.v_cache.strides[t.slot_dim];
  p->vc_sh = t.v_cache.strides[t.head_dim_index];
  p->num_pages = t.num_pages;
  p->page_size = static_cast<int>(t.page_size);
  p->batch = static_cast<int>(t.batch);
  p->nnz_pages = static_cast<int>(t.kv_indices.shape[0]);
  if (t.fp8) {
    p->k_scale = reinterpret_cast<const float*>(t.k_scale.data);
    p->v_scale = reinterpret_cast<const float*>(t.v_scale.data);
    p->scale_head_stride = t.k_scale.shape[0] == 1 ? 0 : 1;
  }
  p->page_size_div = make_fast_div(static_cast<uint32_t>(t.page_size));
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

  const PagedKvTarget t =
      check_paged_kv_target(ak, "append_k", batch_indices, positions, paged_k_cache, paged_v_cache,
                            kv_indices, kv_indptr, kv_last_page_len, layout, "layout", scales);
  check_caches_disjoint(t, {{&ak, "append_k"}, {&av, "append_v"}});

  if (nnz == 0 || heads == 0 || head_dim == 0) return;  // after validation
  if (!is_float(ak.dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "append_paged_kv supports bf16, fp16 and fp32, not {}",
         dtype_name(ak.dtype));
  }
  check_paged_kv_sizes(t, nnz * heads, "append_paged_kv");
  int align = std::min({16, view_alignment(ak), view_alignment(av)});
  int cache_align = cache_alignment(t);
  if (!t.fp8) align = cache_align = std::min(align, cache_align);
  const AppendPagedKvConfig cfg = select_append_paged_kv(
      ak.dtype, head_dim, align, nnz, pdl_early_indices(dev, launch), t.fp8, cache_align);
  if (trace::enabled()) {
    trace::append_paged_kv(ak.dtype, t.fp8 ? t.k_scale.shape[0] : 0, heads, head_dim, t.page_size,
                           t.nhd, nnz, t.batch, t.kv_indices.shape[0], t.num_pages);
  }

  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "append_paged_kv", cfg, dev, [&] { return append_paged_kv_spec(cfg); });

  kv_cache::AppendPagedKvParams p{};
  fill_paged_kv_params(t, &p);
  p.append_k = ak.data;
  p.append_v = av.data;
  p.ak_st = ak.strides[0];
  p.ak_sh = ak.strides[1];
  p.av_st = av.strides[0];
  p.av_sh = av.strides[1];
  p.rows = static_cast<int>(nnz * heads);
  p.num_heads = static_cast<int>(heads);
  p.heads_div = make_fast_div(static_cast<uint32_t>(heads));

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
