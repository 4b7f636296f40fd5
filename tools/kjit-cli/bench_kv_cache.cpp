// `kjit-cli bench` cases of the paged KV-cache append.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "jit/arch.hpp"
#include "runtime/jit_core.hpp"
#include "kjit/kjit.h"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/pdl.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

int bench_append_paged_kv(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const BenchAppendArgs a = bench_append_args(args, 1 << 24, ops::kAppendPagedKvMaxHeadDim);
  const int64_t tokens = a.tokens, H = a.kv_heads, D = a.head_dim, ps = a.page_size,
                batch = a.batch;
  const std::string& layout = a.layout;
  const std::string& cache = a.cache;
  const bool nhd = a.nhd, fp8 = a.fp8;
  const std::string scales = args.count("scales") ? args.at("scales") : "tensor";
  if (scales != "tensor" && scales != "head") throw UsageError("scales must be tensor or head");
  if (!fp8 && args.count("scales")) throw UsageError("scales needs cache=e4m3");
  const size_t es = ref::elem_size(dtype);
  const size_t ces = fp8 ? 1 : es;                       // cache element bytes
  const size_t n = static_cast<size_t>(tokens * H * D);  // elements of append_k (and append_v)
  check_gpu();

  std::mt19937_64 rng(std::random_device{}());
  const BenchAppendBatch ab = bench_append_batch(tokens, batch, ps, rng);
  const std::vector<int32_t>& bi = ab.batch_indices;
  const std::vector<int32_t>& pos = ab.positions;
  const std::vector<int32_t>& indptr = ab.indptr;
  const std::vector<int32_t>& last = ab.last_page_len;
  const std::vector<int32_t>& indices = ab.indices;
  const int64_t num_pages = ab.num_pages;

  // Inputs append_k | append_v | index arrays in one buffer; the caches poisoned.
  Packed in;
  const size_t ak_at = in.add(n * es), av_at = in.add(n * es);
  fill_uniform(in.host.data() + ak_at, n, dtype, rng, -4.0, 4.0);
  fill_uniform(in.host.data() + av_at, n, dtype, rng, -4.0, 4.0);
  const size_t bi_at = add_int32s(in, bi), pos_at = add_int32s(in, pos);
  const size_t idx_at = add_int32s(in, indices), ptr_at = add_int32s(in, indptr);
  const size_t last_at = add_int32s(in, last);
  // fp8 scales: about amax / 448 of the inputs' [-4, 4], a little different per head.
  std::vector<float> scale_k(fp8 ? (scales == "head" ? H : 1) : 0), scale_v(scale_k.size());
  for (size_t h = 0; h < scale_k.size(); ++h) {
    scale_k[h] = 4.0f / 448.0f * (1.0f + 0.01f * static_cast<float>(h));
    scale_v[h] = 4.0f / 448.0f * (1.0f - 0.005f * static_cast<float>(h));
  }
  const size_t ks_at = in.add(scale_k.size() * 4), vs_at = in.add(scale_v.size() * 4);
  if (fp8) {
    std::memcpy(in.host.data() + ks_at, scale_k.data(), scale_k.size() * 4);
    std::memcpy(in.host.data() + vs_at, scale_v.data(), scale_v.size() * 4);
  }
  in.upload();
  const size_t cache_elems = static_cast<size_t>(num_pages * ps * H * D);
  Packed caches;
  const size_t kc_at = caches.add(cache_elems * ces), vc_at = caches.add(cache_elems * ces);
  caches.upload();
  caches.dev->fill(0xFF);  // poison: NaN in every float format
  const DLDataType dl = test::dl_dtype(dtype), i32 = test::dl_dtype("int32");
  auto akt = test::make_tensor(in.at(ak_at), {tokens, H, D}, dl);
  auto avt = test::make_tensor(in.at(av_at), {tokens, H, D}, dl);
  const std::vector<int64_t> cshape =
      nhd ? std::vector<int64_t>{num_pages, ps, H, D} : std::vector<int64_t>{num_pages, H, ps, D};
  const DLDataType cdl = fp8 ? test::dl_dtype("e4m3") : dl;
  auto kct = test::make_tensor(caches.at(kc_at), cshape, cdl);
  auto vct = test::make_tensor(caches.at(vc_at), cshape, cdl);
  const int64_t ns = static_cast<int64_t>(scale_k.size());
  auto kst = test::make_tensor(in.at(ks_at), {std::max<int64_t>(ns, 1)}, test::dl_dtype("fp32"));
  auto vst = test::make_tensor(in.at(vs_at), {std::max<int64_t>(ns, 1)}, test::dl_dtype("fp32"));
  auto bt = test::make_tensor(in.at(bi_at), {tokens}, i32);
  auto pt = test::make_tensor(in.at(pos_at), {tokens}, i32);
  auto it = test::make_tensor(in.at(idx_at), {num_pages}, i32);
  auto ipt = test::make_tensor(in.at(ptr_at), {batch + 1}, i32);
  auto lt = test::make_tensor(in.at(last_at), {batch}, i32);

  // As the op picks it (KJIT_PDL_EARLY_INDICES at decode sizes).
  const ops::AppendPagedKvConfig cfg =
      ops::select_append_paged_kv(*ops::dtype_of(dl), D, 16, tokens,
                                  ops::pdl_early_indices(0, bench_elementwise_launch()), fp8);
  BenchCase c;
  c.op = "append_paged_kv";
  c.uri = ops::append_paged_kv_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"tokens", tokens}, {"kv_heads", H},  {"head_dim", D},
             {"page_size", ps},  {"batch", batch}, {"layout", layout}};
  if (fp8) {
    c.shape["cache"] = cache;
    c.shape["scales"] = scales;
  }
  c.label = fmt::format(
      "append_paged_kv {} {} tokens={} batch={} kv_heads={} head_dim={} page={}{}{}", dtype, layout,
      tokens, batch, H, D, ps, fp8 ? fmt::format(" e4m3-cache scales={}", scales) : "",
      cfg.early_indices ? " early-indices" : "");
  // The ops-layer call: what kjit_append_paged_kv_cache runs, in the bench's launch mode.
  c.launch = [&](CUstream stream) {
    ops::append_paged_kv_cache(
        akt.get(), avt.get(), bt.get(), pt.get(), kct.get(), vct.get(), it.get(), ipt.get(),
        lt.get(), nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, stream, bench_elementwise_launch(),
        fp8 ? ops::AppendKvScales{kst.get(), vst.get()} : ops::AppendKvScales{});
  };
  // Reads append_k / append_v, batch_indices, positions and the page table; writes a cache
  // element for each append element.
  const size_t index_bytes = 4 * (bi.size() + pos.size() + indices.size() + indptr.size());
  c.bytes = 2.0 * n * (es + ces) + index_bytes;
  c.copy_src = in.dev->get();
  c.copy_bytes = n * (es + ces) + index_bytes / 2;

  // Every appended row must sit in its (page, slot) bit for bit (as e4m3(x / scale) for an fp8
  // cache), and every other cache element must still be poison.
  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(opts.check ? caches.host.size() : 0);
  if (opts.check) caches.dev->download(got.data(), got.size());
  const size_t row_bytes = static_cast<size_t>(D) * ces;
  // A token a row (check_rows): its cache rows are its alone.
  Check all = check_rows(opts.check ? tokens : 0, [&](int64_t t, Check& chk) {
    const auto target = ref::append_target(bi, pos, indptr, indices, t, ps, num_pages);
    if (!target) {  // the bench builds none; counted rather than thrown from a worker
      ++chk.bad;
      return;
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t cache_row = nhd ? (target->page * ps + target->slot) * H + h
                                    : (target->page * H + h) * ps + target->slot;
      const size_t app_elem = static_cast<size_t>((t * H + h) * D);
      for (const auto& [src, dst, sc] :
           {std::tuple{ak_at, kc_at, &scale_k}, std::tuple{av_at, vc_at, &scale_v}}) {
        unsigned char* slot = got.data() + dst + static_cast<size_t>(cache_row) * row_bytes;
        for (int64_t d = 0; d < D; ++d) {
          const double x = ref::load_elem(in.host.data() + src, app_elem + d, dtype);
          if (fp8) {
            const float s = (*sc)[sc->size() == 1 ? 0 : static_cast<size_t>(h)];
            chk.add(slot[d], ref::quantize_e4m3(static_cast<float>(x), s), 0.0);
          } else {
            chk.add(ref::load_elem(slot, static_cast<size_t>(d), dtype), x, 0.0);
          }
        }
        std::memset(slot, 0xFF, row_bytes);  // checked: must not count as a stray write below
      }
    }
  });
  for (const size_t at : {kc_at, vc_at}) {
    for (size_t i = 0; opts.check && i < cache_elems * ces; ++i) all.bad += got[at + i] != 0xFF;
  }
  return report(c, all, first_ms, opts);
}

}  // namespace

