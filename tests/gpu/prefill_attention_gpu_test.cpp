// kjit_batch_prefill_plan / kjit_batch_prefill_run / kjit_batch_prefill_ragged_run on the GPU
// against the fp64 CPU reference (tools/devkit/reference/prefill_ref.hpp), on fresh random
// inputs and shuffled page tables.
//
// Every case poisons out and lse (0xFF: NaN), so a row the kernel forgets to write fails. Keys and
// values have a non-zero mean, so a key the output loses (or one it takes beyond the mask) moves
// it. Tolerances are decode's model (reference/attention_ref.hpp, DecodeTolerance): the
// probabilities fed to P.V rounded to the input type, fp32 accumulation, one output rounding.
//
// run_case runs each case on the kernel the plan picks or, on an H100 / H200, on the mma.sync and
// the sm_90a wgmma kernels in turn, the latter with and without its ping-pong schedule and (head
// dims 64 and 128) in its persistent form (asked for through ops::PrefillTuning), so every kernel
// meets every case.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "ops/attention/prefill.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "reference/prefill_ref.hpp"
#include "support/parallel_rows.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct PlanDeleter {
  void operator()(kjit_prefill_plan* p) const { kjit_prefill_plan_destroy(p); }
};

struct PrefillCase {
  std::string dtype = "bf16";
  int layout = KJIT_KV_LAYOUT_NHD;
  int64_t qo_heads = 8, kv_heads = 2, head_dim = 128;
  int64_t page_size = 16;  // 0: ragged KV
  // Per request: new tokens and keys (the new tokens are the last q_len of the kv_len keys).
  std::vector<int64_t> q_lens = {1, 7, 63, 129, 0};
  std::vector<int64_t> kv_lens = {1, 20, 63, 300, 9};
  bool causal = true;
  int window_left = -1;
  float soft_cap = 0.0f, sm_scale = 0.0f;
  bool lse = true;
  bool invalid_pages = false;  // a page id past the pool and a negative one in the table
  int64_t spare_pages = 3;
  // NaN in every cache slot no request's keys cover (a last page's tail, spare pages; ragged:
  // spare rows after the last request): a kernel must not let them reach out (P = 0 x NaN).
  bool nan_unused = false;
  // A kjit::ops::PrefillKernel to re-plan with (the internal tuning path), or kPingPong /
  // kPersistent: the wgmma kernel with its ping-pong schedule / in its persistent form.
  int kernel = -1;
  int stages = 0;  // the wgmma kernel's ring depth (ops::PrefillTuning::stages); 0: the plan's
  // fp8 e4m3 k and v (random codes), dequantized by the run's scales.
  bool kv_fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
};

constexpr int kPingPong = 2;
constexpr int kPersistent = 3;

std::string describe(const PrefillCase& c) {
  std::string lens;
  for (size_t b = 0; b < c.q_lens.size(); ++b) {
    lens += std::to_string(c.q_lens[b]) + "/" + std::to_string(c.kv_lens[b]) + ",";
  }
  return c.dtype + (c.layout == KJIT_KV_LAYOUT_NHD ? " NHD" : " HND") +
         " heads=" + std::to_string(c.qo_heads) + "/" + std::to_string(c.kv_heads) +
         " head_dim=" + std::to_string(c.head_dim) + " page=" + std::to_string(c.page_size) +
         " q/kv=" + lens + (c.causal ? " causal" : " full") +
         " window=" + std::to_string(c.window_left) + " cap=" + std::to_string(c.soft_cap) +
         " scale=" + std::to_string(c.sm_scale) + (c.lse ? "" : " no-lse") +
         (c.invalid_pages ? " invalid-pages" : "") + (c.nan_unused ? " nan-unused" : "") +
         (c.kv_fp8
              ? " kv=e4m3 scales=" + std::to_string(c.k_scale) + "/" + std::to_string(c.v_scale)
              : "") +
         (c.kernel >= 0 ? " kernel=" + std::to_string(c.kernel) : "");
}

std::unique_ptr<DeviceBuffer> upload_bytes(const void* data, size_t bytes) {
  auto d = std::make_unique<DeviceBuffer>(std::max<size_t>(bytes, 16));
  if (bytes > 0) d->upload(data, bytes);
  return d;
}

std::unique_ptr<DeviceBuffer> upload_ints(const std::vector<int32_t>& v) {
  return upload_bytes(v.data(), v.size() * 4);
}

// One prefill problem: host images, device buffers, tensors and its plan.
struct Problem {
  PrefillCase c;
  int64_t batch = 0, total_q = 0, num_pages = 0;  // num_pages: ragged: rows of k / v
  std::vector<int32_t> qo_indptr, kv_indptr, indices, last;
  std::vector<unsigned char> q_host, k_host, v_host;
  int64_t slot_stride = 0, head_stride = 0, page_stride = 0;  // k / v, elements
  std::unique_ptr<DeviceBuffer> q_dev, k_dev, v_dev, qo_dev, kv_dev, idx_dev, last_dev, out_dev,
      lse_dev;
  Tensor q_t, k_t, v_t, qo_t, kv_t, idx_t, last_t, out_t, lse_t;
  std::unique_ptr<kjit_prefill_plan, PlanDeleter> plan;

