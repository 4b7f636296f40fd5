#include "cuda/driver.hpp"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "util/error.hpp"

namespace kjit::cuda {
namespace {

// A member whose type is not the ABI requested for it would be called with the wrong arguments
// (CUDA 13's cuCtxSynchronize_v2 reads a CUcontext from whatever register the caller left).
#define KJIT_CU_FN(name, abi)                                                \
  static_assert(std::is_same_v<decltype(Driver::name), PFN_##name##_v##abi>, \
                #name ": driver_functions.inc names another ABI than cuda.h declares");
#include "cuda/driver_functions.inc"
#undef KJIT_CU_FN
static_assert(std::is_same_v<decltype(Driver::cuFuncLoad), PFN_cuFuncLoad_v12040>);

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

struct Loaded {
  Driver driver;
  std::string error;  // empty when usable
  bool ok = false;
};

Loaded load_driver() {
  Loaded out;
  // libcuda.so.1 is the driver's soname; the unversioned name exists only with dev packages.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    out.error =
        fmt::format("no CUDA driver: dlopen(libcuda.so.1) failed: {}", why ? why : "unknown error");
    return out;
  }
  auto get_proc = reinterpret_cast<GetProcAddressFn>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    out.error = "CUDA driver too old: cuGetProcAddress_v2 missing (need a CUDA 12+ driver)";
    return out;
  }
  Driver& d = out.driver;
  std::string missing;
  auto load = [&](const char* name, void** slot, int abi, bool required) {
    CUdriverProcAddressQueryResult status{};
    CUresult r = get_proc(name, slot, abi, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) {
      *slot = nullptr;
      if (required) missing += fmt::format(" {}", name);
    }
  };
  // #name is the unversioned symbol (cuMemAlloc) that cuGetProcAddress expects; d.name expands to
  // the versioned member (cuMemAlloc_v2), whose type is PFN_<name>_v<abi> (asserted above).
#define KJIT_CU_FN(name, abi) load(#name, reinterpret_cast<void**>(&d.name), abi, true);
#include "cuda/driver_functions.inc"
#undef KJIT_CU_FN
  load("cuFuncLoad", reinterpret_cast<void**>(&d.cuFuncLoad), 12040, false);
  if (!missing.empty()) {
    out.error = fmt::format("CUDA driver lacks entry points:{}", missing);
    return out;
  }
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(r, &name);
    out.error = fmt::format("cuInit failed: {} ({})", name ? name : "?", static_cast<int>(r));
    return out;
  }
  d.cuDriverGetVersion(&d.version);
  int count = 0;
  if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    out.error = "no CUDA device visible";
    return out;
  }
  out.ok = true;
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load_driver();  // the library handle is deliberately never closed
  return l;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.ok) throw Error(KJIT_ERROR_NO_DEVICE, l.error);
  return l.driver;
}

bool driver_available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.error;
  return l.ok;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const Driver& d = loaded().driver;
  const char* name = "?";
  const char* text = "";
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  kjit_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? KJIT_ERROR_OUT_OF_MEMORY : KJIT_ERROR_CUDA;
  fail(st, "{} failed: {} ({}): {}", what, name, static_cast<int>(r), text);
}

}  // namespace kjit::cuda
