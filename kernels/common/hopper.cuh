// Hopper (sm_90) asynchronous copies and their barriers: mbarriers, TMA tensor loads into shared
// memory, TMA stores out of it (and stmatrix to fill it), and the register reallocation of
// warp-specialized kernels. The mbarrier and TMA load instructions come from CCCL's cuda::ptx (on
// NVRTC's include path), the stores and stmatrix are inline PTX; this file only names the forms
// kjit uses. Compiled for sm_90a kernels only.
#pragma once

// Only the instruction headers kjit uses: all of <cuda/ptx> (every instruction family up to
// Blackwell's) took NVRTC's front end about 0.1 s per specialization, 12% of a wgmma prefill
// spec's cold compile; the SASS is the same either way. A toolkit whose CCCL lays them out
// differently gets the whole header.
#if __has_include(<cuda/__ptx/instructions/mbarrier_wait.h>) && \
    __has_include(<cuda/__ptx/instructions/cp_async_bulk_tensor.h>)
#include <cuda/std/detail/__config>
#include <cuda/__ptx/instructions/cp_async_bulk_tensor.h>
#include <cuda/__ptx/instructions/fence.h>
#include <cuda/__ptx/instructions/mbarrier_arrive.h>
#include <cuda/__ptx/instructions/mbarrier_expect_tx.h>
#include <cuda/__ptx/instructions/mbarrier_init.h>
#include <cuda/__ptx/instructions/mbarrier_wait.h>
#else
#include <cuda/ptx>
#endif

#include "common/prelude.cuh"

namespace kjit {
namespace hopper {

using kjit::smem_addr;

// cuda::ptx spells a barrier as cuda::std::uint64_t (unsigned long on LP64), kjit as u64.
KJIT_DEVICE KJIT_FORCEINLINE cuda::std::uint64_t* ptx_bar(u64* bar) {
  return reinterpret_cast<cuda::std::uint64_t*>(bar);
}

// One thread initializes; the fence makes the initialization visible to the async proxy (TMA)
// and to the other threads after the following __syncthreads().
KJIT_DEVICE KJIT_FORCEINLINE void mbarrier_init(u64* bar, u32 arrivals) {
  cuda::ptx::mbarrier_init(ptx_bar(bar), arrivals);
}
KJIT_DEVICE KJIT_FORCEINLINE void fence_barrier_init() {
  cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
}

// Orders the block's generic-proxy accesses of shared memory with the async proxy's (TMA, wgmma):
// a persistent block that kept other data in its ring calls it (after the barrier that ends those
// accesses) before refilling the ring; a cp.async producer calls it after its copies land, before
// the barrier that hands them to wgmma.
KJIT_DEVICE KJIT_FORCEINLINE void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Arrives once and adds `bytes` to the transaction count the phase waits for (the producer's
// arrival for a stage whose TMA loads complete those bytes).
KJIT_DEVICE KJIT_FORCEINLINE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                       cuda::ptx::space_shared, ptx_bar(bar), bytes);
}

KJIT_DEVICE KJIT_FORCEINLINE void mbarrier_arrive(u64* bar) {
  cuda::ptx::mbarrier_arrive(ptx_bar(bar));
}

// Adds `bytes` to the transaction count of the barrier's current phase without arriving: a thread
// that issues TMA loads into a phase other threads also arrive on says so before its first load.
KJIT_DEVICE KJIT_FORCEINLINE void mbarrier_expect_tx(u64* bar, u32 bytes) {
  cuda::ptx::mbarrier_expect_tx(cuda::ptx::sem_relaxed, cuda::ptx::scope_cta,
                                cuda::ptx::space_shared, ptx_bar(bar), bytes);
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, and
// waiting for parity 1 returns at once (the phase before it counts as complete), which is how a
// producer passes the empty barriers of its first round.
KJIT_DEVICE KJIT_FORCEINLINE void mbarrier_wait(u64* bar, u32 parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(ptx_bar(bar), parity)) {
  }
}

// A 2-D TMA load of the box at (x = inner coordinate, y = outer) of `tensor_map` (a CUtensorMap
// in parameter or global memory) into `dst`; completes `bytes` of `bar`'s transaction count.
// Elements outside the tensor arrive as zeros.
KJIT_DEVICE KJIT_FORCEINLINE void tma_load_2d(void* dst, const void* tensor_map, u64* bar, int x,
                                              int y) {
  const int coords[2] = {x, y};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst,
                                  tensor_map, coords, ptx_bar(bar));
}

