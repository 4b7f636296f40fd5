// The paged KV cache family without a GPU: the C ABI's argument checks (one test per rejected
// case, all rejected before any driver call), then the pure parts: vector width, specs, catalog
// and the reference's skip rules.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <set>
#include <string>

#include "kjit/kjit.h"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/registry.hpp"
#include "reference/kv_cache_ref.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first (or
// stops at the missing driver).
char* const kAk = reinterpret_cast<char*>(0x10000000);
char* const kAv = reinterpret_cast<char*>(0x11000000);
char* const kBi = reinterpret_cast<char*>(0x12000000);
char* const kPos = reinterpret_cast<char*>(0x13000000);
char* const kKc = reinterpret_cast<char*>(0x20000000);
char* const kVc = reinterpret_cast<char*>(0x30000000);
char* const kIdx = reinterpret_cast<char*>(0x40000000);
char* const kPtr = reinterpret_cast<char*>(0x41000000);
char* const kLast = reinterpret_cast<char*>(0x42000000);
char* const kKs = reinterpret_cast<char*>(0x43000000);
char* const kVs = reinterpret_cast<char*>(0x44000000);

std::string last_error() {
  return kjit_last_error();
}

// A valid call: 5 tokens, 2 kv heads of 128, 3 requests, 16 pages of 16 slots (NHD).
struct Call {
  Tensor ak = make_tensor(kAk, {5, 2, 128}, dl_dtype("bf16"));
  Tensor av = make_tensor(kAv, {5, 2, 128}, dl_dtype("bf16"));
  Tensor bi = make_tensor(kBi, {5}, dl_dtype("int32"));
  Tensor pos = make_tensor(kPos, {5}, dl_dtype("int32"));
  Tensor kc = make_tensor(kKc, {16, 16, 2, 128}, dl_dtype("bf16"));
  Tensor vc = make_tensor(kVc, {16, 16, 2, 128}, dl_dtype("bf16"));
  Tensor idx = make_tensor(kIdx, {7}, dl_dtype("int32"));
  Tensor ptr = make_tensor(kPtr, {4}, dl_dtype("int32"));
  Tensor last = make_tensor(kLast, {3}, dl_dtype("int32"));
  int layout = KJIT_KV_LAYOUT_NHD;
  const char* name() const { return "kjit_append_paged_kv_cache"; }
  kjit_status run() {
    return kjit_append_paged_kv_cache(ak.get(), av.get(), bi.get(), pos.get(), idx.get(), ptr.get(),
                                      last.get(), kc.get(), vc.get(),
                                      static_cast<kjit_kv_layout>(layout), nullptr);
  }
  // The same call with argument `which` (0..8) replaced by NULL.
  kjit_status run_with_null(int which) {
    DLTensor* a[9] = {ak.get(), av.get(),  bi.get(),  pos.get(), kc.get(),
                      vc.get(), idx.get(), ptr.get(), last.get()};
    a[which] = nullptr;
    return kjit_append_paged_kv_cache(a[0], a[1], a[2], a[3], a[6], a[7], a[8], a[4], a[5],
                                      static_cast<kjit_kv_layout>(layout), nullptr);
  }
};

void expect_status(Call& c, kjit_status want, const char* fragment) {
  kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find(c.name()) == 0);  // the guard names the entry point
}

void expect_invalid(Call& c, const char* fragment) {
  expect_status(c, KJIT_ERROR_INVALID_ARGUMENT, fragment);
}

void expect_null_rejected(int which, const char* fragment) {
  Call c;
  CHECK(c.run_with_null(which) == KJIT_ERROR_INVALID_ARGUMENT);
  INFO("last error: " << last_error());
  CHECK(last_error().find(fragment) != std::string::npos);
}

void expect_valid(Call& c) {
  // Only reached without a GPU: the test case starts with KJIT_RUN_WITHOUT_GPU().
  REQUIRE_FALSE(kjit::test::gpu_available());
  kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == KJIT_ERROR_NO_DEVICE);
}

}  // namespace

TEST_CASE("kv abi: libkjit.so exports kjit_append_paged_kv_cache", "[c_abi][kv_cache]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_append_paged_kv_cache") != nullptr);
  dlclose(lib);
  CHECK(KJIT_KV_LAYOUT_NHD == 0);
  CHECK(KJIT_KV_LAYOUT_HND == 1);
}

