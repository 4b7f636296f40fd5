// GEMM on Hopper tensor cores (sm_90a): out = alpha * a . b^T + beta * out + bias, bf16 or fp16
// operands, fp32 accumulators, bf16 / fp16 / fp32 out (kernels/gemm/gemm_params.h).
//
// Warp-specialized, one block per 128 x BN output tile:
//   warpgroup 0 (producer): one thread streams the K blocks of a (128 x 64) and b (BN x 64) into
//     a ring of STAGES shared-memory stages with TMA (128-byte swizzle, zero fill past the edges
//     of M, N and K); it arrives on the stage's full barrier with the stage's byte count.
//   warpgroups 1 and 2 (consumers): rows 0-63 and 64-127 of the tile; per stage 4 wgmma
//     m64nBNk16 from shared memory, then each warp arrives on the stage's empty barrier so the
//     producer can refill it. The epilogue writes the registers to global memory, masked at the
//     M and N edges.
// setmaxnreg moves registers from the producer (which needs a few) to the consumers (BN / 2
// accumulators each).
//
// gemm_sm90_persistent_kernel (below) is the same pipeline over a fixed grid whose blocks loop
// over the tiles, the ring running on from one tile into the next.
//
// TMA_OUT: the epilogue stages the registers in shared memory and stores them with TMA instead
// (write_tile_tma), the way cuBLAS's kernels do.
//
// Launch contract: grid ceil(m / 128) * ceil(n / BN) blocks (tile_of maps them), kGemmSm90Threads
// threads, gemm_sm90_smem_bytes(BN, STAGES, TMA_OUT) bytes of dynamic shared memory. p.tma_a /
// p.tma_b describe a and b with boxes of 64 x 128 and 64 x BN elements and 128-byte swizzling
// (TMA's rules: 16-byte aligned bases, row strides multiples of 16 bytes); with TMA_OUT p.tma_out
// describes out (16-bit) with 64 x 64 boxes and the same swizzle, and beta is 0. out must not
// overlap a, b or bias.
#pragma once

#include "common/cluster.cuh"
#include "common/hopper.cuh"
#include "common/prelude.cuh"
#include "common/wgmma.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/gemm_params.h"
#include "gemm/tile_order.cuh"

