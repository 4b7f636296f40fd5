// kjit_gemm_fp8 and kjit_quant_fp8 on the GPU against fp64 CPU references on fresh random
// inputs: every scale mode on every path (the sm90 tensor-core kernel where the device and the
// operands allow it, the mma.sync kernel on sm_89+ for 16-byte rows TMA refuses, the fallback
// forced by rows cp.async cannot copy), odd sizes at
// every tile edge, k = 16 and k = 8192, block scales 2^10 apart, alpha / beta over a preset out,
// row-strided views, the persistent sm90 kernel (forced) over more tiles than SMs, each output
// held to ref::gemm_fp8_error_bound (the tensor cores' documented
// accumulation, promoted every 128 of K), and all-positive operands at k = 8192, which break that
// bound about 130-fold unless the kernel promotes; the quantization element by element (codes and
// scales exactly), and the round trip quant -> GEMM.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "gemm_test_util.hpp"
#include "kjit/kjit.h"
#include "ops/gemm/gemm_fp8.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;
namespace ops = kjit::ops;

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// How the scales are shaped (kjit.h): "tensor" [1] / [1], "row" [m] / [n], "mixed" [m] / [1],
// "block" [m, k / 128] / [n / 128, k / 128].
struct Case {
  std::string mode;
  std::string out_dtype;
  int64_t m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  int64_t a_stride = 0;            // 0 = compact (k)
  int64_t out_stride = 0;          // 0 = compact (n)
  size_t a_offset = 0;             // bytes into a's buffer (misalignment)
  bool wide_block_scales = false;  // block scales alternate 2^-5 / 2^5 along k and n
  bool positive = false;           // codes in [1, 2): every product in [1, 4), none cancels
  int64_t b_stride = 0;            // 0 = compact (k)
  std::string tactic;              // a forced tactic (ops::GemmFp8Tuning); empty: the choice
};

std::string describe(const Case& c) {
  return c.mode + "->" + c.out_dtype + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
         " k=" + std::to_string(c.k) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " a_stride=" + std::to_string(c.a_stride) +
         " out_stride=" + std::to_string(c.out_stride) + " a_offset=" + std::to_string(c.a_offset) +
         " b_stride=" + std::to_string(c.b_stride) + " tactic=" + c.tactic;
}

ops::GemmPath path_for(const Case& c) {
  if (!c.tactic.empty()) {  // the sm90 tiles or the decode kernel, as the tactic names
    return c.tactic.rfind("decode_", 0) == 0 ? ops::GemmPath::kSm90Decode : ops::GemmPath::kSm90;
  }
  const int64_t as = c.a_stride ? c.a_stride : c.k;
  const int64_t bs = c.b_stride ? c.b_stride : c.k;
  const bool rows_ok =
      c.a_offset % 16 == 0 && (c.m == 1 || as % 16 == 0) && (c.n == 1 || bs % 16 == 0);
  const bool tma_ok = rows_ok && c.k > 0 && c.k % 16 == 0;
  const auto scales = c.mode == "block" ? ops::Fp8Scales::kBlock : ops::Fp8Scales::kTensorRow;
  return ops::select_gemm_fp8(ops::dtype_from_name(c.out_dtype), scales, c.m, c.n, c.k,
                              ops::gemm_target(0, tma_ok, rows_ok))
      .path;
}

float random_scale(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  return std::exp2(u(rng));
}

struct Scales {
  std::vector<float> a, b;
  std::vector<int64_t> a_shape, b_shape;
  // The scale of a[i, kk] and of b[j, kk].
  float at_a(const Case& c, int64_t i, int64_t kk) const {
    if (c.mode == "block") return a[i * ceil_div(c.k, 128) + kk / 128];
    return a.size() == 1 ? a[0] : a[i];
  }
  float at_b(const Case& c, int64_t j, int64_t kk) const {
    if (c.mode == "block") return b[(j / 128) * ceil_div(c.k, 128) + kk / 128];
    return b.size() == 1 ? b[0] : b[j];
  }
};

Scales make_scales(const Case& c, std::mt19937_64& rng) {
  Scales s;
  const int64_t kc = ceil_div(c.k, 128);
  if (c.mode == "block") {
    s.a_shape = {c.m, kc};
    s.b_shape = {ceil_div(c.n, 128), kc};
  } else {
    s.a_shape = {c.mode == "tensor" ? 1 : c.m};
    s.b_shape = {c.mode == "row" ? c.n : 1};
  }
  auto fill = [&](std::vector<float>& v, const std::vector<int64_t>& shape, bool along_rows) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    v.resize(static_cast<size_t>(std::max<int64_t>(count, 1)));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = random_scale(rng);
      if (c.wide_block_scales) {
        // Neighbouring K chunks (and, for b, neighbouring column blocks) 2^10 apart.
        const int64_t chunk = static_cast<int64_t>(i) % kc;
        const int64_t row = static_cast<int64_t>(i) / kc;
        v[i] = ((chunk + (along_rows ? row : 0)) % 2 != 0) ? 0x1p5f : 0x1p-5f;
      }
    }
  };
  fill(s.a, s.a_shape, false);
  fill(s.b, s.b_shape, true);
  return s;
}

