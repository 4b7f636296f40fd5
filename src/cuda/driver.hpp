// The CUDA driver, loaded lazily with dlopen so libkjit.so has no link-time dependency on
// libcuda.so.1: compile, cache and CLI work on machines without a driver, and GPU calls then fail
// with KJIT_ERROR_NO_DEVICE instead of the library failing to load.
#pragma once

#include <cuda.h>

#include <string>

namespace kjit::cuda {

// Entry points resolved through cuGetProcAddress, each at the ABI whose signature cuda.h declares
// for its name (driver_functions.inc).
// Optional ones (newer than the oldest driver we accept) may be null.
struct Driver {
#define KJIT_CU_FN(name, abi) decltype(&::name) name = nullptr;
#include "cuda/driver_functions.inc"
#undef KJIT_CU_FN
  // Optional: cuFuncLoad (12.4+), cuStreamIsCapturing_v2 fallbacks, etc.
  CUresult (*cuFuncLoad)(CUfunction) = nullptr;
  int version = 0;  // cuDriverGetVersion
};

// The process-wide driver table. Throws kjit::Error(KJIT_ERROR_NO_DEVICE) with the reason when
// libcuda.so.1 is missing, too old, or cuInit fails; the result is cached (also the failure).
const Driver& driver();

// True when a driver loaded and at least one device exists. Never throws.
bool driver_available(std::string* why = nullptr);

// Throws kjit::Error(KJIT_ERROR_CUDA) naming `what` and the CUresult when r != CUDA_SUCCESS.
void check(CUresult r, const char* what);

}  // namespace kjit::cuda

#define KJIT_CU_CHECK(call) ::kjit::cuda::check((call), #call)
