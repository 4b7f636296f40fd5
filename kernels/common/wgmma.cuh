// Hopper warpgroup MMA (wgmma, sm_90a): the fence / commit / wait around it and
// wgmma.mma_async m64nNk16 with fp32 accumulators and bf16 or fp16 operands, both read from
// shared memory through descriptors (common/wgmma_desc.h), both K-major (and, for prefill's
// P V, forms with A from registers and B N-major: mma_rs). The instruction forms
// are generated per N and type by one macro, since inline PTX needs every accumulator register
// as an operand and a string literal for the type.
//
// Accumulator layout (PTX ISA, wgmma D fragment for .f32): thread t of the warpgroup, warp
// w = t / 32, lane l = t % 32, holds for register i (0 <= i < N / 2)
//   row = 16 w + l / 4 + 8 ((i / 2) % 2),   col = 8 (i / 4) + 2 (l % 4) + i % 2.
#pragma once

#include "common/prelude.cuh"
#include "common/wgmma_desc.h"

namespace kjit {
namespace wgmma {

// Orders the warpgroup's register and shared-memory accesses before the wgmma that follows.
KJIT_DEVICE KJIT_FORCEINLINE void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
// Closes the group of wgmma issued since the last commit.
KJIT_DEVICE KJIT_FORCEINLINE void commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups are still pending.
template <int N>
KJIT_DEVICE KJIT_FORCEINLINE void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMA.
template <int R>
KJIT_DEVICE KJIT_FORCEINLINE void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The operand lists of the m64nNk16 forms: the accumulator registers d[0 .. N/2) as PTX operands
// %0 .. %(N/2 - 1) and as "+f" constraints, then desc_a, desc_b and the accumulate flag.
#define KJIT_WGMMA_REGS_0_63                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KJIT_WGMMA_REGS_64_127                                                            \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, " \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, " \
  "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "    \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, "  \
  "%126, %127"
#define KJIT_WGMMA_D_0_63                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KJIT_WGMMA_D_0_127 KJIT_WGMMA_D_0_63, KJIT_WGMMA_D_64_127
#define KJIT_WGMMA_D_64_127                                                                      \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),     \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),         \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),        \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),        \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),        \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// One form: d (+)= a[64 x 16] * b[N x 16]^T for operand type TYPE ("bf16" / "f16"); accumulate 0
// overwrites d. REGS / D: the accumulators' operand list and constraints, A / B / P: the operand
// numbers of desc_a, desc_b and accumulate, which follow them.
#define KJIT_WGMMA_FORM(NAME, N, TYPE, REGS, D, A, B, P)                           \
  KJIT_DEVICE KJIT_FORCEINLINE void NAME(float(&d)[N / 2], u64 desc_a, u64 desc_b, \
                                         int accumulate) {                         \
    asm volatile(                                                                  \
        "{\n.reg .pred p;\n"                                                       \
        "setp.ne.b32 p, " P                                                        \
        ", 0;\n"                                                                   \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE            \
        " "                                                                        \
        "{" REGS "}, " A ", " B ", p, 1, 1, 0, 0;\n}\n"                            \
        : D                                                                        \
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));                              \
  }

KJIT_WGMMA_FORM(mma_m64n128k16_bf16, 128, "bf16", KJIT_WGMMA_REGS_0_63, KJIT_WGMMA_D_0_63, "%64",
                "%65", "%66")
KJIT_WGMMA_FORM(mma_m64n128k16_f16, 128, "f16", KJIT_WGMMA_REGS_0_63, KJIT_WGMMA_D_0_63, "%64",
                "%65", "%66")
KJIT_WGMMA_FORM(mma_m64n256k16_bf16, 256, "bf16", KJIT_WGMMA_REGS_0_63 ", " KJIT_WGMMA_REGS_64_127,
                KJIT_WGMMA_D_0_127, "%128", "%129", "%130")
KJIT_WGMMA_FORM(mma_m64n256k16_f16, 256, "f16", KJIT_WGMMA_REGS_0_63 ", " KJIT_WGMMA_REGS_64_127,
                KJIT_WGMMA_D_0_127, "%128", "%129", "%130")

// The narrow forms of the decode GEMM (kernels/gemm/gemm_decode_sm90.cuh), whose N side is the
// tokens: 8, 16 and 32 accumulators.
#define KJIT_WGMMA_REGS_0_7 "%0, %1, %2, %3, %4, %5, %6, %7"
#define KJIT_WGMMA_REGS_0_15 KJIT_WGMMA_REGS_0_7 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define KJIT_WGMMA_REGS_16_31 \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KJIT_WGMMA_REGS_0_31 KJIT_WGMMA_REGS_0_15 ", " KJIT_WGMMA_REGS_16_31
#define KJIT_WGMMA_D_0_7 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define KJIT_WGMMA_D_0_15                                                                       \
  KJIT_WGMMA_D_0_7, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
      "+f"(d[14]), "+f"(d[15])
#define KJIT_WGMMA_D_0_31                                                                          \
  KJIT_WGMMA_D_0_15, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),   \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
