// The build pipeline without a GPU: NVRTC compile, disk cache, controls, generated sources.
#include <catch2/catch.hpp>

#include <fstream>

#include "runtime/jit_core.hpp"
#include "ops/norm/norm.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
using namespace kjit::jit;
using kjit::test::ScopedEnv;
using kjit::test::TempDir;

namespace {

Settings settings_in(const TempDir& dir) {
  Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  return s;
}

Spec small_spec() {
  return ops::rmsnorm_spec(ops::select_rmsnorm(ops::DType::kBF16, 4096, 16));
}

const ArchTarget kSm90a{9, 0, true};

size_t count_files(const fs::path& dir, const std::string& ext) {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec)) n += e.path().extension() == ext;
  return n;
}

}  // namespace

TEST_CASE("jit: compile, publish, then load from disk in a fresh core", "[jit]") {
  TempDir dir;
  Spec spec = small_spec();
  Artifact first;
  {
    JitCore core(settings_in(dir));
    first = core.build(spec, kSm90a);
    CHECK(first.source == ArtifactSource::kCompiled);
    CHECK(core.stats().compiles == 1);
    CHECK(first.cubin.size() > 1000);
    CHECK(first.cubin.compare(0, 4,
                              "\x7f"
                              "ELF") == 0);
    REQUIRE(first.meta.lowered_names.size() == 1);
    CHECK(first.meta.lowered_names[0].second.rfind("_Z", 0) == 0);
    CHECK(first.meta.registers > 0);
    CHECK(first.meta.shared_bytes >= 0);
    CHECK(first.meta.compile_ms > 0);
  }
  // Layout: <cache>/v1/<arch>/<uri>-<key16>.{cubin,json}
  fs::path base =
      dir.path() / "cache" / "v1" / "sm_90a" / (spec.uri + "-" + first.meta.key.substr(0, 16));
  CHECK(fs::exists(base.string() + ".cubin"));
  CHECK(fs::exists(base.string() + ".json"));
  CHECK(first.cubin_path == base.string() + ".cubin");
  JitCore again(settings_in(dir));
  Artifact second = again.build(spec, kSm90a);
  CHECK(second.source == ArtifactSource::kDisk);
  CHECK(again.stats().compiles == 0);
  CHECK(second.cubin == first.cubin);
  CHECK(second.meta.key == first.meta.key);
}

TEST_CASE("jit: generated sources are written only when asked for", "[jit]") {
  TempDir dir;
  JitCore quiet(settings_in(dir));
  const Spec spec = small_spec();
  quiet.build(spec, kSm90a);
  CHECK_FALSE(fs::exists(dir.path() / "cache" / "generated"));
}

TEST_CASE("jit: generated sources and a build manifest are written for inspection", "[jit]") {
  TempDir dir;
  Settings s = settings_in(dir);
  s.verbose = true;  // as KJIT_JIT_VERBOSE (or KJIT_JIT_DEBUG, or KJIT_GEN_DIR) asks
  JitCore core(s);
  Spec spec = small_spec();
  core.build(spec, kSm90a);
  fs::path gen = dir.path() / "cache" / "generated" / spec.uri;
  CHECK(util::read_file(gen / (spec.uri + ".cu")) == main_source(spec));
  CHECK(fs::exists(gen / "kernels" / "norm" / "rmsnorm.cuh"));
  auto manifest = util::read_file(gen / "manifest-sm_90a.json");
  REQUIRE(manifest);
  CHECK(manifest->find("--gpu-architecture=sm_90a") != std::string::npos);
  CHECK(manifest->find("norm/rmsnorm.cuh") != std::string::npos);
  // Unchanged content is not rewritten (mtime stays).
  auto before = fs::last_write_time(gen / (spec.uri + ".cu"));
  JitCore other(s);
  other.build(spec, ArchTarget{8, 0, false});
  CHECK(fs::last_write_time(gen / (spec.uri + ".cu")) == before);
  CHECK(fs::exists(gen / "manifest-sm_80.json"));
}

TEST_CASE("jit: KJIT_GEN_DIR-style override puts generated sources elsewhere", "[jit]") {
  TempDir dir;
  Settings s = settings_in(dir);
  s.gen_dir = dir.path() / "gen";
  s.gen_dir_explicit = true;
  s.disk_cache = false;
  JitCore core(s);
  core.build(small_spec(), kSm90a);
  CHECK(fs::exists(dir.path() / "gen" / small_spec().uri / (small_spec().uri + ".cu")));
  CHECK_FALSE(fs::exists(dir.path() / "cache"));
}

