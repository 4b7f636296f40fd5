// The API call log (KJIT_LOGLEVEL, docs/logging.md). Every C entry point declares its arguments
// once, through api::guarded (guard.hpp):
//
//   return guarded(
//       "kjit_rmsnorm",
//       [&](CallLog& log) { log.in("input", input).in("weight", weight).out("out", out)
//                              .scalar("eps", eps).stream(stream); },
//       [&] { ops::rmsnorm(input, weight, out, eps, stream); });
//
// The describing lambda runs only when logging is on for that API; with KJIT_LOGLEVEL=0 the whole
// cost is one relaxed atomic load. When on, the call's lines are written with one write(2) each
// before the kernel is launched (nothing is buffered in the process, so they survive a crash),
// statistics and dumps (src/diag/dump.hpp) follow the level.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kjit/kjit.h"
#include "util/env.hpp"

namespace kjit::api {

// in: read only. out: written only (its contents before the call do not matter). inout: read and
// written in place (logged and dumped before and after).
enum class ArgKind { kIn, kOut, kInOut, kScalar, kStream };
enum class ScalarType { kF32, kF64, kI32, kI64 };

struct CallArg {
  const char* name = "";
  ArgKind kind = ArgKind::kIn;
  const DLTensor* tensor = nullptr;  // tensors (may be NULL: an optional or a bad argument)
  ScalarType scalar_type = ScalarType::kI64;
  double f = 0.0;  // kF32 / kF64 (a float is widened exactly)
  int64_t i = 0;   // kI32 / kI64
  void* stream = nullptr;
};

// The arguments of one call, in declaration order. Names are string literals (not copied).
class CallLog {
 public:
  CallLog& in(const char* name, const DLTensor* t) { return tensor(name, ArgKind::kIn, t); }
  CallLog& out(const char* name, const DLTensor* t) { return tensor(name, ArgKind::kOut, t); }
  CallLog& inout(const char* name, const DLTensor* t) { return tensor(name, ArgKind::kInOut, t); }
  CallLog& scalar(const char* name, float v) { return number(name, ScalarType::kF32, v, 0); }
  CallLog& scalar(const char* name, double v) { return number(name, ScalarType::kF64, v, 0); }
  CallLog& scalar(const char* name, int v) { return number(name, ScalarType::kI32, 0.0, v); }
  CallLog& scalar(const char* name, int64_t v) { return number(name, ScalarType::kI64, 0.0, v); }
  CallLog& stream(void* s);

  const std::vector<CallArg>& args() const { return args_; }

 private:
  CallLog& tensor(const char* name, ArgKind kind, const DLTensor* t);
  // A scalar of type `type`: its value is f (floating types) or i (integer types).
  CallLog& number(const char* name, ScalarType type, double f, int64_t i);
  CallArg& add(const char* name, ArgKind kind);  // a new argument, the rest of it defaulted
  std::vector<CallArg> args_;
};

// ---- Settings (read from the environment on first use) ------------------------------------------

struct LogSettings {
  int level = 0;                          // KJIT_LOGLEVEL: 0, 1, 3, 5 or 10
  std::string dest = "stderr";            // KJIT_LOGDEST as given
  std::vector<std::string> include;       // KJIT_LOG_INCLUDE patterns (empty: every API)
  std::vector<std::string> exclude;       // KJIT_LOG_EXCLUDE patterns
  std::string dump_dir;                   // KJIT_DUMP_DIR (empty: <cache>/dumps)
  int64_t dump_max_count = 1000;          // KJIT_DUMP_MAX_COUNT
  uint64_t dump_max_bytes = 20ull << 30;  // KJIT_DUMP_MAX_BYTES
  std::vector<std::string> warnings;      // what was wrong with the variables (logged once)

  static LogSettings from_env();
};

// KJIT_LOGLEVEL's value as a level: integers 0..10 round down to a documented level (2 -> 1,
// 4 -> 3, 6..9 -> 5), larger ones to 10. Anything else is 0 with `*ok` false.
int parse_log_level(std::string_view text, bool* ok = nullptr);
using util::parse_byte_count;  // (util/env.hpp) KJIT_DUMP_MAX_BYTES's syntax
// KJIT_LOGDEST's path with every %i replaced by `pid` (stderr / stdout are left as they are).
std::string expand_log_dest(std::string_view dest, long pid);
// Whether `api` is selected by the include / exclude patterns. A pattern matches the full name
// ("kjit_rmsnorm") or the name without its "kjit_" prefix ("rmsnorm", "*rope*"). Exclude wins.
bool api_selected(const LogSettings& s, const std::string& api);

// kjit_configure's log level (0..10, rounded down like KJIT_LOGLEVEL), used instead of
// KJIT_LOGLEVEL from the next settings read on; -1 goes back to the environment. Rereads the
// settings.
void set_log_level_override(int level);

// Rereads the environment (tests change it between calls): reopens the destination, resets the
// dump budget and the per-API decisions. Not meant to race with logged calls.
void reload_log_settings();
// The settings in force (reading the environment if nothing has yet).
LogSettings current_log_settings();

// ---- The machinery api::guarded uses -----------------------------------------------------------

namespace log_detail {

// A non-owning reference to a callable, so the logged path takes the lambdas without a template
// of its own and without allocating.
template <typename Sig>
class FnRef;
template <typename R, typename... A>
class FnRef<R(A...)> {
 public:
  template <typename F>
  FnRef(F& f)  // NOLINT(google-explicit-constructor): passed as a plain callable
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R { return (*static_cast<F*>(o))(std::forward<A>(a)...); }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// The process-wide level; -1 until the environment has been read.
extern std::atomic<int> g_level;

// The level that applies to `api` (0 when its patterns exclude it), cached in `site` (one per
// call site) until the settings change. Reads the environment on first use. Never throws.
int site_level(const char* api, std::atomic<uint64_t>& site) noexcept;

// Describes, logs, runs and logs the outcome of one call at `level` > 0. `run` never throws, and
// nothing this does changes its status or the thread's last error.
kjit_status logged_call(const char* api, int level, FnRef<void(CallLog&)> describe,
                        FnRef<kjit_status()> run) noexcept;

}  // namespace log_detail

}  // namespace kjit::api
