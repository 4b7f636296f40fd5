// Warp-level tensor-core and async-copy primitives of sm_80+ as inline PTX: mma.sync m16n8k16
// (bf16 / fp16 in, fp32 accumulate), ldmatrix, a register transpose, cp.async, and fp8 e4m3
// unpacking. Shared by the attention kernels (kernels/attention/) and the sm_80 GEMM
// (kernels/gemm/gemm_mma_sm80.cuh).
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), with g = lane / 4 and c = lane % 4:
//   A 16x16 row-major: a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..), a3 = (g+8, 2c+8..)
//   B 16x8:            b0 = (k 2c..2c+1, n g), b1 = (k 2c+8..2c+9, n g)
//   C 16x8 fp32:       c0, c1 = (g, 2c..2c+1), c2, c3 = (g+8, 2c..2c+1)
// Each 32-bit register holds two 16-bit elements, the lower column index in the low half.
#pragma once

#include "common/prelude.cuh"

namespace kjit {

// 16-byte chunk `chunk` of row `row` in a tile of ROW_BYTES-byte rows, XOR-swizzled so the eight
// rows an ldmatrix reads at one logical chunk fall in eight different bank groups. Rows of 64
// bytes (the GEMM's 32-element K blocks) pair up in one 128-byte line: row & 1 picks the line's
// half and (row >> 1) & 3 permutes the row's four chunks, which again spreads eight consecutive
// rows (and the two rows eight threads' 16-byte copies fill) over the eight bank groups.
template <int ROW_BYTES>
KJIT_DEVICE KJIT_FORCEINLINE int swz(int row, int chunk) {
  static_assert(ROW_BYTES == 64 || ROW_BYTES % 128 == 0,
                "swizzled rows are 64 bytes or hold at least 8 chunks");
  if constexpr (ROW_BYTES == 64) return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
  return row * ROW_BYTES + ((chunk ^ (row & 7)) << 4);
}

// Four 8x8 b16 matrices; lanes 8j..8j+7 give the row addresses of matrix j (16 bytes each).
KJIT_DEVICE KJIT_FORCEINLINE void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// As ldmatrix_x4, each matrix transposed on the way (lane t gets column t / 4).
KJIT_DEVICE KJIT_FORCEINLINE void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Transposes an 8x8 matrix of 16-bit elements held in the ldmatrix fragment layout (lane l has
// row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1, lower column in the low half); the result is
// in the same layout. Element (r, c) lives in lane 4 r + c / 2, so lane (g, c) fetches (2c, g)
// and (2c + 1, g) with two shuffles and keeps the half g % 2 of each. (movmatrix does this in
// one instruction; the shuffles have semantics no one has to read a figure for, and the cost is
// a few instructions per 16 tokens.)
KJIT_DEVICE KJIT_FORCEINLINE u32 transpose_8x8_b16(u32 x, int lane) {
  const int g = lane >> 2, c = lane & 3;
  const u32 lo = __shfl_sync(0xffffffffu, x, 8 * c + (g >> 1));
  const u32 hi = __shfl_sync(0xffffffffu, x, 8 * c + 4 + (g >> 1));
  return __byte_perm(lo, hi, (g & 1) ? 0x7632u : 0x5410u);
}

template <typename T>
struct MmaOp;

template <>
struct MmaOp<__nv_bfloat16> {
  KJIT_DEVICE KJIT_FORCEINLINE static void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct MmaOp<__half> {
  KJIT_DEVICE KJIT_FORCEINLINE static void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// d += A * B for one m16n8k16 tile.
template <typename T>
KJIT_DEVICE KJIT_FORCEINLINE void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  MmaOp<T>::run(d, a, b0, b1);
}

// d += A * B for one m16n8k32 tile of e4m3 (mma.sync's fp8 form, sm_89+). Its fragments are
// mma_16816's byte for byte (each register holds four consecutive k of one row or column), so the
// same ldmatrix loads feed it.
KJIT_DEVICE KJIT_FORCEINLINE void mma_16832_e4m3(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the specs that call it are compiled for sm_89+ only
#endif
}

// Two floats as one register of two 16-bit elements (lo in the low half), rounded to nearest.
template <typename T>
KJIT_DEVICE KJIT_FORCEINLINE u32 pack2(float lo, float hi);

template <>
KJIT_DEVICE KJIT_FORCEINLINE u32 pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

template <>
KJIT_DEVICE KJIT_FORCEINLINE u32 pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

// ---- cp.async -----------------------------------------------------------------------------------

// BYTES from global to shared, bypassing registers. src_bytes = 0 reads nothing and fills the
// destination with zeros (the source address is then not dereferenced). 16-byte copies skip L1
// (.cg): the KV cache and the GEMM's operand tiles are streamed once per CTA.
template <int BYTES>
KJIT_DEVICE KJIT_FORCEINLINE void cp_async(u32 dst, const void* src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES),
                 "r"(src_bytes));
  }
}

KJIT_DEVICE KJIT_FORCEINLINE void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
KJIT_DEVICE KJIT_FORCEINLINE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- fp8 e4m3 -----------------------------------------------------------------------------------

// Bytes 0 and 1 (lo) and 2 and 3 (hi) of x, each an fp8 e4m3 (OCP "fn") value v, as fp16 pairs
// holding v * 2^-8 exactly: the e4m3 exponent and mantissa bits are moved into the fp16 fields
// unchanged, which divides by 2^(15 - 7) and keeps e4m3 subnormals exact (fp16 subnormals).
// Callers fold the 2^8 back into their scale factors. No hardware fp8 conversion is needed, so
// this also runs on sm_80.
KJIT_DEVICE KJIT_FORCEINLINE void e4m3x4_to_half2x2_scaled(u32 x, u32& lo, u32& hi) {
  const u32 t0 = __byte_perm(x, 0u, 0x1404u);  // b1 << 24 | b0 << 8
  const u32 t1 = __byte_perm(x, 0u, 0x3424u);  // b3 << 24 | b2 << 8
  lo = (t0 & 0x80008000u) | ((t0 >> 1) & 0x3F803F80u);
  hi = (t1 & 0x80008000u) | ((t1 >> 1) & 0x3F803F80u);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
// The same values by the hardware conversion (sm_89+): cvt.rn.f16x2.e4m3x2 (exact: every e4m3
// value is an fp16 one) and a multiply by 2^-8 (exact down to e4m3's smallest subnormal, 2^-17),
// two instructions per pair of values instead of the bit moves' three. Where a converting thread
// shares the SM's issue slots with tensor-core consumers (the Hopper prefill's producer) the
// fewer instructions are time: 1.10x at 8k prefill over an e4m3 cache on an H100.
KJIT_DEVICE KJIT_FORCEINLINE void e4m3x4_to_half2x2_scaled_cvt(u32 x, u32& lo, u32& hi) {
  const unsigned short x0 = static_cast<unsigned short>(x & 0xFFFFu);
  const unsigned short x1 = static_cast<unsigned short>(x >> 16);
  asm("{\n.reg .b32 t;\ncvt.rn.f16x2.e4m3x2 t, %1;\nmul.rn.f16x2 %0, t, %2;\n}\n"
      : "=r"(lo)
      : "h"(x0), "r"(0x1C001C00u));
  asm("{\n.reg .b32 t;\ncvt.rn.f16x2.e4m3x2 t, %1;\nmul.rn.f16x2 %0, t, %2;\n}\n"
      : "=r"(hi)
      : "h"(x1), "r"(0x1C001C00u));
}
#endif

}  // namespace kjit
