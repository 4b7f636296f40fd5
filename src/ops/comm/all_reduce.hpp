// kjit_all_reduce and kjit_all_reduce_add_rmsnorm: argument checks, the size switch between the
// one-shot kernel (kernels/comm/all_reduce.cuh) and NCCL, specialization choice and launch.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/comm/communicator.hpp"
#include "ops/dtype.hpp"

namespace kjit::ops {

// How a message travels.
enum class AllReducePath {
  kOneShot,  // the one-shot kernel over the staging regions (at most small_max_bytes)
  kCopy,     // a group of one, over small_max_bytes: out = in
  kNccl      // NCCL's all-reduce
};

// The size switch: messages of at most small_max_bytes take the one-shot kernel, larger ones
// NCCL (a group of one copies). Throws KJIT_ERROR_UNSUPPORTED saying why (no_nccl, the
// communicator's reason) when a larger message has no NCCL to take it.
AllReducePath select_all_reduce_path(int64_t bytes, size_t small_max_bytes, int world,
                                     const std::string& no_nccl);

// One compiled one-shot kernel. Every field is in the URI.
struct AllReduceConfig {
  DType dtype = DType::kBF16;
  int world = 2;
  int vec = 1;  // elements per vector access (vec * element size <= 16 bytes)
  int threads = 256;
};

// Support and dispatch for the one-shot all-reduce of `numel` elements whose pointers share
// `align_bytes` (a power of two <= 16). Throws KJIT_ERROR_UNSUPPORTED for a dtype other than
// bf16 / fp16 / fp32 or a world outside 1..8.
AllReduceConfig select_all_reduce(DType dtype, int world, int64_t numel, int align_bytes);
// The grid of that launch (the same on every rank: it depends on the shape only).
unsigned all_reduce_grid(int64_t numel, const AllReduceConfig& cfg);
jit::Spec all_reduce_spec(const AllReduceConfig& cfg);

// The same for the fused kernel, rows of `hidden` elements: threads cover a row with about one
// vector each (rows are decode-sized: the message is at most small_max_bytes).
AllReduceConfig select_all_reduce_add_rmsnorm(DType dtype, int world, int64_t hidden,
                                              int align_bytes);
jit::Spec all_reduce_add_rmsnorm_spec(const AllReduceConfig& cfg);

// Validate, then run on `stream`. Throw kjit::Error.
void all_reduce(kjit_comm* comm, const DLTensor* in, DLTensor* out, void* stream);
void all_reduce_add_rmsnorm(kjit_comm* comm, const DLTensor* in, const DLTensor* weight,
                            DLTensor* residual, DLTensor* out, float eps, void* stream);

}  // namespace kjit::ops
