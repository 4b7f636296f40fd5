// Bench suites: the rows one `kjit-cli bench --suite NAME` runs, kept as data files under
// bench/suites/ (docs/bench.md, "Suites"), so that what a result folder measured is a committed
// file and not a script. Parsing needs no GPU; cmd_bench.cpp checks each row's op and --set names
// against the benches it knows.
//
// A suite file has one JSON object a line; blank lines and lines starting with '#' are skipped:
//   {"suite": "norm", "about": "..."}              optional, first: the suite's own description
//   {"defaults": {"runs": [...], ...}}              row keys that later rows take unless they say
//   {"name": "rms-b1", "op": "rmsnorm", "set": {"dtype": "bf16", "rows": 1, "hidden": 4096},
//    "runs": ["cupti/read", "cupti/dirty", "graph/none"], "backends": "kjit,copy",
//    "repeat": 2, "iters": 50, "warmup": 10, "headline": true}
//   {"peer": "torch_peers.py", "args": ["--op", "rmsnorm", ...], "runs": ["events/dirty"]}
// A run is "TIMER/FLUSH" (bench_timer.hpp, bench_stats.hpp: Flush); peers time with events only
// (events, events-batched, graph). Unknown keys are errors: a mistyped option must not silently
// time the default.
#pragma once

#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_stats.hpp"

namespace kjit::cli {

struct SuiteRow {
  std::string name;  // unique within the suite
  std::string op;
  std::map<std::string, std::string> sets;
  std::vector<Timing> runs;  // every one after a single set-up and check
  std::vector<std::string> backends{"kjit"};
  int repeat = 1;   // each run this many times, one after the other
  int iters = 0;    // 0: the command line's
  int warmup = -1;  // -1: the command line's
  bool headline = false;
  int line = 0;  // where it is in the file, for messages
};

// A PyTorch (or other) peer the suite runs beside kjit (bench/run.sh runs them): a script under
// bench/peers/, its arguments, and the timings to run it under (the script's --runs).
struct SuitePeer {
  std::string script;
  std::vector<std::string> args;
  std::vector<Timing> runs{{"events-batched", Flush::kNone}};
  int line = 0;
};

struct Suite {
  std::string name;  // the "suite" line's, else the file's stem
  std::string about;
  std::vector<SuiteRow> rows;
  std::vector<SuitePeer> peers;
};

// The values of a "set" object as --set strings: strings as they are, numbers as written,
// booleans as "1" / "0"; std::invalid_argument (prefixed with `where`) for anything else. Shared
// with the workload lines of `bench --from`.
std::map<std::string, std::string> set_values(const nlohmann::json& set, const std::string& where);

// The JSON lines of a workload or suite file (`bench --from`, `tune --from`), each with its line
// number; blank lines and lines starting with '#' are skipped. std::invalid_argument
// "WHERE:LINE: not JSON: ..." for a line that does not parse.
std::vector<std::pair<int, nlohmann::json>> json_lines(std::istream& in, const std::string& where);

// Parses a suite file's text. `where` names it in messages ("bench/suites/norm.jsonl"); every
// error is a std::invalid_argument "WHERE:LINE: what is wrong".
Suite parse_suite(const std::string& text, const std::string& where, const std::string& stem);

// The file a --suite argument names: a path when it has a '/' or ends in ".jsonl", else
// NAME.jsonl in the first of `dirs` that has it. std::invalid_argument (listing the suites of
// those folders) when there is none.
std::string find_suite(const std::string& name_or_path, const std::vector<std::string>& dirs);

}  // namespace kjit::cli
