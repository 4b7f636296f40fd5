// GEMM (out = alpha * a . b^T + beta * out + bias): path choice, spec rendering and launch
// (device code: kernels/gemm/). The registry entry is in gemm_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "cuda/launch.hpp"
#include "gemm/gemm_params.h"
#include "jit/spec.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// kSm90: TMA + wgmma, warp-specialized (kernels/gemm/gemm_sm90.cuh, sm_90a only).
// kSimt: fp32 FMA tiles, any sm_80+ device and any element-aligned operands (gemm_simt.cuh).
enum class GemmPath { kSm90 = 0, kSimt = 1 };

const char* gemm_path_name(GemmPath p);  // "sm90", "simt"

// One compiled GEMM variant; every field is in the URI. bn and stages are the sm90 kernel's tile
// width and pipeline depth (0 for kSimt).
struct GemmConfig {
  GemmPath path = GemmPath::kSimt;
  DType dtype = DType::kBF16;      // a, b and bias
  DType out_dtype = DType::kBF16;  // out
  int bn = 0;
  int stages = 0;
};

// What select_gemm needs to know about a call besides dtypes and sizes.
struct GemmTarget {
  int cc_major = 0, cc_minor = 0;  // the device's compute capability
  int max_smem_optin = 0;          // bytes of shared memory a block may opt in to
  bool tma_ok = false;  // a and b: 16-byte-aligned bases, row strides multiples of 16 bytes
};

// The target of a call on `device` (its compute capability and shared memory). Throws
// KJIT_ERROR_NO_DEVICE without a driver.
GemmTarget gemm_target(int device, bool tma_ok);

// Support and dispatch in one place: the sm90 path on a compute capability 9.0 device when TMA
// can describe a and b and the tiles fit its shared memory, else the fallback. Throws
// KJIT_ERROR_UNSUPPORTED for input dtypes other than bf16 / fp16, out dtypes other than bf16 /
// fp16 / fp32, and sizes past the grid's limits.
GemmConfig select_gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k,
                       const GemmTarget& target);

jit::Spec gemm_spec(const GemmConfig& cfg);

// Shared with the fp8 GEMM (gemm_fp8.cpp), whose stages hold the same bytes:
// True when the sm90 kernels can serve m x n x k on `target` with tiles bn wide and `stages`
// stages: a compute capability 9.0 device, operands TMA can describe (target.tma_ok), sides and
// tile counts TMA's int32 coordinates reach, the stages in its shared memory.
bool sm90_can_run(const GemmTarget& target, int64_t m, int64_t n, int64_t k, int bn, int stages);
// Throws KJIT_ERROR_UNSUPPORTED (naming `op`) when the fallback's grid cannot cover m x n.
void check_simt_grid(const char* op, int64_t m, int64_t n);
// True when `m` (rows x cols) meets TMA's rules (cuda/tensor_map.hpp) with sides TMA's int32
// coordinates reach.
bool tma_describable(const RowMatrix& m);
// True when the two views may share a byte (the same view included: out is never in place).
bool overlaps(const RowMatrix& x, const RowMatrix& y);
// The sm90 kernels' tensor map of `m`: boxes of kGemmBlockK columns x box_rows rows, 128-byte
// swizzle. Throws KJIT_ERROR_NO_DEVICE without a driver.
gemm::TensorMapBytes tensor_map(const RowMatrix& m, uint32_t box_rows);

// a [..., k], b [n, k] and out [..., n] of kjit_gemm and kjit_gemm_fp8, validated: a and b of
// one dtype, all three on one device, the shapes consistent, out overlapping neither a nor b.
// Throws KJIT_ERROR_INVALID_ARGUMENT naming the argument.
struct GemmOperands {
  RowMatrix a, b, out;
  int64_t m = 0, n = 0, k = 0;  // m: a's leading dims collapsed
};
GemmOperands gemm_operands(const DLTensor* a, const DLTensor* b, DLTensor* out);
// The kernels' parameters of validated operands (no bias, no tensor maps yet).
gemm::GemmParams gemm_params(const GemmOperands& g, float alpha, float beta);
// The launch of the sm90 kernels (bn, stages) or the fallback for an m x n out on `stream`.
cuda::LaunchConfig gemm_launch_config(GemmPath path, int bn, int stages, int64_t m, int64_t n,
                                      void* stream);

// out[..., n] = alpha * a[..., k] . b[n, k]^T + beta * out + bias[n] (bias may be null). a and
// out may have leading dims (collapsed into m rows) and row strides; b and bias are compact.
// Validates, then launches on `stream`. Throws kjit::Error.
void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out, float alpha,
          float beta, void* stream);

}  // namespace kjit::ops
