// Hostile file systems: a read-only cache, a read-only install prefix, a full disk. Tests run as
// root in CI, where permissions do not apply, so the processes that must meet them drop to
// nobody first (the worker's --drop-root / exec-as-nobody); a full disk is RLIMIT_FSIZE (EFBIG)
// and, where a private mount namespace can be made, a real full tmpfs (ENOSPC).
//
// Documented behaviour (docs/reliability.md): a cache that cannot be written serves valid
// entries read-only and compiles anything else into memory with a logged warning; a write that
// fails part-way leaves no entry and no temp file behind.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "cache/disk_cache.hpp"
#include "kjit/kjit.h"
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

const fs::perms kReadOnly = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec;

// A temp dir that nobody can enter (mkdtemp makes it 0700).
void open_to_all(const fs::path& p) {
  fs::permissions(p, fs::perms::all);
}

size_t entry_files(const fs::path& cache) {
  return rel::files_containing(cache, ".cubin").size() +
         rel::files_containing(cache, ".json").size();
}

}  // namespace

// ---- Read-only cache ---------------------------------------------------------------------------

TEST_CASE("filesystem: read-only empty cache compiles into memory with a warning",
          "[reliability][filesystem]") {
  TempDir dir;
  open_to_all(dir.path());
  const fs::path cache = dir.path() / "cache";
  fs::create_directories(cache / "v1" / "sm_90");
  rel::chmod_tree(cache, kReadOnly);
  auto before = rel::snapshot(cache);
  auto r = rel::run_worker({"build", "--spec", "tiny:600", "--drop-root"},
                           {"KJIT_CACHE_DIR=" + cache.string()});
  INFO(r.out << r.err);
  CHECK(r.ok);
  CHECK(r.source == "compiled");
  CHECK(r.compiles == 1);
  CHECK(r.err.find("warning") != std::string::npos);
  CHECK(r.err.find("without the disk cache") != std::string::npos);
  CHECK(rel::snapshot(cache) == before);
}

TEST_CASE("filesystem: read-only cache serves its valid entries and writes nothing",
          "[reliability][filesystem]") {
  TempDir dir;
  open_to_all(dir.path());
  const fs::path cache = dir.path() / "cache";
  jit::Artifact ref =
      jit::JitCore(rel::settings_in(cache)).build(rel::tiny_spec(601), rel::kTarget);
  rel::chmod_tree(cache, kReadOnly);
  auto before = rel::snapshot(cache);
  for (const char* disable : {"KJIT_DISABLE_JIT=0", "KJIT_DISABLE_JIT=1"}) {
    auto r = rel::run_worker({"build", "--spec", "tiny:601", "--drop-root"},
                             {"KJIT_CACHE_DIR=" + cache.string(), disable});
    INFO(disable << ": " << r.out << r.err);
    CHECK(r.ok);
    CHECK(r.source == "disk");
    CHECK(r.compiles == 0);
    CHECK(r.cubin_hash == util::xxh3_64_hex(ref.cubin));
  }
  CHECK(rel::snapshot(cache) == before);  // not even the last-used time moved
}

TEST_CASE("filesystem: read-only cache with a damaged entry compiles into memory",
          "[reliability][filesystem]") {
  TempDir dir;
  open_to_all(dir.path());
  const fs::path cache = dir.path() / "cache";
  jit::JitCore core(rel::settings_in(cache));
  jit::Artifact ref = core.build(rel::tiny_spec(602), rel::kTarget);
  std::string bad = ref.cubin;
  bad[bad.size() / 2] ^= 1;
  std::ofstream(ref.cubin_path, std::ios::binary | std::ios::trunc) << bad;
  rel::chmod_tree(cache, kReadOnly);
  auto before = rel::snapshot(cache);
  auto r = rel::run_worker({"build", "--spec", "tiny:602", "--drop-root"},
                           {"KJIT_CACHE_DIR=" + cache.string()});
  INFO(r.out << r.err);
  CHECK(r.ok);
  CHECK(r.source == "compiled");
  CHECK(r.cubin_hash == util::xxh3_64_hex(ref.cubin));  // not the damaged bytes
  CHECK(rel::snapshot(cache) == before);
  // Under KJIT_DISABLE_JIT the damaged entry is refused with the reason.
  auto off = rel::run_worker({"build", "--spec", "tiny:602", "--drop-root"},
                             {"KJIT_CACHE_DIR=" + cache.string(), "KJIT_DISABLE_JIT=1"});
  INFO(off.out << off.err);
  CHECK_FALSE(off.ok);
  CHECK(off.status == KJIT_ERROR_JIT_DISABLED);
  CHECK(off.error.find("cubin hash mismatch") != std::string::npos);
}

