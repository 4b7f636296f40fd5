// Persistent forms of the grouped GEMM on Hopper (sm_90a): moe_gemm_sm90_kernel's and
// moe_gemm_fp8_sm90_kernel's producer, consumers and epilogues over a fixed grid whose blocks loop
// over the (row tile, column tile) items, the ring running on from one item into the next (as the
// dense gemm_sm90_persistent_kernel's), so the next item's first stages load while the consumers
// run this item's epilogue: with K = 2048 (Qwen3-30B-A3B, 32 stages an item) the one-item kernel
// pays a pipeline fill and an epilogue per 32 stages.
//
// Items: block b takes w = b, b + gridDim.x, ... < tiles_m * tiles_n, each mapped by band_tile (in
// bands of kMoeGroupM row tiles over the host's bound tiles_m) to a row tile of the device
// schedule (moe_schedule.cuh) and a column tile; the grid never depends on the device counts
// (graph-safe).
//
// Who reads the schedule: the producer warp alone (find_tile is one warp's), not block_tile. A
// block-wide barrier per item would hold the producer at item i + 1's lookup until the consumers
// finished item i's epilogue (and the producer cannot pass it early: item i + 1's stages past the
// ring's depth wait for consumers still in front of that barrier), so nothing would load during
// the epilogue. The producer hands each item to the consumers with the item's first stage: it
// writes the item's record (the group tile and column tile) into the stage's slot before its
// arrive on the stage's full barrier (release; the consumers' wait acquires), and after its last
// item it completes the next stage's full barrier with a plain arrive under a record of expert
// -1, which ends the consumers' loop. So the consumers never need to know ahead whether a next
// item exists: they release every stage, the last one too (the sentinel's wait needs it; a
// release nobody waits for costs one arrive). A slot is rewritten only after the stage's empty
// barrier completes, i.e. after every consumer warp read it (each warp's __syncwarp orders its
// lanes' reads before its release).
//
// Launch contract: moe_gemm_sm90.cuh's (fp8: moe_gemm_fp8_sm90.cuh's) with any grid of at least
// one block (the host's min(items, SMs)) and k > 0 (an item has at least one stage to carry its
// record).
#pragma once

#include "moe/moe_gemm_fp8_sm90.cuh"

