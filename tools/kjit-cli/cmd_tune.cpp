// `kjit-cli tune show|clear`: the autotuner's stored results (docs/autotune.md), under
// <cache_dir>/tuning/.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "runtime/jit_core.hpp"
#include "tune/tune_store.hpp"
#include "util/glob.hpp"

namespace kjit::cli {
namespace {

tune::TuneStore store() {
  return tune::TuneStore(jit::JitCore::global().settings().cache_dir / "tuning");
}

int run_show(const std::string& op_glob, bool json) {
  const tune::TuneStore s = store();
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
      nlohmann::ordered_json r = {{"path", e.path.string()}, {"valid", e.valid}};
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
      fmt::print("{:<18} {:<40} {:<11} {:<22} {}  [{}, {}, {}]\n", e.key.op, e.key.bucket,
                 e.key.timing, e.rec.tactic, gain, e.fp.device, e.fp.kjit, e.rec.when);
    }
  }
  if (json) {
    fmt::print("{}\n",
               nlohmann::ordered_json{{"dir", s.root().string()}, {"records", rows}}.dump(2));
  } else if (shown == 0) {
    fmt::print("no tuning records in {}\n", s.root().string());
  }
  return kExitOk;
}

}  // namespace

void add_tune_commands(CLI::App& app, int& exit_code) {
  CLI::App* tune = app.add_subcommand("tune", "The autotuner's stored results");
  tune->footer(kExitCodesFooter);
  tune->require_subcommand(1);
  struct Opts {
    std::string op = "*";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* show = tune->add_subcommand("show", "List the stored results and their margins");
  show->add_option("--op", o->op, "Only ops matching this glob");
  show->add_flag("--json", o->json, "Print one JSON document on stdout");
  show->callback([o, &exit_code] { exit_code = run_show(o->op, o->json); });
  CLI::App* clear = tune->add_subcommand("clear", "Remove stored results");
  clear->add_option("--op", o->op, "Only ops matching this glob");
  clear->callback([o, &exit_code] {
    const size_t n = store().clear(o->op);
    fmt::print("removed {} tuning records\n", n);
    exit_code = kExitOk;
  });
}

}  // namespace kjit::cli
