// `kjit-cli bench <op>` / `bench --from FILE` / `bench --suite NAME`: run an op on the GPU on fresh
// random inputs, check it against the CPU reference (a failed check is reported as a failure,
// never as a speed), then time it beside a device-to-device copy of the same bytes timed the same
// way in the same run. `empty` times a kernel that does nothing: the launch floor every other
// figure sits on. The harness is bench_harness.* (rows) and bench_timer.* (timers); each family's
// cases are in bench_<family>.cpp; suites (bench/suites/*.jsonl) are read by bench_suite.*;
// docs/bench.md describes the options and the row fields.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_suite.hpp"
#include "bench_timer.hpp"
#include "commands.hpp"
#include "ops/activation/activation.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

const std::vector<BenchEntry>& benches() {
  static const std::vector<BenchEntry> all = [] {
    std::vector<BenchEntry> v;
    add_norm_benches(v);
    add_activation_benches(v);
    add_rope_benches(v);
    add_kv_cache_benches(v);
    add_attention_benches(v);
    add_sampling_benches(v);
    add_gemm_benches(v);
    add_gemm_fp8_benches(v);
    add_fused_quant_benches(v);
    add_moe_benches(v);
    add_empty_bench(v);
    add_embedding_benches(v);
    add_rope_fused_benches(v);
    return v;
  }();
  return all;
}

// One bench to run: an op with its --set values and the options it runs under, from the command
// line, a --from line or a --suite row.
struct Run {
  const BenchEntry* entry = nullptr;
  ops::SetArgs sets;
  BenchOptions opts;  // op, sets and workload filled in
};

std::string op_names() {
  std::string names;
  for (const auto& b : benches()) names += std::string(names.empty() ? "" : ", ") + b.op;
  return names;
}

// Everything about a run that needs no GPU: the op, its --set names and values it can check
// here, and whether it serves every backend asked for. UsageError otherwise.
Run make_run(const std::string& op, ops::SetArgs sets, const BenchOptions& opts,
             const std::string& where) {
  const std::vector<std::string>& backends = opts.backends;
  Run r;
  for (const auto& b : benches()) r.entry = op == b.op ? &b : r.entry;
  if (r.entry == nullptr) throw UsageError(where + "bench supports: " + op_names());
  for (const auto& k : r.entry->required) {
    if (!sets.count(k)) throw UsageError(where + "bench " + op + " needs --set " + k + "=...");
  }
  for (const auto& [k, v] : sets) {
    const auto& req = r.entry->required;
    const auto& opt = r.entry->optional;
    if (std::find(req.begin(), req.end(), k) == req.end() &&
        std::find(opt.begin(), opt.end(), k) == opt.end()) {
      throw UsageError(where + "bench " + op + " has no --set " + k +
                       " (it reads: " + r.entry->set_help + ")");
    }
  }
  if (sets.count("dtype") && sets["dtype"] != "bf16" && sets["dtype"] != "fp16" &&
      sets["dtype"] != "fp32") {
    throw UsageError(where + "dtype must be bf16, fp16 or fp32");
  }
  if (sets.count("act") && ops::find_activation(sets["act"]) == nullptr) {
    std::string names;
    for (const auto& a : ops::kActivations)
      names += std::string(names.empty() ? "" : ", ") + a.name;
    throw UsageError(where + "act must be one of " + names);
  }
  if (op == "empty") empty_move_bytes(sets);
  if (!r.entry->has_reference &&
      std::find(backends.begin(), backends.end(), "reference") != backends.end()) {
    throw UsageError(where + "backend 'reference': " + op +
                     " has no device reference kernel (its CPU reference is the --check); use "
                     "--backends kjit,copy");
  }
  r.sets = std::move(sets);
  r.opts = opts;
  r.opts.op = r.entry->op;
  r.opts.sets = r.sets;
  return r;
}

