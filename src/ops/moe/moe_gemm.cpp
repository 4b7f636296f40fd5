// The grouped GEMM of the MoE family (kjit_moe_grouped_gemm and its masked form).
#include <algorithm>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "moe/moe_params.h"
#include "ops/moe/moe.hpp"
#include "ops/moe/moe_desc.hpp"
#include "ops/tensor.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {

using cuda::kMaxGridY;
using cuda::kMaxInt32;

// a, b, out and the schedule tensor of either layout, validated.
struct GroupedOperands {
  RowMatrix a, b, out, sched;
  int64_t rows = 0, n = 0, k = 0, experts = 0;
  int64_t rows_per_expert = 0;  // masked layout
  bool swiglu = false;          // out is [.., n / 2]: silu(gate) * up
  int64_t out_cols() const { return swiglu ? n / 2 : n; }
};

// b [experts, n, k] beside a [rows, k] (already read) and out [rows, n]; `sched` [len] int32.
void check_common(GroupedOperands& g, const DLTensor* b, const DLTensor* sched,
                  const char* sched_name, int64_t sched_len) {
  if (b->ndim != 3)
    fail(KJIT_ERROR_INVALID_ARGUMENT, "b must be [experts, n, k], has ndim {}", b->ndim);
  g.b = as_row_matrix(b, "b");
  g.experts = b->shape[0];
  g.n = b->shape[1];
  if (b->shape[2] != g.k) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "b is [{}, {}, {}] but a's last dim (k) is {}", g.experts,
         g.n, b->shape[2], g.k);
  }
  if (g.experts < 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "b has no experts");
  if (g.swiglu && g.n % 2 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "b must be [experts, 2 intermediate, k], has {} rows", g.n);
  }
  g.sched = as_row_matrix(sched, sched_name);
  if (sched->ndim != 1 || sched->shape[0] != sched_len) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}]", sched_name, sched_len);
  }
  if (g.sched.dtype != DType::kI32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, not {}", sched_name,
         dtype_name(g.sched.dtype));
  }
  check_same_dtype(g.a, "a", g.b, "b");
  check_same_device(g.a, "a", g.b, "b");
  check_same_device(g.a, "a", g.out, "out");
  check_same_device(g.a, "a", g.sched, sched_name);
  if (overlaps(g.out, g.a)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps a");
  if (overlaps(g.out, g.b)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps b");
  if (overlaps(g.out, g.sched)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps {}", sched_name);
}

// Runs a validated call: `tiles_m(tile_rows)` is the grid's bound on the schedule's row tiles.
// False, launching nothing, for a SwiGLU call the wgmma path cannot serve.
template <typename TilesM>
bool run_grouped(const char* layout, const GroupedOperands& g, const moe::MoeGemmParams& base,
                 TilesM tiles_m, void* stream) {
  if (g.rows == 0 || g.n == 0) return true;  // after validation: a zero-size call is checked
  select_moe_gemm(g.a.dtype, g.out.dtype, g.rows, 0, g.n, g.k, g.experts, GemmTarget{});
  if (trace::enabled() && !g.swiglu) {  // the SwiGLU form has no entry point of its own
    trace::moe_grouped_gemm(layout, g.a.dtype, g.out.dtype, g.rows, g.n, g.k, g.experts);
  }
  const bool tma_ok = g.k > 0 && tma_describable(g.a) && tma_describable(g.b);
  const GemmTarget target = gemm_target(g.a.device, tma_ok);
  const int64_t avg_rows = g.rows_per_expert > 0 ? g.rows_per_expert : g.rows / g.experts;
  MoeGemmConfig cfg =
      select_moe_gemm(g.a.dtype, g.out.dtype, g.rows, avg_rows, g.n, g.k, g.experts, target);
  if (g.swiglu && cfg.path != GemmPath::kSm90) return false;
  cfg.swiglu = g.swiglu ? 1 : 0;
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "moe_grouped_gemm", cfg, g.a.device, [&] { return moe_gemm_spec(cfg); });
  moe::MoeGemmParams p = base;
  p.g.a = g.a.data;
  p.g.b = g.b.data;
  p.g.out = g.out.data;
  p.g.m = g.rows;
  p.g.n = g.n;
  p.g.k = g.k;
  p.g.a_stride = g.a.row_stride;
  p.g.b_stride = g.b.row_stride;
  p.g.out_stride = g.out.row_stride;
  p.g.alpha = 1.0f;
  p.g.beta = 0.0f;
  p.experts = static_cast<int>(g.experts);
  p.rows_per_expert = g.rows_per_expert;
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(g.a.device);
  if (cfg.path == GemmPath::kSm90) {
    p.tiles_m = static_cast<int>(tiles_m(gemm::kGemmBlockM));
    // A SwiGLU block covers bn / 2 outputs: bn / 2 gate rows and as many up rows of b.
    const int b_box = cfg.swiglu ? cfg.bn / 2 : cfg.bn;
    p.tiles_n = static_cast<int>(ceil_div(g.out_cols(), int64_t{b_box}));
    // b as [experts * n, k]: a column tile past n reads the next expert's rows (masked).
    RowMatrix b_rows = g.b;
    b_rows.rows = g.experts * g.n;
    p.g.tma_a = tensor_map(g.a, gemm::kGemmBlockM);
    p.g.tma_b = tensor_map(b_rows, static_cast<uint32_t>(b_box));
    lc.grid_x = static_cast<unsigned>(int64_t{p.tiles_m} * p.tiles_n);
    lc.block_x = gemm::kGemmSm90Threads;
    lc.smem_bytes = static_cast<unsigned>(gemm::gemm_sm90_smem_bytes(cfg.bn, cfg.stages));
  } else {
    p.tiles_m = static_cast<int>(tiles_m(gemm::kGemmSimtTile));
    p.tiles_n = static_cast<int>(ceil_div(g.n, int64_t{gemm::kGemmSimtTile}));
    lc.grid_x = static_cast<unsigned>(p.tiles_n);
    lc.grid_y = static_cast<unsigned>(p.tiles_m);
    lc.block_x = gemm::kGemmSimtThreads;
  }
  cuda::launch(kern.functions.at(0), lc, &p);
  return true;
}

// kjit_moe_grouped_gemm's operands (contiguous layout), validated.
GroupedOperands contiguous_operands(const DLTensor* a, const DLTensor* b,
                                    const DLTensor* expert_offsets, DLTensor* out, bool swiglu) {
  GroupedOperands g;
  g.swiglu = swiglu;
  g.a = as_row_matrix(a, "a");
  g.out = as_row_matrix(out, "out");
  if (a->ndim != 2) fail(KJIT_ERROR_INVALID_ARGUMENT, "a must be [rows, k], has ndim {}", a->ndim);
  g.rows = a->shape[0];
  g.k = a->shape[1];
  as_row_matrix(b, "b");  // checked before its shape is read
  check_common(g, b, expert_offsets, "expert_offsets", b->ndim == 3 ? b->shape[0] + 1 : -1);
  if (out->ndim != 2 || out->shape[0] != g.rows || out->shape[1] != g.out_cols()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be [rows, {}] = [{}, {}]", swiglu ? "n / 2" : "n",
         g.rows, g.out_cols());
  }
  return g;
}

