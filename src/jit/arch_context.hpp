// What compile-only work targets (kjit-cli compile, kjit_precompile without a device): the
// requested targets (--arch, else KJIT_CUDA_ARCH_LIST) together with the target each visible
// device loads, so that a warm-up on a GPU host also fills the entries its own launches read.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "jit/arch.hpp"
#include "jit/spec.hpp"

namespace kjit::jit {

struct ArchContext {
  std::vector<ArchTarget> listed;            // requested, in order, without duplicates
  std::vector<std::pair<int, int>> devices;  // compute capabilities of the visible devices

  // `requested` (or, when it is empty, `fallback`: KJIT_CUDA_ARCH_LIST) and the visible devices.
  // Throws KJIT_ERROR_NO_DEVICE when that leaves nothing to target.
  static ArchContext current(const std::vector<ArchTarget>& requested,
                             const std::vector<ArchTarget>& fallback);

  // The targets `spec` is built for: the listed ones it supports, then each device's
  // (select_device_target), without duplicates; the others go to `skipped` as "sm_XY". Throws
  // KJIT_ERROR_UNSUPPORTED naming the spec when none is left.
  std::vector<ArchTarget> targets_for(const Spec& spec, std::vector<std::string>* skipped) const;

  std::string describe() const;  // "sm_80 sm_90a + devices sm_90"
};

}  // namespace kjit::jit
