// AOT packages without a GPU: `kjit-cli aot build|verify|list` on a real package of two ops for
// sm_80 + sm_90a, and JitCore::build serving it (checked, refused, falling through) in-process.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "aot/package.hpp"
#include "aot/packages.hpp"
#include "aot/sha256.hpp"
#include "jit/compiler.hpp"
#include "runtime/jit_core.hpp"
#include "cuda/launch.hpp"
#include "kjit/kjit.h"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/norm/norm.hpp"
#include "ops/registry.hpp"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"
#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "tune/packaged_records.hpp"
#include "tune/tune_store.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
using kjit::test::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kOps = "append_paged_kv,act_and_mul";
const jit::ArchTarget kSm80{8, 0, false};
const jit::ArchTarget kSm90{9, 0, false};
const jit::ArchTarget kSm90a{9, 0, true};

struct Run {
  int code = -1;
  std::string out, err;
};

// kjit-cli with extra environment assignments (`env`: "A=1 B=2"), stdout and stderr apart.
Run cli(const std::string& env, const std::string& args) {
  TempDir tmp;
  fs::path err = tmp.path() / "stderr";
  std::string cmd = env + " '" KJIT_CLI_PATH "' " + args + " 2>'" + err.string() + "'";
  Run r;
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  REQUIRE(sh.code != -1);
  r.code = sh.code;
  r.out = sh.out;
  r.err = util::read_file(err).value_or("");
  return r;
}

// A JIT cache beside kjit-cli that every test process shares: the package compiles once per
// build tree, later builds take the same cubins from the cache (same key, same bytes).
std::string shared_cache_env() {
  return "KJIT_CACHE_DIR='" + (fs::path(KJIT_CLI_PATH).parent_path() / "aot-test-cache").string() +
         "'";
}

// The package every test starts from, built once per process: the catalogs of two ops for
// sm_80 and sm_90a.
const fs::path& package() {
  static TempDir dir;
  static fs::path pkg = [] {
    fs::path p = dir.path() / "pkg";
    Run r = cli(shared_cache_env(), "aot build --arch \"8.0 9.0a\" --out '" + p.string() +
                                        "' --ops " + kOps + " -j 2 --json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return p;
  }();
  return pkg;
}

// A private copy to tamper with.
fs::path copy_package(const TempDir& dir) {
  fs::path p = dir.path() / "pkg";
  fs::copy(package(), p, fs::copy_options::recursive);
  return p;
}

std::vector<jit::Spec> catalog_specs() {
  std::vector<jit::Spec> specs;
  std::set<std::string> seen;
  for (const char* name : {"append_paged_kv", "act_and_mul"}) {
    const ops::OpDef* def = ops::find_op(name);
    REQUIRE(def != nullptr);
    for (const auto& row : def->catalog()) {
      jit::Spec s = def->make_spec(row);
      if (seen.insert(s.uri).second) specs.push_back(std::move(s));
    }
  }
  return specs;
}

jit::Settings settings_for(const TempDir& dir, const fs::path& pkg, bool disable_jit) {
  jit::Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  s.artifact_dir = dir.path() / "artifacts";
  if (!pkg.empty()) s.aot_dirs = {pkg};
  s.disable_jit = disable_jit;
  return s;
}

json read_json(const fs::path& p) {
  auto text = util::read_file(p);
  REQUIRE(text);
  return json::parse(*text);
}

void write_json(const fs::path& p, const json& j) {
  util::write_file_atomic(p, j.dump(2));
}

jit::Spec packaged_spec() {
  return ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kBF16, 128, 16));
}

// The message of the kjit::Error `f` throws, checking its status.
template <class F>
std::string error_of(F&& f, kjit_status status) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.status() == status);
    return e.what();
  }
  FAIL("no error");
  return "";
}

size_t count_files(const fs::path& dir, const std::string& ext) {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec)) n += e.path().extension() == ext;
  return n;
}

// Path -> (size, mtime) of everything under `dir`.
std::map<std::string, std::pair<uintmax_t, long long>> snapshot(const fs::path& dir) {
  std::map<std::string, std::pair<uintmax_t, long long>> out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    long long t = e.last_write_time().time_since_epoch().count();
    out[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, t};
  }
  return out;
}

}  // namespace

