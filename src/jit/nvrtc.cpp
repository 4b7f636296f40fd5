#include "jit/nvrtc.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <vector>

#include "util/env.hpp"
#include "util/error.hpp"

namespace kjit::jit {
namespace {

namespace fs = std::filesystem;

struct Loaded {
  Nvrtc fns;
  std::string error;  // empty when loaded
};

std::vector<std::string> candidates() {
  // An explicit path is the only candidate: what the caller named is what gets loaded.
  if (auto p = util::env_get("KJIT_NVRTC_PATH"); p && !p->empty()) return {*p};
  std::vector<std::string> c{KJIT_NVRTC_SONAME};
  std::vector<std::string> homes;
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = util::env_get(var); v && !v->empty()) homes.push_back(*v);
  }
  homes.push_back(KJIT_BUILD_CUDA_HOME);
  for (const auto& h : homes) {
    for (const char* lib : {"lib64", "lib"}) {
      c.push_back((fs::path(h) / lib / KJIT_NVRTC_SONAME).string());
    }
  }
  return c;
}

Loaded load() {
  Loaded out;
  std::string tried;
  for (const std::string& name : candidates()) {
    void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      tried += fmt::format("\n  {}: {}", name, why ? why : "not loadable");
      continue;
    }
    Nvrtc& n = out.fns;
    std::string missing;
#define KJIT_NVRTC_FN(fn)                                      \
  n.fn = reinterpret_cast<decltype(&::fn)>(::dlsym(lib, #fn)); \
  if (n.fn == nullptr) missing += " " #fn;
#include "jit/nvrtc_functions.inc"
#undef KJIT_NVRTC_FN
    if (!missing.empty()) {
      tried += fmt::format("\n  {}: lacks{}", name, missing);
      ::dlclose(lib);
      out.fns = Nvrtc{};
      continue;
    }
    n.path = name;
    return out;  // kept open for the life of the process
  }
  out.error = fmt::format(
      "NVRTC ({}) could not be loaded, so nothing can be compiled here (set KJIT_NVRTC_PATH or "
      "CUDA_HOME, or run from cached / AOT-packaged cubins); tried:{}",
      KJIT_NVRTC_SONAME, tried);
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Nvrtc& nvrtc() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(KJIT_ERROR_COMPILE, l.error);
  return l.fns;
}

bool nvrtc_available(std::string* why) {
  const Loaded& l = loaded();
  if (why != nullptr) *why = l.error;
  return l.error.empty();
}

std::vector<int> nvrtc_supported_archs() {
  static const std::vector<int> archs = [] {
    const Nvrtc& n = nvrtc();
    int count = 0;
    std::vector<int> v;
    if (n.nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      v.resize(static_cast<size_t>(count));
      if (n.nvrtcGetSupportedArchs(v.data()) != NVRTC_SUCCESS) v.clear();
    }
    return v;
  }();
  return archs;
}

std::string nvrtc_version() {
  static const std::string v = [] {
    if (!nvrtc_available()) return std::string(KJIT_BUILD_NVRTC_VERSION);
    int major = 0, minor = 0;
    nvrtc().nvrtcVersion(&major, &minor);
    return fmt::format("{}.{}", major, minor);
  }();
  return v;
}

}  // namespace kjit::jit
