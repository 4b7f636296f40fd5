// The sampling family's kernel parameters: one definition that the kernels (NVRTC) and the host
// ops (src/ops/sampling) both include, so the layout cannot drift between them. Each struct is
// passed by value as a __grid_constant__ kernel parameter. Plain C types only: no CUDA or std
// headers. The names and the namespace are part of the kernels' mangled names.
#pragma once

namespace kjit {
namespace sampling {

// SamplingParams::filters bits.
enum : int { kFilterTopK = 1, kFilterTopP = 2, kFilterMinP = 4 };

// One block's exact top-p list: the keys filter_kernel's static list holds (its kListLocal);
// SamplingParams::list_cap above it moves the list into dynamic shared memory.
enum : int { kListStaticKeys = 2048 };

// filter_kernel (sampling.cuh). A per-row array, when not null, replaces the scalar beside it.
struct SamplingParams {
  const void* input;                 // [rows, vocab] probabilities or logits, row stride in_stride
  void* out;                         // renorm / mask: [rows, vocab], row stride out_stride
  void* samples;                     // sample: [rows] int32 or int64
  unsigned char* valid;              // sample: [rows] 0 / 1, or null
  const void* top_k_arr;             // [rows] int32 or int64: <= 0 or >= vocab means no top-k
  const float* top_p_arr;            // [rows]: >= 1 no top-p; NaN or <= 0 invalid row
  const float* min_p_arr;            // [rows]: <= 0 no min-p; NaN or > 1 invalid row
  const float* temp_arr;             // [rows]: 0 greedy; < 0, NaN or Inf invalid row
  const unsigned long long* seed;    // [1] or [rows]
  const unsigned long long* offset;  // [1] or [rows]
  long long rows;
  long long in_stride;
  long long out_stride;
  long long seed_stride;    // 0: one seed for all rows, 1: one per row
  long long offset_stride;  // 0 or 1
  int vocab;
  int filters;  // kFilterTopK | kFilterTopP | kFilterMinP
  int top_k;
  int top_k_i64;
  int samples_i64;
  float top_p;
  float min_p;
  float temperature;
  int per_row_seed;  // seed_stride == 1: a row's stream then does not depend on its position
  // One block a row, exact top-p search: keys its list holds in dynamic shared memory (0: the
  // kernel's static list of kListLocal keys).
  int list_cap;
};

// softmax_kernel (softmax.cuh).
struct SoftmaxParams {
  const void* input;      // [rows, vocab] logits, row stride in_stride
  float* out;             // [rows, vocab], row stride out_stride
  const float* temp_arr;  // [rows] or null (then `temperature`)
  long long rows;
  long long in_stride;
  long long out_stride;
  int vocab;
  float temperature;
};

// argmax_kernel and argmax_cluster_kernel (argmax.cuh).
struct ArgmaxParams {
  const void* input;  // [rows, vocab], row stride in_stride
  void* out;          // [rows] int32 or int64
  long long rows;
  long long in_stride;
  int vocab;
  int out_i64;
};

// chain_speculative_kernel (speculative.cuh). Strides in elements; last dims contiguous.
struct SpeculativeParams {
  const float* draft_probs;          // [batch, num_draft, vocab]
  const int* draft_ids;              // [batch, num_draft]
  const float* target_probs;         // [batch, num_draft + 1, vocab]
  const unsigned long long* seed;    // [1] or [batch]
  const unsigned long long* offset;  // [1] or [batch]
  int* out;                          // [batch, num_draft + 1]
  int* accepted;                     // [batch] or null
  int* emitted;                      // [batch] or null
  long long dp_batch, dp_step;       // draft_probs strides
  long long tp_batch, tp_step;       // target_probs strides
  long long ids_batch, out_batch;
  long long seed_stride, offset_stride;  // 0 or 1
  int num_draft;
  int vocab;
  int per_row_seed;
};

}  // namespace sampling
}  // namespace kjit
