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

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, uint64_t(c - '0'), &v)) {
      return false;
    }
  }
  *out = v;
  return true;
}

bool parse_byte_count(std::string_view text, uint64_t* out) {
  text = trim(text);
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  uint64_t v = 0;
  if (!parse_u64(text.substr(0, digits), &v)) return false;
  std::string suffix(trim(text.substr(digits)));
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else {
    const std::string_view unit(suffix);
    const char u = unit[0];
    if (u == 'K') {
      shift = 10;
    } else if (u == 'M') {
      shift = 20;
    } else if (u == 'G') {
      shift = 30;
    } else if (u == 'T') {
      shift = 40;
    } else {
      return false;
    }
    const std::string_view rest = unit.substr(1);
    if (!rest.empty() && rest != "B" && rest != "IB") return false;
  }
  if (shift > 0 && v > (~uint64_t{0} >> shift)) return false;
  *out = v << shift;
  return true;
}

}  // namespace kjit::util
