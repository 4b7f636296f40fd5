// `kjit-cli bench` cases of the fused RoPE ops: rope_append (kjit_rope_append_paged_kv_cache) and
// qk_norm_rope (kjit_qk_rmsnorm_rope).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "ops/rope/qk_norm_rope.hpp"
#include "ops/rope/rope.hpp"
#include "ops/rope/rope_append.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/norm_ref.hpp"
#include "reference/rope_ref.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

int bench_rope_append(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const BenchAppendArgs a = bench_append_args(args, 1 << 22, ops::kRopeMaxHeadDim);
  const int64_t tokens = a.tokens, H = a.kv_heads, D = a.head_dim, ps = a.page_size,
                batch = a.batch;
  const std::string& layout = a.layout;
  const bool nhd = a.nhd, fp8 = a.fp8;
  const int64_t Hq = ops::positive_int_arg(args, "qo_heads", 1024);
  const bool interleave = flag_arg(args, "interleave");
  const int rot = args.count("rotary_dim")
                      ? static_cast<int>(ops::positive_int_arg(args, "rotary_dim", D))
                      : static_cast<int>(D);
  const size_t es = ref::elem_size(dtype);
  const size_t ces = fp8 ? 1 : es;
  check_gpu();

  std::mt19937_64 rng(std::random_device{}());
  const BenchAppendBatch ab = bench_append_batch(tokens, batch, ps, rng);
  const std::vector<int32_t>& bi = ab.batch_indices;
  const std::vector<int32_t>& pos = ab.positions;
  const std::vector<int32_t>& indptr = ab.indptr;
  const std::vector<int32_t>& last = ab.last_page_len;
  const std::vector<int32_t>& indices = ab.indices;
  const int64_t num_pages = ab.num_pages;

  // Inputs q | k | v | indices (pos_ids = positions) in one buffer; q_out and the caches
  // poisoned.
  const size_t nq = static_cast<size_t>(tokens * Hq * D), nk = static_cast<size_t>(tokens * H * D);
  Packed in;
  const size_t q_at = in.add(nq * es), k_at = in.add(nk * es), v_at = in.add(nk * es);
  fill_uniform(in.host.data() + q_at, nq, dtype, rng, -2.0, 2.0);
  fill_uniform(in.host.data() + k_at, nk, dtype, rng, -2.0, 2.0);
  fill_uniform(in.host.data() + v_at, nk, dtype, rng, -2.0, 2.0);
  const size_t bi_at = add_int32s(in, bi), pos_at = add_int32s(in, pos);
  const size_t idx_at = add_int32s(in, indices), ptr_at = add_int32s(in, indptr);
  const size_t last_at = add_int32s(in, last);
  const float kscale = 3.0f / 448.0f, vscale = 2.0f / 448.0f;  // amax / 448 of k rotated, of v
  const size_t ks_at = in.add(4), vs_at = in.add(4);
  std::memcpy(in.host.data() + ks_at, &kscale, 4);
  std::memcpy(in.host.data() + vs_at, &vscale, 4);
  in.upload();
  const size_t cache_elems = static_cast<size_t>(num_pages * ps * H * D);
  Packed out;
  const size_t qo_at = out.add(nq * es);
  const size_t kc_at = out.add(cache_elems * ces), vc_at = out.add(cache_elems * ces);
  out.upload();
  out.dev->fill(0xFF);  // poison: NaN in every float format
  const DLDataType dl = test::dl_dtype(dtype), i32 = test::dl_dtype("int32");
  auto qt = test::make_tensor(in.at(q_at), {tokens, Hq, D}, dl);
  auto kt = test::make_tensor(in.at(k_at), {tokens, H, D}, dl);
  auto vt = test::make_tensor(in.at(v_at), {tokens, H, D}, dl);
  auto qot = test::make_tensor(out.at(qo_at), {tokens, Hq, D}, dl);
  const std::vector<int64_t> cshape =
      nhd ? std::vector<int64_t>{num_pages, ps, H, D} : std::vector<int64_t>{num_pages, H, ps, D};
  const DLDataType cdl = fp8 ? test::dl_dtype("e4m3") : dl;
  auto kct = test::make_tensor(out.at(kc_at), cshape, cdl);
  auto vct = test::make_tensor(out.at(vc_at), cshape, cdl);
  auto kst = test::make_tensor(in.at(ks_at), {1}, test::dl_dtype("fp32"));
  auto vst = test::make_tensor(in.at(vs_at), {1}, test::dl_dtype("fp32"));
  auto bt = test::make_tensor(in.at(bi_at), {tokens}, i32);
  auto pt = test::make_tensor(in.at(pos_at), {tokens}, i32);
  auto it = test::make_tensor(in.at(idx_at), {num_pages}, i32);
  auto ipt = test::make_tensor(in.at(ptr_at), {batch + 1}, i32);
  auto lt = test::make_tensor(in.at(last_at), {batch}, i32);

  const ops::RopeAppendConfig cfg =
      ops::select_rope_append(*ops::dtype_of(dl), D, rot, interleave, 16, fp8, 16);
  BenchCase c;
  c.op = "rope_append";
  c.uri = ops::rope_append_spec(cfg).uri;
  c.dtype = dtype;
  c.shape = {{"tokens", tokens}, {"qo_heads", Hq},    {"kv_heads", H},
             {"head_dim", D},    {"rotary_dim", rot}, {"page_size", ps},
             {"batch", batch},   {"layout", layout},  {"interleave", interleave ? 1 : 0}};
  if (fp8) c.shape["cache"] = a.cache;
  c.label =
      fmt::format("rope_append {} {} tokens={} batch={} heads={}/{} head_dim={} rot={}{} page={}{}",
                  dtype, layout, tokens, batch, Hq, H, D, rot, interleave ? " gptj" : "", ps,
                  fp8 ? " e4m3-cache" : "");
  ops::RopeAppendRope rope;
  rope.rotary_dim = rot;
  rope.interleave = interleave ? 1 : 0;
  // The ops-layer call: what kjit_rope_append_paged_kv_cache runs, in the bench's launch mode.
  c.launch = [&](CUstream stream) {
    ops::rope_append_paged_kv_cache(
        qt.get(), kt.get(), vt.get(), pt.get(), bt.get(), pt.get(), it.get(), ipt.get(), lt.get(),
        fp8 ? ops::AppendKvScales{kst.get(), vst.get()} : ops::AppendKvScales{}, qot.get(),
        kct.get(), vct.get(), rope, nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, stream,
        bench_elementwise_launch());
  };
  // Reads q, k, v and the indices; writes q_out and a cache element per k and v element.
  const size_t index_bytes = 4 * (2 * bi.size() + pos.size() + indices.size() + indptr.size());
  c.bytes = 2.0 * nq * es + 2.0 * nk * (es + ces) + index_bytes;
  c.copy_src = in.dev->get();
  c.copy_bytes = nq * es + nk * (es + ces) + index_bytes / 2;

  // q_out and the key rows against the fp64 reference (rope_gpu_test.cpp's tolerance; e4m3:
  // one e4m3 step), the value rows exact, every other cache byte still poison.
  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(opts.check ? out.host.size() : 0);
  if (opts.check) out.dev->download(got.data(), got.size());
  const double u = ref::unit_roundoff(dtype);
  const std::vector<double> inv_freq = ref::rope_inv_freq(rot, 1.0, 1e4);
  const int half = rot / 2;
  const size_t row_bytes = static_cast<size_t>(D) * ces;
  // A token a row: its q row and its own cache rows (a token's slot is its alone).
  Check all = check_rows(opts.check ? tokens : 0, [&](int64_t t, Check& chk) {
    std::vector<double> cs(static_cast<size_t>(half)), sn(cs.size()), x(static_cast<size_t>(D)),
        y(x.size());
    for (int i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[static_cast<size_t>(t)]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    const auto target = ref::append_target(bi, pos, indptr, indices, t, ps, num_pages);
    if (!target) {  // the bench builds none; counted rather than thrown from a worker
      ++chk.bad;
      return;
    }
    for (int which = 0; which < 3; ++which) {  // q, k, v
      const int64_t heads = which == 0 ? Hq : H;
      for (int64_t h = 0; h < heads; ++h) {
        const size_t src = (which == 0   ? q_at
                            : which == 1 ? k_at
                                         : v_at) /
                               es +
                           static_cast<size_t>((t * heads + h) * D);
        for (int64_t d = 0; d < D; ++d) x[d] = ref::load_elem(in.host.data(), src + d, dtype);
        if (which == 2) {
          y = x;
        } else {
          ref::rope_head(x.data(), y.data(), static_cast<int>(D), rot, interleave, cs.data(),
                         sn.data());
        }
        unsigned char* row;
        if (which == 0) {
          row = got.data() + qo_at + static_cast<size_t>((t * Hq + h) * D) * es;
        } else {
          const int64_t cache_row = nhd ? (target->page * ps + target->slot) * H + h
                                        : (target->page * H + h) * ps + target->slot;
          row = got.data() + (which == 1 ? kc_at : vc_at) +
                static_cast<size_t>(cache_row) * row_bytes;
        }
        const bool quantized = which > 0 && fp8;
        const float s = which == 1 ? kscale : vscale;
        for (int64_t d = 0; d < D; ++d) {
          const bool rotated = which < 2 && d < rot;
          double tol = 0.0;
          if (rotated) {
            const int p = ref::rope_partner(static_cast<int>(d), rot, interleave);
            tol = 2 * u * std::fabs(y[d]) + 2e-6 * (std::fabs(x[d]) + std::fabs(x[p])) + 1e-7;
          }
          if (quantized && rotated) {
            const double w = std::clamp(y[d] / s, -448.0, 448.0);
            chk.add(ref::e4m3_value(row[d]), w, 0.125 * std::fabs(w) + 0x1p-9 + tol / s);
          } else if (quantized) {
            chk.add(row[d], ref::quantize_e4m3(static_cast<float>(y[d]), s), 0.0);
          } else {
            chk.add(ref::load_elem(row, static_cast<size_t>(d), dtype), y[d], tol);
          }
        }
        if (which > 0) std::memset(row, 0xFF, row_bytes);  // checked: not a stray write below
      }
    }
  });
  for (const size_t at : {kc_at, vc_at}) {
    for (size_t i = 0; opts.check && i < cache_elems * ces; ++i) all.bad += got[at + i] != 0xFF;
  }
  return report(c, all, first_ms, opts);
}

int bench_qk_norm_rope(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const int64_t tokens = ops::positive_int_arg(args, "tokens", 1 << 22);
  const int64_t Hq = ops::positive_int_arg(args, "qo_heads", 1024);
  const int64_t H = ops::positive_int_arg(args, "kv_heads", 1024);
  const int64_t D = ops::positive_int_arg(args, "head_dim", ops::kRopeMaxHeadDim);
  const bool interleave = flag_arg(args, "interleave");
  const int rot = args.count("rotary_dim")
                      ? static_cast<int>(ops::positive_int_arg(args, "rotary_dim", D))
                      : static_cast<int>(D);
  const size_t es = ref::elem_size(dtype);
  check_gpu();

  // q and k as the views of a fused qkv GEMM output [tokens, (Hq + 2 H) * D] (v untouched),
  // positions 0..tokens-1, Qwen3's eps.
  std::mt19937_64 rng(std::random_device{}());
  const int64_t row = (Hq + 2 * H) * D;
  const size_t n = static_cast<size_t>(tokens * row);
  const float eps = 1e-6f;
  Packed in;
  const size_t qkv_at = in.add(n * es), qw_at = in.add(D * es), kw_at = in.add(D * es);
  fill_uniform(in.host.data() + qkv_at, n, dtype, rng, -2.0, 2.0);
  fill_uniform(in.host.data() + qw_at, static_cast<size_t>(D), dtype, rng, 0.5, 1.5);
  fill_uniform(in.host.data() + kw_at, static_cast<size_t>(D), dtype, rng, 0.5, 1.5);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  std::iota(pos.begin(), pos.end(), 0);
  const size_t pos_at = add_int32s(in, pos);
  in.upload();
  const DLDataType dl = test::dl_dtype(dtype);
  auto qt = test::make_tensor(in.at(qkv_at), {tokens, Hq, D}, dl, {row, D, 1});
  auto kt = test::make_tensor(in.at(qkv_at + static_cast<size_t>(Hq * D) * es), {tokens, H, D}, dl,
                              {row, D, 1});
  auto qwt = test::make_tensor(in.at(qw_at), {D}, dl);
  auto kwt = test::make_tensor(in.at(kw_at), {D}, dl);
  auto pt = test::make_tensor(in.at(pos_at), {tokens}, test::dl_dtype("int32"));

  const ops::QkNormRopeConfig cfg =
      ops::select_qk_norm_rope(*ops::dtype_of(dl), D, rot, interleave, 16);
  BenchCase c;
  c.op = "qk_norm_rope";
  c.uri = ops::qk_norm_rope_spec(cfg).uri;
  c.dtype = dtype;
  c.shape = {{"tokens", tokens}, {"qo_heads", Hq},    {"kv_heads", H},
             {"head_dim", D},    {"rotary_dim", rot}, {"interleave", interleave ? 1 : 0}};
  c.label = fmt::format("qk_norm_rope {} tokens={} heads={}/{} head_dim={} rot={}{}", dtype, tokens,
                        Hq, H, D, rot, interleave ? " gptj" : "");
  // In place: every sample rotates again what the last one wrote (the same bytes move); the check
  // below reads the first call's output.
  c.launch = [&](CUstream stream) {
    ops::qk_rmsnorm_rope(qwt.get(), kwt.get(), pt.get(), qt.get(), kt.get(), eps, rot,
                         interleave ? 1 : 0, 1.0f, 1e4f, stream, bench_elementwise_launch());
  };
  const size_t nqk = static_cast<size_t>(tokens * (Hq + H) * D);
  c.bytes = 2.0 * nqk * es + 2.0 * D * es + 4.0 * tokens;
  c.copy_src = in.dev->get();
  c.copy_bytes = nqk * es;

  // The first call's q and k against the fp64 RMSNorm then RoPE: one output rounding, the fp32
  // sum of squares (a few ulp relative), and rope_gpu_test.cpp's angle bound.
  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(opts.check ? n * es : 0);
  if (opts.check) in.dev->download(got.data(), got.size());  // the buffer starts with qkv
  const double u = ref::unit_roundoff(dtype);
  const std::vector<double> inv_freq = ref::rope_inv_freq(rot, 1.0, 1e4);
  const int half = rot / 2;
  const Check all = check_rows(opts.check ? tokens : 0, [&](int64_t t, Check& chk) {
    std::vector<double> cs(static_cast<size_t>(half)), sn(cs.size()), x(static_cast<size_t>(D)),
        w(x.size()), y(x.size());
    for (int i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[static_cast<size_t>(t)]) * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    for (int64_t h = 0; h < Hq + H; ++h) {
      const size_t at = static_cast<size_t>(t * row + h * D);
      for (int64_t d = 0; d < D; ++d) {
        x[d] = ref::load_elem(in.host.data() + qkv_at, at + d, dtype);
        w[d] = ref::load_elem(in.host.data() + (h < Hq ? qw_at : kw_at), d, dtype);
      }
      const std::vector<double> nrm = ref::rmsnorm(x, w, 1, D, eps);
      ref::rope_head(nrm.data(), y.data(), static_cast<int>(D), rot, interleave, cs.data(),
                     sn.data());
      for (int64_t d = 0; d < D; ++d) {
        double tol = 2 * u * std::fabs(y[d]) + 1e-5 * std::fabs(nrm[d]);
        if (d < rot) {
          tol += 2e-6 * (std::fabs(nrm[d]) +
                         std::fabs(nrm[ref::rope_partner(static_cast<int>(d), rot, interleave)]));
        }
        chk.add(ref::load_elem(got.data(), at + d, dtype), y[d], tol);
      }
    }
  });
  return report(c, all, first_ms, opts);
}

}  // namespace

void add_rope_fused_benches(std::vector<BenchEntry>& out) {
  out.push_back({"rope_append",
                 {"dtype", "tokens", "qo_heads", "kv_heads", "head_dim", "page_size"},
                 {"batch", "layout", "cache", "interleave", "rotary_dim"},
                 bench_rope_append,
                 "dtype, tokens, qo_heads, kv_heads, head_dim, page_size, optional batch (default "
                 "max(1, tokens / 512)), layout (nhd|hnd), cache (same|e4m3, one scale per "
                 "tensor), interleave (0|1), rotary_dim (default head_dim)"});
  out.push_back({"qk_norm_rope",
                 {"dtype", "tokens", "qo_heads", "kv_heads", "head_dim"},
                 {"interleave", "rotary_dim"},
                 bench_qk_norm_rope,
                 "dtype, tokens, qo_heads, kv_heads, head_dim, optional interleave (0|1), "
                 "rotary_dim (default head_dim)"});
}

}  // namespace kjit::cli
