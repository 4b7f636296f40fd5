// kjit_append_paged_kv_cache on the GPU against the CPU reference, on fresh random page tables.
//
// The append is a copy, so the check is exact: after the call every byte of both caches must be
// what it was before, except the (page, slot, head) rows the reference says the tokens go to,
// which must hold the appended rows bit for bit. Spare pages, other requests' slots, padding
// between rows and pages, the other half of a combined cache and the inputs all stay as they
// were (poison or previous values). An e4m3 cache (kjit_append_paged_kv_cache_fp8) holds each
// element as the CPU reference quantizes it (ref::quantize_e4m3(x, scale)), also bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/pdl.hpp"
#include "reference/fp8_ref.hpp"
#include "reference/half.hpp"
#include "reference/kv_cache_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct KvCase {
  std::string dtype = "bf16";
  int layout = KJIT_KV_LAYOUT_NHD;
  int64_t batch = 4, heads = 8, head_dim = 128, page_size = 16;
  int64_t max_seq = 100;      // sequence lengths are drawn from [1, max_seq]
  int64_t max_append = 1;     // tokens appended per request from [1, max_append]; 1 = decode
  int64_t spare_pages = 5;    // pages no request uses
  bool combined = false;      // k and v are the two halves of one [pages, 2, ...] buffer
  int64_t row_pad = 0;        // cache elements after each (slot, head) row
  int64_t page_pad = 0;       // cache elements after each page (or page pair)
  bool fused_append = false;  // append_k / append_v are views of a qkv row with 3 q heads
  int64_t append_head_pad = 0, append_token_pad = 0;
  size_t offset = 0;     // elements: misaligns every cache and append view
  bool poison = false;   // caches start as 0xFF (NaN) instead of random previous contents
  bool invalid = false;  // add tokens the kernel must skip (bad request, position, page)
  bool early = false;    // KJIT_PDL_EARLY_INDICES forced on (takes effect on sm_90, <= 256 tokens)
  // "same": the caches hold dtype; "tensor" / "head": float8 e4m3 caches with one scale per
  // tensor / per kv head (through the C entry point kjit_append_paged_kv_cache_fp8 unless early).
  std::string fp8_scales = "same";
};

std::string describe(const KvCase& c) {
  return c.dtype + (c.layout == KJIT_KV_LAYOUT_NHD ? " NHD" : " HND") +
         " batch=" + std::to_string(c.batch) + " heads=" + std::to_string(c.heads) +
         " head_dim=" + std::to_string(c.head_dim) + " page=" + std::to_string(c.page_size) +
         " max_seq=" + std::to_string(c.max_seq) + " max_append=" + std::to_string(c.max_append) +
         (c.combined ? " combined" : "") + " pads=" + std::to_string(c.row_pad) + "/" +
         std::to_string(c.page_pad) + (c.fused_append ? " fused" : "") +
         " append_pads=" + std::to_string(c.append_head_pad) + "/" +
         std::to_string(c.append_token_pad) + " offset=" + std::to_string(c.offset) +
         (c.poison ? " poison" : "") + (c.invalid ? " invalid" : "") +
         (c.fp8_scales != "same" ? " e4m3 scales per " + c.fp8_scales : "");
}

struct Host {
  std::vector<unsigned char> bytes;
};

void fill_random(std::vector<unsigned char>& b, size_t es, const std::string& dt,
                 std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-4.0, 4.0);
  for (size_t i = 0; i < b.size() / es; ++i) ref::store_elem(b.data(), i, dist(rng), dt);
}

