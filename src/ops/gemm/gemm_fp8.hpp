// fp8 GEMM (out = alpha * dequant(a) . dequant(b)^T + beta * out, e4m3 a and b with fp32 scales
// per tensor, per row or per 128-block): scale-mode inference, path choice, spec and launch
// (device code: kernels/gemm/gemm_fp8_*.cuh). The registry entry is in gemm_fp8_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/dtype.hpp"
#include "ops/gemm/gemm.hpp"

namespace kjit::ops {

// How the scales apply, read off their shapes (kjit.h): kTensorRow covers per tensor and per row
// on either side (one scale per output, applied once), kBlock DeepSeek-V3's 1 x 128 (a) and
// 128 x 128 (b) blocks (one per output and 128-wide K chunk, applied per chunk).
enum class Fp8Scales { kTensorRow = 0, kBlock = 1 };

const char* fp8_scales_name(Fp8Scales s);  // "tensor_row", "block"

// One compiled fp8 GEMM variant. bn (128 on sm90, 64 on the mma.sync path), tokens (the decode
// path's token tile), stages and persistent (sm90: gemm_fp8_sm90_persistent_kernel) as in
// GemmConfig (0 on the fallback, which serves every scale mode with one kernel; so does the
// mma.sync path, whose scales is always kTensorRow).
struct GemmFp8Config {
  GemmPath path = GemmPath::kSimt;
  DType out_dtype = DType::kBF16;
  Fp8Scales scales = Fp8Scales::kTensorRow;
  int bn = 0;
  int stages = 0;
  int tokens = 0;
  int persistent = 0;
  int tma_out = 0;  // sm90: the TMA-store epilogue (gemm_tma_out), as GemmConfig's
};

// Choices the bench and the tests override (kjit_gemm_fp8 has no autotuner yet).
struct GemmFp8Tuning {
  // The decode path's K split over a cluster (1 .. kGemmDecodeMaxSplit); 0: gemm_decode_split's
  // (ignored by the other paths).
  int split = 0;
  // A tactic to run instead of select_gemm_fp8's choice: one of kjit_gemm's sm90 names at the fp8
  // kernel's widths, "sm90_bn128_s<stages>[_p]", "sm90_bn192_s<stages>[_p]" (not block scales) or
  // "sm90_bn256_s<stages>[_p]" (gemm_tactics.hpp; the scale mode stays the call's), or the decode
  // kernel at the narrowest token tile that holds m (also where the selection takes the tiles),
  // "decode_t<tokens>[_s<stages>]_split<s>" (a deeper ring than its two blocks an SM). One not
  // valid for the call is KJIT_ERROR_INVALID_ARGUMENT.
  std::string tactic;
  // kjit_gemm_options::weights_early: the kernel before on the stream writes neither b nor
  // scale_b (the decode path then loads b's first stages before waiting for it).
  bool weights_early = false;
};

// The e4m3 decode kernel's depth for a token tile (as many stages as its blocks per SM leave room
// for, gemm_fp8_decode_blocks_per_sm).
int gemm_fp8_decode_stages(int tokens, int max_smem_optin);

// Support and dispatch in one place: on a compute capability 9.0 device when TMA can describe a
// and b (target.tma_ok), the decode kernel (GemmPath::kSm90Decode) where kjit_gemm takes its
// decode path (gemm_decode_tile: m <= 64, or m <= 128 with fewer 128-row tiles of n than SMs),
// else the sm90 kernel when its tiles fit the shared memory (192 or 256 wide where
// gemm_fp8_wide_tile says so, else 128); else, on a compute
// capability 8.9+ device (mma.sync's e4m3 form), the mma.sync kernel (GemmPath::kMmaSm80) where
// mma_sm80_can_run; else the fallback.
// Throws KJIT_ERROR_UNSUPPORTED for out dtypes other than bf16 / fp16 / fp32 and sizes past the
// grid's limits.
GemmFp8Config select_gemm_fp8(DType out_dtype, Fp8Scales scales, int64_t m, int64_t n, int64_t k,
                              const GemmTarget& target);

// The sm90 kernel's wider tile for these scales (192 per tensor / per row, 256 with block scales)
// where it beats the 128-wide one for an m x n x k call on `target`, else 0: a model of whole
// waves fitted to H100 timings (the definition says which).
int gemm_fp8_wide_tile(const GemmTarget& target, Fp8Scales scales, int64_t m, int64_t n, int64_t k);

// Whether the sm90 fp8 kernel has a tile bn wide for these scales and form: 128 and 256 (its
// halves promoted in turn) always; 192 for per tensor / per row scales (a 192-wide tile straddles
// two 128-row blocks of b's scales); every width in both forms, one-tile and persistent. The one
// check behind the catalog's specs and the forced tactics.
bool gemm_fp8_sm90_width_ok(int bn, Fp8Scales scales);

jit::Spec gemm_fp8_spec(const GemmFp8Config& cfg);

// The config a forced tactic (GemmFp8Tuning::tactic) runs for an m x n x k call whose selected
// config is `selected` (its out dtype and scales are kept). Throws KJIT_ERROR_INVALID_ARGUMENT for
// a name that is not an sm90 tactic of width 128 or 256 (or 192, without block scales), or one
// sm90_can_run refuses on `target`, or a decode tactic kjit_gemm's decode path could not run for
// the call (m up to 128 at the narrowest token tile that holds it) or whose ring does not fit (its
// split is the launch's: gemm_fp8 takes it where GemmFp8Tuning::split is 0).
GemmFp8Config gemm_fp8_forced_config(const std::string& tactic, const GemmFp8Config& selected,
                                     int64_t m, int64_t n, int64_t k, const GemmTarget& target);

// Shared with the MoE fp8 grouped GEMM (src/ops/moe/moe_gemm.cpp):
// The e4m3 matrix `m` as rows of 16-bit elements (pairs of e4m3), the element the sm90 kernels'
// tensor maps and producer move: TMA copies bytes, and this keeps the bf16 kernel's box (64
// elements, one 128-byte swizzle row) for 128 e4m3 of K. tma_describable(m) makes cols and the
// stride even.
RowMatrix as_pairs(RowMatrix m);
// The scale tensor `t` (fp32, compact, on `device`: `operand`'s) as a RowMatrix; its shape is
// checked by the caller.
RowMatrix scale_matrix(const DLTensor* t, const char* name, int device, const char* operand = "a");

// kjit_gemm_fp8 (kjit.h): validates, then launches on `stream`. Throws kjit::Error. tuning: the
// bench's and the tests' overrides (the defaults are kjit_gemm_fp8's).
void gemm_fp8(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
              const DLTensor* scale_b, DLTensor* out, float alpha, float beta, void* stream,
              const GemmFp8Tuning& tuning = {});

}  // namespace kjit::ops
