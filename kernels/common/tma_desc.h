// A CUtensorMap's 128 opaque bytes, as kernels receive them inside their __grid_constant__
// parameter structs: cuda.h aligns the type to 64 bytes before CUDA 13 and to 128 since (TMA needs
// 64), and NVRTC code cannot include cuda.h. The host fills it through cuTensorMapEncodeTiled
// (src/cuda/tensor_map.hpp) and copies the bytes in; TMA reads it from the parameter space.
#pragma once

namespace kjit {

struct alignas(128) TmaDescriptor {
  unsigned long long words[16];
};

}  // namespace kjit
