// Grouped GEMM on Hopper tensor cores (sm_90a): gemm_sm90.cuh's pipeline (TMA ring, producer /
// consumer warpgroups, wgmma, epilogue) over a per-expert tile schedule (moe_schedule.cuh).
//
// A block's row tile starts at any row of a (its expert's first row + 128 i), so TMA reads up to
// 127 rows of the next expert with it; b is one 2-D map over [experts * n, k], and a column tile
// at the end of n reads rows of the next expert's weight. Both only add to accumulators the
// epilogue never writes: it masks rows at the expert's end and columns at n.
//
// SWIGLU (the gate / up GEMM of a SwiGLU expert, w13 [experts, n = 2 I, k]: gate rows 0 .. I - 1,
// up rows I .. 2I - 1): a block's BN columns are BN / 2 gate rows and the matching BN / 2 up
// rows (two TMA boxes, produce_rows' SPLIT_B), so gate and up of one output sit in one thread's
// accumulators BN / 2 columns apart, and the epilogue writes silu(gate) * up, in fp32 and rounded
// once, as out [rows, I]. A gate box at the end of I reads up rows, an up box at the end of 2 I
// the next expert's (or TMA's zero fill): columns the epilogue masks at I.
//
// Launch contract: gemm_sm90.cuh's, with a grid of p.tiles_m * p.tiles_n blocks (p.tiles_m >=
// the schedule's 128-row tiles; p.tiles_n = ceil(n / BN), SWIGLU: ceil(I / (BN / 2))),
// p.g.tma_a over a [g.m, k] and p.g.tma_b over b [experts * n, k] with boxes of BN rows (SWIGLU:
// BN / 2).
#pragma once

#include "activation/act_and_mul.cuh"
#include "gemm/gemm_sm90.cuh"
#include "moe/moe_schedule.cuh"