  // A key's or value's element as the run sees it (fp8: the code's value times the scale).
  double kv(const std::vector<unsigned char>& h, int64_t page, int64_t slot, int64_t head,
            int64_t d, float scale = 1.0f) const {
    const size_t at =
        static_cast<size_t>(page * page_stride + slot * slot_stride + head * head_stride + d);
    if (c.kv_fp8) return ref::e4m3_value(h[at]) * scale;
    return ref::load_elem(h.data(), at, c.dtype);
  }
  kjit_status run(void* stream = nullptr) {
    DLTensor* lse = c.lse ? lse_t.get() : nullptr;
    if (c.page_size == 0) {
      return kjit_batch_prefill_ragged_run(plan.get(), q_t.get(), k_t.get(), v_t.get(), qo_t.get(),
                                           kv_t.get(), nullptr, out_t.get(), lse, c.k_scale,
                                           c.v_scale, stream);
    }
    return kjit_batch_prefill_run(plan.get(), q_t.get(), k_t.get(), v_t.get(), qo_t.get(),
                                  idx_t.get(), kv_t.get(), last_t.get(), nullptr, out_t.get(), lse,
                                  c.k_scale, c.v_scale, stream);
  }
  void poison() {
    out_dev->fill(0xFF);
    lse_dev->fill(0xFF);
  }
  // The out and lse bytes as they are on the device.
  std::vector<unsigned char> outputs() const {
    const size_t out_bytes = q_host.size();
    std::vector<unsigned char> b(out_bytes + static_cast<size_t>(total_q * c.qo_heads) * 4);
    if (out_bytes > 0) out_dev->download(b.data(), out_bytes);
    if (b.size() > out_bytes) lse_dev->download(b.data() + out_bytes, b.size() - out_bytes);
    return b;
  }
};

void fill(std::vector<unsigned char>& b, const std::string& dtype, double lo, double hi,
          std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (size_t i = 0; i < b.size() / 2; ++i) ref::store_elem(b.data(), i, dist(rng), dtype);
}

// Sets every k / v element of a slot no request's keys use to NaN (all bits set).
void poison_unused(Problem& p) {
  const PrefillCase& c = p.c;
  const int64_t P = c.page_size, rows = P > 0 ? P : 1;
  std::vector<char> used(static_cast<size_t>(p.num_pages * rows), 0);
  for (size_t b = 0; b < c.kv_lens.size(); ++b) {
    for (int64_t t = 0; t < c.kv_lens[b]; ++t) {
      int64_t page = p.kv_indptr[b] + t, slot = 0;  // ragged: the key's row
      if (P > 0) {
        page = p.indices[static_cast<size_t>(p.kv_indptr[b] + t / P)];
        slot = t % P;
      }
      if (page >= 0 && page < p.num_pages) used[static_cast<size_t>(page * rows + slot)] = 1;
    }
  }
  for (int64_t page = 0; page < p.num_pages; ++page) {
    for (int64_t slot = 0; slot < rows; ++slot) {
      if (used[static_cast<size_t>(page * rows + slot)]) continue;
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        const int64_t at = page * p.page_stride + slot * p.slot_stride + h * p.head_stride;
        const size_t es = c.kv_fp8 ? 1 : 2;  // 0xFF: NaN in every format here
        for (auto* host : {&p.k_host, &p.v_host}) {
          std::memset(host->data() + at * es, 0xFF, static_cast<size_t>(c.head_dim) * es);
        }
      }
    }
  }
}