// The lines of a workload file: one JSON object each with "op" and "set" (values as strings or
// numbers) and optionally "name"; blank lines and lines starting with '#' are skipped.
std::vector<Run> read_workload(const std::string& path, const BenchOptions& opts) {
  std::ifstream f(path);
  if (!f) throw UsageError("--from " + path + ": cannot open");
  std::vector<Run> runs;
  std::vector<std::pair<int, nlohmann::json>> lines;
  try {
    lines = json_lines(f, path);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  for (const auto& [no, j] : lines) {
    const std::string where = fmt::format("{}:{}: ", path, no);
    if (j.is_object() && !j.contains("op") && j.contains("definition")) {
      // A traced call with no bench of its own (KJIT_TRACE_DUMP writes such lines).
      fmt::print(stderr, "kjit-cli: {}skipped: no bench runs {}\n", where, j["definition"].dump());
      continue;
    }
    if (!j.is_object() || !j.contains("op") || !j["op"].is_string()) {
      throw UsageError(where + "needs \"op\": \"<bench op>\"");
    }
    ops::SetArgs sets;
    if (j.contains("set")) {
      try {
        sets = set_values(j["set"], where);
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
    Run r = make_run(j["op"].get<std::string>(), std::move(sets), opts, where);
    if (j.contains("name") && j["name"].is_string()) r.opts.workload = j["name"].get<std::string>();
    runs.push_back(std::move(r));
  }
  if (runs.empty()) throw UsageError("--from " + path + ": no line with an \"op\" to run");
  return runs;
}

// Where `--suite NAME` looks for NAME.jsonl: $KJIT_BENCH_SUITES, bench/suites under the current
// folder (a checkout), then the source tree kjit-cli was built from.
std::vector<std::string> suite_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KJIT_BENCH_SUITES"); env != nullptr && *env != '\0') {
    dirs.push_back(env);
  }
  dirs.push_back("bench/suites");
#ifdef KJIT_BENCH_SUITES_DIR
  dirs.push_back(KJIT_BENCH_SUITES_DIR);
#endif
  return dirs;
}

// What `--suite` selects: the suite file, the rows whose name `match` finds (an ECMAScript regular
// expression searched in the name, so a plain word selects the names containing it; all when
// empty), and of those the timings whose timer is in `timers` (all when empty). A row is one Run
// (one set-up and check, then every timing), `repeat` times.
struct SuiteSelection {
  Suite suite;
  std::string path;
  std::vector<Run> runs;
};

SuiteSelection read_suite(const std::string& name, const std::string& match,
                          const std::vector<std::string>& timers, const BenchOptions& base) {
  SuiteSelection sel;
  std::string text;
  try {
    sel.path = find_suite(name, suite_dirs());
    std::ifstream f(sel.path);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (!f && !f.eof()) throw std::invalid_argument("--suite " + sel.path + ": cannot read");
    std::string stem = sel.path.substr(sel.path.find_last_of('/') + 1);
    stem = stem.substr(0, stem.rfind(".jsonl"));
    sel.suite = parse_suite(text, sel.path, stem);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::regex pattern;
  try {
    pattern = std::regex(match, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError("--match '" + match + "' is not a regular expression: " + e.what());
  }
  for (const SuiteRow& row : sel.suite.rows) {
    if (!match.empty() && !std::regex_search(row.name, pattern)) continue;
    BenchOptions o = base;
    o.backends = row.backends;
    if (row.iters > 0) o.iters = row.iters;
    if (row.warmup >= 0) o.warmup = row.warmup;
    o.suite = sel.suite.name;
    o.headline = row.headline;
    o.workload = row.name;
    Run r = make_run(row.op, row.sets, o, fmt::format("{}:{}: ", sel.path, row.line));
    for (const Timing& t : row.runs) {
      if (timers.empty() || std::find(timers.begin(), timers.end(), t.timer) != timers.end()) {
        r.opts.timings.push_back(t);
      }
    }
    if (r.opts.timings.empty()) continue;
    r.opts.timer = r.opts.timings.front().timer;
    r.opts.flush = r.opts.timings.front().flush;
    for (int i = 0; i < row.repeat; ++i) sel.runs.push_back(r);
  }
  if (sel.runs.empty()) {
    throw UsageError("--suite " + sel.path + ": no run matches --match '" + match +
                     "' and --timers");
  }
  return sel;
}

nlohmann::ordered_json peers_json(const Suite& s) {
  auto out = nlohmann::ordered_json::array();
  for (const SuitePeer& p : s.peers) {
    std::vector<std::string> runs;
    for (const Timing& t : p.runs) runs.push_back(t.text());
    out.push_back({{"script", p.script}, {"args", p.args}, {"runs", runs}});
  }
  return out;
}

nlohmann::ordered_json options_json(const BenchOptions& o) {
  return {{"op", o.op},
          {"set", o.sets},
          {"backends", o.backends},
          {"timer", o.timer},
          {"flush", flush_name(o.flush)},
          {"warmup", o.warmup},
          {"iters", iters_or_default(o)},
          {"max_noise_pct", o.max_noise_pct},
          {"max_time_s", o.max_time_s},
          {"min_iters", o.min_iters},
          {"check", o.check}};
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Run an op on the GPU, check it, and time it");
  struct Opts {
    std::string op;
    std::vector<std::string> sets;
    std::string backends = "kjit";
    std::string from, suite, match, timers, flush;
    bool cold = false, hot = false, check = false, no_check = false, dry_run = false;
    BenchOptions bench;
  };
  auto opts = std::make_shared<Opts>();
  std::string set_help;
  for (const auto& b : benches()) {
    set_help += std::string(set_help.empty() ? "" : "; ") + b.op + ": " + b.set_help;
  }
  cmd->add_option("op", opts->op, "op to run (" + op_names() + ")");
  cmd->add_option("--set", opts->sets, "name=value (" + set_help + ")");
  cmd->add_option("--from", opts->from,
                  "run every line of a workload file (JSON lines with \"op\" and \"set\"; see "
                  "bench/workloads) instead of one op");
  cmd->add_option("--suite", opts->suite,
                  "run a suite: NAME (bench/suites/NAME.jsonl) or a file; its rows give the ops, "
                  "--set values, timers, flushes and backends (docs/bench.md)");
  cmd->add_option("--match", opts->match,
                  "with --suite: only the rows whose name this regular expression finds (a plain "
                  "word: the names containing it; ^name$: one row; a|b: either)");
  cmd->add_option("--timers", opts->timers,
                  "with --suite: only the runs of these timers (comma-separated), e.g. to keep "
                  "CUPTI out of the process that times back-to-back calls");
  cmd->add_option("--backends", opts->backends,
                  "comma-separated: kjit (the op), copy (the copy baseline as its own row), "
                  "reference (a naive device kernel, where the op has one)")
      ->default_str("kjit");
  cmd->add_option("--timer", opts->bench.timer,
                  "cupti: kernel timestamps (falls back to events when CUPTI is missing); events: "
                  "per call behind a blocking kernel; events-batched: batches of back-to-back "
                  "calls; graph: the same batch captured in a CUDA graph, per-call time of a "
                  "replay (the last two: --flush none)")
      ->default_str("cupti");
  cmd->add_option("--flush", opts->flush,
                  "L2 before every sample: read (read a buffer twice the L2 size: clean lines; "
                  "the default), dirty (write zeros over 256 MB, as the peers' harnesses do: the "
                  "op pays to write back dirty lines), none (inputs that fit stay in L2)")
      ->default_str("read");
  cmd->add_flag("--cold-l2", opts->cold, "the same as --flush read");
  cmd->add_flag("--hot-l2", opts->hot, "the same as --flush none");
  cmd->add_option("--warmup", opts->bench.warmup, "untimed calls first")
      ->check(CLI::Range(0, 1000000))
      ->default_str("10");
  cmd->add_option(
         "--iters", opts->bench.iters,
         fmt::format("samples (default {}); with --max-noise the most taken", kDefaultIters))
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--max-noise", opts->bench.max_noise_pct,
                  "stop once the samples' relative stddev is at most PCT percent")
      ->check(CLI::Range(1e-6, 1000.0));
  cmd->add_option("--max-time", opts->bench.max_time_s,
                  "with --max-noise: stop after this many seconds of sampling anyway")
      ->check(CLI::Range(1e-3, 86400.0))
      ->default_str("10");
  cmd->add_option("--min-iters", opts->bench.min_iters, "with --max-noise: samples taken at least")
      ->check(CLI::Range(2, 10000000))
      ->default_str("10");
  cmd->add_flag("--check", opts->check, "check against the CPU reference first (default)");
  cmd->add_flag("--no-check", opts->no_check, "skip the reference check (rows say so)");
  cmd->add_option("--json", opts->bench.json_path, "append one JSON line per result row");
  cmd->add_option("--csv", opts->bench.csv_path,
                  "append one CSV line per result row (header when the file is new)");
  cmd->add_flag("--dry-run", opts->dry_run,
                "check the arguments and print each run's options and repro as JSON (and a "
                "suite's peers); no GPU");

  cmd->callback([cmd, opts, &exit_code] {
    Opts& o = *opts;
    BenchOptions& b = o.bench;
    if (int(o.cold) + int(o.hot) + int(!o.flush.empty()) > 1) {
      throw UsageError("--flush, --cold-l2 and --hot-l2 exclude each other");
    }
    if (o.check && o.no_check) throw UsageError("--check and --no-check exclude each other");
    try {
      b.flush = o.hot ? Flush::kNone : o.flush.empty() ? Flush::kRead : parse_flush(o.flush);
      check_timer_flush(b.timer, b.flush);
      b.backends = parse_backends({o.backends});
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    b.check = !o.no_check;
    std::vector<Run> runs;
    std::optional<SuiteSelection> suite;
    if (!o.suite.empty()) {
      // The suite file says how each row is timed; a command-line choice would silently differ
      // from what the committed suite claims to measure.
      for (const char* own : {"op", "--set", "--from", "--timer", "--flush", "--cold-l2",
                              "--hot-l2", "--backends", "--no-check"}) {
        if (cmd->count(own) > 0) {
          throw UsageError(std::string("--suite takes the timing options from the suite file: "
                                       "give no ") +
                           (std::string(own) == "op" ? "op" : own));
        }
      }
      std::vector<std::string> timers;
      if (!o.timers.empty()) {
        std::stringstream ss(o.timers);
        for (std::string t; std::getline(ss, t, ',');) {
          try {
            check_timer_flush(t, Flush::kNone);
          } catch (const std::invalid_argument& e) {
            throw UsageError(std::string("--timers: ") + e.what());
          }
          timers.push_back(t);
        }
      }
      suite = read_suite(o.suite, o.match, timers, b);
      runs = suite->runs;
    } else if (!o.match.empty() || !o.timers.empty()) {
      throw UsageError("--match and --timers select rows of a --suite");
    } else if (!o.from.empty()) {
      if (!o.op.empty() || !o.sets.empty()) {
        throw UsageError("--from runs the ops its file names: give no op and no --set");
      }
      runs = read_workload(o.from, b);
    } else {
      if (o.op.empty()) {
        throw UsageError("bench needs an op (" + op_names() + "), --from FILE or --suite NAME");
      }
      runs.push_back(make_run(o.op, parse_sets(o.sets), b, ""));
    }
    if (!b.csv_path.empty()) {
      std::ifstream f(b.csv_path);
      std::string first;
      if (f && std::getline(f, first) && !first.empty() && first != csv_header()) {
        throw UsageError("--csv " + b.csv_path +
                         ": the file has other columns than this version writes; use a new file");
      }
    }

    if (o.dry_run) {
      nlohmann::ordered_json out;
      if (suite) {
        out["suite"] = suite->suite.name;
        out["file"] = suite->path;
        out["about"] = suite->suite.about;
        out["peers"] = peers_json(suite->suite);
      }
      // One entry per row a run would write (per timing of a suite row).
      out["runs"] = nlohmann::ordered_json::array();
      for (const Run& r : runs) {
        std::vector<Timing> timings = r.opts.timings;
        if (timings.empty()) timings.push_back({r.opts.timer, r.opts.flush});
        for (const Timing& t : timings) {
          BenchOptions one = r.opts;
          one.timer = t.timer;
          one.flush = t.flush;
          nlohmann::ordered_json run = {{"options", options_json(one)},
                                        {"workload", one.workload},
                                        {"repro", repro_command(one)}};
          if (suite) run["headline"] = one.headline;
          out["runs"].push_back(std::move(run));
        }
      }
      fmt::print("{}\n", out.dump(2));
      exit_code = kExitOk;
      return;
    }

    std::string why;
    if (!test::gpu_available(&why)) throw Error(KJIT_ERROR_NO_DEVICE, "bench needs a GPU: " + why);
    // Before the first launch: CUPTI instruments the modules the JIT loads from here on. Only
    // when a run asks for it: its activity records would cost the other timers' figures.
    const bool any_cupti = std::any_of(runs.begin(), runs.end(), [](const Run& r) {
      return r.opts.timer == "cupti" ||
             std::any_of(r.opts.timings.begin(), r.opts.timings.end(),
                         [](const Timing& t) { return t.timer == "cupti"; });
    });
    if (any_cupti && !start_cupti(&why)) {
      fmt::print(stderr, "kjit-cli: CUPTI unavailable ({}): timing with events\n", why);
    }
    int code = kExitOk;
    for (const Run& r : runs) {
      if (runs.size() == 1) {
        code = r.entry->run(r.sets, r.opts);
        continue;
      }
      // One failing line of a workload or suite does not stop the others.
      try {
        code = std::max(code, r.entry->run(r.sets, r.opts));
      } catch (const Error& e) {
        if (e.status() == KJIT_ERROR_NO_DEVICE) throw;
        fmt::print(stderr, "kjit-cli: {}: {}\n", repro_command(r.opts), e.what());
        code = kExitFailure;
      }
    }
    exit_code = code;
  });
}

}  // namespace kjit::cli
