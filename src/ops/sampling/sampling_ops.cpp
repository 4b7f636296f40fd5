// The sampling family's public ops: argument checks, then one launch each. Every check runs
// before anything is compiled or launched, and nothing here reads device memory or waits for
// the device, so each op can be captured in a CUDA graph (after its first call has loaded the
// kernel).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "ops/sampling/sampling.hpp"
#include "ops/sampling/sampling_args.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "sampling/sampling_params.h"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace sampling_args;
using sampling::ArgmaxParams;
using sampling::SamplingParams;
using sampling::SoftmaxParams;

void check_top_k_scalar(int top_k) {
  if (top_k < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "top_k must be >= 1 (vocab or more: no top-k), got {}",
         top_k);
  }
}

void check_top_p_scalar(float top_p) {
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "top_p must be in (0, 1], got {}", top_p);
  }
}

void check_min_p_scalar(float min_p) {
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "min_p must be in [0, 1], got {}", min_p);
  }
}

void check_temperature_scalar(float t, bool zero_ok) {
  if (!(std::isfinite(t) && (zero_ok ? t >= 0.0f : t > 0.0f))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "temperature must be finite and {}, got {}",
         zero_ok ? ">= 0" : "> 0", t);
  }
}

// The top-k parameter: per-row int32 / int64, or a scalar >= 1.
void top_k_param(const RowParam<int>& k, const Batch& b, SamplingParams& p,
                 std::vector<Span>& spans) {
  if (k.per_row != nullptr) {
    Vector v = as_vector(k.per_row, "top_k_arr");
    if (!is_type(v.dtype, kDLInt, 32) && !is_type(v.dtype, kDLInt, 64)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "top_k_arr must be int32 or int64, got {}",
           type_text(v.dtype));
    }
    check_length(v, b.batch, false);
    check_device(v, b);
    p.top_k_arr = v.data;
    p.top_k_i64 = v.elem == 8;
    spans.push_back(span_of(v));
  } else {
    check_top_k_scalar(k.scalar);
    p.top_k = k.scalar;
  }
}

const float* float_param(const RowParam<float>& f, const char* arr_name, const Batch& b,
                         std::vector<Span>& spans) {
  if (f.per_row == nullptr) return nullptr;
  Vector v = float_row_param(f.per_row, arr_name, b);
  spans.push_back(span_of(v));
  return reinterpret_cast<const float*>(v.data);
}

// Dynamic shared memory for a cluster of n blocks: room for each block's share of the row, which
// it then reads from global memory once, when that fits beside the kernel's static shared memory
// (under 48 KB); else 0 and every pass reads the share from L2.
unsigned cluster_cache_bytes(const FilterConfig& cfg, const Batch& b, int n, int smem_optin) {
  const int64_t seg = int64_t{32} * cfg.vec * cfg.unroll;
  const int64_t nseg = (b.vocab + seg - 1) / seg;
  const int64_t bytes = (nseg + n - 1) / n * seg * static_cast<int64_t>(dtype_size(b.m.dtype));
  return bytes <= smem_optin - 48 * 1024 ? static_cast<unsigned>(bytes) : 0u;
}

// Threads per block of a cluster of n blocks: the tuning's block size, else about 16 elements a
// thread of the block's share.
unsigned cluster_threads(const Batch& b, int n, const SampleTuning& tuning) {
  return static_cast<unsigned>(
      tuning.threads > 0 ? tuning.threads : sampling_cluster_block_threads((b.vocab + n - 1) / n));
}

// The automatic cluster size of a sampler: the largest of 16, 8, 4, 2 for which the whole batch
// runs in one wave of clusters and every block keeps at least one segment of the row; 0 when
// none does (one block per row then). The occupancy answers are cached per kernel, size and
// shared memory, so a call being captured into a graph asks nothing of the driver after the
// first.
int auto_cluster_size(CUfunction fn, const FilterConfig& cfg, const Batch& b, int smem_optin,
                      const SampleTuning& tuning) {
  static std::mutex mu;
  static std::map<std::tuple<CUfunction, unsigned, unsigned, unsigned>, int> active;
  const int64_t seg = int64_t{32} * cfg.vec * cfg.unroll;
  const int64_t nseg = (b.vocab + seg - 1) / seg;
  for (unsigned n : {16u, 8u, 4u, 2u}) {
    if (static_cast<int64_t>(n) > nseg) continue;
    const unsigned smem = cluster_cache_bytes(cfg, b, static_cast<int>(n), smem_optin);
    const unsigned threads = cluster_threads(b, static_cast<int>(n), tuning);
    int clusters;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = active.find({fn, n, threads, smem});
      if (it == active.end()) {
        it = active
                 .emplace(std::make_tuple(fn, n, threads, smem),
                          cuda::max_active_clusters(fn, n, threads, smem))
                 .first;
      }
      clusters = it->second;
    }
    if (b.batch <= clusters) return static_cast<int>(n);
  }
  return 0;
}

