// kjit_merge_states and kjit_merge_states_n on the GPU against the fp64 CPU reference: random
// states with empty ones (-inf) mixed in, every dtype, odd head sizes (narrower vectors), strided
// views, in place, and the states of a real split (two halves of a decode) merged back into the
// whole.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "reference/attention_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct MergeCase {
  std::string dtype = "bf16";
  int64_t seqs = 7, heads = 5, dim = 128;
  int64_t n = 2;          // states (merge_states_n); 2 also runs kjit_merge_states
  int64_t head_pad = 0;   // elements after each head row of every v view
  size_t offset = 0;      // elements: misaligns every v view
  bool in_place = false;  // kjit_merge_states: v_out = v_a, s_out = s_b
  bool s_out = true;
  double empty_frac = 0.1;  // states with s = -inf
};

std::string describe(const MergeCase& c) {
  return c.dtype + " seqs=" + std::to_string(c.seqs) + " heads=" + std::to_string(c.heads) +
         " dim=" + std::to_string(c.dim) + " n=" + std::to_string(c.n) +
         " head_pad=" + std::to_string(c.head_pad) + " offset=" + std::to_string(c.offset) +
         (c.in_place ? " in-place" : "") + (c.s_out ? "" : " no-s_out");
}

std::vector<double> random_lse(std::mt19937_64& rng, size_t n, double empty_frac) {
  std::uniform_real_distribution<double> d(-20.0, 20.0), u(0.0, 1.0);
  std::vector<double> s(n);
  for (auto& x : s)
    x = u(rng) < empty_frac ? -kInf : static_cast<double>(static_cast<float>(d(rng)));
  return s;
}

// Compares one merged row set; returns the bad count.
long compare(const MergeCase& c, const std::vector<double>& want_v,
             const std::vector<double>& want_s, const std::vector<unsigned char>& got_v,
             const std::vector<float>& got_s, int64_t row_stride) {
  const double u = ref::unit_roundoff(c.dtype);
  long bad = 0;
  for (int64_t r = 0; r < c.seqs * c.heads; ++r) {
    for (int64_t d = 0; d < c.dim; ++d) {
      const double want = want_v[static_cast<size_t>(r * c.dim + d)];
      const double got = ref::load_elem(got_v.data(), c.offset + r * row_stride + d, c.dtype);
      // Inputs are in [-1, 1]; fp32 weights and sums, one rounding to the dtype.
      const double tol = 2 * u * std::fabs(want) + 1e-5;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5) {
        UNSCOPED_INFO("v_out row " << r << " dim " << d << " = " << got << ", want " << want);
      }
    }
    if (c.s_out) {
      const double want = want_s[static_cast<size_t>(r)];
      const double got = got_s[static_cast<size_t>(r)];
      const bool ok = std::isinf(want) ? (std::isinf(got) && got < 0)
                                       : std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want));
      if (!ok && bad++ < 10) UNSCOPED_INFO("s_out row " << r << " = " << got << ", want " << want);
    }
  }
  return bad;
}

