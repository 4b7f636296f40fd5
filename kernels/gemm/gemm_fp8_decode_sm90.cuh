// fp8 (e4m3) GEMM for decode shapes on Hopper (sm_90a): the decode kernel's block
// (gemm_decode_sm90.cuh: the weight as wgmma's M side, the tokens as its N side, K split over a
// cluster and reduced through distributed shared memory) around the fp8 kernel's multiply
// (gemm_fp8_sm90.cuh: 4 wgmma k32 per 128-wide K chunk from zero, each chunk's sum promoted into
// the fp32 result, which bounds the tensor cores' truncating accumulation to one chunk;
// ref::gemm_fp8_error_bound) and the scales of kernels/gemm/gemm_fp8_params.h.
//
// A stage is one K chunk: 128 weight rows and TOKENS token rows of 128 e4m3, the bf16 decode
// stage's bytes, so its producer and tensor maps serve unchanged (p.g.tma_a / p.g.tma_b see a and
// b as rows of k / 2 16-bit elements). Block scales (BLOCK true): a block's 128 weight rows are
// one 128-row block of b, so per chunk its scale_b is one value and scale_a one per token
// (column); each promotion multiplies by their product. Per tensor / per row (BLOCK false) the
// chunks add unscaled and each output's sum is multiplied once by scale_a(m) * scale_b(n) where
// it is written.
//
// Launch contract: gemm_decode_sm90.cuh's, with p.g as its GemmParams (k in e4m3 elements, a
// multiple of 16) and gemm_decode_smem_bytes(TOKENS, STAGES) of shared memory; at most
// gemm_fp8_decode_blocks_per_sm(TOKENS) blocks share an SM.
#pragma once

#include "gemm/fp8_scales.cuh"
#include "gemm/gemm_decode_sm90.cuh"
#include "gemm/gemm_fp8_sm90.cuh"  // mma_chunk(): one chunk's MMAs

namespace kjit {
namespace gemm {

// Consumer `half` (0 or 1): weight rows 64 * half .. + 63 of the tile over chunks kb_begin ..
// kb_end - 1 into acc. b_row: a row of b in the 128-row scale block of those 64 rows (BLOCK).
// it0: the ring's running stage count at kb_begin (gemm_decode_sm90.cuh's decode_produce).
// Register i of a thread holds token 8 (i / 4) + 2 (t % 4) + i % 2 (common/wgmma.cuh's column).
//
// Block scales: each of a thread's TOKENS / 4 tokens wants its scale_a every chunk. Loaded by
// every thread from global memory, that was TOKENS / 4 loads a chunk whose registers stayed live
// across the stage's wait; instead the first TOKENS consumer threads load one token's scale each,
// a chunk ahead, into shared memory (two chunks' buffers after the ring's barriers,
// kGemmDecodeScaleBytes), and the multiply reads pairs of tokens from there. One consumer barrier
// a chunk orders the buffers (the two warpgroups wait on the same stages in any case). 128 x
// 4096 x 14336 with block scales: 67.3 -> 40.7 us on an H100.
template <int TOKENS, int STAGES, bool BLOCK>
KJIT_DEVICE KJIT_FORCEINLINE void consume_fp8_decode(const GemmFp8Params& p, unsigned char* tiles,
                                                     u64* full, u64* empty, int kb_begin,
                                                     int kb_end, int half, i64 b_row,
                                                     float (&acc)[TOKENS / 2], int it0 = 0) {
  static_assert(2 * TOKENS * 4 <= kGemmDecodeScaleBytes, "the staged scales fit their buffers");
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  constexpr u32 kWeightBytes = kGemmDecodeRows * kFp8ChunkK;
  const int t = static_cast<int>(threadIdx.x);
  const int m0 = (t % 4) * 2;
  float* sa_stage = reinterpret_cast<float*>(empty + STAGES);
  if constexpr (BLOCK) {
    if (t < TOKENS && kb_begin < kb_end) sa_stage[t] = scale_a_at(p, t, kb_begin);
    consumers_sync();
  }
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const int i = it0 + kb - kb_begin;
    const int s = i % STAGES;
    // Issued before the wait so their latency hides behind it.
    float sb = 1.0f, sa_next = 0.0f;
    if constexpr (BLOCK) {
      sb = scale_b_at(p, b_row, kb);
      if (t < TOKENS && kb + 1 < kb_end) sa_next = scale_a_at(p, t, kb + 1);
    }
    const u32 w_base = hopper::smem_addr(tiles + s * kStageBytes) + half * 64 * 128;
    const u32 x_base = hopper::smem_addr(tiles + s * kStageBytes + kWeightBytes);
    float part[TOKENS / 2];
    mma_chunk<TOKENS>(part, full, empty, s, (i / STAGES) & 1, w_base, x_base);
    if constexpr (BLOCK) {
      const int buf = (kb - kb_begin) & 1;
      const float* sa = sa_stage + buf * TOKENS + m0;
#pragma unroll
      for (int r = 0; r < TOKENS / 2; r += 2) {
        const float2 a = *reinterpret_cast<const float2*>(sa + 8 * (r / 4));
        acc[r] = fmaf(part[r], a.x * sb, acc[r]);
        acc[r + 1] = fmaf(part[r + 1], a.y * sb, acc[r + 1]);
      }
      // Every consumer read this chunk's buffer before the next chunk's scales replace it.
      if (t < TOKENS) sa_stage[(buf ^ 1) * TOKENS + t] = sa_next;
      consumers_sync();
    } else {
#pragma unroll
      for (int r = 0; r < TOKENS / 2; ++r) acc[r] += part[r];
    }
  }
}

template <typename OUT, int TOKENS, int STAGES, bool BLOCK>
__global__ void __launch_bounds__(kGemmDecodeThreads, gemm_fp8_decode_blocks_per_sm(TOKENS))
    gemm_fp8_decode_sm90_kernel(const __grid_constant__ GemmFp8Params p) {
  // No bias: decode_block's bias type only types the (null) bias.
  decode_block<__nv_bfloat16, OUT, TOKENS, STAGES>(
      p.g, static_cast<int>((p.g.k + kFp8ChunkK - 1) / kFp8ChunkK),
      [&p](unsigned char* tiles, u64* full, u64* empty, int kb_begin, int kb_end, int half,
           int n_tile, float(&acc)[TOKENS / 2]) {
        consume_fp8_decode<TOKENS, STAGES, BLOCK>(p, tiles, full, empty, kb_begin, kb_end, half,
                                                  i64(n_tile) * kGemmDecodeRows, acc);
      },
      [&p](int m, i64 n) {
        // Block scales were applied per chunk.
        return BLOCK ? 1.0f : scale_a_at(p, m, 0) * scale_b_at(p, n, 0);
      });
}

}  // namespace gemm
}  // namespace kjit
