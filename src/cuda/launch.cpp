#include "cuda/launch.hpp"

#include "cuda/driver.hpp"

namespace kjit::cuda {

void launch(CUfunction fn, const LaunchConfig& cfg, const void* params) {
  const Driver& d = driver();
  if (cfg.smem_bytes > 48 * 1024) {
    // Above 48 KB a kernel must opt in to its dynamic shared memory size.
    KJIT_CU_CHECK(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(cfg.smem_bytes)));
  }
  void* args[] = {const_cast<void*>(params)};
  KJIT_CU_CHECK(d.cuLaunchKernel(fn, cfg.grid_x, cfg.grid_y, cfg.grid_z, cfg.block_x, cfg.block_y,
                                 cfg.block_z, cfg.smem_bytes, cfg.stream, args, nullptr));
}

}  // namespace kjit::cuda
