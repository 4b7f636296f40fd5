// GEMM (out = alpha * a . b^T + beta * out + bias): path choice, spec rendering and launch
// (device code: kernels/gemm/). The registry entry is in gemm_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <string>

#include "cuda/launch.hpp"
#include "gemm/gemm_params.h"
#include "jit/spec.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"
#include "tune/process_tuner.hpp"

namespace kjit::ops {

// kSm90: TMA + wgmma, warp-specialized (kernels/gemm/gemm_sm90.cuh, sm_90a only).
// kSimt: fp32 FMA tiles, any sm_80+ device and any element-aligned operands (gemm_simt.cuh).
// kSm90Decode: m <= kGemmDecodeMaxTokens on sm_90a: the weight streams as wgmma's M side, K split
// over a cluster (gemm_decode_sm90.cuh).
// kMmaSm80: mma.sync + cp.async tiles, any sm_80+ device, operands with 16-byte aligned rows
// (gemm_mma_sm80.cuh).
enum class GemmPath { kSm90 = 0, kSimt = 1, kSm90Decode = 2, kMmaSm80 = 3 };

const char* gemm_path_name(GemmPath p);  // "sm90", "simt", "decode", "sm80"

// One compiled GEMM variant; every field is in the URI. bn and stages are the sm90 and mma_sm80
// kernels' tile width and pipeline depth, tokens and stages the decode kernel's token tile and
// depth (0 where unused). persistent (sm90 only): 1 for gemm_sm90_persistent_kernel, a grid of
// min(tiles, SMs) blocks that loop over the tiles (in the URI only when 1, so the one-tile
// kernel's URIs are unchanged). tma_out (sm90 only, likewise): 1 for the TMA-store epilogue
// (gemm_tma_out).
struct GemmConfig {
  GemmPath path = GemmPath::kSimt;
  DType dtype = DType::kBF16;      // a, b and bias
  DType out_dtype = DType::kBF16;  // out
  int bn = 0;
  int stages = 0;
  int tokens = 0;
  int persistent = 0;  // sm90: 1 = persistent blocks, 2 = persistent pairs (the _p2 tactics)
  int tma_out = 0;
};

// What select_gemm needs to know about a call besides dtypes and sizes.
struct GemmTarget {
  int cc_major = 0, cc_minor = 0;  // the device's compute capability
  int max_smem_optin = 0;          // bytes of shared memory a block may opt in to
  int sm_count = 0;                // streaming multiprocessors
  bool tma_ok = false;  // a and b: 16-byte-aligned bases, row strides multiples of 16 bytes
  // a and b: 16-byte-aligned bases and row strides (cp_async_ready), what the mma_sm80 path needs
  // (k need not be a multiple of 8); true wherever tma_ok is.
  bool cp_async_ok = false;
  // out can take the sm90 tiles' TMA-store epilogue where its dtype is 16-bit (tma_store_ok).
  bool tma_store_ok = false;
};

// Whether a call's out can be stored by TMA from the sm90 tiles' epilogue: TMA can describe it
// (tma_describable) and beta is 0 (the staged epilogue never reads the old out). The out dtype is
// gemm_tma_out's to check.
bool tma_store_ok(const RowMatrix& out, float beta);

// Whether the sm90 tile kernel bn wide with `stages` stages takes the TMA-store epilogue for an out
// of `out_dtype` on `target`: target.tma_store_ok, a 16-bit out (stmatrix's element), and its 32 KB
// of staging fit beside the ring.
bool gemm_tma_out(const GemmTarget& target, DType out_dtype, int bn, int stages);

// A compute capability 9.0 device with the opt-in shared memory of every Hopper part (H100, H200),
// operands TMA can describe and, with tma_store, an out the TMA-store epilogue can take: what the
// specs' defaults and checks assume where no device is at hand (--set, the catalogs, the
// precompile sets).
GemmTarget hopper_gemm_target(bool tma_store);

// The sm90 tile's default depth on `target` for an out of `out_dtype`: sm90_default_stages(bn), one
// stage fewer where the TMA-store epilogue's staging would not fit beside those (the fp8 192-wide
// tile: 4 stages of 40 KB, which ran as fast as 5 on an H100, session 24's sweep).
int sm90_stages_for(const GemmTarget& target, DType out_dtype, int bn);

// Choices the bench and the tests override; the defaults are kjit_gemm's.
struct GemmTuning {
  // The decode path's split of K over a cluster (1 .. kGemmDecodeMaxSplit); 0: gemm_decode_split.
  int split = 0;
  // A tactic to run (gemm_tactics.hpp's names, "sm90_bn256_s3"), bypassing the autotuner; one that
  // is not valid for the call is KJIT_ERROR_INVALID_ARGUMENT. Empty: the autotuner's choice.
  std::string tactic;
  // The call's autotuning request (kjit_gemm_options' autotune and tune_timing).
  tune::TuneRequest tune;
  // kjit_gemm_options::weights_early: the kernel before on the stream does not write b.
  bool weights_early = false;
};

// The decode kernel's pipeline depth for a token tile: as many stages as leave room for
// blocks_per_sm blocks per SM (an SM has the opt-in size plus the 1 KB a block reserves).
int gemm_decode_stages(int tokens, int max_smem_optin, int blocks_per_sm = 2);

// resident[s]: how many clusters of s decode blocks the device runs at once (s = 1 ..
// kGemmDecodeMaxSplit; index 0 unused), as cuOccupancyMaxActiveClusters reports it.
using GemmResidency = std::array<int, gemm::kGemmDecodeMaxSplit + 1>;

// The decode path's split of K: the largest that still runs every weight tile's cluster at once
// (a cluster left for a second wave doubles the time), with at least 4 K blocks (256 of K) per
// block; 1 when even that leaves a second wave.
int gemm_decode_split(int64_t n, int64_t k, const GemmResidency& resident);
// The same rule for `tiles` weight tiles (clusters) expected to stream at once: the MoE decode
// path's active (expert, column tile) items.
int gemm_decode_split_tiles(int64_t tiles, int64_t k, const GemmResidency& resident);

// The bf16 / fp16 sm90 tile for an m x n x k call on `target` (bn 0 where the sm90 path cannot
// run): its width, stages and whether persistent blocks serve it. select_gemm's rule.
struct Sm90Tile {
  int bn = 0, stages = 0;
  bool persistent = false;
};
Sm90Tile gemm_sm90_tile(const GemmTarget& target, int64_t m, int64_t n, int64_t k);

// Whether the sm90 tiles serve an m x n x k bf16 / fp16 call that the decode path could serve
// (m > 32 only: measured rules, in gemm.cpp).
bool gemm_tiles_beat_decode(const GemmTarget& target, int64_t m, int64_t n, int64_t k);

// The decode path's tile for an m x n x k call on `target` (either operand type; k2: K in 16-bit
// elements, an e4m3 pair is one) where the path runs and is the choice (select_gemm's rule), else
// tokens = 0: the narrowest wgmma width (16 .. kGemmDecodeMaxTokens) that holds m, and the stages
// of gemm_decode_stages for the kernel's blocks_per_sm(tokens).
struct GemmDecodeTile {
  int tokens = 0, stages = 0;
};
GemmDecodeTile gemm_decode_tile(const GemmTarget& target, int64_t m, int64_t n, int64_t k2,
                                int (*blocks_per_sm)(int tokens));

// The launch of a decode kernel (bf16 or e4m3) for n weight rows with K split over `split`
// blocks; throws KJIT_ERROR_INVALID_ARGUMENT for a split outside 1 .. kGemmDecodeMaxSplit.
cuda::LaunchConfig gemm_decode_launch_config(int tokens, int stages, int split, int64_t n,
                                             void* stream);

// The split of K for a loaded decode kernel `fn` of `tokens` x `stages` (gemm_decode_split on its
// residency, asked of the driver once per kernel). k2: K in 16-bit elements (an e4m3 pair is one:
// both kernels' stages hold 64 of them).
int gemm_decode_split_for(CUfunction fn, int tokens, int stages, int64_t n, int64_t k2);

// The residency of a loaded decode-geometry kernel `fn` (kGemmDecodeThreads threads,
// gemm_decode_smem_bytes(tokens, stages)): clusters of each split the device runs at once, asked
// of the driver once per kernel.
const GemmResidency& gemm_decode_residency(CUfunction fn, int tokens, int stages);

// The target of a call on `device` (its compute capability and shared memory). Throws
// KJIT_ERROR_NO_DEVICE without a driver.
GemmTarget gemm_target(int device, bool tma_ok, bool cp_async_ok);
// The same with cp_async_ok = tma_ok (the callers whose paths do not include mma_sm80).
GemmTarget gemm_target(int device, bool tma_ok);

// Support and dispatch in one place: on a compute capability 9.0 device where TMA can describe a
// and b, the decode path for m <= 64, and for m <= kGemmDecodeMaxTokens where n has fewer
// 128-row tiles than the device has SMs; else the sm90 path when its tiles fit the shared memory;
// else, on any sm_80+ device, the mma_sm80 path where mma_sm80_can_run (gemm_mma_sm80_bn and
// gemm_mma_sm80_stages pick its tile); otherwise the fallback. Throws
// KJIT_ERROR_UNSUPPORTED for input dtypes other than bf16 / fp16, out dtypes other than bf16 /
// fp16 / fp32, and sizes past the grid's limits.
GemmConfig select_gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k,
                       const GemmTarget& target);

