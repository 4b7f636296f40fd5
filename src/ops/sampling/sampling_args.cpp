#include "ops/sampling/sampling_args.hpp"

#include <fmt/format.h>

#include "util/error.hpp"

namespace kjit::ops::sampling_args {

Batch as_batch(const DLTensor* t, const char* name) {
  Batch b;
  b.name = name;
  b.m = as_row_matrix(t, name);
  if (t->ndim != 2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 2-D [batch, vocab], got ndim {}", name, t->ndim);
  }
  b.batch = t->shape[0];
  b.vocab = t->shape[1];
  if (b.batch > 0x7fffffff) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} has {} rows; at most 2^31 - 1 are supported", name, b.batch);
  }
  if (b.m.numel() > 0 && row_alignment(b.m) < static_cast<int>(dtype_size(b.m.dtype))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is misaligned for {} elements", name,
         dtype_name(b.m.dtype));
  }
  return b;
}

bool is_type(DLDataType t, uint8_t code, uint8_t bits) {
  return t.code == code && t.bits == bits && t.lanes == 1;
}

std::string type_text(DLDataType t) {
  const char* code = t.code == kDLInt      ? "int"
                     : t.code == kDLUInt   ? "uint"
                     : t.code == kDLFloat  ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kBoolCode ? "bool"
                                           : "code";
  return fmt::format("{}{}{}", code, t.bits, t.lanes == 1 ? "" : fmt::format("x{}", t.lanes));
}

Vector as_vector(const DLTensor* t, const char* name) {
  if (t == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
  if (t->ndim != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 1-D, got ndim {}", name, t->ndim);
  }
  if (t->shape == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has a NULL shape", name);
  if (t->shape[0] < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has negative length {}", name, t->shape[0]);
  }
  if (t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on device type {} (expected kDLCUDA)", name,
         static_cast<int>(t->device.device_type));
  }
  if (t->device.device_id < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has device id {}", name, t->device.device_id);
  }
  Vector v;
  v.name = name;
  v.n = t->shape[0];
  v.dtype = t->dtype;
  v.elem = (t->dtype.bits + 7) / 8;
  v.device = t->device.device_id;
  if (v.n > 0 && t->data == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} data is NULL", name);
  if (t->strides != nullptr && v.n > 1 && t->strides[0] != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has stride {} (must be contiguous)", name, t->strides[0]);
  }
  v.data = reinterpret_cast<char*>(data_address(t, name));
  if (v.elem > 0 && v.n > 0 && reinterpret_cast<uintptr_t>(v.data) % v.elem != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is misaligned for {}-byte elements", name, v.elem);
  }
  return v;
}

void check_length(const Vector& v, int64_t batch, bool one_ok) {
  if (v.n != batch && !(one_ok && v.n == 1)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has {} elements, expected {}{}", v.name, v.n,
         one_ok ? "1 or " : "", batch);
  }
}

void check_device(const Vector& v, const Batch& b) {
  if (v.device != b.m.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", v.name, v.device,
         b.name, b.m.device);
  }
}

Vector index_vector(const DLTensor* t, const char* name, const Batch& b) {
  Vector v = as_vector(t, name);
  if (!is_type(v.dtype, kDLInt, 32) && !is_type(v.dtype, kDLInt, 64)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32 or int64, got {}", name,
         type_text(v.dtype));
  }
  check_length(v, b.batch, false);
  check_device(v, b);
  return v;
}

Vector float_row_param(const DLTensor* t, const char* name, const Batch& b) {
  Vector v = as_vector(t, name);
  if (!is_type(v.dtype, kDLFloat, 32)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be fp32, got {}", name, type_text(v.dtype));
  }
  check_length(v, b.batch, false);
  check_device(v, b);
  return v;
}

Vector rng_vector(const DLTensor* t, const char* name, const Batch& b) {
  Vector v = as_vector(t, name);
  if (!is_type(v.dtype, kDLInt, 64) && !is_type(v.dtype, kDLUInt, 64)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int64 or uint64, got {}", name,
         type_text(v.dtype));
  }
  check_length(v, b.batch, true);
  if (v.n == 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is empty", name);
  check_device(v, b);
  return v;
}

Vector valid_vector(const DLTensor* t, const Batch& b) {
  Vector v = as_vector(t, "valid");
  if (!is_type(v.dtype, kDLUInt, 8) && !is_type(v.dtype, kBoolCode, 8)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "valid must be uint8 or bool, got {}", type_text(v.dtype));
  }
  check_length(v, b.batch, false);
  check_device(v, b);
  return v;
}

Span span_of(const Vector& v) {
  const auto lo = reinterpret_cast<uintptr_t>(v.data);
  return {v.name, lo, lo + static_cast<uintptr_t>(v.n) * v.elem};
}

Span span_of(const RowMatrix& m, const char* name) {
  const auto lo = reinterpret_cast<uintptr_t>(m.data);
  if (m.numel() == 0) return {name, lo, lo};
  return {name, lo, lo + ((m.rows - 1) * m.row_stride + m.cols) * dtype_size(m.dtype)};
}

void check_no_overlap(const std::vector<Span>& written, const std::vector<Span>& all) {
  for (const Span& w : written) {
    for (const Span& o : all) {
      if (o.name == w.name || w.lo == w.hi || o.lo == o.hi) continue;
      // Last bytes (hi - 1): a span may end at the top of the address space, where hi wraps to
      // 0 and hi - 1 wraps back.
      if (w.lo <= o.hi - 1 && o.lo <= w.hi - 1) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", w.name, o.name);
      }
    }
  }
}

bool vec_ok(const Batch& b, const RowMatrix* out) {
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(b.m.dtype));
  if (b.vocab % vec != 0 || row_alignment(b.m) < 16) return false;
  return out == nullptr || row_alignment(*out) >= 16;
}

}  // namespace kjit::ops::sampling_args
