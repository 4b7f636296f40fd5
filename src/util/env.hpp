// Typed access to KJIT_* environment variables. Every variable kjit reads is listed in
// docs/env-vars.md; read them only through these helpers so the list stays checkable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::util {

// Value of `name`, or nullopt when unset. An empty value counts as set.
std::optional<std::string> env_get(const char* name);
// "1", "true", "yes", "on" (any case) are true; "0", "false", "no", "off", "" are false; unset
// gives `fallback`.
bool env_flag(const char* name, bool fallback = false);

// White space off both ends.
std::string_view trim(std::string_view s);
// Decimal digits only, no sign, no overflow.
bool parse_u64(std::string_view s, uint64_t* out);
// A byte count: digits with an optional K, M, G or T suffix (binary: 1K = 1024, KiB/KB alike),
// white space around it ignored (KJIT_DUMP_MAX_BYTES, KJIT_CACHE_MAX_SIZE, --max-size).
bool parse_byte_count(std::string_view text, uint64_t* out);

}  // namespace kjit::util
