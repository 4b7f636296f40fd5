// The entry-point table (src/api/entry_points.hpp) against the header and the library: every C
// entry point that takes a tensor has a row, and each, called with every tensor NULL, returns
// KJIT_ERROR_INVALID_ARGUMENT with a message instead of crashing (scalars are 0, the stream NULL).
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "api/entry.hpp"

namespace {

template <typename P>
P null_or_zero() {
  if constexpr (std::is_pointer_v<P>) {
    return nullptr;
  } else {
    return P{};
  }
}

template <typename... P>
kjit_status call_with_nothing(kjit_status (*fn)(P...)) {
  return fn(null_or_zero<P>()...);
}

struct Row {
  const char* name;
  const char* arguments;
  kjit_status (*call_null)();
};

#define KJIT_TEST_ROW(fn, args) {#fn, args, [] { return call_with_nothing(&fn); }},
const Row kRows[] = {KJIT_TENSOR_ENTRY_POINTS(KJIT_TEST_ROW)};
#undef KJIT_TEST_ROW

}  // namespace

TEST_CASE("entry points: every kjit.h function taking a DLTensor has a row", "[api]") {
  std::ifstream f(std::string(KJIT_SOURCE_DIR) + "/include/kjit/kjit.h");
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string header = ss.str();
  // "KJIT_API kjit_status name(parameters);" over one or more lines.
  const std::regex decl(R"(KJIT_API\s+kjit_status\s+(kjit_\w+)\s*\(([^;]*)\)\s*;)");
  std::set<std::string> with_tensors;
  for (auto it = std::sregex_iterator(header.begin(), header.end(), decl);
       it != std::sregex_iterator(); ++it) {
    if ((*it)[2].str().find("DLTensor") != std::string::npos) with_tensors.insert((*it)[1]);
  }
  std::set<std::string> rows;
  for (const Row& r : kRows) rows.insert(r.name);
  CHECK(with_tensors.size() > 20);
  CHECK(with_tensors == rows);
}

TEST_CASE("entry points: rows parse into names and kinds", "[api]") {
  for (const Row& r : kRows) {
    INFO(r.name);
    const auto row = kjit::api::parse_row(r.arguments);
    REQUIRE(row.size() == static_cast<size_t>(kjit::api::count_words(r.arguments)));
    std::set<std::string> names;
    int tensors = 0;
    for (const auto& a : row) {
      CHECK(!a.name.empty());
      CHECK(names.insert(a.name).second);  // no name twice
      tensors += a.kind <= kjit::api::RowArg::kInOut ? 1 : 0;
    }
    CHECK(tensors > 0);
    CHECK(row.back().kind == kjit::api::RowArg::kStream);  // the stream comes last
  }
  const auto row = kjit::api::parse_row("handle:plan in:q out:o inout:x eps stream");
  REQUIRE(row.size() == 6);
  CHECK(row[0].kind == kjit::api::RowArg::kHandle);
  CHECK(row[0].name == "plan");
  CHECK(row[1].kind == kjit::api::RowArg::kIn);
  CHECK(row[2].kind == kjit::api::RowArg::kOut);
  CHECK(row[3].kind == kjit::api::RowArg::kInOut);
  CHECK(row[4].kind == kjit::api::RowArg::kScalar);
  CHECK(row[4].name == "eps");
  CHECK(row[5].kind == kjit::api::RowArg::kStream);
  const auto opts = kjit::api::parse_row("in:x options:options stream");
  REQUIRE(opts.size() == 3);
  CHECK(opts[1].kind == kjit::api::RowArg::kOptions);
  CHECK(opts[1].name == "options");
}

TEST_CASE("entry points: rows follow the header's order (read, written, scalars, stream)",
          "[api]") {
  for (const Row& r : kRows) {
    INFO(r.name);
    // A handle first, then tensors only read, then tensors written, then everything else.
    int phase = 0;
    for (const auto& a : kjit::api::parse_row(r.arguments)) {
      INFO(a.name);
      const int p = a.kind == kjit::api::RowArg::kHandle                                       ? 0
                    : a.kind == kjit::api::RowArg::kIn                                         ? 1
                    : a.kind == kjit::api::RowArg::kOut || a.kind == kjit::api::RowArg::kInOut ? 2
                    : a.kind == kjit::api::RowArg::kStream                                     ? 4
                                                                                               : 3;
      CHECK(p >= phase);
      phase = p;
    }
  }
}

TEST_CASE("entry points: every one refuses NULL tensors with a message", "[api]") {
  for (const Row& r : kRows) {
    INFO(r.name);
    CHECK(r.call_null() == KJIT_ERROR_INVALID_ARGUMENT);
    const std::string msg = kjit_last_error();
    // Named, and a reason (a NULL tensor, or a zero scalar checked before the tensors).
    CHECK(msg.rfind(std::string(r.name) + ": ", 0) == 0);
    CHECK(msg.size() > std::string(r.name).size() + 8);
  }
}
