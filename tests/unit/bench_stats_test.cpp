// The GPU-free rules of `kjit-cli bench` (tools/kjit-cli/bench_stats.*) on synthetic input:
// statistics, the noise stopping decision, throttle classification, CUPTI record splitting, CSV
// rows, --backends / --flush / --timer parsing, repro command lines, the bound on launches
// queued behind the blocking kernel, suite files (bench_suite.*) and the checks' row split over
// the cores (check_rows); and the harness's own kernels compile.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_kernels.hpp"
#include "bench_stats.hpp"
#include "bench_suite.hpp"
#include "runtime/jit_core.hpp"
#include "support/temp_dir.hpp"

using namespace kjit::cli;

TEST_CASE("bench stats: order statistics and spread of known samples", "[bench]") {
  // 1..10 shuffled: quantiles interpolate between ranks, stddev is the n - 1 form.
  std::vector<double> v = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};
  Stats s = compute_stats(v);
  CHECK(s.n == 10);
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  CHECK(s.median == Approx(5.5));
  CHECK(s.p10 == Approx(1.9));
  CHECK(s.p90 == Approx(9.1));
  CHECK(s.mean == Approx(5.5));
  CHECK(s.stddev == Approx(std::sqrt(55.0 / 6.0)));
  CHECK(s.rel_stddev() == Approx(std::sqrt(55.0 / 6.0) / 5.5));

  Stats one = compute_stats({4.25});
  CHECK(one.n == 1);
  CHECK(one.median == 4.25);
  CHECK(one.p10 == 4.25);
  CHECK(one.p90 == 4.25);
  CHECK(one.stddev == 0);

  Stats none = compute_stats({});
  CHECK(none.n == 0);
  CHECK(none.rel_stddev() == 0);

  // An outlier moves the mean and stddev but not the median.
  Stats out = compute_stats({10, 10, 10, 10, 1000});
  CHECK(out.median == 10);
  CHECK(out.max == 1000);
  CHECK(out.rel_stddev() > 1.0);
}

TEST_CASE("bench stats: fixed count stops exactly at --iters", "[bench]") {
  BenchOptions o;
  o.iters = 5;
  std::vector<double> v = {1, 2, 3, 4};
  CHECK(stop_decision(o, v, 100.0) == StopReason::kContinue);  // no time cap on a fixed count
  v.push_back(5);
  CHECK(stop_decision(o, v, 0.0) == StopReason::kIters);
  o.iters = 0;
  CHECK(iters_or_default(o) == kDefaultIters);
  CHECK(stop_decision(o, std::vector<double>(kDefaultIters - 1, 1.0), 0) == StopReason::kContinue);
  CHECK(stop_decision(o, std::vector<double>(kDefaultIters, 1.0), 0) == StopReason::kIters);
}

TEST_CASE("bench stats: noise stopping waits for min-iters, then stops on noise or time",
          "[bench]") {
  BenchOptions o;
  o.max_noise_pct = 1.0;
  o.min_iters = 10;
  o.max_time_s = 2.0;
  const std::vector<double> quiet(9, 5.0);
  // Perfectly quiet but below min-iters: keep going.
  CHECK(stop_decision(o, quiet, 0.1) == StopReason::kContinue);
  std::vector<double> ten = quiet;
  ten.push_back(5.01);
  CHECK(stop_decision(o, ten, 0.1) == StopReason::kNoise);

  // 10% relative spread never meets 1%: continue until the time cap.
  std::vector<double> noisy;
  for (int i = 0; i < 50; ++i) noisy.push_back(i % 2 ? 4.5 : 5.5);
  CHECK(stop_decision(o, noisy, 1.9) == StopReason::kContinue);
  CHECK(stop_decision(o, noisy, 2.0) == StopReason::kTime);
  // The time cap needs at least three samples to report anything.
  CHECK(stop_decision(o, {4.5, 5.5}, 10.0) == StopReason::kContinue);
  CHECK(stop_decision(o, {4.5, 5.5, 5.0}, 10.0) == StopReason::kTime);
  // --iters with --max-noise is the most taken.
  o.iters = 50;
  CHECK(stop_decision(o, noisy, 0.5) == StopReason::kIters);
  // A looser target accepts the same samples.
  o.max_noise_pct = 15.0;
  CHECK(stop_decision(o, noisy, 0.5) == StopReason::kNoise);
}

