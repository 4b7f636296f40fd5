// kjit_gemm on the GPU against the fp64 CPU reference, on fresh random inputs: every path (the
// sm90 tensor-core kernel and the decode kernel for m <= 128 where the device and the operands
// allow them, the mma_sm80 kernel on other devices, for rows TMA refuses and forced through its
// tactics, the fp32 fallback forced by rows cp.async cannot copy), odd sizes at every tile edge,
// bias, alpha / beta over a preset out, row-strided a, b and out, every out dtype, every K
// split of the decode path, and the persistent sm90 kernel (forced) over more tiles than SMs.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "runtime/jit_core.hpp"
#include "reference/gemm_ref.hpp"
#include "gemm_test_util.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;
namespace ops = kjit::ops;

namespace {

struct Case {
  std::string dtype;  // a, b, bias
  std::string out_dtype;
  int64_t m, n, k;
  bool bias = false;
  float alpha = 1.0f, beta = 0.0f;
  int64_t a_stride = 0;    // 0 = compact (k)
  int64_t out_stride = 0;  // 0 = compact (n)
  size_t a_offset = 0;     // elements into a's buffer (misalignment)
  int split = 0;           // the decode path's K split (ops::GemmTuning); 0: kjit_gemm's choice
  int64_t b_stride = 0;    // 0 = compact (k)
  std::string tactic;      // a forced tactic (ops::GemmTuning); empty: kjit_gemm's choice
  // Through ops::gemm with the default tuning instead of kjit_gemm: the kernel observer below
  // then sees the call's kernels even when KJIT_LOG_LEVEL installs the call log's own.
  bool ops_call = false;
};

std::string describe(const Case& c) {
  return c.dtype + "->" + c.out_dtype + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
         " k=" + std::to_string(c.k) + " bias=" + std::to_string(c.bias) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " a_stride=" + std::to_string(c.a_stride) + " out_stride=" + std::to_string(c.out_stride) +
         " a_offset=" + std::to_string(c.a_offset) + " split=" + std::to_string(c.split) +
         " b_stride=" + std::to_string(c.b_stride) + " tactic=" + c.tactic;
}

// The path select_gemm takes for this call on device 0 (the test states which one it expects),
// or the forced tactic's.
ops::GemmPath path_for(const Case& c) {
  if (!c.tactic.empty()) return ops::GemmTactic::parse(c.tactic)->path;
  const size_t es = ref::elem_size(c.dtype);
  const int64_t as = c.a_stride ? c.a_stride : c.k;
  const int64_t bs = c.b_stride ? c.b_stride : c.k;
  // The buffers come from cuMemAlloc (256-byte aligned): only the offset and strides matter.
  const bool rows_ok = (c.a_offset * es) % 16 == 0 && (c.m == 1 || (as * es) % 16 == 0) &&
                       (c.n == 1 || (bs * es) % 16 == 0);
  const bool tma_ok = rows_ok && c.k > 0 && (c.k * es) % 16 == 0;
  return ops::select_gemm(ops::dtype_from_name(c.dtype), ops::dtype_from_name(c.out_dtype), c.m,
                          c.n, c.k, ops::gemm_target(0, tma_ok, rows_ok))
      .path;
}

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c) << " path " << ops::gemm_path_name(path_for(c)));
  const size_t es = ref::elem_size(c.dtype);
  const size_t os_bytes = ref::elem_size(c.out_dtype);
  const int64_t as = c.a_stride ? c.a_stride : c.k;
  const int64_t ys = c.out_stride ? c.out_stride : c.n;
  const int64_t bs = c.b_stride ? c.b_stride : c.k;
  const size_t a_elems = c.a_offset + static_cast<size_t>((c.m - 1) * as + c.k);
  const size_t b_elems = static_cast<size_t>((c.n - 1) * bs + c.k);
  const size_t y_elems = static_cast<size_t>((c.m - 1) * ys + c.n);

  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<unsigned char> a_host(a_elems * es), b_host(b_elems * es), bias_host(c.n * es);
  for (size_t i = 0; i < a_elems; ++i) ref::store_elem(a_host.data(), i, dist(rng), c.dtype);
  for (size_t i = 0; i < b_elems; ++i) ref::store_elem(b_host.data(), i, dist(rng), c.dtype);
  for (int64_t i = 0; i < c.n; ++i) ref::store_elem(bias_host.data(), i, dist(rng), c.dtype);
  // out: poisoned (NaN) everywhere, then, when beta reads it, random values inside the view.
  std::vector<unsigned char> y_host(y_elems * os_bytes, 0xFF);
  if (c.beta != 0.0f) {
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t j = 0; j < c.n; ++j) {
        ref::store_elem(y_host.data(), static_cast<size_t>(r * ys + j), dist(rng), c.out_dtype);
      }
    }
  }
  const std::vector<unsigned char> y_old = y_host;

  DeviceBuffer a_dev(a_host.size()), b_dev(b_host.size()), bias_dev(bias_host.size()),
      y_dev(y_host.size());
  a_dev.upload(a_host.data(), a_host.size());
  b_dev.upload(b_host.data(), b_host.size());
  bias_dev.upload(bias_host.data(), bias_host.size());
  y_dev.upload(y_host.data(), y_host.size());

  char* a_ptr = static_cast<char*>(a_dev.get()) + c.a_offset * es;
  auto a_t = make_tensor(a_ptr, {c.m, c.k}, dl_dtype(c.dtype), {as, 1});
  auto b_t = make_tensor(b_dev.get(), {c.n, c.k}, dl_dtype(c.dtype), {bs, 1});
  auto bias_t = make_tensor(bias_dev.get(), {c.n}, dl_dtype(c.dtype));
  auto y_t = make_tensor(y_dev.get(), {c.m, c.n}, dl_dtype(c.out_dtype), {ys, 1});
  if (c.split != 0 || !c.tactic.empty() || c.ops_call) {  // the ops layer's tuning
    ops::GemmTuning tuning;
    tuning.split = c.split;
    tuning.tactic = c.tactic;
    REQUIRE_NOTHROW(ops::gemm(a_t.get(), b_t.get(), c.bias ? bias_t.get() : nullptr, y_t.get(),
                              c.alpha, c.beta, nullptr, tuning));
  } else {
    kjit_gemm_options opt;
    kjit_gemm_options_init(&opt);
    opt.alpha = c.alpha;
    opt.beta = c.beta;
    const kjit_status st =
        kjit_gemm(a_t.get(), b_t.get(), c.bias ? bias_t.get() : nullptr, y_t.get(), &opt, nullptr);
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
  }
  device_synchronize();
  y_dev.download(y_host.data(), y_host.size());

  std::vector<double> b_rows(static_cast<size_t>(c.n * c.k)), bias(static_cast<size_t>(c.n));
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t i = 0; i < c.k; ++i) {
      b_rows[static_cast<size_t>(j * c.k + i)] =
          ref::load_elem(b_host.data(), static_cast<size_t>(j * bs + i), c.dtype);
    }
  }
  for (int64_t j = 0; c.bias && j < c.n; ++j)
    bias[j] = ref::load_elem(bias_host.data(), j, c.dtype);
  const GemmOut o{c.m, c.n, c.k, c.alpha, c.beta, ys, c.out_dtype, &y_host, &y_old};
  check_gemm_out(
      o,
      [&](int64_t r, double* row) {
        for (int64_t i = 0; i < c.k; ++i) {
          row[i] =
              ref::load_elem(a_host.data(), c.a_offset + static_cast<size_t>(r * as + i), c.dtype);
        }
      },
      b_rows, bias,
      [&](double want, double sum_abs) {
        return ref::gemm_tolerance(c.out_dtype, want, sum_abs, c.k);
      });
}