namespace kjit {
namespace gemm {

// Registers per thread after setmaxnreg: 128 * 40 + 256 * 232 fits the 64K of an SM.
constexpr u32 kProducerRegs = 40;
constexpr u32 kConsumerRegs = 232;

// The ring in dynamic shared memory: STAGES stages of stage_bytes from a 1024-byte boundary (the
// 128-byte swizzle repeats every 1024 bytes and the descriptors assume tiles start on it), then
// `extra` bytes (the TMA-store epilogue's staging, on the same period: stage_bytes is a multiple
// of 1024), then the stages' full and empty barriers.
struct Ring {
  unsigned char* tiles;
  unsigned char* extra;
  u64* full;
  u64* empty;
};

template <int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE Ring ring_in(unsigned char* smem, u32 stage_bytes, u32 extra = 0) {
  Ring r;
  r.tiles = smem + ((1024 - (hopper::smem_addr(smem) & 1023)) & 1023);
  r.extra = r.tiles + STAGES * stage_bytes;
  r.full = reinterpret_cast<u64*>(r.extra + extra);
  r.empty = r.full + STAGES;
  return r;
}

// Thread 0 initializes the ring's barriers (the caller's __syncthreads() publishes them): a
// stage's full barrier takes the producer's arrive_expect_tx, its empty barrier one arrival per
// consumer warp (two warpgroups; 16 where a pair of blocks shares the stage's b, below).
template <int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE void init_ring(u64* full, u64* empty, u32 empty_arrivals = 8) {
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int s = 0; s < STAGES; ++s) {
    hopper::mbarrier_init(&full[s], 1);
    hopper::mbarrier_init(&empty[s], empty_arrivals);
  }
  hopper::fence_barrier_init();
}

// init_ring for a block alone or one of a pair (a cluster of two sharing a stage's loads, whose
// empty barriers count both blocks' consumer warps), published to the block, or to both blocks
// of the pair before either loads or releases.
template <int STAGES, bool PAIR>
KJIT_DEVICE KJIT_FORCEINLINE void init_ring_published(u64* full, u64* empty) {
  init_ring<STAGES>(full, empty, PAIR ? 16 : 8);
  if constexpr (PAIR) {
    cluster_sync();
  } else {
    __syncthreads();
  }
}

// A pair's block leaves only with the other (which may still arrive on its barriers); every
// thread of both calls it last. Nothing for a block alone.
template <bool PAIR>
KJIT_DEVICE KJIT_FORCEINLINE void leave_pair() {
  if constexpr (PAIR) {
    __syncwarp();
    cluster_sync();
  }
}

// The producer's loop over the K blocks of a's rows a_row.. + 127 and b's rows b_row.. + BN - 1
// (the grouped GEMM's tiles start at any row). SPLIT_B: the b tile is two boxes of BN / 2 rows,
// b_row.. and b_row2.. (p.tma_b's box is BN / 2 rows then: the MoE gate / up GEMM loads a gate
// slice and the matching up slice); both land as one BN-row tile, since BN / 2 rows are whole
// periods of the 128-byte swizzle. A template flag, not a run-time test of b_row2: in the
// persistent MoE kernel (one lane of the producer warp loads) ptxas 13.0 set the third TMA's row
// coordinate under a predicate its elect loop had just cleared, so the up box loaded the gate rows
// again (seen in the SASS and on the H200, 2026-12-05). it0: the ring's running stage count at the
// first K block, as consume's (a persistent block's producer runs on into its next tile's stages).
// keep_a: a's boxes under L2 evict_last (the grouped kernels' lone tiles, produce_expert).
template <typename IN, int BN, int STAGES, bool SPLIT_B = false>
KJIT_DEVICE KJIT_FORCEINLINE void produce_rows(const GemmParams& p, unsigned char* tiles, u64* full,
                                               u64* empty, int k_blocks, int a_row, int b_row,
                                               int b_row2 = -1, int it0 = 0, bool keep_a = false) {
  constexpr u32 kABytes = kGemmBlockM * kGemmBlockK * sizeof(IN);
  constexpr u32 kStageBytes = (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN);
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int i = it0 + kb;
    const int s = i % STAGES;
    // Use i of stage s waits for the consumers' release of use i - STAGES, the (i / STAGES)-th
    // completion of its empty barrier; the first STAGES uses wait on parity 1, which a fresh
    // barrier reports complete.
    hopper::mbarrier_wait(&empty[s], ((i / STAGES) & 1) ^ 1);
    unsigned char* stage = tiles + s * kStageBytes;
    hopper::mbarrier_arrive_expect_tx(&full[s], kStageBytes);
    if (keep_a) {
      hopper::tma_load_2d_hint(stage, &p.tma_a, &full[s], kb * kGemmBlockK, a_row,
                               hopper::policy_evict_last());
    } else {
      hopper::tma_load_2d(stage, &p.tma_a, &full[s], kb * kGemmBlockK, a_row);
    }
    hopper::tma_load_2d(stage + kABytes, &p.tma_b, &full[s], kb * kGemmBlockK, b_row);
    if (SPLIT_B) {
      hopper::tma_load_2d(stage + kABytes + BN / 2 * kGemmBlockK * sizeof(IN), &p.tma_b, &full[s],
                          kb * kGemmBlockK, b_row2);
    }
  }
}

template <typename IN, int BN, int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE void produce(const GemmParams& p, unsigned char* tiles, u64* full,
                                          u64* empty, int k_blocks, int m_tile, int n_tile) {
  produce_rows<IN, BN, STAGES>(p, tiles, full, empty, k_blocks, m_tile * kGemmBlockM, n_tile * BN);
}

