#include "ops/gemm/gemm_fp8.hpp"

#include <cmath>
#include <optional>
#include <string>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "ops/pdl.hpp"
#include "gemm/gemm_fp8_params.h"
#include "ops/gemm/gemm_fp8_desc.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "ops/tensor.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

RowMatrix as_pairs(RowMatrix m) {
  m.dtype = DType::kBF16;
  m.cols /= 2;
  m.row_stride /= 2;
  return m;
}

RowMatrix scale_matrix(const DLTensor* t, const char* name, int device, const char* operand) {
  const RowMatrix s = as_row_matrix(t, name);
  if (s.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be fp32, not {}", name, dtype_name(s.dtype));
  }
  if (s.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", name, s.device,
         operand, device);
  }
  if (s.rows > 1 && s.row_stride != s.cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be compact (row stride {}, {} columns)", name,
         s.row_stride, s.cols);
  }
  return s;
}

namespace {

std::string shape_text(const DLTensor* t) {
  std::string s = "[";
  for (int i = 0; i < t->ndim; ++i) s += (i ? ", " : "") + std::to_string(t->shape[i]);
  return s + "]";
}

// Where the kernels find scale(i, j, chunk) (kernels/gemm/gemm_fp8_params.h), from the scales'
// shapes (kjit.h): per tensor [1], per row [m] / [n], or both 2-D blocks.
struct ScaleLayout {
  Fp8Scales scales = Fp8Scales::kTensorRow;
  long long sa_row = 0, sa_chunk = 0, sb_row = 0, sb_chunk = 0, sb_rows = 1;
};

ScaleLayout scale_layout(const DLTensor* scale_a, const DLTensor* scale_b, int64_t m, int64_t n,
                         int64_t k) {
  const int64_t chunks = ceil_div(k, gemm::kFp8ChunkK);
  ScaleLayout l;
  if (scale_a->ndim == 2 || scale_b->ndim == 2) {
    const int64_t n_blocks = ceil_div(n, gemm::kFp8ChunkK);
    if (scale_a->ndim != 2 || scale_a->shape[0] != m || scale_a->shape[1] != chunks) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "scale_a is {}: block scales are [m, ceil(k / 128)] = [{}, {}] (both scales 2-D)",
           shape_text(scale_a), m, chunks);
    }
    if (scale_b->ndim != 2 || scale_b->shape[0] != n_blocks || scale_b->shape[1] != chunks) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "scale_b is {}: block scales are [ceil(n / 128), ceil(k / 128)] = [{}, {}] (both "
           "scales 2-D)",
           shape_text(scale_b), n_blocks, chunks);
    }
    l.scales = Fp8Scales::kBlock;
    l.sa_row = chunks;
    l.sa_chunk = 1;
    l.sb_row = chunks;
    l.sb_chunk = 1;
    l.sb_rows = gemm::kFp8ChunkK;
    return l;
  }
  // 1-D: [1] per tensor (stride 0), else one per row. m = 1 or n = 1 makes the two the same.
  if (scale_a->ndim != 1 || (scale_a->shape[0] != 1 && scale_a->shape[0] != m)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale_a is {}: [1] (per tensor) or [m] = [{}] (per row)",
         shape_text(scale_a), m);
  }
  if (scale_b->ndim != 1 || (scale_b->shape[0] != 1 && scale_b->shape[0] != n)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale_b is {}: [1] (per tensor) or [n] = [{}] (per row)",
         shape_text(scale_b), n);
  }
  l.sa_row = scale_a->shape[0] == 1 ? 0 : 1;
  l.sb_row = scale_b->shape[0] == 1 ? 0 : 1;
  return l;
}

}  // namespace

const char* fp8_scales_name(Fp8Scales s) {
  return s == Fp8Scales::kBlock ? "block" : "tensor_row";
}

int gemm_fp8_decode_stages(int tokens, int max_smem_optin) {
  return gemm_decode_stages(tokens, max_smem_optin, gemm::gemm_fp8_decode_blocks_per_sm(tokens));
}

