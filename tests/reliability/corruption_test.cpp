// The corruption matrix: one test case per way a cache entry can be damaged (by a crash, a full
// disk, another kjit or NVRTC, a bad copy, a person). Each must be detected (the log names the
// reason), never loaded (the build returns a fresh compile's bytes, and the damage is gone from
// disk), rebuilt, or under KJIT_DISABLE_JIT refused with KJIT_ERROR_JIT_DISABLED naming the URI
// and the reason. A cubin is real NVRTC output of a one-line kernel, so each case costs one or
// two compiles of tens of milliseconds.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <string>

#include "jit/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "runtime/jit_core.hpp"
#include "reliability/support.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
namespace fs = std::filesystem;
using kjit::rel::Child;
using kjit::test::TempDir;
using nlohmann::json;

namespace {

// A valid published entry of tiny_spec(7) and the compile that produced it.
struct Entry {
  TempDir dir;
  jit::Settings settings = rel::settings_in(dir.path() / "cache");
  jit::Spec spec = rel::tiny_spec(7);
  jit::Artifact ref;
  jit::EntryPaths paths;

  Entry() {
    jit::JitCore core(settings);
    ref = core.build(spec, rel::kTarget);
    REQUIRE(ref.source == jit::ArtifactSource::kCompiled);
    paths = core.disk_cache().paths(rel::kTarget.sm(), spec.uri, ref.meta.key);
    REQUIRE(fs::is_regular_file(paths.json));
    REQUIRE(util::read_file(paths.cubin) == ref.cubin);
  }

  // Plain (non-atomic) writes: damage does not come with a rename.
  static void write(const fs::path& p, const std::string& data) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
  }
  void edit_json(const std::function<void(json&)>& f) {
    json j = json::parse(*util::read_file(paths.json));
    f(j);
    write(paths.json, j.dump(2));
  }
};

// The damage is detected and logged with `why`, the entry is not loaded, and a fresh compile
// replaces it on disk. `counted`: the damage is visible as an invalid entry (false when the
// sidecar is gone: that is a plain miss).
void expect_rebuilt(Entry& e, const std::string& why, bool counted) {
  std::string log;
  jit::Artifact a;
  jit::JitCore core(e.settings);
  {
    rel::StderrCapture cap;
    a = core.build(e.spec, rel::kTarget);
    log = cap.text();
  }
  INFO("log: " << log);
  CHECK(a.source == jit::ArtifactSource::kCompiled);
  CHECK(core.stats().compiles == 1);
  CHECK(core.stats().disk_hits == 0);
  CHECK(core.stats().invalid_entries == (counted ? 1 : 0));
  if (counted) {
    CHECK(log.find(why) != std::string::npos);
    CHECK(log.find("rebuilding it") != std::string::npos);
  }
  // What the build returned is a fresh compile, byte for byte.
  CHECK(a.cubin == e.ref.cubin);
  // The damage is gone: the entry on disk is the fresh one and validates.
  CHECK(util::read_file(e.paths.cubin) == e.ref.cubin);
  std::string problem;
  auto on_disk = core.disk_cache().load(e.paths, e.ref.meta.key, e.ref.meta.inputs, &problem);
  CHECK(problem.empty());
  REQUIRE(on_disk);
  CHECK(on_disk->cubin == e.ref.cubin);
  // And the next process is served from disk.
  jit::JitCore next(e.settings);
  jit::Artifact b = next.build(e.spec, rel::kTarget);
  CHECK(b.source == jit::ArtifactSource::kDisk);
  CHECK(next.stats().compiles == 0);
  CHECK(b.cubin == e.ref.cubin);
}

