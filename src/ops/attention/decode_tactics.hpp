// Decode attention's tactics for the autotuner (docs/autotune.md): the ways one plan can run,
// named as the store and KJIT_FORCE_TACTIC / KJIT_TACTICS_BLOCKLIST spell them, the planner that
// checks them (a tactic is valid where the plan's own checks pass), the shape bucket a stored
// result serves and the choice a plan makes. The choice happens when planning, on the host,
// before any capture: forced -> blocklist -> stored record -> the heuristic. A plan never
// measures; `kjit-cli tune --from` does, for decode lines of a workload.
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/arch.hpp"
#include "jit/spec.hpp"
#include "ops/attention/decode_attention.hpp"
#include "tune/autotuner.hpp"
#include "tune/process_tuner.hpp"

namespace kjit::ops {

inline constexpr const char* kDecodeTuneOp = "decode_attention";
// Bumped when a tactic's name changes meaning (stored results of the old space are then misses).
inline constexpr int kDecodeTacticSpace = 1;

// How a split request's partial results combine.
enum class DecodeMerge {
  kPlanned,  // as planned: the merge kernel
  kKernel,   // a second, dependent kernel
  kFused,    // the last CTA of each (request, heads) merges (counters in the workspace)
  kCluster,  // the splits form a thread-block cluster (sm_90, 2..16 splits)
};

// One way to run a plan. A field left at its "planned" value (0, or -1 for addr and pdl) keeps
// what the plan picks; the name lists only the fields set, in a fixed order:
//   split{N} kernel|fused|cluster s{stages} w{warps} ts{stage_tokens} hp{heads_per_cta}
//   jt{joint_tiles} cps{ctas_per_sm} addr64|addr32 pdl0|pdl1
// joined by '_': "split4_cluster", "split1", "split8_kernel_s3", "w2_ts64_jt2"; "planned" when
// nothing is set. A merge is named only with more than one split ("split1" merges nothing).
// The autotuner's candidates vary the split count, the merge and the pipeline depth; the other
// fields are for diagnosis (KJIT_FORCE_TACTIC, `kjit-cli bench decode_attention --set tactic=`).
struct DecodeTactic {
  int splits = 0;  // the most parts a request is split into (1..256); 0: num_splits, else the
                   // plan's wave model
  DecodeMerge merge = DecodeMerge::kPlanned;
  int stages = 0;         // cp.async pipeline depth 2..8; 0: the deepest that fits ctas_per_sm
  int warps = 0;          // 1, 2, 4 or 8
  int stage_tokens = 0;   // 0: the planned stage bytes kept
  int heads_per_cta = 0;  // 1, 2, 4 or 8; must divide num_kv_heads and warps
  int joint_tiles = 0;    // 1 or 2
  int ctas_per_sm = 0;    // the residency the wave model assumes; 0: from shared memory
  int addr = -1;          // DecodeConfig::addr: 1 64-bit lookups, 2 32-bit where the caches allow
  int pdl = -1;           // 1: the merge kernel is a programmatic dependent launch (sm_90+)

  std::string name() const;
  // The tactic a canonical name spells, or nullopt for anything else.
  static std::optional<DecodeTactic> parse(std::string_view name);
  // True when only the split count and the merge are set (the plan keeps its CTA).
  bool keeps_cta() const;
  // The same tactic (the same name): every field equal, the merge ignored with one split.
  bool operator==(const DecodeTactic& o) const;
};

// The longest attended length of a bucket: the next power of two.
int64_t decode_len_bucket(int64_t len);

// A validated plan request: everything plan_batch_decode takes, and the plans it can make.
class DecodePlanner {
 public:
  // Validates the arguments (throws kjit::Error as kjit_batch_decode_plan documents) and queries
  // the device (or assumes an H100 / H200-class one without a driver when num_sms > 0). With
  // `budget`, plans for a device of that shared memory and num_sms SMs (> 0) without querying
  // one (decode_tactic_specs).
  DecodePlanner(const int32_t* kv_indptr_host, int batch, int num_qo_heads, int num_kv_heads,
                int head_dim, int page_size, int layout, DLDataType q_dtype, DLDataType kv_dtype,
                float sm_scale, float logits_soft_cap, int window_left, int num_splits, int num_sms,
                int device_id, const SmemBudget* budget = nullptr);

