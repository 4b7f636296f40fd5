// Tuning records in AOT packages without a GPU (src/tune/packaged_records.*, the store's package
// lookups, the index's "tuning" list): pack -> load on a fresh cache -> a lookup hits; the
// writable cache wins; a tampered or stale record is a miss; the package folder is never written.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "aot/package.hpp"
#include "aot/sha256.hpp"
#include "support/temp_dir.hpp"
#include "tune/packaged_records.hpp"
#include "tune/tune_store.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
using namespace kjit::tune;
namespace fs = std::filesystem;

namespace {

Fingerprint gpu(const std::string& name = "NVIDIA H200") {
  return {name, 132, 13000, "13.0", "0.5.0"};
}

TuneKey decode_key(int batch) {
  return {"decode_attention", 1, "q=bf16,batch=" + std::to_string(batch), "graph-cold"};
}

TuneRecord record(const std::string& tactic) {
  TuneRecord r;
  r.tactic = tactic;
  r.default_tactic = "split4_kernel";
  r.when = "2026-12-05T00:00:00Z";
  r.tried = {{"split4_kernel", 20.0, 19.0, 21.0, 15}, {tactic, 15.0, 14.5, 15.5, 15}};
  return r;
}

// A package at `dir` holding the records of `from` that `select` accepts (an index without
// cubins, as `kjit-cli aot build` writes it).
aot::PackageIndex make_package(const TuneStore& from, const fs::path& dir,
                               const std::function<bool(const TuneStore::Entry&)>& select) {
  aot::PackageIndex idx;
  idx.kjit_version = "0.5.0";
  idx.nvrtc_version = "13.0";
  idx.created = "2026-12-05T00:00:00Z";
  idx.archs = {"sm_90a"};
  idx.tuning = pack_records(from, dir, select);
  util::write_file_atomic(dir / aot::kIndexName, idx.to_json());
  return idx;
}

// Every file under `dir` with its size and modification time.
std::map<std::string, std::tuple<uintmax_t, fs::file_time_type>> snapshot(const fs::path& dir) {
  std::map<std::string, std::tuple<uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    out[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, e.last_write_time()};
  }
  return out;
}

}  // namespace

TEST_CASE("tune packages: pack, then a fresh cache finds the records read-only", "[tune][aot]") {
  test::TempDir dir;
  const fs::path cache = dir.path() / "cache", pkg = dir.path() / "pkg";
  util::make_dirs(pkg);
  {
    TuneStore tuned(cache / "tuning");
    tuned.put(gpu(), decode_key(8), record("split8_cluster"));
    tuned.put(gpu(), decode_key(16), record("split2_fused"));
    tuned.put(gpu("NVIDIA A100"), decode_key(8), record("split1"));
    const aot::PackageIndex idx = make_package(
        tuned, pkg, [](const TuneStore::Entry& e) { return e.fp.device == "NVIDIA H200"; });
    REQUIRE(idx.tuning.size() == 2);
    for (const aot::PackageTuning& t : idx.tuning) {
      INFO(t.file);
      CHECK(t.op == "decode_attention");
      CHECK(t.device == "NVIDIA H200");
      CHECK(fs::file_size(pkg / t.file) == t.size);
      CHECK(t.file.rfind("tuning/v1/" + gpu().id() + "/decode_attention/", 0) == 0);
    }
    // The index round-trips its tuning list.
    const aot::PackageIndex back = aot::PackageIndex::from_json(idx.to_json());
    REQUIRE(back.tuning.size() == 2);
    CHECK(back.tuning[0].file == idx.tuning[0].file);
    CHECK(back.tuning[1].sha256 == idx.tuning[1].sha256);
  }
  const auto before = snapshot(pkg);
  // A fresh host: an empty writable cache, the package in KJIT_AOT_DIR.
  std::unique_ptr<TuneStore> store = make_store(dir.path() / "fresh", {pkg});
  REQUIRE(store->packages().size() == 1);
  std::string origin = "unset";
  std::optional<TuneRecord> r = store->find(gpu(), decode_key(8), &origin);
  REQUIRE(r.has_value());
  CHECK(r->tactic == "split8_cluster");
  CHECK(origin == pkg.string());
  CHECK(store->find(gpu(), decode_key(16))->tactic == "split2_fused");
  CHECK_FALSE(store->find(gpu("NVIDIA A100"), decode_key(8)).has_value());  // not packed
  // list() shows the package's records with their origin.
  int listed = 0;
  for (const TuneStore::Entry& e : store->list()) {
    CHECK(e.origin == pkg.string());
    CHECK(e.valid);
    ++listed;
  }
  CHECK(listed == 2);
  // The writable cache wins when both have a record; clear() leaves the package alone.
  store->put(gpu(), decode_key(8), record("split3_kernel"));
  CHECK(store->find(gpu(), decode_key(8), &origin)->tactic == "split3_kernel");
  CHECK(origin.empty());
  CHECK(store->clear() == 1);
  CHECK(store->find(gpu(), decode_key(8))->tactic == "split8_cluster");
  // Nothing in the package folder was written, added or removed.
  CHECK(snapshot(pkg) == before);
}

