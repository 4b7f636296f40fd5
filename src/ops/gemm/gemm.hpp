// GEMM (out = alpha * a . b^T + beta * out + bias): path choice, spec rendering and launch
// (device code: kernels/gemm/). The registry entry is in gemm_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "gemm/gemm_params.h"
#include "jit/spec.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"

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

// out[..., n] = alpha * a[..., k] . b[n, k]^T + beta * out + bias[n] (bias may be null). a and
// out may have leading dims (collapsed into m rows) and row strides; b and bias are compact.
// Validates, then launches on `stream`. Throws kjit::Error.
void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out, float alpha,
          float beta, void* stream);

}  // namespace kjit::ops
