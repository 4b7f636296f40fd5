// kjit_rope_append_paged_kv_cache on the GPU, on fresh random inputs and page tables, checked two
// ways:
//  - against the fp64 CPU references composed (ref::rope_head with ref::rope_inv_freq, then
//    ref::append_target for the slot): q_out and the key rows in the cache within the RoPE
//    tolerance of rope_gpu_test.cpp (e4m3 keys: within one e4m3 step of the exact x / scale),
//    the value rows exact (bit for bit, e4m3 ones as ref::quantize_e4m3), every other byte of
//    every buffer unchanged; and
//  - bit for bit against the unfused GPU pair on copies of the same buffers:
//    kjit_apply_rope_pos_ids into a scratch k, then kjit_append_paged_kv_cache(_fp8).
// Outputs and caches start poisoned (0xFF: NaN) or with random previous contents.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kjit/kjit.h"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/rope_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct Case {
  std::string dtype = "bf16";
  std::string pos_dtype = "int32";
  int64_t hq = 8, hk = 2, head_dim = 128;
  int rot = 0;  // 0 = head_dim
  bool interleave = false;
  int layout = KJIT_KV_LAYOUT_NHD;
  int64_t batch = 5, page_size = 16, max_seq = 100;
  int64_t max_append = 1;       // tokens per request from [1, max_append]; 1 = decode
  bool in_place = false;        // q_out is q
  bool fused = false;           // q, k, v are views of one [tokens, (hq + 2 hk) heads] qkv buffer
  int64_t head_pad = 0;         // elements between the input heads
  int64_t row_pad = 0;          // cache elements after each (slot, head) row
  size_t offset = 0;            // elements: misaligns every view
  bool poison = false;          // caches start as 0xFF instead of random previous contents
  bool invalid = false;         // tokens the append must skip (their q is still rotated)
  std::string scales = "none";  // "none": 16-bit caches; "tensor" / "head": e4m3 caches
  float rope_scale = 1.0f, theta = 10000.0f;
  bool llama31 = false;  // Llama 3.1's frequencies (kjit_llama31_rope_append_paged_kv_cache)
  float low = 1.0f, high = 4.0f, old_context_len = 8192.0f;
};

std::string describe(const Case& c) {
  return c.dtype + " pos=" + c.pos_dtype + " hq=" + std::to_string(c.hq) +
         " hk=" + std::to_string(c.hk) + " head_dim=" + std::to_string(c.head_dim) +
         " rot=" + std::to_string(c.rot) + (c.interleave ? " gptj" : " neox") +
         (c.layout == KJIT_KV_LAYOUT_NHD ? " NHD" : " HND") + " batch=" + std::to_string(c.batch) +
         " page=" + std::to_string(c.page_size) + " max_seq=" + std::to_string(c.max_seq) +
         " max_append=" + std::to_string(c.max_append) + (c.in_place ? " in-place" : "") +
         (c.fused ? " fused" : "") + " pads=" + std::to_string(c.head_pad) + "/" +
         std::to_string(c.row_pad) + " offset=" + std::to_string(c.offset) +
         (c.poison ? " poison" : "") + (c.invalid ? " invalid" : "") + " scales=" + c.scales +
         (c.llama31 ? " llama31" : "");
}

// A [tokens, heads, head_dim] view into one of the buffers (elements).
struct View {
  int buf = 0;
  size_t offset = 0;
  int64_t heads = 0, token_stride = 0, head_stride = 0;
  size_t at(int64_t t, int64_t h, int64_t d) const {
    return offset + static_cast<size_t>(t * token_stride + h * head_stride + d);
  }
};

struct Buffer {
  size_t es = 2;                      // element bytes
  std::vector<unsigned char> before;  // host image before the call
  std::vector<double> want;           // expected value of an output element
  std::vector<double> tol;            // < 0: not an output (bytes unchanged); else |got - want|
  std::vector<char> exact;            // output element whose bytes must be `want_bytes`
  std::vector<unsigned char> want_bytes;
};