TEST_CASE("tune packages: a tampered or stale packaged record is a miss", "[tune][aot]") {
  test::TempDir dir;
  const fs::path pkg = dir.path() / "pkg";
  util::make_dirs(pkg);
  TuneStore tuned(dir.path() / "cache" / "tuning");
  tuned.put(gpu(), decode_key(8), record("split8_cluster"));
  tuned.put(gpu(), decode_key(16), record("split2_fused"));
  const aot::PackageIndex idx =
      make_package(tuned, pkg, [](const TuneStore::Entry&) { return true; });
  REQUIRE(idx.tuning.size() == 2);
  // Tampered: same size, another tactic; the SHA-256 no longer matches the index.
  const fs::path rec8 =
      pkg / "tuning" / tuned.path_of(gpu(), decode_key(8)).lexically_relative(tuned.root());
  std::string text = *util::read_file(rec8);
  const size_t at = text.find("split8_cluster");
  REQUIRE(at != std::string::npos);
  text.replace(at, 14, "split8_fused__");
  util::write_file_atomic(rec8, text);
  std::unique_ptr<TuneStore> store = make_store(dir.path() / "fresh", {pkg});
  CHECK_FALSE(store->find(gpu(), decode_key(8)).has_value());
  CHECK(store->find(gpu(), decode_key(16)).has_value());
  bool flagged = false;
  for (const TuneStore::Entry& e : store->list()) {
    if (e.path == rec8) {
      CHECK_FALSE(e.valid);
      CHECK(e.why.find("SHA-256") != std::string::npos);
      flagged = true;
    }
  }
  CHECK(flagged);
  // Stale: a record of another key at this key's path, listed with its own hash (an index edited
  // to match): the key check still refuses it.
  const fs::path rec16 =
      pkg / "tuning" / tuned.path_of(gpu(), decode_key(16)).lexically_relative(tuned.root());
  TuneKey old = decode_key(16);
  old.space_version = 0;
  const std::string stale = record_json(gpu(), old, record("split2_fused"));
  util::write_file_atomic(rec16, stale);
  aot::PackageIndex edited = idx;
  for (aot::PackageTuning& t : edited.tuning) {
    if (pkg / t.file == rec16) {
      t.size = stale.size();
      t.sha256 = aot::sha256_hex(stale);
    }
  }
  util::write_file_atomic(pkg / aot::kIndexName, edited.to_json());
  store = make_store(dir.path() / "fresh", {pkg});
  CHECK_FALSE(store->find(gpu(), decode_key(16)).has_value());
  // Another fingerprint never reads them.
  CHECK_FALSE(store->find(gpu("NVIDIA H100"), decode_key(16)).has_value());
}

TEST_CASE("tune packages: the index refuses tuning paths outside the store's layout",
          "[tune][aot]") {
  aot::PackageIndex idx;
  idx.kjit_version = "0.5.0";
  idx.nvrtc_version = "13.0";
  idx.archs = {"sm_90a"};
  aot::PackageTuning t;
  t.op = "gemm";
  t.size = 10;
  t.sha256 = std::string(64, 'a');
  t.file = "tuning/v1/0123456789abcdef/gemm/0123456789abcdef.json";
  idx.tuning = {t};
  CHECK(aot::PackageIndex::from_json(idx.to_json()).tuning.size() == 1);
  for (const char* bad :
       {"../tuning/v1/0123456789abcdef/gemm/0123456789abcdef.json",
        "tuning/v1/0123456789abcdef/gemm/../../../../etc.json",
        "tuning/v1/0123456789abcdef/moe/0123456789abcdef.json",  // another op than the entry's
        "tuning/v2/0123456789abcdef/gemm/0123456789abcdef.json",
        "tuning/v1/0123456789ABCDEF/gemm/0123456789abcdef.json",
        "tuning/v1/0123456789abcdef/gemm/0123456789abcdef.json.tmp", "tuning/v1/x", ""}) {
    INFO(bad);
    idx.tuning[0].file = bad;
    CHECK_THROWS_AS(aot::PackageIndex::from_json(idx.to_json()), kjit::Error);
  }
  idx.tuning = {t, t};  // twice
  CHECK_THROWS_AS(aot::PackageIndex::from_json(idx.to_json()), kjit::Error);
  // A folder without an index adds no records (a log line), never an error.
  test::TempDir dir;
  std::string why;
  CHECK_FALSE(read_record_package(dir.path(), &why).has_value());
  CHECK_FALSE(why.empty());
  CHECK(make_store(dir.path() / "cache", {dir.path()})->packages().empty());
}
