#include "ops/tensor.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace kjit::ops {

uintptr_t data_address(const DLTensor* t, const char* name) {
  const auto base = reinterpret_cast<uintptr_t>(t->data);
  if (t->byte_offset > UINTPTR_MAX - base) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} byte_offset {} wraps the address space", name,
         t->byte_offset);
  }
  return base + static_cast<uintptr_t>(t->byte_offset);
}

namespace {

// A tensor's bytes [addr, addr + bytes) must not run past the top of the address space: no real
// allocation does, and the overlap and alignment tests add extents to addresses.
void check_span(uintptr_t addr, unsigned __int128 bytes, const char* name) {
  if (bytes > 0 && bytes - 1 > static_cast<unsigned __int128>(UINTPTR_MAX - addr)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} runs past the end of the address space", name);
  }
}

}  // namespace

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
  if (numel > 0) {
    check_span(reinterpret_cast<uintptr_t>(m.data),
               (static_cast<unsigned __int128>(m.rows - 1) * static_cast<uint64_t>(m.row_stride) +
                static_cast<uint64_t>(m.cols)) *
                   dtype_size(m.dtype),
               name);
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
  // First and last byte: a view may end at the top of the address space (check_span), where
  // one past its end would wrap to 0.
  auto span = [](const RowMatrix& m) {
    auto lo = reinterpret_cast<uintptr_t>(m.data);
    auto last = lo + ((m.rows - 1) * m.row_stride + m.cols) * dtype_size(m.dtype) - 1;
    return std::pair<uintptr_t, uintptr_t>(lo, last);
  };
  auto [alo, alast] = span(a);
  auto [blo, blast] = span(b);
  return alo <= blast && blo <= alast;
}

// ---- Strided views ------------------------------------------------------------------------------

int64_t StridedView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

StridedView as_strided_view(const DLTensor* t, const char* name) {
  if (t == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
  // Everything but the strides is checked as for a compact tensor, with the same messages.
  DLTensor compact = *t;
  compact.strides = nullptr;
  RowMatrix m = as_row_matrix(&compact, name);
  StridedView v;
  v.data = static_cast<char*>(m.data);
  v.dtype = m.dtype;
  v.device = m.device;
  v.ndim = t->ndim;
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    v.shape[i] = t->shape[i];
    v.strides[i] = stride;
    // Only an empty tensor's product can pass INT64_MAX here (as_row_matrix bounds the others);
    // its compact strides are never used, but computing them must not overflow.
    const int64_t d = std::max<int64_t>(t->shape[i], 1);
    stride = stride > INT64_MAX / d ? INT64_MAX : stride * d;
  }
  if (v.numel() == 0) return v;
  const int64_t es = static_cast<int64_t>(v.elem_bytes());
  if (t->strides != nullptr) {
    int64_t extent = 0;  // largest element offset
    for (int i = 0; i < t->ndim; ++i) {
      v.strides[i] = t->strides[i];
      if (t->shape[i] == 1) continue;
      const int64_t s = t->strides[i];
      if (i == t->ndim - 1 && s != 1) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} last dim has stride {} (must be contiguous)", name,
             s);
      }
      if (s < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} dim {} has negative stride {}", name, i, s);
      if (s > 0 && t->shape[i] - 1 > (INT64_MAX / es - extent) / s) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} strides overflow int64", name);
      }
      extent += (t->shape[i] - 1) * s;
    }
    check_span(reinterpret_cast<uintptr_t>(v.data),
               (static_cast<unsigned __int128>(extent) + 1) * static_cast<uint64_t>(es), name);
  }
  if (reinterpret_cast<uintptr_t>(v.data) % static_cast<uintptr_t>(es) != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} data is not aligned to its {}-byte elements", name, es);
  }
  return v;
}

