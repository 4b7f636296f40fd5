// The fp8 block-scaled grouped GEMM (kjit_moe_grouped_gemm_fp8, _masked, and the SwiGLU form
// kjit_moe_forward uses) on the GPU against fp64 on fresh random e4m3 codes and scales, outputs
// poisoned first: every output of every expert's rows held to ref::gemm_fp8_error_bound (through
// ref::moe_gemm_fp8_element), every other row left as poison; experts of 0, 1 and many rows,
// skewed routing, decode-sized experts, n and k off the tile and scale-block edges, scales 2^10
// apart between neighbouring blocks (along K, along n and between experts), masked counts
// clamped and changed between CUDA graph replays, and the calls the sm_90a kernel cannot take
// refused with KJIT_ERROR_UNSUPPORTED.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "gemm_test_util.hpp"
#include "util/error.hpp"
#include "kjit/kjit.h"
#include "moe_test_util.hpp"
#include "ops/moe/moe.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "reference/moe_ref.hpp"
#include "support/gpu.hpp"
#include "support/parallel_rows.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;
namespace ops = kjit::ops;

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct Fp8Case {
  std::string out_dtype = "bf16";
  std::vector<int> counts;  // rows per expert (masked: clamped into [0, max_rows])
  int n = 0, k = 0;         // swiglu: n = 2 I
  bool masked = false;
  int max_rows = 0;
  int spare_rows = 0;         // contiguous: rows of a past offsets[experts] (must stay poisoned)
  bool swiglu = false;        // ops::moe_grouped_gemm_fp8_swiglu{,_masked}: out [rows, n / 2]
  bool wide_scales = false;   // neighbouring scale blocks 2^10 apart
  ops::MoeGemmTuning tuning;  // a forced kernel or split: through the ops layer
  int experts() const { return static_cast<int>(counts.size()); }
  int out_cols() const { return swiglu ? n / 2 : n; }
};

// Scales of `count` blocks, `chunks` per row of blocks: random 2^-3 .. 2^3, or (wide) 2^-5 / 2^5
// alternating along the chunks and the rows of blocks.
std::vector<float> random_scales(size_t count, int64_t chunks, bool wide, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> s(std::max<size_t>(count, 1));
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t parity = static_cast<int64_t>(i) % chunks + static_cast<int64_t>(i) / chunks;
    s[i] = wide ? (parity % 2 != 0 ? 0x1p5f : 0x1p-5f) : std::exp2(u(rng));
  }
  return s;
}

// Expert e's rows of a / out: [first[e], first[e] + used[e]); rows in all; the schedule tensor.
struct Layout {
  std::vector<int64_t> first, used;
  int64_t rows = 0;
  std::vector<int32_t> sched;
};

Layout layout_of(const Fp8Case& c) {
  Layout l;
  if (!c.masked) l.sched.push_back(0);
  for (int e = 0; e < c.experts(); ++e) {
    if (c.masked) {
      l.first.push_back(int64_t{e} * c.max_rows);
      l.used.push_back(std::clamp<int64_t>(c.counts[e], 0, c.max_rows));
      l.sched.push_back(c.counts[e]);
    } else {
      l.first.push_back(l.rows);
      l.used.push_back(c.counts[e]);
      l.rows += c.counts[e];
      l.sched.push_back(l.sched.back() + c.counts[e]);
    }
  }
  l.rows = c.masked ? int64_t{c.experts()} * c.max_rows : l.rows + c.spare_rows;
  return l;
}

// One case's operands on the host and the device; out poisoned.
struct Fp8Operands {
  Layout l;
  int64_t chunks = 0, n_blocks = 0;
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb;
  DeviceBuffer a_d, b_d, sa_d, sb_d, sched_d, out_d;
  Fp8Operands(const Fp8Case& c, std::mt19937_64& rng)
      : l(layout_of(c)),
        chunks(ceil_div(c.k, 128)),
        n_blocks(ceil_div(c.n, 128)),
        a(static_cast<size_t>(l.rows) * c.k),
        b(static_cast<size_t>(c.experts()) * c.n * c.k),
        sa(random_scales(static_cast<size_t>(l.rows * chunks), chunks, c.wide_scales, rng)),
        sb(random_scales(static_cast<size_t>(c.experts() * n_blocks * chunks), chunks,
                         c.wide_scales, rng)),
        a_d(std::max<size_t>(a.size(), 1)),
        b_d(b.size()),
        sa_d(sa.size() * sizeof(float)),
        sb_d(sb.size() * sizeof(float)),
        sched_d(l.sched.size() * sizeof(int32_t)),
        out_d(std::max<size_t>(
            1, static_cast<size_t>(l.rows) * c.out_cols() * ref::elem_size(c.out_dtype))) {
    for (auto& x : a) x = random_e4m3_code(rng);
    for (auto& x : b) x = random_e4m3_code(rng);
    if (!a.empty()) a_d.upload(a.data(), a.size());
    b_d.upload(b.data(), b.size());
    sa_d.upload(sa.data(), sa.size() * sizeof(float));
    sb_d.upload(sb.data(), sb.size() * sizeof(float));
    upload_sched();
    out_d.fill(0xFF);
  }
  void upload_sched() { sched_d.upload(l.sched.data(), l.sched.size() * sizeof(int32_t)); }
};

// The call's tensors over Fp8Operands' buffers.
struct Fp8Tensors {
  Tensor a, b, sa, sb, sched, out;
  Fp8Tensors(const Fp8Case& c, const Fp8Operands& o) {
    const int64_t e = c.experts();
    const DLDataType f8 = dl_dtype("e4m3"), f32 = dl_dtype("fp32"), i32 = dl_dtype("int32");
    b = make_tensor(o.b_d.get(), {e, c.n, c.k}, f8);
    sb = make_tensor(o.sb_d.get(), {e, o.n_blocks, o.chunks}, f32);
    if (c.masked) {
      a = make_tensor(o.a_d.get(), {e, c.max_rows, c.k}, f8);
      sa = make_tensor(o.sa_d.get(), {e, c.max_rows, o.chunks}, f32);
      sched = make_tensor(o.sched_d.get(), {e}, i32);
      out = make_tensor(o.out_d.get(), {e, c.max_rows, c.out_cols()}, dl_dtype(c.out_dtype));
    } else {
      a = make_tensor(o.a_d.get(), {o.l.rows, c.k}, f8);
      sa = make_tensor(o.sa_d.get(), {o.l.rows, o.chunks}, f32);
      sched = make_tensor(o.sched_d.get(), {e + 1}, i32);
      out = make_tensor(o.out_d.get(), {o.l.rows, c.out_cols()}, dl_dtype(c.out_dtype));
    }
  }
};

