#include "diag/call_log.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "diag/dump.hpp"
#include "api/guard.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "runtime/jit_core.hpp"
#include "util/env.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/glob.hpp"
#include "util/log.hpp"

namespace kjit::api {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// ---- CallLog ------------------------------------------------------------------------------------

CallArg& CallLog::add(const char* name, ArgKind kind) {
  CallArg& a = args_.emplace_back();
  a.name = name;
  a.kind = kind;
  return a;
}

CallLog& CallLog::tensor(const char* name, ArgKind kind, const DLTensor* t) {
  add(name, kind).tensor = t;
  return *this;
}

CallLog& CallLog::number(const char* name, ScalarType type, double f, int64_t i) {
  CallArg& a = add(name, ArgKind::kScalar);
  a.scalar_type = type;
  a.f = f;
  a.i = i;
  return *this;
}

CallLog& CallLog::stream(void* s) {
  add("stream", ArgKind::kStream).stream = s;
  return *this;
}

// ---- Settings -----------------------------------------------------------------------------------

namespace {

using util::parse_u64;
using util::trim;

}  // namespace

int parse_log_level(std::string_view text, bool* ok) {
  text = trim(text);
  if (ok) *ok = true;
  if (text.empty()) return 0;
  uint64_t v = 0;
  if (!parse_u64(text, &v)) {
    if (ok) *ok = false;
    return 0;
  }
  if (v >= 10) return 10;
  if (v >= 5) return 5;
  if (v >= 3) return 3;
  return v >= 1 ? 1 : 0;
}

std::string expand_log_dest(std::string_view dest, long pid) {
  std::string out;
  for (size_t i = 0; i < dest.size(); ++i) {
    if (dest[i] == '%' && i + 1 < dest.size() && dest[i + 1] == 'i') {
      out += std::to_string(pid);
      ++i;
    } else {
      out += dest[i];
    }
  }
  return out;
}

bool api_selected(const LogSettings& s, const std::string& api) {
  const std::string short_name = api.rfind("kjit_", 0) == 0 ? api.substr(5) : std::string();
  auto matches = [&](const std::vector<std::string>& patterns) {
    return util::glob_match_any(patterns, api) ||
           (!short_name.empty() && util::glob_match_any(patterns, short_name));
  };
  if (!s.include.empty() && !matches(s.include)) return false;
  return !matches(s.exclude);
}

namespace {
std::atomic<int> g_level_override{-1};
}  // namespace

LogSettings LogSettings::from_env() {
  LogSettings s;
  if (const int o = g_level_override.load(); o >= 0) {
    s.level = parse_log_level(std::to_string(o));
  } else if (auto v = util::env_get("KJIT_LOGLEVEL")) {
    bool ok = true;
    s.level = parse_log_level(*v, &ok);
    if (!ok)
      s.warnings.push_back(
          fmt::format("KJIT_LOGLEVEL={} is not a level 0..10; logging is off", *v));
  }
  if (auto v = util::env_get("KJIT_LOGDEST"); v && !trim(*v).empty())
    s.dest = std::string(trim(*v));
  if (auto v = util::env_get("KJIT_LOG_INCLUDE")) s.include = util::split_list(*v);
  if (auto v = util::env_get("KJIT_LOG_EXCLUDE")) s.exclude = util::split_list(*v);
  if (auto v = util::env_get("KJIT_DUMP_DIR")) s.dump_dir = std::string(trim(*v));
  if (auto v = util::env_get("KJIT_DUMP_MAX_COUNT")) {
    uint64_t n = 0;
    if (parse_u64(trim(*v), &n) && n <= static_cast<uint64_t>(INT64_MAX)) {
      s.dump_max_count = static_cast<int64_t>(n);
    } else {
      s.warnings.push_back(
          fmt::format("KJIT_DUMP_MAX_COUNT={} is not a count; using {}", *v, s.dump_max_count));
    }
  }
  if (auto v = util::env_get("KJIT_DUMP_MAX_BYTES")) {
    uint64_t n = 0;
    if (parse_byte_count(*v, &n)) {
      s.dump_max_bytes = n;
    } else {
      s.warnings.push_back(fmt::format(
          "KJIT_DUMP_MAX_BYTES={} is not a byte count (e.g. 20G); using {}", *v, s.dump_max_bytes));
    }
  }
  return s;
}

// ---- Process-wide state -----------------------------------------------------------------------

namespace log_detail {
std::atomic<int> g_level{-1};
}

namespace {

// Statistics look at this many bytes of a tensor at most (the first elements in row-major order).
constexpr uint64_t kStatsMaxBytes = 64ull << 20;

// The settings with what they opened. An in-flight call keeps the one it started with.
struct Runtime {
  LogSettings s;
  int fd = 2;
  bool own_fd = false;
  DumpBudget budget;
  explicit Runtime(LogSettings settings)
      : s(std::move(settings)), budget(s.dump_max_count, s.dump_max_bytes) {}
  ~Runtime() {
    if (own_fd) ::close(fd);
  }
};

std::mutex g_mu;
std::shared_ptr<Runtime> g_runtime;
std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_next_call{0};

// One write(2) per block of lines: no buffer in the process to lose in a crash, and blocks from
// threads (or processes appending to one file) do not interleave within a block.
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t w = ::write(fd, text.data(), text.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // nowhere to report it: the log itself is what failed
    text.remove_prefix(static_cast<size_t>(w));
  }
}

std::shared_ptr<Runtime> make_runtime() {
  auto rt = std::make_shared<Runtime>(LogSettings::from_env());
  for (const auto& w : rt->s.warnings) util::log("warning: {}", w);
  if (rt->s.level > 0) {
    if (rt->s.dest == "stderr") {
      rt->fd = 2;
    } else if (rt->s.dest == "stdout") {
      rt->fd = 1;
    } else {
      const std::string path = expand_log_dest(rt->s.dest, static_cast<long>(::getpid()));
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        rt->fd = fd;
        rt->own_fd = true;
      } else {
        util::log("warning: KJIT_LOGDEST: cannot open {}: {}; logging to stderr", path,
                  std::strerror(errno));
      }
    }
  }
  return rt;
}

