// See bench_stats.hpp.
#include "bench_stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kjit::cli {

int iters_or_default(const BenchOptions& o) {
  if (o.iters > 0) return o.iters;
  // A noise-stopped run is bounded by its time cap; the count only needs to stay finite.
  return o.max_noise_pct > 0 ? 100000 : kDefaultIters;
}

const char* flush_name(Flush f) {
  switch (f) {
    case Flush::kRead: return "read";
    case Flush::kDirty: return "dirty";
    case Flush::kNone: break;
  }
  return "none";
}

Flush parse_flush(const std::string& name) {
  for (Flush f : {Flush::kRead, Flush::kDirty, Flush::kNone}) {
    if (name == flush_name(f)) return f;
  }
  throw std::invalid_argument("--flush: unknown flush '" + name + "' (known: read, dirty, none)");
}

std::string Timing::text() const {
  return timer + "/" + flush_name(flush);
}

const std::vector<std::string>& known_timers() {
  static const std::vector<std::string> names = {"cupti", "events", "events-batched", "graph"};
  return names;
}

void check_timer_flush(const std::string& timer, Flush flush) {
  const auto& known = known_timers();
  if (std::find(known.begin(), known.end(), timer) == known.end()) {
    throw std::invalid_argument("--timer: unknown timer '" + timer +
                                "' (known: cupti, events, events-batched, graph)");
  }
  // A flush between back-to-back calls would be part of the batch's time.
  if ((timer == "events-batched" || timer == "graph") && flush != Flush::kNone) {
    throw std::invalid_argument("--timer " + timer +
                                " times back-to-back calls, so it needs --flush none (--hot-l2)");
  }
}

const std::vector<std::string>& known_backends() {
  static const std::vector<std::string> names = {"kjit", "copy", "reference"};
  return names;
}

std::vector<std::string> parse_backends(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    size_t at = 0;
    while (at <= item.size()) {
      size_t comma = item.find(',', at);
      if (comma == std::string::npos) comma = item.size();
      const std::string name = item.substr(at, comma - at);
      at = comma + 1;
      if (name.empty()) throw std::invalid_argument("--backends: empty name in '" + item + "'");
      const auto& known = known_backends();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        throw std::invalid_argument("--backends: unknown backend '" + name +
                                    "' (known: kjit, copy, reference)");
      }
      if (std::find(out.begin(), out.end(), name) != out.end()) {
        throw std::invalid_argument("--backends: '" + name + "' given twice");
      }
      out.push_back(name);
    }
  }
  if (out.empty()) throw std::invalid_argument("--backends: no backend given");
  return out;
}

std::string shell_quote(const std::string& s) {
  const bool bare = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_=,./:+-@%").find(c) != std::string_view::npos;
  });
  if (bare) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string repro_command(const BenchOptions& o) {
  std::string cmd = "kjit-cli bench " + shell_quote(o.op);
  for (const auto& [k, v] : o.sets) cmd += " --set " + shell_quote(k + "=" + v);
  std::string backends;
  for (const auto& b : o.backends) backends += (backends.empty() ? "" : ",") + b;
  // {} prints a double in its shortest exact form, so the value parses back to the same bits.
  cmd += fmt::format(" --backends {} --timer {} --flush {} --warmup {}", shell_quote(backends),
                     shell_quote(o.timer), flush_name(o.flush), o.warmup);
  // A noise-stopped run without --iters has no count to repeat.
  if (o.iters > 0 || o.max_noise_pct <= 0) cmd += fmt::format(" --iters {}", iters_or_default(o));
  if (o.max_noise_pct > 0) {
    cmd += fmt::format(" --max-noise {} --max-time {} --min-iters {}", o.max_noise_pct,
                       o.max_time_s, o.min_iters);
  }
  cmd += o.check ? " --check" : " --no-check";
  return cmd;
}

double quantile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Stats compute_stats(std::vector<double> v) {
  Stats s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = quantile_sorted(v, 0.5);
  s.p10 = quantile_sorted(v, 0.1);
  s.p90 = quantile_sorted(v, 0.9);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

const char* stop_name(StopReason r) {
  switch (r) {
    case StopReason::kIters: return "iters";
    case StopReason::kNoise: return "noise";
    case StopReason::kTime: return "time";
    case StopReason::kContinue: break;
  }
  return "continue";
}

StopReason stop_decision(const BenchOptions& o, const std::vector<double>& samples,
                         double elapsed_s) {
  const int n = static_cast<int>(samples.size());
  const int cap = iters_or_default(o);
  if (o.max_noise_pct <= 0) return n >= cap ? StopReason::kIters : StopReason::kContinue;
  if (n >= std::max(o.min_iters, 2)) {
    const Stats s = compute_stats(samples);
    if (100.0 * s.rel_stddev() <= o.max_noise_pct) return StopReason::kNoise;
  }
  if (n >= cap) return StopReason::kIters;
  // Three samples is the least from which a median and a spread mean anything.
  if (elapsed_s >= o.max_time_s && n >= 3) return StopReason::kTime;
  return StopReason::kContinue;
}

int batch_for(double call_us, double target_us) {
  // A floor on the per-call time keeps a mis-measured (zero) probe from asking for the maximum.
  const double calls = std::ceil(target_us / std::max(call_us, 0.5));
  // 256 as before the queue bound existed (figures stay comparable), within one release's queue.
  const int most = std::min(256, kMaxQueuedBehindBlocker - 3);
  if (!(calls >= 1)) return 1;
  return calls >= most ? most : static_cast<int>(calls);
}

int samples_per_release(int batch, bool cold, int want) {
  const int per_sample = std::max(batch, 1) + 2 + (cold ? 1 : 0);
  return std::max(1, std::min(want, kMaxQueuedBehindBlocker / per_sample));
}

bool split_samples(std::vector<TimedRecord> recs, int n, std::vector<double>& us,
                   std::string* why) {
  std::stable_sort(recs.begin(), recs.end(), [](const TimedRecord& a, const TimedRecord& b) {
    return a.start_ns < b.start_ns;
  });
  std::vector<size_t> seps;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (recs[i].separator) seps.push_back(i);
  }
  if (static_cast<int>(seps.size()) != n + 1) {
    if (why)
      *why = fmt::format("{} separator records for {} samples (want {})", seps.size(), n, n + 1);
    return false;
  }
  std::vector<double> out;
  for (int s = 0; s < n; ++s) {
    uint64_t first = UINT64_MAX, last = 0;
    for (size_t i = seps[s] + 1; i < seps[s + 1]; ++i) {
      if (recs[i].end_ns < recs[i].start_ns || recs[i].start_ns == 0) {
        if (why) *why = "an incomplete record (no end timestamp)";
        return false;
      }
      first = std::min(first, recs[i].start_ns);
      last = std::max(last, recs[i].end_ns);
    }
    if (first == UINT64_MAX) {
      if (why) *why = fmt::format("sample {} of {} has no kernel or memcpy record", s + 1, n);
      return false;
    }
    out.push_back(static_cast<double>(last - first) * 1e-3);
  }
  us.insert(us.end(), out.begin(), out.end());
  return true;
}

