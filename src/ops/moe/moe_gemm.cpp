// The grouped GEMMs of the MoE family: kjit_moe_grouped_gemm, kjit_moe_grouped_gemm_fp8 and
// their masked forms.
#include <algorithm>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "gemm/gemm_fp8_params.h"
#include "moe/moe_params.h"
#include "ops/gemm/gemm_fp8.hpp"
#include "ops/moe/moe.hpp"
#include "ops/moe/moe_checks.hpp"
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
using cuda::kMaxTmaSide;

// The fp8 kernel's tile width and depth: the fp8 GEMM's (gemm_fp8.cpp, gemm_fp8_sm90.cuh).
constexpr int kMoeGemmFp8Bn = 128;
constexpr int kMoeGemmFp8Stages = 6;

// Throws KJIT_ERROR_UNSUPPORTED for an out dtype other than fp32 / fp16 / bf16 and sizes whose
// schedule (one partial tile per expert at most) would not fit one launch.
void check_grouped_limits(const char* op, DType out_dtype, int64_t rows, int64_t n,
                          int64_t experts) {
  if (!is_float(out_dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "{}'s out is fp32, fp16 or bf16, not {}", op,
         dtype_name(out_dtype));
  }
  const int64_t simt_tiles = ceil_div(rows, int64_t{gemm::kGemmSimtTile}) + std::min(experts, rows);
  if (experts > kMaxInt32 / std::max<int64_t>(n, 1) || simt_tiles > kMaxGridY ||
      ceil_div(n, int64_t{gemm::kGemmSimtTile}) > kMaxInt32) {
    fail(KJIT_ERROR_UNSUPPORTED, "{}: {} rows, {} experts of n = {} exceed one launch", op, rows,
         experts, n);
  }
}

