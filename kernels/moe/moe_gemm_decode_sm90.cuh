// Grouped GEMM for decode shapes on Hopper (sm_90a): the dense decode kernel's block
// (gemm_decode_sm90.cuh: the weight as wgmma's M side, 128 rows of b[e] per block, the tokens as
// its N side, zero-filled up to TOKENS, K split over a cluster and summed in distributed shared
// memory) over the grouped GEMM's per-expert schedule (moe_schedule.cuh, row tiles of TOKENS), so
// only the active experts' weights are read, each once per row tile (once where an expert's rows
// fit one tile, which the host's choice of TOKENS makes the rule).
//
// Persistent clusters: the grid is a number of clusters fixed on the host (at most what the
// device runs at once), and cluster c takes the work items c, c + clusters, ... of the list
// (row tile i of the schedule, column tile j) = item i * tiles_n + j, until a row tile is past
// the schedule's end. Which experts have rows is read on the device, so the grid never depends on
// them (graph-safe), and an expert with no rows costs nothing: no block loads a byte of its weight
// and no block is launched only to find it empty. The ring's barriers run on across items (a
// running stage count, every stage released); each item's partial sums reuse the drained ring, as
// in the dense kernel, and a cluster barrier ends an item before the ring is refilled.
//
// SWIGLU (w13 [experts, n = 2 I, k]): a block's 128 weight rows are 64 gate rows (consumer
// warpgroup 0) and the matching 64 up rows (warpgroup 1), two TMA boxes of 64 rows; the write sums
// both over the cluster and stores silu(gate) * up, in fp32 and rounded once, as out [rows, I].
//
// FP8 (moe_gemm_fp8_decode_sm90_kernel): the fp8 decode consumer (gemm_fp8_decode_sm90.cuh: wgmma
// e4m3, each 128-wide K chunk promoted into fp32 times its scales) with DeepSeek-V3's scales per
// expert (moe_params.h, MoeGemmFp8Params): a tile's 128 weight rows are one 128-row scale block
// of b[e] (SWIGLU: each 64-row half lies in one, the host requires I to be a multiple of 64).
//
// Launch contract: grid clusters * SPLIT blocks, clusters of SPLIT (1 .. kGemmDecodeMaxSplit)
// along x, kGemmDecodeThreads threads, gemm_decode_smem_bytes(TOKENS, STAGES) bytes of dynamic
// shared memory; p.tiles_m >= the schedule's row tiles of TOKENS rows, p.tiles_n = ceil(n / 128)
// (SWIGLU: ceil(I / 64)). p.g.tma_a describes a (all rows: [rows, k], masked [experts *
// max_rows, k]) with a box of 64 x TOKENS elements, p.g.tma_b b as [experts * n, k] with a box of
// 64 x 128 (SWIGLU: 64 x 64), both 128-byte swizzled; e4m3 as 16-bit pairs (k a multiple of 16).
#pragma once

#include "activation/act_and_mul.cuh"
#include "gemm/gemm_fp8_decode_sm90.cuh"
#include "moe/moe_gemm_fp8_sm90.cuh"  // expert_fp8_view()
#include "moe/moe_schedule.cuh"