std::unique_ptr<Problem> build(const PrefillCase& c, std::mt19937_64& rng) {
  auto pp = std::make_unique<Problem>();
  Problem& p = *pp;
  p.c = c;
  p.batch = static_cast<int64_t>(c.q_lens.size());
  const int64_t H = c.kv_heads, D = c.head_dim, P = c.page_size;
  p.qo_indptr = {0};
  for (int64_t l : c.q_lens) p.qo_indptr.push_back(static_cast<int32_t>(p.qo_indptr.back() + l));
  p.total_q = p.qo_indptr.back();
  p.kv_indptr = {0};
  if (P > 0) {
    // Distinct pages in random order.
    std::vector<int64_t> npages;
    int64_t used = 0;
    for (int64_t l : c.kv_lens) used += npages.emplace_back((l + P - 1) / P);
    p.num_pages = used + c.spare_pages;
    std::vector<int32_t> perm(static_cast<size_t>(p.num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (size_t b = 0; b < c.kv_lens.size(); ++b) {
      for (int64_t i = 0; i < npages[b]; ++i) p.indices.push_back(perm[p.indices.size()]);
      p.kv_indptr.push_back(static_cast<int32_t>(p.indices.size()));
      p.last.push_back(
          static_cast<int32_t>(npages[b] == 0 ? 0 : c.kv_lens[b] - (npages[b] - 1) * P));
    }
    if (c.invalid_pages) {
      // Past the pool in the first request with two pages, negative in the last with one.
      for (size_t b = 0; b < npages.size(); ++b) {
        if (npages[b] >= 2) {
          p.indices[static_cast<size_t>(p.kv_indptr[b] + 1)] =
              static_cast<int32_t>(p.num_pages + 5);
          break;
        }
      }
      for (size_t b = npages.size(); b-- > 0;) {
        if (npages[b] >= 1) {
          p.indices[static_cast<size_t>(p.kv_indptr[b])] = -3;
          break;
        }
      }
    }
    const bool nhd = c.layout == KJIT_KV_LAYOUT_NHD;
    p.slot_stride = nhd ? H * D : D;
    p.head_stride = nhd ? D : P * D;
    p.page_stride = P * H * D;
  } else {
    for (int64_t l : c.kv_lens) p.kv_indptr.push_back(static_cast<int32_t>(p.kv_indptr.back() + l));
    p.num_pages = p.kv_indptr.back() + (c.nan_unused ? c.spare_pages : 0);
    p.slot_stride = 0;
    p.head_stride = D;
    p.page_stride = H * D;
  }
  const size_t kv_elems = static_cast<size_t>(p.num_pages * p.page_stride);
  if (c.kv_fp8) {
    // Codes of values in [-0.5, 1.5] / scale, so the dequantized keys and values span what the
    // 16-bit cases' do (subnormal codes included near 0); never the NaN code.
    p.k_host.resize(kv_elems);
    p.v_host.resize(kv_elems);
    std::uniform_real_distribution<float> dist(-0.5f, 1.5f);
    for (size_t i = 0; i < kv_elems; ++i) {
      p.k_host[i] = ref::e4m3_code(dist(rng) / c.k_scale);
      p.v_host[i] = ref::e4m3_code(dist(rng) / c.v_scale);
    }
  } else {
    p.k_host.resize(kv_elems * 2);
    p.v_host.resize(kv_elems * 2);
    fill(p.k_host, c.dtype, -0.5, 1.5, rng);
    fill(p.v_host, c.dtype, -0.5, 1.5, rng);
  }
  if (c.nan_unused) poison_unused(p);
  p.q_host.resize(static_cast<size_t>(p.total_q * c.qo_heads * D) * 2);
  fill(p.q_host, c.dtype, -2.0, 2.0, rng);

  p.q_dev = upload_bytes(p.q_host.data(), p.q_host.size());
  p.k_dev = upload_bytes(p.k_host.data(), p.k_host.size());
  p.v_dev = upload_bytes(p.v_host.data(), p.v_host.size());
  p.qo_dev = upload_ints(p.qo_indptr);
  p.kv_dev = upload_ints(p.kv_indptr);
  p.idx_dev = upload_ints(p.indices);
  p.last_dev = upload_ints(p.last);
  p.out_dev = std::make_unique<DeviceBuffer>(std::max<size_t>(16, p.q_host.size()));
  p.lse_dev = std::make_unique<DeviceBuffer>(
      std::max<size_t>(16, static_cast<size_t>(p.total_q * c.qo_heads) * 4));
  p.poison();

  const DLDataType dt = dl_dtype(c.dtype), i32 = dl_dtype("int32");
  const DLDataType kvt = c.kv_fp8 ? dl_dtype("e4m3") : dt;
  p.q_t = make_tensor(p.q_dev->get(), {p.total_q, c.qo_heads, D}, dt);
  p.out_t = make_tensor(p.out_dev->get(), {p.total_q, c.qo_heads, D}, dt);
  p.lse_t = make_tensor(p.lse_dev->get(), {p.total_q, c.qo_heads}, dl_dtype("fp32"));
  if (P > 0) {
    const std::vector<int64_t> shape = c.layout == KJIT_KV_LAYOUT_NHD
                                           ? std::vector<int64_t>{p.num_pages, P, H, D}
                                           : std::vector<int64_t>{p.num_pages, H, P, D};
    p.k_t = make_tensor(p.k_dev->get(), shape, kvt);
    p.v_t = make_tensor(p.v_dev->get(), shape, kvt);
  } else {
    p.k_t = make_tensor(p.k_dev->get(), {p.num_pages, H, D}, kvt);
    p.v_t = make_tensor(p.v_dev->get(), {p.num_pages, H, D}, kvt);
  }
  p.qo_t = make_tensor(p.qo_dev->get(), {p.batch + 1}, i32);
  p.kv_t = make_tensor(p.kv_dev->get(), {p.batch + 1}, i32);
  p.idx_t = make_tensor(p.idx_dev->get(), {static_cast<int64_t>(p.indices.size())}, i32);
  p.last_t = make_tensor(p.last_dev->get(), {p.batch}, i32);

  kjit_prefill_options o;
  kjit_prefill_options_init(&o);
  o.causal = c.causal ? 1 : 0;
  o.window_left = c.window_left;
  o.logits_soft_cap = c.soft_cap;
  o.sm_scale = c.sm_scale;
  kjit_prefill_plan* plan = nullptr;
  const kjit_status st = kjit_batch_prefill_plan(
      p.qo_indptr.data(), p.kv_indptr.data(), static_cast<int>(p.batch),
      static_cast<int>(c.qo_heads), static_cast<int>(H), static_cast<int>(D), static_cast<int>(P),
      static_cast<kjit_kv_layout>(c.layout), dt, kvt, &o, 0, &plan);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  p.plan.reset(plan);
  if (c.kernel >= 0) {
    const int kernel = c.kernel == kPingPong || c.kernel == kPersistent
                           ? static_cast<int>(kjit::ops::PrefillKernel::kWgmmaSm90a)
                           : c.kernel;
    kjit::ops::PrefillTuning t;
    t.kernel = kernel;
    t.pingpong = c.kernel == kPingPong ? 1 : 0;
    t.persistent = c.kernel == kPersistent ? 1 : 0;
    t.stages = c.stages;
    try {
      plan->data = kjit::ops::plan_batch_prefill(
          p.qo_indptr.data(), p.kv_indptr.data(), static_cast<int>(p.batch),
          static_cast<int>(c.qo_heads), static_cast<int>(H), static_cast<int>(D),
          static_cast<int>(P), c.layout, dt, kvt, o.causal, o.sm_scale, o.logits_soft_cap,
          o.window_left, 0, &t);
    } catch (const std::exception& e) {
      FAIL("tuned plan: " << e.what());
    }
    REQUIRE(static_cast<int>(plan->data.cfg.kernel) == kernel);
    REQUIRE(plan->data.cfg.pingpong == t.pingpong);
    REQUIRE(plan->data.cfg.persistent == t.persistent);
    if (c.stages != 0) REQUIRE(plan->data.cfg.stages == c.stages);
    // Three CTAs instead of one an SM, so that at every size the persistent CTAs walk many tiles
    // (both Q buffers, the ring's phases across tiles, empty tiles handed over).
    // The plan's own count is the device's (the launch bound and the CTA-order rule use it).
    REQUIRE(plan->data.sms == kjit::cuda::device_info(0).sm_count);
    if (t.persistent != 0) plan->data.sms = 3;
  }
  CHECK(kjit_prefill_plan_workspace_bytes(plan) == 0);
  return pp;
}

struct Expected {
  std::vector<double> out, lse;
  ref::DecodeTolerance tol;
};

Expected reference(const Problem& p) {
  Expected e;
  const PrefillCase& c = p.c;
  ref::PrefillRefArgs a;
  a.batch = p.batch;
  a.qo_heads = c.qo_heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.page_size = c.page_size;
  a.num_pages = p.num_pages;
  a.sm_scale = c.sm_scale > 0 ? c.sm_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  a.soft_cap = c.soft_cap;
  a.causal = c.causal;
  a.window_left = c.window_left;
  a.qo_indptr = p.qo_indptr;
  a.kv_indptr = p.kv_indptr;
  a.kv_indices = p.indices;
  a.last_page_len = p.last;
  const bool bf16 = c.dtype == "bf16";
  e.tol.u_p = bf16 ? 0x1p-8 : 0x1p-11;
  // fp8 keys and values run fp16 MMAs whatever q is, so P rounds to fp16 (its subnormals too).
  e.tol.eta_p = bf16 && !c.kv_fp8 ? 0x1p-134 : 0x1p-25;
  e.tol.u_out = ref::unit_roundoff(c.dtype);
  auto q = [&](int64_t r, int64_t i, int64_t d) {
    return ref::load_elem(p.q_host.data(),
                          static_cast<size_t>((r * c.qo_heads + i) * c.head_dim + d), c.dtype);
  };
  auto k = [&](int64_t pg, int64_t s, int64_t h, int64_t d) {
    return p.kv(p.k_host, pg, s, h, d, c.k_scale);
  };
  auto v = [&](int64_t pg, int64_t s, int64_t h, int64_t d) {
    return p.kv(p.v_host, pg, s, h, d, c.v_scale);
  };
  // The query tokens on every core: the long cases took minutes on one.
  ref::prefill_attention(a, p.total_q, q, k, v, e.out, e.lse, &e.tol,
                         [](int64_t n, auto f) { parallel_rows(n, f); });
  return e;
}

// Compares out (and lse when asked for) with the reference; returns the number of bad elements.
long check(const Problem& p, const Expected& e) {
  const PrefillCase& c = p.c;
  std::vector<unsigned char> raw(p.q_host.size());
  if (!raw.empty()) p.out_dev->download(raw.data(), raw.size());
  std::vector<float> lse(static_cast<size_t>(p.total_q * c.qo_heads));
  if (!lse.empty()) p.lse_dev->download(lse.data(), lse.size() * 4);
  long bad = 0;
  double worst = 0;
  for (size_t i = 0; i < e.out.size(); ++i) {
    const double got = ref::load_elem(raw.data(), i, c.dtype);
    const double err = std::fabs(got - e.out[i]);
    if (!(err <= e.tol.out[i]) && bad++ < 5) {
      UNSCOPED_INFO("out[" << i << "] (row " << i / c.head_dim / c.qo_heads << ", head "
                           << i / c.head_dim % c.qo_heads << ", dim " << i % c.head_dim << ") = "
                           << got << ", want " << e.out[i] << " (tol " << e.tol.out[i] << ")");
    }
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
  }
  for (size_t i = 0; i < e.lse.size(); ++i) {
    const double want = e.lse[i], got = lse[i];
    bool ok = true;
    if (!c.lse) {
      uint32_t bits;
      std::memcpy(&bits, &lse[i], 4);
      ok = bits == 0xFFFFFFFFu;  // not asked for: still poisoned
    } else if (std::isinf(want)) {
      ok = std::isinf(got) && got < 0;
    } else {
      ok = std::fabs(got - want) <= e.tol.lse[i];
    }
    if (!ok && bad++ < 10) {
      UNSCOPED_INFO("lse[" << i << "] = " << got << ", want " << want << " (tol " << e.tol.lse[i]
                           << ")");
    }
  }
  UNSCOPED_INFO("largest out error " << worst);
  return bad;
}

void run_one(const PrefillCase& c, std::mt19937_64& rng) {
  INFO(describe(c));
  auto p = build(c, rng);
  const kjit_status st = p->run();
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  CHECK(check(*p, reference(*p)) == 0);
}

// The kernels a case runs on: on sm_90a the mma.sync kernel and the wgmma one with either
// schedule and (head_dim 64 / 128: its two Q buffers do not fit at 256) in its persistent form,
// asked for by name whatever the plan's default; elsewhere the plan's choice (-1).
std::vector<int> kernels_for(const PrefillCase& c) {
  if (c.kv_fp8) return {c.kernel};  // the plan's (mma.sync) or the one asked for
  if (c.kernel < 0 && gpu_caps().sm90a()) {
    std::vector<int> k = {static_cast<int>(kjit::ops::PrefillKernel::kMmaSm80),
                          static_cast<int>(kjit::ops::PrefillKernel::kWgmmaSm90a), kPingPong};
    if (c.head_dim != 256) k.push_back(kPersistent);
    return k;
  }
  return {c.kernel};
}

void run_case(const PrefillCase& c, std::mt19937_64& rng) {
  for (int k : kernels_for(c)) {
    PrefillCase m = c;
    m.kernel = k;
    run_one(m, rng);
  }
}

}  // namespace

TEST_CASE("prefill gpu: head dims and dtypes, causal and not", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2701);
  for (const char* dt : {"bf16", "fp16"}) {
    for (int64_t d : {64, 128, 256}) {
      for (bool causal : {true, false}) {
        PrefillCase c;
        c.dtype = dt;
        c.head_dim = d;
        c.causal = causal;
        run_case(c, rng);
      }
    }
  }
  // head_dim 256 (64-key tiles on the wgmma kernel): ragged keys and pages of 16, requests many
  // tiles long, a window and a soft cap.
  for (int64_t ps : {0, 16}) {
    PrefillCase c;
    c.head_dim = 256;
    c.page_size = ps;
    c.q_lens = {300, 5, 64};
    c.kv_lens = {700, 133, 64};
    run_case(c, rng);
    c.window_left = 100;
    c.soft_cap = 30.0f;
    run_case(c, rng);
  }
}

