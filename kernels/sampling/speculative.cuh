// Chain speculative sampling (Leviathan et al., "Fast Inference from Transformers via Speculative
// Decoding"; Chen et al., "Accelerating Large Language Model Decoding with Speculative
// Sampling"), with FlashInfer's chain_speculative_sampling outputs.
//
// A draft model proposed num_draft tokens d_0.. for a request, with draft distributions q_i; the
// target model scored the same positions, giving p_0..p_n (one more: the bonus position). Draft
// token i is accepted when u_i * q_i(d_i) < p_i(d_i) (probability min(1, p / q)), u_i uniform. The
// output keeps the draft tokens before the first rejection j, then one token drawn from
// max(0, p_j - q_j) (normalized), or from p_n when every draft token was accepted; positions after
// the drawn one are -1. `accepted` counts the draft tokens each accepted on its own (a metric that
// ignores the stop at the first rejection), `emitted` the draft tokens kept (= j).
//
// Randomness: Philox as the samplers (philox.cuh), draw i for u_i and draw num_draft for the token,
// so a fixed seed and offset give the same output. Nothing is sorted: the draw sums the weights
// over contiguous spans (one per thread), scans the span sums and rescans the one span that holds
// u * total. Work per request: one pass over a row of the vocabulary, plus one span.
#pragma once

#include "common/prelude.cuh"
#include "sampling/block.cuh"
#include "sampling/philox.cuh"
#include "sampling/sampling_params.h"

namespace kjit {
namespace sampling {

// At most this many draft tokens: one warp decides them all with a ballot, and one lane each
// writes the num_draft + 1 outputs.
constexpr int kMaxDraftTokens = 31;

// Launch: grid = batch, block = THREADS (a multiple of 32, at most 1024), no dynamic shared
// memory. Requires 1 <= num_draft <= kMaxDraftTokens and vocab >= 1.
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
chain_speculative_kernel(const __grid_constant__ SpeculativeParams p) {
  // clang-format on
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: a multiple of 32 up to 1024");
  __shared__ double red[32];
  __shared__ int s_pos, s_pick, s_last;
  const int tid = int(threadIdx.x);
  const i64 r = i64(blockIdx.x);
  const int n = p.num_draft, vocab = p.vocab;
  const u64 seed = p.seed[r * p.seed_stride];
  const u64 offset = p.offset[r * p.offset_stride];
  const u32 sub = p.per_row_seed ? 0u : u32(r);
  const float* draft = p.draft_probs + r * p.dp_batch;
  const float* target = p.target_probs + r * p.tp_batch;
  int* out = p.out + r * p.out_batch;
  if (tid == 0) {
    s_pick = 0x7fffffff;
    s_last = -1;
  }

  // Each draft token's test, on warp 0 (lane i: token i); a token outside [0, vocab) is rejected.
  if (tid < 32) {
    int d = -1;
    bool ok = false;
    if (tid < n) {
      d = p.draft_ids[r * p.ids_batch + tid];
      if (d >= 0 && d < vocab) {
        const double u = philox_uniform_at(seed, offset, sub, u32(tid));
        const float q = draft[tid * p.dp_step + d], t = target[tid * p.tp_step + d];
        ok = u * double(q) < double(t);
      }
    }
    const unsigned acc = __ballot_sync(kFullMask, tid < n && ok);
    const unsigned rej = __ballot_sync(kFullMask, tid < n && !ok);
    const int pos = rej != 0u ? __ffs(rej) - 1 : n;  // the drawn token's position
    // The kept draft tokens and the -1 tail; position `pos` is written after the draw.
    if (tid <= n && tid != pos) out[tid] = tid < pos ? d : -1;
    if (tid == 0) {
      s_pos = pos;
      if (p.accepted != nullptr) p.accepted[r] = __popc(acc);
      if (p.emitted != nullptr) p.emitted[r] = pos;
    }
  }
  __syncthreads();
  const int pos = s_pos;

  // The drawn token's weights: max(0, p - q) after a rejection (the residual), p_n after none. A
  // residual without mass (a rejected token the draft gave no probability, with q >= p elsewhere)
  // draws from p itself.
  const float* t_row = target + pos * p.tp_step;
  const float* q_row = draft + (pos < n ? pos : 0) * p.dp_step;
  const int span = (vocab + THREADS - 1) / THREADS;
  const int lo = tid * span < vocab ? tid * span : vocab;
  const int hi = lo + span < vocab ? lo + span : vocab;
  // max(0, p - q), keeping a NaN (fmaxf would drop it) so that the row turns invalid.
  auto weight = [&](int i, bool residual) {
    const float x = t_row[i];
    if (!residual) return x;
    const float d = x - q_row[i];
    return d > 0.0f || d != d ? d : 0.0f;
  };
  bool residual = pos < n;
  double sum = 0.0, total = 0.0, start = 0.0;
  for (int pass = 0; pass < 2; ++pass) {
    sum = 0.0;
    for (int i = lo; i < hi; ++i) sum += double(weight(i, residual));
    start = block_exclusive_scan<double>(sum, red, &total);
    if (!residual || total > 0.0) break;
    residual = false;  // uniform: every thread sees the same total
  }

  // A valid distribution has a positive, finite mass of non-negative weights; otherwise -1.
  const double u = philox_uniform_at(seed, offset, sub, u32(n));
  const double goal = u * total;
  const bool valid = total > 0.0 && total < 1.0e300;
  if (valid && sum > 0.0) {
    double run = start;
    int pick = -1, last = -1;
    for (int i = lo; i < hi; ++i) {
      const float w = weight(i, residual);
      if (w > 0.0f) {
        last = i;
        run += double(w);
        if (pick < 0 && start <= goal && goal < run) pick = i;
      }
    }
    if (pick >= 0) atomicMin(&s_pick, pick);
    atomicMax(&s_last, last);
  }
  __syncthreads();
  if (tid == 0) {
    // Rounding can leave u * total past the last span's end: the last token with weight then.
    out[pos] = !valid ? -1 : s_pick != 0x7fffffff ? s_pick : s_last;
  }
}

}  // namespace sampling
}  // namespace kjit
