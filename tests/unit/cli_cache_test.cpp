// kjit-cli cache verify / prune / clear --filter / inspect, on real entries in a temp cache.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string out;
};

// Runs kjit-cli with KJIT_CACHE_DIR=cache (and `env`, "NAME=value ..."); returns its exit code
// and stdout.
Run cli(const fs::path& cache, const std::string& args, const std::string& env = "") {
  std::string cmd = "KJIT_CACHE_DIR='" + cache.string() + "' " + env + " '" KJIT_CLI_PATH "' " +
                    args + " 2>/dev/null";
  Run r;
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  REQUIRE(sh.code != -1);
  r.code = sh.code;
  r.out = sh.out;
  return r;
}

fs::path entry_json(const fs::path& cache, const std::string& uri_part) {
  for (auto& e : fs::recursive_directory_iterator(cache / "v1")) {
    auto name = e.path().filename().string();
    if (e.path().extension() == ".json" && name.find(uri_part) != std::string::npos) {
      return e.path();
    }
  }
  FAIL("no entry for " << uri_part);
  return {};
}

void compile(const fs::path& cache, int hidden) {
  REQUIRE(cli(cache, "compile rmsnorm --set dtype=bf16 --set hidden=" + std::to_string(hidden) +
                         " --arch sm_90")
              .code == 0);
}

}  // namespace

TEST_CASE("cli cache: inspect and verify on an empty cache", "[cli]") {
  kjit::test::TempDir dir;
  auto r = cli(dir.path(), "cache inspect --json");
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("total") == 0);
  CHECK(cli(dir.path(), "cache verify").code == 0);
}

TEST_CASE("cli cache: verify finds a truncated cubin and a tampered sidecar, --fix removes them",
          "[cli]") {
  kjit::test::TempDir dir;
  for (int h : {100, 200, 300}) compile(dir.path(), h);
  fs::path truncated = entry_json(dir.path(), "hidden_100_");
  fs::path cubin = truncated;
  cubin.replace_extension(".cubin");
  fs::resize_file(cubin, 64);
  fs::path tampered = entry_json(dir.path(), "hidden_200_");
  auto j = nlohmann::json::parse(*kjit::util::read_file(tampered));
  j["params"][0][1] = "fp16";  // recorded inputs no longer hash to the key
  kjit::util::write_file_atomic(tampered, j.dump());

  auto r = cli(dir.path(), "cache verify --json");
  CHECK(r.code == 1);
  auto v = nlohmann::json::parse(r.out);
  CHECK(v.at("checked") == 3);
  REQUIRE(v.at("invalid").size() == 2);
  CHECK(v.at("remaining_invalid") == 2);
  CHECK(fs::exists(truncated));  // without --fix nothing is removed

  r = cli(dir.path(), "cache verify --fix --json");
  CHECK(r.code == 0);
  CHECK(nlohmann::json::parse(r.out).at("removed") == 2);
  CHECK_FALSE(fs::exists(truncated));
  CHECK_FALSE(fs::exists(cubin));
  CHECK_FALSE(fs::exists(tampered));
  CHECK(cli(dir.path(), "cache verify").code == 0);
  CHECK(nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out).at("valid") == 1);
}

namespace {

// A pid that no process has: a child that already exited and was reaped.
long gone_pid() {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return static_cast<long>(pid);
}

// A temp file as util::write_file_atomic names them, `age` old.
fs::path temp_file(const fs::path& dir, const std::string& target, long pid, int n,
                   std::chrono::seconds age) {
  fs::create_directories(dir);
  fs::path p = dir / (target + ".tmp." + std::to_string(pid) + "." + std::to_string(n));
  kjit::util::write_file_atomic(p, std::string(100, 'x'));
  fs::last_write_time(p, fs::file_time_type::clock::now() - age);
  return p;
}

}  // namespace