// The planner's choice: the wgmma kernel on sm_90a (in its persistent form under a causal mask at
// head_dim 64 and 128, and without one where the grid is at most four waves; at 256 its second Q
// buffer does not fit), the mma.sync kernel elsewhere.
// Asked for, the wgmma kernel serves every head_dim on sm_90a in CTAs of 128 rows and is refused
// elsewhere.
TEST_CASE("prefill gpu: the kernel choice and the fallback", "[gpu][attention][prefill]") {
  const bool hopper = gpu_caps().sm90a();
  const DLDataType bf = dl_dtype("bf16");
  const int32_t qo[2] = {0, 200}, kv[2] = {0, 13};
  for (int d : {64, 128, 256}) {
    INFO("head_dim " << d);
    kjit_prefill_plan* plan = nullptr;
    REQUIRE(kjit_batch_prefill_plan(qo, kv, 1, 8, 2, d, 16, KJIT_KV_LAYOUT_NHD, bf, bf, nullptr, 0,
                                    &plan) == KJIT_SUCCESS);
    CHECK(plan->data.cfg.kernel ==
          (hopper ? kjit::ops::PrefillKernel::kWgmmaSm90a : kjit::ops::PrefillKernel::kMmaSm80));
    kjit_prefill_plan_destroy(plan);
    for (int causal : {0, 1}) {
      INFO("causal " << causal);
      const auto pl = kjit::ops::plan_batch_prefill(qo, kv, 1, 8, 2, d, 16, KJIT_KV_LAYOUT_NHD, bf,
                                                    bf, causal, 0.0f, 0.0f, -1, 0, nullptr);
      // 14 CTAs: a few waves, so the persistent form also without a mask.
      CHECK(pl.cfg.persistent == (hopper && d != 256 ? 1 : 0));
      if (pl.cfg.persistent != 0) CHECK(pl.head_inner == 1);
    }
    {
      // 8192 rows x group 4 over 2 kv heads: 512 CTAs, about four waves or fewer on a GPU of
      // 128+ SMs; 32768 rows: 2048 CTAs, past four waves, where without a mask plans keep one
      // CTA a tile.
      const int sms = kjit::cuda::device_info(0).sm_count;
      for (int q : {8192, 32768}) {
        INFO("q_len " << q << " on " << sms << " SMs");
        const int32_t qo_l[2] = {0, q}, kv_l[2] = {0, q};
        const auto pl = kjit::ops::plan_batch_prefill(
            qo_l, kv_l, 1, 8, 2, d, 16, KJIT_KV_LAYOUT_NHD, bf, bf, 0, 0.0f, 0.0f, -1, 0, nullptr);
        const bool few_waves = int64_t{q} * 4 / 128 * 2 <= 4 * int64_t{sms};
        CHECK(pl.cfg.persistent == (hopper && d != 256 && few_waves ? 1 : 0));
      }
    }
    kjit::ops::PrefillTuning t;
    t.kernel = static_cast<int>(kjit::ops::PrefillKernel::kWgmmaSm90a);
    if (hopper) {
      const auto pl = kjit::ops::plan_batch_prefill(qo, kv, 1, 8, 2, d, 16, KJIT_KV_LAYOUT_NHD, bf,
                                                    bf, 1, 0.0f, 0.0f, -1, 0, &t);
      CHECK(pl.cfg.kernel == kjit::ops::PrefillKernel::kWgmmaSm90a);
      CHECK(pl.tiles == (200 * 4 + 127) / 128);  // 200 rows x group 4 in CTAs of 128
    } else {
      CHECK_THROWS(kjit::ops::plan_batch_prefill(qo, kv, 1, 8, 2, d, 16, KJIT_KV_LAYOUT_NHD, bf, bf,
                                                 1, 0.0f, 0.0f, -1, 0, &t));
    }
  }
}

