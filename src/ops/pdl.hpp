// Programmatic dependent launch of the elementwise ops (norms, activations, RoPE, KV append).
//
// On sm_90+ (unless KJIT_PDL=0), these kernels launch with programmatic stream serialization: a
// kernel's blocks may be scheduled while the kernel before it on the stream still runs, and wait
// in pdl_enter (kernels/common/prelude.cuh) for it to finish and its writes to be visible before
// touching memory; each kernel lets its successor start launching as soon as its own blocks have
// started. Back-to-back decode-size kernels then overlap one launch with the previous kernel
// instead of paying it after. The result is the same as a plain launch: every kernel still reads
// only what its predecessor finished writing. On by default: back to back on the H200,
// decode-size ops took 0.73-1.08 us less each (rmsnorm 1 x 4096 bf16: 2.24 -> 1.38 us; bench,
// events-batched, hot L2).
#pragma once

#include "cuda/launch.hpp"

namespace kjit::ops {

// Whether the process asks for programmatic dependent launches: KJIT_PDL (read once; on when
// unset), or the forced mode. No device is involved: `kjit-cli info` reports it without a GPU.
bool elementwise_pdl_requested();

// Whether elementwise launches on `device` are programmatic dependents: requested, and a sm_90+
// device.
bool elementwise_pdl(int device);

// Test and bench hook: 1 on, 0 off, -1 back to KJIT_PDL. Not thread-safe against concurrent calls.
void force_elementwise_pdl(int mode);

// Opt-in early index reads (KJIT_PDL_EARLY_INDICES, off when unset; read once): RoPE's positions
// (and, cos_sin_cache mode, its cache rows) and KV append's batch indices, positions, kv_indptr and
// kv_indices are read before the programmatic-launch wait at decode sizes, so their L2 round
// trips overlap the kernel before. The caller promises that the kernel launched just before on
// the stream does not write them (docs/c-api.md, "Launch mode"). No device is involved.
bool pdl_early_indices_requested();

// Whether launches on `device` read indices early: requested, and elementwise_pdl(device) (a
// plain launch has nothing to overlap).
bool pdl_early_indices(int device);

// Test and bench hook: 1 on, 0 off, -1 back to KJIT_PDL_EARLY_INDICES. Not thread-safe against
// concurrent calls.
void force_pdl_early_indices(int mode);

// Launches an elementwise kernel (one that calls pdl_enter first) on `device`, as a programmatic
// dependent when elementwise_pdl(device).
void launch_elementwise(CUfunction fn, const cuda::LaunchConfig& cfg, const void* params,
                        int device);

}  // namespace kjit::ops