TEST_CASE("kv abi: rejects a NULL append_k", "[c_abi][kv_cache]") {
  expect_null_rejected(0, "append_k is NULL");
}
TEST_CASE("kv abi: rejects a NULL append_v", "[c_abi][kv_cache]") {
  expect_null_rejected(1, "append_v is NULL");
}
TEST_CASE("kv abi: rejects a NULL batch_indices", "[c_abi][kv_cache]") {
  expect_null_rejected(2, "batch_indices is NULL");
}
TEST_CASE("kv abi: rejects a NULL positions", "[c_abi][kv_cache]") {
  expect_null_rejected(3, "positions is NULL");
}
TEST_CASE("kv abi: rejects a NULL paged_k_cache", "[c_abi][kv_cache]") {
  expect_null_rejected(4, "paged_k_cache is NULL");
}
TEST_CASE("kv abi: rejects a NULL paged_v_cache", "[c_abi][kv_cache]") {
  expect_null_rejected(5, "paged_v_cache is NULL");
}
TEST_CASE("kv abi: rejects a NULL kv_indices", "[c_abi][kv_cache]") {
  expect_null_rejected(6, "kv_indices is NULL");
}
TEST_CASE("kv abi: rejects a NULL kv_indptr", "[c_abi][kv_cache]") {
  expect_null_rejected(7, "kv_indptr is NULL");
}
TEST_CASE("kv abi: rejects a NULL kv_last_page_len", "[c_abi][kv_cache]") {
  expect_null_rejected(8, "kv_last_page_len is NULL");
}

TEST_CASE("kv abi: rejects NULL data with elements", "[c_abi][kv_cache]") {
  Call c;
  c.vc.t.data = nullptr;
  expect_invalid(c, "paged_v_cache data is NULL");
}

TEST_CASE("kv abi: rejects a 2-D append_k", "[c_abi][kv_cache]") {
  Call c;
  c.ak = make_tensor(kAk, {5, 256}, dl_dtype("bf16"));
  expect_invalid(c, "append_k must be [nnz, num_kv_heads, head_dim], got ndim 2");
}

TEST_CASE("kv abi: rejects an append_v of another shape", "[c_abi][kv_cache]") {
  Call c;
  c.av = make_tensor(kAv, {5, 1, 128}, dl_dtype("bf16"));
  expect_invalid(c, "append_v dim 1 is 1 but append_k dim 1 is 2");
}

TEST_CASE("kv abi: rejects an append_v of another dtype", "[c_abi][kv_cache]") {
  Call c;
  c.av.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "append_v is fp16 but append_k is bf16");
}

TEST_CASE("kv abi: rejects append tensors on different devices", "[c_abi][kv_cache]") {
  Call c;
  c.av.t.device.device_id = 1;
  expect_invalid(c, "append_v is on cuda:1 but append_k is on cuda:0");
}

TEST_CASE("kv abi: rejects host memory", "[c_abi][kv_cache]") {
  Call c;
  c.kc.t.device = {kDLCPU, 0};
  expect_invalid(c, "paged_k_cache is on device type 1");
}

TEST_CASE("kv abi: rejects a non-contiguous head dim", "[c_abi][kv_cache]") {
  Call c;
  c.ak = make_tensor(kAk, {5, 2, 128}, dl_dtype("bf16"), {512, 256, 2});
  expect_invalid(c, "append_k last dim has stride 2 (must be contiguous)");
}

TEST_CASE("kv abi: rejects int64 batch_indices", "[c_abi][kv_cache]") {
  Call c;
  c.bi.t.dtype = dl_dtype("int64");
  expect_invalid(c, "batch_indices must be int32, got int64");
}

TEST_CASE("kv abi: rejects a 2-D positions", "[c_abi][kv_cache]") {
  Call c;
  c.pos = make_tensor(kPos, {5, 1}, dl_dtype("int32"));
  expect_invalid(c, "positions must be 1-D, got ndim 2");
}

TEST_CASE("kv abi: rejects positions of another length", "[c_abi][kv_cache]") {
  Call c;
  c.pos = make_tensor(kPos, {4}, dl_dtype("int32"));
  expect_invalid(c, "positions has 4 elements but append_k has 5 tokens");
}

