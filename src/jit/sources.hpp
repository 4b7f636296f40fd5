// Kernel sources handed to NVRTC. The files under kernels/ are embedded into libkjit.so at build
// time (cmake/embed_kernel.cmake, one custom command per file). KJIT_KERNEL_DIR=path/to/kernels
// reads them from disk instead, so a kernel edit is picked up on the next compile without
// relinking: the content hash, and so the cache key, changes with the edit.
#pragma once

#include <string>
#include <vector>

namespace kjit::jit {

struct SourceFile {
  std::string name;  // include name relative to kernels/, e.g. "norm/rmsnorm.cuh"
  std::string content;
};

// All embedded files, sorted by name.
const std::vector<SourceFile>& embedded_sources();

// Files of the given top-level folders ("common", "norm"), sorted by name: from KJIT_KERNEL_DIR
// when set (throws KJIT_ERROR_INVALID_ARGUMENT if a folder is missing there), else embedded.
std::vector<SourceFile> sources_for(const std::vector<std::string>& dirs);

// True when KJIT_KERNEL_DIR is set (sources may change between compiles in one process).
bool kernel_dir_override();

}  // namespace kjit::jit