bool tensor_cores() {
  return kjit::test::gpu_caps().sm90a();
}

// The path a TMA-describable call of m rows takes on this device when n is small (at most a few
// 128-row tiles, fewer than the SMs).
// (At K <= 8192 and few columns, as in the shapes below: the decode kernel up to 64 rows, the
// sm90 tiles past that.)
ops::GemmPath fast_path(int64_t m) {
  if (!tensor_cores()) return ops::GemmPath::kMmaSm80;
  return m <= 64 ? ops::GemmPath::kSm90Decode : ops::GemmPath::kSm90;
}

// The mma_sm80 kernel's tactics: both tile widths at both depths.
const char* const kMmaTactics[] = {"mma_bn128_s3", "mma_bn64_s4", "mma_bn128_s4", "mma_bn64_s3"};

}  // namespace

TEST_CASE("gemm gpu: small and odd shapes on both paths", "[gpu][gemm]") {
  std::mt19937_64 rng(std::random_device{}());
  // k a multiple of 8 (TMA-describable): the sm90 kernel on an H100 / H200. M, N and K off every
  // tile edge (128 rows, 128 / 256 columns, 64 of K), k = 16 (a quarter of a K block).
  for (const char* dt : {"bf16", "fp16"}) {
    for (const char* od : {dt, "fp32"}) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 128, 64},
                                                                       {1, 200, 16},
                                                                       {7, 136, 72},
                                                                       {130, 300, 136},
                                                                       {128, 256, 16},
                                                                       {129, 129, 520},
                                                                       {600, 520, 264}}) {
        Case c{dt, od, m, n, k};
        CHECK(path_for(c) == fast_path(m));
        run_case(c, rng);
      }
    }
  }
  // Compact rows of k odd or not a multiple of 8 are not 16-byte aligned: the fallback on every
  // device (m = 1 with n = 1 aside, whose single rows have no stride).
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {1, 64, 1}, {5, 77, 13}, {70, 130, 67}, {129, 65, 130}}) {
    Case c{"bf16", "bf16", m, n, k};
    CHECK(path_for(c) == ops::GemmPath::kSimt);
    run_case(c, rng);
  }
}