std::shared_ptr<Runtime> runtime() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) {
    g_runtime = make_runtime();
    log_detail::g_level.store(g_runtime->s.level, std::memory_order_relaxed);
  }
  return g_runtime;
}

std::string hex_ptr(const void* p) {
  return fmt::format("{:#x}", reinterpret_cast<uintptr_t>(p));
}

const char* kind_name(ArgKind k) {
  switch (k) {
    case ArgKind::kIn: return "in";
    case ArgKind::kOut: return "out";
    case ArgKind::kInOut: return "inout";
    case ArgKind::kScalar: return "scalar";
    case ArgKind::kStream: return "stream";
  }
  return "?";
}

const char* scalar_type_name(ScalarType t) {
  switch (t) {
    case ScalarType::kF32: return "float32";
    case ScalarType::kF64: return "float64";
    case ScalarType::kI32: return "int32";
    case ScalarType::kI64: return "int64";
  }
  return "?";
}

std::string scalar_text(const CallArg& a) {
  switch (a.scalar_type) {
    case ScalarType::kF32: return fmt::format("{}", static_cast<float>(a.f));
    case ScalarType::kF64: return fmt::format("{}", a.f);
    default: return fmt::format("{}", a.i);
  }
}

// The dims as "[4,64]".
std::string dims_text(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// "bf16[4,64] strides=[64,1] offset=0 cuda:0 ptr=0x7f0000000000 align=16", from the raw fields
// (so a malformed tensor is shown as it is, without being walked).
std::string tensor_text(const DLTensor* t) {
  if (t == nullptr) return "NULL";
  std::string shape;
  if (t->ndim < 0 || t->ndim > kMaxWalkDims) {
    shape = fmt::format("[ndim={} invalid]", t->ndim);
  } else if (t->ndim > 0 && t->shape == nullptr) {
    shape = fmt::format("[ndim={} shape=NULL]", t->ndim);
  } else {
    shape = dims_text(t->shape, t->ndim);
  }
  std::string strides = "null";
  if (t->strides != nullptr && t->ndim >= 0 && t->ndim <= kMaxWalkDims) {
    strides = dims_text(t->strides, t->ndim);
  }
  const uintptr_t addr =
      reinterpret_cast<uintptr_t>(t->data) + static_cast<uintptr_t>(t->byte_offset);
  return fmt::format("{}{} strides={} offset={} {} ptr={} align={}", dtype_label(t->dtype), shape,
                     strides, t->byte_offset, device_label(t->device), hex_ptr(t->data),
                     t->data ? std::to_string(address_alignment(addr)) : "-");
}

std::string stats_text(st::Dtype d, std::string_view packed, uint64_t numel) {
  TensorStats s = compute_stats(d, packed);
  std::string text;
  if (s.finite > 0) {
    text = fmt::format("min={:.6g} max={:.6g} mean={:.6g}", s.min, s.max, s.mean);
  } else {
    text = "min=- max=- mean=-";
  }
  text += fmt::format(" nan={} inf={} n={}", s.nan, s.inf, s.n);
  if (s.n < numel) text += fmt::format(" (first {} of {} elements)", s.n, numel);
  return text;
}

std::string now_iso() {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

// One logged call: its lines, its statistics and its dump.
class CallRecord final : public jit::KernelObserver {
 public:
  CallRecord(const char* api, int level, std::shared_ptr<Runtime> rt)
      : api_(api), level_(level), rt_(std::move(rt)) {}

  void before(log_detail::FnRef<void(CallLog&)> describe);
  void after(kjit_status status);
  void on_kernel(const jit::LoadedKernel& k) noexcept override;

 private:
  struct Kernel {
    std::string uri;
    std::string arch;
    int device;
  };

  void emit(std::string& block) {
    if (block.empty()) return;
    write_all(rt_->fd, block);
    block.clear();
  }
  void line(std::string& block, std::string_view text) {
    block += prefix_;
    block += text;
    block += '\n';
  }
  bool wants_data(ArgKind k, bool before) const {
    return before ? (k == ArgKind::kIn || k == ArgKind::kInOut)
                  : (k == ArgKind::kOut || k == ArgKind::kInOut);
  }
  void find_device();
  bool synchronize(std::string& block, const char* when);
  void stats(std::string& block, bool before);
  void dump_before(std::string& block);
  void dump_after(kjit_status status, std::string& block);
  // Writes the arguments a dump keeps (inputs before the call, outputs after it) to
  // dump_dir_ / file and records in data_notes_ where each went or why it is missing.
  void write_tensors(bool before, const char* file);
  void write_call_json(const char* status, const std::string& message);
  json args_json() const;

  const char* api_;
  int level_;
  std::shared_ptr<Runtime> rt_;
  uint64_t id_ = 0;
  std::string prefix_;
  CallLog log_;
  std::vector<std::optional<TensorDesc>> descs_;  // per arg; nullopt for non-tensors / invalid
  std::vector<std::string> desc_errors_;
  std::vector<Kernel> kernels_;
  void* stream_ = nullptr;
  // Where the tensors live and whether the host may read them now.
  bool device_tensors_ = false;
  int ordinal_ = 0;
  bool capturing_ = false;
  bool host_read_ok_ = true;  // false: skip statistics and dumps of device tensors
  // The dump.
  bool dumping_ = false;
  fs::path dump_dir_;
  uint64_t reserved_ = 0;
  uint64_t written_ = 0;
  json data_notes_ = json::object();  // per tensor: what was written where, or why not
  std::string time_;
};

void CallRecord::before(log_detail::FnRef<void(CallLog&)> describe) {
  id_ = g_next_call.fetch_add(1, std::memory_order_relaxed) + 1;
  prefix_ = fmt::format("[kjit-api {}:{}] ", ::getpid(), id_);
  time_ = now_iso();
  std::string block;
  line(block, fmt::format("{} tid={}", api_, static_cast<long>(::syscall(SYS_gettid))));
  if (level_ < 3) {
    emit(block);
    return;
  }
  std::string describe_error;
  try {
    describe(log_);
  } catch (const std::exception& e) {
    describe_error = e.what();
  }
  for (const CallArg& a : log_.args()) {
    std::string why;
    switch (a.kind) {
      case ArgKind::kIn:
      case ArgKind::kOut:
      case ArgKind::kInOut:
        descs_.push_back(describe_tensor(a.tensor, &why));
        line(block, fmt::format("  {} {}: {}", kind_name(a.kind), a.name, tensor_text(a.tensor)));
        break;
      case ArgKind::kScalar:
        descs_.emplace_back();
        line(block, fmt::format("  scalar {}: {} ({})", a.name, scalar_text(a),
                                scalar_type_name(a.scalar_type)));
        break;
      case ArgKind::kStream:
        descs_.emplace_back();
        stream_ = a.stream;
        line(block, fmt::format("  stream: {}", hex_ptr(a.stream)));
        break;
    }
    desc_errors_.push_back(why);
  }
  if (!describe_error.empty()) line(block, "  describe failed: " + describe_error);
  emit(block);  // the arguments are out before anything below can fault or hang

  if (level_ < 5) return;
  find_device();
  if (!synchronize(block, "before reading inputs")) host_read_ok_ = false;
  emit(block);
  stats(block, true);
  emit(block);
  if (level_ >= 10) {
    dump_before(block);
    emit(block);
  }
}

void CallRecord::find_device() {
  for (const auto& d : descs_) {
    if (d && d->on_cuda()) {
      device_tensors_ = true;
      ordinal_ = d->device.device_id;
      return;
    }
  }
}

// Orders the host's reads after the stream's work. Returns false (and says why) when the host
// must not or cannot read device tensors now.
bool CallRecord::synchronize(std::string& block, const char* when) {
  if (!device_tensors_) return true;  // host tensors only: nothing to wait for
  try {
    const cuda::Driver& drv = cuda::driver();
    cuda::ScopedDevice scope(ordinal_);
    CUstream s = static_cast<CUstream>(stream_);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = drv.cuStreamIsCapturing(s, &cs);
    if (r != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      capturing_ = true;
      const char* name = nullptr;
      if (r != CUDA_SUCCESS) drv.cuGetErrorName(r, &name);
      line(block, fmt::format("  sync: stream {} {}: not synchronized; statistics and dump skipped",
                              hex_ptr(stream_),
                              r == CUDA_SUCCESS
                                  ? "is capturing a CUDA graph"
                                  : fmt::format("capture state unknown ({})", name ? name : "?")));
      return false;
    }
    KJIT_CU_CHECK(drv.cuStreamSynchronize(s));
    line(block, fmt::format("  sync: stream {} synchronized {}", hex_ptr(stream_), when));
    return true;
  } catch (const std::exception& e) {
    line(block, fmt::format("  sync: failed {}: {}", when, e.what()));
    return false;
  }
}

void CallRecord::stats(std::string& block, bool before) {
  const auto& args = log_.args();
  for (size_t i = 0; i < args.size(); ++i) {
    const CallArg& a = args[i];
    if (!wants_data(a.kind, before)) continue;
    const std::string head = fmt::format("  stats {} {}: ", before ? "before" : "after", a.name);
    if (capturing_) continue;  // said once in the sync line
    const auto& d = descs_[i];
    if (!d) {
      line(block, head + "unavailable (" + desc_errors_[i] + ")");
      continue;
    }
    auto dt = safetensors_dtype(d->dtype);
    if (!dt) {
      line(block, head + "unavailable (dtype " + dtype_label(d->dtype) + ")");
      continue;
    }
    if (d->on_cuda() && !host_read_ok_) {
      line(block, head + "unavailable (see sync)");
      continue;
    }
    std::string bytes, why;
    const uint64_t max_elems = std::max<uint64_t>(1, kStatsMaxBytes / d->elem_bytes);
    if (!read_tensor(*d, max_elems, bytes, &why)) {
      line(block, head + "unavailable (" + why + ")");
      continue;
    }
    line(block, head + stats_text(*dt, bytes, d->numel));
  }
}

json CallRecord::args_json() const {
  json args = json::array();
  const auto& list = log_.args();
  for (size_t i = 0; i < list.size(); ++i) {
    const CallArg& a = list[i];
    json j;
    j["name"] = a.name;
    j["kind"] = kind_name(a.kind);
    if (a.kind == ArgKind::kScalar) {
      j["type"] = scalar_type_name(a.scalar_type);
      if (a.scalar_type == ScalarType::kF32) {
        const float f = static_cast<float>(a.f);
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        j["value"] = std::isfinite(f) ? json(f) : json(nullptr);
        j["bits"] = fmt::format("{:#010x}", bits);
      } else if (a.scalar_type == ScalarType::kF64) {
        uint64_t bits;
        std::memcpy(&bits, &a.f, sizeof bits);
        j["value"] = std::isfinite(a.f) ? json(a.f) : json(nullptr);
        j["bits"] = fmt::format("{:#018x}", bits);
      } else {
        j["value"] = a.i;
      }
    } else if (a.kind == ArgKind::kStream) {
      j["value"] = hex_ptr(a.stream);
    } else if (a.tensor == nullptr) {
      j["null"] = true;
    } else if (!descs_[i]) {
      j["invalid"] = desc_errors_[i];
    } else {
      const TensorDesc& d = *descs_[i];
      j["dtype"] = dtype_label(d.dtype);
      auto sdt = safetensors_dtype(d.dtype);
      j["safetensors_dtype"] = sdt ? json(st::dtype_name(*sdt)) : json(nullptr);
      j["dl_dtype"] = {{"code", d.dtype.code}, {"bits", d.dtype.bits}, {"lanes", d.dtype.lanes}};
      j["shape"] = d.shape;
      j["strides"] = d.strides;
      j["strides_given"] = d.strides_given;
      j["byte_offset"] = d.byte_offset;
      j["device"] = {{"type", static_cast<int>(d.device.device_type)},
                     {"id", d.device.device_id},
                     {"label", device_label(d.device)}};
      j["ptr"] = hex_ptr(d.data);
      j["align"] = address_alignment(d.address());
      // The same view passed twice (in-place forms): replay passes one buffer for both.
      for (size_t k = 0; k < i; ++k) {
        const auto& o = descs_[k];
        if (o && o->address() == d.address() && o->shape == d.shape && o->strides == d.strides &&
            o->dtype.code == d.dtype.code && o->dtype.bits == d.dtype.bits &&
            o->dtype.lanes == d.dtype.lanes) {
          j["alias_of"] = list[k].name;
          break;
        }
      }
      if (data_notes_.contains(a.name)) j["data"] = data_notes_[a.name];
    }
    args.push_back(std::move(j));
  }
  return args;
}

void CallRecord::write_call_json(const char* status, const std::string& message) {
  json j;
  j["format"] = "kjit-call-dump";
  j["format_version"] = 1;
  j["api"] = api_;
  j["call"] = id_;
  j["pid"] = static_cast<long>(::getpid());
  j["time"] = time_;
  j["kjit_version"] = jit::kjit_version();
  j["loglevel"] = level_;
  j["args"] = args_json();
  json kernels = json::array();
  for (const auto& k : kernels_) {
    kernels.push_back({{"uri", k.uri}, {"arch", k.arch}, {"device", k.device}});
  }
  j["kernels"] = std::move(kernels);
  try {
    const jit::Settings& s = jit::JitCore::global().settings();
    j["jit"] = {{"disable_jit", s.disable_jit},
                {"disk_cache", s.disk_cache},
                {"debug", s.debug},
                {"lineinfo", s.lineinfo},
                {"use_pch", s.use_pch},
                {"cache_dir", s.cache_dir.string()},
                {"kernel_dir", util::env_get("KJIT_KERNEL_DIR").value_or("")}};
  } catch (const std::exception& e) {
    j["jit"] = {{"error", e.what()}};
  }
  if (device_tensors_) {
    try {
      const cuda::DeviceInfo& info = cuda::device_info(ordinal_);
      j["device"] = {{"ordinal", ordinal_},
                     {"name", info.name},
                     {"cc", fmt::format("{}.{}", info.major, info.minor)},
                     {"driver", cuda::driver().version}};
    } catch (const std::exception& e) {
      j["device"] = {{"ordinal", ordinal_}, {"error", e.what()}};
    }
  }
  j["status"] = status;
  j["message"] = message;
  util::write_file_atomic(dump_dir_ / "call.json", j.dump(2) + "\n");
}

void CallRecord::write_tensors(bool before, const char* file) {
  const auto& args = log_.args();
  std::vector<std::string> buffers;
  buffers.reserve(args.size());
  std::vector<st::TensorView> views;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!wants_data(args[i].kind, before) || args[i].tensor == nullptr) continue;
    const auto& d = descs_[i];
    auto dt = d ? safetensors_dtype(d->dtype) : std::nullopt;
    std::string err;
    if (!d) {
      err = desc_errors_[i];
    } else if (!dt) {
      err = "dtype " + dtype_label(d->dtype) + " has no safetensors form";
    } else if (d->on_cuda() && !host_read_ok_) {
      err = "device memory not readable (see sync)";
    } else {
      buffers.emplace_back();
      if (read_tensor(*d, d->numel, buffers.back(), &err)) {
        views.push_back({args[i].name, *dt, d->shape, buffers.back().data()});
        written_ += buffers.back().size();
        err.clear();
      } else {
        buffers.pop_back();
      }
    }
    const std::string where = err.empty() ? std::string(file) : "missing: " + err;
    // An in-place argument keeps its note from before the call and adds this one.
    json& note = data_notes_[args[i].name];
    note = !before && args[i].kind == ArgKind::kInOut && note.is_string()
               ? json(note.get<std::string>() + ", " + where)
               : json(where);
  }
  st::write_file(dump_dir_ / file, views,
                 {{"kjit_api", api_},
                  {"kjit_call", std::to_string(id_)},
                  {"kjit_version", jit::kjit_version()}});
}