// Under KJIT_DISABLE_JIT nothing compiles, so the damaged entry must be refused, not loaded.
void expect_refused(Entry& e, const std::string& why) {
  jit::Settings off = e.settings;
  off.disable_jit = true;
  jit::JitCore core(off);
  rel::StderrCapture cap;  // keeps the expected log line out of the test output
  try {
    jit::Artifact a = core.build(e.spec, rel::kTarget);
    FAIL("a damaged entry was served: " << a.cubin.size() << " bytes from source "
                                        << static_cast<int>(a.source));
  } catch (const Error& err) {
    INFO("error: " << err.what());
    CHECK(err.status() == KJIT_ERROR_JIT_DISABLED);
    CHECK(std::string(err.what()).find(e.spec.uri) != std::string::npos);
    CHECK(std::string(err.what()).find("KJIT_DISABLE_JIT") != std::string::npos);
    if (!why.empty()) CHECK(std::string(err.what()).find(why) != std::string::npos);
  }
  CHECK(core.stats().compiles == 0);
  CHECK(core.stats().disk_hits == 0);
}

void check_case(const std::function<void(Entry&)>& damage, const std::string& why,
                bool counted = true) {
  Entry e;
  damage(e);
  SECTION("detected, not loaded, rebuilt") {
    expect_rebuilt(e, why, counted);
  }
  SECTION("refused under KJIT_DISABLE_JIT") {
    expect_refused(e, counted ? why : "");
  }
}

}  // namespace

// ---- The cubin ----------------------------------------------------------------------------------

TEST_CASE("corruption: truncated cubin", "[reliability][corruption]") {
  check_case(
      [](Entry& e) { Entry::write(e.paths.cubin, e.ref.cubin.substr(0, e.ref.cubin.size() / 2)); },
      "cubin size");
}

TEST_CASE("corruption: one flipped byte in the cubin", "[reliability][corruption]") {
  check_case(
      [](Entry& e) {
        std::string c = e.ref.cubin;
        c[c.size() / 2] ^= 0x40;
        Entry::write(e.paths.cubin, c);
      },
      "cubin hash mismatch");
}

TEST_CASE("corruption: zero-length cubin", "[reliability][corruption]") {
  check_case([](Entry& e) { Entry::write(e.paths.cubin, ""); }, "cubin size 0");
}

TEST_CASE("corruption: cubin missing, metadata present", "[reliability][corruption]") {
  check_case([](Entry& e) { fs::remove(e.paths.cubin); }, "cubin missing");
}

TEST_CASE("corruption: cubin with extra bytes appended", "[reliability][corruption]") {
  check_case([](Entry& e) { Entry::write(e.paths.cubin, e.ref.cubin + "tail"); }, "cubin size");
}

// ---- The sidecar --------------------------------------------------------------------------------

TEST_CASE("corruption: metadata missing, cubin present (and garbage)",
          "[reliability][corruption]") {
  check_case(
      [](Entry& e) {
        fs::remove(e.paths.json);
        Entry::write(e.paths.cubin, "not a cubin");
      },
      "", false);
}

TEST_CASE("corruption: truncated JSON", "[reliability][corruption]") {
  check_case(
      [](Entry& e) {
        std::string j = *util::read_file(e.paths.json);
        Entry::write(e.paths.json, j.substr(0, j.size() / 2));
      },
      "invalid metadata");
}

TEST_CASE("corruption: zero-length JSON", "[reliability][corruption]") {
  check_case([](Entry& e) { Entry::write(e.paths.json, ""); }, "invalid metadata");
}

TEST_CASE("corruption: zero-length JSON and cubin", "[reliability][corruption]") {
  check_case(
      [](Entry& e) {
        Entry::write(e.paths.json, "");
        Entry::write(e.paths.cubin, "");
      },
      "invalid metadata");
}

