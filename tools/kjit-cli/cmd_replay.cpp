// kjit-cli replay DIR: re-runs a call dumped at KJIT_LOGLEVEL=10 (docs/logging.md) on this GPU and
// compares what it writes with the dumped outputs.
//
// Reproduced: the API, every scalar and enum, an options struct (from the fields the log recorded
// as scalars: api::log_options), each tensor's dtype, shape and strides, the start address's
// alignment modulo 256 (so the same vector width is chosen), the exact aliasing of arguments that
// were the same view (in-place calls), and the contents of every input and in-place tensor. Not
// reproduced: partial overlaps between different arguments (each gets its own buffer), the bytes
// between a strided view's elements (zero), the stream (the legacy default stream is used), and
// the recorded device (tensors go to --device).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "api/entry.hpp"
#include "api/options.hpp"
#include "diag/dump.hpp"
#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "runtime/jit_core.hpp"
#include "kjit/kjit.h"
#include "support/gpu.hpp"
#include "util/error.hpp"
#include "diag/safetensors.hpp"

namespace kjit::cli {
namespace {

namespace fs = std::filesystem;
namespace st = util::safetensors;
using json = nlohmann::ordered_json;  // as every kjit-cli file (one unity-build alias)

// A dump that cannot be replayed (missing or inconsistent files): exit 1 with the reason.
class ReplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DeviceMemory {
 public:
  DeviceMemory(int device, size_t bytes) : device_(device) {
    cuda::ScopedDevice scope(device_);
    KJIT_CU_CHECK(cuda::driver().cuMemAlloc(&ptr_, bytes == 0 ? 1 : bytes));
  }
  ~DeviceMemory() {
    cuda::ScopedDevice scope(device_);
    cuda::driver().cuMemFree(ptr_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  CUdeviceptr get() const { return ptr_; }

 private:
  int device_;
  CUdeviceptr ptr_ = 0;
};

// One recorded tensor argument, placed on the device.
struct Arg {
  std::string name;
  std::string kind;  // in | out | inout | scalar | stream
  json rec;
  bool is_null = false;
  api::TensorDesc desc;  // shape, strides, dtype as recorded
  std::shared_ptr<DeviceMemory> mem;
  uintptr_t base = 0;  // device address of element 0
  std::vector<int64_t> shape, strides;
  DLTensor dl{};
};

// The arguments by name, as the table below asks for them.
class Call {
 public:
  std::map<std::string, Arg>& args() { return args_; }
  // Names in the recorded (declaration) order: an alias always names an earlier argument.
  std::vector<std::string>& order() { return order_; }

  DLTensor* t(const char* name) {
    Arg& a = get(name);
    if (a.kind != "in" && a.kind != "out" && a.kind != "inout") {
      throw ReplayError(fmt::format("argument '{}' is a {}, not a tensor", name, a.kind));
    }
    return a.is_null ? nullptr : &a.dl;
  }
  float f32(const char* name) {
    const json& r = scalar(name);
    if (r.contains("bits")) {
      uint32_t bits =
          static_cast<uint32_t>(std::stoul(r.at("bits").get<std::string>(), nullptr, 16));
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    return r.at("value").get<float>();
  }
  double f64(const char* name) {
    const json& r = scalar(name);
    if (r.contains("bits")) {
      uint64_t bits = std::stoull(r.at("bits").get<std::string>(), nullptr, 16);
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return d;
    }
    return r.at("value").get<double>();
  }
  int i32(const char* name) { return scalar(name).at("value").get<int>(); }
  int64_t i64(const char* name) { return scalar(name).at("value").get<int64_t>(); }
  void* stream() { return nullptr; }
  // The options struct the call used, from its "options.<field>" scalars (api::log_options): the
  // logged values over the defaults, or the logged struct_size alone when that was unreadable.
#define KJIT_REPLAY_OPTION_FIELD(f) \
  if (args_.count("options." #f)) read_field("options." #f, &o.f);
  const kjit_sampling_options* sampling_options() {
    auto& o = options_init(&sampling_options_, &kjit_sampling_options_init);
    KJIT_SAMPLING_OPTION_FIELDS(KJIT_REPLAY_OPTION_FIELD)
    return &o;
  }
  const kjit_gemm_options* gemm_options() {
    auto& o = options_init(&gemm_options_, &kjit_gemm_options_init);
    KJIT_GEMM_OPTION_FIELDS(KJIT_REPLAY_OPTION_FIELD)
    return &o;
  }
  const kjit_moe_route_options* moe_route_options() {
    auto& o = options_init(&moe_route_options_, &kjit_moe_route_options_init);
    KJIT_MOE_ROUTE_OPTION_FIELDS(KJIT_REPLAY_OPTION_FIELD)
    return &o;
  }
#undef KJIT_REPLAY_OPTION_FIELD
  // kjit_moe_forward's: the outer struct_size as above, the route's from "options.route.<field>".
  const kjit_moe_forward_options* moe_forward_options() {
    auto& o = options_init(&moe_forward_options_, &kjit_moe_forward_options_init);
    if (args_.count("options.route.struct_size")) {
      o.route.struct_size = static_cast<size_t>(i64("options.route.struct_size"));
    }
#define KJIT_REPLAY_ROUTE_FIELD(f) \
  if (args_.count("options.route." #f)) read_field("options.route." #f, &o.route.f);
    KJIT_MOE_ROUTE_OPTION_FIELDS(KJIT_REPLAY_ROUTE_FIELD)
#undef KJIT_REPLAY_ROUTE_FIELD
    return &o;
  }

 private:
  Arg& get(const char* name) {
    auto it = args_.find(name);
    if (it == args_.end()) throw ReplayError(fmt::format("call.json has no argument '{}'", name));
    return it->second;
  }
  const json& scalar(const char* name) {
    Arg& a = get(name);
    if (a.kind != "scalar") throw ReplayError(fmt::format("argument '{}' is not a scalar", name));
    return a.rec;
  }
  void read_field(const char* name, int* v) {
    *v = i32(name);
  }
  void read_field(const char* name, float* v) {
    *v = f32(name);
  }
  // The defaults, and the logged struct_size when the call's was too small to read.
  template <typename T>
  T& options_init(T* o, void (*init)(T*)) {
    init(o);
    if (args_.count("options.struct_size")) {
      o->struct_size = static_cast<size_t>(i64("options.struct_size"));
    }
    return *o;
  }
  std::map<std::string, Arg> args_;
  std::vector<std::string> order_;
  kjit_sampling_options sampling_options_{};
  kjit_gemm_options gemm_options_{};
  kjit_moe_route_options moe_route_options_{};
  kjit_moe_forward_options moe_forward_options_{};
};

// The recorded argument `a` as the entry point's parameter type P.
template <typename P>
P recorded(Call& c, const api::RowArg& a) {
  const char* n = a.name.c_str();
  if constexpr (std::is_same_v<P, const DLTensor*> || std::is_same_v<P, DLTensor*>) {
    return c.t(n);
  } else if constexpr (std::is_same_v<P, float>) {
    return c.f32(n);
  } else if constexpr (std::is_same_v<P, double>) {
    return c.f64(n);
  } else if constexpr (std::is_same_v<P, int>) {
    return c.i32(n);
  } else if constexpr (std::is_same_v<P, int64_t>) {
    return c.i64(n);
  } else if constexpr (std::is_enum_v<P>) {
    return static_cast<P>(c.i32(n));
  } else if constexpr (std::is_same_v<P, const kjit_sampling_options*>) {
    return c.sampling_options();
  } else if constexpr (std::is_same_v<P, const kjit_gemm_options*>) {
    return c.gemm_options();
  } else if constexpr (std::is_same_v<P, const kjit_moe_route_options*>) {
    return c.moe_route_options();
  } else if constexpr (std::is_same_v<P, const kjit_moe_forward_options*>) {
    return c.moe_forward_options();
  } else if constexpr (std::is_same_v<P, void*>) {
    return c.stream();
  } else {
    static_assert(std::is_pointer_v<P>, "a parameter type replay does not know");
    // A kjit object (a decode plan): built from host data that no dump holds.
    throw ReplayError(
        fmt::format("'{}' is a handle to a kjit object, which a dump does not hold", a.name));
  }
}

template <typename... P, size_t... I>
kjit_status call_back(kjit_status (*fn)(P...), Call& c, const std::vector<api::RowArg>& row,
                      std::index_sequence<I...>) {
  // Braced: the arguments are converted left to right, so the first bad one is reported.
  std::tuple<P...> args{recorded<P>(c, row[I])...};
  return std::apply(fn, args);
}

// Calls entry point Fn with the dump's arguments, by the names of its row (api/entry_points.hpp).
template <auto Fn>
kjit_status replay_entry(Call& c) {
  static const std::vector<api::RowArg> row = api::parse_row(api::EntryPoint<Fn>::arguments);
  return call_back(Fn, c, row,
                   std::make_index_sequence<api::count_words(api::EntryPoint<Fn>::arguments)>{});
}

using ReplayFn = kjit_status (*)(Call&);
struct Entry {
  const char* api;
  ReplayFn fn;
};

// Every entry point that takes tensors; kjit_batch_decode_run fails on its plan argument.
#define KJIT_REPLAY_ENTRY(fn, args) {#fn, &replay_entry<&fn>},
const Entry kTable[] = {KJIT_TENSOR_ENTRY_POINTS(KJIT_REPLAY_ENTRY)};
#undef KJIT_REPLAY_ENTRY

const Entry* find_entry(const std::string& api) {
  for (const auto& e : kTable) {
    if (api == e.api) return &e;
  }
  return nullptr;
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw ReplayError(fmt::format("cannot read {}", p.string()));
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw ReplayError(fmt::format("{} is not a JSON object", p.string()));
  }
  return j;
}

// The recorded tensor as a walkable description (shape, strides and dtype checked like a live one).
api::TensorDesc recorded_desc(const std::string& name, const json& r) {
  try {
    DLDataType dt{static_cast<uint8_t>(r.at("dl_dtype").at("code").get<int>()),
                  static_cast<uint8_t>(r.at("dl_dtype").at("bits").get<int>()),
                  static_cast<uint16_t>(r.at("dl_dtype").at("lanes").get<int>())};
    std::vector<int64_t> shape = r.at("shape").get<std::vector<int64_t>>();
    std::vector<int64_t> strides = r.at("strides").get<std::vector<int64_t>>();
    if (strides.size() != shape.size()) throw ReplayError("strides and shape differ in length");
    DLTensor t{};
    t.dtype = dt;
    t.ndim = static_cast<int>(shape.size());
    t.shape = shape.data();
    t.strides = strides.data();
    t.data = reinterpret_cast<void*>(uintptr_t{256});
    std::string why;
    auto d = api::describe_tensor(&t, &why);
    if (!d) throw ReplayError(why);
    d->strides_given = r.value("strides_given", true);
    return *d;
  } catch (const json::exception& e) {
    throw ReplayError(fmt::format("argument '{}': {}", name, e.what()));
  } catch (const ReplayError& e) {
    throw ReplayError(fmt::format("argument '{}': {}", name, e.what()));
  }
}

uint64_t parse_hex(const json& v) {
  return v.is_string() ? std::stoull(v.get<std::string>(), nullptr, 16) : 0;
}

// Places every tensor on `device`: its recorded layout, its recorded contents for inputs, 0xFF
// (NaN in every float format) for pure outputs, so elements the call fails to write show up.
void place(Call& call, const st::File& inputs, int device) {
  for (auto& [name, a] : call.args()) {
    if (a.kind != "in" && a.kind != "out" && a.kind != "inout") continue;
    if (a.rec.value("null", false)) {
      a.is_null = true;
      continue;
    }
    if (a.rec.contains("invalid")) {
      throw ReplayError(fmt::format("argument '{}' was malformed when recorded ({})", name,
                                    a.rec["invalid"].dump()));
    }
    a.desc = recorded_desc(name, a.rec);
    a.shape = a.desc.shape;
    a.strides = a.desc.strides;
  }
  for (const std::string& name : call.order()) {
    Arg& a = call.args()[name];
    if (a.is_null || (a.kind != "in" && a.kind != "out" && a.kind != "inout")) continue;
    const api::TensorDesc& d = a.desc;
    const size_t es = d.elem_bytes;
    std::string alias = a.rec.value("alias_of", "");
    if (!alias.empty() && call.args().count(alias) && call.args()[alias].mem) {
      Arg& o = call.args()[alias];
      a.mem = o.mem;
      a.base = o.base;
    } else {
      int64_t lo = 0, hi = 0;
      api::offset_range(d, &lo, &hi);
      const uint64_t addr =
          parse_hex(a.rec.value("ptr", json())) + a.rec.value("byte_offset", 0ull);
      const size_t misalign = static_cast<size_t>(addr % 256);
      const size_t span = d.numel == 0 ? 0 : static_cast<size_t>(hi - lo + 1) * es;
      a.mem = std::make_shared<DeviceMemory>(device, span + 256);
      a.base = static_cast<uintptr_t>(a.mem->get()) + misalign - static_cast<uintptr_t>(lo * es);
      std::string image(span, a.kind == "out" ? '\xFF' : '\0');
      if (a.kind != "out" && d.numel > 0) {
        const st::TensorInfo* ti = inputs.find(name);
        if (ti == nullptr) {
          throw ReplayError(fmt::format("inputs.safetensors has no tensor '{}' ({})", name,
                                        a.rec.value("data", json("not recorded")).dump()));
        }
        auto sdt = api::safetensors_dtype(d.dtype);
        if (!sdt || *sdt != ti->dtype || ti->shape != d.shape) {
          throw ReplayError(
              fmt::format("inputs.safetensors tensor '{}' is {}{} but call.json records {}", name,
                          st::dtype_name(ti->dtype), fmt::format("{}", fmt::join(ti->shape, ",")),
                          api::dtype_label(d.dtype)));
        }
        std::string_view src = inputs.data(*ti);
        size_t pos = 0;
        api::for_each_run(d, d.numel, [&](int64_t off, uint64_t c) {
          std::memcpy(image.data() + (off - lo) * es, src.data() + pos, c * es);
          pos += c * es;
        });
      }
      if (span > 0) {
        cuda::ScopedDevice scope(device);
        KJIT_CU_CHECK(cuda::driver().cuMemcpyHtoD(
            static_cast<CUdeviceptr>(a.base + static_cast<uintptr_t>(lo * es)), image.data(),
            span));
      }
    }
    a.dl.data = reinterpret_cast<void*>(a.base);
    a.dl.device = {kDLCUDA, device};
    a.dl.ndim = static_cast<int>(a.shape.size());
    a.dl.dtype = d.dtype;
    a.dl.shape = a.shape.data();
    a.dl.strides = d.strides_given ? a.strides.data() : nullptr;
    a.dl.byte_offset = 0;
  }
}

// The logical elements of a placed tensor, packed.
std::string download(const Arg& a, int device) {
  api::TensorDesc d = a.desc;
  d.data = reinterpret_cast<void*>(a.base);
  d.byte_offset = 0;
  d.device = {kDLCUDA, device};
  std::string out, why;
  if (!api::read_tensor(d, d.numel, out, &why)) {
    throw Error(KJIT_ERROR_CUDA, fmt::format("reading '{}' back: {}", a.name, why));
  }
  return out;
}

// Unit roundoff-sized tolerances: a replay on the same arch is normally bit-exact; these leave
// room for another GPU's rounding without hiding a real difference.
double default_tol(st::Dtype d) {
  switch (d) {
    case st::Dtype::kF8E4M3: return 0x1p-3;
    case st::Dtype::kF8E5M2: return 0x1p-2;
    case st::Dtype::kBF16: return 0x1p-7;
    case st::Dtype::kF16: return 0x1p-10;
    case st::Dtype::kF32: return 0x1p-20;
    case st::Dtype::kF64: return 0x1p-40;
    default: return 0.0;  // integers and bool: exact
  }
}

struct Compared {
  uint64_t n = 0, mismatches = 0;
  double max_abs = 0, max_rel = 0;
  bool identical = false;
};

Compared compare(st::Dtype dt, std::string_view got, std::string_view want, double atol,
                 double rtol) {
  Compared c;
  const size_t es = st::dtype_size(dt);
  c.n = want.size() / es;
  c.identical = got == want;
  for (uint64_t i = 0; i < c.n; ++i) {
    const double a = api::element_value(dt, got.data() + i * es);
    const double b = api::element_value(dt, want.data() + i * es);
    if (std::isnan(a) || std::isnan(b)) {
      if (!(std::isnan(a) && std::isnan(b))) ++c.mismatches;
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) ++c.mismatches;
      continue;
    }
    const double diff = std::fabs(a - b);
    c.max_abs = std::max(c.max_abs, diff);
    if (diff > 0) c.max_rel = std::max(c.max_rel, diff / std::max(std::fabs(b), 1e-30));
    if (diff > atol + rtol * std::fabs(b)) ++c.mismatches;
  }
  return c;
}

struct Options {
  std::string dir;
  int device = 0;
  double atol = -1, rtol = -1;
};

// A replayed kernel's URI and arch, to set beside the recorded ones.
class KernelNames final : public jit::KernelObserver {
 public:
  void on_kernel(const jit::LoadedKernel& k) noexcept override {
    try {
      names.push_back(k.uri + " " + k.target.sm());
    } catch (...) {
    }
  }
  std::vector<std::string> names;
};

int run_replay(const Options& o) {
  const fs::path dir(o.dir);
  const json cj = read_json(dir / "call.json");
  if (cj.value("format", "") != "kjit-call-dump") {
    throw ReplayError(fmt::format("{} is not a kjit call dump", (dir / "call.json").string()));
  }
  const std::string api = cj.value("api", "");
  const Entry* entry = find_entry(api);
  if (entry == nullptr) {
    std::string known;
    for (const auto& e : kTable) known += std::string(known.empty() ? "" : ", ") + e.api;
    throw ReplayError(fmt::format("no replay for '{}' (known: {})", api, known));
  }
  const std::string recorded_status = cj.value("status", "");
  const st::File inputs = st::File::read(dir / "inputs.safetensors");
  std::optional<st::File> outputs;
  if (fs::exists(dir / "outputs.safetensors"))
    outputs = st::File::read(dir / "outputs.safetensors");

  Call call;
  if (!cj.contains("args") || !cj["args"].is_array()) throw ReplayError("call.json has no args");
  for (const json& r : cj["args"]) {
    Arg a;
    a.name = r.value("name", "");
    a.kind = r.value("kind", "");
    a.rec = r;
    if (a.name.empty() || call.args().count(a.name)) {
      throw ReplayError(
          fmt::format("call.json has a missing or repeated argument name '{}'", a.name));
    }
    call.order().push_back(a.name);
    call.args().emplace(a.name, std::move(a));
  }

  std::string recorded_device = "?";
  if (cj.contains("device") && cj["device"].is_object()) {
    recorded_device =
        fmt::format("{} ({})", cj["device"].value("name", "?"), cj["device"].value("cc", "?"));
  }
  fmt::print("replay {} (call {}, kjit {}, recorded on {}, status {})\n", api, cj.value("call", 0),
             cj.value("kjit_version", "?"), recorded_device, recorded_status);

  std::string why;
  if (!test::gpu_available(&why)) {
    throw Error(KJIT_ERROR_NO_DEVICE, "replay needs a GPU: " + why);
  }
  cuda::make_current(o.device);
  place(call, inputs, o.device);

  KernelNames replayed;
  kjit_status status;
  {
    jit::ScopedKernelObserver observe(&replayed);
    status = entry->fn(call);
  }
  const std::string message = status == KJIT_SUCCESS ? "" : kjit_last_error();
  {
    cuda::ScopedDevice scope(o.device);
    CUresult r = cuda::driver().cuCtxSynchronize();
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      cuda::driver().cuGetErrorName(r, &name);
      fmt::print("  the replayed call faulted: cuCtxSynchronize returned {}\n", name ? name : "?");
      fmt::print("result: the call fails on this GPU (recorded status {})\n", recorded_status);
      return kExitFailure;
    }
  }
  if (cj.contains("kernels") && cj["kernels"].is_array()) {
    for (const json& k : cj["kernels"]) {
      fmt::print("  kernel recorded: {} {}\n", k.value("uri", "?"), k.value("arch", "?"));
    }
  }
  for (const auto& k : replayed.names) fmt::print("  kernel replayed: {}\n", k);
  fmt::print("  status: {}{}{} (recorded {})\n", kjit_status_string(status),
             message.empty() ? "" : ": ", message, recorded_status);

  bool ok = true;
  if (recorded_status == "pending") {
    fmt::print(
        "  the recorded call never finished (the process died during it?): nothing to "
        "compare\n");
    ok = status == KJIT_SUCCESS;
  } else if (recorded_status != kjit_status_string(status)) {
    ok = false;
  }
  if (outputs && status == KJIT_SUCCESS) {
    for (const st::TensorInfo& ti : outputs->tensors()) {
      auto it = call.args().find(ti.name);
      if (it == call.args().end() || it->second.is_null || !it->second.mem) {
        fmt::print("  {}: in outputs.safetensors but not a tensor argument\n", ti.name);
        ok = false;
        continue;
      }
      const Arg& a = it->second;
      if (ti.shape != a.desc.shape || api::safetensors_dtype(a.desc.dtype) != ti.dtype) {
        fmt::print("  {}: outputs.safetensors shape or dtype differs from call.json\n", ti.name);
        ok = false;
        continue;
      }
      const double atol = o.atol >= 0 ? o.atol : default_tol(ti.dtype);
      const double rtol = o.rtol >= 0 ? o.rtol : default_tol(ti.dtype);
      Compared c = compare(ti.dtype, download(a, o.device), outputs->data(ti), atol, rtol);
      fmt::print(
          "  {} {}: {}[{}] max_abs={:.6g} max_rel={:.6g} mismatches={}/{} (atol={:g} "
          "rtol={:g}){}\n",
          a.kind, ti.name, api::dtype_label(a.desc.dtype), fmt::join(ti.shape, ","), c.max_abs,
          c.max_rel, c.mismatches, c.n, atol, rtol, c.identical ? " identical" : "");
      if (c.mismatches) ok = false;
    }
  } else if (!outputs && recorded_status == "KJIT_SUCCESS") {
    fmt::print("  outputs.safetensors is missing: nothing to compare\n");
    ok = false;
  }
  fmt::print("result: {}\n", ok ? "reproduced" : "differs");
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

void add_replay_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "replay",
      "Re-run a call dumped with KJIT_LOGLEVEL=10 and compare it with the dumped outputs");
  auto o = std::make_shared<Options>();
  cmd->add_option("dir", o->dir, "the call's dump folder (has call.json, inputs.safetensors)")
      ->required();
  cmd->add_option("--device", o->device, "CUDA device ordinal to run on")->default_str("0");
  cmd->add_option("--atol", o->atol,
                  "absolute tolerance (default: the dtype's unit roundoff; integers exact)");
  cmd->add_option("--rtol", o->rtol, "relative tolerance (default as --atol)");
  cmd->footer(
      "Exit codes: 0 reproduced (same status, outputs within tolerance), 1 differs or the dump "
      "is unusable, 2 usage, 3 no GPU");
  cmd->callback([o, &exit_code] {
    try {
      exit_code = run_replay(*o);
    } catch (const ReplayError& e) {
      fmt::print(stderr, "kjit-cli replay: {}\n", e.what());
      exit_code = kExitFailure;
    }
  });
}

}  // namespace kjit::cli