bool gemm_fp8_sm90_width_ok(int bn, Fp8Scales scales) {
  return bn == 128 || bn == 256 || (bn == 192 && scales != Fp8Scales::kBlock);
}

int gemm_fp8_wide_tile(const GemmTarget& target, Fp8Scales scales, int64_t m, int64_t n,
                       int64_t k) {
  // Per tensor / per row the 192-wide tile (5 stages of 40 KB), with block scales the 256-wide one
  // (4 of 48 KB; 192 columns would straddle two 128-row blocks of b's scales). Both move fewer
  // bytes a FLOP from L2 into shared memory than 128 x 128 tiles (17% and 25% fewer). On an H100
  // (cupti read, checked): per tensor / per row the 192-wide tile ran 4096 x 28672 x 4096 987.6 ->
  // 922.6 us, 8192^3 1046.3 -> 915.9, 8192 x 28672 x 4096 even (1972.2 / 1967.7; session 21), the
  // 256-wide one there 902.5 and 917.7 against 192's 921.9 and 907.8 (session 22: even, so 192
  // stays); with block scales the 256-wide tile ran 1405.7 -> 1198.6 and 1494.0 -> 1261.4 (session
  // 22). Wider tiles are more work each, so one is taken where the per-FLOP gain survives the
  // waves: whole waves of wide tiles times their width at most 1.1x whole waves of 128-wide ones
  // times 128, over at least 4 waves (the measured shapes ran 16-73).
  const int bn = scales == Fp8Scales::kBlock ? 256 : 192;
  const int stages = sm90_default_stages(bn);
  if (target.sm_count <= 0 || !sm90_can_run(target, m, n, k, bn, stages)) return 0;
  const int64_t tm = ceil_div(m, int64_t{gemm::kGemmBlockM});
  const int64_t sms = target.sm_count;
  const int64_t waves128 = ceil_div(tm * ceil_div(n, int64_t{128}), sms);
  const int64_t waves_wide = ceil_div(tm * ceil_div(n, int64_t{bn}), sms);
  return waves_wide >= 4 && waves_wide * bn * 10 <= waves128 * 128 * 11 ? bn : 0;
}

GemmFp8Config select_gemm_fp8(DType out_dtype, Fp8Scales scales, int64_t m, int64_t n, int64_t k,
                              const GemmTarget& target) {
  if (!is_float(out_dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "gemm_fp8's out is bf16, fp16 or fp32, not {}",
         dtype_name(out_dtype));
  }
  GemmFp8Config c;
  c.out_dtype = out_dtype;
  c.scales = scales;
  // The 128-wide tile, 6 stages (the bf16 kernel's at that width); the one-tile kernel (the
  // persistent form, tactic sm90_bn128_s6_p, measured even with it: H200 2026-12-05, H100
  // 2026-12-06). gemm_fp8_wide_tile may take a wider tile instead.
  const int bn = 128;
  const int stages = 6;
  const bool tiles = sm90_can_run(target, m, n, k, bn, stages);
  // Few rows: a stream of the weight, as kjit_gemm's decode path (its k in 16-bit elements).
  // Past 64 rows each decode block rereads the tokens' K slice, and the tiles win wherever K is
  // at most 8192, kjit_gemm's rule (gemm_tiles_beat_decode) in K elements: H100 (2026-12-06,
  // one call, cupti read) 128 x 8192 x 8192 on the tiles 30.1 / 30.4 / 48.8 us (per tensor /
  // row / 128-block scales) against the decode kernel's 43.0 / 43.5 / 62.2, while at
  // 128 x 4096 x 14336 the decode kernel's 40.2 / 40.3 / 70.0 beat 44.3 / 44.6 / 79.5.
  const GemmDecodeTile tile =
      gemm_decode_tile(target, m, n, (k + 1) / 2, gemm::gemm_fp8_decode_blocks_per_sm);
  if (tile.tokens != 0 && !(tiles && m > 64 && gemm_tiles_beat_decode(target, m, n, k))) {
    c.path = GemmPath::kSm90Decode;
    c.tokens = tile.tokens;
    c.stages = tile.stages;
    return c;
  }
  if (tiles) {
    c.path = GemmPath::kSm90;
    const int wide = gemm_fp8_wide_tile(target, scales, m, n, k);
    c.bn = wide != 0 ? wide : bn;
    c.stages = sm90_stages_for(target, out_dtype, c.bn);
    c.tma_out = gemm_tma_out(target, out_dtype, c.bn, c.stages) ? 1 : 0;
    return c;
  }
  // The mma.sync kernel's one width and depth (its chunk sums double the accumulators).
  const bool e4m3_mma = target.cc_major * 10 + target.cc_minor >= 89;
  if (e4m3_mma && mma_sm80_can_run(target, m, n, k, 64, 4)) {
    c.path = GemmPath::kMmaSm80;
    c.scales = Fp8Scales::kTensorRow;  // it promotes every chunk in every mode: one kernel
    c.bn = 64;
    c.stages = 4;
    return c;
  }
  check_simt_grid("gemm_fp8", m, n);
  c.path = GemmPath::kSimt;
  return c;
}