TEST_CASE("aot: build writes cubins, their metadata and an index with SHA-256s", "[aot]") {
  const fs::path& pkg = package();
  json idx = read_json(pkg / "index.json");
  CHECK(idx.at("format") == "kjit-aot-package");
  CHECK(idx.at("format_version") == aot::kPackageFormatVersion);
  CHECK(idx.at("kjit_version") == jit::kjit_version());
  CHECK(idx.at("nvrtc_version") == jit::nvrtc_version());
  CHECK(idx.at("archs") == json({"sm_80", "sm_90a"}));
  auto specs = catalog_specs();
  REQUIRE(idx.at("entries").size() == specs.size() * 2);

  std::map<std::string, const jit::Spec*> by_uri;
  for (const auto& s : specs) by_uri[s.uri] = &s;
  jit::Settings settings;
  std::set<std::string> seen;
  for (const auto& e : idx.at("entries")) {
    std::string uri = e.at("uri"), arch = e.at("arch"), key = e.at("key");
    INFO(uri << " " << arch);
    CHECK(seen.insert(arch + uri).second);
    REQUIRE(by_uri.count(uri) == 1);
    std::string stem = arch + "/" + uri + "-" + key.substr(0, 16);
    CHECK(e.at("file") == stem + ".cubin");
    CHECK(e.at("metadata") == stem + ".json");
    auto cubin = util::read_file(pkg / stem.append(".cubin"));
    REQUIRE(cubin);
    CHECK(cubin->compare(0, 4,
                         "\x7f"
                         "ELF") == 0);
    CHECK(e.at("size") == cubin->size());
    CHECK(e.at("sha256") == aot::sha256_hex(*cubin));
    auto meta_text = util::read_file(pkg / e.at("metadata").get<std::string>());
    REQUIRE(meta_text);
    CHECK(e.at("metadata_sha256") == aot::sha256_hex(*meta_text));
    jit::Metadata meta = jit::Metadata::from_json(*meta_text);
    CHECK(meta.key == key);
    CHECK(meta.inputs.arch == arch);
    CHECK(meta.lowered_names.size() >= 1);
    // The key this kjit computes for the spec: a package from this build matches exactly.
    auto target = jit::ArchTarget::parse(arch);
    const jit::Spec& spec = *by_uri[uri];
    aot::Wanted w = aot::make_wanted(spec, jit::sources_for(spec.kernel_dirs), *target, settings);
    CHECK(w.key == key);
    CHECK(w.content_key == e.at("content_key"));
  }

  Run list = cli("", "aot list --json '" + pkg.string() + "'");
  REQUIRE(list.code == 0);
  CHECK(json::parse(list.out).at("entries").size() == specs.size() * 2);
  Run human = cli("", "aot list '" + pkg.string() + "'");
  CHECK(human.code == 0);
  CHECK(human.out.find(specs[0].uri) != std::string::npos);
  Run verify = cli("", "aot verify --json '" + pkg.string() + "'");
  INFO(verify.out);
  CHECK(verify.code == 0);
  CHECK(json::parse(verify.out).at("checked") == specs.size() * 2);
}

TEST_CASE("aot: KJIT_DISABLE_JIT with a complete package builds every spec with zero compiles",
          "[aot]") {
  TempDir dir;
  jit::JitCore core(settings_for(dir, package(), true));
  size_t n = 0;
  for (const auto& spec : catalog_specs()) {
    for (const auto& t : {kSm80, kSm90a}) {
      jit::Artifact a = core.build(spec, t);
      CHECK(a.source == jit::ArtifactSource::kPackage);
      CHECK(a.meta.inputs.arch == t.sm());
      CHECK(a.cubin_path.parent_path() == package() / t.sm());
      CHECK(util::read_file(a.cubin_path) == a.cubin);
      ++n;
    }
  }
  CHECK(core.stats().compiles == 0);
  CHECK(core.stats().package_hits == static_cast<long>(n));
  CHECK(count_files(dir.path(), ".cubin") == 0);  // nothing went to the JIT cache
}

TEST_CASE("aot: an incomplete package under KJIT_DISABLE_JIT fails naming the artifact and dirs",
          "[aot]") {
  TempDir dir;
  jit::Settings s = settings_for(dir, package(), true);
  jit::Spec missing = ops::rmsnorm_spec(ops::select_rmsnorm(ops::DType::kBF16, 4096, 16));
  {
    jit::JitCore core(s);
    std::string m = error_of([&] { core.build(missing, kSm90a); }, KJIT_ERROR_JIT_DISABLED);
    CHECK(m.find(missing.uri) != std::string::npos);
    CHECK(m.find("sm_90a") != std::string::npos);
    CHECK(m.find(package().string()) != std::string::npos);
    CHECK(m.find((dir.path() / "artifacts").string()) != std::string::npos);
    CHECK(m.find("no entry for sm_90a") != std::string::npos);
    CHECK(m.find("KJIT_ARTIFACT_URL is unset") != std::string::npos);
    CHECK(core.stats().compiles == 0);
  }
  s.offline = true;
  s.artifact_url = "file:///nowhere";
  s.artifact_auto_fetch = true;
  jit::JitCore offline(s);
  std::string m = error_of([&] { offline.build(missing, kSm90a); }, KJIT_ERROR_JIT_DISABLED);
  CHECK(m.find("KJIT_OFFLINE=1") != std::string::npos);
  CHECK(m.find(missing.uri) != std::string::npos);
  // With JIT on the same miss compiles.
  s.disable_jit = false;
  jit::JitCore on(s);
  CHECK(on.build(missing, kSm90a).source == jit::ArtifactSource::kCompiled);
  CHECK(on.stats().compiles == 1);
}