TEST_CASE("cli cache: verify reports temp files of killed writers, --fix and prune remove them",
          "[cli]") {
  kjit::test::TempDir dir;
  compile(dir.path(), 100);
  const fs::path arch_dir = entry_json(dir.path(), "hidden_100_").parent_path();
  const long dead = gone_pid();
  const auto hour = std::chrono::hours(1);
  // Stale: an hour old and the writer gone; in the entries and in the generated sources.
  const fs::path stale_cubin = temp_file(arch_dir, "a-0123.cubin", dead, 0, hour);
  const fs::path stale_gen = temp_file(dir.path() / "generated", "b.cuh", dead, 1, hour);
  // Kept: a fresh one (a writer may be between write and rename), an old one whose writer still
  // runs (this process), and names that only look like temp files.
  const fs::path fresh = temp_file(arch_dir, "c-0123.json", dead, 2, std::chrono::seconds(30));
  const fs::path alive = temp_file(arch_dir, "d-0123.cubin", static_cast<long>(getpid()), 3, hour);
  const fs::path nine_min = temp_file(arch_dir, "e-0123.cubin", dead, 4, std::chrono::minutes(9));
  const fs::path not_temp = arch_dir / "f.tmp.12x.0";
  kjit::util::write_file_atomic(not_temp, "x");
  fs::last_write_time(not_temp, fs::file_time_type::clock::now() - hour);

  auto r = cli(dir.path(), "cache verify --json");
  CHECK(r.code == 0);  // temp files are never read: the entries are still all valid
  auto v = nlohmann::json::parse(r.out);
  CHECK(v.at("checked") == 1);
  CHECK(v.at("remaining_invalid") == 0);
  const auto& temps = v.at("stale_temp_files");
  REQUIRE(temps.size() == 2);
  CHECK(temps[0].at("path") == stale_gen.string());  // sorted by path
  CHECK(temps[1].at("path") == stale_cubin.string());
  CHECK(temps[0].at("pid") == dead);
  CHECK(temps[0].at("bytes") == 100);
  CHECK(temps[0].at("age_s").get<int64_t>() >= 3500);
  CHECK(temps[0].at("removed") == false);
  CHECK(v.at("temp_files_removed") == 0);
  CHECK(fs::exists(stale_cubin));  // without --fix nothing is removed

  r = cli(dir.path(), "cache verify");
  CHECK(r.code == 0);
  CHECK(r.out.find("STALE    " + stale_cubin.string()) != std::string::npos);
  CHECK(r.out.find("2 stale temp files of killed writers, 0 removed") != std::string::npos);

  SECTION("verify --fix") {
    r = cli(dir.path(), "cache verify --fix --json");
    CHECK(r.code == 0);
    v = nlohmann::json::parse(r.out);
    CHECK(v.at("temp_files_removed") == 2);
    CHECK(v.at("stale_temp_files")[0].at("removed") == true);
  }
  SECTION("prune") {
    r = cli(dir.path(), "cache prune --max-size 1G");
    CHECK(r.code == 0);
    CHECK(r.out.find("removed 2 stale temp files of killed writers (200 bytes)") !=
          std::string::npos);
    CHECK(nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out).at("valid") == 1);
  }
  CHECK_FALSE(fs::exists(stale_cubin));
  CHECK_FALSE(fs::exists(stale_gen));
  for (const fs::path& kept : {fresh, alive, nine_min, not_temp}) {
    INFO(kept);
    CHECK(fs::exists(kept));
  }
  v = nlohmann::json::parse(cli(dir.path(), "cache verify --json").out);
  CHECK(v.at("stale_temp_files").empty());
  r = cli(dir.path(), "cache verify");
  CHECK(r.out.find("stale temp files") == std::string::npos);
}

TEST_CASE("cli cache: prune removes the least recently used first", "[cli]") {
  kjit::test::TempDir dir;
  for (int h : {100, 200, 300}) {
    compile(dir.path(), h);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // mtimes have 1 s resolution
  }
  // Using the oldest entry makes it the most recently used.
  auto again = cli(dir.path(), "compile rmsnorm --set dtype=bf16 --set hidden=100 --arch sm_90");
  REQUIRE(again.code == 0);
  auto inspect = nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out);
  uint64_t one = inspect.at("bytes").get<uint64_t>() / 3;
  // Room for about two and a half entries (inspect's bytes and prune's limit both count cubins and
  // sidecars): the least recently used (hidden 200) must go.
  REQUIRE(cli(dir.path(), "cache prune --max-size " + std::to_string(one * 2 + one / 2)).code == 0);
  auto after = nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out);
  std::string uris;
  for (auto& e : after.at("entries")) uris += e.at("uri").get<std::string>() + " ";
  INFO(uris);
  CHECK(after.at("total") == 2);
  CHECK(uris.find("hidden_200_") == std::string::npos);
  CHECK(uris.find("hidden_100_") != std::string::npos);
  CHECK(uris.find("hidden_300_") != std::string::npos);
}

