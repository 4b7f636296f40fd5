#include "ops/activation/activation.hpp"

#include <algorithm>
#include <iterator>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "activation/activation_params.h"
#include "runtime/jit_core.hpp"
#include "ops/activation/activation_desc.hpp"
#include "ops/pdl.hpp"
#include "ops/vector_width.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {

constexpr bool rows_in_act_order() {
  for (size_t i = 0; i < std::size(kActivations); ++i) {
    if (static_cast<size_t>(kActivations[i].act) != i) return false;
  }
  return true;
}
static_assert(rows_in_act_order(), "kActivations[a] must be the row of Act a");

}  // namespace

const ActivationInfo& activation_info(Act a) {
  return kActivations[static_cast<size_t>(a)];
}

const ActivationInfo* find_activation(std::string_view name) {
  for (const ActivationInfo& a : kActivations) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

const char* act_name(Act a) {
  return activation_info(a).name;
}

ActAndMulConfig select_act_and_mul(Act act, DType dtype, int64_t d, int align_bytes) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "act_and_mul supports fp32, fp16 and bf16, not {}",
         dtype_name(dtype));
  }
  if (d < 1 || d > kActAndMulMaxD) {
    fail(KJIT_ERROR_UNSUPPORTED, "act_and_mul supports d (half the input's last dim) 1..{}, not {}",
         kActAndMulMaxD, d);
  }
  ActAndMulConfig c;
  c.act = act;
  c.dtype = dtype;
  // A width that divides d also aligns the up half, d elements into the row.
  c.vec = widest_vector(dtype, d, align_bytes);
  return c;
}

ActAndMulShape act_and_mul_shape(const ActAndMulConfig& cfg, int64_t rows, int64_t d, int sm_count,
                                 int max_threads_per_sm) {
  const int64_t n_vec = d / cfg.vec;
  const int unroll =
      activation::act_and_mul_unroll(cfg.vec * static_cast<int>(dtype_size(cfg.dtype)));
  ActAndMulShape s;
  // Rows shorter than a block share it (block_y rows side by side), so short rows do not leave
  // most of each block idle.
  int bx = kActAndMulThreads;
  while (bx > 1 && bx / 2 >= n_vec) bx /= 2;
  const int by = kActAndMulThreads / bx;
  const int64_t gy = std::min<int64_t>(ceil_div(rows, by), 65535);  // the kernel loops past it
  // Large calls: each thread takes `unroll` vectors, all loads issued together.
  int64_t gx = ceil_div(n_vec, int64_t{bx} * unroll);
  const int64_t resident =
      int64_t{std::max(sm_count, 1)} * std::max(max_threads_per_sm / kActAndMulThreads, 1);
  if (gx * gy < 2 * resident) {
    // Less than two waves (decode): one vector per thread for twice the blocks, and blocks
    // narrowed down to a warp while they are still fewer than the SMs, so the few rows of a decode
    // step reach as many SMs as possible rather than queueing on a handful.
    gx = ceil_div(n_vec, bx);
    while (by == 1 && bx > 32 && gx * gy < sm_count) {
      bx /= 2;
      gx = ceil_div(n_vec, bx);
    }
  }
  s.grid_x = static_cast<unsigned>(gx);
  s.grid_y = static_cast<unsigned>(gy);
  s.block_x = static_cast<unsigned>(bx);
  s.block_y = static_cast<unsigned>(by);
  return s;
}

std::string act_and_mul_uri(const ActAndMulConfig& c) {
  return act_and_mul_spec(c).uri;
}

// One name a setting, from the config field to the kernel's template parameter (in upper case).
jit::Spec act_and_mul_spec(const ActAndMulConfig& c) {
  jit::SpecBuilder b("act_and_mul", {"common", "activation"}, "activation/act_and_mul.cuh");
  const ActivationInfo& act = activation_info(c.act);
  b.type("act", act.name, std::string("kjit::activation::") + act.functor);
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype)).value("vec", c.vec);
  b.entry("kjit::activation::act_and_mul_kernel", {"dtype", "act", "vec"});
  return b.build();
}

void act_and_mul(Act act, const DLTensor* input, DLTensor* out, void* stream,
                 const ElementwiseLaunch& launch) {
  RowMatrix x = as_row_matrix(input, "input");
  RowMatrix y = as_row_matrix(out, "out");
  check_same_dtype(x, "input", y, "out");
  check_same_device(x, "input", y, "out");
  if (out->ndim != input->ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out has ndim {} but input has {}", out->ndim, input->ndim);
  }
  for (int i = 0; i + 1 < input->ndim; ++i) {
    if (out->shape[i] != input->shape[i]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "out dim {} is {} but input dim {} is {}", i, out->shape[i],
           i, input->shape[i]);
    }
  }
  const int64_t two_d = input->shape[input->ndim - 1];
  if (two_d % 2 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "input last dim must be even ([..., 2*d]), got {}", two_d);
  }
  const int64_t d = two_d / 2;
  if (out->shape[out->ndim - 1] != d) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out last dim is {} but must be half of input's {} ({})",
         out->shape[out->ndim - 1], two_d, d);
  }
  // out is half as wide as input, so it can never be the same view: any shared byte is a race.
  if (partially_overlaps(x, y)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps input (act_and_mul cannot run in place)");
  }
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  if (!is_float(x.dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "act_and_mul supports fp32, fp16 and bf16, not {}",
         dtype_name(x.dtype));
  }
  const int align = std::min(row_alignment(x), row_alignment(y));
  const ActAndMulConfig cfg = select_act_and_mul(act, x.dtype, d, align);
  if (trace::enabled()) trace::act_and_mul(act, x.dtype, d, x.rows);

  const cuda::DeviceInfo& dev = cuda::device_info(x.device);
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for(
      "act_and_mul", cfg, x.device, [&] { return act_and_mul_spec(cfg); });
  const ActAndMulShape shape =
      act_and_mul_shape(cfg, x.rows, d, dev.sm_count, dev.max_threads_per_sm);
  activation::ActAndMulParams p{x.data,       y.data,       x.rows,
                                x.row_stride, y.row_stride, static_cast<int>(d)};
  cuda::LaunchConfig lc;
  lc.grid_x = shape.grid_x;
  lc.grid_y = shape.grid_y;
  lc.block_x = shape.block_x;
  lc.block_y = shape.block_y;
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(x.device);
  launch_elementwise(k.functions.at(0), lc, &p, x.device, launch);
}

}  // namespace kjit::ops
