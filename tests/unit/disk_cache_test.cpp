#include <catch2/catch.hpp>

#include "cache/disk_cache.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

using namespace kjit;
using namespace kjit::jit;

namespace {

struct Published {
  test::TempDir dir;
  DiskCache cache{dir.path()};
  KeyInputs inputs;
  Metadata meta;
  std::string cubin =
      "\x7f"
      "ELF-not-really-a-cubin";
  std::string key;
  EntryPaths paths;

  Published() {
    inputs.op = "demo";
    inputs.params = {{"n", "1"}};
    inputs.arch = "sm_90";
    inputs.nvrtc_version = "13.0";
    inputs.kjit_version = "0.1.0";
    key = compute_key(inputs).hex();
    meta.key = key;
    meta.uri = "demo_n_1";
    meta.inputs = inputs;
    meta.lowered_names = {{"k", "_Z1kv"}};
    meta.cubin_size = cubin.size();
    meta.cubin_hash = util::xxh3_64_hex(cubin);
    meta.created = utc_now_iso();
    paths = cache.paths("sm_90", meta.uri, key);
    cache.publish(paths, meta, cubin);
  }
};

}  // namespace

TEST_CASE("disk cache: a published entry loads and lists as valid", "[disk_cache]") {
  Published p;
  CHECK(p.paths.json.parent_path() == p.dir.path() / "v1" / "sm_90");
  std::string problem;
  auto e = p.cache.load(p.paths, p.key, p.inputs, &problem);
  REQUIRE(e);
  CHECK(e->cubin == p.cubin);
  CHECK(problem.empty());
  auto rows = p.cache.list("0.1.0", "13.0");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].uri == "demo_n_1");
  CHECK(rows[0].arch == "sm_90");
  CHECK(rows[0].problem.empty());
  CHECK(rows[0].cubin_size == p.cubin.size());
}

TEST_CASE("disk cache: a missing entry is a plain miss", "[disk_cache]") {
  Published p;
  std::string problem;
  auto other = p.cache.paths("sm_90", "demo_n_2", p.key);
  CHECK_FALSE(p.cache.load(other, p.key, p.inputs, &problem));
  CHECK(problem.empty());
}

TEST_CASE("disk cache: damaged entries are reported, not loaded", "[disk_cache]") {
  Published p;
  std::string expect;
  SECTION("truncated cubin") {
    util::write_file_atomic(p.paths.cubin, p.cubin.substr(0, 5));
    expect = "size";
  }
  SECTION("zero-length cubin") {
    util::write_file_atomic(p.paths.cubin, "");
    expect = "size";
  }
  SECTION("zero-length metadata") {
    util::write_file_atomic(p.paths.json, "");
    expect = "invalid metadata";
  }
  SECTION("cubin gone") {
    fs::remove(p.paths.cubin);
    expect = "missing";
  }
  std::string problem;
  CHECK_FALSE(p.cache.load(p.paths, p.key, p.inputs, &problem));
  CHECK(problem.find(expect) != std::string::npos);
  auto rows = p.cache.list("0.1.0", "13.0");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].problem.find(expect) != std::string::npos);
}

TEST_CASE("disk cache: listing flags entries of another kjit or NVRTC", "[disk_cache]") {
  Published p;
  CHECK(p.cache.list("0.2.0", "13.0")[0].problem.find("kjit version") != std::string::npos);
  CHECK(p.cache.list("0.1.0", "13.1")[0].problem.find("NVRTC") != std::string::npos);
}

TEST_CASE("disk cache: leftover temp and lock files are ignored", "[disk_cache]") {
  Published p;
  util::write_file_atomic(p.paths.json.string() + ".tmp.123.0", "partial");
  util::write_file_atomic(p.paths.lock, "");
  auto rows = p.cache.list("0.1.0", "13.0");
  CHECK(rows.size() == 1);
  CHECK(p.cache.load(p.paths, p.key, p.inputs, nullptr));
}
