// RMSNorm and residual-add + RMSNorm (plain and Gemma-style): specialization choice, spec
// rendering and launch (device code: kernels/norm/). LayerNorm is in layernorm.hpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::jit {
struct LoadedKernel;
}  // namespace kjit::jit

namespace kjit::ops {

// One compiled RMSNorm (or fused add + RMSNorm) variant. Every field is in the URI. The Gemma
// form (weight + 1) is a launch-time scalar, so it shares these variants.
struct RmsNormConfig {
  DType dtype = DType::kBF16;
  int hidden = 0;
  int vec = 1;               // elements per vector access (VEC*sizeof(T) <= 16 bytes)
  int threads_per_row = 32;  // 32 = warp per row; more = one row per block
  int rows_per_block = 1;
  int early_params = 0;  // 1: the weight is read before the PDL wait (EARLY_PARAMS, decode sizes)
};

inline constexpr int64_t kRmsNormMaxHidden = 1 << 18;
// Calls with at most this many rows (about twice the SMs of an H200, 132, or an A100, 108) take
// the norms' EARLY_PARAMS variant: the weight (LayerNorm: gamma and beta) is read before the
// programmatic-launch wait, so its L2 round trip overlaps the kernel before instead of following
// the row's reduction (ptxas sinks read-only loads past it; tests/unit/codegen_order_test.cpp pins
// the order). Larger calls keep the default kernel and URI, whose code this variant leaves
// unchanged.
inline constexpr int64_t kNormEarlyParamsMaxRows = 256;

// Calls of at most this many rows give long rows one vector a thread (norm_detail::row_shape).
inline constexpr int64_t kNormDecodeGeometryMaxRows = 128;

// Overrides of the library's choices for the three norms, for the bench and the tests; the C entry
// points take the defaults.
struct NormTuning {
  // Vectors a thread for rows longer than 128 vectors, whatever the row count (1, 2, 4, ...);
  // 0: the library's choice (norm_detail::row_shape).
  int vectors_per_thread = 0;
};

// A row count for "many rows" (the default of the selectors' rows argument).
inline constexpr int64_t kNormManyRows = int64_t{1} << 40;

// Support and dispatch in one place: the config for this dtype, hidden size, the alignment
// (bytes, power of two <= 16) that every pointer and row stride shares and the call's row count.
// Throws KJIT_ERROR_UNSUPPORTED for a dtype or hidden size no variant serves.
RmsNormConfig select_rmsnorm(DType dtype, int64_t hidden, int align_bytes,
                             int64_t rows = kNormManyRows, const NormTuning& tuning = {});
// The same choice for the fused kernel (same shapes and limits; its own kernel and URI).
RmsNormConfig select_fused_add_rmsnorm(DType dtype, int64_t hidden, int align_bytes,
                                       int64_t rows = kNormManyRows, const NormTuning& tuning = {});

jit::Spec rmsnorm_spec(const RmsNormConfig& cfg);
std::string rmsnorm_uri(const RmsNormConfig& cfg);
jit::Spec fused_add_rmsnorm_spec(const RmsNormConfig& cfg);
std::string fused_add_rmsnorm_uri(const RmsNormConfig& cfg);

// Validate, then launch on `stream` as `launch` says. Throw kjit::Error. weight_offset is 0 for
// RMSNorm and 1 for the Gemma form (weight + 1).
void rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out, float eps, void* stream,
             float weight_offset = 0.0f,
             const ElementwiseLaunch& launch = elementwise_launch_from_env(),
             const NormTuning& tuning = {});
// residual += input (rounded to the dtype), then input = rmsnorm(residual) * (weight + offset).
void fused_add_rmsnorm(DLTensor* input, DLTensor* residual, const DLTensor* weight, float eps,
                       void* stream, float weight_offset = 0.0f,
                       const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                       const NormTuning& tuning = {});

// Pieces the normalization family's ops share (norm.cpp, layernorm.cpp).
namespace norm_detail {

// Threads per row and rows per block for a row of n_vec vectors of `vec` elements each, with
// `rows` rows in the call: decode-size calls (at most kNormDecodeGeometryMaxRows rows) of long
// rows give each thread one vector instead of about four, so the few blocks of a decode step
// have more warps (a thread's load -> reduce -> scale chain is what their time is: on the H200,
// back to back at 1 and 64 rows of 4096, one vector a thread was faster than two or four for
// RMSNorm, the fused add and LayerNorm alike). tuning.vectors_per_thread overrides the count.
void row_shape(int n_vec, int vec, int64_t rows, const NormTuning& tuning, int& threads_per_row,
               int& rows_per_block);

// Throw KJIT_ERROR_INVALID_ARGUMENT naming the argument.
void check_eps(float eps);
void check_same_shape(const DLTensor* a, const char* an, const DLTensor* b, const char* bn);
void check_param_vector(const DLTensor* t, const RowMatrix& m, const char* name, int64_t hidden);

// Launches a row kernel (one of kernels/norm/) on `device` and `stream` as `launch` says: a block
// of threads_per_row * rows_per_block threads per rows_per_block of the call's rows.
void launch_rows(const jit::LoadedKernel& k, int threads_per_row, int rows_per_block, int64_t rows,
                 int device, void* stream, const void* params, const ElementwiseLaunch& launch);

// True when the two matrices share any byte, the exact same view included.
bool any_overlap(const RowMatrix& a, const RowMatrix& b);

}  // namespace norm_detail

}  // namespace kjit::ops
