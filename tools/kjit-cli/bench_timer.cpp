// See bench_timer.hpp.
#include "bench_timer.hpp"
#include "bench_kernels.hpp"

#include <cupti.h>  // types and constants only: every CUPTI entry point is dlopen'ed
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "jit/settings.hpp"
#include "jit/spec.hpp"
#include "util/env.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

// Samples per CUPTI read-out, and the most per blocking-kernel release (samples_per_release()
// bounds the launches queued behind it).
constexpr int kChunk = 16;
// Long enough for the host to queue a chunk of op calls, short enough that a host stalled in a
// full launch queue (which would deadlock against the spinning kernel) recovers quickly; the
// chunk is then an error, not a figure (events_chunk).
constexpr unsigned long long kBlockTimeoutNs = 2000000000ULL;

// ---- CUPTI --------------------------------------------------------------------------------

struct Cupti {
  std::mutex init_mu;  // start_cupti(); never held while CUPTI may call back
  bool tried = false, ok = false;
  std::string why, path;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::mutex mu;                  // the records, filled from CUPTI's callbacks
  std::vector<TimedRecord> recs;  // guarded by mu
  size_t dropped = 0;             // guarded by mu
};

Cupti& cupti() {
  static Cupti c;
  return c;
}

constexpr size_t kCuptiBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kCuptiBufferBytes));
  *size = *buffer ? kCuptiBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  if (buffer == nullptr) return;
  Cupti& c = cupti();
  std::vector<TimedRecord> got;
  CUpti_Activity* rec = nullptr;
  while (c.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    // The fields read here sit at the same offsets in every kernel record version since
    // CUpti_ActivityKernel4 and every memcpy record version since CUpti_ActivityMemcpy, so a
    // CUPTI other than the one these headers describe still reads right.
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel4*>(rec);
      const bool sep = k->name != nullptr && (std::strcmp(k->name, kFlushKernel) == 0 ||
                                              std::strcmp(k->name, kDirtyFlushKernel) == 0 ||
                                              std::strcmp(k->name, kMarkKernel) == 0);
      got.push_back({k->start, k->end, sep});
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy5*>(rec);
      got.push_back({m->start, m->end, false});
    }
  }
  size_t dropped = 0;
  if (c.dropped_records) c.dropped_records(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(c.mu);
  c.recs.insert(c.recs.end(), got.begin(), got.end());
  c.dropped += dropped;
}

std::vector<std::string> cupti_candidates() {
  const char* names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
  std::vector<std::string> out(std::begin(names), std::end(names));  // the loader's own search
  std::vector<std::string> homes;
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = util::env_get(var)) homes.push_back(*v);
  }
  homes.push_back("/usr/local/cuda");
  try {
    homes.push_back(jit::find_cuda_home().string());
  } catch (const Error&) {
    // no toolkit headers found: the other places may still have the library
  }
  for (const auto& home : homes) {
    for (const char* sub : {"extras/CUPTI/lib64", "lib64", "lib", "targets/x86_64-linux/lib",
                            "targets/sbsa-linux/lib"}) {
      for (const char* name : names) out.push_back(home + "/" + sub + "/" + name);
    }
  }
  return out;
}

std::string cupti_error(const Cupti& c, CUptiResult r) {
  const char* s = nullptr;
  if (c.result_string) c.result_string(r, &s);
  return fmt::format("{} ({})", s ? s : "?", static_cast<int>(r));
}