TEST_CASE("gemm gpu: bias, alpha and beta over a preset out, strided views", "[gpu][gemm]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t k : {int64_t{136}, int64_t{67}}) {  // sm90 (where available) and the fallback
    for (const char* od : {"bf16", "fp16", "fp32"}) {
      const char* dt = std::string(od) == "fp16" ? "fp16" : "bf16";
      Case c{dt, od, 150, 260, k};
      c.bias = true;
      run_case(c, rng);
      c.alpha = 0.5f;
      c.beta = -1.25f;
      run_case(c, rng);
      c.a_stride = k + 24;  // still 16-byte rows for k = 136
      c.out_stride = 260 + 5;
      run_case(c, rng);
    }
  }
  // A base that is only element-aligned sends an otherwise TMA-ready call to the fallback.
  Case off{"bf16", "bf16", 33, 96, 64};
  off.a_offset = 1;
  off.a_stride = 72;
  CHECK(path_for(off) == ops::GemmPath::kSimt);
  run_case(off, rng);
  // k = 0: out = beta * out + bias.
  Case zero{"bf16", "fp32", 9, 40, 0};
  zero.bias = true;
  zero.beta = 2.0f;
  run_case(zero, rng);
}

TEST_CASE("gemm gpu: long k and the wide tile", "[gpu][gemm]") {
  std::mt19937_64 rng(std::random_device{}());
  run_case({"bf16", "bf16", 64, 96, 8192}, rng);
  run_case({"fp16", "fp32", 3, 200, 8192}, rng);
  run_case({"bf16", "bf16", 1000, 1000, 1000}, rng);  // bn = 256 on sm90
  run_case({"bf16", "fp32", 520, 1024, 2048}, rng);
}

