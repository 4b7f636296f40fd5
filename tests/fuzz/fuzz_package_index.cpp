// The AOT package index reader (index.json of KJIT_AOT_DIR or of a download): PackageIndex::
// from_json, lookups, and the round trip of what was accepted. Every accepted entry's file paths
// must stay inside the package.
#include <cstddef>
#include <cstdint>
#include <string>

#include "aot/package.hpp"
#include "fuzz_common.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kjit::aot::PackageIndex index;
  try {
    index = kjit::aot::PackageIndex::from_json(text);
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_CACHE);
    return 0;
  }
  for (const auto& e : index.entries) {
    FUZZ_ASSERT(index.find(e.uri, e.arch) != nullptr);
    // No entry may name a path outside the package.
    for (const std::string* p : {&e.file, &e.metadata}) {
      FUZZ_ASSERT(!p->empty() && (*p)[0] != '/');
      FUZZ_ASSERT(p->find("..") == std::string::npos);
      FUZZ_ASSERT(p->find('\0') == std::string::npos);
    }
  }
  const kjit::aot::PackageIndex back = kjit::aot::PackageIndex::from_json(index.to_json());
  FUZZ_ASSERT(back.entries.size() == index.entries.size());
  return 0;
}