std::vector<unsigned char> download(const DeviceBuffer& d, size_t n) {
  std::vector<unsigned char> b(n);
  if (n > 0) d.download(b.data(), n);
  return b;
}

template <typename T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const std::string dt = c.dtype;
  const size_t es = ref::elem_size(dt);
  const bool fp8 = c.scales != "none";
  const size_t ces = fp8 ? 1 : es;
  const int64_t D = c.head_dim, H = c.hk, ps = c.page_size;
  const int rot = c.rot ? c.rot : static_cast<int>(D);
  const int half = rot / 2;

  // Requests, page tables and tokens, as kv_cache_gpu_test.cpp draws them.
  ref::AppendBatch ab = ref::random_append_batch(c.batch, c.max_seq, c.max_append, ps, 3, rng);
  std::vector<int32_t>& indptr = ab.indptr;
  std::vector<int32_t>& indices = ab.indices;
  std::vector<int32_t>& last = ab.last_page_len;
  const int64_t num_pages = ab.num_pages;
  if (c.invalid) {
    // A page id past the pool, a negative request, a negative position, a position past the
    // request's pages, a request index past the batch.
    indices.push_back(static_cast<int32_t>(num_pages + 2));
    indptr.push_back(static_cast<int32_t>(indices.size()));
    last.push_back(1);
    const auto nb = static_cast<int32_t>(c.batch);
    const std::pair<int32_t, int32_t> bad[] = {
        {nb, 0}, {-1, 3}, {0, -2}, {0, static_cast<int32_t>(ab.pages[0] * ps)}, {nb + 1, 0}};
    for (auto [b, p] : bad) {
      ab.batch_indices.push_back(b);
      ab.positions.push_back(p);
    }
  }
  ref::shuffle_tokens(ab, rng);
  const std::vector<int32_t>& bis = ab.batch_indices;
  const std::vector<int32_t>& poss = ab.positions;
  const auto T = static_cast<int64_t>(bis.size());
  // RoPE positions: the token's position shifted by 1000 (so a kernel rotating by `positions`
  // fails), anything for the skipped tokens; and one token at 131071 (the far end).
  std::vector<int64_t> rope_pos(static_cast<size_t>(T));
  for (size_t t = 0; t < rope_pos.size(); ++t) {
    rope_pos[t] = poss[t] >= 0 ? poss[t] + 1000 : std::uniform_int_distribution<int>(0, 9999)(rng);
  }
  rope_pos[0] = 131071;

  // Buffers: the inputs (one fused qkv buffer or three), q_out (unless in place), two caches.
  std::vector<Buffer> bufs;
  auto add = [&](size_t elems, size_t elem_bytes) {
    Buffer b;
    b.es = elem_bytes;
    b.before.resize(elems * elem_bytes);
    bufs.push_back(std::move(b));
    return static_cast<int>(bufs.size() - 1);
  };
  const int64_t hs = D + c.head_pad;
  View q, k, v;
  if (c.fused) {
    const int64_t row = (c.hq + 2 * H) * hs;
    const int b = add(c.offset + static_cast<size_t>(T * row), es);
    q = {b, c.offset, c.hq, row, hs};
    k = {b, c.offset + static_cast<size_t>(c.hq * hs), H, row, hs};
    v = {b, c.offset + static_cast<size_t>((c.hq + H) * hs), H, row, hs};
  } else {
    q = {add(c.offset + static_cast<size_t>(T * c.hq * hs), es), c.offset, c.hq, c.hq * hs, hs};
    k = {add(c.offset + static_cast<size_t>(T * H * hs), es), c.offset, H, H * hs, hs};
    v = {add(c.offset + static_cast<size_t>(T * H * hs), es), c.offset, H, H * hs, hs};
  }
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  const size_t n_inputs = bufs.size();
  for (auto& b : bufs) {
    for (size_t i = 0; i < b.before.size() / es; ++i) {
      ref::store_elem(b.before.data(), i, dist(rng), dt);
    }
  }
  View qo = q;
  if (!c.in_place) {
    qo = {add(c.offset + static_cast<size_t>(T * c.hq * D), es), c.offset, c.hq, c.hq * D, D};
    std::fill(bufs[qo.buf].before.begin(), bufs[qo.buf].before.end(), 0xFF);
  }
  const bool nhd = c.layout == KJIT_KV_LAYOUT_NHD;
  const int64_t crow = D + c.row_pad;
  const int64_t slot_stride = nhd ? H * crow : crow, head_stride = nhd ? crow : ps * crow;
  const int64_t page_stride = ps * H * crow;
  const size_t cache_elems = c.offset + static_cast<size_t>(num_pages * page_stride);
  const int kc = add(cache_elems, ces), vc = add(cache_elems, ces);
  for (int cb : {kc, vc}) {
    auto& b = bufs[static_cast<size_t>(cb)].before;
    if (c.poison) {
      std::fill(b.begin(), b.end(), 0xFF);
    } else {
      for (auto& x : b) x = static_cast<unsigned char>(rng());
    }
  }
  for (auto& b : bufs) {
    const size_t n = b.before.size() / b.es;
    b.want.assign(n, 0.0);
    b.tol.assign(n, -1.0);
    b.exact.assign(n, 0);
    b.want_bytes = b.before;
  }

  // e4m3 scales around amax / 448 of the rotated keys (|k| < 2 sqrt 2) and of v; with one per
  // head, head 1's is 0 (stores zeros) and head 0's small enough to saturate some elements.
  std::vector<float> kscale(fp8 ? (c.scales == "head" ? H : 1) : 0), vscale(kscale.size());
  for (size_t h = 0; h < kscale.size(); ++h) {
    kscale[h] = 2.0f / 448.0f * (0.5f + 0.4f * static_cast<float>(h % 3));
    vscale[h] = 2.0f / 448.0f * (1.3f - 0.3f * static_cast<float>(h % 4));
  }
  if (kscale.size() > 1) kscale[1] = vscale[1] = 0.0f;

  // Expected values.
  const double u = ref::unit_roundoff(dt);
  const double per_input = 2e-6;  // rope_gpu_test.cpp's bound for 16-bit outputs
  const std::vector<double> inv_freq =
      c.llama31
          ? ref::llama31_inv_freq(rot, c.rope_scale, c.theta, c.low, c.high, c.old_context_len)
          : ref::rope_inv_freq(rot, c.rope_scale, c.theta);
  std::vector<double> cs(static_cast<size_t>(half)), sn(cs.size()), x(static_cast<size_t>(D)),
      y(x.size());
  long written = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double a = static_cast<double>(rope_pos[static_cast<size_t>(t)]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    const auto target = ref::append_target(bis, poss, indptr, indices, t, ps, num_pages);
    written += target ? 1 : 0;
    for (int which = 0; which < 3; ++which) {  // q, k, v
      const View& in = which == 0 ? q : which == 1 ? k : v;
      if (which > 0 && !target) continue;
      for (int64_t h = 0; h < in.heads; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          x[d] = ref::load_elem(bufs[in.buf].before.data(), in.at(t, h, d), dt);
        }
        if (which == 2) {
          y = x;
        } else {
          ref::rope_head(x.data(), y.data(), static_cast<int>(D), rot, c.interleave, cs.data(),
                         sn.data());
        }
        Buffer* ob = nullptr;
        size_t base = 0;
        if (which == 0) {
          ob = &bufs[qo.buf];
          base = qo.at(t, h, 0);
        } else {
          ob = &bufs[static_cast<size_t>(which == 1 ? kc : vc)];
          base = c.offset + static_cast<size_t>(target->page * page_stride +
                                                target->slot * slot_stride + h * head_stride);
        }
        const float scale = !fp8                 ? 1.0f
                            : kscale.size() == 1 ? (which == 1 ? kscale[0] : vscale[0])
                            : which == 1         ? kscale[static_cast<size_t>(h)]
                                                 : vscale[static_cast<size_t>(h)];
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = base + static_cast<size_t>(d);
          const bool rotated = which < 2 && d < rot;
          if (!rotated) {
            // Copied (or quantized from the input element): exact.
            ob->exact[i] = 1;
            if (which > 0 && fp8) {
              ob->want_bytes[i] = ref::quantize_e4m3(static_cast<float>(y[d]), scale);
            } else {
              ref::store_elem(ob->want_bytes.data(), i, y[d], dt);
            }
            continue;
          }
          const int partner = ref::rope_partner(static_cast<int>(d), rot, c.interleave);
          const double tol = 2 * u * std::fabs(y[d]) +
                             per_input * (std::fabs(x[d]) + std::fabs(x[partner])) + 1e-7;
          if (which == 1 && fp8) {
            // e4m3 of the 16-bit rotated key / scale: one e4m3 step (2^-3 relative, 2^-9 at the
            // bottom) and the 16-bit rounding; saturated at 448, zeros under a zero scale.
            const double w = scale > 0.0f ? std::clamp(y[d] / scale, -448.0, 448.0) : 0.0;
            ob->want[i] = w;
            ob->tol[i] = scale > 0.0f ? 0.125 * std::fabs(w) + 0x1p-9 + tol / scale : 0.0;
          } else {
            ob->want[i] = y[d];
            ob->tol[i] = tol;
          }
        }
      }
    }
  }
  if (!c.invalid) CHECK(written == T);

  // Device buffers for the fused call and for the unfused pair.
  std::vector<std::unique_ptr<DeviceBuffer>> fused_dev, pair_dev;
  for (auto& b : bufs) {
    for (auto* d : {&fused_dev, &pair_dev}) {
      d->push_back(std::make_unique<DeviceBuffer>(b.before.size()));
      if (!b.before.empty()) d->back()->upload(b.before.data(), b.before.size());
    }
  }
  std::vector<unsigned char> pos_host;
  if (c.pos_dtype == "int64") {
    pos_host = bytes_of(rope_pos);
  } else {
    std::vector<int32_t> p32(rope_pos.begin(), rope_pos.end());
    pos_host = bytes_of(p32);
  }
  auto upload = [](const std::vector<unsigned char>& b) {
    auto d = std::make_unique<DeviceBuffer>(std::max<size_t>(b.size(), 1));
    if (!b.empty()) d->upload(b.data(), b.size());
    return d;
  };
  auto pos_dev = upload(pos_host), bi_dev = upload(bytes_of(bis)), p_dev = upload(bytes_of(poss));
  auto idx_dev = upload(bytes_of(indices)), ptr_dev = upload(bytes_of(indptr));
  auto last_dev = upload(bytes_of(last));
  auto ks_dev = upload(bytes_of(kscale)), vs_dev = upload(bytes_of(vscale));
  Tensor pt = make_tensor(pos_dev->get(), {T}, dl_dtype(c.pos_dtype));
  Tensor bt = make_tensor(bi_dev->get(), {T}, dl_dtype("int32"));
  Tensor post = make_tensor(p_dev->get(), {T}, dl_dtype("int32"));
  Tensor it =
      make_tensor(idx_dev->get(), {static_cast<int64_t>(indices.size())}, dl_dtype("int32"));
  Tensor ipt =
      make_tensor(ptr_dev->get(), {static_cast<int64_t>(indptr.size())}, dl_dtype("int32"));
  Tensor lt = make_tensor(last_dev->get(), {static_cast<int64_t>(last.size())}, dl_dtype("int32"));
  const int64_t ns = std::max<int64_t>(1, static_cast<int64_t>(kscale.size()));
  Tensor kst = make_tensor(ks_dev->get(), {ns}, dl_dtype("fp32"));
  Tensor vst = make_tensor(vs_dev->get(), {ns}, dl_dtype("fp32"));

  auto view = [&](std::vector<std::unique_ptr<DeviceBuffer>>& dev, const View& w) {
    char* p = static_cast<char*>(dev[static_cast<size_t>(w.buf)]->get()) + w.offset * es;
    return make_tensor(p, {T, w.heads, D}, dl_dtype(dt), {w.token_stride, w.head_stride, 1});
  };
  auto cache = [&](std::vector<std::unique_ptr<DeviceBuffer>>& dev, int b) {
    char* p = static_cast<char*>(dev[static_cast<size_t>(b)]->get()) + c.offset * ces;
    std::vector<int64_t> shape =
        nhd ? std::vector<int64_t>{num_pages, ps, H, D} : std::vector<int64_t>{num_pages, H, ps, D};
    std::vector<int64_t> strides =
        nhd ? std::vector<int64_t>{page_stride, slot_stride, head_stride, 1}
            : std::vector<int64_t>{page_stride, head_stride, slot_stride, 1};
    return make_tensor(p, shape, dl_dtype(fp8 ? "e4m3" : dt), strides);
  };

  {  // The fused call.
    Tensor qt = view(fused_dev, q), kt = view(fused_dev, k), vt = view(fused_dev, v);
    Tensor qot = view(fused_dev, qo);
    Tensor kct = cache(fused_dev, kc), vct = cache(fused_dev, vc);
    const kjit_rope_layout rl = c.interleave ? KJIT_ROPE_INTERLEAVED : KJIT_ROPE_NEOX;
    const kjit_status s =
        c.llama31 ? kjit_llama31_rope_append_paged_kv_cache(
                        qt.get(), kt.get(), vt.get(), pt.get(), bt.get(), post.get(), it.get(),
                        ipt.get(), lt.get(), fp8 ? kst.get() : nullptr, fp8 ? vst.get() : nullptr,
                        qot.get(), kct.get(), vct.get(), c.rot, rl, c.rope_scale, c.theta, c.low,
                        c.high, c.old_context_len, static_cast<kjit_kv_layout>(c.layout), nullptr)
                  : kjit_rope_append_paged_kv_cache(
                        qt.get(), kt.get(), vt.get(), pt.get(), bt.get(), post.get(), it.get(),
                        ipt.get(), lt.get(), fp8 ? kst.get() : nullptr, fp8 ? vst.get() : nullptr,
                        qot.get(), kct.get(), vct.get(), c.rot, rl, c.rope_scale, c.theta,
                        static_cast<kjit_kv_layout>(c.layout), nullptr);
    INFO(kjit_last_error());
    REQUIRE(s == KJIT_SUCCESS);
  }
  {  // The unfused pair: RoPE into a scratch k (and q_out), then the append from it.
    DeviceBuffer k_rot(static_cast<size_t>(T * H * D) * es);
    Tensor krt = make_tensor(k_rot.get(), {T, H, D}, dl_dtype(dt));
    Tensor qt = view(pair_dev, q), kt = view(pair_dev, k), vt = view(pair_dev, v);
    Tensor qot = view(pair_dev, qo);
    Tensor kct = cache(pair_dev, kc), vct = cache(pair_dev, vc);
    const kjit_rope_layout rl = c.interleave ? KJIT_ROPE_INTERLEAVED : KJIT_ROPE_NEOX;
    REQUIRE((c.llama31 ? kjit_apply_llama31_rope_pos_ids(
                             qt.get(), kt.get(), pt.get(), qot.get(), krt.get(), c.rot, rl,
                             c.rope_scale, c.theta, c.low, c.high, c.old_context_len, nullptr)
                       : kjit_apply_rope_pos_ids(qt.get(), kt.get(), pt.get(), qot.get(), krt.get(),
                                                 c.rot, rl, c.rope_scale, c.theta, nullptr)) ==
            KJIT_SUCCESS);
    const kjit_status s =
        fp8 ? kjit_append_paged_kv_cache_fp8(krt.get(), vt.get(), bt.get(), post.get(), it.get(),
                                             ipt.get(), lt.get(), kst.get(), vst.get(), kct.get(),
                                             vct.get(), static_cast<kjit_kv_layout>(c.layout),
                                             nullptr)
            : kjit_append_paged_kv_cache(krt.get(), vt.get(), bt.get(), post.get(), it.get(),
                                         ipt.get(), lt.get(), kct.get(), vct.get(),
                                         static_cast<kjit_kv_layout>(c.layout), nullptr);
    INFO(kjit_last_error());
    REQUIRE(s == KJIT_SUCCESS);
    device_synchronize();
  }

  long bad = 0, unequal = 0, checked = 0;
  for (size_t bi_ = 0; bi_ < bufs.size(); ++bi_) {
    const Buffer& b = bufs[bi_];
    const auto got = download(*fused_dev[bi_], b.before.size());
    const auto pair = download(*pair_dev[bi_], b.before.size());
    if (got != pair) ++unequal;
    const bool e4m3 = b.es == 1;
    for (size_t i = 0; i < b.tol.size(); ++i) {
      const unsigned char* g = got.data() + i * b.es;
      bool ok;
      if (b.tol[i] >= 0) {
        ++checked;
        const double gv = e4m3 ? ref::e4m3_value(*g) : ref::load_elem(got.data(), i, dt);
        ok = std::fabs(gv - b.want[i]) <= b.tol[i];  // NaN fails
      } else {
        // Exact outputs, and everything else as it was.
        ok = std::memcmp(g, b.want_bytes.data() + i * b.es, b.es) == 0;
        checked += b.exact[i];
      }
      if (!ok && bad++ < 8) {
        UNSCOPED_INFO("buffer " << bi_ << (bi_ < n_inputs ? " (input)" : "") << " element " << i
                                << (b.tol[i] >= 0 ? " value " : " bytes differ, want ") << b.want[i]
                                << " tol " << b.tol[i]);
      }
    }
  }
  CHECK(checked > 0);
  CHECK(bad == 0);
  CHECK(unequal == 0);  // bit for bit the unfused pair
}

}  // namespace