TEST_CASE("filesystem: read-only empty cache under KJIT_DISABLE_JIT is a clear error",
          "[reliability][filesystem]") {
  TempDir dir;
  open_to_all(dir.path());
  const fs::path cache = dir.path() / "cache";
  fs::create_directories(cache);
  rel::chmod_tree(cache, kReadOnly);
  auto r = rel::run_worker({"build", "--spec", "tiny:603", "--drop-root"},
                           {"KJIT_CACHE_DIR=" + cache.string(), "KJIT_DISABLE_JIT=1"});
  INFO(r.out << r.err);
  CHECK_FALSE(r.ok);
  CHECK(r.exit_code == 1);
  CHECK(r.status == KJIT_ERROR_JIT_DISABLED);
  CHECK(r.error.find("reltiny_n_603") != std::string::npos);
  CHECK(r.error.find("KJIT_DISABLE_JIT=1") != std::string::npos);
  CHECK(entry_files(cache) == 0);
}

// ---- Read-only install prefix ------------------------------------------------------------------

TEST_CASE("filesystem: an installed kjit-cli in a read-only prefix writes nothing there",
          "[reliability][filesystem]") {
  TempDir dir;
  open_to_all(dir.path());
  const fs::path prefix = dir.path() / "prefix";
  const fs::path home = dir.path() / "home";
  fs::create_directories(prefix / "bin");
  fs::create_directories(prefix / "lib");
  fs::create_directories(home);
  open_to_all(home);
  fs::copy_file(rel::cli_path(), prefix / "bin" / "kjit-cli");
  fs::copy_file(fs::canonical(KJIT_SHARED_LIB_PATH), prefix / "lib" / "libkjit.so");
  rel::chmod_tree(prefix, kReadOnly);
  auto before = rel::snapshot(prefix);
  // The default cache ($HOME/.cache/kjit), run from inside the prefix.
  Child c({rel::worker_path(), "exec-as-nobody", (prefix / "bin" / "kjit-cli").string(), "compile",
           "rmsnorm", "--set", "dtype=fp16", "--set", "hidden=64", "--arch", "sm_90", "--json"},
          {"HOME=" + home.string(), "KJIT_CACHE_DIR", "XDG_CACHE_HOME", "KJIT_GEN_DIR"}, -1,
          (prefix / "bin").string());
  REQUIRE(c.wait(300));
  INFO(c.out() << c.err());
  CHECK(c.exit_code() == 0);
  auto j = nlohmann::json::parse(c.out().substr(c.out().find('{')));
  CHECK(j.at("compiled").get<int>() == 1);
  CHECK(j.at("failed").get<int>() == 0);
  CHECK(rel::snapshot(prefix) == before);
  CHECK(rel::files_containing(home / ".cache" / "kjit" / "v1" / "sm_90", ".cubin").size() == 1);
}

// ---- Full disk ---------------------------------------------------------------------------------

TEST_CASE("filesystem: no space for anything (RLIMIT_FSIZE 0): served from memory, no entry",
          "[reliability][filesystem]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  auto r = rel::run_worker({"build", "--spec", "tiny:610", "--fsize", "0"},
                           {"KJIT_CACHE_DIR=" + cache.string()});
  INFO(r.out << r.err);
  CHECK(r.ok);
  CHECK(r.source == "compiled");
  CHECK(r.err.find("File too large") != std::string::npos);
  CHECK(r.err.find("stays in memory only") != std::string::npos);
  CHECK(entry_files(cache / "v1") == 0);
  CHECK(rel::files_containing(cache, ".tmp.").empty());
  // Once there is room, the next process publishes normally.
  auto next =
      rel::run_worker({"build", "--spec", "tiny:610"}, {"KJIT_CACHE_DIR=" + cache.string()});
  CHECK(next.ok);
  CHECK(next.source == "compiled");
  CHECK(entry_files(cache / "v1") == 2);
}