void run_case(const KvCase& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const std::string dt = c.dtype;
  const size_t es = ref::elem_size(dt);
  const bool fp8 = c.fp8_scales != "same";
  const size_t ces = fp8 ? 1 : es;  // cache element bytes
  const int64_t H = c.heads, D = c.head_dim, ps = c.page_size;
  // fp8 scales around amax / 448 of the inputs' [-4, 4]: the smaller ones saturate some
  // elements at +-448; with one per head, head 1's is 0 (stores zeros).
  std::vector<float> kscale(fp8 ? (c.fp8_scales == "head" ? H : 1) : 0), vscale(kscale.size());
  for (size_t h = 0; h < kscale.size(); ++h) {
    kscale[h] = 4.0f / 448.0f * (0.6f + 0.37f * static_cast<float>(h % 4));
    vscale[h] = 4.0f / 448.0f * (1.5f - 0.29f * static_cast<float>(h % 5));
  }
  if (kscale.size() > 1) kscale[1] = vscale[1] = 0.0f;

  // Requests, their page tables (distinct random pages) and tokens, shuffled below.
  ref::AppendBatch ab =
      ref::random_append_batch(c.batch, c.max_seq, c.max_append, ps, c.spare_pages, rng);
  std::vector<int32_t>& indptr = ab.indptr;
  std::vector<int32_t>& indices = ab.indices;
  std::vector<int32_t>& last = ab.last_page_len;
  const int64_t num_pages = ab.num_pages;
  if (c.invalid) {
    const auto batch = static_cast<int32_t>(c.batch);
    // Three extra requests with broken tables: a page id past the pool, a negative page id, and
    // a page range that runs past kv_indices.
    indices.push_back(static_cast<int32_t>(num_pages + 3));
    indptr.push_back(static_cast<int32_t>(indices.size()));
    indices.push_back(-2);
    indptr.push_back(static_cast<int32_t>(indices.size()));
    indptr.push_back(static_cast<int32_t>(indices.size() + 2));
    for (int i = 0; i < 3; ++i) last.push_back(1);
    const int32_t tail = static_cast<int32_t>(ab.pages[0] * ps);
    const std::vector<std::pair<int32_t, int32_t>> bad = {
        {batch + 3, 0}, {-1, 0},        {0, -3},
        {0, tail + 1},  {0, tail},      {batch, 0},
        {batch + 1, 1}, {batch + 2, 0}, {batch + 2, static_cast<int32_t>(ps)}};
    for (auto [b, p] : bad) {
      ab.batch_indices.push_back(b);
      ab.positions.push_back(p);
    }
  }
  ref::shuffle_tokens(ab, rng);
  const std::vector<int32_t>& bis = ab.batch_indices;
  const std::vector<int32_t>& poss = ab.positions;
  const auto nnz = static_cast<int64_t>(bis.size());

  // Append tensors.
  const int64_t ahs = D + c.append_head_pad;
  int64_t arow = 0;
  size_t ak_off = c.offset, av_off = c.offset;
  std::vector<Host> app(c.fused_append ? 1 : 2);
  if (c.fused_append) {
    arow = (3 + 2 * H) * ahs + c.append_token_pad;
    ak_off += static_cast<size_t>(3 * ahs);
    av_off += static_cast<size_t>((3 + H) * ahs);
    app[0].bytes.resize((c.offset + static_cast<size_t>(nnz * arow)) * es);
  } else {
    arow = H * ahs + c.append_token_pad;
    for (auto& a : app) a.bytes.resize((c.offset + static_cast<size_t>(nnz * arow)) * es);
  }
  for (auto& a : app) fill_random(a.bytes, es, dt, rng);
  const int ak_buf = 0, av_buf = c.fused_append ? 0 : 1;

  // Caches.
  const int64_t row = D + c.row_pad;
  const bool nhd = c.layout == KJIT_KV_LAYOUT_NHD;
  const int64_t slot_stride = nhd ? H * row : row, head_stride = nhd ? row : ps * row;
  const int64_t page_elems = ps * H * row;
  const int64_t page_stride = (c.combined ? 2 * page_elems : page_elems) + c.page_pad;
  std::vector<Host> caches(c.combined ? 1 : 2);
  for (auto& h : caches)
    h.bytes.resize((c.offset + static_cast<size_t>(num_pages * page_stride)) * ces);
  for (auto& h : caches) {
    if (c.poison) {
      std::fill(h.bytes.begin(), h.bytes.end(), 0xFF);
    } else if (fp8) {
      for (auto& b : h.bytes) b = static_cast<unsigned char>(rng());
    } else {
      fill_random(h.bytes, es, dt, rng);
    }
  }
  const int kc_buf = 0, vc_buf = c.combined ? 0 : 1;
  const size_t kc_off = c.offset, vc_off = c.offset + (c.combined ? page_elems : 0);

  // Expected caches: the previous contents with each valid token's rows copied in.
  std::vector<Host> want = caches;
  long written = 0;
  for (int64_t t = 0; t < nnz; ++t) {
    auto target = ref::append_target(bis, poss, indptr, indices, t, ps, num_pages);
    if (!target) continue;
    ++written;
    for (int64_t h = 0; h < H; ++h) {
      const size_t cache_elem = static_cast<size_t>(target->page * page_stride +
                                                    target->slot * slot_stride + h * head_stride);
      const size_t app_elem = static_cast<size_t>(t * arow + h * ahs);
      if (fp8) {
        const size_t si = kscale.size() == 1 ? 0 : static_cast<size_t>(h);
        for (int64_t d = 0; d < D; ++d) {
          const size_t e = app_elem + static_cast<size_t>(d);
          const auto kx =
              static_cast<float>(ref::load_elem(app[ak_buf].bytes.data(), ak_off + e, dt));
          const auto vx =
              static_cast<float>(ref::load_elem(app[av_buf].bytes.data(), av_off + e, dt));
          want[kc_buf].bytes[kc_off + cache_elem + d] = ref::quantize_e4m3(kx, kscale[si]);
          want[vc_buf].bytes[vc_off + cache_elem + d] = ref::quantize_e4m3(vx, vscale[si]);
        }
        continue;
      }
      std::memcpy(want[kc_buf].bytes.data() + (kc_off + cache_elem) * es,
                  app[ak_buf].bytes.data() + (ak_off + app_elem) * es, static_cast<size_t>(D) * es);
      std::memcpy(want[vc_buf].bytes.data() + (vc_off + cache_elem) * es,
                  app[av_buf].bytes.data() + (av_off + app_elem) * es, static_cast<size_t>(D) * es);
    }
  }
  if (!c.invalid) CHECK(written == nnz);

  // Device side.
  auto upload = [](const std::vector<unsigned char>& b) {
    auto d = std::make_unique<DeviceBuffer>(b.size());
    if (!b.empty()) d->upload(b.data(), b.size());
    return d;
  };
  std::vector<std::unique_ptr<DeviceBuffer>> app_dev, cache_dev;
  for (auto& a : app) app_dev.push_back(upload(a.bytes));
  for (auto& h : caches) cache_dev.push_back(upload(h.bytes));
  // The bytes of an int32 or fp32 host vector.
  auto as_bytes = [](const auto& v) {
    std::vector<unsigned char> b(v.size() * sizeof(v[0]));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto bi_dev = upload(as_bytes(bis)), pos_dev = upload(as_bytes(poss));
  auto idx_dev = upload(as_bytes(indices)), ptr_dev = upload(as_bytes(indptr));
  auto last_dev = upload(as_bytes(last));
  auto ks_dev = upload(as_bytes(kscale)), vs_dev = upload(as_bytes(vscale));

  auto at = [&](const std::unique_ptr<DeviceBuffer>& d, size_t elems) {
    return static_cast<char*>(d->get()) + elems * es;
  };
  Tensor ak = make_tensor(at(app_dev[ak_buf], ak_off), {nnz, H, D}, dl_dtype(dt), {arow, ahs, 1});
  Tensor av = make_tensor(at(app_dev[av_buf], av_off), {nnz, H, D}, dl_dtype(dt), {arow, ahs, 1});
  std::vector<int64_t> cshape =
      nhd ? std::vector<int64_t>{num_pages, ps, H, D} : std::vector<int64_t>{num_pages, H, ps, D};
  std::vector<int64_t> cstrides =
      nhd ? std::vector<int64_t>{page_stride, slot_stride, head_stride, 1}
          : std::vector<int64_t>{page_stride, head_stride, slot_stride, 1};
  auto cache_at = [&](const std::unique_ptr<DeviceBuffer>& d, size_t elems) {
    return static_cast<char*>(d->get()) + elems * ces;
  };
  const DLDataType cdt = dl_dtype(fp8 ? "e4m3" : dt);
  Tensor kc = make_tensor(cache_at(cache_dev[kc_buf], kc_off), cshape, cdt, cstrides);
  Tensor vc = make_tensor(cache_at(cache_dev[vc_buf], vc_off), cshape, cdt, cstrides);
  const int64_t ns = std::max<int64_t>(1, static_cast<int64_t>(kscale.size()));
  Tensor kst = make_tensor(ks_dev->get(), {ns}, dl_dtype("fp32"));
  Tensor vst = make_tensor(vs_dev->get(), {ns}, dl_dtype("fp32"));
  Tensor bt = make_tensor(bi_dev->get(), {nnz}, dl_dtype("int32"));
  Tensor pt = make_tensor(pos_dev->get(), {nnz}, dl_dtype("int32"));
  Tensor it =
      make_tensor(idx_dev->get(), {static_cast<int64_t>(indices.size())}, dl_dtype("int32"));
  Tensor ipt =
      make_tensor(ptr_dev->get(), {static_cast<int64_t>(indptr.size())}, dl_dtype("int32"));
  Tensor lt = make_tensor(last_dev->get(), {static_cast<int64_t>(last.size())}, dl_dtype("int32"));
  // The ops-layer call with the early index reads asked for or not (the C entry point takes
  // KJIT_PDL_EARLY_INDICES).
  kjit::ops::ElementwiseLaunch launch = kjit::ops::elementwise_launch_from_env();
  launch.early_indices = c.early;
  if (fp8 && !c.early) {
    REQUIRE(kjit_append_paged_kv_cache_fp8(ak.get(), av.get(), bt.get(), pt.get(), it.get(),
                                           ipt.get(), lt.get(), kst.get(), vst.get(), kc.get(),
                                           vc.get(), static_cast<kjit_kv_layout>(c.layout),
                                           nullptr) == KJIT_SUCCESS);
  } else {
    const kjit::ops::AppendKvScales scales =
        fp8 ? kjit::ops::AppendKvScales{kst.get(), vst.get()} : kjit::ops::AppendKvScales{};
    REQUIRE_NOTHROW(kjit::ops::append_paged_kv_cache(ak.get(), av.get(), bt.get(), pt.get(),
                                                     kc.get(), vc.get(), it.get(), ipt.get(),
                                                     lt.get(), c.layout, nullptr, launch, scales));
  }
  device_synchronize();

  auto count_diffs = [&](const std::vector<unsigned char>& expect, const DeviceBuffer& d,
                         const char* what, size_t es) {
    std::vector<unsigned char> got(expect.size());
    if (!got.empty()) d.download(got.data(), got.size());
    long diffs = 0;
    for (size_t i = 0; i < got.size() / es; ++i) {
      if (std::memcmp(got.data() + i * es, expect.data() + i * es, es) != 0) {
        if (diffs++ < 5) UNSCOPED_INFO(what << " element " << i << " differs");
      }
    }
    return diffs;
  };
  for (size_t i = 0; i < caches.size(); ++i)
    CHECK(count_diffs(want[i].bytes, *cache_dev[i], "cache", ces) == 0);
  for (size_t i = 0; i < app.size(); ++i)
    CHECK(count_diffs(app[i].bytes, *app_dev[i], "append", es) == 0);
}

}  // namespace

