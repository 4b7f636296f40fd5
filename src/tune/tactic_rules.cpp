#include "tune/tactic_rules.hpp"

#include <fmt/format.h>

#include "util/error.hpp"
#include "util/glob.hpp"

namespace kjit::tune {

std::vector<TacticRule> parse_rules(std::string_view text, const char* what) {
  std::vector<TacticRule> out;
  std::string spaced(text);
  for (char& c : spaced) {
    if (c == ' ' || c == '\t' || c == '\n') c = ',';
  }
  for (const std::string& item : util::split_list(spaced, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: '{}' is not op:tactic (wildcards allowed)", what,
           item);
    }
    out.push_back({item.substr(0, colon), item.substr(colon + 1)});
  }
  return out;
}

TacticRules::TacticRules(std::string_view blocklist, std::string_view force)
    : block_(parse_rules(blocklist, "KJIT_TACTICS_BLOCKLIST")),
      force_(parse_rules(force, "KJIT_FORCE_TACTIC")) {}

bool TacticRules::blocked(const std::string& op, const std::string& tactic) const {
  for (const TacticRule& r : block_) {
    if (util::glob_match(r.op, op) && util::glob_match(r.tactic, tactic)) return true;
  }
  return false;
}

std::vector<std::string> TacticRules::forced(const std::string& op) const {
  std::vector<std::string> out;
  for (const TacticRule& r : force_) {
    if (util::glob_match(r.op, op)) out.push_back(r.tactic);
  }
  return out;
}

std::string TacticRules::describe() const {
  auto list = [](const std::vector<TacticRule>& rules) {
    std::string s;
    for (const TacticRule& r : rules) s += (s.empty() ? "" : ",") + r.op + ":" + r.tactic;
    return s;
  };
  std::string out;
  if (!block_.empty()) out += "blocklist " + list(block_);
  if (!force_.empty()) out += (out.empty() ? "" : "; ") + std::string("force ") + list(force_);
  return out;
}

}  // namespace kjit::tune