TEST_CASE("bench stats: throttle classification from NVML readings", "[bench]") {
  ClockReading a, b;
  std::string why;
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kUnknown);  // no NVML
  CHECK(std::string(throttle_name(Throttle::kUnknown)) == "unknown");

  a.valid = b.valid = true;
  a.sm_mhz = b.sm_mhz = 1980;
  a.reasons_valid = b.reasons_valid = true;
  a.reasons = kClockReasonGpuIdle;  // idle before the chunk is not throttling
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kNo);

  b.reasons = kClockReasonSwPowerCap;
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kYes);
  CHECK(why.find("sw_power_cap") != std::string::npos);
  b.reasons = kClockReasonHwThermal | kClockReasonHwSlowdown;
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kYes);
  CHECK(why.find("hw_thermal") != std::string::npos);
  CHECK(why.find("hw_slowdown") != std::string::npos);
  b.reasons = 0;

  // A violation counter that grew during the chunk: throttled even with no reason left set.
  a.violation_valid = b.violation_valid = true;
  a.power_violation_ns = 1000;
  b.power_violation_ns = 1000;
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kNo);
  b.thermal_violation_ns = 5;
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kYes);
  CHECK(why.find("thermal") != std::string::npos);
  b.thermal_violation_ns = 0;
  b.power_violation_ns = 2000;
  CHECK(classify_throttle(a, b, 1980, &why) == Throttle::kYes);

  // Without reasons or counters: the clock against its maximum.
  ClockReading c, d;
  c.valid = d.valid = true;
  c.sm_mhz = 1980;
  d.sm_mhz = 1500;
  CHECK(classify_throttle(c, d, 1980, &why) == Throttle::kYes);
  d.sm_mhz = 1900;
  CHECK(classify_throttle(c, d, 1980, &why) == Throttle::kNo);
  CHECK(classify_throttle(c, d, 0, &why) == Throttle::kUnknown);
}

TEST_CASE("bench stats: CUPTI records split into samples at the separators", "[bench]") {
  // sep | k | sep | k1 k2 (one op launching two kernels) | sep, delivered out of order.
  std::vector<TimedRecord> recs = {{5000, 5400, false}, {1000, 1100, true},  {3000, 3100, true},
                                   {1200, 2200, false}, {3200, 3500, false}, {6000, 6050, true}};
  std::vector<double> us;
  std::string why;
  REQUIRE(split_samples(recs, 2, us, &why));
  REQUIRE(us.size() == 2);
  CHECK(us[0] == Approx(1.0));  // 1200 .. 2200 ns
  CHECK(us[1] == Approx(2.2));  // 3200 .. 5400 ns: first start to last end, gap included

  us.clear();
  CHECK_FALSE(split_samples(recs, 3, us, &why));  // 3 separators cannot make 3 samples
  CHECK(why.find("separator") != std::string::npos);
  CHECK(us.empty());

  // A sample whose kernel record was lost.
  std::vector<TimedRecord> lost = {
      {1000, 1100, true}, {1200, 1300, true}, {1400, 1500, false}, {1600, 1700, true}};
  CHECK_FALSE(split_samples(lost, 2, us, &why));
  CHECK(why.find("no kernel") != std::string::npos);

  std::vector<TimedRecord> incomplete = {{1000, 1100, true}, {1200, 0, false}, {1600, 1700, true}};
  CHECK_FALSE(split_samples(incomplete, 1, us, &why));
}

