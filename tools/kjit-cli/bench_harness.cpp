// See bench_harness.hpp.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "jit/arch.hpp"
#include "runtime/jit_core.hpp"
#include "kjit/kjit.h"
#include "ops/pdl.hpp"
#include "reference/half.hpp"
#include "bench_timer.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {

void check_gpu() {
  std::string why;
  if (!test::gpu_available(&why)) throw Error(KJIT_ERROR_NO_DEVICE, why);
  cuda::make_current(0);  // events and copies below use the driver API directly
}

double first_call_ms(const BenchCase& c) {
  auto t0 = std::chrono::steady_clock::now();
  c.launch(nullptr);
  test::device_synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

namespace {
struct LastKernel : jit::KernelObserver {
  std::string uri;
  void on_kernel(const jit::LoadedKernel& k) noexcept override {
    try {
      uri = k.uri;
    } catch (...) {  // a URI the allocator cannot copy: the row keeps its own name
    }
  }
};
}  // namespace

double first_call_ms_naming_kernel(BenchCase& c) {
  LastKernel last;
  double ms = 0.0;
  {
    jit::ScopedKernelObserver scope(&last);
    ms = first_call_ms(c);
  }
  if (!last.uri.empty()) c.uri = last.uri;
  return ms;
}

namespace {

using ojson = nlohmann::ordered_json;

// The elementwise ops (and the empty kernel, their launch baseline) launch as programmatic
// dependents on sm_90 unless KJIT_PDL=0 (src/ops/pdl.hpp): their rows say so in the label and as
// shape.launch = "pdl". Under PDL a kernel may start while the one before it (an L2 flush, the
// previous sample) still runs and wait inside for it, so only back-to-back timers
// (events-batched, graph) mean anything there: the other timers time these ops as plain launches
// (PlainLaunchUnlessBatched).
bool elementwise_op(const std::string& op) {
  static const char* const kElementwise[] = {
      "empty", "rmsnorm",         "fused_add_rmsnorm", "layernorm",   "act_and_mul",
      "rope",  "append_paged_kv", "embedding",         "rope_append", "qk_norm_rope"};
  return std::find(std::begin(kElementwise), std::end(kElementwise), op) != std::end(kElementwise);
}

// What bench_elementwise_launch() returns: the process's launch mode, or plain launches while a
// report times an elementwise op with a timer that is not a back-to-back one.
ops::ElementwiseLaunch g_elementwise_launch = ops::elementwise_launch_from_env();

// For the scope of one report: plain launches of an elementwise op unless the timer is a
// back-to-back one, then the process's launch mode again.
class PlainLaunchUnlessBatched {
 public:
  PlainLaunchUnlessBatched(const std::string& op, const BenchOptions& opts)
      : active_(elementwise_op(op) && !back_to_back(opts) && ops::elementwise_pdl(0)) {
    if (active_) g_elementwise_launch.pdl = false;
  }
  ~PlainLaunchUnlessBatched() {
    if (active_) g_elementwise_launch = ops::elementwise_launch_from_env();
  }
  PlainLaunchUnlessBatched(const PlainLaunchUnlessBatched&) = delete;
  PlainLaunchUnlessBatched& operator=(const PlainLaunchUnlessBatched&) = delete;

 private:
  bool active_;
};

BenchCase with_launch_mode(const BenchCase& c) {
  BenchCase out = c;
  if (elementwise_op(c.op) && ops::elementwise_pdl(0, g_elementwise_launch)) {
    out.label += " pdl";
    out.shape["launch"] = "pdl";
  }
  return out;
}

// The fields every row of a case shares, in row_fields() order up to the timing.
ojson row_head(const BenchCase& c, const std::string& backend, const BenchOptions& opts) {
  const cuda::DeviceInfo& dev = cuda::device_info(0);
  const int v = cuda::driver().version;
  // Every field first, in CSV order, null until known: a row that is not timed still has them.
  ojson row;
  for (const auto& f : row_fields()) row[f.substr(0, f.find('.'))] = nullptr;
  row["op"] = c.op;
  row["uri"] = backend == "kjit" ? ojson(c.uri) : ojson(nullptr);  // copy / reference: not ours
  row["backend"] = backend;
  row["shape"] = c.shape;
  row["dtype"] = c.dtype;
  row["arch"] = fmt::format("sm_{}{}", dev.major, dev.minor);
  row["gpu"] = dev.name;
  // The kernel driver's own version when NVML tells it, then the CUDA version it implements.
  const std::string api = fmt::format("CUDA {}.{}", v / 1000, v % 1000 / 10);
  const std::string kernel_driver = driver_version();
  row["driver"] = kernel_driver.empty() ? api : kernel_driver + " (" + api + ")";
  row["l2"] = opts.cold() ? "cold" : "hot";
  row["flush"] = flush_name(opts.flush);
  row["warmup"] = opts.warmup;
  return row;
}

// Always the same keys, null where a figure does not apply, so every row has every field.
ojson check_json(const Check& chk, const BenchOptions& opts) {
  if (!opts.check) {
    return {{"pass", nullptr}, {"max_abs", nullptr}, {"max_rel", nullptr}, {"skipped", true}};
  }
  ojson j = {{"pass", chk.pass()}};
  if (chk.note.empty()) {
    j["max_abs"] = chk.max_abs;
    j["max_rel"] = chk.max_rel;
    j["bad"] = chk.bad;
  } else {
    j["max_abs"] = nullptr;
    j["max_rel"] = nullptr;
    j["note"] = chk.note;
  }
  return j;
}

// Fills the timing fields of `row` from `m`; `bytes` / `flops` give the rates.
void put_timing(ojson& row, const Measurement& m, double bytes, double flops,
                const BenchOptions& opts) {
  row["timer"] = m.timer;
  row["iters"] = m.stats.n;
  row["stop"] = stop_name(m.stop);
  row["median_us"] = m.stats.median;
  row["min_us"] = m.stats.min;
  row["max_us"] = m.stats.max;
  row["p10_us"] = m.stats.p10;
  row["p90_us"] = m.stats.p90;
  row["stddev_us"] = m.stats.stddev;
  row["gbps"] = m.stats.median > 0 ? bytes / (m.stats.median * 1e3) : 0.0;
  row["tflops"] = m.stats.median > 0 ? flops / (m.stats.median * 1e6) : 0.0;
  if (m.timer != opts.timer) row["timer_requested"] = opts.timer;
  if (!m.note.empty()) row["timer_note"] = m.note;
  if (m.batch > 1) row["batch"] = m.batch;
}

void put_tail(ojson& row, const Measurement* m, double first_ms, const BenchOptions& opts,
              const ojson& check) {
  row["check"] = check;
  if (m != nullptr) {
    if (m->throttled == Throttle::kUnknown) {
      row["throttled"] = "unknown";
    } else {
      row["throttled"] = m->throttled == Throttle::kYes;
    }
    row["sm_clock_min_mhz"] = m->sm_clock_min_mhz ? ojson(m->sm_clock_min_mhz) : ojson(nullptr);
    row["sm_clock_max_mhz"] = m->sm_clock_max_mhz ? ojson(m->sm_clock_max_mhz) : ojson(nullptr);
    if (m->throttled_samples > 0) row["throttled_samples"] = m->throttled_samples;
    if (!m->throttle_why.empty()) row["throttle_why"] = m->throttle_why;
  }
  row["first_call_ms"] = first_ms;
  row["workload"] = opts.workload.empty() ? ojson(nullptr) : ojson(opts.workload);
  if (!opts.suite.empty()) {
    row["suite"] = opts.suite;
    row["headline"] = opts.headline;
  }
  BenchOptions r = opts;
  if (r.op.empty()) r.op = row["op"].get<std::string>();
  row["repro"] = repro_command(r);
}

void write_row(const ojson& row, const BenchOptions& opts) {
  if (!opts.json_path.empty()) {
    std::ofstream f(opts.json_path, std::ios::app);
    f << row.dump() << "\n";
    if (!f) throw Error(KJIT_ERROR_INTERNAL, "cannot write " + opts.json_path);
  }
  if (!opts.csv_path.empty()) {
    std::error_code ec;
    const bool fresh = std::filesystem::file_size(opts.csv_path, ec) == 0 || ec;
    std::ofstream f(opts.csv_path, std::ios::app);
    if (fresh) f << csv_header() << "\n";
    f << csv_line(row) << "\n";
    if (!f) throw Error(KJIT_ERROR_INTERNAL, "cannot write " + opts.csv_path);
  }
}

std::string describe(const Measurement& m) {
  std::string s = fmt::format("{:.2f} us median (p10 {:.2f}, p90 {:.2f}, stddev {:.1f}%, n={}, {})",
                              m.stats.median, m.stats.p10, m.stats.p90,
                              100.0 * m.stats.rel_stddev(), m.stats.n, stop_name(m.stop));
  if (m.throttled == Throttle::kYes) {
    s += fmt::format(" THROTTLED in {} samples ({})", m.throttled_samples, m.throttle_why);
  }
  return s;
}

// report() under one timing: opts.timer and opts.flush.
int report_one(const BenchCase& in, const Check& chk, double first_ms, const BenchOptions& opts) {
  const PlainLaunchUnlessBatched plain(in.op, opts);
  const BenchCase c = with_launch_mode(in);
  if (opts.check && !chk.pass()) {
    ojson row = row_head(c, "kjit", opts);
    put_tail(row, nullptr, first_ms, opts, check_json(chk, opts));
    fmt::print("{}: CHECK FAILED ({} bad, max abs {:.3g}): not timed\n", c.label, chk.bad,
               chk.max_abs);
    write_row(row, opts);
    return kExitFailure;
  }
  const std::string check =
      !opts.check     ? "not checked (--no-check)"
      : !chk.compared ? "no check (" + chk.note + ")"
      : chk.note.empty()
          ? fmt::format("check pass (max abs {:.3g}, max rel {:.3g})", chk.max_abs, chk.max_rel)
          : "check pass (" + chk.note + ")";

  // Every backend first, then the copy: the rows of one case share the copy figure.
  std::vector<std::pair<std::string, Measurement>> timed;
  for (const auto& b : opts.backends) {
    if (b == "kjit") timed.emplace_back(b, measure(c.launch, opts));
    if (b == "reference") {
      if (!c.reference_launch) {
        throw UsageError("backend 'reference': " + c.op + " has no device reference kernel");
      }
      timed.emplace_back(b, measure(c.reference_launch, opts));
    }
  }
  std::optional<Measurement> copy;
  std::unique_ptr<test::DeviceBuffer> dst;
  if (c.copy_bytes > 0) {
    dst = std::make_unique<test::DeviceBuffer>(c.copy_bytes);
    copy = measure(
        [&](CUstream s) {
          KJIT_CU_CHECK(cuda::driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst->get()),
                                                         reinterpret_cast<CUdeviceptr>(c.copy_src),
                                                         c.copy_bytes, s));
        },
        opts);
  }
  const double copy_bytes = 2.0 * static_cast<double>(c.copy_bytes);
  const double copy_gbps =
      copy && copy->stats.median > 0 ? copy_bytes / (copy->stats.median * 1e3) : 0.0;

  for (const auto& [backend, m] : timed) {
    ojson row = row_head(c, backend, opts);
    put_timing(row, m, c.bytes, c.flops, opts);
    std::string vs_copy;
    if (copy_gbps > 0) {
      const double gbps = row["gbps"].get<double>();
      row["pct_of_copy"] = 100.0 * gbps / copy_gbps;
      row["copy_median_us"] = copy->stats.median;
      row["copy_gbps"] = copy_gbps;
      if (copy->timer != m.timer) row["copy_timer"] = copy->timer;
      vs_copy = fmt::format(", {:.0f} GB/s = {:.1f}% of copy ({:.0f} GB/s)", gbps,
                            100.0 * gbps / copy_gbps, copy_gbps);
    } else {
      row["pct_of_copy"] = nullptr;
      row["copy_median_us"] = nullptr;
    }
    put_tail(row, &m, first_ms, opts, check_json(chk, opts));
    fmt::print("{} [{}, {}]: {}{}; {}; first call {:.1f} ms\n", c.label, backend, m.timer,
               describe(m), vs_copy, check, first_ms);
    if (!m.note.empty()) fmt::print("  note: {}\n", m.note);
    write_row(row, opts);
  }
  if (std::find(opts.backends.begin(), opts.backends.end(), "copy") != opts.backends.end()) {
    ojson row = row_head(c, "copy", opts);
    if (copy) {
      put_timing(row, *copy, copy_bytes, 0.0, opts);
      row["pct_of_copy"] = 100.0;
      row["copy_median_us"] = copy->stats.median;
      put_tail(row, &*copy, first_ms, opts,
               {{"pass", true}, {"max_abs", nullptr}, {"max_rel", nullptr}, {"note", "baseline"}});
      fmt::print("{} [copy of {} bytes, {}]: {}, {:.0f} GB/s\n", c.label, c.copy_bytes, copy->timer,
                 describe(*copy), copy_gbps);
    } else {
      put_tail(row, nullptr, first_ms, opts,
               {{"pass", nullptr},
                {"max_abs", nullptr},
                {"max_rel", nullptr},
                {"note", "no copy baseline"}});
      fmt::print("{} [copy]: this op has no copy baseline\n", c.label);
    }
    write_row(row, opts);
  }
  return kExitOk;
}

}  // namespace