bool self_overlaps(const StridedView& v) {
  if (v.numel() <= 1) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with size > 1
  for (int i = 0; i < v.ndim; ++i) {
    if (v.shape[i] > 1) dims.emplace_back(v.strides[i], v.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  // Innermost first: each dim must step past everything the dims inside it reach.
  int64_t reach = 1;
  for (const auto& [stride, size] : dims) {
    if (stride < reach) return true;
    reach = stride * (size - 1) + reach;
  }
  return false;
}

bool same_view(const StridedView& a, const StridedView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i) {
    if (a.shape[i] != b.shape[i]) return false;
    if (a.shape[i] > 1 && a.strides[i] != b.strides[i]) return false;
  }
  return true;
}

void check_same_dtype_device(const StridedView& a, const char* an, const StridedView& b,
                             const char* bn) {
  if (a.dtype != b.dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but {} is {}", bn, dtype_name(b.dtype), an,
         dtype_name(a.dtype));
  }
  if (a.device != b.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", bn, b.device, an,
         a.device);
  }
}

namespace {

// Bytes from the first element to one past the last, over dims [from, ndim).
int64_t extent_bytes(const StridedView& v, int from) {
  int64_t e = 0;
  for (int i = from; i < v.ndim; ++i) e += (v.shape[i] - 1) * v.strides[i];
  return (e + 1) * static_cast<int64_t>(v.elem_bytes());
}

}  // namespace

bool views_overlap(const StridedView& a, const StridedView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto alo = reinterpret_cast<uintptr_t>(a.data);
  const auto blo = reinterpret_cast<uintptr_t>(b.data);
  // Last bytes, not ends: a view may end at the top of the address space, where one past its end
  // wraps to 0.
  const uintptr_t alast = alo + static_cast<uintptr_t>(extent_bytes(a, 0)) - 1;
  const uintptr_t blast = blo + static_cast<uintptr_t>(extent_bytes(b, 0)) - 1;
  if (alast < blo || blast < alo) return false;
  // The ranges interleave. Disjoint anyway when both are rows of one period S (dim 0) and each
  // row stays inside its own slice of the period: a's rows cover [0, Ea) and b's [d, d + Eb)
  // modulo S.
  const bool a_rows = a.shape[0] > 1, b_rows = b.shape[0] > 1;
  if (!a_rows && !b_rows) return true;
  // Only a dim of more than one element has a checked stride (as_strided_view): a size-1 dim's
  // may be anything, so it is never multiplied.
  const int64_t sa = a_rows ? a.strides[0] * static_cast<int64_t>(a.elem_bytes()) : 0;
  const int64_t sb = b_rows ? b.strides[0] * static_cast<int64_t>(b.elem_bytes()) : 0;
  if (a_rows && b_rows && sa != sb) return true;
  const int64_t period = a_rows ? sa : sb;
  const int64_t ea = a_rows ? extent_bytes(a, 1) : extent_bytes(a, 0);
  const int64_t eb = b_rows ? extent_bytes(b, 1) : extent_bytes(b, 0);
  if (period <= 0 || ea > period || eb > period) return true;
  const auto diff = static_cast<int64_t>(blo - alo);  // wraps to the signed difference
  const int64_t d = ((diff % period) + period) % period;
  return !(d >= ea && d + eb <= period);
}

int view_alignment(const StridedView& v) {
  const auto addr = reinterpret_cast<uintptr_t>(v.data);
  const auto es = static_cast<int64_t>(v.elem_bytes());
  int a = 16;
  auto ok = [&](int al) {
    if (addr % static_cast<uintptr_t>(al) != 0) return false;
    for (int i = 0; i + 1 < v.ndim; ++i) {
      // Unsigned: wraps mod 2^64, which keeps divisibility by a power of two, where the signed
      // product of an empty view's (unchecked) strides could overflow.
      const uint64_t bytes = static_cast<uint64_t>(v.strides[i]) * static_cast<uint64_t>(es);
      if (v.shape[i] > 1 && bytes % static_cast<uint64_t>(al) != 0) return false;
    }
    return true;
  };
  while (a > 1 && !ok(a)) a /= 2;
  return a;
}

}  // namespace kjit::ops