// Runs the case's entry point (the SwiGLU form through the ops layer, which kjit_moe_forward
// calls). False: the SwiGLU form declined the call.
bool call(const Fp8Case& c, Fp8Tensors& t, void* stream) {
  if (c.swiglu) {
    return c.masked
               ? ops::moe_grouped_gemm_fp8_swiglu_masked(t.a.get(), t.b.get(), t.sa.get(),
                                                         t.sb.get(), t.sched.get(), t.out.get(),
                                                         stream, c.tuning)
               : ops::moe_grouped_gemm_fp8_swiglu(t.a.get(), t.b.get(), t.sa.get(), t.sb.get(),
                                                  t.sched.get(), t.out.get(), stream, c.tuning);
  }
  if (forced(c.tuning)) {
    if (c.masked) {
      REQUIRE_NOTHROW(ops::moe_grouped_gemm_fp8_masked(t.a.get(), t.b.get(), t.sa.get(), t.sb.get(),
                                                       t.sched.get(), t.out.get(), stream,
                                                       c.tuning));
    } else {
      REQUIRE_NOTHROW(ops::moe_grouped_gemm_fp8(t.a.get(), t.b.get(), t.sa.get(), t.sb.get(),
                                                t.sched.get(), t.out.get(), stream, c.tuning));
    }
    return true;
  }
  const kjit_status st =
      c.masked ? kjit_moe_grouped_gemm_fp8_masked(t.a.get(), t.b.get(), t.sa.get(), t.sb.get(),
                                                  t.sched.get(), t.out.get(), stream)
               : kjit_moe_grouped_gemm_fp8(t.a.get(), t.b.get(), t.sa.get(), t.sb.get(),
                                           t.sched.get(), t.out.get(), stream);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  return true;
}

// Checks the downloaded out against fp64: every output of the experts' rows within its bound
// (NaN fails), every other row still poison. Returns the largest |error| / bound.
double check(const Fp8Case& c, const Fp8Operands& o, const std::vector<unsigned char>& out) {
  const int cols = c.out_cols();
  std::vector<int> expert_of(static_cast<size_t>(o.l.rows), -1);
  for (int e = 0; e < c.experts(); ++e) {
    for (int64_t r = o.l.first[e]; r < o.l.first[e] + o.l.used[e]; ++r) expert_of[r] = e;
  }
  // A column's element: row r of a times row j of expert e's b.
  const auto element = [&](int64_t r, int e, int64_t j, const std::string& dt) {
    const size_t brow = (static_cast<size_t>(e) * c.n + j);
    return ref::moe_gemm_fp8_element(
        &o.a[static_cast<size_t>(r) * c.k], &o.sa[static_cast<size_t>(r) * o.chunks],
        &o.b[brow * c.k], &o.sb[(static_cast<size_t>(e) * o.n_blocks + j / 128) * o.chunks], c.k,
        dt);
  };
  // Every core (the fp8 bound walks each output's K in 32-wide groups: minutes on one core).
  const RowTally t = tally_rows(o.l.rows, [&](int64_t r, RowTally& t, int) {
    const int e = expert_of[r];
    for (int j = 0; j < cols; ++j) {
      const double got = ref::load_elem(out.data(), static_cast<size_t>(r) * cols + j, c.out_dtype);
      if (e < 0) {
        t.touched += !std::isnan(got);
        continue;
      }
      const ref::Fp8Element want = c.swiglu ? ref::moe_swiglu_of(element(r, e, j, "fp32"),
                                                                 element(r, e, c.n / 2 + j, "fp32"),
                                                                 ref::unit_roundoff(c.out_dtype))
                                            : element(r, e, j, c.out_dtype);
      const double err = std::fabs(got - want.want);
      const bool overflow = c.out_dtype == "fp16" && fp16_infinity_ok(got, want.want, want.bound);
      const bool must_overflow = c.out_dtype == "fp16" && fp16_must_overflow(want.want, want.bound);
      if (!overflow && (must_overflow || !(err <= want.bound))) {
        t.miss(r, [&] {
          std::ostringstream m;
          m << "expert " << e << " row " << r << " col " << j << " got " << got << " want "
            << want.want << " bound " << want.bound;
          return m.str();
        });
      } else if (want.bound > 0.0) {
        t.worst = std::max(t.worst, err / want.bound);
      }
    }
  });
  for (const auto& m : t.misses) UNSCOPED_INFO(m.second);
  CHECK(t.bad == 0);
  CHECK(t.touched == 0);
  return t.worst;
}

std::string describe(const Fp8Case& c) {
  return std::string(c.masked ? "masked" : "contiguous") + (c.swiglu ? " swiglu" : "") + " ->" +
         c.out_dtype + " experts " + std::to_string(c.experts()) + " n " + std::to_string(c.n) +
         " k " + std::to_string(c.k) + (c.wide_scales ? " wide scales" : "") +
         (c.tuning.force == ops::MoeGemmForce::kDecode  ? " forced decode"
          : c.tuning.force == ops::MoeGemmForce::kTiles ? " forced tiles"
                                                        : "") +
         (c.tuning.split != 0 ? " split " + std::to_string(c.tuning.split) : "") +
         (c.tuning.persistent ? " persistent" : "") +
         (c.tuning.bn != 0 ? " bn " + std::to_string(c.tuning.bn) : "");
}

