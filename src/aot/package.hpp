// Ahead-of-time packages: a folder of prebuilt cubins with their JSON sidecars and an index.json
// that records, for each cubin, its identity and its SHA-256 (docs/aot.md).
//
//   <dir>/index.json
//   <dir>/<arch>/<uri>-<key16>.cubin      the cubin
//   <dir>/<arch>/<uri>-<key16>.json       its metadata (jit::Metadata, the cache sidecar format)
//
// The same layout serves the read-only KJIT_AOT_DIR and the writable artifact dir that downloads
// go to. Nothing here trusts a file before its SHA-256 matches the index.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit/arch.hpp"
#include "cache/metadata.hpp"
#include "jit/settings.hpp"
#include "jit/sources.hpp"
#include "jit/spec.hpp"

namespace kjit::aot {

namespace fs = std::filesystem;

// Bumped when index.json changes incompatibly; readers refuse other versions.
inline constexpr int kPackageFormatVersion = 1;
inline constexpr const char* kIndexName = "index.json";

struct PackageEntry {
  std::string uri;
  std::string op;
  std::string arch;  // "sm_90a"
  std::string key;   // the cache key the cubin was built under (32 hex digits)
  // XXH3-128 of the key inputs without the NVRTC and kjit versions: what the cubin was compiled
  // from (op, parameters, every source's hash, semantic options, arch). A loader uses an entry
  // only when this equals its own; see content_key().
  std::string content_key;
  std::string file;      // "<arch>/<uri>-<key16>.cubin", relative to the package
  std::string metadata;  // "<arch>/<uri>-<key16>.json"
  uint64_t size = 0;
  uint64_t metadata_size = 0;
  std::string sha256;           // of the cubin
  std::string metadata_sha256;  // of the metadata file
};

// A tuning record shipped in the package (docs/aot.md, docs/autotune.md): a copy of one record of
// <cache_dir>/tuning/ at the same path under the package's tuning/ folder, so that a read-only
// inference host starts tuned.
struct PackageTuning {
  std::string file;    // "tuning/v1/<fingerprint16>/<op>/<key16>.json", relative to the package
  std::string op;      // the record's op
  std::string device;  // the GPU it was measured on
  uint64_t size = 0;
  std::string sha256;
};

struct PackageIndex {
  int format_version = kPackageFormatVersion;
  std::string kjit_version;
  std::string nvrtc_version;
  std::string created;             // ISO-8601 UTC
  std::vector<std::string> archs;  // the targets the package was built for
  std::vector<PackageEntry> entries;
  std::vector<PackageTuning> tuning;  // "tuning" in index.json; absent when empty

  std::string to_json() const;
  // Throws kjit::Error(KJIT_ERROR_CACHE) with the reason when `text` is not a valid index: bad
  // JSON, another format version, a malformed field, a file path that is not exactly
  // "<arch>/<uri>-<key16>.cubin|json" or "tuning/v1/<16 hex>/<op>/<16 hex>.json" (so no entry
  // can point outside the package), a duplicate.
  static PackageIndex from_json(const std::string& text);

  const PackageEntry* find(const std::string& uri, const std::string& arch) const;
  // Rebuilds the lookup table after `entries` changed.
  void reindex();

 private:
  std::unordered_map<std::string, size_t> by_name_;  // "<arch>/<uri>" -> entry
};

// "<arch>/<uri>-<key16>": the path of an entry's files without the extension.
std::string entry_stem(const std::string& arch, const std::string& uri, const std::string& key);

// See PackageEntry::content_key.
std::string content_key(jit::KeyInputs inputs);

// "0.1" of "0.1.3"; the text itself when it has no second dot.
std::string major_minor(const std::string& version);
// True when both versions have the same major.minor: the rule for using a package.
bool versions_compatible(const std::string& a, const std::string& b);

// The reason why the files of `e` in `dir` must not be used, or nullopt: a missing file, a size
// or SHA-256 that differs from the index (skipped when `skip_checksum`), metadata that does not
// parse, names another URI, arch or key than the index, or whose key or content key does not
// recompute from its recorded inputs, a cubin that differs from its metadata, no lowered names.
// On success `meta` and `cubin` (when given) hold the entry.
std::optional<std::string> check_entry(const fs::path& dir, const PackageEntry& e,
                                       bool skip_checksum, jit::Metadata* meta = nullptr,
                                       std::string* cubin = nullptr);
// The same checks on files already in memory (a download, before anything is written).
std::optional<std::string> check_entry_bytes(const PackageEntry& e, const std::string& cubin,
                                             const std::string& metadata, bool skip_checksum,
                                             jit::Metadata* meta = nullptr);

// What this kjit would compile for `spec` on `target`: the inputs and keys a package entry must
// match to be used in its place.
struct Wanted {
  jit::ArchTarget target;
  jit::KeyInputs inputs;
  std::string key;
  std::string content_key;
};
Wanted make_wanted(const jit::Spec& spec, const std::vector<jit::SourceFile>& sources,
                   const jit::ArchTarget& target, const jit::Settings& settings);
Wanted make_wanted(const jit::ArchTarget& target, jit::KeyInputs inputs, std::string key);

// The package entry files as they are published: the cubin, then the metadata that commits it.
void write_entry_files(const fs::path& dir, const PackageEntry& e, const std::string& cubin,
                       const std::string& metadata);

}  // namespace kjit::aot
