#include "tune/gpu_timer.hpp"

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "util/error.hpp"

namespace kjit::tune {

namespace {

// Frees what it holds on every path out, errors included.
struct Resources {
  const cuda::Driver& d = cuda::driver();
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  CUdeviceptr flush = 0;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~Resources() {
    if (exec != nullptr) d.cuGraphExecDestroy(exec);
    if (graph != nullptr) d.cuGraphDestroy(graph);
    if (flush != 0) d.cuMemFree(flush);
    if (start != nullptr) d.cuEventDestroy(start);
    if (stop != nullptr) d.cuEventDestroy(stop);
    if (stream != nullptr) {
      d.cuStreamSynchronize(stream);
      d.cuStreamDestroy(stream);
    }
  }
};

}  // namespace

std::string TimingMode::name() const {
  return std::string(graph ? "graph" : "eager") + (cold ? "-cold" : "-hot");
}

TimingMode TimingMode::parse(const std::string& text) {
  for (bool graph : {false, true}) {
    for (bool cold : {true, false}) {
      const TimingMode m{graph, cold};
      if (m.name() == text) return m;
    }
  }
  fail(KJIT_ERROR_INVALID_ARGUMENT,
       "timing mode must be eager-cold, eager-hot, graph-cold or graph-hot, not '{}'", text);
}

std::vector<double> time_on_gpu(int device, const std::function<void(CUstream)>& launch,
                                const TimingMode& mode, int samples, int warmup) {
  cuda::ScopedDevice scope(device);
  Resources r;
  const cuda::Driver& d = r.d;
  KJIT_CU_CHECK(d.cuStreamCreate(&r.stream, CU_STREAM_NON_BLOCKING));
  KJIT_CU_CHECK(d.cuEventCreate(&r.start, CU_EVENT_DEFAULT));
  KJIT_CU_CHECK(d.cuEventCreate(&r.stop, CU_EVENT_DEFAULT));
  const size_t flush_bytes = 2 * static_cast<size_t>(cuda::device_info(device).l2_bytes);
  if (mode.cold) KJIT_CU_CHECK(d.cuMemAlloc(&r.flush, flush_bytes));
  for (int i = 0; i < warmup; ++i) launch(r.stream);
  int calls = 1;
  if (mode.graph) {
    KJIT_CU_CHECK(d.cuStreamBeginCapture(r.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < kGraphCalls; ++i) launch(r.stream);
    KJIT_CU_CHECK(d.cuStreamEndCapture(r.stream, &r.graph));
    KJIT_CU_CHECK(d.cuGraphInstantiateWithFlags(&r.exec, r.graph, 0));
    KJIT_CU_CHECK(d.cuGraphLaunch(r.exec, r.stream));  // the first replay uploads the graph
    calls = kGraphCalls;
  }
  std::vector<double> out;
  for (int s = 0; s < samples; ++s) {
    if (mode.cold)
      KJIT_CU_CHECK(
          d.cuMemsetD8Async(r.flush, static_cast<unsigned char>(s), flush_bytes, r.stream));
    KJIT_CU_CHECK(d.cuEventRecord(r.start, r.stream));
    if (mode.graph) {
      KJIT_CU_CHECK(d.cuGraphLaunch(r.exec, r.stream));
    } else {
      launch(r.stream);
    }
    KJIT_CU_CHECK(d.cuEventRecord(r.stop, r.stream));
    KJIT_CU_CHECK(d.cuEventSynchronize(r.stop));
    float ms = 0;
    KJIT_CU_CHECK(d.cuEventElapsedTime(&ms, r.start, r.stop));
    out.push_back(1000.0 * ms / calls);
  }
  return out;
}

}  // namespace kjit::tune
