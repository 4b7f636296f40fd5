// GEMM for decode shapes on Hopper (sm_90a): out = alpha * a . b^T + beta * out + bias with few
// rows of a (m <= kGemmDecodeMaxTokens tokens), where the product is a stream of the weight b.
// Same operands, accumulators and epilogue rules as gemm_sm90.cuh; the roles of a and b swap:
//   wgmma's M side is the weight: each block owns kGemmDecodeRows rows of b (n), 64 per consumer
//     warpgroup, so every weight byte is read by exactly one block;
//   wgmma's N side is the tokens: all m rows of a, zero-filled up to TOKENS (16 .. 128), one
//     m64nTOKENSk16 per k16 step. The block computes out^T for its rows: accumulator (row, col)
//     is out[col][row].
// A tile of TOKENS x 64 activations is small beside the 128 x 64 weight tile, so most of the
// shared memory is weight stages in flight, and two blocks fit on an SM.
//
// Split K over a thread-block cluster: the cluster's SPLIT blocks (the launch's cluster size,
// 1 .. kGemmDecodeMaxSplit; read at run time, so one compiled kernel serves every split) share a
// weight tile and each streams 1/SPLIT of its K blocks. Each block leaves its partial
// accumulators in its own shared memory, and after a cluster barrier block r sums the token
// groups g with g % SPLIT == r over the cluster (distributed shared memory) and writes them. No
// workspace, no atomics: graph-safe and deterministic.
//
// Warps 0-7 (two consumer warpgroups) multiply; warp 8's lane 0 produces (TMA into a ring of
// STAGES stages with full / empty mbarriers, as in gemm_sm90.cuh).
//
// Launch contract: grid ceil(n / kGemmDecodeRows) * SPLIT blocks, clusters of SPLIT along x,
// kGemmDecodeThreads threads, gemm_decode_smem_bytes(TOKENS, STAGES) bytes of dynamic shared
// memory; m <= TOKENS. p.tma_a describes a with a box of 64 x TOKENS elements, p.tma_b describes b
// with a box of 64 x kGemmDecodeRows, both 128-byte swizzled (TMA's rules as in gemm_sm90.cuh).
// out must not overlap a, b or bias.
#pragma once

#include "common/cluster.cuh"
#include "common/hopper.cuh"
#include "common/prelude.cuh"
#include "common/wgmma.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/gemm_params.h"

namespace kjit {
namespace gemm {

constexpr int kDecodeConsumerThreads = 256;

template <int TOKENS>
constexpr u32 decode_stage_bytes() {
  return static_cast<u32>(kGemmDecodeRows + TOKENS) * kGemmBlockK * 2;
}

// The consumer warps' barrier (named barrier 1; 0 is __syncthreads).
KJIT_DEVICE KJIT_FORCEINLINE void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kDecodeConsumerThreads) : "memory");
}

template <int TOKENS, int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE void decode_produce(const GemmParams& p, unsigned char* tiles,
                                                 u64* full, u64* empty, int kb_begin, int kb_end,
                                                 int n0) {
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  constexpr u32 kWeightBytes = kGemmDecodeRows * kGemmBlockK * 2;
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const int i = kb - kb_begin;
    const int s = i % STAGES;
    hopper::mbarrier_wait(&empty[s], ((i / STAGES) & 1) ^ 1);
    unsigned char* stage = tiles + s * kStageBytes;
    hopper::mbarrier_arrive_expect_tx(&full[s], kStageBytes);
    hopper::tma_load_2d(stage, &p.tma_b, &full[s], kb * kGemmBlockK, n0);
    hopper::tma_load_2d(stage + kWeightBytes, &p.tma_a, &full[s], kb * kGemmBlockK, 0);
  }
}

// Consumer warpgroup `half` accumulates weight rows 64 * half .. + 63 of the tile against all
// tokens; the ring protocol is gemm_sm90.cuh's consume().
template <typename IN, int TOKENS, int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE void decode_consume(unsigned char* tiles, u64* full, u64* empty,
                                                 int k_blocks, int half, float (&acc)[TOKENS / 2]) {
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  constexpr u32 kWeightBytes = kGemmDecodeRows * kGemmBlockK * 2;
  constexpr u32 kK16Bytes = 16 * sizeof(IN);
  const bool arrives = threadIdx.x % 32 == 0;
  for (int i = 0; i < k_blocks; ++i) {
    const int s = i % STAGES;
    hopper::mbarrier_wait(&full[s], (i / STAGES) & 1);
    const u32 w_base = hopper::smem_addr(tiles + s * kStageBytes) + half * 64 * 128;
    const u32 x_base = hopper::smem_addr(tiles + s * kStageBytes + kWeightBytes);
    wgmma::fence_operands(acc);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kGemmBlockK / 16; ++kk) {
      wgmma::mma<IN, TOKENS>(acc, wgmma::kmajor_sw128_desc(w_base + kk * kK16Bytes),
                             wgmma::kmajor_sw128_desc(x_base + kk * kK16Bytes), 1);
    }
    wgmma::commit_group();
    wgmma::wait_group<1>();
    wgmma::fence_operands(acc);
    if (i > 0 && arrives) hopper::mbarrier_arrive(&empty[(i - 1) % STAGES]);
  }
  wgmma::wait_group<0>();
  wgmma::fence_operands(acc);
}