void CallRecord::dump_before(std::string& block) {
  if (capturing_) {
    line(block, "  dump: skipped (stream is capturing)");
    return;
  }
  const auto& args = log_.args();
  uint64_t bytes = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& d = descs_[i];
    if (!d || !safetensors_dtype(d->dtype)) continue;
    const uint64_t n = d->numel * d->elem_bytes;
    if (wants_data(args[i].kind, true)) bytes += n;
    if (wants_data(args[i].kind, false)) bytes += n;
  }
  std::string why;
  switch (rt_->budget.reserve(bytes, &why)) {
    case DumpBudget::Result::kStopped: return;
    case DumpBudget::Result::kStoppedNow:
      line(block, "  dump: stopped: " + why + "; no later call is dumped");
      return;
    case DumpBudget::Result::kGranted: break;
  }
  reserved_ = bytes;
  dumping_ = true;
  try {
    fs::path root = rt_->s.dump_dir.empty() ? jit::JitCore::global().settings().cache_dir / "dumps"
                                            : fs::path(rt_->s.dump_dir);
    dump_dir_ = root / dump_folder_name(api_, id_, static_cast<long>(::getpid()),
                                        std::chrono::system_clock::now());
    util::make_dirs(dump_dir_);
    // The inputs and the call go to disk before the launch: a call that takes the process down
    // can still be replayed.
    write_tensors(true, "inputs.safetensors");
    write_call_json("pending", "");
    line(block, "  dump: " + dump_dir_.string());
  } catch (const std::exception& e) {
    line(block, fmt::format("  dump: failed: {}", e.what()));
    dumping_ = false;
    rt_->budget.refund(reserved_ - written_);
  }
}

