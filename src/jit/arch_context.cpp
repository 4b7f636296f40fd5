#include "jit/arch_context.hpp"

#include <algorithm>

#include "cuda/device.hpp"
#include "util/error.hpp"

namespace kjit::jit {

ArchContext ArchContext::current(const std::vector<ArchTarget>& requested,
                                 const std::vector<ArchTarget>& fallback) {
  ArchContext c;
  for (const auto& t : requested.empty() ? fallback : requested) {
    if (std::find(c.listed.begin(), c.listed.end(), t) == c.listed.end()) c.listed.push_back(t);
  }
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceInfo& d = cuda::device_info(i);
    const std::pair<int, int> cc{d.major, d.minor};
    if (std::find(c.devices.begin(), c.devices.end(), cc) == c.devices.end()) {
      c.devices.push_back(cc);
    }
  }
  if (c.listed.empty() && c.devices.empty()) {
    fail(KJIT_ERROR_NO_DEVICE, "no target arch: no GPU and no --arch / KJIT_CUDA_ARCH_LIST");
  }
  return c;
}

std::vector<ArchTarget> ArchContext::targets_for(const Spec& spec,
                                                 std::vector<std::string>* skipped) const {
  std::vector<ArchTarget> out;
  std::string last_error;
  auto add = [&](const ArchTarget& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const auto& t : listed) {
    if (family_supports(spec.arch_families, t)) {
      add(t);
    } else {
      skipped->push_back(t.sm());
    }
  }
  for (auto [major, minor] : devices) {
    try {
      add(select_device_target(spec.arch_families, major, minor, spec.uri));
    } catch (const Error& e) {
      if (e.status() != KJIT_ERROR_UNSUPPORTED) throw;
      skipped->push_back(fmt::format("sm_{}{}", major, minor));
      last_error = e.what();
    }
  }
  if (out.empty()) {
    if (!listed.empty())
      select_targets(spec.arch_families, listed, spec.uri);  // throws, names both
    throw Error(KJIT_ERROR_UNSUPPORTED, last_error);
  }
  return out;
}

std::string ArchContext::describe() const {
  std::string s = format_arch_list(listed);
  if (devices.empty()) return s;
  s += s.empty() ? "devices" : " + devices";
  for (auto [major, minor] : devices) s += fmt::format(" sm_{}{}", major, minor);
  return s;
}

}  // namespace kjit::jit
