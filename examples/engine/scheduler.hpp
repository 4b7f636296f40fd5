// Continuous batching over a fixed number of decode slots: requests wait in arrival order, join
// free slots through a ragged prefill, decode together one token per step, and leave at an
// end-of-sequence token or their token budget, freeing the slot for the next one. The decode
// batch keeps its size (a free slot decodes a dummy token), so one captured CUDA graph serves
// every step. Pure host logic: the engine (or a test's fake) does the work behind `Backend`.
#pragma once

#include <cstdint>
#include <vector>

namespace engine {

struct Request {
  std::vector<int32_t> prompt;
  int max_new_tokens = 16;  // the first comes from the prefill, the rest one per decode step
};

// What the scheduler drives.
class Backend {
 public:
  virtual ~Backend() = default;
  // Prefills prompts[i] into the free slot slots[i], all in one pass; returns each one's first
  // sampled token.
  virtual std::vector<int32_t> admit(const std::vector<int>& slots,
                                     const std::vector<std::vector<int32_t>>& prompts) = 0;
  // One decode step over every slot, fed tokens[slot] (a free slot's is 0); returns every
  // slot's next token (a free slot's is meaningless).
  virtual std::vector<int32_t> decode(const std::vector<int32_t>& tokens) = 0;
  // The slot's request ended: its cache is free for the next admit.
  virtual void release(int slot) = 0;
};

struct SchedulerOptions {
  int slots = 1;
  // Prompt tokens one admit may prefill (the engine's activation size); a longer prompt than
  // this is an error, and a batch of waiting prompts is cut where the next would exceed it.
  int max_prefill_tokens = 8192;
  std::vector<int32_t> eos;  // a request ends after generating one of these (kept in its output)
};

struct SchedulerStats {
  int admits = 0;          // prefill passes
  int decode_steps = 0;    // decode passes
  int64_t slot_steps = 0;  // sum over decode steps of the slots holding a request
  int max_active = 0;      // most requests decoding together
};

// Runs every request to its end and returns each one's generated tokens, in request order.
// Waiting requests are admitted in order, as many as free slots and the prefill budget allow
// (at least one), before each decode step. Throws std::invalid_argument for bad options or a
// prompt longer than the budget, and std::runtime_error when the backend's answers have the
// wrong size.
std::vector<std::vector<int32_t>> run_requests(Backend& backend,
                                               const std::vector<Request>& requests,
                                               const SchedulerOptions& opt,
                                               SchedulerStats* stats = nullptr);

}  // namespace engine