// Syncs the device and hands every finished record to buffer_completed.
void cupti_flush() {
  KJIT_CU_CHECK(cuda::driver().cuCtxSynchronize());
  cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

// ---- NVML ---------------------------------------------------------------------------------
// The few entry points used, declared here: nvml.h is not part of the CUDA toolkit everywhere.

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlViolationTime_t {
  unsigned long long reference_time;
  unsigned long long violation_time;
};
constexpr int kNvmlClockSm = 1;          // NVML_CLOCK_SM
constexpr int kNvmlPerfPolicyPower = 0;  // NVML_PERF_POLICY_POWER
constexpr int kNvmlPerfPolicyThermal = 1;

struct Nvml {
  bool ok = false;
  std::string why;
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t (*get_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*get_max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*get_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*get_violation)(nvmlDevice_t, int, nvmlViolationTime_t*) = nullptr;
  std::string driver_version;  // the kernel driver's, e.g. "580.159.04"; empty when unknown
};

Nvml load_nvml() {
  Nvml n;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    n.why = "libnvidia-ml.so.1 not found";
    return n;
  }
  auto sym = [&](const char* name) { return ::dlsym(lib, name); };
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  auto by_bus = reinterpret_cast<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>(
      sym("nvmlDeviceGetHandleByPciBusId_v2"));
  n.get_clock = reinterpret_cast<decltype(n.get_clock)>(sym("nvmlDeviceGetClockInfo"));
  n.get_max_clock = reinterpret_cast<decltype(n.get_max_clock)>(sym("nvmlDeviceGetMaxClockInfo"));
  // Renamed in newer drivers; the old name stays as an alias in most.
  void* reasons = sym("nvmlDeviceGetCurrentClocksEventReasons");
  if (reasons == nullptr) reasons = sym("nvmlDeviceGetCurrentClocksThrottleReasons");
  n.get_reasons = reinterpret_cast<decltype(n.get_reasons)>(reasons);
  n.get_violation =
      reinterpret_cast<decltype(n.get_violation)>(sym("nvmlDeviceGetViolationStatus"));
  auto get_version =
      reinterpret_cast<nvmlReturn_t (*)(char*, unsigned)>(sym("nvmlSystemGetDriverVersion"));
  if (init == nullptr || by_bus == nullptr || n.get_clock == nullptr) {
    n.why = "libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByPciBusId_v2 / GetClockInfo";
    return n;
  }
  if (init() != 0) {
    n.why = "nvmlInit failed";
    return n;
  }
  // NVML numbers devices its own way; the PCI address names the one CUDA calls device 0.
  const auto& d = cuda::driver();
  CUdevice cu_dev = 0;
  int domain = 0, bus = 0, device = 0;
  if (d.cuDeviceGet(&cu_dev, 0) != CUDA_SUCCESS ||
      d.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, cu_dev) != CUDA_SUCCESS ||
      d.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, cu_dev) != CUDA_SUCCESS ||
      d.cuDeviceGetAttribute(&device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, cu_dev) != CUDA_SUCCESS) {
    n.why = "no PCI address for CUDA device 0";
    return n;
  }
  // NVML's own spelling first (8-digit domain), then the legacy 4-digit one.
  const std::string bus_id = fmt::format("{:08X}:{:02X}:{:02X}.0", domain, bus, device);
  const std::string legacy = fmt::format("{:04X}:{:02X}:{:02X}.0", domain, bus, device);
  if (by_bus(bus_id.c_str(), &n.dev) != 0 && by_bus(legacy.c_str(), &n.dev) != 0) {
    n.why = "NVML has no device at " + bus_id;
    return n;
  }
  n.ok = true;
  char version[96] = {};
  if (get_version != nullptr && get_version(version, sizeof(version)) == 0) {
    n.driver_version = version;
  }
  return n;
}

const Nvml& nvml() {
  static const Nvml n = load_nvml();  // the library handle is deliberately never closed
  return n;
}

// ---- Kernels of the harness itself ---------------------------------------------------------

struct HarnessKernels {
  CUfunction block = nullptr, flush = nullptr, mark = nullptr, dirty = nullptr;
  volatile int* host_flag = nullptr;  // [0]: release, [1]: the blocking kernel timed out
  CUdeviceptr dev_flag = 0;
};

