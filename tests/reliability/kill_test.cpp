// kill -9 at random moments of a first-use build (lock, NVRTC, publish) and inside publish
// itself: the next process always succeeds, gets the bytes of a fresh compile, and leaves a
// valid entry. The seed is printed so a failure can be replayed (KJIT_RELIABILITY_SEED).
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/disk_cache.hpp"
#include "runtime/jit_core.hpp"
#include "reliability/support.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"
#include "util/hash.hpp"

using namespace kjit;
namespace fs = std::filesystem;
using kjit::rel::Child;
using kjit::test::TempDir;

namespace {

unsigned seed() {
  if (const char* s = std::getenv("KJIT_RELIABILITY_SEED")) {
    return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  }
  return std::random_device{}();
}

void sleep_us(long us) {
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// The compile every process here must end up with, and where its entry lives.
struct Reference {
  jit::Artifact art;
  jit::EntryPaths paths;
  std::string hash;
  Reference(const fs::path& cache, const jit::Spec& spec) {
    jit::Settings mem = rel::settings_in(cache);
    mem.disk_cache = false;
    art = jit::JitCore(mem).build(spec, rel::kTarget);
    paths = jit::DiskCache(cache).paths(rel::kTarget.sm(), spec.uri, art.meta.key);
    hash = util::xxh3_64_hex(art.cubin);
  }
};

// The entry on disk is complete and valid, and holds one of the expected cubins.
void expect_valid_entry(const fs::path& cache, const Reference& ref) {
  std::string problem;
  auto e = jit::DiskCache(cache).load(ref.paths, ref.art.meta.key, ref.art.meta.inputs, &problem);
  INFO("problem: " << problem);
  REQUIRE(e);
  CHECK(e->cubin.compare(0, ref.art.cubin.size(), ref.art.cubin) == 0);
}

}  // namespace

TEST_CASE("kill -9: first-use builds killed at random points, the next process always succeeds",
          "[reliability][kill]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  const std::vector<std::string> env = {"KJIT_CACHE_DIR=" + cache.string()};
  const std::vector<std::string> args = {"build", "--spec", "tiny:500"};
  Reference ref(cache, rel::tiny_spec(500));

  // How long one whole first-use build takes here, start to exit (the median of three, on fresh
  // caches), bounds the kill delays.
  std::vector<double> probes;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto probe = rel::run_worker(
        args, {"KJIT_CACHE_DIR=" + (dir.path() / ("probe" + std::to_string(i))).string()});
    probes.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    REQUIRE(probe.ok);
    REQUIRE(probe.cubin_hash == ref.hash);  // NVRTC output is deterministic
  }
  std::sort(probes.begin(), probes.end());
  const double total_us = probes[1];

  const unsigned s = seed();
  std::mt19937 rng(s);
  std::uniform_real_distribution<double> delay(0, total_us);
  const int iterations = 50;
  int killed = 0, repaired = 0, leftover_valid = 0;
  for (int i = 0; i < iterations; ++i) {
    INFO("seed " << s << ", iteration " << i);
    // A first use every time; lock and temp files of killed writers stay where they are.
    fs::remove(ref.paths.json);
    fs::remove(ref.paths.cubin);
    {
      Child w({rel::worker_path(), "build", "--spec", "tiny:500"}, env);
      sleep_us(static_cast<long>(delay(rng)));
      w.kill(SIGKILL);
      REQUIRE(w.wait(60));
      if (w.term_signal() == SIGKILL) {
        ++killed;
      } else {
        auto r = rel::parse_worker_output(w.exit_code(), 0, w.out(), w.err());
        CHECK(r.ok);
      }
    }
    auto next = rel::run_worker(args, env, 60);
    INFO(next.out << next.err);
    REQUIRE(next.ok);
    CHECK(next.cubin_hash == ref.hash);
    repaired += next.invalid_entries > 0;
    leftover_valid += next.source == "disk";
    expect_valid_entry(cache, ref);
  }
  WARN("kill during build: seed " << s << ", " << killed << "/" << iterations
                                  << " killed before exit, " << leftover_valid
                                  << " left a valid entry, " << repaired
                                  << " left an invalid one (rebuilt), "
                                  << rel::files_containing(cache, ".tmp.").size()
                                  << " temp files left behind");
  // Most kills must land before the worker's exit, or the loop proved nothing (the bound leaves
  // room for a loaded CI machine, where timings wander).
  CHECK(killed >= iterations / 5);
}

