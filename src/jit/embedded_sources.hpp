// The table generated at build time from kernels/ (see cmake/embed_kernel.cmake).
#pragma once

#include <cstddef>

namespace kjit::jit {

struct EmbeddedSource {
  const char* name;
  const char* data;
  size_t size;
};

extern const EmbeddedSource kEmbeddedSources[];
extern const size_t kEmbeddedSourceCount;

}  // namespace kjit::jit
