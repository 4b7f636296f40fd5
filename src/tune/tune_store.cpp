#include "tune/tune_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <system_error>

#include "aot/sha256.hpp"
#include "util/fs.hpp"
#include "util/glob.hpp"
#include "util/hash.hpp"
#include "util/log.hpp"

namespace kjit::tune {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr int kFormat = 1;  // the record file's own layout

std::string hash16(std::initializer_list<std::string_view> fields) {
  util::Hasher h;
  for (std::string_view f : fields) h.add(f);
  return h.digest().hex().substr(0, 16);
}

}  // namespace

std::string Fingerprint::id() const {
  return hash16({device, std::to_string(sm_count), std::to_string(driver), nvrtc, kjit});
}

std::string record_json(const Fingerprint& fp, const TuneKey& key, const TuneRecord& rec) {
  ojson tried = ojson::array();
  for (const Measured& m : rec.tried) {
    tried.push_back({{"tactic", m.tactic},
                     {"median_us", m.median_us},
                     {"p10_us", m.p10_us},
                     {"p90_us", m.p90_us},
                     {"samples", m.samples}});
  }
  const ojson j = {
      {"format", kFormat},
      {"fingerprint",
       {{"device", fp.device},
        {"sm_count", fp.sm_count},
        {"driver", fp.driver},
        {"nvrtc", fp.nvrtc},
        {"kjit", fp.kjit}}},
      {"key",
       {{"op", key.op},
        {"space_version", key.space_version},
        {"bucket", key.bucket},
        {"timing", key.timing}}},
      {"tactic", rec.tactic},
      {"default", rec.default_tactic},
      {"when", rec.when},
      {"tried", tried},
  };
  return j.dump(2) + "\n";
}

void parse_record(const std::string& text, Fingerprint& fp, TuneKey& key, TuneRecord& rec) {
  const ojson j = ojson::parse(text);
  if (j.at("format").get<int>() != kFormat) {
    throw std::runtime_error(
        fmt::format("format {} (this kjit reads {})", j.at("format").dump(), kFormat));
  }
  const ojson& f = j.at("fingerprint");
  fp.device = f.at("device").get<std::string>();
  fp.sm_count = f.at("sm_count").get<int>();
  fp.driver = f.at("driver").get<int>();
  fp.nvrtc = f.at("nvrtc").get<std::string>();
  fp.kjit = f.at("kjit").get<std::string>();
  const ojson& k = j.at("key");
  key.op = k.at("op").get<std::string>();
  key.space_version = k.at("space_version").get<int>();
  key.bucket = k.at("bucket").get<std::string>();
  key.timing = k.at("timing").get<std::string>();
  rec.tactic = j.at("tactic").get<std::string>();
  rec.default_tactic = j.at("default").get<std::string>();
  rec.when = j.at("when").get<std::string>();
  rec.tried.clear();
  for (const ojson& m : j.at("tried")) {
    rec.tried.push_back({m.at("tactic").get<std::string>(), m.at("median_us").get<double>(),
                         m.at("p10_us").get<double>(), m.at("p90_us").get<double>(),
                         m.at("samples").get<int>()});
  }
  if (rec.tactic.empty()) throw std::runtime_error("no tactic");
}

TuneStore::TuneStore(fs::path root) : root_(std::move(root)) {}

fs::path TuneStore::path_of(const Fingerprint& fp, const TuneKey& key) const {
  const std::string name =
      hash16({key.op, std::to_string(key.space_version), key.bucket, key.timing}) + ".json";
  return root_ / "v1" / fp.id() / key.op / name;
}

