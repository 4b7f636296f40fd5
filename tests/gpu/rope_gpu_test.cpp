// The rope entry points on the GPU against the fp64 CPU reference, on fresh random inputs.
//
// Every buffer is checked whole after the call: elements of an output view against the
// reference, and every other byte (gaps between heads and tokens, the unused v part of a fused
// qkv row, the inputs of an out-of-place call, the poisoned output gaps) against its value
// before the call, bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kjit/kjit.h"
#include "ops/pdl.hpp"
#include "ops/rope/rope.hpp"
#include "reference/half.hpp"
#include "reference/rope_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

enum class Api { kPosIds, kLlama31, kCache };

struct Case {
  Api api = Api::kPosIds;
  std::string dtype = "bf16";
  std::string pos_dtype = "int32";
  int64_t tokens = 5, hq = 8, hk = 2, head_dim = 128;
  int rot = 0;  // 0 = head_dim
  bool interleave = false;
  bool in_place = false;
  bool fused = false;     // q and k are views of one [tokens, (hq + 2 hk) heads] qkv buffer
  int64_t head_pad = 0;   // elements between heads of the inputs
  int64_t token_pad = 0;  // elements after each token row of the inputs
  int64_t out_head_pad = 0, out_token_pad = 0;  // the same for out-of-place outputs
  size_t offset = 0;  // elements: start every view this far into its buffer (misalignment)
  int64_t max_pos = 131072;
  float scale = 1.0f, theta = 10000.0f;
  float low = 1.0f, high = 4.0f, old_ctx = 8192.0f;  // Llama 3.1
  std::string cache_dtype = "fp32";                  // kCache: fp32 or the q dtype
  bool two_d = false;         // kCache: q and k as [tokens, heads * head_size]
  bool no_k = false;          // kCache: k = NULL
  int64_t bad_positions = 0;  // kCache: tokens given a position outside [0, max_pos)
  // kPosIds / kLlama31 with requests: the positions come from indptr and offsets
  // (kjit_apply_rope / kjit_apply_llama31_rope; pos_dtype is theirs), one request per entry of
  // this many tokens (0: an empty request); they must add up to tokens.
  std::vector<int64_t> requests;
};

std::string describe(const Case& c) {
  const char* api = c.api == Api::kPosIds    ? "pos_ids"
                    : c.api == Api::kLlama31 ? "llama31"
                                             : "cache";
  return std::string(api) + " " + c.dtype + " pos=" + c.pos_dtype +
         " tokens=" + std::to_string(c.tokens) + " hq=" + std::to_string(c.hq) +
         " hk=" + std::to_string(c.hk) + " head_dim=" + std::to_string(c.head_dim) +
         " rot=" + std::to_string(c.rot) + (c.interleave ? " gptj" : " neox") +
         (c.in_place ? " in-place" : "") + (c.fused ? " fused" : "") +
         " pads=" + std::to_string(c.head_pad) + "/" + std::to_string(c.token_pad) + "/" +
         std::to_string(c.out_head_pad) + "/" + std::to_string(c.out_token_pad) +
         " offset=" + std::to_string(c.offset) + " max_pos=" + std::to_string(c.max_pos) +
         (c.api == Api::kCache ? " cache=" + c.cache_dtype : "") + (c.two_d ? " 2d" : "") +
         (c.no_k ? " no-k" : "") + " bad=" + std::to_string(c.bad_positions) +
         (c.requests.empty() ? "" : " requests=" + std::to_string(c.requests.size()));
}

// A [tokens, heads, head_dim] view into one of the host/device buffer pairs.
struct View {
  int buf = 0;
  size_t offset = 0;  // elements
  int64_t heads = 0, token_stride = 0, head_stride = 0;
  size_t at(int64_t t, int64_t h, int64_t d) const {
    return offset + static_cast<size_t>(t * token_stride + h * head_stride + d);
  }
};

