// See bench_probe.hpp.
#include "bench_probe.hpp"

#include <fmt/format.h>

#include "bench_kernels.hpp"
#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "support/gpu.hpp"

namespace kjit::cli {

int report_read_probe(const void* data, int64_t bytes, const std::string& for_label,
                      const BenchOptions& opts) {
  const jit::Spec spec = read_probe_spec();
  test::DeviceBuffer sink(16);
  ReadProbeParams rp{data, static_cast<unsigned long long>(bytes / 16),
                     static_cast<unsigned*>(sink.get())};
  CUfunction fn = nullptr;
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(cuda::device_info(0).sm_count * 4);
  lc.block_x = 512;
  BenchCase probe;
  probe.op = "read_probe";
  probe.uri = spec.uri;
  probe.dtype = "none";
  probe.shape = {{"bytes", bytes}, {"for", for_label}};
  probe.label =
      fmt::format("read-only probe, {:.1f} MB (the bytes of the case above)", bytes / 1e6);
  probe.launch = [&](CUstream stream) {
    if (fn == nullptr) {
      fn = jit::JitCore::global().kernel(spec.uri, 0, [&] { return spec; }).functions.at(0);
    }
    cuda::LaunchConfig on = lc;
    on.stream = stream;
    cuda::launch(fn, on, &rp);
  };
  probe.bytes = static_cast<double>(bytes);
  probe.copy_src = data;
  probe.copy_bytes = static_cast<size_t>(bytes / 2);
  Check none;
  none.note = "no output";
  none.compared = false;
  const double first_ms = first_call_ms(probe);
  return report(probe, none, first_ms, opts);
}

}  // namespace kjit::cli
