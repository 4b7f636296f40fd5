// NVRTC: a Spec + target -> cubin, in-process. NVRTC's front end serializes compiles within a
// process, so parallel cold compiles use worker processes (kjit-cli compile -j), not threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "jit/arch.hpp"
#include "jit/nvrtc.hpp"
#include "jit/settings.hpp"
#include "jit/sources.hpp"
#include "jit/spec.hpp"

namespace kjit::jit {

struct CompileOutput {
  std::string cubin;
  std::vector<std::pair<std::string, std::string>> lowered_names;  // name expression -> mangled
  std::string log;
  double compile_ms = 0;
};

// nvrtc_version(): jit/nvrtc.hpp.

// The options that determine the code: everything except include paths, which differ between
// machines without changing the output. These enter the cache key.
std::vector<std::string> semantic_options(const Spec& spec, const ArchTarget& target,
                                          const Settings& settings);

// Throws KJIT_ERROR_UNSUPPORTED, listing what NVRTC targets, when the loaded NVRTC cannot compile
// for `target` (sm_999); KJIT_ERROR_COMPILE when no NVRTC loads.
void check_nvrtc_target(const ArchTarget& target);

// Compiles main_source(spec) with the spec's kernel sources as NVRTC headers.
// Throws KJIT_ERROR_COMPILE with the URI, the target and the NVRTC log on failure.
CompileOutput compile_cubin(const Spec& spec, const std::vector<SourceFile>& sources,
                            const ArchTarget& target, const Settings& settings);

}  // namespace kjit::jit
