// How `kjit-cli bench` turns launches into device times (docs/bench.md):
//
//   cupti           CUPTI activity records: the hardware start / end timestamps of the kernels (and
//                   memcpys) themselves. One op call per sample; samples are told apart by tiny
//                   separator kernels (the L2 flush when flushing, an empty kernel otherwise), so
//                   an op that launches several kernels is timed from its first start to its last
//                   end.
//   events          CUDA events around each op call, all queued behind a kernel that spins on a
//                   host-mapped flag until the whole chunk is queued: launch latency stays hidden.
//   events-batched  events around a batch of back-to-back calls (also behind the blocking
//                   kernel); per-call time = batch time / batch size. No flush.
//   graph           the same batch of back-to-back calls captured once in a CUDA graph, events
//                   around each replay (behind the blocking kernel); per-call time = replay time /
//                   batch size. How an engine runs a decode step: no per-launch host work at all,
//                   so for a launch-bound op it is the figure an engine sees. No flush.
//
// CUPTI is dlopen'ed (libkjit.so never links it) and must be enabled before the JIT loads any
// module: start_cupti() runs before a bench's first launch. When it cannot start, the figures come
// from events and the row says so.
#pragma once

#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

#include "bench_stats.hpp"

namespace kjit::cli {

// Loads libcupti and enables kernel + memcpy activity records. Idempotent; false (with the
// reason) when CUPTI is missing or refuses, after which cupti_available() stays false.
bool start_cupti(std::string* why);
bool cupti_available();

// NVML (dlopen'ed libnvidia-ml.so.1) for device 0; readings are invalid when it is missing.
ClockReading read_clocks();
unsigned max_sm_clock_mhz();   // 0 when unknown
std::string driver_version();  // the kernel driver's (NVML), e.g. "580.159.04"; "" when unknown

// One op call, queued on the stream it is given (the legacy stream, or a capturing one).
using Launch = std::function<void(CUstream)>;

struct Measurement {
  std::string timer;       // the mechanism that produced the figures
  std::string note;        // why it is not the one requested, blocking-kernel timeouts, ...
  std::vector<double> us;  // one per sample, per op call
  Stats stats;
  StopReason stop = StopReason::kIters;
  int batch = 1;  // op calls per sample (events-batched, graph)
  Throttle throttled = Throttle::kUnknown;
  int throttled_samples = 0;
  std::string throttle_why;
  unsigned sm_clock_min_mhz = 0, sm_clock_max_mhz = 0;  // over the readings; 0: unknown
};

// Warms up, then takes samples of `launch` with the timer `o.timer` asks for (falling back from
// cupti to events when CUPTI is not available) and the flush `o.flush` asks for, until
// stop_decision() says so. Device 0's primary context must be current.
Measurement measure(const Launch& launch, const BenchOptions& o);

}  // namespace kjit::cli