const ops::ElementwiseLaunch& bench_elementwise_launch() {
  return g_elementwise_launch;
}

int report(const BenchCase& c, const Check& chk, double first_ms, const BenchOptions& opts) {
  if (opts.timings.empty()) return report_one(c, chk, first_ms, opts);
  for (const Timing& t : opts.timings) {
    BenchOptions one = opts;
    one.timer = t.timer;
    one.flush = t.flush;
    one.timings.clear();
    // A failed check is one failed row, not one per timing.
    if (report_one(c, chk, first_ms, one) != kExitOk) return kExitFailure;
  }
  return kExitOk;
}

// Fills `n` elements of `dtype` at `dst` uniformly in [lo, hi). Expert weights reach billions
// of elements (DeepSeek-V3's gate_up: 7.5e9, minutes on one core), so chunks of 4M elements are
// filled over the host's cores, each from its own seed drawn from `rng`.
void fill_uniform(unsigned char* dst, size_t n, const std::string& dtype, std::mt19937_64& rng,
                  double lo, double hi) {
  constexpr size_t kChunk = size_t{1} << 22;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint64_t> seeds(chunks);
  for (uint64_t& s : seeds) s = rng();
  const auto fill_chunk = [&](size_t c) {
    std::mt19937_64 local(seeds[c]);
    std::uniform_real_distribution<double> dist(lo, hi);
    const size_t end = std::min(n, (c + 1) * kChunk);
    for (size_t i = c * kChunk; i < end; ++i) ref::store_elem(dst, i, dist(local), dtype);
  };
  const size_t workers =
      std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t c = next++; c < chunks; c = next++) fill_chunk(c);
  };
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// Fills `n` elements of a host image of `dtype` uniformly in [lo, hi) and returns their values.
std::vector<double> random_elems(std::vector<unsigned char>& host, size_t n,
                                 const std::string& dtype, std::mt19937_64& rng, double lo,
                                 double hi) {
  host.resize(n * ref::elem_size(dtype));
  fill_uniform(host.data(), n, dtype, rng, lo, hi);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = ref::load_elem(host.data(), i, dtype);
  return v;
}

