#include "ops/rope/rope.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "ops/fastdiv.hpp"
#include "ops/pdl.hpp"
#include "ops/rope/rope_desc.hpp"
#include "ops/rope/rope_detail.hpp"
#include "rope/rope_params.h"
#include "util/error.hpp"

namespace kjit::ops {

// Shared with the fused RoPE + append (rope_append.cpp) through rope_detail.hpp.
namespace rope_detail {

constexpr double kPi = 3.14159265358979323846;

const char* mode_name(RopeMode m) {
  return m == RopeMode::kFreq ? "freq" : m == RopeMode::kCache ? "cache" : "indptr";
}

void check_ndim3(const StridedView& v, const char* name, const char* what) {
  if (v.ndim != 3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [tokens, {}, head_dim], got ndim {}", name, what,
         v.ndim);
  }
}

void check_same_shape(const StridedView& a, const char* an, const StridedView& b, const char* bn) {
  for (int i = 0; i < a.ndim; ++i) {
    if (a.shape[i] != b.shape[i]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} dim {} is {} but {} dim {} is {}", bn, i, b.shape[i],
           an, i, a.shape[i]);
    }
  }
}

// An output must be its own input exactly (in place) or share no byte with `other`.
void check_no_alias(const StridedView& out, const char* on, const StridedView& other,
                    const char* other_name, bool may_be_same) {
  if (may_be_same && same_view(out, other)) return;
  if (views_overlap(out, other)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}{}", on, other_name,
         may_be_same ? " without being the same view" : "");
  }
}

void check_writable(const StridedView& v, const char* name) {
  if (self_overlaps(v)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has strides under which elements overlap", name);
  }
}

// A 1-D int32 / int64 tensor on q's device (shape[0]'s meaning in `dims`, for the message).
StridedView index_vector(const DLTensor* t, const char* name, const char* dims,
                         const StridedView& q) {
  StridedView p = as_strided_view(t, name);
  if (p.ndim != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}], got ndim {}", name, dims, p.ndim);
  }
  if (p.dtype != DType::kI32 && p.dtype != DType::kI64) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32 or int64, got {}", name,
         dtype_name(p.dtype));
  }
  if (p.device != q.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but q is on cuda:{}", name, p.device,
         q.device);
  }
  return p;
}

StridedView positions_view(const DLTensor* t, const char* name, int64_t tokens,
                           const StridedView& q) {
  StridedView p = index_vector(t, name, "tokens", q);
  if (p.shape[0] != tokens) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has {} elements but q has {} tokens", name, p.shape[0],
         tokens);
  }
  return p;
}

QkViews check_qk(const DLTensor* q, const DLTensor* k, const DLTensor* q_out,
                 const DLTensor* k_out) {
  QkViews v;
  v.q = as_strided_view(q, "q");
  v.k = as_strided_view(k, "k");
  v.q_out = as_strided_view(q_out, "q_out");
  v.k_out = as_strided_view(k_out, "k_out");
  check_ndim3(v.q, "q", "num_qo_heads");
  check_ndim3(v.k, "k", "num_kv_heads");
  check_ndim3(v.q_out, "q_out", "num_qo_heads");
  check_ndim3(v.k_out, "k_out", "num_kv_heads");
  check_same_dtype_device(v.q, "q", v.k, "k");
  check_same_dtype_device(v.q, "q", v.q_out, "q_out");
  check_same_dtype_device(v.q, "q", v.k_out, "k_out");
  if (v.k.shape[0] != v.q.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k has {} tokens but q has {}", v.k.shape[0], v.q.shape[0]);
  }
  if (v.k.shape[2] != v.q.shape[2]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k has head_dim {} but q has {}", v.k.shape[2], v.q.shape[2]);
  }
  check_same_shape(v.q, "q", v.q_out, "q_out");
  check_same_shape(v.k, "k", v.k_out, "k_out");
  check_writable(v.q_out, "q_out");
  check_writable(v.k_out, "k_out");
  check_no_alias(v.q_out, "q_out", v.q, "q", true);
  check_no_alias(v.q_out, "q_out", v.k, "k", false);
  check_no_alias(v.q_out, "q_out", v.k_out, "k_out", false);
  check_no_alias(v.k_out, "k_out", v.k, "k", true);
  check_no_alias(v.k_out, "k_out", v.q, "q", false);
  v.tokens = v.q.shape[0];
  v.q_heads = v.q.shape[1];
  v.k_heads = v.k.shape[1];
  v.head_dim = v.q.shape[2];
  return v;
}