TEST_CASE("bench stats: CSV rows follow the header and escape what needs it", "[bench]") {
  const std::string header = csv_header();
  CHECK(header.rfind("op,uri,backend,shape,dtype,arch,gpu,driver,timer,l2,flush,", 0) == 0);
  CHECK(header.find("check.pass,check.max_abs,check.max_rel,throttled") != std::string::npos);
  CHECK(header.substr(header.size() - 6) == ",repro");

  nlohmann::ordered_json row;
  row["op"] = "rmsnorm";
  row["shape"] = {{"rows", 1}, {"hidden", 4096}};
  row["gpu"] = "NVIDIA H200, \"SXM\"";
  row["median_us"] = 2.5;
  row["check"] = {{"pass", true}, {"max_abs", 0.25}, {"max_rel", 0.001}};
  row["throttled"] = "unknown";
  row["flush"] = "dirty";
  row["repro"] = "kjit-cli bench rmsnorm --set dtype=bf16";
  const std::string line = csv_line(row);

  // Split the line back with RFC 4180 quoting and compare field by field.
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        cell += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      cells.push_back(cell);
      cell.clear();
    } else {
      cell += ch;
    }
  }
  cells.push_back(cell);
  const auto& fields = row_fields();
  REQUIRE(cells.size() == fields.size());
  auto at = [&](const std::string& f) {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] == f) return cells[i];
    }
    FAIL("no field " << f);
    return std::string();
  };
  CHECK(at("op") == "rmsnorm");
  CHECK(nlohmann::json::parse(at("shape")) == nlohmann::json({{"rows", 1}, {"hidden", 4096}}));
  CHECK(at("gpu") == "NVIDIA H200, \"SXM\"");
  CHECK(std::stod(at("median_us")) == 2.5);
  CHECK(at("check.pass") == "true");
  CHECK(std::stod(at("check.max_abs")) == 0.25);
  CHECK(at("throttled") == "unknown");
  CHECK(at("flush") == "dirty");
  CHECK(at("uri").empty());  // absent fields are empty cells
  CHECK(at("repro") == "kjit-cli bench rmsnorm --set dtype=bf16");
  CHECK(csv_escape("a\nb") == "\"a\nb\"");
  CHECK(csv_escape("plain") == "plain");
}

TEST_CASE("bench stats: --backends parsing", "[bench]") {
  CHECK(parse_backends({"kjit"}) == std::vector<std::string>{"kjit"});
  CHECK(parse_backends({"kjit,copy"}) == std::vector<std::string>{"kjit", "copy"});
  CHECK(parse_backends({"copy", "reference"}) == std::vector<std::string>{"copy", "reference"});
  for (const char* bad : {"", "kjit,", ",copy", "kjit,kjit", "cublas", "KJIT"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_backends({bad}), std::invalid_argument);
  }
  CHECK_THROWS_WITH(parse_backends({"kjit,torch"}), Catch::Contains("unknown backend 'torch'"));
}

TEST_CASE("bench stats: repro command lines name every option that changes a figure", "[bench]") {
  BenchOptions o;
  o.op = "rmsnorm";
  o.sets = {{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "1"}};
  CHECK(repro_command(o) ==
        "kjit-cli bench rmsnorm --set dtype=bf16 --set hidden=4096 --set rows=1 --backends kjit "
        "--timer cupti --flush read --warmup 10 --iters 100 --check");
  o.flush = Flush::kDirty;
  CHECK(repro_command(o).find(" --timer cupti --flush dirty ") != std::string::npos);
  o.flush = Flush::kNone;
  o.timer = "events-batched";
  o.backends = {"kjit", "copy"};
  o.max_noise_pct = 0.5;
  o.max_time_s = 2.5;
  o.min_iters = 20;
  o.check = false;
  o.json_path = "out.jsonl";  // where rows go is not part of a row's identity
  CHECK(repro_command(o) ==
        "kjit-cli bench rmsnorm --set dtype=bf16 --set hidden=4096 --set rows=1 --backends "
        "kjit,copy --timer events-batched --flush none --warmup 10 --max-noise 0.5 --max-time 2.5 "
        "--min-iters 20 --no-check");
  CHECK(shell_quote("dtype=bf16") == "dtype=bf16");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
}

TEST_CASE("bench stats: events-batched batch sizes", "[bench]") {
  CHECK(batch_for(2.0, 200.0) == 100);
  CHECK(batch_for(1.41, 200.0) == 142);
  CHECK(batch_for(0.0, 200.0) == 256);  // a zero probe counts as 0.5 us, then the cap
  CHECK(batch_for(0.01, 200.0) == 256);
  CHECK(batch_for(500.0, 200.0) == 1);  // a call longer than the target: one per sample
  CHECK(batch_for(NAN, 200.0) == 1);
  for (double t : {0.0, 0.3, 0.78, 1.0, 1.41, 3.0, 50.0, 1e6}) {
    const int b = batch_for(t, 200.0);
    CHECK(b >= 1);
    CHECK(b + 2 <= kMaxQueuedBehindBlocker);
  }
}