namespace kjit {
namespace moe {

// The SWIGLU write of block `rank`: the tokens m % split == rank of output columns n_tile * 64 ..
// + 63 (masked at I = v.n / 2 and v.m tokens), gate (tile row c) and up (tile row 64 + c) summed
// over the cluster's partials (gemm_decode_sm90.cuh's reduce_parts, four columns an item); a
// warp's threads on adjacent columns.
template <typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE void write_swiglu_decode(const gemm::GemmParams& v, int n_tile,
                                                      u32 rank, u32 split, const float* parts) {
  constexpr int kCols = gemm::kGemmDecodeRows / 2;
  const i64 inter = v.n / 2;
  gemm::reduce_parts<kCols / 4, kCols>(
      parts, rank, split, static_cast<int>(v.m), [&](int m, int j, const float4(&s)[2]) {
        const float gate[4] = {s[0].x, s[0].y, s[0].z, s[0].w};
        const float up[4] = {s[1].x, s[1].y, s[1].z, s[1].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const i64 col = i64(n_tile) * kCols + 4 * j + e;
          if (col < inter) {
            static_cast<OUT*>(v.out)[m * v.out_stride + col] =
                from_float<OUT>(activation::Silu::apply(gate[e]) * up[e]);
          }
        }
      });
}

// The persistent clusters' loop (see the top of the file). ELEM: bytes of an element of a and b
// (2, or 1 for e4m3); k_blocks: K's stages. consume_k(tiles, full, empty, kb_begin, kb_end, it0,
// half, tile, n_tile, acc): consumer warpgroup `half`'s loop over stages kb_begin .. kb_end - 1
// (ring slot (it0 + kb - kb_begin) % STAGES, every stage released) into acc (wgmma's layout, rows
// n and columns m).
template <typename OUT, int ELEM, int TOKENS, int STAGES, bool SWIGLU, typename ConsumeK>
KJIT_DEVICE KJIT_FORCEINLINE void moe_decode_blocks(const MoeGemmParams& p, int k_blocks,
                                                    ConsumeK consume_k) {
  using namespace gemm;
  static_assert(TOKENS == 16 || TOKENS == 32 || TOKENS == 64, "TOKENS is a decode token tile");
  constexpr u32 kStageBytes = decode_stage_bytes<TOKENS>();
  static_assert(decode_parts_bytes<TOKENS>() <= STAGES * kStageBytes,
                "the partial accumulators reuse the ring");
  extern __shared__ unsigned char smem_raw[];
  const Ring ring = ring_in<STAGES>(smem_raw, kStageBytes);  // the dense decode kernel's layout
  unsigned char* tiles = ring.tiles;
  u64* full = ring.full;
  u64* empty = ring.empty;
  float* parts = reinterpret_cast<float*>(tiles);
  const u32 split = cluster_size();
  const u32 rank = cluster_rank();
  const int clusters = static_cast<int>(gridDim.x / split);
  const int kb_begin = static_cast<int>(i64(k_blocks) * rank / split);
  const int kb_end = static_cast<int>(i64(k_blocks) * (rank + 1) / split);
  const bool consumer = threadIdx.x < kDecodeConsumerThreads;
  init_ring<STAGES>(full, empty);  // block_tile's __syncthreads publishes it
  int it0 = 0;                     // the ring's running stage count
  // Items in int: the host keeps tiles_m * tiles_n (and so w + clusters) below 2^31.
  for (int w = static_cast<int>(blockIdx.x / split); w < p.tiles_m * p.tiles_n; w += clusters) {
    const int n_tile = w % p.tiles_n;
    // Every block of the cluster reads the same schedule, so all leave the loop together.
    const GroupTile t = block_tile<TOKENS>(p, w / p.tiles_n);
    if (t.expert < 0) break;
    // The tile's tokens: an expert's rows past it are another item's.
    const int tokens = static_cast<int>(min(t.row_end - t.row0, i64(TOKENS)));
    if (consumer) {
      float acc[TOKENS / 2];
#pragma unroll
      for (int i = 0; i < TOKENS / 2; ++i) acc[i] = 0.0f;
      consume_k(tiles, full, empty, kb_begin, kb_end, it0, static_cast<int>(threadIdx.x / 128), t,
                n_tile, acc);
      // Both warpgroups' MMAs are done with the ring (and every TMA write of the item landed:
      // each stage was waited for) before it holds the partial sums.
      consumers_sync();
      store_parts<TOKENS>(parts, acc, tokens);
    } else if (threadIdx.x == kDecodeConsumerThreads) {
      // The previous item's partial sums (generic proxy, ordered by the barrier that ended it)
      // before this item's TMA writes.
      hopper::fence_proxy_async_smem();
      const i64 b_first = i64(t.expert) * p.g.n;  // the expert's first row of b
      const i64 gate = b_first + i64(n_tile) * (SWIGLU ? kGemmDecodeRows / 2 : kGemmDecodeRows);
      decode_produce<TOKENS, STAGES>(p.g, tiles, full, empty, kb_begin, kb_end,
                                     static_cast<int>(gate), static_cast<int>(t.row0),
                                     SWIGLU ? static_cast<int>(gate + p.g.n / 2) : -1, it0);
    }
    __syncwarp();
    // Every block's partial sums are in its shared memory.
    if (split > 1) {
      cluster_sync();
    } else {
      __syncthreads();
    }
    if (consumer) {
      // Built here, not before the K loop, where its registers would be live (the fp8 consumer
      // at 64 tokens has none to spare).
      GemmParams v = expert_view(p, t, ELEM, sizeof(OUT));
      v.m = tokens;
      if constexpr (SWIGLU) {
        write_swiglu_decode<OUT>(v, n_tile, rank, split, parts);
      } else {
        decode_write<__nv_bfloat16, OUT>(v, n_tile, rank, split, parts,
                                         [](int, i64) { return 1.0f; });
      }
      // Its generic-proxy accesses of the ring before the next item's TMA writes to it.
      hopper::fence_proxy_async_smem();
    }
    // No block refills its ring (or leaves) while another reads its partials.
    if (split > 1) {
      cluster_sync();
    } else {
      __syncthreads();
    }
    it0 += kb_end - kb_begin;
  }
}

template <typename IN, typename OUT, int TOKENS, int STAGES, bool SWIGLU>
__global__ void __launch_bounds__(gemm::kGemmDecodeThreads, 2)
    moe_gemm_decode_sm90_kernel(const __grid_constant__ MoeGemmParams p) {
  static_assert(sizeof(IN) == 2, "wgmma operands here are bf16 or fp16");
  moe_decode_blocks<OUT, 2, TOKENS, STAGES, SWIGLU>(
      p, static_cast<int>((p.g.k + gemm::kGemmBlockK - 1) / gemm::kGemmBlockK),
      [](unsigned char* tiles, u64* full, u64* empty, int kb_begin, int kb_end, int it0, int half,
         const GroupTile&, int, float(&acc)[TOKENS / 2]) {
        gemm::consume<IN, TOKENS, STAGES>(tiles, full, empty, kb_end - kb_begin, half, acc, it0,
                                          true);
      });
}

template <typename OUT, int TOKENS, int STAGES, bool SWIGLU>
__global__ void __launch_bounds__(gemm::kGemmDecodeThreads, moe_fp8_decode_blocks_per_sm(TOKENS))
    moe_gemm_fp8_decode_sm90_kernel(const __grid_constant__ MoeGemmFp8Params p) {
  moe_decode_blocks<OUT, 1, TOKENS, STAGES, SWIGLU>(
      p.grouped, static_cast<int>((p.grouped.g.k + gemm::kFp8ChunkK - 1) / gemm::kFp8ChunkK),
      [&p](unsigned char* tiles, u64* full, u64* empty, int kb_begin, int kb_end, int it0, int half,
           const GroupTile& t, int n_tile, float(&acc)[TOKENS / 2]) {
        gemm::GemmFp8Params v = expert_fp8_view(p, t, sizeof(OUT));
        v.g.m = min(v.g.m, i64(TOKENS));  // scale_a's rows clamp at the tile's last token
        // The first b row of this warpgroup's 64 (SWIGLU: gate rows, then the up rows I further),
        // all in one 128-row scale block: its row of scale_b, one per chunk, as row 0 of a view
        // with constant strides (no division per chunk, and the registers it would hold).
        const i64 b_row = SWIGLU ? i64(n_tile) * (gemm::kGemmDecodeRows / 2) + half * (v.g.n / 2)
                                 : i64(n_tile) * gemm::kGemmDecodeRows;
        v.scale_b += (b_row / gemm::kFp8ChunkK) * p.chunks;
        v.sb_row = 0;
        v.sb_rows = 1;
        gemm::consume_fp8_decode<TOKENS, STAGES, true>(v, tiles, full, empty, kb_begin, kb_end,
                                                       half, 0, acc, it0);
      });
}

}  // namespace moe
}  // namespace kjit
