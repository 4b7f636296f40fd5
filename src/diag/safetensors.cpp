#include "diag/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace kjit::util::safetensors {

namespace {

struct DtypeRow {
  Dtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeRow kDtypes[] = {
    {Dtype::kBool, "BOOL", 1},      {Dtype::kU8, "U8", 1},          {Dtype::kI8, "I8", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kF8E5M2, "F8_E5M2", 1}, {Dtype::kU16, "U16", 2},
    {Dtype::kI16, "I16", 2},        {Dtype::kF16, "F16", 2},        {Dtype::kBF16, "BF16", 2},
    {Dtype::kU32, "U32", 4},        {Dtype::kI32, "I32", 4},        {Dtype::kF32, "F32", 4},
    {Dtype::kU64, "U64", 8},        {Dtype::kI64, "I64", 8},        {Dtype::kF64, "F64", 8},
};

const DtypeRow& row(Dtype d) {
  for (const auto& r : kDtypes) {
    if (r.dtype == d) return r;
  }
  return kDtypes[1];
}

template <typename... Args>
[[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(KJIT_ERROR_INVALID_ARGUMENT,
              "safetensors: " + fmt::format(f, std::forward<Args>(args)...));
}

// numel * elem_size of a shape, or nullopt on overflow past 2^63.
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, size_t elem) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return n;
}

// The deepest nesting of objects and arrays outside strings. The parser below is fed only
// headers this shallow, so no input can drive it (or the tree's destructor) into deep recursion.
int nesting_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

uint64_t unsigned_value(const nlohmann::json& v, const std::string& tensor, const char* what) {
  if (!v.is_number_unsigned()) bad("tensor '{}': {} must be non-negative integers", tensor, what);
  uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    bad("tensor '{}': {} value {} is too large", tensor, what, u);
  }
  return u;
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& e, uint64_t data_size) {
  if (!e.is_object()) bad("tensor '{}': entry is not an object", name);
  for (const auto& [key, value] : e.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      bad("tensor '{}': unknown field '{}'", name, key);
    }
  }
  if (!e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets")) {
    bad("tensor '{}': needs dtype, shape and data_offsets", name);
  }
  TensorInfo t;
  t.name = name;
  const auto& dt = e["dtype"];
  if (!dt.is_string()) bad("tensor '{}': dtype is not a string", name);
  auto d = parse_dtype(dt.get<std::string>());
  if (!d) bad("tensor '{}': unknown dtype '{}'", name, dt.get<std::string>());
  t.dtype = *d;
  const auto& shape = e["shape"];
  if (!shape.is_array()) bad("tensor '{}': shape is not an array", name);
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    bad("tensor '{}': {} dims (at most {})", name, shape.size(), kMaxDims);
  }
  for (const auto& v : shape)
    t.shape.push_back(static_cast<int64_t>(unsigned_value(v, name, "dims")));
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    bad("tensor '{}': data_offsets is not [begin, end]", name);
  t.begin = unsigned_value(off[0], name, "data_offsets");
  t.end = unsigned_value(off[1], name, "data_offsets");
  if (t.begin > t.end) bad("tensor '{}': data_offsets [{}, {}] decrease", name, t.begin, t.end);
  if (t.end > data_size) {
    bad("tensor '{}': data_offsets end {} is past the {} data bytes", name, t.end, data_size);
  }
  auto bytes = byte_size(t.shape, dtype_size(t.dtype));
  if (!bytes) bad("tensor '{}': shape overflows", name);
  if (*bytes != t.end - t.begin) {
    bad("tensor '{}': shape and dtype need {} bytes but data_offsets span {}", name, *bytes,
        t.end - t.begin);
  }
  return t;
}

}  // namespace

