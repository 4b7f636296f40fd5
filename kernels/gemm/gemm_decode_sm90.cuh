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
// accumulators in its own shared memory (the drained ring), and after a cluster barrier block r
// sums the tokens m % SPLIT == r over the cluster (distributed shared memory) and writes them,
// adjacent threads on adjacent n. No workspace, no atomics: graph-safe and deterministic. The
// epilogue reads shared memory, not registers, also without a split: its loop then needs no
// register indexing, which keeps the widest token tile's NVRTC compile short.
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
#include "gemm/epilogue.cuh"
#include "gemm/gemm_params.h"
#include "gemm/gemm_sm90.cuh"  // init_ring(), consume(): the same ring protocol

namespace kjit {
namespace gemm {

constexpr int kDecodeConsumerThreads = 256;

// A stage is gemm_sm90.cuh's with the weight tile where a's was and the tokens where b's was, so
// its consume() serves the decode kernel with BN = TOKENS.
static_assert(kGemmDecodeRows == kGemmBlockM, "the decode kernel's stages are the sm90 kernel's");

template <int TOKENS>
constexpr u32 decode_stage_bytes() {
  return static_cast<u32>(kGemmDecodeRows + TOKENS) * kGemmBlockK * 2;
}

// The consumer warps' barrier (named barrier 1; 0 is __syncthreads).
KJIT_DEVICE KJIT_FORCEINLINE void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kDecodeConsumerThreads) : "memory");
}

// The producer: K blocks kb_begin .. kb_end - 1 of weight rows n0 .. + 127 and of token rows
// a_row .. + TOKENS - 1. With n0_2 >= 0 the weight tile is two boxes of 64 rows, n0.. and n0_2..
// (p.tma_b's box is 64 rows then: the MoE gate / up slices). it0: the ring's running stage count
// at kb_begin (a persistent block's later tiles continue the barriers' phases).
template <int TOKENS, int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE void decode_produce(const GemmParams& p, unsigned char* tiles,
                                                 u64* full, u64* empty, int kb_begin, int kb_end,
                                                 int n0, int a_row = 0, int n0_2 = -1,
                                                 int it0 = 0) {
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  constexpr u32 kWeightBytes = kGemmDecodeRows * kGemmBlockK * 2;
  int kb = kb_begin;
  if (p.weights_early != 0) {
    // A programmatic dependent whose caller promised that the kernel before does not write b:
    // the first stages' weight boxes go out while that kernel finishes, the tokens (which it may
    // write) after the wait. Dependents are released after the wait, as kjit's kernels do.
    const int early = min(STAGES, kb_end - kb_begin);
    for (int j = 0; j < early; ++j) {
      const int s = (it0 + j) % STAGES;
      hopper::mbarrier_wait(&empty[s], (((it0 + j) / STAGES) & 1) ^ 1);
      unsigned char* stage = tiles + s * kStageBytes;
      hopper::mbarrier_arrive_expect_tx(&full[s], kStageBytes);
      hopper::tma_load_2d(stage, &p.tma_b, &full[s], (kb_begin + j) * kGemmBlockK, n0);
      if (n0_2 >= 0) {
        hopper::tma_load_2d(stage + kWeightBytes / 2, &p.tma_b, &full[s],
                            (kb_begin + j) * kGemmBlockK, n0_2);
      }
    }
    pdl_wait();
    pdl_launch_dependents();
    for (int j = 0; j < early; ++j) {
      const int s = (it0 + j) % STAGES;
      hopper::tma_load_2d(tiles + s * kStageBytes + kWeightBytes, &p.tma_a, &full[s],
                          (kb_begin + j) * kGemmBlockK, a_row);
    }
    kb += early;
  }
  for (; kb < kb_end; ++kb) {
    const int i = it0 + kb - kb_begin;
    const int s = i % STAGES;
    hopper::mbarrier_wait(&empty[s], ((i / STAGES) & 1) ^ 1);
    unsigned char* stage = tiles + s * kStageBytes;
    hopper::mbarrier_arrive_expect_tx(&full[s], kStageBytes);
    hopper::tma_load_2d(stage, &p.tma_b, &full[s], kb * kGemmBlockK, n0);
    if (n0_2 >= 0) {
      hopper::tma_load_2d(stage + kWeightBytes / 2, &p.tma_b, &full[s], kb * kGemmBlockK, n0_2);
    }
    hopper::tma_load_2d(stage + kWeightBytes, &p.tma_a, &full[s], kb * kGemmBlockK, a_row);
  }
}

// The split's partial sums in shared memory (the drained ring): token m's sums for the tile's
// rows n at parts[m * kPartStride + n], so the reduction reads a token's rows as float4 runs and
// its warps' stores to out follow n. The 4-float pad makes the consumers' writes, 8 rows n x 4
// tokens m two apart per warp and register, fall in 32 different banks.
constexpr int kPartStride = kGemmDecodeRows + 4;

