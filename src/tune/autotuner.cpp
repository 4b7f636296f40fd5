#include "tune/autotuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "util/env.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/glob.hpp"
#include "util/log.hpp"

namespace kjit::tune {

namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

const char* source_name(Choice::Source s) {
  switch (s) {
    case Choice::Source::kForced: return "forced";
    case Choice::Source::kStored: return "stored";
    case Choice::Source::kTuned: return "tuned";
    case Choice::Source::kDefault: break;
  }
  return "default";
}

TuneSettings TuneSettings::from_env() {
  TuneSettings s;
  const std::string mode(util::trim(util::env_get("KJIT_AUTOTUNE").value_or("")));
  if (mode.empty()) {
    s.mode = TuneMode::kStored;
  } else if (mode == "0") {
    s.mode = TuneMode::kOff;
  } else if (mode == "1") {
    s.mode = TuneMode::kUnseen;
  } else if (mode == "2") {
    s.mode = TuneMode::kRetune;
  } else {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "KJIT_AUTOTUNE must be 0, 1 or 2, not '{}'", mode);
  }
  s.rules = TacticRules(util::env_get("KJIT_TACTICS_BLOCKLIST").value_or(""),
                        util::env_get("KJIT_FORCE_TACTIC").value_or(""));
  return s;
}

Measured summarize(const std::string& tactic, std::vector<double> samples) {
  Measured m;
  m.tactic = tactic;
  std::sort(samples.begin(), samples.end());
  const double med = quantile(samples, 0.5);
  std::vector<double> dev;
  for (double x : samples) dev.push_back(std::fabs(x - med));
  std::sort(dev.begin(), dev.end());
  const double mad = quantile(dev, 0.5);
  std::vector<double> kept;
  for (double x : samples) {
    if (x <= med + 4 * mad) kept.push_back(x);
  }
  m.median_us = quantile(kept, 0.5);
  m.p10_us = quantile(kept, 0.1);
  m.p90_us = quantile(kept, 0.9);
  m.samples = static_cast<int>(kept.size());
  return m;
}

Autotuner::Autotuner(TuneSettings settings, std::unique_ptr<TuneStore> store)
    : settings_(std::move(settings)), store_(std::move(store)) {}

void Autotuner::reset_memo() {
  std::lock_guard<std::mutex> lock(mu_);
  memo_.clear();
}

Choice Autotuner::choose(const Fingerprint& fp, const TuneKey& key,
                         const std::vector<std::string>& candidates,
                         const std::string& default_tactic, const Measure* measure,
                         std::optional<TuneMode> call_mode) {
  if (!contains(candidates, default_tactic)) {
    fail(KJIT_ERROR_INTERNAL, "{}: the default tactic {} is not among the candidates", key.op,
         default_tactic);
  }
  const TuneMode mode = call_mode.value_or(settings_.mode);
  // The default is in the key: shapes of one bucket may have different defaults (the heuristic
  // sees the exact size), and a default answer must be the call's own.
  std::string memo_key = fp.id() + "|" + key.op + "|" + std::to_string(key.space_version) + "|" +
                         key.bucket + "|" + key.timing + "|" +
                         std::to_string(static_cast<int>(mode)) + "|" + default_tactic + "|";
  for (const std::string& c : candidates) memo_key += c + ";";
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memo_.find(memo_key);
    if (it != memo_.end()) return it->second;
  }

  // 1. A forced tactic that is valid here wins over everything, the blocklist included.
  const std::vector<std::string> forced = settings_.rules.forced(key.op);
  for (const std::string& pattern : forced) {
    for (const std::string& c : candidates) {
      if (util::glob_match(pattern, c)) {
        Choice ch{c, Choice::Source::kForced, "KJIT_FORCE_TACTIC " + key.op + ":" + pattern};
        std::lock_guard<std::mutex> lock(mu_);
        return memo_.emplace(memo_key, ch).first->second;
      }
    }
  }
  std::string note;
  if (!forced.empty()) {
    std::string names;
    for (const std::string& f : forced) names += (names.empty() ? "" : ",") + key.op + ":" + f;
    note = "KJIT_FORCE_TACTIC " + names + " names no valid tactic for this call: ignored";
  }
  // 2. The blocklist.
  std::vector<std::string> allowed;
  for (const std::string& c : candidates) {
    if (!settings_.rules.blocked(key.op, c)) allowed.push_back(c);
  }
  std::string fallback = default_tactic;
  auto add_note = [&note](const std::string& n) { note = note.empty() ? n : note + "; " + n; };
  if (allowed.empty()) {
    add_note("every tactic is blocked: the default runs");
    allowed.push_back(default_tactic);
  } else if (!contains(allowed, default_tactic)) {
    fallback = allowed.front();
    add_note(fmt::format("default {} blocked", default_tactic));
  }
  Choice ch = decide(mode, fp, key, allowed, fallback, measure);
  if (!note.empty()) ch.note = ch.note.empty() ? note : note + "; " + ch.note;
  // A default chosen only because this call could not measure is not final.
  const bool wanted_tuning = mode == TuneMode::kUnseen || mode == TuneMode::kRetune;
  if (ch.source == Choice::Source::kDefault && wanted_tuning && measure == nullptr) {
    ch.final = false;
    return ch;
  }
  std::lock_guard<std::mutex> lock(mu_);
  return memo_.emplace(memo_key, ch).first->second;
}