TEST_CASE("aot: verify and load refuse a flipped byte and a tampered index", "[aot]") {
  TempDir dir;
  fs::path pkg = copy_package(dir);
  json idx = read_json(pkg / "index.json");
  const json entry = idx.at("entries").at(3);
  const fs::path cubin = pkg / entry.at("file").get<std::string>();
  jit::Spec spec;
  for (const auto& s : catalog_specs()) {
    if (s.uri == entry.at("uri")) spec = s;
  }
  REQUIRE(!spec.uri.empty());
  auto target = *jit::ArchTarget::parse(entry.at("arch").get<std::string>());

  SECTION("a flipped byte in a cubin") {
    std::string bytes = *util::read_file(cubin);
    bytes[bytes.size() / 2] ^= 0x20;
    util::write_file_atomic(cubin, bytes);
    Run v = cli("", "aot verify '" + pkg.string() + "'");
    CHECK(v.code == 1);
    CHECK(v.out.find("FAIL") != std::string::npos);
    CHECK(v.out.find(entry.at("file").get<std::string>()) != std::string::npos);
    CHECK(v.out.find("SHA-256") != std::string::npos);
    CHECK(v.out.find("1 problem(s)") != std::string::npos);

    jit::JitCore off(settings_for(dir, pkg, true));
    std::string m = error_of([&] { off.build(spec, target); }, KJIT_ERROR_JIT_DISABLED);
    CHECK(m.find("SHA-256") != std::string::npos);
    jit::JitCore on(settings_for(dir, pkg, false));
    jit::Artifact a = on.build(spec, target);
    CHECK(a.source == jit::ArtifactSource::kCompiled);  // fell through to JIT, never loaded
    CHECK(a.cubin != bytes);
    CHECK(on.stats().package_hits == 0);
  }
  SECTION("an index whose SHA-256 was edited") {
    idx["entries"][3]["sha256"] = std::string(64, 'a');
    write_json(pkg / "index.json", idx);
    Run v = cli("", "aot verify --json '" + pkg.string() + "'");
    CHECK(v.code == 1);
    json out = json::parse(v.out);
    REQUIRE(out.at("problems").size() == 1);
    CHECK(out.at("problems")[0].at("problem").get<std::string>().find("SHA-256") !=
          std::string::npos);
    jit::JitCore off(settings_for(dir, pkg, true));
    error_of([&] { off.build(spec, target); }, KJIT_ERROR_JIT_DISABLED);
  }
  SECTION("an index entry pointing outside the package") {
    idx["entries"][3]["file"] = "../../etc/passwd";
    write_json(pkg / "index.json", idx);
    Run v = cli("", "aot verify '" + pkg.string() + "'");
    CHECK(v.code == 1);
    CHECK(v.out.find("invalid package index") != std::string::npos);
    jit::JitCore off(settings_for(dir, pkg, true));
    std::string m = error_of([&] { off.build(spec, target); }, KJIT_ERROR_JIT_DISABLED);
    CHECK(m.find("invalid package index") != std::string::npos);
  }
  SECTION("metadata swapped for another entry's") {
    const json other = idx.at("entries").at(4);
    fs::copy_file(pkg / other.at("metadata").get<std::string>(),
                  pkg / entry.at("metadata").get<std::string>(),
                  fs::copy_options::overwrite_existing);
    idx["entries"][3]["metadata_sha256"] = other.at("metadata_sha256");
    idx["entries"][3]["metadata_size"] = other.at("metadata_size");
    write_json(pkg / "index.json", idx);
    Run v = cli("", "aot verify '" + pkg.string() + "'");
    CHECK(v.code == 1);
    CHECK(v.out.find("metadata names") != std::string::npos);
    jit::JitCore off(settings_for(dir, pkg, true));
    error_of([&] { off.build(spec, target); }, KJIT_ERROR_JIT_DISABLED);
  }
}

// nlohmann's get<int>() of 3e70 is undefined behaviour and of -1 into a size wraps: every integer
// of index.json is read strictly (found by fuzz_package_index, docs/reliability.md).
TEST_CASE("aot: index.json integers that are floats, negative or too large are refused", "[aot]") {
  aot::PackageIndex valid;
  valid.kjit_version = jit::kjit_version();
  valid.nvrtc_version = "13.0";
  valid.archs = {"sm_90"};
  aot::PackageEntry e;
  e.uri = "argmax_dtype_bf16";
  e.op = "argmax";
  e.arch = "sm_90";
  e.key = std::string(32, 'a');
  e.content_key = std::string(32, 'b');
  e.file = aot::entry_stem(e.arch, e.uri, e.key) + ".cubin";
  e.metadata = aot::entry_stem(e.arch, e.uri, e.key) + ".json";
  e.size = 11040;
  e.metadata_size = 1547;
  e.sha256 = std::string(64, 'c');
  e.metadata_sha256 = std::string(64, 'd');
  valid.entries = {e};
  const json base = json::parse(valid.to_json());
  // The unedited index reads back, with the largest size there is.
  json big = base;
  big["entries"][0]["size"] = UINT64_MAX;
  CHECK(aot::PackageIndex::from_json(big.dump()).entries.at(0).size == UINT64_MAX);

  struct Case {
    const char* field;  // "format_version", or a field of entries[0]
    json value;
    const char* named;  // as the message names the field
    const char* shown;  // as the message shows the value
  };
  const std::vector<Case> cases = {
      {"format_version", 3e70, "format_version", "3e+70"},
      {"format_version", 1.0, "format_version", "1.0"},
      {"format_version", 1.5, "format_version", "1.5"},
      {"format_version", int64_t{1} << 31, "format_version", "2147483648"},
      {"format_version", "1", "format_version", "\"1\""},
      {"format_version", true, "format_version", "true"},
      {"size", -1, "entries[0].size", "-1"},
      {"size", INT64_MIN, "entries[0].size", "-9223372036854775808"},
      {"size", 18446744073709551616.0, "entries[0].size", "1.8446744073709552e+19"},
      {"size", 11040.5, "entries[0].size", "11040.5"},
      {"metadata_size", -1547, "entries[0].metadata_size", "-1547"},
      {"metadata_size", 1e300, "entries[0].metadata_size", "1e+300"},
      {"metadata_size", nullptr, "entries[0].metadata_size", "null"},
  };
  for (const Case& c : cases) {
    json j = base;
    (std::string(c.field) == "format_version" ? j : j["entries"][0])[c.field] = c.value;
    const std::string m =
        error_of([&] { aot::PackageIndex::from_json(j.dump()); }, KJIT_ERROR_CACHE);
    INFO(c.field << " = " << c.value.dump() << ": " << m);
    CHECK(m == std::string("invalid package index: ") + c.named +
                   " must be an integer in range, got " + c.shown);
  }
  // An integer of the wrong value is read, then refused as such.
  json old = base;
  old["format_version"] = -1;
  CHECK(error_of([&] { aot::PackageIndex::from_json(old.dump()); }, KJIT_ERROR_CACHE) ==
        "package format version -1 is not supported (this kjit reads 1)");
  // The input the fuzzer found, as the corpus replays it.
  const auto found = util::read_file(
      fs::path(KJIT_SOURCE_DIR) / "tests/fuzz/corpus/fuzz_package_index/format_version_float.json");
  REQUIRE(found);
  CHECK(error_of([&] { aot::PackageIndex::from_json(*found); }, KJIT_ERROR_CACHE)
            .find("format_version must be an integer in range") != std::string::npos);
}

