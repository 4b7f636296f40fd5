/*
 * kjit: run-time compiled GPU kernels for LLM inference.
 *
 * The C ABI is the only public surface of libkjit.so. Conventions:
 *  - Every function returns a kjit_status (or a plain value where it cannot fail).
 *  - On failure, kjit_last_error() returns a message for the calling thread (for compile failures
 *    it holds the NVRTC log and the specialization URI). No C++ exception crosses this boundary.
 *  - Tensors are DLPack DLTensor (dlpack/dlpack.h). Inputs come first, then outputs, then
 *    scalars, then `stream`: a CUstream / cudaStream_t, NULL meaning the legacy default stream.
 *  - The runtime is process-global and created lazily on first use. Unless a function says
 *    otherwise it is safe to call from any number of threads at once.
 *  - Ops only enqueue work on `stream`; they never synchronize with the host once the
 *    specialization is loaded (the first call of a specialization may compile it).
 */
#ifndef KJIT_KJIT_H
#define KJIT_KJIT_H

#include <dlpack/dlpack.h>

#include "kjit/version.h"

#if defined(_WIN32)
#define KJIT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define KJIT_API __attribute__((visibility("default")))
#else
#define KJIT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kjit_status {
  KJIT_SUCCESS = 0,
  /* A null pointer, a wrong dtype, shape, stride, alignment or device, a bad scalar. */
  KJIT_ERROR_INVALID_ARGUMENT = 1,
  /* A well-formed request this build or this GPU cannot serve (e.g. no arch in common). */
  KJIT_ERROR_UNSUPPORTED = 2,
  /* No CUDA driver (libcuda.so.1) or no CUDA device; compile and cache work still do. */
  KJIT_ERROR_NO_DEVICE = 3,
  /* A CUDA driver call failed; the message names the call and the CUresult. */
  KJIT_ERROR_CUDA = 4,
  /* NVRTC failed; the message holds the URI and the compile log. */
  KJIT_ERROR_COMPILE = 5,
  /* KJIT_DISABLE_JIT=1 and no valid cached module exists; the message names the URI. */
  KJIT_ERROR_JIT_DISABLED = 6,
  /* Reading or writing the disk cache failed in a way that could not be worked around. */
  KJIT_ERROR_CACHE = 7,
  KJIT_ERROR_OUT_OF_MEMORY = 8,
  KJIT_ERROR_INTERNAL = 9
} kjit_status;

/* ---- Versions and errors (thread-safe, never fail) ------------------------------------------ */

/* "MAJOR.MINOR.PATCH" of the loaded library (compare with KJIT_VERSION_STRING). */
KJIT_API const char* kjit_version_string(void);
/* MAJOR*10000 + MINOR*100 + PATCH of the loaded library. */
KJIT_API int kjit_version_number(void);
/* KJIT_ABI_VERSION of the loaded library; a mismatch with the header means rebuild. */
KJIT_API int kjit_abi_version(void);
/* Static text for a status code ("KJIT_ERROR_INVALID_ARGUMENT", ...). */
KJIT_API const char* kjit_status_string(kjit_status status);
/* Detail of the last failure on the calling thread; "" if the last call succeeded. The pointer
 * stays valid until the next kjit call on the same thread. */
KJIT_API const char* kjit_last_error(void);

/* ---- Normalization ------------------------------------------------------------------------ */

/*
 * out = input * rsqrt(mean(input^2, last dim) + eps) * weight
 *
 * input, out: [..., hidden], bf16 / fp16 / fp32 (same dtype), on one CUDA device. The last dim
 *   must be contiguous (stride 1); the leading dims must collapse into rows with one row stride
 *   (row-strided views such as x[:, :hidden] are accepted). out may alias input exactly.
 * weight: [hidden], same dtype, contiguous.
 * Any hidden size works. 16-byte aligned pointers and row strides take the 16-byte vector path;
 * otherwise the widest vector width the alignment allows is used (down to scalar): never an
 * error. eps must be finite and >= 0. Zero rows is a successful no-op.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out,
                                  float eps, void* stream);

/* ---- Activations (kernels/activation, src/ops/activation) ---------------------------------- */

/* ---- Rotary position embedding (kernels/rope, src/ops/rope) -------------------------------- */

/* ---- Paged KV cache (kernels/kv_cache, src/ops/kv_cache) ----------------------------------- */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KJIT_KJIT_H */
