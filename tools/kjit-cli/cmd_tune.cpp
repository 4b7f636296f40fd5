// `kjit-cli tune show|clear`: the autotuner's stored results (docs/autotune.md), under
// <cache_dir>/tuning/; `kjit-cli tune --from WORKLOAD`: tune a workload's shapes ahead of time.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_harness.hpp"
#include "bench_suite.hpp"
#include "commands.hpp"
#include "decode_inputs.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "runtime/jit_core.hpp"
#include "support/gpu.hpp"
#include "tune/packaged_records.hpp"
#include "tune/process_tuner.hpp"
#include "tune/tune_store.hpp"
#include "util/error.hpp"
#include "util/glob.hpp"

namespace kjit::cli {
namespace {

// The store a tuned call reads: the cache's records, then those of the KJIT_AOT_DIR packages.
std::unique_ptr<tune::TuneStore> store() {
  const jit::Settings& s = jit::JitCore::global().settings();
  return tune::make_store(s.cache_dir, s.aot_dirs);
}

int run_show(const std::string& op_glob, bool json) {
  const std::unique_ptr<tune::TuneStore> store_ptr = store();
  const tune::TuneStore& s = *store_ptr;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  int shown = 0;
  for (const tune::TuneStore::Entry& e : s.list()) {
    if (e.valid && !util::glob_match(op_glob, e.key.op)) continue;
    ++shown;
    double best = 0, dflt = 0;
    for (const tune::Measured& m : e.rec.tried) {
      if (m.tactic == e.rec.tactic) best = m.median_us;
      if (m.tactic == e.rec.default_tactic) dflt = m.median_us;
    }
    if (json) {
      nlohmann::ordered_json r = {{"path", e.path.string()},
                                  {"origin", e.origin.empty() ? "cache" : e.origin},
                                  {"valid", e.valid}};
      if (!e.valid) {
        r["why"] = e.why;
      } else {
        r["op"] = e.key.op;
        r["bucket"] = e.key.bucket;
        r["timing"] = e.key.timing;
        r["tactic"] = e.rec.tactic;
        r["default"] = e.rec.default_tactic;
        r["tactic_us"] = best;
        r["default_us"] = dflt;
        r["device"] = e.fp.device;
        r["when"] = e.rec.when;
      }
      rows.push_back(r);
    } else if (!e.valid) {
      fmt::print("invalid  {}  ({})\n", e.path.string(), e.why);
    } else {
      const std::string gain = best > 0 && dflt > 0
                                   ? fmt::format("{:.2f} us, default {:.2f} us ({:+.1f}%)", best,
                                                 dflt, 100.0 * (best - dflt) / dflt)
                                   : "not timed";
      fmt::print("{:<18} {:<40} {:<11} {:<22} {}  [{}, {}, {}]{}\n", e.key.op, e.key.bucket,
                 e.key.timing, e.rec.tactic, gain, e.fp.device, e.fp.kjit, e.rec.when,
                 e.origin.empty() ? "" : "  package " + e.origin);
    }
  }
  if (json) {
    fmt::print("{}\n",
               nlohmann::ordered_json{{"dir", s.root().string()}, {"records", rows}}.dump(2));
  } else if (shown == 0) {
    fmt::print("no tuning records in {}{}\n", s.root().string(),
               s.packages().empty() ? "" : " or the KJIT_AOT_DIR packages");
  }
  return kExitOk;
}

void report_record(const std::string& name, const tune::TuneKey& key, nlohmann::ordered_json& row);

// One gemm line of a workload (bench's {"op": "gemm", "set": {dtype, m, n, k, out_dtype}}):
// tunes its bucket through kjit_gemm's own path on operands of its shape and prints the stored
// winner against the default. `row` gets the same as JSON.
void tune_gemm_line(const std::string& name, const nlohmann::json& set,
                    const tune::TuneRequest& req, nlohmann::ordered_json& row) {
  auto num = [&](const char* key) {
    if (!set.contains(key)) throw UsageError(name + ": gemm needs \"" + key + "\" in \"set\"");
    const nlohmann::json& v = set.at(key);
    const int64_t x = v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
    if (x < 1) throw UsageError(name + ": " + key + " must be >= 1");
    return x;
  };
  const std::string dtype = set.value("dtype", std::string("bf16"));
  const std::string out_dtype = set.value("out_dtype", dtype);
  const int64_t m = num("m"), n = num("n"), k = num("k");
  const ops::DType dt = ops::dtype_from_name(dtype), ot = ops::dtype_from_name(out_dtype);
  const size_t es = ops::dtype_size(dt), os = ops::dtype_size(ot);
  // Finite operands (0x3f3f.. is 0.75 in bf16, 1.8 in fp16): the values do not steer the timing.
  test::DeviceBuffer a(static_cast<size_t>(m * k) * es), b(static_cast<size_t>(n * k) * es),
      y(static_cast<size_t>(m * n) * os);
  a.fill(0x3f);
  b.fill(0x3f);
  auto at = test::make_tensor(a.get(), {m, k}, test::dl_dtype(dtype));
  auto bt = test::make_tensor(b.get(), {n, k}, test::dl_dtype(dtype));
  auto yt = test::make_tensor(y.get(), {m, n}, test::dl_dtype(out_dtype));
  ops::GemmTuning tuning;
  tuning.tune = req;
  ops::gemm(at.get(), bt.get(), nullptr, yt.get(), 1.0f, 0.0f, nullptr, tuning);
  const tune::TuneKey key{ops::kGemmTuneOp, ops::kGemmTacticSpace,
                          ops::gemm_bucket(dt, ot, m, n, k, false, false), req.timing.name()};
  report_record(name, key, row);
}

// Prints the stored record of `key` (the winner against the default and the margin) and puts
// the same in `row`.
void report_record(const std::string& name, const tune::TuneKey& key, nlohmann::ordered_json& row) {
  const auto rec = store()->find(tune::device_fingerprint(0), key);
  row = {{"name", name}, {"op", key.op}, {"bucket", key.bucket}, {"timing", key.timing}};
  if (!rec) {
    fmt::print("{:<28} {:<52} one valid tactic: nothing to tune\n", name, key.bucket);
    return;
  }
  double best = 0, dflt = 0;
  for (const tune::Measured& t : rec->tried) {
    if (t.tactic == rec->tactic) best = t.median_us;
    if (t.tactic == rec->default_tactic) dflt = t.median_us;
  }
  const double gain = dflt > 0 ? 100.0 * (dflt - best) / dflt : 0.0;
  fmt::print("{:<28} {:<52} default {:<18} {:9.2f} us  winner {:<18} {:9.2f} us  {:5.1f}%\n", name,
             key.bucket, rec->default_tactic, dflt, rec->tactic, best, gain);
  row["default"] = rec->default_tactic;
  row["default_us"] = dflt;
  row["tactic"] = rec->tactic;
  row["tactic_us"] = best;
  row["gain_pct"] = gain;
  row["tried"] = rec->tried.size();
  row["when"] = rec->when;
}

// One decode_attention line of a workload (bench's {"op": "decode_attention", "set": {dtype,
// batch, kv_len, qo_heads, kv_heads, head_dim, page_size, ...}}): the bench's inputs, every valid
// tactic of the plan's bucket timed through kjit_batch_decode_run (a plan never measures), the
// winner stored by the autotuner's margin rule, then printed against the default.
void tune_decode_line(const std::string& name, const nlohmann::json& set,
                      const tune::TuneRequest& req, nlohmann::ordered_json& row) {
  ops::SetArgs args;
  for (const auto& [k, v] : set.items()) args[k] = v.is_string() ? v.get<std::string>() : v.dump();
  for (const char* k :
       {"dtype", "batch", "kv_len", "qo_heads", "kv_heads", "head_dim", "page_size"}) {
    if (!args.count(k))
      throw UsageError(name + ": decode_attention needs \"" + k + "\" in \"set\"");
  }
  std::unique_ptr<DecodeInputs> x = make_decode_inputs(args);
  const ops::DecodePlanner planner = x->planner();
  tune::Autotuner& tuner = tune::process_autotuner();
  const std::vector<ops::DecodeTactic> tactics =
      planner.tactics(tuner.settings().rules.forced(ops::kDecodeTuneOp));
  const ops::DecodeTactic dflt = planner.default_tactic();
  std::vector<std::string> names;
  std::vector<kjit_decode_plan> plans(tactics.size());
  size_t ws_bytes = 16;
  for (size_t i = 0; i < tactics.size(); ++i) {
    names.push_back(tactics[i].name());
    plans[i].data = tactics[i] == dflt ? planner.heuristic() : planner.with(tactics[i]);
    ws_bytes = std::max(ws_bytes, plans[i].data.workspace_bytes);
  }
  test::DeviceBuffer ws(ws_bytes);
  auto wt =
      test::make_tensor(ws.get(), {static_cast<int64_t>(ws_bytes)}, DLDataType{kDLUInt, 8, 1});
  const tune::Measure measure = [&](const std::string& tactic) -> std::vector<double> {
    const size_t i =
        static_cast<size_t>(std::find(names.begin(), names.end(), tactic) - names.begin());
    if (i == names.size()) return {};
    // Another tactic's partials may lie where this one's fused-merge counters start at zero.
    ws.fill(0);
    try {
      return tune::time_on_gpu(
          0, [&](CUstream s) { x->run(&plans[i], wt.get(), s); }, req.timing);
    } catch (const Error& e) {
      fmt::print("{:<28} {}: {} (left out)\n", name, tactic, e.what());
      return {};
    }
  };
  const tune::TuneKey key{ops::kDecodeTuneOp, ops::kDecodeTacticSpace, planner.bucket(),
                          req.timing.name()};
  tuner.choose(tune::device_fingerprint(0), key, names, dflt.name(), &measure, req.mode);
  report_record(name, key, row);
}

// `tune --from FILE`: every gemm and decode_attention line of a workload file; other ops' lines
// are named and skipped (they declare no tactics).
int run_from(const std::string& path, const std::string& timing, bool retune,
             const std::string& json_path) {
  std::ifstream f(path);
  if (!f) throw UsageError("--from " + path + ": cannot open");
  tune::TuneRequest req;
  req.mode = retune ? tune::TuneMode::kRetune : tune::TuneMode::kUnseen;
  try {
    req.timing = tune::TimingMode::parse(timing);
  } catch (const Error& e) {
    throw UsageError(std::string("--timing: ") + e.what());
  }
  std::vector<std::pair<int, nlohmann::json>> lines;
  try {
    lines = json_lines(f, path);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::ofstream json;
  if (!json_path.empty()) {
    json.open(json_path, std::ios::app);
    if (!json) throw UsageError("--json " + json_path + ": cannot open");
  }
  check_gpu();
  const tune::Fingerprint& fp = tune::device_fingerprint(0);
  fmt::print("tuning on {} ({} SMs, driver {}), timing {}, records in {}\n", fp.device, fp.sm_count,
             fp.driver, req.timing.name(), store()->root().string());
  int tuned = 0;
  for (const auto& [no, j] : lines) {
    const std::string where = fmt::format("{}:{}", path, no);
    if (!j.is_object() || !j.contains("op")) continue;  // a suite's header lines
    if (!j["op"].is_string()) throw UsageError(where + ": \"op\" must be a string");
    const std::string op = j["op"].get<std::string>();
    const std::string name = j.value("name", where);
    if (op != "gemm" && op != ops::kDecodeTuneOp) {
      fmt::print("{:<28} skipped: {} has no tactics to tune\n", name, op);
      continue;
    }
    nlohmann::ordered_json row;
    const nlohmann::json set = j.value("set", nlohmann::json::object());
    if (op == "gemm") {
      tune_gemm_line(name, set, req, row);
    } else {
      tune_decode_line(name, set, req, row);
    }
    row["device"] = fp.device;
    row["driver"] = fp.driver;
    row["kjit"] = fp.kjit;
    if (json.is_open()) json << row.dump() << "\n";
    ++tuned;
  }
  fmt::print("{} shapes tuned\n", tuned);
  return kExitOk;
}

}  // namespace

void add_tune_commands(CLI::App& app, int& exit_code) {
  CLI::App* tune = app.add_subcommand(
      "tune", "Tune a workload's shapes ahead of time (--from), or the stored results");
  tune->footer(kExitCodesFooter);
  tune->require_subcommand(0, 1);
  struct Opts {
    std::string op = "*";
    bool json = false;
    std::string from, timing = "eager-cold", json_path;
    bool retune = false;
  };
  auto o = std::make_shared<Opts>();
  tune->add_option("--from", o->from,
                   "Workload JSONL (bench's lines: {\"op\": \"gemm\" or \"decode_attention\", "
                   "\"set\": {...}}): tune each line's shape bucket, print the winner against "
                   "the default");
  tune->add_option("--timing", o->timing,
                   "with --from: eager-cold (default), eager-hot, graph-cold or graph-hot");
  tune->add_flag("--retune", o->retune, "with --from: measure buckets that have a stored result");
  tune->add_option("--json", o->json_path, "with --from: append one JSON line per shape to FILE");
  tune->callback([tune, o, &exit_code] {
    if (!tune->get_subcommands().empty()) return;
    if (o->from.empty()) throw UsageError("tune needs --from FILE, show or clear");
    exit_code = run_from(o->from, o->timing, o->retune, o->json_path);
  });
  CLI::App* show = tune->add_subcommand("show", "List the stored results and their margins");
  show->add_option("--op", o->op, "Only ops matching this glob");
  show->add_flag("--json", o->json, "Print one JSON document on stdout");
  show->callback([o, &exit_code] { exit_code = run_show(o->op, o->json); });
  CLI::App* clear = tune->add_subcommand("clear", "Remove stored results");
  clear->add_option("--op", o->op, "Only ops matching this glob");
  clear->callback([o, &exit_code] {
    const size_t n = store()->clear(o->op);
    fmt::print("removed {} tuning records\n", n);
    exit_code = kExitOk;
  });
}

}  // namespace kjit::cli