void check_positive_finite(float x, const char* name) {
  if (!std::isfinite(x) || x <= 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be finite and > 0, got {}", name, x);
  }
}

void check_supported(DType dtype, int64_t head_dim) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports bf16 and fp16 q/k, not {}", dtype_name(dtype));
  }
  if (head_dim > kRopeMaxHeadDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports head_dim up to {}, not {}", kRopeMaxHeadDim,
         head_dim);
  }
}

bool FreqKey::operator==(const FreqKey& o) const {
  return std::memcmp(this, &o, sizeof o) == 0;
}

// inv_freq[f] / pi as unevaluated float pairs (hi + lo): 48 significant bits, so the kernel's
// angle does not inherit fp32 rounding of the frequency (see kernels/rope/rope.cuh).
// Memoized per thread: the table takes rot_dim / 2 calls of pow() in double, ~2 us of host time
// per call at head_dim 128 (measured on the H200 host: rope at 1 token cost 3 us more than every
// other op), and an engine calls rope with the same scalars every layer of every step.
const std::vector<float>& freq_pairs(const FreqKey& key,
                                     const std::function<std::vector<double>()>& inv_freq) {
  struct Entry {
    FreqKey key;
    std::vector<float> pairs;
  };
  thread_local std::vector<Entry> memo;  // a handful of models per process at most
  for (const Entry& e : memo) {
    if (e.key == key) return e.pairs;
  }
  const std::vector<double> f = inv_freq();
  std::vector<float> pairs(2 * f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    const double g = f[i] / kPi;
    const float hi = static_cast<float>(g);
    pairs[2 * i] = hi;
    pairs[2 * i + 1] = static_cast<float>(g - static_cast<double>(hi));
  }
  if (memo.size() >= 8) memo.erase(memo.begin());
  memo.push_back({key, std::move(pairs)});
  return memo.back().pairs;
}

RopeGrid rope_grid(const RopeConfig& cfg, int64_t tokens, int64_t h_total, int sm_count) {
  RopeGrid g;
  const int units = rope_units(cfg);
  g.slots = static_cast<int>(std::min<int64_t>(std::max(1, kRopeBlockThreads / units), h_total));
  // The decode kernel shares angles across a warp: whole warps only (spare slots stay idle).
  if (cfg.decode != 0) g.slots = (g.slots * units + 31) / 32 * 32 / units;
  // Few tokens (decode): split each token's heads over several blocks so that every SM gets
  // work; many tokens (prefill): one block per token, which computes sin / cos the fewest times.
  const int64_t slot_rows = (h_total + g.slots - 1) / g.slots;
  const int64_t target_blocks = 8LL * sm_count;
  g.chunks = std::clamp<int64_t>((target_blocks + tokens - 1) / tokens, 1, slot_rows);
  g.heads_per_chunk = (slot_rows + g.chunks - 1) / g.chunks * g.slots;
  g.chunks = (h_total + g.heads_per_chunk - 1) / g.heads_per_chunk;
  if (tokens * g.chunks > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope: {} tokens x {} chunks exceed the grid", tokens, g.chunks);
  }
  return g;
}