bool run_contiguous(const GroupedOperands& g, void* stream) {
  moe::MoeGemmParams p{};
  p.offsets = static_cast<const int*>(g.sched.data);
  return run_grouped(
      "contiguous", g, p,
      [&](int64_t tile) { return ceil_div(g.rows, tile) + std::min(g.experts, g.rows); }, stream);
}

// kjit_moe_grouped_gemm_masked's operands, validated.
GroupedOperands masked_operands(const DLTensor* a, const DLTensor* b, const DLTensor* counts,
                                DLTensor* out, bool swiglu) {
  GroupedOperands g;
  g.swiglu = swiglu;
  g.a = as_row_matrix(a, "a");
  g.out = as_row_matrix(out, "out");
  if (a->ndim != 3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "a must be [experts, max_rows, k], has ndim {}", a->ndim);
  }
  g.rows_per_expert = a->shape[1];
  g.k = a->shape[2];
  as_row_matrix(b, "b");  // checked before its shape is read
  check_common(g, b, counts, "counts", b->ndim == 3 ? b->shape[0] : -1);
  if (a->shape[0] != g.experts) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "a has {} experts but b has {}", a->shape[0], g.experts);
  }
  g.rows = g.experts * g.rows_per_expert;
  if (out->ndim != 3 || out->shape[0] != g.experts || out->shape[1] != g.rows_per_expert ||
      out->shape[2] != g.out_cols()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be [experts, max_rows, {}] = [{}, {}, {}]",
         swiglu ? "n / 2" : "n", g.experts, g.rows_per_expert, g.out_cols());
  }
  return g;
}