TEST_CASE("gemm gpu: the decode path at every token tile, split and epilogue",
          "[gpu][gemm][sm90a]") {
  std::mt19937_64 rng(std::random_device{}());
  // Every token tile (16 .. 128) and its edges; n off the 128-row weight tile; k from a quarter of
  // a K block to 128 blocks, the library's split each time. Past 64 rows the library takes this
  // path only where K is past 8192 (select_gemm): 8192 more there, the same tails.
  for (int64_t m : {1, 3, 16, 17, 64, 127, 128}) {
    for (const auto& [n, k0] :
         std::vector<std::array<int64_t, 2>>{{301, 16}, {129, 8192}, {77, 520}}) {
      const int64_t k = m > 64 ? k0 + 8192 : k0;
      for (const char* od : {"bf16", "fp16", "fp32"}) {
        const char* dt = std::string(od) == "fp16" ? "fp16" : "bf16";
        Case c{dt, od, m, n, k};
        CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
        run_case(c, rng);
      }
    }
  }
  // Every split over the same shape, so a reduction that drops, doubles or misplaces a block's
  // partial sums fails: 17 K blocks (uneven shares), tokens in two 8-token groups owned by
  // different blocks, n past one tile.
  // (128 rows at this K take the sm90 tiles by default: the decode tactic forced there.)
  for (int split = 1; split <= kjit::gemm::kGemmDecodeMaxSplit; ++split) {
    for (int64_t m : {1, 17, 128}) {
      Case c{"bf16", "fp32", m, 200, 17 * 64 + 8};
      if (m > 64) {
        c.tactic = "decode_t128_split" + std::to_string(split);
      } else {
        c.split = split;
      }
      CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
      run_case(c, rng);
    }
  }
  // The deeper rings of one block an SM (the decode_t<T>_s<N> tactics): each token tile, K split
  // unevenly and not at all, K many times a ring's length.
  for (const auto& [m, tactic] :
       std::vector<std::pair<int64_t, const char*>>{{3, "decode_t16_s12_split3"},
                                                    {30, "decode_t32_s11_split1"},
                                                    {50, "decode_t64_s9_split3"},
                                                    {128, "decode_t128_s7_split2"}}) {
    Case c{"bf16", "bf16", m, 200, 64 * 64 + 8};
    c.tactic = tactic;
    CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
    run_case(c, rng);
  }
  // More splits than K blocks: the blocks without K contribute zeros.
  Case thin{"fp16", "fp16", 9, 130, 72};
  thin.split = 8;
  run_case(thin, rng);
  // The epilogue: bias, beta = 1 over a preset out, alpha, strided a and out, every out dtype.
  for (const char* od : {"bf16", "fp16", "fp32"}) {
    const char* dt = std::string(od) == "fp16" ? "fp16" : "bf16";
    for (int64_t m : {1, 17, 127}) {
      const int64_t k = m > 64 ? 8192 + 64 : 4096;  // past 64 rows: K past 8192 (select_gemm)
      Case c{dt, od, m, 333, k};
      c.bias = true;
      c.beta = 1.0f;
      run_case(c, rng);
      c.alpha = -0.75f;
      c.a_stride = k + 64;
      c.out_stride = 333 + 7;
      CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
      run_case(c, rng);
      c.split = 3;
      run_case(c, rng);
    }
  }
}

TEST_CASE("gemm gpu: the mma_sm80 kernel forced over odd shapes, both dtypes, every out dtype",
          "[gpu][gemm]") {
  // Its tactics are valid on any sm_80+ device, so on the H200 too. M, N and K across the block
  // tile (128 x 64 / 128) and the 32-wide K block: one row, a few, one past a tile; N from one n8
  // tile to past a 128 tile; k = 16 (half a K block), 40 (a block and a quarter), 8192 (256
  // blocks, the ring wraps many times). Each shape under one of the four tactics in turn.
  std::mt19937_64 rng(std::random_device{}());
  int turn = 0;
  for (const char* dt : {"bf16", "fp16"}) {
    for (const char* od : {dt, "fp32"}) {
      for (int64_t m : {1, 7, 129}) {
        for (int64_t n : {8, 72, 200}) {
          for (int64_t k : {16, 40, 8192}) {
            Case c{dt, od, m, n, k};
            c.tactic = kMmaTactics[turn++ % 4];
            run_case(c, rng);
          }
        }
      }
    }
  }
}

TEST_CASE("gemm gpu: the mma_sm80 kernel's epilogue, strided views and K tails", "[gpu][gemm]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* tactic : kMmaTactics) {
    for (const char* od : {"bf16", "fp16", "fp32"}) {
      const char* dt = std::string(od) == "fp16" ? "fp16" : "bf16";
      // Bias and beta = 1 over a preset out; then alpha, a and b row-strided (16-byte rows) and
      // out with an odd row stride (its columns go out one at a time).
      Case c{dt, od, 150, 260, 200};
      c.tactic = tactic;
      c.bias = true;
      c.beta = 1.0f;
      run_case(c, rng);
      c.alpha = -0.75f;
      c.beta = 0.5f;
      c.a_stride = 200 + 8;
      c.b_stride = 200 + 24;
      c.out_stride = 260 + 5;
      run_case(c, rng);
    }
    // K not a multiple of 8 inside 16-byte rows: the last chunk of a row is partial (a copy of
    // 2 .. 14 bytes, the rest zero-filled); k = 1 and k = 0 (out = beta * out + bias).
    for (const auto& [k, stride] :
         std::vector<std::array<int64_t, 2>>{{36, 40}, {13, 16}, {1, 8}, {33, 48}, {1001, 1008}}) {
      Case c{"bf16", "fp32", 130, 70, k};
      c.tactic = tactic;
      c.a_stride = c.b_stride = stride;
      c.bias = true;
      run_case(c, rng);
    }
    Case zero{"fp16", "fp16", 9, 40, 0};
    zero.tactic = tactic;
    zero.bias = true;
    zero.beta = 2.0f;
    run_case(zero, rng);
  }
}

