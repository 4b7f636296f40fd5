// kjit-cli bench / defs as processes: usage errors exit 2 before any GPU work, repro lines parse
// back to the same options, the committed workloads, suites and definitions are what this build
// reads and writes, and bench without a GPU exits 3 (with one, it runs and writes full rows).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench_stats.hpp"
#include "ops/activation/activation.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string out;
};

// Runs `kjit-cli <args>` (a shell fragment) with a private cache; stdout, and stderr too when
// `with_stderr`.
Run cli(const fs::path& cache, const std::string& args, bool with_stderr = false) {
  std::string cmd = "KJIT_CACHE_DIR='" + cache.string() + "' '" KJIT_CLI_PATH "' " + args +
                    (with_stderr ? " 2>&1" : " 2>/dev/null");
  Run r;
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  REQUIRE(sh.code != -1);
  r.code = sh.code;
  r.out = sh.out;
  return r;
}

const std::string kRms = "bench rmsnorm --set dtype=bf16 --set hidden=4096 --set rows=1 ";
const std::string kDecode =
    "bench decode_attention --set dtype=bf16 --set batch=1 --set kv_len=64 --set qo_heads=32 "
    "--set kv_heads=8 --set head_dim=128 --set page_size=16 ";

}  // namespace

TEST_CASE("cli bench: bad options are usage errors (exit 2), before any GPU work", "[cli]") {
  kjit::test::TempDir dir;
  const fs::path bad_line = dir.path() / "bad.jsonl";
  kjit::util::write_file_atomic(bad_line,
                                "{\"op\": \"rmsnorm\", \"set\": {\"dtype\": \"bf16\"}}\n");
  const fs::path not_json = dir.path() / "not.jsonl";
  kjit::util::write_file_atomic(not_json, "# a comment\n{op: rmsnorm}\n");
  const fs::path other_csv = dir.path() / "other.csv";
  kjit::util::write_file_atomic(other_csv, "a,b,c\n1,2,3\n");
  const std::string cases[] = {
      kRms + "--backends kjit,bogus",
      kRms + "--backends ''",
      kRms + "--backends kjit,,copy",
      kRms + "--backends kjit,kjit",
      kRms + "--backends reference",  // rmsnorm has no device reference kernel
      kRms + "--timer nvtx",
      kRms + "--timer events-batched",  // needs --hot-l2
      kRms + "--cold-l2 --hot-l2",
      kRms + "--flush warm",
      kRms + "--flush dirty --hot-l2",
      kRms + "--flush none --cold-l2",
      kRms + "--timer graph",  // back to back: needs --flush none
      kRms + "--timer graph --flush dirty",
      kRms + "--timer events-batched --flush read",
      kRms + "--match rms",                  // --match selects rows of a suite
      kRms + "--timers cupti",               // so does --timers
      "bench --suite nosuchsuite",           // lists the suites it knows
      "bench --suite " + bad_line.string(),  // a workload file is not a suite: no "name"
      "bench --suite smoke --timer events",  // the suite says how rows are timed
      "bench --suite smoke --flush dirty",
      "bench --suite smoke --hot-l2",
      "bench --suite smoke --backends kjit,copy",
      "bench --suite smoke --no-check",  // suites make claims: the check stays on
      "bench --suite smoke rmsnorm",
      "bench --suite smoke --from " + bad_line.string(),
      "bench --suite smoke --match no-such-row",
      "bench --suite smoke --match '(unclosed'",  // not a regular expression
      "bench --suite smoke --timers nvtx",
      kRms + "--check --no-check",
      kRms + "--iters 0",
      kRms + "--max-noise -1",
      kRms + "--min-iters 1",
      kRms + "--from " + bad_line.string(),  // --from with an op
      kRms + "--csv " + other_csv.string(),  // a CSV with other columns
      "bench",                               // neither op nor --from
      "bench nosuchop --set a=b",
      "bench rmsnorm --set dtype=bf16 --set hidden=4096",  // rows missing
      "bench rmsnorm --set dtype=int8 --set hidden=8 --set rows=1",
      kRms + "--set gema=1",  // a knob rmsnorm does not read (gemma is one)
      "bench top_p_sampling --set batch=1 --set vocab=4096 --set threds=256",
      kDecode + "--set warps=2",  // the old knob: a tactic names it now (w2)
      "bench act_and_mul --set act=silu --set dtype=bf16 --set d=64 --set rows=1 --set vec=4",
      "bench act_and_mul --set act=relu --set dtype=bf16 --set d=64 --set rows=1",
      "bench empty --set read=4096",                   // the move floor: write missing
      "bench empty --set read=1024 --set write=2048",  // writes more than it reads
      "bench empty --set read=1000 --set write=1000",  // not 16-byte vectors
      "bench empty --set read=8192 --set write=2048",  // more than two reads an output
      "bench empty --set bytes=4096",                  // not a knob of empty
      "bench --from " + bad_line.string(),             // a line without rows
      "bench --from " + not_json.string(),
      "bench --from " + (dir.path() / "missing.jsonl").string(),
  };
  for (const auto& args : cases) {
    INFO(args);
    const Run r = cli(dir.path(), args, true);
    CHECK(r.code == 2);
    CHECK_FALSE(r.out.empty());  // a message, not just a code
  }
  // Every activation of the table is a bench act (the check once listed three by hand).
  for (const auto& a : kjit::ops::kActivations) {
    INFO(a.name);
    CHECK(cli(dir.path(), std::string("bench act_and_mul --set act=") + a.name +
                              " --set dtype=bf16 --set d=64 --set rows=1 --dry-run")
              .code == 0);
  }
}

