// The inputs of a paged decode attention line (`kjit-cli bench decode_attention`, `kjit-cli tune
// --from`): a batch of requests of kv_len positions each on pages in random order, random q and
// caches on the device, a poisoned out, and the plan arguments for them.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "kjit/kjit.h"
#include "ops/attention/decode_tactics.hpp"
#include "support/gpu.hpp"

namespace kjit::cli {

struct DecodeInputs {
  std::string dtype, kv_dtype, layout;
  bool fp8 = false, nhd = true;
  int64_t B = 0, L = 0, hq = 0, hk = 0, D = 0, P = 0, pages_per = 0, num_pages = 0;
  int num_splits = 0;  // the line's num_splits (0: the plan's)
  std::mt19937_64 rng;
  std::vector<int32_t> indices, indptr, last;
  // k | v in one buffer (the copy baseline and the read probe read it); q and the page table in
  // another.
  Packed caches, in;
  size_t kc_at = 0, vc_at = 0, q_at = 0, idx_at = 0, ptr_at = 0, last_at = 0;
  std::unique_ptr<test::DeviceBuffer> out;
  DLDataType qdt{}, kvdt{};
  test::Tensor qt, kct, vct, it, pt, lt, ot;

  // The plan of these inputs: `forced`, else the autotuner's choice for `tune` (null: the
  // process's). Throws kjit::Error.
  ops::DecodePlanData plan(const ops::DecodeTactic* forced,
                           const ops::DecodeTuneRequest* tune = nullptr) const;
  // The planner of these inputs (its tactics and bucket).
  ops::DecodePlanner planner() const;
  // One run of `plan` on `stream` into out with the workspace `ws` (at least the plan's bytes,
  // zeroed once for the fused merge's counters). Throws kjit::Error.
  void run(const kjit_decode_plan* plan, DLTensor* ws, CUstream stream);
};

// Reads the line's --set arguments (dtype, batch, kv_len, qo_heads, kv_heads, head_dim,
// page_size; kv_dtype, layout, num_splits) and uploads the inputs. Throws UsageError.
std::unique_ptr<DecodeInputs> make_decode_inputs(const ops::SetArgs& args);

}  // namespace kjit::cli
