// The persisted autotuning results (docs/autotune.md): one JSON file per (device fingerprint, op,
// shape bucket, timing), written atomically under <cache_dir>/tuning/. A file is trusted only when
// everything it was measured under matches the reader's: a result from another GPU, driver, NVRTC,
// kjit version or tactic-space version is a miss (with a log line), never a wrong kernel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kjit::tune {

// What a measured winner depends on besides the shape.
struct Fingerprint {
  std::string device;  // the GPU's name (cuDeviceGetName)
  int sm_count = 0;
  int driver = 0;     // cuDriverGetVersion
  std::string nvrtc;  // "13.0"
  std::string kjit;   // kjit_version_string()
  // 16 hex digits of a hash of every field: the store's folder for this fingerprint.
  std::string id() const;
  bool operator==(const Fingerprint& o) const {
    return device == o.device && sm_count == o.sm_count && driver == o.driver && nvrtc == o.nvrtc &&
           kjit == o.kjit;
  }
};

// Which tuning question a record answers.
struct TuneKey {
  std::string op;         // "gemm"
  int space_version = 1;  // the op's tactic space; the op bumps it when its tactics change
  std::string bucket;     // "dtype=bf16,m=16,n=4096,k=14336": the op's bucket of the call's shape
  std::string timing;     // how candidates were timed: "eager-cold", "graph-hot", ...
  bool operator==(const TuneKey& o) const {
    return op == o.op && space_version == o.space_version && bucket == o.bucket &&
           timing == o.timing;
  }
};

struct Measured {
  std::string tactic;
  double median_us = 0;
  double p10_us = 0, p90_us = 0;  // of the kept samples
  int samples = 0;
};

struct TuneRecord {
  std::string tactic;          // the choice
  std::string default_tactic;  // the op's heuristic pick when it was tuned
  std::vector<Measured> tried;
  std::string when;  // UTC, ISO 8601
};

// The tuning records an AOT package ships (docs/aot.md): read-only, each checked against the
// SHA-256 its package index records before it is read.
struct RecordPackage {
  std::filesystem::path dir;  // the package folder (its records lie under dir/tuning/)
  struct File {
    uint64_t size = 0;
    std::string sha256;
  };
  // By path under dir/tuning/, as under a store's root: "v1/<fingerprint>/<op>/<key16>.json".
  std::map<std::string, File> records;
};

class TuneStore {
 public:
  explicit TuneStore(std::filesystem::path root);  // <cache_dir>/tuning
  const std::filesystem::path& root() const { return root_; }

  // Records of an AOT package, consulted after the writable root (which wins when both have a
  // record of a key), in the order added. Never written, never cleared.
  void add_package(RecordPackage p);
  const std::vector<RecordPackage>& packages() const { return packages_; }

  // The file of (fp, key): root/v1/<fp.id()>/<op>/<16 hex digits of the key>.json.
  std::filesystem::path path_of(const Fingerprint& fp, const TuneKey& key) const;

  // The record, or nullopt when there is none or it cannot be trusted (unreadable, malformed, or
  // written under another fingerprint / key; a package's: also a size or SHA-256 other than its
  // index's); a log line says which. The writable root first, then the packages. `origin`, when
  // given, gets "" (the writable root) or the package folder. Never throws.
  std::optional<TuneRecord> find(const Fingerprint& fp, const TuneKey& key,
                                 std::string* origin = nullptr) const;

  // Writes the record atomically (readers see the old file or the new one). Throws
  // kjit::Error(KJIT_ERROR_CACHE) when the folder cannot be written.
  void put(const Fingerprint& fp, const TuneKey& key, const TuneRecord& rec) const;

  struct Entry {
    std::filesystem::path path;
    std::string origin;  // "": the writable root; else the package folder
    bool valid = false;
    std::string why;  // when not valid
    Fingerprint fp;
    TuneKey key;
    TuneRecord rec;
  };
  // Every record file under root, valid or not, in path order, then each package's.
  std::vector<Entry> list() const;
  // Removes the record files of ops matching `op_glob` (and their lock files) under the writable
  // root; returns the count.
  size_t clear(const std::string& op_glob = "*") const;

 private:
  // Fills e's record from the file's text (nullopt: e.why says why there is none); valid when
  // its key names `rel`, the path under a root.
  void read_entry(const std::optional<std::string>& text, const std::string& rel, Entry& e) const;

  std::filesystem::path root_;
  std::vector<RecordPackage> packages_;
};

// The record as the store writes it, and back; parse throws std::exception on a malformed file.
std::string record_json(const Fingerprint& fp, const TuneKey& key, const TuneRecord& rec);
void parse_record(const std::string& text, Fingerprint& fp, TuneKey& key, TuneRecord& rec);

}  // namespace kjit::tune
