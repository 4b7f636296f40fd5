// Programmatic dependent launch of the elementwise ops (norms, activations, RoPE, KV append,
// embedding, the fused fp8 quantizations).
//
// On sm_90+ (unless KJIT_PDL=0), these kernels launch with programmatic stream serialization: a
// kernel's blocks may be scheduled while the kernel before it on the stream still runs, and wait
// in pdl_enter (kernels/common/prelude.cuh) for it to finish and its writes to be visible before
// touching memory; each kernel lets its successor start launching as soon as its own blocks have
// started. Back-to-back decode-size kernels then overlap one launch with the previous kernel
// instead of paying it after. The result is the same as a plain launch: every kernel still reads
// only what its predecessor finished writing. On by default: back to back on the H200, decode-size
// ops took 0.73-1.08 us less each (rmsnorm 1 x 4096 bf16: 2.24 -> 1.38 us), results bitwise equal.
#pragma once

#include "cuda/launch.hpp"

namespace kjit::ops {

// How one elementwise call launches. The C entry points use elementwise_launch_from_env(); tests
// and the bench pass their own to the ops-layer functions.
struct ElementwiseLaunch {
  // A programmatic dependent launch where the device has it (sm_90+); plain elsewhere.
  bool pdl = true;
  // With pdl: RoPE's positions (and, cos_sin_cache mode, its cache rows) and KV append's batch
  // indices, positions, kv_indptr and kv_indices are read before the programmatic-launch wait at
  // decode sizes, so their L2 round trips overlap the kernel before. A promise by the caller that
  // the kernel launched just before on the stream does not write them (docs/c-api.md, "Launch
  // mode").
  bool early_indices = false;
};

// The process's settings, read once: KJIT_PDL (on when unset) and KJIT_PDL_EARLY_INDICES (off when
// unset). No device is involved: `kjit-cli info` reports them without a GPU.
const ElementwiseLaunch& elementwise_launch_from_env();
bool elementwise_pdl_requested();    // elementwise_launch_from_env().pdl
bool pdl_early_indices_requested();  // elementwise_launch_from_env().early_indices

// Whether a launch on `device` with `how` is a programmatic dependent: asked for, and a sm_90+
// device. Without `how`, the process's settings.
bool elementwise_pdl(int device, const ElementwiseLaunch& how = elementwise_launch_from_env());

// Whether a launch on `device` with `how` reads indices early: asked for, and
// elementwise_pdl(device, how) (a plain launch has nothing to overlap).
bool pdl_early_indices(int device, const ElementwiseLaunch& how = elementwise_launch_from_env());

// Launches an elementwise kernel (one that calls pdl_enter first) on `device`, as a programmatic
// dependent when elementwise_pdl(device, how).
void launch_elementwise(CUfunction fn, const cuda::LaunchConfig& cfg, const void* params,
                        int device, const ElementwiseLaunch& how);

}  // namespace kjit::ops