RopeParams rope_params(const QkViews& v, const RopeLaunch& l, const RopeGrid& g) {
  RopeParams p{};
  p.a.q_in = v.q.data;
  p.a.q_out = v.q_out.data;
  p.a.k_in = v.k.data;
  p.a.k_out = v.k_out.data;
  p.a.pos = l.pos->data;
  p.a.q_in_st = v.q.strides[0];
  p.a.q_in_sh = v.q.strides[1];
  p.a.q_out_st = v.q_out.strides[0];
  p.a.q_out_sh = v.q_out.strides[1];
  p.a.k_in_st = v.k.strides[0];
  p.a.k_in_sh = v.k.strides[1];
  p.a.k_out_st = v.k_out.strides[0];
  p.a.k_out_sh = v.k_out.strides[1];
  p.a.q_heads = static_cast<int>(v.q_heads);
  p.a.k_heads = static_cast<int>(v.k_heads);
  p.a.heads_per_chunk = static_cast<int>(g.heads_per_chunk);
  p.a.chunks = static_cast<int>(g.chunks);
  p.a.chunks_div = make_fast_div(static_cast<uint32_t>(g.chunks));
  p.a.slots_div = make_fast_div(static_cast<uint32_t>(g.slots));
  p.a.copy_q_pass = !same_view(v.q, v.q_out);
  p.a.copy_k_pass = !same_view(v.k, v.k_out);
  p.a.pos_bytes = static_cast<int>(l.pos->elem_bytes());
  if (l.mode == RopeMode::kIndptr) {
    p.a.indptr = l.indptr->data;
    p.a.batch = static_cast<int>(l.pos->shape[0]);
  }
  if (l.mode == RopeMode::kCache) {
    p.a.cos_sin = l.cache->data;
    p.a.cache_stride = l.cache->strides[0];
    p.a.max_pos = l.cache->shape[0];
    p.a.cache_dtype = l.cache->dtype == DType::kF32   ? rope::kCacheF32
                      : l.cache->dtype == DType::kF16 ? rope::kCacheF16
                                                      : rope::kCacheBF16;
  } else {
    std::copy(l.freq_pairs->begin(), l.freq_pairs->end(), p.freq);
  }
  return p;
}

void launch_rope(const QkViews& v, const RopeLaunch& l, void* stream) {
  const int64_t h_total = v.q_heads + v.k_heads;
  if (v.tokens == 0 || h_total == 0) return;  // after validation: zero size is still checked
  check_supported(v.q.dtype, v.head_dim);
  if (l.rot_dim > kRopeMaxRotDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports rotary_dim up to {}, not {}", kRopeMaxRotDim,
         l.rot_dim);
  }
  if (v.tokens > INT_MAX || h_total > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports up to {} tokens and heads, got {} and {}", INT_MAX,
         v.tokens, h_total);
  }
  int align = 16;
  for (const StridedView* t : {&v.q, &v.k, &v.q_out, &v.k_out}) {
    if (t->numel() > 0) align = std::min(align, view_alignment(*t));
  }
  const RopeConfig cfg =
      plan_rope(select_rope(l.mode, v.q.dtype, v.head_dim, l.rot_dim, l.interleave, align),
                v.tokens, pdl_early_indices(v.q.device, *l.launch), *l.tuning);
  const jit::LoadedKernel& kernel =
      jit::JitCore::global().kernel_for("rope", cfg, v.q.device, [&] { return rope_spec(cfg); });
  const RopeGrid g = rope_grid(cfg, v.tokens, h_total, cuda::device_info(v.q.device).sm_count);
  const RopeParams p = rope_params(v, l, g);
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(v.tokens * g.chunks);
  lc.block_x = static_cast<unsigned>(rope_units(cfg) * g.slots);
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(v.q.device);
  launch_elementwise(kernel.functions.at(0), lc, &p, v.q.device, *l.launch);
}

// The pos_ids and indptr entry points' launch: angles from the frequency table `key` names
// (memoized; inv_freq computes it the first time) at the positions pos_ids hold (indptr NULL) or
// the request offsets `pos` and `indptr` give.
void launch_freq_rope(const QkViews& v, const StridedView& pos, const StridedView* indptr,
                      const FreqKey& key, bool interleave, const ElementwiseLaunch& launch,
                      const RopeTuning& tuning, void* stream,
                      const std::function<std::vector<double>()>& inv_freq) {
  RopeLaunch l;
  l.mode = indptr != nullptr ? RopeMode::kIndptr : RopeMode::kFreq;
  l.indptr = indptr;
  l.interleave = interleave;
  l.rot_dim = key.rot_dim;
  l.pos = &pos;
  l.launch = &launch;
  l.tuning = &tuning;
  l.freq_pairs = &freq_pairs(key, inv_freq);
  launch_rope(v, l, stream);
}

