// Sampling: softmax, argmax, and the sorting-free top-k / top-p / min-p filters with sampling,
// renormalization or masking (device code: kernels/sampling/). Specialization choice, spec
// rendering and the op registry entries live in sampling.cpp; argument checks and launches of the
// public ops in sampling_ops.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"
#include "sampling/sampling_params.h"
#include "sampling/top_k_params.h"

namespace kjit::ops {

// What a filter kernel reads and what it produces.
enum class FilterInput : int { kProbs = 0, kLogits = 1, kLogitKeys = 2 };  // kLogitKeys: mask
enum class FilterOp : int { kSample = 0, kRenorm = 1, kMask = 2 };

// One compiled filter variant (kernels/sampling/sampling.cuh). Every field is in the URI; the
// vocabulary, the filters and their parameters are launch-time values.
struct FilterConfig {
  FilterOp op = FilterOp::kSample;
  FilterInput input = FilterInput::kProbs;
  DType dtype = DType::kF32;
  int vec = 1;      // elements per vector load (16 bytes, or 1)
  int unroll = 8;   // vector loads in flight per lane
  int cluster = 0;  // 1: the thread-block-cluster variant (sample, sm_90+), cluster size at launch
  int mass = 0;     // 1: top-p sums exact significands per bin; sample only, rows without a top-k
};

// One compiled softmax or argmax variant.
struct RowConfig {
  DType dtype = DType::kF32;
  int vec = 1;
  int unroll = 8;
  int cluster = 1;  // argmax, softmax: blocks per row, a sm_90 thread-block cluster when > 1
};

inline constexpr int64_t kFilterMaxVocab = 262144;      // 1024 segments of >= 256 elements
inline constexpr int64_t kRowKernelMaxVocab = 1 << 24;  // softmax / argmax

// Support and dispatch in one place. `vec_ok`: the vocabulary and every row pointer and stride
// allow 16-byte vectors. Throw KJIT_ERROR_UNSUPPORTED for a dtype or size no variant serves.
FilterConfig select_filter(FilterOp op, FilterInput input, DType dtype, int64_t vocab, bool vec_ok);
RowConfig select_softmax(DType dtype, int64_t vocab, bool vec_ok);
RowConfig select_argmax(DType dtype, int64_t vocab, bool vec_ok);

// Which argmax launch serves a call: kAuto picks a cluster of blocks per row on sm_90+ when the
// batch alone would leave SMs idle, else one block per row.
enum class ArgmaxPath : int { kAuto = 0, kBlock = 1, kCluster = 2 };
// Blocks per row for `path` (cluster: `forced_cluster` in 2..8, or 0 for the heuristic's size,
// at least 2). Throws KJIT_ERROR_UNSUPPORTED for kCluster below sm_90.
int argmax_cluster_size(ArgmaxPath path, int forced_cluster, int64_t batch, int64_t vocab,
                        int sm_count, int cc_major);

// Overrides of the argmax plan, for the bench and the tests; the C entry point takes the plan's
// (a default ArgmaxTuning). Zero fields keep the plan's choice.
struct ArgmaxTuning {
  ArgmaxPath path = ArgmaxPath::kAuto;
  int cluster = 0;  // with kCluster: blocks per row (2, 4 or 8), 0 the heuristic's
  int threads = 0;  // threads per block: a multiple of 32 to 1024
  int unroll = 0;   // vector loads in flight per lane: 1, 2, 4 or 8
};
// Throws KJIT_ERROR_INVALID_ARGUMENT for a block size or unroll no launch takes.
void check_argmax_tuning(const ArgmaxTuning& tuning);

// One kjit_argmax launch: the compiled variant and the threads per block.
struct ArgmaxPlan {
  RowConfig cfg;
  int threads = 0;
};
// select_argmax, then blocks per row (argmax_cluster_size) and the block size, with `tuning`
// applied. Throws as select_argmax, argmax_cluster_size and check_argmax_tuning do.
ArgmaxPlan plan_argmax(DType dtype, int64_t batch, int64_t vocab, bool vec_ok, int sm_count,
                       int cc_major, const ArgmaxTuning& tuning = {});

jit::Spec filter_spec(const FilterConfig& cfg);
std::string filter_uri(const FilterConfig& cfg);
jit::Spec softmax_spec(const RowConfig& cfg);
std::string softmax_uri(const RowConfig& cfg);
jit::Spec argmax_spec(const RowConfig& cfg);
std::string argmax_uri(const RowConfig& cfg);

// Threads per block for a row of `vocab` elements read `vec * unroll` per thread per step.
int sampling_block_threads(int64_t vocab, int vec, int unroll);
// The one-block sampler's threads: `wide` (sampling_block_threads), or at most
// kSampleSplitThreads where the rows outnumber the SMs, one wave of `wide` blocks' rows already
// overflows the L2 (`row_bytes` each), and the rows search a top-k or top-p threshold (`filters`,
// SamplingParams' bits). The kernel's 1024-thread launch bound keeps it within 64 registers (one
// 1024-thread block an SM), so two 512-thread blocks then share an SM: one block's barriers,
// scans and searches between passes overlap the other's loads, and up to twice the SMs' rows run
// in one wave. Where the rows in flight fit the L2, a row's later passes find it there and
// narrower blocks (more rows in flight) lose that. Bench rows -t512 against the plan's 1024
// threads, V 128256, the same call: H100 (2026-12-06), top-p fp32 probabilities B256 161.6 ->
// 142.9 us, B1024 632.9 -> 555.3; H200 (2026-12-06), top-k probabilities B256 115.4 -> 105.8,
// top-k + top-p probabilities 124.2 -> 110.6, fp32 logits 142.6 -> 124.3, but bf16 logits (34 MB
// a wave, within the L2) 108.1 -> 112.2 and B1024 424.8 -> 433.6, min-p alone (two passes, no
// search) 69.7 -> 93.2.
inline constexpr int kSampleSplitThreads = 512;
int sampling_single_block_threads(int wide, int64_t batch, int sm_count, int64_t row_bytes,
                                  int64_t l2_bytes, int filters);
// The most threads a cluster block takes (the kernel's kClusterMaxThreads: its launch bound).
inline constexpr int kSampleClusterMaxThreads = 512;
// Threads per block of a sampling cluster whose blocks each walk `share` elements: about 16 a
// thread, a multiple of 32 in 128..kSampleClusterMaxThreads. Every block of a cluster repeats
// the fixed work of a level (barriers, block scans, the bin searches), which grows with the
// block, while its walks shrink: V 128256 on 16 blocks (8016 elements each) took 27.4 us at 512
// threads, 29.8 at 384, 31.1 at 1024 (H200, exact-mass top-p). The draw's sums are integers,
// so the leader draws the one-block path's token at any block size.
int sampling_cluster_block_threads(int64_t share);

// Which kernel path the samplers take. kAuto: a cluster of blocks per row (sm_90+) while the
// batch leaves most SMs idle, else one block per row; the others force a path, so that tests and
// the bench can compare them.
enum class SamplePath : int { kAuto = 0, kSingle = 1, kCluster = 2 };

// Overrides of a sampler's plan, for the bench and the tests; the C entry points take the plan's
// (a default SampleTuning).
struct SampleTuning {
  SamplePath path = SamplePath::kAuto;
  // With kCluster: blocks per row, 2..kSampleMaxCluster; 0 the batch's choice. (A cluster of one
  // was tried, 2026-12-05: its cluster merge assumes two blocks or more, and the one-block
  // kernel, which runs the same list modes since, was faster at every large batch.)
  int cluster = 0;
  // Threads per block, a multiple of 32 in 32..1024; 0 the plan's (sampling_block_threads,
  // sampling_cluster_block_threads). A cluster takes at most kSampleClusterMaxThreads (a larger
  // size runs one block a row under kAuto and is refused under kCluster). Every size draws the
  // same token (the draw's sums are integers).
  int threads = 0;
  // The top-p search: 1 the exact-mass one (FilterConfig::mass), 0 counts with mass bounds, -1
  // the plan's (sample_mass). Rows that may have a top-k always count (sample_mass).
  int mass = -1;
  // With kSingle: at most this many blocks an SM at once (shared-memory padding), so that fewer
  // rows are in flight and a row's later passes may find it in L2 (a large batch's rows together
  // exceed it); 0 the occupancy's (two 1024-thread blocks an SM).
  int blocks_per_sm = 0;
};
// Throws KJIT_ERROR_INVALID_ARGUMENT for a field no launch takes.
void check_sample_tuning(const SampleTuning& tuning);
// The mass mode of a sample launch (0 or 1): 0 when the rows may have a top-k (their search
// counts keys; the exact kernels hold no top-k search, which halves their compile time), else
// the tuning's, else the exact search. The exact search took 31.1 against 42.4 us at B1 and 52.1
// against 67.1 at B64 (H200, V 128256, top-p 0.9 from probabilities).
int sample_mass(const SampleTuning& tuning, bool top_k_rows);

// What a sampler launch ran, for the bench's label and URI.
struct SampleRan {
  int cluster_size = 1;  // blocks per row
  int mass = 0;          // the top-p search (FilterConfig::mass)
  // The cluster kernel ran (clusters have two blocks or more).
  bool cluster_kernel() const { return cluster_size > 1; }
};

// The most blocks a sampling cluster takes.
inline constexpr int kSampleMaxCluster = 16;

// One block a row, exact top-p search: the most keys its list takes in dynamic shared memory
// (SamplingParams::list_cap, in place of the kernel's static sampling::kListStaticKeys).
inline constexpr int kSampleListMaxKeys = 32768;
// The smallest vocabulary the automatic choice splits over a cluster: below it one block is
// already short, and a cluster's barriers would cost more than its split saves.
inline constexpr int64_t kSampleClusterMinVocab = 16384;

// A filter parameter: one value per row from a device tensor, or `scalar` for every row when
// `per_row` is NULL.
template <typename S>
struct RowParam {
  const DLTensor* per_row = nullptr;
  S scalar{};
};

// Validate, then launch on `stream`. Throw kjit::Error. The C entry points (kjit.h) document
// the arguments; seed and offset are device tensors so the launch never reads device memory.
// Blocks per softmax row: on sm_90+ a cluster of 2, 4 or 8 while the batch leaves SMs idle and
// each part keeps >= 4096 elements, else 1.
int softmax_cluster_size(int64_t batch, int64_t vocab, int sm_count, int cc_major);
// An override of softmax's blocks per row, for the bench and the tests (0: the plan's,
// softmax_cluster_size; 1: one block per row; 2, 4, 8: a cluster, sm_90+).
struct SoftmaxTuning {
  int cluster = 0;
};
void softmax(const DLTensor* logits, DLTensor* out, RowParam<float> temperature, void* stream,
             const SoftmaxTuning& tuning = {});
void argmax(const DLTensor* input, DLTensor* out, void* stream, const ArgmaxTuning& tuning = {});

struct SampleArgs {
  RowParam<int> top_k;
  RowParam<float> top_p;
  RowParam<float> min_p;
  RowParam<float> temperature;
  int filters = 0;  // kjit::sampling filter bits (1 top-k, 2 top-p, 4 min-p)
};
void sample(const char* input_name, FilterInput input, const DLTensor* x, const SampleArgs& args,
            const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid,
            void* stream, const SampleTuning& tuning = {}, SampleRan* ran = nullptr);
void top_k_renorm_probs(const DLTensor* probs, RowParam<int> top_k, DLTensor* out, void* stream);
void top_p_renorm_probs(const DLTensor* probs, RowParam<float> top_p, DLTensor* out, void* stream);
void top_k_mask_logits(const DLTensor* logits, RowParam<int> top_k, DLTensor* out, void* stream);

// ---- kjit_top_k (kernels/sampling/top_k.cuh): one block per row --------------------------------

inline constexpr int64_t kTopKMaxK = sampling::kTopKMax;
// Support and dispatch: KJIT_ERROR_UNSUPPORTED for a dtype, row length or k (above kTopKMaxK)
// no variant serves. The config is a RowConfig (dtype, vec, unroll; no cluster).
RowConfig select_top_k(DType dtype, int64_t vocab, int64_t k, bool vec_ok);
jit::Spec top_k_spec(const RowConfig& cfg);
std::string top_k_uri(const RowConfig& cfg);
// Validate, then launch on `stream`; throws kjit::Error (kjit.h documents the arguments).
void top_k(const DLTensor* input, DLTensor* values, DLTensor* indices, int k, void* stream);

// The filter bits of SampleArgs::filters (the kernels' SamplingParams::filters).
inline constexpr int kFilterTopK = sampling::kFilterTopK, kFilterTopP = sampling::kFilterTopP,
                     kFilterMinP = sampling::kFilterMinP;

}  // namespace kjit::ops
