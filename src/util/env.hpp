// Typed access to KJIT_* environment variables. Every variable kjit reads is listed in
// docs/env-vars.md; read them only through these helpers so the list stays checkable.
#pragma once

#include <optional>
#include <string>

namespace kjit::util {

// Value of `name`, or nullopt when unset. An empty value counts as set.
std::optional<std::string> env_get(const char* name);
// "1", "true", "yes", "on" (any case) are true; "0", "false", "no", "off", "" are false; unset
// gives `fallback`.
bool env_flag(const char* name, bool fallback = false);

}  // namespace kjit::util
