// The model shape and numerics the engine reads from a checkpoint's config.json: Llama-3
// (LlamaForCausalLM: rope_theta, the "llama3" rope_scaling when present, tied or untied
// embeddings) and Qwen3 (Qwen3ForCausalLM: the same plus a per-head RMSNorm of q and k).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engine {

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM" or "Qwen3ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // config's head_dim, else hidden_size / num_attention_heads
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3
  // rope_scaling {"rope_type": "llama3", ...}; otherwise plain RoPE.
  bool llama3_rope = false;
  float rope_factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position = 8192.0f;
  // eos_token_id: one id or a list (generation ends after any of them); empty when absent/null.
  std::vector<int32_t> eos_token_ids;
};

// Reads `dir`/config.json. Throws engine::LoadError (checkpoint.hpp) for an architecture other
// than these two, a missing field, an attention or MLP bias, or a rope_scaling type other than
// llama3.
ModelConfig read_config(const std::string& dir);

}  // namespace engine
