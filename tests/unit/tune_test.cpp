// The autotuner's parts that need no GPU (src/tune/): the store's key and atomic records, stale and
// invalid records, blocklist and forced-tactic rules, the choice order (forced, blocklist, stored,
// tuned, default) with a fake timer, the margin a non-default tactic must win by, and two
// processes tuning one key at once.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "tune/autotuner.hpp"
#include "tune/tactic_rules.hpp"
#include "tune/tune_store.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
using namespace kjit::tune;

namespace {

Fingerprint h200() {
  return {"NVIDIA H200", 132, 13000, "13.0", "0.3.0"};
}

TuneKey gemm_key(const std::string& bucket = "dtype=bf16,m=16,n=4096,k=14336") {
  return {"gemm", 1, bucket, "eager-cold"};
}

// A timer that says tactic t takes times[t] us (with a little spread) and counts its calls.
struct FakeTimer {
  std::map<std::string, double> times;
  std::map<std::string, int> calls;
  Measure fn() {
    return [this](const std::string& t) {
      ++calls[t];
      auto it = times.find(t);
      if (it == times.end()) return std::vector<double>{};  // cannot run
      std::vector<double> s;
      for (int i = 0; i < 21; ++i) s.push_back(it->second * (1.0 + 0.001 * (i % 5)));
      return s;
    };
  }
};

Autotuner make_tuner(const test::TempDir& dir, TuneMode mode, std::string block = "",
                     std::string force = "") {
  TuneSettings s;
  s.mode = mode;
  s.rules = TacticRules(block, force);
  return Autotuner(s, std::make_unique<TuneStore>(dir.path() / "tuning"));
}

const std::vector<std::string> kTactics{"bn128_s6", "bn256_s4", "split4"};

}  // namespace

TEST_CASE("tune: a record round-trips, under a path its key and fingerprint name", "[tune]") {
  test::TempDir dir;
  TuneStore store(dir.path() / "tuning");
  TuneRecord rec{"split4",
                 "bn128_s6",
                 {{"bn128_s6", 40.0, 39.5, 41.0, 21}, {"split4", 30.0, 29.8, 30.3, 20}},
                 "2026-12-04T00:00:00Z"};
  store.put(h200(), gemm_key(), rec);
  const auto got = store.find(h200(), gemm_key());
  REQUIRE(got);
  CHECK(got->tactic == "split4");
  CHECK(got->default_tactic == "bn128_s6");
  REQUIRE(got->tried.size() == 2);
  CHECK(got->tried[1].median_us == 30.0);
  CHECK(got->tried[1].p90_us == 30.3);
  // Every field of the key and of the fingerprint moves the record elsewhere.
  Fingerprint other = h200();
  other.driver = 12080;
  CHECK_FALSE(store.find(other, gemm_key()));
  CHECK(store.path_of(other, gemm_key()) != store.path_of(h200(), gemm_key()));
  for (TuneKey k : {gemm_key("dtype=bf16,m=32,n=4096,k=14336"), gemm_key()}) {
    if (k.bucket == gemm_key().bucket) k.space_version = 2;
    CHECK_FALSE(store.find(h200(), k));
  }
  TuneKey graph = gemm_key();
  graph.timing = "graph-hot";
  CHECK_FALSE(store.find(h200(), graph));
  // Atomic write: no temp file is left beside the record.
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    files += e.is_regular_file();
  }
  CHECK(files == 1);
}

TEST_CASE("tune: malformed, edited and foreign records are misses, not choices", "[tune]") {
  test::TempDir dir;
  TuneStore store(dir.path() / "tuning");
  const auto path = store.path_of(h200(), gemm_key());
  store.put(h200(), gemm_key(), {"split4", "bn128_s6", {}, "t"});
  SECTION("truncated") {
    const std::string text = *util::read_file(path);
    util::write_file_atomic(path, text.substr(0, text.size() / 2));
  }
  SECTION("a record of another fingerprint copied over it") {
    Fingerprint other = h200();
    other.kjit = "0.2.0";
    util::write_file_atomic(path, record_json(other, gemm_key(), {"split4", "bn128_s6", {}, "t"}));
  }
  SECTION("no tactic") {
    util::write_file_atomic(path, record_json(h200(), gemm_key(), {"", "bn128_s6", {}, "t"}));
  }
  CHECK_FALSE(store.find(h200(), gemm_key()));
  const auto rows = store.list();
  REQUIRE(rows.size() == 1);
  CHECK_FALSE(rows[0].valid);
  CHECK_FALSE(rows[0].why.empty());
  // And the tuner then runs the default instead of anything the file says.
  Autotuner t = make_tuner(dir, TuneMode::kStored);
  CHECK(t.choose(h200(), gemm_key(), kTactics, "bn128_s6", nullptr).tactic == "bn128_s6");
}