TEST_CASE("cli bench: a row's repro parses back to the same options", "[cli]") {
  kjit::test::TempDir dir;
  const std::string variants[] = {
      "",
      "--timer events --hot-l2 --iters 7 --warmup 0",
      "--flush dirty",
      "--timer events --flush dirty --iters 9",
      "--timer graph --flush none --backends kjit,copy",
      "--timer cupti --hot-l2",
      "--timer events-batched --hot-l2 --backends kjit,copy --no-check",
      "--max-noise 0.25 --max-time 3.5 --min-iters 12",
      "--max-noise 2 --iters 40 --timer events --json x.jsonl --csv x.csv",
  };
  for (const auto& v : variants) {
    INFO(v);
    const Run first = cli(dir.path(), kRms + v + " --dry-run");
    REQUIRE(first.code == 0);
    const auto a = nlohmann::json::parse(first.out).at("runs").at(0);
    const std::string repro = a.at("repro").get<std::string>();
    REQUIRE(repro.rfind("kjit-cli bench ", 0) == 0);
    // The repro line, run through the real parser with the shell's word splitting.
    const Run again = cli(dir.path(), repro.substr(std::string("kjit-cli ").size()) + " --dry-run");
    REQUIRE(again.code == 0);
    const auto b = nlohmann::json::parse(again.out).at("runs").at(0);
    CHECK(b.at("options") == a.at("options"));
    CHECK(b.at("repro") == a.at("repro"));  // a fixpoint
  }
  const auto o =
      nlohmann::json::parse(cli(dir.path(), kRms + "--timer events --hot-l2 --dry-run").out)
          .at("runs")
          .at(0)
          .at("options");
  CHECK(o.at("timer") == "events");
  CHECK(o.at("flush") == "none");
  CHECK(o.at("set").at("hidden") == "4096");
  // The old flags stay as aliases of --flush; the default is the clean read flush.
  auto flush_of = [&](const std::string& v) {
    return nlohmann::json::parse(cli(dir.path(), kRms + v + " --dry-run").out)
        .at("runs")
        .at(0)
        .at("options")
        .at("flush");
  };
  CHECK(flush_of("") == "read");
  CHECK(flush_of("--cold-l2") == "read");
  CHECK(flush_of("--hot-l2") == "none");
  CHECK(flush_of("--flush dirty") == "dirty");
}

