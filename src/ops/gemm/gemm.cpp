#include "ops/gemm/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "cuda/tensor_map.hpp"
#include "runtime/jit_core.hpp"
#include "ops/gemm/gemm_desc.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "ops/pdl.hpp"
#include "ops/tensor.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {

static_assert(sizeof(CUtensorMap) == sizeof(gemm::TensorMapBytes) &&
                  alignof(CUtensorMap) <= alignof(gemm::TensorMapBytes),
              "TensorMapBytes holds a CUtensorMap");

// TMA coordinates are int32: larger sides go to the fallback.
using cuda::kMaxGridY;
using cuda::kMaxTmaSide;

}  // namespace

bool cp_async_ready(const RowMatrix& m) {
  const auto addr = reinterpret_cast<uintptr_t>(m.data);
  const int64_t stride_bytes = m.row_stride * static_cast<int64_t>(dtype_size(m.dtype));
  return addr % 16 == 0 && (m.rows == 1 || stride_bytes % 16 == 0);
}

bool tma_describable(const RowMatrix& m) {
  return cp_async_ready(m) && (m.cols * static_cast<int64_t>(dtype_size(m.dtype))) % 16 == 0 &&
         m.rows <= kMaxTmaSide && m.cols <= kMaxTmaSide;
}

bool overlaps(const RowMatrix& x, const RowMatrix& y) {
  return x.numel() != 0 && y.numel() != 0 && (x.data == y.data || partially_overlaps(x, y));
}

gemm::TensorMapBytes tensor_map(const RowMatrix& m, uint32_t box_rows) {
  cuda::TensorMap2d t;
  t.ptr = m.data;
  t.elem_bytes = static_cast<int>(dtype_size(m.dtype));
  t.rows = static_cast<uint64_t>(m.rows);
  t.cols = static_cast<uint64_t>(m.cols);
  // A single row's stride is never used; TMA still wants a valid one.
  t.row_stride_bytes = static_cast<uint64_t>(m.rows == 1 ? m.cols : m.row_stride) * t.elem_bytes;
  t.box_rows = box_rows;
  t.box_cols = gemm::kGemmBlockK;
  t.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  const CUtensorMap map = cuda::make_tensor_map_2d(t);
  gemm::TensorMapBytes out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

bool tma_store_ok(const RowMatrix& out, float beta) {
  return beta == 0.0f && tma_describable(out);
}

bool gemm_tma_out(const GemmTarget& target, DType out_dtype, int bn, int stages) {
  return target.tma_store_ok && dtype_size(out_dtype) == 2 &&
         gemm::gemm_sm90_smem_bytes(bn, stages, true) <= target.max_smem_optin;
}

GemmTarget hopper_gemm_target(bool tma_store) {
  GemmTarget t;
  t.cc_major = 9;
  t.max_smem_optin = cuda::kHopperSmemOptin;
  t.tma_ok = t.cp_async_ok = true;
  t.tma_store_ok = tma_store;
  return t;
}

int sm90_stages_for(const GemmTarget& target, DType out_dtype, int bn) {
  const int stages = sm90_default_stages(bn);
  return !gemm_tma_out(target, out_dtype, bn, stages) &&
                 gemm_tma_out(target, out_dtype, bn, stages - 1)
             ? stages - 1
             : stages;
}

gemm::TensorMapBytes out_tensor_map(const RowMatrix& out) {
  static_assert(gemm::kGemmOutSlab == gemm::kGemmBlockK, "tensor_map's box is kGemmBlockK wide");
  return tensor_map(out, 64);
}

const char* gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::kSm90: return "sm90";
    case GemmPath::kSm90Decode: return "decode";
    case GemmPath::kMmaSm80: return "sm80";
    case GemmPath::kSimt: break;
  }
  return "simt";
}

GemmTarget gemm_target(int device, bool tma_ok) {
  return gemm_target(device, tma_ok, tma_ok);
}