int resolve_rotary_dim(int rotary_dim, int64_t head_dim, const char* name) {
  const int64_t r = rotary_dim == 0 ? head_dim : rotary_dim;
  if (r < 2 || r % 2 != 0 || r > head_dim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be even and in 2..head_dim ({}), got {}", name,
         head_dim, rotary_dim);
  }
  return static_cast<int>(r);
}

void check_flag(int v, const char* name) {
  if (v != 0 && v != 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 0 or 1, got {}", name, v);
}

// The checks every frequency-table entry point shares but those of its position tensors;
// returns the views and the rotary dim.
std::pair<QkViews, int> check_freq_call(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                        DLTensor* k_out, int rotary_dim, int interleave,
                                        float rope_scale, float rope_theta) {
  QkViews v = check_qk(q, k, q_out, k_out);
  const int rot = resolve_rotary_dim(rotary_dim, v.head_dim, "rotary_dim");
  check_flag(interleave, "interleave");
  check_positive_finite(rope_scale, "rope_scale");
  check_positive_finite(rope_theta, "rope_theta");
  return {v, rot};
}

void check_outputs_disjoint(const QkViews& v, const StridedView& t, const char* name) {
  check_no_alias(v.q_out, "q_out", t, name, false);
  check_no_alias(v.k_out, "k_out", t, name, false);
}

// The checks both pos_ids entry points share; returns the views and the rotary dim.
std::pair<QkViews, int> check_pos_ids_call(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                           DLTensor* k_out, const DLTensor* pos_ids, int rotary_dim,
                                           int interleave, float rope_scale, float rope_theta,
                                           StridedView* pos) {
  auto [v, rot] =
      check_freq_call(q, k, q_out, k_out, rotary_dim, interleave, rope_scale, rope_theta);
  *pos = positions_view(pos_ids, "pos_ids", v.tokens, v.q);
  check_outputs_disjoint(v, *pos, "pos_ids");
  return {v, rot};
}

// The checks both indptr entry points share: indptr [batch + 1] and offsets [batch], one int
// dtype. Their contents are on the device and not checked (indptr non-decreasing from 0 to
// tokens is the caller's contract: rope.cuh's indptr_position reads in bounds whatever they hold).
std::pair<QkViews, int> check_indptr_call(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                          DLTensor* k_out, const DLTensor* indptr_t,
                                          const DLTensor* offsets_t, int rotary_dim, int interleave,
                                          float rope_scale, float rope_theta, StridedView* indptr,
                                          StridedView* offsets) {
  auto [v, rot] =
      check_freq_call(q, k, q_out, k_out, rotary_dim, interleave, rope_scale, rope_theta);
  *indptr = index_vector(indptr_t, "indptr", "batch + 1", v.q);
  *offsets = index_vector(offsets_t, "offsets", "batch", v.q);
  if (indptr->shape[0] < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "indptr must have batch + 1 >= 1 elements, got 0");
  }
  const int64_t batch = indptr->shape[0] - 1;
  if (offsets->shape[0] != batch) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "offsets has {} elements but indptr has {} (batch {})",
         offsets->shape[0], indptr->shape[0], batch);
  }
  if (offsets->dtype != indptr->dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "offsets is {} but indptr is {}", dtype_name(offsets->dtype),
         dtype_name(indptr->dtype));
  }
  if (batch == 0 && v.tokens > 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "indptr has no request (batch 0) but q has {} tokens",
         v.tokens);
  }
  if (batch > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports up to {} requests, got {}", INT_MAX, batch);
  }
  check_outputs_disjoint(v, *indptr, "indptr");
  check_outputs_disjoint(v, *offsets, "offsets");
  return {v, rot};
}

