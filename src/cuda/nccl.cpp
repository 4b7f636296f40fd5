#include "cuda/nccl.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <vector>

#include "util/env.hpp"
#include "util/error.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == sizeof(kjit::cuda::NcclUniqueId));
static_assert(ncclFloat16 == kjit::cuda::kNcclFloat16 && ncclFloat32 == kjit::cuda::kNcclFloat32 &&
              ncclBfloat16 == kjit::cuda::kNcclBfloat16 && ncclSum == kjit::cuda::kNcclSum);
#endif

namespace kjit::cuda {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSoname = "libnccl.so.2";

}  // namespace

std::vector<std::string> nccl_candidates() {
  // An explicit path is the only candidate: what the caller named is what gets loaded.
  if (auto p = util::env_get("KJIT_NCCL_PATH"); p && !p->empty()) return {*p};
  std::vector<std::string> c{kSoname};
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = util::env_get(var); v && !v->empty()) {
      for (const char* lib : {"lib64", "lib"}) c.push_back((fs::path(*v) / lib / kSoname).string());
    }
  }
  for (const char* lib : {"lib64", "lib"}) {
    c.push_back((fs::path(KJIT_BUILD_CUDA_HOME) / lib / kSoname).string());
  }
  return c;
}

namespace {

template <typename F>
bool resolve(void* lib, const char* name, F& slot, std::string& missing) {
  slot = reinterpret_cast<F>(::dlsym(lib, name));
  if (slot == nullptr) missing += fmt::format(" {}", name);
  return slot != nullptr;
}

}  // namespace

NcclLoad load_nccl(const std::vector<std::string>& candidates) {
  NcclLoad out;
  std::string tried;
  for (const std::string& name : candidates) {
    void* lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      tried += fmt::format("\n  {}: {}", name, why ? why : "not loadable");
      continue;
    }
    Nccl& n = out.fns;
    std::string missing;
    resolve(lib, "ncclGetVersion", n.ncclGetVersion, missing);
    resolve(lib, "ncclGetUniqueId", n.ncclGetUniqueId, missing);
    resolve(lib, "ncclCommInitRank", n.ncclCommInitRank, missing);
    resolve(lib, "ncclCommDestroy", n.ncclCommDestroy, missing);
    resolve(lib, "ncclAllReduce", n.ncclAllReduce, missing);
    resolve(lib, "ncclGetErrorString", n.ncclGetErrorString, missing);
    if (!missing.empty()) {
      tried += fmt::format("\n  {}: lacks{}", name, missing);
      ::dlclose(lib);
      out.fns = Nccl{};
      continue;
    }
    n.path = name;
    n.ncclGetVersion(&n.version);
    return out;  // kept open for the life of the process
  }
  out.error = fmt::format(
      "NCCL not found: {} could not be loaded (set KJIT_NCCL_PATH to the engine's libnccl.so.2, "
      "or add its folder to the loader's path); tried:{}",
      kSoname, tried);
  return out;
}

namespace {

const NcclLoad& loaded() {
  static const NcclLoad l = load_nccl(nccl_candidates());
  return l;
}

}  // namespace

const Nccl& nccl() {
  const NcclLoad& l = loaded();
  if (!l.error.empty()) throw Error(KJIT_ERROR_UNSUPPORTED, l.error);
  return l.fns;
}

bool nccl_available(std::string* why) {
  const NcclLoad& l = loaded();
  if (!l.error.empty() && why) *why = l.error;
  return l.error.empty();
}

void nccl_check(NcclResult r, const char* what) {
  if (r == 0) return;
  const char* text = loaded().fns.ncclGetErrorString ? loaded().fns.ncclGetErrorString(r) : "?";
  fail(KJIT_ERROR_CUDA, "{} failed: NCCL error {}: {}", what, r, text ? text : "?");
}

}  // namespace kjit::cuda