TEST_CASE("tune: blocklist and force rules parse and match with wildcards", "[tune]") {
  TacticRules r("gemm:*split*, decode_attention:w8*", "gemm:bn256_s4");
  CHECK(r.blocked("gemm", "split4"));
  CHECK_FALSE(r.blocked("gemm", "bn128_s6"));
  CHECK(r.blocked("decode_attention", "w8_ts64"));
  CHECK_FALSE(r.blocked("decode_attention", "w4_ts64"));
  CHECK(r.forced("gemm") == std::vector<std::string>{"bn256_s4"});
  CHECK(r.forced("rmsnorm").empty());
  CHECK(r.describe() == "blocklist gemm:*split*,decode_attention:w8*; force gemm:bn256_s4");
  CHECK(TacticRules("*:*slow*", "").blocked("anything", "very_slow_one"));
  for (const char* bad : {"gemm", ":split4", "gemm:", "gemm:a,b"}) {
    INFO(bad);
    CHECK_THROWS_AS(TacticRules(bad, ""), Error);
  }
  test::ScopedEnv mode("KJIT_AUTOTUNE", "3");
  CHECK_THROWS_AS(TuneSettings::from_env(), Error);
}

TEST_CASE("tune: the default is always a candidate and wins unless beaten by the margin",
          "[tune]") {
  test::TempDir dir;
  FakeTimer timer;
  const Measure m = timer.fn();
  CHECK_THROWS_AS(
      make_tuner(dir, TuneMode::kUnseen).choose(h200(), gemm_key(), {"a", "b"}, "not_offered", &m),
      Error);
  SECTION("1% faster is noise: the default stays") {
    timer.times = {{"bn128_s6", 40.0}, {"bn256_s4", 39.6}, {"split4", 45.0}};
    Autotuner t = make_tuner(dir, TuneMode::kUnseen);
    const Choice c = t.choose(h200(), gemm_key(), kTactics, "bn128_s6", &m);
    CHECK(c.tactic == "bn128_s6");
    CHECK(c.source == Choice::Source::kTuned);
  }
  SECTION("a clear win is taken and stored") {
    timer.times = {{"bn128_s6", 40.0}, {"bn256_s4", 39.0}, {"split4", 30.0}};
    Autotuner t = make_tuner(dir, TuneMode::kUnseen);
    CHECK(t.choose(h200(), gemm_key(), kTactics, "bn128_s6", &m).tactic == "split4");
    // Remembered in the process: no second measurement.
    CHECK(t.choose(h200(), gemm_key(), kTactics, "bn128_s6", &m).tactic == "split4");
    CHECK(timer.calls["split4"] == 1);
    // Another process (a fresh tuner) reads it without measuring, even with tuning off-by-default.
    Autotuner later = make_tuner(dir, TuneMode::kStored);
    const Choice c = later.choose(h200(), gemm_key(), kTactics, "bn128_s6", nullptr);
    CHECK(c.tactic == "split4");
    CHECK(c.source == Choice::Source::kStored);
    // KJIT_AUTOTUNE=0 ignores the store.
    CHECK(make_tuner(dir, TuneMode::kOff)
              .choose(h200(), gemm_key(), kTactics, "bn128_s6", &m)
              .tactic == "bn128_s6");
    // A stored tactic that is not valid for this call is not used.
    CHECK(later.choose(h200(), gemm_key(), {"bn128_s6", "bn256_s4"}, "bn128_s6", nullptr).tactic ==
          "bn128_s6");
  }
  SECTION("a tactic that cannot run is no candidate; a default that cannot run stores nothing") {
    timer.times = {{"bn128_s6", 40.0}, {"bn256_s4", 20.0}};
    Autotuner t = make_tuner(dir, TuneMode::kUnseen);
    CHECK(t.choose(h200(), gemm_key(), kTactics, "bn128_s6", &m).tactic == "bn256_s4");
    timer.times = {{"bn256_s4", 20.0}};
    Autotuner u = make_tuner(dir, TuneMode::kRetune);
    const Choice c = u.choose(h200(), gemm_key("b2"), kTactics, "bn128_s6", &m);
    CHECK(c.tactic == "bn128_s6");
    CHECK(c.source == Choice::Source::kDefault);
    CHECK_FALSE(TuneStore(dir.path() / "tuning").find(h200(), gemm_key("b2")));
  }
}

