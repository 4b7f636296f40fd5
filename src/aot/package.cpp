#include "aot/package.hpp"

#include <nlohmann/json.hpp>
#include <set>

#include "aot/sha256.hpp"
#include "jit/compiler.hpp"
#include "kjit/version.h"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/hash.hpp"
#include "util/json_fields.hpp"

namespace kjit::aot {

using nlohmann::ordered_json;

namespace {

bool is_hex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// make_uri's alphabet: an entry's URI becomes a file name.
bool is_uri(const std::string& s) {
  if (s.empty() || s.size() > 200) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return false;
  }
  return s.front() != '.';
}

void check_entry_fields(const PackageEntry& e) {
  auto bad = [&](const std::string& what) {
    fail(KJIT_ERROR_CACHE, "invalid package index: entry '{}' ({}): {}", e.uri, e.arch, what);
  };
  if (!is_uri(e.uri)) bad("uri must be [a-z0-9_.]");
  auto t = jit::ArchTarget::parse(e.arch);
  if (!t || t->sm() != e.arch) bad("arch must look like sm_90a");
  if (!is_hex(e.key, 32)) bad("key must be 32 hex digits");
  if (!is_hex(e.content_key, 32)) bad("content_key must be 32 hex digits");
  if (!is_hex(e.sha256, 64) || !is_hex(e.metadata_sha256, 64)) bad("sha256 must be 64 hex digits");
  std::string stem = entry_stem(e.arch, e.uri, e.key);
  if (e.file != stem + ".cubin") bad("file must be " + stem + ".cubin");
  if (e.metadata != stem + ".json") bad("metadata must be " + stem + ".json");
}

void check_tuning_fields(const PackageTuning& t) {
  auto bad = [&](const std::string& what) {
    fail(KJIT_ERROR_CACHE, "invalid package index: tuning record '{}': {}", t.file, what);
  };
  if (!is_uri(t.op)) bad("op must be [a-z0-9_.]");
  if (!is_hex(t.sha256, 64)) bad("sha256 must be 64 hex digits");
  // tuning/v1/<16 hex>/<op>/<16 hex>.json: the store's own layout, nothing else.
  const std::string prefix = "tuning/v1/";
  const std::string rest = t.file.size() > prefix.size() ? t.file.substr(prefix.size()) : "";
  const size_t slash = rest.find('/');
  const std::string name = "/" + t.op + "/";
  if (t.file.compare(0, prefix.size(), prefix) != 0 || slash != 16 ||
      !is_hex(rest.substr(0, 16), 16) || rest.compare(16, name.size(), name) != 0 ||
      rest.size() != 16 + name.size() + 16 + 5 || !is_hex(rest.substr(16 + name.size(), 16), 16) ||
      rest.substr(rest.size() - 5) != ".json") {
    bad("file must be tuning/v1/<16 hex digits>/" + t.op + "/<16 hex digits>.json");
  }
}

}  // namespace

std::string entry_stem(const std::string& arch, const std::string& uri, const std::string& key) {
  return arch + "/" + uri + "-" + key.substr(0, 16);
}

std::string content_key(jit::KeyInputs inputs) {
  inputs.nvrtc_version.clear();
  inputs.kjit_version.clear();
  return jit::compute_key(inputs).hex();
}

std::string major_minor(const std::string& version) {
  size_t first = version.find('.');
  if (first == std::string::npos) return version;
  size_t second = version.find('.', first + 1);
  return second == std::string::npos ? version : version.substr(0, second);
}

bool versions_compatible(const std::string& a, const std::string& b) {
  return !a.empty() && major_minor(a) == major_minor(b);
}