// The producer of a block of a pair (gemm_sm90_persistent_kernel's PAIR form: a cluster of two
// blocks on row tiles 2i and 2i + 1 of one column tile). Each block loads its own rows of a, and
// rank 0 loads b's tile once into both blocks (TMA multicast), so the pair reads b from L2 once.
// Each block's full barrier expects its whole stage (b landing from rank 0's load), and a stage is
// refilled only after both blocks' consumers gave it back: their empty barriers count the
// consumer warps of both blocks (consume's PAIR release). A row tile wholly past m (rank 1 of the
// last pair where the row tiles are odd) loads no a: its sums are never written.
template <typename IN, int BN, int STAGES>
KJIT_DEVICE KJIT_FORCEINLINE void produce_pair_rows(const GemmParams& p, unsigned char* tiles,
                                                    u64* full, u64* empty, int k_blocks, int a_row,
                                                    int b_row, int it0, u32 rank) {
  constexpr u32 kABytes = kGemmBlockM * kGemmBlockK * sizeof(IN);
  constexpr u32 kStageBytes = (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN);
  const bool a_in = a_row < p.m;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int i = it0 + kb;
    const int s = i % STAGES;
    hopper::mbarrier_wait(&empty[s], ((i / STAGES) & 1) ^ 1);
    unsigned char* stage = tiles + s * kStageBytes;
    hopper::mbarrier_arrive_expect_tx(&full[s], a_in ? kStageBytes : kStageBytes - kABytes);
    if (a_in) hopper::tma_load_2d(stage, &p.tma_a, &full[s], kb * kGemmBlockK, a_row);
    if (rank == 0) {
      hopper::tma_load_2d_multicast(stage + kABytes, &p.tma_b, &full[s], kb * kGemmBlockK, b_row,
                                    u16{0x3});
    }
  }
}

// A consumer warp's release of ring stage `s` (its lane 0 calls it): one arrival on the block's
// empty barrier, and where the block is one of a pair (produce_pair_rows) on the other block's too.
KJIT_DEVICE KJIT_FORCEINLINE void release_stage(u64* empty, int s, bool pair) {
  hopper::mbarrier_arrive(&empty[s]);
  if (pair) hopper::mbarrier_arrive_remote(&empty[s], cluster_rank() ^ 1);
}

// Consumer `half` (0 or 1) accumulates rows 64 * half .. + 63 of the tile into acc. it0: the
// ring's running stage count at the first K block (a persistent block's later tiles continue the
// barriers' phases: stage (it0 + kb) % STAGES); release_last: give the last stage back too (a
// block whose producer goes on to another tile). PAIR: each release reaches both blocks of a
// pair (release_stage).
template <typename IN, int BN, int STAGES, bool PAIR = false>
KJIT_DEVICE KJIT_FORCEINLINE void consume(unsigned char* tiles, u64* full, u64* empty, int k_blocks,
                                          int half, float (&acc)[BN / 2], int it0 = 0,
                                          bool release_last = false) {
  constexpr u32 kABytes = kGemmBlockM * kGemmBlockK * sizeof(IN);
  constexpr u32 kStageBytes = (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN);
  constexpr u32 kK16Bytes = 16 * sizeof(IN);  // one k16 step inside a 128-byte swizzle row
  const bool arrives = threadIdx.x % 32 == 0;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int i = it0 + kb;
    const int s = i % STAGES;
    hopper::mbarrier_wait(&full[s], (i / STAGES) & 1);
    const u32 a_base = hopper::smem_addr(tiles + s * kStageBytes) + half * 64 * 128;
    const u32 b_base = hopper::smem_addr(tiles + s * kStageBytes + kABytes);
    wgmma::fence_operands(acc);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kGemmBlockK / 16; ++kk) {
      wgmma::mma<IN, BN>(acc, wgmma::kmajor_sw128_desc(a_base + kk * kK16Bytes),
                         wgmma::kmajor_sw128_desc(b_base + kk * kK16Bytes), 1);
    }
    wgmma::commit_group();
    // One stage's MMAs stay in flight while the next stage's are issued: once the previous
    // group is done (each warp's own wait retires its reads), its stage goes back to the
    // producer. The last stage is released only on request (a single tile's is never refilled).
    wgmma::wait_group<1>();
    wgmma::fence_operands(acc);
    if (kb > 0 && arrives) release_stage(empty, (i - 1) % STAGES, PAIR);
  }
  wgmma::wait_group<0>();
  wgmma::fence_operands(acc);
  if (release_last && k_blocks > 0 && arrives) {
    release_stage(empty, (it0 + k_blocks - 1) % STAGES, PAIR);
  }
}

