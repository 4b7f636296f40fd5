// Shell-style wildcards over names (API names for the call log, URIs for the cache tools).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kjit::util {

// True when `pattern` (*, ?, [...], as fnmatch(3) without flags) matches all of `text`.
bool glob_match(const std::string& pattern, const std::string& text);

// True when any pattern matches `text`.
bool glob_match_any(const std::vector<std::string>& patterns, const std::string& text);

// Splits "a, b,,c" at `sep` into {"a", "b", "c"}: items trimmed of blanks, empty items dropped.
std::vector<std::string> split_list(std::string_view text, char sep = ',');

}  // namespace kjit::util