TEST_CASE("kill -9: writers killed inside publish leave a pair that is whole or detected",
          "[reliability][kill]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  const std::vector<std::string> env = {"KJIT_CACHE_DIR=" + cache.string()};
  Reference ref(cache, rel::tiny_spec(501));
  // The republishing worker alternates the cubin and the cubin + 16 zero bytes, each with its own
  // matching sidecar: a kill between the two renames leaves the sidecar of one beside the other.
  const std::string padded_hash = util::xxh3_64_hex(ref.art.cubin + std::string(16, '\0'));

  const unsigned s = seed();
  std::mt19937 rng(s);
  std::uniform_int_distribution<long> delay_us(0, 20000);
  const int iterations = 30;
  int torn = 0, whole = 0;
  for (int i = 0; i < iterations; ++i) {
    INFO("seed " << s << ", iteration " << i);
    {
      Child w({rel::worker_path(), "republish", "--spec", "tiny:501"}, env);
      REQUIRE(w.wait_for_output("ready", 60));
      sleep_us(delay_us(rng));
      w.kill(SIGKILL);
      REQUIRE(w.wait(60));
      CHECK(w.term_signal() == SIGKILL);
    }
    {
      // The cubin file itself, read directly rather than through the cache's validation: one
      // of the two whole versions, never a partial one, whatever the sidecar beside it says.
      const auto raw = util::read_file(ref.paths.cubin);
      REQUIRE(raw);
      const std::string h = util::xxh3_64_hex(*raw);
      CHECK((h == ref.hash || h == padded_hash));
    }
    auto next = rel::run_worker({"build", "--spec", "tiny:501"}, env, 60);
    INFO(next.out << next.err);
    REQUIRE(next.ok);
    if (next.invalid_entries > 0) {
      // A torn pair: detected and replaced by a fresh compile.
      ++torn;
      CHECK(next.source == "compiled");
      CHECK(next.cubin_hash == ref.hash);
    } else {
      ++whole;
      CHECK(next.source == "disk");
      CHECK((next.cubin_hash == ref.hash || next.cubin_hash == padded_hash));
    }
    expect_valid_entry(cache, ref);
  }
  WARN("kill during publish: seed " << s << ", " << torn << " torn pairs detected and rebuilt, "
                                    << whole << " whole pairs served, "
                                    << rel::files_containing(cache, ".tmp.").size()
                                    << " temp files left behind");
  // Half of each publish lies between the cubin's rename and the sidecar's: some kills must
  // land there, or the torn-pair path went untested.
  CHECK(torn >= 1);
}

namespace {

// Two versions of one file, of different sizes and bytes: any mixture of them (a truncated new
// file, new bytes over old ones, an empty file) equals neither.
std::string file_version(size_t bytes, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(bytes, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

enum class Seen { kOld, kNew, kMissing, kTorn };

Seen classify(const fs::path& path, const std::string& old_v, const std::string& new_v) {
  const auto got = util::read_file(path);
  if (!got) return Seen::kMissing;
  if (*got == old_v) return Seen::kOld;
  if (*got == new_v) return Seen::kNew;
  return Seen::kTorn;
}

// Forks a child that runs `body` and _exits with its return value (3 on an exception).
template <class F>
pid_t fork_writer(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 3;
    try {
      rc = body();
    } catch (...) {
    }
    ::_exit(rc);
  }
  return pid;
}

}  // namespace

// util::write_file_atomic is what keeps a cache reader from seeing half a cubin. This checks the
// file itself, byte for byte, not through the cache's size and hash validation (which would
// quietly turn a torn cubin into a recompile and hide the bug): a write that stops short, a writer
// killed at random moments, and readers racing the writer all see the old bytes or the new ones.
TEST_CASE("kill -9: a rewrite cut short or killed mid-write leaves the old bytes or the new",
          "[reliability][kill]") {
  TempDir dir;
  const fs::path path = dir.path() / "entry.cubin";
  const std::string old_v = file_version(3 << 20, 1), new_v = file_version(2 << 20, 2);
  util::write_file_atomic(path, old_v);
  REQUIRE(classify(path, old_v, new_v) == Seen::kOld);

  {
    // A short write (RLIMIT_FSIZE, SIGXFSZ ignored): the writer gets EFBIG halfway through the
    // new bytes, reports the failure, and the file keeps every old byte.
    const pid_t pid = fork_writer([&] {
      std::signal(SIGXFSZ, SIG_IGN);
      const rlim_t half = new_v.size() / 2;
      const rlimit lim{half, half};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
      util::write_file_atomic(path, new_v);
      return 0;
    });
    REQUIRE(pid > 0);
    int ws = 0;
    REQUIRE(::waitpid(pid, &ws, 0) == pid);
    REQUIRE(WIFEXITED(ws));
    CHECK(WEXITSTATUS(ws) == 3);  // the write failed, with an exception
    CHECK(classify(path, old_v, new_v) == Seen::kOld);
    CHECK(rel::files_containing(dir.path(), ".tmp.").empty());  // its temp file is gone too
  }

  // A writer that rewrites the file in a loop, alternating the two versions, killed after a
  // random delay; meanwhile this process reads the file as fast as it can.
  const unsigned s = seed();
  std::mt19937 rng(s);
  std::uniform_int_distribution<long> delay_us(0, 60000);
  const int iterations = 12;
  long reads = 0, torn = 0, missing = 0, saw_old = 0, saw_new = 0;
  for (int i = 0; i < iterations; ++i) {
    INFO("seed " << s << ", iteration " << i);
    const pid_t pid = fork_writer([&] {
      for (;;) {
        util::write_file_atomic(path, new_v);
        util::write_file_atomic(path, old_v);
      }
      return 0;
    });
    REQUIRE(pid > 0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us(rng));
    do {
      const Seen r = classify(path, old_v, new_v);
      ++reads;
      torn += r == Seen::kTorn;
      missing += r == Seen::kMissing;
      saw_old += r == Seen::kOld;
      saw_new += r == Seen::kNew;
    } while (std::chrono::steady_clock::now() < until);
    ::kill(pid, SIGKILL);
    int ws = 0;
    REQUIRE(::waitpid(pid, &ws, 0) == pid);
    CHECK((WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL));
    const Seen after = classify(path, old_v, new_v);
    CHECK((after == Seen::kOld || after == Seen::kNew));
  }
  WARN("rewrites killed at random: seed "
       << s << ", " << reads << " reads during the writes: " << saw_old << " old, " << saw_new
       << " new, " << torn << " torn, " << missing << " missing");
  CHECK(torn == 0);
  CHECK(missing == 0);
  // Both versions showed up, or the reads never overlapped a rewrite and proved nothing.
  CHECK(saw_old > 0);
  CHECK(saw_new > 0);
}