// acc's register i at (row, col) of the warpgroup's 64 x BN block (common/wgmma.cuh): registers
// 4j .. 4j+3 hold columns 8j + 2 (t % 4) + {0, 1} of two rows 8 apart, mma.sync's m16n8
// accumulator layout (epilogue.cuh's store_fragment).
template <typename IN, typename OUT, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void write_tile(const GemmParams& p, int half, int m_tile, int n_tile,
                                             const float (&acc)[BN / 2]) {
  const int t = static_cast<int>(threadIdx.x % 128);
  const i64 row0 = i64(m_tile) * kGemmBlockM + half * 64 + (t / 32) * 16 + (t % 32) / 4;
  const i64 col0 = i64(n_tile) * BN + (t % 4) * 2;
  const bool pairs = out_pairs_ok<OUT>(p);
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    if (col0 + 8 * j >= p.n) break;
    store_fragment<IN, OUT>(p, row0, col0 + 8 * j, &acc[4 * j], pairs);
  }
}

// Two outputs as one 32-bit register (the low half the first column), stmatrix's element pair.
template <typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE u32 pack_pair(float x, float y) {
  static_assert(sizeof(OUT) == 2, "stmatrix moves 16-bit elements");
  const OutPair<OUT> v{from_float<OUT>(x), from_float<OUT>(y)};
  return *reinterpret_cast<const u32*>(&v);  // OutPair is 4-byte aligned
}

