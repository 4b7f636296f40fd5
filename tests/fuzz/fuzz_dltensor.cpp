// DLTensor validation shared by every op: as_row_matrix and as_strided_view, then what ops do
// with an accepted view (alignment, overlap checks), on tensors whose every field comes from the
// input. The shape and strides arrays are exactly ndim long, so AddressSanitizer reports any read
// past them.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <dlpack/dlpack.h>

#include "fuzz_common.hpp"
#include "ops/rope/rope.hpp"
#include "ops/tensor.hpp"
#include "util/error.hpp"

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  template <class T>
  T take() {
    T v{};
    const size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  // Mostly small values, sometimes the extremes: shapes and strides near overflow.
  int64_t dim() {
    const uint8_t kind = take<uint8_t>();
    switch (kind % 8) {
      case 0: return take<int64_t>();
      case 1: return -static_cast<int64_t>(take<uint8_t>());
      case 2: return int64_t{1} << (take<uint8_t>() % 63);
      default: return take<uint8_t>() % 17;
    }
  }
};

struct Tensor {
  DLTensor t{};
  std::vector<int64_t> shape, strides;
};

void make(Input& in, Tensor& x) {
  const int8_t ndim = in.take<int8_t>();
  x.t.ndim = ndim % 11;  // -10..10: both sides of 1..8
  const size_t n = x.t.ndim > 0 ? static_cast<size_t>(x.t.ndim) : 0;
  x.shape.resize(n);
  for (auto& d : x.shape) d = in.dim();
  const uint8_t flags = in.take<uint8_t>();
  if (flags & 1) {
    x.strides.resize(n);
    for (auto& s : x.strides) s = in.dim();
  }
  x.t.shape = (flags & 2) ? nullptr : x.shape.data();
  x.t.strides = x.strides.empty() ? nullptr : x.strides.data();
  x.t.dtype.code = in.take<uint8_t>() % 8;
  x.t.dtype.bits = static_cast<uint8_t>(8 << (in.take<uint8_t>() % 5));
  x.t.dtype.lanes = (flags & 4) ? in.take<uint16_t>() : 1;
  x.t.device.device_type = (flags & 8) ? static_cast<DLDeviceType>(in.take<int32_t>()) : kDLCUDA;
  x.t.device.device_id = (flags & 16) ? in.take<int32_t>() : 0;
  x.t.data = reinterpret_cast<void*>(static_cast<uintptr_t>(in.take<uint64_t>()));
  x.t.byte_offset = (flags & 32) ? in.take<uint64_t>() : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  Tensor a, b;
  make(in, a);
  make(in, b);
  kjit::ops::RowMatrix ma{}, mb{};
  bool row_a = false, row_b = false;
  try {
    ma = kjit::ops::as_row_matrix(&a.t, "a");
    row_a = true;
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
  }
  try {
    mb = kjit::ops::as_row_matrix(&b.t, "b");
    row_b = true;
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
  }
  if (row_a) {
    FUZZ_ASSERT(ma.rows >= 0 && ma.cols >= 0 && ma.row_stride >= 0);
    if (ma.numel() > 0) {
      FUZZ_ASSERT(ma.data != nullptr);
      FUZZ_ASSERT(reinterpret_cast<uintptr_t>(ma.data) % kjit::ops::dtype_size(ma.dtype) == 0);
      FUZZ_ASSERT(ma.row_stride >= ma.cols || ma.rows == 1);
    }
    const int al = kjit::ops::row_alignment(ma);
    FUZZ_ASSERT(al >= 1 && al <= 16 && (al & (al - 1)) == 0);
    if (row_b) {
      // Overlap is symmetric.
      FUZZ_ASSERT(kjit::ops::partially_overlaps(ma, mb) == kjit::ops::partially_overlaps(mb, ma));
      try {
        kjit::ops::check_same_dtype(ma, "a", mb, "b");
        kjit::ops::check_same_device(ma, "a", mb, "b");
      } catch (const kjit::Error&) {
      }
    }
  }
  kjit::ops::StridedView va, vb;
  bool view_a = false, view_b = false;
  try {
    va = kjit::ops::as_strided_view(&a.t, "a");
    view_a = true;
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
  }
  try {
    vb = kjit::ops::as_strided_view(&b.t, "b");
    view_b = true;
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
  }
  if (view_a) {
    FUZZ_ASSERT(va.numel() >= 0);
    (void)kjit::ops::self_overlaps(va);
    const int al = kjit::ops::view_alignment(va);
    FUZZ_ASSERT(al >= 1 && al <= 16 && (al & (al - 1)) == 0);
    FUZZ_ASSERT(kjit::ops::same_view(va, va));
    if (view_b) {
      FUZZ_ASSERT(kjit::ops::views_overlap(va, vb) == kjit::ops::views_overlap(vb, va));
      if (kjit::ops::same_view(va, vb) && va.numel() > 0) {
        FUZZ_ASSERT(kjit::ops::views_overlap(va, vb));
      }
    }
  }
  return 0;
}
