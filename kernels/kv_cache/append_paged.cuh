// Append new keys and values to a paged KV cache (FlashInfer's append_paged_kv_cache).
//
// Token t of the append goes to request b = batch_indices[t] at position pos = positions[t] of
// that request's sequence: page kv_indices[kv_indptr[b] + pos / page_size], slot
// pos % page_size. Each (token, head) row of HEAD_DIM elements of k and of v is copied there.
//
// The page table is read on the device only (nothing is synchronized with the host, so the
// launch can be captured in a CUDA graph), and it is trusted for nothing that could write out of
// bounds: a token whose request index is not in [0, batch), whose position is negative, whose
// page slot falls outside its request's range [kv_indptr[b], kv_indptr[b + 1]) or outside
// kv_indices, or whose page id is not in [0, num_pages) is skipped. kv_last_page_len is not read
// (as in FlashInfer): positions say where tokens go.
//
// The op is a gather-scatter copy, bandwidth-bound; every byte of k and v is read once with
// 16-byte vectors (when aligned) and written once. With CACHE_FP8 the caches hold float8 e4m3:
// each element is stored as e4m3(x / scale) (round to nearest even, saturating to +-448), with
// one scale per tensor or per kv head, read on the device so a graph replays with new scales. The
// data loads are issued beside the chain of dependent index loads (batch index -> indptr -> page
// id), so their latencies overlap.
#pragma once

#include "common/fastdiv.cuh"
#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "kv_cache/kv_cache_params.h"
#include "kv_cache/paged_slot.cuh"

namespace kjit {
namespace kv_cache {

// Launch with grid = ceil(rows / (blockDim.x / kThreadsPerRow)) and blockDim.x a multiple of
// kThreadsPerRow = min(HEAD_DIM / VEC, 32), no shared memory. Every pointer and stride of the
// append tensors and caches must be aligned to VEC * sizeof(DTYPE) bytes. The caches must not
// overlap the inputs; two tokens that name the same slot race (one of them wins).
// EARLY_INDICES (the host's KJIT_PDL_EARLY_INDICES, at decode sizes): the whole index chain
// (batch index, position, kv_indptr, kv_indices) is read before the programmatic-launch wait,
// with plain loads (ptxas keeps those ahead of the wait; read-only-path loads it may sink past
// it), so after the wait a thread only loads its k / v row and stores it. The caller promises
// that the kernel just before does not write those four tensors.
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, int HEAD_DIM, int VEC, bool EARLY_INDICES, bool CACHE_FP8>
__global__ void __launch_bounds__(256)
append_paged_kv_kernel(const __grid_constant__ AppendPagedKvParams p) {
  // clang-format on
  if constexpr (!EARLY_INDICES) pdl_enter();  // before any global access: see prelude.cuh
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0 && VEC * sizeof(DTYPE) <= 16, "bad VEC");
  static_assert(HEAD_DIM >= 1 && HEAD_DIM % VEC == 0, "HEAD_DIM must be a multiple of VEC");
  constexpr int kVecs = HEAD_DIM / VEC;
  // Up to a warp per row; longer rows give each thread several vectors, all loaded together.
  constexpr int kThreadsPerRow = kVecs < 32 ? kVecs : 32;
  constexpr int kIters = (kVecs + kThreadsPerRow - 1) / kThreadsPerRow;
  constexpr bool kEven = kVecs % kThreadsPerRow == 0;
  using V = Vec<DTYPE, VEC>;
  using CacheT = typename CacheElement<DTYPE, CACHE_FP8>::type;

  const int rows_per_block = int(blockDim.x) / kThreadsPerRow;
  const int local = int(threadIdx.x) / kThreadsPerRow;
  const int lane = int(threadIdx.x) - local * kThreadsPerRow;
  const int row = int(blockIdx.x) * rows_per_block + local;
  // Threads past the last whole row or past the rows stay until the shuffles below.
  const bool live = local < rows_per_block && row < p.rows;
  // Divisions by host-computed multipliers (common/fastdiv.cuh): both sit on the dependent chain
  // below, where a run-time division was ~20 serial instructions each.
  const int token = live ? fast_div(row, p.heads_div) : 0;
  const int head = live ? row - token * p.num_heads : 0;

  // Index reads: before the wait (EARLY_INDICES) they must be plain loads, see above.
  auto load_index = [](const int* q) { return EARLY_INDICES ? *q : __ldg(q); };

