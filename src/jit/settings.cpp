#include "jit/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "util/env.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

#ifndef KJIT_BUILD_CUDA_HOME
#define KJIT_BUILD_CUDA_HOME "/usr/local/cuda"
#endif

namespace kjit::jit {

namespace fs = std::filesystem;
using util::env_flag;
using util::env_get;

namespace {

// An integer variable in [lo, hi]; anything else is warned about and gives `fallback`, so a typo
// in a tuning knob never stops inference.
int env_int(const char* name, int fallback, int lo, int hi) {
  auto v = env_get(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' || n < lo || n > hi) {
    util::log("warning: {}={} is not an integer in {}..{}; using {}", name, *v, lo, hi, fallback);
    return fallback;
  }
  return static_cast<int>(n);
}

}  // namespace

Settings Settings::from_env() {
  Settings s;
  if (auto v = env_get("KJIT_CACHE_DIR"); v && !v->empty()) {
    s.cache_dir = *v;
  } else if (auto x = env_get("XDG_CACHE_HOME"); x && !x->empty()) {
    s.cache_dir = fs::path(*x) / "kjit";
  } else if (auto h = env_get("HOME"); h && !h->empty()) {
    s.cache_dir = fs::path(*h) / ".cache" / "kjit";
  } else {
    s.cache_dir = fs::temp_directory_path() / "kjit-cache";
  }
  if (auto v = env_get("KJIT_GEN_DIR"); v && !v->empty()) {
    s.gen_dir = *v;
    s.gen_dir_explicit = true;
  } else {
    s.gen_dir = s.cache_dir / "generated";
  }
  if (auto v = env_get("KJIT_CACHE_MAX_SIZE"); v && !v->empty()) {
    if (!util::parse_byte_count(*v, &s.cache_max_bytes)) {
      util::log("warning: KJIT_CACHE_MAX_SIZE={} is not a size like 500M or 2G; no bound", *v);
      s.cache_max_bytes = 0;
    }
  }
  s.disable_jit = env_flag("KJIT_DISABLE_JIT");
  s.disk_cache = env_flag("KJIT_JIT_CACHE", true);
  s.verbose = env_flag("KJIT_JIT_VERBOSE");
  s.debug = env_flag("KJIT_JIT_DEBUG");
  s.lineinfo = env_flag("KJIT_JIT_LINEINFO");
  s.use_pch = env_flag("KJIT_JIT_PCH", false);
  if (auto v = env_get("KJIT_CUDA_ARCH_LIST")) s.arch_list = parse_arch_list(*v);
  if (auto v = env_get("KJIT_AOT_DIR")) s.aot_dirs = split_path_list(*v);
  if (auto v = env_get("KJIT_ARTIFACT_DIR"); v && !v->empty()) {
    s.artifact_dir = *v;
    s.artifact_dir_explicit = true;
  } else {
    s.artifact_dir = s.cache_dir / "artifacts";
  }
  s.artifact_url = env_get("KJIT_ARTIFACT_URL").value_or("");
  s.artifact_auto_fetch = env_flag("KJIT_ARTIFACT_AUTO_FETCH");
  s.artifact_jobs = env_int("KJIT_ARTIFACT_JOBS", s.artifact_jobs, 1, 64);
  s.artifact_retries = env_int("KJIT_ARTIFACT_RETRIES", s.artifact_retries, 0, 10);
  s.artifact_skip_checksum = env_flag("KJIT_ARTIFACT_SKIP_CHECKSUM");
  if (auto v = env_get("KJIT_ARTIFACT_LOG")) {
    std::string lower = *v;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "1" || lower == "true" || lower == "yes" || lower == "on" || lower == "stderr") {
      s.artifact_log = "stderr";
    } else if (!(lower.empty() || lower == "0" || lower == "false" || lower == "no" ||
                 lower == "off")) {
      s.artifact_log = *v;  // a file to append to
    }
  }
  s.offline = env_flag("KJIT_OFFLINE");
  s.aot_allow_version_mismatch = env_flag("KJIT_AOT_ALLOW_VERSION_MISMATCH");
  return s;
}

std::vector<fs::path> split_path_list(const std::string& text) {
  std::vector<fs::path> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(':', start), text.size());
    if (end > start) out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void SettingsOverride::apply(Settings& s) const {
  if (cache_dir) {
    s.cache_dir = *cache_dir;
    if (!s.gen_dir_explicit) s.gen_dir = s.cache_dir / "generated";
    if (!s.artifact_dir_explicit) s.artifact_dir = s.cache_dir / "artifacts";
  }
  if (aot_dirs) s.aot_dirs = *aot_dirs;
  if (disable_jit) s.disable_jit = *disable_jit;
}

fs::path find_cuda_home() {
  std::string tried;
  auto has_headers = [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p / "include" / "cuda_bf16.h", ec);
  };
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = env_get(var); v && !v->empty()) {
      if (has_headers(*v)) return *v;
      tried += fmt::format(" {}={}", var, *v);
    }
  }
  if (has_headers(KJIT_BUILD_CUDA_HOME)) return KJIT_BUILD_CUDA_HOME;
  tried += fmt::format(" build-time={}", KJIT_BUILD_CUDA_HOME);
  fail(KJIT_ERROR_COMPILE,
       "CUDA headers not found (need <home>/include/cuda_bf16.h); tried:{}. Set KJIT_CUDA_HOME.",
       tried);
}

}  // namespace kjit::jit
