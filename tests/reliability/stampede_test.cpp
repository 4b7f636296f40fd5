// Many processes first-use kernels on one empty cache at the same moment, as a fleet of servers
// starting together would: every specialization compiles exactly once, every process gets the
// same valid cubin, and the cache ends up with exactly one valid entry per specialization.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "jit/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "runtime/jit_core.hpp"
#include "reliability/support.hpp"
#include "support/temp_dir.hpp"

using namespace kjit;
namespace fs = std::filesystem;
using kjit::rel::Child;
using kjit::test::TempDir;

namespace {

// Starts `n` workers blocked on one pipe, then releases them together by closing its write end.
std::vector<rel::WorkerResult> stampede(int n, const fs::path& cache,
                                        const std::vector<std::vector<std::string>>& args_of) {
  int go[2];
  REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
  std::vector<std::unique_ptr<Child>> kids;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> argv = {rel::worker_path(), "build", "--wait-stdin"};
    const auto& extra = args_of[static_cast<size_t>(i) % args_of.size()];
    argv.insert(argv.end(), extra.begin(), extra.end());
    kids.push_back(std::make_unique<Child>(
        argv, std::vector<std::string>{"KJIT_CACHE_DIR=" + cache.string()}, go[0]));
  }
  ::close(go[0]);
  ::close(go[1]);  // EOF on every worker's stdin at once
  std::vector<rel::WorkerResult> results;
  for (auto& k : kids) {
    CHECK(k->wait(240));
    results.push_back(
        rel::parse_worker_output(k->exit_code(), k->term_signal(), k->out(), k->err()));
  }
  return results;
}

void expect_clean_cache(const fs::path& cache, size_t entries) {
  auto rows = jit::DiskCache(cache).list(jit::kjit_version(), jit::nvrtc_version());
  CHECK(rows.size() == entries);
  for (const auto& r : rows) {
    INFO(r.json_path.string());
    CHECK(r.problem.empty());
  }
  CHECK(rel::files_containing(cache, ".tmp.").empty());
}

}  // namespace

TEST_CASE("stampede: 16 processes first-use one real specialization, one compiles",
          "[reliability][stampede]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  const std::string spec = "op:rmsnorm:dtype=bf16,hidden=4096";
  auto results = stampede(16, cache, {{"--spec", spec}});
  REQUIRE(results.size() == 16);
  long compiles = 0, hits = 0, invalid = 0;
  std::set<std::string> hashes;
  for (const auto& r : results) {
    INFO("worker: " << r.out << r.err);
    CHECK(r.ok);
    compiles += r.compiles;
    hits += r.disk_hits;
    invalid += r.invalid_entries;
    hashes.insert(r.cubin_hash);
  }
  CHECK(compiles == 1);
  CHECK(hits == 15);
  CHECK(invalid == 0);
  CHECK(hashes.size() == 1);  // every process holds the same bytes
  expect_clean_cache(cache, 1);
}

TEST_CASE("stampede: 16 processes each first-use the same 8 specializations, 8 compiles",
          "[reliability][stampede]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  // Each process walks the 8 specs from a different starting point, so the processes collide on
  // every entry in different orders rather than queueing behind one another.
  std::vector<std::vector<std::string>> orders;
  for (int start = 0; start < 8; ++start) {
    std::vector<std::string> args;
    for (int k = 0; k < 8; ++k) {
      args.push_back("--spec");
      args.push_back("tiny:" + std::to_string(100 + (start + k) % 8));
    }
    orders.push_back(args);
  }
  auto results = stampede(16, cache, orders);
  REQUIRE(results.size() == 16);
  long compiles = 0, hits = 0;
  std::map<std::string, std::set<std::string>> hashes_of;  // uri -> cubin hashes seen
  std::map<std::string, int> compiled_by;                  // uri -> processes that compiled it
  for (const auto& r : results) {
    INFO("worker: " << r.out << r.err);
    REQUIRE(r.ok);
    compiles += r.compiles;
    hits += r.disk_hits;
    auto j = nlohmann::json::parse(rel::last_json_line(r.out));
    REQUIRE(j.at("artifacts").size() == 8);
    for (const auto& a : j.at("artifacts")) {
      hashes_of[a.at("uri")].insert(a.at("cubin_xxh3").get<std::string>());
      compiled_by[a.at("uri")] += a.at("source") == "compiled";
    }
  }
  CHECK(compiles == 8);
  CHECK(hits == 16 * 8 - 8);
  REQUIRE(hashes_of.size() == 8);
  for (const auto& [uri, hashes] : hashes_of) {
    INFO(uri);
    CHECK(hashes.size() == 1);
    CHECK(compiled_by[uri] == 1);
  }
  expect_clean_cache(cache, 8);
}
