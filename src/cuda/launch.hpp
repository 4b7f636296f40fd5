// Kernel launch: every kjit kernel takes one params struct by value (__grid_constant__).
#pragma once

#include <cuda.h>

#include <cstddef>

namespace kjit::cuda {

// Limits the host ops size their launches against, defined once (the sanitizer CI's unity build
// puts several ops' sources into one translation unit).
inline constexpr long long kMaxInt32 = (1LL << 31) - 1;  // int32 indices, counts, TMA coordinates
inline constexpr long long kMaxTmaSide = kMaxInt32;      // TMA coordinates are int32
inline constexpr long long kMaxGridY = 65535;            // gridDim.y and gridDim.z
inline constexpr int kHopperSmemOptin = 227 * 1024;      // sm_90 dynamic shared memory per block

struct LaunchConfig {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned smem_bytes = 0;
  CUstream stream = nullptr;
};

// Throws KJIT_ERROR_CUDA when the launch is rejected.
void launch(CUfunction fn, const LaunchConfig& cfg, const void* params);

// Thread-block clusters (sm_90+): `cluster_x` blocks along x form a cluster (grid_x a multiple of
// it). Sizes above 8 are non-portable; the launch opts the kernel in to them. dependent: also a
// programmatic dependent, as launch_dependent.
void launch_cluster(CUfunction fn, const LaunchConfig& cfg, unsigned cluster_x, const void* params,
                    bool dependent = false);

// Launches as a programmatic dependent of the kernel before it on the stream (sm_90+): its blocks
// may start once every block of that kernel has started (or executed
// griddepcontrol.launch_dependents), so the kernel must griddepcontrol.wait before reading its
// predecessor's results.
void launch_dependent(CUfunction fn, const LaunchConfig& cfg, const void* params);

// How many clusters of `cluster_x` blocks of `block_x` threads (and `smem_bytes` of dynamic
// shared memory) the device can run at once; 0 when it cannot run one (or the size is refused).
int max_active_clusters(CUfunction fn, unsigned cluster_x, unsigned block_x, unsigned smem_bytes);
// How many blocks of `block_x` threads (and `smem_bytes` of dynamic shared memory) of `fn` one SM
// runs at once (registers, threads and shared memory); 0 when it cannot run one.
int max_active_blocks(CUfunction fn, unsigned block_x, unsigned smem_bytes);

// The dynamic shared memory (padding: the kernel need not use it) that lets at most `blocks`
// blocks of a kernel with `static_bytes` of static shared memory share an SM: the SM's
// `smem_per_sm` over `blocks`, less each block's static part and the driver's `reserved` part,
// within [0, optin - static_bytes]. 0 for blocks <= 0 (no cap). Threads and registers may cap
// the blocks an SM runs further.
unsigned smem_padding_for_blocks(int blocks, int static_bytes, int smem_per_sm, int reserved,
                                 int optin);
// The same for `fn` on a device with `smem_per_sm`, `reserved` and `optin` (DeviceInfo's).
unsigned smem_padding_for_blocks(CUfunction fn, int blocks, int smem_per_sm, int reserved,
                                 int optin);

}  // namespace kjit::cuda
