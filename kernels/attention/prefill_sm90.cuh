// Batch prefill / append attention on Hopper tensor cores (sm_90a), FlashAttention-3 style: the
// same problem, parameters and conventions as prefill_kernel (attention/prefill.cuh, whose work
// lookup, key addressing, masks, softmax and store this kernel shares), on warpgroup MMA.
//
// One CTA owns kSm90Rows = 128 packed (token, group member) rows of one (request, kv head), as
// the mma.sync kernel does with 8 warps, and three warpgroups:
//   warpgroup 0 (producer, attention/prefill_sm90_load.cuh): streams the CTA's Q rows once and
//     its K / V tiles of kv_tile keys through a ring of `stages` shared-memory stages, by TMA
//     boxes where the host could describe K and V as tensors (ragged keys; pages of a power-of-two
//     size >= 8), else by cp.async one key row at a time.
//   warpgroups 1 and 2 (consumers): rows 0-63 and 64-127. Per tile S = Q K^T by wgmma with both
//     operands in shared memory, the online softmax in registers (fp32, exp2), P rounded to the
//     input type in registers and O += P V by wgmma with A from registers and V read N-major.
//     The softmax of tile i runs while the tensor cores do P V of tile i - 1 (the next S is
//     issued before it): K and V stages have barriers of their own, so a K stage goes back to
//     the producer after its scores, a V stage after its P V.
//   pingpong = 1: the two consumer warpgroups also take turns issuing a tile's MMAs (named
//     barriers 2 and 3, FlashAttention-3's inter-warpgroup schedule), so one warpgroup's softmax
//     runs while the other's MMAs keep the tensor cores busy instead of both softmaxes running
//     at once. A tuning choice: 3-5% ahead of the plain schedule under a causal mask on an
//     H100, level with it without one, and behind the persistent form (docs/performance.md).
// fp8 e4m3 keys and values (kv_fp8, head_dim 64 / 128, not persistent): the producer copies
// each tile's rows raw and converts them into the stage (produce_fp8), the MMAs run in fp16.
// head_dim 256 (Gemma-class models) runs 64-key tiles: O takes 128 accumulator registers a thread
// there, and 64 keys leave S (32) and P (16) room beside it under the consumers' 224.
// Tiles and masks as the mma.sync kernel: tiles past the causal diagonal or before the window
// are never loaded, only tiles that cross a bound evaluate the mask per element. Shared memory
// tiles use TMA's 128-byte swizzle layout (rows of 64 elements, 8-row groups of 1024 bytes), the
// one the wgmma descriptors read.
#pragma once

#include "attention/prefill.cuh"
#include "attention/prefill_sm90_load.cuh"
#include "common/hopper.cuh"
#include "common/wgmma.cuh"

namespace kjit {
namespace attention {

constexpr int kSm90Rows = kPrefillSm90Rows;
constexpr int kSm90Threads = kPrefillSm90Threads;
// Registers per thread after setmaxnreg: 128 * 56 + 256 * 224 fits the 64K of an SM. The producer
// keeps more than the GEMM's (40): it computes its rows' addresses from the page table itself.
constexpr u32 kSm90ProducerRegs = 56;
constexpr u32 kSm90ConsumerRegs = 224;

// Dynamic shared memory of one CTA (the host's prefill_smem_bytes gives the same figure): the Q
// tile (q_bufs of them: the persistent kernel loads the next tile's Q into the second), then
// `stages` K tiles and `stages` V tiles, each 1024-byte aligned, plus the slack that aligns the
// first.
// kv_fp8: then a raw e4m3 tile each for K and V (produce_fp8's staging).
template <int head_dim, int kv_tile, int stages, int q_bufs = 1, int kv_fp8 = 0>
struct PrefillSm90Smem {
  static constexpr int kQBytes = kSm90Rows * head_dim * 2;
  static constexpr int kTileBytes = kv_tile * head_dim * 2;
  static constexpr int kKAt = q_bufs * kQBytes;
  static constexpr int kVAt = kKAt + stages * kTileBytes;
  static constexpr int kRawAt = kVAt + stages * kTileBytes;
  static constexpr int kRawBytes = kv_fp8 != 0 ? kv_tile * head_dim : 0;
  static constexpr int kTotal = kRawAt + 2 * kRawBytes + 1024;
};

// Keeps P's registers from being reused while a wgmma that reads them may still run: called after
// the wait, it makes the compiler treat them as live until then.
template <int N>
KJIT_DEVICE KJIT_FORCEINLINE void keep_operands(u32 (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
  }
}

// The consumer's S = Q K^T for its 64 rows, issued (the caller waits): Q rows 64 wg .. + 63 and
// the stage's keys, both K-major; a k16 step moves 32 bytes inside a 128-byte row, a 64-column
// block every 4 steps.
template <typename dtype, int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void qk_issue(u32 q_base, u32 k_base, float (&s)[kv_tile / 2]) {
  wgmma::fence_operands(s);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < head_dim / 16; ++kk) {
    const u32 q = q_base + (kk >> 2) * (kSm90Rows * 128) + (kk & 3) * 32;
    const u32 k = k_base + (kk >> 2) * (kv_tile * 128) + (kk & 3) * 32;
    wgmma::mma<dtype, kv_tile>(s, wgmma::kmajor_sw128_desc(q), wgmma::kmajor_sw128_desc(k),
                               kk > 0 ? 1 : 0);
  }
  wgmma::commit_group();
}

// P (softmax_scores' output) rounded to the input type as the register-A operand of P V: the 16
// keys of step kk are accumulator registers 8 kk .. 8 kk + 7 of S (common/wgmma.cuh's accumulator
// layout is the register-A layout).
template <typename dtype, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void pack_p(const float (&s)[kv_tile / 2], u32 (&a)[kv_tile / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kv_tile / 16; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) a[kk][e] = pack2<dtype>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
  }
}