TEST_CASE("kv abi: rejects batch_indices on another device", "[c_abi][kv_cache]") {
  Call c;
  c.bi.t.device.device_id = 1;
  expect_invalid(c, "batch_indices is on cuda:1 but append_k is on cuda:0");
}

TEST_CASE("kv abi: rejects a layout other than NHD or HND", "[c_abi][kv_cache]") {
  Call c;
  c.layout = 2;
  expect_invalid(c, "layout must be KJIT_KV_LAYOUT_NHD (0) or _HND (1), got 2");
}

TEST_CASE("kv abi: rejects an fp8 cache as unsupported", "[c_abi][kv_cache]") {
  Call c;
  c.kc.t.dtype = {kDLFloat, 8, 1};
  c.vc.t.dtype = {kDLFloat, 8, 1};
  expect_status(c, KJIT_ERROR_UNSUPPORTED,
                "fp8 caches are written by kjit_append_paged_kv_cache_fp8");
  Call u;  // engines often hand fp8 storage over as uint8
  u.vc.t.dtype = {kDLUInt, 8, 1};
  expect_status(u, KJIT_ERROR_UNSUPPORTED, "paged_v_cache has an 8-bit dtype");
}

TEST_CASE("kv abi: rejects a 3-D cache", "[c_abi][kv_cache]") {
  Call c;
  c.kc = make_tensor(kKc, {16, 32, 128}, dl_dtype("bf16"));
  expect_invalid(c, "paged_k_cache must be [num_pages, page_size, num_kv_heads, head_dim] (NHD)");
}

TEST_CASE("kv abi: rejects a cache of another dtype than the append", "[c_abi][kv_cache]") {
  Call c;
  c.kc.t.dtype = c.vc.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "paged_k_cache is fp16 but append_k is bf16");
}

