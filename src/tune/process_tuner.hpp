// What an op needs around the autotuner at a call (docs/autotune.md): the process's tuner
// (KJIT_AUTOTUNE / KJIT_TACTICS_BLOCKLIST / KJIT_FORCE_TACTIC read once, the store under
// <cache_dir>/tuning), a device's fingerprint, the call's own tuning request (an options struct's
// fields) and whether its stream is being captured.
#pragma once

#include <optional>

#include "tune/autotuner.hpp"
#include "tune/gpu_timer.hpp"

namespace kjit::tune {

// A call's request: its own mode (nullopt: the process's, KJIT_AUTOTUNE) and how a tactic is
// timed when the call measures.
struct TuneRequest {
  std::optional<TuneMode> mode;
  TimingMode timing;
};

// The C options' encoding (kjit_gemm_options::autotune, ::tune_timing): autotune -1 (the
// process's mode), 0, 1 or 2 as KJIT_AUTOTUNE; timing a kjit_tune_timing value. Throws
// kjit::Error(KJIT_ERROR_INVALID_ARGUMENT) naming the field for another value.
TuneRequest tune_request(int autotune, int timing);

// The process's autotuner, made on first use. Throws kjit::Error(KJIT_ERROR_INVALID_ARGUMENT) on
// a malformed variable (every call, until it is fixed and the process restarted).
Autotuner& process_autotuner();

// What a result measured on `device` depends on; cached per device. Throws KJIT_ERROR_NO_DEVICE
// without a driver.
const Fingerprint& device_fingerprint(int device);

// True when `stream` is being captured into a CUDA graph (then nothing may be measured on it).
bool stream_capturing(void* stream);

}  // namespace kjit::tune
