// The versioned option structs of kjit.h (struct_size first): reading a caller's struct of any
// age, and the field lists the call log and `kjit-cli replay` walk.
#pragma once

#include <cstddef>

#include "kjit/kjit.h"

// The fields after struct_size, in declaration order: X(field).
#define KJIT_SAMPLING_OPTION_FIELDS(X) X(top_k) X(top_p) X(min_p) X(temperature)
#define KJIT_DECODE_OPTION_FIELDS(X) \
  X(sm_scale) X(logits_soft_cap) X(window_left) X(num_splits) X(num_sms) X(autotune) X(tune_timing)
#define KJIT_GEMM_OPTION_FIELDS(X) X(alpha) X(beta) X(autotune) X(tune_timing) X(weights_early)
#define KJIT_PREFILL_OPTION_FIELDS(X) X(causal) X(sm_scale) X(logits_soft_cap) X(window_left)
#define KJIT_MOE_ROUTE_OPTION_FIELDS(X) \
  X(scoring) X(renormalize) X(n_group) X(topk_group) X(routed_scaling_factor)
// route, itself versioned, is logged and replayed as "options.route.<field>".
#define KJIT_MOE_FORWARD_OPTION_FIELDS(X) X(route)

namespace kjit::api {

// The fields of *given that its struct_size covers, copied over *out (which holds the defaults);
// NULL leaves *out as it is. A caller built against an older, shorter struct passes a smaller
// struct_size and keeps the defaults for the rest. False, *out untouched, when struct_size does
// not cover even the first field (a struct never passed through its _init function).
bool read_options(const kjit_sampling_options* given, kjit_sampling_options* out) noexcept;
bool read_options(const kjit_decode_options* given, kjit_decode_options* out) noexcept;
bool read_options(const kjit_gemm_options* given, kjit_gemm_options* out) noexcept;
bool read_options(const kjit_prefill_options* given, kjit_prefill_options* out) noexcept;
bool read_options(const kjit_moe_route_options* given, kjit_moe_route_options* out) noexcept;
bool read_options(const kjit_moe_forward_options* given, kjit_moe_forward_options* out) noexcept;

// The options a call uses: the defaults `init` fills, then the fields of *given that its
// struct_size covers. Throws KJIT_ERROR_INVALID_ARGUMENT naming `init` for a bad struct_size.
kjit_sampling_options sampling_options(const kjit_sampling_options* given);
kjit_decode_options decode_options(const kjit_decode_options* given);
kjit_gemm_options gemm_options(const kjit_gemm_options* given);  // and weights_early 0 or 1
kjit_prefill_options prefill_options(const kjit_prefill_options* given);
kjit_moe_route_options moe_route_options(const kjit_moe_route_options* given);
// The embedded route is read by its own struct_size as well.
kjit_moe_forward_options moe_forward_options(const kjit_moe_forward_options* given);

}  // namespace kjit::api