// tma_load_2d into the same shared-memory offset of every block of the cluster in `cta_mask`
// (bit r: block rank r), completing the bytes on the barrier at `bar`'s offset in each of them.
// Each receiving block's barrier must expect those bytes in the phase they land in.
KJIT_DEVICE KJIT_FORCEINLINE void tma_load_2d_multicast(void* dst, const void* tensor_map, u64* bar,
                                                        int x, int y, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<u64>(tensor_map)), "r"(x), "r"(y), "r"(smem_addr(bar)), "h"(cta_mask)
      : "memory");
}

// One arrival on the barrier at `bar`'s offset in block `rank` of the cluster: a consumer giving a
// stage back to a producer in another block. Its reads of the stage (wgmma's, waited for) are all
// it orders, so the default release at CTA scope serves (a cluster-scope release costs a
// GPU-wide memory barrier).
KJIT_DEVICE KJIT_FORCEINLINE void mbarrier_arrive_remote(u64* bar, u32 rank) {
  asm volatile(
      "{\n\t.reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}" ::"r"(smem_addr(bar)),
      "r"(rank)
      : "memory");
}

// tma_load_2d under an L2 cache policy (createpolicy's 64-bit operand).
KJIT_DEVICE KJIT_FORCEINLINE void tma_load_2d_hint(void* dst, const void* tensor_map, u64* bar,
                                                   int x, int y, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<u64>(tensor_map)), "r"(x), "r"(y), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// tma_load_2d_multicast under an L2 cache policy (after the CTA mask, as PTX orders them).
KJIT_DEVICE KJIT_FORCEINLINE void tma_load_2d_multicast_hint(void* dst, const void* tensor_map,
                                                             u64* bar, int x, int y, u16 cta_mask,
                                                             u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<u64>(tensor_map)), "r"(x), "r"(y), "r"(smem_addr(bar)), "h"(cta_mask),
      "l"(policy)
      : "memory");
}

// A policy that keeps the lines it loads in L2 ahead of the others (evict_last).
KJIT_DEVICE KJIT_FORCEINLINE u64 policy_evict_last() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// A 4-D TMA load of the box at coordinates (c0 innermost .. c3) of `tensor_map` into `dst`, as
// tma_load_2d. Coordinates outside the tensor (negative ones too) load zeros.
KJIT_DEVICE KJIT_FORCEINLINE void tma_load_4d(void* dst, const void* tensor_map, u64* bar, int c0,
                                              int c1, int c2, int c3) {
  const int coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst,
                                  tensor_map, coords, ptx_bar(bar));
}

// A 2-D TMA store of the box at (x = inner coordinate, y = outer) of `tensor_map` from `src`
// (shared memory, the map's swizzle), one bulk group of the issuing thread: rows and columns of
// the box outside the tensor are not written. The thread commits the group (bulk_commit_group) and
// waits for it (bulk_wait_group_read before reusing src, bulk_wait_group before the block exits).
// Generic-proxy writes of src must be fenced first (fence_proxy_async_smem).
KJIT_DEVICE KJIT_FORCEINLINE void tma_store_2d(const void* tensor_map, const void* src, int x,
                                               int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
          tensor_map),
      "r"(smem_addr(src)), "r"(x), "r"(y)
      : "memory");
}

// Closes the calling thread's bulk group of the TMA stores issued since its last commit.
KJIT_DEVICE KJIT_FORCEINLINE void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most N of the calling thread's committed bulk groups still read shared memory.
template <int N>
KJIT_DEVICE KJIT_FORCEINLINE void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until at most N of the calling thread's committed bulk groups are incomplete (their
// writes done).
template <int N>
KJIT_DEVICE KJIT_FORCEINLINE void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// stmatrix m8n8.x4 (16-bit elements): four 8 x 8 matrices from the warp's registers to shared
// memory. Lane l gives the address of row l % 8 of matrix l / 8 (16 bytes); register q of lane
// l holds the element pair at row l / 4, columns 2 (l % 4) + {0, 1} of matrix q, the layout of an
// mma.sync m16n8 accumulator's pairs.
KJIT_DEVICE KJIT_FORCEINLINE void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Synchronizes the `threads` threads (a multiple of 32) that use named barrier `id` (1..15; 0 is
// __syncthreads'), e.g. one warpgroup of a warp-specialized block.
KJIT_DEVICE KJIT_FORCEINLINE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Counts the calling warp's threads as arrived at named barrier `id` (of `threads`, the same count
// its bar.sync callers give) without waiting: the signalling half of a turn-taking handshake.
KJIT_DEVICE KJIT_FORCEINLINE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Moves registers between warpgroups of a warp-specialized block: the producer gives up what it
// does not need, the consumers take it. Every warp of the warpgroup must execute it.
template <u32 REGS>
KJIT_DEVICE KJIT_FORCEINLINE void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <u32 REGS>
KJIT_DEVICE KJIT_FORCEINLINE void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

}  // namespace hopper
}  // namespace kjit