Choice Autotuner::decide(TuneMode mode, const Fingerprint& fp, const TuneKey& key,
                         const std::vector<std::string>& allowed, const std::string& fallback,
                         const Measure* measure) {
  if (mode == TuneMode::kOff || store_ == nullptr) {
    return {fallback, Choice::Source::kDefault, ""};
  }
  // Re-tuning skips the store, except in a call that cannot measure: the stored answer is still
  // better than the heuristic's.
  if (mode != TuneMode::kRetune || measure == nullptr) {
    if (std::optional<TuneRecord> rec = store_->find(fp, key)) {
      if (contains(allowed, rec->tactic)) {
        return {rec->tactic, Choice::Source::kStored, "tuned " + rec->when};
      }
      util::log("{} {}: stored tactic {} is not valid or allowed for this call: {} runs", key.op,
                key.bucket, rec->tactic, fallback);
    }
  }
  if (mode == TuneMode::kStored || measure == nullptr || allowed.size() < 2) {
    return {fallback, Choice::Source::kDefault, ""};
  }
  return tune(mode, fp, key, allowed, fallback, *measure);
}

Choice Autotuner::tune(TuneMode mode, const Fingerprint& fp, const TuneKey& key,
                       const std::vector<std::string>& allowed, const std::string& fallback,
                       const Measure& measure) {
  const std::filesystem::path path = store_->path_of(fp, key);
  std::unique_ptr<util::FileLock> lock;
  try {
    util::make_dirs(path.parent_path());
    lock = std::make_unique<util::FileLock>(path.string() + ".lock");
  } catch (const Error& e) {
    util::log("{} {}: tuning store not writable ({}): {} runs", key.op, key.bucket, e.what(),
              fallback);
    return {fallback, Choice::Source::kDefault, ""};
  }
  // Another process may have tuned this key while we waited for the lock: take its answer.
  if (mode == TuneMode::kUnseen) {
    if (std::optional<TuneRecord> rec = store_->find(fp, key)) {
      if (contains(allowed, rec->tactic)) {
        return {rec->tactic, Choice::Source::kStored, "tuned by another process " + rec->when};
      }
    }
  }
  TuneRecord rec;
  rec.default_tactic = fallback;
  rec.when = utc_now();
  std::optional<Measured> base;
  // The fallback first, so every other tactic is compared with it.
  std::vector<std::string> order{fallback};
  for (const std::string& t : allowed) {
    if (t != fallback) order.push_back(t);
  }
  for (const std::string& t : order) {
    std::vector<double> samples = measure(t);
    if (samples.empty()) continue;
    rec.tried.push_back(summarize(t, std::move(samples)));
    if (t == fallback) base = rec.tried.back();
  }
  // The default once more, last, and its faster run counts: a GPU still raising its clocks while
  // the default ran first must not make every other tactic look faster.
  if (base && rec.tried.size() > 1) {
    std::vector<double> again = measure(fallback);
    if (!again.empty()) {
      const Measured second = summarize(fallback, std::move(again));
      if (second.median_us < base->median_us) base = rec.tried.front() = second;
    }
  }
  rec.tactic = fallback;
  if (base) {
    // A winner must beat the default by the margin and lie below the default's p10, so the
    // default's own noise cannot pick another tactic.
    double best = std::min(base->median_us * (1.0 - settings_.min_margin), base->p10_us);
    for (const Measured& m : rec.tried) {
      if (m.tactic != fallback && m.median_us < best) {
        best = m.median_us;
        rec.tactic = m.tactic;
      }
    }
  }
  const Measured* won = nullptr;
  for (const Measured& m : rec.tried) {
    if (m.tactic == rec.tactic) won = &m;
  }
  std::string note = base && won ? fmt::format("{:.2f} us against the default's {:.2f} ({} tried)",
                                               won->median_us, base->median_us, rec.tried.size())
                                 : "the default could not be timed";
  if (base) {
    try {
      store_->put(fp, key, rec);
    } catch (const Error& e) {
      util::log("{} {}: tuning result not stored ({})", key.op, key.bucket, e.what());
    }
  }
  return {rec.tactic, base ? Choice::Source::kTuned : Choice::Source::kDefault, note};
}

}  // namespace kjit::tune
