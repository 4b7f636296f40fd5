// The cache sidecar reader and the entry check: Metadata::from_json, validate_entry, and the
// round trip of what was accepted. The input is the JSON file as a reader would find it on disk.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "cache/metadata.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kjit::jit::Metadata m;
  try {
    m = kjit::jit::Metadata::from_json(text);
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_CACHE);
    return 0;
  }
  // What a reader does next with an accepted sidecar: check it against a cubin and its own key.
  const std::string cubin =
      "\x7f"
      "ELF fuzz";
  kjit::jit::KeyInputs expected = m.inputs;
  (void)kjit::jit::validate_entry(m, cubin, m.key, expected);
  (void)kjit::jit::compute_key(m.inputs).hex();
  // A sidecar whose recorded size and hash match is valid exactly when the rest is.
  m.cubin_size = cubin.size();
  m.cubin_hash = kjit::util::xxh3_64_hex(cubin);
  auto why = kjit::jit::validate_entry(m, cubin, m.key, expected);
  if (!why) FUZZ_ASSERT(m.schema == kjit::jit::kCacheSchemaVersion && !m.lowered_names.empty());
  // The writer's output of an accepted sidecar reads back to the same identity.
  const kjit::jit::Metadata back = kjit::jit::Metadata::from_json(m.to_json());
  FUZZ_ASSERT(back.key == m.key && back.uri == m.uri && back.cubin_size == m.cubin_size);
  FUZZ_ASSERT(back.inputs.params == m.inputs.params && back.inputs.options == m.inputs.options);
  FUZZ_ASSERT(kjit::jit::compute_key(back.inputs).hex() == kjit::jit::compute_key(m.inputs).hex());
  return 0;
}
