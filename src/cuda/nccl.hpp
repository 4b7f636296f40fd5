// NCCL, dlopen'ed on first need like the driver (src/cuda/driver.hpp): libkjit.so does not link
// libnccl.so, so kjit loads and runs every other op on a host without NCCL, and the
// communication entry points then fail with a status that says NCCL was not found.
//
// What loads: KJIT_NCCL_PATH when set (that file only), else libnccl.so.2 through the loader's
// path, then in lib64/ and lib/ of KJIT_CUDA_HOME, CUDA_HOME, CUDA_PATH and the build's toolkit,
// first found. An engine that ships its own NCCL (PyTorch's nvidia-nccl-cu12 wheel) points
// KJIT_NCCL_PATH at it, so that both use one library.
//
// The few types kjit needs are declared here from NCCL's stable C ABI (nccl.h 2.x), so building
// kjit needs no nccl.h; nccl.cpp checks them against nccl.h where the toolkit has one.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

namespace kjit::cuda {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct NcclUniqueId {
  char internal[kNcclUniqueIdBytes];
};
using NcclComm = struct ncclComm*;
using NcclResult = int;  // ncclResult_t; 0 is ncclSuccess
inline constexpr int kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclBfloat16 = 9;  // ncclDataType_t
inline constexpr int kNcclSum = 0;                                           // ncclRedOp_t

struct Nccl {
  NcclResult (*ncclGetVersion)(int*) = nullptr;
  NcclResult (*ncclGetUniqueId)(NcclUniqueId*) = nullptr;
  NcclResult (*ncclCommInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  NcclResult (*ncclCommDestroy)(NcclComm) = nullptr;
  NcclResult (*ncclAllReduce)(const void*, void*, size_t, int, int, NcclComm, CUstream) = nullptr;
  const char* (*ncclGetErrorString)(NcclResult) = nullptr;
  std::string path;  // the file that was loaded
  int version = 0;   // ncclGetVersion: major * 10000 + minor * 100 + patch
};

// Where the library is looked for, in order (the rule above).
std::vector<std::string> nccl_candidates();

// The first of `candidates` that loads and has every entry point; else error says what each
// candidate lacked. nccl() below does this once per process with nccl_candidates().
struct NcclLoad {
  Nccl fns;
  std::string error;  // empty when loaded
};
NcclLoad load_nccl(const std::vector<std::string>& candidates);

// The process's library. Throws KJIT_ERROR_UNSUPPORTED ("NCCL not found", saying where it looked)
// when none loads.
const Nccl& nccl();

// Whether NCCL loads here; `why` gets the reason when not. Never throws.
bool nccl_available(std::string* why = nullptr);

// Throws KJIT_ERROR_CUDA naming `what` and NCCL's message when r is not ncclSuccess.
void nccl_check(NcclResult r, const char* what);

}  // namespace kjit::cuda