// a, b, out and the schedule tensor of either layout, validated.
struct GroupedOperands {
  RowMatrix a, b, out, sched;
  int64_t rows = 0, n = 0, k = 0, experts = 0;
  int64_t rows_per_expert = 0;  // masked layout
  bool masked = false;          // sched: counts (masked layout), else offsets
  bool swiglu = false;          // out is [.., n / 2]: silu(gate) * up
  int64_t out_cols() const { return swiglu ? n / 2 : n; }
  // An expert's rows on average (check_common: experts >= 1), the selection's and the form's.
  int64_t avg_rows() const { return masked ? rows_per_expert : rows / experts; }
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

// The schedule's bound on row tiles of `tile_rows` rows (one partial tile per expert at most),
// for either layout.
int64_t grouped_tiles_m(const GroupedOperands& g, int64_t tile_rows) {
  if (g.masked) return g.experts * ceil_div(g.rows_per_expert, tile_rows);
  return ceil_div(g.rows, tile_rows) + std::min(g.experts, g.rows);
}

// The parameters every path shares: the whole a, b and out, the schedule (offsets or counts).
moe::MoeGemmParams grouped_params(const GroupedOperands& g) {
  moe::MoeGemmParams p{};
  (g.masked ? p.counts : p.offsets) = static_cast<const int*>(g.sched.data);
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
  return p;
}

// The wgmma kernels' grid, tensor maps and shared memory (bf16 and fp8 stages hold the same
// bytes); `a_tma` / `b_tma` are a and b as TMA moves them (e4m3 as 16-bit pairs). persistent_sms
// > 0 (the persistent kernels): min(items, persistent_sms) blocks; the items are the same bound
// either way, so neither grid reads the device's counts.
void sm90_geometry(const GroupedOperands& g, RowMatrix a_tma, RowMatrix b_tma, int bn, int stages,
                   bool swiglu, bool tma_out, int persistent_sms, moe::MoeGemmParams& p,
                   cuda::LaunchConfig& lc) {
  p.tiles_m = static_cast<int>(grouped_tiles_m(g, gemm::kGemmBlockM));
  // A SwiGLU block covers bn / 2 outputs: bn / 2 gate rows and as many up rows of b.
  const int b_box = swiglu ? bn / 2 : bn;
  p.tiles_n = static_cast<int>(ceil_div(g.out_cols(), int64_t{b_box}));
  // b as [experts * n, k]: a column tile past n reads the next expert's rows (masked).
  b_tma.rows = g.experts * g.n;
  p.g.tma_a = tensor_map(a_tma, gemm::kGemmBlockM);
  p.g.tma_b = tensor_map(b_tma, static_cast<uint32_t>(b_box));
  if (tma_out) p.g.tma_out = out_tensor_map(g.out);
  const int64_t items = int64_t{p.tiles_m} * p.tiles_n;
  lc.grid_x =
      static_cast<unsigned>(persistent_sms > 0 ? std::min<int64_t>(items, persistent_sms) : items);
  lc.block_x = gemm::kGemmSm90Threads;
  lc.smem_bytes = static_cast<unsigned>(gemm::gemm_sm90_smem_bytes(bn, stages, tma_out));
}

// The decode kernel's token tile and stages for decode_rows (moe_decode_rows) on `target`, or
// tokens 0 where it cannot run (not sm_90a, operands TMA cannot read, sides past its limits).
// k2: K in 16-bit elements (an e4m3 pair is one).
GemmDecodeTile moe_decode_tile(const GemmTarget& target, int64_t decode_rows, int64_t rows,
                               int64_t n, int64_t k2, int64_t experts, bool fp8) {
  if (decode_rows < 1 || decode_rows > moe::kMoeDecodeMaxTokens || rows > kMaxTmaSide) return {};
  // The kernel counts its (row tile, column tile) items in int32, with the grid's clusters
  // added: tiles_m <= rows + experts, tiles_n <= ceil(n / 64).
  if ((rows + experts) * ceil_div(n, int64_t{gemm::kGemmDecodeRows / 2}) > kMaxInt32 / 2) {
    return {};
  }
  return fp8 ? gemm_decode_tile(target, decode_rows, experts * n, k2,
                                [](int t) { return moe::moe_fp8_decode_blocks_per_sm(t); })
             : gemm_decode_tile(target, decode_rows, experts * n, k2, [](int) { return 2; });
}

int64_t call_decode_rows(const GroupedOperands& g, const MoeGemmTuning& t) {
  return moe_tuned_decode_rows(t, g.masked, g.rows, g.rows_per_expert, g.experts);
}

void check_forced(const char* op, const MoeGemmTuning& t, bool decode, bool tiles) {
  check_moe_forced(op, t, decode, tiles);
}

// The persistent kernels' grid bound: the device's SMs (one block fits an SM), or 0 for the
// one-item kernels.
int persistent_sms(int persistent, int device) {
  return persistent != 0 ? cuda::device_info(device).sm_count : 0;
}

// The decode kernel's tensor maps, schedule bounds and launch (bf16 and fp8 stages hold the same
// bytes; `a_tma` / `b_tma` as TMA moves them, k2 in 16-bit elements): persistent clusters, as
// many as the device runs at once or the schedule's items where fewer. The split of K is the
// dense decode rule's for the items expected to be active at once: an expert per row at most
// (contiguous), at most kMoeMaxTopK experts per token of a masked slot's max_rows.
void launch_moe_decode(const GroupedOperands& g, RowMatrix a_tma, RowMatrix b_tma, int tokens,
                       int stages, int64_t k2, CUfunction fn, int forced_split,
                       moe::MoeGemmParams& p, const void* params, void* stream) {
  const int b_box = g.swiglu ? gemm::kGemmDecodeRows / 2 : gemm::kGemmDecodeRows;
  p.tiles_m = static_cast<int>(grouped_tiles_m(g, tokens));
  p.tiles_n = static_cast<int>(ceil_div(g.out_cols(), int64_t{b_box}));
  b_tma.rows = g.experts * g.n;
  p.g.tma_a = tensor_map(a_tma, static_cast<uint32_t>(tokens));
  p.g.tma_b = tensor_map(b_tma, static_cast<uint32_t>(b_box));
  const GemmResidency& resident = gemm_decode_residency(fn, tokens, stages);
  const int64_t active =
      std::min(g.experts, g.masked ? moe::kMoeMaxTopK * g.rows_per_expert : g.rows);
  const int split =
      forced_split != 0 ? forced_split : gemm_decode_split_tiles(active * p.tiles_n, k2, resident);
  cuda::LaunchConfig lc = gemm_decode_launch_config(tokens, stages, split, 0, stream);
  const int64_t items = int64_t{p.tiles_m} * p.tiles_n;
  const int64_t clusters = std::max<int64_t>(1, std::min<int64_t>(items, resident[split]));
  lc.grid_x = static_cast<unsigned>(clusters * split);
  cuda::launch_cluster(fn, lc, static_cast<unsigned>(split), params);
}

// Runs a validated call. False, launching nothing, for a SwiGLU call the wgmma paths cannot
// serve.
bool run_grouped(const GroupedOperands& g, void* stream, const MoeGemmTuning& tuning) {
  if (g.rows == 0 || g.n == 0) return true;  // after validation: a zero-size call is checked
  select_moe_gemm(g.a.dtype, g.out.dtype, g.rows, 0, g.n, g.k, g.experts, GemmTarget{});
  if (trace::enabled() && !g.swiglu) {  // the SwiGLU form has no entry point of its own
    trace::moe_grouped_gemm(g.masked ? "masked" : "contiguous", g.a.dtype, g.out.dtype, g.rows, g.n,
                            g.k, g.experts);
  }
  const bool tma_ok = g.k > 0 && tma_describable(g.a) && tma_describable(g.b);
  const GemmTarget target = gemm_target(g.a.device, tma_ok);
  const int64_t avg_rows = g.avg_rows();
  MoeGemmConfig cfg = select_moe_gemm(g.a.dtype, g.out.dtype, g.rows, avg_rows, g.n, g.k, g.experts,
                                      target, call_decode_rows(g, tuning));
  check_forced("moe_grouped_gemm", tuning, cfg.path == GemmPath::kSm90Decode,
               cfg.path == GemmPath::kSm90);
  if (g.swiglu && cfg.path == GemmPath::kSimt) return false;
  moe_gemm_tune(cfg, tuning, avg_rows, g.n, g.k);
  cfg.swiglu = g.swiglu ? 1 : 0;
  cfg.tma_out =
      cfg.path == GemmPath::kSm90 && moe_tma_out(g.out, target, cfg.bn, cfg.stages) ? 1 : 0;
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "moe_grouped_gemm", cfg, g.a.device, [&] { return moe_gemm_spec(cfg); });
  moe::MoeGemmParams p = grouped_params(g);
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(g.a.device);
  if (cfg.path == GemmPath::kSm90Decode) {
    launch_moe_decode(g, g.a, g.b, cfg.tokens, cfg.stages, g.k, kern.functions.at(0), tuning.split,
                      p, &p, stream);
    return true;
  }
  if (cfg.path == GemmPath::kSm90) {
    sm90_geometry(g, g.a, g.b, cfg.bn, cfg.stages, g.swiglu, cfg.tma_out != 0,
                  persistent_sms(cfg.persistent, g.a.device), p, lc);
    if (cfg.persistent == 2) {
      // The row tiles x ceil(column tiles / 2) pair items (moe_gemm_sm90_persistent_kernel's
      // PAIR form).
      launch_pair_clusters(kern.functions.at(0), lc, int64_t{p.tiles_m} * ((p.tiles_n + 1) / 2),
                           &p);
      return true;
    }
  } else {
    p.tiles_m = static_cast<int>(grouped_tiles_m(g, gemm::kGemmSimtTile));
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

// kjit_moe_grouped_gemm_masked's operands, validated.
GroupedOperands masked_operands(const DLTensor* a, const DLTensor* b, const DLTensor* counts,
                                DLTensor* out, bool swiglu) {
  GroupedOperands g;
  g.masked = true;
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

// An fp8 call's scales (moe_params.h, MoeGemmFp8Params), validated beside its operands.
struct GroupedScales {
  RowMatrix a, b;
  int64_t chunks = 0, n_blocks = 0;
};

GroupedScales grouped_scales(const GroupedOperands& g, const DLTensor* scale_a,
                             const DLTensor* scale_b) {
  if (g.a.dtype != DType::kE4M3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "a and b must be float8_e4m3fn, not {}",
         dtype_name(g.a.dtype));
  }
  GroupedScales s;
  s.chunks = ceil_div(g.k, int64_t{gemm::kFp8ChunkK});
  s.n_blocks = ceil_div(g.n, int64_t{gemm::kFp8ChunkK});
  s.a = scale_matrix(scale_a, "scale_a", g.a.device);
  s.b = scale_matrix(scale_b, "scale_b", g.a.device);
  if (g.masked) {
    moe_detail::check_shape(scale_a, "scale_a", {g.experts, g.rows_per_expert, s.chunks},
                            "[experts, max_rows, ceil(k / 128)]");
  } else {
    moe_detail::check_shape(scale_a, "scale_a", {g.rows, s.chunks}, "[rows, ceil(k / 128)]");
  }
  moe_detail::check_shape(scale_b, "scale_b", {g.experts, s.n_blocks, s.chunks},
                          "[experts, ceil(n / 128), ceil(k / 128)]");
  if (overlaps(g.out, s.a)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps scale_a");
  if (overlaps(g.out, s.b)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps scale_b");
  return s;
}

// Runs a validated fp8 call. False, launching nothing, for a SwiGLU call whose gate / up slices
// would straddle scale blocks (I not a multiple of 64).
bool run_grouped_fp8(const GroupedOperands& g, const GroupedScales& s, void* stream,
                     const MoeGemmTuning& tuning) {
  if (g.swiglu && g.out_cols() % (gemm::kFp8ChunkK / 2) != 0) return false;
  if (g.rows == 0 || g.n == 0) return true;  // after validation: a zero-size call is checked
  // What needs no device (out's dtype, the launch's limits) before any driver call.
  check_grouped_limits("moe_grouped_gemm_fp8", g.out.dtype, g.rows, g.n, g.experts);
  if (trace::enabled() && !g.swiglu) {
    trace::moe_grouped_gemm_fp8(g.masked, g.out.dtype, g.rows, g.n, g.k, g.experts);
  }
  const bool tma_ok = g.k > 0 && tma_describable(g.a) && tma_describable(g.b);
  const GemmTarget target = gemm_target(g.a.device, tma_ok);
  MoeGemmFp8Config cfg = select_moe_gemm_fp8(g.out.dtype, g.rows, g.n, g.k, g.experts, g.swiglu,
                                             target, call_decode_rows(g, tuning));
  check_forced("moe_grouped_gemm_fp8", tuning, cfg.tokens != 0, cfg.tokens == 0);
  moe_gemm_fp8_tune(cfg, tuning, g.avg_rows(), g.n, g.k, g.swiglu);
  cfg.tma_out = cfg.tokens == 0 && moe_tma_out(g.out, target, cfg.bn, cfg.stages) ? 1 : 0;
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "moe_grouped_gemm_fp8", cfg, g.a.device, [&] { return moe_gemm_fp8_spec(cfg); });
  moe::MoeGemmFp8Params p{};
  p.grouped = grouped_params(g);
  p.scale_a = static_cast<const float*>(s.a.data);
  p.scale_b = static_cast<const float*>(s.b.data);
  p.chunks = s.chunks;
  p.n_blocks = s.n_blocks;
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(g.a.device);
  if (cfg.tokens != 0) {
    launch_moe_decode(g, as_pairs(g.a), as_pairs(g.b), cfg.tokens, cfg.stages, g.k / 2,
                      kern.functions.at(0), tuning.split, p.grouped, &p, stream);
    return true;
  }
  sm90_geometry(g, as_pairs(g.a), as_pairs(g.b), cfg.bn, cfg.stages, g.swiglu, cfg.tma_out != 0,
                persistent_sms(cfg.persistent, g.a.device), p.grouped, lc);
  if (cfg.persistent == 2) {
    launch_pair_clusters(kern.functions.at(0), lc,
                         int64_t{p.grouped.tiles_m} * ((p.grouped.tiles_n + 1) / 2), &p);
    return true;
  }
  cuda::launch(kern.functions.at(0), lc, &p);
  return true;
}

}  // namespace

void moe_gemm_width(MoeGemmConfig& c, const MoeGemmTuning& t) {
  if (t.bn == 0) return;
  if (t.bn != 128 && t.bn != 256) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm: the tile width is 128 or 256, not {}",
         t.bn);
  }
  if (c.path != GemmPath::kSm90) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "moe_grouped_gemm: a tile width is the sm90 tile kernel's setting, not the {} path's",
         gemm_path_name(c.path));
  }
  c.bn = t.bn;
  c.stages = sm90_default_stages(t.bn);
}

