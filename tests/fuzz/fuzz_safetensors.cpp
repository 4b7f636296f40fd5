// The safetensors reader (src/util/safetensors) on arbitrary file contents: parse, then every
// accessor on what was accepted. Every tensor's bytes must lie inside the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "util/error.hpp"
#include "diag/safetensors.hpp"

namespace st = kjit::util::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const st::File f = st::File::parse(bytes);
    uint64_t total = 0, prev_end = 0;
    for (const auto& t : f.tensors()) {  // in data order, none overlapping
      FUZZ_ASSERT(t.begin >= prev_end);
      prev_end = t.end;
      FUZZ_ASSERT(t.begin <= t.end);
      FUZZ_ASSERT(t.end - t.begin == t.numel() * st::dtype_size(t.dtype));
      const std::string_view d = f.data(t);
      FUZZ_ASSERT(d.size() == t.end - t.begin);
      FUZZ_ASSERT(f.find(t.name) != nullptr);
      total += d.size();
    }
    FUZZ_ASSERT(total <= size);
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
  }
  return 0;
}
