#pragma once

#include <atomic>
#include <new>

#include "util/error.hpp"

namespace kjit::api {

namespace guard_detail {

template <typename F>
kjit_status run(const char* api_name, F& body) noexcept {
  try {
    body();
    clear_last_error();
    return KJIT_SUCCESS;
  } catch (const Error& e) {
    try {
      set_last_error(std::string(api_name) + ": " + e.what());
    } catch (...) {
    }
    return e.status();
  } catch (const std::bad_alloc&) {
    try {
      set_last_error(std::string(api_name) + ": out of host memory");
    } catch (...) {
    }
    return KJIT_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    try {
      set_last_error(std::string(api_name) + ": internal error: " + e.what());
    } catch (...) {
    }
    return KJIT_ERROR_INTERNAL;
  } catch (...) {
    try {
      set_last_error(std::string(api_name) + ": internal error: unknown exception");
    } catch (...) {
    }
    return KJIT_ERROR_INTERNAL;
  }
}

}  // namespace guard_detail

template <typename D, typename F>
kjit_status guarded(const char* api_name, D&& describe, F&& body) noexcept {
  // One per call site (each site's lambdas are their own types): the site's level under the
  // current settings, so include / exclude patterns are matched once, not per call.
  static std::atomic<uint64_t> site{0};
  if (__builtin_expect(log_detail::g_level.load(std::memory_order_relaxed) == 0, 1)) {
    return guard_detail::run(api_name, body);
  }
  const int level = log_detail::site_level(api_name, site);
  if (level == 0) return guard_detail::run(api_name, body);
  auto run = [&]() noexcept { return guard_detail::run(api_name, body); };
  return log_detail::logged_call(api_name, level, describe, run);
}

template <typename F>
kjit_status guarded(const char* api_name, F&& body) noexcept {
  return guarded(
      api_name, [](CallLog&) {}, body);
}

}  // namespace kjit::api
