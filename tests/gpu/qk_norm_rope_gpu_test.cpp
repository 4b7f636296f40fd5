// kjit_qk_rmsnorm_rope on the GPU against the fp64 CPU references composed (ref::rmsnorm per
// head, then ref::rope_head), on fresh random inputs: q and k as the views of a fused qkv GEMM
// output [tokens, (hq + 2 hk) heads], in place. Every element of a q or k head within one output
// rounding plus the fp32 sum of squares' and the angle's error (NaN fails); every other byte of
// the buffer (the v heads, padding between heads and rows) unchanged, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "reference/rope_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct Case {
  std::string dtype = "bf16";
  std::string pos_dtype = "int32";
  int64_t tokens = 5, hq = 8, hk = 2, head_dim = 128;
  int rot = 0;  // 0 = head_dim
  bool interleave = false;
  int64_t head_pad = 0, token_pad = 0;  // elements between heads, after each qkv row
  size_t offset = 0;                    // elements: misaligns every view
  float eps = 1e-6f, scale = 1.0f, theta = 1e6f;
  double amplitude = 2.0;  // inputs uniform in [-amplitude, amplitude)
};

std::string describe(const Case& c) {
  return c.dtype + " pos=" + c.pos_dtype + " tokens=" + std::to_string(c.tokens) +
         " hq=" + std::to_string(c.hq) + " hk=" + std::to_string(c.hk) +
         " head_dim=" + std::to_string(c.head_dim) + " rot=" + std::to_string(c.rot) +
         (c.interleave ? " gptj" : " neox") + " pads=" + std::to_string(c.head_pad) + "/" +
         std::to_string(c.token_pad) + " offset=" + std::to_string(c.offset) +
         " amplitude=" + std::to_string(c.amplitude);
}

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const std::string dt = c.dtype;
  const size_t es = ref::elem_size(dt);
  const int64_t D = c.head_dim, hs = D + c.head_pad;
  const int rot = c.rot ? c.rot : static_cast<int>(D);
  const int half = rot / 2;
  const int64_t row = (c.hq + 2 * c.hk) * hs + c.token_pad;
  const size_t elems = c.offset + static_cast<size_t>(c.tokens * row);
  std::vector<unsigned char> before(elems * es), wbytes(2 * (c.offset + D) * es);
  std::uniform_real_distribution<double> dist(-c.amplitude, c.amplitude), wdist(0.25, 1.75);
  for (size_t i = 0; i < elems; ++i) ref::store_elem(before.data(), i, dist(rng), dt);
  // The weights: q's at offset, k's right after (misaligned like the rest).
  for (size_t i = 0; i < wbytes.size() / es; ++i) ref::store_elem(wbytes.data(), i, wdist(rng), dt);
  const size_t qw_at = c.offset, kw_at = c.offset + static_cast<size_t>(D);
  std::uniform_int_distribution<int64_t> pos_dist(0, 131071);
  std::vector<int64_t> pos(static_cast<size_t>(c.tokens));
  for (auto& p : pos) p = pos_dist(rng);
  pos[0] = 131071;

  // Expected: per head, RMSNorm over all head_dim dims, then RoPE of the first rot dims.
  std::vector<double> want(elems), tol(elems, -1.0);
  const double u = ref::unit_roundoff(dt);
  const std::vector<double> inv_freq = ref::rope_inv_freq(rot, c.scale, c.theta);
  std::vector<double> cs(static_cast<size_t>(half)), sn(cs.size()), x(static_cast<size_t>(D)),
      y(x.size());
  std::vector<double> qw(static_cast<size_t>(D)), kw(qw.size());
  for (int64_t d = 0; d < D; ++d) {
    qw[d] = ref::load_elem(wbytes.data(), qw_at + d, dt);
    kw[d] = ref::load_elem(wbytes.data(), kw_at + d, dt);
  }
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[static_cast<size_t>(t)]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    for (int64_t h = 0; h < c.hq + c.hk; ++h) {
      const size_t at = c.offset + static_cast<size_t>(t * row + h * hs);
      for (int64_t d = 0; d < D; ++d) x[d] = ref::load_elem(before.data(), at + d, dt);
      const std::vector<double> n = ref::rmsnorm(x, h < c.hq ? qw : kw, 1, D, c.eps);
      ref::rope_head(n.data(), y.data(), static_cast<int>(D), rot, c.interleave, cs.data(),
                     sn.data());
      for (int64_t d = 0; d < D; ++d) {
        // One output rounding; the fp32 normalization (sum of squares, rsqrt, two products):
        // 1e-5 of each rotated input; the angle: rope_gpu_test.cpp's 2e-6 per input.
        double e = 2 * u * std::fabs(y[d]) + 1e-5 * std::fabs(n[d]) + 1e-7;
        if (d < rot) {
          const int p = ref::rope_partner(static_cast<int>(d), rot, c.interleave);
          e += (1e-5 + 2e-6) * std::fabs(n[p]) + 2e-6 * std::fabs(n[d]);
        }
        want[at + d] = y[d];
        tol[at + d] = e;
      }
    }
  }

  DeviceBuffer buf(before.size()), wbuf(wbytes.size());
  buf.upload(before.data(), before.size());
  wbuf.upload(wbytes.data(), wbytes.size());
  std::vector<unsigned char> pos_host(pos.size() * (c.pos_dtype == "int64" ? 8 : 4));
  for (size_t i = 0; i < pos.size(); ++i) {
    if (c.pos_dtype == "int64") {
      std::memcpy(pos_host.data() + 8 * i, &pos[i], 8);
    } else {
      const auto p32 = static_cast<int32_t>(pos[i]);
      std::memcpy(pos_host.data() + 4 * i, &p32, 4);
    }
  }
  DeviceBuffer pbuf(pos_host.size());
  pbuf.upload(pos_host.data(), pos_host.size());
  char* base = static_cast<char*>(buf.get()) + c.offset * es;
  Tensor q = make_tensor(base, {c.tokens, c.hq, D}, dl_dtype(dt), {row, hs, 1});
  Tensor k = make_tensor(base + static_cast<size_t>(c.hq * hs) * es, {c.tokens, c.hk, D},
                         dl_dtype(dt), {row, hs, 1});
  Tensor qwt = make_tensor(static_cast<char*>(wbuf.get()) + qw_at * es, {D}, dl_dtype(dt));
  Tensor kwt = make_tensor(static_cast<char*>(wbuf.get()) + kw_at * es, {D}, dl_dtype(dt));
  Tensor pt = make_tensor(pbuf.get(), {c.tokens}, dl_dtype(c.pos_dtype));
  const kjit_status s = kjit_qk_rmsnorm_rope(
      qwt.get(), kwt.get(), pt.get(), q.get(), k.get(), c.eps, c.rot,
      c.interleave ? KJIT_ROPE_INTERLEAVED : KJIT_ROPE_NEOX, c.scale, c.theta, nullptr);
  INFO(kjit_last_error());
  REQUIRE(s == KJIT_SUCCESS);
  device_synchronize();

  std::vector<unsigned char> got(before.size());
  buf.download(got.data(), got.size());
  long bad = 0, checked = 0;
  for (size_t i = 0; i < elems; ++i) {
    bool ok;
    if (tol[i] >= 0) {
      ++checked;
      ok = std::fabs(ref::load_elem(got.data(), i, dt) - want[i]) <= tol[i];  // NaN fails
    } else {
      ok = std::memcmp(got.data() + i * es, before.data() + i * es, es) == 0;
    }
    if (!ok && bad++ < 8) {
      UNSCOPED_INFO("element " << i << ": got " << ref::load_elem(got.data(), i, dt) << " want "
                               << want[i] << " tol " << tol[i]);
    }
  }
  CHECK(checked == c.tokens * (c.hq + c.hk) * D);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("qk norm rope gpu: Qwen3 shapes, decode and prefill, both dtypes",
          "[gpu][qk_norm_rope]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    for (int64_t tokens : {1, 7, 64, 129, 2000}) {
      Case c;
      c.dtype = dt;
      c.tokens = tokens;
      c.hq = 32;
      c.hk = 8;
      run_case(c, rng);
    }
    Case big;  // Qwen3 32B's 64 / 8 heads; int64 positions
    big.dtype = dt;
    big.tokens = 300;
    big.hq = 64;
    big.hk = 8;
    big.pos_dtype = "int64";
    run_case(big, rng);
    // Enough tokens for one block a token (8 blocks an SM's worth): 72 heads then take two
    // rounds of 4 heads a slot (16 slots at head_dim 128).
    big.tokens = 1500;
    run_case(big, rng);
  }
}

