#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cache/metadata.hpp"
#include "util/error.hpp"

using namespace kjit;
using namespace kjit::jit;

namespace {

struct Entry {
  KeyInputs inputs;
  Metadata meta;
  std::string cubin = std::string(
      "\x7f"
      "ELF fake cubin bytes",
      21);
  std::string key;

  Entry() {
    inputs.op = "rmsnorm";
    inputs.params = {{"dtype", "bf16"}, {"hidden", "4096"}};
    inputs.source_hashes = {{"norm/rmsnorm.cuh", "0123456789abcdef"}};
    inputs.options = {"-std=c++17", "--gpu-architecture=sm_90a"};
    inputs.arch = "sm_90a";
    inputs.nvrtc_version = "13.0";
    inputs.kjit_version = "0.1.0";
    key = compute_key(inputs).hex();
    meta.key = key;
    meta.uri = "rmsnorm_dtype_bf16_hidden_4096";
    meta.inputs = inputs;
    meta.lowered_names = {{"kjit::norm::k<1>", "_Z1kILi1EEvv"}};
    meta.cubin_size = cubin.size();
    meta.cubin_hash = util::xxh3_64_hex(cubin);
    meta.compile_ms = 12.5;
    meta.created = utc_now_iso();
    meta.registers = 32;
    meta.shared_bytes = 0;
  }
  std::optional<std::string> check() const { return validate_entry(meta, cubin, key, inputs); }
};

}  // namespace

TEST_CASE("metadata: JSON round trip keeps every field", "[metadata]") {
  Entry e;
  Metadata m = Metadata::from_json(e.meta.to_json());
  CHECK(m.to_json() == e.meta.to_json());
  CHECK(m.key == e.key);
  CHECK(m.inputs.params == e.inputs.params);
  CHECK(m.lowered_names == e.meta.lowered_names);
  CHECK(m.registers == 32);
  CHECK_FALSE(validate_entry(m, e.cubin, e.key, e.inputs));
}

TEST_CASE("metadata: ptxas advisories round trip, older sidecars read as none", "[metadata]") {
  Entry e;
  e.meta.ptxas_advisories = {"(C7514) Potential Performance Loss: wgmma.mma_async instructions"};
  Metadata m = Metadata::from_json(e.meta.to_json());
  CHECK(m.ptxas_advisories == e.meta.ptxas_advisories);
  // A sidecar written before the field existed is still a valid entry, with no advisories.
  nlohmann::json j = nlohmann::json::parse(e.meta.to_json());
  j.erase("ptxas_advisories");
  Metadata old = Metadata::from_json(j.dump());
  CHECK(old.ptxas_advisories.empty());
  CHECK_FALSE(validate_entry(old, e.cubin, e.key, e.inputs));
}

TEST_CASE("metadata: each corrupt or incompatible field is rejected", "[metadata]") {
  CHECK_FALSE(Entry().check());
  auto rejects = [](auto mutate, const char* what) {
    Entry e;
    mutate(e);
    auto why = e.check();
    INFO(what);
    REQUIRE(why);
    return *why;
  };
  CHECK(
      rejects([](Entry& e) { e.meta.schema = kCacheSchemaVersion + 1; }, "schema").find("schema") !=
      std::string::npos);
  CHECK(rejects([](Entry& e) { e.meta.inputs.kjit_version = "0.0.9"; }, "kjit")
            .find("kjit version") != std::string::npos);
  CHECK(rejects([](Entry& e) { e.meta.inputs.nvrtc_version = "12.8"; }, "nvrtc").find("NVRTC") !=
        std::string::npos);
  CHECK(rejects([](Entry& e) { e.meta.inputs.arch = "sm_80"; }, "arch").find("arch") !=
        std::string::npos);
  CHECK(rejects([](Entry& e) { e.meta.key[0] = e.meta.key[0] == '0' ? '1' : '0'; }, "key")
            .find("key") != std::string::npos);
  CHECK(rejects([](Entry& e) { e.meta.inputs.options.push_back("-G"); }, "inputs")
            .find("recorded inputs") != std::string::npos);
  CHECK(rejects([](Entry& e) { e.cubin.pop_back(); }, "truncated").find("size") !=
        std::string::npos);
  CHECK(rejects([](Entry& e) { e.cubin[3] ^= 1; }, "flipped").find("hash") != std::string::npos);
  CHECK(rejects([](Entry& e) { e.meta.lowered_names.clear(); }, "names").find("lowered") !=
        std::string::npos);
}

TEST_CASE("metadata: malformed JSON is a cache error, not a crash", "[metadata]") {
  Entry e;
  std::string good = e.meta.to_json();
  for (std::string bad : {std::string(""), std::string("{"), std::string("[]"),
                          std::string("{\"schema\": \"one\"}"), good.substr(0, good.size() / 2)}) {
    try {
      Metadata::from_json(bad);
      FAIL("accepted: " << bad);
    } catch (const Error& err) {
      CHECK(err.status() == KJIT_ERROR_CACHE);
    }
  }
  // Every required field, removed one at a time.
  auto j = nlohmann::json::parse(good);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "registers" || it.key() == "shared_bytes" || it.key() == "ptxas_advisories") {
      continue;  // optional
    }
    auto k = j;
    k.erase(it.key());
    CHECK_THROWS_AS(Metadata::from_json(k.dump()), Error);
  }
}