// Compiled through the JIT like any op, so that under CUPTI they load after it is enabled too.
const HarnessKernels& harness_kernels() {
  static const HarnessKernels k = [] {
    const jit::Spec spec = harness_kernels_spec();
    const jit::LoadedKernel& lk = jit::JitCore::global().kernel(spec.uri, 0, [&] { return spec; });
    HarnessKernels out;
    out.block = lk.functions.at(0);
    out.flush = lk.functions.at(1);
    out.mark = lk.functions.at(2);
    out.dirty = lk.functions.at(3);
    const auto& d = cuda::driver();
    void* host = nullptr;
    KJIT_CU_CHECK(
        d.cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    std::memset(host, 0, 64);
    KJIT_CU_CHECK(d.cuMemHostGetDevicePointer(&out.dev_flag, host, 0));
    out.host_flag = static_cast<volatile int*>(host);
    return out;  // pinned flag and module live for the process
  }();
  return k;
}

struct FlushBuffer {
  CUdeviceptr buf = 0, sink = 0;
  unsigned long long n = 0;  // 16-byte elements
};

// The peers' harnesses zero 256 MB between calls; never less than twice the L2.
constexpr size_t kDirtyFlushBytes = 256u << 20;

FlushBuffer make_flush_buffer(size_t least) {
  const auto& d = cuda::driver();
  const cuda::DeviceInfo& dev = cuda::device_info(0);
  FlushBuffer out;
  const size_t l2 = dev.l2_bytes > 0 ? static_cast<size_t>(dev.l2_bytes) : (64u << 20);
  const size_t bytes = (std::max(2 * l2, least) + 15) / 16 * 16;
  KJIT_CU_CHECK(d.cuMemAlloc(&out.buf, bytes));
  KJIT_CU_CHECK(d.cuMemsetD8(out.buf, 0, bytes));
  KJIT_CU_CHECK(d.cuMemAlloc(&out.sink, 16));
  KJIT_CU_CHECK(d.cuCtxSynchronize());  // cuMemsetD8 may return before the device is done
  out.n = bytes / 16;
  return out;  // freed with the context at exit
}

// The read flush's buffer (2x L2) and the dirty flush's (256 MB or 2x L2), made on first use.
const FlushBuffer& flush_buffer(Flush f) {
  static const FlushBuffer read = make_flush_buffer(0);
  if (f == Flush::kRead) return read;
  static const FlushBuffer dirty = make_flush_buffer(kDirtyFlushBytes);
  return dirty;
}

// Leaves L2 as `f` asks (nothing for Flush::kNone), on the legacy stream.
void launch_flush(Flush f) {
  if (f == Flush::kNone) return;
  const HarnessKernels& k = harness_kernels();
  const FlushBuffer& b = flush_buffer(f);
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(8 * cuda::device_info(0).sm_count);
  lc.block_x = 256;
  if (f == Flush::kRead) {
    struct {
      CUdeviceptr buf;
      unsigned long long n;
      CUdeviceptr sink;
    } p{b.buf, b.n, b.sink};
    cuda::launch(k.flush, lc, &p);
  } else {
    struct {
      CUdeviceptr buf;
      unsigned long long n;
    } p{b.buf, b.n};
    cuda::launch(k.dirty, lc, &p);
  }
}

void launch_mark() {
  const int unused = 0;
  cuda::LaunchConfig lc;
  lc.block_x = 32;
  cuda::launch(harness_kernels().mark, lc, &unused);
}

// Queues the blocking kernel; everything queued after it waits for release().
class Blocker {
 public:
  Blocker() : k_(harness_kernels()) {
    k_.host_flag[0] = 0;
    k_.host_flag[1] = 0;
    struct {
      CUdeviceptr flag, timed_out;
      unsigned long long timeout_ns;
    } p{k_.dev_flag, k_.dev_flag + sizeof(int), kBlockTimeoutNs};
    cuda::LaunchConfig lc;
    cuda::launch(k_.block, lc, &p);
  }
  ~Blocker() { release(); }
  void release() { __atomic_store_n(const_cast<int*>(&k_.host_flag[0]), 1, __ATOMIC_SEQ_CST); }
  bool timed_out() const {
    return __atomic_load_n(const_cast<int*>(&k_.host_flag[1]), __ATOMIC_SEQ_CST) != 0;
  }

 private:
  const HarnessKernels& k_;
};

struct Events {
  std::vector<CUevent> ev;
  explicit Events(size_t n) : ev(n) {
    for (auto& e : ev) KJIT_CU_CHECK(cuda::driver().cuEventCreate(&e, CU_EVENT_DEFAULT));
  }
  ~Events() {
    for (auto& e : ev) cuda::driver().cuEventDestroy(e);
  }
  double us_between(size_t a, size_t b) const {
    float ms = 0;
    KJIT_CU_CHECK(cuda::driver().cuEventElapsedTime(&ms, ev[a], ev[b]));
    return 1000.0 * ms;
  }
};

// One chunk of n samples with events: each sample is [flush] a, `batch` calls, b. Throws when the
// blocking kernel gave up before the chunk was queued: its samples would then include launch
// latency, so no figure is better than a wrong one.
// Throws when the blocking kernel gave up before a chunk (`what`) was queued: its samples would
// then include launch latency, so no figure is better than a wrong one.
void check_blocker(bool timed_out, std::chrono::steady_clock::time_point t0,
                   const std::string& what) {
  if (!timed_out) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fail(KJIT_ERROR_INTERNAL,
       "the blocking kernel timed out ({:.1f} s) before a chunk of {} was queued ({:.1f} s to "
       "queue and run it): the host stalled while queueing (a full launch queue, or an op call "
       "that synchronizes), so the samples would include launch latency",
       kBlockTimeoutNs * 1e-9, what, s);
}

// One chunk of n samples with events: each sample is [flush] a, `batch` calls, b.
void events_chunk(const Launch& launch, int n, int batch, Flush flush, std::vector<double>& us) {
  const auto& d = cuda::driver();
  const auto t0 = std::chrono::steady_clock::now();
  Events e(2 * static_cast<size_t>(n));
  bool timed_out = false;
  {
    Blocker block;
    for (int s = 0; s < n; ++s) {
      launch_flush(flush);
      KJIT_CU_CHECK(d.cuEventRecord(e.ev[2 * s], nullptr));
      for (int i = 0; i < batch; ++i) launch(nullptr);
      KJIT_CU_CHECK(d.cuEventRecord(e.ev[2 * s + 1], nullptr));
    }
    block.release();
    KJIT_CU_CHECK(d.cuEventSynchronize(e.ev.back()));
    timed_out = block.timed_out();
  }
  check_blocker(
      timed_out, t0,
      fmt::format("{} samples x {} calls{}", n, batch,
                  flush == Flush::kNone ? "" : std::string(" + ") + flush_name(flush) + " flush"));
  for (int s = 0; s < n; ++s) us.push_back(e.us_between(2 * s, 2 * s + 1) / batch);
}

// `calls` back-to-back op calls captured once in a CUDA graph on a stream of its own. The stream
// is a blocking one, so its replays queue behind the blocking kernel on the legacy stream.
class CapturedGraph {
 public:
  CapturedGraph(const Launch& launch, int calls) : calls_(calls) {
    const auto& d = cuda::driver();
    KJIT_CU_CHECK(d.cuStreamCreate(&stream_, CU_STREAM_DEFAULT));
    try {
      KJIT_CU_CHECK(d.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
      try {
        for (int i = 0; i < calls; ++i) launch(stream_);
      } catch (...) {
        CUgraph partial = nullptr;
        d.cuStreamEndCapture(stream_, &partial);
        if (partial != nullptr) d.cuGraphDestroy(partial);
        throw;
      }
      const CUresult r = d.cuStreamEndCapture(stream_, &graph_);
      if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        d.cuGetErrorName(r, &name);
        fail(KJIT_ERROR_CUDA,
             "capturing {} calls in a CUDA graph failed ({}): the op does something a graph "
             "cannot hold (a host synchronization, an allocation, a legacy-stream launch)",
             calls, name ? name : "?");
      }
      KJIT_CU_CHECK(d.cuGraphInstantiateWithFlags(&exec_, graph_, 0));
    } catch (...) {
      release();
      throw;
    }
  }
  ~CapturedGraph() { release(); }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void replay() const { KJIT_CU_CHECK(cuda::driver().cuGraphLaunch(exec_, stream_)); }
  CUstream stream() const { return stream_; }
  int calls() const { return calls_; }

 private:
  void release() {
    const auto& d = cuda::driver();
    if (stream_ != nullptr) d.cuStreamSynchronize(stream_);
    if (exec_ != nullptr) d.cuGraphExecDestroy(exec_);
    if (graph_ != nullptr) d.cuGraphDestroy(graph_);
    if (stream_ != nullptr) d.cuStreamDestroy(stream_);
    exec_ = nullptr;
    graph_ = nullptr;
    stream_ = nullptr;
  }
  int calls_;
  CUstream stream_ = nullptr;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// One chunk of n samples of graph replays: each sample is a, one replay, b.
void graph_chunk(const CapturedGraph& g, int n, std::vector<double>& us) {
  const auto& d = cuda::driver();
  const auto t0 = std::chrono::steady_clock::now();
  Events e(2 * static_cast<size_t>(n));
  bool timed_out = false;
  {
    Blocker block;
    for (int s = 0; s < n; ++s) {
      KJIT_CU_CHECK(d.cuEventRecord(e.ev[2 * s], g.stream()));
      g.replay();
      KJIT_CU_CHECK(d.cuEventRecord(e.ev[2 * s + 1], g.stream()));
    }
    block.release();
    KJIT_CU_CHECK(d.cuEventSynchronize(e.ev.back()));
    timed_out = block.timed_out();
  }
  check_blocker(timed_out, t0, fmt::format("{} graph replays of {} calls", n, g.calls()));
  for (int s = 0; s < n; ++s) us.push_back(e.us_between(2 * s, 2 * s + 1) / g.calls());
}

// One chunk with CUPTI; false (and why) when the records do not add up.
bool cupti_chunk(const Launch& launch, int n, Flush flush, std::vector<double>& us,
                 std::string* why) {
  Cupti& c = cupti();
  cupti_flush();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.recs.clear();
    c.dropped = 0;
  }
  // The flush kernels are separators themselves; without a flush an empty kernel is.
  auto sep = [&] { flush == Flush::kNone ? launch_mark() : launch_flush(flush); };
  for (int s = 0; s < n; ++s) {
    sep();
    launch(nullptr);
  }
  sep();
  cupti_flush();
  std::vector<TimedRecord> recs;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    recs.swap(c.recs);
    dropped = c.dropped;
  }
  if (dropped > 0) {
    *why = fmt::format("CUPTI dropped {} records", dropped);
    return false;
  }
  return split_samples(std::move(recs), n, us, why);
}

}  // namespace