// Runs one case on fresh operands and checks it; returns whether the call was served.
bool run_fp8(const Fp8Case& c, std::mt19937_64& rng) {
  INFO(describe(c));
  Fp8Operands o(c, rng);
  Fp8Tensors t(c, o);
  const bool ran = call(c, t, nullptr);
  device_synchronize();
  std::vector<unsigned char> out(static_cast<size_t>(o.l.rows) * c.out_cols() *
                                 ref::elem_size(c.out_dtype));
  if (!out.empty()) o.out_d.download(out.data(), out.size());
  if (!ran) {
    // Declined: nothing written.
    CHECK(std::all_of(out.begin(), out.end(), [](unsigned char x) { return x == 0xFF; }));
    return false;
  }
  const double worst = check(c, o, out);
  std::printf("moe_grouped_gemm_fp8 %s: max |error| / bound %.3f\n", describe(c).c_str(), worst);
  return true;
}

}  // namespace

TEST_CASE("moe fp8 gpu: grouped GEMM per expert against fp64", "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  // Experts of 0, 1 and many rows; n off the 128-wide tile (and scale block); k not a multiple
  // of 128 (a short last chunk); scales 2^10 apart between neighbouring blocks.
  for (const bool wide : {false, true}) {
    Fp8Case c;
    c.counts = uneven_counts(8, 700, rng);
    c.n = 200;
    c.k = 1040;
    c.spare_rows = 5;
    c.wide_scales = wide;
    CHECK(run_fp8(c, rng));
  }
  // fp32 and fp16 out.
  for (const char* od : {"fp32", "fp16"}) {
    Fp8Case c;
    c.out_dtype = od;
    c.counts = uneven_counts(5, 300, rng);
    c.n = 256;
    c.k = 256;
    CHECK(run_fp8(c, rng));
  }
  // Skewed: one expert takes 90% of 2000 rows.
  Fp8Case s;
  s.counts.assign(32, 6);
  s.counts[3] = 1814;
  s.n = 384;
  s.k = 512;
  s.wide_scales = true;
  CHECK(run_fp8(s, rng));
  // Decode: 128 experts with 0 - 2 rows each; k = 272, a short last chunk.
  Fp8Case d;
  for (int e = 0; e < 128; ++e) d.counts.push_back(e % 3 == 0 ? 1 : e % 3 == 1 ? 0 : 2);
  d.n = 192;
  d.k = 272;
  CHECK(run_fp8(d, rng));
  // k = 16: one partial chunk; n = 16: a sliver of one tile.
  Fp8Case tiny;
  tiny.counts = {2, 0, 1};
  tiny.n = 16;
  tiny.k = 16;
  CHECK(run_fp8(tiny, rng));
  // Every expert empty: nothing written.
  Fp8Case none;
  none.counts = {0, 0, 0};
  none.n = 128;
  none.k = 128;
  none.spare_rows = 3;
  CHECK(run_fp8(none, rng));
}

TEST_CASE("moe fp8 gpu: masked grouped GEMM, counts clamped", "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  for (const int k : {128, 144, 784}) {
    Fp8Case c;
    c.masked = true;
    c.max_rows = 130;
    c.counts = {0, 1, 130, 77, 500, -3};  // 500 and -3 clamp to 130 and 0
    c.n = 160;
    c.k = k;
    c.wide_scales = k == 784;
    CHECK(run_fp8(c, rng));
  }
}

TEST_CASE("moe fp8 gpu: gate / up GEMM with silu_and_mul fused, against fp64",
          "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  // I = 192: up slices start mid-block (rows 192 ..), gate and up in different blocks, the
  // scales 2^10 apart; I = 64, one slice.
  for (const int inter : {192, 64}) {
    Fp8Case c;
    c.swiglu = true;
    c.counts = uneven_counts(6, 400, rng);
    c.n = 2 * inter;
    c.k = 400;
    c.wide_scales = inter == 192;
    CHECK(run_fp8(c, rng));
  }
  Fp8Case m;
  m.swiglu = true;
  m.masked = true;
  m.max_rows = 70;
  m.counts = {0, 1, 70, 33, 99};
  m.n = 256;
  m.k = 256;
  CHECK(run_fp8(m, rng));
  // I = 136 would put an up slice across two scale blocks: declined, nothing written.
  Fp8Case odd;
  odd.swiglu = true;
  odd.counts = {3, 5};
  odd.n = 272;
  odd.k = 128;
  CHECK_FALSE(run_fp8(odd, rng));
}

TEST_CASE("moe fp8 gpu: the decode kernel against fp64", "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  const ops::MoeGemmForce decode = ops::MoeGemmForce::kDecode;
  // Experts of 0, 1 and many rows; n off the 128-row tile (and scale block); k = 1040, a short
  // last chunk; every split of K and the chosen one; scales 2^10 apart between blocks.
  for (const int split : {0, 1, 3, 8}) {
    Fp8Case c;
    c.counts = {0, 1, 17, 0, 5, 2};
    c.n = 200;
    c.k = 1040;
    c.spare_rows = 3;
    c.wide_scales = split == 3;
    c.tuning.force = decode;
    c.tuning.split = split;
    CHECK(run_fp8(c, rng));
  }
  // fp32 out; the 64-token tile (one block an SM, more stages); skewed past the tile: expert 0's
  // 150 rows take three 64-row tiles.
  Fp8Case f;
  f.out_dtype = "fp32";
  f.counts = {40, 3, 0, 1};
  f.n = 256;
  f.k = 384;
  f.tuning.force = decode;
  CHECK(run_fp8(f, rng));
  Fp8Case s;
  s.counts = {150, 2, 0, 7};
  s.n = 136;
  s.k = 272;
  s.wide_scales = true;
  s.tuning.force = decode;
  CHECK(run_fp8(s, rng));
  // The selection's own choice at decode shapes: 128 experts with 0 - 2 rows each; masked with
  // counts clamped to max_rows (a 16-token tile).
  Fp8Case q;
  for (int e = 0; e < 128; ++e) q.counts.push_back(e % 3 == 0 ? 1 : e % 3 == 1 ? 0 : 2);
  q.n = 192;
  q.k = 272;
  CHECK(run_fp8(q, rng));
  Fp8Case m;
  m.masked = true;
  m.max_rows = 5;
  m.counts = {0, 1, 5, 9, -2, 3};
  m.n = 320;
  m.k = 256;
  m.wide_scales = true;
  CHECK(run_fp8(m, rng));
  // SwiGLU: I = 192 (up slices start mid-block, scales 2^10 apart), I = 64 (one slice), split K,
  // masked.
  for (const int inter : {192, 64}) {
    Fp8Case w;
    w.swiglu = true;
    w.counts = {0, 1, 9, 0, 3};
    w.n = 2 * inter;
    w.k = 400;
    w.wide_scales = inter == 192;
    w.tuning.force = decode;
    w.tuning.split = inter == 64 ? 2 : 0;
    CHECK(run_fp8(w, rng));
  }
  Fp8Case wm;
  wm.swiglu = true;
  wm.masked = true;
  wm.max_rows = 40;
  wm.counts = {0, 1, 40, 33, 99};
  wm.n = 256;
  wm.k = 256;
  wm.tuning.force = decode;
  CHECK(run_fp8(wm, rng));
}