void moe_gemm_fp8_width(MoeGemmFp8Config& c, const MoeGemmTuning& t, int64_t n, bool swiglu) {
  if (t.bn == 0) return;
  if (t.bn != 128 && t.bn != 256) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm_fp8: the tile width is 128 or 256, not {}",
         t.bn);
  }
  if (c.tokens != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "moe_grouped_gemm_fp8: a tile width is the tile kernel's setting, not the decode path's");
  }
  if (t.bn == 128) {
    c.bn = kMoeGemmFp8Bn;
    c.stages = kMoeGemmFp8Stages;
    return;
  }
  // A SwiGLU tile's halves are 128 gate and 128 up rows, each one 128-row block of scales.
  if (swiglu && (n / 2) % 128 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "moe_grouped_gemm_fp8: the 256-wide SwiGLU tile needs I a multiple of 128, not {}", n / 2);
  }
  c.bn = 256;
  c.stages = sm90_default_stages(256);
}

void moe_gemm_tune(MoeGemmConfig& c, const MoeGemmTuning& t, int64_t avg_rows, int64_t n,
                   int64_t k) {
  moe_gemm_width(c, t);
  c.persistent =
      moe_gemm_persistent(t, c.path == GemmPath::kSm90, moe_pairs_pay(avg_rows, n, k, c.bn));
}

