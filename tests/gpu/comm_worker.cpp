// One rank of the communication GPU tests (tests/gpu/comm_gpu_test.cpp starts `world` of them):
//   kjit_comm_worker MODE RANK WORLD DEVICE ID_HEX SEED
// MODE "ipc": NCCL off, every message on the one-shot kernel (the ranks may share one device);
// "auto": NCCL when the group can use it (ranks sharing a GPU cannot), small messages only;
// "nccl": NCCL required, one device per rank, and messages over the one-shot limit too.
// Every rank builds every rank's inputs from SEED, so it checks its own outputs against the fp64
// reference alone; it prints "digest <case> <hash of its output bytes>" for the parent to check
// that all ranks hold the same bits. Exit 0: every check passed; failures go to stderr.
#include <cuda.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "reference/comm_ref.hpp"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/comm_barrier.hpp"
#include "support/gpu.hpp"

namespace {

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
namespace ref = kjit::ref;

int g_failures = 0;
int g_rank = 0, g_world = 1, g_device = 0;
uint64_t g_seed = 1;

#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      ++g_failures;                                              \
      std::fprintf(stderr, "rank %d: FAIL %s: ", g_rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                         \
      std::fprintf(stderr, "\n");                                \
    }                                                            \
  } while (0)

void check_status(kjit_status s, const char* what) {
  if (s != KJIT_SUCCESS) {
    std::fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, what, kjit_status_string(s),
                 kjit_last_error());
    std::exit(2);
  }
}

// Device bytes on this rank's device.
struct Buf {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(n) {
    kjit::cuda::ScopedDevice s(g_device);
    KJIT_CU_CHECK(kjit::cuda::driver().cuMemAlloc(&p, n == 0 ? 1 : n));
  }
  ~Buf() {
    kjit::cuda::ScopedDevice s(g_device);
    kjit::cuda::driver().cuMemFree(p);
  }
  void* get() const { return reinterpret_cast<void*>(p); }
  void upload(const std::vector<unsigned char>& h) {
    kjit::cuda::ScopedDevice s(g_device);
    KJIT_CU_CHECK(kjit::cuda::driver().cuMemcpyHtoD(p, h.data(), h.size()));
    // A pageable upload may return before its DMA lands; g_stream does not wait for it.
    KJIT_CU_CHECK(kjit::cuda::driver().cuCtxSynchronize());
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> h(bytes);
    kjit::cuda::ScopedDevice s(g_device);
    KJIT_CU_CHECK(kjit::cuda::driver().cuCtxSynchronize());
    KJIT_CU_CHECK(kjit::cuda::driver().cuMemcpyDtoH(h.data(), p, bytes));
    return h;
  }
  void poison() {
    kjit::cuda::ScopedDevice s(g_device);
    KJIT_CU_CHECK(kjit::cuda::driver().cuMemsetD8(p, 0xFF, bytes));
    // The memset runs on the legacy stream, which g_stream (non-blocking) does not wait for.
    KJIT_CU_CHECK(kjit::cuda::driver().cuCtxSynchronize());
  }
};

// Host values of one dtype: doubles, and their bytes.
std::vector<unsigned char> to_bytes(const std::vector<double>& v, const std::string& dt) {
  std::vector<unsigned char> b(v.size() * ref::elem_size(dt));
  for (size_t i = 0; i < v.size(); ++i) ref::store_elem(b.data(), i, v[i], dt);
  return b;
}
std::vector<double> from_bytes(const std::vector<unsigned char>& b, size_t n,
                               const std::string& dt) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = ref::load_elem(b.data(), i, dt);
  return v;
}

// Rank s's input of case `tag`: integers in [-8, 8] (exact sums) or normal values rounded to dt.
std::vector<double> input(int s, size_t n, const std::string& dt, bool integers, int tag) {
  std::vector<double> v(n);
  if (integers) {
    for (size_t i = 0; i < n; ++i) v[i] = double((i * 7 + s * 3 + tag * 11) % 17) - 8.0;
    return v;
  }
  std::mt19937_64 rng(g_seed * 1000003 + tag * 131 + s);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (double& x : v) x = ref::round_elem(nd(rng), dt);
  return v;
}
std::vector<std::vector<double>> inputs(size_t n, const std::string& dt, bool integers, int tag) {
  std::vector<std::vector<double>> all;
  for (int s = 0; s < g_world; ++s) all.push_back(input(s, n, dt, integers, tag));
  return all;
}

