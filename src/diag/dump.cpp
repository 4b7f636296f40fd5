#include "diag/dump.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "util/error.hpp"

namespace kjit::api {

namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 62;
constexpr uint64_t kWindowBytes = 16ull << 20;

template <typename T>
T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

double half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(static_cast<double>(man + 1024), exp - 25);
  }
  return sign ? -v : v;
}

double e4m3fn_value(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 7;
  double v;
  if (exp == 15 && man == 7) {
    v = std::numeric_limits<double>::quiet_NaN();  // e4m3fn has no infinities
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), -9);
  } else {
    v = std::ldexp(static_cast<double>(8 + man), exp - 10);
  }
  return sign ? -v : v;
}

bool mul_ok(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace

std::optional<TensorDesc> describe_tensor(const DLTensor* t, std::string* why) {
  auto reject = [&](std::string m) -> std::optional<TensorDesc> {
    if (why) *why = std::move(m);
    return std::nullopt;
  };
  if (t == nullptr) return reject("NULL");
  if (t->ndim < 0 || t->ndim > kMaxWalkDims) {
    return reject(fmt::format("ndim {} outside 0..{}", t->ndim, kMaxWalkDims));
  }
  if (t->ndim > 0 && t->shape == nullptr) return reject("NULL shape");
  if (t->dtype.bits == 0 || t->dtype.bits % 8 != 0 || t->dtype.lanes == 0) {
    return reject(fmt::format("{} has no whole-byte element size", dtype_label(t->dtype)));
  }
  TensorDesc d;
  d.dtype = t->dtype;
  d.device = t->device;
  d.data = t->data;
  d.byte_offset = t->byte_offset;
  d.elem_bytes = static_cast<size_t>(t->dtype.bits / 8) * t->dtype.lanes;
  d.shape.assign(t->shape, t->shape + t->ndim);
  int64_t numel = 1;
  for (int64_t s : d.shape) {
    if (s < 0) return reject(fmt::format("negative dim {}", s));
    if (!mul_ok(numel, s, &numel) || numel > kMaxBytes) return reject("size overflows");
  }
  int64_t bytes = 0;
  if (!mul_ok(numel, static_cast<int64_t>(d.elem_bytes), &bytes) || bytes > kMaxBytes) {
    return reject("size overflows");
  }
  d.numel = static_cast<uint64_t>(numel);
  d.strides_given = t->strides != nullptr && t->ndim > 0;
  d.strides.resize(d.shape.size());
  if (d.strides_given) {
    d.strides.assign(t->strides, t->strides + t->ndim);
  } else {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      d.strides[i] = s;
      s *= std::max<int64_t>(d.shape[i], 1);  // bounded by numel, no overflow
    }
  }
  // Every offset the walk can form must fit, in elements and in bytes.
  int64_t lo = 0, hi = 0;
  if (numel > 0) {
    for (size_t i = 0; i < d.shape.size(); ++i) {
      int64_t span = 0;
      if (!mul_ok(d.strides[i], d.shape[i] - 1, &span) || span > kMaxBytes || span < -kMaxBytes) {
        return reject("strides overflow");
      }
      (span < 0 ? lo : hi) += span;
      if (lo < -kMaxBytes || hi > kMaxBytes) return reject("strides overflow");
    }
    int64_t b = 0;
    if (!mul_ok(hi - lo + 1, static_cast<int64_t>(d.elem_bytes), &b) || b > kMaxBytes) {
      return reject("strides overflow");
    }
  }
  return d;
}

namespace {

// The element types the dumps name and write: one row a type, so a label and a safetensors
// dtype cannot go out of step.
struct DtypeRow {
  uint8_t code;
  uint8_t bits;
  const char* label;
  st::Dtype st;
};

constexpr DtypeRow kDtypes[] = {
    {kDLFloat, 16, "fp16", st::Dtype::kF16},
    {kDLFloat, 32, "fp32", st::Dtype::kF32},
    {kDLFloat, 64, "fp64", st::Dtype::kF64},
    {kDLBfloat, 16, "bf16", st::Dtype::kBF16},
    {kDLInt, 8, "int8", st::Dtype::kI8},
    {kDLInt, 16, "int16", st::Dtype::kI16},
    {kDLInt, 32, "int32", st::Dtype::kI32},
    {kDLInt, 64, "int64", st::Dtype::kI64},
    {kDLUInt, 8, "uint8", st::Dtype::kU8},
    {kDLUInt, 16, "uint16", st::Dtype::kU16},
    {kDLUInt, 32, "uint32", st::Dtype::kU32},
    {kDLUInt, 64, "uint64", st::Dtype::kU64},
    {kDLBoolCode, 8, "bool", st::Dtype::kBool},
    {kDLFloat8E4M3FnCode, 8, "fp8_e4m3", st::Dtype::kF8E4M3},
    {kDLFloat8E5M2Code, 8, "fp8_e5m2", st::Dtype::kF8E5M2},
};

const DtypeRow* find_dtype(DLDataType t) {
  if (t.lanes != 1) return nullptr;
  for (const DtypeRow& r : kDtypes) {
    if (r.code == t.code && r.bits == t.bits) return &r;
  }
  return nullptr;
}

}  // namespace

