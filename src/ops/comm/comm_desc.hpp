// The communication family's descriptor: the registry entries of its one-shot kernels (OpDef:
// --set axes, make_spec, catalog, precompile mapping) and its definitions for
// bench/definitions/. No trace hook: a dump of one rank's call cannot be replayed alone.
#pragma once

#include <cstdint>

#include "diag/definition.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef all_reduce_op_def();
OpDef all_reduce_add_rmsnorm_op_def();

Definition all_reduce_definition(DType dtype, int64_t hidden, int world);
Definition all_reduce_add_rmsnorm_definition(DType dtype, int64_t hidden, int world);

}  // namespace kjit::ops
