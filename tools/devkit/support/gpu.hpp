// GPU helpers for tests and the bench: the one capability check, device buffers and DLTensors.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kjit::test {

// The single place that decides what GPU tests run: device 0's capabilities, read once.
struct GpuCaps {
  bool usable = false;  // a driver that loads and a device of compute capability 8.0 or newer
  int major = 0, minor = 0;
  std::string why;  // why not usable
  // Thread-block clusters and programmatic dependent launch.
  bool sm90() const { return usable && major >= 9; }
  // sm_90a cubins (wgmma, setmaxnreg): compute capability 9.0 exactly, nothing newer runs them.
  bool sm90a() const { return usable && major == 9 && minor == 0; }
  // Devices the process sees (all of them, not only device 0), for multi-GPU tests.
  int devices = 0;
  bool multi_gpu() const { return usable && devices >= 2; }
};
const GpuCaps& gpu_caps();

// gpu_caps().usable, with the reason when not: kjit's floor is sm_80, so an older GPU is "no
// GPU" to the tests (they skip) and to the bench.
bool gpu_available(std::string* why = nullptr);

// The capability tags of GPU tests: "sm90" (gpu_caps().sm90()), "sm90a" (.sm90a()) and
// "multi_gpu" (.multi_gpu()). Given a
// test's tags (without brackets), the reason it cannot run on this device, or "" when it can.
std::string missing_capability(const std::vector<std::string>& tags);

// cuMemAlloc'ed bytes in the primary context of device 0, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  size_t size() const { return bytes_; }
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  // Fills every byte with `value` (0xFF makes bf16/fp16/fp32 NaN: a poisoned output).
  void fill(unsigned char value);

 private:
  unsigned long long ptr_ = 0;
  size_t bytes_ = 0;
};

void device_synchronize();

// A DLTensor that owns its shape and strides.
struct Tensor {
  Tensor() = default;
  // Moves keep the vectors' buffers, so t.shape / t.strides stay valid; copies would not.
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  DLTensor t{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty = compact
  DLTensor* get() { return &t; }
};

// dtype "fp32" | "fp16" | "bf16" | "int32" | "int64" | "e4m3" (float8_e4m3fn).
DLDataType dl_dtype(const std::string& name);
Tensor make_tensor(void* data, std::vector<int64_t> shape, DLDataType dtype,
                   std::vector<int64_t> strides = {}, int device_id = 0,
                   DLDeviceType device_type = kDLCUDA);

}  // namespace kjit::test