GemmTarget gemm_target(int device, bool tma_ok, bool cp_async_ok) {
  const cuda::DeviceInfo& dev = cuda::device_info(device);
  GemmTarget t;
  t.cc_major = dev.major;
  t.cc_minor = dev.minor;
  t.max_smem_optin = dev.max_smem_optin;
  t.sm_count = dev.sm_count;
  t.tma_ok = tma_ok;
  t.cp_async_ok = cp_async_ok;
  return t;
}

int gemm_decode_stages(int tokens, int max_smem_optin, int blocks_per_sm) {
  const int per_block = (max_smem_optin + 1024) / blocks_per_sm - 1024;
  int stages = 2;
  while (gemm::gemm_decode_smem_bytes(tokens, stages + 1) <= per_block) ++stages;
  return stages;
}

int gemm_decode_split(int64_t n, int64_t k, const GemmResidency& resident) {
  return gemm_decode_split_tiles(ceil_div(n, gemm::kGemmDecodeRows), k, resident);
}

int gemm_decode_split_tiles(int64_t tiles, int64_t k, const GemmResidency& resident) {
  const int64_t by_k = std::max<int64_t>(1, ceil_div(k, gemm::kGemmBlockK) / 4);
  for (int64_t s = std::min<int64_t>(by_k, gemm::kGemmDecodeMaxSplit); s > 1; --s) {
    if (tiles <= resident[s]) return static_cast<int>(s);
  }
  return 1;
}

bool sm90_can_run(const GemmTarget& target, int64_t m, int64_t n, int64_t k, int bn, int stages) {
  return target.cc_major == 9 && target.cc_minor == 0 && target.tma_ok && m <= kMaxTmaSide &&
         n <= kMaxTmaSide && k <= kMaxTmaSide &&
         gemm::gemm_sm90_smem_bytes(bn, stages) <= target.max_smem_optin &&
         ceil_div(m, gemm::kGemmBlockM) * ceil_div(n, bn) <= kMaxTmaSide;
}

bool mma_sm80_can_run(const GemmTarget& target, int64_t m, int64_t n, int64_t k, int bn,
                      int stages) {
  return target.cc_major >= 8 && target.cp_async_ok && (bn == 64 || bn == 128) && stages >= 2 &&
         stages <= 6 && gemm::gemm_mma_sm80_smem_bytes(bn, stages) <= target.max_smem_optin &&
         m <= cuda::kMaxInt32 && n <= cuda::kMaxInt32 &&  // no overflow in the product below
         ceil_div(m, gemm::kGemmMmaBlockM) * ceil_div(n, bn) <= cuda::kMaxInt32 &&
         ceil_div(k, gemm::kGemmMmaBlockK) <= cuda::kMaxInt32;
}

int gemm_mma_sm80_bn(const GemmTarget& target, int64_t m, int64_t n) {
  return ceil_div(m, gemm::kGemmMmaBlockM) * ceil_div(n, 128) < target.sm_count ? 64 : 128;
}

int gemm_mma_sm80_stages(int bn) {
  return bn == 64 ? 4 : 3;
}

void check_simt_grid(const char* op, int64_t m, int64_t n) {
  if (ceil_div(m, gemm::kGemmSimtTile) > kMaxGridY ||
      ceil_div(n, gemm::kGemmSimtTile) > kMaxTmaSide) {
    fail(KJIT_ERROR_UNSUPPORTED, "{}: m = {} exceeds the {} rows one launch covers", op, m,
         kMaxGridY * gemm::kGemmSimtTile);
  }
}