jit::Spec gemm_fp8_spec(const GemmFp8Config& c) {
  const bool sm90 = c.path == GemmPath::kSm90;
  const bool decode = c.path == GemmPath::kSm90Decode;
  const bool mma = c.path == GemmPath::kMmaSm80;
  jit::SpecBuilder b("gemm_fp8", {"common", "gemm"},
                     sm90     ? "gemm/gemm_fp8_sm90.cuh"
                     : decode ? "gemm/gemm_fp8_decode_sm90.cuh"
                     : mma    ? "gemm/gemm_fp8_mma.cuh"
                              : "gemm/gemm_fp8_simt.cuh",
                     sm90 || decode ? std::vector<std::string>{"sm_90a"}
                     : mma          ? std::vector<std::string>{"sm_89+"}
                                    : std::vector<std::string>{"sm_80+"});
  b.choice("path", gemm_path_name(c.path), static_cast<int>(c.path));
  b.type("out_dtype", dtype_name(c.out_dtype), device_type_name(c.out_dtype));
  if (mma) {
    b.value("bn", c.bn).value("stages", c.stages);
    b.entry("kjit::gemm::gemm_fp8_mma_kernel", {"out_dtype", "bn", "stages"});
    return b.build();
  }
  if (decode) {
    b.value("tokens", c.tokens).value("stages", c.stages);
    b.flag("block", c.scales == Fp8Scales::kBlock);
    b.entry("kjit::gemm::gemm_fp8_decode_sm90_kernel", {"out_dtype", "tokens", "stages", "block"});
    return b.build();
  }
  if (!sm90) {
    b.entry("kjit::gemm::gemm_fp8_simt_kernel", {"out_dtype"});
    return b.build();
  }
  b.value("bn", c.bn).value("stages", c.stages);
  b.flag("block", c.scales == Fp8Scales::kBlock);
  b.flag("persistent", c.persistent != 0, /*omit_false=*/true);
  b.flag("tma_out", c.tma_out != 0, /*omit_false=*/true);
  if (c.persistent != 0) {
    b.flag("pair", c.persistent == 2, /*omit_false=*/true);
    b.entry("kjit::gemm::gemm_fp8_sm90_persistent_kernel",
            {"out_dtype", "bn", "stages", "block", "tma_out", "pair"});
  } else {
    b.entry("kjit::gemm::gemm_fp8_sm90_kernel", {"out_dtype", "bn", "stages", "block", "tma_out"});
  }
  return b.build();
}

