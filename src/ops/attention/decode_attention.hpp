// Paged batch decode attention: planning (variant, split-KV partition: decode_plan.cpp; the
// autotuner's tactics: decode_tactics.cpp), the spec and registry entry (decode_spec.cpp) and the
// checked launch (decode_run.cpp). Device code: kernels/attention/decode.cuh.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention_params.h"
#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// One compiled decode variant (main kernel + split merge kernel). Each field keeps its name in
// the URI, the generated kjit_spec constant and decode_kernel's template parameter (decode_spec).
// Page size, layout, strides, group size (within the n-tiles), scales, soft cap and window are
// run-time values, so they share variants.
struct DecodeConfig {
  DType q_dtype = DType::kBF16;  // q and out; the mma type unless the cache is fp8
  int kv_fp8 = 0;                // 1: fp8 e4m3 cache (mma in fp16); 0: cache dtype = q_dtype
  int head_dim = 128;
  int n_tiles = 1;  // 8-head mma n-tiles: group sizes 1..8 -> 1, 9..16 -> 2
  int warps = 4;
  int stage_tokens = 64;  // tokens per pipeline stage (16 per warp tile)
  int stages = 3;         // cp.async pipeline depth
  int cp_bytes = 16;      // bytes per cp.async: 16, or 8 / 4 for caches aligned only that much
  int heads_per_cta = 1;  // kv heads per CTA (their NHD rows are adjacent: longer reads)
  // What the page lookups hand the loads (decode.cuh's DecodeRow): 1 64-bit row byte offsets, 2
  // 32-bit ones. A plan holds 2 (or 1, forced); a run downgrades 2 to 1 when a cache spans over
  // 4 GB.
  int addr = 2;
  int joint_tiles = 1;  // 16-token tiles a warp computes together (1 or 2)
  // 1 (sm_90): the splits of a (request, head set) form a thread-block cluster that merges the
  // partials in distributed shared memory (max_splits <= kDecodeClusterMax; no merge kernel).
  int cluster_merge = 0;
};

struct DecodeTactic;  // decode_tactics.hpp: one way to run a plan
struct DecodeTuneRequest;

inline constexpr int kDecodeMaxGroup = 16;
inline constexpr int kDecodeMaxSplits = 256;
// The most splits a cluster merge combines.
inline constexpr int kDecodeClusterMax = attention::kDecodeClusterMax;

// Shared memory the device sizes a CTA with (a mirror of DecodeSmem in decode.cuh).
int decode_smem_bytes(const DecodeConfig& c);

// The shared-memory room of the device a plan targets.
struct SmemBudget {
  int per_sm = 228 * 1024;     // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
  int per_block = 227 * 1024;  // ..._PER_BLOCK_OPTIN
  int reserved = 1024;         // ..._RESERVED_SHARED_MEMORY_PER_BLOCK
};

// Support and dispatch in one place: the config for these dtypes and sizes, the deepest pipeline
// that still fits two CTAs per SM (else one), with *ctas_per_sm set to that residency. Throws
// KJIT_ERROR_UNSUPPORTED for a combination no variant serves.
DecodeConfig select_decode(DType q_dtype, bool kv_fp8, int64_t head_dim, int64_t group,
                           const SmemBudget& budget, int* ctas_per_sm = nullptr);

jit::Spec decode_spec(const DecodeConfig& cfg);
std::string decode_uri(const DecodeConfig& cfg);

// The split-KV partition: a request of eff positions runs as min(max_splits, ceil(eff / chunk))
// CTAs per kv head, the last taking whatever the others leave.
struct DecodeSplit {
  int chunk = 0x7fffffff;
  int max_splits = 1;
};

// Chooses the partition for requests of (at most) `eff` attended positions each, by a wave
// model: for each candidate split count, CTAs of `chunk` positions fill `slots` resident CTAs
// per wave; the cost is waves * (chunk * row_bytes + a per-CTA constant) plus the merge for
// split plans. forced_splits > 0 splits the longest request into that many parts exactly
// (tests, tuning). Pure host code.
DecodeSplit choose_decode_split(const std::vector<int64_t>& eff, int kv_heads, int slots,
                                int row_bytes, int forced_splits);

// Everything a run needs from its plan.
struct DecodePlanData {
  DecodeConfig cfg;
  int batch = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int group = 0;
  int head_dim = 0;
  int page_size = 0;
  int layout = 0;
  int device = 0;
  DLDataType kv_dtype{};  // as planned (fp8: code 10 or kDLUInt, 8 bits)
  float sm_scale = 0.0f;
  float soft_cap = 0.0f;
  int window_left = -1;
  int num_sms = 0;
  int ctas_per_sm = 0;
  DecodeSplit split;
  int fused_merge = 0;
  int pdl = 1;                 // merge kernel as a programmatic dependent launch (sm_90+ only)
  size_t counters_offset = 0;  // bytes; fused merge only
  int64_t kv_pages = 0;        // the requests' pages as planned (KJIT_TRACE_DUMP's kv_len)
  size_t ws_lse_offset = 0;    // bytes; the partial outputs start at 0
  size_t workspace_bytes = 0;
  // The tactic the plan runs (DecodeTactic::name()) and how it was chosen: "default", "forced",
  // "stored" (tune::source_name).
  char tactic[64] = {};
  const char* tactic_source = "default";
};

// Validates and plans (see kjit_batch_decode_plan). `forced`: the tactic to run, as the caller
// names it (tests, `kjit-cli bench` and `tune`); else the autotuner's choice for `tune` (null:
// the process's mode, timing eager-cold). Throws kjit::Error.
DecodePlanData plan_batch_decode(const int32_t* kv_indptr_host, int batch, int num_qo_heads,
                                 int num_kv_heads, int head_dim, int page_size, int layout,
                                 DLDataType q_dtype, DLDataType kv_dtype, float sm_scale,
                                 float logits_soft_cap, int window_left, int num_splits,
                                 int num_sms, int device_id, const DecodeTactic* forced = nullptr,
                                 const DecodeTuneRequest* tune = nullptr);

// Validates, then launches on `stream`. Throws kjit::Error.
void batch_decode_run(const DecodePlanData& plan, const DLTensor* q, const DLTensor* k_cache,
                      const DLTensor* v_cache, const DLTensor* kv_indices,
                      const DLTensor* kv_indptr, const DLTensor* kv_last_page_len,
                      DLTensor* workspace, DLTensor* out, DLTensor* lse, float k_scale,
                      float v_scale, void* stream);

}  // namespace kjit::ops

// The opaque plan of the C API: versioned so a stale or foreign pointer is refused, not used.
struct kjit_decode_plan {
  static constexpr uint64_t kMagic = 0x6b6a69745f646563ull;  // "kjit_dec"
  static constexpr int kVersion = 1;
  uint64_t magic = kMagic;
  int version = kVersion;
  kjit::ops::DecodePlanData data;
};