TEST_CASE("kv gpu: decode and prefill appends, NHD and HND, every dtype", "[gpu][kv_cache]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      for (int64_t hd : {64, 128, 256, 80}) {
        KvCase c;
        c.dtype = dt;
        c.layout = layout;
        c.head_dim = hd;
        c.batch = 7;
        c.heads = 3;
        run_case(c, rng);   // decode: one token per request
        c.max_append = 40;  // prefill / chunked append, crossing page boundaries
        c.max_seq = 200;
        run_case(c, rng);
      }
    }
  }
}

TEST_CASE("kv gpu: page sizes, head counts and batch sizes", "[gpu][kv_cache]") {
  std::mt19937_64 rng(std::random_device{}());
  // Odd page sizes and head counts: the kernel divides by both with host-computed multipliers.
  for (int64_t ps : {1, 5, 7, 16, 64}) {
    for (int64_t heads : {1, 5, 8}) {
      KvCase c;
      c.page_size = ps;
      c.heads = heads;
      c.max_append = 9;
      c.layout = ps % 2 ? KJIT_KV_LAYOUT_HND : KJIT_KV_LAYOUT_NHD;
      run_case(c, rng);
    }
  }
  // Below 32 requests a warp reads kv_indptr one entry per lane (batch 31 uses all 32 lanes);
  // from 32 on each row reads its own entries.
  for (int64_t batch : {1, 31, 32, 33, 64, 127, 128}) {
    KvCase c;
    c.batch = batch;
    c.max_seq = 300;
    run_case(c, rng);
  }
  KvCase decode64;  // the bench's decode row: 64 requests, one token each (kv heads 8, page 16)
  decode64.batch = 64;
  decode64.max_seq = 2000;
  decode64.poison = true;
  run_case(decode64, rng);
  KvCase decode;  // a large decode batch
  decode.batch = 256;
  decode.max_seq = 4000;
  run_case(decode, rng);
  KvCase prefill;  // one long prefill
  prefill.batch = 1;
  prefill.max_seq = 5000;
  prefill.max_append = 5000;
  prefill.heads = 8;
  run_case(prefill, rng);
  KvCase mla;  // 512-wide rows (MLA's compressed KV), one head
  mla.heads = 1;
  mla.head_dim = 512;
  mla.max_append = 20;
  run_case(mla, rng);
}