std::string dtype_label(DLDataType t) {
  if (const DtypeRow* r = find_dtype(t)) return r->label;
  return fmt::format("dtype(code={},bits={},lanes={})", t.code, t.bits, t.lanes);
}

std::optional<st::Dtype> safetensors_dtype(DLDataType t) {
  if (const DtypeRow* r = find_dtype(t)) return r->st;
  return std::nullopt;
}

DLDataType dl_dtype(st::Dtype d) {
  using D = st::Dtype;
  switch (d) {
    case D::kBool: return {kDLBoolCode, 8, 1};
    case D::kU8: return {kDLUInt, 8, 1};
    case D::kI8: return {kDLInt, 8, 1};
    case D::kF8E4M3: return {kDLFloat8E4M3FnCode, 8, 1};
    case D::kF8E5M2: return {kDLFloat8E5M2Code, 8, 1};
    case D::kU16: return {kDLUInt, 16, 1};
    case D::kI16: return {kDLInt, 16, 1};
    case D::kF16: return {kDLFloat, 16, 1};
    case D::kBF16: return {kDLBfloat, 16, 1};
    case D::kU32: return {kDLUInt, 32, 1};
    case D::kI32: return {kDLInt, 32, 1};
    case D::kF32: return {kDLFloat, 32, 1};
    case D::kU64: return {kDLUInt, 64, 1};
    case D::kI64: return {kDLInt, 64, 1};
    case D::kF64: return {kDLFloat, 64, 1};
  }
  return {kDLUInt, 8, 1};
}

std::string device_label(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return fmt::format("cpu:{}", d.device_id);
    case kDLCUDA: return fmt::format("cuda:{}", d.device_id);
    case kDLCUDAHost: return fmt::format("cuda_host:{}", d.device_id);
    case kDLCUDAManaged: return fmt::format("cuda_managed:{}", d.device_id);
    default: return fmt::format("device(type={}):{}", static_cast<int>(d.device_type), d.device_id);
  }
}

int address_alignment(uintptr_t address) {
  int a = 1;
  while (a < 256 && address % (2 * static_cast<uintptr_t>(a)) == 0) a *= 2;
  return a;
}

void offset_range(const TensorDesc& t, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = 0;
  if (t.numel == 0) return;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const int64_t span = t.strides[i] * (t.shape[i] - 1);
    (span < 0 ? *lo : *hi) += span;
  }
}

