// Base definitions for every kjit device source.
//
// These headers are compiled at run time by NVRTC, which has no C++ standard library and no host
// headers; everything a kernel needs from "outside" is spelled out here. The same files also
// compile under nvcc (-I kernels) for offline checks.
#pragma once

// Lets shared headers tell a device-only (NVRTC) translation unit from a host one.
#ifndef KJIT_DEVICE_ONLY
#define KJIT_DEVICE_ONLY 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define KJIT_DEVICE __device__
// For constexpr helpers that must also be usable in constant expressions inside kernels.
#define KJIT_HOST_DEVICE __host__ __device__
#define KJIT_FORCEINLINE __forceinline__

namespace kjit {

// No <cstdint> under NVRTC. CUDA targets are LP64 on Linux and LLP64 on Windows, so only
// `long long` is 64 bits on both.
using i8 = signed char;
using u8 = unsigned char;
using i16 = short;
using u16 = unsigned short;
using i32 = int;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;

static_assert(sizeof(i8) == 1 && sizeof(u8) == 1, "8-bit types");
static_assert(sizeof(i16) == 2 && sizeof(u16) == 2, "16-bit types");
static_assert(sizeof(i32) == 4 && sizeof(u32) == 4, "32-bit types");
static_assert(sizeof(i64) == 8 && sizeof(u64) == 8, "64-bit types");

// All arithmetic is done in fp32; storage types convert at the load/store boundary only.
KJIT_DEVICE KJIT_FORCEINLINE float to_float(float x) {
  return x;
}
KJIT_DEVICE KJIT_FORCEINLINE float to_float(__half x) {
  return __half2float(x);
}
KJIT_DEVICE KJIT_FORCEINLINE float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Left undefined so an unsupported storage type fails at compile time rather than silently
// picking a conversion.
template <typename T>
KJIT_DEVICE T from_float(float x);

template <>
KJIT_DEVICE KJIT_FORCEINLINE float from_float<float>(float x) {
  return x;
}

// Round-to-nearest-even, matching what PyTorch's .to(dtype) does on the reference side.
template <>
KJIT_DEVICE KJIT_FORCEINLINE __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

template <>
KJIT_DEVICE KJIT_FORCEINLINE __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// exp2 on the SFU, flushing results below 2^-126 to zero (exp2f without fast math adds a range
// check and two scalings around the same instruction). Written out as asm so that it is never
// contracted or reassociated: a value computed twice is bit-identical, which the samplers'
// threshold searches rely on.
KJIT_DEVICE KJIT_FORCEINLINE float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch (sm_90+; the host's KJIT_PDL, src/ops/pdl.hpp). Waits until the
// kernel before this one on the stream has finished and its writes are visible, then lets the
// kernel after this one start launching (its own wait still holds it until this grid is done).
// Without a programmatic launch both return at once. Call it before the first global memory
// access of a kernel the host may launch that way.
//
// The one exception: memory that no kernel on the stream writes while a forward pass runs (model
// parameters: norm weights, gamma, beta) may be read before the wait. The decode-size norm
// variants (kernels/norm/, EARLY_PARAMS) do so through pdl_wait / pdl_launch_dependents below,
// with plain loads (ptxas keeps plain and .cg loads where they are written; .nc loads it sinks
// past the wait), so their L2 round trip overlaps the predecessor's tail instead of following
// the row's reduction. docs/c-api.md states the contract this relies on.
KJIT_DEVICE KJIT_FORCEINLINE void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

KJIT_DEVICE KJIT_FORCEINLINE void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Keeps the computation of `v` ahead of pdl_wait(). ptxas orders global loads against
// griddepcontrol.wait but moves arithmetic, shuffles, constant and read-only-path loads across it
// as it schedules (it put RoPE's angle math and KV append's row addresses, written before the wait,
// after it); a volatile load predicated on `v` stays before the wait, and so must everything `v`
// comes from. The load is taken only when v == 1, which the callers' values never are (an OR of
// aligned addresses, or the bits of a sum of finite floats; see pdl_pin_float). When taken it
// reads `harmless` (which the caller may read before the wait) and drops the value.
KJIT_DEVICE KJIT_FORCEINLINE void pdl_pin_before_wait(unsigned long long v, const void* harmless) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tsetp.eq.u64 p, %0, 1;\n\t"
      "@p ld.volatile.global.b32 t, [%1];\n\t}" ::"l"(v),
      "l"(harmless)
      : "memory");
#else
  (void)v;
  (void)harmless;
#endif
}

// The same for a float: the load is taken only when f is NaN (then its bits are not 1 either way;
// the callers pass sums of finite values, or of user data that may be NaN, with `harmless` then a
// location they may read before the wait).
KJIT_DEVICE KJIT_FORCEINLINE void pdl_pin_float(float f, const void* harmless) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tsetp.nan.f32 p, %0, %0;\n\t"
      "@p ld.volatile.global.b32 t, [%1];\n\t}" ::"f"(f),
      "l"(harmless)
      : "memory");
#else
  (void)f;
  (void)harmless;
#endif
}

KJIT_DEVICE KJIT_FORCEINLINE void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

// std::is_same, which NVRTC has no header for.
template <typename A, typename B>
struct IsSame {
  static constexpr bool value = false;
};
template <typename A>
struct IsSame<A, A> {
  static constexpr bool value = true;
};

// A shared-memory object's address in the block's shared window (32 bits), for PTX that takes
// one. Converting a generic pointer costs a special-register read on sm_90 (the block's place
// in its cluster's window); in a hot loop, convert once outside it.
KJIT_DEVICE KJIT_FORCEINLINE u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

}  // namespace kjit