TEST_CASE("kv gpu: combined caches, padded, misaligned and fused views", "[gpu][kv_cache]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      KvCase c;
      c.dtype = dt;
      c.layout = layout;
      c.max_append = 12;
      c.combined = true;  // FlashInfer's single [pages, 2, ...] tensor
      c.fused_append = true;
      run_case(c, rng);
      c.row_pad = 8;
      c.page_pad = 24;
      c.append_head_pad = 16;
      c.append_token_pad = 8;
      run_case(c, rng);
      c.offset = 1;  // every view one element off: scalar copies
      c.row_pad = 3;
      c.append_head_pad = 1;
      run_case(c, rng);
      KvCase h;  // 4-byte aligned rows only
      h.dtype = dt;
      h.layout = layout;
      h.row_pad = 2;
      h.max_append = 5;
      run_case(h, rng);
    }
  }
}

TEST_CASE("kv gpu: broken page tables skip tokens and write nothing out of bounds",
          "[gpu][kv_cache]") {
  std::mt19937_64 rng(std::random_device{}());
  for (bool poison : {true, false}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      KvCase c;
      c.layout = layout;
      c.invalid = true;
      c.poison = poison;
      c.max_append = 6;
      c.spare_pages = 0;  // the pool ends right where an out-of-range page id would land
      run_case(c, rng);
      c.combined = true;
      run_case(c, rng);
    }
  }
}

