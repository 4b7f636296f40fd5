// An engine's warm-up and graph capture: a call that would compile or load a module while its
// stream captures refuses with KJIT_ERROR_CAPTURING and leaves the capture intact; after
// kjit_precompile the same call captures, and the replayed graph computes what an eager call does;
// after kjit_precompile_file of a workload, the calls its lines describe capture too.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "support/temp_dir.hpp"

using namespace kjit::test;

TEST_CASE("engine gpu: a cold load under capture is refused, a precompiled one captures",
          "[gpu][api]") {
  const auto& d = kjit::cuda::driver();
  // A hidden size no other test uses, so the specialization is certainly not loaded yet.
  const int64_t rows = 3, hidden = 4093;
  const size_t n = static_cast<size_t>(rows * hidden);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<unsigned char> x_h(n * 2), w_h(static_cast<size_t>(hidden) * 2);
  for (size_t i = 0; i < n; ++i) kjit::ref::store_elem(x_h.data(), i, u(rng), "bf16");
  for (int64_t i = 0; i < hidden; ++i) kjit::ref::store_elem(w_h.data(), i, u(rng), "bf16");
  DeviceBuffer x(n * 2), w(w_h.size()), y(n * 2), y_eager(n * 2);
  x.upload(x_h.data(), x_h.size());
  w.upload(w_h.data(), w_h.size());
  const DLDataType bf16 = dl_dtype("bf16");
  Tensor xt = make_tensor(x.get(), {rows, hidden}, bf16);
  Tensor wt = make_tensor(w.get(), {hidden}, bf16);
  Tensor yt = make_tensor(y.get(), {rows, hidden}, bf16);
  Tensor et = make_tensor(y_eager.get(), {rows, hidden}, bf16);

  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  auto capture = [&](kjit_status* status) {
    CUgraph g = nullptr;
    REQUIRE(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    *status = kjit_rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, s);
    const CUresult end = d.cuStreamEndCapture(s, &g);
    CHECK(end == CUDA_SUCCESS);  // the capture was not invalidated
    return g;
  };

  kjit_status st = KJIT_SUCCESS;
  CUgraph g = capture(&st);
  CHECK(st == KJIT_ERROR_CAPTURING);
  CHECK(std::string(kjit_last_error()).find("kjit_precompile") != std::string::npos);
  if (g != nullptr) d.cuGraphDestroy(g);

  const std::string params =
      "dtype=bf16,hidden=" + std::to_string(hidden) + ",rows=" + std::to_string(rows);
  REQUIRE(kjit_precompile("rmsnorm", params.c_str(), 0) == KJIT_SUCCESS);
  y.fill(0xFF);
  g = capture(&st);
  REQUIRE(st == KJIT_SUCCESS);
  REQUIRE(g != nullptr);
  CUgraphExec exec = nullptr;
  REQUIRE(d.cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS);
  REQUIRE(d.cuGraphLaunch(exec, s) == CUDA_SUCCESS);
  REQUIRE(d.cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), et.get(), 1e-6f, s) == KJIT_SUCCESS);
  REQUIRE(d.cuStreamSynchronize(s) == CUDA_SUCCESS);
  std::vector<unsigned char> got(n * 2), want(n * 2);
  y.download(got.data(), got.size());
  y_eager.download(want.data(), want.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size()) == 0);  // same kernel, same bits
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(g);
  d.cuStreamDestroy(s);
}

TEST_CASE("engine gpu: kjit_precompile_file loads a workload's specs, whose calls then capture",
          "[gpu][api]") {
  const auto& d = kjit::cuda::driver();
  // Lines of definitions kjit has built in (nothing beside the temp file): a decode-size RMSNorm,
  // and argmax over Llama 3's vocabulary (one block a row, and the sm_90 cluster sizes, which an
  // older device skips).
  TempDir dir;
  const std::string file = (dir.path() / "warm.jsonl").string();
  std::ofstream(file)
      << "{\"definition\": \"rmsnorm_h5120\", \"axes\": {\"batch_size\": 3}}\n"
      << "{\"definition\": \"argmax_v128256_fp32\", \"axes\": {\"batch_size\": 1}}\n";
  kjit_precompile_counts n;
  n.struct_size = sizeof n;
  REQUIRE(kjit_precompile_file(file.c_str(), 0, &n) == KJIT_SUCCESS);
  CHECK(n.compiled + n.cached + n.skipped == 5);
  CHECK(n.failed == 0);
  const int loaded = n.compiled + n.cached;
  CHECK(loaded >= 2);
  // Loaded now: a second warm-up finds every one of them.
  REQUIRE(kjit_precompile_file(file.c_str(), 0, &n) == KJIT_SUCCESS);
  CHECK(n.compiled == 0);
  CHECK(n.cached == loaded);

  const int64_t rows = 3, hidden = 5120;
  DeviceBuffer x(static_cast<size_t>(rows * hidden) * 2), w(static_cast<size_t>(hidden) * 2);
  x.fill(0);
  w.fill(0);
  const DLDataType bf16 = dl_dtype("bf16");
  Tensor xt = make_tensor(x.get(), {rows, hidden}, bf16);
  Tensor wt = make_tensor(w.get(), {hidden}, bf16);
  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUgraph g = nullptr;
  REQUIRE(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  const kjit_status st = kjit_rmsnorm(xt.get(), wt.get(), xt.get(), 1e-6f, s);
  CHECK(d.cuStreamEndCapture(s, &g) == CUDA_SUCCESS);
  INFO(kjit_last_error());
  CHECK(st == KJIT_SUCCESS);  // not KJIT_ERROR_CAPTURING: the line's spec was loaded
  if (g != nullptr) d.cuGraphDestroy(g);
  d.cuStreamDestroy(s);
}

TEST_CASE("engine gpu: kjit_op_supported with no arch asks the devices here", "[gpu][api]") {
  CHECK(kjit_op_supported("rmsnorm", "dtype=bf16,hidden=4096", nullptr) == KJIT_SUCCESS);
  CHECK(kjit_op_supported("rmsnorm", "dtype=int8,hidden=4096", nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
}
