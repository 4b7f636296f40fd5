// Versions, status strings and the thread-local last error.
#include <string>

#include "api/entry.hpp"
#include "kjit/kjit.h"

namespace kjit::api {
namespace {
thread_local std::string g_last_error;
}

void set_last_error(std::string message) {
  g_last_error = std::move(message);
}
void clear_last_error() {
  g_last_error.clear();
}
const char* last_error_cstr() {
  return g_last_error.c_str();
}

}  // namespace kjit::api

extern "C" {

KJIT_API const char* kjit_version_string(void) {
  return KJIT_VERSION_STRING;
}

KJIT_API int kjit_version_number(void) {
  return KJIT_VERSION_NUMBER;
}

KJIT_API int kjit_abi_version(void) {
  return KJIT_ABI_VERSION;
}

KJIT_API const char* kjit_status_string(kjit_status status) {
  switch (status) {
    case KJIT_SUCCESS: return "KJIT_SUCCESS";
    case KJIT_ERROR_INVALID_ARGUMENT: return "KJIT_ERROR_INVALID_ARGUMENT";
    case KJIT_ERROR_UNSUPPORTED: return "KJIT_ERROR_UNSUPPORTED";
    case KJIT_ERROR_NO_DEVICE: return "KJIT_ERROR_NO_DEVICE";
    case KJIT_ERROR_CUDA: return "KJIT_ERROR_CUDA";
    case KJIT_ERROR_COMPILE: return "KJIT_ERROR_COMPILE";
    case KJIT_ERROR_JIT_DISABLED: return "KJIT_ERROR_JIT_DISABLED";
    case KJIT_ERROR_CACHE: return "KJIT_ERROR_CACHE";
    case KJIT_ERROR_OUT_OF_MEMORY: return "KJIT_ERROR_OUT_OF_MEMORY";
    case KJIT_ERROR_INTERNAL: return "KJIT_ERROR_INTERNAL";
    case KJIT_ERROR_CAPTURING: return "KJIT_ERROR_CAPTURING";
  }
  return "KJIT_ERROR_UNKNOWN_STATUS";
}

KJIT_API const char* kjit_last_error(void) {
  return kjit::api::last_error_cstr();
}

}  // extern "C"