KJIT_WGMMA_FORM(mma_m64n16k16_bf16, 16, "bf16", KJIT_WGMMA_REGS_0_7, KJIT_WGMMA_D_0_7, "%8", "%9",
                "%10")
KJIT_WGMMA_FORM(mma_m64n16k16_f16, 16, "f16", KJIT_WGMMA_REGS_0_7, KJIT_WGMMA_D_0_7, "%8", "%9",
                "%10")
KJIT_WGMMA_FORM(mma_m64n32k16_bf16, 32, "bf16", KJIT_WGMMA_REGS_0_15, KJIT_WGMMA_D_0_15, "%16",
                "%17", "%18")
KJIT_WGMMA_FORM(mma_m64n32k16_f16, 32, "f16", KJIT_WGMMA_REGS_0_15, KJIT_WGMMA_D_0_15, "%16", "%17",
                "%18")
KJIT_WGMMA_FORM(mma_m64n64k16_bf16, 64, "bf16", KJIT_WGMMA_REGS_0_31, KJIT_WGMMA_D_0_31, "%32",
                "%33", "%34")
KJIT_WGMMA_FORM(mma_m64n64k16_f16, 64, "f16", KJIT_WGMMA_REGS_0_31, KJIT_WGMMA_D_0_31, "%32", "%33",
                "%34")
// The register-A forms of prefill's O += P V (kernels/attention/prefill_sm90.cuh): d (+)= a[64 x
// 16] * b[16 x N] with a in registers (four .b32 of two elements each, laid out as the m64nNk16
// accumulator's columns 0-15: a[0] row r cols 2c, 2c + 1; a[1] row r + 8; a[2] and a[3] the same
// at cols + 8) and b N-major (transposed: V's rows are keys, its head dims contiguous; the
// descriptor is wgmma_desc.h's mnmajor_sw128_desc).
#define KJIT_WGMMA_FORM_RS(NAME, N, TYPE, REGS, D, A, B, P)                              \
  KJIT_DEVICE KJIT_FORCEINLINE void NAME(float(&d)[N / 2], const u32(&a)[4], u64 desc_b, \
                                         int accumulate) {                               \
    asm volatile(                                                                        \
        "{\n.reg .pred p;\n"                                                             \
        "setp.ne.b32 p, " P                                                              \
        ", 0;\n"                                                                         \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE                  \
        " "                                                                              \
        "{" REGS "}, " A ", " B ", p, 1, 1, 1;\n}\n"                                     \
        : D                                                                              \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));     \
  }
KJIT_WGMMA_FORM_RS(mma_rs_m64n64k16_bf16, 64, "bf16", KJIT_WGMMA_REGS_0_31, KJIT_WGMMA_D_0_31,
                   "{%32, %33, %34, %35}", "%36", "%37")
KJIT_WGMMA_FORM_RS(mma_rs_m64n64k16_f16, 64, "f16", KJIT_WGMMA_REGS_0_31, KJIT_WGMMA_D_0_31,
                   "{%32, %33, %34, %35}", "%36", "%37")
KJIT_WGMMA_FORM_RS(mma_rs_m64n128k16_bf16, 128, "bf16", KJIT_WGMMA_REGS_0_63, KJIT_WGMMA_D_0_63,
                   "{%64, %65, %66, %67}", "%68", "%69")
KJIT_WGMMA_FORM_RS(mma_rs_m64n128k16_f16, 128, "f16", KJIT_WGMMA_REGS_0_63, KJIT_WGMMA_D_0_63,
                   "{%64, %65, %66, %67}", "%68", "%69")