// Llama 3.1's scalars, checked, as the frequency table's key.
FreqKey llama31_key(int rot, float rope_scale, float rope_theta, float low_freq_factor,
                    float high_freq_factor, float old_context_len) {
  check_positive_finite(low_freq_factor, "low_freq_factor");
  check_positive_finite(old_context_len, "old_context_len");
  if (!std::isfinite(high_freq_factor) || !(high_freq_factor > low_freq_factor)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "high_freq_factor must be finite and > low_freq_factor ({}), got {}", low_freq_factor,
         high_freq_factor);
  }
  FreqKey key;
  key.rot_dim = rot;
  key.llama31 = 1;
  key.scale = rope_scale;
  key.theta = rope_theta;
  key.low = low_freq_factor;
  key.high = high_freq_factor;
  key.old_ctx = old_context_len;
  return key;
}

FreqKey plain_key(int rot, float rope_scale, float rope_theta) {
  FreqKey key;
  key.rot_dim = rot;
  key.scale = rope_scale;
  key.theta = rope_theta;
  return key;
}

// The table a key names, computed in double (freq_pairs memoizes it).
std::vector<double> inv_freq_of(const FreqKey& k) {
  return k.llama31 != 0 ? llama31_inv_freq(k.rot_dim, k.scale, k.theta, k.low, k.high, k.old_ctx)
                        : rope_inv_freq(k.rot_dim, k.scale, k.theta);
}

FusedRope fused_rope(const QkViews& v, const StridedView& pos, DType dtype, int head_dim,
                     int rot_dim, int interleave, int vec, const FreqKey& key, int64_t h_total,
                     int device) {
  RopeConfig geometry;
  geometry.dtype = dtype;
  geometry.head_dim = head_dim;
  geometry.rot_dim = rot_dim;
  geometry.interleave = interleave;
  geometry.vec = vec;
  const RopeGrid g = rope_grid(geometry, v.tokens, h_total, cuda::device_info(device).sm_count);
  RopeLaunch l;
  l.mode = RopeMode::kFreq;
  l.interleave = interleave != 0;
  l.rot_dim = rot_dim;
  l.pos = &pos;
  l.freq_pairs = &freq_pairs(key, [&] { return inv_freq_of(key); });
  FusedRope f;
  f.params = rope_params(v, l, g);
  f.grid = static_cast<unsigned>(v.tokens * g.chunks);
  f.block = static_cast<unsigned>(rope_units(geometry) * g.slots);
  return f;
}

void launch_fused(const FusedRope& f, CUfunction fn, const void* params, void* stream, int device,
                  const ElementwiseLaunch& launch) {
  cuda::LaunchConfig lc;
  lc.grid_x = f.grid;
  lc.block_x = f.block;
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(device);
  launch_elementwise(fn, lc, params, device, launch);
}

}  // namespace rope_detail

using namespace rope_detail;

int rope_units(const RopeConfig& c) {
  return c.interleave ? c.rot_dim / std::max(c.vec, 2) : c.rot_dim / 2 / c.vec;
}

bool rope_decode_supported(const RopeConfig& c) {
  const int units = rope_units(c);
  const int freqs = c.interleave ? std::max(c.vec, 2) / 2 : c.vec;  // angles a unit takes
  const int half = c.rot_dim / 2;
  const int per_lane = half <= 32 ? 1 : half / 32;
  return units <= 32 && 32 % units == 0 && per_lane * 32 >= half && freqs % per_lane == 0 &&
         dtype_size(c.dtype) == 2;
}

RopeConfig select_rope(RopeMode mode, DType dtype, int64_t head_dim, int64_t rot_dim,
                       bool interleave, int align_bytes) {
  check_supported(dtype, head_dim);
  if (rot_dim < 2 || rot_dim % 2 != 0 || rot_dim > head_dim || rot_dim > kRopeMaxRotDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports even rotary dims 2..min(head_dim, {}), not {}",
         kRopeMaxRotDim, rot_dim);
  }
  RopeConfig c;
  c.mode = mode;
  c.dtype = dtype;
  c.head_dim = static_cast<int>(head_dim);
  c.rot_dim = static_cast<int>(rot_dim);
  c.interleave = interleave;
  const int elem = static_cast<int>(dtype_size(dtype));
  // The widest vector that divides the head, each rotated run (a NeoX half, or the GPT-J pairs)
  // and the alignment; narrower down to scalar for odd sizes and misaligned views.
  const int run = interleave ? c.rot_dim : c.rot_dim / 2;
  c.vec = 16 / elem;
  while (c.vec > 1 && (c.head_dim % c.vec != 0 || run % c.vec != 0 || c.vec * elem > align_bytes)) {
    c.vec /= 2;
  }
  return c;
}

