// Diagnostic lines on stderr, prefixed "[kjit] ". Used for KJIT_JIT_VERBOSE and for warnings that
// must not be silent (e.g. a corrupt cache entry being rebuilt). Not the API call log.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace kjit::util {

void log_line(std::string_view line);

template <typename... Args>
void log(fmt::format_string<Args...> f, Args&&... args) {
  log_line(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kjit::util
