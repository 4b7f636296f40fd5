// kjit_rmsnorm on the GPU against the fp64 CPU reference, on fresh random inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct Case {
  std::string dtype;
  int64_t rows;
  int64_t hidden;
  int64_t in_stride = 0;    // 0 = compact
  int64_t out_stride = 0;   // 0 = compact
  size_t offset_elems = 0;  // start the views this many elements into the buffers (misalignment)
  bool in_place = false;
  float eps = 1e-6f;
};

std::string describe(const Case& c) {
  return c.dtype + " rows=" + std::to_string(c.rows) + " hidden=" + std::to_string(c.hidden) +
         " in_stride=" + std::to_string(c.in_stride) +
         " out_stride=" + std::to_string(c.out_stride) +
         " offset=" + std::to_string(c.offset_elems) + (c.in_place ? " in-place" : "");
}

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const size_t es = ref::elem_size(c.dtype);
  const int64_t is = c.in_stride ? c.in_stride : c.hidden;
  const int64_t os = c.in_place ? is : (c.out_stride ? c.out_stride : c.hidden);
  const size_t in_elems = c.offset_elems + static_cast<size_t>((c.rows - 1) * is + c.hidden);
  const size_t out_elems = c.offset_elems + static_cast<size_t>((c.rows - 1) * os + c.hidden);

  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  // Host images of the buffers, gaps included; the gaps get random values too so a kernel that
  // reads them would show.
  std::vector<unsigned char> in_host(in_elems * es), w_host(static_cast<size_t>(c.hidden) * es);
  for (size_t i = 0; i < in_elems; ++i) ref::store_elem(in_host.data(), i, dist(rng), c.dtype);
  for (int64_t i = 0; i < c.hidden; ++i) ref::store_elem(w_host.data(), i, dist(rng), c.dtype);
  // The reference reads the same rounded values the GPU reads.
  std::vector<double> x(static_cast<size_t>(c.rows * c.hidden)), w(static_cast<size_t>(c.hidden));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t i = 0; i < c.hidden; ++i) {
      x[r * c.hidden + i] = ref::load_elem(in_host.data(), c.offset_elems + r * is + i, c.dtype);
    }
  }
  for (int64_t i = 0; i < c.hidden; ++i) w[i] = ref::load_elem(w_host.data(), i, c.dtype);
  std::vector<double> y = ref::rmsnorm(x, w, c.rows, c.hidden, c.eps);

  DeviceBuffer in_dev(in_host.size()), w_dev(w_host.size());
  in_dev.upload(in_host.data(), in_host.size());
  w_dev.upload(w_host.data(), w_host.size());
  DeviceBuffer out_dev(c.in_place ? 1 : out_elems * es);
  if (!c.in_place) out_dev.fill(0xFF);  // poison: NaN in every float format

  char* in_ptr = static_cast<char*>(in_dev.get()) + c.offset_elems * es;
  char* out_ptr = c.in_place ? in_ptr : static_cast<char*>(out_dev.get()) + c.offset_elems * es;
  auto in_t = make_tensor(in_ptr, {c.rows, c.hidden}, dl_dtype(c.dtype), {is, 1});
  auto out_t = make_tensor(out_ptr, {c.rows, c.hidden}, dl_dtype(c.dtype), {os, 1});
  auto w_t = make_tensor(w_dev.get(), {c.hidden}, dl_dtype(c.dtype));
  kjit_status st = kjit_rmsnorm(in_t.get(), w_t.get(), out_t.get(), c.eps, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();

  std::vector<unsigned char> out_host(out_elems * es);
  (c.in_place ? in_dev : out_dev).download(out_host.data(), out_host.size());
  double max_err = 0;
  long bad = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t i = 0; i < c.hidden; ++i) {
      double got = ref::load_elem(out_host.data(), c.offset_elems + r * os + i, c.dtype);
      double want = y[r * c.hidden + i];
      double err = std::fabs(got - want);
      // One rounding to the output type (half an ulp) plus fp32 slack, as for the other norms:
      // a kernel that rounds x * rsqrt to the output type before the weight multiply is off by
      // up to a whole ulp and fails (reference_test.cpp simulates it).
      double tol = ref::one_rounding_tolerance(c.dtype, want);
      if (!(err <= tol)) {  // NaN fails too
        if (bad++ < 5)
          UNSCOPED_INFO("row " << r << " col " << i << " got " << got << " want " << want);
      }
      if (err > max_err || std::isnan(err)) max_err = err;
    }
  }
  CHECK(bad == 0);
  // Gaps between strided output rows must keep the poison: the kernel writes only the view.
  if (!c.in_place && os > c.hidden) {
    long touched = 0;
    for (int64_t r = 0; r + 1 < c.rows; ++r) {
      for (int64_t i = c.hidden; i < os; ++i) {
        touched +=
            !std::isnan(ref::load_elem(out_host.data(), c.offset_elems + r * os + i, c.dtype));
      }
    }
    CHECK(touched == 0);
  }
}

}  // namespace

