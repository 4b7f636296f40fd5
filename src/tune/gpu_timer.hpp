// How the autotuner times one tactic on the GPU (docs/autotune.md): CUDA events through the
// dlopen'ed driver, on a private stream, in the mode the caller deploys in: eager calls or CUDA-
// graph replay, each sample after an L2 flush (cold) or not (hot). The mode's name is part of the
// tuning key, so a result measured one way is never served for another.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <cuda.h>

namespace kjit::tune {

struct TimingMode {
  bool graph = false;        // per-call time of a replayed graph of kGraphCalls calls
  bool cold = true;          // 2x the L2 written before each sample
  std::string name() const;  // "eager-cold", "eager-hot", "graph-cold", "graph-hot"
  // "eager-cold" etc.; throws kjit::Error(KJIT_ERROR_INVALID_ARGUMENT) for another text.
  static TimingMode parse(const std::string& text);
};

inline constexpr int kGraphCalls = 20;

// Times `launch` (enqueues one call of the tactic on the stream it is given) on device `device`:
// `warmup` untimed calls, then `samples` samples in microseconds per call. Must not run while the
// caller's stream is being captured (it allocates and synchronizes). Throws kjit::Error on a
// driver error; a launch that throws propagates.
std::vector<double> time_on_gpu(int device, const std::function<void(CUstream)>& launch,
                                const TimingMode& mode, int samples = 15, int warmup = 3);

}  // namespace kjit::tune