TEST_CASE("gemm gpu: rows TMA refuses take the mma_sm80 kernel, visible in the call's kernels",
          "[gpu][gemm]") {
  // k = 36 in rows of 40 elements: 16-byte aligned rows (cp.async copies them) whose width TMA's
  // rule refuses. On sm_90a this call went to the fp32 fallback before the mma_sm80 path; on
  // every sm_80+ device it now runs the tensor-core kernel, at decode and at prefill sizes.
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t m : {1, 16, 300}) {
    Case c{"bf16", "bf16", m, 520, 36};
    c.a_stride = c.b_stride = 40;
    c.bias = true;
    c.ops_call = true;
    INFO(describe(c));
    CHECK(path_for(c) == ops::GemmPath::kMmaSm80);
    KernelUris seen;
    run_case(c, rng);
    REQUIRE_FALSE(seen.uris.empty());  // the call's own kernel last (after any tuning's)
    CHECK(seen.uris.back().find("gemm_path_sm80_dtype_bf16_out_dtype_bf16_bn_") == 0);
  }
  // A TMA-ready call on an H200 still takes the wgmma kernels.
  if (tensor_cores()) {
    Case c{"bf16", "bf16", 300, 520, 40};
    c.ops_call = true;
    KernelUris seen;
    run_case(c, rng);
    REQUIRE_FALSE(seen.uris.empty());
    CHECK(seen.uris.back().find("gemm_path_sm90_") == 0);
  }
  // Rows that are not 16-byte aligned: the fallback.
  Case odd{"bf16", "bf16", 40, 72, 36};
  odd.a_stride = 44;
  odd.ops_call = true;
  CHECK(path_for(odd) == ops::GemmPath::kSimt);
  KernelUris seen;
  run_case(odd, rng);
  REQUIRE_FALSE(seen.uris.empty());
  CHECK(seen.uris.back().find("gemm_path_simt_") == 0);
}

TEST_CASE("gemm gpu: the persistent sm90 kernel over more tiles than SMs", "[gpu][gemm][sm90a]") {
  // Forced through its tactics: every block takes two to five tiles, so the ring's running stage
  // count crosses tiles at every offset. M and N off the tile edges; k not a multiple of the
  // 64-wide K block (TMA zero-fills the last one), from less than one K block (each tile a single
  // stage: the barriers' parity turns every STAGES tiles) to 12; rings of 2 to 6 stages.
  std::mt19937_64 rng(std::random_device{}());
  const int sms = kjit::cuda::device_info(0).sm_count;
  const auto tiles = [](const Case& c, int bn) {
    return ((c.m + 127) / 128) * ((c.n + bn - 1) / bn);
  };
  const auto run_persistent = [&](Case c) {
    const std::optional<ops::GemmTactic> t = ops::GemmTactic::parse(c.tactic);
    REQUIRE(t);
    REQUIRE(t->persistent);
    INFO(describe(c) << " tiles " << tiles(c, t->bn) << " SMs " << sms);
    CHECK(tiles(c, t->bn) > sms);  // else a block has one tile and the loop is not exercised
    KernelUris seen;
    run_case(c, rng);
    REQUIRE_FALSE(seen.uris.empty());
    CHECK(seen.uris.back().find("_persistent_1") != std::string::npos);
  };
  const char* const kOuts[][2] = {
      {"bf16", "bf16"}, {"fp16", "fp16"}, {"bf16", "fp32"}, {"fp16", "fp32"}};
  int turn = 0;
  for (const char* tactic : {"sm90_bn128_s6_p", "sm90_bn256_s4_p"}) {
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {2000, 3000, 520}, {2000, 3000, 200}, {2049, 4100, 40}, {1100, 3900, 712}}) {
      const auto& io = kOuts[turn++ % 4];
      Case c{io[0], io[1], m, n, k};
      c.tactic = tactic;
      run_persistent(c);
    }
  }
  // The brief's shape on the 128-wide tile (8 x 24 = 192 tiles), every out dtype.
  for (const auto& io : kOuts) {
    Case c{io[0], io[1], 1000, 3000, 520};
    c.tactic = "sm90_bn128_s6_p";
    run_persistent(c);
  }
  // Other ring depths: the stage count wraps at 4, 6 and 8.
  for (const char* tactic : {"sm90_bn128_s2_p", "sm90_bn128_s3_p", "sm90_bn256_s3_p"}) {
    Case c{"bf16", "bf16", 2000, 3000, 200};
    c.tactic = tactic;
    run_persistent(c);
  }
  // The epilogue: bias, beta = 1 over a preset out, alpha, row-strided a and out, every out dtype.
  for (const char* od : {"bf16", "fp16", "fp32"}) {
    const char* dt = std::string(od) == "fp16" ? "fp16" : "bf16";
    Case c{dt, od, 1000, 3000, 264};
    c.tactic = "sm90_bn128_s6_p";
    c.bias = true;
    c.beta = 1.0f;
    c.alpha = -0.75f;
    c.a_stride = 264 + 64;
    c.out_stride = 3000 + 7;
    run_persistent(c);
  }
}