TEST_CASE("qk norm rope gpu: head sizes, partial rotary, GPT-J pairs, odd head counts",
          "[gpu][qk_norm_rope]") {
  std::mt19937_64 rng(std::random_device{}());
  struct Shape {
    int64_t hq, hk, d;
    int rot;
    bool gptj;
  };
  for (const Shape s :
       {Shape{7, 1, 64, 0, false}, Shape{5, 5, 256, 0, true}, Shape{4, 2, 128, 64, true},
        Shape{6, 3, 80, 32, false}, Shape{3, 1, 96, 0, false}, Shape{2, 1, 128, 2, false},
        Shape{1, 1, 512, 512, false}, Shape{3, 1, 1024, 64, false}}) {
    Case c;
    c.hq = s.hq;
    c.hk = s.hk;
    c.head_dim = s.d;
    c.rot = s.rot;
    c.interleave = s.gptj;
    c.tokens = 33;
    c.theta = 10000.0f;
    c.scale = 2.0f;
    run_case(c, rng);
  }
}

TEST_CASE("qk norm rope gpu: padded and misaligned views, eps and amplitudes",
          "[gpu][qk_norm_rope]") {
  std::mt19937_64 rng(std::random_device{}());
  Case padded;
  padded.head_pad = 8;
  padded.token_pad = 24;
  run_case(padded, rng);
  Case odd;  // every view and weight one element off: scalar accesses
  odd.offset = 1;
  odd.head_pad = 1;
  odd.token_pad = 3;
  run_case(odd, rng);
  Case four;  // 4-byte aligned heads only
  four.head_pad = 2;
  four.dtype = "fp16";
  run_case(four, rng);
  Case tiny;  // inputs near 1e-4: eps matters
  tiny.amplitude = 1e-3;
  tiny.eps = 1e-6f;
  run_case(tiny, rng);
  Case zero_eps;
  zero_eps.eps = 0.0f;
  zero_eps.amplitude = 100.0;
  run_case(zero_eps, rng);
}