void run_case(const MergeCase& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const size_t es = ref::elem_size(c.dtype);
  const int64_t rows = c.seqs * c.heads, hs = c.dim + c.head_pad;
  const size_t v_elems = c.offset + static_cast<size_t>(rows * hs);
  std::uniform_real_distribution<double> dv(-1.0, 1.0);

  // n states: v_i [seqs, heads, dim] (head stride hs) in one buffer each, s_i [seqs, heads].
  std::vector<std::vector<unsigned char>> v(static_cast<size_t>(c.n));
  std::vector<std::vector<double>> s(static_cast<size_t>(c.n));
  for (int64_t i = 0; i < c.n; ++i) {
    v[i].resize(v_elems * es);
    for (size_t e = 0; e < v_elems; ++e) ref::store_elem(v[i].data(), e, dv(rng), c.dtype);
    s[i] = random_lse(rng, static_cast<size_t>(rows), c.empty_frac);
  }
  // Reference.
  std::vector<double> want_v(static_cast<size_t>(rows * c.dim)), want_s(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> sr;
    for (int64_t i = 0; i < c.n; ++i) sr.push_back(s[i][static_cast<size_t>(r)]);
    std::vector<double> out;
    auto val = [&](size_t i, int64_t d) {
      return ref::load_elem(v[i].data(), c.offset + r * hs + d, c.dtype);
    };
    ref::merge_states(sr, c.dim, val, out, want_s[static_cast<size_t>(r)]);
    std::copy(out.begin(), out.end(), want_v.begin() + r * c.dim);
  }

  const DLDataType dt = dl_dtype(c.dtype), f32 = dl_dtype("fp32");
  auto to_f32 = [](const std::vector<double>& x) {
    std::vector<float> f(x.begin(), x.end());
    return f;
  };
  const size_t s_bytes = static_cast<size_t>(rows) * 4;

  if (c.n == 2) {
    // kjit_merge_states.
    DeviceBuffer va(v_elems * es), vb(v_elems * es), vo(v_elems * es);
    DeviceBuffer sa(s_bytes), sb(s_bytes), so(s_bytes);
    va.upload(v[0].data(), v[0].size());
    vb.upload(v[1].data(), v[1].size());
    const auto sa_h = to_f32(s[0]), sb_h = to_f32(s[1]);
    sa.upload(sa_h.data(), s_bytes);
    sb.upload(sb_h.data(), s_bytes);
    vo.fill(0xFF);
    so.fill(0xFF);
    auto view = [&](DeviceBuffer& b) {
      return make_tensor(static_cast<char*>(b.get()) + c.offset * es, {c.seqs, c.heads, c.dim}, dt,
                         {c.heads * hs, hs, 1});
    };
    auto va_t = view(va), vb_t = view(vb), vo_t = view(c.in_place ? va : vo);
    auto sa_t = make_tensor(sa.get(), {c.seqs, c.heads}, f32);
    auto sb_t = make_tensor(sb.get(), {c.seqs, c.heads}, f32);
    auto so_t = make_tensor((c.in_place ? sb : so).get(), {c.seqs, c.heads}, f32);
    const kjit_status st = kjit_merge_states(va_t.get(), sa_t.get(), vb_t.get(), sb_t.get(),
                                             vo_t.get(), c.s_out ? so_t.get() : nullptr, nullptr);
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
    device_synchronize();
    std::vector<unsigned char> got_v(v_elems * es);
    std::vector<float> got_s(static_cast<size_t>(rows));
    (c.in_place ? va : vo).download(got_v.data(), got_v.size());
    (c.in_place ? sb : so).download(got_s.data(), s_bytes);
    CHECK(compare(c, want_v, want_s, got_v, got_s, hs) == 0);
    if (!c.s_out && !c.in_place) {
      for (float x : got_s) CHECK(std::isnan(x));  // untouched poison
    }
  }
  if (!c.in_place) {
    // kjit_merge_states_n over the same states: v [n, seqs, heads, dim] with the states
    // v_elems apart (the offset and head padding included).
    DeviceBuffer vv(static_cast<size_t>(c.n) * v_elems * es),
        ss(static_cast<size_t>(c.n) * s_bytes);
    DeviceBuffer vo(v_elems * es), so(s_bytes);
    for (int64_t i = 0; i < c.n; ++i) {
      vv.upload(v[i].data(), v[i].size(), static_cast<size_t>(i) * v_elems * es);
      const auto sh = to_f32(s[i]);
      ss.upload(sh.data(), s_bytes, static_cast<size_t>(i) * s_bytes);
    }
    vo.fill(0xFF);
    so.fill(0xFF);
    auto v_t =
        make_tensor(static_cast<char*>(vv.get()) + c.offset * es, {c.n, c.seqs, c.heads, c.dim}, dt,
                    {static_cast<int64_t>(v_elems), c.heads * hs, hs, 1});
    auto s_t = make_tensor(ss.get(), {c.n, c.seqs, c.heads}, f32);
    auto vo_t = make_tensor(static_cast<char*>(vo.get()) + c.offset * es, {c.seqs, c.heads, c.dim},
                            dt, {c.heads * hs, hs, 1});
    auto so_t = make_tensor(so.get(), {c.seqs, c.heads}, f32);
    const kjit_status st = kjit_merge_states_n(v_t.get(), s_t.get(), vo_t.get(),
                                               c.s_out ? so_t.get() : nullptr, nullptr);
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
    device_synchronize();
    std::vector<unsigned char> got_v(v_elems * es);
    std::vector<float> got_s(static_cast<size_t>(rows));
    vo.download(got_v.data(), got_v.size());
    so.download(got_s.data(), s_bytes);
    CHECK(compare(c, want_v, want_s, got_v, got_s, hs) == 0);
  }
}

}  // namespace