TEST_CASE("kv gpu: the index chain read before the PDL wait (KJIT_PDL_EARLY_INDICES)",
          "[gpu][kv_cache]") {
  // The decode-size variant (<= 256 tokens) on the shapes of the cases above: dtypes, layouts,
  // odd head sizes and page sizes, both kv_indptr paths (batch < 32 and >= 32), broken tables,
  // combined and misaligned views; and a prefill past 256 tokens, which keeps the default kernel.
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
      for (int64_t hd : {64, 80, 128, 256}) {
        KvCase c;
        c.early = true;
        c.dtype = dt;
        c.layout = layout;
        c.head_dim = hd;
        c.batch = 7;
        c.heads = 3;
        c.page_size = hd == 80 ? 5 : 16;
        run_case(c, rng);
        c.max_append = 9;
        run_case(c, rng);
      }
    }
  }
  for (int64_t batch : {1, 31, 32, 64, 127, 128, 200}) {
    KvCase c;
    c.early = true;
    c.batch = batch;
    c.max_seq = 2000;
    c.poison = true;
    run_case(c, rng);
  }
  for (bool combined : {false, true}) {
    KvCase c;
    c.early = true;
    c.invalid = true;
    c.poison = true;
    c.combined = combined;
    c.max_append = 6;
    c.spare_pages = 0;
    run_case(c, rng);
  }
  KvCase odd;
  odd.early = true;
  odd.offset = 1;
  odd.row_pad = 3;
  odd.fused_append = true;
  odd.append_head_pad = 1;
  odd.max_append = 4;
  run_case(odd, rng);
  KvCase prefill;
  prefill.early = true;
  prefill.batch = 2;
  prefill.max_seq = 600;
  prefill.max_append = 600;
  run_case(prefill, rng);
}

