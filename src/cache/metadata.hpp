// The JSON sidecar beside every cached cubin, and the cache identity it records.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jit/arch.hpp"
#include "jit/sources.hpp"
#include "jit/spec.hpp"
#include "util/hash.hpp"

namespace kjit::jit {

// Bumped when the key inputs, the layout or the sidecar format change; old entries then miss.
inline constexpr int kCacheSchemaVersion = 1;

// Everything that determines a cubin. XXH3-128 over all of it is the cache key.
struct KeyInputs {
  std::string op;
  Params params;
  std::vector<std::pair<std::string, std::string>> source_hashes;  // name -> xxh3_64 of content
  std::vector<std::string> options;                                // semantic_options()
  std::string arch;                                                // "sm_90a"
  std::string nvrtc_version;
  std::string kjit_version;
};

KeyInputs make_key_inputs(const Spec& spec, const std::vector<SourceFile>& sources,
                          const std::vector<std::string>& options, const ArchTarget& target,
                          const std::string& nvrtc_version, const std::string& kjit_version);
util::Hash128 compute_key(const KeyInputs& k);

struct Metadata {
  int schema = kCacheSchemaVersion;
  std::string key;  // 32 hex digits
  std::string uri;
  KeyInputs inputs;
  std::vector<std::pair<std::string, std::string>> lowered_names;
  uint64_t cubin_size = 0;
  std::string cubin_hash;  // xxh3_64 hex
  double compile_ms = 0;
  std::string created;    // ISO-8601 UTC
  int registers = -1;     // per thread of the first entry, -1 when unknown
  int shared_bytes = -1;  // static shared memory of the first entry, -1 when unknown
  // ptxas' C75xx performance notes of the compile (jit::ptxas_advisories): empty for a
  // kernel that runs as written; absent in sidecars written before 2026-12-06 (read as empty).
  std::vector<std::string> ptxas_advisories;

  std::string to_json() const;
  // Throws kjit::Error(KJIT_ERROR_CACHE) with the reason when text is not a valid sidecar.
  static Metadata from_json(const std::string& text);
};

// What a reader expects of an entry. Returns the reason the entry must not be loaded, or nullopt
// when it is valid: schema, key, arch, NVRTC and kjit versions, cubin size and hash, names.
std::optional<std::string> validate_entry(const Metadata& meta, const std::string& cubin,
                                          const std::string& expected_key,
                                          const KeyInputs& expected);

std::string utc_now_iso();

}  // namespace kjit::jit
