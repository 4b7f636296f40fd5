// Small aligned vectors for wide, coalesced global memory access.
#pragma once

#include "common/prelude.cuh"

namespace kjit {

namespace detail {

// The widest built-in type of exactly BYTES bytes. Moving a Vec as one of these is what makes
// the compiler emit a single ld/st.v* instead of N element-sized accesses.
template <int BYTES>
struct RawBits;
template <>
struct RawBits<1> {
  using type = unsigned char;
};
template <>
struct RawBits<2> {
  using type = unsigned short;
};
template <>
struct RawBits<4> {
  using type = unsigned int;
};
template <>
struct RawBits<8> {
  using type = uint2;
};
template <>
struct RawBits<16> {
  using type = uint4;
};

}  // namespace detail

// N elements of T, moved to and from global memory as one access of sizeof(T) * N bytes.
// The pointer given to load/store must be aligned to sizeof(Vec); that is the caller's
// contract (the host checks base pointers and strides), not something checked here.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "Vec width must be a power of two");
  static_assert(sizeof(T) * N <= 16, "a Vec must fit one 16-byte access");

  static constexpr int kSize = N;
  using Raw = typename detail::RawBits<int(sizeof(T)) * N>::type;
  static_assert(sizeof(Raw) == sizeof(T) * N, "no raw type of this width");

  T v[N];

  KJIT_DEVICE KJIT_FORCEINLINE T& operator[](int i) { return v[i]; }
  KJIT_DEVICE KJIT_FORCEINLINE const T& operator[](int i) const { return v[i]; }

  // Ordinary load. Safe when the same memory is written during the kernel (e.g. an in-place
  // op whose output aliases this input), and the compiler is free to schedule it.
  KJIT_DEVICE KJIT_FORCEINLINE void load(const T* p) {
    *reinterpret_cast<Raw*>(v) = *reinterpret_cast<const Raw*>(p);
  }

  // Read-only-path load (ld.global.nc). Only for memory that nothing writes while the kernel
  // runs: the non-coherent cache is not kept in sync with stores from the same launch.
  KJIT_DEVICE KJIT_FORCEINLINE void load_ro(const T* p) {
    *reinterpret_cast<Raw*>(v) = __ldg(reinterpret_cast<const Raw*>(p));
  }

  // Last read of this memory in the kernel (ld.global.lu): the line may be evicted first, which
  // keeps L2 for data that will still be re-read. Ordered like an ordinary load, so also safe
  // on memory that is written in place.
  KJIT_DEVICE KJIT_FORCEINLINE void load_last_use(const T* p) {
    *reinterpret_cast<Raw*>(v) = __ldlu(reinterpret_cast<const Raw*>(p));
  }

  KJIT_DEVICE KJIT_FORCEINLINE void store(T* p) const {
    *reinterpret_cast<Raw*>(p) = *reinterpret_cast<const Raw*>(v);
  }

  // Streaming store (st.global.cs, evict-first in L2): for output that this kernel will not
  // read back, so it does not push out lines the kernel still needs.
  KJIT_DEVICE KJIT_FORCEINLINE void store_streaming(T* p) const {
    __stcs(reinterpret_cast<Raw*>(p), *reinterpret_cast<const Raw*>(v));
  }

  // Makes the compiler forget what it knows about the contents (emits no instruction). Use it on
  // a vector kept in registers across a long stretch of code: without it the compiler may keep
  // values derived from the packed elements (e.g. unpacked or converted copies) alive instead of
  // recomputing them, which can double the register footprint and spill.
  KJIT_DEVICE KJIT_FORCEINLINE void opaque() {
    if constexpr (sizeof(Raw) >= 4) {
      unsigned int* words = reinterpret_cast<unsigned int*>(v);
#pragma unroll
      for (int i = 0; i < int(sizeof(Raw) / 4); ++i) asm volatile("" : "+r"(words[i]));
    } else if constexpr (sizeof(Raw) == 2) {
      asm volatile("" : "+h"(*reinterpret_cast<unsigned short*>(v)));
    }
  }
};

}  // namespace kjit
