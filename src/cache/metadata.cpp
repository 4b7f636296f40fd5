#include "cache/metadata.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ctime>
#include <stdexcept>

#include "util/error.hpp"
#include "util/json_fields.hpp"

namespace kjit::jit {

using nlohmann::json;
using util::integer_field;
using util::optional_integer;

KeyInputs make_key_inputs(const Spec& spec, const std::vector<SourceFile>& sources,
                          const std::vector<std::string>& options, const ArchTarget& target,
                          const std::string& nvrtc_version, const std::string& kjit_version) {
  KeyInputs k;
  k.op = spec.op;
  k.params = spec.params;
  for (const auto& s : sources) k.source_hashes.emplace_back(s.name, util::xxh3_64_hex(s.content));
  k.source_hashes.emplace_back("<main>", util::xxh3_64_hex(main_source(spec)));
  for (const auto& e : spec.entry_names) k.source_hashes.emplace_back("<entry>", e);
  k.options = options;
  k.arch = target.sm();
  k.nvrtc_version = nvrtc_version;
  k.kjit_version = kjit_version;
  return k;
}

util::Hash128 compute_key(const KeyInputs& k) {
  util::Hasher h;
  h.add("kjit-cache-key").add(std::to_string(kCacheSchemaVersion)).add(k.op);
  for (const auto& [n, v] : k.params) h.add(n).add(v);
  h.add("sources");
  for (const auto& [n, v] : k.source_hashes) h.add(n).add(v);
  h.add("options");
  for (const auto& o : k.options) h.add(o);
  h.add(k.arch).add(k.nvrtc_version).add(k.kjit_version);
  return h.digest();
}

namespace {

json pairs_to_json(const std::vector<std::pair<std::string, std::string>>& v) {
  json a = json::array();
  for (const auto& [x, y] : v) a.push_back({x, y});
  return a;
}

std::vector<std::pair<std::string, std::string>> pairs_from_json(const json& a) {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& p : a) {
    if (!p.is_array() || p.size() != 2) throw std::runtime_error("expected [name, value] pairs");
    v.emplace_back(p.at(0).get<std::string>(), p.at(1).get<std::string>());
  }
  return v;
}

}  // namespace

std::string Metadata::to_json() const {
  json j;
  j["schema"] = schema;
  j["key"] = key;
  j["uri"] = uri;
  j["op"] = inputs.op;
  j["params"] = pairs_to_json(inputs.params);
  j["sources"] = pairs_to_json(inputs.source_hashes);
  j["options"] = inputs.options;
  j["arch"] = inputs.arch;
  j["nvrtc_version"] = inputs.nvrtc_version;
  j["kjit_version"] = inputs.kjit_version;
  j["lowered_names"] = pairs_to_json(lowered_names);
  j["cubin_size"] = cubin_size;
  j["cubin_xxh3_64"] = cubin_hash;
  j["compile_ms"] = compile_ms;
  j["created"] = created;
  j["registers"] = registers;
  j["shared_bytes"] = shared_bytes;
  j["ptxas_advisories"] = ptxas_advisories;
  return j.dump(2) + "\n";
}

Metadata Metadata::from_json(const std::string& text) {
  try {
    json j = json::parse(text);
    Metadata m;
    m.schema = integer_field<int>(j.at("schema"), "schema");
    m.key = j.at("key").get<std::string>();
    m.uri = j.at("uri").get<std::string>();
    m.inputs.op = j.at("op").get<std::string>();
    m.inputs.params = pairs_from_json(j.at("params"));
    m.inputs.source_hashes = pairs_from_json(j.at("sources"));
    m.inputs.options = j.at("options").get<std::vector<std::string>>();
    m.inputs.arch = j.at("arch").get<std::string>();
    m.inputs.nvrtc_version = j.at("nvrtc_version").get<std::string>();
    m.inputs.kjit_version = j.at("kjit_version").get<std::string>();
    m.lowered_names = pairs_from_json(j.at("lowered_names"));
    m.cubin_size = integer_field<uint64_t>(j.at("cubin_size"), "cubin_size");
    m.cubin_hash = j.at("cubin_xxh3_64").get<std::string>();
    m.compile_ms = j.at("compile_ms").get<double>();
    m.created = j.at("created").get<std::string>();
    m.registers = optional_integer<int>(j, "registers", -1);
    m.shared_bytes = optional_integer<int>(j, "shared_bytes", -1);
    if (j.contains("ptxas_advisories")) {
      m.ptxas_advisories = j.at("ptxas_advisories").get<std::vector<std::string>>();
    }
    return m;
  } catch (const std::exception& e) {
    fail(KJIT_ERROR_CACHE, "invalid metadata: {}", e.what());
  }
}

std::optional<std::string> validate_entry(const Metadata& meta, const std::string& cubin,
                                          const std::string& expected_key,
                                          const KeyInputs& expected) {
  if (meta.schema != kCacheSchemaVersion) {
    return fmt::format("schema {} != {}", meta.schema, kCacheSchemaVersion);
  }
  if (meta.inputs.kjit_version != expected.kjit_version) {
    return fmt::format("kjit version {} != {}", meta.inputs.kjit_version, expected.kjit_version);
  }
  if (meta.inputs.nvrtc_version != expected.nvrtc_version) {
    return fmt::format("NVRTC version {} != {}", meta.inputs.nvrtc_version, expected.nvrtc_version);
  }
  if (meta.inputs.arch != expected.arch) {
    return fmt::format("arch {} != {}", meta.inputs.arch, expected.arch);
  }
  if (meta.key != expected_key) return fmt::format("key {} != {}", meta.key, expected_key);
  // The key is only as good as the recorded inputs: recompute it from them.
  if (compute_key(meta.inputs).hex() != meta.key) return "key does not match recorded inputs";
  if (meta.cubin_size != cubin.size()) {
    return fmt::format("cubin size {} != recorded {}", cubin.size(), meta.cubin_size);
  }
  if (util::xxh3_64_hex(cubin) != meta.cubin_hash) return "cubin hash mismatch";
  if (meta.lowered_names.empty()) return "no lowered names";
  return std::nullopt;
}

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kjit::jit