bool start_cupti(std::string* why) {
  Cupti& c = cupti();
  std::lock_guard<std::mutex> lock(c.init_mu);
  if (!c.tried) {
    c.tried = true;
    void* lib = nullptr;
    for (const auto& path : cupti_candidates()) {
      lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) {
        c.path = path;
        break;
      }
    }
    if (lib == nullptr) {
      c.why =
          "libcupti.so not found (searched the loader path, $KJIT_CUDA_HOME, $CUDA_HOME, "
          "$CUDA_PATH and the toolkit: extras/CUPTI/lib64, lib64, lib)";
    } else {
      auto sym = [&](const char* name) { return ::dlsym(lib, name); };
      c.register_callbacks =
          reinterpret_cast<decltype(c.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
      c.enable = reinterpret_cast<decltype(c.enable)>(sym("cuptiActivityEnable"));
      c.flush_all = reinterpret_cast<decltype(c.flush_all)>(sym("cuptiActivityFlushAll"));
      c.next_record = reinterpret_cast<decltype(c.next_record)>(sym("cuptiActivityGetNextRecord"));
      c.dropped_records =
          reinterpret_cast<decltype(c.dropped_records)>(sym("cuptiActivityGetNumDroppedRecords"));
      c.result_string = reinterpret_cast<decltype(c.result_string)>(sym("cuptiGetResultString"));
      if (!c.register_callbacks || !c.enable || !c.flush_all || !c.next_record) {
        c.why = c.path + " lacks the activity API";
      } else if (CUptiResult r = c.register_callbacks(buffer_requested, buffer_completed);
                 r != CUPTI_SUCCESS) {
        c.why = "cuptiActivityRegisterCallbacks: " + cupti_error(c, r);
      } else if (CUptiResult r = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
                 r != CUPTI_SUCCESS) {
        c.why = "cuptiActivityEnable(CONCURRENT_KERNEL): " + cupti_error(c, r);
      } else if (CUptiResult r = c.enable(CUPTI_ACTIVITY_KIND_MEMCPY); r != CUPTI_SUCCESS) {
        c.why = "cuptiActivityEnable(MEMCPY): " + cupti_error(c, r);
      } else {
        c.ok = true;
      }
    }
  }
  if (!c.ok && why) *why = c.why;
  return c.ok;
}

