// The parts of `kjit-cli bench` that need no GPU, kept apart so the unit tests exercise them on
// synthetic input: the bench options and their repro command line, statistics of timings, the
// noise stopping rule, the throttle classification, and result rows as CSV.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kjit::cli {

// What the harness does to L2 before each sample (docs/bench.md, "L2 flush"):
//   read   a kernel reads a buffer twice the L2 size: the op starts with clean lines, none of
//          them its own.
//   dirty  a kernel writes zeros over a large buffer, as the peers' harnesses do (they zero a
//          buffer between calls): the op starts with L2 full of dirty lines and pays to write
//          them back, which costs a bandwidth-bound op several percent.
//   none   nothing: inputs that fit in L2 stay there from the previous call.
enum class Flush { kRead, kDirty, kNone };
const char* flush_name(Flush f);  // "read" | "dirty" | "none"
// "read" / "dirty" / "none"; std::invalid_argument otherwise.
Flush parse_flush(const std::string& name);

// The timers `bench` knows (bench_timer.hpp describes them).
const std::vector<std::string>& known_timers();
// Throws std::invalid_argument (the message a usage error shows) for an unknown timer, or for a
// back-to-back timer (events-batched, graph: no flush fits between calls) under a flush.
void check_timer_flush(const std::string& timer, Flush flush);

// One way to time a case: a timer under a flush, written "TIMER/FLUSH" ("cupti/dirty").
struct Timing {
  std::string timer;
  Flush flush = Flush::kRead;
  std::string text() const;
};

// Options every bench shares (the command line of `kjit-cli bench` minus the op and --set).
struct BenchOptions {
  int warmup = 10;
  std::string json_path;        // append one JSON line per result row; empty: none
  std::string csv_path;         // append one CSV line per result row (header once); empty: none
  std::string timer = "cupti";  // requested: cupti | events | events-batched | graph
  Flush flush = Flush::kRead;   // what is done to L2 before every sample
  int iters = 0;             // fixed sample count; with max_noise_pct > 0 the maximum; 0: default
  double max_noise_pct = 0;  // > 0: stop once the relative stddev is at most this (percent)
  double max_time_s = 10;    // noise stopping gives up after this many seconds of samples
  int min_iters = 10;        // noise stopping takes at least this many samples
  bool check = true;         // compare against the CPU reference before timing
  std::vector<std::string> backends{"kjit"};  // kjit | copy | reference
  // What the rows name and the repro reproduces; set by cmd_bench.
  std::string op;
  std::map<std::string, std::string> sets;
  std::string workload;   // the `name` of a --from or --suite line; empty otherwise
  std::string suite;      // the suite a row belongs to; empty outside --suite
  bool headline = false;  // a suite row marked as one of its headline figures
  // Suite rows: every timing to report the case under, after one set-up and one check (empty:
  // just timer / flush).
  std::vector<Timing> timings;
  bool cold() const { return flush != Flush::kNone; }
};

inline constexpr int kDefaultIters = 100;
// The sample count a fixed-count run takes, or the most a noise-stopped run takes.
int iters_or_default(const BenchOptions& o);

// The backends `bench` knows; others are a usage error.
const std::vector<std::string>& known_backends();
// Splits "kjit,copy" and checks each name; throws std::invalid_argument with the message a
// usage error shows (unknown name, name twice, empty list).
std::vector<std::string> parse_backends(const std::vector<std::string>& items);

// `s` as one shell word: bare when it has only [A-Za-z0-9_=,./:+-@%], else in single quotes.
std::string shell_quote(const std::string& s);
// The exact `kjit-cli bench` command line that reproduces a row of `o` (no --json / --csv /
// --from: one op, its --set values, and every option that changes a figure).
std::string repro_command(const BenchOptions& o);

// Order statistics of one measurement, in the unit of the samples. Quantiles interpolate
// linearly between the closest ranks; stddev is the sample standard deviation (n - 1).
struct Stats {
  int n = 0;
  double median = 0, min = 0, max = 0, p10 = 0, p90 = 0, mean = 0, stddev = 0;
  double rel_stddev() const { return mean > 0 ? stddev / mean : 0; }
};
Stats compute_stats(std::vector<double> samples);
double quantile_sorted(const std::vector<double>& sorted, double q);

