// The device code of the bench harness itself (bench_timer.cpp): the blocking kernel that holds
// the stream while a chunk is queued, the two L2 flushes (read, dirty), and the empty separator
// kernel that tells CUPTI samples apart. Compiled through the JIT like any op (so, under CUPTI,
// after CUPTI is enabled); separate from the timer so the unit tests compile it without a GPU.
#pragma once

#include "jit/spec.hpp"

namespace kjit::cli {

inline constexpr const char* kBlockKernel = "kjit_bench_block";
inline constexpr const char* kFlushKernel = "kjit_bench_l2_flush";
inline constexpr const char* kMarkKernel = "kjit_bench_mark";
inline constexpr const char* kDirtyFlushKernel = "kjit_bench_l2_dirty";

// Entries in this order: block, flush (read), mark, dirty flush.
jit::Spec harness_kernels_spec();

// The read-only bandwidth probe: reads n 16-byte words (streaming loads) and keeps nothing, what
// HBM gives a pure read stream, the ceiling of a pure-read op such as argmax or decode attention.
// Launch: block 512, any grid (4 blocks per SM is plenty), params ReadProbeParams.
inline constexpr const char* kReadProbeKernel = "kjit_read_probe_kernel";
struct ReadProbeParams {
  const void* p;  // 16-byte aligned
  unsigned long long n;
  unsigned* sink;  // 4 bytes of device memory, practically never written
};
jit::Spec read_probe_spec();

}  // namespace kjit::cli
