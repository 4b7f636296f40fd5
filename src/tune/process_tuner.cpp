#include "tune/process_tuner.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "jit/nvrtc.hpp"
#include "kjit/kjit.h"
#include "runtime/jit_core.hpp"
#include "tune/packaged_records.hpp"
#include "util/error.hpp"

namespace kjit::tune {

TuneRequest tune_request(int autotune, int timing) {
  TuneRequest r;
  switch (autotune) {
    case -1: break;
    case 0: r.mode = TuneMode::kOff; break;
    case 1: r.mode = TuneMode::kUnseen; break;
    case 2: r.mode = TuneMode::kRetune; break;
    default:
      fail(KJIT_ERROR_INVALID_ARGUMENT, "options->autotune must be -1, 0, 1 or 2, got {}",
           autotune);
  }
  switch (timing) {
    case KJIT_TUNE_EAGER_COLD: r.timing = {false, true}; break;
    case KJIT_TUNE_EAGER_HOT: r.timing = {false, false}; break;
    case KJIT_TUNE_GRAPH_COLD: r.timing = {true, true}; break;
    case KJIT_TUNE_GRAPH_HOT: r.timing = {true, false}; break;
    default:
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "options->tune_timing must be a kjit_tune_timing (0..3), got {}", timing);
  }
  return r;
}

Autotuner& process_autotuner() {
  // Built under the static's own guard; a throw (a malformed variable) leaves it to the next call.
  static Autotuner tuner(TuneSettings::from_env(),
                         make_store(jit::JitCore::global().settings().cache_dir,
                                    jit::JitCore::global().settings().aot_dirs));
  return tuner;
}

const Fingerprint& device_fingerprint(int device) {
  static std::mutex mu;
  static std::map<int, Fingerprint> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  const cuda::DeviceInfo& dev = cuda::device_info(device);
  Fingerprint fp;
  fp.device = dev.name;
  fp.sm_count = dev.sm_count;
  KJIT_CU_CHECK(cuda::driver().cuDriverGetVersion(&fp.driver));
  fp.nvrtc = jit::nvrtc_version();
  fp.kjit = jit::kjit_version();
  return known.emplace(device, fp).first->second;
}

bool stream_capturing(void* stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  KJIT_CU_CHECK(cuda::driver().cuStreamIsCapturing(static_cast<CUstream>(stream), &status));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace kjit::tune
