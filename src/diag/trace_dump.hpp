// KJIT_TRACE_DUMP=1: each op + const-axes combination a process actually runs writes its
// definition once, and each distinct set of var-axis values it runs with appends one workload
// line, so a real engine's workload becomes `kjit-cli bench --from` input without hand-written
// files (docs/env-vars.md, docs/bench.md). Layout under KJIT_TRACE_DUMP_DIR (default
// <cache>/traces):
//
//   definitions/<name>.json    definition_json(), written once per process per name
//   workloads/<name>.jsonl     {"definition", "axes": {var values}, "op", "set"} per distinct
//                              var values (at most kMaxWorkloadsPerDefinition per process)
//
// Each op calls its hook once per launch, after validation; off, a hook costs one relaxed load.
// A failure to write is logged once and never fails the op. This is the generic recorder; each
// family's hooks (which definition and `kjit-cli bench` set a call is) are in its descriptor,
// src/ops/<family>/<family>_desc.cpp.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <string>
#include <type_traits>

#include "diag/definition.hpp"

namespace kjit::ops::trace {

inline constexpr int kMaxWorkloadsPerDefinition = 1024;

extern std::atomic<int> g_state;  // -1: environment not read yet, 0: off, 1: on
bool read_state() noexcept;
inline bool enabled() noexcept {
  const int s = g_state.load(std::memory_order_relaxed);
  return s >= 0 ? s != 0 : read_state();
}

namespace detail {
void record(const std::string& name, const nlohmann::ordered_json& axes, const char* bench_op,
            const nlohmann::ordered_json& set, Definition (*make_def)(const void*),
            const void* make_def_state) noexcept;
}  // namespace detail

// Records one call: `name` is its definition (built by make_def only when new to this process),
// `axes` its var-axis values, `bench_op` + `set` the `kjit-cli bench` that times it (none: null).
template <class MakeDef>
void record(const std::string& name, const nlohmann::ordered_json& axes, const char* bench_op,
            const nlohmann::ordered_json& set, const MakeDef& make_def) noexcept {
  detail::record(
      name, axes, bench_op, set,
      [](const void* f) -> Definition { return (*static_cast<const MakeDef*>(f))(); }, &make_def);
}

// Tests: dump into `dir` from now on (empty: off), forgetting what was written, whatever the
// environment says.
void set_dir_for_testing(const std::string& dir);

}  // namespace kjit::ops::trace