TEST_CASE("corruption: JSON of the wrong shape (an array, wrong types, binary)",
          "[reliability][corruption]") {
  SECTION("array") {
    check_case([](Entry& e) { Entry::write(e.paths.json, "[1, 2, 3]"); }, "invalid metadata");
  }
  SECTION("schema as a string") {
    check_case([](Entry& e) { e.edit_json([](json& j) { j["schema"] = "1"; }); },
               "invalid metadata");
  }
  SECTION("params not pairs") {
    check_case([](Entry& e) { e.edit_json([](json& j) { j["params"] = json::array({1}); }); },
               "invalid metadata");
  }
  SECTION("negative cubin size") {
    check_case([](Entry& e) { e.edit_json([](json& j) { j["cubin_size"] = -1; }); },
               "cubin_size must be an integer in range");
  }
  SECTION("schema 1e300 (a float that no int holds)") {
    check_case([](Entry& e) { e.edit_json([](json& j) { j["schema"] = 1e300; }); },
               "schema must be an integer in range");
  }
  SECTION("random bytes") {
    check_case([](Entry& e) { Entry::write(e.paths.json, std::string("\x00\xff{\"\x01", 5)); },
               "invalid metadata");
  }
}

TEST_CASE("corruption: JSON nested 100000 deep", "[reliability][corruption]") {
  check_case([](Entry& e) { Entry::write(e.paths.json, std::string(100000, '[')); },
             "invalid metadata");
}

TEST_CASE("corruption: JSON of another schema version", "[reliability][corruption]") {
  check_case([](Entry& e) { e.edit_json([](json& j) { j["schema"] = 2; }); }, "schema 2 != 1");
}

TEST_CASE("corruption: JSON of another kjit version", "[reliability][corruption]") {
  check_case([](Entry& e) { e.edit_json([](json& j) { j["kjit_version"] = "0.0.0-other"; }); },
             "kjit version 0.0.0-other");
}

TEST_CASE("corruption: JSON of another NVRTC version", "[reliability][corruption]") {
  check_case([](Entry& e) { e.edit_json([](json& j) { j["nvrtc_version"] = "1.0"; }); },
             "NVRTC version 1.0");
}

TEST_CASE("corruption: JSON of another arch", "[reliability][corruption]") {
  check_case([](Entry& e) { e.edit_json([](json& j) { j["arch"] = "sm_80"; }); },
             "arch sm_80 != sm_90");
}

TEST_CASE("corruption: JSON of another entry (key mismatch)", "[reliability][corruption]") {
  check_case(
      [](Entry& e) {
        jit::JitCore core(e.settings);
        jit::Artifact other = core.build(rel::tiny_spec(8), rel::kTarget);
        Entry::write(e.paths.json, other.meta.to_json());
        Entry::write(e.paths.cubin, other.cubin);
      },
      "key ");
}

TEST_CASE("corruption: recorded key inputs edited, key kept", "[reliability][corruption]") {
  check_case(
      [](Entry& e) { e.edit_json([](json& j) { j["params"] = json::parse(R"([["n", "8"]])"); }); },
      "key does not match recorded inputs");
}

TEST_CASE("corruption: recorded cubin hash does not match", "[reliability][corruption]") {
  check_case(
      [](Entry& e) { e.edit_json([](json& j) { j["cubin_xxh3_64"] = "0123456789abcdef"; }); },
      "cubin hash mismatch");
}

TEST_CASE("corruption: recorded cubin size does not match", "[reliability][corruption]") {
  check_case([](Entry& e) { e.edit_json([](json& j) { j["cubin_size"] = 12; }); }, "cubin size");
}

TEST_CASE("corruption: no lowered names recorded", "[reliability][corruption]") {
  check_case([](Entry& e) { e.edit_json([](json& j) { j["lowered_names"] = json::array(); }); },
             "no lowered names");
}

// ---- Not files ----------------------------------------------------------------------------------

TEST_CASE("corruption: a directory where the cubin should be", "[reliability][corruption]") {
  Entry e;
  fs::remove(e.paths.cubin);
  fs::create_directories(e.paths.cubin / "x");
  jit::JitCore core(e.settings);
  jit::Artifact a;
  {
    rel::StderrCapture cap;
    a = core.build(e.spec, rel::kTarget);
  }
  // Nothing can be published over a directory; the process is served from memory.
  CHECK(a.source == jit::ArtifactSource::kCompiled);
  CHECK(a.cubin == e.ref.cubin);
  CHECK(core.stats().compiles == 1);
}