// Token group g (accumulator registers 4g .. 4g+3: tokens 8g + 2 (lane % 4) + {0, 1} of two
// weight rows 8 apart, common/wgmma.cuh's layout with rows and columns read as n and m) is
// complete when the cluster's partials are summed into it: block `rank` owns the groups
// g % split == rank that hold tokens, adds the other blocks' partials (parts: this block's copy,
// partial register i of consumer thread t at i * 256 + t) and writes them.
template <typename IN, typename OUT, int TOKENS>
KJIT_DEVICE KJIT_FORCEINLINE void decode_write(const GemmParams& p, int n_tile, u32 rank, u32 split,
                                               const float* parts, float (&acc)[TOKENS / 2]) {
  const int t = static_cast<int>(threadIdx.x);  // 0 .. 255: consumer thread
  const int lane = t % 32;
  const i64 row0 =
      i64(n_tile) * kGemmDecodeRows + (t / 128) * 64 + ((t % 128) / 32) * 16 + lane / 4;
#pragma unroll
  for (int g = 0; g < TOKENS / 8; ++g) {
    if (8 * g >= p.m || g % static_cast<int>(split) != static_cast<int>(rank)) continue;
    for (u32 q = 0; q < split; ++q) {
      if (q == rank) continue;
      const float* other = cluster_map(parts, q);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[4 * g + e] += other[(4 * g + e) * kDecodeConsumerThreads + t];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 n = row0 + 8 * h;
      if (n >= p.n) continue;
      const float bias = bias_at<IN>(p, n);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const i64 m = 8 * g + 2 * (lane % 4) + e;
        if (m >= p.m) continue;
        OUT* o = static_cast<OUT*>(p.out) + m * p.out_stride + n;
        *o = from_float<OUT>(output_value(p, acc[4 * g + 2 * h + e], o, bias));
      }
    }
  }
}

template <typename IN, typename OUT, int TOKENS, int STAGES>
__global__ void __launch_bounds__(kGemmDecodeThreads, 2)
    gemm_decode_sm90_kernel(const __grid_constant__ GemmParams p) {
  static_assert(sizeof(IN) == 2, "wgmma operands here are bf16 or fp16");
  static_assert(TOKENS == 16 || TOKENS == 32 || TOKENS == 64 || TOKENS == 128,
                "TOKENS is a wgmma width kjit instantiates");
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  static_assert(TOKENS / 2 * kDecodeConsumerThreads * 4 <= STAGES * kStageBytes,
                "the partial accumulators reuse the ring");
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tiles = smem_raw + ((1024 - (hopper::smem_addr(smem_raw) & 1023)) & 1023);
  u64* full = reinterpret_cast<u64*>(tiles + STAGES * kStageBytes);
  u64* empty = full + STAGES;
  const u32 split = cluster_size();
  const u32 rank = cluster_rank();
  const int n_tile = static_cast<int>(blockIdx.x / split);
  const int k_blocks = static_cast<int>((p.k + kGemmBlockK - 1) / kGemmBlockK);
  const int kb_begin = static_cast<int>(i64(k_blocks) * rank / split);
  const int kb_end = static_cast<int>(i64(k_blocks) * (rank + 1) / split);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbarrier_init(&full[s], 1);   // the producer's arrive_expect_tx
      hopper::mbarrier_init(&empty[s], 8);  // one arrival per consumer warp
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();
  const bool consumer = threadIdx.x < kDecodeConsumerThreads;
  float acc[TOKENS / 2];
  float* parts = reinterpret_cast<float*>(tiles);
  if (consumer) {
#pragma unroll
    for (int i = 0; i < TOKENS / 2; ++i) acc[i] = 0.0f;
    decode_consume<IN, TOKENS, STAGES>(tiles, full, empty, kb_end - kb_begin,
                                       static_cast<int>(threadIdx.x / 128), acc);
    if (split > 1) {
      // Both warpgroups' MMAs are done with the ring (and every TMA write landed: each stage was
      // waited for) before it holds the partials.
      consumers_sync();
#pragma unroll
      for (int i = 0; i < TOKENS / 2; ++i) {
        if (8 * (i / 4) < p.m) parts[i * kDecodeConsumerThreads + threadIdx.x] = acc[i];
      }
    }
  } else if (threadIdx.x == kDecodeConsumerThreads) {
    decode_produce<TOKENS, STAGES>(p, tiles, full, empty, kb_begin, kb_end,
                                   n_tile * kGemmDecodeRows);
  }
  __syncwarp();
  if (split > 1) cluster_sync();  // every block's partials are in its shared memory
  if (consumer) decode_write<IN, OUT, TOKENS>(p, n_tile, rank, split, parts, acc);
  if (split > 1) cluster_sync();  // no block leaves while another reads its partials
}

}  // namespace gemm
}  // namespace kjit
