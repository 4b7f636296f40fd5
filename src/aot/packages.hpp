// The run-time side of AOT packages: JitCore asks here after its in-process map and before its
// disk cache (docs/aot.md).
//
//   find():        KJIT_AOT_DIR folders in order, then KJIT_ARTIFACT_DIR. An entry is used only
//                  when its package's kjit major.minor is this kjit's, its content key (sources,
//                  parameters, options, arch) is the one this kjit would compile, and its files
//                  match the index's SHA-256; anything else falls through, never gets loaded.
//   auto_fetch():  with KJIT_ARTIFACT_AUTO_FETCH=1, the one missing entry is downloaded from
//                  KJIT_ARTIFACT_URL into the artifact dir, then found there like any other.
//
// Each index.json is parsed once per process (again only if the file changes: a fetch by another
// process); entry files are read and verified when an entry is wanted, which JitCore does once
// per specialization.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aot/artifact_log.hpp"
#include "aot/package.hpp"
#include "cache/metadata.hpp"
#include "jit/settings.hpp"

namespace kjit::aot {

struct Found {
  jit::Metadata meta;
  std::string cubin;
  fs::path cubin_path;
  fs::path dir;  // the package it came from
};

// One searched folder, for messages and `kjit-cli info`.
struct SearchDir {
  fs::path path;
  std::string role;  // "KJIT_AOT_DIR" or "artifact dir"
};

class Packages {
 public:
  explicit Packages(const jit::Settings& settings);
  ~Packages();
  Packages(const Packages&) = delete;
  Packages& operator=(const Packages&) = delete;

  const std::vector<SearchDir>& dirs() const { return dirs_; }
  const ArtifactLog& log() const { return log_; }

  // The first usable entry for `uri` of any `wanted` target (in order: the exact target first),
  // searching the dirs in order. Appends to `searched` what each dir lacked or why its entry was
  // refused, for the message of a failure that follows. Thread-safe.
  std::optional<Found> find(const std::string& uri, const std::vector<Wanted>& wanted,
                            std::string* searched);

  // KJIT_ARTIFACT_AUTO_FETCH=1: downloads the entry for `uri` into the artifact dir and finds it
  // there. Returns nullopt (appending why to `searched`) when it is off, offline, has no URL, the
  // repository lacks a matching entry or the download fails; never throws for those.
  std::optional<Found> auto_fetch(const std::string& uri, const std::vector<Wanted>& wanted,
                                  std::string* searched);

  // Entries refused after their index matched (bad checksum, inconsistent metadata).
  long rejected() const { return rejected_; }

 private:
  struct CachedIndex {
    bool loaded = false;
    // stat of index.json when it was read: a change means another process merged a download.
    long long mtime_ns = -1, size = -1, inode = -1;
    std::optional<PackageIndex> index;
    std::string problem;  // why there is no usable index
    bool version_ok = true;
  };

  CachedIndex& index_of(size_t dir);  // under mu_
  std::optional<Found> find_in(size_t dir, const std::string& uri,
                               const std::vector<Wanted>& wanted, std::string* note);
  // Refusals are warned about once per (dir, reason), not once per spec.
  void warn_once(const std::string& text);

  jit::Settings settings_;
  std::vector<SearchDir> dirs_;
  ArtifactLog log_;
  std::mutex mu_;
  std::vector<CachedIndex> indexes_;
  std::set<std::string> warned_;
  long rejected_ = 0;
  // The repository index, downloaded once per process; a failure is remembered so that a dead
  // mirror costs one round of retries, not one per specialization.
  bool remote_loaded_ = false;
  std::optional<PackageIndex> remote_;
  std::string remote_problem_;
};

}  // namespace kjit::aot