TEST_CASE("aot: a package of another kjit major.minor is refused naming both versions", "[aot]") {
  TempDir dir;
  fs::path pkg = copy_package(dir);
  json idx = read_json(pkg / "index.json");
  jit::Spec spec = packaged_spec();

  SECTION("another minor version: refused unless the bypass is set") {
    idx["kjit_version"] = "0.99.0";
    write_json(pkg / "index.json", idx);
    jit::Settings s = settings_for(dir, pkg, true);
    {
      jit::JitCore core(s);
      std::string m = error_of([&] { core.build(spec, kSm90a); }, KJIT_ERROR_JIT_DISABLED);
      CHECK(m.find("0.99.0") != std::string::npos);
      CHECK(m.find(jit::kjit_version()) != std::string::npos);
      CHECK(m.find("KJIT_AOT_ALLOW_VERSION_MISMATCH") != std::string::npos);
    }
    s.disable_jit = false;
    {
      jit::JitCore core(s);
      CHECK(core.build(spec, kSm90a).source == jit::ArtifactSource::kCompiled);
    }
    s.disable_jit = true;
    s.aot_allow_version_mismatch = true;
    jit::JitCore bypass(s);
    CHECK(bypass.build(spec, kSm90a).source == jit::ArtifactSource::kPackage);

    Run v = cli("", "aot verify '" + pkg.string() + "'");
    CHECK(v.code == 1);
    CHECK(v.out.find("0.99.0") != std::string::npos);
    CHECK(v.out.find("major.minor") != std::string::npos);
  }
  SECTION("another patch release of the same major.minor is used") {
    std::string v = jit::kjit_version();
    idx["kjit_version"] = v.substr(0, v.rfind('.')) + ".77";
    write_json(pkg / "index.json", idx);
    jit::JitCore core(settings_for(dir, pkg, true));
    CHECK(core.build(spec, kSm90a).source == jit::ArtifactSource::kPackage);
  }
}

TEST_CASE("aot: a cubin built by another NVRTC from the same sources is used", "[aot]") {
  // The documented rule: the NVRTC version is recorded but is no load condition, since a cubin
  // is SASS for its arch whoever compiled it. Rewrite one entry as if NVRTC 12.9 had built it.
  TempDir dir;
  fs::path pkg = copy_package(dir);
  json idx = read_json(pkg / "index.json");
  jit::Spec spec = packaged_spec();
  size_t i = 0;
  while (!(idx["entries"][i]["uri"] == spec.uri && idx["entries"][i]["arch"] == "sm_90a")) ++i;
  json& e = idx["entries"][i];
  jit::Metadata meta =
      jit::Metadata::from_json(*util::read_file(pkg / e.at("metadata").get<std::string>()));
  std::string cubin = *util::read_file(pkg / e.at("file").get<std::string>());
  meta.inputs.nvrtc_version = "12.9";
  meta.key = jit::compute_key(meta.inputs).hex();
  std::string stem = aot::entry_stem("sm_90a", spec.uri, meta.key);
  std::string meta_text = meta.to_json();
  util::write_file_atomic(pkg / (stem + ".cubin"), cubin);
  util::write_file_atomic(pkg / (stem + ".json"), meta_text);
  e["key"] = meta.key;
  e["file"] = stem + ".cubin";
  e["metadata"] = stem + ".json";
  e["metadata_size"] = meta_text.size();
  e["metadata_sha256"] = aot::sha256_hex(meta_text);
  write_json(pkg / "index.json", idx);

  jit::JitCore core(settings_for(dir, pkg, true));
  jit::Artifact a = core.build(spec, kSm90a);
  CHECK(a.source == jit::ArtifactSource::kPackage);
  CHECK(a.meta.inputs.nvrtc_version == "12.9");
  CHECK(a.meta.key !=
        aot::make_wanted(spec, jit::sources_for(spec.kernel_dirs), kSm90a, jit::Settings{}).key);
  // verify reports the index/metadata disagreement on the NVRTC version of that one entry.
  Run v = cli("", "aot verify '" + pkg.string() + "'");
  CHECK(v.code == 1);
  CHECK(v.out.find("NVRTC 12.9") != std::string::npos);
}

