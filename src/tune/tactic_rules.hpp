// KJIT_TACTICS_BLOCKLIST and KJIT_FORCE_TACTIC (docs/autotune.md): rules of the form
// "op:tactic", each part a shell-style wildcard, several separated by commas or blanks.
//   KJIT_TACTICS_BLOCKLIST="gemm:*split8*,decode_attention:w8*"  never run these
//   KJIT_FORCE_TACTIC="gemm:sm90_bn128_s6"                        run this one where it is valid
// Both apply to tuned and untuned calls alike.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::tune {

struct TacticRule {
  std::string op;      // wildcard over op names
  std::string tactic;  // wildcard over tactic names
};

class TacticRules {
 public:
  TacticRules() = default;
  // Throws kjit::Error(KJIT_ERROR_INVALID_ARGUMENT) naming the rule without an op or a tactic.
  TacticRules(std::string_view blocklist, std::string_view force);

  bool blocked(const std::string& op, const std::string& tactic) const;
  // The force rules that name `op`, in the order given (the first that matches a valid tactic
  // wins).
  std::vector<std::string> forced(const std::string& op) const;
  bool empty() const { return block_.empty() && force_.empty(); }
  // "blocklist gemm:*split8*; force gemm:sm90_bn128_s6" for the log.
  std::string describe() const;

 private:
  std::vector<TacticRule> block_;
  std::vector<TacticRule> force_;
};

// "op:tactic, op:tactic" into rules; `what` names the variable in the error.
std::vector<TacticRule> parse_rules(std::string_view text, const char* what);

}  // namespace kjit::tune
