// Runs a host reference over rows on every core: the GPU tests' fp64 references (GEMM, grouped
// GEMM) take minutes on one core at their larger shapes, and a GPU machine has 16 or more.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kjit::test {

// The worker count parallel_rows uses: the machine's cores, at most 32, at least 1.
inline int reference_workers() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 32u));
}

// Calls f(row, worker) once for each row in [0, rows), from reference_workers() threads taking
// rows in blocks of 8 (worker in [0, reference_workers()): an index for per-worker state). f must
// not use Catch2's macros (they are not thread-safe): collect what to report, report after.
template <class F>
void parallel_rows(int64_t rows, F f) {
  const int workers = static_cast<int>(std::min<int64_t>(reference_workers(), (rows + 7) / 8));
  if (workers <= 1) {
    for (int64_t r = 0; r < rows; ++r) f(r, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (int64_t r0; (r0 = next.fetch_add(8)) < rows;) {
        for (int64_t r = r0; r < std::min(r0 + 8, rows); ++r) f(r, w);
      }
    });
  }
  for (std::thread& t : pool) t.join();
}

// What a row check found: wrong outputs (bad) with the messages of the first 5, outputs written
// that must have kept their poison (touched), and the largest |error| / bound.
struct RowTally {
  long bad = 0, touched = 0;
  double worst = 0.0;
  std::vector<std::pair<int64_t, std::string>> misses;  // (row, message)

  // One wrong output of `row`; message() is called for the first 5 only.
  template <class Message>
  void miss(int64_t row, Message message) {
    if (bad++ < 5) misses.emplace_back(row, message());
  }
};

// Calls f(row, tally, worker) for each row in [0, rows) through parallel_rows, each worker with
// its own tally (worker: an index for per-worker buffers), and merges them: counts summed, worst
// the largest, the first 5 messages by row.
template <class F>
RowTally tally_rows(int64_t rows, F f) {
  std::vector<RowTally> tallies(static_cast<size_t>(reference_workers()));
  parallel_rows(rows, [&](int64_t r, int w) { f(r, tallies[static_cast<size_t>(w)], w); });
  RowTally all;
  for (RowTally& t : tallies) {
    all.bad += t.bad;
    all.touched += t.touched;
    all.worst = std::max(all.worst, t.worst);
    for (auto& m : t.misses) all.misses.push_back(std::move(m));
  }
  // A worker's rows only increase, so its first 5 hold every one of the first 5 overall it has.
  std::stable_sort(all.misses.begin(), all.misses.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  if (all.misses.size() > 5) all.misses.resize(5);
  return all;
}

}  // namespace kjit::test