void moe_gemm_fp8_tune(MoeGemmFp8Config& c, const MoeGemmTuning& t, int64_t avg_rows, int64_t n,
                       int64_t k, bool swiglu) {
  moe_gemm_fp8_width(c, t, n, swiglu);
  c.persistent = moe_gemm_persistent(t, c.tokens == 0, moe_pairs_pay(avg_rows, n, k, c.bn));
}

bool moe_pairs_pay(int64_t avg_rows, int64_t n, int64_t k, int bn) {
  // Measured on an H100 (2026-12-07, cupti read, checked, one binary): DeepSeek-V3's gate_up at
  // 4096 tokens (128 rows an expert, k 7168) bf16 5729.7 -> 5455.4 us (1.05x), fp8 3076.4 ->
  // 2913.0 (1.06x); where experts have several row tiles or K is short the pairs lost:
  // Qwen3-30B-A3B (256 rows, k 2048) bf16 362.5 -> 427.8, fp8 226.5 -> 239.5, Mixtral (1024 rows, k
  // 4096) 2631.0 -> 2776.9.
  return avg_rows <= 128 && k >= 4096 && n >= 2 * int64_t{bn};
}

int moe_gemm_persistent(const MoeGemmTuning& t, bool tiles, bool pairs_pay) {
  if (t.pair) return 2;  // check_moe_forced: the path is the tile kernel's then
  if (t.persistent) return 1;
  // The persistent form by default on the tile path: on the H200 it ran Qwen3-30B-A3B's gate_up
  // at 4096 tokens at 516 TFLOP/s (one block per item: 450), DeepSeek-V3's at 337 (320),
  // Mixtral's at 651 (632), skewed Qwen3 at 467 (448); fp8, Qwen3's at 734 (601). With
  // silu_and_mul in the epilogue (an H100, 2026-12-05): bf16 482 TFLOP/s (429), fp8 802 (675).
  if (!tiles || t.force == MoeGemmForce::kTiles) return 0;
  return pairs_pay ? 2 : 1;
}

