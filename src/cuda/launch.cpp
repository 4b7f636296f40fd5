#include "cuda/launch.hpp"

#include <algorithm>

#include "cuda/driver.hpp"

namespace kjit::cuda {

namespace {

constexpr unsigned kDefaultSmemBytes = 48 * 1024;

// A kernel whose static plus dynamic shared memory passes 48 KB must opt in to its dynamic size
// (the default limit on the dynamic part is 48 KB minus the static part: a kernel with 42 KB of
// static shared memory and 8 KB of dynamic fails to launch with CUDA_ERROR_INVALID_VALUE without
// it, as the sampling cluster path once did on the H200). Returns the driver's result.
CUresult opt_in_dynamic_smem(CUfunction fn, unsigned dynamic_bytes) {
  if (dynamic_bytes == 0) return CUDA_SUCCESS;
  const Driver& d = driver();
  int static_bytes = 0;
  if (dynamic_bytes <= kDefaultSmemBytes) {
    const CUresult r = d.cuFuncGetAttribute(&static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    if (r != CUDA_SUCCESS) return r;
    if (static_cast<unsigned>(static_bytes) + dynamic_bytes <= kDefaultSmemBytes) {
      return CUDA_SUCCESS;
    }
  }
  return d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              static_cast<int>(dynamic_bytes));
}

CUlaunchAttribute cluster_attribute(unsigned cluster_x) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = cluster_x;
  a.value.clusterDim.y = 1;
  a.value.clusterDim.z = 1;
  return a;
}

CUlaunchAttribute dependent_attribute() {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  return a;
}

// cuLaunchKernelEx with `count` launch attributes (a cluster shape, programmatic serialization).
void launch_ex(CUfunction fn, const LaunchConfig& cfg, CUlaunchAttribute* attrs, unsigned count,
               const void* params) {
  CUlaunchConfig lc{};
  lc.gridDimX = cfg.grid_x;
  lc.gridDimY = cfg.grid_y;
  lc.gridDimZ = cfg.grid_z;
  lc.blockDimX = cfg.block_x;
  lc.blockDimY = cfg.block_y;
  lc.blockDimZ = cfg.block_z;
  lc.sharedMemBytes = cfg.smem_bytes;
  lc.hStream = cfg.stream;
  lc.attrs = attrs;
  lc.numAttrs = count;
  void* args[] = {const_cast<void*>(params)};
  KJIT_CU_CHECK(driver().cuLaunchKernelEx(&lc, fn, args, nullptr));
}

}  // namespace

void launch(CUfunction fn, const LaunchConfig& cfg, const void* params) {
  const Driver& d = driver();
  KJIT_CU_CHECK(opt_in_dynamic_smem(fn, cfg.smem_bytes));
  void* args[] = {const_cast<void*>(params)};
  KJIT_CU_CHECK(d.cuLaunchKernel(fn, cfg.grid_x, cfg.grid_y, cfg.grid_z, cfg.block_x, cfg.block_y,
                                 cfg.block_z, cfg.smem_bytes, cfg.stream, args, nullptr));
}

void launch_cluster(CUfunction fn, const LaunchConfig& cfg, unsigned cluster_x, const void* params,
                    bool dependent) {
  const Driver& d = driver();
  KJIT_CU_CHECK(opt_in_dynamic_smem(fn, cfg.smem_bytes));
  if (cluster_x > 8) {
    KJIT_CU_CHECK(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  }
  CUlaunchAttribute attrs[2] = {cluster_attribute(cluster_x), dependent_attribute()};
  launch_ex(fn, cfg, attrs, dependent ? 2u : 1u, params);
}

void launch_dependent(CUfunction fn, const LaunchConfig& cfg, const void* params) {
  KJIT_CU_CHECK(opt_in_dynamic_smem(fn, cfg.smem_bytes));
  CUlaunchAttribute attr = dependent_attribute();
  launch_ex(fn, cfg, &attr, 1, params);
}

int max_active_clusters(CUfunction fn, unsigned cluster_x, unsigned block_x, unsigned smem_bytes) {
  const Driver& d = driver();
  if (cluster_x > 8 && d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                            1) != CUDA_SUCCESS) {
    return 0;
  }
  if (opt_in_dynamic_smem(fn, smem_bytes) != CUDA_SUCCESS) return 0;
  CUlaunchAttribute attr = cluster_attribute(cluster_x);
  CUlaunchConfig lc{};
  lc.gridDimX = cluster_x;
  lc.gridDimY = 1;
  lc.gridDimZ = 1;
  lc.blockDimX = block_x;
  lc.blockDimY = 1;
  lc.blockDimZ = 1;
  lc.sharedMemBytes = smem_bytes;
  lc.attrs = &attr;
  lc.numAttrs = 1;
  int n = 0;
  if (d.cuOccupancyMaxActiveClusters(&n, fn, &lc) != CUDA_SUCCESS) return 0;
  return n;
}

int max_active_blocks(CUfunction fn, unsigned block_x, unsigned smem_bytes) {
  int n = 0;
  if (driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, static_cast<int>(block_x),
                                                           smem_bytes) != CUDA_SUCCESS) {
    return 0;
  }
  return n;
}

unsigned smem_padding_for_blocks(int blocks, int static_bytes, int smem_per_sm, int reserved,
                                 int optin) {
  if (blocks <= 0) return 0;
  const long long pad = static_cast<long long>(smem_per_sm) / blocks - static_bytes - reserved;
  const long long room = static_cast<long long>(optin) - static_bytes;
  return static_cast<unsigned>(std::max(0LL, std::min(pad, room)));
}

unsigned smem_padding_for_blocks(CUfunction fn, int blocks, int smem_per_sm, int reserved,
                                 int optin) {
  if (blocks <= 0) return 0;
  int static_bytes = 0;
  KJIT_CU_CHECK(
      driver().cuFuncGetAttribute(&static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
  return smem_padding_for_blocks(blocks, static_bytes, smem_per_sm, reserved, optin);
}

}  // namespace kjit::cuda
