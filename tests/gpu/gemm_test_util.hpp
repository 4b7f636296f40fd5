// What the GEMM GPU tests share: random e4m3 codes, the output check (every element of out
// against the fp64 reference on the operands as the reference sees them: bf16 / fp16 values, or
// e4m3 values times their scales; the NaN poison between strided rows left alone), and the
// eager-then-graph rounds of the weights_early cases.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/driver.hpp"
#include "runtime/jit_core.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "support/parallel_rows.hpp"

namespace kjit::test {

// The URIs of the kernels the calls in its scope run on this thread, as the API call log sees
// them (KJIT_LOG_LEVEL=3 prints them as "kernel: <uri>").
struct KernelUris : kjit::jit::KernelObserver {
  std::vector<std::string> uris;
  kjit::jit::ScopedKernelObserver scope{this};
  void on_kernel(const kjit::jit::LoadedKernel& k) noexcept override { uris.push_back(k.uri); }
};

// Runs `call` and checks whether the last kernel it ran takes the sm90 tiles' TMA-store epilogue
// (the URI flag tma_out), as `want` says.
template <class Call>
void check_tma_out(Call call, bool want) {
  KernelUris seen;
  call();
  REQUIRE_FALSE(seen.uris.empty());
  INFO(seen.uris.back());
  CHECK((seen.uris.back().find("_tma_out_1") != std::string::npos) == want);
}

// An fp16 out past its range rounds to infinity (65520 and up round away from 65504). An
// infinity is right where the interval want +- tol reaches 65520 on its side: either side where
// tol exceeds |want| (a SwiGLU output over 2^10-apart block scales: a tiny want whose gate's fp32
// sum may land far above it). A finite value is wrong where all of the interval lies past 65520.
inline bool fp16_infinity_ok(double got, double want, double tol) {
  return std::isinf(got) && (got > 0 ? want + tol >= 65520.0 : want - tol <= -65520.0);
}
inline bool fp16_must_overflow(double want, double tol) {
  return std::fabs(want) - tol >= 65520.0;
}

// A random e4m3 code of magnitude 2^-3 .. 2^3 (exponent field 4 .. 10), never NaN.
inline uint8_t random_e4m3_code(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> bits(0, 255), exp(4, 10);
  const int r = bits(rng);
  return static_cast<uint8_t>((r & 0x80) | exp(rng) << 3 | (r & 7));
}

struct GemmOut {
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1.0, beta = 0.0;
  int64_t row_stride = 0;  // out's, elements
  std::string dtype;
  const std::vector<unsigned char>* got = nullptr;  // out after the call
  const std::vector<unsigned char>* old = nullptr;  // out before it (read where beta != 0)
};

// a_row(r, dst) writes row r of a (k values); b is [n, k]; bias [n] or empty; tolerance(want,
// sum_abs), or tolerance(r, j, want, sum_abs) where the bound depends on the operands, is the
// error allowed for one output. Returns the largest |got - want| / tolerance. The rows run on
// every core (parallel_rows): a_row and tolerance are called from several threads at once.
template <class ARow, class Tolerance>
double check_gemm_out(const GemmOut& o, ARow a_row, const std::vector<double>& b,
                      const std::vector<double>& bias, Tolerance tolerance) {
  std::vector<std::vector<double>> rows(static_cast<size_t>(reference_workers()),
                                        std::vector<double>(static_cast<size_t>(o.k)));
  const RowTally t = tally_rows(o.m, [&](int64_t r, RowTally& t, int w) {
    double* a = rows[static_cast<size_t>(w)].data();
    a_row(r, a);
    for (int64_t j = 0; j < o.n; ++j) {
      const size_t at = static_cast<size_t>(r * o.row_stride + j);
      const double old = o.beta != 0.0 ? ref::load_elem(o.old->data(), at, o.dtype) : 0.0;
      double sum_abs = 0.0;
      const double want = ref::gemm_element(a, b.data() + j * o.k, o.k, o.alpha, o.beta, old,
                                            bias.empty() ? 0.0 : bias[j], &sum_abs);
      const double got = ref::load_elem(o.got->data(), at, o.dtype);
      double tol = 0.0;
      if constexpr (std::is_invocable_v<Tolerance, int64_t, int64_t, double, double>) {
        tol = tolerance(r, j, want, sum_abs);
      } else {
        tol = tolerance(want, sum_abs);
      }
      tol += ref::underflow_slack(ref::unit_roundoff(o.dtype));  // the store's own rounding
      const bool must_overflow = o.dtype == "fp16" && fp16_must_overflow(want, tol);
      const bool overflowed = o.dtype == "fp16" && fp16_infinity_ok(got, want, tol);
      const bool ok = overflowed || (!must_overflow && std::fabs(got - want) <= tol);  // NaN fails
      if (!overflowed)
        t.worst = std::max(t.worst, std::isnan(got) ? INFINITY : std::fabs(got - want) / tol);
      if (!ok) {
        t.miss(r, [&] {
          std::ostringstream m;
          m << "row " << r << " col " << j << " got " << got << " want " << want << " tol " << tol;
          return m.str();
        });
      }
    }
    // The gap between strided out rows keeps the poison.
    for (int64_t j = o.n; r + 1 < o.m && j < o.row_stride; ++j) {
      t.touched += !std::isnan(
          ref::load_elem(o.got->data(), static_cast<size_t>(r * o.row_stride + j), o.dtype));
    }
  });
  for (const auto& m : t.misses) UNSCOPED_INFO(m.second);
  CHECK(t.bad == 0);
  CHECK(t.touched == 0);
  return t.worst;
}

// Three rounds of the work `enqueue` puts on stream s: round 0 eagerly, rounds 1 and 2 as replays
// of a graph captured (once) after round 0. prepare(round) comes before each round (new inputs,
// poisoned outputs), check(round) after its stream synchronization.
template <class Prepare, class Enqueue, class Check>
void eager_then_graph_rounds(CUstream s, Prepare prepare, Enqueue enqueue, Check check) {
  const auto& d = kjit::cuda::driver();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    prepare(round);
    if (round == 0) {
      enqueue();
    } else {
      if (exec == nullptr) {
        REQUIRE(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
        enqueue();
        REQUIRE(d.cuStreamEndCapture(s, &graph) == CUDA_SUCCESS);
        REQUIRE(d.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
      }
      REQUIRE(d.cuGraphLaunch(exec, s) == CUDA_SUCCESS);
    }
    REQUIRE(d.cuStreamSynchronize(s) == CUDA_SUCCESS);
    check(round);
  }
  if (exec != nullptr) d.cuGraphExecDestroy(exec);
  if (graph != nullptr) d.cuGraphDestroy(graph);
}

}  // namespace kjit::test
