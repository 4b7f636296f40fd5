#include "cuda/device.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/driver.hpp"
#include "util/error.hpp"

namespace kjit::cuda {

int device_count() {
  if (!driver_available()) return 0;
  int n = 0;
  if (driver().cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n;
}

namespace {

struct DeviceState {
  DeviceInfo info;
  CUcontext ctx = nullptr;
};

// Per-call readers (every launch asks for its context) take this lock-free path once the device
// is set up; the mutex below only guards first-time setup.
constexpr int kMaxFastDevices = 64;
std::atomic<DeviceState*> g_fast_states[kMaxFastDevices];

DeviceState& state_slow(int ordinal);

DeviceState& state(int ordinal) {
  if (ordinal >= 0 && ordinal < kMaxFastDevices) {
    if (DeviceState* s = g_fast_states[ordinal].load(std::memory_order_acquire)) return *s;
  }
  return state_slow(ordinal);
}

DeviceState& state_slow(int ordinal) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceState>> states;
  const Driver& d = driver();
  std::lock_guard<std::mutex> lock(mu);
  if (states.empty()) states.resize(static_cast<size_t>(device_count()));
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= states.size()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "CUDA device {} does not exist ({} visible)", ordinal,
         states.size());
  }
  auto& slot = states[static_cast<size_t>(ordinal)];
  if (!slot) {
    auto s = std::make_unique<DeviceState>();
    CUdevice dev;
    KJIT_CU_CHECK(d.cuDeviceGet(&dev, ordinal));
    char name[256] = {};
    KJIT_CU_CHECK(d.cuDeviceGetName(name, sizeof name, dev));
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      KJIT_CU_CHECK(d.cuDeviceGetAttribute(&v, a, dev));
      return v;
    };
    DeviceInfo& i = s->info;
    i.ordinal = ordinal;
    i.name = name;
    i.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    i.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    i.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    i.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    i.max_smem_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    i.smem_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    i.smem_reserved = attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
    i.max_threads_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    KJIT_CU_CHECK(d.cuDeviceTotalMem(&i.total_mem, dev));
    // Retained for the life of the process, like the CUDA runtime does.
    KJIT_CU_CHECK(d.cuDevicePrimaryCtxRetain(&s->ctx, dev));
    slot = std::move(s);
    if (ordinal < kMaxFastDevices)
      g_fast_states[ordinal].store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

}  // namespace

const DeviceInfo& device_info(int ordinal) {
  return state(ordinal).info;
}

CUcontext primary_context(int ordinal) {
  return state(ordinal).ctx;
}

void make_current(int ordinal) {
  KJIT_CU_CHECK(driver().cuCtxSetCurrent(primary_context(ordinal)));
}

ScopedDevice::ScopedDevice(int ordinal) {
  CUcontext want = primary_context(ordinal);
  const Driver& d = driver();
  CUcontext cur = nullptr;
  KJIT_CU_CHECK(d.cuCtxGetCurrent(&cur));
  if (cur != want) {
    KJIT_CU_CHECK(d.cuCtxPushCurrent(want));
    pushed_ = true;
  }
}

ScopedDevice::~ScopedDevice() {
  if (pushed_) {
    CUcontext ignored;
    driver().cuCtxPopCurrent(&ignored);
  }
}

}  // namespace kjit::cuda