// Runs one case and checks every output; prints the largest error / bound (the evidence that the
// bound is neither missed nor loose) and returns it.
double run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c) << " path " << ops::gemm_path_name(path_for(c)));
  const size_t os_bytes = ref::elem_size(c.out_dtype);
  const int64_t as = c.a_stride ? c.a_stride : c.k;
  const int64_t bs = c.b_stride ? c.b_stride : c.k;
  const int64_t ys = c.out_stride ? c.out_stride : c.n;
  const size_t a_bytes = c.a_offset + static_cast<size_t>((c.m - 1) * as + c.k);
  const size_t b_bytes = static_cast<size_t>((c.n - 1) * bs + c.k);
  const size_t y_elems = static_cast<size_t>((c.m - 1) * ys + c.n);

  std::vector<uint8_t> a_host(a_bytes), b_host(b_bytes);
  std::uniform_int_distribution<int> mantissa(0, 7);
  auto code = [&] {
    return c.positive ? static_cast<uint8_t>(7 << 3 | mantissa(rng)) : random_e4m3_code(rng);
  };
  for (auto& x : a_host) x = code();
  for (auto& x : b_host) x = code();
  const Scales s = make_scales(c, rng);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<unsigned char> y_host(y_elems * os_bytes, 0xFF);  // poison: NaN
  if (c.beta != 0.0f) {
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t j = 0; j < c.n; ++j) {
        ref::store_elem(y_host.data(), static_cast<size_t>(r * ys + j), dist(rng), c.out_dtype);
      }
    }
  }
  const std::vector<unsigned char> y_old = y_host;

  DeviceBuffer a_dev(std::max<size_t>(a_bytes, 1)), b_dev(std::max<size_t>(b_bytes, 1)),
      sa_dev(s.a.size() * sizeof(float)), sb_dev(s.b.size() * sizeof(float)), y_dev(y_host.size());
  a_dev.upload(a_host.data(), a_bytes);
  b_dev.upload(b_host.data(), b_bytes);
  sa_dev.upload(s.a.data(), s.a.size() * sizeof(float));
  sb_dev.upload(s.b.data(), s.b.size() * sizeof(float));
  y_dev.upload(y_host.data(), y_host.size());
  auto a_t = make_tensor(static_cast<char*>(a_dev.get()) + c.a_offset, {c.m, c.k}, dl_dtype("e4m3"),
                         {as, 1});
  auto b_t = make_tensor(b_dev.get(), {c.n, c.k}, dl_dtype("e4m3"), {bs, 1});
  auto sa_t = make_tensor(sa_dev.get(), s.a_shape, dl_dtype("fp32"));
  auto sb_t = make_tensor(sb_dev.get(), s.b_shape, dl_dtype("fp32"));
  auto y_t = make_tensor(y_dev.get(), {c.m, c.n}, dl_dtype(c.out_dtype), {ys, 1});
  if (!c.tactic.empty()) {
    ops::GemmFp8Tuning tuning;
    tuning.tactic = c.tactic;
    REQUIRE_NOTHROW(ops::gemm_fp8(a_t.get(), b_t.get(), sa_t.get(), sb_t.get(), y_t.get(), c.alpha,
                                  c.beta, nullptr, tuning));
  } else {
    kjit_gemm_options opt;
    kjit_gemm_options_init(&opt);
    opt.alpha = c.alpha;
    opt.beta = c.beta;
    const kjit_status st =
        kjit_gemm_fp8(a_t.get(), b_t.get(), sa_t.get(), sb_t.get(), y_t.get(), &opt, nullptr);
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
  }
  device_synchronize();
  y_dev.download(y_host.data(), y_host.size());

  // The reference on the dequantized operands: e4m3 value times its scale, in fp64.
  std::vector<double> b_deq(static_cast<size_t>(c.n * c.k));
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t kk = 0; kk < c.k; ++kk) {
      b_deq[j * c.k + kk] = ref::e4m3_value(b_host[j * bs + kk]) * s.at_b(c, j, kk);
    }
  }
  const GemmOut o{c.m, c.n, c.k, c.alpha, c.beta, ys, c.out_dtype, &y_host, &y_old};
  const double worst = check_gemm_out(
      o,
      [&](int64_t r, double* row) {
        for (int64_t kk = 0; kk < c.k; ++kk) {
          row[kk] = ref::e4m3_value(a_host[c.a_offset + r * as + kk]) * s.at_a(c, r, kk);
        }
      },
      b_deq, {},
      [&](int64_t r, int64_t j, double want, double sum_abs) {
        return ref::gemm_fp8_error_bound(
            a_host.data() + c.a_offset + r * as, b_host.data() + j * bs, c.k,
            [&](int64_t chunk) { return s.at_a(c, r, chunk * 128) * s.at_b(c, j, chunk * 128); },
            c.alpha, want, sum_abs, c.out_dtype);
      });
  std::printf("gemm_fp8 %s path %s: max |error| / bound %.3f\n", describe(c).c_str(),
              ops::gemm_path_name(path_for(c)), worst);
  return worst;
}

bool tensor_cores() {
  return gpu_caps().sm90a();
}

// mma.sync's e4m3 form: compute capability 8.9 and newer.
bool e4m3_mma() {
  return gpu_caps().major * 10 + gpu_caps().minor >= 89;
}

const char* const kModes[] = {"tensor", "row", "mixed", "block"};

}  // namespace

TEST_CASE("gemm_fp8 gpu: every scale mode, small and odd shapes, both paths", "[gpu][gemm][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  const ops::GemmPath fast = tensor_cores() ? ops::GemmPath::kSm90
                             : e4m3_mma()   ? ops::GemmPath::kMmaSm80
                                            : ops::GemmPath::kSimt;
  for (const char* mode : kModes) {
    for (const char* od : {"bf16", "fp16", "fp32"}) {
      // k a multiple of 16 (TMA-describable): the sm90 kernels on an H100 / H200 (the decode one
      // up to 128 rows). M, N and K off every tile edge (128 rows, 128 / 256 columns, 128 of K),
      // k = 16 (an eighth of a stage).
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 128, 128},
                                                                       {1, 200, 16},
                                                                       {7, 136, 144},
                                                                       {130, 300, 272},
                                                                       {128, 256, 16},
                                                                       {129, 129, 528}}) {
        Case c{mode, od, m, n, k};
        // The decode kernel up to 64 rows, and up to 128 where K exceeds 8192 (not here).
        const ops::GemmPath want =
            fast == ops::GemmPath::kSm90 && m <= 64 ? ops::GemmPath::kSm90Decode : fast;
        CHECK(path_for(c) == want);
        run_case(c, rng);
      }
    }
    // k not a multiple of 16: the fallback on every device, the last K chunk partial.
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {1, 64, 1}, {5, 77, 13}, {70, 130, 67}, {129, 65, 300}}) {
      Case c{mode, "bf16", m, n, k};
      CHECK(path_for(c) == ops::GemmPath::kSimt);
      run_case(c, rng);
    }
  }
}

TEST_CASE("gemm_fp8 gpu: alpha and beta over a preset out, strided views, k = 0",
          "[gpu][gemm][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t k : {int64_t{144}, int64_t{67}}) {  // sm90 (where available) and the fallback
    for (const char* mode : kModes) {
      Case c{mode, "bf16", 150, 260, k};
      c.alpha = 0.5f;
      c.beta = -1.25f;
      run_case(c, rng);
      c.a_stride = k + 32;  // still 16-byte rows for k = 144
      c.out_stride = 260 + 5;
      run_case(c, rng);
    }
  }
  // A base that is only byte-aligned sends an otherwise TMA-ready call to the fallback.
  Case off{"block", "bf16", 33, 96, 256};
  off.a_offset = 1;
  off.a_stride = 272;
  CHECK(path_for(off) == ops::GemmPath::kSimt);
  run_case(off, rng);
  // k = 0: out = beta * out (block scales then have zero columns).
  Case zero{"row", "fp32", 9, 40, 0};
  zero.beta = 2.0f;
  run_case(zero, rng);
}

