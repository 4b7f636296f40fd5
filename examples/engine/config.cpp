#include "config.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"

namespace engine {

ModelConfig read_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) throw LoadError(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(path + ": " + e.what());
  }
  ModelConfig c;
  try {
    c.architecture = j.at("architectures").at(0).get<std::string>();
    if (c.architecture != "LlamaForCausalLM" && c.architecture != "Qwen3ForCausalLM") {
      throw LoadError(path + ": architecture " + c.architecture +
                      " (the engine runs LlamaForCausalLM and Qwen3ForCausalLM)");
    }
    c.qk_norm = c.architecture == "Qwen3ForCausalLM";
    c.vocab_size = j.at("vocab_size").get<int>();
    c.hidden_size = j.at("hidden_size").get<int>();
    c.intermediate_size = j.at("intermediate_size").get<int>();
    c.num_layers = j.at("num_hidden_layers").get<int>();
    c.num_q_heads = j.at("num_attention_heads").get<int>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_q_heads);
    c.head_dim = j.contains("head_dim") && !j.at("head_dim").is_null()
                     ? j.at("head_dim").get<int>()
                     : c.hidden_size / c.num_q_heads;
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-6f);
    c.rope_theta = j.value("rope_theta", 10000.0f);
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    if (j.value("attention_bias", false) || j.value("mlp_bias", false)) {
      throw LoadError(path + ": attention_bias / mlp_bias are not supported");
    }
    // transformers 5 writes rope_theta and the scaling into one "rope_parameters" object; older
    // versions write rope_theta and "rope_scaling" at the top level.
    const char* rope_key = j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
    if (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) {
      c.rope_theta = j.at("rope_parameters").value("rope_theta", c.rope_theta);
    }
    const bool scaled = j.contains(rope_key) && !j.at(rope_key).is_null() &&
                        j.at(rope_key).value("rope_type", std::string("llama3")) != "default";
    if (scaled) {
      const auto& s = j.at(rope_key);
      const std::string type = s.value("rope_type", s.value("type", std::string()));
      if (type != "llama3") {
        throw LoadError(path + ": rope_scaling type '" + type + "' (only llama3 is supported)");
      }
      c.llama3_rope = true;
      c.rope_factor = s.at("factor").get<float>();
      c.low_freq_factor = s.at("low_freq_factor").get<float>();
      c.high_freq_factor = s.at("high_freq_factor").get<float>();
      c.original_max_position = s.at("original_max_position_embeddings").get<float>();
    }
    if (j.contains("eos_token_id") && !j.at("eos_token_id").is_null()) {
      const auto& e = j.at("eos_token_id");
      if (e.is_array()) {
        for (const auto& id : e) c.eos_token_ids.push_back(id.get<int32_t>());
      } else {
        c.eos_token_ids.push_back(e.get<int32_t>());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(path + ": " + e.what());
  }
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 ||
      c.num_q_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.num_q_heads % c.num_kv_heads != 0) {
    throw LoadError(path + ": sizes must be positive and heads a multiple of kv heads");
  }
  return c;
}

}  // namespace engine