TEST_CASE("bench stats: launches queued behind the blocking kernel stay bounded", "[bench]") {
  // A failure seen on the H200: 16 samples x 256 calls (4096 launches) behind one release filled
  // the driver's launch queue; the host then waited for the blocking kernel's time-out.
  CHECK(samples_per_release(256, false, 16) * (256 + 2) <= kMaxQueuedBehindBlocker);
  CHECK(samples_per_release(256, false, 16) == 1);
  CHECK(samples_per_release(142, false, 16) == 3);
  CHECK(samples_per_release(1, true, 16) == 16);  // events, cold: 16 x 4 entries
  CHECK(samples_per_release(1, false, 16) == 16);
  CHECK(samples_per_release(1, false, 5) == 5);  // never more than asked
  CHECK(samples_per_release(1, false, 0) == 1);  // always at least one sample
  CHECK(samples_per_release(100000, false, 16) == 1);
  for (int batch = 1; batch <= 256; ++batch) {
    for (bool cold : {false, true}) {
      const int n = samples_per_release(batch, cold, 16);
      INFO("batch " << batch << " cold " << cold);
      CHECK(n >= 1);
      CHECK(n <= 16);
      CHECK(n * (batch + 2 + (cold ? 1 : 0)) <= kMaxQueuedBehindBlocker);
    }
  }
}

TEST_CASE("bench kernels: the harness's blocking, flush and separator kernels compile", "[bench]") {
  kjit::test::TempDir dir;
  kjit::jit::Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  kjit::jit::JitCore core(s);
  const kjit::jit::Spec spec = harness_kernels_spec();
  REQUIRE(spec.entry_names.size() == 4);
  for (const kjit::jit::ArchTarget t :
       {kjit::jit::ArchTarget{8, 0, false}, kjit::jit::ArchTarget{9, 0, false}}) {
    const kjit::jit::Artifact a = core.build(spec, t);
    REQUIRE_FALSE(a.cubin.empty());
    // extern "C" entries keep their names in the cubin: CUPTI records are matched by them.
    for (const char* name : {kBlockKernel, kFlushKernel, kMarkKernel, kDirtyFlushKernel}) {
      INFO(name);
      CHECK(a.cubin.find(name) != std::string::npos);
    }
  }
}

TEST_CASE("bench stats: --flush names and the timers each flush allows", "[bench]") {
  for (Flush f : {Flush::kRead, Flush::kDirty, Flush::kNone})
    CHECK(parse_flush(flush_name(f)) == f);
  CHECK(std::string(flush_name(Flush::kDirty)) == "dirty");
  for (const char* bad : {"", "cold", "hot", "Read", "memset", "dirty "}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_flush(bad), std::invalid_argument);
  }
  BenchOptions o;
  CHECK(o.flush == Flush::kRead);  // the default stays the clean read flush
  CHECK(o.cold());
  o.flush = Flush::kNone;
  CHECK_FALSE(o.cold());
  // Per-call timers take any flush; back-to-back ones none, since a flush would sit in the batch.
  for (const char* t : {"cupti", "events"}) {
    for (Flush f : {Flush::kRead, Flush::kDirty, Flush::kNone})
      CHECK_NOTHROW(check_timer_flush(t, f));
  }
  for (const char* t : {"events-batched", "graph"}) {
    INFO(t);
    CHECK_NOTHROW(check_timer_flush(t, Flush::kNone));
    CHECK_THROWS_WITH(check_timer_flush(t, Flush::kRead), Catch::Contains("--flush none"));
    CHECK_THROWS_AS(check_timer_flush(t, Flush::kDirty), std::invalid_argument);
  }
  CHECK_THROWS_WITH(check_timer_flush("nvtx", Flush::kNone), Catch::Contains("unknown timer"));
  CHECK(known_timers().size() == 4);
}

namespace {

Suite suite_of(const std::string& text) {
  return parse_suite(text, "t.jsonl", "t");
}

}  // namespace

