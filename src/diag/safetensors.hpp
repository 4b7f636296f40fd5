// safetensors files: an 8-byte little-endian header length N, N bytes of JSON (per tensor: dtype,
// shape and data_offsets into the byte buffer that follows; an optional "__metadata__" map of
// strings), then the tensors' bytes, row-major and packed. PyTorch, NumPy and JAX load them with
// the `safetensors` package. The reader treats its input as hostile: every length and offset is
// checked before use, nothing recurses on the input, and anything not well-formed is rejected
// with a message (never a crash, never a read out of bounds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::util::safetensors {

enum class Dtype : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E4M3,  // OCP e4m3fn (torch.float8_e4m3fn)
  kF8E5M2,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64,
};

const char* dtype_name(Dtype d);  // the header's spelling: "BF16", "F8_E4M3", ...
std::optional<Dtype> parse_dtype(std::string_view name);
size_t dtype_size(Dtype d);  // bytes per element

using Metadata = std::map<std::string, std::string>;

// A tensor to write: `data` holds numel(shape) * dtype_size(dtype) packed row-major bytes.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// The header: the length prefix and the JSON, padded with spaces so the data starts 8-byte
// aligned. Tensors are laid out in the order given. Throws kjit::Error(KJIT_ERROR_INVALID_ARGUMENT)
// on an empty, duplicate or reserved ("__metadata__") name, a negative dim or a size overflow.
std::string encode_header(const std::vector<TensorView>& tensors, const Metadata& metadata = {});
// The whole file in memory.
std::string encode(const std::vector<TensorView>& tensors, const Metadata& metadata = {});
// Streams the file to `path` (through a temp file renamed into place, so a reader never sees a
// partial one). Throws kjit::Error(KJIT_ERROR_CACHE) when the write fails.
void write_file(const std::filesystem::path& path, const std::vector<TensorView>& tensors,
                const Metadata& metadata = {});

// One tensor of a parsed file; [begin, end) is its range in the data buffer.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t numel() const;
};

// Limits of the reader: larger headers or deeper JSON are rejected before parsing.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
inline constexpr int kMaxDims = 64;

class File {
 public:
  // Validates everything (lengths, JSON shape, dtypes, dims, offsets within the buffer and
  // matching the shapes, no overlaps, no gaps, no duplicate keys). Throws
  // kjit::Error(KJIT_ERROR_INVALID_ARGUMENT, "safetensors: ...") saying what is wrong.
  static File parse(std::string bytes);
  // parse() of a file's contents; a file that cannot be read throws the same way.
  static File read(const std::filesystem::path& path);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in data order
  const TensorInfo* find(std::string_view name) const;
  std::string_view data(const TensorInfo& t) const;
  const Metadata& metadata() const { return metadata_; }

 private:
  std::string bytes_;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  Metadata metadata_;
};

}  // namespace kjit::util::safetensors