void CallRecord::dump_after(kjit_status status, std::string& block) {
  try {
    if (status == KJIT_SUCCESS) write_tensors(false, "outputs.safetensors");
    write_call_json(kjit_status_string(status), status == KJIT_SUCCESS ? "" : last_error_cstr());
  } catch (const std::exception& e) {
    line(block, fmt::format("  dump: failed after the call: {}", e.what()));
  }
  rt_->budget.refund(reserved_ > written_ ? reserved_ - written_ : 0);
}

void CallRecord::on_kernel(const jit::LoadedKernel& k) noexcept {
  try {
    kernels_.push_back({k.uri, k.target.sm(), k.device});
    if (level_ >= 3) {
      std::string block;
      line(block, fmt::format("  kernel: {} arch={} device={}", k.uri, k.target.sm(), k.device));
      emit(block);
    }
  } catch (...) {
  }
}

void CallRecord::after(kjit_status status) {
  std::string block;
  if (status != KJIT_SUCCESS) {
    line(block, fmt::format("-> {}: {}", kjit_status_string(status), last_error_cstr()));
  } else if (level_ >= 3) {
    line(block, fmt::format("-> {}", kjit_status_string(status)));
  }
  emit(block);
  if (level_ < 5) return;
  if (status == KJIT_SUCCESS && !capturing_) {
    // A fault of this call's kernel shows up here, named, rather than in a later call.
    host_read_ok_ = synchronize(block, "after the call");
    emit(block);
    stats(block, false);
    emit(block);
  }
  if (dumping_) {
    dump_after(status, block);
    emit(block);
  }
}

}  // namespace