TEST_CASE("tune: forced tactics, blocked tactics and calls that cannot measure", "[tune]") {
  test::TempDir dir;
  FakeTimer timer;
  timer.times = {{"bn128_s6", 40.0}, {"bn256_s4", 39.0}, {"split4", 30.0}};
  const Measure m = timer.fn();
  // Forced wins over a stored result and over the blocklist; a force that names no valid tactic
  // is passed over.
  Autotuner forced = make_tuner(dir, TuneMode::kUnseen, "gemm:bn256*", "gemm:nosuch,gemm:bn256*");
  Choice c = forced.choose(h200(), gemm_key(), kTactics, "bn128_s6", &m);
  CHECK(c.tactic == "bn256_s4");
  CHECK(c.source == Choice::Source::kForced);
  CHECK(timer.calls.empty());
  // Blocked tactics are never timed nor chosen; a blocked default falls back to an allowed one.
  Autotuner blocked = make_tuner(dir, TuneMode::kUnseen, "gemm:split*,gemm:bn128*");
  c = blocked.choose(h200(), gemm_key(), kTactics, "bn128_s6", &m);
  CHECK(c.tactic == "bn256_s4");
  CHECK(timer.calls.count("split4") == 0);
  CHECK(timer.calls.count("bn128_s6") == 0);
  // Everything blocked: the default runs (said in the note).
  Autotuner all = make_tuner(dir, TuneMode::kUnseen, "gemm:*");
  c = all.choose(h200(), gemm_key("x"), kTactics, "bn128_s6", &m);
  CHECK(c.tactic == "bn128_s6");
  CHECK(c.note.find("blocked") != std::string::npos);
  // A call that cannot measure (capturing) gets the default and is not remembered, so a later
  // call that can measure tunes.
  Autotuner t = make_tuner(dir, TuneMode::kUnseen);
  CHECK(t.choose(h200(), gemm_key("y"), kTactics, "bn128_s6", nullptr).tactic == "bn128_s6");
  CHECK(t.choose(h200(), gemm_key("y"), kTactics, "bn128_s6", &m).tactic == "split4");
  // KJIT_AUTOTUNE=2 measures again even with a stored result.
  timer.times["bn256_s4"] = 10.0;
  Autotuner re = make_tuner(dir, TuneMode::kRetune);
  CHECK(re.choose(h200(), gemm_key("y"), kTactics, "bn128_s6", &m).tactic == "bn256_s4");
  CHECK(TuneStore(dir.path() / "tuning").find(h200(), gemm_key("y"))->tactic == "bn256_s4");
}

TEST_CASE("tune: summaries drop outliers above the median", "[tune]") {
  std::vector<double> s(20, 10.0);
  s.push_back(500.0);  // a preempted sample
  const Measured m = summarize("t", s);
  CHECK(m.median_us == 10.0);
  CHECK(m.p90_us == 10.0);
  CHECK(m.samples == 20);
}