GemmFp8Config gemm_fp8_forced_config(const std::string& tactic, const GemmFp8Config& selected,
                                     int64_t m, int64_t n, int64_t k, const GemmTarget& target) {
  const std::optional<GemmTactic> t = GemmTactic::parse(tactic);
  if (t && t->path == GemmPath::kSm90Decode) {
    // The decode kernel, also where the selection takes the tiles (m <= 128), at the narrowest
    // token tile that holds m, a named ring depth or the tile's own, the call's scale mode; the
    // tactic validity of kjit_gemm's decode path over k's e4m3 pairs (an sm_90a device, TMA-ready
    // operands, TMA's sides), the fp8 ring in shared memory. Its split is the launch's
    // (GemmFp8Tuning::split, else the tactic's).
    const int stages =
        t->stages != 0 ? t->stages : gemm_fp8_decode_stages(t->tokens, target.max_smem_optin);
    if (!gemm_tactic_valid(*t, gemm_m_bucket(m), n, (k + 1) / 2, target) ||
        gemm::gemm_decode_smem_bytes(t->tokens, stages) > target.max_smem_optin) {
      fail(
          KJIT_ERROR_INVALID_ARGUMENT,
          "gemm_fp8: tactic '{}' is not valid for this call (decode_t<tokens>[_s<stages>]_split<s> "
          "with m <= 128 at the narrowest token tile that holds m, its stages in shared memory, on "
          "an sm_90a device with TMA-ready operands)",
          tactic);
    }
    GemmFp8Config c = selected;
    c.path = GemmPath::kSm90Decode;
    c.tokens = t->tokens;
    c.stages = stages;
    c.bn = 0;
    c.persistent = 0;
    c.tma_out = 0;
    return c;
  }
  // The e4m3 stage holds the bytes of a bf16 stage of the same tile, so sm90_can_run's shared
  // memory check is the fp8 kernel's too (k in bytes is at least its pairs).
  if (!t || t->path != GemmPath::kSm90 || !gemm_fp8_sm90_width_ok(t->bn, selected.scales) ||
      t->stages < 2 || t->stages > 8 || !sm90_can_run(target, m, n, k, t->bn, t->stages)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "gemm_fp8: tactic '{}' is not valid for this call (sm90_bn128_s<2..8>[_p|_p2], or "
         "sm90_bn192_s<2..5>[_p|_p2] without block scales, sm90_bn256_s<2..4>[_p|_p2], where the "
         "sm90 kernel runs)",
         tactic);
  }
  GemmFp8Config c = selected;
  c.path = GemmPath::kSm90;  // the scales stay the call's (only the mma.sync path folds them)
  c.bn = t->bn;
  c.stages = t->stages;
  c.tokens = 0;
  c.persistent = t->pair ? 2 : t->persistent ? 1 : 0;
  c.tma_out = gemm_tma_out(target, c.out_dtype, c.bn, c.stages) ? 1 : 0;
  return c;
}