bool cupti_available() {
  Cupti& c = cupti();
  std::lock_guard<std::mutex> lock(c.init_mu);
  return c.ok;
}

ClockReading read_clocks() {
  ClockReading r;
  const Nvml& n = nvml();
  if (!n.ok) return r;
  r.valid = n.get_clock(n.dev, kNvmlClockSm, &r.sm_mhz) == 0;
  if (!r.valid) return r;
  unsigned long long reasons = 0;
  if (n.get_reasons && n.get_reasons(n.dev, &reasons) == 0) {
    r.reasons_valid = true;
    r.reasons = reasons;
  }
  nvmlViolationTime_t power{}, thermal{};
  if (n.get_violation && n.get_violation(n.dev, kNvmlPerfPolicyPower, &power) == 0 &&
      n.get_violation(n.dev, kNvmlPerfPolicyThermal, &thermal) == 0) {
    r.violation_valid = true;
    r.power_violation_ns = power.violation_time;
    r.thermal_violation_ns = thermal.violation_time;
  }
  return r;
}

std::string driver_version() {
  return nvml().driver_version;
}

unsigned max_sm_clock_mhz() {
  const Nvml& n = nvml();
  unsigned mhz = 0;
  if (n.ok && n.get_max_clock && n.get_max_clock(n.dev, kNvmlClockSm, &mhz) == 0) return mhz;
  return 0;
}

