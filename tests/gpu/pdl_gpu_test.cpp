// The elementwise ops launched as programmatic dependents (KJIT_PDL, src/ops/pdl.hpp): a chain of
// twelve ops on one stream, each reading what the one before it wrote, gives bit for bit what plain
// launches give, eagerly and replayed from a captured graph, with and without the early index
// reads (KJIT_PDL_EARLY_INDICES: the chain's positions and page table are written once, before
// it, as that contract asks). Every intermediate is poisoned (NaN) before each run, so a kernel
// that read before its predecessor finished would carry NaN or another value into the outputs
// compared. Each op's own numbers are checked against fp64 by its own tests; this file checks the
// launch mode only.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "ops/activation/activation.hpp"
#include "ops/embedding/embedding.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/norm/layernorm.hpp"
#include "ops/norm/norm.hpp"
#include "ops/pdl.hpp"
#include "ops/quant/fused_quant_fp8.hpp"
#include "ops/rope/qk_norm_rope.hpp"
#include "ops/rope/rope.hpp"
#include "ops/rope/rope_append.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

// The launch mode each ops-layer call of the chain is given (what the C entry points take from
// KJIT_PDL / KJIT_PDL_EARLY_INDICES).
kjit::ops::ElementwiseLaunch launch_mode(int pdl, int early = 0) {
  kjit::ops::ElementwiseLaunch l;
  l.pdl = pdl != 0;
  l.early_indices = early != 0;
  return l;
}

std::vector<unsigned char> random_bf16(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<unsigned char> v(n * 2);
  for (size_t i = 0; i < n; ++i) ref::store_elem(v.data(), i, d(rng), "bf16");
  return v;
}

// rmsnorm(x) -> y; fused_add_rmsnorm(y, res); layernorm(y) -> z; RoPE in place on z (as q,
// 32 heads of 128) and k (8 heads); KV append of k (as keys and values) into a paged cache of
// one-slot pages, token t to page rows - 1 - t (one request a token); silu_and_mul(z) -> u;
// rmsnorm(u) -> v; rmsnorm of v quantized to fp8 per row -> vq, vs; silu_and_mul of z quantized
// per 1 x 128 group -> uq, us; the embedding gather of v's rows in reverse order -> e. bf16
// throughout, but for the fp8 codes and fp32 scales.
struct Chain {
  static constexpr int64_t kHidden = 4096, kHeadDim = 128, kQo = 32, kKv = 8;
  int64_t rows;
  std::vector<unsigned char> x_h, res_h, k_h, w_h, g_h, b_h, w2_h;
  std::vector<int32_t> pos_h, bi_h, zero_h, idx_h, ptr_h;
  static constexpr int64_t kGroups = kHidden / 2 / 128;
  DeviceBuffer x, res, k, w, g, b, w2, pos, y, z, u, v, bi, zero, idx, ptr, kc, vc, e, vq, vs, uq,
      us;
  Tensor xt, rest, kt, wt, gt, bt, w2t, post, yt, zt, zq, ut, vt, bit, zerot, idxt, ptrt, kct, vct,
      et, vqt, vst, uqt, ust, wht;