TEST_CASE("tune: two processes tuning one key converge on one record", "[tune][process]") {
  test::TempDir dir;
  // Each child's timer prefers a different tactic; without the lock and the re-read both would
  // store their own. The first to take the lock tunes, the other must adopt its answer.
  pid_t kids[2];
  for (int i = 0; i < 2; ++i) {
    kids[i] = fork();
    REQUIRE(kids[i] >= 0);
    if (kids[i] == 0) {
      FakeTimer timer;
      timer.times = {{"bn128_s6", 40.0}, {i == 0 ? "bn256_s4" : "split4", 20.0}};
      Measure slow = [&](const std::string& t) {
        usleep(20000);  // hold the lock long enough for the other child to wait on it
        return timer.fn()(t);
      };
      Autotuner t = make_tuner(dir, TuneMode::kUnseen);
      const Choice c = t.choose(h200(), gemm_key(), kTactics, "bn128_s6", &slow);
      util::write_file_atomic(dir.path() / ("child" + std::to_string(i)), c.tactic);
      _exit(0);
    }
  }
  for (pid_t k : kids) {
    int status = 0;
    REQUIRE(waitpid(k, &status, 0) == k);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const auto a = util::read_file(dir.path() / "child0");
  const auto b = util::read_file(dir.path() / "child1");
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a == *b);
  const auto rec = TuneStore(dir.path() / "tuning").find(h200(), gemm_key());
  REQUIRE(rec);
  CHECK(rec->tactic == *a);
  const auto rows = TuneStore(dir.path() / "tuning").list();
  CHECK(rows.size() == 1);
}

TEST_CASE("tune: kjit-cli tune show lists records and their margins, clear removes them",
          "[tune][cli]") {
  test::TempDir dir;
  const std::filesystem::path cache = dir.path() / "cache";
  TuneStore store(cache / "tuning");
  store.put(h200(), gemm_key(),
            {"split4",
             "bn128_s6",
             {{"bn128_s6", 40.0, 39.5, 41.0, 21}, {"split4", 30.0, 29.8, 30.3, 20}},
             "2026-12-04T00:00:00Z"});
  TuneKey norm{"rmsnorm", 1, "hidden=4096", "graph-hot"};
  store.put(h200(), norm, {"a", "a", {{"a", 1.0, 1.0, 1.0, 3}}, "t"});
  util::make_dirs(cache / "tuning" / "v1" / "junk" / "gemm");
  util::write_file_atomic(cache / "tuning" / "v1" / "junk" / "gemm" / "x.json", "{");
  auto run = [&](const std::string& args) {
    const std::string cmd =
        "KJIT_CACHE_DIR='" + cache.string() + "' '" KJIT_CLI_PATH "' " + args + " 2>/dev/null";
    const test::ShellRun r = test::run_shell(cmd);
    CHECK(r.code == 0);
    return r.out;
  };
  const std::string text = run("tune show --op gemm");
  INFO(text);
  CHECK(text.find("split4") != std::string::npos);
  CHECK(text.find("default 40.00 us (-25.0%)") != std::string::npos);
  CHECK(text.find("invalid") != std::string::npos);
  CHECK(text.find("rmsnorm") == std::string::npos);
  CHECK(run("tune show --json").find("\"tactic_us\": 30.0") != std::string::npos);
  CHECK(run("tune clear --op gemm") == "removed 2 tuning records\n");
  CHECK_FALSE(store.find(h200(), gemm_key()));
  CHECK(store.find(h200(), norm));
}

TEST_CASE("tune: kjit-cli tune --from refuses what it cannot read before looking for a GPU",
          "[tune][cli]") {
  test::TempDir dir;
  const std::filesystem::path work = dir.path() / "w.jsonl";
  util::write_file_atomic(work,
                          "{\"suite\": \"x\"}\n"
                          "{\"name\": \"g\", \"op\": \"gemm\", \"set\": {\"dtype\": \"bf16\", "
                          "\"m\": 1, \"n\": 64, \"k\": 64}}\n");
  auto code = [&](const std::string& args) {
    const test::ShellRun r = test::run_shell("KJIT_CACHE_DIR='" + (dir.path() / "c").string() +
                                             "' '" KJIT_CLI_PATH "' " + args + " 2>&1");
    INFO(args << ": " << r.out);
    return r.code;
  };
  CHECK(code("tune") == 2);  // neither --from nor a subcommand
  CHECK(code("tune --from '" + (dir.path() / "none.jsonl").string() + "'") == 2);
  CHECK(code("tune --from '" + work.string() + "' --timing graph") == 2);
  // A readable file gets as far as the device: none here (3), or the tuned lines (0).
  const int c = code("tune --from '" + work.string() + "' --timing graph-hot");
  CHECK((c == 0 || c == 3));
}