TEST_CASE("kv gpu: fp8 e4m3 caches with per-tensor and per-head scales", "[gpu][kv_cache][fp8]") {
  // The same cases into e4m3 caches: every input dtype and layout, decode and prefill appends,
  // odd head sizes and page sizes, combined / padded / misaligned (byte-aligned caches: scalar
  // stores) / fused views, broken page tables, and the early index read.
  std::mt19937_64 rng(std::random_device{}());
  for (const char* scales : {"tensor", "head"}) {
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (int layout : {KJIT_KV_LAYOUT_NHD, KJIT_KV_LAYOUT_HND}) {
        for (int64_t hd : {64, 128, 80}) {
          KvCase c;
          c.fp8_scales = scales;
          c.dtype = dt;
          c.layout = layout;
          c.head_dim = hd;
          c.batch = 7;
          c.heads = 3;
          c.page_size = hd == 80 ? 5 : 16;
          run_case(c, rng);
          c.max_append = 40;
          c.max_seq = 200;
          run_case(c, rng);
        }
      }
    }
    KvCase views;
    views.fp8_scales = scales;
    views.combined = true;
    views.fused_append = true;
    views.max_append = 12;
    run_case(views, rng);
    views.offset = 1;
    views.row_pad = 3;
    views.append_head_pad = 1;
    run_case(views, rng);
    KvCase broken;
    broken.fp8_scales = scales;
    broken.invalid = true;
    broken.poison = true;
    broken.spare_pages = 0;
    broken.max_append = 6;
    run_case(broken, rng);
    for (int64_t batch : {1, 64}) {
      KvCase early;
      early.fp8_scales = scales;
      early.early = true;
      early.batch = batch;
      early.heads = 8;
      early.max_seq = 2000;
      run_case(early, rng);
    }
  }
}

TEST_CASE("kv gpu: a device id that does not exist is an argument error", "[gpu][kv_cache]") {
  DeviceBuffer buf(1 << 20);
  char* p = static_cast<char*>(buf.get());
  auto ak = make_tensor(p, {2, 1, 64}, dl_dtype("bf16"), {}, 63);
  auto av = make_tensor(p + 1024, {2, 1, 64}, dl_dtype("bf16"), {}, 63);
  auto bi = make_tensor(p + 2048, {2}, dl_dtype("int32"), {}, 63);
  auto pos = make_tensor(p + 2048 + 64, {2}, dl_dtype("int32"), {}, 63);
  auto kc = make_tensor(p + 4096, {2, 4, 1, 64}, dl_dtype("bf16"), {}, 63);
  auto vc = make_tensor(p + 8192, {2, 4, 1, 64}, dl_dtype("bf16"), {}, 63);
  auto idx = make_tensor(p + 2048 + 128, {2}, dl_dtype("int32"), {}, 63);
  auto ptr = make_tensor(p + 2048 + 192, {2}, dl_dtype("int32"), {}, 63);
  auto last = make_tensor(p + 2048 + 256, {1}, dl_dtype("int32"), {}, 63);
  CHECK(kjit_append_paged_kv_cache(ak.get(), av.get(), bi.get(), pos.get(), idx.get(), ptr.get(),
                                   last.get(), kc.get(), vc.get(), KJIT_KV_LAYOUT_NHD,
                                   nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
}