GemmDecodeTile gemm_decode_tile(const GemmTarget& target, int64_t m, int64_t n, int64_t k2,
                                int (*blocks_per_sm)(int tokens)) {
  const bool hopper = target.cc_major == 9 && target.cc_minor == 0 && target.tma_ok &&
                      m <= kMaxTmaSide && n <= kMaxTmaSide && k2 <= kMaxTmaSide &&
                      ceil_div(n, gemm::kGemmDecodeRows) * gemm::kGemmDecodeMaxSplit <= kMaxTmaSide;
  // Few rows: the product is a stream of the weight, which the decode kernel spreads over every
  // SM (the 128 x bn tiles leave most SMs idle at n = 4096). Past 64 rows every decode block
  // rereads as many token bytes as weight bytes, and where the 128-wide tiles already cover the
  // SMs they win: 128 x 28672 x 4096 took 73 us on them and 83-88 us on the decode kernel on the
  // H200 (bench/results/2026-12-04-h200-gemm-decode*), 128 x 4096 x 14336 79 us and 51 us.
  const bool decode = m <= 64 || (m <= gemm::kGemmDecodeMaxTokens &&
                                  ceil_div(n, gemm::kGemmDecodeRows) < target.sm_count);
  if (!hopper || !decode) return {};
  GemmDecodeTile t;
  t.tokens = 16;  // the narrowest wgmma form kjit instantiates
  while (t.tokens < m) t.tokens *= 2;
  t.stages = gemm_decode_stages(t.tokens, target.max_smem_optin, blocks_per_sm(t.tokens));
  if (gemm::gemm_decode_smem_bytes(t.tokens, t.stages) > target.max_smem_optin) return {};
  return t;
}

Sm90Tile gemm_sm90_tile(const GemmTarget& target, int64_t m, int64_t n, int64_t k) {
  // bf16 tiles 256 wide from 512 rows, or where the 128-wide ones would take more than a wave
  // (128 x 28672 x 4096: 76.2 us at 256 against 79.9 at 128, tuned on the H200 2026-12-05).
  const int64_t narrow_tiles = ceil_div(m, gemm::kGemmBlockM) * ceil_div(n, 128);
  Sm90Tile t;
  t.bn = m >= 512 || narrow_tiles > target.sm_count ? 256 : 128;
  t.stages = sm90_default_stages(t.bn);
  if (!sm90_can_run(target, m, n, k, t.bn, t.stages)) return {};
  // Persistent blocks hide each tile's start (barrier set-up, the first TMA round trip) behind
  // the previous tile's epilogue: worth it where that start is a visible share of a tile (K up
  // to 4096) and a block walks many tiles. Tuned on the H200: 4096 x 28672 x 4096 1234.7 us
  // against 1276.8, 8192 x 28672 x 4096 2448 / 2520, 8192 x 6144 x 4096 537.9 / 552.5; no gain
  // at 4096 x 6144 x 4096 (768 tiles) nor at K 8192 / 14336.
  const int64_t tiles = ceil_div(m, gemm::kGemmBlockM) * ceil_div(n, t.bn);
  t.persistent = k <= 4096 && target.sm_count > 0 && tiles > 8 * int64_t{target.sm_count};
  return t;
}

bool gemm_tiles_beat_decode(const GemmTarget& target, int64_t m, int64_t n, int64_t k) {
  // Where the decode kernel's token tile is 64 or 128 rows wide, each of its blocks rereads the
  // tokens' K slice, about as many bytes as its weight rows. Tuned on the H200 (2026-12-05,
  // bench/results/2026-12-05-h200-gemm-tune): at 64 rows the tiles win only where the 128-wide
  // ones outnumber the SMs (64 x 28672 x 4096: 76.3 us against 81.3; 64 x 6144 / 8192 / 14336 K
  // stay on the decode kernel), at 65-128 rows wherever K is at most 8192 (128 x 6144 x 4096
  // 33.6 / 38.8, 128 x 8192 x 8192 55.9 / 60.8), while at K = 14336 a tile's K loop is too long
  // for the few tiles (128 x 4096 x 14336: decode 60.1, tiles 79).
  if (m <= 32) return false;
  if (m <= 64) return ceil_div(n, 128) > target.sm_count;
  return k <= 8192;
}