int64_t moe_tuned_decode_rows(const MoeGemmTuning& t, bool masked, int64_t rows,
                              int64_t rows_per_expert, int64_t experts) {
  if (t.force == MoeGemmForce::kTiles || t.persistent || t.pair) return 0;
  if (t.force == MoeGemmForce::kDecode) {
    return std::clamp<int64_t>(masked ? rows_per_expert : rows, 1, moe::kMoeDecodeMaxTokens);
  }
  return moe_decode_rows(masked, rows, rows_per_expert, experts);
}

void check_moe_forced(const char* op, const MoeGemmTuning& t, bool decode, bool tiles) {
  if ((t.force == MoeGemmForce::kDecode && !decode) ||
      ((t.force == MoeGemmForce::kTiles || t.persistent || t.pair) && !tiles)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: the forced {} kernel cannot serve this call", op,
         t.force == MoeGemmForce::kDecode ? "decode"
         : t.persistent || t.pair         ? "persistent 128-row tile"
                                          : "128-row tile");
  }
}

int64_t moe_decode_rows(bool masked, int64_t rows, int64_t rows_per_expert, int64_t experts) {
  const int64_t widest = moe::kMoeDecodeMaxTokens;
  if (masked) return rows_per_expert <= widest ? rows_per_expert : 0;
  if (rows <= widest) return rows;
  if (rows > moe::kMoeMaxTopK * widest || experts < 1) return 0;
  // Few rows an expert: 4 x the even share leaves a second tile to rare experts (Qwen3-30B-A3B at
  // 64 tokens: 512 rows of 128 experts, 4 each, a 16-token tile; Mixtral at 64: 128 of 8, 64).
  const int64_t share = 4 * ceil_div(rows, experts);
  return share <= widest ? share : 0;
}

