#include "api/entry.hpp"

#include <cstring>

namespace kjit::api {

std::vector<RowArg> parse_row(const char* arguments) {
  static constexpr struct {
    const char* prefix;
    RowArg::Kind kind;
  } kPrefixes[] = {{"in:", RowArg::kIn},
                   {"out:", RowArg::kOut},
                   {"inout:", RowArg::kInOut},
                   {"handle:", RowArg::kHandle}};
  std::vector<RowArg> row;
  for (const char* p = arguments; *p != '\0';) {
    if (*p == ' ') {
      ++p;
      continue;
    }
    const char* end = std::strchr(p, ' ');
    if (end == nullptr) end = p + std::strlen(p);
    std::string word(p, end);
    RowArg a;
    a.kind = word == "stream" ? RowArg::kStream : RowArg::kScalar;
    for (const auto& pre : kPrefixes) {
      if (word.rfind(pre.prefix, 0) == 0) {
        a.kind = pre.kind;
        word.erase(0, std::strlen(pre.prefix));
      }
    }
    a.name = std::move(word);
    row.push_back(std::move(a));
    p = end;
  }
  return row;
}

}  // namespace kjit::api