// Launches `cfg` over the cluster path when the tuning or the batch asks for it (sm_90+) and
// returns its blocks per row; 0 when the one-block kernel serves instead.
int launch_filter_cluster(const FilterConfig& cfg, const Batch& b, SamplingParams& p,
                          cuda::LaunchConfig lc, const SampleTuning& tuning) {
  // Small batches split each row over a cluster (sm_90+). The split draws the same token as one
  // block: the thresholds are the same exact rule, and the draw runs on one block over the same
  // per-segment masses.
  const cuda::DeviceInfo& info = cuda::device_info(b.m.device);
  const bool forced = tuning.path == SamplePath::kCluster;
  if (info.major < 9 && forced) {
    fail(KJIT_ERROR_UNSUPPORTED, "the cluster sampling path needs sm_90 or later, not sm_{}{}",
         info.major, info.minor);
  }
  // Auto considers clusters only where two blocks a row still fit the SMs in one wave, so a
  // large batch never compiles the cluster variant.
  const bool small = b.vocab >= kSampleClusterMinVocab && b.batch * 2 <= info.sm_count;
  // A block size above the cluster kernel's launch bound takes one block a row unless the
  // cluster path is forced too, which it cannot serve.
  const bool threads_ok = tuning.threads <= kSampleClusterMaxThreads;
  if (forced && !threads_ok) {
    fail(KJIT_ERROR_UNSUPPORTED, "a sampling cluster block takes at most {} threads, not {}",
         kSampleClusterMaxThreads, tuning.threads);
  }
  if (info.major < 9 || !threads_ok || !(forced || small)) return 0;
  FilterConfig cc = cfg;
  cc.cluster = 1;
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for("sampling_filter", cc, b.m.device,
                                                                 [&] { return filter_spec(cc); });
  cuda::ScopedDevice scope(b.m.device);
  int n = forced ? tuning.cluster : 0;
  if (n == 0) n = auto_cluster_size(k.functions.at(0), cfg, b, info.max_smem_optin, tuning);
  if (n == 0 && forced) n = 2;
  if (n < 2) return 0;
  lc.block_x = cluster_threads(b, n, tuning);
  lc.smem_bytes = cluster_cache_bytes(cfg, b, n, info.max_smem_optin);
  if (b.batch > int64_t{0x7fffffff} / n) {
    fail(KJIT_ERROR_UNSUPPORTED, "a batch of {} rows is too large for clusters of {}", b.batch, n);
  }
  lc.grid_x = static_cast<unsigned>(b.batch * n);
  cuda::launch_cluster(k.functions.at(0), lc, static_cast<unsigned>(n), &p);
  return n;
}

// The keys the exact top-p search's list of the one-block kernel `fn` (blocks of `threads`)
// takes in dynamic shared memory, up to kSampleListMaxKeys; 0: the kernel's static list. A
// window of a few thousand keys (a flat row's) then fits, where the static list would send the
// search back to its level passes over the row. The list takes the shared memory the blocks an
// SM runs anyway leave free: `blocks_per_sm` when the tuning caps them, else as many as registers
// and threads allow (one 1024-thread block, two of 512), so it never lowers the rows in flight
// (on the H200 a list as wide as one block allows cost 512-thread blocks a third of their speed,
// top-p fp32 B256 167 -> 224 us). Asked of the driver once per kernel, size and cap, so a call
// being captured into a graph asks nothing of it after the first.
int list_keys(CUfunction fn, unsigned threads, int blocks_per_sm, const cuda::DeviceInfo& info) {
  static std::mutex mu;
  static std::map<std::tuple<CUfunction, unsigned, int>, int> keys;
  std::lock_guard<std::mutex> lock(mu);
  auto it = keys.find({fn, threads, blocks_per_sm});
  if (it == keys.end()) {
    const int blocks = blocks_per_sm > 0 ? blocks_per_sm : cuda::max_active_blocks(fn, threads, 0);
    const unsigned room = cuda::smem_padding_for_blocks(fn, std::max(blocks, 1), info.smem_per_sm,
                                                        info.smem_reserved, info.max_smem_optin);
    const int n = std::min<int>(kSampleListMaxKeys, static_cast<int>(room / 4));
    it = keys.emplace(std::make_tuple(fn, threads, blocks_per_sm),
                      n > sampling::kListStaticKeys ? n : 0)
             .first;
  }
  return it->second;
}