MoeGemmConfig select_moe_gemm(DType dtype, DType out_dtype, int64_t rows, int64_t avg_rows,
                              int64_t n, int64_t k, int64_t experts, const GemmTarget& target,
                              int64_t decode_rows) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_grouped_gemm supports bf16 and fp16 a and b, not {}",
         dtype_name(dtype));
  }
  check_grouped_limits("moe_grouped_gemm", out_dtype, rows, n, experts);
  MoeGemmConfig c;
  c.dtype = dtype;
  c.out_dtype = out_dtype;
  // Decode shapes: the weight streams through the decode kernel (each active expert's bytes read
  // once, the tokens as wgmma's narrow side) instead of 128-row tiles of mostly padding.
  const GemmDecodeTile tile = moe_decode_tile(target, decode_rows, rows, n, k, experts, false);
  if (tile.tokens != 0) {
    c.path = GemmPath::kSm90Decode;
    c.tokens = tile.tokens;
    c.stages = tile.stages;
    return c;
  }
  // Wide tiles once experts have rows to fill them (moe_wide_tile). Whether the tiles run
  // persistent is the call's (moe_gemm_persistent).
  c.bn = moe_wide_tile(avg_rows) ? 256 : 128;
  c.stages = sm90_default_stages(c.bn);
  if (sm90_can_run(target, rows, experts * n, k, c.bn, c.stages)) {
    c.path = GemmPath::kSm90;
    return c;
  }
  c.path = GemmPath::kSimt;
  c.bn = 0;
  c.stages = 0;
  return c;
}

bool moe_tma_out(const RowMatrix& out, const GemmTarget& target, int bn, int stages) {
  GemmTarget t = target;
  t.tma_store_ok = tma_store_ok(out, 0.0f);  // the grouped GEMMs never read out
  return gemm_tma_out(t, out.dtype, bn, stages);
}

jit::Spec moe_gemm_spec(const MoeGemmConfig& c) {
  const bool decode = c.path == GemmPath::kSm90Decode;
  const bool sm90 = c.path == GemmPath::kSm90 || decode;
  jit::SpecBuilder b(
      "moe_grouped_gemm",
      sm90 ? std::vector<std::string>{"common", "activation", "gemm", "moe"}
           : std::vector<std::string>{"common", "gemm", "moe"},
      decode              ? "moe/moe_gemm_decode_sm90.cuh"
      : c.persistent != 0 ? "moe/moe_gemm_persistent_sm90.cuh"
      : sm90              ? "moe/moe_gemm_sm90.cuh"
                          : "moe/moe_gemm_simt.cuh",
      sm90 ? std::vector<std::string>{"sm_90a"} : std::vector<std::string>{"sm_80+"});
  b.choice("path", gemm_path_name(c.path), static_cast<int>(c.path));
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.type("out_dtype", dtype_name(c.out_dtype), device_type_name(c.out_dtype));
  if (decode) {
    b.value("tokens", c.tokens).value("stages", c.stages).flag("swiglu", c.swiglu != 0, true);
    b.entry("kjit::moe::moe_gemm_decode_sm90_kernel",
            {"dtype", "out_dtype", "tokens", "stages", "swiglu"});
  } else if (sm90) {
    b.value("bn", c.bn).value("stages", c.stages).flag("swiglu", c.swiglu != 0, true);
    b.flag("persistent", c.persistent != 0, /*omit_false=*/true);
    b.flag("tma_out", c.tma_out != 0, /*omit_false=*/true);
    if (c.persistent != 0) {
      b.flag("pair", c.persistent == 2, /*omit_false=*/true);
      b.entry("kjit::moe::moe_gemm_sm90_persistent_kernel",
              {"dtype", "out_dtype", "bn", "stages", "swiglu", "tma_out", "pair"});
    } else {
      b.entry("kjit::moe::moe_gemm_sm90_kernel",
              {"dtype", "out_dtype", "bn", "stages", "swiglu", "tma_out"});
    }
  } else {
    b.entry("kjit::moe::moe_gemm_simt_kernel", {"dtype", "out_dtype"});
  }
  return b.build();
}

