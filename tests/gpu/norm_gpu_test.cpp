// kjit_gemma_rmsnorm, kjit_fused_add_rmsnorm (+ Gemma) and kjit_layernorm on the GPU against the
// fp64 CPU references, on fresh random inputs. (kjit_rmsnorm: rmsnorm_gpu_test.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "gpu/norm_test_util.hpp"
#include "kjit/kjit.h"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
using namespace kjit::test::norm;
namespace ref = kjit::ref;

namespace {

std::mt19937_64 fresh_rng() {
  return std::mt19937_64(std::random_device{}());
}

// ---- Gemma RMSNorm ------------------------------------------------------------------------------

struct GemmaCase {
  std::string dtype;
  int64_t rows, hidden;
  int64_t in_stride = 0, out_stride = 0;
  size_t offset = 0;
  bool in_place = false;
};

void run_gemma(const GemmaCase& c, std::mt19937_64& rng) {
  INFO("gemma_rmsnorm " << c.dtype << " rows=" << c.rows << " hidden=" << c.hidden
                        << " strides=" << c.in_stride << "/" << c.out_stride
                        << " offset=" << c.offset << (c.in_place ? " in-place" : ""));
  const float eps = 1e-6f;
  RowsImage x(c.dtype, c.rows, c.hidden, c.in_stride, c.offset);
  x.fill(rng, -2.0, 2.0);
  // Gemma checkpoints store weight - 1, small and centred on zero.
  DeviceVector w(c.dtype, c.hidden, rng, -1.0, 1.0);
  std::vector<double> want = ref::rmsnorm(x.dense(), w.values, c.rows, c.hidden, eps, 1.0);

  DeviceRows xd(x);
  RowsImage y_before(c.dtype, c.rows, c.hidden, c.in_place ? x.stride : c.out_stride, c.offset);
  y_before.poison();
  DeviceRows yd(c.in_place ? x : y_before);
  DLTensor* out = c.in_place ? xd.view.get() : yd.view.get();
  kjit_status st = kjit_gemma_rmsnorm(xd.view.get(), w.t.get(), out, eps, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();

  RowsImage y = c.in_place ? x : y_before;
  (c.in_place ? xd : yd).download(y);
  CHECK(count_bad(
            y, want,
            [&](int64_t, int64_t, double v) { return ref::one_rounding_tolerance(c.dtype, v); },
            "out") == 0);
  CHECK(count_gap_changes(y, c.in_place ? x : y_before) == 0);
}

// ---- Fused residual add + RMSNorm ---------------------------------------------------------------

struct FusedCase {
  std::string dtype;
  int64_t rows, hidden;
  int64_t in_stride = 0, res_stride = 0;
  size_t offset = 0;  // both views start this many elements into their buffers
  bool gemma = false;
  float eps = 1e-6f;
  double x_lo = -2.0, x_hi = 2.0;  // input range (the residual is always in [-2, 2))
};

void run_fused(const FusedCase& c, std::mt19937_64& rng) {
  INFO((c.gemma ? "gemma_fused_add_rmsnorm " : "fused_add_rmsnorm ")
       << c.dtype << " rows=" << c.rows << " hidden=" << c.hidden << " strides=" << c.in_stride
       << "/" << c.res_stride << " offset=" << c.offset << " eps=" << c.eps << " x in [" << c.x_lo
       << ", " << c.x_hi << ")");
  RowsImage x(c.dtype, c.rows, c.hidden, c.in_stride, c.offset);
  RowsImage r(c.dtype, c.rows, c.hidden, c.res_stride, c.offset);
  x.fill(rng, c.x_lo, c.x_hi);
  r.fill(rng, -2.0, 2.0);
  DeviceVector w(c.dtype, c.hidden, rng, c.gemma ? -1.0 : -2.0, c.gemma ? 1.0 : 2.0);
  const std::vector<double> res_want = ref::residual_add(x.dense(), r.dense(), c.dtype);
  const std::vector<double> out_want =
      ref::rmsnorm(res_want, w.values, c.rows, c.hidden, c.eps, c.gemma ? 1.0 : 0.0);

  DeviceRows xd(x), rd(r);
  auto fn = c.gemma ? kjit_gemma_fused_add_rmsnorm : kjit_fused_add_rmsnorm;
  kjit_status st = fn(w.t.get(), xd.view.get(), rd.view.get(), c.eps, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();

  RowsImage x_after = x, r_after = r;
  xd.download(x_after);
  rd.download(r_after);
  // The stored residual is fully specified (fp32 add, one rounding): it must match exactly.
  CHECK(count_inexact(r_after, res_want, "residual") == 0);
  CHECK(count_bad(
            x_after, out_want,
            [&](int64_t, int64_t, double v) { return ref::one_rounding_tolerance(c.dtype, v); },
            "out") == 0);
  CHECK(count_gap_changes(x_after, x) == 0);
  CHECK(count_gap_changes(r_after, r) == 0);
}

// ---- LayerNorm ----------------------------------------------------------------------------------

struct LnCase {
  std::string dtype;
  std::string wdtype;  // "" = dtype
  int64_t rows, hidden;
  int64_t in_stride = 0, out_stride = 0;
  size_t offset = 0;        // input / out views start this many elements in
  size_t param_offset = 0;  // gamma / beta start this many elements in
  bool in_place = false;
  float eps = 1e-5f;
  double shift = 0.0;  // x is uniform in [shift - 2, shift + 2)
};

void run_layernorm(const LnCase& c, std::mt19937_64& rng) {
  const std::string wdt = c.wdtype.empty() ? c.dtype : c.wdtype;
  INFO("layernorm " << c.dtype << "/" << wdt << " rows=" << c.rows << " hidden=" << c.hidden
                    << " strides=" << c.in_stride << "/" << c.out_stride << " offset=" << c.offset
                    << "/" << c.param_offset << (c.in_place ? " in-place" : "") << " eps=" << c.eps
                    << " shift=" << c.shift);
  RowsImage x(c.dtype, c.rows, c.hidden, c.in_stride, c.offset);
  x.fill(rng, c.shift - 2.0, c.shift + 2.0);
  DeviceVector g(wdt, c.hidden, rng, -2.0, 2.0, c.param_offset);
  DeviceVector b(wdt, c.hidden, rng, -2.0, 2.0, c.param_offset);
  std::vector<double> mean, rstd;
  const std::vector<double> xs = x.dense();
  const std::vector<double> want =
      ref::layernorm(xs, g.values, b.values, c.rows, c.hidden, c.eps, &mean, &rstd);

  DeviceRows xd(x);
  RowsImage y_before(c.dtype, c.rows, c.hidden, c.in_place ? x.stride : c.out_stride, c.offset);
  y_before.poison();
  DeviceRows yd(c.in_place ? x : y_before);
  DLTensor* out = c.in_place ? xd.view.get() : yd.view.get();
  kjit_status st = kjit_layernorm(xd.view.get(), g.t.get(), b.t.get(), out, c.eps, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();

  RowsImage y = c.in_place ? x : y_before;
  (c.in_place ? xd : yd).download(y);
  auto tol = [&](int64_t r, int64_t i, double v) {
    return ref::layernorm_tolerance(c.dtype, v, xs[static_cast<size_t>(r * c.hidden + i)],
                                    mean[static_cast<size_t>(r)], rstd[static_cast<size_t>(r)],
                                    g.values[static_cast<size_t>(i)]);
  };
  CHECK(count_bad(y, want, tol, "out") == 0);
  CHECK(count_gap_changes(y, c.in_place ? x : y_before) == 0);
}

const char* const kDtypes[] = {"bf16", "fp16", "fp32"};

}  // namespace

// ---- Gemma RMSNorm ------------------------------------------------------------------------------

TEST_CASE("gemma_rmsnorm gpu: weight + 1 for every dtype and many hidden sizes", "[gpu][norm]") {
  auto rng = fresh_rng();
  // Here and below: up to 256 rows the parameters are read before the PDL wait (EARLY_PARAMS);
  // 257 rows take the default kernel.
  for (const char* dt : kDtypes) {
    for (int64_t hidden : {1, 7, 127, 1000, 2048, 2304, 3584, 4097, 65537}) {
      for (int64_t rows : {1, 3, 67, 256, 257}) run_gemma({dt, rows, hidden}, rng);
    }
  }
}

TEST_CASE("gemma_rmsnorm gpu: strided rows, misaligned views and in-place", "[gpu][norm]") {
  auto rng = fresh_rng();
  for (const char* dt : kDtypes) {
    run_gemma({dt, 33, 4096, 4096 + 64, 4096 + 8}, rng);
    run_gemma({dt, 33, 4096, 4099, 4101}, rng);
    run_gemma({dt, 17, 2048, 0, 0, 1}, rng);
    run_gemma({dt, 17, 2048, 0, 0, 0, true}, rng);
    run_gemma({dt, 5, 333, 0, 0, 3, true}, rng);
  }
}

// ---- Fused residual add + RMSNorm ---------------------------------------------------------------

TEST_CASE("fused_add_rmsnorm gpu: every dtype and many hidden sizes, odd ones included",
          "[gpu][norm]") {
  auto rng = fresh_rng();
  // 32768 (bf16/fp16) keeps the row in registers without the weight prefetch; 65536 and 65537
  // take the two-pass long-row path.
  for (const char* dt : kDtypes) {
    for (int64_t hidden :
         {1, 7, 127, 128, 896, 2048, 4096, 4097, 5120, 8192, 16384, 32768, 65536, 65537}) {
      for (int64_t rows : {1, 3, 67, 256, 257}) run_fused({dt, rows, hidden}, rng);
    }
  }
}

TEST_CASE("gemma_fused_add_rmsnorm gpu: weight + 1 for every dtype", "[gpu][norm]") {
  auto rng = fresh_rng();
  for (const char* dt : kDtypes) {
    for (int64_t hidden : {7, 127, 2304, 3584, 4097, 65537}) {
      for (int64_t rows : {1, 67}) {
        FusedCase c{dt, rows, hidden};
        c.gemma = true;
        run_fused(c, rng);
      }
    }
  }
}

TEST_CASE("fused_add_rmsnorm gpu: batch sizes 1..16384", "[gpu][norm]") {
  auto rng = fresh_rng();
  for (int64_t rows : {1, 2, 15, 64, 256, 257, 1000, 4096}) run_fused({"bf16", rows, 4096}, rng);
  run_fused({"fp16", 16384, 1024}, rng);
  run_fused({"fp32", 16384, 512}, rng);
}

TEST_CASE("fused_add_rmsnorm gpu: strided rows, misaligned views, different strides",
          "[gpu][norm]") {
  auto rng = fresh_rng();
  for (const char* dt : kDtypes) {
    run_fused({dt, 33, 4096, 4096 + 64, 4096 + 8}, rng);  // row-strided, aligned
    run_fused({dt, 33, 4096, 4099, 4101}, rng);           // strides that break 16-byte alignment
    run_fused({dt, 33, 4096, 0, 2 * 4096}, rng);          // compact input, strided residual
    run_fused({dt, 17, 2048, 0, 0, 1}, rng);              // base pointers off by one element
    run_fused({dt, 5, 333, 0, 0, 3}, rng);                // odd and misaligned
    run_fused({dt, 3, 65537, 65537 + 3, 0, 1}, rng);      // long-row path, strided, misaligned
  }
}

TEST_CASE("fused_add_rmsnorm gpu: the norm reads the residual as rounded to the dtype",
          "[gpu][norm]") {
  // An input much larger than the residual makes the rounding of the sum large compared with
  // the output tolerance (half an output ulp): a kernel normalising the unrounded fp32 sum fails.
  auto rng = fresh_rng();
  for (const char* dt : {"bf16", "fp16"}) {
    FusedCase c{dt, 64, 4096};
    c.x_lo = 100.0;
    c.x_hi = 120.0;
    run_fused(c, rng);
  }
}

TEST_CASE("fused_add_rmsnorm gpu: eps 0 and large eps", "[gpu][norm]") {
  auto rng = fresh_rng();
  FusedCase big{"bf16", 8, 4096};
  big.eps = 1.0f;
  run_fused(big, rng);
  FusedCase zero{"fp32", 8, 4096};
  zero.eps = 0.0f;
  run_fused(zero, rng);
}

TEST_CASE("fused_add_rmsnorm gpu: runs on a user stream and is repeatable", "[gpu][norm]") {
  const auto& d = kjit::cuda::driver();
  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  std::mt19937_64 rng(11);
  RowsImage x("bf16", 128, 4096), r("bf16", 128, 4096);
  x.fill(rng, -1, 1);
  r.fill(rng, -1, 1);
  DeviceVector w("bf16", 4096, rng, -1, 1);
  DeviceRows x1(x), r1(r), x2(x), r2(r);
  REQUIRE(kjit_fused_add_rmsnorm(w.t.get(), x1.view.get(), r1.view.get(), 1e-5f, s) ==
          KJIT_SUCCESS);
  REQUIRE(kjit_fused_add_rmsnorm(w.t.get(), x2.view.get(), r2.view.get(), 1e-5f, s) ==
          KJIT_SUCCESS);
  REQUIRE(d.cuStreamSynchronize(s) == CUDA_SUCCESS);
  RowsImage a = x, b = x, ra = r, rb = r;
  x1.download(a);
  x2.download(b);
  r1.download(ra);
  r2.download(rb);
  CHECK(a.bytes == b.bytes);  // deterministic
  CHECK(ra.bytes == rb.bytes);
  CHECK(a.bytes != x.bytes);
  CHECK(ra.bytes != r.bytes);
  d.cuStreamDestroy(s);
}

// ---- LayerNorm ----------------------------------------------------------------------------------

TEST_CASE("layernorm gpu: every dtype and many hidden sizes, odd ones included", "[gpu][norm]") {
  auto rng = fresh_rng();
  for (const char* dt : kDtypes) {
    for (int64_t hidden :
         {1, 7, 127, 768, 1000, 2048, 2560, 4096, 4097, 8192, 16384, 32768, 65536, 65537}) {
      for (int64_t rows : {1, 3, 67, 256, 257}) run_layernorm({dt, "", rows, hidden}, rng);
    }
  }
}

TEST_CASE("layernorm gpu: fp32 gamma/beta beside bf16 and fp16 input", "[gpu][norm]") {
  auto rng = fresh_rng();
  // 65536 with fp32 parameters takes the long-row path although the row alone would fit.
  for (const char* dt : {"bf16", "fp16"}) {
    for (int64_t hidden : {7, 127, 768, 1024, 4096, 4097, 8192, 32768, 65536, 65537}) {
      for (int64_t rows : {1, 67, 257}) run_layernorm({dt, "fp32", rows, hidden}, rng);
    }
    LnCase mis{dt, "fp32", 9, 4096};
    mis.param_offset = 1;  // gamma/beta only 4-byte aligned: narrower vectors
    run_layernorm(mis, rng);
    LnCase half{dt, "fp32", 9, 4096};
    half.param_offset = 2;  // 8-byte aligned
    run_layernorm(half, rng);
  }
}

TEST_CASE("layernorm gpu: rows with a large common offset keep their precision", "[gpu][norm]") {
  // |mean| >> std: E[x^2] - mean^2 would lose most of the variance to cancellation (fp32, mean
  // 1000, std 1.15: about 10% error), which the tolerance does not allow. 16 rows take the
  // decode geometry (one vector a thread) and early parameters, 300 about four vectors a thread.
  auto rng = fresh_rng();
  for (int64_t rows : {16, 300}) {
    for (int64_t hidden : {127, 4096, 65537}) {
      LnCase c{"fp32", "", rows, hidden};
      c.shift = 1000.0;
      run_layernorm(c, rng);
      LnCase h{"fp16", "", rows, hidden};
      h.shift = 1000.0;
      run_layernorm(h, rng);
      LnCase b{"bf16", "fp32", rows, hidden};
      b.shift = 8.0;
      run_layernorm(b, rng);
    }
  }
}

TEST_CASE("layernorm gpu: a constant row gives beta, never NaN", "[gpu][norm]") {
  for (const char* dt : kDtypes) {
    for (int64_t hidden : {64, 4096, 65537}) {
      // 4 rows: the decode geometry (one vector a thread); 300: about four vectors a thread.
      for (int64_t rows : {4, 300}) {
        INFO(dt << " hidden=" << hidden << " rows=" << rows);
        std::mt19937_64 rng(5);
        RowsImage x(dt, rows, hidden);
        for (size_t e = 0; e < x.elems(); ++e) ref::store_elem(x.bytes.data(), e, 3.0, dt);
        DeviceVector g(dt, hidden, rng, -2, 2), b(dt, hidden, rng, -2, 2);
        DeviceRows xd(x);
        REQUIRE(kjit_layernorm(xd.view.get(), g.t.get(), b.t.get(), xd.view.get(), 1e-5f,
                               nullptr) == KJIT_SUCCESS);
        device_synchronize();
        RowsImage y = x;
        xd.download(y);
        std::vector<double> want;
        for (int64_t r = 0; r < rows; ++r)
          want.insert(want.end(), b.values.begin(), b.values.end());
        CHECK(count_inexact(y, want, "out") == 0);
      }
    }
  }
}

TEST_CASE("layernorm gpu: batch sizes 1..16384", "[gpu][norm]") {
  auto rng = fresh_rng();
  for (int64_t rows : {1, 2, 15, 64, 256, 257, 1000, 4096})
    run_layernorm({"bf16", "", rows, 4096}, rng);
  run_layernorm({"fp16", "fp32", 16384, 1024}, rng);
  run_layernorm({"fp32", "", 16384, 768}, rng);
}

TEST_CASE("layernorm gpu: strided rows, misaligned views and in-place", "[gpu][norm]") {
  auto rng = fresh_rng();
  for (const char* dt : kDtypes) {
    run_layernorm({dt, "", 33, 4096, 4096 + 64, 4096 + 8}, rng);
    run_layernorm({dt, "", 33, 4096, 4099, 4101}, rng);
    run_layernorm({dt, "", 17, 2048, 0, 0, 1}, rng);
    run_layernorm({dt, "", 17, 2048, 0, 0, 0, 0, true}, rng);
    run_layernorm({dt, "", 5, 333, 0, 0, 3, 0, true}, rng);
    run_layernorm({dt, "", 3, 65537, 65537 + 5, 0, 1}, rng);
  }
  LnCase big{"bf16", "", 8, 4096};
  big.eps = 1.0f;
  run_layernorm(big, rng);
}

// ---- Device ids ---------------------------------------------------------------------------------

TEST_CASE("norm gpu: a device id that does not exist is an argument error", "[gpu][norm]") {
  DeviceBuffer buf(4096);
  char* base = static_cast<char*>(buf.get());
  auto x = make_tensor(base, {2, 64}, dl_dtype("bf16"), {}, 63);
  auto r = make_tensor(base + 1024, {2, 64}, dl_dtype("bf16"), {}, 63);
  auto w = make_tensor(base + 2048, {64}, dl_dtype("bf16"), {}, 63);
  auto b = make_tensor(base + 2560, {64}, dl_dtype("bf16"), {}, 63);
  auto y = make_tensor(base + 3072, {2, 64}, dl_dtype("bf16"), {}, 63);
  CHECK(kjit_fused_add_rmsnorm(w.get(), x.get(), r.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
  CHECK(kjit_gemma_rmsnorm(x.get(), w.get(), y.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
  CHECK(kjit_layernorm(x.get(), w.get(), b.get(), y.get(), 1e-5f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
}