GemmConfig select_gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k,
                       const GemmTarget& target) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "gemm supports bf16 and fp16 a and b, not {}", dtype_name(dtype));
  }
  if (!is_float(out_dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "gemm's out is fp32, fp16 or bf16, not {}", dtype_name(out_dtype));
  }
  GemmConfig c;
  c.dtype = dtype;
  c.out_dtype = out_dtype;
  // The 128-row tiles: wide ones halve the reads of a per output once there are rows enough to
  // fill them, or once the 128-wide tiles outnumber the SMs; persistent blocks where the tiles
  // are many and short (see gemm_sm90_tile).
  const Sm90Tile wide = gemm_sm90_tile(target, m, n, k);
  // Two blocks an SM at every token tile (gemm_decode_sm90.cuh's launch bound).
  const GemmDecodeTile tile = gemm_decode_tile(target, m, n, k, [](int) { return 2; });
  if (tile.tokens != 0 && !(wide.bn != 0 && gemm_tiles_beat_decode(target, m, n, k))) {
    c.path = GemmPath::kSm90Decode;
    c.tokens = tile.tokens;
    c.stages = tile.stages;
    return c;
  }
  if (wide.bn != 0) {
    c.path = GemmPath::kSm90;
    c.bn = wide.bn;
    c.stages = wide.stages;
    c.persistent = wide.persistent ? 1 : 0;
    c.tma_out = gemm_tma_out(target, out_dtype, c.bn, c.stages) ? 1 : 0;
    return c;
  }
  // Every other sm_80+ call whose rows cp.async can copy: tensor cores at about ten times the
  // fallback's rate.
  const int mma_bn = gemm_mma_sm80_bn(target, m, n);
  const int mma_stages = gemm_mma_sm80_stages(mma_bn);
  if (mma_sm80_can_run(target, m, n, k, mma_bn, mma_stages)) {
    c.path = GemmPath::kMmaSm80;
    c.bn = mma_bn;
    c.stages = mma_stages;
    return c;
  }
  check_simt_grid("gemm", m, n);
  c.path = GemmPath::kSimt;
  return c;
}

jit::Spec gemm_spec(const GemmConfig& c) {
  const char* header = c.path == GemmPath::kSm90         ? "gemm/gemm_sm90.cuh"
                       : c.path == GemmPath::kSm90Decode ? "gemm/gemm_decode_sm90.cuh"
                       : c.path == GemmPath::kMmaSm80    ? "gemm/gemm_mma_sm80.cuh"
                                                         : "gemm/gemm_simt.cuh";
  const bool sm90a = c.path == GemmPath::kSm90 || c.path == GemmPath::kSm90Decode;
  jit::SpecBuilder b(
      "gemm", {"common", "gemm"}, header,
      sm90a ? std::vector<std::string>{"sm_90a"} : std::vector<std::string>{"sm_80+"});
  b.choice("path", gemm_path_name(c.path), static_cast<int>(c.path));
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.type("out_dtype", dtype_name(c.out_dtype), device_type_name(c.out_dtype));
  if (c.path == GemmPath::kSm90) {
    b.value("bn", c.bn).value("stages", c.stages);
    b.flag("persistent", c.persistent != 0, /*omit_false=*/true);
    b.flag("tma_out", c.tma_out != 0, /*omit_false=*/true);
    if (c.persistent != 0) {
      b.flag("pair", c.persistent == 2, /*omit_false=*/true);
      b.entry("kjit::gemm::gemm_sm90_persistent_kernel",
              {"dtype", "out_dtype", "bn", "stages", "tma_out", "pair"});
    } else {
      b.entry("kjit::gemm::gemm_sm90_kernel", {"dtype", "out_dtype", "bn", "stages", "tma_out"});
    }
  } else if (c.path == GemmPath::kSm90Decode) {
    b.value("tokens", c.tokens).value("stages", c.stages);
    b.entry("kjit::gemm::gemm_decode_sm90_kernel", {"dtype", "out_dtype", "tokens", "stages"});
  } else if (c.path == GemmPath::kMmaSm80) {
    b.value("bn", c.bn).value("stages", c.stages);
    b.entry("kjit::gemm::gemm_mma_sm80_kernel", {"dtype", "out_dtype", "bn", "stages"});
  } else {
    b.entry("kjit::gemm::gemm_simt_kernel", {"dtype", "out_dtype"});
  }
  return b.build();
}