  Chain(int64_t rows_, std::mt19937_64& rng)
      : rows(rows_),
        x_h(random_bf16(rng, static_cast<size_t>(rows_ * kHidden), -2, 2)),
        res_h(random_bf16(rng, static_cast<size_t>(rows_ * kHidden), -2, 2)),
        k_h(random_bf16(rng, static_cast<size_t>(rows_ * kKv * kHeadDim), -2, 2)),
        w_h(random_bf16(rng, kHidden, 0.5, 1.5)),
        g_h(random_bf16(rng, kHidden, 0.5, 1.5)),
        b_h(random_bf16(rng, kHidden, -0.5, 0.5)),
        w2_h(random_bf16(rng, kHidden / 2, 0.5, 1.5)),
        pos_h(static_cast<size_t>(rows_)),
        bi_h(static_cast<size_t>(rows_)),
        zero_h(static_cast<size_t>(rows_), 0),
        idx_h(static_cast<size_t>(rows_)),
        ptr_h(static_cast<size_t>(rows_ + 1)),
        x(x_h.size()),
        res(res_h.size()),
        k(k_h.size()),
        w(w_h.size()),
        g(g_h.size()),
        b(b_h.size()),
        w2(w2_h.size()),
        pos(pos_h.size() * 4),
        y(x_h.size()),
        z(x_h.size()),
        u(x_h.size() / 2),
        v(x_h.size() / 2),
        bi(bi_h.size() * 4),
        zero(zero_h.size() * 4),
        idx(idx_h.size() * 4),
        ptr(ptr_h.size() * 4),
        kc(k_h.size()),
        vc(k_h.size()),
        e(x_h.size() / 2),
        vq(x_h.size() / 4),
        vs(static_cast<size_t>(rows_) * 4),
        uq(x_h.size() / 4),
        us(static_cast<size_t>(rows_ * kGroups) * 4) {
    std::uniform_int_distribution<int32_t> p(0, 100000);
    for (auto& e : pos_h) e = p(rng);
    for (int64_t t = 0; t < rows; ++t) {
      bi_h[static_cast<size_t>(t)] = static_cast<int32_t>(t);
      idx_h[static_cast<size_t>(t)] = static_cast<int32_t>(rows - 1 - t);
      ptr_h[static_cast<size_t>(t + 1)] = static_cast<int32_t>(t + 1);
    }
    bi.upload(bi_h.data(), bi_h.size() * 4);
    zero.upload(zero_h.data(), zero_h.size() * 4);
    idx.upload(idx_h.data(), idx_h.size() * 4);
    ptr.upload(ptr_h.data(), ptr_h.size() * 4);
    x.upload(x_h.data(), x_h.size());
    w.upload(w_h.data(), w_h.size());
    g.upload(g_h.data(), g_h.size());
    b.upload(b_h.data(), b_h.size());
    w2.upload(w2_h.data(), w2_h.size());
    pos.upload(pos_h.data(), pos_h.size() * 4);
    const DLDataType bf = dl_dtype("bf16");
    xt = make_tensor(x.get(), {rows, kHidden}, bf);
    rest = make_tensor(res.get(), {rows, kHidden}, bf);
    kt = make_tensor(k.get(), {rows, kKv, kHeadDim}, bf);
    wt = make_tensor(w.get(), {kHidden}, bf);
    gt = make_tensor(g.get(), {kHidden}, bf);
    bt = make_tensor(b.get(), {kHidden}, bf);
    w2t = make_tensor(w2.get(), {kHidden / 2}, bf);
    post = make_tensor(pos.get(), {rows}, dl_dtype("int32"));
    yt = make_tensor(y.get(), {rows, kHidden}, bf);
    zt = make_tensor(z.get(), {rows, kHidden}, bf);
    zq = make_tensor(z.get(), {rows, kQo, kHeadDim}, bf);
    ut = make_tensor(u.get(), {rows, kHidden / 2}, bf);
    vt = make_tensor(v.get(), {rows, kHidden / 2}, bf);
    const DLDataType i32 = dl_dtype("int32");
    bit = make_tensor(bi.get(), {rows}, i32);
    zerot = make_tensor(zero.get(), {rows}, i32);  // positions (slot 0) and last-page lengths
    idxt = make_tensor(idx.get(), {rows}, i32);
    ptrt = make_tensor(ptr.get(), {rows + 1}, i32);
    kct = make_tensor(kc.get(), {rows, 1, kKv, kHeadDim}, bf);
    vct = make_tensor(vc.get(), {rows, 1, kKv, kHeadDim}, bf);
    et = make_tensor(e.get(), {rows, kHidden / 2}, bf);
    vqt = make_tensor(vq.get(), {rows, kHidden / 2}, dl_dtype("e4m3"));
    vst = make_tensor(vs.get(), {rows}, dl_dtype("fp32"));
    uqt = make_tensor(uq.get(), {rows, kHidden / 2}, dl_dtype("e4m3"));
    ust = make_tensor(us.get(), {rows, kGroups}, dl_dtype("fp32"));
    wht = make_tensor(w.get(), {kHeadDim}, bf);  // the q / k norm weight: w's first head_dim
  }

  // The inputs the chain updates in place come back; every intermediate is poisoned.
  void reset() {
    res.upload(res_h.data(), res_h.size());
    k.upload(k_h.data(), k_h.size());
    for (DeviceBuffer* d : {&y, &z, &u, &v, &kc, &vc, &e, &vq, &vs, &uq, &us}) d->fill(0xFF);
  }

  // Enqueues the twelve ops on `s` (the ops-layer calls behind the C entry points), launched as
  // `l` says; throws kjit::Error.
  void run(CUstream s, const kjit::ops::ElementwiseLaunch& l) {
    namespace ops = kjit::ops;
    ops::rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, s, 0.0f, l);
    ops::fused_add_rmsnorm(yt.get(), rest.get(), wt.get(), 1e-6f, s, 0.0f, l);
    ops::layernorm(yt.get(), gt.get(), bt.get(), zt.get(), 1e-5f, s, l);
    ops::apply_rope_pos_ids(zq.get(), kt.get(), zq.get(), kt.get(), post.get(),
                            static_cast<int>(kHeadDim), 0, 1.0f, 1e4f, s, l);
    ops::append_paged_kv_cache(kt.get(), kt.get(), bit.get(), zerot.get(), kct.get(), vct.get(),
                               idxt.get(), ptrt.get(), zerot.get(), KJIT_KV_LAYOUT_NHD, s, l);
    ops::act_and_mul(ops::Act::kSilu, zt.get(), ut.get(), s, l);
    ops::rmsnorm(ut.get(), w2t.get(), vt.get(), 1e-6f, s, 0.0f, l);
    ops::rmsnorm_quant_fp8(vt.get(), w2t.get(), nullptr, vqt.get(), vst.get(), 1e-6f, s, l);
    ops::silu_and_mul_quant_fp8(zt.get(), uqt.get(), ust.get(), s, l);
    ops::embedding(vt.get(), idxt.get(), et.get(), s, l);
    ops::rope_append_paged_kv_cache(zq.get(), kt.get(), kt.get(), post.get(), bit.get(),
                                    zerot.get(), idxt.get(), ptrt.get(), zerot.get(), {}, zq.get(),
                                    kct.get(), vct.get(), {static_cast<int>(kHeadDim), 0, 1, 1e4f},
                                    KJIT_KV_LAYOUT_NHD, s, l);
    ops::qk_rmsnorm_rope(wht.get(), wht.get(), post.get(), zq.get(), kt.get(), 1e-6f, 0, 0, 1.0f,
                         1e4f, s, l);
  }

  // Every buffer the chain wrote, in one image: the bf16 ones first (bf16_bytes() of them), then
  // the fp8 codes and their scales.
  size_t bf16_bytes() const {
    size_t n = 0;
    for (const DeviceBuffer* d : {&res, &k, &y, &z, &u, &v, &kc, &vc, &e}) n += d->size();
    return n;
  }
  std::vector<unsigned char> outputs() const {
    std::vector<unsigned char> out;
    for (const DeviceBuffer* d : {&res, &k, &y, &z, &u, &v, &kc, &vc, &e, &vq, &vs, &uq, &us}) {
      std::vector<unsigned char> h(d->size());
      d->download(h.data(), h.size());
      out.insert(out.end(), h.begin(), h.end());
    }
    return out;
  }
};

