// Host helpers the attention ops share (decode and prefill: src/ops/attention/); not part of the
// ops API.
#pragma once

#include <cuda.h>
#include <dlpack/dlpack.h>

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "ops/attention/decode_attention.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops::attention_detail {

constexpr float kLog2e = 1.4426950408889634f;
// fp8 e4m3 keys and values enter the MMAs scaled by 2^-8 (e4m3x4_to_half2x2_scaled in
// mma_sm80.cuh); the score and value scales take the 2^8 back (score_scales' kv_unscale).
constexpr float kFp8KvUnscale = 256.0f;

// A 1-D contiguous int32 tensor on `device` (page tables, indptr arrays).
StridedView int_vector(const DLTensor* t, const char* name, int device);
// Refuses a tensor on another device than the plan's.
void check_device(const StridedView& v, const char* name, int device);
// The workspace as the int32 view of the workspace_bytes a plan uses: any dtype, contiguous,
// 16-byte aligned, on `device`. `user` names what needs it in the messages (kjit_moe_forward
// takes its workspace by the same rules).
StridedView workspace_view(const DLTensor* t, size_t workspace_bytes, int device,
                           const char* user = "the plan");
// The view of an absent optional tensor: no elements, so it overlaps nothing.
StridedView no_view();
// A finite scale > 0 (k_scale, v_scale).
void check_scale(float x, const char* name);
// sm_scale finite >= 0 (0: the default), logits_soft_cap finite >= 0, window_left >= -1.
void check_score_options(float sm_scale, float logits_soft_cap, int window_left);

using NamedView = std::pair<const StridedView*, const char*>;
// Outputs never overlap inputs, each other or themselves (views of nothing never overlap).
void check_disjoint(std::initializer_list<NamedView> inputs,
                    std::initializer_list<NamedView> outputs);

// The kernels' score and value scales: logits are sm_scale * k_scale * (q . k), in log2 units
// (x log2e) without a soft cap; with one, the kernel takes cap_out * tanh(score x), cap_out = cap
// * log2e. kv_unscale multiplies both (fp8 caches' 2^8). Throws when they leave fp32's range.
struct ScoreScales {
  float score = 0.0f, cap_out = 0.0f, v = 0.0f;
};
ScoreScales score_scales(float sm_scale, float soft_cap, float k_scale, float v_scale,
                         float kv_unscale);

// num_qo_heads, num_kv_heads >= 1, the first a multiple of the second; head_dim >= 1.
void check_head_counts(int num_qo_heads, int num_kv_heads, int head_dim);

// The sizes every attention kernel serves: bf16 / fp16 `dtype`, head_dim 64, 128 or 256, 1..
// max_group query heads per kv head; KJIT_ERROR_UNSUPPORTED naming `op` otherwise.
void check_attention_support(const char* op, DType dtype, int64_t head_dim, int64_t group,
                             int64_t max_group);

// Asks for the whole unified L1 / shared array as shared memory, once per kernel.
void prefer_max_shared(CUfunction fn);

// The shared memory and SM count of the device (num_sms > 0 overrides the count); without a
// driver, the H200 budget and num_sms, which must then be set. Returns whether a driver answered.
bool device_budget(int device_id, int num_sms, SmemBudget* budget_out, int* sms_out);

}  // namespace kjit::ops::attention_detail
