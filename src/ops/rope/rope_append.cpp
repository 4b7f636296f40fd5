#include "ops/rope/rope_append.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <vector>

#include "ops/fastdiv.hpp"
#include "ops/pdl.hpp"
#include "ops/rope/rope.hpp"
#include "ops/rope/rope_desc.hpp"
#include "ops/rope/rope_detail.hpp"
#include "ops/tensor.hpp"
#include "rope/rope_append_params.h"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"

namespace kjit::ops {

using namespace rope_detail;

RopeAppendConfig select_rope_append(DType dtype, int64_t head_dim, int64_t rot_dim, bool interleave,
                                    int align_bytes, bool cache_fp8, int cache_align_bytes) {
  const RopeConfig r =
      select_rope(RopeMode::kFreq, dtype, head_dim, rot_dim, interleave, align_bytes);
  RopeAppendConfig c;
  c.dtype = r.dtype;
  c.head_dim = r.head_dim;
  c.rot_dim = r.rot_dim;
  c.interleave = r.interleave;
  c.vec = r.vec;
  c.cache_fp8 = cache_fp8 ? 1 : 0;
  const int cache_elem = cache_fp8 ? 1 : static_cast<int>(dtype_size(dtype));
  while (c.vec > 1 && c.vec * cache_elem > cache_align_bytes) c.vec /= 2;
  return c;
}

// One name a setting, from the config field to the kernel's template parameters (in upper case).
jit::Spec rope_append_spec(const RopeAppendConfig& c) {
  jit::SpecBuilder b("rope_append_paged_kv", {"common", "rope", "kv_cache"},
                     "rope/rope_append.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("head_dim", c.head_dim).value("rot_dim", c.rot_dim);
  b.flag("interleave", c.interleave != 0).value("vec", c.vec);
  b.flag("cache_fp8", c.cache_fp8 != 0, /*omit_false=*/true);
  b.entry("kjit::rope::rope_append_paged_kv_kernel");
  return b.build();
}

void rope_append_paged_kv_cache(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                const DLTensor* pos_ids, const DLTensor* batch_indices,
                                const DLTensor* positions, const DLTensor* kv_indices,
                                const DLTensor* kv_indptr, const DLTensor* kv_last_page_len,
                                const AppendKvScales& scales, DLTensor* q_out,
                                DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                                const RopeAppendRope& rope, int kv_layout, void* stream,
                                const ElementwiseLaunch& launch) {
  // q, k, v and q_out: kjit_apply_rope_pos_ids's checks, with v like k and no k_out.
  QkViews w;
  w.q = as_strided_view(q, "q");
  w.k = as_strided_view(k, "k");
  const StridedView vv = as_strided_view(v, "v");
  w.q_out = as_strided_view(q_out, "q_out");
  check_ndim3(w.q, "q", "num_qo_heads");
  check_ndim3(w.k, "k", "num_kv_heads");
  check_ndim3(vv, "v", "num_kv_heads");
  check_ndim3(w.q_out, "q_out", "num_qo_heads");
  check_same_dtype_device(w.q, "q", w.k, "k");
  check_same_dtype_device(w.q, "q", vv, "v");
  check_same_dtype_device(w.q, "q", w.q_out, "q_out");
  if (w.k.shape[0] != w.q.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k has {} tokens but q has {}", w.k.shape[0], w.q.shape[0]);
  }
  if (w.k.shape[2] != w.q.shape[2]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k has head_dim {} but q has {}", w.k.shape[2], w.q.shape[2]);
  }
  check_same_shape(w.k, "k", vv, "v");
  check_same_shape(w.q, "q", w.q_out, "q_out");
  check_writable(w.q_out, "q_out");
  check_no_alias(w.q_out, "q_out", w.q, "q", true);
  check_no_alias(w.q_out, "q_out", w.k, "k", false);
  check_no_alias(w.q_out, "q_out", vv, "v", false);
  w.k_out = w.k;  // unused by the kernel (k goes to the cache): no pass-through copy
  w.tokens = w.q.shape[0];
  w.q_heads = w.q.shape[1];
  w.k_heads = w.k.shape[1];
  w.head_dim = w.q.shape[2];
  const StridedView pos = positions_view(pos_ids, "pos_ids", w.tokens, w.q);
  check_no_alias(w.q_out, "q_out", pos, "pos_ids", false);
  const int rot = resolve_rotary_dim(rope.rotary_dim, w.head_dim, "rotary_dim");
  check_flag(rope.interleave, "rope_layout");
  check_positive_finite(rope.rope_scale, "rope_scale");
  check_positive_finite(rope.rope_theta, "rope_theta");
  const FreqKey key = rope.llama31
                          ? llama31_key(rot, rope.rope_scale, rope.rope_theta, rope.low_freq_factor,
                                        rope.high_freq_factor, rope.old_context_len)
                          : plain_key(rot, rope.rope_scale, rope.rope_theta);

  // The page table and caches: kjit_append_paged_kv_cache(_fp8)'s checks, k as the appended key.
  const PagedKvTarget t = check_paged_kv_target(w.k, "k", batch_indices, positions, paged_k_cache,
                                                paged_v_cache, kv_indices, kv_indptr,
                                                kv_last_page_len, kv_layout, "kv_layout", scales);
  check_caches_disjoint(
      t, {{&w.q, "q"}, {&w.k, "k"}, {&vv, "v"}, {&pos, "pos_ids"}, {&w.q_out, "q_out"}});
  std::vector<NamedView> tables = {{&t.batch_indices, "batch_indices"},
                                   {&t.positions, "positions"},
                                   {&t.kv_indices, "kv_indices"},
                                   {&t.kv_indptr, "kv_indptr"},
                                   {&t.kv_last_page_len, "kv_last_page_len"}};
  if (t.fp8) tables.insert(tables.end(), {{&t.k_scale, "k_scale"}, {&t.v_scale, "v_scale"}});
  for (const auto& [in, name] : tables) check_no_alias(w.q_out, "q_out", *in, name, false);

  const int64_t h_total = w.q_heads + 2 * w.k_heads;
  if (w.tokens == 0 || h_total == 0) return;  // after validation
  check_supported(w.q.dtype, w.head_dim);
  if (rot > kRopeMaxRotDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports rotary_dim up to {}, not {}", kRopeMaxRotDim, rot);
  }
  check_paged_kv_sizes(t, w.tokens * h_total, "rope_append_paged_kv");
  int align = 16;
  for (const StridedView* x :
       std::initializer_list<const StridedView*>{&w.q, &w.k, &vv, &w.q_out}) {
    if (x->numel() > 0) align = std::min(align, view_alignment(*x));
  }
  int cache_align = cache_alignment(t);
  if (!t.fp8) align = cache_align = std::min(align, cache_align);
  const RopeAppendConfig cfg = select_rope_append(w.q.dtype, w.head_dim, rot, rope.interleave != 0,
                                                  align, t.fp8, cache_align);
  if (trace::enabled()) {
    trace::rope_append({w.q.dtype, w.q_heads, w.k_heads, w.head_dim, rot, rope.interleave != 0,
                        pos.dtype, t.page_size, t.nhd, t.fp8 ? t.k_scale.shape[0] : 0},
                       w.tokens, t.batch, t.kv_indices.shape[0], t.num_pages);
  }
  const int dev = w.q.device;
  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "rope_append_paged_kv", cfg, dev, [&] { return rope_append_spec(cfg); });

  // The RoPE half of the params as kjit_apply_rope_pos_ids fills them, over q, k, v's heads.
  const FusedRope fr = fused_rope(w, pos, cfg.dtype, cfg.head_dim, cfg.rot_dim, cfg.interleave,
                                  cfg.vec, key, h_total, dev);
  rope::RopeAppendParams<kRopeMaxRotDim / 2> p{};
  p.rope = fr.params.a;
  std::copy(std::begin(fr.params.freq), std::end(fr.params.freq), p.freq);
  fill_paged_kv_params(t, &p.kv);
  p.kv.append_k = w.k.data;
  p.kv.append_v = vv.data;
  p.kv.ak_st = w.k.strides[0];
  p.kv.ak_sh = w.k.strides[1];
  p.kv.av_st = vv.strides[0];
  p.kv.av_sh = vv.strides[1];
  p.kv.num_heads = static_cast<int>(w.k_heads);

  launch_fused(fr, kernel.functions.at(0), &p, stream, dev, launch);
}

}  // namespace kjit::ops
