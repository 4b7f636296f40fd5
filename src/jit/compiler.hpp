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

// ptxas' performance notes in an NVRTC log (C75xx: "Potential Performance Loss: wgmma.mma_async
// instructions are serialized ...", "warpgroup.wait is injected ..."), one line each without the
// "ptxas info :" prefix. They print without -v and mean a kernel does not run as written: the
// prefill ping-pong kernel carried one (C7514, every wgmma serialized) through all its
// measurements until 2026-12-06.
std::vector<std::string> ptxas_advisories(const std::string& log);

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