struct Buffer {
  std::vector<unsigned char> before;  // host image before the call
  std::vector<double> want;           // per element: expected value (outputs only)
  std::vector<double> tol;            // per element: tolerance; < 0 means "not an output"
};

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const std::string dt = c.dtype;
  const size_t es = ref::elem_size(dt);
  const int64_t D = c.head_dim;
  const int rot = c.rot ? c.rot : static_cast<int>(D);
  const int half = rot / 2;
  const bool cache_api = c.api == Api::kCache;
  const bool in_place = cache_api || c.in_place;
  const int64_t hk = c.no_k ? 0 : c.hk;

  // Layout of the inputs (and, in place, the outputs).
  std::vector<Buffer> bufs;
  auto add_buffer = [&](size_t elems) {
    bufs.push_back({std::vector<unsigned char>(elems * es), {}, {}});
    return static_cast<int>(bufs.size() - 1);
  };
  const int64_t hs = D + c.head_pad;
  View q, k;
  if (c.fused) {
    const int64_t row = (c.hq + 2 * c.hk) * hs + c.token_pad;  // q | k | v heads
    const int b = add_buffer(c.offset + static_cast<size_t>(c.tokens * row));
    q = {b, c.offset, c.hq, row, hs};
    k = {b, c.offset + static_cast<size_t>(c.hq * hs), hk, row, hs};
  } else {
    const int64_t qrow = c.hq * hs + c.token_pad, krow = c.hk * hs + c.token_pad;
    q = {add_buffer(c.offset + static_cast<size_t>(c.tokens * qrow)), c.offset, c.hq, qrow, hs};
    k = {add_buffer(c.offset + static_cast<size_t>(c.tokens * krow)), c.offset, hk, krow, hs};
  }
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  for (auto& b : bufs) {
    const size_t n = b.before.size() / es;
    for (size_t i = 0; i < n; ++i) ref::store_elem(b.before.data(), i, dist(rng), dt);
  }
  View qo = q, ko = k;
  if (!in_place) {
    const int64_t ohs = D + c.out_head_pad;
    const int64_t qrow = c.hq * ohs + c.out_token_pad, krow = c.hk * ohs + c.out_token_pad;
    qo = {add_buffer(c.offset + static_cast<size_t>(c.tokens * qrow)), c.offset, c.hq, qrow, ohs};
    ko = {add_buffer(c.offset + static_cast<size_t>(c.tokens * krow)), c.offset, hk, krow, ohs};
    std::memset(bufs[qo.buf].before.data(), 0xFF, bufs[qo.buf].before.size());  // NaN poison
    std::memset(bufs[ko.buf].before.data(), 0xFF, bufs[ko.buf].before.size());
  }
  for (auto& b : bufs) {
    b.want.assign(b.before.size() / es, 0.0);
    b.tol.assign(b.before.size() / es, -1.0);
  }

  // Positions over the whole range, with both ends present.
  std::uniform_int_distribution<int64_t> pos_dist(0, c.max_pos - 1);
  std::vector<int64_t> pos(static_cast<size_t>(c.tokens));
  for (auto& p : pos) p = pos_dist(rng);
  pos[0] = c.max_pos - 1;
  if (c.tokens > 1) pos[1] = 0;
  for (int64_t i = 0; i < c.bad_positions && i < c.tokens; ++i) {
    pos[static_cast<size_t>(c.tokens - 1 - i)] = i % 2 ? -1 - i : c.max_pos + i;
  }
  // indptr / offsets: each request at a random offset that keeps it in range, the first one
  // ending at max_pos - 1 and the second (where there is one) starting at 0.
  std::vector<int64_t> indptr = {0}, offsets;
  for (size_t b = 0; b < c.requests.size(); ++b) {
    const int64_t n = c.requests[b];
    indptr.push_back(indptr.back() + n);
    offsets.push_back(b == 0   ? c.max_pos - n
                      : b == 1 ? 0
                               : std::uniform_int_distribution<int64_t>(0, c.max_pos - n)(rng));
  }
  if (!c.requests.empty()) {
    REQUIRE(indptr.back() == c.tokens);
    pos = ref::indptr_positions(indptr, offsets);
  }

  // cos / sin per (token, frequency), as the kernel will see them.
  std::vector<double> inv_freq;
  std::vector<unsigned char> cache_host;
  const size_t ces = ref::elem_size(c.cache_dtype);
  if (c.api == Api::kPosIds) inv_freq = ref::rope_inv_freq(rot, c.scale, c.theta);
  if (c.api == Api::kLlama31) {
    inv_freq = ref::llama31_inv_freq(rot, c.scale, c.theta, c.low, c.high, c.old_ctx);
  }
  if (cache_api) {
    // vLLM's cache: cos(t * inv_freq) | sin(t * inv_freq), rounded to the cache dtype.
    const auto f = ref::rope_inv_freq(rot, 1.0, c.theta);
    cache_host.resize(static_cast<size_t>(c.max_pos * rot) * ces);
    for (int64_t t = 0; t < c.max_pos; ++t) {
      for (int i = 0; i < half; ++i) {
        const double a = static_cast<double>(t) * f[static_cast<size_t>(i)];
        ref::store_elem(cache_host.data(), static_cast<size_t>(t * rot + i), std::cos(a),
                        c.cache_dtype);
        ref::store_elem(cache_host.data(), static_cast<size_t>(t * rot + half + i), std::sin(a),
                        c.cache_dtype);
      }
    }
  }
  // Beyond the output rounding: the kernel's angle is within ~3e-7 rad (rope.cuh), sin / cos
  // within an ulp, and the fp32 products and sums a few ulp; 1e-6 per unit of input covers all
  // of it with margin, while an angle rounded once to fp32 (0.008 rad at 131072) would not pass.
  // 16-bit outputs take the hardware sin / cos (under 9e-7 rad in all): 2e-6 for them, still
  // 4000x below the once-rounded angle's error and 1000x below a bf16 ulp.
  const double u = ref::unit_roundoff(dt);
  const double per_input = cache_api ? 0x1p-21 : (ref::elem_size(dt) == 2 ? 2e-6 : 1e-6);

  std::vector<double> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  std::vector<double> x(static_cast<size_t>(D)), y(static_cast<size_t>(D));
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int64_t p = pos[static_cast<size_t>(t)];
    const bool skip = cache_api && (p < 0 || p >= c.max_pos);
    for (int i = 0; i < half && !skip; ++i) {
      if (cache_api) {
        cs[i] = ref::load_elem(cache_host.data(), static_cast<size_t>(p * rot + i), c.cache_dtype);
        sn[i] = ref::load_elem(cache_host.data(), static_cast<size_t>(p * rot + half + i),
                               c.cache_dtype);
      } else {
        const double a = static_cast<double>(p) * inv_freq[static_cast<size_t>(i)];
        cs[i] = std::cos(a);
        sn[i] = std::sin(a);
      }
    }
    for (int which = 0; which < 2; ++which) {
      const View& in = which == 0 ? q : k;
      const View& out = which == 0 ? qo : ko;
      for (int64_t h = 0; h < in.heads; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          x[d] = ref::load_elem(bufs[in.buf].before.data(), in.at(t, h, d), dt);
        }
        if (skip) {
          y = x;  // left untouched
        } else {
          ref::rope_head(x.data(), y.data(), static_cast<int>(D), rot, c.interleave, cs.data(),
                         sn.data());
        }
        Buffer& ob = bufs[out.buf];
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = out.at(t, h, d);
          ob.want[i] = y[d];
          if (skip || d >= rot) {
            ob.tol[i] = 0.0;  // copied: exact
          } else {
            const int64_t partner = ref::rope_partner(static_cast<int>(d), rot, c.interleave);
            ob.tol[i] = 2 * u * std::fabs(y[d]) +
                        per_input * (std::fabs(x[d]) + std::fabs(x[partner])) + 1e-7;
          }
        }
      }
    }
  }

  // Device side, once per kernel: slot-major, unit-major, the decode kernel (where it serves the
  // shape; else the layout the token count picks) with the position read after and before the
  // PDL wait (KJIT_PDL_EARLY_INDICES; before it only on sm_90 with PDL on), each on fresh
  // buffers, through the ops-layer calls with an explicit layout and launch mode. They compute the
  // same angles the same way: every output is bitwise the first's. With requests, a last run
  // gives the same positions as pos_ids (the pos_ids entry point), which must be bitwise equal.
  using kjit::ops::RopeLayout;
  std::vector<std::vector<unsigned char>> first_outputs;
  const std::pair<RopeLayout, int> runs[] = {{RopeLayout::kSlotMajor, 0},
                                             {RopeLayout::kUnitMajor, 0},
                                             {RopeLayout::kDecode, 0},
                                             {RopeLayout::kDecode, 1},
                                             {RopeLayout::kAuto, 0}};
  const bool by_indptr = !c.requests.empty();
  for (const auto& [layout, early] : runs) {
    const bool as_pos_ids = layout == RopeLayout::kAuto;
    if (as_pos_ids && !by_indptr) continue;
    INFO((layout == RopeLayout::kSlotMajor   ? "slot-major"
          : layout == RopeLayout::kUnitMajor ? "unit-major"
          : as_pos_ids                       ? "the same positions as pos_ids"
                       : (early ? "decode kernel, early position" : "decode kernel")));
    kjit::ops::RopeTuning tuning;
    tuning.layout = layout;
    kjit::ops::ElementwiseLaunch launch = kjit::ops::elementwise_launch_from_env();
    launch.early_indices = early != 0;
    std::vector<std::unique_ptr<DeviceBuffer>> dev;
    for (auto& b : bufs) {
      dev.push_back(std::make_unique<DeviceBuffer>(b.before.size()));
      if (!b.before.empty()) dev.back()->upload(b.before.data(), b.before.size());
    }
    const size_t pes = c.pos_dtype == "int64" ? 8 : 4;
    // An index vector on the device in pos_dtype.
    auto upload_indices = [&](const std::vector<int64_t>& idx) {
      std::vector<unsigned char> host(idx.size() * pes);
      for (size_t i = 0; i < idx.size(); ++i) {
        if (pes == 8) {
          std::memcpy(host.data() + i * 8, &idx[i], 8);
        } else {
          const auto v = static_cast<int32_t>(idx[i]);
          std::memcpy(host.data() + i * 4, &v, 4);
        }
      }
      auto d = std::make_unique<DeviceBuffer>(host.size());
      if (!host.empty()) d->upload(host.data(), host.size());
      return d;
    };
    const auto pos_dev = upload_indices(pos);
    const auto indptr_dev = upload_indices(indptr);
    const auto offsets_dev = upload_indices(offsets);
    DeviceBuffer cache_dev(cache_host.size());
    if (!cache_host.empty()) cache_dev.upload(cache_host.data(), cache_host.size());

    auto tensor = [&](const View& v) {
      char* base = static_cast<char*>(dev[static_cast<size_t>(v.buf)]->get()) + v.offset * es;
      if (c.two_d)
        return make_tensor(base, {c.tokens, v.heads * D}, dl_dtype(dt), {v.token_stride, 1});
      return make_tensor(base, {c.tokens, v.heads, D}, dl_dtype(dt),
                         {v.token_stride, v.head_stride, 1});
    };
    Tensor qt = tensor(q), kt = tensor(k), qot = tensor(qo), kot = tensor(ko);
    Tensor pt = make_tensor(pos_dev->get(), {c.tokens}, dl_dtype(c.pos_dtype));
    const auto batch = static_cast<int64_t>(offsets.size());
    Tensor it = make_tensor(indptr_dev->get(), {batch + 1}, dl_dtype(c.pos_dtype));
    Tensor ot = make_tensor(offsets_dev->get(), {batch}, dl_dtype(c.pos_dtype));
    if (by_indptr && !as_pos_ids) {
      if (c.api == Api::kPosIds) {
        REQUIRE_NOTHROW(kjit::ops::apply_rope_indptr(qt.get(), kt.get(), qot.get(), kot.get(),
                                                     it.get(), ot.get(), c.rot, c.interleave,
                                                     c.scale, c.theta, nullptr, launch, tuning));
      } else {
        REQUIRE_NOTHROW(kjit::ops::apply_llama31_rope_indptr(
            qt.get(), kt.get(), qot.get(), kot.get(), it.get(), ot.get(), c.rot, c.interleave,
            c.scale, c.theta, c.low, c.high, c.old_ctx, nullptr, launch, tuning));
      }
    } else {
      switch (c.api) {
        case Api::kPosIds:
          REQUIRE_NOTHROW(kjit::ops::apply_rope_pos_ids(qt.get(), kt.get(), qot.get(), kot.get(),
                                                        pt.get(), c.rot, c.interleave, c.scale,
                                                        c.theta, nullptr, launch, tuning));
          break;
        case Api::kLlama31:
          REQUIRE_NOTHROW(kjit::ops::apply_llama31_rope_pos_ids(
              qt.get(), kt.get(), qot.get(), kot.get(), pt.get(), c.rot, c.interleave, c.scale,
              c.theta, c.low, c.high, c.old_ctx, nullptr, launch, tuning));
          break;
        default: {
          Tensor ct = make_tensor(cache_dev.get(), {c.max_pos, rot}, dl_dtype(c.cache_dtype));
          REQUIRE_NOTHROW(kjit::ops::apply_rope_with_cos_sin_cache(
              pt.get(), qt.get(), c.no_k ? nullptr : kt.get(), static_cast<int>(D), ct.get(),
              c.interleave ? 0 : 1, nullptr, launch, tuning));
        }
      }
    }
    device_synchronize();

    long bad = 0, touched = 0, unequal = 0;
    double worst = 0;
    const bool first_run = first_outputs.empty();
    for (size_t bi = 0; bi < bufs.size(); ++bi) {
      const Buffer& b = bufs[bi];
      std::vector<unsigned char> got(b.before.size());
      if (!got.empty()) dev[bi]->download(got.data(), got.size());
      if (first_run) {
        first_outputs.push_back(got);
      } else if (got != first_outputs[bi]) {
        ++unequal;
      }
      for (size_t i = 0; i < b.tol.size(); ++i) {
        if (b.tol[i] < 0) {
          // Not an output element: must be exactly what it was (poison, gaps, inputs).
          if (std::memcmp(got.data() + i * es, b.before.data() + i * es, es) != 0) {
            if (touched++ < 5) UNSCOPED_INFO("buffer " << bi << " element " << i << " was written");
          }
          continue;
        }
        const double g = ref::load_elem(got.data(), i, dt);
        const double err = std::fabs(g - b.want[i]);
        if (!(err <= b.tol[i])) {  // NaN fails too
          if (bad++ < 5) {
            UNSCOPED_INFO("buffer " << bi << " element " << i << " got " << g << " want "
                                    << b.want[i] << " tol " << b.tol[i]);
          }
        }
        if (!(err <= worst)) worst = err;
      }
    }
    INFO("largest error " << worst);
    CHECK(bad == 0);
    CHECK(touched == 0);
    CHECK(unequal == 0);  // buffers that differ from the slot-major run's
  }
}

}  // namespace