enum class StopReason { kContinue, kIters, kNoise, kTime };
const char* stop_name(StopReason r);
// After each chunk of samples: stop at the fixed count; or, with max_noise_pct, once there are
// min_iters samples whose relative stddev is within the target, or the time cap has passed (with
// at least 3 samples), or the maximum count is reached.
StopReason stop_decision(const BenchOptions& o, const std::vector<double>& samples,
                         double elapsed_s);

// The most stream operations (op calls, flushes, event records) queued behind the blocking kernel
// of the event timers at once. The driver's launch queue holds about a thousand pending entries;
// past that, the host blocks in cuLaunchKernel until the spinning kernel times out, and the chunk
// then measures launch latency. An op call may be several kernels, so this stays well below it.
inline constexpr int kMaxQueuedBehindBlocker = 512;
// The calls per sample of events-batched: enough for about `target_us` of device time at
// `call_us` per call (0.5 us at least), from 1 to 256 calls: never more than one sample may
// queue behind the blocker.
int batch_for(double call_us, double target_us);
// Samples to queue behind one release of the blocking kernel: at most `want` (and at least 1),
// each `batch` calls plus its two event records (and the L2 flush when `cold`), together within
// kMaxQueuedBehindBlocker.
int samples_per_release(int batch, bool cold, int want);

// One CUPTI activity record of a chunk: a kernel or memcpy, or a separator kernel of the harness.
struct TimedRecord {
  uint64_t start_ns = 0, end_ns = 0;
  bool separator = false;
};
// Per-sample device times (us) of a chunk of `n` samples from its records, in any order: the
// records between consecutive separators are one sample, timed from the first start to the last
// end. False (and why) unless there are n + 1 separators and every sample has a record.
bool split_samples(std::vector<TimedRecord> recs, int n, std::vector<double>& us, std::string* why);

// NVML's clock event reasons (nvml.h nvmlClocksEventReason*) that mean the SM clock was held
// down by power or temperature, as opposed to idle or an application clock setting.
inline constexpr uint64_t kClockReasonGpuIdle = 0x1;
inline constexpr uint64_t kClockReasonSwPowerCap = 0x4;
inline constexpr uint64_t kClockReasonHwSlowdown = 0x8;
inline constexpr uint64_t kClockReasonSwThermal = 0x20;
inline constexpr uint64_t kClockReasonHwThermal = 0x40;
inline constexpr uint64_t kClockReasonHwPowerBrake = 0x80;
inline constexpr uint64_t kClockThrottleMask = kClockReasonSwPowerCap | kClockReasonHwSlowdown |
                                               kClockReasonSwThermal | kClockReasonHwThermal |
                                               kClockReasonHwPowerBrake;

// One NVML reading of the device around a chunk of samples.
struct ClockReading {
  bool valid = false;  // false: no NVML (then nothing else is meaningful)
  unsigned sm_mhz = 0;
  bool reasons_valid = false;
  uint64_t reasons = 0;
  bool violation_valid = false;
  uint64_t power_violation_ns = 0, thermal_violation_ns = 0;  // cumulative counters
};

enum class Throttle { kUnknown, kNo, kYes };
const char* throttle_name(Throttle t);  // "unknown" | "false" | "true"
// Whether the samples between `before` and `after` ran throttled: a power / thermal reason in
// either reading, or a violation counter that grew. Without reasons, an SM clock below 90% of
// `max_sm_mhz` counts. `why` names what decided it.
Throttle classify_throttle(const ClockReading& before, const ClockReading& after,
                           unsigned max_sm_mhz, std::string* why = nullptr);

// The row fields in CSV order; nested ones as "check.pass". The JSON row has the same names.
const std::vector<std::string>& row_fields();
std::string csv_escape(const std::string& s);
std::string csv_header();
std::string csv_line(const nlohmann::ordered_json& row);

}  // namespace kjit::cli