void moe_grouped_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* expert_offsets,
                      DLTensor* out, void* stream, const MoeGemmTuning& tuning) {
  run_grouped(contiguous_operands(a, b, expert_offsets, out, false), stream, tuning);
}

void moe_grouped_gemm_masked(const DLTensor* a, const DLTensor* b, const DLTensor* counts,
                             DLTensor* out, void* stream, const MoeGemmTuning& tuning) {
  run_grouped(masked_operands(a, b, counts, out, false), stream, tuning);
}

bool moe_grouped_gemm_swiglu(const DLTensor* a, const DLTensor* w13, const DLTensor* expert_offsets,
                             DLTensor* out, void* stream, const MoeGemmTuning& tuning) {
  return run_grouped(contiguous_operands(a, w13, expert_offsets, out, true), stream, tuning);
}

bool moe_grouped_gemm_swiglu_masked(const DLTensor* a, const DLTensor* w13, const DLTensor* counts,
                                    DLTensor* out, void* stream, const MoeGemmTuning& tuning) {
  return run_grouped(masked_operands(a, w13, counts, out, true), stream, tuning);
}

MoeGemmFp8Config select_moe_gemm_fp8(DType out_dtype, int64_t rows, int64_t n, int64_t k,
                                     int64_t experts, bool swiglu, const GemmTarget& target,
                                     int64_t decode_rows) {
  check_grouped_limits("moe_grouped_gemm_fp8", out_dtype, rows, n, experts);
  if (swiglu && (n % 2 != 0 || (n / 2) % (gemm::kFp8ChunkK / 2) != 0)) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "moe_grouped_gemm_fp8: the SwiGLU epilogue needs n = 2 I with I a multiple of 64, not "
         "n = {}",
         n);
  }
  if (!sm90_can_run(target, rows, experts * n, k, kMoeGemmFp8Bn, kMoeGemmFp8Stages)) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "moe_grouped_gemm_fp8 runs on sm_90a tensor cores only: it needs a compute capability "
         "9.0 device (this one: {}.{}) and e4m3 a and b TMA can read (16-byte aligned bases and "
         "row strides, k > 0 a multiple of 16; here {})",
         target.cc_major, target.cc_minor, target.tma_ok ? "yes" : "no");
  }
  MoeGemmFp8Config c;
  c.out_dtype = out_dtype;
  // The one-item kernel, not its persistent form (MoeGemmTuning::persistent), unmeasured as the
  // bf16 one's (select_moe_gemm); an item is ceil(k / 128) chunks (Qwen3-30B-A3B: 16), so the
  // fill it hides is a larger share: predicted 5-10% over the one-item kernel at 4096 tokens.
  c.stages = kMoeGemmFp8Stages;
  c.swiglu = swiglu ? 1 : 0;
  // Decode shapes: the decode kernel (k / 2: its stages count e4m3 pairs).
  const GemmDecodeTile tile = moe_decode_tile(target, decode_rows, rows, n, k / 2, experts, true);
  if (tile.tokens != 0) {
    c.tokens = tile.tokens;
    c.stages = tile.stages;
    return c;
  }
  // The 256-wide tile from 256 rows an expert (moe_fp8_wide_tile), where a SwiGLU tile's 128 gate
  // and 128 up rows are each one block of scales (I a multiple of 128). Qwen3-30B-A3B's gate_up
  // at 4096 tokens (256 rows an expert) on an H100 (cupti read, checked, session 22): 318.8 ->
  // 288.5 us, SwiGLU 258.1 -> 231.6.
  if (moe_fp8_wide_tile(rows / std::max<int64_t>(experts, 1)) && (!swiglu || (n / 2) % 128 == 0) &&
      sm90_can_run(target, rows, experts * n, k, 256, sm90_default_stages(256))) {
    c.bn = 256;
    c.stages = sm90_default_stages(256);
  }
  return c;
}