jit::Spec gemm_spec(const GemmConfig& cfg);

// Shared with the fp8 GEMM (gemm_fp8.cpp), whose stages hold the same bytes:
// True when the sm90 kernels can serve m x n x k on `target` with tiles bn wide and `stages`
// stages: a compute capability 9.0 device, operands TMA can describe (target.tma_ok), sides and
// tile counts TMA's int32 coordinates reach, the stages in its shared memory.
bool sm90_can_run(const GemmTarget& target, int64_t m, int64_t n, int64_t k, int bn, int stages);

// The default ring depth of an sm90 tile bn wide (128 rows a tile; a 16-bit stage of 64 K and an
// e4m3 stage of 128 K move the same bytes): the most stages that fit 227 KB, 6 of 32 KB at 128,
// 5 of 40 KB at 192, 4 of 48 KB at 256.
constexpr int sm90_default_stages(int bn) {
  return bn == 256 ? 4 : bn == 192 ? 5 : 6;
}
// The mma_sm80 path's one validity check, used by select_gemm and the tactics: a compute
// capability 8.0+ device, a and b with 16-byte aligned rows (target.cp_async_ok), a tile width
// (64 or 128) and depth (2 .. 6) the kernel has, the stages in the shared memory, tile and K block
// counts in int32.
bool mma_sm80_can_run(const GemmTarget& target, int64_t m, int64_t n, int64_t k, int bn,
                      int stages);
