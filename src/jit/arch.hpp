// Compilation targets. A target is an exact SASS arch (sm_80, sm_90, sm_90a). A spec declares the
// families it supports ("sm_80+" = any target of compute capability >= 8.0, arch-specific or not;
// "sm_90a" = exactly that target, for kernels using Hopper-only instructions such as wgmma).
// kjit never compiles a spec for a target outside its families, and never silently substitutes
// one family for another.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::jit {

struct ArchTarget {
  int major = 0;
  int minor = 0;
  bool arch_specific = false;  // the "a" suffix: cubin runs only on exactly this cc

  int cc() const { return major * 10 + minor; }
  std::string sm() const;  // "sm_90a"
  bool operator==(const ArchTarget& o) const {
    return major == o.major && minor == o.minor && arch_specific == o.arch_specific;
  }
  bool operator!=(const ArchTarget& o) const { return !(*this == o); }

  // Accepts "sm_90a", "sm90a", "9.0a", "90a", "compute_90a" (case-insensitive).
  static std::optional<ArchTarget> parse(std::string_view text);
};

// Parses a list separated by spaces, commas or semicolons. Throws kjit::Error
// (KJIT_ERROR_INVALID_ARGUMENT) naming the bad item.
std::vector<ArchTarget> parse_arch_list(std::string_view text);
std::string format_arch_list(const std::vector<ArchTarget>& targets);

// True when `target` belongs to one of `families` ("sm_80+", "sm_90a", "sm_90").
bool family_supports(const std::vector<std::string>& families, const ArchTarget& target);

// The targets of `requested` that the spec supports. Throws KJIT_ERROR_UNSUPPORTED naming both
// lists when none is.
std::vector<ArchTarget> select_targets(const std::vector<std::string>& families,
                                       const std::vector<ArchTarget>& requested,
                                       std::string_view uri);

// The one target to build for a device of compute capability major.minor: the plain target
// (sm_90) when the spec supports it, so its cubin is shared with compile-only work, else the
// arch-specific one (sm_90a). Throws KJIT_ERROR_UNSUPPORTED when neither is supported.
ArchTarget select_device_target(const std::vector<std::string>& families, int major, int minor,
                                std::string_view uri);

}  // namespace kjit::jit