KJIT_WGMMA_FORM_RS(mma_rs_m64n256k16_bf16, 256, "bf16",
                   KJIT_WGMMA_REGS_0_63 ", " KJIT_WGMMA_REGS_64_127, KJIT_WGMMA_D_0_127,
                   "{%128, %129, %130, %131}", "%132", "%133")
KJIT_WGMMA_FORM_RS(mma_rs_m64n256k16_f16, 256, "f16",
                   KJIT_WGMMA_REGS_0_63 ", " KJIT_WGMMA_REGS_64_127, KJIT_WGMMA_D_0_127,
                   "{%128, %129, %130, %131}", "%132", "%133")
#undef KJIT_WGMMA_FORM_RS

// The e4m3 forms: d (+)= a[64 x 32] * b[N x 32]^T, fp8 operands both K-major (fp8 wgmma has no
// transpose operands), fp32 accumulators. A k32 step of e4m3 spans the same 32 bytes of a
// 128-byte swizzle row as a k16 step of bf16, so the descriptors are the same.
#define KJIT_WGMMA_FORM_E4M3(NAME, N, REGS, D, A, B, P)                            \
  KJIT_DEVICE KJIT_FORCEINLINE void NAME(float(&d)[N / 2], u64 desc_a, u64 desc_b, \
                                         int accumulate) {                         \
    asm volatile(                                                                  \
        "{\n.reg .pred p;\n"                                                       \
        "setp.ne.b32 p, " P                                                        \
        ", 0;\n"                                                                   \
        "wgmma.mma_async.sync.aligned.m64n" #N                                     \
        "k32.f32.e4m3.e4m3 "                                                       \
        "{" REGS "}, " A ", " B ", p, 1, 1;\n}\n"                                  \
        : D                                                                        \
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));                              \
  }

KJIT_WGMMA_FORM_E4M3(mma_m64n128k32_e4m3, 128, KJIT_WGMMA_REGS_0_63, KJIT_WGMMA_D_0_63, "%64",
                     "%65", "%66")
KJIT_WGMMA_FORM_E4M3(mma_m64n256k32_e4m3, 256, KJIT_WGMMA_REGS_0_63 ", " KJIT_WGMMA_REGS_64_127,
                     KJIT_WGMMA_D_0_127, "%128", "%129", "%130")
// The fp8 tile GEMM's 192-wide form (kernels/gemm/gemm_fp8_sm90.cuh: 96 accumulators, whose sum
// and chunk part fit a consumer where two 128-register sets of the 256-wide form do not).
#define KJIT_WGMMA_REGS_64_95                                                             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, " \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define KJIT_WGMMA_D_64_95                                                                       \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),     \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KJIT_WGMMA_D_0_95 KJIT_WGMMA_D_0_63, KJIT_WGMMA_D_64_95
KJIT_WGMMA_FORM_E4M3(mma_m64n192k32_e4m3, 192, KJIT_WGMMA_REGS_0_63 ", " KJIT_WGMMA_REGS_64_95,
                     KJIT_WGMMA_D_0_95, "%96", "%97", "%98")
#undef KJIT_WGMMA_REGS_64_95
#undef KJIT_WGMMA_D_64_95
#undef KJIT_WGMMA_D_0_95
// The decode GEMM's narrow e4m3 forms (kernels/gemm/gemm_fp8_decode_sm90.cuh).
KJIT_WGMMA_FORM_E4M3(mma_m64n16k32_e4m3, 16, KJIT_WGMMA_REGS_0_7, KJIT_WGMMA_D_0_7, "%8", "%9",
                     "%10")
KJIT_WGMMA_FORM_E4M3(mma_m64n32k32_e4m3, 32, KJIT_WGMMA_REGS_0_15, KJIT_WGMMA_D_0_15, "%16", "%17",
                     "%18")
KJIT_WGMMA_FORM_E4M3(mma_m64n64k32_e4m3, 64, KJIT_WGMMA_REGS_0_31, KJIT_WGMMA_D_0_31, "%32", "%33",
                     "%34")

