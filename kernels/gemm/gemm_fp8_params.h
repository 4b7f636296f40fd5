// Parameters of the fp8 GEMM kernels (kernels/gemm/gemm_fp8_sm90.cuh, gemm_fp8_simt.cuh), shared
// by NVRTC and the host op (src/ops/gemm/gemm_fp8.cpp). Plain C types only.
//
//   out[i, j] = alpha * sum_c scale(i, j, c) * sum_{k in chunk c} a[i, k] * b[j, k] + beta * out
//
// with a [m, k] and b [n, k] e4m3 (K-major) and the chunks c the 128-wide slices of K.
// scale(i, j, c) = scale_a[i * sa_row + c * sa_chunk] * scale_b[(j / sb_rows) * sb_row +
// c * sb_chunk]: per tensor, per row and DeepSeek-V3's blocks are all this one formula with
// other strides (src/ops/gemm/gemm_fp8.cpp sets them), so the fallback needs no mode.
#pragma once

#include "gemm/gemm_params.h"

namespace kjit {
namespace gemm {

struct GemmFp8Params {
  // m, n, k (in e4m3 elements), a, b, out, the row strides (elements), alpha and beta; bias is
  // null. On the sm90 path tma_a / tma_b see a and b as 16-bit elements (e4m3 pairs), so a
  // stage's box is the bf16 kernel's: 64 x 16 bits = 128 e4m3 of K per 128-byte swizzle row.
  GemmParams g;
  const float* scale_a;
  const float* scale_b;
  long long sa_row, sa_chunk;  // scale_a strides per row of a and per K chunk (0: shared)
  long long sb_row, sb_chunk;  // scale_b strides per group of sb_rows rows of b and per K chunk
  long long sb_rows;           // rows of b that share a scale: 1, or 128 in block mode
};

// K elements per scale chunk, and per sm90 pipeline stage: one 128-byte swizzle row of e4m3.
constexpr int kFp8ChunkK = 128;
static_assert(kFp8ChunkK == 2 * kGemmBlockK, "a stage of e4m3 pairs is a bf16 stage's bytes");

// Blocks per SM of the e4m3 decode kernel (gemm_fp8_decode_sm90.cuh) at a token tile: a consumer
// thread holds two sets of tokens / 2 accumulators (the sum and one chunk's part), and at 128
// tokens those alone exceed the 112 registers two blocks of kGemmDecodeThreads leave a thread.
constexpr int gemm_fp8_decode_blocks_per_sm(int tokens) {
  return tokens == 128 ? 1 : 2;
}

}  // namespace gemm
}  // namespace kjit
