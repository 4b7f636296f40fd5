#include "ops/comm/all_reduce.hpp"

#include <algorithm>

#include "comm/comm_params.h"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "cuda/nccl.hpp"
#include "ops/norm/norm.hpp"
#include "ops/tensor.hpp"
#include "ops/vector_width.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

void check_dtype_world(const char* op, DType dtype, int world) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports fp32, fp16 and bf16, not {}", op, dtype_name(dtype));
  }
  if (world < 1 || world > comm::kCommMaxRanks) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports 1..{} ranks, not {}", op, comm::kCommMaxRanks, world);
  }
}

jit::Spec comm_spec(const char* op, const char* kernel, const AllReduceConfig& c) {
  jit::SpecBuilder b(op, {"common", "norm", "comm"}, "comm/all_reduce.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("world", c.world).value("vec", c.vec).value("threads", c.threads);
  b.entry(std::string("kjit::comm::") + kernel);
  return b.build();
}

int nccl_dtype(DType t) {
  return t == DType::kBF16 ? cuda::kNcclBfloat16
                           : (t == DType::kF16 ? cuda::kNcclFloat16 : cuda::kNcclFloat32);
}

kjit_comm& check_comm(kjit_comm* comm) {
  if (comm == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "comm is NULL");
  return *comm;
}

void check_on_comm_device(const kjit_comm& c, const RowMatrix& m, const char* name) {
  if (m.device != c.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on device {} but the communicator on device {}", name,
         m.device, c.device);
  }
}

const jit::LoadedKernel& comm_kernel(const char* op, const AllReduceConfig& cfg, int device,
                                     jit::Spec (*spec)(const AllReduceConfig&)) {
  return jit::JitCore::global().kernel_for(op, cfg, device, [&] { return spec(cfg); });
}

void launch_comm(const jit::LoadedKernel& k, unsigned grid, int threads, void* stream,
                 const void* params) {
  cuda::LaunchConfig lc;
  lc.grid_x = grid;
  lc.block_x = static_cast<unsigned>(threads);
  lc.stream = static_cast<CUstream>(stream);
  cuda::launch(k.functions.at(0), lc, params);
}

void nccl_all_reduce(const kjit_comm& c, const void* in, void* out, int64_t numel, DType dtype,
                     void* stream) {
  cuda::nccl_check(cuda::nccl().ncclAllReduce(
                       in, out, static_cast<size_t>(numel), nccl_dtype(dtype), cuda::kNcclSum,
                       static_cast<cuda::NcclComm>(c.nccl), static_cast<CUstream>(stream)),
                   "ncclAllReduce");
}

void copy(const void* in, void* out, int64_t bytes, void* stream) {
  if (in == out) return;
  KJIT_CU_CHECK(cuda::driver().cuMemcpyDtoDAsync(
      reinterpret_cast<CUdeviceptr>(out), reinterpret_cast<CUdeviceptr>(in),
      static_cast<size_t>(bytes), static_cast<CUstream>(stream)));
}

}  // namespace

AllReducePath select_all_reduce_path(int64_t bytes, size_t small_max_bytes, int world,
                                     const std::string& no_nccl) {
  if (bytes <= static_cast<int64_t>(small_max_bytes)) return AllReducePath::kOneShot;
  if (world == 1) return AllReducePath::kCopy;
  if (!no_nccl.empty()) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "a message of {} bytes is over the one-shot limit of {} (options->small_max_bytes) and "
         "needs NCCL, which this communicator has not: {}",
         bytes, small_max_bytes, no_nccl);
  }
  return AllReducePath::kNccl;
}

AllReduceConfig select_all_reduce(DType dtype, int world, int64_t numel, int align_bytes) {
  check_dtype_world("all_reduce", dtype, world);
  AllReduceConfig c;
  c.dtype = dtype;
  c.world = world;
  c.vec = widest_vector(dtype, numel, align_bytes);
  c.threads = 256;
  return c;
}

unsigned all_reduce_grid(int64_t numel, const AllReduceConfig& cfg) {
  const int64_t vecs = numel / cfg.vec;
  const int64_t blocks = (vecs + cfg.threads - 1) / cfg.threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, comm::kCommMaxBlocks));
}

jit::Spec all_reduce_spec(const AllReduceConfig& cfg) {
  return comm_spec("all_reduce", "one_shot_all_reduce_kernel", cfg);
}

AllReduceConfig select_all_reduce_add_rmsnorm(DType dtype, int world, int64_t hidden,
                                              int align_bytes) {
  check_dtype_world("all_reduce_add_rmsnorm", dtype, world);
  if (hidden < 1 || hidden > kRmsNormMaxHidden) {
    fail(KJIT_ERROR_UNSUPPORTED, "all_reduce_add_rmsnorm supports hidden sizes 1..{}, not {}",
         kRmsNormMaxHidden, hidden);
  }
  AllReduceConfig c;
  c.dtype = dtype;
  c.world = world;
  c.vec = widest_vector(dtype, hidden, align_bytes);
  // One vector a thread where a block holds the row (the decode regime the norms measured best
  // for, norm_detail::row_shape), in power-of-two blocks so few variants exist; at most 512: at
  // 1024 threads (64 registers a thread) fp32 with 8 ranks spilled 40 bytes (ptxas, sm_80).
  const int64_t vecs = hidden / c.vec;
  int threads = 128;
  while (threads < vecs && threads < 512) threads *= 2;
  c.threads = threads;
  return c;
}

jit::Spec all_reduce_add_rmsnorm_spec(const AllReduceConfig& cfg) {
  return comm_spec("all_reduce_add_rmsnorm", "all_reduce_add_rmsnorm_kernel", cfg);
}