namespace {

// The decode kernel's residency per split, asked of the driver once per loaded kernel (the answer
// depends on its registers and shared memory, and on the device).
const GemmResidency& decode_residency(CUfunction fn, unsigned block, unsigned smem) {
  static std::mutex mu;
  static std::unordered_map<CUfunction, GemmResidency> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(fn);
  if (it == known.end()) {
    GemmResidency r{};
    for (int s = 1; s <= gemm::kGemmDecodeMaxSplit; ++s) {
      r[s] = cuda::max_active_clusters(fn, static_cast<unsigned>(s), block, smem);
    }
    it = known.emplace(fn, r).first;
  }
  return it->second;
}

}  // namespace

int sm90_pair_clusters(CUfunction fn, unsigned block, unsigned smem) {
  static std::mutex mu;
  static std::unordered_map<CUfunction, int> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(fn);
  if (it == known.end())
    it = known.emplace(fn, cuda::max_active_clusters(fn, 2, block, smem)).first;
  return it->second;
}

void launch_pair_clusters(CUfunction fn, cuda::LaunchConfig lc, int64_t pair_items,
                          const void* params) {
  // As many clusters as run at once (a GPC with an odd count of free SMs leaves one out): a
  // persistent grid must never wait for a second wave.
  const int resident = sm90_pair_clusters(fn, lc.block_x, lc.smem_bytes);
  if (resident < 1) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "no cluster of two tile blocks of {} bytes of shared memory fits "
         "this device",
         lc.smem_bytes);
  }
  lc.grid_x = static_cast<unsigned>(2 * std::min<int64_t>(pair_items, resident));
  cuda::launch_cluster(fn, lc, 2, params);
}

void launch_sm90_pairs(CUfunction fn, const cuda::LaunchConfig& lc, int64_t m, int64_t n, int bn,
                       const void* params) {
  launch_pair_clusters(
      fn, lc, ceil_div(ceil_div(m, gemm::kGemmBlockM), int64_t{2}) * ceil_div(n, int64_t{bn}),
      params);
}