Measurement measure(const Launch& launch, const BenchOptions& o) {
  const auto& d = cuda::driver();
  Measurement m;
  m.timer = o.timer;
  std::string cupti_why;
  // cmd_bench starts CUPTI before the first launch; started here (late) it may miss the op's
  // module, and then the records do not add up and the fallback below takes over.
  if (m.timer == "cupti" && !start_cupti(&cupti_why)) {
    m.timer = "events";
    m.note = "CUPTI unavailable (" + cupti_why + "): timed with events";
  }
  harness_kernels();  // compiled / loaded before any sample
  if (o.cold()) flush_buffer(o.flush);
  for (int i = 0; i < o.warmup; ++i) launch(nullptr);
  KJIT_CU_CHECK(d.cuCtxSynchronize());

  std::unique_ptr<CapturedGraph> graph;
  if (m.timer == "events-batched" || m.timer == "graph") {
    // Batches of about 200 us, at most 256 calls: enough to bury the per-launch gaps; how many
    // such samples share one release is bounded below (samples_per_release), so the queue behind
    // the blocking kernel never fills. A graph holds the same batch, so the two compare.
    std::vector<double> one;
    events_chunk(launch, 3, 1, Flush::kNone, one);
    m.batch = batch_for(*std::min_element(one.begin(), one.end()), 200.0);
  }
  if (m.timer == "graph") {
    graph = std::make_unique<CapturedGraph>(launch, m.batch);
    // The first replays upload the graph to the device.
    for (int i = 0; i < 2; ++i) graph->replay();
    KJIT_CU_CHECK(d.cuStreamSynchronize(graph->stream()));
  }

  const unsigned max_mhz = max_sm_clock_mhz();
  bool any_known = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const int cap = iters_or_default(o);
    int n = std::max(1, std::min(kChunk, cap - static_cast<int>(m.us.size())));
    if (m.timer != "cupti") n = samples_per_release(m.batch, o.cold(), n);
    const ClockReading before = read_clocks();
    std::vector<double> got;
    if (m.timer == "cupti") {
      std::string why;
      if (!cupti_chunk(launch, n, o.flush, got, &why)) {
        // Start over with events rather than mix mechanisms in one figure.
        m.timer = "events";
        m.note = "CUPTI records unusable (" + why + "): timed with events";
        m.us.clear();
        m.throttled_samples = 0;
        m.sm_clock_min_mhz = m.sm_clock_max_mhz = 0;
        any_known = false;
        continue;
      }
    } else if (graph) {
      graph_chunk(*graph, n, got);
    } else {
      events_chunk(launch, n, m.batch, o.flush, got);
    }
    const ClockReading after = read_clocks();
    std::string why;
    const Throttle t = classify_throttle(before, after, max_mhz, &why);
    if (t != Throttle::kUnknown) any_known = true;
    if (t == Throttle::kYes) {
      if (m.throttled_samples == 0) m.throttle_why = why;
      m.throttled_samples += n;
    }
    for (const ClockReading* r : {&before, &after}) {
      if (!r->valid) continue;
      m.sm_clock_min_mhz =
          m.sm_clock_min_mhz == 0 ? r->sm_mhz : std::min(m.sm_clock_min_mhz, r->sm_mhz);
      m.sm_clock_max_mhz = std::max(m.sm_clock_max_mhz, r->sm_mhz);
    }
    m.us.insert(m.us.end(), got.begin(), got.end());
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.stop = stop_decision(o, m.us, elapsed);
    if (m.stop != StopReason::kContinue) break;
  }
  m.throttled = m.throttled_samples > 0 ? Throttle::kYes
                : any_known             ? Throttle::kNo
                                        : Throttle::kUnknown;
  if (m.throttled == Throttle::kUnknown) m.throttle_why = nvml().ok ? "no reading" : nvml().why;
  m.stats = compute_stats(m.us);
  return m;
}

}  // namespace kjit::cli
