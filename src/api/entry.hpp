// api::entry: the body of every C entry point listed in entry_points.hpp. It runs the op through
// api::guarded (status + last error, never an exception) and, when KJIT_LOGLEVEL asks for this
// entry point, logs each argument under the name and kind its row gives, so a definition states
// its arguments once, in its C parameter list:
//
//   KJIT_API kjit_status kjit_rmsnorm(const DLTensor* input, const DLTensor* weight,
//                                     DLTensor* out, float eps, void* stream) {
//     return kjit::api::entry<&kjit_rmsnorm>(
//         [&] { kjit::ops::rmsnorm(input, weight, out, eps, stream); },
//         input, weight, out, eps, stream);
//   }
//
// The argument types must be the entry point's and their number its row's (checked at compile
// time), so a row cannot drift from the signature.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "api/entry_points.hpp"
#include "api/guard.hpp"
#include "jit/call_stream.hpp"

namespace kjit::api {

// One word of a row: "in:q" -> {kIn, "q"}.
struct RowArg {
  enum Kind { kIn, kOut, kInOut, kScalar, kStream, kHandle, kOptions } kind = kScalar;
  std::string name;
};
std::vector<RowArg> parse_row(const char* arguments);

// Logs a versioned options struct as the scalars "options.<field>" (options.hpp's field lists),
// the values the call uses: the defaults for NULL or for fields past struct_size. A struct_size
// too small to read is logged alone, as "options.struct_size", so a replay fails the same way.
void log_options(CallLog& log, const kjit_sampling_options* options);
void log_options(CallLog& log, const kjit_decode_options* options);
void log_options(CallLog& log, const kjit_gemm_options* options);
void log_options(CallLog& log, const kjit_prefill_options* options);
void log_options(CallLog& log, const kjit_moe_route_options* options);
void log_options(CallLog& log, const kjit_moe_forward_options* options);

namespace entry_detail {

template <typename T>
void log_arg(CallLog& log, const RowArg& a, T v) {
  if constexpr (std::is_convertible_v<T, const DLTensor*>) {
    if (a.kind == RowArg::kIn) log.in(a.name.c_str(), v);
    if (a.kind == RowArg::kOut) log.out(a.name.c_str(), v);
    if (a.kind == RowArg::kInOut) log.inout(a.name.c_str(), v);
  } else if constexpr (std::is_same_v<T, void*>) {
    log.stream(v);
  } else if constexpr (std::is_arithmetic_v<T>) {
    log.scalar(a.name.c_str(), v);
  } else if constexpr (std::is_enum_v<T>) {
    log.scalar(a.name.c_str(), static_cast<int>(v));
  } else if constexpr (std::is_same_v<T, const kjit_sampling_options*> ||
                       std::is_same_v<T, const kjit_gemm_options*> ||
                       std::is_same_v<T, const kjit_moe_route_options*> ||
                       std::is_same_v<T, const kjit_moe_forward_options*>) {
    log_options(log, v);
  }  // handles (pointers to kjit objects) are not logged
}

template <typename T>
void take_stream(void*& stream, T v) {
  if constexpr (std::is_same_v<T, void*>) stream = v;
}

}  // namespace entry_detail

template <auto Fn, typename Body, typename... A>
kjit_status entry(Body&& body, A... args) noexcept {
  using Row = EntryPoint<Fn>;
  static_assert(std::is_same_v<decltype(Fn), kjit_status (*)(A...)>,
                "api::entry: the arguments are not the entry point's parameters");
  static_assert(count_words(Row::arguments) == sizeof...(A),
                "api::entry: the entry point's row (entry_points.hpp) names another number of "
                "arguments");
  void* stream = nullptr;
  (entry_detail::take_stream(stream, args), ...);
  const jit::ScopedCallStream call_stream(stream);
  return guarded(
      Row::name,
      [&](CallLog& log) {
        // Parsed once per entry point; CallLog keeps the names' pointers for the call.
        static const std::vector<RowArg> row = parse_row(Row::arguments);
        size_t i = 0;
        (entry_detail::log_arg(log, row[i++], args), ...);
      },
      body);
}

}  // namespace kjit::api