TEST_CASE("merge gpu: two and n states, every dtype and head size", "[gpu][attention]") {
  std::mt19937_64 rng(31);
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    for (int64_t dim : {1, 3, 64, 100, 128, 256, 257, 1000}) {
      for (int64_t n : {1, 2, 5}) {
        MergeCase c;
        c.dtype = dt;
        c.dim = dim;
        c.n = n;
        run_case(c, rng);
      }
    }
  }
}

TEST_CASE("merge gpu: strided, misaligned, in place, without s_out", "[gpu][attention]") {
  std::mt19937_64 rng(32);
  for (const char* dt : {"bf16", "fp32"}) {
    MergeCase c;
    c.dtype = dt;
    c.head_pad = 8;
    run_case(c, rng);
    c.offset = 1;  // element-aligned only: scalar accesses
    run_case(c, rng);
    c.offset = 0;
    c.head_pad = 0;
    c.in_place = true;
    run_case(c, rng);
    c.in_place = false;
    c.s_out = false;
    run_case(c, rng);
  }
}

TEST_CASE("merge gpu: all-empty rows and many states", "[gpu][attention]") {
  std::mt19937_64 rng(33);
  MergeCase c;
  c.empty_frac = 0.7;  // many rows with every state empty: v_out = 0, s_out = -inf
  c.n = 2;
  run_case(c, rng);
  c.n = 3;
  run_case(c, rng);
  c.empty_frac = 0.0;
  c.n = 64;
  c.seqs = 3;
  run_case(c, rng);
  c.seqs = 1000;  // many rows: many blocks
  c.heads = 32;
  c.n = 2;
  run_case(c, rng);
}

