#include "checkpoint.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace engine {

size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BF16", 2}, {"F16", 2}, {"F32", 4}, {"F64", 8},  {"I64", 8},     {"I32", 4},
      {"I16", 2},  {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

SafetensorsFile::SafetensorsFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw LoadError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw LoadError(path + ": cannot stat");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw LoadError(path + ": " + std::to_string(size_) + " bytes, too short for a header");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw LoadError(path + ": mmap failed: " + std::strerror(errno));
  }
  try {
    parse(path);
  } catch (...) {
    ::munmap(map_, size_);  // a constructor that throws runs no destructor
    throw;
  }
}

void SafetensorsFile::parse(const std::string& path) {
  const auto* bytes = static_cast<const unsigned char*>(map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];  // little-endian
  if (header_len > size_ - 8) {
    throw LoadError(path + ": header length " + std::to_string(header_len) + " exceeds the file");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(path + ": header is not JSON: " + e.what());
  }
  const unsigned char* data = bytes + 8 + header_len;
  const size_t data_size = size_ - 8 - header_len;
  try {
    if (!header.is_object()) throw LoadError("the header is not a JSON object");
    for (const auto& [name, t] : header.items()) {
      if (name == "__metadata__") continue;
      TensorView v;
      v.file = path;
      v.dtype = t.at("dtype").get<std::string>();
      v.shape = t.at("shape").get<std::vector<int64_t>>();
      const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size) {
        throw LoadError("tensor " + name + ": data_offsets outside the file's data");
      }
      const size_t elem = dtype_bytes(v.dtype);
      if (elem == 0) throw LoadError("tensor " + name + ": unknown dtype " + v.dtype);
      uint64_t numel = 1;
      for (int64_t d : v.shape) {
        if (d < 0 || (d > 0 && numel > UINT64_MAX / static_cast<uint64_t>(d))) {
          throw LoadError("tensor " + name + ": bad shape");
        }
        numel *= static_cast<uint64_t>(d);
      }
      v.bytes = static_cast<size_t>(offsets[1] - offsets[0]);
      if (numel > UINT64_MAX / elem || numel * elem != v.bytes) {
        throw LoadError("tensor " + name + ": " + std::to_string(v.bytes) +
                        " bytes, but dtype x shape needs " + std::to_string(numel * elem));
      }
      v.data = data + offsets[0];
      tensors_.emplace(name, std::move(v));
    }
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(path + ": " + e.what());
  } catch (const LoadError& e) {
    throw LoadError(path + ": " + e.what());
  }
}

SafetensorsFile::~SafetensorsFile() {
  ::munmap(map_, size_);
}

Checkpoint::Checkpoint(const std::string& dir) {
  std::vector<std::string> paths;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw LoadError(index.string() + ": " + e.what());
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : j.at("weight_map").items()) {
      shards.insert(file.get<std::string>());
    }
    for (const auto& s : shards) paths.push_back((fs::path(dir) / s).string());
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    paths.push_back((fs::path(dir) / "model.safetensors").string());
  } else if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
    }
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) throw LoadError(dir + ": no *.safetensors files");
  for (const auto& p : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (const auto& [name, view] : files_.back()->tensors()) {
      if (!index_.emplace(name, &view).second) {
        throw LoadError(p + ": tensor " + name + " is also in " + index_.at(name)->file);
      }
    }
  }
}

const TensorView& Checkpoint::get(const std::string& name, const std::string& dtype,
                                  const std::vector<int64_t>& shape) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw LoadError("checkpoint has no tensor " + name);
  const TensorView& v = *it->second;
  auto dims = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  };
  if (v.dtype != dtype || v.shape != shape) {
    throw LoadError(v.file + ": tensor " + name + " is " + v.dtype + " " + dims(v.shape) +
                    ", the config says " + dtype + " " + dims(shape));
  }
  return v;
}

}  // namespace engine