// Requests many key tiles long, with whole (unmasked) tiles, rows over several CTAs of each
// request and the stage ring wrapping around many times.
TEST_CASE("prefill gpu: long requests over many key tiles", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2711);
  for (const char* dt : {"bf16", "fp16"}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {true, false}) {
        PrefillCase c;
        c.dtype = dt;
        c.head_dim = d;
        c.causal = causal;
        c.qo_heads = 4;
        c.kv_heads = 1;
        c.q_lens = {300, 517, 2};
        c.kv_lens = {1000, 517, 700};
        c.page_size = causal ? 16 : 0;
        run_case(c, rng);
      }
    }
  }
}

// The wgmma kernel's deeper rings (ops::PrefillTuning::stages) at head_dim 64, where 4 stages of
// K and V fit beside one or two Q tiles: every schedule, causal and not, over pages and ragged
// keys, requests many tiles long (the ring wraps many times). At head_dim 128 a third stage does
// not fit beside the Q tile: refused, naming the bytes.
TEST_CASE("prefill gpu: the wgmma kernel's deeper rings", "[gpu][attention][prefill]") {
  if (!gpu_caps().sm90a()) {
    WARN("the wgmma prefill kernel runs on sm_90a only: nothing to run");
    return;
  }
  std::mt19937_64 rng(2719);
  for (int stages : {3, 4}) {
    for (int kernel :
         {static_cast<int>(kjit::ops::PrefillKernel::kWgmmaSm90a), kPingPong, kPersistent}) {
      for (bool causal : {true, false}) {
        PrefillCase c;
        c.head_dim = 64;
        c.stages = stages;
        c.kernel = kernel;
        c.causal = causal;
        c.qo_heads = 8;
        c.kv_heads = 2;
        c.q_lens = {300, 517, 2, 0};
        c.kv_lens = {1000, 517, 700, 40};
        for (int64_t ps : {0, 16}) {
          c.page_size = ps;
          run_one(c, rng);
        }
      }
    }
  }
  const DLDataType bf = dl_dtype("bf16");
  const int32_t qo[2] = {0, 200}, kv[2] = {0, 300};
  kjit::ops::PrefillTuning t;
  t.kernel = static_cast<int>(kjit::ops::PrefillKernel::kWgmmaSm90a);
  t.stages = 3;
  try {
    kjit::ops::plan_batch_prefill(qo, kv, 1, 8, 2, 128, 16, KJIT_KV_LAYOUT_NHD, bf, bf, 0, 0.0f,
                                  0.0f, -1, 0, &t);
    FAIL("planned");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
    CHECK(std::string(e.what()).find("3 stages") != std::string::npos);
  }
}