TEST_CASE("bench suite: rows, defaults, peers and the suite line", "[bench]") {
  const Suite s = suite_of(
      "{\"suite\": \"norm\", \"about\": \"norms\"}\n"
      "# a comment, then a blank line\n"
      "\n"
      "{\"defaults\": {\"runs\": [\"cupti/read\", \"cupti/dirty\"], \"backends\": \"kjit,copy\"}}\n"
      "{\"name\": \"a\", \"op\": \"rmsnorm\", \"set\": {\"dtype\": \"bf16\", \"rows\": 1, "
      "\"gemma\": true, \"p\": 0.5}}\n"
      "{\"name\": \"b\", \"op\": \"empty\", \"runs\": [\"graph/none\"], \"repeat\": 2, "
      "\"iters\": 7, \"warmup\": 0, \"headline\": true, \"backends\": \"kjit\"}\n"
      "{\"defaults\": {\"runs\": [\"events-batched/none\"]}}\n"
      "{\"name\": \"c\", \"op\": \"empty\"}\n"
      "{\"peer\": \"torch_peers.py\", \"args\": [\"--op\", \"rmsnorm\"], \"runs\": "
      "[\"events/dirty\", \"graph/none\"]}\n"
      "{\"peer\": \"torch_sampling.py\"}\n");
  CHECK(s.name == "norm");
  CHECK(s.about == "norms");
  REQUIRE(s.rows.size() == 3);
  const SuiteRow& a = s.rows[0];
  CHECK(a.name == "a");
  CHECK(a.op == "rmsnorm");
  CHECK(a.line == 5);
  CHECK(a.sets == std::map<std::string, std::string>{
                      {"dtype", "bf16"}, {"rows", "1"}, {"gemma", "1"}, {"p", "0.5"}});
  REQUIRE(a.runs.size() == 2);
  CHECK(a.runs[0].text() == "cupti/read");
  CHECK(a.runs[1].flush == Flush::kDirty);
  CHECK(a.backends == std::vector<std::string>{"kjit", "copy"});
  CHECK(a.repeat == 1);
  CHECK(a.iters == 0);
  CHECK(a.warmup == -1);
  CHECK_FALSE(a.headline);
  const SuiteRow& b = s.rows[1];
  REQUIRE(b.runs.size() == 1);
  CHECK(b.runs[0].timer == "graph");
  CHECK(b.runs[0].flush == Flush::kNone);
  CHECK(b.repeat == 2);
  CHECK(b.iters == 7);
  CHECK(b.warmup == 0);
  CHECK(b.headline);
  CHECK(b.backends == std::vector<std::string>{"kjit"});
  // A later defaults line changes what later rows start from, and only that key.
  REQUIRE(s.rows[2].runs.size() == 1);
  CHECK(s.rows[2].runs[0].text() == "events-batched/none");
  CHECK(s.rows[2].backends == std::vector<std::string>{"kjit", "copy"});
  REQUIRE(s.peers.size() == 2);
  CHECK(s.peers[0].script == "torch_peers.py");
  CHECK(s.peers[0].args == std::vector<std::string>{"--op", "rmsnorm"});
  REQUIRE(s.peers[0].runs.size() == 2);
  CHECK(s.peers[0].runs[0].text() == "events/dirty");
  CHECK(s.peers[0].runs[1].text() == "graph/none");
  REQUIRE(s.peers[1].runs.size() == 1);  // back to back, hot, unless the line says
  CHECK(s.peers[1].runs[0].text() == "events-batched/none");
  CHECK(s.peers[1].args.empty());
  // Without a suite line the name is the file's stem; without runs, one cupti/read run.
  const Suite bare = suite_of("{\"name\": \"x\", \"op\": \"empty\"}\n");
  CHECK(bare.name == "t");
  REQUIRE(bare.rows.size() == 1);
  REQUIRE(bare.rows[0].runs.size() == 1);
  CHECK(bare.rows[0].runs[0].text() == "cupti/read");
}