TEST_CASE("filesystem: KJIT_JIT_PCH=1 with no room for NVRTC's PCH heap: compiled without -pch",
          "[reliability][filesystem]") {
  // NVRTC maps its precompiled-header heap from a file in $TMPDIR: with no room every -pch
  // compile fails ("unable to obtain mapped memory"); the opt-in is dropped for that compile.
  TempDir dir;
  const fs::path tmp = dir.path() / "tmp";
  fs::create_directories(tmp);
  auto r = rel::run_worker({"build", "--spec", "tiny:611", "--fsize", "0"},
                           {"KJIT_CACHE_DIR=" + (dir.path() / "cache").string(), "KJIT_JIT_PCH=1",
                            "TMPDIR=" + tmp.string()});
  INFO(r.out << r.err);
  CHECK(r.ok);
  CHECK(r.source == "compiled");
  CHECK(r.err.find("without -pch") != std::string::npos);
}

TEST_CASE("filesystem: room for the cubin but not its sidecar (RLIMIT_FSIZE): no orphan cubin",
          "[reliability][filesystem]") {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  // A long define makes the sidecar several KB larger than the cubin.
  const jit::Spec spec = rel::tiny_spec(611, 12000);
  jit::Settings mem = rel::settings_in(cache);
  mem.disk_cache = false;
  jit::Artifact a = jit::JitCore(mem).build(spec, rel::kTarget);
  const size_t cubin = a.cubin.size(), sidecar = a.meta.to_json().size();
  REQUIRE(sidecar > cubin + 1024);
  const std::string limit = std::to_string(cubin + 512);
  auto r = rel::run_worker({"build", "--spec", "tiny:611:12000", "--fsize", limit},
                           {"KJIT_CACHE_DIR=" + cache.string()});
  INFO(r.out << r.err);
  CHECK(r.ok);
  CHECK(r.source == "compiled");
  CHECK(r.err.find("stays in memory only") != std::string::npos);
  CHECK(entry_files(cache / "v1") == 0);
  CHECK(rel::files_containing(cache, ".tmp.").empty());
}

TEST_CASE("filesystem: a full tmpfs (ENOSPC) leaves no partial entry",
          "[reliability][filesystem]") {
  if (std::system("unshare -m true 2>/dev/null") != 0) {
    WARN("skipped: no private mount namespace here (needs root); RLIMIT_FSIZE cases still run");
    return;
  }
  TempDir dir;
  const fs::path mnt = dir.path() / "mnt";
  fs::create_directories(mnt);
  const jit::Spec spec = rel::tiny_spec(612, 12000);
  jit::Settings mem = rel::settings_in(mnt);
  mem.disk_cache = false;
  jit::Artifact a = jit::JitCore(mem).build(spec, rel::kTarget);
  const size_t page = 4096;
  const size_t cubin_pages = (a.cubin.size() + page - 1) / page;
  REQUIRE(a.meta.to_json().size() > page * cubin_pages);  // the sidecar cannot fit after it
  // Inside a private mount namespace: a 1 MiB tmpfs, filled up to exactly the cubin's pages (when
  // `free_pages` is 0: completely), one first-use build, then the files that remain.
  auto run = [&](size_t free_pages) {
    const size_t fill_kb = (1024 * 1024 - free_pages * page) / 1024;
    std::string script =
        "set -e; mount -t tmpfs -o size=1m tmpfs \"$1\"; mkdir -p \"$1/c/v1/sm_90\"; "
        "dd if=/dev/zero of=\"$1/filler\" bs=1k count=" +
        std::to_string(fill_kb) +
        " 2>/dev/null || true; "
        "KJIT_CACHE_DIR=\"$1/c\" KJIT_GEN_DIR=\"$2\" \"$3\" build --spec tiny:612:12000 || true; "
        "echo FILES; find \"$1/c\" -type f -printf '%P %s\\n'";
    Child c({"/usr/bin/unshare", "-m", "/bin/sh", "-c", script, "sh", mnt.string(),
             (dir.path() / "gen").string(), rel::worker_path()});
    REQUIRE(c.wait(120));
    return std::make_pair(c.out(), c.err());
  };
  for (size_t free_pages : {size_t{0}, cubin_pages}) {
    auto [out, err] = run(free_pages);
    INFO("free pages " << free_pages << ": " << out << err);
    auto r = rel::parse_worker_output(0, 0, out.substr(0, out.find("FILES")), err);
    CHECK(r.ok);
    CHECK(r.source == "compiled");
    CHECK(err.find("No space left on device") != std::string::npos);
    const std::string files = out.substr(out.find("FILES") + 6);
    CHECK(files.find(".cubin") == std::string::npos);
    CHECK(files.find(".json") == std::string::npos);
    CHECK(files.find(".tmp.") == std::string::npos);
  }
}