namespace kjit {
namespace moe {

// The SWIGLU epilogue: gemm::write_tile's register layout (registers 4j .. 4j + 3 hold columns
// 8j + 2 (t % 4) + {0, 1} of two rows 8 apart), gate column c and up column c + BN / 2 in
// registers BN / 4 apart; out column n_tile * BN / 2 + c, masked at I = p.n / 2 and p.m rows.
template <typename OUT, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void write_swiglu_tile(const gemm::GemmParams& p, int half, int n_tile,
                                                    const float (&acc)[BN / 2]) {
  const int t = static_cast<int>(threadIdx.x % 128);
  const i64 row0 = half * 64 + (t / 32) * 16 + (t % 32) / 4;
  const i64 col0 = i64(n_tile) * (BN / 2) + (t % 4) * 2;
  const i64 inter = p.n / 2;
  const bool pairs = reinterpret_cast<u64>(p.out) % (2 * sizeof(OUT)) == 0 && p.out_stride % 2 == 0;
#pragma unroll
  for (int j = 0; j < BN / 16; ++j) {
    const i64 col = col0 + 8 * j;
    if (col >= inter) break;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 row = row0 + 8 * h;
      if (row >= p.m) continue;
      const int g = 4 * j + 2 * h;  // the gate's register; the up's is BN / 4 further
      const float v0 = activation::Silu::apply(acc[g]) * acc[g + BN / 4];
      const float v1 = activation::Silu::apply(acc[g + 1]) * acc[g + 1 + BN / 4];
      OUT* o = static_cast<OUT*>(p.out) + row * p.out_stride + col;
      if (col + 1 >= inter) {
        o[0] = from_float<OUT>(v0);
      } else if (pairs) {
        *reinterpret_cast<gemm::OutPair<OUT>*>(o) =
            gemm::OutPair<OUT>{from_float<OUT>(v0), from_float<OUT>(v1)};
      } else {
        o[0] = from_float<OUT>(v0);
        o[1] = from_float<OUT>(v1);
      }
    }
  }
}

// The producer of a grouped tile (one thread): the K blocks of a's rows t.row0 .. + 127 and of
// b's rows for column tile n_tile of expert t.expert (SWIGLU: its gate slice and the matching up
// slice). IN is the element TMA moves (16-bit: e4m3 pairs for the fp8 kernel). it0: the ring's
// running stage count at the first K block (the persistent kernels' later items). A lone tile
// (its expert's only row tile) loads a's rows under L2 evict_last: every column tile of the expert
// reads the same rows while b streams past once (DeepSeek-V3's 128 rows an expert at 4096 tokens:
// 6226 -> 5873 us on the H100, bf16 gate_up).
template <typename IN, int BN, int STAGES, bool SWIGLU>
KJIT_DEVICE KJIT_FORCEINLINE void produce_expert(const gemm::GemmParams& g, const gemm::Ring& r,
                                                 int k_blocks, const GroupTile& t, int n_tile,
                                                 int it0 = 0) {
  const int b_first = static_cast<int>(t.expert * g.n);  // the expert's first row of b
  const int a_row = static_cast<int>(t.row0);
  if (SWIGLU) {
    const int gate = b_first + n_tile * (BN / 2);
    gemm::produce_rows<IN, BN, STAGES, true>(g, r.tiles, r.full, r.empty, k_blocks, a_row, gate,
                                             gate + static_cast<int>(g.n / 2), it0, t.lone);
  } else {
    gemm::produce_rows<IN, BN, STAGES>(g, r.tiles, r.full, r.empty, k_blocks, a_row,
                                       b_first + n_tile * BN, -1, it0, t.lone);
  }
}

// The producer of one block of a pair (moe_gemm_sm90_persistent_kernel's PAIR form: a cluster of
// two blocks on column tiles 2j and 2j + 1 of one row tile t): rank 0 loads a's rows into both
// blocks (TMA multicast), so the pair reads them from L2 once, and each block loads its own rows
// of b. Each block's full barrier expects its whole stage; a stage is refilled only after both
// blocks' consumers gave it back (gemm::release_stage's pair arrivals). A column tile past the
// expert's n (rank 1 of the last pair where the column tiles are odd) loads rows of the next
// expert, or zeros past b's end, that the epilogue never writes (columns past n are masked).
template <typename IN, int BN, int STAGES, bool SWIGLU>
KJIT_DEVICE KJIT_FORCEINLINE void produce_expert_pair(const gemm::GemmParams& g,
                                                      const gemm::Ring& r, int k_blocks,
                                                      const GroupTile& t, int n_tile, int it0,
                                                      u32 rank) {
  using namespace gemm;
  constexpr u32 kABytes = kGemmBlockM * kGemmBlockK * sizeof(IN);
  constexpr u32 kStageBytes = (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN);
  const int b_first = static_cast<int>(t.expert * g.n);
  const int a_row = static_cast<int>(t.row0);
  const int b_row = b_first + n_tile * (SWIGLU ? BN / 2 : BN);
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int i = it0 + kb;
    const int s = i % STAGES;
    hopper::mbarrier_wait(&r.empty[s], ((i / STAGES) & 1) ^ 1);
    unsigned char* stage = r.tiles + s * kStageBytes;
    hopper::mbarrier_arrive_expect_tx(&r.full[s], kStageBytes);
    if (rank == 0 && t.lone) {  // produce_expert's L2 policy for a lone tile's rows
      hopper::tma_load_2d_multicast_hint(stage, &g.tma_a, &r.full[s], kb * kGemmBlockK, a_row,
                                         u16{0x3}, hopper::policy_evict_last());
    } else if (rank == 0) {
      hopper::tma_load_2d_multicast(stage, &g.tma_a, &r.full[s], kb * kGemmBlockK, a_row, u16{0x3});
    }
    hopper::tma_load_2d(stage + kABytes, &g.tma_b, &r.full[s], kb * kGemmBlockK, b_row);
    if (SWIGLU) {  // the matching up slice, n / 2 rows below the gate slice
      hopper::tma_load_2d(stage + kABytes + BN / 2 * kGemmBlockK * sizeof(IN), &g.tma_b, &r.full[s],
                          kb * kGemmBlockK, b_row + static_cast<int>(g.n / 2));
    }
  }
}

