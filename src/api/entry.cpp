#include "api/entry.hpp"

#include <cstring>

#include "api/options.hpp"

namespace kjit::api {

std::vector<RowArg> parse_row(const char* arguments) {
  static constexpr struct {
    const char* prefix;
    RowArg::Kind kind;
  } kPrefixes[] = {{"in:", RowArg::kIn},
                   {"out:", RowArg::kOut},
                   {"inout:", RowArg::kInOut},
                   {"handle:", RowArg::kHandle},
                   {"options:", RowArg::kOptions}};
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

namespace {

// Reads *given over the defaults in *used; when struct_size is too small to read, logs it alone.
template <typename T>
bool log_struct_size_if_unreadable(CallLog& log, const T* given, T* used) {
  if (read_options(given, used)) return false;
  log.scalar("options.struct_size", static_cast<int64_t>(given->struct_size));
  return true;
}

}  // namespace

#define KJIT_LOG_OPTION_FIELD(f) log.scalar("options." #f, o.f);

void log_options(CallLog& log, const kjit_sampling_options* options) {
  kjit_sampling_options o;
  kjit_sampling_options_init(&o);
  if (log_struct_size_if_unreadable(log, options, &o)) return;
  KJIT_SAMPLING_OPTION_FIELDS(KJIT_LOG_OPTION_FIELD)
}

void log_options(CallLog& log, const kjit_decode_options* options) {
  kjit_decode_options o;
  kjit_decode_options_init(&o);
  if (log_struct_size_if_unreadable(log, options, &o)) return;
  KJIT_DECODE_OPTION_FIELDS(KJIT_LOG_OPTION_FIELD)
}

void log_options(CallLog& log, const kjit_prefill_options* options) {
  kjit_prefill_options o;
  kjit_prefill_options_init(&o);
  if (log_struct_size_if_unreadable(log, options, &o)) return;
  KJIT_PREFILL_OPTION_FIELDS(KJIT_LOG_OPTION_FIELD)
}

void log_options(CallLog& log, const kjit_gemm_options* options) {
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  if (log_struct_size_if_unreadable(log, options, &o)) return;
  KJIT_GEMM_OPTION_FIELDS(KJIT_LOG_OPTION_FIELD)
}

void log_options(CallLog& log, const kjit_moe_route_options* options) {
  kjit_moe_route_options o;
  kjit_moe_route_options_init(&o);
  if (log_struct_size_if_unreadable(log, options, &o)) return;
  KJIT_MOE_ROUTE_OPTION_FIELDS(KJIT_LOG_OPTION_FIELD)
}

// The embedded route as "options.route.<field>", or its struct_size alone when unreadable.
void log_options(CallLog& log, const kjit_moe_forward_options* options) {
  kjit_moe_forward_options outer;
  kjit_moe_forward_options_init(&outer);
  if (log_struct_size_if_unreadable(log, options, &outer)) return;
  kjit_moe_route_options o;
  kjit_moe_route_options_init(&o);
  if (!read_options(&outer.route, &o)) {
    log.scalar("options.route.struct_size", static_cast<int64_t>(outer.route.struct_size));
    return;
  }
#define KJIT_LOG_ROUTE_FIELD(f) log.scalar("options.route." #f, o.f);
  KJIT_MOE_ROUTE_OPTION_FIELDS(KJIT_LOG_ROUTE_FIELD)
#undef KJIT_LOG_ROUTE_FIELD
}

#undef KJIT_LOG_OPTION_FIELD

}  // namespace kjit::api