// Launches `cfg` on one block per row or a cluster per row; returns what ran.
SampleRan launch_filter(const FilterConfig& cfg, const Batch& b, SamplingParams& p, void* stream,
                        const SampleTuning& tuning = {}) {
  cuda::LaunchConfig lc;
  lc.block_x = static_cast<unsigned>(sampling_block_threads(b.vocab, cfg.vec, cfg.unroll));
  if (tuning.threads > 0) lc.block_x = static_cast<unsigned>(tuning.threads);
  lc.stream = static_cast<CUstream>(stream);
  if (cfg.op == FilterOp::kSample && tuning.path != SamplePath::kSingle) {
    if (const int n = launch_filter_cluster(cfg, b, p, lc, tuning); n >= 1) {
      return SampleRan{n, cfg.mass};
    }
  }
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for("sampling_filter", cfg, b.m.device,
                                                                 [&] { return filter_spec(cfg); });
  lc.grid_x = static_cast<unsigned>(b.batch);
  cuda::ScopedDevice scope(b.m.device);
  const cuda::DeviceInfo& info = cuda::device_info(b.m.device);
  if (cfg.op == FilterOp::kSample && tuning.threads == 0) {
    lc.block_x = static_cast<unsigned>(sampling_single_block_threads(
        static_cast<int>(lc.block_x), b.batch, info.sm_count,
        b.vocab * static_cast<int64_t>(dtype_size(cfg.dtype)), info.l2_bytes, p.filters));
  }
  if (tuning.blocks_per_sm > 0) {
    lc.smem_bytes =
        cuda::smem_padding_for_blocks(k.functions.at(0), tuning.blocks_per_sm, info.smem_per_sm,
                                      info.smem_reserved, info.max_smem_optin);
  }
  // The exact top-p search's list in dynamic shared memory (list_keys).
  p.list_cap = cfg.op == FilterOp::kSample && cfg.mass == 1
                   ? list_keys(k.functions.at(0), lc.block_x, tuning.blocks_per_sm, info)
                   : 0;
  lc.smem_bytes = std::max(lc.smem_bytes, static_cast<unsigned>(p.list_cap) * 4u);
  cuda::launch(k.functions.at(0), lc, &p);
  return SampleRan{1, cfg.mass};
}

// The renorm / mask output: [batch, vocab] of `dtype`, either input itself (the same view) or
// not overlapping it.
RowMatrix matrix_out(const DLTensor* out, const Batch& in, DType dtype, const char* in_name) {
  RowMatrix o = as_row_matrix(out, "out");
  if (out->ndim != 2 || out->shape[0] != in.batch || out->shape[1] != in.vocab) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be [{}, {}] like {}", in.batch, in.vocab, in_name);
  }
  if (o.dtype != dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be {}, got {}", dtype_name(dtype),
         dtype_name(o.dtype));
  }
  check_same_device(in.m, in_name, o, "out");
  if (o.numel() > 0 && row_alignment(o) < static_cast<int>(dtype_size(o.dtype))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out is misaligned for {} elements", dtype_name(o.dtype));
  }
  if (partially_overlaps(in.m, o)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps {} without being the same view", in_name);
  }
  return o;
}

}  // namespace