TEST_CASE("gemm_fp8 gpu: long k, block scales 2^10 apart, many tiles", "[gpu][gemm][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* mode : kModes) run_case({mode, "bf16", 64, 256, 8192}, rng);
  Case wide{"block", "bf16", 200, 300, 1040};
  wide.wide_block_scales = true;
  run_case(wide, rng);
  wide.k = 1000;  // the fallback, same scales
  run_case(wide, rng);
  Case long_k{"block", "fp32", 3, 384, 8192};
  long_k.wide_block_scales = true;
  run_case(long_k, rng);
  run_case({"row", "bf16", 1000, 1000, 1024}, rng);
  run_case({"tensor", "fp32", 520, 1024, 2048}, rng);  // fp32 out: the accumulation error bare
}

TEST_CASE("gemm_fp8 gpu: the persistent sm90 kernel over more tiles than SMs, every scale mode",
          "[gpu][gemm][fp8][sm90a]") {
  // Forced (tactic sm90_bn128_s6_p, and a 4-stage ring): each block takes two or more 128 x 128
  // tiles, so the ring's running stage count crosses tiles at every offset; k a multiple of 16
  // but not of the 128-wide chunk (TMA zero-fills the last one), from one partial chunk to 9.
  std::mt19937_64 rng(std::random_device{}());
  const int sms = kjit::cuda::device_info(0).sm_count;
  const auto run_persistent = [&](const Case& c) {
    const int64_t tiles = ceil_div(c.m, 128) * ceil_div(c.n, 128);
    INFO(describe(c) << " tiles " << tiles << " SMs " << sms);
    CHECK(tiles > sms);  // else a block has one tile and the loop is not exercised
    run_case(c, rng);
  };
  const char* const kOuts[] = {"bf16", "fp16", "fp32"};
  int turn = 0;
  for (const char* mode : kModes) {
    // 8 x 24 = 192 tiles, 3 chunks.
    Case c{mode, kOuts[turn++ % 3], 1000, 3000, 272};
    c.tactic = "sm90_bn128_s6_p";
    run_persistent(c);
    // 17 x 17 = 289 tiles of one partial chunk: every tile a single stage.
    Case one{mode, kOuts[turn++ % 3], 2049, 2051, 16};
    one.tactic = "sm90_bn128_s6_p";
    run_persistent(one);
  }
  // Block scales 2^10 apart over 9 chunks (a tile's stages wrap the ring), both ring depths.
  for (const char* tactic : {"sm90_bn128_s6_p", "sm90_bn128_s4_p"}) {
    Case wide{"block", "fp32", 1100, 2200, 1040};
    wide.wide_block_scales = true;
    wide.tactic = tactic;
    run_persistent(wide);
  }
  // alpha and beta over a preset out, row-strided a and out.
  for (const char* mode : {"row", "block"}) {
    Case c{mode, "bf16", 1000, 3000, 144};
    c.tactic = "sm90_bn128_s6_p";
    c.alpha = 0.5f;
    c.beta = -1.25f;
    c.a_stride = 144 + 32;
    c.out_stride = 3000 + 5;
    run_persistent(c);
  }
}

namespace {

// A forced wide sm90 tile over every scale mode in `modes`: N off its edges, one partial chunk to
// 9, rings of two depths and the persistent form (204 tiles of 192 at 2100 x 2300, 153 of 256:
// more than SMs), the out dtypes in turn (block scales 2^10 apart between neighbouring blocks
// and chunks); then alpha / beta over a preset out with strided views on the first tactic.
void run_wide_tile(const std::vector<const char*>& tactics, const std::vector<const char*>& modes,
                   std::mt19937_64& rng) {
  const char* const kOuts[] = {"bf16", "fp16", "fp32"};
  int turn = 0;
  for (const char* tactic : tactics) {
    for (const char* mode : modes) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
               {1000, 3000, 272}, {300, 700, 16}, {129, 2000, 1040}, {2100, 2300, 1152}}) {
        Case c{mode, kOuts[turn++ % 3], m, n, k};
        c.tactic = tactic;
        c.wide_block_scales = std::string(mode) == "block";
        INFO(describe(c));
        run_case(c, rng);
      }
    }
  }
  Case c{modes.back(), "bf16", 1000, 3000, 144};
  c.tactic = tactics.front();
  c.alpha = 0.5f;
  c.beta = -1.25f;
  c.a_stride = 144 + 32;
  c.out_stride = 3000 + 5;
  INFO(describe(c));
  run_case(c, rng);
}

}  // namespace

TEST_CASE("gemm_fp8 gpu: the 192-wide sm90 tile, per tensor and per row",
          "[gpu][gemm][fp8][sm90a]") {
  // Forced (tactic sm90_bn192_s<N>[_p]): 3000 = 15 tiles + 120 columns, rings of 3 and 5.
  std::mt19937_64 rng(std::random_device{}());
  run_wide_tile({"sm90_bn192_s5", "sm90_bn192_s3", "sm90_bn192_s5_p"}, {"tensor", "row"}, rng);
}

TEST_CASE("gemm_fp8 gpu: the 256-wide sm90 tile, every scale mode, one-tile and persistent",
          "[gpu][gemm][fp8][sm90a]") {
  // Forced (tactic sm90_bn256_s<N>[_p]): the two 128-column halves promoted in turn, each with its
  // own 128-row block of b's scales (a half scaled with the other's block is off by 2^10);
  // 3000 = 11 tiles + 184 columns (the last tile's second half partly past n), rings of 2 and 4.
  std::mt19937_64 rng(std::random_device{}());
  run_wide_tile({"sm90_bn256_s4", "sm90_bn256_s2", "sm90_bn256_s4_p"}, {"tensor", "row", "block"},
                rng);
}

