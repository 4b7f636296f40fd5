// NVRTC, dlopen'ed on first need like the driver (src/cuda/driver.hpp): libkjit.so does not link
// libnvrtc.so (about 110 MB), so a host that only loads cached or AOT-packaged cubins
// (KJIT_DISABLE_JIT=1) starts and runs without it, and one whose loader does not know the CUDA
// library folder finds it through KJIT_NVRTC_PATH or CUDA_HOME.
//
// What loads: KJIT_NVRTC_PATH when set (that file only), else the soname of the toolkit kjit was
// built with (libnvrtc.so.13) on the loader's path, then in lib64/ and lib/ of KJIT_CUDA_HOME,
// CUDA_HOME, CUDA_PATH and the build's toolkit, first found.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace kjit::jit {

// The NVRTC functions kjit calls, with nvrtc.h's types.
struct Nvrtc {
#define KJIT_NVRTC_FN(name) decltype(&::name) name = nullptr;
#include "jit/nvrtc_functions.inc"
#undef KJIT_NVRTC_FN
  std::string path;  // the file that was loaded
};

// The loaded library. Throws KJIT_ERROR_COMPILE, saying where it looked, when none loads: only a
// compile needs it.
const Nvrtc& nvrtc();

// Whether NVRTC loads here; `why` gets the reason when not. Never throws.
bool nvrtc_available(std::string* why = nullptr);

// The SASS archs the loaded NVRTC compiles for, as compute capability x 10 (75, 80, 90, ...).
// Throws like nvrtc() when none loads.
std::vector<int> nvrtc_supported_archs();

// "13.0": the loaded NVRTC's version, or the build's NVRTC version when none loads, so that cache
// and AOT keys of a host without NVRTC match the entries the same toolkit built.
std::string nvrtc_version();

}  // namespace kjit::jit