namespace {

// The launch of cfg's kernel over p (whose pointers, sizes and scalars are set): the tensor maps
// and the grid of its path; `split` is the decode path's. weights_early: the caller's promise
// (kjit_gemm_options::weights_early) that the kernel before does not write w; the decode path
// then launches as its programmatic dependent where elementwise ops do (sm_90+, KJIT_PDL).
void launch_gemm(CUfunction fn, const GemmConfig& cfg, int split, const RowMatrix& x,
                 const RowMatrix& w, const RowMatrix& y, gemm::GemmParams& p, CUstream stream,
                 bool weights_early = false) {
  cuda::LaunchConfig lc;
  lc.stream = stream;
  if (cfg.path == GemmPath::kSm90Decode) {
    lc = gemm_decode_launch_config(cfg.tokens, cfg.stages, split, p.n, stream);
    p.tma_a = tensor_map(x, static_cast<uint32_t>(cfg.tokens));
    p.tma_b = tensor_map(w, gemm::kGemmDecodeRows);
    const bool dependent = weights_early && elementwise_pdl(x.device);
    p.weights_early = dependent ? 1 : 0;
    cuda::launch_cluster(fn, lc, static_cast<unsigned>(split), &p, dependent);
    return;
  }
  if (cfg.path == GemmPath::kSm90) {
    p.tma_a = tensor_map(x, gemm::kGemmBlockM);
    p.tma_b = tensor_map(w, static_cast<uint32_t>(cfg.bn));
    if (cfg.tma_out != 0) p.tma_out = out_tensor_map(y);
  }
  const int sms = cfg.persistent != 0 ? cuda::device_info(x.device).sm_count : 0;
  lc = gemm_launch_config(cfg.path, cfg.bn, cfg.stages, p.m, p.n, stream, sms, cfg.tma_out != 0);
  if (cfg.persistent == 2) {
    launch_sm90_pairs(fn, lc, p.m, p.n, cfg.bn, &p);
    return;
  }
  cuda::launch(fn, lc, &p);
}

const jit::LoadedKernel& gemm_kernel(const GemmConfig& cfg, int device) {
  return jit::JitCore::global().kernel_for("gemm", cfg, device, [&] { return gemm_spec(cfg); });
}

// Device memory for the scratch out of a measurement.
struct Scratch {
  CUdeviceptr ptr = 0;
  explicit Scratch(size_t bytes) { KJIT_CU_CHECK(cuda::driver().cuMemAlloc(&ptr, bytes)); }
  ~Scratch() { cuda::driver().cuMemFree(ptr); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// Times tactic t for the call of p (after the caller's stream has drained, so its queued work
// is not timed). Into a scratch out: tuning never writes the caller's tensors, and with beta != 0
// the kernels read out, which a repeated call would change. A tactic that cannot run (a kernel
// that does not compile, a launch the device refuses) is logged and not a candidate.
std::vector<double> measure_gemm(const GemmTactic& t, const GemmConfig& dflt,
                                 const GemmTarget& target, const RowMatrix& x, const RowMatrix& w,
                                 const RowMatrix& y, const gemm::GemmParams& p, CUstream stream,
                                 const tune::TimingMode& timing) {
  // The fp32 fallback is an order of magnitude behind the tensor-core paths wherever they run:
  // timed only when it is the default.
  if (t.path == GemmPath::kSimt && dflt.path != GemmPath::kSimt) return {};
  try {
    const GemmConfig cfg = gemm_config_of(t, x.dtype, y.dtype, target);
    const CUfunction fn = gemm_kernel(cfg, x.device).functions.at(0);
    Scratch out(static_cast<size_t>(p.m * p.n) * dtype_size(y.dtype));
    KJIT_CU_CHECK(cuda::driver().cuMemsetD8(out.ptr, 0,
                                            static_cast<size_t>(p.m * p.n) * dtype_size(y.dtype)));
    gemm::GemmParams q = p;
    q.out = reinterpret_cast<void*>(out.ptr);
    q.out_stride = p.n;
    // The scratch is compact and 256-byte aligned: where the call's out takes the TMA-store
    // epilogue (target.tma_store_ok: n * 2 bytes a multiple of 16), so does it.
    RowMatrix scratch = y;
    scratch.data = q.out;
    scratch.row_stride = p.n;
    KJIT_CU_CHECK(cuda::driver().cuStreamSynchronize(stream));
    return tune::time_on_gpu(
        x.device, [&](CUstream s) { launch_gemm(fn, cfg, t.split, x, w, scratch, q, s); }, timing);
  } catch (const Error& e) {
    util::log("gemm: tactic {} not timed: {}", t.name(), e.what());
    return {};
  }
}

// The tactic of a call: the tuning's forced tactic or split, else the autotuner's choice.
GemmTactic call_tactic(const GemmCall& call, const GemmConfig& dflt, const GemmTuning& tuning,
                       const RowMatrix& x, const RowMatrix& w, const RowMatrix& y,
                       const gemm::GemmParams& p, CUstream stream) {
  if (!tuning.tactic.empty()) {
    const std::optional<GemmTactic> t = GemmTactic::parse(tuning.tactic);
    if (!t || !gemm_tactic_valid(*t, gemm_m_bucket(call.m), call.n, call.k, call.target)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: tactic '{}' is not valid for this call",
           tuning.tactic);
    }
    return *t;
  }
  if (tuning.split != 0) return gemm_tactic_of(dflt, tuning.split);
  if (const GemmChoice* known = remembered_gemm_choice(call, dflt, tuning.tune)) {
    return known->tactic;  // the hot path: one hash and one lookup
  }
  const GemmMeasure measure = [&](const GemmTactic& t) {
    return measure_gemm(t, dflt, call.target, x, w, y, p, stream, tuning.tune.timing);
  };
  const GemmDefaultSplit default_split = [&](const GemmConfig& c) {
    return gemm_decode_split_for(gemm_kernel(c, call.device).functions.at(0), c.tokens, c.stages,
                                 call.n, call.k);
  };
  return choose_gemm_tactic(call, dflt, tuning.tune, stream, default_split, measure).tactic;
}

}  // namespace

int gemm_decode_split_for(CUfunction fn, int tokens, int stages, int64_t n, int64_t k2) {
  return gemm_decode_split(n, k2, gemm_decode_residency(fn, tokens, stages));
}

const GemmResidency& gemm_decode_residency(CUfunction fn, int tokens, int stages) {
  const auto smem = static_cast<unsigned>(gemm::gemm_decode_smem_bytes(tokens, stages));
  return decode_residency(fn, gemm::kGemmDecodeThreads, smem);
}

cuda::LaunchConfig gemm_decode_launch_config(int tokens, int stages, int split, int64_t n,
                                             void* stream) {
  if (split < 1 || split > gemm::kGemmDecodeMaxSplit) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: split {} is not in 1 .. {}", split,
         gemm::kGemmDecodeMaxSplit);
  }
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  lc.block_x = gemm::kGemmDecodeThreads;
  lc.smem_bytes = static_cast<unsigned>(gemm::gemm_decode_smem_bytes(tokens, stages));
  lc.grid_x = static_cast<unsigned>(ceil_div(n, gemm::kGemmDecodeRows) * split);
  return lc;
}

