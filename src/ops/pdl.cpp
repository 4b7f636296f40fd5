// See pdl.hpp.
#include "ops/pdl.hpp"

#include "cuda/device.hpp"
#include "util/env.hpp"

namespace kjit::ops {

const ElementwiseLaunch& elementwise_launch_from_env() {
  static const ElementwiseLaunch from_env = [] {
    ElementwiseLaunch l;
    // On unless KJIT_PDL says otherwise (see pdl.hpp for the measurement).
    l.pdl = util::env_flag("KJIT_PDL", true);
    // Off unless asked for: it is a promise about the caller's kernel order.
    l.early_indices = util::env_flag("KJIT_PDL_EARLY_INDICES", false);
    return l;
  }();
  return from_env;
}

bool elementwise_pdl_requested() {
  return elementwise_launch_from_env().pdl;
}

bool pdl_early_indices_requested() {
  return elementwise_launch_from_env().early_indices;
}

bool elementwise_pdl(int device, const ElementwiseLaunch& how) {
  return how.pdl && cuda::device_info(device).major >= 9;
}

bool pdl_early_indices(int device, const ElementwiseLaunch& how) {
  return how.early_indices && elementwise_pdl(device, how);
}

void launch_elementwise(CUfunction fn, const cuda::LaunchConfig& cfg, const void* params,
                        int device, const ElementwiseLaunch& how) {
  if (elementwise_pdl(device, how)) {
    cuda::launch_dependent(fn, cfg, params);
  } else {
    cuda::launch(fn, cfg, params);
  }
}

}  // namespace kjit::ops
