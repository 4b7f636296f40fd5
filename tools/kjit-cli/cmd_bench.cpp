// `kjit-cli bench <op>` / `bench --from FILE`: run an op on the GPU on fresh random inputs, check
// it against the CPU reference (a failed check is reported as a failure, never as a speed), then
// time it beside a device-to-device copy of the same bytes timed the same way in the same run.
// `empty` times a kernel that does nothing: the launch floor every other figure sits on. The
// harness is bench_harness.* (rows) and bench_timer.* (timers); each family's cases are in
// bench_<family>.cpp; docs/bench.md describes the options and the row fields.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_timer.hpp"
#include "commands.hpp"
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
    add_empty_bench(v);
    return v;
  }();
  return all;
}

// One bench to run: an op with its --set values, from the command line or a --from line.
struct Run {
  const BenchEntry* entry = nullptr;
  ops::SetArgs sets;
  std::string workload;  // the line's "name"
};

std::string op_names() {
  std::string names;
  for (const auto& b : benches()) names += std::string(names.empty() ? "" : ", ") + b.op;
  return names;
}

// Everything about a run that needs no GPU: the op, its --set names and values it can check
// here, and whether it serves every backend asked for. UsageError otherwise.
Run make_run(const std::string& op, ops::SetArgs sets, const std::vector<std::string>& backends,
             const std::string& where) {
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
  if (sets.count("act") && sets["act"] != "silu" && sets["act"] != "gelu" &&
      sets["act"] != "gelutanh") {
    throw UsageError(where + "act must be silu, gelu or gelutanh");
  }
  if (op == "empty") empty_move_bytes(sets);
  if (!r.entry->has_reference &&
      std::find(backends.begin(), backends.end(), "reference") != backends.end()) {
    throw UsageError(where + "backend 'reference': " + op +
                     " has no device reference kernel (its CPU reference is the --check); use "
                     "--backends kjit,copy");
  }
  r.sets = std::move(sets);
  return r;
}

// The lines of a workload file: one JSON object each with "op" and "set" (values as strings or
// numbers) and optionally "name"; blank lines and lines starting with '#' are skipped.
std::vector<Run> read_workload(const std::string& path, const std::vector<std::string>& backends) {
  std::ifstream f(path);
  if (!f) throw UsageError("--from " + path + ": cannot open");
  std::vector<Run> runs;
  std::string line;
  for (int no = 1; std::getline(f, line); ++no) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = fmt::format("{}:{}: ", path, no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(where + "not JSON: " + e.what());
    }
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
      if (!j["set"].is_object()) throw UsageError(where + "\"set\" must be an object");
      for (const auto& [k, v] : j["set"].items()) {
        if (v.is_string()) {
          sets[k] = v.get<std::string>();
        } else if (v.is_number_integer() || v.is_number_unsigned()) {
          sets[k] = v.dump();
        } else if (v.is_boolean()) {
          sets[k] = v.get<bool>() ? "1" : "0";
        } else {
          throw UsageError(where + "set." + k + " must be a string, an integer or a boolean");
        }
      }
    }
    Run r = make_run(j["op"].get<std::string>(), std::move(sets), backends, where);
    if (j.contains("name") && j["name"].is_string()) r.workload = j["name"].get<std::string>();
    runs.push_back(std::move(r));
  }
  if (runs.empty()) throw UsageError("--from " + path + ": no line with an \"op\" to run");
  return runs;
}

nlohmann::ordered_json options_json(const BenchOptions& o) {
  return {{"op", o.op},
          {"set", o.sets},
          {"backends", o.backends},
          {"timer", o.timer},
          {"cold_l2", o.cold_l2},
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
    std::string from;
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
  cmd->add_option("--backends", opts->backends,
                  "comma-separated: kjit (the op), copy (the copy baseline as its own row), "
                  "reference (a naive device kernel, where the op has one)")
      ->default_str("kjit");
  cmd->add_option("--timer", opts->bench.timer,
                  "cupti: kernel timestamps (falls back to events when CUPTI is missing); events: "
                  "per call behind a blocking kernel; events-batched: batches of calls (--hot-l2)")
      ->check(CLI::IsMember({"cupti", "events", "events-batched"}))
      ->default_str("cupti");
  cmd->add_flag("--cold-l2", opts->cold,
                "flush L2 (read 2x its size) before every sample (default)");
  cmd->add_flag("--hot-l2", opts->hot, "no flush: inputs that fit stay in L2");
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
                "check the arguments and print each run's options and repro as JSON; no GPU");

  cmd->callback([opts, &exit_code] {
    Opts& o = *opts;
    BenchOptions& b = o.bench;
    if (o.cold && o.hot) throw UsageError("--cold-l2 and --hot-l2 exclude each other");
    if (o.check && o.no_check) throw UsageError("--check and --no-check exclude each other");
    b.cold_l2 = !o.hot;
    b.check = !o.no_check;
    if (b.timer == "events-batched" && b.cold_l2) {
      throw UsageError("--timer events-batched times back-to-back calls, so it needs --hot-l2");
    }
    try {
      b.backends = parse_backends({o.backends});
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::vector<Run> runs;
    if (!o.from.empty()) {
      if (!o.op.empty() || !o.sets.empty()) {
        throw UsageError("--from runs the ops its file names: give no op and no --set");
      }
      runs = read_workload(o.from, b.backends);
    } else {
      if (o.op.empty()) throw UsageError("bench needs an op (" + op_names() + ") or --from FILE");
      runs.push_back(make_run(o.op, parse_sets(o.sets), b.backends, ""));
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
      nlohmann::ordered_json out = {{"runs", nlohmann::ordered_json::array()}};
      for (const Run& r : runs) {
        BenchOptions ro = b;
        ro.op = r.entry->op;
        ro.sets = r.sets;
        out["runs"].push_back({{"options", options_json(ro)},
                               {"workload", r.workload},
                               {"repro", repro_command(ro)}});
      }
      fmt::print("{}\n", out.dump(2));
      exit_code = kExitOk;
      return;
    }

    std::string why;
    if (!test::gpu_available(&why)) throw Error(KJIT_ERROR_NO_DEVICE, "bench needs a GPU: " + why);
    // Before the first launch: CUPTI instruments the modules the JIT loads from here on.
    if (b.timer == "cupti" && !start_cupti(&why)) {
      fmt::print(stderr, "kjit-cli: CUPTI unavailable ({}): timing with events\n", why);
    }
    int code = kExitOk;
    for (const Run& r : runs) {
      BenchOptions ro = b;
      ro.op = r.entry->op;
      ro.sets = r.sets;
      ro.workload = r.workload;
      if (runs.size() == 1) {
        code = r.entry->run(r.sets, ro);
        continue;
      }
      // One failing line of a workload does not stop the others.
      try {
        code = std::max(code, r.entry->run(r.sets, ro));
      } catch (const Error& e) {
        if (e.status() == KJIT_ERROR_NO_DEVICE) throw;
        fmt::print(stderr, "kjit-cli: {}: {}\n", repro_command(ro), e.what());
        code = kExitFailure;
      }
    }
    exit_code = code;
  });
}

}  // namespace kjit::cli