TEST_CASE("rope gpu: head sizes, partial rotary, NeoX and GPT-J, GQA", "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  struct Dims {
    int64_t head_dim;
    int rot;
  };
  for (const char* dt : {"bf16", "fp16"}) {
    for (Dims d : {Dims{64, 0}, Dims{128, 0}, Dims{256, 0}, Dims{96, 0}, Dims{128, 64},
                   Dims{80, 32}, Dims{80, 20}, Dims{256, 64}, Dims{512, 512}, Dims{130, 2}}) {
      for (bool il : {false, true}) {
        Case c;
        c.dtype = dt;
        c.head_dim = d.head_dim;
        c.rot = d.rot;
        c.interleave = il;
        c.tokens = 19;
        c.hq = 7;  // odd head counts, GQA 7:3
        c.hk = 3;
        run_case(c, rng);
      }
    }
  }
}

TEST_CASE("rope gpu: positions up to 131072, int32 and int64, scale and theta", "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp16", "bf16"}) {
    for (const char* pdt : {"int32", "int64"}) {
      Case c;
      c.dtype = dt;
      c.pos_dtype = pdt;
      c.tokens = 1000;
      c.hq = 4;
      c.hk = 1;
      run_case(c, rng);
    }
  }
  Case s;
  s.dtype = "fp16";
  s.scale = 4.0f;
  s.theta = 1e6f;
  s.tokens = 300;
  s.interleave = true;
  run_case(s, rng);
  Case big;  // positions past 2^24 are rounded to fp32 first: stay below it, but use int64
  big.dtype = "fp16";
  big.pos_dtype = "int64";
  big.max_pos = 1 << 24;
  big.tokens = 257;
  run_case(big, rng);
}