void sample(const char* input_name, FilterInput input, const DLTensor* x, const SampleArgs& a,
            const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid,
            void* stream, const SampleTuning& tuning, SampleRan* ran) {
  check_sample_tuning(tuning);
  const Batch b = as_batch(x, input_name);
  SamplingParams p{};
  std::vector<Span> spans = {span_of(b.m, input_name)};
  p.filters = a.filters;
  if (a.filters & kFilterTopK) top_k_param(a.top_k, b, p, spans);
  if (a.filters & kFilterTopP) {
    p.top_p_arr = float_param(a.top_p, "top_p_arr", b, spans);
    if (p.top_p_arr == nullptr) check_top_p_scalar(a.top_p.scalar);
    p.top_p = a.top_p.scalar;
  }
  if (a.filters & kFilterMinP) {
    p.min_p_arr = float_param(a.min_p, "min_p_arr", b, spans);
    if (p.min_p_arr == nullptr) check_min_p_scalar(a.min_p.scalar);
    p.min_p = a.min_p.scalar;
  }
  if (input == FilterInput::kLogits) {
    p.temp_arr = float_param(a.temperature, "temperature_arr", b, spans);
    if (p.temp_arr == nullptr) check_temperature_scalar(a.temperature.scalar, true);
    p.temperature = a.temperature.scalar;
  }
  const Vector sd = rng_vector(seed, "seed", b);
  const Vector of = rng_vector(offset, "offset", b);
  spans.push_back(span_of(sd));
  spans.push_back(span_of(of));
  const Vector out = index_vector(samples, "samples", b);
  spans.push_back(span_of(out));
  std::vector<Span> written = {span_of(out)};
  if (valid != nullptr) {
    const Vector vv = valid_vector(valid, b);
    spans.push_back(span_of(vv));
    written.push_back(span_of(vv));
    p.valid = reinterpret_cast<unsigned char*>(vv.data);
  }
  check_no_overlap(written, spans);
  if (b.batch == 0) return;  // after validation: a zero-size call is still checked
  if (b.vocab == 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has an empty vocabulary: no token to sample", input_name);
  }
  FilterConfig cfg = select_filter(FilterOp::kSample, input, b.m.dtype, b.vocab, vec_ok(b));
  // Rows may have a top-k when the filter is on and either the rows choose it or the scalar is
  // below the vocabulary (k >= vocab is no top-k).
  const bool top_k_rows =
      (a.filters & kFilterTopK) != 0 && (a.top_k.per_row != nullptr || a.top_k.scalar < b.vocab);
  cfg.mass = sample_mass(tuning, top_k_rows);
  if (trace::enabled()) {
    trace::sampling(sample_kind(input == FilterInput::kLogits, a.filters), b.m.dtype, b.vocab,
                    b.batch);
  }

  p.input = b.m.data;
  p.samples = out.data;
  p.samples_i64 = out.elem == 8;
  p.seed = reinterpret_cast<const unsigned long long*>(sd.data);
  p.offset = reinterpret_cast<const unsigned long long*>(of.data);
  p.seed_stride = sd.n == 1 ? 0 : 1;
  p.offset_stride = of.n == 1 ? 0 : 1;
  p.per_row_seed = sd.n == 1 ? 0 : 1;
  p.rows = b.batch;
  p.in_stride = b.m.row_stride;
  p.vocab = static_cast<int>(b.vocab);
  const SampleRan r = launch_filter(cfg, b, p, stream, tuning);
  if (ran != nullptr) *ran = r;
}

namespace {

void renorm_or_mask(FilterOp op, const DLTensor* x, const RowParam<int>* top_k,
                    const RowParam<float>* top_p, DLTensor* out, void* stream) {
  const bool mask = op == FilterOp::kMask;
  const char* in_name = mask ? "logits" : "probs";
  const Batch b = as_batch(x, in_name);
  SamplingParams p{};
  std::vector<Span> spans;
  if (top_k != nullptr) {
    p.filters = kFilterTopK;
    top_k_param(*top_k, b, p, spans);
  } else {
    p.filters = kFilterTopP;
    p.top_p_arr = float_param(*top_p, "top_p_arr", b, spans);
    if (p.top_p_arr == nullptr) check_top_p_scalar(top_p->scalar);
    p.top_p = top_p->scalar;
  }
  // Renormalized probabilities are fp32 like the input; masked logits keep the logits' dtype.
  const RowMatrix o = matrix_out(out, b, mask ? b.m.dtype : DType::kF32, in_name);
  check_no_overlap({span_of(o, "out")}, spans);
  if (b.m.numel() == 0) return;  // after validation: a zero-size call is still checked
  const FilterConfig cfg = select_filter(op, mask ? FilterInput::kLogitKeys : FilterInput::kProbs,
                                         b.m.dtype, b.vocab, vec_ok(b, &o));
  if (trace::enabled()) {
    trace::sampling(mask               ? SamplingKind::kTopKMaskLogits
                    : top_k != nullptr ? SamplingKind::kTopKRenormProbs
                                       : SamplingKind::kTopPRenormProbs,
                    b.m.dtype, b.vocab, b.batch);
  }
  p.input = b.m.data;
  p.out = o.data;
  p.rows = b.batch;
  p.in_stride = b.m.row_stride;
  p.out_stride = o.row_stride;
  p.vocab = static_cast<int>(b.vocab);
  launch_filter(cfg, b, p, stream);
}

}  // namespace

void top_k_renorm_probs(const DLTensor* probs, RowParam<int> top_k, DLTensor* out, void* stream) {
  renorm_or_mask(FilterOp::kRenorm, probs, &top_k, nullptr, out, stream);
}

