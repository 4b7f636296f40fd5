// The autotuner's choice (docs/autotune.md): which of an op's tactics a call runs. The op hands
// over its valid tactics for the call, its heuristic's pick (always one of them, so a tuned
// result can never lose to not tuning at the shape it was measured on) and, when the call may
// measure, a function that times one tactic. The choice, in order:
//   1. KJIT_FORCE_TACTIC: the first forced pattern that names a valid tactic;
//   2. the blocklist removes tactics (a blocked default falls back to the first allowed one);
//   3. a stored result for (device, op, bucket, timing), unless re-tuning;
//   4. with KJIT_AUTOTUNE=1|2 and a call that may measure: every allowed tactic is timed, and one
//      other than the default wins only by a clear margin; the result is stored for later runs
//      and other processes (under a file lock, so concurrent tuners converge on one record);
//   5. otherwise the default.
// Answers are remembered per process, so a call pays the lookup once per key.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tune/tactic_rules.hpp"
#include "tune/tune_store.hpp"

namespace kjit::tune {

enum class TuneMode {
  kStored,  // KJIT_AUTOTUNE unset: stored results are used, nothing is measured
  kOff,     // 0: the heuristic only (rules still apply)
  kUnseen,  // 1: measure buckets without a stored result
  kRetune,  // 2: measure every bucket again, once per process
};

struct TuneSettings {
  TuneMode mode = TuneMode::kStored;
  TacticRules rules;
  // A tactic other than the default wins only when its median is at least this fraction below
  // the default's and below the default's p10 (noise must not pick a tactic).
  double min_margin = 0.02;
  // KJIT_AUTOTUNE, KJIT_TACTICS_BLOCKLIST, KJIT_FORCE_TACTIC. Throws kjit::Error
  // (KJIT_ERROR_INVALID_ARGUMENT) on a malformed value.
  static TuneSettings from_env();
};

// One tactic's timing: the samples in microseconds, empty when it could not run (then it is not
// a candidate).
using Measure = std::function<std::vector<double>(const std::string& tactic)>;

struct Choice {
  enum class Source { kDefault, kForced, kStored, kTuned };
  std::string tactic;
  Source source = Source::kDefault;
  std::string note;  // why, for the log
  // False for a default given only because this call could not measure while tuning was wanted
  // (a stream being captured): the op must not remember it, so a later call tunes.
  bool final = true;
};
const char* source_name(Choice::Source s);

// Median and p10 / p90 of samples after dropping those above median + 4 MADs (a preempted
// sample must not decide).
Measured summarize(const std::string& tactic, std::vector<double> samples);

class Autotuner {
 public:
  Autotuner(TuneSettings settings, std::unique_ptr<TuneStore> store);  // store may be null
  const TuneSettings& settings() const { return settings_; }
  const TuneStore* store() const { return store_.get(); }

  // `candidates`: the op's valid tactics for this call, `default_tactic` among them. `measure`:
  // null when the call cannot measure now (a stream being captured, no GPU); then a stored result
  // is used even when re-tuning. `mode`: the call's own mode (an options struct), else the
  // settings'. Thread-safe.
  Choice choose(const Fingerprint& fp, const TuneKey& key,
                const std::vector<std::string>& candidates, const std::string& default_tactic,
                const Measure* measure, std::optional<TuneMode> mode = std::nullopt);

  // Forgets the per-process answers (tests, `kjit-cli tune`).
  void reset_memo();

 private:
  Choice decide(TuneMode mode, const Fingerprint& fp, const TuneKey& key,
                const std::vector<std::string>& allowed, const std::string& fallback,
                const Measure* measure);
  Choice tune(TuneMode mode, const Fingerprint& fp, const TuneKey& key,
              const std::vector<std::string>& allowed, const std::string& fallback,
              const Measure& measure);

  TuneSettings settings_;
  std::unique_ptr<TuneStore> store_;
  std::mutex mu_;
  std::map<std::string, Choice> memo_;  // by fingerprint id, key, mode, default and candidates
};

}  // namespace kjit::tune