RopeConfig plan_rope(RopeConfig cfg, int64_t tokens, bool early_indices, const RopeTuning& tuning) {
  const RopeLayout layout = tuning.layout;
  const bool decode_size = tokens <= kRopeUnitMajorMaxTokens;
  const bool by_size = layout == RopeLayout::kAuto || layout == RopeLayout::kDecode;
  if ((layout == RopeLayout::kAuto && decode_size) || layout == RopeLayout::kDecode) {
    cfg.decode = rope_decode_supported(cfg) ? 1 : 0;
  }
  if (cfg.decode != 0) {
    cfg.early_pos = early_indices ? 1 : 0;
  } else {
    // Only the frequency table (constant memory) gains from the unit-major layout; cos_sin_cache
    // rows are coalesced global reads in either.
    cfg.unit_major =
        by_size ? cfg.mode != RopeMode::kCache && decode_size : layout == RopeLayout::kUnitMajor;
  }
  return cfg;
}

std::string rope_uri(const RopeConfig& c) {
  return rope_spec(c).uri;
}

// One name a setting, from the config field to the kernels' template parameters (in upper case).
// The decode kernel has EARLY_POS where rope_kernel has UNIT_MAJOR.
jit::Spec rope_spec(const RopeConfig& c) {
  jit::SpecBuilder b("rope", {"common", "rope"}, "rope/rope.cuh");
  b.choice("mode", mode_name(c.mode),
           c.mode == RopeMode::kFreq    ? rope::kModeFreq
           : c.mode == RopeMode::kCache ? rope::kModeCache
                                        : rope::kModeIndptr);
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("head_dim", c.head_dim).value("rot_dim", c.rot_dim);
  b.flag("interleave", c.interleave != 0).value("vec", c.vec);
  b.flag("unit_major", c.unit_major != 0, /*omit_false=*/true);
  b.flag("decode", c.decode != 0, /*omit_false=*/true);
  b.flag("early_pos", c.early_pos != 0, /*omit_false=*/true);
  if (c.decode != 0) {
    b.entry("kjit::rope::rope_decode_kernel",
            {"dtype", "head_dim", "rot_dim", "interleave", "vec", "mode", "early_pos"});
  } else {
    b.entry("kjit::rope::rope_kernel",
            {"dtype", "head_dim", "rot_dim", "interleave", "vec", "mode", "unit_major"});
  }
  return b.build();
}

std::vector<double> rope_inv_freq(int rot_dim, double scale, double theta) {
  std::vector<double> f(static_cast<size_t>(rot_dim / 2));
  for (int i = 0; i < rot_dim / 2; ++i) {
    f[i] = std::pow(theta, -2.0 * i / rot_dim) / scale;
  }
  return f;
}

std::vector<double> llama31_inv_freq(int rot_dim, double scale, double theta,
                                     double low_freq_factor, double high_freq_factor,
                                     double old_context_len) {
  std::vector<double> f(static_cast<size_t>(rot_dim / 2));
  for (int i = 0; i < rot_dim / 2; ++i) {
    const double base = std::pow(theta, -2.0 * i / rot_dim);
    // smooth = (old_context_len / wavelen - low) / (high - low), wavelen = 2 pi / base, clamped:
    // 0 in the low band (wavelen > old_context_len / low: fully scaled), 1 in the high band.
    double smooth = (old_context_len * base / (2.0 * kPi) - low_freq_factor) /
                    (high_freq_factor - low_freq_factor);
    smooth = std::clamp(smooth, 0.0, 1.0);
    f[i] = (1.0 - smooth) * base / scale + smooth * base;
  }
  return f;
}