TEST_CASE("cli bench: the committed suites are valid --suite input, family suites both flushes",
          "[cli]") {
  kjit::test::TempDir dir;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(KJIT_SOURCE_DIR) / "bench/suites")) {
    if (e.path().extension() == ".jsonl") names.push_back(e.path().stem().string());
  }
  for (const char* family :
       {"smoke", "norm", "activation", "rope", "kv_cache", "decode_attention", "sampling"}) {
    CHECK(std::find(names.begin(), names.end(), family) != names.end());
  }
  for (const auto& name : names) {
    INFO(name);
    // By name, from the source tree's bench/suites (the test does not run in a checkout).
    const Run r = cli(dir.path(), "bench --suite " + name + " --dry-run", true);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("suite") == name);
    CHECK_FALSE(j.at("about").get<std::string>().empty());
    const auto& runs = j.at("runs");
    REQUIRE_FALSE(runs.empty());
    // Every row (by workload name) of a family suite is timed under both flushes, and every
    // run checks its output first. Rows timed only back to back (events-batched, graph: no flush
    // between calls, e.g. gemm's weights_early A/B) are the exception.
    std::map<std::string, std::set<std::string>> flushes;
    std::map<std::string, bool> back_to_back_only;
    bool headline = false;
    for (const auto& run : runs) {
      const auto& o = run.at("options");
      CHECK(o.at("check") == true);
      CHECK_FALSE(run.at("workload").get<std::string>().empty());
      CHECK(run.at("repro").get<std::string>().find(
                "--flush " + o.at("flush").get<std::string>()) != std::string::npos);
      flushes[run.at("workload")].insert(o.at("flush").get<std::string>());
      const std::string timer = o.at("timer").get<std::string>();
      const bool b2b = timer == "events-batched" || timer == "graph";
      auto at = back_to_back_only.emplace(run.at("workload").get<std::string>(), b2b).first;
      at->second = at->second && b2b;
      headline = headline || run.at("headline").get<bool>();
    }
    if (name != "smoke") {
      CHECK(headline);
      for (const auto& [row, seen] : flushes) {
        INFO(row);
        if (back_to_back_only.at(row)) continue;
        CHECK(seen.count("read") == 1);
        CHECK(seen.count("dirty") == 1);
      }
    }
    for (const auto& peer : j.at("peers")) {
      INFO(peer.dump());
      CHECK(fs::exists(fs::path(KJIT_SOURCE_DIR) / "bench/peers" /
                       peer.at("script").get<std::string>()));
      CHECK_FALSE(peer.at("runs").empty());
    }
  }
  // --match and --timers select: only the smoke suite's graph runs of its rmsnorm row.
  const Run sel = cli(dir.path(), "bench --suite smoke --match rmsnorm --timers graph --dry-run");
  REQUIRE(sel.code == 0);
  const auto runs = nlohmann::json::parse(sel.out).at("runs");
  REQUIRE(runs.size() == 1);
  CHECK(runs.at(0).at("options").at("op") == "rmsnorm");
  CHECK(runs.at(0).at("options").at("timer") == "graph");
  CHECK(runs.at(0).at("options").at("flush") == "none");
  // --match is a regular expression: anchored, one row; an alternation, either.
  for (const auto& [pattern, rows] :
       std::vector<std::pair<std::string, size_t>>{{"'^rmsnorm-64x4096$'", 1},
                                                   {"'^rmsnorm-64x409$'", 0},
                                                   {"'^top_p-b1-v32000$|^rmsnorm'", 2},
                                                   {"'^(empty|decode)'", 2}}) {
    INFO(pattern);
    const Run m = cli(dir.path(), "bench --suite smoke --match " + pattern + " --dry-run");
    if (rows == 0) {
      CHECK(m.code == 2);
      continue;
    }
    REQUIRE(m.code == 0);
    std::set<std::string> ops;
    const auto doc = nlohmann::json::parse(m.out);
    for (const auto& r : doc.at("runs")) {
      ops.insert(r.at("options").at("op").get<std::string>());
    }
    CHECK(ops.size() == rows);
  }
  // A suite given as a file, and its rows' options.
  const fs::path own = dir.path() / "own.jsonl";
  kjit::util::write_file_atomic(
      own,
      "{\"name\": \"r\", \"op\": \"rmsnorm\", \"set\": {\"dtype\": \"bf16\", \"rows\": 2, "
      "\"hidden\": 64}, \"runs\": [\"events/dirty\", \"graph/none\"], \"repeat\": 2, "
      "\"iters\": 5, \"backends\": \"kjit,copy\"}\n");
  const Run mine = cli(dir.path(), "bench --suite " + own.string() + " --warmup 3 --dry-run");
  REQUIRE(mine.code == 0);
  const auto mr = nlohmann::json::parse(mine.out).at("runs");
  REQUIRE(mr.size() == 4);  // two timings, twice
  CHECK(mr.at(0).at("options").at("timer") == "events");
  CHECK(mr.at(0).at("options").at("flush") == "dirty");
  CHECK(mr.at(1).at("options").at("timer") == "graph");
  CHECK(mr.at(2).at("options").at("timer") == "events");
  CHECK(mr.at(0).at("options").at("iters") == 5);
  CHECK(mr.at(0).at("options").at("warmup") == 3);  // the command line's, the row sets none
  CHECK(mr.at(0).at("options").at("backends") == nlohmann::json({"kjit", "copy"}));
  CHECK(mr.at(0).at("workload") == "r");
  // A row whose op or --set names are wrong is a usage error naming the file and line.
  const fs::path wrong = dir.path() / "wrong.jsonl";
  kjit::util::write_file_atomic(
      wrong, "# first line\n{\"name\": \"r\", \"op\": \"rmsnorm\", \"set\": {\"rows\": 2}}\n");
  const Run w = cli(dir.path(), "bench --suite " + wrong.string() + " --dry-run", true);
  CHECK(w.code == 2);
  CHECK(w.out.find(wrong.string() + ":2:") != std::string::npos);
}

