#include "ops/tensor.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace kjit::ops {

std::optional<DType> dtype_of(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  return std::nullopt;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

const char* device_type_name(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    default: return nullptr;
  }
}

bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

uintptr_t data_address(const DLTensor* t, const char* name) {
  const auto base = reinterpret_cast<uintptr_t>(t->data);
  if (t->byte_offset > UINTPTR_MAX - base) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} byte_offset {} wraps the address space", name,
         t->byte_offset);
  }
  return base + static_cast<uintptr_t>(t->byte_offset);
}

RowMatrix as_row_matrix(const DLTensor* t, const char* name) {
  if (t == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
  if (t->ndim < 1 || t->ndim > kMaxDims) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has ndim {} (expected 1..{})", name, t->ndim, kMaxDims);
  }
  if (t->shape == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has a NULL shape", name);
  if (t->dtype.lanes != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has {} lanes (only 1 is supported)", name,
         t->dtype.lanes);
  }
  auto dt = dtype_of(t->dtype);
  if (!dt) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has unsupported dtype (code {}, bits {})", name,
         t->dtype.code, t->dtype.bits);
  }
  if (t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on device type {} (expected kDLCUDA)", name,
         static_cast<int>(t->device.device_type));
  }
  if (t->device.device_id < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has device id {}", name, t->device.device_id);
  }
  const int n = t->ndim;
  int64_t numel = 1;
  for (int i = 0; i < n; ++i) {
    int64_t s = t->shape[i];
    if (s < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has negative dim {} = {}", name, i, s);
    if (s > 0 && numel > INT64_MAX / s) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has an element count that overflows int64", name);
    }
    numel *= s;
  }
  RowMatrix m;
  m.dtype = *dt;
  m.device = t->device.device_id;
  m.cols = t->shape[n - 1];
  m.rows = m.cols == 0 ? 0 : numel / m.cols;
  if (numel > 0 && t->data == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} data is NULL", name);
  if (numel > INT64_MAX / static_cast<int64_t>(dtype_size(m.dtype))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is too large to address", name);
  }
  m.data = reinterpret_cast<void*>(data_address(t, name));
  // Every kernel reads at least whole elements: a pointer below that alignment would fault on
  // the device (a sticky error that ends the CUDA context), so it is an argument error here.
  if (numel > 0 && reinterpret_cast<uintptr_t>(m.data) % dtype_size(m.dtype) != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} data is not aligned to its {}-byte elements", name,
         dtype_size(m.dtype));
  }
  // Compact row-major unless strides say otherwise; size-1 dims may carry any stride.
  m.row_stride = m.cols;
  if (t->strides != nullptr && numel > 0) {
    if (t->shape[n - 1] > 1 && t->strides[n - 1] != 1) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} last dim has stride {} (must be contiguous)", name,
           t->strides[n - 1]);
    }
    int64_t expect = -1;  // stride the next-outer non-trivial dim must have
    bool have_row = false;
    for (int i = n - 2; i >= 0; --i) {
      if (t->shape[i] == 1) continue;
      int64_t s = t->strides[i];
      if (!have_row) {
        if (s < m.cols) {
          fail(KJIT_ERROR_INVALID_ARGUMENT, "{} dim {} stride {} is less than the row length {}",
               name, i, s, m.cols);
        }
        m.row_stride = s;
        have_row = true;
      } else if (s != expect) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "{} dim {} stride {} does not collapse into rows (expected {})", name, i, s, expect);
      }
      if (s > 0 && t->shape[i] > INT64_MAX / s) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} strides overflow int64", name);
      }
      expect = s * t->shape[i];
    }
  }
  return m;
}

int row_alignment(const RowMatrix& m) {
  auto addr = reinterpret_cast<uintptr_t>(m.data);
  uint64_t stride_bytes = static_cast<uint64_t>(m.row_stride) * dtype_size(m.dtype);
  int a = 16;
  while (a > 1 && ((addr % a) != 0 || (m.rows > 1 && stride_bytes % a != 0))) a /= 2;
  return a;
}

void check_same_dtype(const RowMatrix& a, const char* an, const RowMatrix& b, const char* bn) {
  if (a.dtype != b.dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but {} is {}", bn, dtype_name(b.dtype), an,
         dtype_name(a.dtype));
  }
}

void check_same_device(const RowMatrix& a, const char* an, const RowMatrix& b, const char* bn) {
  if (a.device != b.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", bn, b.device, an,
         a.device);
  }
}

bool partially_overlaps(const RowMatrix& a, const RowMatrix& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  if (a.data == b.data && a.row_stride == b.row_stride && a.rows == b.rows && a.cols == b.cols) {
    return false;  // the exact same view: in-place, allowed where documented
  }
  auto span = [](const RowMatrix& m) {
    auto lo = reinterpret_cast<uintptr_t>(m.data);
    auto hi = lo + ((m.rows - 1) * m.row_stride + m.cols) * dtype_size(m.dtype);
    return std::pair<uintptr_t, uintptr_t>(lo, hi);
  };
  auto [alo, ahi] = span(a);
  auto [blo, bhi] = span(b);
  return alo < bhi && blo < ahi;
}

}  // namespace kjit::ops