TEST_CASE("rope gpu: in place, fused qkv, strided and misaligned views", "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    for (bool il : {false, true}) {
      Case c;
      c.dtype = dt;
      c.interleave = il;
      c.tokens = 33;
      c.hq = 32;
      c.hk = 8;
      c.in_place = true;
      c.fused = true;  // vLLM / SGLang: q and k are views of the qkv projection output
      run_case(c, rng);
      c.rot = 64;  // in place and partial: dims past 64 must not be written at all
      run_case(c, rng);
      Case s;  // padded token and head strides, out of place into differently padded outputs
      s.dtype = dt;
      s.interleave = il;
      s.tokens = 17;
      s.hq = 5;
      s.hk = 3;
      s.head_pad = 8;
      s.token_pad = 24;
      s.out_head_pad = 16;
      s.out_token_pad = 8;
      run_case(s, rng);
      s.rot = 96;
      run_case(s, rng);
      Case m;  // one element off alignment, odd strides: narrower vectors down to scalar
      m.dtype = dt;
      m.interleave = il;
      m.tokens = 9;
      m.hq = 3;
      m.hk = 1;
      m.offset = 1;
      m.head_pad = 1;
      m.token_pad = 3;
      m.out_head_pad = 2;
      run_case(m, rng);
      m.in_place = true;
      run_case(m, rng);
      Case h;  // half-aligned head stride: 4-byte vectors
      h.dtype = dt;
      h.interleave = il;
      h.head_pad = 2;
      h.rot = 64;
      run_case(h, rng);
    }
  }
}