TEST_CASE("cli bench: the committed workloads are valid --from input", "[cli]") {
  kjit::test::TempDir dir;
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(KJIT_SOURCE_DIR) / "bench/workloads")) {
    if (e.path().extension() != ".jsonl") continue;
    ++files;
    INFO(e.path());
    int lines = 0;
    std::ifstream f(e.path());
    for (std::string line; std::getline(f, line);) lines += !line.empty() && line[0] != '#';
    const Run r = cli(dir.path(), "bench --from " + e.path().string() + " --dry-run");
    REQUIRE(r.code == 0);
    const auto runs = nlohmann::json::parse(r.out).at("runs");
    CHECK(static_cast<int>(runs.size()) == lines);
    for (const auto& run : runs) CHECK_FALSE(run.at("workload").get<std::string>().empty());
    // Each line names a committed definition, and only var axes of it.
    std::ifstream again(e.path());
    for (std::string line; std::getline(again, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto j = nlohmann::json::parse(line);
      const fs::path def = fs::path(KJIT_SOURCE_DIR) / "bench/definitions" /
                           (j.at("definition").get<std::string>() + ".json");
      INFO(line);
      REQUIRE(fs::exists(def));
      const auto d = nlohmann::json::parse(*kjit::util::read_file(def));
      for (const auto& [axis, value] : j.at("axes").items()) {
        INFO(axis);
        CHECK(d.at("axes").at(axis).at("type") == "var");
      }
    }
  }
  CHECK(files >= 2);  // Llama-3-8B and -70B
}