TEST_CASE("merge gpu: two halves of a decode merge into the whole", "[gpu][attention]") {
  // Decode attention over pages A + B equals merge_states(decode(A), decode(B)), lse included:
  // the cascade / shared-prefix use of merge_states.
  std::mt19937_64 rng(34);
  const int64_t qo = 8, kvh = 2, D = 128, P = 16, pages_a = 5, pages_b = 3;
  const int64_t num_pages = pages_a + pages_b;
  std::vector<unsigned char> kc(static_cast<size_t>(num_pages * P * kvh * D) * 2), vc(kc.size()),
      q(static_cast<size_t>(qo * D) * 2);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  for (auto* b : {&kc, &vc, &q}) {
    for (size_t i = 0; i < b->size() / 2; ++i) ref::store_elem(b->data(), i, d(rng), "bf16");
  }
  DeviceBuffer kc_d(kc.size()), vc_d(vc.size()), q_d(q.size());
  kc_d.upload(kc.data(), kc.size());
  vc_d.upload(vc.data(), vc.size());
  q_d.upload(q.data(), q.size());
  const DLDataType bf = dl_dtype("bf16"), f32 = dl_dtype("fp32"), i32 = dl_dtype("int32");
  auto kc_t = make_tensor(kc_d.get(), {num_pages, P, kvh, D}, bf);
  auto vc_t = make_tensor(vc_d.get(), {num_pages, P, kvh, D}, bf);
  auto q_t = make_tensor(q_d.get(), {1, qo, D}, bf);

  // Three decodes of one request: pages [0, 5), [5, 8) and all 8 (full last pages).
  struct Part {
    std::vector<int32_t> idx, ptr, last;
    std::unique_ptr<DeviceBuffer> idx_d, ptr_d, last_d, out_d, lse_d;
  };
  auto decode = [&](Part& part) {
    part.idx_d = std::make_unique<DeviceBuffer>(part.idx.size() * 4);
    part.ptr_d = std::make_unique<DeviceBuffer>(8);
    part.last_d = std::make_unique<DeviceBuffer>(4);
    part.out_d = std::make_unique<DeviceBuffer>(static_cast<size_t>(qo * D) * 2);
    part.lse_d = std::make_unique<DeviceBuffer>(static_cast<size_t>(qo) * 4);
    part.out_d->fill(0xFF);  // poison (NaN): the merge below would carry an unwritten element
    part.lse_d->fill(0xFF);
    part.idx_d->upload(part.idx.data(), part.idx.size() * 4);
    part.ptr_d->upload(part.ptr.data(), 8);
    part.last_d->upload(part.last.data(), 4);
    kjit_decode_plan* plan = nullptr;
    REQUIRE(kjit_batch_decode_plan(part.ptr.data(), 1, qo, kvh, D, P, KJIT_KV_LAYOUT_NHD, bf, bf,
                                   nullptr, 0, &plan) == KJIT_SUCCESS);
    DeviceBuffer ws(std::max<size_t>(16, kjit_decode_plan_workspace_bytes(plan)));
    auto it = make_tensor(part.idx_d->get(), {static_cast<int64_t>(part.idx.size())}, i32);
    auto pt = make_tensor(part.ptr_d->get(), {2}, i32);
    auto lt = make_tensor(part.last_d->get(), {1}, i32);
    auto wt = make_tensor(ws.get(), {static_cast<int64_t>(ws.size())}, DLDataType{kDLUInt, 8, 1});
    auto ot = make_tensor(part.out_d->get(), {1, qo, D}, bf);
    auto st = make_tensor(part.lse_d->get(), {1, qo}, f32);
    const kjit_status s =
        kjit_batch_decode_run(plan, q_t.get(), kc_t.get(), vc_t.get(), it.get(), pt.get(), lt.get(),
                              wt.get(), ot.get(), st.get(), 1.0f, 1.0f, nullptr);
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(s == KJIT_SUCCESS);
    device_synchronize();
    kjit_decode_plan_destroy(plan);
  };
  Part a, b, whole;
  for (int32_t i = 0; i < pages_a; ++i) a.idx.push_back(i);
  for (int32_t i = pages_a; i < num_pages; ++i) b.idx.push_back(i);
  for (int32_t i = 0; i < num_pages; ++i) whole.idx.push_back(i);
  for (Part* p : {&a, &b, &whole}) {
    p->ptr = {0, static_cast<int32_t>(p->idx.size())};
    p->last = {static_cast<int32_t>(P)};
    decode(*p);
  }
  DeviceBuffer mo(static_cast<size_t>(qo * D) * 2), ms(static_cast<size_t>(qo) * 4);
  mo.fill(0xFF);
  ms.fill(0xFF);
  auto va = make_tensor(a.out_d->get(), {1, qo, D}, bf),
       vb = make_tensor(b.out_d->get(), {1, qo, D}, bf);
  auto sa = make_tensor(a.lse_d->get(), {1, qo}, f32),
       sb = make_tensor(b.lse_d->get(), {1, qo}, f32);
  auto vo = make_tensor(mo.get(), {1, qo, D}, bf);
  auto so = make_tensor(ms.get(), {1, qo}, f32);
  REQUIRE(kjit_merge_states(va.get(), sa.get(), vb.get(), sb.get(), vo.get(), so.get(), nullptr) ==
          KJIT_SUCCESS);
  device_synchronize();
  std::vector<unsigned char> got(static_cast<size_t>(qo * D) * 2), want(got.size());
  std::vector<float> got_s(static_cast<size_t>(qo)), want_s(got_s.size());
  mo.download(got.data(), got.size());
  ms.download(got_s.data(), got_s.size() * 4);
  whole.out_d->download(want.data(), want.size());
  whole.lse_d->download(want_s.data(), want_s.size() * 4);
  long bad = 0;
  for (int64_t i = 0; i < qo * D; ++i) {
    const double g = ref::load_elem(got.data(), static_cast<size_t>(i), "bf16");
    const double w = ref::load_elem(want.data(), static_cast<size_t>(i), "bf16");
    // Both are bf16 results of the same attention (each rounded once or twice): a few ulps.
    if (!(std::fabs(g - w) <= 0x1p-6 * std::fabs(w) + 0x1p-9)) ++bad;
  }
  CHECK(bad == 0);
  for (int64_t i = 0; i < qo; ++i) CHECK(got_s[i] == Approx(want_s[i]).epsilon(1e-5));
}