TEST_CASE("prefill gpu: GQA groups 1, 4, 8 and 16", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2702);
  for (int64_t g : {1, 4, 8, 16}) {
    PrefillCase c;
    c.kv_heads = 2;
    c.qo_heads = 2 * g;
    run_case(c, rng);
  }
}

TEST_CASE("prefill gpu: page sizes 1 and 16, NHD and HND, ragged KV", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2703);
  for (int64_t ps : {1, 16, 0}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      if (ps == 0 && layout == KJIT_KV_LAYOUT_HND) continue;
      for (bool causal : {true, false}) {
        PrefillCase c;
        c.page_size = ps;
        c.layout = layout;
        c.causal = causal;
        run_case(c, rng);
      }
    }
  }
}

namespace {

// fp8 keys and values on `kernel` (-1: the plan's): head dims `dims` and both
// q dtypes, paged (NHD, HND, page 1 and 16, a broken table, NaN in unused slots) and ragged,
// causal or not, a window, GQA 4, scales other than 1 on both sides. Returns the GQA case.
PrefillCase run_fp8_cases(int kernel, std::initializer_list<int64_t> dims, std::mt19937_64& rng) {
  for (const char* dt : {"bf16", "fp16"}) {
    for (int64_t d : dims) {
      PrefillCase c;
      c.dtype = dt;
      c.head_dim = d;
      c.kv_fp8 = true;
      c.k_scale = 0.02f;
      c.v_scale = 0.5f;
      c.kernel = kernel;
      run_case(c, rng);
    }
  }
  PrefillCase c;
  c.kv_fp8 = true;
  c.k_scale = 0.0625f;
  c.v_scale = 2.0f;
  c.qo_heads = 16;
  c.kv_heads = 4;
  c.kernel = kernel;
  for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
    for (int64_t ps : {1, 16}) {
      PrefillCase m = c;
      m.layout = layout;
      m.page_size = ps;
      m.invalid_pages = ps == 16;
      m.nan_unused = true;
      run_case(m, rng);
    }
  }
  PrefillCase r = c;
  r.page_size = 0;
  r.causal = false;
  run_case(r, rng);
  r.causal = true;
  r.window_left = 40;
  r.dtype = "fp16";
  run_case(r, rng);
  return c;
}

}  // namespace