size_t add_int32s(Packed& p, const std::vector<int32_t>& v) {
  const size_t at = p.add(v.size() * 4);
  if (!v.empty()) std::memcpy(p.host.data() + at, v.data(), v.size() * 4);
  return at;
}

// A "0" / "1" flag, "0" when absent.
bool back_to_back(const BenchOptions& opts) {
  return opts.timer == "events-batched" || opts.timer == "graph";
}

bool flag_arg(const ops::SetArgs& args, const std::string& name) {
  auto it = args.find(name);
  if (it == args.end() || it->second == "0") return false;
  if (it->second != "1") throw UsageError(name + " must be 0 or 1");
  return true;
}

namespace {

// The launch floor: an empty kernel, compiled through the JIT like any op and launched directly.
// With --set read=R --set write=W (bytes, multiples of 16, W <= R <= 2W) the floor of launching
// and moving an op's bytes instead: a kernel that waits like the ops, then reads R bytes and
// writes W (16-byte vectors, one output vector a thread: the XOR of input vectors i and i + W,
// both loads issued at once), so a decode-size row can be set beside the cheapest kernel that
// moves what it moves.
// pdl_enter: launched as the elementwise ops are (src/ops/pdl.hpp), so it stays their baseline.
constexpr const char* kEmptySource =
    "extern \"C\" __global__ void kjit_empty_kernel() { kjit::pdl_enter(); }\n";
constexpr const char* kMoveSource = R"(struct MoveParams {
  const uint4* src;
  uint4* dst;
  long long read_vecs, write_vecs;
};
extern "C" __global__ void __launch_bounds__(256) kjit_move_kernel(const MoveParams p) {
  kjit::pdl_enter();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.write_vecs) return;
  const long long j = i + p.write_vecs;
  uint4 acc = p.src[i];
  const uint4 v = j < p.read_vecs ? p.src[j] : make_uint4(0, 0, 0, 0);
  acc.x ^= v.x;
  acc.y ^= v.y;
  acc.z ^= v.z;
  acc.w ^= v.w;
  p.dst[i] = acc;
}
)";