jit::Spec moe_gemm_fp8_spec(const MoeGemmFp8Config& c) {
  const bool decode = c.tokens != 0;
  jit::SpecBuilder b("moe_grouped_gemm_fp8", {"common", "activation", "gemm", "moe"},
                     decode              ? "moe/moe_gemm_decode_sm90.cuh"
                     : c.persistent != 0 ? "moe/moe_gemm_persistent_sm90.cuh"
                                         : "moe/moe_gemm_fp8_sm90.cuh",
                     {"sm_90a"});
  b.type("out_dtype", dtype_name(c.out_dtype), device_type_name(c.out_dtype));
  if (decode) {
    b.value("tokens", c.tokens).value("stages", c.stages).flag("swiglu", c.swiglu != 0, true);
    b.entry("kjit::moe::moe_gemm_fp8_decode_sm90_kernel",
            {"out_dtype", "tokens", "stages", "swiglu"});
    return b.build();
  }
  b.value("bn", c.bn).value("stages", c.stages).flag("swiglu", c.swiglu != 0, true);
  b.flag("persistent", c.persistent != 0, /*omit_false=*/true);
  b.flag("tma_out", c.tma_out != 0, /*omit_false=*/true);
  if (c.persistent != 0) {
    b.flag("pair", c.persistent == 2, /*omit_false=*/true);
    b.entry("kjit::moe::moe_gemm_fp8_sm90_persistent_kernel",
            {"out_dtype", "bn", "stages", "swiglu", "tma_out", "pair"});
  } else {
    b.entry("kjit::moe::moe_gemm_fp8_sm90_kernel",
            {"out_dtype", "bn", "stages", "swiglu", "tma_out"});
  }
  return b.build();
}

void moe_grouped_gemm_fp8(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
                          const DLTensor* scale_b, const DLTensor* expert_offsets, DLTensor* out,
                          void* stream, const MoeGemmTuning& tuning) {
  const GroupedOperands g = contiguous_operands(a, b, expert_offsets, out, false);
  run_grouped_fp8(g, grouped_scales(g, scale_a, scale_b), stream, tuning);
}

void moe_grouped_gemm_fp8_masked(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
                                 const DLTensor* scale_b, const DLTensor* counts, DLTensor* out,
                                 void* stream, const MoeGemmTuning& tuning) {
  const GroupedOperands g = masked_operands(a, b, counts, out, false);
  run_grouped_fp8(g, grouped_scales(g, scale_a, scale_b), stream, tuning);
}

bool moe_grouped_gemm_fp8_swiglu(const DLTensor* a, const DLTensor* w13, const DLTensor* scale_a,
                                 const DLTensor* w13_scale, const DLTensor* expert_offsets,
                                 DLTensor* out, void* stream, const MoeGemmTuning& tuning) {
  const GroupedOperands g = contiguous_operands(a, w13, expert_offsets, out, true);
  return run_grouped_fp8(g, grouped_scales(g, scale_a, w13_scale), stream, tuning);
}

bool moe_grouped_gemm_fp8_swiglu_masked(const DLTensor* a, const DLTensor* w13,
                                        const DLTensor* scale_a, const DLTensor* w13_scale,
                                        const DLTensor* counts, DLTensor* out, void* stream,
                                        const MoeGemmTuning& tuning) {
  const GroupedOperands g = masked_operands(a, w13, counts, out, true);
  return run_grouped_fp8(g, grouped_scales(g, scale_a, w13_scale), stream, tuning);
}

}  // namespace kjit::ops