GemmOperands gemm_operands(const DLTensor* a, const DLTensor* b, DLTensor* out) {
  GemmOperands g;
  g.a = as_row_matrix(a, "a");
  g.b = as_row_matrix(b, "b");
  g.out = as_row_matrix(out, "out");
  if (b->ndim != 2) fail(KJIT_ERROR_INVALID_ARGUMENT, "b must be 2-D [n, k], has ndim {}", b->ndim);
  check_same_dtype(g.a, "a", g.b, "b");
  check_same_device(g.a, "a", g.b, "b");
  check_same_device(g.a, "a", g.out, "out");
  if (out->ndim != a->ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out has ndim {} but a has {}", out->ndim, a->ndim);
  }
  for (int i = 0; i + 1 < a->ndim; ++i) {
    if (out->shape[i] != a->shape[i]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "out dim {} is {} but a's is {}", i, out->shape[i],
           a->shape[i]);
    }
  }
  // From the shapes: a RowMatrix without columns has no rows either (k = 0 is a valid call).
  g.n = b->shape[0];
  g.k = g.a.cols;
  if (b->shape[1] != g.k) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "b is [{}, {}] but a's last dim (k) is {}", g.n, b->shape[1],
         g.k);
  }
  if (g.out.cols != g.n) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out's last dim is {} but b has {} rows (n)", g.out.cols,
         g.n);
  }
  if (overlaps(g.out, g.a)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps a (gemm is not in place)");
  }
  if (overlaps(g.out, g.b)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps b (gemm is not in place)");
  }
  g.m = g.out.rows;  // a's leading dims (checked equal), counted where n > 0
  return g;
}