BenchAppendArgs bench_append_args(const ops::SetArgs& args, int64_t max_tokens,
                                  int64_t max_head_dim) {
  BenchAppendArgs a;
  a.tokens = ops::positive_int_arg(args, "tokens", max_tokens);
  a.kv_heads = ops::positive_int_arg(args, "kv_heads", 1024);
  a.head_dim = ops::positive_int_arg(args, "head_dim", max_head_dim);
  a.page_size = ops::positive_int_arg(args, "page_size", 1024);
  a.batch = args.count("batch") ? ops::positive_int_arg(args, "batch", a.tokens)
                                : std::max<int64_t>(1, a.tokens / 512);
  a.layout = args.count("layout") ? args.at("layout") : "nhd";
  if (a.layout != "nhd" && a.layout != "hnd") throw UsageError("layout must be nhd or hnd");
  a.nhd = a.layout == "nhd";
  a.cache = args.count("cache") ? args.at("cache") : "same";
  if (a.cache != "same" && a.cache != "e4m3") throw UsageError("cache must be same or e4m3");
  a.fp8 = a.cache == "e4m3";
  return a;
}

BenchAppendBatch bench_append_batch(int64_t tokens, int64_t batch, int64_t page_size,
                                    std::mt19937_64& rng) {
  // Each request appends its share of the tokens after an existing prefix of up to 1024 tokens,
  // on distinct pages in random order.
  BenchAppendBatch a;
  std::uniform_int_distribution<int32_t> prefix_dist(0, 1023);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t prefix = prefix_dist(rng);
    const int64_t share = tokens / batch + (b < tokens % batch ? 1 : 0);
    for (int64_t i = 0; i < share; ++i) {
      a.batch_indices.push_back(static_cast<int32_t>(b));
      a.positions.push_back(static_cast<int32_t>(prefix + i));
    }
    const int64_t len = prefix + share, pages = (len + page_size - 1) / page_size;
    a.num_pages += pages;
    a.indptr.push_back(static_cast<int32_t>(a.num_pages));
    a.last_page_len.push_back(static_cast<int32_t>(len - (pages - 1) * page_size));
  }
  a.indices.resize(static_cast<size_t>(a.num_pages));
  std::iota(a.indices.begin(), a.indices.end(), 0);
  std::shuffle(a.indices.begin(), a.indices.end(), rng);
  return a;
}

void add_kv_cache_benches(std::vector<BenchEntry>& out) {
  out.push_back({"append_paged_kv",
                 {"dtype", "tokens", "kv_heads", "head_dim", "page_size"},
                 {"batch", "layout", "cache", "scales"},
                 bench_append_paged_kv,
                 "dtype, tokens, kv_heads, head_dim, page_size, optional batch (default max(1, "
                 "tokens / 512)), layout (nhd|hnd), cache (same|e4m3), scales (tensor|head, "
                 "e4m3 only)"});
}
}  // namespace kjit::cli