// The TMA-store epilogue's slab loop, shared by the dense tiles (write_tile_tma) and the grouped
// ones (kernels/moe): consumer `half`'s 64 rows of an out tile COLS columns wide, whose first
// row (of this warpgroup) and column in `out_map`'s tensor are (row0, col0), go out kGemmOutSlab
// columns at a time. value(j, e, col) is the output of the thread's register 4j + e (n8 group j of
// the tile: columns 8j + 2 (t % 4) + e % 2 of rows (t / 4) % 8 + 8 (e / 2) of the warp's 16,
// common/wgmma.cuh), col its column in the tensor; so a 16 x 16 block's four m8n8 matrices are
// the registers of groups j and j + 1 paired: (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15),
// (8-15, 8-15). The warpgroup converts a slab into one of its two 8 KB staging buffers with
// stmatrix, in the 128-byte swizzle of out_map's 64 x 64 box (16-byte chunk c of row r at chunk
// c ^ (r % 8); the buffers are 1024-byte aligned), and one thread stores the slab by TMA, which
// leaves out rows and columns outside the tensor, while the warpgroup fills the other buffer.
// Slabs whose columns start at or past `cols` (from col0) are skipped, all of them where rows <= 0
// (rows left from row0). `staging`: the block's kGemmOutStagingBytes (2 x 2 buffers); drain: wait
// until the stores have read their buffers before returning (a block's last tile; the next tile's
// epilogue waits for them anyway, after its MMAs, when they are long done).
template <typename OUT, int COLS, typename Value>
KJIT_DEVICE KJIT_FORCEINLINE void store_tile_tma(const TensorMapBytes& out_map, int half, i64 row0,
                                                 i64 col0, i64 rows, i64 cols,
                                                 unsigned char* staging, bool drain, Value value) {
  static_assert(COLS % kGemmOutSlab == 0, "a tile is whole slabs");
  const int t = static_cast<int>(threadIdx.x % 128);
  const int lane = t % 32;
  const bool leader = t == 0;
  const int bar = 1 + half;  // named barrier of this warpgroup (0 is __syncthreads')
  const u32 base = hopper::smem_addr(staging) + half * 2 * kGemmOutSlabBytes;
  // This lane's stmatrix row (matrix lane / 8, row lane % 8 of it) and its swizzle phase.
  const int q = lane / 8;
  const u32 row_off = static_cast<u32>(((t / 32) * 16 + (q % 2) * 8 + lane % 8) * 128);
  const int phase = lane % 8;
  const i64 cfrag = col0 + (t % 4) * 2;  // this thread's first column
  // The previous tile's stores (a persistent block) must have read both buffers.
  if (leader) hopper::bulk_wait_group_read<0>();
  hopper::named_barrier_sync(bar, 128);
#pragma unroll
  for (int sl = 0; sl < COLS / kGemmOutSlab; ++sl) {
    if (rows <= 0 || sl * kGemmOutSlab >= cols) break;
    const u32 buf = base + (sl % 2) * kGemmOutSlabBytes;
    if (sl >= 2) {
      // The store of slab sl - 2 (this buffer's last) has read it.
      if (leader) hopper::bulk_wait_group_read<1>();
      hopper::named_barrier_sync(bar, 128);
    }
#pragma unroll
    for (int c = 0; c < kGemmOutSlab / 16; ++c) {
      const int j = sl * (kGemmOutSlab / 8) + 2 * c;  // the block's first n8 group
      float v[8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[4 * h + e] = value(j + h, e, cfrag + 8 * (j + h) + e % 2);
      }
      const u32 chunk = static_cast<u32>((2 * c + q / 2) ^ phase);
      hopper::stmatrix_x4(buf + row_off + chunk * 16, pack_pair<OUT>(v[0], v[1]),
                          pack_pair<OUT>(v[2], v[3]), pack_pair<OUT>(v[4], v[5]),
                          pack_pair<OUT>(v[6], v[7]));
    }
    // The slab's generic-proxy writes, visible to the TMA unit, from every warp.
    hopper::fence_proxy_async_smem();
    hopper::named_barrier_sync(bar, 128);
    if (leader) {
      hopper::tma_store_2d(&out_map, staging + (half * 2 + sl % 2) * kGemmOutSlabBytes,
                           static_cast<int>(col0 + sl * kGemmOutSlab), static_cast<int>(row0));
      hopper::bulk_commit_group();
    }
  }
  if (drain && leader) hopper::bulk_wait_group_read<0>();
}

// The dense tiles' TMA-store epilogue (a 16-bit out, p.tma_out set, beta 0): consumer `half`'s
// rows of the 128 x BN tile at (row0 = the tile's first row, col0 = its first column), alpha
// times the sum plus the bias, through store_tile_tma.
template <typename IN, typename OUT, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void write_tile_tma(const GemmParams& p, int half, i64 row0, i64 col0,
                                                 const float (&acc)[BN / 2], unsigned char* staging,
                                                 bool drain) {
  store_tile_tma<OUT, BN>(p.tma_out, half, row0 + half * 64, col0, p.m - row0 - half * 64,
                          p.n - col0, staging, drain, [&](int j, int e, i64 col) {
                            const float bias = col < p.n ? bias_at<IN>(p, col) : 0.0f;
                            return fmaf(p.alpha, acc[4 * j + e], bias);
                          });
}

// The epilogue of consumer `half` for tile (m_tile, n_tile): write_tile_tma when TMA_OUT (into
// `staging`), else write_tile's register stores.
template <typename IN, typename OUT, int BN, bool TMA_OUT>
KJIT_DEVICE KJIT_FORCEINLINE void write_tile_any(const GemmParams& p, int half, int m_tile,
                                                 int n_tile, const float (&acc)[BN / 2],
                                                 unsigned char* staging, bool drain) {
  if constexpr (TMA_OUT) {
    write_tile_tma<IN, OUT, BN>(p, half, i64(m_tile) * kGemmBlockM, i64(n_tile) * BN, acc, staging,
                                drain);
  } else {
    write_tile<IN, OUT, BN>(p, half, m_tile, n_tile, acc);
  }
}