uint64_t digest(const std::vector<unsigned char>& b) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : b) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// out against the sum of `all`: exact for integers, else one rounding of an fp32 sum.
void check_sum(const std::vector<double>& got, const std::vector<std::vector<double>>& all,
               const std::string& dt, bool integers, const char* what) {
  const std::vector<double> want = ref::all_reduce_sum(all);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double abs_sum = 0;
    for (const auto& x : all) abs_sum += std::fabs(x[i]);
    const double tol =
        integers ? 0.0 : ref::unit_roundoff(dt) * std::fabs(want[i]) + g_world * 1.2e-7 * abs_sum;
    if (!(std::fabs(got[i] - want[i]) <= tol)) {  // NaN fails
      if (bad++ < 5) {
        EXPECT(false, "%s [%zu]: got %g want %g (tol %g)", what, i, got[i], want[i], tol);
      }
    }
  }
  EXPECT(bad == 0, "%s: %d of %zu elements wrong", what, bad, want.size());
}

CUstream g_stream = nullptr;

void all_reduce_case(kjit_comm* comm, const std::string& dt, std::vector<int64_t> shape,
                     bool integers, bool in_place, int tag) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  const auto all = inputs(n, dt, integers, tag);
  Buf in(n * ref::elem_size(dt));
  Buf out_buf(n * ref::elem_size(dt));
  in.upload(to_bytes(all[g_rank], dt));
  Buf& out = in_place ? in : out_buf;
  if (!in_place) out.poison();
  auto tin = make_tensor(in.get(), shape, dl_dtype(dt), {}, g_device);
  auto tout = make_tensor(out.get(), shape, dl_dtype(dt), {}, g_device);
  check_status(kjit_all_reduce(comm, tin.get(), tout.get(), g_stream), "kjit_all_reduce");
  const auto bytes = out.download();
  const std::string what = "all_reduce " + dt + " tag " + std::to_string(tag) + " n " +
                           std::to_string(n) + (in_place ? " in place" : "");
  check_sum(from_bytes(bytes, n, dt), all, dt, integers, what.c_str());
  std::printf("digest %s %016llx\n", what.c_str(), (unsigned long long)digest(bytes));
}

void fused_case(kjit_comm* comm, const std::string& dt, int64_t rows, int64_t hidden,
                int64_t in_stride, bool integers, int tag) {
  const size_t n = size_t(rows * hidden);
  const size_t es = ref::elem_size(dt);
  const auto all = inputs(n, dt, integers, tag);
  // Residual and weight are the same on every rank (as in a TP decoder).
  std::vector<double> res = input(100, n, dt, integers, tag);
  std::vector<double> w = input(101, size_t(hidden), dt, false, tag);
  for (double& x : w) x = ref::round_elem(1.0 + 0.25 * x, dt);
  // in with a row stride: its rows sit in a larger buffer whose gaps hold NaN.
  std::vector<double> in_img(size_t(rows * in_stride), std::nan(""));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) in_img[r * in_stride + i] = all[g_rank][r * hidden + i];
  }
  Buf in(in_img.size() * es), rb(n * es), wb(size_t(hidden) * es), out(n * es);
  in.upload(to_bytes(in_img, dt));
  rb.upload(to_bytes(res, dt));
  wb.upload(to_bytes(w, dt));
  out.poison();
  auto tin = make_tensor(in.get(), {rows, hidden}, dl_dtype(dt), {in_stride, 1}, g_device);
  auto tres = make_tensor(rb.get(), {rows, hidden}, dl_dtype(dt), {}, g_device);
  auto tw = make_tensor(wb.get(), {hidden}, dl_dtype(dt), {}, g_device);
  auto tout = make_tensor(out.get(), {rows, hidden}, dl_dtype(dt), {}, g_device);
  const float eps = 1e-5f;
  check_status(
      kjit_all_reduce_add_rmsnorm(comm, tin.get(), tw.get(), tres.get(), tout.get(), eps, g_stream),
      "kjit_all_reduce_add_rmsnorm");
  const auto got_res = from_bytes(rb.download(), n, dt);
  const auto out_bytes = out.download();
  const auto got_out = from_bytes(out_bytes, n, dt);
  std::vector<double> want_res, want_out;
  ref::all_reduce_add_rmsnorm(all, res, w, rows, hidden, eps, dt, want_res, want_out);
  const std::string what = "fused " + dt + " tag " + std::to_string(tag) + " rows " +
                           std::to_string(rows) + " hidden " + std::to_string(hidden);
  // The residual: exact for integers; else within one unit of the dtype (the fp32 sum before
  // its rounding may differ from the exact one by fp32 rounding).
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double tol = integers ? 0.0 : 2 * ref::unit_roundoff(dt) * std::fabs(want_res[i]) + 1e-6;
    if (!(std::fabs(got_res[i] - want_res[i]) <= tol) && bad++ < 5) {
      EXPECT(false, "%s residual [%zu]: got %g want %g", what.c_str(), i, got_res[i], want_res[i]);
    }
  }
  EXPECT(bad == 0, "%s: %d residual elements wrong", what.c_str(), bad);
  // The norm, of the residual as the kernel stored it: one rounding.
  const auto want_norm = ref::rmsnorm(got_res, w, rows, hidden, eps);
  bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double tol = ref::one_rounding_tolerance(dt, want_norm[i]);
    if (!(std::fabs(got_out[i] - want_norm[i]) <= tol) && bad++ < 5) {
      EXPECT(false, "%s out [%zu]: got %g want %g", what.c_str(), i, got_out[i], want_norm[i]);
    }
  }
  EXPECT(bad == 0, "%s: %d out elements wrong", what.c_str(), bad);
  std::printf("digest %s %016llx\n", what.c_str(), (unsigned long long)digest(out_bytes));
}