TEST_CASE("cli bench: without a GPU bench exits 3 with a message, with one it writes a row",
          "[cli]") {
  kjit::test::TempDir dir;
  const fs::path json = dir.path() / "rows.jsonl", csv = dir.path() / "rows.csv";
  const std::string args =
      "bench empty --timer events --hot-l2 --warmup 1 --iters 5 "
      "--backends kjit --json " +
      json.string() + " --csv " + csv.string();
  std::string why;
  if (!kjit::test::gpu_available(&why)) {
    const Run r = cli(dir.path(), args, true);
    CHECK(r.code == 3);
    CHECK(r.out.find("GPU") != std::string::npos);
    CHECK_FALSE(fs::exists(json));
    return;
  }
  const Run r = cli(dir.path(), args);
  REQUIRE(r.code == 0);
  std::ifstream f(json);
  std::string line;
  REQUIRE(std::getline(f, line));
  const auto row = nlohmann::json::parse(line);
  for (const auto& field : kjit::cli::row_fields()) {
    INFO(field);
    const size_t dot = field.find('.');
    CHECK((dot == std::string::npos
               ? row.contains(field)
               : row.at(field.substr(0, dot)).contains(field.substr(dot + 1))));
  }
  CHECK(row.at("timer") == "events");
  CHECK(row.at("iters") == 5);
  CHECK(row.at("median_us").get<double>() > 0);
  std::ifstream c(csv);
  std::string header;
  REQUIRE(std::getline(c, header));
  CHECK(header == kjit::cli::csv_header());

  // CUPTI (or events, saying why) with a cold L2, the copy baseline as its own row, a real check.
  const fs::path rows = dir.path() / "rms.jsonl";
  REQUIRE(cli(dir.path(), kRms +
                              "--timer cupti --cold-l2 --warmup 2 --iters 20 --backends "
                              "kjit,copy --json " +
                              rows.string())
              .code == 0);
  std::ifstream rf(rows);
  std::vector<nlohmann::json> got;
  for (std::string l; std::getline(rf, l);) got.push_back(nlohmann::json::parse(l));
  REQUIRE(got.size() == 2);
  CHECK(got[0].at("backend") == "kjit");
  CHECK(got[1].at("backend") == "copy");
  for (const auto& row : got) {
    INFO(row.dump());
    CHECK(row.at("l2") == "cold");
    CHECK(row.at("iters") == 20);
    const std::string timer = row.at("timer");
    CHECK((timer == "cupti" || (timer == "events" && row.contains("timer_note"))));
    CHECK(row.at("median_us").get<double>() > 0);
    CHECK(row.at("min_us").get<double>() <= row.at("median_us").get<double>());
    CHECK(row.at("median_us").get<double>() <= row.at("max_us").get<double>());
  }
  CHECK(got[0].at("check").at("pass") == true);
  CHECK(got[0].at("pct_of_copy").get<double>() > 0);
  CHECK(got[0].at("uri").get<std::string>().rfind("rmsnorm_", 0) == 0);
  CHECK(got[0].at("flush") == "read");

  // The dirty flush and the graph timer, through a suite file: one set-up, a row per timing.
  const fs::path suite = dir.path() / "s.jsonl", srows = dir.path() / "s_rows.jsonl";
  kjit::util::write_file_atomic(
      suite,
      "{\"name\": \"r\", \"op\": \"rmsnorm\", \"set\": {\"dtype\": \"bf16\", \"rows\": 64, "
      "\"hidden\": 4096}, \"runs\": [\"events/dirty\", \"graph/none\"], \"iters\": 10, "
      "\"warmup\": 2, \"headline\": true}\n");
  REQUIRE(cli(dir.path(), "bench --suite " + suite.string() + " --json " + srows.string()).code ==
          0);
  std::ifstream sf(srows);
  std::vector<nlohmann::json> srow;
  for (std::string l; std::getline(sf, l);) srow.push_back(nlohmann::json::parse(l));
  REQUIRE(srow.size() == 2);
  CHECK(srow[0].at("timer") == "events");
  CHECK(srow[0].at("flush") == "dirty");
  CHECK(srow[0].at("l2") == "cold");
  CHECK(srow[1].at("timer") == "graph");
  CHECK(srow[1].at("flush") == "none");
  CHECK(srow[1].at("batch").get<int>() >= 1);
  for (const auto& row : srow) {
    INFO(row.dump());
    CHECK(row.at("suite") == "s");
    CHECK(row.at("headline") == true);
    CHECK(row.at("workload") == "r");
    CHECK(row.at("check").at("pass") == true);
    CHECK(row.at("median_us").get<double>() > 0);
  }
}

TEST_CASE("cli defs: export writes one file per definition, equal to the committed set", "[cli]") {
  kjit::test::TempDir dir;
  const fs::path out = dir.path() / "defs";
  const Run r = cli(dir.path(), "defs export " + out.string());
  REQUIRE(r.code == 0);
  size_t want = 0;
  for (const auto& op : kjit::ops::op_registry())
    want += op.definitions ? op.definitions().size() : 0;
  size_t got = 0;
  const fs::path committed = fs::path(KJIT_SOURCE_DIR) / "bench/definitions";
  for (const auto& e : fs::directory_iterator(out)) {
    ++got;
    INFO(e.path().filename() << ": regenerate with `kjit-cli defs export bench/definitions "
                                "--clean`");
    const auto fresh = kjit::util::read_file(e.path());
    const auto kept = kjit::util::read_file(committed / e.path().filename());
    REQUIRE(kept.has_value());
    CHECK(*fresh == *kept);
    CHECK(nlohmann::json::parse(*fresh).at("name") == e.path().stem().string());
  }
  CHECK(got == want);
  CHECK(want >= 20);
  const Run list = cli(dir.path(), "defs list --json");
  REQUIRE(list.code == 0);
  CHECK(nlohmann::json::parse(list.out).size() == want);
  CHECK(cli(dir.path(), "defs").code == 2);
  CHECK(cli(dir.path(), "defs export").code == 2);
}

TEST_CASE("cli bench: libkjit.so links neither CUPTI nor NVML", "[cli]") {
  kjit::test::TempDir dir;
  const kjit::test::ShellRun sh =
      kjit::test::run_shell("readelf -d '" KJIT_SHARED_LIB_PATH "' 2>&1");
  REQUIRE(sh.code == 0);
  const std::string& out = sh.out;
  REQUIRE(out.find("NEEDED") != std::string::npos);
  CHECK(out.find("cupti") == std::string::npos);
  CHECK(out.find("nvidia-ml") == std::string::npos);
  CHECK(out.find("libcuda.so") == std::string::npos);
}