TEST_CASE("kv abi: rejects a v cache of another shape than the k cache", "[c_abi][kv_cache]") {
  Call c;
  c.vc = make_tensor(kVc, {8, 16, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "paged_v_cache dim 0 is 8 but paged_k_cache dim 0 is 16");
}

TEST_CASE("kv abi: rejects a cache with another head count", "[c_abi][kv_cache]") {
  Call c;
  c.kc = make_tensor(kKc, {16, 16, 4, 128}, dl_dtype("bf16"));
  c.vc = make_tensor(kVc, {16, 16, 4, 128}, dl_dtype("bf16"));
  expect_invalid(c, "paged_k_cache has 4 heads of 128 (NHD layout) but append_k has 2 heads");
}

TEST_CASE("kv abi: rejects a cache with another head_dim", "[c_abi][kv_cache]") {
  Call c;
  c.kc = make_tensor(kKc, {16, 16, 2, 64}, dl_dtype("bf16"));
  c.vc = make_tensor(kVc, {16, 16, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "paged_k_cache has 2 heads of 64");
}

TEST_CASE("kv abi: rejects an NHD-shaped cache under the HND layout", "[c_abi][kv_cache]") {
  Call c;
  c.layout = KJIT_KV_LAYOUT_HND;  // reads dim 1 (16) as the heads
  expect_invalid(c, "paged_k_cache has 16 heads of 128 (HND layout) but append_k has 2 heads");
}

TEST_CASE("kv abi: rejects a page size of zero", "[c_abi][kv_cache]") {
  Call c;
  c.kc = make_tensor(kKc, {16, 0, 2, 128}, dl_dtype("bf16"));
  c.vc = make_tensor(kVc, {16, 0, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "page_size (paged_k_cache dim 1) must be >= 1, got 0");
}

TEST_CASE("kv abi: rejects int64 kv_indices", "[c_abi][kv_cache]") {
  Call c;
  c.idx.t.dtype = dl_dtype("int64");
  expect_invalid(c, "kv_indices must be int32, got int64");
}

TEST_CASE("kv abi: rejects an empty kv_indptr", "[c_abi][kv_cache]") {
  Call c;
  c.ptr = make_tensor(kPtr, {0}, dl_dtype("int32"));
  expect_invalid(c, "kv_indptr must have batch + 1 >= 1 elements");
}

TEST_CASE("kv abi: rejects a kv_last_page_len of another batch", "[c_abi][kv_cache]") {
  Call c;
  c.last = make_tensor(kLast, {4}, dl_dtype("int32"));
  expect_invalid(c, "kv_last_page_len has 4 elements but kv_indptr says batch = 3");
}

TEST_CASE("kv abi: rejects a strided kv_indices", "[c_abi][kv_cache]") {
  Call c;
  c.idx = make_tensor(kIdx, {7}, dl_dtype("int32"), {2});
  expect_invalid(c, "kv_indices last dim has stride 2");
}

TEST_CASE("kv abi: rejects a cache whose slots overlap", "[c_abi][kv_cache]") {
  Call c;
  c.kc = make_tensor(kKc, {16, 16, 2, 128}, dl_dtype("bf16"), {0, 256, 128, 1});
  c.vc = make_tensor(kVc, {16, 16, 2, 128}, dl_dtype("bf16"), {0, 256, 128, 1});
  expect_invalid(c, "paged_k_cache has strides under which elements overlap");
}

TEST_CASE("kv abi: rejects a cache overlapping append_k", "[c_abi][kv_cache]") {
  Call c;
  c.ak = make_tensor(kKc + 4096, {5, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "paged_k_cache overlaps append_k");
}

TEST_CASE("kv abi: rejects a cache overlapping the page table", "[c_abi][kv_cache]") {
  Call c;
  c.idx = make_tensor(kVc + 64, {7}, dl_dtype("int32"));
  expect_invalid(c, "paged_v_cache overlaps kv_indices");
}

TEST_CASE("kv abi: rejects a v cache overlapping the k cache", "[c_abi][kv_cache]") {
  Call c;
  c.vc = make_tensor(kKc + 256, {16, 16, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "paged_v_cache overlaps paged_k_cache");
}

TEST_CASE("kv abi: rejects int32 data as unsupported", "[c_abi][kv_cache]") {
  Call c;
  for (Tensor* t : {&c.ak, &c.av, &c.kc, &c.vc}) t->t.dtype = dl_dtype("int32");
  expect_status(c, KJIT_ERROR_UNSUPPORTED,
                "append_paged_kv supports bf16, fp16 and fp32, not int32");
}

TEST_CASE("kv abi: rejects head_dim above 1024 as unsupported", "[c_abi][kv_cache]") {
  Call c;
  c.ak = make_tensor(kAk, {5, 2, 2048}, dl_dtype("bf16"));
  c.av = make_tensor(kAv, {5, 2, 2048}, dl_dtype("bf16"));
  c.kc = make_tensor(kKc, {4, 16, 2, 2048}, dl_dtype("bf16"));
  c.vc = make_tensor(kVc, {4, 16, 2, 2048}, dl_dtype("bf16"));
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "head_dim 1..1024, not 2048");
}

TEST_CASE("kv abi: zero tokens is a successful no-op, but still validated", "[c_abi][kv_cache]") {
  Call c;
  c.ak = make_tensor(nullptr, {0, 2, 128}, dl_dtype("bf16"));
  c.av = make_tensor(nullptr, {0, 2, 128}, dl_dtype("bf16"));
  c.bi = make_tensor(nullptr, {0}, dl_dtype("int32"));
  c.pos = make_tensor(nullptr, {0}, dl_dtype("int32"));
  CHECK(c.run() == KJIT_SUCCESS);
  CHECK(last_error().empty());
  c.layout = 7;
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("kv abi: accepts HND, a combined [pages, 2, ...] cache and fused kv views",
          "[c_abi][kv_cache]") {
  KJIT_RUN_WITHOUT_GPU();
  {
    Call c;
    c.layout = KJIT_KV_LAYOUT_HND;
    c.kc = make_tensor(kKc, {16, 2, 16, 128}, dl_dtype("bf16"));
    c.vc = make_tensor(kVc, {16, 2, 16, 128}, dl_dtype("bf16"));
    expect_valid(c);
  }
  {
    // k = cache[:, 0], v = cache[:, 1] of one [16, 2, 16, 2, 128] tensor: interleaved pages.
    Call c;
    const int64_t page = 16 * 2 * 128;
    c.kc = make_tensor(kKc, {16, 16, 2, 128}, dl_dtype("bf16"), {2 * page, 256, 128, 1});
    c.vc = make_tensor(kKc + page * 2, {16, 16, 2, 128}, dl_dtype("bf16"), {2 * page, 256, 128, 1});
    // append_k / append_v as the k and v parts of a [5, (8 + 2 + 2) * 128] qkv row.
    c.ak = make_tensor(kAk + 8 * 128 * 2, {5, 2, 128}, dl_dtype("bf16"), {12 * 128, 128, 1});
    c.av = make_tensor(kAk + 10 * 128 * 2, {5, 2, 128}, dl_dtype("bf16"), {12 * 128, 128, 1});
    expect_valid(c);
  }
  {
    Call c;  // misaligned by one element: scalar copies, not an error
    c.ak = make_tensor(kAk + 2, {5, 2, 128}, dl_dtype("bf16"));
    expect_valid(c);
  }
}

// ---- kjit_append_paged_kv_cache_fp8: the same call into e4m3 caches, with scales
// ------------------------------------------------------------------------------------

namespace {

// The valid call above into e4m3 caches with per-head scales.
struct Fp8Call : Call {
  Tensor ks = make_tensor(kKs, {2}, dl_dtype("fp32"));
  Tensor vs = make_tensor(kVs, {2}, dl_dtype("fp32"));
  bool null_k_scale = false;
  Fp8Call() { kc.t.dtype = vc.t.dtype = dl_dtype("e4m3"); }
  kjit_status run() {
    return kjit_append_paged_kv_cache_fp8(ak.get(), av.get(), bi.get(), pos.get(), idx.get(),
                                          ptr.get(), last.get(), null_k_scale ? nullptr : ks.get(),
                                          vs.get(), kc.get(), vc.get(),
                                          static_cast<kjit_kv_layout>(layout), nullptr);
  }
};

void expect_fp8(Fp8Call& c, kjit_status want, const char* fragment) {
  const kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find("kjit_append_paged_kv_cache_fp8") == 0);
}

}  // namespace

TEST_CASE("kv fp8 abi: exported and accepting per-tensor or per-head scales", "[c_abi][kv_cache]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_append_paged_kv_cache_fp8") != nullptr);
  dlclose(lib);
  KJIT_RUN_WITHOUT_GPU();
  Fp8Call per_head;
  CHECK(per_head.run() == KJIT_ERROR_NO_DEVICE);
  Fp8Call per_tensor;
  per_tensor.ks = make_tensor(kKs, {1}, dl_dtype("fp32"));
  per_tensor.vs = make_tensor(kVs, {1}, dl_dtype("fp32"));
  CHECK(per_tensor.run() == KJIT_ERROR_NO_DEVICE);
  Fp8Call fp32_in;  // fp32 appends into e4m3 too
  fp32_in.ak.t.dtype = fp32_in.av.t.dtype = dl_dtype("fp32");
  CHECK(fp32_in.run() == KJIT_ERROR_NO_DEVICE);
}

TEST_CASE("kv fp8 abi: rejects NULL scales", "[c_abi][kv_cache]") {
  Fp8Call c;
  c.null_k_scale = true;
  expect_fp8(c, KJIT_ERROR_INVALID_ARGUMENT, "k_scale is NULL");
}

TEST_CASE("kv fp8 abi: rejects scales of the wrong dtype or shape or pairing",
          "[c_abi][kv_cache]") {
  Fp8Call half;
  half.ks.t.dtype = dl_dtype("fp16");
  expect_fp8(half, KJIT_ERROR_INVALID_ARGUMENT, "k_scale must be fp32, got fp16");
  Fp8Call three;
  three.vs = make_tensor(kVs, {3}, dl_dtype("fp32"));
  expect_fp8(three, KJIT_ERROR_INVALID_ARGUMENT,
             "v_scale must be [1] (per tensor) or [num_kv_heads = 2] (per head)");
  Fp8Call two_d;
  two_d.ks = make_tensor(kKs, {1, 2}, dl_dtype("fp32"));
  expect_fp8(two_d, KJIT_ERROR_INVALID_ARGUMENT, "k_scale must be [1] (per tensor)");
  Fp8Call mixed;
  mixed.vs = make_tensor(kVs, {1}, dl_dtype("fp32"));
  expect_fp8(mixed, KJIT_ERROR_INVALID_ARGUMENT, "both per tensor or both per head");
}

TEST_CASE("kv fp8 abi: rejects caches that are not e4m3 and caches over a scale",
          "[c_abi][kv_cache]") {
  Fp8Call bf16;
  bf16.kc.t.dtype = bf16.vc.t.dtype = dl_dtype("bf16");
  expect_fp8(bf16, KJIT_ERROR_INVALID_ARGUMENT, "paged_k_cache must be float8_e4m3fn");
  Fp8Call e5m2_like;  // another 8-bit float: well-formed, not served
  e5m2_like.vc.t.dtype = {kDLFloat, 8, 1};
  expect_fp8(e5m2_like, KJIT_ERROR_UNSUPPORTED, "paged_v_cache must be float8_e4m3fn");
  Fp8Call over;
  over.ks.t.data = kKc;
  expect_fp8(over, KJIT_ERROR_INVALID_ARGUMENT, "paged_k_cache overlaps k_scale");
}

TEST_CASE("kv fp8: vector width follows the 1-byte cache and specs carry the cache", "[kv_cache]") {
  using kjit::ops::DType;
  // A 4-byte aligned e4m3 cache still takes 4-element vectors of a 16-byte aligned bf16 append.
  CHECK(ops::select_append_paged_kv(DType::kBF16, 128, 16, 0, false, true, 4).vec == 4);
  CHECK(ops::select_append_paged_kv(DType::kBF16, 128, 16, 0, false, true, 16).vec == 8);
  const ops::OpDef* d = ops::find_op("append_paged_kv");
  REQUIRE(d != nullptr);
  CHECK(d->make_spec({{"dtype", "bf16"}, {"head_dim", "128"}, {"cache", "e4m3"}}).uri ==
        "append_paged_kv_dtype_bf16_head_dim_128_vec_8_cache_fp8_1");
}

// ---- Pure parts
// ------------------------------------------------------------------------------------

TEST_CASE("kv: vector width, specs and catalog", "[kv_cache]") {
  using kjit::ops::DType;
  CHECK(ops::select_append_paged_kv(DType::kBF16, 128, 16).vec == 8);
  CHECK(ops::select_append_paged_kv(DType::kF32, 128, 16).vec == 4);
  CHECK(ops::select_append_paged_kv(DType::kF16, 80, 4).vec == 2);
  CHECK(ops::select_append_paged_kv(DType::kBF16, 100, 16).vec == 4);
  CHECK_THROWS_AS(ops::select_append_paged_kv(DType::kI32, 128, 16), kjit::Error);
  const ops::OpDef* d = ops::find_op("append_paged_kv");
  REQUIRE(d != nullptr);
  const auto cat = d->catalog();
  CHECK(cat.size() <= 40);
  std::set<std::string> uris;
  for (const auto& args : cat) uris.insert(d->make_spec(args).uri);
  CHECK(uris.size() == cat.size());
  CHECK(d->make_spec({{"dtype", "bf16"}, {"head_dim", "128"}}).uri ==
        "append_paged_kv_dtype_bf16_head_dim_128_vec_8");
}

TEST_CASE("kv: the reference skips exactly the documented out-of-range tokens", "[kv_cache]") {
  // Two requests: pages {3, 9} and {5}; page_size 4; 10 pages.
  const std::vector<int32_t> indptr = {0, 2, 3}, indices = {3, 9, 5};
  const std::vector<int32_t> bi = {0, 0, 1, 2, -1, 1, 0, 1};
  const std::vector<int32_t> pos = {0, 7, 3, 0, 0, 4, -1, 2};
  auto at = [&](int t) { return kjit::ref::append_target(bi, pos, indptr, indices, t, 4, 10); };
  REQUIRE(at(0));
  CHECK(at(0)->page == 3);
  CHECK(at(0)->slot == 0);
  REQUIRE(at(1));
  CHECK(at(1)->page == 9);
  CHECK(at(1)->slot == 3);
  REQUIRE(at(2));
  CHECK(at(2)->page == 5);
  CHECK_FALSE(at(3));  // request 2 does not exist
  CHECK_FALSE(at(4));  // negative request
  CHECK_FALSE(at(5));  // past request 1's only page
  CHECK_FALSE(at(6));  // negative position
  const std::vector<int32_t> bad_pages = {3, 10, 5};
  CHECK_FALSE(kjit::ref::append_target(bi, pos, indptr, bad_pages, 1, 4, 10));  // page id 10
}