void top_p_renorm_probs(const DLTensor* probs, RowParam<float> top_p, DLTensor* out, void* stream) {
  renorm_or_mask(FilterOp::kRenorm, probs, nullptr, &top_p, out, stream);
}

void top_k_mask_logits(const DLTensor* logits, RowParam<int> top_k, DLTensor* out, void* stream) {
  renorm_or_mask(FilterOp::kMask, logits, &top_k, nullptr, out, stream);
}

void softmax(const DLTensor* logits, DLTensor* out, RowParam<float> temperature, void* stream,
             const SoftmaxTuning& tuning) {
  const Batch b = as_batch(logits, "logits");
  std::vector<Span> spans;
  SoftmaxParams p{};
  p.temp_arr = float_param(temperature, "temperature_arr", b, spans);
  if (p.temp_arr == nullptr) check_temperature_scalar(temperature.scalar, false);
  p.temperature = temperature.scalar;
  const RowMatrix o = matrix_out(out, b, DType::kF32, "logits");
  if (b.m.data == o.data && b.m.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out may alias logits only when both are fp32");
  }
  check_no_overlap({span_of(o, "out")}, spans);
  if (b.m.numel() == 0) return;  // after validation: a zero-size call is still checked
  RowConfig cfg = select_softmax(b.m.dtype, b.vocab, vec_ok(b, &o));
  if (tuning.cluster != 0 && tuning.cluster != 1 && tuning.cluster != 2 && tuning.cluster != 4 &&
      tuning.cluster != 8) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "softmax: blocks per row must be 0, 1, 2, 4 or 8, not {}",
         tuning.cluster);
  }
  const cuda::DeviceInfo& info = cuda::device_info(b.m.device);
  cfg.cluster = tuning.cluster > 0
                    ? tuning.cluster
                    : softmax_cluster_size(b.batch, b.vocab, info.sm_count, info.major);
  if (cfg.cluster > 1 && info.major < 9) {
    fail(KJIT_ERROR_UNSUPPORTED, "softmax: a cluster per row needs sm_90 or newer, not sm_{}{}",
         info.major, info.minor);
  }
  if (b.batch * cfg.cluster > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "softmax: {} rows exceed the grid", b.batch);
  }
  if (trace::enabled()) trace::sampling(SamplingKind::kSoftmax, b.m.dtype, b.vocab, b.batch);
  p.input = b.m.data;
  p.out = static_cast<float*>(o.data);
  p.rows = b.batch;
  p.in_stride = b.m.row_stride;
  p.out_stride = o.row_stride;
  p.vocab = static_cast<int>(b.vocab);
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for("softmax", cfg, b.m.device,
                                                                 [&] { return softmax_spec(cfg); });
  // A cluster's blocks each take a contiguous part of the row (softmax_cluster_kernel).
  const int64_t part = (b.vocab + cfg.cluster - 1) / cfg.cluster;
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(b.batch * cfg.cluster);
  lc.block_x = static_cast<unsigned>(sampling_block_threads(part, cfg.vec, cfg.unroll));
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(b.m.device);
  cuda::launch(k.functions.at(0), lc, &p);
}

void argmax(const DLTensor* input, DLTensor* out, void* stream, const ArgmaxTuning& tuning) {
  const Batch b = as_batch(input, "input");
  const Vector o = index_vector(out, "out", b);
  check_no_overlap({span_of(o)}, {span_of(b.m, "input")});
  if (b.batch == 0) return;  // after validation: a zero-size call is still checked
  if (b.vocab == 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "input has an empty vocabulary");
  select_argmax(b.m.dtype, b.vocab, vec_ok(b));  // support, before the trace and the device
  if (trace::enabled()) trace::sampling(SamplingKind::kArgmax, b.m.dtype, b.vocab, b.batch);
  const cuda::DeviceInfo& info = cuda::device_info(b.m.device);
  const ArgmaxPlan plan =
      plan_argmax(b.m.dtype, b.batch, b.vocab, vec_ok(b), info.sm_count, info.major, tuning);
  const RowConfig& cfg = plan.cfg;
  if (b.batch * cfg.cluster > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "argmax: {} rows exceed the grid", b.batch);
  }
  ArgmaxParams p{b.m.data,           o.data, b.batch, b.m.row_stride, static_cast<int>(b.vocab),
                 o.elem == 8 ? 1 : 0};
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for("argmax", cfg, b.m.device,
                                                                 [&] { return argmax_spec(cfg); });
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(b.batch * cfg.cluster);
  lc.block_x = static_cast<unsigned>(plan.threads);
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(b.m.device);
  cuda::launch(k.functions.at(0), lc, &p);
}

}  // namespace kjit::ops