TEST_CASE("aot: entries for other archs or other options are ignored, never loaded", "[aot]") {
  TempDir dir;
  jit::Spec spec = packaged_spec();
  SECTION("no entry for the requested arch") {
    jit::JitCore off(settings_for(dir, package(), true));
    for (const auto& t : {kSm90, jit::ArchTarget{8, 6, false}}) {
      std::string m = error_of([&] { off.build(spec, t); }, KJIT_ERROR_JIT_DISABLED);
      CHECK(m.find("no entry for " + t.sm()) != std::string::npos);
    }
    jit::JitCore on(settings_for(dir, package(), false));
    CHECK(on.build(spec, kSm90).source == jit::ArtifactSource::kCompiled);
    CHECK(on.build(spec, kSm90).meta.inputs.arch == "sm_90");
  }
  SECTION("a device of compute capability 9.0 takes the sm_90a cubin for a plain sm_90 load") {
    jit::Settings s = settings_for(dir, package(), true);
    aot::Packages packages(s);
    auto sources = jit::sources_for(spec.kernel_dirs);
    std::vector<aot::Wanted> wanted = {aot::make_wanted(spec, sources, kSm90, s),
                                       aot::make_wanted(spec, sources, kSm90a, s)};
    auto f = packages.find(spec.uri, wanted, nullptr);
    REQUIRE(f);
    CHECK(f->meta.inputs.arch == "sm_90a");
    CHECK_FALSE(packages.find(spec.uri, {wanted[0]}, nullptr));
  }
  SECTION("other semantic options (KJIT_JIT_LINEINFO) than the package was built with") {
    jit::Settings s = settings_for(dir, package(), true);
    s.lineinfo = true;
    jit::JitCore off(s);
    std::string m = error_of([&] { off.build(spec, kSm90a); }, KJIT_ERROR_JIT_DISABLED);
    CHECK(m.find("other kernel sources or options") != std::string::npos);
  }
}