TEST_CASE("rope gpu: decode and prefill shapes", "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  // Few tokens with many heads split each token over several blocks; many tokens use one block
  // per token. Both must cover every head exactly once.
  for (int64_t tokens : {1, 2, 3, 17, 64, 257, 2048}) {
    Case c;
    c.tokens = tokens;
    c.hq = 64;
    c.hk = 8;
    c.fused = true;
    c.in_place = true;
    run_case(c, rng);
  }
  Case one;  // a single head in all
  one.tokens = 3;
  one.hq = 1;
  one.hk = 0;
  run_case(one, rng);
  Case mqa;
  mqa.tokens = 40;
  mqa.hq = 71;
  mqa.hk = 1;
  mqa.dtype = "fp16";
  run_case(mqa, rng);
}

TEST_CASE("rope gpu: Llama 3.1 frequency scaling", "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    Case c;
    c.api = Api::kLlama31;
    c.dtype = dt;
    c.scale = 8.0f;
    c.theta = 500000.0f;
    c.tokens = 500;
    c.hq = 32;
    c.hk = 8;
    c.fused = true;
    c.in_place = true;
    run_case(c, rng);
    c.in_place = false;
    c.fused = false;
    c.interleave = true;
    c.rot = 64;
    c.low = 2.0f;
    c.high = 8.0f;
    c.old_ctx = 4096.0f;
    c.scale = 16.0f;
    run_case(c, rng);
  }
}

