// kjit-comm-bench: kjit_all_reduce, kjit_all_reduce_add_rmsnorm and NCCL's ncclAllReduce on the
// same messages, one process per rank (this binary starts them: --ranks N, one GPU each, or all
// on GPU 0 with --same-device, where NCCL cannot run and the times measure the driver's
// time-slicing, not the kernels). Rank 0 prints one JSON line per row:
//   {"op", "rows", "hidden", "dtype", "bytes", "ranks", "kjit_us", "fused_us", "nccl_us",
//    "speedup_vs_nccl", "fused_vs_unfused"}
// Each time is CUDA events around `iters` back-to-back calls on one stream (the calls are
// collective, so ranks pace each other), divided by iters, after `warmup` calls.
#include <cuda.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/nccl.hpp"
#include "kjit/kjit.h"
#include "ops/comm/communicator.hpp"
#include "support/comm_barrier.hpp"
#include "support/gpu.hpp"

extern char** environ;

namespace {

using kjit::test::dl_dtype;
using kjit::test::make_tensor;

struct Args {
  int ranks = 2;
  int rank = -1;  // -1: the launcher
  bool same_device = false;
  int iters = 200;
  int warmup = 20;
  std::string id_hex;
};

std::string to_hex(const kjit_comm_id& id) {
  std::string s;
  char b[3];
  for (char c : id.bytes) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    s += b;
  }
  return s;
}

void check(kjit_status s, const char* what) {
  if (s == KJIT_SUCCESS) return;
  std::fprintf(stderr, "%s: %s: %s\n", what, kjit_status_string(s), kjit_last_error());
  std::exit(1);
}

int launch(const Args& a, const char* self) {
  kjit_comm_id id;
  if (a.same_device) {
    kjit::ops::make_kjit_comm_id(&id);
  } else {
    check(kjit_comm_get_unique_id(&id), "kjit_comm_get_unique_id");
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    std::vector<std::string> argv_s = {
        self,       "--rank",  std::to_string(r),      "--ranks", std::to_string(a.ranks), "--id",
        to_hex(id), "--iters", std::to_string(a.iters)};
    if (a.same_device) argv_s.push_back("--same-device");
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) != 0) {
      std::perror("posix_spawn");
      return 1;
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed == 0 ? 0 : 1;
}

struct Timer {
  CUevent start = nullptr, stop = nullptr;
  Timer() {
    KJIT_CU_CHECK(kjit::cuda::driver().cuEventCreate(&start, CU_EVENT_DEFAULT));
    KJIT_CU_CHECK(kjit::cuda::driver().cuEventCreate(&stop, CU_EVENT_DEFAULT));
  }
  // Microseconds per call of f over iters calls, after warmup calls.
  template <typename F>
  double time(CUstream s, int warmup, int iters, F&& f) {
    const auto& d = kjit::cuda::driver();
    for (int i = 0; i < warmup; ++i) f();
    KJIT_CU_CHECK(d.cuEventRecord(start, s));
    for (int i = 0; i < iters; ++i) f();
    KJIT_CU_CHECK(d.cuEventRecord(stop, s));
    KJIT_CU_CHECK(d.cuEventSynchronize(stop));
    float ms = 0;
    KJIT_CU_CHECK(d.cuEventElapsedTime(&ms, start, stop));
    return 1000.0 * ms / iters;
  }
};

