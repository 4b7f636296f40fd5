// The on-disk cache: <root>/v1/<arch>/<uri>-<key16>.cubin + .json (+ .lock).
// Writers: per-entry flock, check again, compile, publish cubin then JSON (each by temp file +
// fsync + rename). Readers take no lock: the JSON is written last and records the cubin's size
// and hash, so a reader sees a complete, matching pair or treats the entry as missing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cache/metadata.hpp"

namespace kjit::jit {

namespace fs = std::filesystem;

struct EntryPaths {
  fs::path cubin, json, lock;
};

struct CachedEntry {
  Metadata meta;
  std::string cubin;
};

// One row of `kjit-cli cache inspect`.
struct ListedEntry {
  fs::path json_path;
  std::string arch;  // folder name
  std::string uri;   // from metadata, else from the file name
  uint64_t cubin_size = 0;
  uint64_t json_size = 0;
  int64_t last_used = 0;  // unix seconds: the cubin's mtime, refreshed on every load from disk
  std::optional<Metadata> meta;
  std::string problem;  // empty when valid
};

// What DiskCache::prune did.
struct PruneResult {
  size_t entries = 0;            // entries before
  size_t removed = 0;            // entries removed
  size_t busy = 0;               // entries skipped: another process held their lock (building)
  uint64_t freed = 0;            // bytes removed, entries and generated sources
  uint64_t remaining = 0;        // bytes left, entries and generated sources
  size_t generated_removed = 0;  // generated/<uri> folders removed (no entry of theirs left)
};

class DiskCache {
 public:
  explicit DiskCache(fs::path root) : root_(std::move(root)) {}
  const fs::path& root() const { return root_; }
  fs::path entries_dir() const { return root_ / "v1"; }

  EntryPaths paths(const std::string& arch, const std::string& uri, const std::string& key) const;

  // A valid entry, or nullopt when missing or invalid (then `problem` says why, if given).
  std::optional<CachedEntry> load(const EntryPaths& p, const std::string& key,
                                  const KeyInputs& expected, std::string* problem) const;

  // Publishes cubin then JSON; call it holding the entry lock. Throws KJIT_ERROR_CACHE on
  // failure, leaving no cubin without a sidecar behind (and no temp file).
  void publish(const EntryPaths& p, const Metadata& meta, const std::string& cubin) const;

  // Every entry with a JSON sidecar, checked for self-consistency against this kjit and NVRTC.
  std::vector<ListedEntry> list(const std::string& kjit_version,
                                const std::string& nvrtc_version) const;

  // Removes an entry: the JSON first, so a concurrent reader sees a miss rather than a sidecar
  // without its cubin; then the cubin and the lock. Returns false if anything could not go.
  static bool remove(const fs::path& json_path);

  // Bytes of the generated sources (<root>/generated, or `gen_dir`), which count against a size
  // limit like the entries do.
  static uint64_t generated_bytes(const fs::path& gen_dir);

  // Brings entries + generated sources down to `max_bytes`: generated folders of URIs without an
  // entry first, then entries least recently used first, each removed under its entry lock taken
  // without waiting (an entry another process is building is skipped, never removed under it),
  // then the generated folders their removal orphaned. Readers take no lock: one that loses an
  // entry this way sees a miss and builds it again.
  PruneResult prune(uint64_t max_bytes, const fs::path& gen_dir) const;

  // Marks an entry as used now (the cubin's mtime), for least-recently-used pruning. Best effort.
  static void touch(const fs::path& cubin_path);

 private:
  fs::path root_;
};

}  // namespace kjit::jit