void reload_log_settings() {
  auto rt = make_runtime();
  std::lock_guard<std::mutex> lock(g_mu);
  g_runtime = std::move(rt);
  log_detail::g_level.store(g_runtime->s.level, std::memory_order_relaxed);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

void set_log_level_override(int level) {
  g_level_override.store(level < 0 ? -1 : level);
  reload_log_settings();
}

LogSettings current_log_settings() {
  return runtime()->s;
}

namespace log_detail {

int site_level(const char* api, std::atomic<uint64_t>& site) noexcept {
  try {
    const uint64_t gen = g_generation.load(std::memory_order_acquire);
    if (g_level.load(std::memory_order_relaxed) < 0) runtime();
    const uint64_t cached = site.load(std::memory_order_relaxed);
    if ((cached >> 4) == gen) return static_cast<int>(cached & 15);
    std::shared_ptr<Runtime> rt = runtime();
    const int level = api_selected(rt->s, api) ? rt->s.level : 0;
    site.store((gen << 4) | static_cast<uint64_t>(level), std::memory_order_relaxed);
    return level;
  } catch (...) {
    return 0;
  }
}

kjit_status logged_call(const char* api, int level, FnRef<void(CallLog&)> describe,
                        FnRef<kjit_status()> run) noexcept {
  std::unique_ptr<CallRecord> rec;
  try {
    rec = std::make_unique<CallRecord>(api, level, runtime());
    rec->before(describe);
  } catch (...) {
    // Logging must never change the call; a record that could not start is dropped.
  }
  if (!rec) return run();
  kjit_status status;
  {
    jit::ScopedKernelObserver observe(rec.get());
    status = run();
  }
  try {
    rec->after(status);
  } catch (...) {
  }
  return status;
}

}  // namespace log_detail

}  // namespace kjit::api