const char* dtype_name(Dtype d) {
  return row(d).name;
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& r : kDtypes) {
    if (name == r.name) return r.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(Dtype d) {
  return row(d).size;
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string encode_header(const std::vector<TensorView>& tensors, const Metadata& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") bad("cannot name a tensor '{}'", t.name);
    if (!names.insert(t.name).second) bad("tensor name '{}' given twice", t.name);
    auto bytes = byte_size(t.shape, dtype_size(t.dtype));
    if (!bytes) bad("tensor '{}': negative or overflowing shape", t.name);
    h[t.name] = {{"dtype", dtype_name(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string json = h.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  return le64(json.size()) + json;
}

std::string encode(const std::vector<TensorView>& tensors, const Metadata& metadata) {
  std::string out = encode_header(tensors, metadata);
  for (const auto& t : tensors) {
    size_t n = static_cast<size_t>(*byte_size(t.shape, dtype_size(t.dtype)));
    if (n) out.append(static_cast<const char*>(t.data), n);
  }
  return out;
}

void write_file(const std::filesystem::path& path, const std::vector<TensorView>& tensors,
                const Metadata& metadata) {
  const std::string header = encode_header(tensors, metadata);
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      fmt::format("{}.tmp.{}.{}", path.string(), ::getpid(), counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(KJIT_ERROR_CACHE, fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  }
  auto put = [&](const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw Error(KJIT_ERROR_CACHE, fmt::format("cannot write {}: {}", tmp, std::strerror(err)));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  put(header.data(), header.size());
  for (const auto& t : tensors) {
    put(static_cast<const char*>(t.data),
        static_cast<size_t>(*byte_size(t.shape, dtype_size(t.dtype))));
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(KJIT_ERROR_CACHE,
                fmt::format("cannot write {}: {}", path.string(), std::strerror(err)));
  }
}

File File::parse(std::string bytes) {
  File f;
  f.bytes_ = std::move(bytes);
  const std::string& b = f.bytes_;
  if (b.size() < 8) bad("{} bytes is shorter than the 8-byte header length", b.size());
  const uint64_t n = read_le64(b.data());
  if (n > kMaxHeaderBytes) bad("header length {} exceeds the {}-byte limit", n, kMaxHeaderBytes);
  if (n > b.size() - 8) bad("header length {} runs past the end of the {}-byte file", n, b.size());
  f.data_start_ = 8 + static_cast<size_t>(n);
  const uint64_t data_size = b.size() - f.data_start_;
  std::string_view text(b.data() + 8, static_cast<size_t>(n));
  if (nesting_depth(text) > 3) bad("header JSON nests deeper than a safetensors header does");

  // Duplicate keys would silently shadow each other in the parsed tree; catch them as they go by.
  std::vector<std::set<std::string>> open_objects;
  bool duplicate = false;
  std::string duplicate_key;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      open_objects.emplace_back();
    } else if (ev == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (ev == E::key && !open_objects.empty() && parsed.is_string()) {
      if (!open_objects.back().insert(parsed.get<std::string>()).second && !duplicate) {
        duplicate = true;
        duplicate_key = parsed.get<std::string>();
      }
    }
    return true;
  };
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    bad("header is not valid JSON ({})", e.what());
  }
  if (h.is_discarded()) bad("header is not valid JSON");
  if (duplicate) bad("header has the key '{}' twice", duplicate_key);
  if (!h.is_object()) bad("header is not a JSON object");

  for (const auto& [key, value] : h.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) bad("__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) bad("__metadata__ value of '{}' is not a string", mk);
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    f.tensors_.push_back(parse_entry(key, value, data_size));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& c) {
    return a.begin != c.begin ? a.begin < c.begin : a.end < c.end;
  });
  // Packed: every data byte belongs to exactly one tensor.
  uint64_t expected = 0;
  for (const auto& t : f.tensors_) {
    if (t.begin < expected) bad("tensor '{}' overlaps the tensor before it", t.name);
    if (t.begin > expected)
      bad("bytes {}..{} before tensor '{}' belong to no tensor", expected, t.begin, t.name);
    expected = t.end;
  }
  if (expected != data_size) {
    bad("the data has {} bytes but the tensors cover {}", data_size, expected);
  }
  return f;
}

File File::read(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  std::string bytes;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    ok = got == bytes.size();
  }
  ::close(fd);
  if (!ok) bad("cannot read {} (not a regular file, or it changed while read)", path.string());
  try {
    return parse(std::move(bytes));
  } catch (const Error& e) {
    throw Error(e.status(), fmt::format("{}: {}", path.string(), e.what()));
  }
}

const TensorInfo* File::find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string_view File::data(const TensorInfo& t) const {
  return std::string_view(bytes_).substr(data_start_ + static_cast<size_t>(t.begin),
                                         static_cast<size_t>(t.end - t.begin));
}

}  // namespace kjit::util::safetensors