void gemm_fp8(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
              const DLTensor* scale_b, DLTensor* out, float alpha, float beta, void* stream,
              const GemmFp8Tuning& tuning) {
  const GemmOperands g = gemm_operands(a, b, out);
  if (g.a.dtype != DType::kE4M3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "a and b must be float8_e4m3fn, not {}",
         dtype_name(g.a.dtype));
  }
  const RowMatrix sa = scale_matrix(scale_a, "scale_a", g.a.device);
  const RowMatrix sb = scale_matrix(scale_b, "scale_b", g.a.device);
  // a's rows from its shape: the RowMatrix of a tensor without columns (k = 0) has none.
  int64_t m = 1;
  for (int i = 0; i + 1 < a->ndim; ++i) {
    if (__builtin_mul_overflow(m, a->shape[i], &m)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "a: its leading dims overflow int64");
    }
  }
  const ScaleLayout l = scale_layout(scale_a, scale_b, m, g.n, g.k);
  if (overlaps(g.out, sa)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps scale_a");
  if (overlaps(g.out, sb)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps scale_b");
  if (!std::isfinite(alpha) || !std::isfinite(beta)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "alpha ({}) and beta ({}) must be finite", alpha, beta);
  }
  if (g.n == 0 || m == 0) return;  // after validation: a zero-size call is still checked
  // Unsupported out dtypes are reported before any driver call, so also without a GPU.
  select_gemm_fp8(g.out.dtype, l.scales, m, g.n, g.k, GemmTarget{});
  if (trace::enabled()) {
    trace::gemm_fp8(g.out.dtype, fp8_scale_mode(l.scales, l.sa_row != 0, l.sb_row != 0, m, g.n), m,
                    g.n, g.k);
  }

  GemmTarget target =
      gemm_target(g.a.device, g.k > 0 && tma_describable(g.a) && tma_describable(g.b),
                  cp_async_ready(g.a) && cp_async_ready(g.b));
  target.tma_store_ok = tma_store_ok(g.out, beta);
  const GemmFp8Config selected = select_gemm_fp8(g.out.dtype, l.scales, m, g.n, g.k, target);
  const GemmFp8Config cfg =
      tuning.tactic.empty() ? selected
                            : gemm_fp8_forced_config(tuning.tactic, selected, m, g.n, g.k, target);
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "gemm_fp8", cfg, g.a.device, [&] { return gemm_fp8_spec(cfg); });

  gemm::GemmFp8Params p{};
  p.g = gemm_params(g, alpha, beta);
  p.scale_a = static_cast<const float*>(sa.data);
  p.scale_b = static_cast<const float*>(sb.data);
  p.sa_row = l.sa_row;
  p.sa_chunk = l.sa_chunk;
  p.sb_row = l.sb_row;
  p.sb_chunk = l.sb_chunk;
  p.sb_rows = l.sb_rows;
  cuda::ScopedDevice scope(g.a.device);
  const CUfunction fn = kern.functions.at(0);
  if (cfg.path == GemmPath::kSm90Decode) {
    // The split: the tuning's, else a forced decode tactic's, else the residency's.
    int split = tuning.split;
    if (split == 0 && !tuning.tactic.empty()) split = GemmTactic::parse(tuning.tactic)->split;
    if (split == 0) split = gemm_decode_split_for(fn, cfg.tokens, cfg.stages, g.n, (g.k + 1) / 2);
    p.g.tma_a = tensor_map(as_pairs(g.a), static_cast<uint32_t>(cfg.tokens));
    p.g.tma_b = tensor_map(as_pairs(g.b), gemm::kGemmDecodeRows);
    // As kjit_gemm's decode path (gemm.cpp, launch_gemm): the producer loads only b before the
    // wait; the consumers read a's codes and both scales after it.
    const bool dependent = tuning.weights_early && elementwise_pdl(g.a.device);
    p.g.weights_early = dependent ? 1 : 0;
    cuda::launch_cluster(fn, gemm_decode_launch_config(cfg.tokens, cfg.stages, split, g.n, stream),
                         static_cast<unsigned>(split), &p, dependent);
    return;
  }
  const int sms = cfg.persistent != 0 ? cuda::device_info(g.a.device).sm_count : 0;
  const cuda::LaunchConfig lc =
      gemm_launch_config(cfg.path, cfg.bn, cfg.stages, m, g.n, stream, sms, cfg.tma_out != 0);
  if (cfg.path == GemmPath::kSm90) {
    p.g.tma_a = tensor_map(as_pairs(g.a), gemm::kGemmBlockM);
    p.g.tma_b = tensor_map(as_pairs(g.b), static_cast<uint32_t>(cfg.bn));
    if (cfg.tma_out != 0) p.g.tma_out = out_tensor_map(g.out);
  }
  if (cfg.persistent == 2) {
    launch_sm90_pairs(fn, lc, m, g.n, cfg.bn, &p);
    return;
  }
  cuda::launch(fn, lc, &p);
}

}  // namespace kjit::ops