TEST_CASE("gemm_fp8 gpu: the paired persistent tiles, every width and scale mode",
          "[gpu][gemm][fp8][sm90a]") {
  // Forced (tactics sm90_bn<W>_s<N>_p2: clusters of two blocks on adjacent row tiles, b loaded
  // once for both): run_wide_tile's shapes give odd row tile counts (300, 2100: the last pair's
  // second block has no rows) and even ones, more pair tiles than clusters at 2100 x 2300, and
  // the out dtypes in turn (bf16 through the TMA store, fp16 and fp32 through registers).
  std::mt19937_64 rng(std::random_device{}());
  run_wide_tile({"sm90_bn128_s6_p2"}, {"tensor", "row", "block"}, rng);
  run_wide_tile({"sm90_bn192_s5_p2"}, {"tensor", "row"}, rng);
  run_wide_tile({"sm90_bn256_s4_p2"}, {"tensor", "row", "block"}, rng);
}

TEST_CASE("gemm_fp8 gpu: all-positive k = 8192 stays inside the bound of promotion every 128",
          "[gpu][gemm][fp8]") {
  // Products in [1, 4) with 6 fraction bits: the accumulator, which grows with the partial sum,
  // takes the top of each step's 14-bit alignment and the products lose their low bits to it.
  // Promoted every 128 of K the model puts the error near 0.4 of the bound, summed over all of K
  // about 130 times past it (ref::gemm_fp8_error_bound). fp32 out: no output rounding on top.
  std::mt19937_64 rng(std::random_device{}());
  for (const char* mode : {"tensor", "block"}) {
    Case c{mode, "fp32", 130, 300, 8192};
    c.positive = true;
    CHECK(run_case(c, rng) <= 1.0);
  }
}

TEST_CASE("gemm_fp8 gpu: the mma.sync kernel serves 16-byte rows TMA refuses, every scale mode",
          "[gpu][gemm][fp8]") {
  // k not a multiple of 16 in rows of a multiple of 16 bytes: TMA's rule refuses them, cp.async
  // copies them; on sm_89+ (the H200 included) the mma.sync e4m3 kernel, elsewhere the fallback.
  // M, N and K across its 128 x 64 tile and 128-wide scale chunks (a partial last chunk, a chunk
  // of one K block), block scales 2^10 apart, a long K, beta and strided out.
  std::mt19937_64 rng(std::random_device{}());
  const ops::GemmPath want = e4m3_mma() ? ops::GemmPath::kMmaSm80 : ops::GemmPath::kSimt;
  for (const char* mode : kModes) {
    for (const char* od : {"bf16", "fp32"}) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
               {1, 72, 40}, {7, 8, 1000}, {129, 200, 136}, {130, 65, 200}, {64, 130, 8200}}) {
        Case c{mode, od, m, n, k};
        c.a_stride = c.b_stride = (k + 15) / 16 * 16 + 16;
        c.wide_block_scales = std::string(mode) == "block" && k == 1000;
        CHECK(path_for(c) == want);
        run_case(c, rng);
      }
    }
    Case c{mode, "bf16", 150, 260, 104};
    c.a_stride = c.b_stride = 112;
    c.alpha = 0.5f;
    c.beta = -1.25f;
    c.out_stride = 260 + 5;
    CHECK(path_for(c) == want);
    run_case(c, rng);
  }
}

TEST_CASE("gemm_fp8 gpu: the tensor-core paths take every TMA-ready shape",
          "[gpu][gemm][fp8][sm90a]") {
  for (const char* mode : kModes) {
    for (int64_t m : {int64_t{1}, int64_t{64}}) {
      CHECK(path_for({mode, "bf16", m, 4096, 4096}) == ops::GemmPath::kSm90Decode);
    }
    // Past 64 rows the decode kernel only where K exceeds 8192 (gemm_tiles_beat_decode).
    CHECK(path_for({mode, "bf16", 128, 4096, 4096}) == ops::GemmPath::kSm90);
    CHECK(path_for({mode, "bf16", 128, 4096, 14336}) == ops::GemmPath::kSm90Decode);
    CHECK(path_for({mode, "bf16", 4096, 4096, 4096}) == ops::GemmPath::kSm90);
    // 224 weight tiles: past 64 rows the 128-wide tiles already cover the SMs.
    CHECK(path_for({mode, "bf16", 128, 28672, 4096}) == ops::GemmPath::kSm90);
  }
}

TEST_CASE("gemm_fp8 gpu: the decode kernel, every scale mode and token tile, split K",
          "[gpu][gemm][fp8][sm90a]") {
  // Every token tile (m = 1, 7, 16 | 17 | 64 | 65, 128; past 64 rows K above 8192, where the
  // plan keeps the decode kernel), n off the 128-row weight tile, k a
  // multiple of 16 (TMA's rule for e4m3 rows) but not of 128 where it can be (the last chunk
  // partial; block scales have ceil(k / 128) chunks, so every mode takes such k), long enough
  // that the cluster splits K (unevenly: 65 chunks over up to 8 blocks) and short enough that it
  // does not; block scales 2^10 apart along K and n; alpha / beta over a preset out and a strided
  // out; each output held to ref::gemm_fp8_error_bound after a NaN-poisoned out.
  std::mt19937_64 rng(std::random_device{}());
  for (const char* mode : kModes) {
    for (const char* od : {"bf16", "fp16", "fp32"}) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1000, 8208},
                                                                       {7, 389, 1040},
                                                                       {16, 136, 144},
                                                                       {17, 1000, 4112},
                                                                       {64, 257, 3088},
                                                                       {65, 1000, 8208},
                                                                       {128, 129, 8224}}) {
        Case c{mode, od, m, n, k};
        c.wide_block_scales = std::string(mode) == "block" && k > 1024;
        CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
        run_case(c, rng);
      }
    }
    Case b{mode, "bf16", 33, 777, 2064};
    b.alpha = 0.5f;
    b.beta = -1.25f;
    b.out_stride = 777 + 3;
    CHECK(path_for(b) == ops::GemmPath::kSm90Decode);
    run_case(b, rng);
  }
  // The deeper rings of one block an SM (decode_t<T>_s<N>_split<s>, forced): 16, 32 and 64
  // tokens, every scale mode, K split unevenly over 3 blocks and not at all, K a ring's length
  // and more (the ring wraps its stages several times); and the decode kernel forced where the
  // plan takes the tiles (100 rows, K <= 8192).
  for (const char* mode : kModes) {
    for (const auto& [m, tactic] :
         std::vector<std::pair<int64_t, const char*>>{{5, "decode_t16_s12_split3"},
                                                      {20, "decode_t32_s11_split1"},
                                                      {64, "decode_t64_s9_split3"},
                                                      {40, "decode_t64_s9_split1"},
                                                      {100, "decode_t128_s7_split2"}}) {
      Case c{mode, "bf16", m, 389, 4112};
      c.wide_block_scales = std::string(mode) == "block";
      c.tactic = tactic;
      run_case(c, rng);
    }
  }
  // All-positive operands at k = 8192: the promotion every 128 of K happens on this path too
  // (summed over all of K the error would be about 15 times the bound).
  for (const char* mode : {"tensor", "block"}) {
    Case c{mode, "fp32", 16, 300, 8192};
    c.positive = true;
    CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
    CHECK(run_case(c, rng) <= 1.0);
  }
}