TEST_CASE("rmsnorm gpu: every dtype and many hidden sizes, odd ones included", "[gpu][rmsnorm]") {
  std::mt19937_64 rng(std::random_device{}());
  // Up to 256 rows the weight is read before the PDL wait (the EARLY_PARAMS variant); 257 rows
  // take the default kernel.
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    for (int64_t hidden : {1, 7, 127, 128, 1000, 2048, 4096, 4097, 5120, 8192, 16384, 65537}) {
      for (int64_t rows : {1, 3, 67, 256, 257}) run_case({dt, rows, hidden}, rng);
    }
  }
}

TEST_CASE("rmsnorm gpu: batch sizes 1..16384", "[gpu][rmsnorm]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t rows : {1, 2, 15, 64, 1000, 4096, 16384}) run_case({"bf16", rows, 4096}, rng);
  run_case({"fp16", 16384, 2048}, rng);
  run_case({"fp32", 16384, 1024}, rng);
}

TEST_CASE("rmsnorm gpu: strided rows, misaligned views and in-place", "[gpu][rmsnorm]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    run_case({dt, 33, 4096, 4096 + 64, 4096 + 8}, rng);  // row-strided views, aligned
    run_case({dt, 33, 4096, 4099, 4101}, rng);           // strides that break 16-byte alignment
    run_case({dt, 17, 2048, 0, 0, 1}, rng);              // base pointer off by one element
    run_case({dt, 17, 2048, 0, 0, 0, true}, rng);        // out == input
    run_case({dt, 5, 333, 0, 0, 3, true}, rng);          // in-place, odd and misaligned
  }
  run_case({"bf16", 8, 4096, 0, 0, 0, false, 1.0f}, rng);  // large eps
  run_case({"bf16", 8, 4096, 0, 0, 0, false, 0.0f}, rng);  // zero eps
}

TEST_CASE("rmsnorm gpu: runs on a user stream and is repeatable", "[gpu][rmsnorm]") {
  const auto& d = kjit::cuda::driver();
  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const int64_t rows = 128, hidden = 4096;
  std::vector<uint16_t> xh(rows * hidden), wh(hidden);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (auto& v : xh) v = ref::float_to_bf16(dist(rng));
  for (auto& v : wh) v = ref::float_to_bf16(dist(rng));
  DeviceBuffer x(xh.size() * 2), w(wh.size() * 2), y1(xh.size() * 2), y2(xh.size() * 2);
  x.upload(xh.data(), xh.size() * 2);
  w.upload(wh.data(), wh.size() * 2);
  y1.fill(0xFF);
  y2.fill(0xFF);
  auto xt = make_tensor(x.get(), {rows, hidden}, dl_dtype("bf16"));
  auto wt = make_tensor(w.get(), {hidden}, dl_dtype("bf16"));
  auto y1t = make_tensor(y1.get(), {rows, hidden}, dl_dtype("bf16"));
  auto y2t = make_tensor(y2.get(), {rows, hidden}, dl_dtype("bf16"));
  REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), y1t.get(), 1e-5f, s) == KJIT_SUCCESS);
  REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), y2t.get(), 1e-5f, s) == KJIT_SUCCESS);
  REQUIRE(d.cuStreamSynchronize(s) == CUDA_SUCCESS);
  std::vector<uint16_t> a(xh.size()), b(xh.size());
  y1.download(a.data(), a.size() * 2);
  y2.download(b.data(), b.size() * 2);
  CHECK(a == b);  // deterministic
  CHECK(std::memcmp(a.data(), xh.data(), 16) != 0);
  d.cuStreamDestroy(s);
}

TEST_CASE("rmsnorm gpu: a device id that does not exist is an argument error", "[gpu][rmsnorm]") {
  // Distinct buffers, so the device id is the only thing wrong with the call.
  DeviceBuffer xb(256), wb(128), yb(256);
  auto x = make_tensor(xb.get(), {2, 64}, dl_dtype("bf16"), {}, 63);
  auto w = make_tensor(wb.get(), {64}, dl_dtype("bf16"), {}, 63);
  auto y = make_tensor(yb.get(), {2, 64}, dl_dtype("bf16"), {}, 63);
  CHECK(kjit_rmsnorm(x.get(), w.get(), y.get(), 1e-6f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
}