TEST_CASE("prefill gpu: fp8 e4m3 keys and values with scales", "[gpu][attention][prefill]") {
  // The mma.sync kernel's fp8 path (fp16 MMAs over rows converted on their load), forced: the
  // plans take it at head_dim 256 and off compute capability 9.0.
  std::mt19937_64 rng(std::random_device{}());
  const PrefillCase c =
      run_fp8_cases(static_cast<int>(kjit::ops::PrefillKernel::kMmaSm80), {64, 128, 256}, rng);
  auto p = build(c, rng);
  CHECK(p->plan->data.cfg.kernel == kjit::ops::PrefillKernel::kMmaSm80);
  CHECK(p->plan->data.cfg.kv_fp8 == 1);
  // A 16-bit cache given to an fp8 plan is refused, naming the plan's kv dtype.
  p->k_t = make_tensor(p->k_dev->get(), {p->num_pages, c.page_size, c.kv_heads, c.head_dim},
                       dl_dtype("bf16"));
  CHECK(p->run() == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("kv dtype is e4m3") != std::string::npos);
}

TEST_CASE("prefill gpu: fp8 e4m3 keys and values on the wgmma kernel, the plans' default",
          "[gpu][attention][prefill][sm90a]") {
  // The wgmma kernel's fp8 form: the producer copies each tile's e4m3 rows raw and converts them
  // into the 16-bit swizzled stages, the consumers run fp16 MMAs (a bf16 Q converted on its
  // load); head dims 64 and 128 (256 is refused). The plans' own choice on compute capability 9.0.
  REQUIRE(gpu_caps().sm90a());
  std::mt19937_64 rng(std::random_device{}());
  const PrefillCase c = run_fp8_cases(-1, {64, 128}, rng);
  auto p = build(c, rng);
  CHECK(p->plan->data.cfg.kernel == kjit::ops::PrefillKernel::kWgmmaSm90a);
  CHECK(p->plan->data.cfg.kv_fp8 == 1);
}

// Page sizes the wgmma kernel loads by TMA boxes (powers of two >= 8: one box per page, or one
// box inside a page larger than a key tile) beside one it copies key by key (24), with NaN in
// every slot no key uses, so a tile that reaches past kv_len must zero its tail.
TEST_CASE("prefill gpu: page sizes 8 to 256 and 24, NaN in unused slots",
          "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2712);
  for (int64_t ps : {8, 32, 256, 24, 0}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      if (ps == 0 && layout == KJIT_KV_LAYOUT_HND) continue;
      PrefillCase c;
      c.page_size = ps;
      c.layout = layout;
      c.nan_unused = true;
      c.qo_heads = 8;
      c.kv_heads = 2;
      c.q_lens = {300, 1, 70, 0};
      c.kv_lens = {700, 129, 200, 33};
      c.causal = ps != 32;
      run_case(c, rng);
    }
  }
}

TEST_CASE("prefill gpu: sliding window and logits soft cap", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2704);
  for (int window : {0, 5, 64}) {
    for (bool causal : {true, false}) {
      PrefillCase c;
      c.window_left = window;
      c.causal = causal;
      run_case(c, rng);
    }
  }
  PrefillCase c;
  c.soft_cap = 5.0f;
  c.sm_scale = 0.3f;
  run_case(c, rng);
  c.causal = false;
  c.window_left = 17;
  c.dtype = "fp16";
  c.head_dim = 64;
  run_case(c, rng);
}

TEST_CASE("prefill gpu: one request far longer than the rest, empty requests",
          "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2705);
  PrefillCase c;
  c.qo_heads = 4;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.q_lens = {1, 0, 1500, 7, 0};
  c.kv_lens = {1, 40, 1500, 15, 0};
  run_case(c, rng);
  // Fewer keys than new tokens under the causal mask: the first rows see no key (out 0, lse
  // -inf).
  c.q_lens = {20, 3};
  c.kv_lens = {5, 0};
  run_case(c, rng);
  c.page_size = 0;
  run_case(c, rng);
}

TEST_CASE("prefill gpu: broken page tables contribute nothing, lse not asked for",
          "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2706);
  PrefillCase c;
  c.invalid_pages = true;
  run_case(c, rng);
  c.invalid_pages = false;
  c.lse = false;
  run_case(c, rng);
}