TEST_CASE("rope gpu: cos_sin_cache, vLLM layouts, optional k, out-of-range positions",
          "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    for (bool il : {false, true}) {
      Case c;
      c.api = Api::kCache;
      c.dtype = dt;
      c.interleave = il;
      c.pos_dtype = "int64";
      c.tokens = 45;
      c.hq = 8;
      c.hk = 2;
      c.max_pos = 4096;
      c.bad_positions = 4;  // left unchanged
      run_case(c, rng);
      c.two_d = true;  // [tokens, heads * head_size]
      c.fused = true;
      run_case(c, rng);
      c.two_d = false;
      c.fused = false;
      c.cache_dtype = dt;  // a cache in the q dtype
      c.rot = 64;
      c.head_pad = 8;
      c.pos_dtype = "int32";
      run_case(c, rng);
      c.no_k = true;
      c.offset = 1;
      run_case(c, rng);
    }
  }
  Case full;  // the whole position range in fp32
  full.api = Api::kCache;
  full.pos_dtype = "int64";
  full.dtype = "fp16";
  full.tokens = 512;
  full.max_pos = 131072;
  full.head_dim = 64;
  run_case(full, rng);
}

TEST_CASE("rope gpu: positions from indptr and offsets, ragged and empty requests", "[gpu][rope]") {
  std::mt19937_64 rng(std::random_device{}());
  // Every kernel (slot-major, unit-major, the decode kernel with the search after and before the
  // PDL wait) against the reference and bitwise against pos_ids at the same positions.
  struct Batch {
    std::vector<int64_t> requests;
  };
  const Batch batches[] = {
      {{1}},                             // one token, one request
      {{0, 3, 0, 0, 5, 1, 0}},           // empty requests first, between and last
      {{7, 1, 1, 1, 1, 1, 1, 1, 1, 2}},  // decode-like, a prefill head
      {{300, 0, 37, 129, 1}},            // prefill sizes
  };
  for (const char* dt : {"bf16", "fp16"}) {
    for (const char* pdt : {"int32", "int64"}) {
      for (const Batch& b : batches) {
        for (Api api : {Api::kPosIds, Api::kLlama31}) {
          Case c;
          c.api = api;
          c.dtype = dt;
          c.pos_dtype = pdt;
          c.requests = b.requests;
          c.tokens = 0;
          for (int64_t n : b.requests) c.tokens += n;
          c.hq = 7;
          c.hk = 3;
          if (api == Api::kLlama31) {
            c.scale = 8.0f;
            c.theta = 500000.0f;
          }
          run_case(c, rng);
        }
      }
    }
  }
  // 256 requests of one token (a decode batch: an 8-step search), GPT-J pairs, partial rotary,
  // in place on a fused qkv row.
  Case d;
  d.requests.assign(256, 1);
  d.tokens = 256;
  d.hq = 32;
  d.hk = 8;
  d.fused = true;
  d.in_place = true;
  run_case(d, rng);
  d.interleave = true;
  d.rot = 64;
  d.requests.assign(255, 1);
  d.requests.push_back(0);
  d.requests[17] = 2;
  run_case(d, rng);
}

TEST_CASE("rope gpu: a device id that does not exist is an argument error", "[gpu][rope]") {
  DeviceBuffer buf(1 << 16);
  char* p = static_cast<char*>(buf.get());
  auto q = make_tensor(p, {2, 4, 64}, dl_dtype("bf16"), {}, 63);
  auto k = make_tensor(p + 4096, {2, 1, 64}, dl_dtype("bf16"), {}, 63);
  auto pos = make_tensor(p + 8192, {2}, dl_dtype("int32"), {}, 63);
  CHECK(kjit_apply_rope_pos_ids(q.get(), k.get(), pos.get(), q.get(), k.get(), 0, KJIT_ROPE_NEOX,
                                1.0f, 1e4f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
}