template <int TOKENS>
constexpr u32 decode_parts_bytes() {
  return static_cast<u32>(TOKENS * kPartStride * 4);
}

// Consumer thread t's accumulators (common/wgmma.cuh's layout, rows read as n and columns as m:
// register i holds row 16 (t / 32) + t % 32 / 4 + 8 (i / 2 % 2), token 8 (i / 4) + 2 (t % 4) +
// i % 2) into `parts`, the tokens below `tokens` only.
template <int TOKENS>
KJIT_DEVICE KJIT_FORCEINLINE void store_parts(float* parts, const float (&acc)[TOKENS / 2],
                                              int tokens) {
  const int t = static_cast<int>(threadIdx.x);
  const int n = 16 * (t / 32) + (t % 32) / 4;
  const int m = 2 * (t % 4);
#pragma unroll
  for (int i = 0; i < TOKENS / 2; ++i) {
    if (8 * (i / 4) < tokens) {
      parts[(m + 8 * (i / 4) + i % 2) * kPartStride + n + 8 * (i / 2 % 2)] = acc[i];
    }
  }
}

// The cluster's partials (each block's `parts`), mapped once, and the sum of four adjacent
// floats (16-byte aligned) over them: the loads are unrolled so they are in flight together
// rather than one remote latency each.
struct ClusterParts {
  const float* src[kGemmDecodeMaxSplit];
};
KJIT_DEVICE KJIT_FORCEINLINE ClusterParts map_cluster_parts(const float* parts, u32 split) {
  ClusterParts c;
#pragma unroll
  for (u32 q = 0; q < kGemmDecodeMaxSplit; ++q) c.src[q] = cluster_map(parts, q < split ? q : 0);
  return c;
}
KJIT_DEVICE KJIT_FORCEINLINE float4 cluster_part_sum4(const ClusterParts& c, u32 split, int at) {
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (u32 q = 0; q < kGemmDecodeMaxSplit; ++q) {
    if (q < split) {
      const float4 v = *reinterpret_cast<const float4*>(c.src[q] + at);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
  }
  return acc;
}

// The reduction's work, items of four adjacent partial sums: block `rank` of the cluster takes
// the tokens m % split == rank (of m_total) and each of their kRuns runs of four floats (run j at
// 4 j into a token's row, and with kSecond > 0 also the run kSecond floats further on: SwiGLU's
// up rows beside its gate rows). Each thread sums kUnroll items over the cluster before it hands
// them to write(m, j, sums) (sums[0], and sums[1] for kSecond), so several items' remote loads
// are in flight at once. A warp's items are one token's adjacent runs: its loads and the writes
// that follow them are contiguous.
template <int kRuns, int kSecond, typename Write>
KJIT_DEVICE KJIT_FORCEINLINE void reduce_parts(const float* parts, u32 rank, u32 split, int m_total,
                                               Write write) {
  constexpr int kSets = kSecond > 0 ? 2 : 1;
  // 16 floats of sums in flight a thread: more spilled the fp8 SwiGLU consumer under its 96
  // registers.
  constexpr int kUnroll = 4 / kSets;
  const ClusterParts src = map_cluster_parts(parts, split);
  const int r = static_cast<int>(rank), sp = static_cast<int>(split);
  const int items = (m_total > r ? (m_total - r + sp - 1) / sp : 0) * kRuns;
  for (int f0 = static_cast<int>(threadIdx.x); f0 < items; f0 += kDecodeConsumerThreads * kUnroll) {
    float4 sum[kUnroll][kSets];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int f = f0 + u * kDecodeConsumerThreads;
      const int at = (r + (f / kRuns) * sp) * kPartStride + 4 * (f % kRuns);
#pragma unroll
      for (int q = 0; q < kSets; ++q) {
        if (f < items) sum[u][q] = cluster_part_sum4(src, split, at + q * kSecond);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int f = f0 + u * kDecodeConsumerThreads;
      if (f < items) write(r + (f / kRuns) * sp, f % kRuns, sum[u]);
    }
  }
}

// Block `rank` of the cluster writes the tokens m % split == rank: each output summed over the
// blocks' partials (distributed shared memory), a warp's threads on adjacent n so the stores
// coalesce.
template <typename IN, typename OUT, typename OutScale>
KJIT_DEVICE KJIT_FORCEINLINE void decode_write(const GemmParams& p, int n_tile, u32 rank, u32 split,
                                               const float* parts, OutScale out_scale) {
  reduce_parts<kGemmDecodeRows / 4, 0>(
      parts, rank, split, static_cast<int>(p.m), [&](int m, int j, const float4(&s)[1]) {
        const float v[4] = {s[0].x, s[0].y, s[0].z, s[0].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const i64 n = i64(n_tile) * kGemmDecodeRows + 4 * j + e;
          if (n < p.n) {
            OUT* o = static_cast<OUT*>(p.out) + m * p.out_stride + n;
            *o = from_float<OUT>(output_value(p, out_scale(m, n) * v[e], o, bias_at<IN>(p, n)));
          }
        }
      });
}

// One block of a decode kernel: the ring, the producer, the split's partial sums and the write,
// around the consumers' K loop. The bf16 / fp16 kernel below and the e4m3 one
// (gemm_fp8_decode_sm90.cuh) share it: their stages hold the same bytes (128 weight rows and TOKENS
// token rows, one 128-byte swizzle row each: 64 of K in 16-bit elements or 128 in e4m3), so only
// the multiply differs.
//   consume_k(tiles, full, empty, kb_begin, kb_end, half, n_tile, acc): consumer warpgroup
//     `half`'s loop over stages kb_begin .. kb_end - 1 (ring slot (kb - kb_begin) % STAGES) into
//     acc (wgmma's layout, rows n and columns m);
//   out_scale(m, n): the factor of output (m, n)'s sum before alpha (1 where there is none).
// BIAS types p.bias. k_blocks: K's stages.
template <typename BIAS, typename OUT, int TOKENS, int STAGES, typename ConsumeK, typename OutScale>
KJIT_DEVICE KJIT_FORCEINLINE void decode_block(const GemmParams& p, int k_blocks,
                                               ConsumeK consume_k, OutScale out_scale) {
  static_assert(TOKENS == 16 || TOKENS == 32 || TOKENS == 64 || TOKENS == 128,
                "TOKENS is a wgmma width kjit instantiates");
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  static_assert(decode_parts_bytes<TOKENS>() <= STAGES * kStageBytes,
                "the partial accumulators reuse the ring");
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tiles = smem_raw + ((1024 - (hopper::smem_addr(smem_raw) & 1023)) & 1023);
  u64* full = reinterpret_cast<u64*>(tiles + STAGES * kStageBytes);
  u64* empty = full + STAGES;
  const u32 split = cluster_size();
  const u32 rank = cluster_rank();
  const int n_tile = static_cast<int>(blockIdx.x / split);
  const int kb_begin = static_cast<int>(i64(k_blocks) * rank / split);
  const int kb_end = static_cast<int>(i64(k_blocks) * (rank + 1) / split);
  init_ring<STAGES>(full, empty);
  __syncthreads();
  const bool consumer = threadIdx.x < kDecodeConsumerThreads;
  float* parts = reinterpret_cast<float*>(tiles);
  // A programmatic dependent's consumers read bias and out, and write out, only after the kernel
  // before has finished (their stages fill only after the producer's wait in any case).
  if (consumer && p.weights_early != 0) pdl_wait();
  if (consumer) {
    float acc[TOKENS / 2];
#pragma unroll
    for (int i = 0; i < TOKENS / 2; ++i) acc[i] = 0.0f;
    consume_k(tiles, full, empty, kb_begin, kb_end, static_cast<int>(threadIdx.x / 128), n_tile,
              acc);
    // Both warpgroups' MMAs are done with the ring (and every TMA write landed: each stage was
    // waited for) before it holds the partial sums.
    consumers_sync();
    store_parts<TOKENS>(parts, acc, static_cast<int>(p.m));
  } else if (threadIdx.x == kDecodeConsumerThreads) {
    decode_produce<TOKENS, STAGES>(p, tiles, full, empty, kb_begin, kb_end,
                                   n_tile * kGemmDecodeRows);
  }
  __syncwarp();
  // Every block's partial sums are in its shared memory.
  if (split > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  if (consumer) decode_write<BIAS, OUT>(p, n_tile, rank, split, parts, out_scale);
  if (split > 1) cluster_sync();  // no block leaves while another reads its partials
}

template <typename IN, typename OUT, int TOKENS, int STAGES>
__global__ void __launch_bounds__(kGemmDecodeThreads, 2)
    gemm_decode_sm90_kernel(const __grid_constant__ GemmParams p) {
  static_assert(sizeof(IN) == 2, "wgmma operands here are bf16 or fp16");
  decode_block<IN, OUT, TOKENS, STAGES>(
      p, static_cast<int>((p.k + kGemmBlockK - 1) / kGemmBlockK),
      [](unsigned char* tiles, u64* full, u64* empty, int kb_begin, int kb_end, int half, int,
         float(&acc)[TOKENS / 2]) {
        consume<IN, TOKENS, STAGES>(tiles, full, empty, kb_end - kb_begin, half, acc);
      },
      [](int, i64) { return 1.0f; });
}

}  // namespace gemm
}  // namespace kjit
