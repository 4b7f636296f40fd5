// Kernel launch: every kjit kernel takes one params struct by value (__grid_constant__).
#pragma once

#include <cuda.h>

#include <cstddef>

namespace kjit::cuda {

struct LaunchConfig {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned smem_bytes = 0;
  CUstream stream = nullptr;
};

// Throws KJIT_ERROR_CUDA when the launch is rejected.
void launch(CUfunction fn, const LaunchConfig& cfg, const void* params);

}  // namespace kjit::cuda
