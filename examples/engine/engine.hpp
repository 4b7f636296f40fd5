// A dense Llama-3 / Qwen3 decoder on kjit alone: weights uploaded from a checkpoint, a fixed
// number of request slots over a paged KV cache, ragged prefills that admit prompts into free
// slots, and decode steps over every slot captured once into a CUDA graph and replayed. Every
// kernel is kjit's; the CUDA runtime only allocates, copies and runs the graph. The engine is a
// scheduler::Backend: run_requests (scheduler.hpp) drives it for continuous batching.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "kjit/kjit.h"
#include "scheduler.hpp"

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
  int max_batch = 1;           // request slots: the decode batch
  int max_total_len = 0;       // tokens one request may hold: its prompt and generated tokens
  int max_prefill_tokens = 0;  // prompt tokens of one admit (sizes the activations)
  int page_size = 16;
  bool all_logits = false;  // prefill writes logits of every prompt token (teacher forcing)
  bool use_graph = true;    // replay the decode step from a CUDA graph
  // bf16 projections start streaming their weights before the kernel ahead finishes
  // (kjit_gemm_options::weights_early); off: plain programmatic launches, for an A/B.
  bool weights_early = true;
  SamplingConfig sampling;
};

// Launch counts of one decode step, from the engine's own calls and from the captured graph.
struct StepStats {
  int kjit_calls = 0;            // kjit entry points the step calls
  int kjit_calls_per_layer = 0;  // of those, per decoder layer
  int graph_kernels = 0;         // kernel nodes of the captured graph (0 without a graph)
};

class Engine : public Backend {
 public:
  // fp8: the decoder layers' linear weights are quantized at load to e4m3 with one scale per
  // output channel (kjit_quant_fp8 per row), their inputs per token on the way (fused into the
  // norms where kjit has the fused op), and the GEMMs run as kjit_gemm_fp8; the embedding, the
  // norms, attention and the LM head stay bf16.
  Engine(const Checkpoint& ckpt, const ModelConfig& cfg, int device, bool fp8 = false);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Allocates the activations, the metadata and a paged KV cache of max_total_len tokens for
  // each of max_batch slots. Once per engine, before the first admit.
  void reserve(const RunOptions& opt);
  // Prefills prompts[i] into the free slot slots[i] in one ragged pass (each prompt attends its
  // own keys, which land in its slot's pages): the logits of every prompt token (all_logits) or
  // of each prompt's last token into logits(), and, unless all_logits, each one's first sampled
  // token, returned.
  std::vector<int32_t> admit(const std::vector<int>& slots,
                             const std::vector<std::vector<int32_t>>& prompts) override;
  // One decode step over every slot, fed tokens[slot] (teacher forcing feeds the forced ones); a
  // free slot decodes its token at position 0 of its own first page, and its result means
  // nothing. Returns every slot's sampled next token (empty under all_logits). The first call
  // runs eagerly (it loads every kernel the step uses) and captures the graph; later calls
  // replay it.
  std::vector<int32_t> decode(const std::vector<int32_t>& tokens) override;
  // Frees a slot for the next admit.
  void release(int slot) override;

  // The last forward pass's logits, fp32 rows of vocab_size, copied to the host.
  std::vector<float> logits() const;
  int logits_rows() const { return logits_rows_; }
  const StepStats& step_stats() const { return stats_; }
  size_t weight_bytes() const { return weight_bytes_; }
  cudaStream_t stream() const { return stream_; }

 private:
  struct Layer {
    void *ln1, *ln2, *qkv, *o, *gate_up, *down, *q_norm = nullptr, *k_norm = nullptr;
    void *k_cache = nullptr, *v_cache = nullptr;
    // fp8: the per-output-channel fp32 scales of qkv, o, gate_up and down (e4m3 weights then).
    void *qkv_scale = nullptr, *o_scale = nullptr, *gate_up_scale = nullptr, *down_scale = nullptr;
  };
  // The int32 metadata of a forward pass: one device array, uploaded from a pinned mirror.
  struct Meta {
    int64_t ids, pos, batch_idx, qo_indptr, kv_indptr, last_len, kv_indices, last_rows, total;
  };

  void* alloc(size_t bytes);
  void free_allocation(void* p);
  void quantize_weight(void*& w, void*& scale, int64_t n, int64_t k);
  void quantize_rows(DLTensor* x, int64_t rows, int64_t k);
  void linear(DLTensor* in, int64_t rows, int64_t k, const void* w, const void* w_scale, int64_t n,
              DLTensor* out);
  void* upload(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
               void* dst = nullptr);
  void forward(int tokens, int batch, bool prefill, bool all_logits, bool sample);
  void sample(int rows);
  void set_decode_meta();
  void set_offset();
  void upload_meta(int64_t from, int64_t to);
  void check(kjit_status s, const char* what);

  ModelConfig cfg_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
  size_t weight_bytes_ = 0;
  bool fp8_ = false;
  void *embed_ = nullptr, *final_norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<Layer> layers_;

  RunOptions opt_;
  int batch_ = 0, max_tokens_ = 0, pages_per_req_ = 0;
  std::vector<int> lens_;     // tokens of each slot's request in the cache
  std::vector<bool> active_;  // the slot holds a request
  void *residual_ = nullptr, *hidden_ = nullptr, *qkv_ = nullptr, *attn_ = nullptr;
  void *gate_up_ = nullptr, *act_ = nullptr, *last_hidden_ = nullptr, *logits_ = nullptr;
  void *x8_ = nullptr, *x_scale_ = nullptr;  // fp8: a GEMM's quantized input and its row scales
  void *workspace_ = nullptr, *seed_ = nullptr, *offset_ = nullptr;
  int32_t* meta_dev_ = nullptr;
  int32_t* meta_host_ = nullptr;    // pinned
  int64_t* offset_host_ = nullptr;  // pinned
  Meta meta_{};
  int logits_rows_ = 0;
  int64_t draws_ = 0;  // sampling passes so far: each draws with its own Philox offset
  kjit_prefill_plan* prefill_plan_ = nullptr;
  kjit_decode_plan* decode_plan_ = nullptr;
  size_t workspace_bytes_ = 0;
  cudaGraphExec_t graph_ = nullptr;
  int decode_steps_ = 0;
  int calls_ = 0;  // kjit calls made, for StepStats
  StepStats stats_;
};

}  // namespace engine
