// Threads of one process building at once: one JitCore shared by all (as the C ABI's global one
// is), and one JitCore per thread (as independent libraries in one process would be). The entry
// flock is taken on a file description of its own per build, so it also orders threads. This is
// the test tools/sanitize.sh runs under ThreadSanitizer.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "jit/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "runtime/jit_core.hpp"
#include "reliability/support.hpp"
#include "support/temp_dir.hpp"
#include "util/hash.hpp"

using namespace kjit;
namespace fs = std::filesystem;
using kjit::test::TempDir;

namespace {

// Runs `threads` threads; thread t builds specs (t + k) % specs for k < specs with core(t).
template <class CoreOf>
void run_threads(int threads, int specs, CoreOf&& core_of, std::vector<std::string>* hashes,
                 std::atomic<int>* failures) {
  hashes->assign(static_cast<size_t>(threads * specs), "");
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int k = 0; k < specs; ++k) {
        int s = (t + k) % specs;
        try {
          jit::Artifact a = core_of(t).build(rel::tiny_spec(300 + s), rel::kTarget);
          bool ok = a.meta.cubin_hash == util::xxh3_64_hex(a.cubin);
          (*hashes)[static_cast<size_t>(t * specs + s)] = ok ? a.meta.cubin_hash : "";
          if (!ok) failures->fetch_add(1);
        } catch (const std::exception&) {
          failures->fetch_add(1);
        }
      }
    });
  }
  go = true;
  for (auto& th : pool) th.join();
}

void expect_same_per_spec(const std::vector<std::string>& hashes, int threads, int specs) {
  for (int s = 0; s < specs; ++s) {
    for (int t = 0; t < threads; ++t) {
      INFO("thread " << t << " spec " << s);
      CHECK(!hashes[static_cast<size_t>(t * specs + s)].empty());
      CHECK(hashes[static_cast<size_t>(t * specs + s)] == hashes[static_cast<size_t>(s)]);
    }
  }
}

}  // namespace

TEST_CASE("threads: 8 threads share one JitCore on an empty cache, each spec compiles once",
          "[reliability][threads]") {
  TempDir dir;
  jit::JitCore core(rel::settings_in(dir.path() / "cache"));
  std::vector<std::string> hashes;
  std::atomic<int> failures{0};
  run_threads(
      8, 4, [&](int) -> jit::JitCore& { return core; }, &hashes, &failures);
  CHECK(failures == 0);
  CHECK(core.stats().compiles == 4);
  CHECK(core.stats().disk_hits == 8 * 4 - 4);
  expect_same_per_spec(hashes, 8, 4);
  auto rows = core.disk_cache().list(jit::kjit_version(), jit::nvrtc_version());
  CHECK(rows.size() == 4);
  for (const auto& r : rows) CHECK(r.problem.empty());
}

TEST_CASE("threads: 8 threads with a JitCore each on one empty cache, each spec compiles once",
          "[reliability][threads]") {
  TempDir dir;
  std::vector<std::unique_ptr<jit::JitCore>> cores;
  for (int t = 0; t < 8; ++t) {
    cores.push_back(std::make_unique<jit::JitCore>(rel::settings_in(dir.path() / "cache")));
  }
  std::vector<std::string> hashes;
  std::atomic<int> failures{0};
  run_threads(
      8, 4, [&](int t) -> jit::JitCore& { return *cores[static_cast<size_t>(t)]; }, &hashes,
      &failures);
  CHECK(failures == 0);
  long compiles = 0;
  for (const auto& c : cores) compiles += c->stats().compiles;
  CHECK(compiles == 4);
  expect_same_per_spec(hashes, 8, 4);
}
