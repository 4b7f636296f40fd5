// kjit_gemm's tactics for the autotuner (docs/autotune.md): the ways one call can run, named as
// the store and KJIT_FORCE_TACTIC / KJIT_TACTICS_BLOCKLIST spell them, which of them are valid for
// a call (the checks the launch paths make), the shape bucket a tuned result serves, and the
// choice for a call (the heuristic's pick unless a rule, a stored or a measured result says
// otherwise), remembered per process.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/arch.hpp"
#include "jit/spec.hpp"
#include "ops/gemm/gemm.hpp"
#include "tune/autotuner.hpp"
#include "tune/process_tuner.hpp"

namespace kjit::ops {

inline constexpr const char* kGemmTuneOp = "gemm";
// Bumped when a tactic's name changes meaning or the candidates grow (stored results of the old
// space are then misses, so a tuned bucket is timed again over the new candidates).
// 2: the mma_sm80 path's tactics joined the space. 3: the persistent sm90 tactics. 4: the decode
// kernel's deeper ring (one block an SM). (The paired persistent tiles, _p2, are forced only:
// not candidates until a GPU has run them.)
inline constexpr int kGemmTacticSpace = 4;

// One way to run a call: a path and its parameters.
//   "sm90_bn128_s6"     the TMA + wgmma kernel, 128 x bn tiles, 6 pipeline stages
//   "sm90_bn128_s6_p"   the same tiles from its persistent form (min(tiles, SMs) blocks looping
//                       over the tiles)
//   "sm90_bn256_s4_p2"  the persistent form in pairs: clusters of two blocks on adjacent row tiles
//                       of one column tile, b's tile loaded once for both (TMA multicast)
//   "mma_bn64_s4"       the mma.sync + cp.async kernel (any sm_80+), 128 x bn tiles, 4 stages
//   "decode_t16_split4" the weight-streaming kernel, a 16-token tile, K split over 4 blocks of a
//                       cluster (its stages follow from the tile and the device: two blocks an
//                       SM)
//   "decode_t64_s9_split4"  the same with a ring of 9 stages (one block an SM where 9 do not fit
//                       twice)
//   "simt"              the fp32 fallback
struct GemmTactic {
  GemmPath path = GemmPath::kSimt;
  int bn = 0, stages = 0;     // sm90, mma_sm80; decode: 0 = the tile's default ring
  int tokens = 0, split = 0;  // decode
  bool persistent = false;    // sm90
  bool pair = false;  // sm90 persistent, bf16 / fp16: clusters of two blocks sharing b (_p2)
  std::string name() const;
  // The tactic a name spells, or nullopt for anything else.
  static std::optional<GemmTactic> parse(std::string_view name);
  bool operator==(const GemmTactic& o) const {
    return path == o.path && bn == o.bn && stages == o.stages && tokens == o.tokens &&
           split == o.split && persistent == o.persistent && pair == o.pair;
  }
};

// The kernel a tactic runs (its split is a launch parameter, not part of the kernel).
GemmConfig gemm_config_of(const GemmTactic& t, DType dtype, DType out_dtype,
                          const GemmTarget& target);
// The tactic of a selected config and (decode path) split; a decode config's ring is taken as its
// tile's default (stages 0), which is what the selection picks.
GemmTactic gemm_tactic_of(const GemmConfig& c, int split);

// M of a bucket: the next power of two (an engine's batch sizes fall into a handful).
int64_t gemm_m_bucket(int64_t m);
// "dtype=bf16,out=bf16,m=16,n=4096,k=14336,bias=0,beta=0": exact N, K, dtypes and epilogue.
std::string gemm_bucket(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k, bool bias,
                        bool beta);

// Whether `t` can serve every m of the bucket of m_bucket rows: the launch paths' own checks (a
// compute capability 9.0 device, operands TMA can describe, sides TMA's coordinates reach, the
// stages in shared memory, token tile and cluster split within the kernel's limits, grid sizes;
// mma_sm80_can_run for the mma tactics). A persistent sm90 tactic is valid wherever its
// one-tile form is (the same tiles and ring; its grid is only smaller).
bool gemm_tactic_valid(const GemmTactic& t, int64_t m_bucket, int64_t n, int64_t k,
                       const GemmTarget& target);

// The valid tactics of a call, `dflt` (the heuristic's pick) first and always among them.
std::vector<GemmTactic> gemm_tactics(const GemmTactic& dflt, int64_t m, int64_t n, int64_t k,
                                     const GemmTarget& target);

// The kernel tactic `tactic` runs for calls of `bucket` (a gemm_bucket text) on a device of
// `arch`, as kjit_gemm asks for it there (gemm_config_of at that device's shared memory, operands
// TMA can describe): one spec, or none when the tactic is not valid for the bucket on that arch.
// Throws KJIT_ERROR_INVALID_ARGUMENT when the tactic or the bucket is not gemm's. OpDef's
// tactic_specs facet (docs/aot.md, "Tuning records").
std::vector<jit::Spec> gemm_tactic_specs(const std::string& bucket, const std::string& tactic,
                                         const jit::ArchTarget& arch);

// Everything the choice for a call depends on.
struct GemmCall {
  DType dtype = DType::kBF16, out_dtype = DType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  bool bias = false, beta = false;
  int device = 0;
  GemmTarget target;
};

// The chosen tactic and how it was chosen.
struct GemmChoice {
  GemmTactic tactic;
  tune::Choice choice;
  tune::TuneKey key;
};

// The decode path's default split for a config (needs its loaded kernel's residency).
using GemmDefaultSplit = std::function<int(const GemmConfig&)>;
// Times one tactic for the call (samples in microseconds; empty when it cannot run).
using GemmMeasure = std::function<std::vector<double>(const GemmTactic&)>;

// The choice remembered for a call like this one (same bucket, default kernel and request), or
// null: then choose_gemm_tactic decides.
const GemmChoice* remembered_gemm_choice(const GemmCall& call, const GemmConfig& dflt,
                                         const tune::TuneRequest& req);

// The tactic for a call whose heuristic picked `dflt`: KJIT_FORCE_TACTIC, the blocklist, a stored
// or (when the call's mode asks and its stream is not being captured) a measured result, else the
// default. Remembered per process by a hash of the call's bucket, default and request, so a call
// pays one lookup. A choice made without measuring because the stream was being captured is
// logged and not remembered.
const GemmChoice& choose_gemm_tactic(const GemmCall& call, const GemmConfig& dflt,
                                     const tune::TuneRequest& req, void* stream,
                                     const GemmDefaultSplit& default_split,
                                     const GemmMeasure& measure);

}  // namespace kjit::ops