std::string PackageIndex::to_json() const {
  ordered_json j;
  j["format"] = "kjit-aot-package";
  j["format_version"] = format_version;
  j["kjit_version"] = kjit_version;
  j["nvrtc_version"] = nvrtc_version;
  j["created"] = created;
  j["archs"] = archs;
  j["entries"] = ordered_json::array();
  for (const auto& e : entries) {
    j["entries"].push_back({{"uri", e.uri},
                            {"op", e.op},
                            {"arch", e.arch},
                            {"key", e.key},
                            {"content_key", e.content_key},
                            {"file", e.file},
                            {"size", e.size},
                            {"sha256", e.sha256},
                            {"metadata", e.metadata},
                            {"metadata_size", e.metadata_size},
                            {"metadata_sha256", e.metadata_sha256}});
  }
  if (!tuning.empty()) {
    j["tuning"] = ordered_json::array();
    for (const auto& t : tuning) {
      j["tuning"].push_back({{"file", t.file},
                             {"op", t.op},
                             {"device", t.device},
                             {"size", t.size},
                             {"sha256", t.sha256}});
    }
  }
  return j.dump(2) + "\n";
}

PackageIndex PackageIndex::from_json(const std::string& text) {
  PackageIndex idx;
  try {
    auto j = nlohmann::json::parse(text);
    if (j.value("format", std::string()) != "kjit-aot-package") {
      fail(KJIT_ERROR_CACHE, "invalid package index: \"format\" is not \"kjit-aot-package\"");
    }
    idx.format_version = util::integer_field<int>(j.at("format_version"), "format_version");
    if (idx.format_version != kPackageFormatVersion) {
      fail(KJIT_ERROR_CACHE, "package format version {} is not supported (this kjit reads {})",
           idx.format_version, kPackageFormatVersion);
    }
    idx.kjit_version = j.at("kjit_version").get<std::string>();
    idx.nvrtc_version = j.at("nvrtc_version").get<std::string>();
    idx.created = j.value("created", std::string());
    idx.archs = j.at("archs").get<std::vector<std::string>>();
    for (const auto& je : j.at("entries")) {
      PackageEntry e;
      e.uri = je.at("uri").get<std::string>();
      e.op = je.at("op").get<std::string>();
      e.arch = je.at("arch").get<std::string>();
      e.key = je.at("key").get<std::string>();
      e.content_key = je.at("content_key").get<std::string>();
      e.file = je.at("file").get<std::string>();
      // Sizes bound what is read and compared: a negative one must not wrap to 2^64 - 1.
      const std::string at = fmt::format("entries[{}].", idx.entries.size());
      e.size = util::integer_field<uint64_t>(je.at("size"), (at + "size").c_str());
      e.sha256 = je.at("sha256").get<std::string>();
      e.metadata = je.at("metadata").get<std::string>();
      e.metadata_size =
          util::integer_field<uint64_t>(je.at("metadata_size"), (at + "metadata_size").c_str());
      e.metadata_sha256 = je.at("metadata_sha256").get<std::string>();
      check_entry_fields(e);
      idx.entries.push_back(std::move(e));
    }
    std::set<std::string> tuning_files;
    for (const auto& jt : j.value("tuning", nlohmann::json::array())) {
      PackageTuning t;
      t.file = jt.at("file").get<std::string>();
      t.op = jt.at("op").get<std::string>();
      t.device = jt.value("device", std::string());
      const std::string at = fmt::format("tuning[{}].size", idx.tuning.size());
      t.size = util::integer_field<uint64_t>(jt.at("size"), at.c_str());
      t.sha256 = jt.at("sha256").get<std::string>();
      check_tuning_fields(t);
      if (!tuning_files.insert(t.file).second) {
        fail(KJIT_ERROR_CACHE, "invalid package index: tuning record {} appears twice", t.file);
      }
      idx.tuning.push_back(std::move(t));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(KJIT_ERROR_CACHE, "invalid package index: {}", e.what());
  }
  idx.reindex();
  if (idx.by_name_.size() != idx.entries.size()) {
    fail(KJIT_ERROR_CACHE, "invalid package index: an entry (uri, arch) appears twice");
  }
  return idx;
}

void PackageIndex::reindex() {
  by_name_.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    by_name_.emplace(entries[i].arch + "/" + entries[i].uri, i);
  }
}