gemm::GemmParams gemm_params(const GemmOperands& g, float alpha, float beta) {
  gemm::GemmParams p{};
  p.a = g.a.data;
  p.b = g.b.data;
  p.out = g.out.data;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.a_stride = g.a.row_stride;
  p.b_stride = g.b.row_stride;
  p.out_stride = g.out.row_stride;
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

cuda::LaunchConfig gemm_launch_config(GemmPath path, int bn, int stages, int64_t m, int64_t n,
                                      void* stream, int persistent_sms, bool tma_out) {
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  if (path == GemmPath::kSm90) {
    const int64_t tiles = ceil_div(n, bn) * ceil_div(m, gemm::kGemmBlockM);
    // Persistent: one block per SM at most (setmaxnreg's split holds all of an SM's registers, so
    // a second would not be resident anyway); fewer where there are fewer tiles.
    lc.grid_x = static_cast<unsigned>(persistent_sms > 0 ? std::min<int64_t>(tiles, persistent_sms)
                                                         : tiles);
    lc.block_x = gemm::kGemmSm90Threads;
    lc.smem_bytes = static_cast<unsigned>(gemm::gemm_sm90_smem_bytes(bn, stages, tma_out));
  } else if (path == GemmPath::kMmaSm80) {
    lc.grid_x = static_cast<unsigned>(ceil_div(n, bn) * ceil_div(m, gemm::kGemmMmaBlockM));
    lc.block_x = gemm::kGemmMmaThreads;
    lc.smem_bytes = static_cast<unsigned>(gemm::gemm_mma_sm80_smem_bytes(bn, stages));
  } else {
    lc.grid_x = static_cast<unsigned>(ceil_div(n, gemm::kGemmSimtTile));
    lc.grid_y = static_cast<unsigned>(ceil_div(m, gemm::kGemmSimtTile));
    lc.block_x = gemm::kGemmSimtThreads;
  }
  return lc;
}

void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out, float alpha,
          float beta, void* stream, const GemmTuning& tuning) {
  const GemmOperands g = gemm_operands(a, b, out);
  const RowMatrix& x = g.a;
  const RowMatrix& w = g.b;
  const RowMatrix& y = g.out;
  const int64_t n = g.n;
  const int64_t k = g.k;
  RowMatrix bv;
  if (bias != nullptr) {
    bv = as_row_matrix(bias, "bias");
    if (bias->ndim != 1 || bv.cols != n) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "bias must be [n] = [{}]", n);
    }
    check_same_dtype(x, "a", bv, "bias");
    check_same_device(x, "a", bv, "bias");
    if (overlaps(y, bv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps bias");
  }
  if (!std::isfinite(alpha) || !std::isfinite(beta)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "alpha ({}) and beta ({}) must be finite", alpha, beta);
  }
  if (n == 0) return;  // after validation: a zero-size call is still checked
  const int64_t m = g.m;
  if (m == 0) return;
  // Unsupported dtypes are reported before any driver call, so also without a GPU.
  select_gemm(x.dtype, y.dtype, m, n, k, GemmTarget{});
  if (trace::enabled()) trace::gemm(x.dtype, y.dtype, m, n, k, bias != nullptr);

  GemmTarget target = gemm_target(x.device, k > 0 && tma_describable(x) && tma_describable(w),
                                  cp_async_ready(x) && cp_async_ready(w));
  target.tma_store_ok = tma_store_ok(y, beta);
  const GemmConfig dflt = select_gemm(x.dtype, y.dtype, m, n, k, target);
  gemm::GemmParams p = gemm_params(g, alpha, beta);
  p.bias = bias != nullptr ? bv.data : nullptr;
  cuda::ScopedDevice scope(x.device);
  const auto cs = static_cast<CUstream>(stream);
  const GemmCall call{x.dtype, y.dtype, m, n, k, bias != nullptr, beta != 0.0f, x.device, target};
  const GemmTactic t = call_tactic(call, dflt, tuning, x, w, y, p, cs);
  const GemmConfig cfg = gemm_config_of(t, x.dtype, y.dtype, target);
  launch_gemm(gemm_kernel(cfg, x.device).functions.at(0), cfg, t.split, x, w, y, p, cs,
              tuning.weights_early);
}

}  // namespace kjit::ops
