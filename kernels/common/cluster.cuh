// Thread-block cluster primitives (sm_90+): rank, size, the cluster-wide barrier and the mapping
// of a shared-memory address into another block of the cluster (distributed shared memory). On
// older targets they degrade to a one-block cluster, so shared code still compiles for sm_80.
#pragma once

#include "common/prelude.cuh"

namespace kjit {

// Every block of the cluster must call cluster_sync the same number of times in the same order.

KJIT_DEVICE KJIT_FORCEINLINE u32 cluster_rank() {
#if __CUDA_ARCH__ >= 900
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

KJIT_DEVICE KJIT_FORCEINLINE u32 cluster_size() {
#if __CUDA_ARCH__ >= 900
  u32 n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
#else
  return 1;
#endif
}

// A barrier of every thread of every block of the cluster. Shared-memory writes before it are
// visible to every block of the cluster after it (release / acquire at cluster scope).
KJIT_DEVICE KJIT_FORCEINLINE void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n\t"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
#else
  __syncthreads();
#endif
}

// Bytes of dynamic shared memory the launch gave the block.
KJIT_DEVICE KJIT_FORCEINLINE u32 dynamic_smem_bytes() {
  u32 n;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

// The generic address of `p` (this block's shared memory) in block `rank` of the cluster.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE V* cluster_map(V* p, u32 rank) {
#if __CUDA_ARCH__ >= 900
  u64 out;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"(reinterpret_cast<u64>(p)), "r"(rank));
  return reinterpret_cast<V*>(out);
#else
  return p;
#endif
}

}  // namespace kjit
