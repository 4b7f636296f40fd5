// What the call log (call_log.cpp) and `kjit-cli replay` need to look at tensors: a checked view
// of a DLTensor's fields, row-major walks over strided layouts, copies of the elements to the
// host, statistics, the dtype spellings, and the dump budget (KJIT_DUMP_MAX_COUNT / _BYTES).
//
// Nothing here trusts a DLTensor: a NULL shape, a silly ndim or an overflowing size is reported,
// never walked. Device memory is read through the driver (a bad address is an error status);
// host memory (kDLCPU, kDLCUDAHost) is read directly, as DLPack defines it.
#pragma once

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diag/safetensors.hpp"
#include "kjit/kjit.h"

namespace kjit::api {

namespace st = util::safetensors;

// DLPack 1.x type codes newer than the dlpack.h kjit builds against.
inline constexpr uint8_t kDLBoolCode = 6;
inline constexpr uint8_t kDLFloat8E4M3FnCode = KJIT_DL_FLOAT8_E4M3FN;
inline constexpr uint8_t kDLFloat8E5M2Code = 12;

inline constexpr int kMaxWalkDims = 64;

// The fields of a DLTensor, checked to be consistent enough to walk.
struct TensorDesc {
  DLDataType dtype{};
  DLDevice device{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements; the compact row-major ones when not given
  bool strides_given = false;
  uint64_t byte_offset = 0;
  const void* data = nullptr;
  uint64_t numel = 0;
  size_t elem_bytes = 0;  // bits * lanes / 8

  uintptr_t address() const {  // where element 0 is
    return reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(byte_offset);
  }
  bool host_readable() const {
    return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
  }
  bool on_cuda() const {
    return device.device_type == kDLCUDA || device.device_type == kDLCUDAManaged;
  }
};

// nullopt, with the reason in *why, when `t` is NULL or cannot be walked safely: ndim outside
// 0..64, a NULL shape, a negative dim, bits not a multiple of 8, a size past 2^62 bytes.
std::optional<TensorDesc> describe_tensor(const DLTensor* t, std::string* why);

// "bf16", "fp16", "fp32", "fp64", "int8".."int64", "uint8".."uint64", "bool", "fp8_e4m3",
// "fp8_e5m2"; anything else as "dtype(code=C,bits=B,lanes=L)".
std::string dtype_label(DLDataType t);
std::optional<st::Dtype> safetensors_dtype(DLDataType t);
DLDataType dl_dtype(st::Dtype d);
// "cuda:0", "cpu:0", "cuda_host:0", "cuda_managed:0", or "device(type=T):id".
std::string device_label(DLDevice d);
// The largest power of two (up to 256) dividing `address`; 256 for 0.
int address_alignment(uintptr_t address);

// The lowest and highest element offsets the tensor touches (numel > 0), strides may be negative.
void offset_range(const TensorDesc& t, int64_t* lo, int64_t* hi);
// Calls fn(element_offset, count) for each run of consecutive elements among the first `n`
// elements in row-major order (a run spans the innermost dim when its stride is 1).
void for_each_run(const TensorDesc& t, uint64_t n,
                  const std::function<void(int64_t offset, uint64_t count)>& fn);

// The first min(numel, max_elems) elements, packed row-major, into `out`. Device memory is copied
// with cuMemcpyDtoH in windows of at most 16 MiB (the caller orders it after the stream's work).
// Returns false with the reason in *why (no driver, a bad address, ...).
bool read_tensor(const TensorDesc& t, uint64_t max_elems, std::string& out, std::string* why);

// One element as a double (bool and integers exactly up to 2^53; fp8 as OCP e4m3fn / e5m2).
double element_value(st::Dtype d, const void* p);
bool is_float(st::Dtype d);

struct TensorStats {
  uint64_t n = 0;  // elements looked at
  uint64_t nan = 0;
  uint64_t inf = 0;
  uint64_t finite = 0;
  double min = 0, max = 0, mean = 0;  // over the finite elements
};
TensorStats compute_stats(st::Dtype d, std::string_view packed);

// KJIT_DUMP_MAX_COUNT / KJIT_DUMP_MAX_BYTES, process-wide. A call is dumped only when one more
// dump and all of its tensor bytes fit; the first call that does not stops dumping for good.
class DumpBudget {
 public:
  DumpBudget(int64_t max_count, uint64_t max_bytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}
  enum class Result { kGranted, kStoppedNow, kStopped };
  // kStoppedNow once, with the reason in *why; kStopped after that.
  Result reserve(uint64_t bytes, std::string* why);
  // Gives back bytes reserved but not written (the outputs of a call that failed).
  void refund(uint64_t bytes);
  int64_t count() const;
  uint64_t bytes() const;

 private:
  mutable std::mutex mu_;
  int64_t max_count_;
  uint64_t max_bytes_;
  int64_t count_ = 0;
  uint64_t bytes_ = 0;
  bool stopped_ = false;
};

// "<UTC yyyymmdd-hhmmss.mmm>_pid<pid>_<api>_call<NNNN>".
std::string dump_folder_name(std::string_view api, uint64_t call, long pid,
                             std::chrono::system_clock::time_point when);

}  // namespace kjit::api
