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

  // Marks an entry as used now (the cubin's mtime), for least-recently-used pruning. Best effort.
  static void touch(const fs::path& cubin_path);

 private:
  fs::path root_;
};

}  // namespace kjit::jit
