// See pdl.hpp.
#include "ops/pdl.hpp"

#include <atomic>

#include "cuda/device.hpp"
#include "util/env.hpp"

namespace kjit::ops {

namespace {
std::atomic<int> g_forced{-1};
std::atomic<int> g_early_forced{-1};
}  // namespace

bool elementwise_pdl_requested() {
  // On unless KJIT_PDL says otherwise: PDL saves 0.73-1.08 us per back-to-back decode-size
  // elementwise op on the H200 (bench, events-batched), results bitwise equal.
  static const bool from_env = util::env_flag("KJIT_PDL", true);
  const int forced = g_forced.load();
  return forced >= 0 ? forced != 0 : from_env;
}

bool elementwise_pdl(int device) {
  return elementwise_pdl_requested() && cuda::device_info(device).major >= 9;
}

void force_elementwise_pdl(int mode) {
  g_forced.store(mode < 0 ? -1 : (mode != 0 ? 1 : 0));
}

bool pdl_early_indices_requested() {
  // Off unless asked for: it is a promise about the caller's kernel order (pdl.hpp).
  static const bool from_env = util::env_flag("KJIT_PDL_EARLY_INDICES", false);
  const int forced = g_early_forced.load();
  return forced >= 0 ? forced != 0 : from_env;
}

bool pdl_early_indices(int device) {
  return pdl_early_indices_requested() && elementwise_pdl(device);
}

void force_pdl_early_indices(int mode) {
  g_early_forced.store(mode < 0 ? -1 : (mode != 0 ? 1 : 0));
}

void launch_elementwise(CUfunction fn, const cuda::LaunchConfig& cfg, const void* params,
                        int device) {
  if (elementwise_pdl(device)) {
    cuda::launch_dependent(fn, cfg, params);
  } else {
    cuda::launch(fn, cfg, params);
  }
}

}  // namespace kjit::ops