  // The heuristic's plan: select_decode's variant, the wave model's (or num_splits') partition,
  // the merge kernel.
  const DecodePlanData& heuristic() const { return heuristic_; }
  // The plan of `t`; throws kjit::Error(KJIT_ERROR_INVALID_ARGUMENT or _UNSUPPORTED) when the
  // plan's checks refuse it.
  DecodePlanData with(const DecodeTactic& t) const;
  // The tactic the heuristic's plan runs: split{N} and, split, the merge kernel.
  DecodeTactic default_tactic() const;
  // Whether `t` plans here and runs as named: its split count is reached (lengths too short
  // for it give fewer parts), the caller's num_splits (when set) is kept, a merge it names runs.
  bool valid(const DecodeTactic& t) const;
  // The autotuner's candidates (tactic space kDecodeTacticSpace) valid here, the default first:
  // split counts 1..128, each with every merge, and the pipeline depths 2..4 of the default's
  // split and merge; then any literal tactic name among `extra` that is valid (forced names).
  std::vector<DecodeTactic> tactics(const std::vector<std::string>& extra = {}) const;
  // "q=bf16,kv=bf16,batch=8,kv_len=4096,kv_heads=8,group=4,head_dim=128,page=16,layout=nhd,
  // sms=132": batch and the longest attended length to the next power of two, the rest exact.
  std::string bucket() const;
  // The bucket's fields as numbers, in bucket()'s order (q and kv dtype codes, batch, kv_len,
  // kv_heads, group, head_dim, page, layout, sms, num_splits): what a remembered choice is
  // keyed by without formatting the text.
  std::array<int64_t, 11> bucket_fields() const;
  bool have_driver() const { return have_driver_; }
  int device() const { return device_; }

 private:
  DecodePlanData base() const;
  DecodePlanData finish(DecodePlanData pl, int forced_splits) const;

  const int32_t* indptr_;
  int batch_, qo_heads_, kv_heads_, head_dim_, page_size_, layout_;
  DLDataType q_dtype_, kv_dtype_;
  DType qd_;
  bool fp8_;
  float sm_scale_, soft_cap_;
  int window_left_, num_splits_, device_;
  std::vector<int64_t> eff_;
  int64_t max_eff_ = 0;
  SmemBudget budget_;
  int sms_ = 0;
  bool have_driver_ = false;
  DecodePlanData heuristic_;
};

// How a plan consults the autotuner.
struct DecodeTuneRequest {
  // The plan's own mode (nullopt: KJIT_AUTOTUNE; kOff: the heuristic and the rules only) and the
  // timing whose records it uses (kjit_batch_decode_plan: eager-cold).
  tune::TuneRequest req;
  // Tests: a tuner with its own store and the fingerprint to look records up under. Null: the
  // process's tuner and the device's fingerprint (without a driver: the rules only).
  tune::Autotuner* tuner = nullptr;
  const tune::Fingerprint* fp = nullptr;
};

// The tactic for a plan: KJIT_FORCE_TACTIC (a valid candidate or a literal valid tactic name),
// the blocklist, a stored record of the plan's bucket and timing, else the heuristic's. Logged
// when not the default, and at log level >= 1.
struct DecodeTacticChoice {
  DecodeTactic tactic;
  tune::Choice choice;
  tune::TuneKey key;
};
DecodeTacticChoice choose_decode_tactic(const DecodePlanner& planner, const DecodeTuneRequest& r);

// The kernels tactic `tactic` runs for plans of `bucket` (a DecodePlanner::bucket() text) on a
// device of `arch`, as kjit_batch_decode_run asks for them there: the plan of the tactic at that
// arch's shared memory (arch_smem_per_sm_kb), 16-byte rows, with the 32-bit row offsets it plans
// and the 64-bit ones a run takes for caches past 4 GB. None when the tactic is not valid for the
// bucket there. Throws KJIT_ERROR_INVALID_ARGUMENT when the tactic or the bucket is not decode
// attention's. OpDef's tactic_specs facet (docs/aot.md, "Tuning records").
std::vector<jit::Spec> decode_tactic_specs(const std::string& bucket, const std::string& tactic,
                                           const jit::ArchTarget& arch);

}  // namespace kjit::ops
