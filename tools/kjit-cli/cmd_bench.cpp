// `kjit-cli bench <op>`: run an op on the GPU on fresh random inputs, check it against the CPU
// reference (a failed check is reported as a failure, never as a speed), then time it beside a
// device-to-device copy of the same bytes measured in the same run. `empty` times a kernel that
// does nothing: the launch floor every other figure sits on. The harness is bench_harness.*;
// each family's cases are in bench_<family>.cpp.
#include <memory>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"

namespace kjit::cli {
namespace {

const std::vector<BenchEntry>& benches() {
  static const std::vector<BenchEntry> all = [] {
    std::vector<BenchEntry> v;
    add_norm_benches(v);
    add_activation_benches(v);
    add_rope_benches(v);
    add_kv_cache_benches(v);
    add_empty_bench(v);
    return v;
  }();
  return all;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Run an op on the GPU, check it, and time it");
  struct Opts {
    std::string op;
    std::vector<std::string> sets;
    BenchOptions bench;
  };
  auto opts = std::make_shared<Opts>();
  std::string op_names, set_help;
  for (const auto& b : benches()) {
    op_names += std::string(op_names.empty() ? "" : ", ") + b.op;
    set_help += std::string(set_help.empty() ? "" : "; ") + b.op + ": " + b.set_help;
  }
  cmd->add_option("op", opts->op, "op to run (" + op_names + ")")->required();
  cmd->add_option("--set", opts->sets, "name=value (" + set_help + ")");
  cmd->add_option("--warmup", opts->bench.warmup, "untimed launches first")
      ->check(CLI::Range(0, 10000));
  cmd->add_option("--samples", opts->bench.samples, "timed batches")->check(CLI::Range(3, 100000));
  cmd->add_option("--json", opts->bench.json_path, "append one JSON line per result to this file");
  cmd->callback([opts, op_names, &exit_code] {
    const BenchEntry* e = nullptr;
    for (const auto& b : benches()) e = opts->op == b.op ? &b : e;
    if (e == nullptr) throw UsageError("bench supports: " + op_names);
    ops::SetArgs args = parse_sets(opts->sets);
    for (const auto& k : e->required) {
      if (!args.count(k)) throw UsageError("bench " + opts->op + " needs --set " + k + "=...");
    }
    if (args.count("dtype") && args["dtype"] != "bf16" && args["dtype"] != "fp16" &&
        args["dtype"] != "fp32") {
      throw UsageError("dtype must be bf16, fp16 or fp32");
    }
    if (args.count("act") && args["act"] != "silu" && args["act"] != "gelu" &&
        args["act"] != "gelutanh") {
      throw UsageError("act must be silu, gelu or gelutanh");
    }
    exit_code = e->run(args, opts->bench);
  });
}

}  // namespace kjit::cli