// O += P V, issued (the caller waits): V N-major, 16 keys (2048 bytes) per step.
template <typename dtype, int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void pv_issue(const u32 (&a)[kv_tile / 16][4], u32 v_base,
                                           float (&o)[head_dim / 2]) {
  wgmma::fence_operands(o);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kv_tile / 16; ++kk) {
    wgmma::mma_rs<dtype, head_dim>(o, a[kk],
                                   wgmma::mnmajor_sw128_desc(v_base + kk * 2048, kv_tile * 128), 1);
  }
  wgmma::commit_group();
}

// The consumer side of one CTA tile (warpgroups 1 and 2): per key tile S = Q K^T, the softmax
// and O += P V from the ring's stages it0, it0 + 1, ... (a persistent CTA's earlier tiles used the
// stages before it0), then the rows stored. q_empty (the persistent kernel's, else null): each
// consumer warp arrives once its last S of the tile is done (at once without tiles), so the
// producer may load another tile's Q into the buffer.
// mma_dtype: the MMAs' input type (fp16 for fp8 keys and values), dtype Q's and out's.
template <typename dtype, int head_dim, int kv_tile, int stages, int pingpong,
          typename mma_dtype = dtype>
KJIT_DEVICE KJIT_FORCEINLINE void consume_tile(const PrefillParams& p, const PrefillWork& w, int h,
                                               const TileRange& tr, unsigned char* q_s,
                                               unsigned char* k_s, unsigned char* v_s,
                                               PrefillRing<kv_tile, stages>& ring, int it0,
                                               u64* q_empty) {
  using Smem = PrefillSm90Smem<head_dim, kv_tile, stages>;
  const int first_tile = tr.first, end_tile = tr.end;
  const int ct = int(threadIdx.x) - 128;  // 0 .. 255
  const int lane = ct & 31;
  const int row0 = (ct / 128) * 64 + ((ct % 128) / 32) * 16 + lane / 4;
  const RowBounds rb = row_bounds(p, w, row0);
  float m_run[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
  float l_run[2] = {0.0f, 0.0f};
  float o[head_dim / 2];
  float s[kv_tile / 2];
#pragma unroll
  for (int i = 0; i < head_dim / 2; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kv_tile / 2; ++i) s[i] = 0.0f;
  const u32 q_base = hopper::smem_addr(q_s) + (ct / 128) * 64 * 128;
  // Softmax of tile i overlaps P V of tile i - 1: S of tile i is issued, then P V of the tile
  // before it, and the scores wait only for the first.
  u32 a[kv_tile / 16][4];
  auto o4 = [&]() -> float(&)[head_dim / 8][4] {
    return reinterpret_cast<float(&)[head_dim / 8][4]>(o);
  };
  // Ping-pong turns: consumer c waits on barrier 2 + c before issuing a tile's MMAs and then
  // lets the other one go (barrier 3 - c). Both run the same tiles, so the arrivals pair up:
  // consumer 1 opens consumer 0's first turn and leaves out its own last arrival, which no turn
  // would consume (a barrier must not be left with arrivals pending).
  const int cwg = ct / 128;
  if (pingpong && cwg == 1 && first_tile < end_tile) hopper::named_barrier_arrive(2, 256);
  if (q_empty != nullptr && first_tile >= end_tile && lane == 0) hopper::mbarrier_arrive(q_empty);
  for (int t = first_tile; t < end_tile; ++t) {
    const int i = t - first_tile, g = it0 + i, st = g % stages, prev = (g + stages - 1) % stages;
    hopper::mbarrier_wait(&ring.full_k[st], (g / stages) & 1);
    const bool all_ok = ring.ok[st][0] && ring.ok[st][1] && ring.ok[st][2] && ring.ok[st][3];
    const long long start = (long long)t * kv_tile;
    const bool masked = !all_ok || tr.masked(start, kv_tile);
    if (pingpong) hopper::named_barrier_sync(2 + cwg, 256);
    qk_issue<mma_dtype, head_dim, kv_tile>(q_base, hopper::smem_addr(k_s + st * Smem::kTileBytes),
                                           s);
    if (i > 0) {
      hopper::mbarrier_wait(&ring.full_v[prev], ((g - 1) / stages) & 1);
      pv_issue<mma_dtype, head_dim, kv_tile>(a, hopper::smem_addr(v_s + prev * Smem::kTileBytes),
                                             o);
    }
    if (i > 0) {
      wgmma::wait_group<1>();
    } else {
      wgmma::wait_group<0>();
    }
    wgmma::fence_operands(s);
    // The other consumer's turn once this one's S is done (its P V still on the tensor cores):
    // an arrive between the issues and the wait, under a branch on the tile, made ptxas
    // serialize every wgmma (C7514).
    if (pingpong) hopper::named_barrier_arrive(3 - cwg, 256);
    // The tile's S is done: after the last one Q is free for the next item (persistent).
    if (q_empty != nullptr && t + 1 == end_tile && lane == 0) hopper::mbarrier_arrive(q_empty);
    float alpha[2];
    softmax_scores<kv_tile>(p, reinterpret_cast<float(&)[kv_tile / 8][4]>(s), masked, rb,
                            ring.valid[st], int(start), lane, m_run, l_run, alpha);
    if (lane == 0) hopper::mbarrier_arrive(&ring.empty_k[st]);
    wgmma::wait_group<0>();
    wgmma::fence_operands(o);
    keep_operands(a);
    if (i > 0 && lane == 0) hopper::mbarrier_arrive(&ring.empty_v[prev]);
    rescale_rows<head_dim>(alpha, o4());
    pack_p<mma_dtype, kv_tile>(s, a);
  }
  if (first_tile < end_tile) {
    const int g = it0 + end_tile - first_tile, prev = (g - 1) % stages;
    hopper::mbarrier_wait(&ring.full_v[prev], ((g - 1) / stages) & 1);
    pv_issue<mma_dtype, head_dim, kv_tile>(a, hopper::smem_addr(v_s + prev * Smem::kTileBytes), o);
    wgmma::wait_group<0>();
    wgmma::fence_operands(o);
    keep_operands(a);
    // The last V stage back to the producer: a persistent CTA's next tile reuses it (a one-tile
    // CTA's ring ends here).
    if (q_empty != nullptr && lane == 0) hopper::mbarrier_arrive(&ring.empty_v[prev]);
    // Consumer 1's last turn handed one to consumer 0 that no tile takes: taken here, after the
    // last wgmma wait. One CTA tile a block only: a persistent consumer 1 could reach its next
    // tile's first arrive before consumer 0 takes this one, and two arrivals of its 128 threads
    // complete the barrier without consumer 0 (the persistent form with ping-pong hung so, branch
    // s20-prefill-ppfix).
    if (pingpong && cwg == 0) hopper::named_barrier_sync(2, 256);
  }
  store_rows<dtype, head_dim>(p, w, h, row0, lane, m_run, l_run,
                              reinterpret_cast<const float(&)[head_dim / 8][4]>(o));
}

// Launch contract: grid the plan's CTA tiles of kSm90Rows rows x num_kv_heads, kSm90Threads
// threads, PrefillSm90Smem::kTotal bytes of dynamic shared memory; the rest as prefill_kernel.
// kv_fp8 = 1: k and v are e4m3 (produce_fp8; args.kv_tma must be 0), mma_dtype is __half.
template <typename dtype, int head_dim, int kv_tile, int stages, int pingpong,
          typename mma_dtype = dtype, int kv_fp8 = 0>
__global__ void __launch_bounds__(kSm90Threads, 1)
    prefill_sm90_kernel(const __grid_constant__ PrefillSm90Params args) {
  static_assert(kv_fp8 == 0 || IsSame<mma_dtype, __half>::value,
                "fp8 keys and values run fp16 MMAs");
  static_assert(head_dim == 64 || head_dim == 128 || head_dim == 256,
                "wgmma prefill serves head_dim 64, 128 and 256");
  static_assert(kv_tile == 64 || kv_tile == 128, "kv_tile is a wgmma width kjit instantiates");
  static_assert(head_dim != 256 || kv_tile == 64,
                "at head_dim 256 O takes 128 registers: S and P fit beside it at 64 keys a tile");
  using Smem = PrefillSm90Smem<head_dim, kv_tile, stages, 1, kv_fp8>;
  const PrefillParams& p = args.p;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int work_s[2];
  // K and V stages have barriers of their own: a K stage goes back to the producer once its
  // tile's scores are done, a V stage a tile later, after P V.
  __shared__ PrefillRing<kv_tile, stages> ring;
  // The 128-byte swizzle repeats every 1024 bytes and the descriptors assume tiles start on it.
  unsigned char* q_s = smem_raw + ((1024 - (hopper::smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* k_s = q_s + Smem::kKAt;
  unsigned char* v_s = q_s + Smem::kVAt;

  if (threadIdx.x == 0) {
    ring.init();
    hopper::fence_barrier_init();
  }
  PrefillWork w;
  const PrefillCta cta = prefill_cta(p, blockIdx.x);
  if (!find_work<kSm90Rows>(p, cta.work, w, work_s)) return;  // its barrier publishes
  const int h = cta.h;

  const TileRange tr = tile_range<kSm90Rows, kv_tile>(p, w);
  const int first_tile = tr.first, end_tile = tr.end;

  const int wg = int(threadIdx.x) / 128;
  if (wg == 0) {
    hopper::regs_dealloc<kSm90ProducerRegs>();
    const int tid = int(threadIdx.x);
    if (first_tile < end_tile) {
      produce_q<dtype, head_dim, mma_dtype>(p, w, h, tid, q_s);
      if constexpr (kv_fp8 != 0) {
        unsigned char* raw = q_s + Smem::kRawAt;
        produce_fp8<head_dim, kv_tile, stages>(p, w, h, tid, first_tile, end_tile, k_s, v_s, raw,
                                               raw + Smem::kRawBytes, ring);
      } else if (args.kv_tma) {
        produce_tma<dtype, head_dim, kv_tile, stages>(args, w, h, tid, first_tile, end_tile, k_s,
                                                      v_s, ring);
      } else {
        produce_cp_async<dtype, head_dim, kv_tile, stages>(p, w, h, tid, first_tile, end_tile, k_s,
                                                           v_s, ring);
      }
    }
    return;
  }

  hopper::regs_alloc<kSm90ConsumerRegs>();
  consume_tile<dtype, head_dim, kv_tile, stages, pingpong, mma_dtype>(p, w, h, tr, q_s, k_s, v_s,
                                                                      ring, 0, nullptr);
}

// What the persistent kernel's producer hands its consumers per CTA tile (b < 0: no more).
struct PrefillItem {
  PrefillWork w;
  int h;
};

// The persistent form (PrefillConfig::persistent): grid min(tiles x kv_heads, SMs) CTAs, CTA c
// walking the CTA tiles c, 2G - 1 - c, 2G + c, 4G - 1 - c, ... of prefill_cta's order (G the
// grid: a snake, so each CTA's share of long and short causal tiles evens out), each as
// prefill_sm90_kernel would run it. What it saves is each tile's start and end: the producer
// locates the next tile (its warp 0, named barrier 1), loads its Q into the second Q buffer and
// its first K / V stages while the consumers finish this tile and store its rows. It hands each
// tile to the consumers in a record per Q buffer (q_full, one arrival), and the consumers give
// a Q buffer back (q_empty, one arrival per consumer warp) once their last S of its tile is done.
// The ring's stages and phases run on across tiles. Same launch contract otherwise, with
// PrefillSm90Smem<..., 2>::kTotal bytes of dynamic shared memory.
template <typename dtype, int head_dim, int kv_tile, int stages>
__global__ void __launch_bounds__(kSm90Threads, 1)
    prefill_sm90_persistent_kernel(const __grid_constant__ PrefillSm90Params args) {
  static_assert(head_dim == 64 || head_dim == 128 || head_dim == 256,
                "wgmma prefill serves head_dim 64, 128 and 256");
  static_assert(kv_tile == 64 || kv_tile == 128, "kv_tile is a wgmma width kjit instantiates");
  static_assert(head_dim != 256 || kv_tile == 64,
                "at head_dim 256 O takes 128 registers: S and P fit beside it at 64 keys a tile");
  using Smem = PrefillSm90Smem<head_dim, kv_tile, stages, 2>;
  const PrefillParams& p = args.p;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int work_s[2][2];
  __shared__ PrefillRing<kv_tile, stages> ring;
  __shared__ u64 q_full[2], q_empty[2];
  __shared__ PrefillItem item_s[2];
  unsigned char* q_s = smem_raw + ((1024 - (hopper::smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* k_s = q_s + Smem::kKAt;
  unsigned char* v_s = q_s + Smem::kVAt;

  if (threadIdx.x == 0) {
    ring.init();
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      hopper::mbarrier_init(&q_full[b], 1);
      hopper::mbarrier_init(&q_empty[b], 8);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();

  if (int(threadIdx.x) < 128) {
    hopper::regs_dealloc<kSm90ProducerRegs>();
    const int tid = int(threadIdx.x);
    const unsigned total = unsigned(p.tiles) * unsigned(p.kv_heads);
    const unsigned grid = gridDim.x, c = blockIdx.x;
    int it = 0, pub = 0;  // ring stages used, tiles handed over
    for (unsigned n = 0;; ++n) {
      const unsigned index = n * grid + ((n & 1) ? grid - 1 - c : c);
      if (index >= total) break;  // every later band's index is larger still
      const PrefillCta cta = prefill_cta(p, index);
      // Two slot pairs: pair n & 1 is written again two tiles on, a barrier after its last read.
      int* slots = work_s[n & 1];
      if (tid < 32) locate_work<kSm90Rows>(p, cta.work, slots);
      hopper::named_barrier_sync(1, 128);
      PrefillWork w;
      if (!read_work<kSm90Rows>(p, slots, w)) continue;  // past the last tile: nothing to hand over
      const int buf = pub & 1;
      hopper::mbarrier_wait(&q_empty[buf], ((pub >> 1) & 1) ^ 1);
      if (tid == 0) {
        item_s[buf].w = w;
        item_s[buf].h = cta.h;
        hopper::mbarrier_arrive(&q_full[buf]);
      }
      const TileRange tr = tile_range<kSm90Rows, kv_tile>(p, w);
      if (tr.first < tr.end) {
        unsigned char* q = q_s + buf * Smem::kQBytes;
        produce_q<dtype, head_dim>(p, w, cta.h, tid, q);
        if (args.kv_tma) {
          produce_tma<dtype, head_dim, kv_tile, stages>(args, w, cta.h, tid, tr.first, tr.end, k_s,
                                                        v_s, ring, it);
        } else {
          produce_cp_async<dtype, head_dim, kv_tile, stages>(p, w, cta.h, tid, tr.first, tr.end,
                                                             k_s, v_s, ring, it);
        }
        it += tr.end - tr.first;
      }
      ++pub;
    }
    const int buf = pub & 1;
    hopper::mbarrier_wait(&q_empty[buf], ((pub >> 1) & 1) ^ 1);
    if (tid == 0) {
      item_s[buf].w.b = -1;
      hopper::mbarrier_arrive(&q_full[buf]);
    }
    return;
  }

  hopper::regs_alloc<kSm90ConsumerRegs>();
  int it = 0;
  for (int n = 0;; ++n) {
    const int buf = n & 1;
    hopper::mbarrier_wait(&q_full[buf], (n >> 1) & 1);
    const PrefillWork w = item_s[buf].w;
    const int h = item_s[buf].h;
    if (w.b < 0) return;
    const TileRange tr = tile_range<kSm90Rows, kv_tile>(p, w);
    consume_tile<dtype, head_dim, kv_tile, stages, 0>(p, w, h, tr, q_s + buf * Smem::kQBytes, k_s,
                                                      v_s, ring, it, &q_empty[buf]);
    if (tr.first < tr.end) it += tr.end - tr.first;
  }
}

}  // namespace attention
}  // namespace kjit