// Back-to-back calls with no host synchronization in between, of sizes that change the grid
// (so the epochs and staging halves advance under a pipelined stream), each into its own output.
void pipelined_case(kjit_comm* comm) {
  const std::string dt = "bf16";
  const int64_t sizes[] = {4096, 64 * 4096, 7, 3 * 1001};
  constexpr int kCalls = 24;
  std::vector<std::unique_ptr<Buf>> ins, outs;
  std::vector<std::vector<std::vector<double>>> alls;
  for (int k = 0; k < kCalls; ++k) {
    const size_t n = size_t(sizes[k % 4]);
    alls.push_back(inputs(n, dt, true, 200 + k));
    ins.push_back(std::make_unique<Buf>(n * 2));
    outs.push_back(std::make_unique<Buf>(n * 2));
    ins.back()->upload(to_bytes(alls.back()[g_rank], dt));
    outs.back()->poison();
  }
  for (int k = 0; k < kCalls; ++k) {
    const int64_t n = sizes[k % 4];
    auto tin = make_tensor(ins[k]->get(), {n}, dl_dtype(dt), {}, g_device);
    auto tout = make_tensor(outs[k]->get(), {n}, dl_dtype(dt), {}, g_device);
    check_status(kjit_all_reduce(comm, tin.get(), tout.get(), g_stream), "pipelined all_reduce");
  }
  for (int k = 0; k < kCalls; ++k) {
    const std::string what = "pipelined call " + std::to_string(k);
    check_sum(from_bytes(outs[k]->download(), size_t(sizes[k % 4]), dt), alls[k], dt, true,
              what.c_str());
  }
}

