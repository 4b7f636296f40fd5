// kjit-cli cache verify / prune / clear --filter / inspect, on real entries in a temp cache.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <thread>

#include "support/temp_dir.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string out;
};

// Runs kjit-cli with KJIT_CACHE_DIR=cache; returns its exit code and stdout.
Run cli(const fs::path& cache, const std::string& args) {
  std::string cmd =
      "KJIT_CACHE_DIR='" + cache.string() + "' '" KJIT_CLI_PATH "' " + args + " 2>/dev/null";
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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

TEST_CASE("cli cache: verify finds a truncated cubin and a tampered sidecar; --fix removes them",
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
  // Room for about two entries: the least recently used (hidden 200) must go.
  REQUIRE(cli(dir.path(), "cache prune --max-size " + std::to_string(one * 2 + one)).code == 0);
  auto after = nlohmann::json::parse(cli(dir.path(), "cache inspect --json").out);
  std::string uris;
  for (auto& e : after.at("entries")) uris += e.at("uri").get<std::string>() + " ";
  INFO(uris);
  CHECK(after.at("total") == 2);
  CHECK(uris.find("hidden_200_") == std::string::npos);
  CHECK(uris.find("hidden_100_") != std::string::npos);
  CHECK(uris.find("hidden_300_") != std::string::npos);
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
                           "bench rmsnorm --set dtype=bf16", "--no-such-flag"}) {
    INFO(args);
    CHECK(cli(dir.path(), args).code == 2);
  }
}
