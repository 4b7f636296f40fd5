// Parameters and tile sizes of the GEMM kernels (kernels/gemm/gemm_sm90.cuh, gemm_mma_sm80.cuh,
// gemm_simt.cuh), shared by NVRTC and the host op (src/ops/gemm/): one definition, plain C types
// only. Strides are in elements. The struct's name and namespace are part of the kernels' mangled
// names.
//
//   out[m, n] = alpha * sum_k a[m, k] * b[n, k] + beta * out[m, n] + bias[n]
//
// a is [m, k] and b is [n, k] (PyTorch Linear's weight), both row-major (K-major).
#pragma once

#include "common/tma_desc.h"

namespace kjit {
namespace gemm {

// A CUtensorMap's 128 opaque bytes (common/tma_desc.h).
using TensorMapBytes = TmaDescriptor;

// Passed by value as the kernels' __grid_constant__ argument.
struct GemmParams {
  TensorMapBytes tma_a;    // sm90 paths: a as [m rows, k cols], box kGemmBlockK x kGemmBlockM
                           // (decode: x tokens)
  TensorMapBytes tma_b;    // sm90 paths: b as [n rows, k cols], box kGemmBlockK x bn
                           // (decode: x kGemmDecodeRows)
  TensorMapBytes tma_out;  // sm90 tiles with the TMA-store epilogue (TMA_OUT): out as [m rows,
                           // n cols], box kGemmOutSlab x 64, 128-byte swizzle; unset elsewhere
  const void* a;           // [m, k], row stride a_stride
  const void* b;           // [n, k], row stride b_stride
  const void* bias;        // [n], a's dtype, or null
  void* out;               // [m, n], row stride out_stride
  long long m, n, k;
  long long a_stride, b_stride, out_stride;
  float alpha, beta;  // out_old is read only when beta != 0
  // The decode kernel launched as a programmatic dependent (kjit_gemm_options::weights_early):
  // its producer loads the first stages' weight boxes before griddepcontrol.wait, everything
  // else after; 0 elsewhere.
  int weights_early;
};

// The sm90 kernel's block tile: kGemmBlockM rows of a (two consumer warpgroups of 64 rows), bn
// columns of b, kGemmBlockK of K per pipeline stage (one 128-byte swizzle row of 2-byte elements).
constexpr int kGemmBlockM = 128;
constexpr int kGemmBlockK = 64;
constexpr int kGemmSm90Threads = 384;  // one producer and two consumer warpgroups
constexpr int kGemmGroupM = 16;        // row tiles per band of the sm90 block order

// The TMA-store epilogue (gemm_sm90.cuh, write_tile_tma): each consumer warpgroup stages its 64
// rows kGemmOutSlab columns (128 bytes of a 16-bit out) at a time in one of two 8 KB buffers,
// and one thread stores each slab with TMA: 32 KB for the block.
constexpr int kGemmOutSlab = 64;
constexpr int kGemmOutSlabBytes = 64 * kGemmOutSlab * 2;
constexpr int kGemmOutStagingBytes = 2 * 2 * kGemmOutSlabBytes;

// Dynamic shared memory of the sm90 kernel: the stages' a and b tiles, up to 1023 bytes to align
// them to the 1024-byte period of the 128-byte swizzle, the TMA-store epilogue's staging (tma_out)
// and the full / empty barriers.
constexpr int gemm_sm90_smem_bytes(int bn, int stages, bool tma_out = false) {
  return stages * (kGemmBlockM + bn) * kGemmBlockK * 2 + 1024 +
         (tma_out ? kGemmOutStagingBytes : 0) + stages * 2 * 8;
}

// The decode kernel (gemm_decode_sm90.cuh, m <= kGemmDecodeMaxTokens): kGemmDecodeRows weight rows
// per block (two consumer warpgroups of 64), all tokens zero-filled to a wgmma width, K split
// over a cluster of up to kGemmDecodeMaxSplit blocks.
constexpr int kGemmDecodeRows = 128;
constexpr int kGemmDecodeThreads = 288;  // two consumer warpgroups and one producer warp
constexpr int kGemmDecodeMaxTokens = 128;
constexpr int kGemmDecodeMaxSplit = 8;

// The e4m3 decode kernels' block scales of a chunk's tokens, staged after the barriers: two
// chunks' (the one multiplied and the next) of up to kGemmDecodeMaxTokens floats.
constexpr int kGemmDecodeScaleBytes = 2 * kGemmDecodeMaxTokens * 4;

// Dynamic shared memory of the decode kernel: the stages' weight and token tiles, the alignment
// slack, the barriers (the split's partial sums reuse the stages) and the staged scales (within
// every ring depth's slack: no token tile loses a stage to them).
constexpr int gemm_decode_smem_bytes(int tokens, int stages) {
  return stages * (kGemmDecodeRows + tokens) * kGemmBlockK * 2 + 1024 + stages * 2 * 8 +
         kGemmDecodeScaleBytes;
}

// The sm_80 tensor-core kernel (gemm_mma_sm80.cuh, any sm_80+ device): kGemmMmaBlockM x bn
// output tiles (bn 64 or 128) over eight warps, K blocks of kGemmMmaBlockK (64-byte rows) in a
// ring of cp.async stages.
constexpr int kGemmMmaBlockM = 128;
constexpr int kGemmMmaBlockK = 32;
constexpr int kGemmMmaThreads = 256;

// Dynamic shared memory of the sm_80 kernel: the stages' a and b tiles (2-byte elements).
constexpr int gemm_mma_sm80_smem_bytes(int bn, int stages) {
  return stages * (kGemmMmaBlockM + bn) * kGemmMmaBlockK * 2;
}

// The fallback's block tile and threads (each thread computes 4 x 4 outputs).
constexpr int kGemmSimtTile = 64;
constexpr int kGemmSimtTileK = 16;
constexpr int kGemmSimtThreads = 256;

}  // namespace gemm
}  // namespace kjit