TEST_CASE("bench suite: a bad line is an error naming its line", "[bench]") {
  const std::string ok = "{\"name\": \"ok\", \"op\": \"empty\"}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"{op: empty}\n", "t.jsonl:1: not JSON"},
      {"[1, 2]\n", "t.jsonl:1: each line must be a JSON object"},
      {ok + "{\"op\": \"empty\"}\n", "t.jsonl:2: a row needs \"name\""},
      {ok + "{\"name\": \"ok\", \"op\": \"empty\"}\n", "t.jsonl:2: row name \"ok\" given twice"},
      {"{\"name\": \"x\"}\n", "a row needs \"op\""},
      {"{\"name\": \"x\", \"op\": \"empty\", \"timer\": \"graph\"}\n", "no key \"timer\""},
      {"{\"name\": \"x\", \"op\": \"empty\", \"runs\": [\"cupti\"]}\n", "not TIMER/FLUSH"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"runs\": [\"graph/read\"]}\n", "--flush none"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"runs\": [\"nvtx/none\"]}\n", "unknown timer"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"runs\": [\"cupti/cold\"]}\n", "unknown flush"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"runs\": []}\n", "non-empty array"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"backends\": \"kjit,torch\"}\n", "unknown backend"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"repeat\": 0}\n", "\"repeat\" must be"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"set\": {\"a\": [1]}}\n", "set.a must be"},
      {"{\"name\": \"x\", \"op\": \"empty\", \"headline\": 1}\n", "\"headline\" must be"},
      {ok + "{\"suite\": \"late\"}\n", "t.jsonl:2: the \"suite\" line must come first"},
      {"{\"defaults\": {\"name\": \"x\"}}\n" + ok, "defaults has no key \"name\""},
      {ok + "{\"peer\": \"../x.py\"}\n", "bench/peers/"},
      {ok + "{\"peer\": \"torch_peers.py\", \"args\": [\"--runs\", \"graph/none\"]}\n",
       "must not set --runs or --json"},
      {ok + "{\"peer\": \"torch_peers.py\", \"runs\": [\"events/warm\"]}\n", "unknown flush"},
      {ok + "{\"peer\": \"torch_peers.py\", \"runs\": [\"cupti/read\"]}\n", "not cupti"},
      {ok + "{\"peer\": \"torch_peers.py\", \"flush\": [\"read\"]}\n", "no key \"flush\""},
      {"# only a comment\n", "t.jsonl: no rows"},
  };
  for (const auto& [text, want] : cases) {
    INFO(text);
    CHECK_THROWS_WITH(suite_of(text), Catch::Contains(want));
  }
}

TEST_CASE("bench suite: --suite finds NAME.jsonl in its folders, or a file", "[bench]") {
  kjit::test::TempDir dir;
  namespace fs = std::filesystem;
  const fs::path a = dir.path() / "a", b = dir.path() / "b";
  fs::create_directories(a);
  fs::create_directories(b);
  std::ofstream(b / "norm.jsonl") << "\n";
  std::ofstream(a / "smoke.jsonl") << "\n";
  const std::vector<std::string> dirs = {(dir.path() / "missing").string(), a.string(), b.string()};
  CHECK(find_suite("norm", dirs) == (b / "norm.jsonl").string());
  CHECK(find_suite("smoke", dirs) == (a / "smoke.jsonl").string());
  CHECK(find_suite((b / "norm.jsonl").string(), {}) == (b / "norm.jsonl").string());
  CHECK_THROWS_WITH(find_suite("rope", dirs), Catch::Contains("suites: norm, smoke"));
  CHECK_THROWS_WITH(find_suite("x/rope.jsonl", dirs), Catch::Contains("no such file"));
}

// check_rows: each worker's Check merged, every row visited once, whatever the worker count.
TEST_CASE("bench: check_rows merges every row's check across the workers", "[bench]") {
  const int64_t rows = 1003;
  std::vector<int> seen(static_cast<size_t>(rows), 0);
  const kjit::cli::Check all = kjit::cli::check_rows(rows, [&](int64_t r, kjit::cli::Check& chk) {
    ++seen[static_cast<size_t>(r)];
    // Row r: one exact element, and one off by r / 1000 against a tolerance of 0.5 (rows 501 ..
    // 1002 fail), row 7 a NaN.
    chk.add(1.0, 1.0, 0.0);
    chk.add(r == 7 ? NAN : 2.0 + static_cast<double>(r) / 1000.0, 2.0, 0.5);
  });
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  CHECK(all.bad == (rows - 501) + 1);
  CHECK(std::isinf(all.max_abs));
  CHECK_FALSE(all.pass());
  const kjit::cli::Check none =
      kjit::cli::check_rows(0, [](int64_t, kjit::cli::Check& chk) { chk.add(0.0, 1.0, 0.0); });
  CHECK(none.pass());
  CHECK(none.max_abs == 0.0);
}
