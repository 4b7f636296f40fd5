// JIT settings, read from KJIT_* environment variables once per JitCore (docs/env-vars.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "jit/arch.hpp"

namespace kjit::jit {

struct Settings {
  std::filesystem::path cache_dir;  // KJIT_CACHE_DIR, else $XDG_CACHE_HOME/kjit, else ~/.cache/kjit
  std::filesystem::path gen_dir;    // KJIT_GEN_DIR, else <cache_dir>/generated
  bool gen_dir_explicit = false;    // KJIT_GEN_DIR was set (then written even without disk cache)
  uint64_t cache_max_bytes = 0;     // KJIT_CACHE_MAX_SIZE (0: unbounded); pruned after publishing
  bool disable_jit = false;         // KJIT_DISABLE_JIT
  bool disk_cache = true;           // KJIT_JIT_CACHE (0 = no disk reads or writes)
  bool verbose = false;             // KJIT_JIT_VERBOSE
  bool debug = false;               // KJIT_JIT_DEBUG  -> -G
  bool lineinfo = false;            // KJIT_JIT_LINEINFO -> -lineinfo
  bool use_pch = false;             // KJIT_JIT_PCH (1: NVRTC automatic precompiled headers)
  std::vector<ArchTarget> arch_list;  // KJIT_CUDA_ARCH_LIST (compile-only extra targets)
  // AOT packages and artifact fetching (docs/aot.md).
  std::vector<std::filesystem::path> aot_dirs;  // KJIT_AOT_DIR (':'-separated), read-only
  std::filesystem::path artifact_dir;           // KJIT_ARTIFACT_DIR, else <cache_dir>/artifacts
  bool artifact_dir_explicit = false;           // KJIT_ARTIFACT_DIR was set
  std::string artifact_url;                 // KJIT_ARTIFACT_URL: http(s):// or file:// repository
  bool artifact_auto_fetch = false;         // KJIT_ARTIFACT_AUTO_FETCH
  int artifact_jobs = 4;                    // KJIT_ARTIFACT_JOBS: concurrent downloads
  int artifact_retries = 3;                 // KJIT_ARTIFACT_RETRIES: attempts after the first
  bool artifact_skip_checksum = false;      // KJIT_ARTIFACT_SKIP_CHECKSUM (debug aid, logged)
  std::string artifact_log;                 // KJIT_ARTIFACT_LOG: "" off, "stderr", or a file
  bool offline = false;                     // KJIT_OFFLINE: never download
  bool aot_allow_version_mismatch = false;  // KJIT_AOT_ALLOW_VERSION_MISMATCH

  static Settings from_env();
};

// What kjit_configure sets over the environment (unset members leave the environment's value).
struct SettingsOverride {
  std::optional<std::filesystem::path> cache_dir;  // also moves gen_dir / artifact_dir unless set
  std::optional<std::vector<std::filesystem::path>> aot_dirs;
  std::optional<bool> disable_jit;
  void apply(Settings& s) const;
};

// ':'-separated folders, empty items dropped (KJIT_AOT_DIR's syntax).
std::vector<std::filesystem::path> split_path_list(const std::string& text);

// The CUDA toolkit root whose include/ has cuda_bf16.h: KJIT_CUDA_HOME, CUDA_HOME, CUDA_PATH,
// then the build-time path. Throws KJIT_ERROR_COMPILE listing what was tried when none has it.
std::filesystem::path find_cuda_home();

}  // namespace kjit::jit