TEST_CASE("gemm_fp8 gpu: the decode kernel replays in a CUDA graph", "[gpu][gemm][fp8][sm90a]") {
  // Captured after an eager call (which compiles the kernel and asks the driver for its
  // residency): the replay must write what an eager call writes, byte for byte (the split's
  // reduction is fixed, so the kernel is deterministic), and read a's contents at replay time.
  const auto& d = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  const int64_t m = 5, n = 1000, k = 4112;
  REQUIRE(path_for({"block", "bf16", m, n, k}) == ops::GemmPath::kSm90Decode);
  std::vector<uint8_t> a_h(static_cast<size_t>(m * k)), b_h(static_cast<size_t>(n * k));
  for (auto& x : a_h) x = random_e4m3_code(rng);
  for (auto& x : b_h) x = random_e4m3_code(rng);
  const int64_t kc = ceil_div(k, 128);
  std::vector<float> sa(static_cast<size_t>(m * kc)),
      sb(static_cast<size_t>(ceil_div(n, 128) * kc));
  for (auto& x : sa) x = random_scale(rng);
  for (auto& x : sb) x = random_scale(rng);
  DeviceBuffer a(a_h.size()), b(b_h.size()), sa_d(sa.size() * 4), sb_d(sb.size() * 4),
      y(static_cast<size_t>(m * n) * 2), y_eager(static_cast<size_t>(m * n) * 2);
  a.upload(a_h.data(), a_h.size());
  b.upload(b_h.data(), b_h.size());
  sa_d.upload(sa.data(), sa.size() * 4);
  sb_d.upload(sb.data(), sb.size() * 4);
  auto a_t = make_tensor(a.get(), {m, k}, dl_dtype("e4m3"));
  auto b_t = make_tensor(b.get(), {n, k}, dl_dtype("e4m3"));
  auto sa_t = make_tensor(sa_d.get(), {m, kc}, dl_dtype("fp32"));
  auto sb_t = make_tensor(sb_d.get(), {ceil_div(n, 128), kc}, dl_dtype("fp32"));
  auto y_t = make_tensor(y.get(), {m, n}, dl_dtype("bf16"));
  auto e_t = make_tensor(y_eager.get(), {m, n}, dl_dtype("bf16"));
  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const auto eager = [&] {
    y_eager.fill(0xFF);
    REQUIRE(kjit_gemm_fp8(a_t.get(), b_t.get(), sa_t.get(), sb_t.get(), e_t.get(), nullptr, s) ==
            KJIT_SUCCESS);
  };
  eager();
  CUgraph g = nullptr;
  REQUIRE(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  const kjit_status st =
      kjit_gemm_fp8(a_t.get(), b_t.get(), sa_t.get(), sb_t.get(), y_t.get(), nullptr, s);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(d.cuStreamEndCapture(s, &g) == CUDA_SUCCESS);
  REQUIRE(st == KJIT_SUCCESS);
  CUgraphExec exec = nullptr;
  REQUIRE(d.cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS);
  std::vector<unsigned char> got(static_cast<size_t>(m * n) * 2), want(got.size());
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {  // new activations: the graph reads them at replay
      for (auto& x : a_h) x = random_e4m3_code(rng);
      a.upload(a_h.data(), a_h.size());
      eager();
    }
    y.fill(0xFF);
    REQUIRE(d.cuGraphLaunch(exec, s) == CUDA_SUCCESS);
    REQUIRE(d.cuStreamSynchronize(s) == CUDA_SUCCESS);
    y.download(got.data(), got.size());
    y_eager.download(want.data(), want.size());
    CHECK(got == want);
    // Not NaN (the poison) anywhere: the replay wrote every output.
    bool poisoned = false;
    for (size_t i = 0; i < got.size(); i += 2) poisoned |= got[i] == 0xFF && got[i + 1] == 0xFF;
    CHECK(!poisoned);
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(g);
  d.cuStreamDestroy(s);
}

TEST_CASE(
    "gemm_fp8 gpu: weights_early after the fused norm that writes a and scale_a, eager and "
    "graph replay",
    "[gpu][gemm][fp8][sm90a]") {
  // kjit_gemm_options::weights_early on the fp8 decode path: the GEMM launches as a programmatic
  // dependent of kjit_rmsnorm_quant_fp8 (the engine's pattern), which writes a's codes and its
  // per-row scales; the GEMM loads b's first stages while the norm runs. a and scale_a are
  // poisoned (NaN codes and NaN scales) before each round: a GEMM that read either before the
  // norm finished would write NaN.
  const auto& d = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> dist(-1.0, 1.0), pos(0.5, 1.5);
  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  for (int64_t m : {1, 16, 61}) {
    const int64_t n = 1000, k = 4096;
    Case c{"row", "bf16", m, n, k};
    REQUIRE(path_for(c) == ops::GemmPath::kSm90Decode);
    std::vector<unsigned char> x_h(static_cast<size_t>(m * k) * 2), g_h(static_cast<size_t>(k) * 2);
    std::vector<uint8_t> b_h(static_cast<size_t>(n * k));
    std::vector<float> sb(static_cast<size_t>(n));
    for (int64_t i = 0; i < k; ++i) ref::store_elem(g_h.data(), i, pos(rng), "bf16");
    for (auto& v : b_h) v = random_e4m3_code(rng);
    for (auto& v : sb) v = random_scale(rng);
    DeviceBuffer x(x_h.size()), g(g_h.size()), a(static_cast<size_t>(m * k)), b(b_h.size()),
        sa(static_cast<size_t>(m) * 4), sb_d(sb.size() * 4), y(static_cast<size_t>(m * n) * 2);
    g.upload(g_h.data(), g_h.size());
    b.upload(b_h.data(), b_h.size());
    sb_d.upload(sb.data(), sb.size() * 4);
    auto x_t = make_tensor(x.get(), {m, k}, dl_dtype("bf16"));
    auto g_t = make_tensor(g.get(), {k}, dl_dtype("bf16"));
    auto a_t = make_tensor(a.get(), {m, k}, dl_dtype("e4m3"));
    auto sa_t = make_tensor(sa.get(), {m}, dl_dtype("fp32"));
    auto b_t = make_tensor(b.get(), {n, k}, dl_dtype("e4m3"));
    auto sb_t = make_tensor(sb_d.get(), {n}, dl_dtype("fp32"));
    auto y_t = make_tensor(y.get(), {m, n}, dl_dtype("bf16"));
    kjit_gemm_options opt;
    kjit_gemm_options_init(&opt);
    opt.weights_early = 1;
    const auto enqueue = [&] {
      REQUIRE(kjit_rmsnorm_quant_fp8(x_t.get(), g_t.get(), a_t.get(), sa_t.get(), 1e-6f, s) ==
              KJIT_SUCCESS);
      const kjit_status st =
          kjit_gemm_fp8(a_t.get(), b_t.get(), sa_t.get(), sb_t.get(), y_t.get(), &opt, s);
      INFO("kjit_last_error: " << kjit_last_error());
      REQUIRE(st == KJIT_SUCCESS);
    };
    std::vector<double> b_deq(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk)
        b_deq[j * k + kk] = ref::e4m3_value(b_h[j * k + kk]) * sb[j];
    }
    // Round 0 eager, rounds 1 and 2 replays of a graph captured after it, each with new x.
    INFO("m " << m);
    eager_then_graph_rounds(
        s,
        [&](int) {
          for (int64_t i = 0; i < m * k; ++i) ref::store_elem(x_h.data(), i, dist(rng), "bf16");
          x.upload(x_h.data(), x_h.size());
          a.fill(0xFF);
          sa.fill(0xFF);
          y.fill(0xFF);
        },
        enqueue,
        [&](int) {
          std::vector<uint8_t> a_h(static_cast<size_t>(m * k));
          std::vector<float> sa_h(static_cast<size_t>(m));
          std::vector<unsigned char> y_h(static_cast<size_t>(m * n) * 2);
          a.download(a_h.data(), a_h.size());
          sa.download(sa_h.data(), sa_h.size() * 4);
          y.download(y_h.data(), y_h.size());
          for (float v : sa_h) REQUIRE(std::isfinite(v));  // the norm wrote every scale
          const GemmOut o{m, n, k, 1.0, 0.0, n, "bf16", &y_h, nullptr};
          const double worst = check_gemm_out(
              o,
              [&](int64_t r, double* row) {
                for (int64_t kk = 0; kk < k; ++kk) {
                  row[kk] = ref::e4m3_value(a_h[r * k + kk]) * sa_h[r];
                }
              },
              b_deq, {},
              [&](int64_t r, int64_t j, double want, double sum_abs) {
                return ref::gemm_fp8_error_bound(
                    a_h.data() + r * k, b_h.data() + j * k, k,
                    [&](int64_t) { return double(sa_h[r]) * double(sb[j]); }, 1.0, want, sum_abs,
                    "bf16");
              });
          CHECK(worst <= 1.0);
        });
  }
  d.cuStreamDestroy(s);
}

