// kjit_top_k: argument checks, then one launch (one block per row). Like the other sampling ops
// it reads no device memory on the host and never waits, so it can be captured in a CUDA graph.
#include <climits>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "ops/sampling/sampling.hpp"
#include "ops/sampling/sampling_args.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "runtime/jit_core.hpp"
#include "sampling/top_k_params.h"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace sampling_args;

// values / indices: [batch, k] of `dtype` on the input's device, each row contiguous.
RowMatrix top_k_out(const DLTensor* t, const char* name, const Batch& b, int64_t k, DType dtype) {
  const RowMatrix o = as_row_matrix(t, name);
  if (t->ndim != 2 || t->shape[0] != b.batch || t->shape[1] != k) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}, {}] (batch, k)", name, b.batch, k);
  }
  if (o.dtype != dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, got {}", name, dtype_name(dtype),
         dtype_name(o.dtype));
  }
  check_same_device(b.m, b.name, o, name);
  return o;
}

}  // namespace

void top_k(const DLTensor* input, DLTensor* values, DLTensor* indices, int k, void* stream) {
  const Batch b = as_batch(input, "input");
  if (k < 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "k must be >= 1, got {}", k);
  if (k > b.vocab) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k ({}) exceeds the row length ({})", k, b.vocab);
  }
  const RowMatrix v = top_k_out(values, "values", b, k, b.m.dtype);
  const RowMatrix ix = top_k_out(indices, "indices", b, k, DType::kI32);
  const Span vs = span_of(v, "values"), is = span_of(ix, "indices");
  check_no_overlap({vs, is}, {span_of(b.m, "input"), vs, is});
  if (b.batch == 0) return;  // after validation: a zero-size call is still checked
  const RowConfig cfg = select_top_k(b.m.dtype, b.vocab, k, vec_ok(b));
  if (b.batch > INT_MAX) fail(KJIT_ERROR_UNSUPPORTED, "top_k: {} rows exceed the grid", b.batch);
  if (trace::enabled()) trace::top_k(b.m.dtype, b.vocab, k, b.batch);
  sampling::TopKParams p{};
  p.input = b.m.data;
  p.values = v.data;
  p.indices = static_cast<int*>(ix.data);
  p.in_stride = b.m.row_stride;
  p.values_stride = v.row_stride;
  p.indices_stride = ix.row_stride;
  p.vocab = static_cast<int>(b.vocab);
  p.k = k;
  const jit::LoadedKernel& kernel =
      jit::JitCore::global().kernel_for("top_k", cfg, b.m.device, [&] { return top_k_spec(cfg); });
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(b.batch);
  lc.block_x = static_cast<unsigned>(sampling_block_threads(b.vocab, cfg.vec, cfg.unroll));
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(b.m.device);
  cuda::launch(kernel.functions.at(0), lc, &p);
}

}  // namespace kjit::ops