TEST_CASE("aot: a read-only package dir serves loads and is never written", "[aot]") {
  TempDir dir;
  fs::path pkg = copy_package(dir);
  auto before = snapshot(pkg);
  for (auto& e : fs::recursive_directory_iterator(pkg)) {
    fs::permissions(e.path(),
                    fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
  }
  fs::permissions(pkg,
                  fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                      fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace);
  jit::JitCore core(settings_for(dir, pkg, true));
  for (const auto& spec : catalog_specs()) {
    CHECK(core.build(spec, kSm80).source == jit::ArtifactSource::kPackage);
  }
  CHECK(core.stats().compiles == 0);
  CHECK(cli("", "aot verify '" + pkg.string() + "'").code == 0);
  CHECK(snapshot(pkg) == before);  // root ignores permission bits: check nothing was written
}

namespace {

// The kernels a read-only host asks for when it runs decode attention with `tactic` at the
// bucket below (fp16, GQA 32 / 8, head_dim 64, 8 x 4096 tokens, 132 SMs): the plan of the tactic,
// as kjit_batch_decode_plan makes it, run with 16-byte rows and 32- or 64-bit offsets.
std::vector<jit::Spec> decode_run_specs(const std::string& tactic) {
  const DLDataType f16{kDLFloat, 16, 1};
  std::vector<int32_t> ptr(9);
  for (int b = 0; b <= 8; ++b) ptr[static_cast<size_t>(b)] = b * 256;
  const std::optional<ops::DecodeTactic> t = ops::DecodeTactic::parse(tactic);
  REQUIRE(t.has_value());
  ops::DecodeConfig cfg = ops::plan_batch_decode(ptr.data(), 8, 32, 8, 64, 16, KJIT_KV_LAYOUT_NHD,
                                                 f16, f16, 0.0f, 0.0f, -1, 0, 132, 0, &*t)
                              .cfg;
  cfg.cp_bytes = 16;
  std::vector<jit::Spec> out{ops::decode_spec(cfg)};
  cfg.addr = 1;
  out.push_back(ops::decode_spec(cfg));
  return out;
}

// The kernel kjit_gemm runs for `tactic` on an H200.
jit::Spec gemm_run_spec(const std::string& tactic) {
  const std::optional<ops::GemmTactic> t = ops::GemmTactic::parse(tactic);
  REQUIRE(t.has_value());
  ops::GemmTarget h200;
  h200.cc_major = 9;
  h200.max_smem_optin = cuda::kHopperSmemOptin;
  // The bucket's beta is 0 and kjit_gemm's outs are TMA-ready: the TMA-store epilogue's kernel.
  h200.tma_ok = h200.cp_async_ok = h200.tma_store_ok = true;
  return ops::gemm_spec(ops::gemm_config_of(*t, ops::DType::kBF16, ops::DType::kBF16, h200));
}

}  // namespace

TEST_CASE("aot: a package carries the kernels its tuning records' tactics run", "[aot][tune]") {
  // A cache of its own (its records must not reach the packages other tests build), beside
  // kjit-cli so the kernels compile once per build tree.
  const fs::path cache = fs::path(KJIT_CLI_PATH).parent_path() / "aot-tactic-test-cache";
  const tune::TuneStore store(cache / "tuning");
  store.clear();
  const tune::Fingerprint fp{"NVIDIA H200", 132, 13000, jit::nvrtc_version(), jit::kjit_version()};
  auto put = [&](const char* op, int space, const std::string& bucket, const std::string& tactic,
                 const char* timing) {
    const tune::TuneKey key{op, space, bucket, timing};
    tune::TuneRecord rec;
    rec.tactic = tactic;
    rec.default_tactic = tactic;
    rec.when = "2026-12-05T00:00:00Z";
    rec.tried = {{tactic, 10.0, 9.9, 10.1, 15}};
    store.put(fp, key, rec);
    return key;
  };
  const std::string decode_bucket =
      "q=fp16,kv=fp16,batch=8,kv_len=4096,kv_heads=8,group=4,head_dim=64,page=16,layout=nhd,"
      "sms=132";
  // Outside the catalogs: the cluster merge at fp16 / head_dim 64, a 3-stage 256-wide wgmma tile.
  const tune::TuneKey decode_key = put("decode_attention", ops::kDecodeTacticSpace, decode_bucket,
                                       "split4_cluster", "eager-cold");
  const tune::TuneKey gemm_key =
      put("gemm", ops::kGemmTacticSpace,
          ops::gemm_bucket(ops::DType::kBF16, ops::DType::kBF16, 16, 4096, 4096, false, false),
          "sm90_bn256_s3", "eager-cold");
  const tune::TuneKey bad_key =
      put("decode_attention", ops::kDecodeTacticSpace, decode_bucket, "split4_warp", "graph-cold");
  std::vector<jit::Spec> wanted = decode_run_specs("split4_cluster");
  wanted.push_back(gemm_run_spec("sm90_bn256_s3"));

  TempDir dir;
  const fs::path pkg = dir.path() / "pkg";
  const std::string env = "KJIT_CACHE_DIR='" + cache.string() + "'";
  Run b = cli(env, "aot build --arch 9.0a --out '" + pkg.string() +
                       "' --ops chain_speculative_sampling -j 2 --json");
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  const json j = json::parse(b.out);
  CHECK(j.at("tactic_kernels") == wanted.size());
  CHECK(j.at("tuning_records") == 2);
  // (d) The record whose tactic does not map is reported and left out; the others are packed.
  REQUIRE(j.at("tuning_skipped").size() == 1);
  const json& skipped = j.at("tuning_skipped")[0];
  CHECK(skipped.at("op") == "decode_attention");
  CHECK(skipped.at("tactic") == "split4_warp");
  CHECK(skipped.at("why").get<std::string>().find("not a decode_attention tactic") !=
        std::string::npos);
  CHECK(skipped.at("file") ==
        "tuning/" + store.path_of(fp, bad_key).lexically_relative(store.root()).generic_string());

  // (a) The index lists the tactics' kernels.
  const aot::PackageIndex idx = aot::PackageIndex::from_json(*util::read_file(pkg / "index.json"));
  for (const jit::Spec& s : wanted) {
    INFO(s.uri);
    CHECK(idx.find(s.uri, "sm_90a") != nullptr);
  }
  CHECK(idx.tuning.size() == 2);
  // (b) verify passes, comparing those entries' sources too.
  Run v = cli("", "aot verify --json '" + pkg.string() + "'");
  INFO(v.out);
  CHECK(v.code == 0);
  CHECK(v.out.find("not in this kjit's catalogs") == std::string::npos);

  {  // A package whose index lost a record's kernel fails verify, naming the record and kernel.
    TempDir copy;
    const fs::path lacking = copy.path() / "pkg";
    fs::copy(pkg, lacking, fs::copy_options::recursive);
    aot::PackageIndex edited = idx;
    const std::string gemm_uri = wanted.back().uri;
    edited.entries.erase(
        std::remove_if(edited.entries.begin(), edited.entries.end(),
                       [&](const aot::PackageEntry& e) { return e.uri == gemm_uri; }),
        edited.entries.end());
    util::write_file_atomic(lacking / "index.json", edited.to_json());
    Run bad = cli("", "aot verify '" + lacking.string() + "'");
    INFO(bad.out);
    CHECK(bad.code == 1);
    CHECK(bad.out.find("runs " + gemm_uri + " on sm_90a, which the package lacks") !=
          std::string::npos);
  }

  // (c) A read-only host with a fresh cache: the records come from the package, and the kernels
  // of their tactics load from it with JIT disabled, no compile.
  std::unique_ptr<tune::TuneStore> host = tune::make_store(dir.path() / "fresh", {pkg});
  const std::optional<tune::TuneRecord> dr = host->find(fp, decode_key);
  const std::optional<tune::TuneRecord> gr = host->find(fp, gemm_key);
  REQUIRE(dr.has_value());
  REQUIRE(gr.has_value());
  CHECK_FALSE(host->find(fp, bad_key).has_value());
  std::vector<jit::Spec> asked = decode_run_specs(dr->tactic);
  asked.push_back(gemm_run_spec(gr->tactic));
  jit::JitCore core(settings_for(dir, pkg, true));
  for (const jit::Spec& s : asked) {
    INFO(s.uri);
    CHECK(core.build(s, kSm90a).source == jit::ArtifactSource::kPackage);
  }
  CHECK(core.stats().compiles == 0);
  CHECK(core.stats().package_hits == static_cast<long>(asked.size()));

  // The summary line says what was added and what was left out.
  Run text = cli(env, "aot build --arch 9.0a --out '" + (dir.path() / "pkg2").string() +
                          "' --ops chain_speculative_sampling");
  INFO(text.out << text.err);
  CHECK(text.code == 0);
  CHECK(text.out.find("2 tuning records (3 tactic kernels added beside the catalogs, 1 records "
                      "not packed)") != std::string::npos);
  CHECK(text.err.find("split4_warp) not packed: 'split4_warp' is not a decode_attention tactic") !=
        std::string::npos);
  // --no-tuning packs neither the records nor their kernels.
  Run none = cli(env, "aot build --arch 9.0a --out '" + (dir.path() / "pkg3").string() +
                          "' --ops chain_speculative_sampling --no-tuning --json");
  REQUIRE(none.code == 0);
  CHECK(json::parse(none.out).at("tactic_kernels") == 0);
  CHECK(json::parse(none.out).at("tuning_records") == 0);
}

TEST_CASE("aot: command-line mistakes are usage errors and a missing package fails", "[aot][cli]") {
  TempDir dir;
  std::string out = "'" + (dir.path() / "p").string() + "'";
  for (std::string args :
       {"aot build --out " + out, "aot build --arch sm_9x --out " + out,
        "aot build --arch 9.0a --out " + out + " --ops nosuchop", std::string("aot verify"),
        std::string("aot"), std::string("aot fetch --ops nosuchop --arch 9.0a")}) {
    INFO(args);
    CHECK(cli("", args).code == 2);
  }
  Run v = cli("", "aot verify " + out);
  CHECK(v.code == 1);
  CHECK(v.out.find("index.json") != std::string::npos);
  Run l = cli("", "aot list " + out);
  CHECK(l.code == 1);
  CHECK(l.err.find("index.json") != std::string::npos);
}

TEST_CASE("aot: settings of packages and fetching come from the environment", "[aot][settings]") {
  using kjit::test::ScopedEnv;
  ScopedEnv cache("KJIT_CACHE_DIR", "/tmp/kjit-c");
  ScopedEnv aot("KJIT_AOT_DIR", "/opt/a::/opt/b");
  ScopedEnv art("KJIT_ARTIFACT_DIR", nullptr);
  ScopedEnv url("KJIT_ARTIFACT_URL", "https://mirror/kjit");
  ScopedEnv autof("KJIT_ARTIFACT_AUTO_FETCH", "1");
  ScopedEnv jobs("KJIT_ARTIFACT_JOBS", "7");
  ScopedEnv retries("KJIT_ARTIFACT_RETRIES", "0");
  ScopedEnv skip("KJIT_ARTIFACT_SKIP_CHECKSUM", "yes");
  ScopedEnv log("KJIT_ARTIFACT_LOG", "on");
  ScopedEnv offline("KJIT_OFFLINE", "true");
  ScopedEnv allow("KJIT_AOT_ALLOW_VERSION_MISMATCH", "1");
  jit::Settings s = jit::Settings::from_env();
  CHECK(s.aot_dirs == std::vector<fs::path>{"/opt/a", "/opt/b"});
  CHECK(s.artifact_dir == "/tmp/kjit-c/artifacts");
  CHECK(s.artifact_url == "https://mirror/kjit");
  CHECK(s.artifact_auto_fetch);
  CHECK(s.artifact_jobs == 7);
  CHECK(s.artifact_retries == 0);
  CHECK(s.artifact_skip_checksum);
  CHECK(s.artifact_log == "stderr");
  CHECK(s.offline);
  CHECK(s.aot_allow_version_mismatch);
  {
    ScopedEnv dir("KJIT_ARTIFACT_DIR", "/srv/art");
    ScopedEnv bad_jobs("KJIT_ARTIFACT_JOBS", "many");
    ScopedEnv file_log("KJIT_ARTIFACT_LOG", "/tmp/x.log");
    jit::Settings t = jit::Settings::from_env();
    CHECK(t.artifact_dir == "/srv/art");
    CHECK(t.artifact_jobs == 4);  // warned about, default kept
    CHECK(t.artifact_log == "/tmp/x.log");
  }
  ScopedEnv no_aot("KJIT_AOT_DIR", nullptr);
  ScopedEnv no_log("KJIT_ARTIFACT_LOG", "0");
  ScopedEnv too_many("KJIT_ARTIFACT_JOBS", "1000");
  jit::Settings u = jit::Settings::from_env();
  CHECK(u.aot_dirs.empty());
  CHECK(u.artifact_log.empty());
  CHECK(u.artifact_jobs == 4);
}

TEST_CASE("aot: KJIT_ARTIFACT_LOG records where each kernel came from", "[aot]") {
  TempDir dir;
  jit::Settings s = settings_for(dir, package(), true);
  s.artifact_log = (dir.path() / "artifact.log").string();
  jit::Spec spec = packaged_spec();
  jit::Spec missing = ops::rmsnorm_spec(ops::select_rmsnorm(ops::DType::kBF16, 4096, 16));
  {
    jit::JitCore core(s);
    core.build(spec, kSm90a);
    CHECK_THROWS_AS(core.build(missing, kSm90a), Error);
  }
  auto text = util::read_file(dir.path() / "artifact.log");
  REQUIRE(text);
  INFO(*text);
  CHECK(text->find("[kjit artifact] read " + package().string() + "/index.json") !=
        std::string::npos);
  CHECK(text->find(spec.uri + " sm_90a: from KJIT_AOT_DIR " + package().string() +
                   " (exact key)") != std::string::npos);
  CHECK(text->find(missing.uri + " (sm_90a): not in a package") != std::string::npos);
}

// ---- On a GPU (hidden in the unit binary; CTest runs it as "gpu: aot: ...", skipped without one)

TEST_CASE("aot: on a GPU an engine with KJIT_DISABLE_JIT=1 and only a package runs",
          "[.][gpu-aot]") {
  std::string why;
  if (!kjit::test::gpu_available(&why)) {
    // Under CTest (tests/CMakeLists.txt sets the variable) the exit code 77 counts as skipped,
    // as for every GPU test; run by hand without a GPU it fails.
    if (std::getenv("KJIT_TEST_SKIP_WITHOUT_GPU") != nullptr) {
      std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
      std::fflush(stdout);
      std::_Exit(77);
    }
    FAIL("this test needs a GPU: " << why);
  }
  // The example list: an sm_80+ kernel on a 9.0 device then takes the sm_90a cubin.
  TempDir dir;
  fs::path pkg = dir.path() / "pkg";
  Run b = cli(shared_cache_env(), "aot build --arch \"8.0 9.0a\" --out '" + pkg.string() +
                                      "' --ops rmsnorm,act_and_mul -j 8");
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  fs::path cache = dir.path() / "empty-cache";
  std::string cmd = "KJIT_AOT_DIR='" + pkg.string() + "' KJIT_DISABLE_JIT=1 KJIT_CACHE_DIR='" +
                    cache.string() + "' KJIT_ARTIFACT_LOG=1 /proc/" + std::to_string(::getpid()) +
                    "/exe '[gpu-aot-child]' > '" + (dir.path() / "child.txt").string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::string out = util::read_file(dir.path() / "child.txt").value_or("");
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("from KJIT_AOT_DIR " + pkg.string()) != std::string::npos);
  CHECK(count_files(cache, ".cubin") == 0);
}

