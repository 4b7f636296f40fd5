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
// A failure to write is logged once and never fails the op.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "ops/activation/activation.hpp"
#include "diag/definitions.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops::trace {

inline constexpr int kMaxWorkloadsPerDefinition = 1024;

extern std::atomic<int> g_state;  // -1: environment not read yet, 0: off, 1: on
bool read_state() noexcept;
inline bool enabled() noexcept {
  const int s = g_state.load(std::memory_order_relaxed);
  return s >= 0 ? s != 0 : read_state();
}

void rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept;
void fused_add_rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept;
void layernorm(DType dtype, DType param_dtype, int64_t hidden, int64_t rows) noexcept;
void act_and_mul(Act act, DType dtype, int64_t d, int64_t rows) noexcept;
// max_position: rows of the cos/sin cache (kCosSinCache only).
void rope(const RopeDefAxes& axes, int64_t tokens, int64_t max_position) noexcept;
void append_paged_kv(DType dtype, int64_t kv_heads, int64_t head_dim, int64_t page_size, bool nhd,
                     int64_t tokens, int64_t batch, int64_t num_kv_indices,
                     int64_t num_pages) noexcept;
// kv_len: the requests' mean planned length (pages from kjit_batch_decode_plan's kv_indptr_host
// times page_size, over batch), the one `bench decode_attention` gives every request.
void batch_decode(const DecodeDefAxes& axes, int64_t batch, int64_t num_kv_indices,
                  int64_t num_pages, int64_t kv_len) noexcept;
void merge_states(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs) noexcept;
void merge_states_n(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs,
                    int64_t num_states) noexcept;
void sampling(SamplingKind kind, DType dtype, int64_t vocab, int64_t batch) noexcept;

// Tests: dump into `dir` from now on (empty: off), forgetting what was written, whatever the
// environment says.
void set_dir_for_testing(const std::string& dir);

}  // namespace kjit::ops::trace
