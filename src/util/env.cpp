#include "util/env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "util/log.hpp"

namespace kjit::util {

std::optional<std::string> env_get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

bool env_flag(const char* name, bool fallback) {
  auto v = env_get(name);
  if (!v) return fallback;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s.empty() || s == "0" || s == "false" || s == "no" || s == "off") return false;
  log("warning: {}={} is not a boolean (1/0, true/false, yes/no, on/off); using {}", name, *v,
      fallback ? "1" : "0");
  return fallback;
}

}  // namespace kjit::util