// The engine of the test above, in a process whose environment points at the package only.
TEST_CASE("aot: engine child (run by [gpu-aot])", "[.][gpu-aot-child]") {
  REQUIRE(std::getenv("KJIT_AOT_DIR") != nullptr);
  REQUIRE(std::getenv("KJIT_DISABLE_JIT") != nullptr);
  using kjit::test::DeviceBuffer;
  using kjit::test::dl_dtype;
  using kjit::test::make_tensor;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> uni(-2.0, 2.0);
  auto random_bf16 = [&](size_t n, std::vector<uint16_t>* bits, std::vector<double>* values) {
    bits->resize(n);
    values->resize(n);
    for (size_t i = 0; i < n; ++i) {
      ref::store_elem(bits->data(), i, uni(rng), "bf16");
      (*values)[i] = ref::load_elem(bits->data(), i, "bf16");
    }
  };
  const double tol = 4 * ref::unit_roundoff("bf16");

  {  // RMSNorm, Llama hidden size: a catalog specialization
    const int64_t rows = 64, hidden = 4096;
    std::vector<uint16_t> xb, wb, yb(rows * hidden);
    std::vector<double> x, w;
    random_bf16(rows * hidden, &xb, &x);
    random_bf16(hidden, &wb, &w);
    DeviceBuffer dx(xb.size() * 2), dw(wb.size() * 2), dy(yb.size() * 2);
    dx.upload(xb.data(), xb.size() * 2);
    dw.upload(wb.data(), wb.size() * 2);
    dy.fill(0xFF);
    auto tx = make_tensor(dx.get(), {rows, hidden}, dl_dtype("bf16"));
    auto tw = make_tensor(dw.get(), {hidden}, dl_dtype("bf16"));
    auto ty = make_tensor(dy.get(), {rows, hidden}, dl_dtype("bf16"));
    kjit_status st = kjit_rmsnorm(tx.get(), tw.get(), ty.get(), 1e-6f, nullptr);
    INFO(kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
    kjit::test::device_synchronize();
    dy.download(yb.data(), yb.size() * 2);
    auto want = ref::rmsnorm(x, w, rows, hidden, 1e-6);
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      double got = ref::load_elem(yb.data(), i, "bf16");
      bad += !(std::fabs(got - want[i]) <= tol * (std::fabs(want[i]) + 1.0));
    }
    CHECK(bad == 0);
  }
  {  // SiLU-and-mul, Llama-3 8B intermediate size
    const int64_t rows = 16, d = 14336;
    std::vector<uint16_t> xb, yb(rows * d);
    std::vector<double> x;
    random_bf16(rows * 2 * d, &xb, &x);
    DeviceBuffer dx(xb.size() * 2), dy(yb.size() * 2);
    dx.upload(xb.data(), xb.size() * 2);
    dy.fill(0xFF);
    auto tx = make_tensor(dx.get(), {rows, 2 * d}, dl_dtype("bf16"));
    auto ty = make_tensor(dy.get(), {rows, d}, dl_dtype("bf16"));
    kjit_status st = kjit_silu_and_mul(tx.get(), ty.get(), nullptr);
    INFO(kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
    kjit::test::device_synchronize();
    dy.download(yb.data(), yb.size() * 2);
    size_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < d; ++i) {
        double a = x[r * 2 * d + i], g = x[r * 2 * d + d + i];
        double want = a / (1.0 + std::exp(-a)) * g;
        double got = ref::load_elem(yb.data(), r * d + i, "bf16");
        bad += !(std::fabs(got - want) <= tol * (std::fabs(want) + 1.0));
      }
    }
    CHECK(bad == 0);
  }
  CHECK(jit::JitCore::global().stats().compiles == 0);
  CHECK(jit::JitCore::global().stats().package_hits == 2);
}
