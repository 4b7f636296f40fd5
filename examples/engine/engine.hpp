// A dense Llama-3 / Qwen3 decoder on kjit alone: weights uploaded from a checkpoint, a ragged
// prefill over a batch of prompts that fills a paged KV cache, and decode steps captured once into
// a CUDA graph and replayed. Every kernel is kjit's; the CUDA runtime only allocates, copies and
// runs the graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "kjit/kjit.h"

namespace engine {

class Checkpoint;

struct SamplingConfig {
  bool greedy = true;  // argmax; else top-k / top-p from the logits
  int top_k = 0;       // 0: off
  float top_p = 1.0f;
  float temperature = 1.0f;
  int64_t seed = 0;
};

struct RunOptions {
  int max_total_len = 0;  // the longest prompt plus the decode steps: sizes the KV cache
  int page_size = 16;
  bool all_logits = false;  // prefill writes logits of every prompt token (teacher forcing)
  bool use_graph = true;    // replay the decode step from a CUDA graph
  SamplingConfig sampling;
};

// Launch counts of one decode step, from the engine's own calls and from the captured graph.
struct StepStats {
  int kjit_calls = 0;            // kjit entry points the step calls
  int kjit_calls_per_layer = 0;  // of those, per decoder layer
  int graph_kernels = 0;         // kernel nodes of the captured graph (0 without a graph)
};

class Engine {
 public:
  Engine(const Checkpoint& ckpt, const ModelConfig& cfg, int device);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Sizes buffers and the KV cache for `prompts` (their lengths, batch and the options) and runs
  // the prefill: the logits of every prompt token (all_logits) or of each prompt's last token
  // into logits(), and, unless all_logits, the first sampled token of each request into tokens.
  void prefill(const std::vector<std::vector<int32_t>>& prompts, const RunOptions& opt);
  // One decode step per request. `forced` (one id per request) feeds those tokens (teacher
  // forcing); empty feeds the tokens the previous step sampled. The step's sampled tokens are
  // returned (empty when forced). The first call runs eagerly (it loads every kernel the step
  // uses) and captures the graph; later calls replay it.
  std::vector<int32_t> decode(const std::vector<int32_t>& forced);

  // The last forward pass's logits, fp32 rows of vocab_size, copied to the host.
  std::vector<float> logits() const;
  int logits_rows() const { return logits_rows_; }
  const std::vector<int32_t>& first_tokens() const { return first_tokens_; }
  const StepStats& step_stats() const { return stats_; }
  size_t weight_bytes() const { return weight_bytes_; }
  cudaStream_t stream() const { return stream_; }

 private:
  struct Layer {
    void *ln1, *ln2, *qkv, *o, *gate_up, *down, *q_norm = nullptr, *k_norm = nullptr;
    void *k_cache = nullptr, *v_cache = nullptr;
  };
  // The int32 metadata of a forward pass: one device array, uploaded from a pinned mirror.
  struct Meta {
    int64_t ids, pos, batch_idx, qo_indptr, kv_indptr, last_len, kv_indices, last_rows, total;
  };

  void* alloc(size_t bytes);
  void* upload(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
               void* dst = nullptr);
  void forward(int tokens, bool prefill, bool all_logits, bool sample);
  void sample(int rows);
  void set_decode_meta(bool with_ids);
  void upload_meta(int64_t from, int64_t to);
  void check(kjit_status s, const char* what);

  ModelConfig cfg_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
  size_t weight_bytes_ = 0;
  void *embed_ = nullptr, *final_norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<Layer> layers_;

  RunOptions opt_;
  int batch_ = 0, max_tokens_ = 0, pages_per_req_ = 0;
  std::vector<int> lens_;  // tokens of each request in the cache
  void *residual_ = nullptr, *hidden_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr;
  void *gate_up_ = nullptr, *act_ = nullptr, *last_hidden_ = nullptr, *logits_ = nullptr;
  void *workspace_ = nullptr, *seed_ = nullptr, *offset_ = nullptr;
  int32_t* meta_dev_ = nullptr;
  int32_t* meta_host_ = nullptr;    // pinned
  int64_t* offset_host_ = nullptr;  // pinned
  Meta meta_{};
  int logits_rows_ = 0;
  std::vector<int32_t> first_tokens_;
  kjit_prefill_plan* prefill_plan_ = nullptr;
  kjit_decode_plan* decode_plan_ = nullptr;
  size_t workspace_bytes_ = 0;
  cudaGraphExec_t graph_ = nullptr;
  int decode_steps_ = 0;
  int calls_ = 0;  // kjit calls made, for StepStats
  StepStats stats_;
};

}  // namespace engine