// ---- kjit_quant_fp8 --------------------------------------------------------------------------

namespace {

struct QuantCase {
  std::string dtype;
  kjit_fp8_scaling scaling;
  int64_t m, k;
  int64_t in_stride = 0, out_stride = 0;  // 0 = compact
  bool zero_rows = false;                 // every third row all zeros
};

// Runs kjit_quant_fp8 and checks every code and scale against the CPU reference. Returns the
// codes and scales (compact) for the round-trip tests.
void run_quant(const QuantCase& c, std::mt19937_64& rng, const std::vector<float>* given,
               std::vector<uint8_t>* codes_out, std::vector<float>* scales_out) {
  INFO(c.dtype << " scaling " << static_cast<int>(c.scaling) << " m=" << c.m << " k=" << c.k
               << " in_stride=" << c.in_stride << " out_stride=" << c.out_stride);
  const size_t es = ref::elem_size(c.dtype);
  const int64_t is = c.in_stride ? c.in_stride : c.k;
  const int64_t os = c.out_stride ? c.out_stride : c.k;
  const int64_t groups = ceil_div(c.k, 128);
  std::vector<unsigned char> x_host(static_cast<size_t>(((c.m - 1) * is + c.k)) * es);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::uniform_real_distribution<double> mag(-4.0, 4.0);
  std::vector<float> x(static_cast<size_t>(c.m * c.k));  // the values as stored
  for (int64_t r = 0; r < c.m; ++r) {
    const double row_scale = std::exp2(mag(rng));  // rows of different magnitudes
    for (int64_t j = 0; j < c.k; ++j) {
      double v = given ? (*given)[r * c.k + j] : dist(rng) * row_scale;
      if (c.zero_rows && r % 3 == 1) v = 0.0;
      ref::store_elem(x_host.data(), static_cast<size_t>(r * is + j), v, c.dtype);
      x[r * c.k + j] = static_cast<float>(ref::load_elem(x_host.data(), r * is + j, c.dtype));
    }
  }
  std::vector<int64_t> scale_shape = c.scaling == KJIT_FP8_PER_TENSOR ? std::vector<int64_t>{1}
                                     : c.scaling == KJIT_FP8_PER_ROW
                                         ? std::vector<int64_t>{c.m}
                                         : std::vector<int64_t>{c.m, groups};
  const size_t n_scales = c.scaling == KJIT_FP8_PER_TENSOR ? 1
                          : c.scaling == KJIT_FP8_PER_ROW  ? static_cast<size_t>(c.m)
                                                           : static_cast<size_t>(c.m * groups);
  const size_t y_bytes = static_cast<size_t>((c.m - 1) * os + c.k);
  DeviceBuffer x_dev(x_host.size()), y_dev(y_bytes), s_dev(n_scales * sizeof(float));
  x_dev.upload(x_host.data(), x_host.size());
  y_dev.fill(0x7F);  // e4m3 NaN
  s_dev.fill(0xFF);  // fp32 NaN (per tensor overwrites it with its memset)
  auto x_t = make_tensor(x_dev.get(), {c.m, c.k}, dl_dtype(c.dtype), {is, 1});
  auto y_t = make_tensor(y_dev.get(), {c.m, c.k}, dl_dtype("e4m3"), {os, 1});
  auto s_t = make_tensor(s_dev.get(), scale_shape, dl_dtype("fp32"));
  const kjit_status st = kjit_quant_fp8(x_t.get(), y_t.get(), s_t.get(), c.scaling, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  std::vector<uint8_t> y(y_bytes);
  std::vector<float> scales(n_scales);
  y_dev.download(y.data(), y_bytes);
  s_dev.download(scales.data(), n_scales * sizeof(float));

  // The reference: each group's amax, its scale, each code.
  auto group_of = [&](int64_t r, int64_t j) -> size_t {
    if (c.scaling == KJIT_FP8_PER_TENSOR) return 0;
    if (c.scaling == KJIT_FP8_PER_ROW) return static_cast<size_t>(r);
    return static_cast<size_t>(r * groups + j / 128);
  };
  std::vector<float> amax(n_scales, 0.0f);
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.k; ++j) {
      float& a = amax[group_of(r, j)];
      a = std::max(a, std::fabs(x[r * c.k + j]));
    }
  }
  long bad_scales = 0, bad_codes = 0, saturated = 0;
  for (size_t g = 0; g < n_scales; ++g) {
    if (!(scales[g] == ref::fp8_scale(amax[g])) && bad_scales++ < 5) {
      UNSCOPED_INFO("scale " << g << " got " << scales[g] << " want " << ref::fp8_scale(amax[g]));
    }
  }
  codes_out->assign(static_cast<size_t>(c.m * c.k), 0);
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.k; ++j) {
      const float sc = ref::fp8_scale(amax[group_of(r, j)]);
      const uint8_t want = ref::quantize_e4m3(x[r * c.k + j], sc);
      const uint8_t got = y[r * os + j];
      saturated += (want & 0x7F) == 0x7E;
      (*codes_out)[r * c.k + j] = got;
      if (got != want && bad_codes++ < 5) {
        UNSCOPED_INFO("row " << r << " col " << j << " x " << x[r * c.k + j] << " code " << int(got)
                             << " want " << int(want));
      }
    }
    // The gap between strided out rows keeps its poison.
    for (int64_t j = c.k; r + 1 < c.m && j < os; ++j) bad_codes += y[r * os + j] != 0x7F;
  }
  CHECK(bad_scales == 0);
  CHECK(bad_codes == 0);
  CHECK(saturated > 0);  // every group's amax element lands on +-448
  *scales_out = scales;
}

}  // namespace

