// Spec construction from `kjit-cli compile --set` parameters: the op's OpDef::make_spec on
// arbitrary name=value pairs. Input: the op name on the first line (or, when the first byte is
// below 32, that byte picks a registered op), then one "name=value" per line.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz_common.hpp"
#include "cache/metadata.hpp"
#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  const auto& ops = kjit::ops::op_registry();
  std::istringstream in(text);
  std::string first;
  std::getline(in, first);
  const kjit::ops::OpDef* def = nullptr;
  if (!first.empty() && static_cast<unsigned char>(first[0]) < 32) {
    def = &ops[static_cast<unsigned char>(first[0]) % ops.size()];
  } else {
    def = kjit::ops::find_op(first);
  }
  if (def == nullptr) return 0;
  kjit::ops::SetArgs args;
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    args[line.substr(0, eq)] = line.substr(eq + 1);
  }
  kjit::jit::Spec spec;
  try {
    spec = def->make_spec(args);
  } catch (const kjit::Error& e) {
    FUZZ_ASSERT(e.status() == KJIT_ERROR_INVALID_ARGUMENT || e.status() == KJIT_ERROR_UNSUPPORTED);
    return 0;
  }
  // An accepted spec is well-formed: its URI is a safe file name made of its parameters, and it
  // names its kernels and the families it may be compiled for.
  FUZZ_ASSERT(spec.uri == kjit::jit::make_uri(spec.op, spec.params));
  FUZZ_ASSERT(!spec.uri.empty() && spec.uri.size() < 200);
  FUZZ_ASSERT(spec.uri.find('/') == std::string::npos && spec.uri.find("..") == std::string::npos);
  FUZZ_ASSERT(!spec.entry_names.empty() && !spec.arch_families.empty());
  (void)kjit::jit::main_source(spec);
  return 0;
}
