// A Hugging Face checkpoint folder, read without copying: config.json, and the tensors of
// model.safetensors or of the shards model.safetensors.index.json names, each file mmap'ed and
// its tensors handed out as pointers into the mapping (the upload reads them from there).
// Host only: no CUDA, so the loader test runs anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace engine {

// A loader failure: the message names the file and what is wrong with it.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One tensor of a safetensors file: where its bytes lie in the mapping.
struct TensorView {
  std::string dtype;  // the safetensors spelling: "BF16", "F32", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
  std::string file;  // for messages
};

// One mmap'ed safetensors file: an 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
// Every offset is checked against the file's size and every byte count against dtype x shape.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  void parse(const std::string& path);
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// Bytes per element of a safetensors dtype; 0 for one the engine does not know.
size_t dtype_bytes(const std::string& dtype);

// The tensors of a checkpoint folder: model.safetensors.index.json's shards when it exists,
// else model.safetensors, else every *.safetensors file of the folder.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // The tensor, checked to have `dtype` and `shape`; LoadError naming it otherwise.
  const TensorView& get(const std::string& name, const std::string& dtype,
                        const std::vector<int64_t>& shape) const;
  size_t size() const { return index_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace engine