void for_each_run(const TensorDesc& t, uint64_t n,
                  const std::function<void(int64_t offset, uint64_t count)>& fn) {
  n = std::min(n, t.numel);
  if (n == 0) return;
  const int nd = static_cast<int>(t.shape.size());
  bool compact = true;
  for (int64_t i = nd - 1, s = 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != s) compact = false;
    s *= t.shape[i];
  }
  if (compact) {
    fn(0, n);
    return;
  }
  const bool inner_run = t.strides[nd - 1] == 1;
  const int k = inner_run ? nd - 1 : nd;  // dims stepped one at a time
  const uint64_t run = inner_run ? static_cast<uint64_t>(t.shape[nd - 1]) : 1;
  std::vector<int64_t> idx(static_cast<size_t>(k), 0);
  int64_t off = 0;
  for (uint64_t done = 0; done < n;) {
    const uint64_t c = std::min(run, n - done);
    fn(off, c);
    done += c;
    for (int d = k - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) {
        off += t.strides[d];
        break;
      }
      off -= t.strides[d] * (t.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

bool read_tensor(const TensorDesc& t, uint64_t max_elems, std::string& out, std::string* why) {
  const uint64_t n = std::min(t.numel, max_elems);
  const size_t es = t.elem_bytes;
  out.assign(static_cast<size_t>(n * es), '\0');
  if (n == 0) return true;
  if (t.data == nullptr) {
    if (why) *why = "NULL data pointer";
    return false;
  }
  const uintptr_t base = t.address();
  size_t pos = 0;
  if (t.host_readable()) {
    for_each_run(t, n, [&](int64_t off, uint64_t c) {
      std::memcpy(out.data() + pos,
                  reinterpret_cast<const char*>(base + static_cast<uintptr_t>(off * es)), c * es);
      pos += c * es;
    });
    return true;
  }
  if (!t.on_cuda()) {
    if (why) *why = fmt::format("cannot read memory on {}", device_label(t.device));
    return false;
  }
  try {
    const cuda::Driver& drv = cuda::driver();
    cuda::ScopedDevice scope(t.device.device_id);
    int64_t lo = 0, hi = 0;
    offset_range(t, &lo, &hi);
    // A window of device memory copied at once, so a strided view costs a few large copies
    // rather than one per row.
    std::string window;
    int64_t win_lo = 0, win_hi = 0;  // element offsets, [win_lo, win_hi)
    const int64_t win_elems = std::max<int64_t>(1, static_cast<int64_t>(kWindowBytes / es));
    for_each_run(t, n, [&](int64_t off, uint64_t c) {
      const int64_t end = off + static_cast<int64_t>(c);
      if (off < win_lo || end > win_hi) {
        if (static_cast<int64_t>(c) >= win_elems) {
          KJIT_CU_CHECK(drv.cuMemcpyDtoH(out.data() + pos,
                                         static_cast<CUdeviceptr>(base + off * es), c * es));
          pos += c * es;
          return;
        }
        win_lo = off;
        win_hi = std::min(hi + 1, off + win_elems);
        window.resize(static_cast<size_t>(win_hi - win_lo) * es);
        KJIT_CU_CHECK(drv.cuMemcpyDtoH(window.data(), static_cast<CUdeviceptr>(base + off * es),
                                       window.size()));
      }
      std::memcpy(out.data() + pos, window.data() + (off - win_lo) * es, c * es);
      pos += c * es;
    });
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
  return true;
}

bool is_float(st::Dtype d) {
  using D = st::Dtype;
  return d == D::kF8E4M3 || d == D::kF8E5M2 || d == D::kF16 || d == D::kBF16 || d == D::kF32 ||
         d == D::kF64;
}

double element_value(st::Dtype d, const void* p) {
  using D = st::Dtype;
  switch (d) {
    case D::kBool: return load<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case D::kU8: return load<uint8_t>(p);
    case D::kI8: return load<int8_t>(p);
    case D::kF8E4M3: return e4m3fn_value(load<uint8_t>(p));
    case D::kF8E5M2: return half_value(static_cast<uint16_t>(load<uint8_t>(p) << 8));
    case D::kU16: return load<uint16_t>(p);
    case D::kI16: return load<int16_t>(p);
    case D::kF16: return half_value(load<uint16_t>(p));
    case D::kBF16: {
      const uint32_t bits = static_cast<uint32_t>(load<uint16_t>(p)) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    case D::kU32: return load<uint32_t>(p);
    case D::kI32: return load<int32_t>(p);
    case D::kF32: return load<float>(p);
    case D::kU64: return static_cast<double>(load<uint64_t>(p));
    case D::kI64: return static_cast<double>(load<int64_t>(p));
    case D::kF64: return load<double>(p);
  }
  return 0.0;
}

TensorStats compute_stats(st::Dtype d, std::string_view packed) {
  TensorStats s;
  const size_t es = st::dtype_size(d);
  s.n = packed.size() / es;
  double sum = 0.0;
  for (uint64_t i = 0; i < s.n; ++i) {
    const double v = element_value(d, packed.data() + i * es);
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++s.inf;
    } else {
      if (s.finite == 0 || v < s.min) s.min = v;
      if (s.finite == 0 || v > s.max) s.max = v;
      sum += v;
      ++s.finite;
    }
  }
  s.mean = s.finite ? sum / static_cast<double>(s.finite) : 0.0;
  return s;
}

DumpBudget::Result DumpBudget::reserve(uint64_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return Result::kStopped;
  if (count_ >= max_count_) {
    stopped_ = true;
    if (why)
      *why = fmt::format("KJIT_DUMP_MAX_COUNT={} reached ({} calls dumped)", max_count_, count_);
    return Result::kStoppedNow;
  }
  if (bytes > max_bytes_ - bytes_) {
    stopped_ = true;
    if (why) {
      *why =
          fmt::format("KJIT_DUMP_MAX_BYTES={} reached ({} tensor bytes dumped, this call needs {})",
                      max_bytes_, bytes_, bytes);
    }
    return Result::kStoppedNow;
  }
  ++count_;
  bytes_ += bytes;
  return Result::kGranted;
}

void DumpBudget::refund(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ -= std::min(bytes, bytes_);
}

int64_t DumpBudget::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

uint64_t DumpBudget::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

std::string dump_folder_name(std::string_view api, uint64_t call, long pid,
                             std::chrono::system_clock::time_point when) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(when.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  std::string name(api);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  return fmt::format("{:04}{:02}{:02}-{:02}{:02}{:02}.{:03}_pid{}_{}_call{:04}", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000, pid,
                     name, call);
}

}  // namespace kjit::api