template <int BN>
KJIT_DEVICE KJIT_FORCEINLINE void tile_of(const GemmParams& p, int& m_tile, int& n_tile) {
  band_tile(static_cast<int>(blockIdx.x), static_cast<int>((p.m + kGemmBlockM - 1) / kGemmBlockM),
            static_cast<int>((p.n + BN - 1) / BN), m_tile, n_tile);
}

// TMA_OUT: the TMA-store epilogue (write_tile_tma; a 16-bit out, p.tma_out set, beta 0), with
// its staging between the ring and the barriers (gemm_sm90_smem_bytes(BN, STAGES, true)).
template <typename IN, typename OUT, int BN, int STAGES, bool TMA_OUT = false>
__global__ void __launch_bounds__(kGemmSm90Threads, 1)
    gemm_sm90_kernel(const __grid_constant__ GemmParams p) {
  static_assert(sizeof(IN) == 2, "wgmma operands here are bf16 or fp16");
  static_assert(BN == 128 || BN == 256, "BN is a wgmma width kjit instantiates");
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN),
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  const int k_blocks = static_cast<int>((p.k + kGemmBlockK - 1) / kGemmBlockK);
  init_ring<STAGES>(r.full, r.empty);
  __syncthreads();
  int m_tile, n_tile;
  tile_of<BN>(p, m_tile, n_tile);
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) {
      produce<IN, BN, STAGES>(p, r.tiles, r.full, r.empty, k_blocks, m_tile, n_tile);
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    consume<IN, BN, STAGES>(r.tiles, r.full, r.empty, k_blocks, wg - 1, acc);
    write_tile_any<IN, OUT, BN, TMA_OUT>(p, wg - 1, m_tile, n_tile, acc, r.extra, true);
  }
}

// The tiles of a persistent block (gemm_sm90_persistent_kernel, gemm_fp8_sm90_persistent_kernel):
// blockIdx.x, + gridDim.x, ... of the band order (tile_of's), so the grid's blocks together sweep
// the same bands a wave of the one-tile kernel does. f(m_tile, n_tile, it0, more): it0 is the
// ring's running stage count at the tile's first K block, more whether the block has another tile.
// The producer thread and the consumers each walk the same list, so their counts agree.
template <int BN, int STAGES, typename F>
KJIT_DEVICE KJIT_FORCEINLINE void for_each_tile(const GemmParams& p, int k_blocks, F f) {
  const int tiles_m = static_cast<int>((p.m + kGemmBlockM - 1) / kGemmBlockM);
  const int tiles_n = static_cast<int>((p.n + BN - 1) / BN);
  const i64 tiles = i64(tiles_m) * tiles_n;
  int it = 0;
  for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
    int m_tile, n_tile;
    band_tile(static_cast<int>(t), tiles_m, tiles_n, m_tile, n_tile);
    f(m_tile, n_tile, it, t + gridDim.x < tiles);
    // Kept modulo 2 STAGES: a use's stage (it % STAGES) and barrier parity ((it / STAGES) & 1)
    // are all the ring needs, and the count cannot overflow however many tiles a block takes.
    it = (it + k_blocks) % (2 * STAGES);
  }
}