TEST_CASE("gemm gpu: weights_early after the kernel that writes a, eager and graph replay",
          "[gpu][gemm][sm90a]") {
  // kjit_gemm_options::weights_early: the decode path launches as a programmatic dependent of the
  // kernel before (here kjit_rmsnorm, which writes a, the engine's pattern) and loads b's first
  // stages while that kernel runs. a is poisoned before each round: a GEMM that read it before
  // the norm finished would see NaN.
  const auto& d = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> dist(-1.0, 1.0), pos(0.5, 1.5);
  CUstream s = nullptr;
  REQUIRE(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  for (int64_t m : {1, 16, 61}) {
    const int64_t n = 1000, k = 4096;
    Case c{"bf16", "bf16", m, n, k};
    CHECK(path_for(c) == ops::GemmPath::kSm90Decode);
    std::vector<unsigned char> x_h(static_cast<size_t>(m * k) * 2), g_h(static_cast<size_t>(k) * 2),
        b_h(static_cast<size_t>(n * k) * 2);
    for (int64_t i = 0; i < k; ++i) ref::store_elem(g_h.data(), i, pos(rng), "bf16");
    for (int64_t i = 0; i < n * k; ++i) ref::store_elem(b_h.data(), i, dist(rng), "bf16");
    DeviceBuffer x(x_h.size()), g(g_h.size()), a(x_h.size()), b(b_h.size()),
        y(static_cast<size_t>(m * n) * 2);
    g.upload(g_h.data(), g_h.size());
    b.upload(b_h.data(), b_h.size());
    auto x_t = make_tensor(x.get(), {m, k}, dl_dtype("bf16"));
    auto g_t = make_tensor(g.get(), {k}, dl_dtype("bf16"));
    auto a_t = make_tensor(a.get(), {m, k}, dl_dtype("bf16"));
    auto b_t = make_tensor(b.get(), {n, k}, dl_dtype("bf16"));
    auto y_t = make_tensor(y.get(), {m, n}, dl_dtype("bf16"));
    kjit_gemm_options opt;
    kjit_gemm_options_init(&opt);
    opt.weights_early = 1;
    const auto enqueue = [&] {
      REQUIRE(kjit_rmsnorm(x_t.get(), g_t.get(), a_t.get(), 1e-6f, s) == KJIT_SUCCESS);
      const kjit_status st = kjit_gemm(a_t.get(), b_t.get(), nullptr, y_t.get(), &opt, s);
      INFO("kjit_last_error: " << kjit_last_error());
      REQUIRE(st == KJIT_SUCCESS);
    };
    std::vector<double> b_rows(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n * k; ++i) b_rows[i] = ref::load_elem(b_h.data(), i, "bf16");
    // Round 0 eager, rounds 1 and 2 replays of a graph captured after it, each with new x.
    INFO("m " << m);
    eager_then_graph_rounds(
        s,
        [&](int) {
          for (int64_t i = 0; i < m * k; ++i) ref::store_elem(x_h.data(), i, dist(rng), "bf16");
          x.upload(x_h.data(), x_h.size());
          a.fill(0xFF);
          y.fill(0xFF);
        },
        enqueue,
        [&](int) {
          std::vector<unsigned char> a_h(x_h.size()), y_h(static_cast<size_t>(m * n) * 2);
          a.download(a_h.data(), a_h.size());
          y.download(y_h.data(), y_h.size());
          const GemmOut o{m, n, k, 1.0, 0.0, n, "bf16", &y_h, nullptr};
          const double worst = check_gemm_out(
              o,
              [&](int64_t r, double* row) {
                for (int64_t i = 0; i < k; ++i) {
                  row[i] = ref::load_elem(a_h.data(), static_cast<size_t>(r * k + i), "bf16");
                }
              },
              b_rows, {},
              [&](double want, double sum_abs) {
                return ref::gemm_tolerance("bf16", want, sum_abs, k);
              });
          CHECK(worst <= 1.0);
        });
  }
  d.cuStreamDestroy(s);
}

TEST_CASE("gemm gpu: the TMA-store epilogue at every edge, one-tile and persistent",
          "[gpu][gemm][sm90a]") {
  // A 16-bit out TMA can describe, with beta 0, is stored through shared memory by TMA (URI flag
  // tma_out): each warpgroup's 64 rows 64 columns at a time, the slabs past m or n skipped and
  // TMA clipping the rest. M off the 64-row halves (m 130: the last tile's second half has no row;
  // 200: part of one), N off the 64-column slabs (72, 136, 3000 = 46 slabs + 56), one row, bias and
  // alpha, a row-strided out over a poisoned gap; both tile widths, one-tile and persistent.
  std::mt19937_64 rng(std::random_device{}());
  const auto run_tma = [&](Case c, bool want_tma) {
    INFO(describe(c));
    check_tma_out([&] { run_case(c, rng); }, want_tma);
  };
  int turn = 0;
  for (const char* tactic : {"sm90_bn128_s6", "sm90_bn256_s4", "sm90_bn128_s6_p", "sm90_bn256_s4_p",
                             "sm90_bn128_s4", "sm90_bn256_s3"}) {
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {130, 136, 200}, {200, 72, 64}, {1, 3000, 520}, {2000, 3000, 264}, {257, 520, 8}}) {
      const char* dt = turn++ % 2 == 0 ? "bf16" : "fp16";
      Case c{dt, dt, m, n, k};
      c.tactic = tactic;
      c.bias = turn % 3 == 0;
      c.alpha = turn % 4 == 0 ? -0.75f : 1.0f;
      run_tma(c, true);
    }
    // A row stride past n (still 16-byte rows): the gap between rows stays poisoned.
    Case strided{"bf16", "bf16", 300, 200, 136};
    strided.tactic = tactic;
    strided.out_stride = 200 + 24;
    strided.bias = true;
    run_tma(strided, true);
  }
  // Where it must not apply: beta reads out, an fp32 out, rows TMA cannot describe (a stride of
  // 4 elements past n, n * 2 bytes off 16). The register epilogue serves them.
  for (const char* tactic : {"sm90_bn128_s6", "sm90_bn256_s4_p"}) {
    Case beta{"bf16", "bf16", 300, 200, 136};
    beta.tactic = tactic;
    beta.beta = 0.5f;
    run_tma(beta, false);
    Case wide_out{"bf16", "fp32", 300, 200, 136};
    wide_out.tactic = tactic;
    run_tma(wide_out, false);
    Case odd_stride{"fp16", "fp16", 300, 200, 136};
    odd_stride.tactic = tactic;
    odd_stride.out_stride = 204;
    run_tma(odd_stride, false);
    Case odd_n{"fp16", "fp16", 300, 204, 136};
    odd_n.tactic = tactic;
    run_tma(odd_n, false);
  }
  // kjit_gemm's own choice on a large shape takes it.
  Case chosen{"bf16", "bf16", 1024, 4096, 512};
  chosen.ops_call = true;
  run_tma(chosen, true);
}