const PackageEntry* PackageIndex::find(const std::string& uri, const std::string& arch) const {
  auto it = by_name_.find(arch + "/" + uri);
  return it == by_name_.end() ? nullptr : &entries[it->second];
}

std::optional<std::string> check_entry_bytes(const PackageEntry& e, const std::string& cubin,
                                             const std::string& metadata, bool skip_checksum,
                                             jit::Metadata* meta_out) {
  auto check_file = [&](const std::string& rel, const std::string& bytes, uint64_t size,
                        const std::string& sha) -> std::optional<std::string> {
    if (bytes.size() != size) {
      return fmt::format("{} has {} bytes, the index says {}", rel, bytes.size(), size);
    }
    if (!skip_checksum) {
      std::string got = sha256_hex(bytes);
      if (got != sha) {
        return fmt::format("{}: SHA-256 {} does not match the index ({})", rel, got, sha);
      }
    }
    return std::nullopt;
  };
  if (auto why = check_file(e.file, cubin, e.size, e.sha256)) return why;
  if (auto why = check_file(e.metadata, metadata, e.metadata_size, e.metadata_sha256)) return why;
  jit::Metadata m;
  try {
    m = jit::Metadata::from_json(metadata);
  } catch (const Error& err) {
    return fmt::format("{}: {}", e.metadata, err.what());
  }
  if (m.schema != jit::kCacheSchemaVersion) {
    return fmt::format("{}: metadata schema {} != {}", e.metadata, m.schema,
                       jit::kCacheSchemaVersion);
  }
  if (m.uri != e.uri || m.inputs.arch != e.arch || m.key != e.key) {
    return fmt::format("{}: metadata names {} {} key {}, the index {} {} key {}", e.metadata, m.uri,
                       m.inputs.arch, m.key, e.uri, e.arch, e.key);
  }
  if (jit::compute_key(m.inputs).hex() != m.key) {
    return e.metadata + ": key does not match the recorded inputs";
  }
  if (content_key(m.inputs) != e.content_key) {
    return e.metadata + ": content key does not match the index";
  }
  if (m.cubin_size != cubin.size() || util::xxh3_64_hex(cubin) != m.cubin_hash) {
    return e.file + " does not match the size and hash its metadata records";
  }
  if (m.lowered_names.empty()) return e.metadata + ": no lowered names";
  if (meta_out) *meta_out = std::move(m);
  return std::nullopt;
}

std::optional<std::string> check_entry(const fs::path& dir, const PackageEntry& e,
                                       bool skip_checksum, jit::Metadata* meta,
                                       std::string* cubin_out) {
  auto cubin = util::read_file(dir / e.file);
  if (!cubin) return e.file + " is missing or unreadable";
  auto json = util::read_file(dir / e.metadata);
  if (!json) return e.metadata + " is missing or unreadable";
  if (auto why = check_entry_bytes(e, *cubin, *json, skip_checksum, meta)) return why;
  if (cubin_out) *cubin_out = std::move(*cubin);
  return std::nullopt;
}

Wanted make_wanted(const jit::ArchTarget& target, jit::KeyInputs inputs, std::string key) {
  Wanted w;
  w.target = target;
  w.content_key = content_key(inputs);
  w.inputs = std::move(inputs);
  w.key = std::move(key);
  return w;
}

Wanted make_wanted(const jit::Spec& spec, const std::vector<jit::SourceFile>& sources,
                   const jit::ArchTarget& target, const jit::Settings& settings) {
  jit::KeyInputs inputs =
      jit::make_key_inputs(spec, sources, jit::semantic_options(spec, target, settings), target,
                           jit::nvrtc_version(), KJIT_VERSION_STRING);
  std::string key = jit::compute_key(inputs).hex();
  return make_wanted(target, std::move(inputs), std::move(key));
}

void write_entry_files(const fs::path& dir, const PackageEntry& e, const std::string& cubin,
                       const std::string& metadata) {
  util::make_dirs((dir / e.file).parent_path());
  util::write_file_atomic(dir / e.file, cubin);
  util::write_file_atomic(dir / e.metadata, metadata);
}

}  // namespace kjit::aot