TEST_CASE("rope append gpu: decode and prefill, NHD and HND, page 1 and 16, 16-bit and e4m3",
          "[gpu][rope_append]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    for (const char* scales : {"none", "tensor", "head"}) {
      for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
        for (int64_t ps : {1, 16}) {
          Case c;
          c.dtype = dt;
          c.scales = scales;
          c.layout = layout;
          c.page_size = ps;
          c.batch = 7;
          run_case(c, rng);   // decode: 7 tokens
          c.max_append = 37;  // prefill, odd token counts crossing pages
          c.max_seq = 150;
          c.interleave = true;
          run_case(c, rng);
        }
      }
    }
  }
}

TEST_CASE("rope append gpu: head sizes, partial rotary, GQA shapes and positions",
          "[gpu][rope_append]") {
  std::mt19937_64 rng(std::random_device{}());
  struct Shape {
    int64_t hq, hk, d;
    int rot;
    bool gptj;
  };
  for (const Shape s :
       {Shape{32, 8, 128, 0, false}, Shape{7, 1, 64, 0, false}, Shape{5, 5, 256, 0, true},
        Shape{4, 2, 128, 64, true}, Shape{6, 3, 80, 32, false}, Shape{3, 1, 96, 0, false},
        Shape{2, 1, 128, 2, false}}) {
    for (const char* scales : {"none", "head"}) {
      Case c;
      c.hq = s.hq;
      c.hk = s.hk;
      c.head_dim = s.d;
      c.rot = s.rot;
      c.interleave = s.gptj;
      c.scales = scales;
      c.max_append = 9;
      c.page_size = 5;
      c.pos_dtype = "int64";
      c.rope_scale = 2.0f;
      c.theta = 500000.0f;
      run_case(c, rng);
    }
  }
  Case decode;  // a large decode batch (Llama 3 8B heads)
  decode.hq = 32;
  decode.hk = 8;
  decode.batch = 256;
  decode.max_seq = 3000;
  decode.poison = true;
  run_case(decode, rng);
  decode.scales = "tensor";
  run_case(decode, rng);
  Case prefill;  // one long prefill
  prefill.batch = 1;
  prefill.max_seq = 3000;
  prefill.max_append = 3000;
  run_case(prefill, rng);
  // 64 / 8 heads, 80 a token: past one batch of 4 heads a slot (16 slots at head_dim 128), so
  // where there are tokens enough for one block a token (~12000 here, 1056 suffice on 132 SMs)
  // a block walks its heads in two batches.
  Case wide;
  wide.hq = 64;
  wide.hk = 8;
  wide.batch = 8;
  wide.max_seq = 3000;
  wide.max_append = 3000;
  run_case(wide, rng);
}