// The cascade recipe (docs/c-api.md): keys [0, s) as a non-causal prefill, keys [s, kv_len) as a
// causal one, merged with kjit_merge_states, equal the causal prefill over all the keys.
TEST_CASE("prefill gpu: two partial prefills merged equal the whole", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2707);
  for (int64_t ps : {16, 0}) {
    for (int kernel : kernels_for(PrefillCase{})) {
      PrefillCase whole;
      whole.kernel = kernel;
      whole.page_size = ps;
      whole.q_lens = {7, 129, 1};
      whole.kv_lens = {64 + 7, 160 + 129, 32 + 1};
      const std::vector<int64_t> prefix = {64, 160, 32};  // whole pages
      INFO(describe(whole));
      auto p = build(whole, rng);
      const Expected e = reference(*p);

      // The two parts see the same q and the same keys, split at `prefix`.
      auto part = [&](bool first) {
        PrefillCase c = whole;
        c.causal = !first;
        for (size_t b = 0; b < prefix.size(); ++b) {
          c.kv_lens[b] = first ? prefix[b] : whole.kv_lens[b] - prefix[b];
        }
        auto r = build(c, rng);
        // Copy the whole problem's q and the keys of this part into r's buffers.
        r->q_dev->upload(p->q_host.data(), p->q_host.size());
        r->q_host = p->q_host;
        const int64_t row = p->page_stride;  // elements per page (paged) or row (ragged)
        for (size_t b = 0; b < prefix.size(); ++b) {
          const int64_t n = c.kv_lens[b];
          const int64_t skip = first ? 0 : prefix[b];
          const int64_t unit = ps > 0 ? ps : 1;
          for (int64_t u = 0; u < (n + unit - 1) / unit; ++u) {
            const int64_t src =
                ps > 0 ? p->indices[static_cast<size_t>(p->kv_indptr[b] + (skip + u * unit) / ps)]
                       : p->kv_indptr[b] + skip + u;
            const int64_t dst =
                ps > 0 ? r->indices[static_cast<size_t>(r->kv_indptr[b] + u)] : r->kv_indptr[b] + u;
            for (auto [from, to, dev] : {std::tuple{&p->k_host, &r->k_host, r->k_dev.get()},
                                         std::tuple{&p->v_host, &r->v_host, r->v_dev.get()}}) {
              std::memcpy(to->data() + dst * row * 2, from->data() + src * row * 2,
                          static_cast<size_t>(row) * 2);
              dev->upload(to->data() + dst * row * 2, static_cast<size_t>(row) * 2,
                          static_cast<size_t>(dst * row * 2));
            }
          }
        }
        return r;
      };
      auto a = part(true), b = part(false);
      REQUIRE(a->run() == KJIT_SUCCESS);
      REQUIRE(b->run() == KJIT_SUCCESS);
      // Merge into the whole problem's out and lse.
      const kjit_status st =
          kjit_merge_states(a->out_t.get(), a->lse_t.get(), b->out_t.get(), b->lse_t.get(),
                            p->out_t.get(), p->lse_t.get(), nullptr);
      INFO("kjit_last_error: " << kjit_last_error());
      REQUIRE(st == KJIT_SUCCESS);
      device_synchronize();
      // Two roundings of the partial outputs and the merge's one: the whole's tolerance, widened
      // by two output roundings of the values' scale.
      Expected loose = e;
      for (double& t : loose.tol.out) t += 2 * 1.5 * e.tol.u_out;
      for (double& t : loose.tol.lse) t += 1e-5;  // each part's lse error, then the merge's
      CHECK(check(*p, loose) == 0);
    }
  }
}

TEST_CASE("prefill gpu: batch 0 and zero rows run as no-ops", "[gpu][attention][prefill]") {
  std::mt19937_64 rng(2708);
  PrefillCase c;
  c.q_lens = {0, 0};
  c.kv_lens = {5, 0};
  auto p = build(c, rng);
  REQUIRE(p->run() == KJIT_SUCCESS);
  kjit_prefill_plan* plan = nullptr;
  const DLDataType bf = dl_dtype("bf16");
  REQUIRE(kjit_batch_prefill_plan(nullptr, nullptr, 0, 8, 2, 128, 16, KJIT_KV_LAYOUT_NHD, bf, bf,
                                  nullptr, 0, &plan) == KJIT_SUCCESS);
  kjit_prefill_plan_destroy(plan);
}

// A captured run replayed after the page table's contents changed (the pages shuffled, their data
// moved along, so the answer is the same) equals the reference and, bit for bit, an eager run.
TEST_CASE("prefill gpu: CUDA graph capture, replay with a changed page table",
          "[gpu][attention][prefill]") {
  const auto& d = kjit::cuda::driver();
  std::mt19937_64 rng(2709);
  PrefillCase base;
  base.spare_pages = 0;
  for (int kernel : kernels_for(base)) {
    PrefillCase c = base;
    c.kernel = kernel;
    INFO(describe(c));
    auto p = build(c, rng);
    CUstream stream = nullptr;
    // A blocking stream: ordered after the uploads and poison fills on the legacy stream.
    REQUIRE(d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
    REQUIRE(p->run(stream) == KJIT_SUCCESS);  // warm-up: capture must not compile or load
    REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    REQUIRE(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    const kjit_status captured = p->run(stream);
    const CUresult end = d.cuStreamEndCapture(stream, &graph);
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(captured == KJIT_SUCCESS);
    REQUIRE(end == CUDA_SUCCESS);
    REQUIRE(d.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
    const Expected e = reference(*p);
    const size_t page_bytes = static_cast<size_t>(p->page_stride) * 2;
    for (int round = 0; round < 2; ++round) {
      INFO("round " << round);
      // Page i moves to slot perm[i] of the pool: its data and every table entry naming it.
      std::vector<int32_t> perm(static_cast<size_t>(p->num_pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (auto* h : {&p->k_host, &p->v_host}) {
        std::vector<unsigned char> moved(h->size());
        for (size_t i = 0; i < perm.size(); ++i) {
          std::memcpy(moved.data() + perm[i] * page_bytes, h->data() + i * page_bytes, page_bytes);
        }
        *h = moved;
      }
      p->k_dev->upload(p->k_host.data(), p->k_host.size());
      p->v_dev->upload(p->v_host.data(), p->v_host.size());
      for (auto& x : p->indices) x = perm[static_cast<size_t>(x)];
      p->idx_dev->upload(p->indices.data(), p->indices.size() * 4);
      p->poison();
      REQUIRE(d.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
      REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
      CHECK(check(*p, e) == 0);
      const std::vector<unsigned char> replayed = p->outputs();
      p->poison();
      REQUIRE(p->run(stream) == KJIT_SUCCESS);
      REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
      CHECK(p->outputs() == replayed);
    }
    d.cuGraphExecDestroy(exec);
    d.cuGraphDestroy(graph);
    d.cuStreamDestroy(stream);
  }
}