TEST_CASE("jit: disabled JIT fails naming the URI, then serves a populated cache", "[jit]") {
  TempDir dir;
  Spec spec = small_spec();
  Settings off = settings_in(dir);
  off.disable_jit = true;
  {
    JitCore core(off);
    try {
      core.build(spec, kSm90a);
      FAIL("compiled with JIT disabled");
    } catch (const Error& e) {
      CHECK(e.status() == KJIT_ERROR_JIT_DISABLED);
      CHECK(std::string(e.what()).find(spec.uri) != std::string::npos);
    }
    CHECK(core.stats().compiles == 0);
    CHECK(count_files(dir.path(), ".cubin") == 0);
  }
  JitCore(settings_in(dir)).build(spec, kSm90a);
  JitCore core(off);
  CHECK(core.build(spec, kSm90a).source == ArtifactSource::kDisk);
}

TEST_CASE("jit: KJIT_JIT_CACHE=0 neither reads nor writes the disk", "[jit]") {
  TempDir dir;
  Spec spec = small_spec();
  JitCore(settings_in(dir)).build(spec, kSm90a);  // populate
  Settings nocache = settings_in(dir);
  nocache.disk_cache = false;
  fs::remove_all(dir.path() / "cache" / "generated");
  JitCore core(nocache);
  CHECK(core.build(spec, kSm90a).source == ArtifactSource::kCompiled);  // did not read
  CHECK(core.stats().compiles == 1);
  CHECK(count_files(dir.path(), ".cubin") == 1);  // did not write another
  CHECK_FALSE(fs::exists(dir.path() / "cache" / "generated"));
}

TEST_CASE("jit: an invalid disk entry is rebuilt, never loaded", "[jit]") {
  TempDir dir;
  Spec spec = small_spec();
  Artifact good = JitCore(settings_in(dir)).build(spec, kSm90a);
  std::string cubin_path = good.cubin_path.string();

  SECTION("flipped byte in the cubin") {
    std::string bytes = *util::read_file(cubin_path);
    bytes[bytes.size() / 2] ^= 0x5a;
    util::write_file_atomic(cubin_path, bytes);
  }
  SECTION("truncated cubin") {
    std::string bytes = *util::read_file(cubin_path);
    util::write_file_atomic(cubin_path, bytes.substr(0, bytes.size() / 3));
  }
  SECTION("metadata that is not JSON") {
    util::write_file_atomic(good.cubin_path.replace_extension(".json"), "{ not json");
  }
  SECTION("metadata of another kjit version") {
    fs::path json = good.cubin_path;
    json.replace_extension(".json");
    std::string text = *util::read_file(json);
    auto pos = text.find("\"kjit_version\": \"");
    REQUIRE(pos != std::string::npos);
    text.replace(pos, 17, "\"kjit_version\": \"9");
    util::write_file_atomic(json, text);
  }
  SECTION("cubin missing") {
    fs::remove(cubin_path);
  }

  JitCore core(settings_in(dir));
  Artifact rebuilt = core.build(spec, kSm90a);
  CHECK(rebuilt.source == ArtifactSource::kCompiled);
  CHECK(core.stats().compiles == 1);
  CHECK(rebuilt.meta.key == good.meta.key);
  // And the repaired entry now loads.
  JitCore after(settings_in(dir));
  CHECK(after.build(spec, kSm90a).source == ArtifactSource::kDisk);
}

TEST_CASE("jit: invalid entry under disabled JIT is a clear error", "[jit]") {
  TempDir dir;
  Spec spec = small_spec();
  Artifact good = JitCore(settings_in(dir)).build(spec, kSm90a);
  std::string bytes = *util::read_file(good.cubin_path);
  bytes[100] ^= 1;
  util::write_file_atomic(good.cubin_path, bytes);
  Settings off = settings_in(dir);
  off.disable_jit = true;
  JitCore core(off);
  try {
    core.build(spec, kSm90a);
    FAIL("loaded a corrupt entry");
  } catch (const Error& e) {
    CHECK(e.status() == KJIT_ERROR_JIT_DISABLED);
    CHECK(std::string(e.what()).find("hash") != std::string::npos);
  }
}

