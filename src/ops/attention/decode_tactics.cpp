#include "ops/attention/decode_tactics.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <type_traits>
#include <unordered_map>

#include "diag/call_log.hpp"
#include "ops/attention/decode_internal.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/log.hpp"

namespace kjit::ops {

namespace {

// The split counts worth timing: every count up to 4, then about 1.5x apart (the wave model's
// costs change slowly between them), up to half the plan's 256-split limit.
constexpr int kTunedSplits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
constexpr DecodeMerge kMerges[] = {DecodeMerge::kKernel, DecodeMerge::kFused,
                                   DecodeMerge::kCluster};

const char* merge_name(DecodeMerge m) {
  switch (m) {
    case DecodeMerge::kKernel: return "kernel";
    case DecodeMerge::kFused: return "fused";
    case DecodeMerge::kCluster: return "cluster";
    case DecodeMerge::kPlanned: break;
  }
  return "";
}

// The integer fields in name order, with their prefixes and the value that means "as planned".
struct IntField {
  const char* prefix;
  int DecodeTactic::*field;
};
constexpr IntField kIntFields[] = {
    {"s", &DecodeTactic::stages},        {"w", &DecodeTactic::warps},
    {"ts", &DecodeTactic::stage_tokens}, {"hp", &DecodeTactic::heads_per_cta},
    {"jt", &DecodeTactic::joint_tiles},  {"cps", &DecodeTactic::ctas_per_sm}};

// "<prefix><digits>" with a positive value, else 0.
int number_after(std::string_view token, std::string_view prefix) {
  if (token.size() <= prefix.size() || token.substr(0, prefix.size()) != prefix) return 0;
  int v = 0;
  for (char ch : token.substr(prefix.size())) {
    if (ch < '0' || ch > '9' || v > 100000) return 0;
    v = v * 10 + (ch - '0');
  }
  return v;
}

}  // namespace

std::string DecodeTactic::name() const {
  std::vector<std::string> parts;
  if (splits > 0) parts.push_back(fmt::format("split{}", splits));
  if (merge != DecodeMerge::kPlanned && splits != 1) parts.push_back(merge_name(merge));
  for (const IntField& f : kIntFields) {
    if (this->*f.field != 0) parts.push_back(fmt::format("{}{}", f.prefix, this->*f.field));
  }
  if (addr >= 0) parts.push_back(addr == 1 ? "addr64" : addr == 2 ? "addr32" : "addr?");
  if (pdl >= 0) parts.push_back(fmt::format("pdl{}", pdl));
  if (parts.empty()) return "planned";
  return fmt::format("{}", fmt::join(parts, "_"));
}

std::optional<DecodeTactic> DecodeTactic::parse(std::string_view name) {
  DecodeTactic t;
  if (name == "planned") return t;
  std::vector<std::string_view> tokens;
  for (size_t at = 0; at <= name.size();) {
    const size_t end = std::min(name.find('_', at), name.size());
    tokens.push_back(name.substr(at, end - at));
    at = end + 1;
  }
  size_t i = 0;
  auto next = [&]() -> std::string_view { return i < tokens.size() ? tokens[i] : ""; };
  if (int v = number_after(next(), "split")) t.splits = v, ++i;
  for (DecodeMerge m : kMerges) {
    if (next() == merge_name(m)) t.merge = m, ++i;
  }
  for (const IntField& f : kIntFields) {
    if (int v = number_after(next(), f.prefix)) t.*f.field = v, ++i;
  }
  if (next() == "addr64") t.addr = 1, ++i;
  if (next() == "addr32") t.addr = 2, ++i;
  if (next() == "pdl0" || next() == "pdl1") t.pdl = next() == "pdl1" ? 1 : 0, ++i;
  // Every token read, and only the canonical spelling ("split4", not "split04"): one tactic, one
  // name.
  if (i != tokens.size() || t.name() != name) return std::nullopt;
  return t;
}

bool DecodeTactic::operator==(const DecodeTactic& o) const {
  for (const IntField& f : kIntFields) {
    if (this->*f.field != o.*f.field) return false;
  }
  return splits == o.splits && (splits == 1 || merge == o.merge) && addr == o.addr && pdl == o.pdl;
}

bool DecodeTactic::keeps_cta() const {
  for (const IntField& f : kIntFields) {
    if (this->*f.field != 0) return false;
  }
  return addr < 0 && pdl < 0;
}

int64_t decode_len_bucket(int64_t len) {
  int64_t b = 1;
  while (b < len) b *= 2;
  return b;
}

DecodeTactic DecodePlanner::default_tactic() const {
  DecodeTactic t;
  t.splits = heuristic_.split.max_splits;
  if (t.splits > 1) t.merge = DecodeMerge::kKernel;
  return t;
}

bool DecodePlanner::valid(const DecodeTactic& t) const {
  DecodePlanData pl;
  try {
    pl = with(t);
  } catch (const Error&) {
    return false;
  }
  if (t.splits > 0 && pl.split.max_splits != t.splits) return false;
  if (num_splits_ > 0 && pl.split.max_splits != heuristic_.split.max_splits) return false;
  if (pl.split.max_splits > 1) {
    if (t.merge == DecodeMerge::kCluster && pl.cfg.cluster_merge == 0) return false;
    if (t.merge == DecodeMerge::kFused && pl.fused_merge == 0) return false;
  }
  return true;
}

std::vector<DecodeTactic> DecodePlanner::tactics(const std::vector<std::string>& extra) const {
  std::vector<DecodeTactic> out{default_tactic()};
  auto add = [&](const DecodeTactic& t) {
    if (std::find(out.begin(), out.end(), t) == out.end() && valid(t)) out.push_back(t);
  };
  for (int n : kTunedSplits) {
    // Parts under one 16-token tile only add merge work (the wave model skips them too).
    if (n > 1 && (max_eff_ + n - 1) / n < 16) break;
    DecodeTactic t;
    t.splits = n;
    if (n == 1) {
      add(t);
      continue;
    }
    for (DecodeMerge m : kMerges) {
      t.merge = m;
      add(t);
    }
  }
  DecodeTactic deeper = default_tactic();
  for (int st = 2; st <= 4; ++st) {
    deeper.stages = st;
    if (st != heuristic_.cfg.stages) add(deeper);
  }
  for (const std::string& name : extra) {
    if (std::optional<DecodeTactic> t = DecodeTactic::parse(name)) add(*t);
  }
  return out;
}

std::array<int64_t, 11> DecodePlanner::bucket_fields() const {
  return {static_cast<int64_t>(qd_),
          fp8_ ? -1 : static_cast<int64_t>(qd_),
          decode_len_bucket(batch_),
          decode_len_bucket(max_eff_),
          kv_heads_,
          qo_heads_ / kv_heads_,
          head_dim_,
          page_size_,
          layout_,
          sms_,
          num_splits_};
}

std::string DecodePlanner::bucket() const {
  const std::array<int64_t, 11> f = bucket_fields();
  std::string b = fmt::format(
      "q={},kv={},batch={},kv_len={},kv_heads={},group={},head_dim={},page={},layout={},sms={}",
      dtype_name(qd_), fp8_ ? "e4m3" : dtype_name(qd_), f[2], f[3], f[4], f[5], f[6], f[7],
      layout_ == KJIT_KV_LAYOUT_NHD ? "nhd" : "hnd", f[9]);
  // The caller's split count narrows the candidates: its results are kept apart.
  if (num_splits_ > 0) b += fmt::format(",splits={}", num_splits_);
  return b;
}

namespace {

// The choices made so far, by tuner, fingerprint, bucket, mode, timing and default: a plan of a
// known bucket checks the one remembered tactic instead of planning every candidate again, and
// pays a hash of these bytes (no padding: they are hashed as they lie), not the bucket's text.
struct MemoKey {
  int64_t tuner, fp, mode, timing;
  std::array<int64_t, 11> bucket;
  int64_t default_splits;  // the default is split{N}_kernel, or split1
};
static_assert(std::has_unique_object_representations_v<MemoKey>, "hashed as bytes");

struct HashOf {
  size_t operator()(const util::Hash128& h) const { return static_cast<size_t>(h.lo); }
};

std::shared_mutex g_memo_mu;
std::unordered_map<util::Hash128, DecodeTacticChoice, HashOf> g_memo;

// Without a driver there is no fingerprint to look records up under: the rules only.
tune::Autotuner& rules_only_tuner() {
  static tune::Autotuner tuner(tune::process_autotuner().settings(), nullptr);
  return tuner;
}

}  // namespace

DecodeTacticChoice choose_decode_tactic(const DecodePlanner& planner, const DecodeTuneRequest& r) {
  static const tune::Fingerprint kNoDevice;
  tune::Autotuner* tuner = r.tuner;
  const tune::Fingerprint* fp = r.fp;
  if (tuner == nullptr) tuner = &tune::process_autotuner();
  if (fp == nullptr) {
    if (planner.have_driver()) {
      fp = &tune::device_fingerprint(planner.device());
    } else {
      tuner = &rules_only_tuner();
      fp = &kNoDevice;
    }
  }
  const DecodeTactic dflt = planner.default_tactic();
  // A plan never measures: tuning modes (1, 2) read the store as the default mode does, and the
  // answer is final for the process (a record another process stores is seen after a restart).
  const tune::TuneMode mode = r.req.mode.value_or(tuner->settings().mode) == tune::TuneMode::kOff
                                  ? tune::TuneMode::kOff
                                  : tune::TuneMode::kStored;
  // Only the process's tuners are remembered here (a test's tuner lives shorter than the map);
  // their fingerprints are the process's too (device_fingerprint's, kNoDevice).
  const bool remember = r.tuner == nullptr;
  MemoKey mk{};
  mk.tuner = static_cast<int64_t>(reinterpret_cast<uintptr_t>(tuner));
  mk.fp = static_cast<int64_t>(reinterpret_cast<uintptr_t>(fp));
  mk.mode = static_cast<int64_t>(mode);
  mk.timing = (r.req.timing.graph ? 2 : 0) + (r.req.timing.cold ? 1 : 0);
  mk.bucket = planner.bucket_fields();
  mk.default_splits = dflt.splits;
  const util::Hash128 memo_key = util::xxh3_128({reinterpret_cast<const char*>(&mk), sizeof mk});
  if (remember) {
    std::shared_lock<std::shared_mutex> lock(g_memo_mu);
    auto it = g_memo.find(memo_key);
    if (it != g_memo.end() && (it->second.tactic == dflt || planner.valid(it->second.tactic))) {
      return it->second;
    }
  }
  DecodeTacticChoice c;
  c.key = tune::TuneKey{kDecodeTuneOp, kDecodeTacticSpace, planner.bucket(), r.req.timing.name()};
  const std::vector<DecodeTactic> tactics =
      planner.tactics(tuner->settings().rules.forced(kDecodeTuneOp));
  std::vector<std::string> names;
  for (const DecodeTactic& t : tactics) names.push_back(t.name());
  c.choice = tuner->choose(*fp, c.key, names, dflt.name(), nullptr, mode);
  c.tactic = *DecodeTactic::parse(c.choice.tactic);
  const bool chosen = c.choice.source != tune::Choice::Source::kDefault || !c.choice.note.empty();
  if (chosen || api::current_log_settings().level >= 1) {
    util::log("decode_attention {} {}: {} ({}{})", c.key.bucket, c.key.timing, c.choice.tactic,
              tune::source_name(c.choice.source),
              c.choice.note.empty() ? "" : "; " + c.choice.note);
  }
  if (remember) {
    std::unique_lock<std::shared_mutex> lock(g_memo_mu);
    g_memo[memo_key] = c;
  }
  return c;
}

namespace {

// A bucket's q dtype ("bf16", "fp16") and cache dtype (that, or "e4m3") as a plan takes them.
DLDataType decode_bucket_dtype(const std::string& name, const std::string& bucket) {
  if (name == "bf16") return DLDataType{kDLBfloat, 16, 1};
  if (name == "fp16") return DLDataType{kDLFloat, 16, 1};
  if (name == "e4m3") return DLDataType{decode_detail::kDLFloat8E4m3fn, 8, 1};
  fail(KJIT_ERROR_INVALID_ARGUMENT, "decode_attention bucket '{}': no dtype '{}'", bucket, name);
}

}  // namespace

std::vector<jit::Spec> decode_tactic_specs(const std::string& bucket, const std::string& tactic,
                                           const jit::ArchTarget& arch) {
  const std::optional<DecodeTactic> t = DecodeTactic::parse(tactic);
  if (!t) fail(KJIT_ERROR_INVALID_ARGUMENT, "'{}' is not a decode_attention tactic", tactic);
  const SetArgs f = parse_set_list(bucket);
  auto field = [&](const char* name) -> const std::string& {
    const auto it = f.find(name);
    if (it == f.end()) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "decode_attention bucket '{}' has no {}", bucket, name);
    }
    return it->second;
  };
  auto number = [&](const char* name, int max = 1 << 30) {
    field(name);
    return static_cast<int>(positive_int_arg(f, name, max));
  };
  const int batch = number("batch", 1 << 20);
  const int kv_len = number("kv_len"), page = number("page");
  const int kv_heads = number("kv_heads"), group = number("group");
  // Every request at the bucket's longest length, in whole pages (pages x page is what a plan
  // attends): the lengths reach each split count the bucket's plans reach.
  const int64_t pages = std::max(1, kv_len / page);
  if (pages * batch > INT32_MAX) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "decode_attention bucket '{}': too many pages", bucket);
  }
  std::vector<int32_t> indptr(static_cast<size_t>(batch) + 1);
  for (size_t b = 0; b < indptr.size(); ++b) indptr[b] = static_cast<int32_t>(pages * b);
  const int kb = arch_smem_per_sm_kb(arch);
  const SmemBudget budget{kb * 1024, (kb - 1) * 1024, 1024};
  const int splits = f.count("splits") != 0 ? number("splits") : 0;
  std::optional<DecodePlanner> planner;
  try {
    planner.emplace(indptr.data(), batch, kv_heads * group, kv_heads, number("head_dim"), page,
                    field("layout") == "hnd" ? KJIT_KV_LAYOUT_HND : KJIT_KV_LAYOUT_NHD,
                    decode_bucket_dtype(field("q"), bucket),
                    decode_bucket_dtype(field("kv"), bucket), 0.0f, 0.0f, -1, splits, number("sms"),
                    0, &budget);
  } catch (const Error& e) {
    if (e.status() == KJIT_ERROR_UNSUPPORTED) return {};  // no variant fits this arch's memory
    throw;
  }
  // The text must read back as itself: a bucket of another layout maps nothing.
  if (planner->bucket() != bucket) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "'{}' is not a decode_attention bucket (it reads back as '{}')", bucket,
         planner->bucket());
  }
  if (!planner->valid(*t)) return {};
  // As plan_batch_decode plans it and batch_decode_run's run_config compiles it.
  DecodeConfig cfg =
      *t == planner->default_tactic() ? planner->heuristic().cfg : planner->with(*t).cfg;
  cfg.cp_bytes = 16;
  std::vector<jit::Spec> out{decode_spec(cfg)};
  if (cfg.addr == 2) {
    cfg.addr = 1;
    out.push_back(decode_spec(cfg));
  }
  return out;
}

}  // namespace kjit::ops