// NaNs among the bf16 values and the fp8 codes (e4m3's NaN is 0x7F / 0xFF: the poison, which a
// saturating encoder never writes) of a chain's image.
size_t nan_count(const std::vector<unsigned char>& img, const Chain& c) {
  size_t n = 0;
  const size_t bf16 = c.bf16_bytes(), codes = static_cast<size_t>(c.rows * Chain::kHidden / 2);
  for (size_t i = 0; i < bf16 / 2; ++i) n += std::isnan(ref::load_elem(img.data(), i, "bf16"));
  const size_t vq_at = bf16, uq_at = bf16 + codes + static_cast<size_t>(c.rows) * 4;
  for (size_t at : {vq_at, uq_at}) {
    for (size_t i = 0; i < codes; ++i) n += (img[at + i] & 0x7F) == 0x7F;
  }
  return n;
}

}  // namespace

TEST_CASE("pdl gpu: a chain of elementwise ops as programmatic dependents matches plain launches",
          "[gpu][pdl]") {
  const auto& drv = kjit::cuda::driver();
  if (!kjit::test::gpu_caps().sm90()) {
    WARN("programmatic dependent launch needs sm_90: launches stay plain on this device");
  }
  std::mt19937_64 rng(std::random_device{}());
  CUstream s = nullptr;
  REQUIRE(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  for (int64_t rows : {1, 7, 64, 3000}) {
    INFO("rows " << rows);
    Chain c(rows, rng);
    auto run_eager = [&](int pdl, int repeats, int early = 0) {
      const kjit::ops::ElementwiseLaunch l = launch_mode(pdl, early);
      CHECK(kjit::ops::pdl_early_indices(0, l) == (early == 1 && kjit::ops::elementwise_pdl(0, l)));
      CHECK(kjit::ops::elementwise_pdl(0, l) == (pdl == 1 && kjit::test::gpu_caps().sm90()));
      c.reset();
      // Repeats re-run the chain on its own outputs (res and k accumulate): back-to-back
      // launches, each depending on the one before.
      for (int i = 0; i < repeats; ++i) REQUIRE_NOTHROW(c.run(s, l));
      REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
      return c.outputs();
    };
    const auto plain = run_eager(0, 3);
    CHECK(nan_count(plain, c) == 0);
    const auto pdl = run_eager(1, 3);
    CHECK(pdl == plain);
    const auto early = run_eager(1, 3, 1);
    CHECK(early == plain);

    // Captured with PDL on (early index reads off and on), replayed twice on fresh inputs: the
    // same image.
    for (int early_indices : {0, 1}) {
      INFO("early indices " << early_indices);
      const kjit::ops::ElementwiseLaunch l = launch_mode(1, early_indices);
      c.reset();
      CUgraph graph = nullptr;
      CUgraphExec exec = nullptr;
      REQUIRE(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
      std::string error;
      try {
        for (int i = 0; i < 3; ++i) c.run(s, l);
      } catch (const std::exception& e) {
        error = e.what();
      }
      REQUIRE(drv.cuStreamEndCapture(s, &graph) == CUDA_SUCCESS);
      INFO("error: " << error);
      REQUIRE(error.empty());
      REQUIRE(drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
      for (int replay = 0; replay < 2; ++replay) {
        c.reset();
        REQUIRE(drv.cuGraphLaunch(exec, s) == CUDA_SUCCESS);
        REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
        CHECK(c.outputs() == plain);
      }
      drv.cuGraphExecDestroy(exec);
      drv.cuGraphDestroy(graph);
    }
  }
  drv.cuStreamDestroy(s);
}