// A captured all-reduce replayed with new inputs each time.
void graph_case(kjit_comm* comm) {
  const std::string dt = "bf16";
  const int64_t n = 64 * 4096;
  Buf in(n * 2), out(n * 2);
  auto tin = make_tensor(in.get(), {64, 4096}, dl_dtype(dt), {}, g_device);
  auto tout = make_tensor(out.get(), {64, 4096}, dl_dtype(dt), {}, g_device);
  in.upload(to_bytes(input(g_rank, n, dt, true, 300), dt));
  check_status(kjit_all_reduce(comm, tin.get(), tout.get(), g_stream), "warm-up");  // loads it
  const auto& d = kjit::cuda::driver();
  kjit::cuda::ScopedDevice s(g_device);
  KJIT_CU_CHECK(d.cuStreamSynchronize(g_stream));
  KJIT_CU_CHECK(d.cuStreamBeginCapture(g_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  const kjit_status st = kjit_all_reduce(comm, tin.get(), tout.get(), g_stream);
  CUgraph graph = nullptr;
  KJIT_CU_CHECK(d.cuStreamEndCapture(g_stream, &graph));
  check_status(st, "captured all_reduce");
  CUgraphExec exec = nullptr;
  KJIT_CU_CHECK(d.cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int it = 0; it < 4; ++it) {
    const auto all = inputs(size_t(n), dt, true, 301 + it);
    in.upload(to_bytes(all[g_rank], dt));
    out.poison();
    KJIT_CU_CHECK(d.cuGraphLaunch(exec, g_stream));
    KJIT_CU_CHECK(d.cuStreamSynchronize(g_stream));
    const std::string what = "graph replay " + std::to_string(it);
    check_sum(from_bytes(out.download(), size_t(n), dt), all, dt, true, what.c_str());
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s ipc|auto|nccl RANK WORLD DEVICE ID_HEX SEED\n", argv[0]);
    return 2;
  }
  // A rank that fails leaves the others spinning in a kernel for an arrival that never comes:
  // every rank ends itself after this long, so a broken run fails instead of hanging the suite.
  alarm(300);
  // Whole lines on stdout, so a digest line is never split by a failure written to stderr (the
  // parent reads both through one pipe).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argv[1];
  g_rank = std::atoi(argv[2]);
  g_world = std::atoi(argv[3]);
  g_device = std::atoi(argv[4]);
  const std::string hex = argv[5];
  g_seed = std::strtoull(argv[6], nullptr, 10);
  kjit_comm_id id{};
  if (hex.size() != 2 * sizeof id.bytes) return 2;
  for (size_t i = 0; i < sizeof id.bytes; ++i) {
    id.bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  kjit_comm_options o;
  kjit_comm_options_init(&o);
  o.nccl = mode == "nccl" ? KJIT_COMM_NCCL_REQUIRED
                          : (mode == "auto" ? KJIT_COMM_NCCL_AUTO : KJIT_COMM_NCCL_OFF);
  o.timeout_ms = 120000;
  kjit_comm* comm = nullptr;
  check_status(kjit_comm_init(&id, g_rank, g_world, g_device, &o, &comm), "kjit_comm_init");
  {
    kjit::cuda::ScopedDevice s(g_device);
    KJIT_CU_CHECK(kjit::cuda::driver().cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING));
  }

  int tag = 0;
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    for (bool integers : {true, false}) {
      all_reduce_case(comm, dt, {1, 4096}, integers, false, ++tag);
      all_reduce_case(comm, dt, {64, 4096}, integers, false, ++tag);
      all_reduce_case(comm, dt, {3, 1001}, integers, false, ++tag);  // odd: scalar vectors
      all_reduce_case(comm, dt, {7}, integers, true, ++tag);         // in place
      fused_case(comm, dt, 1, 4096, 4096, integers, ++tag);
      fused_case(comm, dt, 64, 4096, 4096 + 64, integers, ++tag);  // strided in
      fused_case(comm, dt, 5, 1001, 1001, integers, ++tag);
    }
  }
  pipelined_case(comm);
  graph_case(comm);
  if (mode == "nccl" || g_world == 1) {
    // Over the one-shot limit: NCCL's all-reduce (a group of one: a copy), then the unfused norm.
    all_reduce_case(comm, "bf16", {1024, 4096}, true, false, ++tag);
    all_reduce_case(comm, "fp32", {5, 1 << 20}, false, false, ++tag);
    fused_case(comm, "bf16", 512, 4096, 4096, true, ++tag);
  }

  // Every rank's work is done before any rank frees its region (the others read it).
  {
    kjit::cuda::ScopedDevice s(g_device);
    KJIT_CU_CHECK(kjit::cuda::driver().cuStreamSynchronize(g_stream));
  }
  kjit::test::comm_barrier(id, g_rank, g_world);
  kjit_comm_destroy(comm);
  std::fprintf(stderr, "rank %d: %d failures\n", g_rank, g_failures);
  return g_failures == 0 ? 0 : 1;
}