TEST_CASE("rope append gpu: Llama 3.1 frequencies, decode and prefill, 16-bit and e4m3",
          "[gpu][rope_append]") {
  // kjit_llama31_rope_append_paged_kv_cache against ref::llama31_inv_freq and against
  // kjit_apply_llama31_rope_pos_ids + the append; positions past old_context_len too.
  std::mt19937_64 rng(std::random_device{}());
  for (const char* scales : {"none", "tensor"}) {
    for (int64_t max_append : {1, 300}) {
      Case c;
      c.llama31 = true;
      c.hq = 32;
      c.hk = 8;
      c.batch = 4;
      c.max_seq = 12000;
      c.max_append = max_append;
      c.rope_scale = 8.0f;
      c.theta = 500000.0f;
      c.scales = scales;
      run_case(c, rng);
    }
  }
  Case gptj;  // GPT-J pairs, partial rotary, another band split
  gptj.llama31 = true;
  gptj.interleave = true;
  gptj.rot = 64;
  gptj.low = 2.0f;
  gptj.high = 16.0f;
  gptj.old_context_len = 4096.0f;
  gptj.rope_scale = 32.0f;
  gptj.theta = 500000.0f;
  gptj.max_seq = 9000;
  run_case(gptj, rng);
}

TEST_CASE("rope append gpu: fused qkv views, in place, padded and misaligned",
          "[gpu][rope_append]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* scales : {"none", "tensor"}) {
    for (bool in_place : {false, true}) {
      Case c;
      c.scales = scales;
      c.fused = true;
      c.in_place = in_place;
      c.max_append = 12;
      c.layout = in_place ? KJIT_KV_LAYOUT_HND : KJIT_KV_LAYOUT_NHD;
      run_case(c, rng);
      c.head_pad = 8;
      c.row_pad = 8;
      run_case(c, rng);
      c.offset = 1;  // every view one element off: scalar accesses
      c.head_pad = 1;
      c.row_pad = 3;
      run_case(c, rng);
      c.offset = 0;  // 4-byte aligned rows only
      c.head_pad = 2;
      c.row_pad = 2;
      c.rot = 64;
      run_case(c, rng);
    }
  }
}

TEST_CASE("rope append gpu: broken page tables skip k and v, q is still rotated",
          "[gpu][rope_append]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* scales : {"none", "head"}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      Case c;
      c.scales = scales;
      c.layout = layout;
      c.invalid = true;
      c.poison = true;
      c.max_append = 6;
      run_case(c, rng);
      c.in_place = true;
      c.dtype = "fp16";
      run_case(c, rng);
    }
  }
}
