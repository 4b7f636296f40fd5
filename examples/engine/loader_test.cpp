// The checkpoint loader without a GPU: writes tiny safetensors files (one file, then two shards
// with an index) and config.json files itself, reads them back through engine::Checkpoint and
// engine::read_config, and checks that broken files are refused with a message, never read past
// their end. Exit status 0 when every check holds.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "config.hpp"

namespace fs = std::filesystem;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// Fails unless `f` throws engine::LoadError whose message holds `fragment`.
void expect_error(const std::function<void()>& f, const std::string& fragment,
                  const std::string& what) {
  try {
    f();
  } catch (const engine::LoadError& e) {
    check(std::string(e.what()).find(fragment) != std::string::npos,
          what + ": message '" + e.what() + "' lacks '" + fragment + "'");
    return;
  }
  check(false, what + ": no LoadError");
}

struct Blob {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

// bf16 bit patterns of small integers, so the values are exact.
Blob bf16(const std::string& name, std::vector<int64_t> shape, float start) {
  Blob b{name, "BF16", shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    const float f = start + static_cast<float>(i);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const auto h = static_cast<uint16_t>(u >> 16);
    b.bytes.push_back(static_cast<unsigned char>(h & 0xFF));
    b.bytes.push_back(static_cast<unsigned char>(h >> 8));
  }
  return b;
}

void write_safetensors(const fs::path& path, const std::vector<Blob>& blobs,
                       const std::string& header_override = "") {
  nlohmann::json h = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const Blob& b : blobs) {
    h[b.name] = {{"dtype", b.dtype},
                 {"shape", b.shape},
                 {"data_offsets", {offset, offset + b.bytes.size()}}};
    offset += b.bytes.size();
  }
  std::string text = header_override.empty() ? h.dump() : header_override;
  while (text.size() % 8 != 0) text += ' ';  // as safetensors pads it
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  out << text;
  for (const Blob& b : blobs)
    out.write(reinterpret_cast<const char*>(b.bytes.data()),
              static_cast<std::streamsize>(b.bytes.size()));
}

uint16_t bf16_at(const engine::TensorView& v, size_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(v.data) + 2 * i, 2);
  return h;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

