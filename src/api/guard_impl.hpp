#pragma once

#include <new>

#include "util/error.hpp"

namespace kjit::api {

template <typename F>
kjit_status guarded(const char* api_name, F&& body) noexcept {
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

}  // namespace kjit::api