#undef KJIT_WGMMA_FORM_E4M3
#undef KJIT_WGMMA_REGS_0_7
#undef KJIT_WGMMA_REGS_0_15
#undef KJIT_WGMMA_REGS_0_31
#undef KJIT_WGMMA_REGS_16_31
#undef KJIT_WGMMA_D_0_7
#undef KJIT_WGMMA_D_0_15
#undef KJIT_WGMMA_D_0_31
#undef KJIT_WGMMA_FORM
#undef KJIT_WGMMA_REGS_0_63
#undef KJIT_WGMMA_REGS_64_127
#undef KJIT_WGMMA_D_0_63
#undef KJIT_WGMMA_D_64_127
#undef KJIT_WGMMA_D_0_127

template <typename T>
struct IsBf16 {
  static constexpr bool kValue = false;
};
template <>
struct IsBf16<__nv_bfloat16> {
  static constexpr bool kValue = true;
};

// The form for operand type T (__nv_bfloat16 or __half) and width N.
template <typename T, int N>
KJIT_DEVICE KJIT_FORCEINLINE void mma(float (&d)[N / 2], u64 desc_a, u64 desc_b, int accumulate) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 256,
                "wgmma widths kjit instantiates: 16, 32, 64, 128, 256");
  if constexpr (N == 16) {
    if constexpr (IsBf16<T>::kValue) {
      mma_m64n16k16_bf16(d, desc_a, desc_b, accumulate);
    } else {
      mma_m64n16k16_f16(d, desc_a, desc_b, accumulate);
    }
  } else if constexpr (N == 32) {
    if constexpr (IsBf16<T>::kValue) {
      mma_m64n32k16_bf16(d, desc_a, desc_b, accumulate);
    } else {
      mma_m64n32k16_f16(d, desc_a, desc_b, accumulate);
    }
  } else if constexpr (N == 64) {
    if constexpr (IsBf16<T>::kValue) {
      mma_m64n64k16_bf16(d, desc_a, desc_b, accumulate);
    } else {
      mma_m64n64k16_f16(d, desc_a, desc_b, accumulate);
    }
  } else if constexpr (N == 128) {
    if constexpr (IsBf16<T>::kValue) {
      mma_m64n128k16_bf16(d, desc_a, desc_b, accumulate);
    } else {
      mma_m64n128k16_f16(d, desc_a, desc_b, accumulate);
    }
  } else {
    if constexpr (IsBf16<T>::kValue) {
      mma_m64n256k16_bf16(d, desc_a, desc_b, accumulate);
    } else {
      mma_m64n256k16_f16(d, desc_a, desc_b, accumulate);
    }
  }
}

// The e4m3 form of width N (16, 32, 64, 128, 192 or 256).
template <int N>
KJIT_DEVICE KJIT_FORCEINLINE void mma_e4m3(float (&d)[N / 2], u64 desc_a, u64 desc_b,
                                           int accumulate) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 192 || N == 256,
                "wgmma widths kjit instantiates: 16, 32, 64, 128, 192, 256");
  if constexpr (N == 16) {
    mma_m64n16k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (N == 32) {
    mma_m64n32k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (N == 64) {
    mma_m64n64k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (N == 128) {
    mma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate);
  } else if constexpr (N == 192) {
    mma_m64n192k32_e4m3(d, desc_a, desc_b, accumulate);
  } else {
    mma_m64n256k32_e4m3(d, desc_a, desc_b, accumulate);
  }
}

// The register-A, B N-major form for operand type T and width N (64, 128 or 256).
template <typename T, int N>
KJIT_DEVICE KJIT_FORCEINLINE void mma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b,
                                         int accumulate) {
  static_assert(N == 64 || N == 128 || N == 256,
                "register-A widths kjit instantiates: 64, 128, 256");
  if constexpr (N == 64) {
    if constexpr (IsBf16<T>::kValue) {
      mma_rs_m64n64k16_bf16(d, a, desc_b, accumulate);
    } else {
      mma_rs_m64n64k16_f16(d, a, desc_b, accumulate);
    }
  } else if constexpr (N == 128) {
    if constexpr (IsBf16<T>::kValue) {
      mma_rs_m64n128k16_bf16(d, a, desc_b, accumulate);
    } else {
      mma_rs_m64n128k16_f16(d, a, desc_b, accumulate);
    }
  } else {
    if constexpr (IsBf16<T>::kValue) {
      mma_rs_m64n256k16_bf16(d, a, desc_b, accumulate);
    } else {
      mma_rs_m64n256k16_f16(d, a, desc_b, accumulate);
    }
  }
}

}  // namespace wgmma
}  // namespace kjit
