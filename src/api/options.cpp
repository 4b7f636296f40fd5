#include "api/options.hpp"

#include "util/error.hpp"

namespace kjit::api {
namespace {

// Copies the fields (member pointers, in declaration order) that given->struct_size covers.
template <typename T, typename First, typename... Rest>
bool read_versioned(const T* given, T* out, First T::*first, Rest T::*... rest) noexcept {
  if (given == nullptr) return true;
  // Where each field ends, measured on a local struct: the caller's may be shorter than this one.
  const T probe{};
  auto end_of = [&probe](auto field) {
    return static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*field)) -
                               reinterpret_cast<const char*>(&probe)) +
           sizeof(probe.*field);
  };
  if (given->struct_size < end_of(first)) return false;
  out->*first = given->*first;
  ((given->struct_size >= end_of(rest) ? void(out->*rest = given->*rest) : void()), ...);
  return true;
}

template <typename T>
T checked(const T* given, void (*init)(T*), const char* init_name) {
  T r;
  init(&r);
  if (!read_options(given, &r)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->struct_size is {} (call {} first)",
         given->struct_size, init_name);
  }
  return r;
}

}  // namespace

#define KJIT_MEMBER_OF_SAMPLING(f) , &kjit_sampling_options::f
#define KJIT_MEMBER_OF_DECODE(f) , &kjit_decode_options::f
#define KJIT_MEMBER_OF_GEMM(f) , &kjit_gemm_options::f
#define KJIT_MEMBER_OF_PREFILL(f) , &kjit_prefill_options::f

bool read_options(const kjit_sampling_options* given, kjit_sampling_options* out) noexcept {
  return read_versioned(given, out KJIT_SAMPLING_OPTION_FIELDS(KJIT_MEMBER_OF_SAMPLING));
}

bool read_options(const kjit_decode_options* given, kjit_decode_options* out) noexcept {
  return read_versioned(given, out KJIT_DECODE_OPTION_FIELDS(KJIT_MEMBER_OF_DECODE));
}

bool read_options(const kjit_gemm_options* given, kjit_gemm_options* out) noexcept {
  return read_versioned(given, out KJIT_GEMM_OPTION_FIELDS(KJIT_MEMBER_OF_GEMM));
}

#undef KJIT_MEMBER_OF_SAMPLING
#undef KJIT_MEMBER_OF_DECODE
bool read_options(const kjit_prefill_options* given, kjit_prefill_options* out) noexcept {
  return read_versioned(given, out KJIT_PREFILL_OPTION_FIELDS(KJIT_MEMBER_OF_PREFILL));
}

#undef KJIT_MEMBER_OF_GEMM
#undef KJIT_MEMBER_OF_PREFILL

kjit_sampling_options sampling_options(const kjit_sampling_options* given) {
  return checked(given, &kjit_sampling_options_init, "kjit_sampling_options_init");
}

kjit_decode_options decode_options(const kjit_decode_options* given) {
  return checked(given, &kjit_decode_options_init, "kjit_decode_options_init");
}

kjit_gemm_options gemm_options(const kjit_gemm_options* given) {
  const kjit_gemm_options o = checked(given, &kjit_gemm_options_init, "kjit_gemm_options_init");
  if (o.weights_early != 0 && o.weights_early != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options.weights_early is 0 or 1, not {}", o.weights_early);
  }
  return o;
}

kjit_prefill_options prefill_options(const kjit_prefill_options* given) {
  return checked(given, &kjit_prefill_options_init, "kjit_prefill_options_init");
}

#define KJIT_MEMBER_OF_MOE_ROUTE(f) , &kjit_moe_route_options::f
bool read_options(const kjit_moe_route_options* given, kjit_moe_route_options* out) noexcept {
  return read_versioned(given, out KJIT_MOE_ROUTE_OPTION_FIELDS(KJIT_MEMBER_OF_MOE_ROUTE));
}
#undef KJIT_MEMBER_OF_MOE_ROUTE

kjit_moe_route_options moe_route_options(const kjit_moe_route_options* given) {
  return checked(given, &kjit_moe_route_options_init, "kjit_moe_route_options_init");
}

#define KJIT_MEMBER_OF_MOE_FORWARD(f) , &kjit_moe_forward_options::f
bool read_options(const kjit_moe_forward_options* given, kjit_moe_forward_options* out) noexcept {
  return read_versioned(given, out KJIT_MOE_FORWARD_OPTION_FIELDS(KJIT_MEMBER_OF_MOE_FORWARD));
}
#undef KJIT_MEMBER_OF_MOE_FORWARD

kjit_moe_forward_options moe_forward_options(const kjit_moe_forward_options* given) {
  kjit_moe_forward_options r =
      checked(given, &kjit_moe_forward_options_init, "kjit_moe_forward_options_init");
  kjit_moe_route_options route;
  kjit_moe_route_options_init(&route);
  if (!read_options(&r.route, &route)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "options->route.struct_size is {} (call kjit_moe_forward_options_init first)",
         r.route.struct_size);
  }
  r.route = route;
  return r;
}

}  // namespace kjit::api
