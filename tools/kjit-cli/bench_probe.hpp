// The read-only probe as a bench row: times a pure read of the bytes an op reads, in the same
// run and the same way as the op, so "% of read bandwidth" compares like with like.
#pragma once

#include <cstdint>
#include <string>

#include "bench_harness.hpp"

namespace kjit::cli {

// Reports one "read_probe" row over `bytes` (a multiple of 16) at `data` on device 0, labelled
// as being for `for_label`. Returns report()'s exit code.
int report_read_probe(const void* data, int64_t bytes, const std::string& for_label,
                      const BenchOptions& opts);

}  // namespace kjit::cli
