// Downloads package entries from a repository (KJIT_ARTIFACT_URL: an http(s):// mirror or a
// file:// path laid out like an AOT package) into the writable artifact dir.
//
// Every file is downloaded into memory, checked against the repository's index (size, SHA-256,
// metadata consistency) and only then published by temp file + rename, under a per-entry lock;
// the artifact dir's index.json is merged last, under its own lock, so the dir is a valid
// package at every moment. Transfers run on at most `jobs` threads, one connection each, with
// retries and exponential backoff for transient failures.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "aot/artifact_log.hpp"
#include "aot/package.hpp"

namespace kjit::aot {

struct FetchOptions {
  std::string url;       // repository root; <url>/index.json is its index
  fs::path dir;          // the artifact dir files are published into
  int jobs = 4;          // concurrent transfers (connections)
  int retries = 3;       // attempts after the first, for transient failures
  int backoff_ms = 250;  // wait before the first retry; doubles for each further one
  bool skip_checksum = false;
  const ArtifactLog* log = nullptr;
};

struct FetchFailure {
  std::string name;  // "<arch>/<uri>-<key16>"
  std::string error;
};

struct FetchResult {
  size_t downloaded = 0;  // entries downloaded, verified and published
  size_t present = 0;     // already valid in the artifact dir (another process, an earlier run)
  std::vector<FetchFailure> failures;
  int peak_transfers = 0;  // most transfers in flight at once
};

// Throws kjit::Error(KJIT_ERROR_INVALID_ARGUMENT) unless `url` starts with http://, https:// or
// file://.
void check_url(const std::string& url);

// <url>/index.json, downloaded (with retries) and parsed. Throws kjit::Error: KJIT_ERROR_CACHE
// when it cannot be downloaded or is invalid, KJIT_ERROR_UNSUPPORTED without libcurl.
PackageIndex fetch_index(const FetchOptions& o);

// Downloads the files of `entries` (entries of `remote`) into o.dir and merges the ones that
// arrived intact into o.dir/index.json. Failures are reported per entry, not thrown; throws only
// when libcurl is missing or o.dir cannot be created. `progress(done, total)` runs after each
// entry, on the thread that finished it, under a mutex.
FetchResult fetch_entries(const FetchOptions& o, const PackageIndex& remote,
                          const std::vector<PackageEntry>& entries,
                          const std::function<void(size_t, size_t)>& progress = {});

}  // namespace kjit::aot
