#include "support/gpu.hpp"

#include <stdexcept>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"

namespace kjit::test {

const GpuCaps& gpu_caps() {
  static const GpuCaps caps = [] {
    GpuCaps c;
    if (!cuda::driver_available(&c.why)) return c;
    if (cuda::device_count() == 0) {
      c.why = "no CUDA device";
      return c;
    }
    c.devices = cuda::device_count();
    const auto& info = cuda::device_info(0);
    c.major = info.major;
    c.minor = info.minor;
    c.usable = info.major >= 8;
    if (!c.usable) {
      c.why = "device 0 (" + info.name + ") is sm_" + std::to_string(info.major * 10 + info.minor) +
              ", kjit needs sm_80 or newer";
    }
    return c;
  }();
  return caps;
}

bool gpu_available(std::string* why) {
  const GpuCaps& c = gpu_caps();
  if (!c.usable && why) *why = c.why;
  return c.usable;
}

std::string missing_capability(const std::vector<std::string>& tags) {
  const GpuCaps& c = gpu_caps();
  const std::string here = "this device is sm_" + std::to_string(c.major * 10 + c.minor);
  for (const auto& t : tags) {
    if (t == "sm90" && !c.sm90()) return "needs sm_90 or newer (clusters, PDL); " + here;
    if (t == "sm90a" && !c.sm90a()) return "needs sm_90a (compute capability 9.0); " + here;
    if (t == "multi_gpu" && !c.multi_gpu()) {
      return "needs two or more GPUs; this process sees " + std::to_string(c.devices);
    }
  }
  return "";
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  cuda::ScopedDevice scope(0);
  CUdeviceptr p = 0;
  KJIT_CU_CHECK(cuda::driver().cuMemAlloc(&p, bytes == 0 ? 1 : bytes));
  ptr_ = p;
}

DeviceBuffer::~DeviceBuffer() {
  cuda::ScopedDevice scope(0);
  cuda::driver().cuMemFree(static_cast<CUdeviceptr>(ptr_));
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_) throw std::out_of_range("upload past the end");
  cuda::ScopedDevice scope(0);
  KJIT_CU_CHECK(cuda::driver().cuMemcpyHtoD(static_cast<CUdeviceptr>(ptr_ + offset), src, bytes));
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_) throw std::out_of_range("download past the end");
  cuda::ScopedDevice scope(0);
  KJIT_CU_CHECK(cuda::driver().cuMemcpyDtoH(dst, static_cast<CUdeviceptr>(ptr_ + offset), bytes));
}

void DeviceBuffer::fill(unsigned char value) {
  cuda::ScopedDevice scope(0);
  KJIT_CU_CHECK(cuda::driver().cuMemsetD8(static_cast<CUdeviceptr>(ptr_), value, bytes_));
  // cuMemsetD8 may return before the device is done, on the legacy stream, which does not order
  // against non-blocking streams: a kernel on one could run before the poison lands (seen on the
  // H200 under load). Wait, so the poison is always in place first.
  KJIT_CU_CHECK(cuda::driver().cuCtxSynchronize());
}

void device_synchronize() {
  cuda::ScopedDevice scope(0);
  KJIT_CU_CHECK(cuda::driver().cuCtxSynchronize());
}

DLDataType dl_dtype(const std::string& name) {
  if (name == "fp32") return {kDLFloat, 32, 1};
  if (name == "fp16") return {kDLFloat, 16, 1};
  if (name == "bf16") return {kDLBfloat, 16, 1};
  if (name == "int32") return {kDLInt, 32, 1};
  if (name == "int64") return {kDLInt, 64, 1};
  if (name == "e4m3") return {KJIT_DL_FLOAT8_E4M3FN, 8, 1};
  throw std::invalid_argument("unknown dtype " + name);
}

Tensor make_tensor(void* data, std::vector<int64_t> shape, DLDataType dtype,
                   std::vector<int64_t> strides, int device_id, DLDeviceType device_type) {
  Tensor t;
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  t.t.data = data;
  t.t.device = {device_type, device_id};
  t.t.ndim = static_cast<int>(t.shape.size());
  t.t.dtype = dtype;
  t.t.shape = t.shape.data();
  t.t.strides = t.strides.empty() ? nullptr : t.strides.data();
  t.t.byte_offset = 0;
  return t;
}

}  // namespace kjit::test
