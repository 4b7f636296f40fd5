// The C boundary: run a C++ body, turn any exception into a status + thread-local message, and log
// the call when KJIT_LOGLEVEL asks (api/call_log.hpp).
#pragma once

#include <string>

#include "diag/call_log.hpp"
#include "kjit/kjit.h"

namespace kjit::api {

void set_last_error(std::string message);
void clear_last_error();
const char* last_error_cstr();

// Runs `body`; returns KJIT_SUCCESS or the status of what it threw. Never throws. `describe`
// (void(CallLog&)) declares the call's arguments for the log; it runs only when logging is on
// for `api_name` (KJIT_LOGLEVEL > 0 and selected by KJIT_LOG_INCLUDE / KJIT_LOG_EXCLUDE).
template <typename D, typename F>
kjit_status guarded(const char* api_name, D&& describe, F&& body) noexcept;

// As above for an entry point that has not declared its arguments: the log shows its name and
// status only. New entry points should use the describing form.
template <typename F>
kjit_status guarded(const char* api_name, F&& body) noexcept;

}  // namespace kjit::api

#include "api/guard_impl.hpp"
