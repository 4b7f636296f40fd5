#include "tune/packaged_records.hpp"

#include <memory>

#include "aot/sha256.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"

namespace kjit::tune {

namespace fs = std::filesystem;

std::vector<aot::PackageTuning> pack_records(
    const TuneStore& from, const fs::path& package_dir,
    const std::function<bool(const TuneStore::Entry&)>& select) {
  std::vector<aot::PackageTuning> out;
  for (const TuneStore::Entry& e : from.list()) {
    if (!e.origin.empty() || !e.valid || !select(e)) continue;
    const std::optional<std::string> text = util::read_file(e.path);
    if (!text) continue;  // removed since it was listed
    aot::PackageTuning t;
    t.file = "tuning/" + e.path.lexically_relative(from.root()).generic_string();
    t.op = e.key.op;
    t.device = e.fp.device;
    t.size = text->size();
    t.sha256 = aot::sha256_hex(*text);
    util::make_dirs((package_dir / t.file).parent_path());
    util::write_file_atomic(package_dir / t.file, *text);
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<RecordPackage> read_record_package(const fs::path& dir, std::string* why) {
  const std::optional<std::string> text = util::read_file(dir / aot::kIndexName);
  if (!text) {
    *why = "no readable " + std::string(aot::kIndexName);
    return std::nullopt;
  }
  RecordPackage p;
  p.dir = dir;
  try {
    for (const aot::PackageTuning& t : aot::PackageIndex::from_json(*text).tuning) {
      // The index's paths start with "tuning/": the store's paths are under that folder.
      p.records[t.file.substr(7)] = {t.size, t.sha256};
    }
  } catch (const Error& e) {
    *why = e.what();
    return std::nullopt;
  }
  return p;
}

std::unique_ptr<TuneStore> make_store(const fs::path& cache_dir,
                                      const std::vector<fs::path>& aot_dirs) {
  auto store = std::make_unique<TuneStore>(cache_dir / "tuning");
  for (const fs::path& dir : aot_dirs) {
    std::string why;
    if (std::optional<RecordPackage> p = read_record_package(dir, &why)) {
      if (!p->records.empty()) store->add_package(std::move(*p));
    } else {
      util::log("KJIT_AOT_DIR {}: no tuning records ({})", dir.string(), why);
    }
  }
  return store;
}

}  // namespace kjit::tune
