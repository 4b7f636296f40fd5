// Devices and their primary contexts. kjit runs in the device's primary context, the one the CUDA
// runtime (and so PyTorch) uses, so pointers and streams from the engine are valid in it.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

namespace kjit::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;
  int sm_count = 0;
  size_t total_mem = 0;
  int l2_bytes = 0;
  int max_smem_optin = 0;  // per block, with opt-in
  int smem_per_sm = 0;     // shared memory of one SM
  int smem_reserved = 0;   // shared memory the driver reserves for each block
  int max_threads_per_sm = 0;
};

// 0 when there is no driver or no device; never throws.
int device_count();
// Cached per device. Throws KJIT_ERROR_NO_DEVICE (no driver) or KJIT_ERROR_INVALID_ARGUMENT
// (ordinal out of range).
const DeviceInfo& device_info(int ordinal);
CUcontext primary_context(int ordinal);

// Makes the device's primary context current for the calling thread, for code (tests, the
// bench) that then uses the driver API directly, as the CUDA runtime's cudaSetDevice does.
void make_current(int ordinal);

// Makes the device's primary context current for the scope when it is not already, and restores
// the caller's context afterwards.
class ScopedDevice {
 public:
  explicit ScopedDevice(int ordinal);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace kjit::cuda