// The epilogue of a grouped tile on the expert's view (expert_view): SWIGLU's or the GEMM's
// (E types the GEMM's bias, null here).
template <typename E, typename OUT, int BN, bool SWIGLU>
KJIT_DEVICE KJIT_FORCEINLINE void write_expert_tile(const gemm::GemmParams& view, int half,
                                                    int n_tile, const float (&acc)[BN / 2]) {
  if (SWIGLU) {
    write_swiglu_tile<OUT, BN>(view, half, n_tile, acc);
  } else {
    gemm::write_tile<E, OUT, BN>(view, half, 0, n_tile, acc);
  }
}

// The epilogue of grouped tile t (the TMA_OUT kernels'): a tile whose 128 rows are all its
// expert's goes through the dense tiles' TMA-store slab loop (gemm::store_tile_tma) into the
// whole out (whole.tma_out: [rows, n], SWIGLU [rows, n / 2]); one that reaches past its expert's
// last row takes write_expert_tile's register stores on the expert's view, since TMA clips only
// at the tensor's edges and the rows past the expert are the next one's. The choice is the
// block's (t is), so both warpgroups agree. drain as store_tile_tma's.
template <typename E, typename OUT, int BN, bool SWIGLU, bool TMA_OUT>
KJIT_DEVICE KJIT_FORCEINLINE void write_group_tile(const gemm::GemmParams& whole,
                                                   const gemm::GemmParams& view, const GroupTile& t,
                                                   int half, int n_tile, const float (&acc)[BN / 2],
                                                   unsigned char* staging, bool drain) {
  if constexpr (TMA_OUT) {
    if (t.row_end - t.row0 >= gemm::kGemmBlockM) {
      constexpr int kCols = SWIGLU ? BN / 2 : BN;  // the out tile's columns
      const i64 col0 = i64(n_tile) * kCols;
      const i64 cols = (SWIGLU ? whole.n / 2 : whole.n) - col0;
      gemm::store_tile_tma<OUT, kCols>(whole.tma_out, half, t.row0 + half * 64, col0, 64, cols,
                                       staging, drain, [&](int j, int e, i64) {
                                         if constexpr (SWIGLU) {
                                           return activation::Silu::apply(acc[4 * j + e]) *
                                                  acc[4 * j + e + BN / 4];
                                         } else {
                                           return whole.alpha * acc[4 * j + e];
                                         }
                                       });
      return;
    }
  }
  write_expert_tile<E, OUT, BN, SWIGLU>(view, half, n_tile, acc);
}

// A persistent block's end: its TMA stores (store_tile_tma without drain) must have read their
// staging before the block's shared memory goes.
template <bool TMA_OUT>
KJIT_DEVICE KJIT_FORCEINLINE void drain_tma_stores() {
  if (TMA_OUT && threadIdx.x % 128 == 0) hopper::bulk_wait_group_read<0>();
}

// TMA_OUT: the TMA-store epilogue on the tiles it can serve (write_group_tile; a 16-bit out,
// p.g.tma_out set), its staging between the ring and the barriers.
template <typename IN, typename OUT, int BN, int STAGES, bool SWIGLU, bool TMA_OUT = false>
__global__ void __launch_bounds__(gemm::kGemmSm90Threads, 1)
    moe_gemm_sm90_kernel(const __grid_constant__ MoeGemmParams p) {
  using namespace gemm;
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN),
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  const int k_blocks = static_cast<int>((p.g.k + kGemmBlockK - 1) / kGemmBlockK);
  int m_tile, n_tile;
  band_tile(static_cast<int>(blockIdx.x), p.tiles_m, p.tiles_n, m_tile, n_tile);
  init_ring<STAGES>(r.full, r.empty);
  const GroupTile t = block_tile<kGemmBlockM>(p, m_tile);  // its __syncthreads publishes the ring
  if (t.expert < 0) return;
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) produce_expert<IN, BN, STAGES, SWIGLU>(p.g, r, k_blocks, t, n_tile);
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    consume<IN, BN, STAGES>(r.tiles, r.full, r.empty, k_blocks, wg - 1, acc);
    write_group_tile<IN, OUT, BN, SWIGLU, TMA_OUT>(p.g, expert_view(p, t, sizeof(IN), sizeof(OUT)),
                                                   t, wg - 1, n_tile, acc, r.extra, true);
  }
}

}  // namespace moe
}  // namespace kjit