TEST_CASE("quant_fp8 gpu: codes and scales element by element", "[gpu][quant][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  for (const char* dt : {"bf16", "fp16"}) {
    for (kjit_fp8_scaling s : {KJIT_FP8_PER_TENSOR, KJIT_FP8_PER_ROW, KJIT_FP8_PER_GROUP_128}) {
      for (const auto& [m, k] : std::vector<std::array<int64_t, 2>>{
               {1, 16}, {1, 1}, {5, 130}, {33, 1000}, {64, 4096}, {300, 7168}}) {
        run_quant({dt, s, m, k}, rng, nullptr, &codes, &scales);
      }
      QuantCase strided{dt, s, 20, 300, 320, 301};
      strided.zero_rows = true;
      run_quant(strided, rng, nullptr, &codes, &scales);
    }
  }
}

TEST_CASE("quant_fp8 gpu: subnormals, ties and the per-tensor amax over many blocks",
          "[gpu][quant][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  // Values spanning 2^-20 .. 2^4 in one row: most land in e4m3's subnormals after scaling, and
  // round to even across the grid.
  const int64_t m = 4, k = 1024;
  std::vector<float> v(static_cast<size_t>(m * k));
  std::uniform_real_distribution<double> e(-20.0, 4.0);
  for (auto& x : v) x = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e(rng)));
  for (kjit_fp8_scaling s : {KJIT_FP8_PER_TENSOR, KJIT_FP8_PER_ROW, KJIT_FP8_PER_GROUP_128}) {
    run_quant({"fp16", s, m, k}, rng, &v, &codes, &scales);
  }
  // Thousands of rows: the per-tensor amax crosses many blocks' atomics.
  run_quant({"bf16", KJIT_FP8_PER_TENSOR, 5000, 512}, rng, nullptr, &codes, &scales);
}