// The mma_sm80 tile width of an m x n call: 128, or 64 where the 128-wide tiles would leave some
// of the device's SMs without a block.
int gemm_mma_sm80_bn(const GemmTarget& target, int64_t m, int64_t n);
// The mma_sm80 depth of a tile width: 48 KB of stages at either width (3 of 128 wide, 4 of 64),
// so two blocks share an SM on every sm_80+ part (100 KB on sm_86 / sm_89) and a third K block is
// in flight while one is computed on.
int gemm_mma_sm80_stages(int bn);
// Throws KJIT_ERROR_UNSUPPORTED (naming `op`) when the fallback's grid cannot cover m x n.
void check_simt_grid(const char* op, int64_t m, int64_t n);
// True when `m`'s rows start 16-byte aligned (base and row stride, or a single row): 16-byte
// cp.async copies can read them.
bool cp_async_ready(const RowMatrix& m);
// True when `m` (rows x cols) meets TMA's rules (cuda/tensor_map.hpp) with sides TMA's int32
// coordinates reach.
bool tma_describable(const RowMatrix& m);
// True when the two views may share a byte (the same view included: out is never in place).
bool overlaps(const RowMatrix& x, const RowMatrix& y);
// The sm90 kernels' tensor map of `m`: boxes of kGemmBlockK columns x box_rows rows, 128-byte
// swizzle. Throws KJIT_ERROR_NO_DEVICE without a driver.
gemm::TensorMapBytes tensor_map(const RowMatrix& m, uint32_t box_rows);

// a [..., k], b [n, k] and out [..., n] of kjit_gemm and kjit_gemm_fp8, validated: a and b of
// one dtype, all three on one device, the shapes consistent, out overlapping neither a nor b.
// Throws KJIT_ERROR_INVALID_ARGUMENT naming the argument.
struct GemmOperands {
  RowMatrix a, b, out;
  int64_t m = 0, n = 0, k = 0;  // m: a's leading dims collapsed
};
GemmOperands gemm_operands(const DLTensor* a, const DLTensor* b, DLTensor* out);
// The kernels' parameters of validated operands (no bias, no tensor maps yet).
gemm::GemmParams gemm_params(const GemmOperands& g, float alpha, float beta);
// Clusters of two blocks of a paired persistent kernel (the sm90 GEMMs' and the grouped GEMM's
// PAIR forms; block threads and smem bytes of dynamic shared memory) the device runs at once,
// asked of the driver once per loaded kernel.
int sm90_pair_clusters(CUfunction fn, unsigned block, unsigned smem);

// Launches a paired persistent kernel (lc's block and shared memory; its grid set here): clusters
// of two blocks, one a pair item up to as many as the device runs at once (sm90_pair_clusters).
void launch_pair_clusters(CUfunction fn, cuda::LaunchConfig lc, int64_t pair_items,
                          const void* params);
// The dense sm90 GEMMs' pairs (gemm_sm90_persistent_kernel's or gemm_fp8_sm90_persistent_kernel's
// PAIR form; lc as gemm_launch_config gives it): ceil(row tiles / 2) x column tiles pair items.
void launch_sm90_pairs(CUfunction fn, const cuda::LaunchConfig& lc, int64_t m, int64_t n, int bn,
                       const void* params);

// The launch of the sm90 or mma_sm80 kernels (bn, stages) or the fallback for an m x n out on
// `stream`. persistent_sms > 0 (the sm90 persistent kernels): min(tiles, persistent_sms) blocks
// instead of one per tile; tma_out: the sm90 kernel's TMA-store epilogue (its staging).
cuda::LaunchConfig gemm_launch_config(GemmPath path, int bn, int stages, int64_t m, int64_t n,
                                      void* stream, int persistent_sms = 0, bool tma_out = false);
// The TMA-store epilogue's tensor map of out (16-bit): boxes of kGemmOutSlab columns x 64 rows,
// 128-byte swizzle.
gemm::TensorMapBytes out_tensor_map(const RowMatrix& out);

// out[..., n] = alpha * a[..., k] . b[n, k]^T + beta * out + bias[n] (bias may be null). a and
// out may have leading dims (collapsed into m rows) and row strides; b and bias are compact.
// Validates, then launches on `stream`. Throws kjit::Error.
void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out, float alpha,
          float beta, void* stream, const GemmTuning& tuning = {});

}  // namespace kjit::ops