namespace {

// The record in `text` (read from `path`) when it answers (fp, key); else a log line and nullopt.
std::optional<TuneRecord> trusted(const fs::path& path, const std::string& text,
                                  const Fingerprint& fp, const TuneKey& key) {
  Fingerprint f;
  TuneKey k;
  TuneRecord r;
  try {
    parse_record(text, f, k, r);
  } catch (const std::exception& e) {
    util::log("tuning record {} malformed ({}): ignored", path.string(), e.what());
    return std::nullopt;
  }
  // The path is a hash of the key: a record for something else there is a collision or an edit.
  if (!(f == fp) || !(k == key)) {
    util::log("tuning record {} was written for another device, version or key: ignored",
              path.string());
    return std::nullopt;
  }
  return r;
}

// A package record's bytes, or the reason they must not be used.
std::optional<std::string> package_bytes(const fs::path& path, const RecordPackage::File& f,
                                         std::string* why) {
  const std::optional<std::string> text = util::read_file(path);
  if (!text) {
    *why = "unreadable";
  } else if (text->size() != f.size) {
    *why = fmt::format("{} bytes, the package index says {}", text->size(), f.size);
  } else if (aot::sha256_hex(*text) != f.sha256) {
    *why = "its SHA-256 does not match the package index";
  } else {
    return text;
  }
  return std::nullopt;
}

}  // namespace

void TuneStore::read_entry(const std::optional<std::string>& text, const std::string& rel,
                           Entry& e) const {
  if (!text) return;
  try {
    parse_record(*text, e.fp, e.key, e.rec);
    e.valid = path_of(e.fp, e.key).lexically_relative(root_).generic_string() == rel;
    if (!e.valid) e.why = "not at the path its key names";
  } catch (const std::exception& ex) {
    e.why = std::string("malformed: ") + ex.what();
  }
}

void TuneStore::add_package(RecordPackage p) {
  packages_.push_back(std::move(p));
}

std::optional<TuneRecord> TuneStore::find(const Fingerprint& fp, const TuneKey& key,
                                          std::string* origin) const {
  const fs::path path = path_of(fp, key);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    const std::optional<std::string> text = util::read_file(path);
    if (!text) {
      util::log("tuning record {} unreadable: ignored", path.string());
    } else if (std::optional<TuneRecord> r = trusted(path, *text, fp, key)) {
      if (origin != nullptr) origin->clear();
      return r;
    }
  }
  const std::string rel = path.lexically_relative(root_).generic_string();
  for (const RecordPackage& p : packages_) {
    auto it = p.records.find(rel);
    if (it == p.records.end()) continue;
    const fs::path file = p.dir / "tuning" / rel;
    std::string why;
    const std::optional<std::string> text = package_bytes(file, it->second, &why);
    if (!text) {
      util::log("packaged tuning record {} ({}): ignored", file.string(), why);
      continue;
    }
    if (std::optional<TuneRecord> r = trusted(file, *text, fp, key)) {
      if (origin != nullptr) *origin = p.dir.string();
      return r;
    }
  }
  return std::nullopt;
}

void TuneStore::put(const Fingerprint& fp, const TuneKey& key, const TuneRecord& rec) const {
  const fs::path path = path_of(fp, key);
  util::make_dirs(path.parent_path());
  util::write_file_atomic(path, record_json(fp, key, rec));
}

std::vector<TuneStore::Entry> TuneStore::list() const {
  std::vector<Entry> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".json") continue;
    Entry e;
    e.path = it->path();
    const std::optional<std::string> text = util::read_file(e.path);
    if (!text) e.why = "unreadable";
    read_entry(text, e.path.lexically_relative(root_).generic_string(), e);
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.path < b.path; });
  for (const RecordPackage& p : packages_) {
    for (const auto& [rel, f] : p.records) {
      Entry e;
      e.path = p.dir / "tuning" / rel;
      e.origin = p.dir.string();
      read_entry(package_bytes(e.path, f, &e.why), rel, e);
      out.push_back(std::move(e));
    }
  }
  return out;
}

size_t TuneStore::clear(const std::string& op_glob) const {
  size_t removed = 0;
  std::error_code ec;
  if (!fs::is_directory(root_ / "v1", ec)) return 0;
  for (const fs::directory_entry& dev : fs::directory_iterator(root_ / "v1", ec)) {
    if (!dev.is_directory(ec)) continue;
    for (const fs::directory_entry& op : fs::directory_iterator(dev.path(), ec)) {
      if (!op.is_directory(ec) || !util::glob_match(op_glob, op.path().filename().string())) {
        continue;
      }
      for (const fs::directory_entry& f : fs::directory_iterator(op.path(), ec)) {
        const bool record = f.path().extension() == ".json";
        if (fs::remove(f.path(), ec) && record) ++removed;
      }
      fs::remove(op.path(), ec);
    }
  }
  return removed;
}

}  // namespace kjit::tune