struct MoveParams {
  const void* src;
  void* dst;
  long long read_vecs, write_vecs;
};

}  // namespace

std::pair<long long, long long> empty_move_bytes(const ops::SetArgs& args) {
  if (args.count("read") == 0 && args.count("write") == 0) return {0, 0};
  if (args.count("read") == 0 || args.count("write") == 0)
    throw UsageError("bench empty: --set read and --set write go together");
  long long read = 0, write = 0;
  try {
    read = ops::positive_int_arg(args, "read", 1LL << 34);
    write = ops::positive_int_arg(args, "write", 1LL << 34);
  } catch (const std::exception& e) {
    throw UsageError(std::string("bench empty: ") + e.what());
  }
  if (read % 16 != 0 || write % 16 != 0 || read < write || read > 2 * write) {
    throw UsageError(
        "bench empty: read and write must be multiples of 16 with write <= read <= 2 * write");
  }
  return {read, write};
}

namespace {

int bench_empty(const ops::SetArgs& args, const BenchOptions& opts) {
  const auto [read, write] = empty_move_bytes(args);
  const bool move = write > 0;
  check_gpu();
  jit::Spec spec;
  spec.op = "empty";
  if (move) spec.params.push_back({"move", "1"});
  spec.uri = jit::make_uri(spec.op, spec.params);
  spec.kernel_dirs = {"common"};
  spec.includes = {"common/prelude.cuh"};
  spec.config = move ? kMoveSource : kEmptySource;
  spec.entry_names = {move ? "kjit_move_kernel" : "kjit_empty_kernel"};
  spec.arch_families = {"sm_80+"};
  CUfunction fn = nullptr;
  cuda::LaunchConfig lc;
  lc.block_x = 32;

  // The move's buffers: random input, a poisoned output checked against the host's XOR.
  std::vector<uint32_t> in_h(static_cast<size_t>(read / 4));
  std::unique_ptr<test::DeviceBuffer> in, out;
  MoveParams mp{nullptr, nullptr, read / 16, write / 16};
  if (move) {
    std::mt19937_64 rng(20261203);
    for (auto& w : in_h) w = static_cast<uint32_t>(rng());
    in = std::make_unique<test::DeviceBuffer>(static_cast<size_t>(read));
    out = std::make_unique<test::DeviceBuffer>(static_cast<size_t>(write));
    in->upload(in_h.data(), static_cast<size_t>(read));
    out->fill(0xFF);
    mp.src = in->get();
    mp.dst = out->get();
    lc.block_x = 256;
    lc.grid_x = static_cast<unsigned>((mp.write_vecs + 255) / 256);
  }
  const int unused = 0;  // the empty kernel takes no parameters; launch wants an address anyway

  BenchCase c;
  c.op = "empty";
  c.uri = spec.uri;
  c.dtype = "none";
  c.shape = {{"grid", lc.grid_x}, {"block", lc.block_x}};
  c.label = fmt::format("empty kernel grid={} block={}", lc.grid_x, lc.block_x);
  if (move) {
    c.shape["read"] = read;
    c.shape["write"] = write;
    c.label += fmt::format(" moving read={} write={} bytes", read, write);
    c.bytes = static_cast<double>(read + write);
  }
  c.launch = [&](CUstream s) {
    if (fn == nullptr)
      fn = jit::JitCore::global().kernel(spec.uri, 0, [&] { return spec; }).functions.at(0);
    cuda::LaunchConfig on = lc;
    on.stream = s;
    ops::launch_elementwise(fn, on, move ? static_cast<const void*>(&mp) : &unused, 0,
                            bench_elementwise_launch());
  };
  const double first_ms = first_call_ms(c);
  Check chk;
  if (!move) {
    chk.note = "no output";
    chk.compared = false;
  } else if (opts.check) {
    std::vector<uint32_t> got(static_cast<size_t>(write / 4));
    out->download(got.data(), static_cast<size_t>(write));
    const size_t rw = in_h.size(), ww = got.size();
    for (size_t i = 0; i < ww; ++i) {
      const uint32_t want = in_h[i] ^ (i + ww < rw ? in_h[i + ww] : 0u);
      chk.add(got[i], want, 0.0);
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_empty_bench(std::vector<BenchEntry>& out) {
  out.push_back({"empty",
                 {},
                 {"read", "write"},
                 bench_empty,
                 "read, write (optional, bytes: the launch-and-move floor)"});
}

}  // namespace kjit::cli