  // At decode sizes the kernel's time is the chain of dependent loads: batch index -> indptr ->
  // page id -> store. Its head is issued first; with few requests (batch < 32, whole warps) the
  // warp reads all of kv_indptr at the same time, one entry per lane, and picks its two entries
  // with shuffles: one round trip fewer on the chain.
  int b = 0, pos = -1;
  if (live) {
    b = load_index(p.batch_indices + token);
    pos = load_index(p.positions + token);
  }
  const bool warp_indptr = p.batch < 32 && (blockDim.x & 31) == 0;
  const int lane32 = int(threadIdx.x) & 31;
  const int ip = warp_indptr && lane32 <= p.batch ? load_index(p.kv_indptr + lane32) : 0;

  const DTYPE* ak = static_cast<const DTYPE*>(p.append_k) + token * p.ak_st + head * p.ak_sh;
  const DTYPE* av = static_cast<const DTYPE*>(p.append_v) + token * p.av_st + head * p.av_sh;
  // Loaded once and never written here: the read-only path. After the wait with EARLY_INDICES
  // (below, once the destination is known).
  V kv[kIters], vv[kIters];
  float k_div = 1.0f, v_div = 1.0f;  // the fp8 scales (they may be written by the kernel before)
  auto load_rows = [&] {
    if constexpr (CACHE_FP8) {
      if (live) {
        k_div = __ldg(p.k_scale + head * p.scale_head_stride);
        v_div = __ldg(p.v_scale + head * p.scale_head_stride);
      }
    }
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int v = lane + i * kThreadsPerRow;
      if (live && (kEven || v < kVecs)) {
        kv[i].load_ro(ak + v * VEC);
        vv[i].load_ro(av + v * VEC);
      }
    }
  };
  if constexpr (!EARLY_INDICES) load_rows();

  const bool b_ok = b >= 0 && b < p.batch;
  int first, end;
  if (warp_indptr) {
    // Every lane of the warp takes part (b_ok is per thread, so the source lanes are clamped).
    const int bl = b_ok ? b : 0;
    first = __shfl_sync(0xffffffffu, ip, bl);
    end = __shfl_sync(0xffffffffu, ip, bl + 1);
    if (!live || !b_ok || pos < 0) return;
  } else {
    if (!live || !b_ok || pos < 0) return;
    first = load_index(p.kv_indptr + b);
    end = load_index(p.kv_indptr + b + 1);
  }
  // page_slot's rules (kv_cache/paged_slot.cuh), written out: through the helper ptxas
  // schedules this kernel's decode path differently (8 more instructions in the e4m3 variant on
  // sm_90a), and its code order is what the PDL tests pin.
  const int page_in_seq = fast_div(pos, p.page_size_div);  // pos >= 0 here
  const long long slot_index = (long long)first + page_in_seq;
  if (first < 0 || slot_index >= end || slot_index >= p.nnz_pages) return;
  const int page = load_index(p.kv_indices + slot_index);
  if (page < 0 || page >= p.num_pages) return;
  const int slot = pos - page_in_seq * p.page_size;

  CacheT* kd = static_cast<CacheT*>(p.k_cache) + page * p.kc_sp + slot * p.kc_ss + head * p.kc_sh;
  CacheT* vd = static_cast<CacheT*>(p.v_cache) + page * p.vc_sp + slot * p.vc_ss + head * p.vc_sh;
  if constexpr (EARLY_INDICES) {
    // The four row addresses are formed before the wait too (an OR of aligned addresses is never
    // 1); rows that left above never waited: they touch nothing the kernel before writes.
    pdl_pin_before_wait(
        reinterpret_cast<unsigned long long>(ak) | reinterpret_cast<unsigned long long>(av) |
            reinterpret_cast<unsigned long long>(kd) | reinterpret_cast<unsigned long long>(vd),
        p.positions + token);
    pdl_wait();
    pdl_launch_dependents();
    load_rows();
  }
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int v = lane + i * kThreadsPerRow;
    if (kEven || v < kVecs) {
      if constexpr (CACHE_FP8) {
        quantize_e4m3(kv[i], k_div).store(kd + v * VEC);
        quantize_e4m3(vv[i], v_div).store(vd + v * VEC);
      } else {
        kv[i].store(kd + v * VEC);
        vv[i].store(vd + v * VEC);
      }
    }
  }
}

}  // namespace kv_cache
}  // namespace kjit
