#include "jit/arch.hpp"

#include <cctype>

#include "util/error.hpp"

namespace kjit::jit {

std::string ArchTarget::sm() const {
  return fmt::format("sm_{}{}{}", major, minor, arch_specific ? "a" : "");
}

std::optional<ArchTarget> ArchTarget::parse(std::string_view text) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view prefix : {"sm_", "sm", "compute_"}) {
    if (s.rfind(prefix, 0) == 0) {
      s = s.substr(prefix.size());
      break;
    }
  }
  ArchTarget t;
  if (!s.empty() && s.back() == 'a') {
    t.arch_specific = true;
    s.pop_back();
  }
  std::string digits;
  bool dotted = false;
  for (char c : s) {
    if (c == '.') {
      if (dotted) return std::nullopt;
      dotted = true;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
    } else {
      return std::nullopt;
    }
  }
  // "9.0" and "90" both mean major 9, minor 0; "100"/"10.0" mean 10.0; the minor is one digit.
  if (dotted) {
    auto dot = s.find('.');
    if (dot == 0 || dot + 2 != s.size()) return std::nullopt;
  }
  if (digits.size() < 2 || digits.size() > 3) return std::nullopt;
  t.major = std::stoi(digits.substr(0, digits.size() - 1));
  t.minor = digits.back() - '0';
  if (t.major < 5) return std::nullopt;
  return t;
}

std::vector<ArchTarget> parse_arch_list(std::string_view text) {
  std::vector<ArchTarget> out;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    auto t = ArchTarget::parse(item);
    if (!t) fail(KJIT_ERROR_INVALID_ARGUMENT, "bad arch '{}' (expected e.g. sm_90a or 9.0a)", item);
    bool seen = false;
    for (auto& o : out) seen = seen || o == *t;
    if (!seen) out.push_back(*t);
    item.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == ';' || c == '\t') {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return out;
}

std::string format_arch_list(const std::vector<ArchTarget>& targets) {
  std::string s;
  for (const auto& t : targets) s += (s.empty() ? "" : " ") + t.sm();
  return s.empty() ? "(none)" : s;
}

bool family_supports(const std::vector<std::string>& families, const ArchTarget& target) {
  for (const auto& f : families) {
    if (!f.empty() && f.back() == '+') {
      auto base = ArchTarget::parse(std::string_view(f).substr(0, f.size() - 1));
      if (base && target.cc() >= base->cc()) return true;
    } else if (auto exact = ArchTarget::parse(f); exact && *exact == target) {
      return true;
    }
  }
  return false;
}

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}
}  // namespace

std::vector<ArchTarget> select_targets(const std::vector<std::string>& families,
                                       const std::vector<ArchTarget>& requested,
                                       std::string_view uri) {
  std::vector<ArchTarget> out;
  for (const auto& t : requested) {
    if (family_supports(families, t)) out.push_back(t);
  }
  if (out.empty()) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports [{}] but the requested targets are [{}]", uri,
         join(families), format_arch_list(requested));
  }
  return out;
}

ArchTarget select_device_target(const std::vector<std::string>& families, int major, int minor,
                                std::string_view uri) {
  ArchTarget plain{major, minor, false};
  if (family_supports(families, plain)) return plain;
  ArchTarget specific{major, minor, true};
  if (family_supports(families, specific)) return specific;
  fail(KJIT_ERROR_UNSUPPORTED, "{} supports [{}] but the device is sm_{}{} (no kernel for it)", uri,
       join(families), major, minor);
}

}  // namespace kjit::jit