bool run_masked(const GroupedOperands& g, void* stream) {
  moe::MoeGemmParams p{};
  p.counts = static_cast<const int*>(g.sched.data);
  return run_grouped(
      "masked", g, p, [&](int64_t tile) { return g.experts * ceil_div(g.rows_per_expert, tile); },
      stream);
}

}  // namespace

MoeGemmConfig select_moe_gemm(DType dtype, DType out_dtype, int64_t rows, int64_t avg_rows,
                              int64_t n, int64_t k, int64_t experts, const GemmTarget& target) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_grouped_gemm supports bf16 and fp16 a and b, not {}",
         dtype_name(dtype));
  }
  if (!is_float(out_dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_grouped_gemm's out is fp32, fp16 or bf16, not {}",
         dtype_name(out_dtype));
  }
  // The schedule's bound on row tiles (one partial tile per expert at most) must fit a grid.
  const int64_t simt_tiles = ceil_div(rows, int64_t{gemm::kGemmSimtTile}) + std::min(experts, rows);
  if (experts > kMaxInt32 / std::max<int64_t>(n, 1) || simt_tiles > kMaxGridY ||
      ceil_div(n, int64_t{gemm::kGemmSimtTile}) > kMaxInt32) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "moe_grouped_gemm: {} rows, {} experts of n = {} exceed one launch", rows, experts, n);
  }
  MoeGemmConfig c;
  c.dtype = dtype;
  c.out_dtype = out_dtype;
  // The GEMM's rule on its m, here per expert: wide tiles once experts have rows to fill them.
  c.bn = avg_rows >= 512 ? 256 : 128;
  c.stages = c.bn == 256 ? 4 : 6;
  if (sm90_can_run(target, rows, experts * n, k, c.bn, c.stages)) {
    c.path = GemmPath::kSm90;
    return c;
  }
  c.path = GemmPath::kSimt;
  c.bn = 0;
  c.stages = 0;
  return c;
}

jit::Spec moe_gemm_spec(const MoeGemmConfig& c) {
  const bool sm90 = c.path == GemmPath::kSm90;
  jit::SpecBuilder b(
      "moe_grouped_gemm",
      sm90 ? std::vector<std::string>{"common", "activation", "gemm", "moe"}
           : std::vector<std::string>{"common", "gemm", "moe"},
      sm90 ? "moe/moe_gemm_sm90.cuh" : "moe/moe_gemm_simt.cuh",
      sm90 ? std::vector<std::string>{"sm_90a"} : std::vector<std::string>{"sm_80+"});
  b.choice("path", gemm_path_name(c.path), static_cast<int>(c.path));
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.type("out_dtype", dtype_name(c.out_dtype), device_type_name(c.out_dtype));
  if (sm90) {
    b.value("bn", c.bn).value("stages", c.stages).flag("swiglu", c.swiglu != 0, true);
    b.entry("kjit::moe::moe_gemm_sm90_kernel", {"dtype", "out_dtype", "bn", "stages", "swiglu"});
  } else {
    b.entry("kjit::moe::moe_gemm_simt_kernel", {"dtype", "out_dtype"});
  }
  return b.build();
}

void moe_grouped_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* expert_offsets,
                      DLTensor* out, void* stream) {
  run_contiguous(contiguous_operands(a, b, expert_offsets, out, false), stream);
}

void moe_grouped_gemm_masked(const DLTensor* a, const DLTensor* b, const DLTensor* counts,
                             DLTensor* out, void* stream) {
  run_masked(masked_operands(a, b, counts, out, false), stream);
}

bool moe_grouped_gemm_swiglu(const DLTensor* a, const DLTensor* w13, const DLTensor* expert_offsets,
                             DLTensor* out, void* stream) {
  return run_contiguous(contiguous_operands(a, w13, expert_offsets, out, true), stream);
}

bool moe_grouped_gemm_swiglu_masked(const DLTensor* a, const DLTensor* w13, const DLTensor* counts,
                                    DLTensor* out, void* stream) {
  return run_masked(masked_operands(a, w13, counts, out, true), stream);
}

}  // namespace kjit::ops