// for_each_tile's walk for the pairs of a cluster of two blocks (gemm_sm90_persistent_kernel's
// PAIR form): cluster c = blockIdx.x / 2 takes pair tiles c, + gridDim.x / 2, ... of the band
// order over ceil(tiles_m / 2) pair rows (bands of kGemmGroupM / 2 pairs: the same rows as the
// one-block order's bands), and block rank r of the pair row tile 2 i + r, so both blocks of a
// cluster walk the same column tiles in the same order (their rings' counts agree too).
template <int BN, int STAGES, typename F>
KJIT_DEVICE KJIT_FORCEINLINE void for_each_pair_tile(const GemmParams& p, int k_blocks, F f) {
  const int tiles_m = static_cast<int>((p.m + kGemmBlockM - 1) / kGemmBlockM);
  const int pairs_m = (tiles_m + 1) / 2;
  const int tiles_n = static_cast<int>((p.n + BN - 1) / BN);
  const i64 tiles = i64(pairs_m) * tiles_n;
  const i64 clusters = gridDim.x / 2;
  const int rank = static_cast<int>(cluster_rank());
  int it = 0;
  for (i64 t = blockIdx.x / 2; t < tiles; t += clusters) {
    int pair_m, n_tile;
    band_tile<kGemmGroupM / 2>(static_cast<int>(t), pairs_m, tiles_n, pair_m, n_tile);
    f(2 * pair_m + rank, n_tile, it, t + clusters < tiles);
    it = (it + k_blocks) % (2 * STAGES);
  }
}

// The persistent form of gemm_sm90_kernel: a fixed grid of at most one block per SM (the host's
// min(tiles, SMs); setmaxnreg's split takes all of an SM's registers, so one block fits anyway),
// each looping over for_each_tile's tiles. The producer streams every tile's K blocks through the
// ring without a break, so the next tile's first stages load while the consumers run this tile's
// epilogue, which the one-tile kernel pays as an empty pipeline at each block's start. The
// consumers release every stage but the block's very last (nothing refills it), and rezero
// their accumulators per tile. Launch contract: gemm_sm90_kernel's, with any grid of at least
// one block (fewer blocks than tiles take several each).
// PAIR: clusters of two blocks (launched with cluster size 2, an even grid) on row tiles 2i and
// 2i + 1 of each column tile (for_each_pair_tile), b's tile loaded once for both
// (produce_pair_rows): a pair reads 128 + 128 + BN rows of operands from L2 a stage where two
// blocks alone read 2 (128 + BN). No block leaves while its pair may still arrive on its barriers.
template <typename IN, typename OUT, int BN, int STAGES, bool TMA_OUT = false, bool PAIR = false>
__global__ void __launch_bounds__(kGemmSm90Threads, 1)
    gemm_sm90_persistent_kernel(const __grid_constant__ GemmParams p) {
  static_assert(sizeof(IN) == 2, "wgmma operands here are bf16 or fp16");
  static_assert(BN == 128 || BN == 256, "BN is a wgmma width kjit instantiates");
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN),
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  const int k_blocks = static_cast<int>((p.k + kGemmBlockK - 1) / kGemmBlockK);
  init_ring_published<STAGES, PAIR>(r.full, r.empty);
  const auto walk = [&](auto f) {
    if constexpr (PAIR) {
      for_each_pair_tile<BN, STAGES>(p, k_blocks, f);
    } else {
      for_each_tile<BN, STAGES>(p, k_blocks, f);
    }
  };
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (!PAIR && threadIdx.x != 0) return;
    if (threadIdx.x == 0) {
      walk([&](int m_tile, int n_tile, int it0, bool) {
        if constexpr (PAIR) {
          produce_pair_rows<IN, BN, STAGES>(p, r.tiles, r.full, r.empty, k_blocks,
                                            m_tile * kGemmBlockM, n_tile * BN, it0, cluster_rank());
        } else {
          produce_rows<IN, BN, STAGES>(p, r.tiles, r.full, r.empty, k_blocks, m_tile * kGemmBlockM,
                                       n_tile * BN, -1, it0);
        }
      });
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    walk([&](int m_tile, int n_tile, int it0, bool more) {
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      consume<IN, BN, STAGES, PAIR>(r.tiles, r.full, r.empty, k_blocks, wg - 1, acc, it0, more);
      write_tile_any<IN, OUT, BN, TMA_OUT>(p, wg - 1, m_tile, n_tile, acc, r.extra, !more);
    });
  }
  leave_pair<PAIR>();
}

}  // namespace gemm
}  // namespace kjit