const char* throttle_name(Throttle t) {
  return t == Throttle::kYes ? "true" : t == Throttle::kNo ? "false" : "unknown";
}

Throttle classify_throttle(const ClockReading& before, const ClockReading& after,
                           unsigned max_sm_mhz, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
  };
  if (!before.valid || !after.valid) {
    say("no NVML reading");
    return Throttle::kUnknown;
  }
  if (before.violation_valid && after.violation_valid) {
    if (after.power_violation_ns > before.power_violation_ns) {
      say("power violation time grew");
      return Throttle::kYes;
    }
    if (after.thermal_violation_ns > before.thermal_violation_ns) {
      say("thermal violation time grew");
      return Throttle::kYes;
    }
  }
  if (before.reasons_valid || after.reasons_valid) {
    const uint64_t r =
        (before.reasons_valid ? before.reasons : 0) | (after.reasons_valid ? after.reasons : 0);
    if (r & kClockThrottleMask) {
      std::string names;
      const std::pair<uint64_t, const char*> bits[] = {{kClockReasonSwPowerCap, "sw_power_cap"},
                                                       {kClockReasonHwSlowdown, "hw_slowdown"},
                                                       {kClockReasonSwThermal, "sw_thermal"},
                                                       {kClockReasonHwThermal, "hw_thermal"},
                                                       {kClockReasonHwPowerBrake, "power_brake"}};
      for (const auto& [bit, name] : bits) {
        if (r & bit) names += std::string(names.empty() ? "" : ",") + name;
      }
      say("clock event reasons " + names);
      return Throttle::kYes;
    }
    say("no throttle reason");
    return Throttle::kNo;
  }
  if (max_sm_mhz == 0) {
    say("no reasons and no max clock");
    return Throttle::kUnknown;
  }
  const unsigned lo = std::min(before.sm_mhz, after.sm_mhz);
  if (10.0 * lo < 9.0 * max_sm_mhz) {
    say(fmt::format("SM clock {} MHz below 90% of {} MHz", lo, max_sm_mhz));
    return Throttle::kYes;
  }
  say("SM clock near its maximum");
  return Throttle::kNo;
}

const std::vector<std::string>& row_fields() {
  static const std::vector<std::string> f = {"op",
                                             "uri",
                                             "backend",
                                             "shape",
                                             "dtype",
                                             "arch",
                                             "gpu",
                                             "driver",
                                             "timer",
                                             "l2",
                                             "flush",
                                             "warmup",
                                             "iters",
                                             "stop",
                                             "median_us",
                                             "min_us",
                                             "max_us",
                                             "p10_us",
                                             "p90_us",
                                             "stddev_us",
                                             "gbps",
                                             "tflops",
                                             "pct_of_copy",
                                             "copy_median_us",
                                             "check.pass",
                                             "check.max_abs",
                                             "check.max_rel",
                                             "throttled",
                                             "sm_clock_min_mhz",
                                             "sm_clock_max_mhz",
                                             "first_call_ms",
                                             "workload",
                                             "repro"};
  return f;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_header() {
  std::string out;
  for (const auto& f : row_fields()) out += (out.empty() ? "" : ",") + csv_escape(f);
  return out;
}

std::string csv_line(const nlohmann::ordered_json& row) {
  std::string out;
  bool first = true;
  for (const auto& f : row_fields()) {
    const nlohmann::ordered_json* v = &row;
    size_t at = 0;
    while (v != nullptr && at <= f.size()) {
      size_t dot = f.find('.', at);
      if (dot == std::string::npos) dot = f.size();
      const std::string key = f.substr(at, dot - at);
      v = v->is_object() && v->contains(key) ? &(*v)[key] : nullptr;
      at = dot + 1;
    }
    std::string cell;
    if (v == nullptr || v->is_null()) {
      cell = "";
    } else if (v->is_string()) {
      cell = v->get<std::string>();
    } else {
      cell = v->dump();  // numbers, booleans, and objects (shape) as compact JSON
    }
    out += (first ? "" : ",") + csv_escape(cell);
    first = false;
  }
  return out;
}

}  // namespace kjit::cli