TEST_CASE("jit: a spec is never compiled for a family it excludes", "[jit]") {
  TempDir dir;
  JitCore core(settings_in(dir));
  Spec spec = small_spec();
  spec.arch_families = {"sm_90a"};
  try {
    core.build(spec, ArchTarget{8, 0, false});
    FAIL("compiled for an excluded target");
  } catch (const Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
  }
  CHECK(core.stats().compiles == 0);
}

TEST_CASE("jit: compile errors carry the URI and the NVRTC log", "[jit]") {
  TempDir dir;
  JitCore core(settings_in(dir));
  Spec spec = small_spec();
  spec.config += "\nthis_is_not_cuda;\n";
  try {
    core.build(spec, kSm90a);
    FAIL("compiled garbage");
  } catch (const Error& e) {
    CHECK(e.status() == KJIT_ERROR_COMPILE);
    std::string m = e.what();
    CHECK(m.find(spec.uri) != std::string::npos);
    CHECK(m.find("this_is_not_cuda") != std::string::npos);
  }
  CHECK(count_files(dir.path(), ".cubin") == 0);
}

TEST_CASE("jit: KJIT_KERNEL_DIR reads kernels from disk and an edit changes the key", "[jit]") {
  TempDir dir;
  fs::copy(fs::path(KJIT_SOURCE_DIR) / "kernels", dir.path() / "kernels",
           fs::copy_options::recursive);
  ScopedEnv env("KJIT_KERNEL_DIR", (dir.path() / "kernels").c_str());
  JitCore core(settings_in(dir));
  Artifact a = core.build(small_spec(), kSm90a);
  {
    std::ofstream f(dir.path() / "kernels" / "norm" / "rmsnorm.cuh", std::ios::app);
    f << "\n// edited\n";
  }
  Artifact b = core.build(small_spec(), kSm90a);
  CHECK(a.meta.key != b.meta.key);
  CHECK(b.source == ArtifactSource::kCompiled);
  CHECK(core.stats().compiles == 2);
  ScopedEnv bad("KJIT_KERNEL_DIR", (dir.path() / "nowhere").c_str());
  CHECK_THROWS_AS(core.build(small_spec(), kSm90a), Error);
}

TEST_CASE("jit: an unwritable cache still serves compiles from memory", "[jit]") {
  TempDir dir;
  // A cache dir below a regular file cannot be created, even by root (read-only bits are not
  // enough under root, which is how CI runs).
  util::write_file_atomic(dir.path() / "file", "x");
  Settings s = settings_in(dir);
  s.cache_dir = dir.path() / "file" / "cache";
  s.gen_dir = s.cache_dir / "generated";
  JitCore core(s);
  Artifact a = core.build(small_spec(), kSm90a);
  CHECK(a.source == ArtifactSource::kCompiled);
  CHECK(a.cubin_path.empty());
  CHECK(a.cubin.size() > 1000);
}

TEST_CASE("jit: successive compiles in one process each get their own specialization", "[jit]") {
  // Guards against state leaking between compiles (NVRTC's automatic PCH once served the first
  // spec's generated values to every later compile).
  TempDir dir;
  JitCore core(settings_in(dir));
  struct Want {
    ops::DType dtype;
    int hidden;
    const char* type_mangled;
  };
  for (const Want& w : {Want{ops::DType::kBF16, 4096, "13__nv_bfloat16"},
                        Want{ops::DType::kF32, 4097, "f"}, Want{ops::DType::kF16, 128, "6__half"},
                        Want{ops::DType::kBF16, 65537, "13__nv_bfloat16"}}) {
    ops::RmsNormConfig c = ops::select_rmsnorm(w.dtype, w.hidden, 16);
    Artifact a = core.build(ops::rmsnorm_spec(c), kSm90a);
    REQUIRE(a.source == ArtifactSource::kCompiled);
    const std::string& lowered = a.meta.lowered_names.at(0).second;
    INFO(lowered);
    std::string args = std::string("I") + w.type_mangled + "Li" + std::to_string(w.hidden) + "ELi" +
                       std::to_string(c.vec) + "ELi" + std::to_string(c.threads_per_row) + "ELi" +
                       std::to_string(c.rows_per_block) + "E";
    CHECK(lowered.find(args) != std::string::npos);
    // The cubin holds that very kernel.
    CHECK(a.cubin.find(lowered) != std::string::npos);
  }
  CHECK(core.stats().compiles == 4);
}