int run_rank(const Args& a) {
  kjit_comm_id id{};
  for (size_t i = 0; i < sizeof id.bytes; ++i) {
    id.bytes[i] = static_cast<char>(std::stoi(a.id_hex.substr(2 * i, 2), nullptr, 16));
  }
  const int device = a.same_device ? 0 : a.rank;
  kjit_comm_options o;
  kjit_comm_options_init(&o);
  o.nccl = a.same_device ? KJIT_COMM_NCCL_OFF : KJIT_COMM_NCCL_AUTO;
  kjit_comm* comm = nullptr;
  check(kjit_comm_init(&id, a.rank, a.ranks, device, &o, &comm), "kjit_comm_init");
  kjit::cuda::ScopedDevice scope(device);
  const auto& d = kjit::cuda::driver();
  CUstream stream = nullptr;
  KJIT_CU_CHECK(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  Timer timer;

  struct Row {
    int64_t rows, hidden;
  };
  // The decode rows (1 x 4096, 64 x 4096 bf16) and a 64 MiB message (NCCL's path).
  const Row rows[] = {{1, 4096}, {64, 4096}, {8192, 4096}};
  for (const Row& row : rows) {
    const size_t n = size_t(row.rows * row.hidden);
    const size_t bytes = n * 2;
    if (bytes > o.small_max_bytes && comm->nccl == nullptr && a.ranks > 1) continue;
    CUdeviceptr in = 0, out = 0, res = 0, w = 0;
    KJIT_CU_CHECK(d.cuMemAlloc(&in, bytes));
    KJIT_CU_CHECK(d.cuMemAlloc(&out, bytes));
    KJIT_CU_CHECK(d.cuMemAlloc(&res, bytes));
    KJIT_CU_CHECK(d.cuMemAlloc(&w, size_t(row.hidden) * 2));
    KJIT_CU_CHECK(d.cuMemsetD8(in, 0, bytes));  // zeros: sums stay finite over any iterations
    KJIT_CU_CHECK(d.cuMemsetD8(res, 0, bytes));
    KJIT_CU_CHECK(d.cuMemsetD8(w, 0, size_t(row.hidden) * 2));
    auto t = [&](CUdeviceptr p, std::vector<int64_t> shape) {
      return make_tensor(reinterpret_cast<void*>(p), std::move(shape), dl_dtype("bf16"), {},
                         device);
    };
    auto tin = t(in, {row.rows, row.hidden}), tout = t(out, {row.rows, row.hidden});
    auto tres = t(res, {row.rows, row.hidden}), tw = t(w, {row.hidden});
    const double kjit_us = timer.time(stream, a.warmup, a.iters, [&] {
      check(kjit_all_reduce(comm, tin.get(), tout.get(), stream), "kjit_all_reduce");
    });
    const double fused_us = timer.time(stream, a.warmup, a.iters, [&] {
      check(kjit_all_reduce_add_rmsnorm(comm, tin.get(), tw.get(), tres.get(), tout.get(), 1e-6f,
                                        stream),
            "kjit_all_reduce_add_rmsnorm");
    });
    double nccl_us = -1;
    if (comm->nccl != nullptr) {
      const auto& nccl = kjit::cuda::nccl();
      nccl_us = timer.time(stream, a.warmup, a.iters, [&] {
        kjit::cuda::nccl_check(
            nccl.ncclAllReduce(reinterpret_cast<void*>(in), reinterpret_cast<void*>(out), n,
                               kjit::cuda::kNcclBfloat16, kjit::cuda::kNcclSum,
                               static_cast<kjit::cuda::NcclComm>(comm->nccl), stream),
            "ncclAllReduce");
      });
    }
    if (a.rank == 0) {
      std::printf(
          "{\"op\": \"all_reduce\", \"rows\": %lld, \"hidden\": %lld, \"dtype\": \"bf16\", "
          "\"bytes\": %zu, \"ranks\": %d, \"same_device\": %s, \"kjit_us\": %.2f, \"fused_us\": "
          "%.2f, \"nccl_us\": %.2f, \"speedup_vs_nccl\": %.3f, \"fused_vs_unfused\": %.3f}\n",
          static_cast<long long>(row.rows), static_cast<long long>(row.hidden), bytes, a.ranks,
          a.same_device ? "true" : "false", kjit_us, fused_us, nccl_us,
          nccl_us > 0 ? nccl_us / kjit_us : 0.0, fused_us / kjit_us);
      std::fflush(stdout);
    }
    KJIT_CU_CHECK(d.cuStreamSynchronize(stream));
    d.cuMemFree(in);
    d.cuMemFree(out);
    d.cuMemFree(res);
    d.cuMemFree(w);
  }
  // kjit_comm_destroy is collective: every rank's work is done before any frees its region.
  kjit::test::comm_barrier(id, a.rank, a.ranks);
  kjit_comm_destroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--ranks") {
      a.ranks = std::atoi(next().c_str());
    } else if (s == "--rank") {
      a.rank = std::atoi(next().c_str());
    } else if (s == "--same-device") {
      a.same_device = true;
    } else if (s == "--iters") {
      a.iters = std::atoi(next().c_str());
    } else if (s == "--id") {
      a.id_hex = next();
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ranks N (2)] [--same-device] [--iters N (200)]\n"
                   "  starts N ranks, one per GPU (--same-device: all on GPU 0, no NCCL)\n",
                   argv[0]);
      return 2;
    }
  }
  if (a.ranks < 1 || a.ranks > 8 || a.iters < 1) return 2;
  if (a.rank < 0) return launch(a, "/proc/self/exe");
  return run_rank(a);
}