namespace kjit {
namespace moe {

// One item as the producer hands it to the consumers; t.expert -1: the block has no more items.
struct ItemRecord {
  GroupTile t;
  int n_tile;
};

// The producer warp's walk (all 32 lanes: find_tile is a warp's; lane 0 loads). produce(t,
// n_tile, it0): lane 0's loads of one item from the ring's running stage count it0. PAIR: the
// items of a cluster of two blocks (the pair's column tiles 2j and 2j + 1 of one row tile: its
// items walk ceil(tiles_n / 2) pair columns, cluster c = blockIdx.x / 2 taking c, + gridDim.x /
// 2, ...), so both blocks meet the same row tiles, and the schedule's end, at the same items.
template <int STAGES, bool PAIR = false, typename Produce>
KJIT_DEVICE KJIT_FORCEINLINE void produce_items(const MoeGemmParams& p, const gemm::Ring& r,
                                                ItemRecord* records, int k_blocks,
                                                Produce produce) {
  using namespace gemm;
  const bool leader = threadIdx.x == 0;
  // Stage `it`'s slot, once the consumers gave the stage back (the wait produce_rows repeats
  // returns at once: only this thread refills the stage).
  const auto publish = [&](int it, const ItemRecord& rec) {
    hopper::mbarrier_wait(&r.empty[it % STAGES], ((it / STAGES) & 1) ^ 1);
    records[it % STAGES] = rec;
  };
  const int cols = PAIR ? (p.tiles_n + 1) / 2 : p.tiles_n;  // column tiles, or pair columns
  const i64 items = i64(p.tiles_m) * cols;
  const i64 band_items = i64(kMoeGroupM) * cols;
  const i64 first = PAIR ? blockIdx.x / 2 : blockIdx.x;
  const i64 stride = PAIR ? gridDim.x / 2 : gridDim.x;
  i64 hole_band = items;  // the band of the first item found past the schedule's end
  int it = 0;
  for (i64 w = first; w < items; w += stride) {
    // Past the schedule's end: `continue`, not `break`. band_tile walks a band's row tiles
    // first + 0 .. rows - 1 once per column tile, so an item past the end (m_tile >= the
    // schedule's row tiles R) can be followed in the same band by one of the next column with a
    // smaller m_tile < R (tiles_m 16, R 3: w 3 is row 3, past the end; w 16 is row 0, column
    // 1). But every item of a later band has m_tile >= that band's first row tile, which is
    // greater than any row tile of this band, so >= R: once an item is past the end, the walk
    // ends at the first item of a later band. All lanes hold the same w and t, so the warp
    // skips or stops together.
    if (w / band_items > hole_band) break;
    int m_tile, n_tile;
    band_tile<kMoeGroupM>(static_cast<int>(w), p.tiles_m, cols, m_tile, n_tile);
    if (PAIR) n_tile = 2 * n_tile + static_cast<int>(cluster_rank());
    const GroupTile t = find_tile<kGemmBlockM>(p, m_tile);
    if (t.expert < 0) {
      hole_band = w / band_items;
      continue;
    }
    if (leader) {
      publish(it, ItemRecord{t, n_tile});
      produce(t, n_tile, it);
    }
    __syncwarp();
    it = (it + k_blocks) % (2 * STAGES);  // stage and parity only, as gemm::for_each_tile's
  }
  if (leader) {
    publish(it, ItemRecord{GroupTile{0, 0, -1}, 0});
    hopper::mbarrier_arrive(&r.full[it % STAGES]);  // no bytes: the phase completes at once
  }
}

// A consumer warpgroup's walk: item(rec, it0) runs one item (accumulate from it0, release every
// stage, write the epilogue) until the producer's end record.
template <int STAGES, typename Item>
KJIT_DEVICE KJIT_FORCEINLINE void consume_items(const gemm::Ring& r, const ItemRecord* records,
                                                int k_blocks, Item item) {
  int it = 0;
  for (;;) {
    // The item's first stage (its full wait repeats inside item(): the phase stays complete
    // until this warpgroup releases the stage).
    hopper::mbarrier_wait(&r.full[it % STAGES], (it / STAGES) & 1);
    const ItemRecord rec = records[it % STAGES];
    __syncwarp();  // every lane's read before its warp's release of the stage
    if (rec.t.expert < 0) return;
    item(rec, it);
    it = (it + k_blocks) % (2 * STAGES);
  }
}

// TMA_OUT: the TMA-store epilogue on the items it can serve (write_group_tile), the stores
// drained once, at the block's end. PAIR: clusters of two blocks (launched with cluster size 2, an
// even grid) on column tiles 2j and 2j + 1 of each row tile, a's rows loaded once for both
// (produce_expert_pair): every column tile of a band reads its row tiles of a, and a pair reads
// them from L2 once, at the same time for both.
template <typename IN, typename OUT, int BN, int STAGES, bool SWIGLU, bool TMA_OUT = false,
          bool PAIR = false>
__global__ void __launch_bounds__(gemm::kGemmSm90Threads, 1)
    moe_gemm_sm90_persistent_kernel(const __grid_constant__ MoeGemmParams p) {
  using namespace gemm;
  extern __shared__ unsigned char smem_raw[];
  __shared__ ItemRecord records[STAGES];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN),
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  const int k_blocks = static_cast<int>((p.g.k + kGemmBlockK - 1) / kGemmBlockK);
  init_ring_published<STAGES, PAIR>(r.full, r.empty);
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (!PAIR && threadIdx.x >= 32) return;
    if (threadIdx.x < 32) {
      produce_items<STAGES, PAIR>(
          p, r, records, k_blocks, [&](const GroupTile& t, int n_tile, int it0) {
            if constexpr (PAIR) {
              produce_expert_pair<IN, BN, STAGES, SWIGLU>(p.g, r, k_blocks, t, n_tile, it0,
                                                          cluster_rank());
            } else {
              produce_expert<IN, BN, STAGES, SWIGLU>(p.g, r, k_blocks, t, n_tile, it0);
            }
          });
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    consume_items<STAGES>(r, records, k_blocks, [&](const ItemRecord& rec, int it0) {
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      consume<IN, BN, STAGES, PAIR>(r.tiles, r.full, r.empty, k_blocks, wg - 1, acc, it0, true);
      write_group_tile<IN, OUT, BN, SWIGLU, TMA_OUT>(
          p.g, expert_view(p, rec.t, sizeof(IN), sizeof(OUT)), rec.t, wg - 1, rec.n_tile, acc,
          r.extra, false);
    });
    drain_tma_stores<TMA_OUT>();
  }
  leave_pair<PAIR>();
}

// PAIR: the bf16 kernel's pairs (column tiles 2j and 2j + 1 of a row tile, a's rows loaded once
// for both), the e4m3 stage moved as 16-bit pairs as produce_expert's.
template <typename OUT, int BN, int STAGES, bool SWIGLU, bool TMA_OUT = false, bool PAIR = false>
__global__ void __launch_bounds__(gemm::kGemmSm90Threads, 1)
    moe_gemm_fp8_sm90_persistent_kernel(const __grid_constant__ MoeGemmFp8Params p) {
  using namespace gemm;
  extern __shared__ unsigned char smem_raw[];
  __shared__ ItemRecord records[STAGES];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kFp8ChunkK,
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  const int k_blocks = static_cast<int>((p.grouped.g.k + kFp8ChunkK - 1) / kFp8ChunkK);
  init_ring_published<STAGES, PAIR>(r.full, r.empty);
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (!PAIR && threadIdx.x >= 32) return;
    if (threadIdx.x < 32) {
      produce_items<STAGES, PAIR>(
          p.grouped, r, records, k_blocks, [&](const GroupTile& t, int n_tile, int it0) {
            if constexpr (PAIR) {
              produce_expert_pair<u16, BN, STAGES, SWIGLU>(p.grouped.g, r, k_blocks, t, n_tile, it0,
                                                           cluster_rank());
            } else {
              produce_expert<u16, BN, STAGES, SWIGLU>(p.grouped.g, r, k_blocks, t, n_tile, it0);
            }
          });
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    const int half = wg - 1;
    consume_items<STAGES>(r, records, k_blocks, [&](const ItemRecord& rec, int it0) {
      const GemmFp8Params v = expert_fp8_view(p, rec.t, sizeof(OUT));
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      // Every chunk's stage is released once its MMAs are done, the last one too.
      consume_fp8_chunks<BN, STAGES>(r.tiles, r.full, r.empty, k_blocks, half, acc,
                                     tile_block_scales<BN, SWIGLU>(v, half, rec.n_tile), it0, PAIR);
      write_group_tile<__nv_bfloat16, OUT, BN, SWIGLU, TMA_OUT>(p.grouped.g, v.g, rec.t, half,
                                                                rec.n_tile, acc, r.extra, false);
    });
    drain_tma_stores<TMA_OUT>();
  }
  leave_pair<PAIR>();
}

}  // namespace moe
}  // namespace kjit