namespace {

// A frequency-table call's trace line: the definition of `kind` (pos_ids or llama31) in the
// position source `indptr` gives (NULL: pos_ids).
void trace_freq_rope(RopeKind kind, const QkViews& v, int rot, int interleave,
                     const StridedView& pos, const StridedView* indptr) {
  if (!trace::enabled() || v.tokens == 0 || v.q_heads + v.k_heads == 0) return;
  RopeDefAxes a{kind, v.q.dtype, v.q_heads, v.k_heads, v.head_dim, rot, interleave != 0, pos.dtype};
  a.indptr = indptr != nullptr;
  trace::rope(a, v.tokens, 0, indptr != nullptr ? pos.shape[0] : 0);
}

}  // namespace

void apply_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out,
                        const DLTensor* pos_ids, int rotary_dim, int interleave, float rope_scale,
                        float rope_theta, void* stream, const ElementwiseLaunch& launch,
                        const RopeTuning& tuning) {
  StridedView pos;
  auto [v, rot] = check_pos_ids_call(q, k, q_out, k_out, pos_ids, rotary_dim, interleave,
                                     rope_scale, rope_theta, &pos);
  trace_freq_rope(RopeKind::kPosIds, v, rot, interleave, pos, nullptr);
  const FreqKey key = plain_key(rot, rope_scale, rope_theta);
  launch_freq_rope(v, pos, nullptr, key, interleave != 0, launch, tuning, stream,
                   [&] { return inv_freq_of(key); });
}

void apply_llama31_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                DLTensor* k_out, const DLTensor* pos_ids, int rotary_dim,
                                int interleave, float rope_scale, float rope_theta,
                                float low_freq_factor, float high_freq_factor,
                                float old_context_len, void* stream,
                                const ElementwiseLaunch& launch, const RopeTuning& tuning) {
  StridedView pos;
  auto [v, rot] = check_pos_ids_call(q, k, q_out, k_out, pos_ids, rotary_dim, interleave,
                                     rope_scale, rope_theta, &pos);
  const FreqKey key =
      llama31_key(rot, rope_scale, rope_theta, low_freq_factor, high_freq_factor, old_context_len);
  trace_freq_rope(RopeKind::kLlama31, v, rot, interleave, pos, nullptr);
  launch_freq_rope(v, pos, nullptr, key, interleave != 0, launch, tuning, stream,
                   [&] { return inv_freq_of(key); });
}

void apply_rope_indptr(const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out,
                       const DLTensor* indptr, const DLTensor* offsets, int rotary_dim,
                       int interleave, float rope_scale, float rope_theta, void* stream,
                       const ElementwiseLaunch& launch, const RopeTuning& tuning) {
  StridedView ind, off;
  auto [v, rot] = check_indptr_call(q, k, q_out, k_out, indptr, offsets, rotary_dim, interleave,
                                    rope_scale, rope_theta, &ind, &off);
  trace_freq_rope(RopeKind::kPosIds, v, rot, interleave, off, &ind);
  const FreqKey key = plain_key(rot, rope_scale, rope_theta);
  launch_freq_rope(v, off, &ind, key, interleave != 0, launch, tuning, stream,
                   [&] { return inv_freq_of(key); });
}

void apply_llama31_rope_indptr(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                               DLTensor* k_out, const DLTensor* indptr, const DLTensor* offsets,
                               int rotary_dim, int interleave, float rope_scale, float rope_theta,
                               float low_freq_factor, float high_freq_factor, float old_context_len,
                               void* stream, const ElementwiseLaunch& launch,
                               const RopeTuning& tuning) {
  StridedView ind, off;
  auto [v, rot] = check_indptr_call(q, k, q_out, k_out, indptr, offsets, rotary_dim, interleave,
                                    rope_scale, rope_theta, &ind, &off);
  const FreqKey key =
      llama31_key(rot, rope_scale, rope_theta, low_freq_factor, high_freq_factor, old_context_len);
  trace_freq_rope(RopeKind::kLlama31, v, rot, interleave, off, &ind);
  launch_freq_rope(v, off, &ind, key, interleave != 0, launch, tuning, stream,
                   [&] { return inv_freq_of(key); });
}