TEST_CASE("cli cache: KJIT_CACHE_MAX_SIZE bounds the cache as entries are published", "[cli]") {
  kjit::test::TempDir dir;
  compile(dir.path(), 100);
  auto first = nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out);
  const uint64_t one = first.at("bytes").get<uint64_t>();
  REQUIRE(one > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // mtimes have 1 s resolution
  // Room for two entries: publishing the third evicts the least recently used (hidden 100).
  const std::string bound = "KJIT_CACHE_MAX_SIZE=" + std::to_string(one * 2 + one / 2);
  for (int h : {200, 300}) {
    const std::string args =
        "compile rmsnorm --set dtype=bf16 --set hidden=" + std::to_string(h) + " --arch sm_90";
    REQUIRE(cli(dir.path(), args, bound).code == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  auto after = nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out);
  std::string uris;
  for (auto& e : after.at("entries")) uris += e.at("uri").get<std::string>() + " ";
  INFO(uris);
  CHECK(after.at("total") == 2);
  CHECK(after.at("bytes").get<uint64_t>() <= one * 2 + one / 2);
  CHECK(uris.find("hidden_100_") == std::string::npos);
}

TEST_CASE("cli cache: clear --filter removes only matching entries", "[cli]") {
  kjit::test::TempDir dir;
  for (int h : {100, 200}) compile(dir.path(), h);
  REQUIRE(cli(dir.path(), "cache clear --filter '*hidden_200_*'").code == 0);
  auto after = nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out);
  REQUIRE(after.at("total") == 1);
  CHECK(after.at("entries")[0].at("uri").get<std::string>().find("hidden_100_") !=
        std::string::npos);
  auto filtered = nlohmann::json::parse(cli(dir.path(), "cache inspect --filter 'x*' --json").out);
  CHECK(filtered.at("total") == 0);
}

TEST_CASE("cli: bad arguments are usage errors with exit code 2", "[cli]") {
  kjit::test::TempDir dir;
  for (const char* args : {"cache prune --max-size 12x", "cache prune", "cache bogus",
                           "compile rmsnorm --set dtype", "compile nosuchop --set a=b",
                           "compile rmsnorm --set dtype=bf16 --set hidden=12 --arch sm_9x",
                           "compile rmsnorm --set dtype=bf16 --set hidden=12 --arch sm_999",
                           "compile rmsnorm --set dtype=bf16 --set hidden=99999999 --arch sm_90",
                           "bench rmsnorm --set dtype=bf16", "--no-such-flag", "nosuchcmd"}) {
    INFO(args);
    CHECK(cli(dir.path(), args).code == 2);
  }
}

TEST_CASE("cli: an unknown command is named", "[cli]") {
  kjit::test::TempDir dir;
  const std::string out = kjit::test::run_shell("'" KJIT_CLI_PATH "' nosuchcmd 2>&1").out;
  CHECK(out.find("unknown command 'nosuchcmd'") != std::string::npos);
  CHECK(out.find("compile") != std::string::npos);  // lists the commands
}

TEST_CASE("cli: compile into a cache it cannot write warns and exits 1 saying so", "[cli]") {
  kjit::test::TempDir dir;
  // A file where the cache's folder would be: nothing can be made under it, also as root.
  kjit::util::write_file_atomic(dir.path() / "file", "x");
  const std::string cmd = "KJIT_CACHE_DIR='" + (dir.path() / "file" / "cache").string() +
                          "' '" KJIT_CLI_PATH
                          "' compile rmsnorm --set dtype=bf16 --set hidden=128 --arch sm_90 2>&1";
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  INFO(sh.out);
  CHECK(sh.code == 1);
  CHECK(sh.out.find("warning: cannot create directory") != std::string::npos);
  CHECK(sh.out.find("1 compiled specializations were not saved") != std::string::npos);
  CHECK(sh.out.find("(not on disk)") != std::string::npos);
}

TEST_CASE("cli: a cache hit's row shows the hit's time and the original compile's apart", "[cli]") {
  kjit::test::TempDir dir;
  compile(dir.path(), 128);
  const Run hit = cli(dir.path(),
                      "compile rmsnorm --set dtype=bf16 --set hidden=128 --arch sm_90 "
                      "--json");
  REQUIRE(hit.code == 0);
  const auto row = nlohmann::json::parse(hit.out).at("results").at(0);
  CHECK(row.at("source") == "disk");
  // A load takes milliseconds at most, the compile it saved hundreds.
  CHECK(row.at("ms").get<double>() < row.at("compile_ms").get<double>());
}

TEST_CASE("cli: compile -j workers leave nothing in the temp dir", "[cli]") {
  // The workers end with _exit, so no exit handler of NVRTC's runs in them: with automatic PCH
  // (KJIT_JIT_PCH=1, off by default) each leaves ~10 MB per compiled spec in
  // $TMPDIR/__nvrtc_auto_pch_<pid>_<n>. The opt-in run shows the check can see such leftovers.
  for (const char* pch : {"", "1"}) {
    kjit::test::TempDir cache, tmp;
    const std::string env = std::string("TMPDIR='") + tmp.path().string() + "'" +
                            (*pch ? std::string(" KJIT_JIT_PCH=") + pch : std::string());
    INFO("KJIT_JIT_PCH=" << pch);
    REQUIRE(
        cli(cache.path(), "compile --all --ops rmsnorm_quant_fp8 --arch sm_90 -j 2", env).code ==
        0);
    int left = 0;
    for (const auto& e : fs::directory_iterator(tmp.path())) {
      INFO(e.path().string());
      ++left;
    }
    if (*pch) {
      CHECK(left > 0);
    } else {
      CHECK(left == 0);
    }
  }
}