// ---- Leftovers of dead processes
// -----------------------------------------------------------------

TEST_CASE("corruption: a lock file left by a killed process does not block the next one",
          "[reliability][corruption]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  const jit::Spec spec = rel::tiny_spec(9);
  jit::Settings mem = rel::settings_in(cache);
  mem.disk_cache = false;
  const std::string key = jit::JitCore(mem).build(spec, rel::kTarget).meta.key;
  const jit::EntryPaths paths = jit::DiskCache(cache).paths(rel::kTarget.sm(), spec.uri, key);
  fs::create_directories(paths.lock.parent_path());
  const std::vector<std::string> env = {"KJIT_CACHE_DIR=" + cache.string()};

  Child holder({rel::worker_path(), "hold-lock", paths.lock.string()}, env);
  REQUIRE(holder.wait_for_output("locked", 60));
  Child builder({rel::worker_path(), "build", "--spec", "tiny:9"}, env);
  // While the holder lives, the builder waits for the lock: the lock is real.
  CHECK_FALSE(builder.wait(1.0, false));
  holder.kill(SIGKILL);
  REQUIRE(holder.wait(30));
  CHECK(holder.term_signal() == SIGKILL);
  // The kernel dropped the dead holder's flock; the builder goes on at once.
  REQUIRE(builder.wait(60));
  auto r = rel::parse_worker_output(builder.exit_code(), builder.term_signal(), builder.out(),
                                    builder.err());
  INFO(r.out << r.err);
  CHECK(r.ok);
  CHECK(r.compiles == 1);
  CHECK(fs::exists(paths.lock));  // the stale lock file stays, harmless

  // A process that starts after the holder died, with only the stale lock file there.
  fs::remove(paths.json);
  fs::remove(paths.cubin);
  auto again = rel::run_worker({"build", "--spec", "tiny:9"}, env, 60);
  INFO(again.out << again.err);
  CHECK(again.ok);
  CHECK(again.compiles == 1);
  CHECK(again.cubin_hash == r.cubin_hash);
}

TEST_CASE("corruption: leftover temp files of killed writers are never read",
          "[reliability][corruption]") {
  Entry e;
  // What a writer killed mid-publish leaves: temp files of both kinds, one partial, one a
  // complete sidecar that describes other bytes.
  const std::string cubin_tmp = e.paths.cubin.string() + ".tmp.99999.0";
  const std::string json_tmp = e.paths.json.string() + ".tmp.99999.1";
  Entry::write(cubin_tmp, e.ref.cubin.substr(0, 100));
  jit::Metadata lie = e.ref.meta;
  lie.cubin_size = 100;
  lie.cubin_hash = util::xxh3_64_hex(e.ref.cubin.substr(0, 100));
  Entry::write(json_tmp, lie.to_json());
  {
    jit::JitCore core(e.settings);
    jit::Artifact a = core.build(e.spec, rel::kTarget);
    CHECK(a.source == jit::ArtifactSource::kDisk);
    CHECK(a.cubin == e.ref.cubin);
  }
  fs::remove(e.paths.json);
  fs::remove(e.paths.cubin);
  {
    jit::JitCore core(e.settings);
    jit::Artifact a = core.build(e.spec, rel::kTarget);
    CHECK(a.source == jit::ArtifactSource::kCompiled);
    CHECK(core.stats().invalid_entries == 0);
    CHECK(a.cubin == e.ref.cubin);
  }
  // Temp files may belong to a live writer on another host of a shared file system, so they are
  // left alone; listing does not take them for entries.
  CHECK(fs::exists(cubin_tmp));
  CHECK(fs::exists(json_tmp));
  auto rows = jit::DiskCache(e.settings.cache_dir).list(jit::kjit_version(), jit::nvrtc_version());
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].problem.empty());
}
