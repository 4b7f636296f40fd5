// The shared part of `kjit-cli bench`: the reference-check record, the result rows, and the
// timing of every backend (bench_timer.hpp) beside the copy baseline measured the same way in the
// same run. Each op family's cases live in bench_<family>.cpp and hand a BenchCase to report();
// they never time anything themselves. Timers, L2 state, stopping and the row fields are
// described in docs/bench.md.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_stats.hpp"
#include "bench_timer.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "support/parallel_rows.hpp"

namespace kjit::cli {

// Reference agreement of one run's output: elements outside tolerance (NaN counts), largest
// errors. `note` replaces the figures for an op with nothing to compare.
struct Check {
  double max_abs = 0, max_rel = 0;
  long bad = 0;
  std::string note;      // what was checked, when max_abs / max_rel do not say it
  bool compared = true;  // false: the case has no output to compare (the empty kernel, probes)
  void add(double got, double want, double tol) {
    double err = std::fabs(got - want);
    if (!(err <= tol)) ++bad;
    if (std::isnan(err)) err = INFINITY;
    max_abs = std::max(max_abs, err);
    max_rel = std::max(max_rel, err / std::max(std::fabs(want), 1e-3));
  }
  bool pass() const { return bad == 0; }
  // Another check's counts and largest errors folded in (one check a worker thread).
  void merge(const Check& o) {
    bad += o.bad;
    max_abs = std::max(max_abs, o.max_abs);
    max_rel = std::max(max_rel, o.max_rel);
  }
};

// f(row, check) for each row in [0, rows) on every core (test::parallel_rows), each worker
// adding to its own Check, merged after: the fp64 references of the large rows (65536 tokens of
// rope + append: ~85 s on one core) in device-time terms. f must touch only its row's state.
template <class F>
Check check_rows(int64_t rows, F f) {
  std::vector<Check> checks(static_cast<size_t>(test::reference_workers()));
  test::parallel_rows(rows, [&](int64_t r, int w) { f(r, checks[static_cast<size_t>(w)]); });
  Check all;
  for (const Check& c : checks) all.merge(c);
  return all;
}

// What one op's bench hands to the shared part: how to launch it, what it moves, and how to
// describe it.
struct BenchCase {
  std::string op;
  std::string uri;
  std::string dtype;
  nlohmann::json shape;            // {"rows": ..., ...}
  std::string label;               // "rmsnorm bf16 rows=64 hidden=5120" for the console
  Launch launch;                   // one call on the stream it is given
  double bytes = 0;                // HBM bytes one launch reads and writes
  const void* copy_src = nullptr;  // device bytes the copy baseline reads ...
  size_t copy_bytes = 0;           // ... and as many it writes: ~bytes / 2; 0: no baseline
  double flops = 0;                // floating-point operations of one launch (0: memory-bound)
  // The `reference` backend: a naive device implementation of the same op on the same buffers,
  // when the family has one (BenchEntry::has_reference); empty otherwise.
  Launch reference_launch;
};

// How the elementwise benches launch their op (the ops-layer call's `launch` argument): the
// process's settings (KJIT_PDL, KJIT_PDL_EARLY_INDICES), with plain launches while report() times
// with a timer other than events-batched (under PDL only back-to-back timing means anything).
const ops::ElementwiseLaunch& bench_elementwise_launch();

// Throws NO_DEVICE when there is no GPU; makes device 0 current for the driver calls of a bench.
void check_gpu();

// The first launch, synchronized: includes compiling or loading the specialization.
double first_call_ms(const BenchCase& c);
// first_call_ms, and c.uri becomes the last kernel the call ran, where the kernel is the
// autotuner's or a forced tactic's choice rather than the heuristic's the case was named by.
double first_call_ms_naming_kernel(BenchCase& c);

// Times a case that passed its check (or any case under --no-check) with every backend of
// opts.backends, beside a device-to-device copy of the same traffic timed the same way in the
// same run; prints one line and appends one JSON / CSV row per backend, for each of
// opts.timings (a suite row's timings) or else under opts.timer / opts.flush. A failed check is
// reported once, never timed. Returns the command's exit code.
int report(const BenchCase& c, const Check& chk, double first_ms, const BenchOptions& opts);

// Fills `n` elements of `dtype` at `dst` uniformly in [lo, hi).
void fill_uniform(unsigned char* dst, size_t n, const std::string& dtype, std::mt19937_64& rng,
                  double lo, double hi);

// Fills `n` elements of a host image of `dtype` uniformly in [lo, hi) and returns their values.
std::vector<double> random_elems(std::vector<unsigned char>& host, size_t n,
                                 const std::string& dtype, std::mt19937_64& rng, double lo,
                                 double hi);

// The host image of several arrays in one device allocation, each at a 256-byte boundary: the
// copy baseline then reads as many input bytes as the op does from a single buffer.
struct Packed {
  std::vector<unsigned char> host;
  std::unique_ptr<test::DeviceBuffer> dev;
  size_t add(size_t bytes) {
    const size_t at = (host.size() + 255) / 256 * 256;
    host.resize(at + bytes);
    return at;
  }
  void upload() {
    dev = std::make_unique<test::DeviceBuffer>(host.size());
    dev->upload(host.data(), host.size());
  }
  char* at(size_t offset) const { return static_cast<char*>(dev->get()) + offset; }
};

size_t add_int32s(Packed& p, const std::vector<int32_t>& v);

// The paged KV appends' --set sizes (bench_kv_cache.cpp; `bench append_paged_kv` and `bench
// rope_append`): tokens, kv_heads, head_dim, page_size, batch (default max(1, tokens / 512)),
// layout (nhd | hnd), cache (same | e4m3); UsageError otherwise.
struct BenchAppendArgs {
  int64_t tokens = 0, kv_heads = 0, head_dim = 0, page_size = 0, batch = 0;
  std::string layout, cache;
  bool nhd = true, fp8 = false;
};
BenchAppendArgs bench_append_args(const ops::SetArgs& args, int64_t max_tokens,
                                  int64_t max_head_dim);

// The paged KV appends' batch (bench_kv_cache.cpp; `bench append_paged_kv` and `bench
// rope_append`): `batch` requests each append their share of `tokens` after an existing prefix
// of up to 1024 tokens, on distinct pages in random order.
struct BenchAppendBatch {
  std::vector<int32_t> batch_indices, positions, indptr{0}, last_page_len, indices;
  int64_t num_pages = 0;
};
BenchAppendBatch bench_append_batch(int64_t tokens, int64_t batch, int64_t page_size,
                                    std::mt19937_64& rng);

// A "0" / "1" flag, "0" when absent; UsageError otherwise.
bool flag_arg(const ops::SetArgs& args, const std::string& name);

// Whether the timer times back-to-back calls (events-batched, graph), each after the one before.
bool back_to_back(const BenchOptions& opts);

// One `kjit-cli bench <op>`: the --set names it needs, those it also reads, and what runs it.
// Any other --set name is a usage error: a mistyped or absent knob must not time the default.
using BenchFn = int (*)(const ops::SetArgs&, const BenchOptions&);
struct BenchEntry {
  const char* op;
  std::vector<std::string> required;
  std::vector<std::string> optional;
  BenchFn run;
  const char* set_help;        // "dtype, hidden, rows" and optional ones
  bool has_reference = false;  // its cases set BenchCase::reference_launch
};

// The (row, column) outputs a GEMM bench checks: all of a small call; of a large one (a CPU
// triple loop of hours) the corners and random elements. bench_gemm.cpp.
std::vector<std::pair<int64_t, int64_t>> gemm_check_picks(int64_t m, int64_t n, int64_t k,
                                                          std::mt19937_64& rng);

// `bench empty`'s optional move floor: (read, write) bytes from --set read / write, (0, 0) when
// neither is set. UsageError unless both are multiples of 16 with write <= read <= 2 * write.
std::pair<long long, long long> empty_move_bytes(const ops::SetArgs& args);

// Each family appends its benches; cmd_bench.cpp lists the families.
void add_norm_benches(std::vector<BenchEntry>& out);        // bench_norm.cpp
void add_activation_benches(std::vector<BenchEntry>& out);  // bench_activation.cpp
void add_rope_benches(std::vector<BenchEntry>& out);        // bench_rope.cpp
void add_kv_cache_benches(std::vector<BenchEntry>& out);    // bench_kv_cache.cpp
void add_attention_benches(std::vector<BenchEntry>& out);   // bench_attention.cpp
void add_sampling_benches(std::vector<BenchEntry>& out);    // bench_sampling.cpp
void add_gemm_benches(std::vector<BenchEntry>& out);        // bench_gemm.cpp
void add_gemm_fp8_benches(std::vector<BenchEntry>& out);    // bench_gemm_fp8.cpp
void add_moe_benches(std::vector<BenchEntry>& out);         // bench_moe.cpp
void add_empty_bench(std::vector<BenchEntry>& out);         // bench_harness.cpp
void add_embedding_benches(std::vector<BenchEntry>& out);   // bench_embedding.cpp
// bench_fused_quant.cpp
void add_fused_quant_benches(std::vector<BenchEntry>& out);
void add_rope_fused_benches(std::vector<BenchEntry>& out);  // bench_rope_fused.cpp

}  // namespace kjit::cli