void all_reduce(kjit_comm* comm, const DLTensor* in, DLTensor* out, void* stream) {
  kjit_comm& c = check_comm(comm);
  RowMatrix x = as_row_matrix(in, "in");
  RowMatrix y = as_row_matrix(out, "out");
  check_same_dtype(x, "in", y, "out");
  check_same_device(x, "in", y, "out");
  check_on_comm_device(c, x, "in");
  norm_detail::check_same_shape(in, "in", out, "out");
  if (x.rows > 1 && x.row_stride != x.cols) fail(KJIT_ERROR_INVALID_ARGUMENT, "in is not compact");
  if (y.rows > 1 && y.row_stride != y.cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out is not compact");
  }
  if (partially_overlaps(x, y)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps in without being the same view");
  }
  if (!is_float(x.dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "all_reduce supports fp32, fp16 and bf16, not {}",
         dtype_name(x.dtype));
  }
  const int64_t numel = x.numel();
  if (numel == 0) return;  // after validation: a zero-size call is still checked
  const int64_t bytes = numel * static_cast<int64_t>(dtype_size(x.dtype));
  const AllReducePath path = select_all_reduce_path(bytes, c.small_max_bytes, c.world, c.no_nccl);
  const int align = std::min(row_alignment(x), row_alignment(y));
  const AllReduceConfig cfg = select_all_reduce(x.dtype, c.world, numel, align);

  if (path == AllReducePath::kOneShot) {
    const jit::LoadedKernel& k = comm_kernel("all_reduce", cfg, c.device, all_reduce_spec);
    comm::AllReduceParams p{c.peers, x.data, y.data, numel};
    cuda::ScopedDevice scope(c.device);
    launch_comm(k, all_reduce_grid(numel, cfg), cfg.threads, stream, &p);
    return;
  }
  cuda::ScopedDevice scope(c.device);
  if (path == AllReducePath::kCopy) {
    copy(x.data, y.data, bytes, stream);
  } else {
    nccl_all_reduce(c, x.data, y.data, numel, x.dtype, stream);
  }
}

void all_reduce_add_rmsnorm(kjit_comm* comm, const DLTensor* in, const DLTensor* weight,
                            DLTensor* residual, DLTensor* out, float eps, void* stream) {
  kjit_comm& c = check_comm(comm);
  RowMatrix x = as_row_matrix(in, "in");
  RowMatrix w = as_row_matrix(weight, "weight");
  RowMatrix r = as_row_matrix(residual, "residual");
  RowMatrix y = as_row_matrix(out, "out");
  check_same_dtype(x, "in", w, "weight");
  check_same_dtype(x, "in", r, "residual");
  check_same_dtype(x, "in", y, "out");
  check_same_device(x, "in", w, "weight");
  check_same_device(x, "in", r, "residual");
  check_same_device(x, "in", y, "out");
  check_on_comm_device(c, x, "in");
  norm_detail::check_same_shape(in, "in", residual, "residual");
  norm_detail::check_same_shape(in, "in", out, "out");
  norm_detail::check_param_vector(weight, w, "weight", x.cols);
  norm_detail::check_eps(eps);
  if (partially_overlaps(x, y)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps in without being the same view");
  }
  if (norm_detail::any_overlap(r, x)) fail(KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps in");
  if (norm_detail::any_overlap(r, y)) fail(KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps out");
  if (norm_detail::any_overlap(r, w)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps weight");
  }
  if (norm_detail::any_overlap(y, w)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps weight");
  if (norm_detail::any_overlap(x, w)) fail(KJIT_ERROR_INVALID_ARGUMENT, "in overlaps weight");
  if (!is_float(x.dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "all_reduce_add_rmsnorm supports fp32, fp16 and bf16, not {}",
         dtype_name(x.dtype));
  }
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  const int64_t bytes = x.numel() * static_cast<int64_t>(dtype_size(x.dtype));
  const AllReducePath path = select_all_reduce_path(bytes, c.small_max_bytes, c.world, c.no_nccl);
  int align = std::min(row_alignment(x), row_alignment(y));
  align = std::min(align, std::min(row_alignment(r), row_alignment(w)));
  const AllReduceConfig cfg = select_all_reduce_add_rmsnorm(x.dtype, c.world, x.cols, align);

  if (path == AllReducePath::kOneShot) {
    const jit::LoadedKernel& k =
        comm_kernel("all_reduce_add_rmsnorm", cfg, c.device, all_reduce_add_rmsnorm_spec);
    comm::AllReduceAddRmsNormParams p{c.peers,      x.data,       r.data, w.data,
                                      y.data,       x.rows,       x.cols, x.row_stride,
                                      r.row_stride, y.row_stride, eps};
    cuda::ScopedDevice scope(c.device);
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(x.rows, comm::kCommMaxBlocks));
    launch_comm(k, grid, cfg.threads, stream, &p);
    return;
  }
  // Larger messages: the sum into out (NCCL needs compact buffers), then the norm family's fused
  // add over out and residual, which leaves the norm in out.
  if (x.rows > 1 && (x.row_stride != x.cols || y.row_stride != y.cols)) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "a message of {} bytes goes through NCCL, which needs in and out compact", bytes);
  }
  {
    cuda::ScopedDevice scope(c.device);
    if (path == AllReducePath::kCopy) {
      copy(x.data, y.data, bytes, stream);
    } else {
      nccl_all_reduce(c, x.data, y.data, x.numel(), x.dtype, stream);
    }
  }
  fused_add_rmsnorm(out, residual, weight, eps, stream);
}

}  // namespace kjit::ops