int main() {
  const fs::path root =
      fs::temp_directory_path() / ("kjit_engine_loader_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "one");
  fs::create_directories(root / "sharded");
  fs::create_directories(root / "bad");

  // One file.
  const Blob a = bf16("model.embed_tokens.weight", {3, 4}, 1.0f);
  const Blob b = bf16("model.norm.weight", {4}, 100.0f);
  write_safetensors(root / "one" / "model.safetensors", {a, b});
  {
    const engine::Checkpoint ck((root / "one").string());
    check(ck.size() == 2, "one file: two tensors");
    const auto& e = ck.get("model.embed_tokens.weight", "BF16", {3, 4});
    check(e.bytes == 24, "one file: embed bytes");
    check(bf16_at(e, 0) == 0x3F80 && bf16_at(e, 11) == 0x4140, "one file: embed values 1 and 12");
    const auto& n = ck.get("model.norm.weight", "BF16", {4});
    check(bf16_at(n, 3) == 0x42CE, "one file: norm value 103");
    expect_error([&] { ck.get("model.norm.weight", "BF16", {5}); }, "[4]", "wrong shape");
    expect_error([&] { ck.get("model.norm.weight", "F32", {4}); }, "BF16", "wrong dtype");
    expect_error([&] { ck.get("lm_head.weight", "BF16", {3, 4}); }, "lm_head", "missing");
  }

  // Two shards and the index that names them.
  write_safetensors(root / "sharded" / "model-00001-of-00002.safetensors", {a});
  write_safetensors(root / "sharded" / "model-00002-of-00002.safetensors", {b});
  write_text(root / "sharded" / "model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", 32}}},
                            {"weight_map",
                             {{a.name, "model-00001-of-00002.safetensors"},
                              {b.name, "model-00002-of-00002.safetensors"}}}}
                 .dump());
  {
    const engine::Checkpoint ck((root / "sharded").string());
    check(ck.size() == 2 && ck.has(a.name) && ck.has(b.name), "shards: both tensors");
    check(bf16_at(ck.get(b.name, "BF16", {4}), 0) == 0x42C8, "shards: norm value 100");
  }

  // Broken files: each refused with a message.
  const fs::path bad = root / "bad" / "model.safetensors";
  auto open_bad = [&] { engine::Checkpoint ck((root / "bad").string()); };
  write_text(bad, "abc");
  expect_error(open_bad, "too short", "3-byte file");
  write_safetensors(bad, {a}, "{\"x\": ");
  expect_error(open_bad, "not JSON", "truncated header");
  {
    std::ofstream out(bad, std::ios::binary);
    const uint64_t len = 1000000;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xFF));
    out << "{}";
  }
  expect_error(open_bad, "exceeds the file", "header length past the end");
  write_safetensors(bad, {a},
                    R"({"w": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 1000]}})");
  expect_error(open_bad, "outside", "data past the end");
  write_safetensors(bad, {a},
                    R"({"w": {"dtype": "BF16", "shape": [5, 4], "data_offsets": [0, 24]}})");
  expect_error(open_bad, "needs 40", "bytes disagree with the shape");
  write_safetensors(bad, {a},
                    R"({"w": {"dtype": "Q4", "shape": [3, 4], "data_offsets": [0, 24]}})");
  expect_error(open_bad, "unknown dtype", "unknown dtype");
  fs::remove(bad);
  expect_error(open_bad, "no *.safetensors", "empty folder");

  // config.json: Llama-3 with llama3 rope scaling and tied embeddings, Qwen3 with its head_dim.
  write_text(root / "one" / "config.json", R"({
    "architectures": ["LlamaForCausalLM"], "vocab_size": 3, "hidden_size": 4,
    "intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "tie_word_embeddings": true, "eos_token_id": [128001, 128009],
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  {
    const engine::ModelConfig c = engine::read_config((root / "one").string());
    check(c.head_dim == 2 && c.num_kv_heads == 1 && !c.qk_norm, "llama: shape");
    check(c.llama3_rope && c.rope_factor == 8.0f && c.original_max_position == 8192.0f,
          "llama: rope scaling");
    check(c.tie_word_embeddings && c.rope_theta == 500000.0f, "llama: tied, theta");
    check(c.eos_token_ids == std::vector<int32_t>{128001, 128009}, "llama: eos list");
  }
  write_text(root / "sharded" / "config.json", R"({
    "architectures": ["Qwen3ForCausalLM"], "vocab_size": 3, "hidden_size": 4,
    "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_scaling": null, "tie_word_embeddings": false, "eos_token_id": 151645})");
  {
    const engine::ModelConfig c = engine::read_config((root / "sharded").string());
    check(c.qk_norm && c.head_dim == 128 && !c.llama3_rope, "qwen3: qk norm, head_dim");
    check(c.eos_token_ids == std::vector<int32_t>{151645}, "qwen3: one eos id");
  }
  // transformers 5's spelling: rope_theta and the scaling in "rope_parameters".
  write_text(root / "bad" / "config.json", R"({
    "architectures": ["LlamaForCausalLM"], "vocab_size": 3, "hidden_size": 4,
    "intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}})");
  {
    const engine::ModelConfig c = engine::read_config((root / "bad").string());
    check(c.llama3_rope && c.rope_factor == 32.0f && c.rope_theta == 500000.0f,
          "rope_parameters: llama3 scaling and theta");
  }
  write_text(root / "bad" / "config.json", R"({
    "architectures": ["Qwen3ForCausalLM"], "vocab_size": 3, "hidden_size": 4,
    "intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  {
    const engine::ModelConfig c = engine::read_config((root / "bad").string());
    check(!c.llama3_rope && c.rope_theta == 1000000.0f, "rope_parameters: default type");
    check(c.eos_token_ids.empty(), "no eos_token_id");
  }
  write_text(root / "bad" / "config.json",
             R"({"architectures": ["MistralForCausalLM"], "vocab_size": 3})");
  expect_error([&] { engine::read_config((root / "bad").string()); }, "MistralForCausalLM",
               "unsupported architecture");
  write_text(root / "bad" / "config.json", R"({"architectures": ["LlamaForCausalLM"]})");
  expect_error([&] { engine::read_config((root / "bad").string()); }, "vocab_size",
               "missing field");

  fs::remove_all(root);
  if (failures == 0) std::printf("loader test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
