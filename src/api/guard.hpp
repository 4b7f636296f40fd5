// The C boundary: run a C++ body, turn any exception into a status + thread-local message.
#pragma once

#include <string>

#include "kjit/kjit.h"

namespace kjit::api {

void set_last_error(std::string message);
void clear_last_error();
const char* last_error_cstr();

// Runs `body`; returns KJIT_SUCCESS or the status of what it threw. Never throws.
template <typename F>
kjit_status guarded(const char* api_name, F&& body) noexcept;

}  // namespace kjit::api

#include "api/guard_impl.hpp"