TEST_CASE("quant_fp8 gpu: round trip through gemm_fp8 with the scales it wrote",
          "[gpu][gemm][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  // a quantized by kjit_quant_fp8 (per row / per group), b by the same kernel per row (a [n, k]
  // input is b's layout) and for blocks from b's per-group scales made uniform over 128 rows on
  // the host, then the GEMM against the fp64 product of the dequantized values (the exact
  // contract) and, loosely, against the product of the original bf16 values.
  const int64_t m = 70, n = 256, k = 640;
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k));
  for (auto& x : a) x = ref::bf16_to_float(ref::float_to_bf16(static_cast<float>(dist(rng))));
  for (auto& x : b) x = ref::bf16_to_float(ref::float_to_bf16(static_cast<float>(dist(rng))));
  for (const bool block : {false, true}) {
    INFO("block " << block);
    std::vector<uint8_t> a_codes, b_codes;
    std::vector<float> a_scales, b_scales;
    const kjit_fp8_scaling as = block ? KJIT_FP8_PER_GROUP_128 : KJIT_FP8_PER_ROW;
    run_quant({"bf16", as, m, k}, rng, &a, &a_codes, &a_scales);
    run_quant({"bf16", KJIT_FP8_PER_ROW, n, k}, rng, &b, &b_codes, &b_scales);
    std::vector<int64_t> sb_shape{n};
    if (block) {
      // One scale per 128 x 128 block of b: the block's amax / 448, codes redone on the host.
      const int64_t kc = ceil_div(k, 128), nb = ceil_div(n, 128);
      b_scales.assign(static_cast<size_t>(nb * kc), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t kk = 0; kk < k; ++kk) {
          float& s = b_scales[(j / 128) * kc + kk / 128];
          s = std::max(s, std::fabs(b[j * k + kk]));
        }
      }
      for (auto& s : b_scales) s = ref::fp8_scale(s);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t kk = 0; kk < k; ++kk) {
          b_codes[j * k + kk] =
              ref::quantize_e4m3(b[j * k + kk], b_scales[(j / 128) * kc + kk / 128]);
        }
      }
      sb_shape = {nb, kc};
    }
    DeviceBuffer a_dev(a_codes.size()), b_dev(b_codes.size()),
        sa_dev(a_scales.size() * sizeof(float)), sb_dev(b_scales.size() * sizeof(float)),
        y_dev(static_cast<size_t>(m * n) * sizeof(float));
    a_dev.upload(a_codes.data(), a_codes.size());
    b_dev.upload(b_codes.data(), b_codes.size());
    sa_dev.upload(a_scales.data(), a_scales.size() * sizeof(float));
    sb_dev.upload(b_scales.data(), b_scales.size() * sizeof(float));
    y_dev.fill(0xFF);
    auto a_t = make_tensor(a_dev.get(), {m, k}, dl_dtype("e4m3"));
    auto b_t = make_tensor(b_dev.get(), {n, k}, dl_dtype("e4m3"));
    auto sa_t = make_tensor(
        sa_dev.get(), block ? std::vector<int64_t>{m, ceil_div(k, 128)} : std::vector<int64_t>{m},
        dl_dtype("fp32"));
    auto sb_t = make_tensor(sb_dev.get(), sb_shape, dl_dtype("fp32"));
    auto y_t = make_tensor(y_dev.get(), {m, n}, dl_dtype("fp32"));
    REQUIRE(kjit_gemm_fp8(a_t.get(), b_t.get(), sa_t.get(), sb_t.get(), y_t.get(), nullptr,
                          nullptr) == KJIT_SUCCESS);
    device_synchronize();
    std::vector<float> y(static_cast<size_t>(m * n));
    y_dev.download(y.data(), y.size() * sizeof(float));
    const int64_t kc = ceil_div(k, 128);
    long bad = 0;
    double err2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0.0, sum_abs = 0.0, exact = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double sa = block ? a_scales[i * kc + kk / 128] : a_scales[i];
          const double sb = block ? b_scales[(j / 128) * kc + kk / 128] : b_scales[j];
          const double t =
              ref::e4m3_value(a_codes[i * k + kk]) * sa * ref::e4m3_value(b_codes[j * k + kk]) * sb;
          want += t;
          sum_abs += std::fabs(t);
          exact += static_cast<double>(a[i * k + kk]) * b[j * k + kk];
        }
        const double got = y[i * n + j];
        const double bound = ref::gemm_fp8_error_bound(
            &a_codes[i * k], &b_codes[j * k], k,
            [&](int64_t c) {
              return (block ? a_scales[i * kc + c] : a_scales[i]) *
                     (block ? b_scales[(j / 128) * kc + c] : b_scales[j]);
            },
            1.0, want, sum_abs, "fp32");
        if (!(std::fabs(got - want) <= bound) && bad++ < 5) {
          UNSCOPED_INFO("row " << i << " col " << j << " got " << got << " want " << want);
        }
        err2 += (got - exact) * (got - exact);
        ref2 += exact * exact;
      }
    }
    CHECK(bad == 0);
    // e4m3 keeps 3 mantissa bits: about 2^-5 relative error per operand, averaging down over k.
    CHECK(std::sqrt(err2 / ref2) < 0.05);
  }
}

TEST_CASE("gemm_fp8 gpu: the TMA-store epilogue, every width, scale mode and form",
          "[gpu][gemm][fp8][sm90a]") {
  // A bf16 / fp16 out TMA can describe, with beta 0, is stored through shared memory by TMA (URI
  // flag tma_out; gemm_gpu_test's case walks the edges on the bf16 kernel, whose epilogue this
  // is). Every width at depths that leave the 32 KB of staging room (the 192-wide tile at 4 stages:
  // at 5 it keeps the register epilogue), one-tile and persistent, M and N off the 64 x 64 slabs.
  std::mt19937_64 rng(std::random_device{}());
  const auto run_tma = [&](const Case& c, bool want_tma) {
    INFO(describe(c));
    check_tma_out([&] { run_case(c, rng); }, want_tma);
  };
  // Each tactic over three shapes, the scale modes in turn (the 192-wide tile's without block):
  // 130 x 136 (a second tile half without rows, a slab of 8 columns), 1000 x 3000 (56 columns past
  // the last whole slab) and, persistent, 2100 x 2296 (more tiles than SMs at every width: a block
  // drains one tile's stores while it computes the next).
  int turn = 0;
  for (const char* tactic : {"sm90_bn128_s6", "sm90_bn128_s6_p", "sm90_bn192_s4", "sm90_bn192_s4_p",
                             "sm90_bn256_s4", "sm90_bn256_s4_p"}) {
    const bool w192 = std::string(tactic).find("bn192") != std::string::npos;
    const bool persistent = std::string(tactic).back() == 'p';
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {130, 136, 272}, {1000, 3000, 144}, {2100, 2296, 400}}) {
      if (m == 2100 && !persistent) continue;  // the draining across tiles is the persistent's
      const char* mode = kModes[turn % (w192 ? 3 : 4)];  // kModes ends with block
      Case c{mode, turn % 2 == 0 ? "bf16" : "fp16", m, n, k};
      ++turn;
      c.tactic = tactic;
      c.wide_block_scales = std::string(mode) == "block";
      c.alpha = turn % 3 == 0 ? 0.5f : 1.0f;
      run_tma(c, true);
    }
    Case strided{"row", "bf16", 300, 200, 144};
    strided.tactic = tactic;
    strided.out_stride = 200 + 40;
    run_tma(strided, true);
  }
  // Where it must not apply: the 192-wide tile at 5 stages (no room), beta, an fp32 out.
  Case deep{"tensor", "bf16", 1000, 3000, 144};
  deep.tactic = "sm90_bn192_s5";
  run_tma(deep, false);
  Case beta{"row", "bf16", 300, 200, 144};
  beta.tactic = "sm90_bn128_s6";
  beta.beta = -1.0f;
  run_tma(beta, false);
  Case wide_out{"block", "fp32", 300, 256, 144};
  wide_out.tactic = "sm90_bn256_s4";
  run_tma(wide_out, false);
  // kjit_gemm_fp8's own choice on a large shape per tensor (the 192-wide tile, now 4 stages).
  Case chosen{"tensor", "bf16", 4096, 6144, 512};
  run_tma(chosen, true);
}