namespace {

// Captures case c's call (masked) in a CUDA graph, then replays it `rounds` times with the counts
// counts_of(round) uploaded before each (the graph is never rebuilt), checking every replay
// against fp64 and every row past the counts untouched.
template <typename CountsOf>
void replay_masked(Fp8Case c, int rounds, CountsOf counts_of, std::mt19937_64& rng) {
  const auto& drv = kjit::cuda::driver();
  Fp8Operands o(c, rng);
  Fp8Tensors t(c, o);
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  call(c, t, stream);  // warm-up: the first call may compile and load; capture must not
  REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  call(c, t, stream);
  REQUIRE(drv.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  REQUIRE(drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  for (int round = 0; round < rounds; ++round) {
    INFO("round " << round);
    c.counts = counts_of(round);
    const Layout l = layout_of(c);
    o.l = l;
    o.upload_sched();
    o.out_d.fill(0xFF);
    REQUIRE(drv.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    std::vector<unsigned char> out(static_cast<size_t>(l.rows) * c.out_cols() * 2);
    o.out_d.download(out.data(), out.size());
    check(c, o, out);
  }
  drv.cuGraphExecDestroy(exec);
  drv.cuGraphDestroy(graph);
  drv.cuStreamDestroy(stream);
}

}  // namespace

TEST_CASE("moe fp8 gpu: masked grouped GEMM replays in a CUDA graph with new counts",
          "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  Fp8Case c;
  c.masked = true;
  c.max_rows = 64;
  c.counts.assign(8, 1);
  c.n = 256;
  c.k = 384;
  std::uniform_int_distribution<int> pick(0, c.max_rows);
  const auto counts_of = [&](int round) {
    std::vector<int> counts;
    for (int e = 0; e < 8; ++e) counts.push_back(pick(rng));
    counts[round] = 0;
    return counts;
  };
  // The selection's kernel (the decode kernel at max_rows 64), then the 128-row tiles forced.
  replay_masked(c, 3, counts_of, rng);
  c.tuning.force = ops::MoeGemmForce::kTiles;
  replay_masked(c, 3, counts_of, rng);
}

TEST_CASE("moe fp8 gpu: the decode kernel replays in a CUDA graph with new counts",
          "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  // Many experts, a row or two each, most empty: the masked decode form of a graph engine.
  Fp8Case c;
  c.masked = true;
  c.max_rows = 2;
  c.counts.assign(64, 1);
  c.n = 384;
  c.k = 512;
  REQUIRE(ops::select_moe_gemm_fp8(ops::DType::kBF16, 128, c.n, c.k, 64, false,
                                   ops::gemm_target(0, true),
                                   ops::moe_decode_rows(true, 128, 2, 64))
              .tokens == 16);
  std::uniform_int_distribution<int> pick(0, 7);
  // Round 0: one active expert; then about a quarter active; round 3: none.
  const auto counts_of = [&](int round) {
    std::vector<int> counts;
    for (int e = 0; e < 64; ++e) {
      const int r = pick(rng);
      counts.push_back(round == 0 ? (e == 17 ? 1 : 0) : round == 3 ? 0 : r < 2 ? r + 1 : 0);
    }
    return counts;
  };
  replay_masked(c, 4, counts_of, rng);
  // SwiGLU (I = 192), a split K forced.
  c.swiglu = true;
  c.tuning.split = 3;
  replay_masked(c, 4, counts_of, rng);
}

namespace {

// The tile kernel's cases under `tuning` (a forced tile form): experts of 0, 1 and many rows, n off
// the tile, k with a short last chunk, scales 2^10 apart; k = 128 and 16: one stage an item (every
// item's record in the next slot); skewed routing (one expert 90% of 3000 rows); more items than
// SMs, with row tiles past the schedule's end inside a band of more items than the grid (bound
// tiles_m 48, n 4480; moe_gpu_test.cpp's bf16 case); SwiGLU at each of `inters` (the first with
// scales 2^10 apart), masked SwiGLU with counts clamped; every expert empty.
void run_tile_cases(const ops::MoeGemmTuning& tuning, const std::vector<int>& inters,
                    std::mt19937_64& rng) {
  for (const int k : {1040, 128, 16}) {
    Fp8Case c;
    c.counts = uneven_counts(8, 700, rng);
    c.n = 200;
    c.k = k;
    c.spare_rows = 5;
    c.wide_scales = k == 1040;
    c.tuning = tuning;
    CHECK(run_fp8(c, rng));
  }
  Fp8Case s;
  s.counts = skewed_counts(32, 3000, 3);
  s.n = 384;
  s.k = 512;
  s.wide_scales = true;
  s.tuning = tuning;
  CHECK(run_fp8(s, rng));
  Fp8Case b;
  b.counts = uneven_counts(24, 3000, rng);
  b.n = 4480;
  b.k = 128;
  b.tuning = tuning;
  CHECK(run_fp8(b, rng));
  for (const int inter : inters) {
    Fp8Case w;
    w.swiglu = true;
    w.counts = uneven_counts(16, 1500, rng);
    w.n = 2 * inter;
    w.k = 256;
    w.wide_scales = inter == inters.front();
    w.tuning = tuning;
    CHECK(run_fp8(w, rng));
  }
  Fp8Case m;
  m.swiglu = true;
  m.masked = true;
  m.max_rows = 130;
  m.counts = {0, 1, 130, 77, 500, -3};
  m.n = 256;
  m.k = 384;
  m.tuning = tuning;
  CHECK(run_fp8(m, rng));
  Fp8Case none;
  none.counts = {0, 0, 0};
  none.n = 128;
  none.k = 128;
  none.spare_rows = 3;
  none.tuning = tuning;
  CHECK(run_fp8(none, rng));
}

}  // namespace

TEST_CASE("moe fp8 gpu: the persistent tile kernel against fp64", "[gpu][moe][fp8][sm90a]") {
  // SwiGLU at I = 192 (gate and up in different scale blocks) and Qwen3's I = 768 (a band of 192
  // items).
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  ops::MoeGemmTuning persistent;
  persistent.persistent = true;
  run_tile_cases(persistent, {192, 768}, rng);
}

TEST_CASE("moe fp8 gpu: the persistent tile kernel in pairs against fp64",
          "[gpu][moe][fp8][sm90a]") {
  // MoeGemmTuning::pair: clusters of two blocks on column tiles 2j and 2j + 1 sharing a's rows,
  // at both widths; run_tile_cases' odd column tile counts (n 200 at 256 wide, 4480 at 128 wide:
  // 35) leave the last pair's second block a column tile past n that writes nothing.
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  ops::MoeGemmTuning pairs;
  pairs.pair = true;
  run_tile_cases(pairs, {192, 768}, rng);
  pairs.bn = 256;
  run_tile_cases(pairs, {256, 768}, rng);
}

// The default takes the pairs where experts have one row tile on average over a long K
// (ops::moe_pairs_pay): uneven counts, an empty expert, five column tiles (the last pair's second
// block past n).
TEST_CASE("moe fp8 gpu: the default takes pairs where experts have one row tile over a long K",
          "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  Fp8Case c;
  c.counts = {90, 0, 200, 17, 130, 64, 1, 110};
  c.n = 5 * 128 - 64;
  c.k = 4096;
  REQUIRE(ops::moe_pairs_pay(612 / 8, c.n, c.k, 128));
  KernelUris seen;
  CHECK(run_fp8(c, rng));
  REQUIRE_FALSE(seen.uris.empty());
  CHECK(seen.uris.back().find("_pair_1") != std::string::npos);
}

TEST_CASE("moe fp8 gpu: the 256-wide tile, one block per item and persistent, against fp64",
          "[gpu][moe][fp8][sm90a]") {
  // MoeGemmTuning::bn 256: each tile's two 128-column halves take their own 128-row block of
  // b's scales, or the gate and up blocks with SwiGLU (n = 200: the second half partly past n;
  // SwiGLU at I = 256 and Qwen3's 768, masked at 128). I = 192 is refused.
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  for (const bool pers : {false, true}) {
    ops::MoeGemmTuning wide;
    wide.bn = 256;
    wide.persistent = pers;
    wide.force = ops::MoeGemmForce::kTiles;
    run_tile_cases(wide, {256, 768}, rng);
  }
  Fp8Case odd;
  odd.swiglu = true;
  odd.counts = {10, 20};
  odd.n = 2 * 192;
  odd.k = 128;
  odd.tuning.bn = 256;
  odd.tuning.force = ops::MoeGemmForce::kTiles;
  CHECK_THROWS_AS(run_fp8(odd, rng), kjit::Error);
}

TEST_CASE("moe fp8 gpu: the persistent tile kernel replays in a CUDA graph with new counts",
          "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  // 16 experts of up to 160 rows, n = 1280 (up to 32 x 10 items, more than the SMs); round 0:
  // one expert 90%, round 1: random, round 2: none, round 3: every expert full.
  Fp8Case c;
  c.masked = true;
  c.max_rows = 160;
  c.counts.assign(16, 1);
  c.n = 1280;
  c.k = 128;
  c.tuning.persistent = true;
  std::uniform_int_distribution<int> pick(0, c.max_rows);
  const auto counts_of = [&](int round) {
    std::vector<int> counts;
    for (int e = 0; e < 16; ++e) counts.push_back(pick(rng));
    if (round == 0) counts = skewed_counts(16, c.max_rows * 10 / 9, 7);
    if (round == 2) counts.assign(16, 0);
    if (round == 3) counts.assign(16, c.max_rows);
    return counts;
  };
  replay_masked(c, 4, counts_of, rng);
  // SwiGLU (I = 640).
  c.swiglu = true;
  replay_masked(c, 4, counts_of, rng);
}

TEST_CASE("moe fp8 gpu: calls the sm_90a kernel cannot take are refused", "[gpu][moe][fp8]") {
  std::mt19937_64 rng(std::random_device{}());
  // k = 40: rows of 40 bytes, which TMA cannot read (no fallback): KJIT_ERROR_UNSUPPORTED on
  // every device; on one without sm_90a, every call.
  for (const int k : {40, 128}) {
    if (k == 128 && gpu_caps().sm90a()) continue;
    Fp8Case c;
    c.counts = {3, 2};
    c.n = 128;
    c.k = k;
    Fp8Operands o(c, rng);
    Fp8Tensors t(c, o);
    const kjit_status st = kjit_moe_grouped_gemm_fp8(t.a.get(), t.b.get(), t.sa.get(), t.sb.get(),
                                                     t.sched.get(), t.out.get(), nullptr);
    INFO("k " << k << " kjit_last_error: " << kjit_last_error());
    CHECK(st == KJIT_ERROR_UNSUPPORTED);
    CHECK(std::string(kjit_last_error()).find("sm_90a") != std::string::npos);
  }
}

// ---- the whole layer with fp8 experts (kjit_moe_forward_fp8) ----------------------------------

namespace {

struct LayerCase {
  std::string dtype = "bf16";
  int tokens = 1, experts = 8, top_k = 2, hidden = 256, inter = 128;
  bool shared = false;
};

// e4m3 weights [experts, rows, cols] with block scales [experts, ceil(rows / 128),
// ceil(cols / 128)] around 1 / (4 sqrt(cols)), so every intermediate stays near 1.
struct Fp8Weights {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  int64_t rows, cols, row_blocks, chunks;
  Fp8Weights(int experts, int64_t r, int64_t c, std::mt19937_64& rng)
      : codes(static_cast<size_t>(experts) * r * c),
        rows(r),
        cols(c),
        row_blocks(ceil_div(r, 128)),
        chunks(ceil_div(c, 128)) {
    for (auto& x : codes) x = random_e4m3_code(rng);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    scales.resize(static_cast<size_t>(experts) * row_blocks * chunks);
    for (auto& s : scales) {
      s = static_cast<float>(std::exp2(u(rng)) / (4.0 * std::sqrt(static_cast<double>(c))));
    }
  }
  const uint8_t* row(int e, int64_t r) const { return &codes[(size_t(e) * rows + r) * cols]; }
  const float* row_scales(int e, int64_t r) const {
    return &scales[(size_t(e) * row_blocks + r / 128) * chunks];
  }
};

// Checks one row of a per-group quantization written by the layer (codes q, scales s) against
// the values v it quantized (fp64 images of what the kernel held: exactly, or within fp32's
// last bits when `computed`). Returns the mismatches.
long check_quantized(const double* v, int64_t cols, const uint8_t* q, const float* s,
                     bool computed) {
  long bad = 0;
  for (int64_t g0 = 0; g0 < cols; g0 += 128) {
    double amax = 0.0;
    for (int64_t i = g0; i < std::min(g0 + 128, cols); ++i) amax = std::max(amax, std::fabs(v[i]));
    const double want_scale = ref::fp8_scale(static_cast<float>(amax));
    const float scale = s[g0 / 128];
    if (computed ? !(std::fabs(scale - want_scale) <= 0x1p-18 * want_scale)
                 : scale != static_cast<float>(want_scale)) {
      if (bad++ < 3)
        UNSCOPED_INFO("group " << g0 / 128 << " scale " << scale << " want " << want_scale);
      continue;
    }
    for (int64_t i = g0; i < std::min(g0 + 128, cols); ++i) {
      const auto [lo, hi] = ref::e4m3_code_range(scale > 0.0f ? v[i] / scale : 0.0);
      if (q[i] != lo && q[i] != hi && bad++ < 3) {
        UNSCOPED_INFO("column " << i << " code " << int(q[i]) << " for " << v[i] / scale);
      }
    }
  }
  return bad;
}

// Runs kjit_moe_forward_fp8 (softmax top-k, not renormalized) and checks it stage by stage from
// the workspace it leaves behind, each stage against fp64 of the previous stage's device values:
// the routing, x's group quantization, the gate_up GEMM (+ silu_and_mul), the activation's
// quantization, the down GEMM, and out = the weighted sum (+ shared_out).
void run_layer(const LayerCase& c, std::mt19937_64& rng) {
  INFO("fp8 layer " << c.dtype << " tokens " << c.tokens << " experts " << c.experts << " top_k "
                    << c.top_k << " hidden " << c.hidden << " inter " << c.inter << " shared "
                    << c.shared);
  const size_t es = ref::elem_size(c.dtype);
  const int64_t h = c.hidden, in = c.inter, pairs = int64_t{c.tokens} * c.top_k;
  std::uniform_real_distribution<double> u(-1.0, 1.0), ul(-3.0, 3.0);
  std::vector<unsigned char> x(size_t(c.tokens) * h * es), shared(x.size());
  for (size_t i = 0; i < size_t(c.tokens) * h; ++i) {
    ref::store_elem(x.data(), i, u(rng), c.dtype);
    ref::store_elem(shared.data(), i, u(rng), c.dtype);
  }
  std::vector<float> logits(size_t(c.tokens) * c.experts);
  for (auto& l : logits) l = static_cast<float>(ul(rng));
  const Fp8Weights w13(c.experts, 2 * in, h, rng), w2(c.experts, h, in, rng);
  size_t ws_bytes = 0;
  REQUIRE(kjit_moe_forward_workspace_bytes(c.tokens, c.experts, c.top_k, h, in, dl_dtype("e4m3"),
                                           &ws_bytes) == KJIT_SUCCESS);
  DeviceBuffer x_d(x.size()), sh_d(x.size()), out_d(x.size()), l_d(logits.size() * 4),
      w13_d(w13.codes.size()), w13s_d(w13.scales.size() * 4), w2_d(w2.codes.size()),
      w2s_d(w2.scales.size() * 4), ws_d(ws_bytes);
  x_d.upload(x.data(), x.size());
  sh_d.upload(shared.data(), shared.size());
  l_d.upload(logits.data(), logits.size() * 4);
  w13_d.upload(w13.codes.data(), w13.codes.size());
  w13s_d.upload(w13.scales.data(), w13.scales.size() * 4);
  w2_d.upload(w2.codes.data(), w2.codes.size());
  w2s_d.upload(w2.scales.data(), w2.scales.size() * 4);
  out_d.fill(0xFF);
  ws_d.fill(0xFF);
  const DLDataType dt = dl_dtype(c.dtype), f8 = dl_dtype("e4m3"), f32 = dl_dtype("fp32");
  const int64_t e = c.experts;
  Tensor xt = make_tensor(x_d.get(), {c.tokens, h}, dt);
  Tensor lt = make_tensor(l_d.get(), {c.tokens, e}, f32);
  Tensor w13t = make_tensor(w13_d.get(), {e, 2 * in, h}, f8);
  Tensor w13st = make_tensor(w13s_d.get(), {e, w13.row_blocks, w13.chunks}, f32);
  Tensor w2t = make_tensor(w2_d.get(), {e, h, in}, f8);
  Tensor w2st = make_tensor(w2s_d.get(), {e, w2.row_blocks, w2.chunks}, f32);
  Tensor st = make_tensor(sh_d.get(), {c.tokens, h}, dt);
  Tensor wst = make_tensor(ws_d.get(), {static_cast<int64_t>(ws_bytes)}, DLDataType{kDLUInt, 8, 1});
  Tensor ot = make_tensor(out_d.get(), {c.tokens, h}, dt);
  const kjit_status status = kjit_moe_forward_fp8(
      xt.get(), lt.get(), nullptr, w13t.get(), w13st.get(), w2t.get(), w2st.get(),
      c.shared ? st.get() : nullptr, wst.get(), ot.get(), c.top_k, nullptr, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(status == KJIT_SUCCESS);
  device_synchronize();
  std::vector<unsigned char> ws(ws_bytes), out(x.size());
  ws_d.download(ws.data(), ws_bytes);
  out_d.download(out.data(), out.size());
  const ops::MoeForwardLayout l =
      ops::moe_forward_layout(c.tokens, c.experts, c.top_k, h, in, ops::DType::kE4M3);
  const auto* ids = reinterpret_cast<const int32_t*>(ws.data() + l.topk_ids);
  const auto* wts = reinterpret_cast<const float*>(ws.data() + l.topk_weights);
  const auto* s2p = reinterpret_cast<const int32_t*>(ws.data() + l.src_to_permuted);
  const uint8_t* xq = ws.data() + l.rows_fp8;
  const auto* xs = reinterpret_cast<const float*>(ws.data() + l.rows_scale);
  const uint8_t* aq = ws.data() + l.act_fp8;
  const auto* as = reinterpret_cast<const float*>(ws.data() + l.act_scale);
  const int64_t hc = ceil_div(h, 128), ic = ceil_div(in, 128);
  const bool fused = in % 64 == 0;  // the SwiGLU epilogue; else gate_up then silu_and_mul_quant
  const double uo = ref::unit_roundoff(c.dtype);
  long bad = 0;
  std::vector<double> v(static_cast<size_t>(std::max(h, 2 * in)));
  for (int t = 0; t < c.tokens; ++t) {
    // Routing: softmax top-k of the logits (distinct random values: no ties).
    std::vector<int> order(c.experts);
    for (int i = 0; i < c.experts; ++i) order[i] = i;
    const float* lrow = &logits[size_t(t) * c.experts];
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lrow[a] > lrow[b]; });
    double z = 0.0;
    for (int i = 0; i < c.experts; ++i) z += std::exp(double(lrow[i]) - lrow[order[0]]);
    std::vector<double> want(size_t(h), 0.0), mag(size_t(h), 0.0);
    for (int64_t col = 0; col < h; ++col) {
      if (c.shared) want[col] = ref::load_elem(shared.data(), size_t(t) * h + col, c.dtype);
      mag[col] = std::fabs(want[col]);
    }
    for (int j = 0; j < c.top_k; ++j) {
      const int ex = ids[t * c.top_k + j];
      const double wt = wts[t * c.top_k + j];
      const double want_w = std::exp(double(lrow[order[j]]) - lrow[order[0]]) / z;
      if ((ex != order[j] || !(std::fabs(wt - want_w) <= 1e-5 * want_w)) && bad++ < 5) {
        UNSCOPED_INFO("token " << t << " slot " << j << " expert " << ex << " weight " << wt
                               << " want " << order[j] << " / " << want_w);
      }
      const int64_t d = s2p[t * c.top_k + j];
      REQUIRE(d >= 0);
      REQUIRE(d < pairs);
      // x's quantization (exact: kjit_quant_fp8 of the copied row).
      for (int64_t col = 0; col < h; ++col)
        v[col] = ref::load_elem(x.data(), size_t(t) * h + col, c.dtype);
      bad += check_quantized(v.data(), h, xq + d * h, xs + d * hc, false);
      // gate_up (fused: silu(g) * u, rounded once), and the activation's quantization.
      const auto elem = [&](int64_t r, const std::string& od) {
        return ref::moe_gemm_fp8_element(xq + d * h, xs + d * hc, w13.row(ex, r),
                                         w13.row_scales(ex, r), h, od);
      };
      const auto held = [&](const char* what, int64_t i, double got, const ref::Fp8Element& a) {
        if (!(std::fabs(got - a.want) <= a.bound) && bad++ < 5) {  // NaN fails
          UNSCOPED_INFO("token " << t << " expert " << ex << " " << what << " " << i << " got "
                                 << got << " want " << a.want << " bound " << a.bound);
        }
      };
      for (int64_t i = 0; i < in; ++i) {
        if (fused) {
          v[i] = ref::load_elem(ws.data() + l.act, size_t(d) * in + i, c.dtype);
          held("act", i, v[i], ref::moe_swiglu_of(elem(i, "fp32"), elem(in + i, "fp32"), uo));
        } else {
          const size_t row = size_t(d) * 2 * in;
          const double g = ref::load_elem(ws.data() + l.gate_up, row + i, c.dtype);
          const double up = ref::load_elem(ws.data() + l.gate_up, row + in + i, c.dtype);
          held("gate", i, g, elem(i, c.dtype));
          held("up", i, up, elem(in + i, c.dtype));
          v[i] = g / (1.0 + std::exp(-g)) * up;  // what silu_and_mul_quant quantizes, in fp32
        }
      }
      bad += check_quantized(v.data(), in, aq + d * in, as + d * ic, !fused);
      // The down GEMM from the quantized activation, into the rows region; then its share.
      for (int64_t col = 0; col < h; ++col) {
        const ref::Fp8Element y = ref::moe_gemm_fp8_element(
            aq + d * in, as + d * ic, w2.row(ex, col), w2.row_scales(ex, col), in, c.dtype);
        const double got = ref::load_elem(ws.data() + l.rows, size_t(d) * h + col, c.dtype);
        if (!(std::fabs(got - y.want) <= y.bound) && bad++ < 5) {
          UNSCOPED_INFO("token " << t << " expert " << ex << " y " << col << " got " << got
                                 << " want " << y.want << " bound " << y.bound);
        }
        want[col] += wt * got;
        mag[col] += std::fabs(wt * got);
      }
    }
    // finalize: the weighted sum of the device's y in fp32, one rounding.
    for (int64_t col = 0; col < h; ++col) {
      const double got = ref::load_elem(out.data(), size_t(t) * h + col, c.dtype);
      const double tol = uo * std::fabs(want[col]) + 0x1p-22 * (c.top_k + 1) * mag[col];
      if (!(std::fabs(got - want[col]) <= tol) && bad++ < 5) {  // NaN fails
        UNSCOPED_INFO("token " << t << " out " << col << " got " << got << " want " << want[col]);
      }
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("moe fp8 gpu: the whole layer, stage by stage against fp64", "[gpu][moe][fp8][sm90a]") {
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  // T = 1: most experts get no token; shared expert added.
  LayerCase one;
  one.shared = true;
  run_layer(one, rng);
  // I = 192: the SwiGLU epilogue with up slices mid-block; fp16.
  LayerCase mid;
  mid.dtype = "fp16";
  mid.tokens = 7;
  mid.experts = 16;
  mid.top_k = 4;
  mid.hidden = 384;
  mid.inter = 192;
  run_layer(mid, rng);
  // I = 144: not a multiple of 64, so the GEMM then silu_and_mul quantized in one kernel;
  // hidden not a multiple of 128 (a short last group and chunk).
  LayerCase unfused;
  unfused.tokens = 300;
  unfused.experts = 16;
  unfused.hidden = 272;
  unfused.inter = 144;
  unfused.shared = true;
  run_layer(unfused, rng);
  // Qwen3-like: 128 experts, top 8, many with one token or none.
  LayerCase qwen;
  qwen.tokens = 33;
  qwen.experts = 128;
  qwen.top_k = 8;
  qwen.hidden = 512;
  qwen.inter = 64;
  run_layer(qwen, rng);
}

TEST_CASE("moe fp8 gpu: the fp8 layer refuses what the sm_90a GEMM cannot take",
          "[gpu][moe][fp8]") {
  // hidden = 200 (x's quantized rows are not 16-byte multiples): KJIT_ERROR_UNSUPPORTED, before
  // any launch, on every device.
  const int tokens = 2, experts = 4, hidden = 200, inter = 64;
  size_t ws_bytes = 0;
  REQUIRE(kjit_moe_forward_workspace_bytes(tokens, experts, 2, hidden, inter, dl_dtype("e4m3"),
                                           &ws_bytes) == KJIT_SUCCESS);
  DeviceBuffer x(tokens * hidden * 2), lg(tokens * experts * 4), w13(experts * 2 * inter * hidden),
      w13s(experts * 2 * 4), w2(experts * hidden * inter), w2s(experts * 2 * 4), ws(ws_bytes),
      out(tokens * hidden * 2);
  out.fill(0xFF);
  const DLDataType f8 = dl_dtype("e4m3"), f32 = dl_dtype("fp32");
  Tensor xt = make_tensor(x.get(), {tokens, hidden}, dl_dtype("bf16"));
  Tensor lt = make_tensor(lg.get(), {tokens, experts}, f32);
  Tensor w13t = make_tensor(w13.get(), {experts, 2 * inter, hidden}, f8);
  Tensor w13st = make_tensor(w13s.get(), {experts, 1, 2}, f32);
  Tensor w2t = make_tensor(w2.get(), {experts, hidden, inter}, f8);
  Tensor w2st = make_tensor(w2s.get(), {experts, 2, 1}, f32);
  Tensor wst = make_tensor(ws.get(), {static_cast<int64_t>(ws_bytes)}, DLDataType{kDLUInt, 8, 1});
  Tensor ot = make_tensor(out.get(), {tokens, hidden}, dl_dtype("bf16"));
  const kjit_status st =
      kjit_moe_forward_fp8(xt.get(), lt.get(), nullptr, w13t.get(), w13st.get(), w2t.get(),
                           w2st.get(), nullptr, wst.get(), ot.get(), 2, nullptr, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  CHECK(st == KJIT_ERROR_UNSUPPORTED);
  CHECK(std::string(kjit_last_error()).find("sm_90a") != std::string::npos);
  device_synchronize();
  std::vector<unsigned char> o(tokens * hidden * 2);
  out.download(o.data(), o.size());
  CHECK(std::all_of(o.begin(), o.end(), [](unsigned char b) { return b == 0xFF; }));
}

TEST_CASE("moe fp8 gpu: the TMA-store epilogue on tiles of whole experts, registers on the rest",
          "[gpu][moe][fp8][sm90a]") {
  // As the bf16 case (moe_gpu_test.cpp): a TMA-ready 16-bit out takes the TMA-store form (URI flag
  // tma_out) on tiles whose 128 rows are all their expert's, the register epilogue on the rest.
  // Experts of 128, 2 x 128 + 17, 5, none, 3 x 128 and 128 + 100 rows, one block an item and
  // persistent, both widths, plain and SwiGLU each into bf16 and fp16, contiguous and masked;
  // scales 2^10 apart on the persistent half (whose loose SwiGLU bounds the other half's tight
  // ones back).
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  for (const bool pers : {false, true}) {
    for (const int bn : {128, 256}) {
      for (const bool swiglu : {false, true}) {
        Fp8Case c;
        c.out_dtype = pers != swiglu ? "fp16" : "bf16";
        c.counts = {128, 273, 5, 0, 384, 228};
        c.swiglu = swiglu;
        c.n = swiglu ? 2 * 256 : 264;
        c.k = 272;
        c.masked = bn == 256;
        c.max_rows = 400;
        c.spare_rows = c.masked ? 0 : 3;
        c.wide_scales = pers;
        c.tuning.bn = bn;
        if (pers) {
          c.tuning.persistent = true;
        } else {
          c.tuning.force = ops::MoeGemmForce::kTiles;
        }
        check_tma_out([&] { CHECK(run_fp8(c, rng)); }, true);
      }
    }
  }
  // Not into an fp32 out, nor on the decode path.
  Fp8Case f32;
  f32.out_dtype = "fp32";
  f32.counts = {128, 5};
  f32.n = 256;
  f32.k = 128;
  f32.tuning.persistent = true;
  check_tma_out([&] { CHECK(run_fp8(f32, rng)); }, false);
  Fp8Case few = f32;
  few.out_dtype = "bf16";
  few.counts = {1, 2};
  few.tuning = {};
  few.tuning.force = ops::MoeGemmForce::kDecode;
  check_tma_out([&] { CHECK(run_fp8(few, rng)); }, false);
}
