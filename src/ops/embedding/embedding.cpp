#include "ops/embedding/embedding.hpp"

#include <algorithm>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "embedding/embedding_params.h"
#include "ops/embedding/embedding_desc.hpp"
#include "ops/pdl.hpp"
#include "ops/vector_width.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

EmbeddingConfig select_embedding(DType dtype, DType index, int64_t hidden, int align_bytes) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "embedding supports fp32, fp16 and bf16 tables, not {}",
         dtype_name(dtype));
  }
  if (index != DType::kI32 && index != DType::kI64) {
    fail(KJIT_ERROR_UNSUPPORTED, "embedding supports int32 and int64 ids, not {}",
         dtype_name(index));
  }
  if (hidden < 1 || hidden > kEmbeddingMaxHidden) {
    fail(KJIT_ERROR_UNSUPPORTED, "embedding supports hidden sizes 1..{}, not {}",
         kEmbeddingMaxHidden, hidden);
  }
  EmbeddingConfig c;
  c.dtype = dtype;
  c.index = index;
  c.vec = widest_vector(dtype, hidden, align_bytes);
  return c;
}

std::string embedding_uri(const EmbeddingConfig& c) {
  return embedding_spec(c).uri;
}

// One name a setting, from the config field to the kernel's template parameter (in upper case).
jit::Spec embedding_spec(const EmbeddingConfig& c) {
  jit::SpecBuilder b("embedding", {"common", "embedding"}, "embedding/embedding.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.type("index", dtype_name(c.index), c.index == DType::kI32 ? "int" : "long long");
  b.value("vec", c.vec);
  b.entry("kjit::embedding::embedding_kernel", {"dtype", "index", "vec"});
  return b.build();
}

void embedding(const DLTensor* table, const DLTensor* ids, DLTensor* out, void* stream,
               const ElementwiseLaunch& launch) {
  const RowMatrix t = as_row_matrix(table, "table");
  const RowMatrix y = as_row_matrix(out, "out");
  const StridedView id = as_strided_view(ids, "ids");
  if (table->ndim != 2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "table must be [vocab, hidden], got ndim {}", table->ndim);
  }
  if (out->ndim != 2) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be [tokens, hidden], got ndim {}", out->ndim);
  }
  check_same_dtype(t, "table", y, "out");
  check_same_device(t, "table", y, "out");
  if (id.ndim != 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "ids must be 1-D, got ndim {}", id.ndim);
  if (id.dtype != DType::kI32 && id.dtype != DType::kI64) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "ids must be int32 or int64, got {}", dtype_name(id.dtype));
  }
  if (id.device != t.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "ids is on cuda:{} but table is on cuda:{}", id.device,
         t.device);
  }
  if (y.rows != id.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out has {} rows but ids has {} elements", y.rows,
         id.shape[0]);
  }
  if (y.cols != t.cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out has hidden size {} but table has {}", y.cols, t.cols);
  }
  // out is written while table and ids are read: no byte may be shared.
  const StridedView tv = as_strided_view(table, "table");
  const StridedView yv = as_strided_view(out, "out");
  if (views_overlap(yv, tv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps table");
  if (views_overlap(yv, id)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps ids");
  if (y.numel() == 0) return;  // after validation: a zero-size call is still checked
  if (t.rows == 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "table has no rows (vocab = 0) but ids has {} elements",
         id.shape[0]);
  }
  const int align = std::min(row_alignment(t), row_alignment(y));
  const EmbeddingConfig cfg = select_embedding(t.dtype, id.dtype, t.cols, align);
  if (trace::enabled()) trace::embedding(t.dtype, id.dtype, t.rows, t.cols, y.rows);

  const cuda::DeviceInfo& dev = cuda::device_info(t.device);
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for(
      "embedding", cfg, t.device, [&] { return embedding_spec(cfg); });

  // Rows shorter than a block share it; a decode step's few rows are spread over blocks of a
  // warp or more until they cover the SMs, as the gated activations do (act_and_mul_shape).
  const int64_t n_vec = t.cols / cfg.vec;
  int bx = embedding::kEmbeddingThreads;
  while (bx > 1 && bx / 2 >= n_vec) bx /= 2;
  const int by = embedding::kEmbeddingThreads / bx;
  const int64_t gy = std::min<int64_t>(ceil_div(y.rows, by), 65535);  // the kernel loops past it
  int64_t gx = ceil_div(n_vec, bx);
  while (by == 1 && bx > 32 && gx * gy < dev.sm_count) {
    bx /= 2;
    gx = ceil_div(n_vec, bx);
  }
  embedding::EmbeddingParams p{t.data, id.data,      y.data,       y.rows,
                               t.rows, t.row_stride, y.row_stride, static_cast<int>(t.cols)};
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(gx);
  lc.grid_y = static_cast<unsigned>(gy);
  lc.block_x = static_cast<unsigned>(bx);
  lc.block_y = static_cast<unsigned>(by);
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(t.device);
  launch_elementwise(k.functions.at(0), lc, &p, t.device, launch);
}

}  // namespace kjit::ops