namespace {

// vLLM's q / k: [tokens, heads * head_size] or [tokens, heads, head_size], as a 3-D view.
StridedView heads_view(const DLTensor* t, const char* name, int head_size) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim == 3) {
    if (v.shape[2] != head_size) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} last dim is {} but head_size is {}", name, v.shape[2],
           head_size);
    }
    return v;
  }
  if (v.ndim != 2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "{} must be [tokens, heads * head_size] or [tokens, heads, head_size], got ndim {}", name,
         v.ndim);
  }
  if (v.shape[1] % head_size != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} row of {} is not a multiple of head_size {}", name,
         v.shape[1], head_size);
  }
  v.ndim = 3;
  v.shape[2] = head_size;
  v.strides[2] = 1;
  v.shape[1] /= head_size;
  v.strides[1] = head_size;
  return v;
}

}  // namespace

void apply_rope_with_cos_sin_cache(const DLTensor* positions, DLTensor* q, DLTensor* k,
                                   int head_size, const DLTensor* cos_sin_cache, int is_neox,
                                   void* stream, const ElementwiseLaunch& launch,
                                   const RopeTuning& tuning) {
  if (head_size <= 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "head_size must be > 0, got {}", head_size);
  }
  QkViews v;
  v.q = heads_view(q, "q", head_size);
  if (k != nullptr) {
    v.k = heads_view(k, "k", head_size);
    check_same_dtype_device(v.q, "q", v.k, "k");
    if (v.k.shape[0] != v.q.shape[0]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "k has {} tokens but q has {}", v.k.shape[0], v.q.shape[0]);
    }
  } else {
    // No key (vLLM's optional key): a view with zero heads.
    v.k = v.q;
    v.k.shape[1] = 0;
  }
  check_writable(v.q, "q");
  check_writable(v.k, "k");
  if (views_overlap(v.q, v.k)) fail(KJIT_ERROR_INVALID_ARGUMENT, "k overlaps q");
  v.q_out = v.q;
  v.k_out = v.k;
  v.tokens = v.q.shape[0];
  v.q_heads = v.q.shape[1];
  v.k_heads = v.k.shape[1];
  v.head_dim = head_size;

  StridedView pos = positions_view(positions, "positions", v.tokens, v.q);
  StridedView cache = as_strided_view(cos_sin_cache, "cos_sin_cache");
  if (cache.ndim != 2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "cos_sin_cache must be [max_position, rotary_dim], got ndim {}", cache.ndim);
  }
  if (cache.dtype != DType::kF32 && cache.dtype != v.q.dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "cos_sin_cache must be fp32 or q's dtype ({}), got {}",
         dtype_name(v.q.dtype), dtype_name(cache.dtype));
  }
  if (cache.device != v.q.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "cos_sin_cache is on cuda:{} but q is on cuda:{}",
         cache.device, v.q.device);
  }
  const int64_t rot = cache.shape[1];
  if (rot < 2 || rot % 2 != 0 || rot > head_size) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "cos_sin_cache rotary_dim (its last dim) must be even and in 2..head_size ({}), got {}",
         head_size, rot);
  }
  for (const auto& [view, name] : {std::pair{&v.q, "q"}, std::pair{&v.k, "k"}}) {
    check_no_alias(*view, name, pos, "positions", false);
    check_no_alias(*view, name, cache, "cos_sin_cache", false);
  }
  check_flag(is_neox, "is_neox");
  if (trace::enabled() && v.tokens > 0 && v.q_heads + v.k_heads > 0) {
    trace::rope({RopeKind::kCosSinCache, v.q.dtype, v.q_heads, v.k_heads, head_size, rot,
                 is_neox == 0, pos.dtype, cache.dtype},
                v.tokens, cache.shape[0]);
  }
  RopeLaunch l;
  l.mode = RopeMode::kCache;
  l.interleave = is_neox == 0;
  l.rot_dim = static_cast<int>(rot);
  l.pos = &pos;
  l.launch = &launch;
  l.tuning = &tuning;
  l.cache = &cache;
  launch_rope(v, l, stream);
}

}  // namespace kjit::ops
