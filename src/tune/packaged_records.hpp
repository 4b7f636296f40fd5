// Tuning records in AOT packages (docs/aot.md): `kjit-cli aot build` copies a cache's records into
// the package, its index lists them with their SHA-256 like the cubins, and a process whose
// KJIT_AOT_DIR names the package finds them read-only behind its writable store, so a read-only
// inference host starts tuned.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "aot/package.hpp"
#include "tune/tune_store.hpp"

namespace kjit::tune {

// Copies the valid records of `from`'s writable root that `select` accepts to
// `package_dir`/tuning/ (at the same paths) and returns their index entries, in path order.
// Throws kjit::Error(KJIT_ERROR_CACHE) when the package cannot be written.
std::vector<aot::PackageTuning> pack_records(
    const TuneStore& from, const std::filesystem::path& package_dir,
    const std::function<bool(const TuneStore::Entry&)>& select);

// The records the package in `dir` lists (its index.json's "tuning"), or nullopt with `why` (no
// index, an unreadable or invalid one). Reads only the index.
std::optional<RecordPackage> read_record_package(const std::filesystem::path& dir,
                                                 std::string* why);

// A store at <cache_dir>/tuning with the records of each package in `aot_dirs` (in order; a
// folder without a usable index adds none, with a log line).
std::unique_ptr<TuneStore> make_store(const std::filesystem::path& cache_dir,
                                      const std::vector<std::filesystem::path>& aot_dirs);

}  // namespace kjit::tune
