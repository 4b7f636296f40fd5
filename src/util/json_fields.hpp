// Strict readers for the integer fields of the JSON files kjit reads back (cache sidecars, AOT
// package indexes), which may have been damaged or written by someone hostile.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kjit::util {

// An integer field, strictly: nlohmann's get<int>() of 1e300 is a float-to-int conversion that
// overflows (undefined behaviour), and of -1 into an unsigned field wraps. Found by fuzzing.
// Throws std::runtime_error "<name> must be an integer in range, got <value>" for a float, a
// bool, a string, or an integer that does not fit T.
template <class T>
T integer_field(const nlohmann::json& v, const char* name) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      if (i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max()) {
        return static_cast<T>(i);
      }
    } else if (i >= 0) {
      return static_cast<T>(i);
    }
  }
  // Hostile values may be huge or not UTF-8: the message quotes at most a short, valid prefix.
  std::string got = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (got.size() > 64) got = got.substr(0, 60) + " ...";
  throw std::runtime_error(std::string(name) + " must be an integer in range, got " + got);
}

// integer_field of j[name], or `fallback` when j has no such member.
template <class T>
T optional_integer(const nlohmann::json& j, const char* name, T fallback) {
  return j.contains(name) ? integer_field<T>(j.at(name), name) : fallback;
}

}  // namespace kjit::util
