// The rope family without a GPU: the C ABI's argument checks (one test per rejected case, all
// rejected before any driver call), then the pure parts of the op: strided views and aliasing,
// vector-width choice, the frequency tables, specs and catalog.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "ops/rope/rope.hpp"
#include "reference/rope_ref.hpp"
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
char* const kQ = reinterpret_cast<char*>(0x10000000);
char* const kK = reinterpret_cast<char*>(0x20000000);
char* const kQo = reinterpret_cast<char*>(0x30000000);
char* const kKo = reinterpret_cast<char*>(0x40000000);
char* const kPos = reinterpret_cast<char*>(0x50000000);
char* const kCache = reinterpret_cast<char*>(0x60000000);

std::string last_error() {
  return kjit_last_error();
}

// kjit_apply_rope_pos_ids / kjit_apply_llama31_rope_pos_ids with valid defaults: 4 tokens, 8 q
// heads, 2 kv heads, head_dim 128, out of place.
struct PosIdsCall {
  Tensor q = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"));
  Tensor k = make_tensor(kK, {4, 2, 128}, dl_dtype("bf16"));
  Tensor q_out = make_tensor(kQo, {4, 8, 128}, dl_dtype("bf16"));
  Tensor k_out = make_tensor(kKo, {4, 2, 128}, dl_dtype("bf16"));
  Tensor pos = make_tensor(kPos, {4}, dl_dtype("int32"));
  int rotary_dim = 0;
  kjit_rope_layout layout = KJIT_ROPE_NEOX;
  float scale = 1.0f, theta = 10000.0f;
  bool llama31 = false;
  float low = 1.0f, high = 4.0f, old_ctx = 8192.0f;
  const char* name() const {
    return llama31 ? "kjit_apply_llama31_rope_pos_ids" : "kjit_apply_rope_pos_ids";
  }
  kjit_status run() {
    if (llama31) {
      return kjit_apply_llama31_rope_pos_ids(q.get(), k.get(), pos.get(), q_out.get(), k_out.get(),
                                             rotary_dim, layout, scale, theta, low, high, old_ctx,
                                             nullptr);
    }
    return kjit_apply_rope_pos_ids(q.get(), k.get(), pos.get(), q_out.get(), k_out.get(),
                                   rotary_dim, layout, scale, theta, nullptr);
  }
};

// kjit_apply_rope_with_cos_sin_cache with valid defaults: 4 tokens, q [4, 8*128], k [4, 2*128],
// a [4096, 128] fp32 cache, NeoX.
struct CacheCall {
  Tensor pos = make_tensor(kPos, {4}, dl_dtype("int64"));
  Tensor q = make_tensor(kQ, {4, 8 * 128}, dl_dtype("bf16"));
  Tensor k = make_tensor(kK, {4, 2 * 128}, dl_dtype("bf16"));
  Tensor cache = make_tensor(kCache, {4096, 128}, dl_dtype("fp32"));
  int head_size = 128;
  kjit_rope_layout layout = KJIT_ROPE_NEOX;
  bool no_k = false;
  const char* name() const { return "kjit_apply_rope_with_cos_sin_cache"; }
  kjit_status run() {
    return kjit_apply_rope_with_cos_sin_cache(pos.get(), cache.get(), q.get(),
                                              no_k ? nullptr : k.get(), head_size, layout, nullptr);
  }
};

template <typename C>
void expect_status(C& c, kjit_status want, const char* fragment) {
  kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find(c.name()) == 0);  // the guard names the entry point
}

template <typename C>
void expect_invalid(C& c, const char* fragment) {
  expect_status(c, KJIT_ERROR_INVALID_ARGUMENT, fragment);
}

// What a valid call returns here: it passes validation and stops at the missing driver.
template <typename C>
void expect_valid(C& c) {
  // Only reached without a GPU: the test case starts with KJIT_RUN_WITHOUT_GPU().
  REQUIRE_FALSE(kjit::test::gpu_available());
  kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == KJIT_ERROR_NO_DEVICE);
}

}  // namespace

TEST_CASE("rope abi: libkjit.so exports the three entry points", "[c_abi][rope]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_apply_rope_pos_ids") != nullptr);
  CHECK(dlsym(lib, "kjit_apply_llama31_rope_pos_ids") != nullptr);
  CHECK(dlsym(lib, "kjit_apply_rope_with_cos_sin_cache") != nullptr);
  dlclose(lib);
}

// ---- kjit_apply_rope_pos_ids: tensors
// ------------------------------------------------------------

TEST_CASE("rope abi: pos_ids rejects a NULL q", "[c_abi][rope]") {
  PosIdsCall c;
  CHECK(kjit_apply_rope_pos_ids(nullptr, c.k.get(), c.pos.get(), c.q_out.get(), c.k_out.get(), 0,
                                KJIT_ROPE_NEOX, 1.0f, 1e4f,
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("q is NULL") != std::string::npos);
}

TEST_CASE("rope abi: pos_ids rejects a NULL k", "[c_abi][rope]") {
  PosIdsCall c;
  CHECK(kjit_apply_rope_pos_ids(c.q.get(), nullptr, c.pos.get(), c.q_out.get(), c.k_out.get(), 0,
                                KJIT_ROPE_NEOX, 1.0f, 1e4f,
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("k is NULL") != std::string::npos);
}

TEST_CASE("rope abi: pos_ids rejects a NULL q_out", "[c_abi][rope]") {
  PosIdsCall c;
  CHECK(kjit_apply_rope_pos_ids(c.q.get(), c.k.get(), c.pos.get(), nullptr, c.k_out.get(), 0,
                                KJIT_ROPE_NEOX, 1.0f, 1e4f,
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("q_out is NULL") != std::string::npos);
}

TEST_CASE("rope abi: pos_ids rejects a NULL k_out", "[c_abi][rope]") {
  PosIdsCall c;
  CHECK(kjit_apply_rope_pos_ids(c.q.get(), c.k.get(), c.pos.get(), c.q_out.get(), nullptr, 0,
                                KJIT_ROPE_NEOX, 1.0f, 1e4f,
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("k_out is NULL") != std::string::npos);
}

TEST_CASE("rope abi: pos_ids rejects a NULL pos_ids", "[c_abi][rope]") {
  PosIdsCall c;
  CHECK(kjit_apply_rope_pos_ids(c.q.get(), c.k.get(), nullptr, c.q_out.get(), c.k_out.get(), 0,
                                KJIT_ROPE_NEOX, 1.0f, 1e4f,
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("pos_ids is NULL") != std::string::npos);
}

TEST_CASE("rope abi: pos_ids rejects NULL data with elements", "[c_abi][rope]") {
  PosIdsCall c;
  c.k.t.data = nullptr;
  expect_invalid(c, "k data is NULL");
}

TEST_CASE("rope abi: pos_ids rejects a 2-D q", "[c_abi][rope]") {
  PosIdsCall c;
  c.q = make_tensor(kQ, {4, 8 * 128}, dl_dtype("bf16"));
  expect_invalid(c, "q must be [tokens, num_qo_heads, head_dim], got ndim 2");
}

TEST_CASE("rope abi: pos_ids rejects a 4-D k", "[c_abi][rope]") {
  PosIdsCall c;
  c.k = make_tensor(kK, {4, 1, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "k must be [tokens, num_kv_heads, head_dim], got ndim 4");
}

TEST_CASE("rope abi: pos_ids rejects a k with another token count", "[c_abi][rope]") {
  PosIdsCall c;
  c.k = make_tensor(kK, {3, 2, 128}, dl_dtype("bf16"));
  c.k_out = make_tensor(kKo, {3, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "k has 3 tokens but q has 4");
}

TEST_CASE("rope abi: pos_ids rejects a k with another head_dim", "[c_abi][rope]") {
  PosIdsCall c;
  c.k = make_tensor(kK, {4, 2, 64}, dl_dtype("bf16"));
  c.k_out = make_tensor(kKo, {4, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "k has head_dim 64 but q has 128");
}

TEST_CASE("rope abi: pos_ids rejects a q_out of another shape", "[c_abi][rope]") {
  PosIdsCall c;
  c.q_out = make_tensor(kQo, {4, 7, 128}, dl_dtype("bf16"));
  expect_invalid(c, "q_out dim 1 is 7 but q dim 1 is 8");
}

TEST_CASE("rope abi: pos_ids rejects a k_out of another shape", "[c_abi][rope]") {
  PosIdsCall c;
  c.k_out = make_tensor(kKo, {4, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "k_out dim 2 is 64 but k dim 2 is 128");
}

TEST_CASE("rope abi: pos_ids rejects k of another dtype", "[c_abi][rope]") {
  PosIdsCall c;
  c.k.t.dtype = c.k_out.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "k is fp16 but q is bf16");
}

TEST_CASE("rope abi: pos_ids rejects q_out of another dtype", "[c_abi][rope]") {
  PosIdsCall c;
  c.q_out.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "q_out is fp16 but q is bf16");
}

TEST_CASE("rope abi: pos_ids rejects fp32 q/k as unsupported", "[c_abi][rope]") {
  PosIdsCall c;
  for (Tensor* t : {&c.q, &c.k, &c.q_out, &c.k_out}) t->t.dtype = dl_dtype("fp32");
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "rope supports bf16 and fp16 q/k, not fp32");
}

TEST_CASE("rope abi: pos_ids rejects an unknown dtype code", "[c_abi][rope]") {
  PosIdsCall c;
  c.q.t.dtype = {kDLOpaqueHandle, 8, 1};
  expect_invalid(c, "q has unsupported dtype");
}

TEST_CASE("rope abi: pos_ids rejects host memory", "[c_abi][rope]") {
  PosIdsCall c;
  c.q.t.device = {kDLCPU, 0};
  expect_invalid(c, "q is on device type 1");
}

TEST_CASE("rope abi: pos_ids rejects tensors on different devices", "[c_abi][rope]") {
  PosIdsCall c;
  c.k_out.t.device.device_id = 1;
  expect_invalid(c, "k_out is on cuda:1 but q is on cuda:0");
}

TEST_CASE("rope abi: pos_ids rejects a non-contiguous last dim", "[c_abi][rope]") {
  PosIdsCall c;
  c.q = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"), {2048, 256, 2});
  expect_invalid(c, "q last dim has stride 2 (must be contiguous)");
}

TEST_CASE("rope abi: pos_ids rejects a negative stride", "[c_abi][rope]") {
  PosIdsCall c;
  c.k = make_tensor(kK + 4096, {4, 2, 128}, dl_dtype("bf16"), {-256, 128, 1});
  expect_invalid(c, "k dim 0 has negative stride -256");
}

TEST_CASE("rope abi: pos_ids rejects data not aligned to its elements", "[c_abi][rope]") {
  PosIdsCall c;
  c.q.t.byte_offset = 1;
  expect_invalid(c, "q data is not aligned to its 2-byte elements");
}

TEST_CASE("rope abi: pos_ids rejects q_out partially overlapping q", "[c_abi][rope]") {
  PosIdsCall c;
  c.q_out = make_tensor(kQ + 256, {4, 8, 128}, dl_dtype("bf16"));
  expect_invalid(c, "q_out overlaps q without being the same view");
}

TEST_CASE("rope abi: pos_ids rejects q_out overlapping k", "[c_abi][rope]") {
  PosIdsCall c;
  c.q_out = make_tensor(kK, {4, 8, 128}, dl_dtype("bf16"));
  expect_invalid(c, "q_out overlaps k");
}

TEST_CASE("rope abi: pos_ids rejects q_out overlapping k_out", "[c_abi][rope]") {
  PosIdsCall c;
  c.k_out = make_tensor(kQo + 512, {4, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "q_out overlaps k_out");
}

TEST_CASE("rope abi: pos_ids rejects k_out partially overlapping k", "[c_abi][rope]") {
  PosIdsCall c;
  c.k_out = make_tensor(kK + 2, {4, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "k_out overlaps k without being the same view");
}

TEST_CASE("rope abi: pos_ids rejects k_out overlapping q", "[c_abi][rope]") {
  PosIdsCall c;
  c.k_out = make_tensor(kQ + 1024, {4, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "k_out overlaps q");
}

TEST_CASE("rope abi: pos_ids rejects an output whose elements overlap", "[c_abi][rope]") {
  PosIdsCall c;
  c.q_out = make_tensor(kQo, {4, 8, 128}, dl_dtype("bf16"), {1024, 0, 1});
  expect_invalid(c, "q_out has strides under which elements overlap");
}

TEST_CASE("rope abi: pos_ids rejects a 2-D pos_ids", "[c_abi][rope]") {
  PosIdsCall c;
  c.pos = make_tensor(kPos, {2, 2}, dl_dtype("int32"));
  expect_invalid(c, "pos_ids must be [tokens], got ndim 2");
}

TEST_CASE("rope abi: pos_ids rejects a float pos_ids", "[c_abi][rope]") {
  PosIdsCall c;
  c.pos.t.dtype = dl_dtype("fp32");
  expect_invalid(c, "pos_ids must be int32 or int64, got fp32");
}

TEST_CASE("rope abi: pos_ids rejects a pos_ids of another length", "[c_abi][rope]") {
  PosIdsCall c;
  c.pos = make_tensor(kPos, {5}, dl_dtype("int64"));
  expect_invalid(c, "pos_ids has 5 elements but q has 4 tokens");
}

TEST_CASE("rope abi: pos_ids rejects a strided pos_ids", "[c_abi][rope]") {
  PosIdsCall c;
  c.pos = make_tensor(kPos, {4}, dl_dtype("int32"), {2});
  expect_invalid(c, "pos_ids last dim has stride 2");
}

TEST_CASE("rope abi: pos_ids rejects pos_ids on another device", "[c_abi][rope]") {
  PosIdsCall c;
  c.pos.t.device.device_id = 2;
  expect_invalid(c, "pos_ids is on cuda:2 but q is on cuda:0");
}

TEST_CASE("rope abi: pos_ids rejects an output overlapping pos_ids", "[c_abi][rope]") {
  PosIdsCall c;
  c.pos = make_tensor(kKo + 8, {4}, dl_dtype("int32"));
  expect_invalid(c, "k_out overlaps pos_ids");
}

// ---- kjit_apply_rope_pos_ids: scalars
// ------------------------------------------------------------

TEST_CASE("rope abi: pos_ids rejects an odd rotary_dim", "[c_abi][rope]") {
  PosIdsCall c;
  c.rotary_dim = 63;
  expect_invalid(c, "rotary_dim must be even and in 2..head_dim (128), got 63");
}

TEST_CASE("rope abi: pos_ids rejects a rotary_dim above head_dim", "[c_abi][rope]") {
  PosIdsCall c;
  c.rotary_dim = 130;
  expect_invalid(c, "rotary_dim must be even and in 2..head_dim (128), got 130");
}

TEST_CASE("rope abi: pos_ids rejects a negative rotary_dim", "[c_abi][rope]") {
  PosIdsCall c;
  c.rotary_dim = -2;
  expect_invalid(c, "got -2");
}

TEST_CASE("rope abi: pos_ids rejects a layout outside kjit_rope_layout", "[c_abi][rope]") {
  PosIdsCall c;
  c.layout = static_cast<kjit_rope_layout>(2);
  expect_invalid(c, "layout must be KJIT_ROPE_NEOX (0) or KJIT_ROPE_INTERLEAVED (1), got 2");
  c.llama31 = true;
  c.layout = static_cast<kjit_rope_layout>(-1);
  expect_invalid(c, "layout must be KJIT_ROPE_NEOX (0) or KJIT_ROPE_INTERLEAVED (1), got -1");
}

TEST_CASE("rope abi: pos_ids rejects a zero, negative, NaN or infinite rope_scale",
          "[c_abi][rope]") {
  for (float s : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    PosIdsCall c;
    c.scale = s;
    expect_invalid(c, "rope_scale must be finite and > 0");
  }
}

TEST_CASE("rope abi: pos_ids rejects a zero, negative, NaN or infinite rope_theta",
          "[c_abi][rope]") {
  for (float t : {0.0f, -1e4f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()}) {
    PosIdsCall c;
    c.theta = t;
    expect_invalid(c, "rope_theta must be finite and > 0");
  }
}

TEST_CASE("rope abi: pos_ids rejects head_dim above 1024 as unsupported", "[c_abi][rope]") {
  PosIdsCall c;
  c.q = make_tensor(kQ, {4, 8, 2048}, dl_dtype("bf16"));
  c.k = make_tensor(kK, {4, 2, 2048}, dl_dtype("bf16"));
  c.q_out = make_tensor(kQo, {4, 8, 2048}, dl_dtype("bf16"));
  c.k_out = make_tensor(kKo, {4, 2, 2048}, dl_dtype("bf16"));
  c.rotary_dim = 128;
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "head_dim up to 1024, not 2048");
}

TEST_CASE("rope abi: pos_ids rejects rotary_dim above 512 as unsupported", "[c_abi][rope]") {
  PosIdsCall c;
  c.q = make_tensor(kQ, {4, 8, 1024}, dl_dtype("bf16"));
  c.k = make_tensor(kK, {4, 2, 1024}, dl_dtype("bf16"));
  c.q_out = make_tensor(kQo, {4, 8, 1024}, dl_dtype("bf16"));
  c.k_out = make_tensor(kKo, {4, 2, 1024}, dl_dtype("bf16"));
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "rotary_dim up to 512, not 1024");
}

// ---- kjit_apply_llama31_rope_pos_ids: its own scalars -------------------------------------------

TEST_CASE("rope abi: llama31 rejects a non-positive low_freq_factor", "[c_abi][rope]") {
  PosIdsCall c;
  c.llama31 = true;
  c.low = 0.0f;
  expect_invalid(c, "low_freq_factor must be finite and > 0");
}

TEST_CASE("rope abi: llama31 rejects high_freq_factor <= low_freq_factor", "[c_abi][rope]") {
  PosIdsCall c;
  c.llama31 = true;
  c.high = 1.0f;
  expect_invalid(c, "high_freq_factor must be finite and > low_freq_factor (1), got 1");
}

TEST_CASE("rope abi: llama31 rejects a NaN high_freq_factor", "[c_abi][rope]") {
  PosIdsCall c;
  c.llama31 = true;
  c.high = std::numeric_limits<float>::quiet_NaN();
  expect_invalid(c, "high_freq_factor must be finite");
}

TEST_CASE("rope abi: llama31 rejects a non-finite old_context_len", "[c_abi][rope]") {
  PosIdsCall c;
  c.llama31 = true;
  c.old_ctx = std::numeric_limits<float>::infinity();
  expect_invalid(c, "old_context_len must be finite and > 0");
}

TEST_CASE("rope abi: llama31 checks the shared arguments too", "[c_abi][rope]") {
  PosIdsCall c;
  c.llama31 = true;
  c.scale = -8.0f;
  expect_invalid(c, "rope_scale must be finite and > 0");
}

// ---- kjit_apply_rope_pos_ids: what is accepted -------------------------------------------------

TEST_CASE("rope abi: pos_ids zero tokens is a successful no-op, but still validated",
          "[c_abi][rope]") {
  PosIdsCall c;
  c.q = make_tensor(nullptr, {0, 8, 128}, dl_dtype("bf16"));
  c.k = make_tensor(nullptr, {0, 2, 128}, dl_dtype("bf16"));
  c.q_out = make_tensor(nullptr, {0, 8, 128}, dl_dtype("bf16"));
  c.k_out = make_tensor(nullptr, {0, 2, 128}, dl_dtype("bf16"));
  c.pos = make_tensor(nullptr, {0}, dl_dtype("int32"));
  CHECK(c.run() == KJIT_SUCCESS);
  CHECK(last_error().empty());
  c.rotary_dim = 3;
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("rope abi: pos_ids accepts in place, fused qkv views and misaligned views",
          "[c_abi][rope]") {
  KJIT_RUN_WITHOUT_GPU();
  {
    PosIdsCall c;  // in place: the outputs are the inputs' exact views
    c.q_out = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"));
    c.k_out = make_tensor(kK, {4, 2, 128}, dl_dtype("bf16"));
    expect_valid(c);
  }
  {
    // q and k as views of one [tokens, (8 + 2 + 2) * 128] qkv row: their address ranges
    // interleave but no element is shared.
    PosIdsCall c;
    c.q = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"), {12 * 128, 128, 1});
    c.k = make_tensor(kQ + 8 * 128 * 2, {4, 2, 128}, dl_dtype("bf16"), {12 * 128, 128, 1});
    c.q_out = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"), {12 * 128, 128, 1});
    c.k_out = make_tensor(kQ + 8 * 128 * 2, {4, 2, 128}, dl_dtype("bf16"), {12 * 128, 128, 1});
    expect_valid(c);
  }
  {
    PosIdsCall c;  // one element off 16-byte alignment: the scalar path, not an error
    c.q = make_tensor(kQ + 2, {4, 8, 128}, dl_dtype("bf16"));
    c.layout = KJIT_ROPE_INTERLEAVED;
    c.rotary_dim = 64;
    expect_valid(c);
  }
}

// ---- kjit_apply_rope_with_cos_sin_cache
// ----------------------------------------------------------

TEST_CASE("rope abi: cos_sin_cache rejects a NULL positions", "[c_abi][rope]") {
  CacheCall c;
  CHECK(kjit_apply_rope_with_cos_sin_cache(nullptr, c.cache.get(), c.q.get(), c.k.get(), 128,
                                           KJIT_ROPE_NEOX, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("positions is NULL") != std::string::npos);
}

TEST_CASE("rope abi: cos_sin_cache rejects a NULL q", "[c_abi][rope]") {
  CacheCall c;
  CHECK(kjit_apply_rope_with_cos_sin_cache(c.pos.get(), c.cache.get(), nullptr, c.k.get(), 128,
                                           KJIT_ROPE_NEOX, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("q is NULL") != std::string::npos);
}

TEST_CASE("rope abi: cos_sin_cache rejects a NULL cache", "[c_abi][rope]") {
  CacheCall c;
  CHECK(kjit_apply_rope_with_cos_sin_cache(c.pos.get(), nullptr, c.q.get(), c.k.get(), 128,
                                           KJIT_ROPE_NEOX, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("cos_sin_cache is NULL") != std::string::npos);
}

TEST_CASE("rope abi: cos_sin_cache rejects a non-positive head_size", "[c_abi][rope]") {
  CacheCall c;
  c.head_size = 0;
  expect_invalid(c, "head_size must be > 0, got 0");
}

TEST_CASE("rope abi: cos_sin_cache rejects a q row that is not whole heads", "[c_abi][rope]") {
  CacheCall c;
  c.q = make_tensor(kQ, {4, 1000}, dl_dtype("bf16"));
  expect_invalid(c, "q row of 1000 is not a multiple of head_size 128");
}

TEST_CASE("rope abi: cos_sin_cache rejects a 3-D q with another head size", "[c_abi][rope]") {
  CacheCall c;
  c.q = make_tensor(kQ, {4, 8, 64}, dl_dtype("bf16"));
  expect_invalid(c, "q last dim is 64 but head_size is 128");
}

TEST_CASE("rope abi: cos_sin_cache rejects a 4-D q", "[c_abi][rope]") {
  CacheCall c;
  c.q = make_tensor(kQ, {1, 4, 8, 128}, dl_dtype("bf16"));
  expect_invalid(c, "q must be [tokens, heads * head_size] or [tokens, heads, head_size]");
}

TEST_CASE("rope abi: cos_sin_cache rejects k of another dtype", "[c_abi][rope]") {
  CacheCall c;
  c.k.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "k is fp16 but q is bf16");
}

TEST_CASE("rope abi: cos_sin_cache rejects k with another token count", "[c_abi][rope]") {
  CacheCall c;
  c.k = make_tensor(kK, {5, 256}, dl_dtype("bf16"));
  expect_invalid(c, "k has 5 tokens but q has 4");
}

TEST_CASE("rope abi: cos_sin_cache rejects k overlapping q", "[c_abi][rope]") {
  CacheCall c;
  c.k = make_tensor(kQ + 512, {4, 256}, dl_dtype("bf16"));
  expect_invalid(c, "k overlaps q");
}

TEST_CASE("rope abi: cos_sin_cache rejects a q whose elements overlap", "[c_abi][rope]") {
  CacheCall c;
  c.q = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"), {0, 128, 1});
  expect_invalid(c, "q has strides under which elements overlap");
}

TEST_CASE("rope abi: cos_sin_cache rejects positions of another length", "[c_abi][rope]") {
  CacheCall c;
  c.pos = make_tensor(kPos, {3}, dl_dtype("int64"));
  expect_invalid(c, "positions has 3 elements but q has 4 tokens");
}

TEST_CASE("rope abi: cos_sin_cache rejects float positions", "[c_abi][rope]") {
  CacheCall c;
  c.pos.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "positions must be int32 or int64, got fp16");
}

TEST_CASE("rope abi: cos_sin_cache rejects a 1-D cache", "[c_abi][rope]") {
  CacheCall c;
  c.cache = make_tensor(kCache, {4096 * 128}, dl_dtype("fp32"));
  expect_invalid(c, "cos_sin_cache must be [max_position, rotary_dim], got ndim 1");
}

TEST_CASE("rope abi: cos_sin_cache rejects a cache of a third dtype", "[c_abi][rope]") {
  CacheCall c;
  c.cache.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "cos_sin_cache must be fp32 or q's dtype (bf16), got fp16");
}

TEST_CASE("rope abi: cos_sin_cache rejects an odd rotary_dim", "[c_abi][rope]") {
  CacheCall c;
  c.cache = make_tensor(kCache, {4096, 63}, dl_dtype("fp32"));
  expect_invalid(c, "must be even and in 2..head_size (128), got 63");
}

TEST_CASE("rope abi: cos_sin_cache rejects a rotary_dim above head_size", "[c_abi][rope]") {
  CacheCall c;
  c.cache = make_tensor(kCache, {4096, 256}, dl_dtype("fp32"));
  expect_invalid(c, "must be even and in 2..head_size (128), got 256");
}

TEST_CASE("rope abi: cos_sin_cache rejects a cache on another device", "[c_abi][rope]") {
  CacheCall c;
  c.cache.t.device.device_id = 3;
  expect_invalid(c, "cos_sin_cache is on cuda:3 but q is on cuda:0");
}

TEST_CASE("rope abi: cos_sin_cache rejects q overlapping the cache", "[c_abi][rope]") {
  CacheCall c;
  c.q = make_tensor(kCache + 64, {4, 8 * 128}, dl_dtype("bf16"));
  expect_invalid(c, "q overlaps cos_sin_cache");
}

TEST_CASE("rope abi: cos_sin_cache rejects k overlapping positions", "[c_abi][rope]") {
  CacheCall c;
  c.pos = make_tensor(kK + 16, {4}, dl_dtype("int64"));
  expect_invalid(c, "k overlaps positions");
}

TEST_CASE("rope abi: cos_sin_cache rejects a layout outside kjit_rope_layout", "[c_abi][rope]") {
  CacheCall c;
  c.layout = static_cast<kjit_rope_layout>(-1);
  expect_invalid(c, "layout must be KJIT_ROPE_NEOX (0) or KJIT_ROPE_INTERLEAVED (1), got -1");
}

TEST_CASE("rope abi: cos_sin_cache rejects fp32 q as unsupported", "[c_abi][rope]") {
  CacheCall c;
  c.q.t.dtype = c.k.t.dtype = dl_dtype("fp32");
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "rope supports bf16 and fp16 q/k, not fp32");
}

TEST_CASE("rope abi: cos_sin_cache accepts a NULL k, a q-dtype cache and 3-D views",
          "[c_abi][rope]") {
  KJIT_RUN_WITHOUT_GPU();
  {
    CacheCall c;
    c.no_k = true;
    expect_valid(c);
  }
  {
    CacheCall c;
    c.cache.t.dtype = dl_dtype("bf16");
    c.q = make_tensor(kQ, {4, 8, 128}, dl_dtype("bf16"), {4096, 256, 1});
    c.layout = KJIT_ROPE_INTERLEAVED;
    expect_valid(c);
  }
}

TEST_CASE("rope abi: cos_sin_cache zero tokens is a successful no-op", "[c_abi][rope]") {
  CacheCall c;
  c.pos = make_tensor(nullptr, {0}, dl_dtype("int64"));
  c.q = make_tensor(nullptr, {0, 1024}, dl_dtype("bf16"));
  c.k = make_tensor(nullptr, {0, 256}, dl_dtype("bf16"));
  CHECK(c.run() == KJIT_SUCCESS);
  c.layout = static_cast<kjit_rope_layout>(5);
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

// ---- Pure parts
// ------------------------------------------------------------------------------------

TEST_CASE("rope: strided views, overlap and alignment", "[rope]") {
  char* base = reinterpret_cast<char*>(0x100000);
  auto view = [](Tensor& t) { return ops::as_strided_view(t.get(), "t"); };
  // Fused qkv [4, (8 + 2 + 2) * 128]: q and k interleave by address but share nothing.
  Tensor q = make_tensor(base, {4, 8, 128}, dl_dtype("bf16"), {1536, 128, 1});
  Tensor k = make_tensor(base + 2048, {4, 2, 128}, dl_dtype("bf16"), {1536, 128, 1});
  Tensor v = make_tensor(base + 2560, {4, 2, 128}, dl_dtype("bf16"), {1536, 128, 1});
  CHECK_FALSE(ops::views_overlap(view(q), view(k)));
  CHECK_FALSE(ops::views_overlap(view(k), view(v)));
  CHECK_FALSE(ops::views_overlap(view(v), view(q)));  // wraps around the row period
  Tensor k2 = make_tensor(base + 2046, {4, 2, 128}, dl_dtype("bf16"), {1536, 128, 1});
  CHECK(ops::views_overlap(view(q), view(k2)));
  Tensor far = make_tensor(base + 65536, {4, 8, 128}, dl_dtype("bf16"));
  CHECK_FALSE(ops::views_overlap(view(q), view(far)));
  CHECK(ops::same_view(view(q), view(q)));
  CHECK_FALSE(ops::same_view(view(q), view(far)));
  // Heads outermost (a transposed [heads, tokens, dim] tensor) is a valid output.
  Tensor tr = make_tensor(base, {4, 8, 128}, dl_dtype("bf16"), {128, 512, 1});
  CHECK_FALSE(ops::self_overlaps(view(tr)));
  Tensor bad = make_tensor(base, {4, 8, 128}, dl_dtype("bf16"), {128, 64, 1});
  CHECK(ops::self_overlaps(view(bad)));
  CHECK(ops::view_alignment(view(q)) == 16);
  Tensor odd = make_tensor(base, {4, 8, 128}, dl_dtype("bf16"), {1536, 130, 1});
  CHECK(ops::view_alignment(view(odd)) == 4);
  Tensor one = make_tensor(base + 6, {1, 1, 128}, dl_dtype("bf16"), {7, 3, 1});
  CHECK(ops::view_alignment(view(one)) == 2);  // size-1 dims do not count, the address does
  // A size-1 outer dim's stride is never checked, so it may be anything, even what would
  // overflow times the element size (found by fuzz_dltensor under UBSan); the overlap test
  // never uses it.
  Tensor wild = make_tensor(base, {1, 2, 128}, dl_dtype("bf16"), {INT64_MIN / 2 - 1, 128, 1});
  CHECK(ops::views_overlap(view(wild), view(q)));
  CHECK(ops::views_overlap(view(q), view(wild)));
  CHECK_FALSE(ops::views_overlap(view(wild), view(far)));
}

TEST_CASE("rope: vector width follows head, rotated runs and alignment", "[rope]") {
  using kjit::ops::DType;
  using ops::RopeMode;
  CHECK(ops::select_rope(RopeMode::kFreq, DType::kBF16, 128, 128, false, 16).vec == 8);
  CHECK(ops::select_rope(RopeMode::kFreq, DType::kBF16, 128, 128, false, 4).vec == 2);
  CHECK(ops::select_rope(RopeMode::kFreq, DType::kBF16, 128, 128, true, 2).vec == 1);
  CHECK(ops::select_rope(RopeMode::kFreq, DType::kF16, 80, 20, false, 16).vec == 2);  // half 10
  CHECK(ops::select_rope(RopeMode::kFreq, DType::kF16, 80, 20, true, 16).vec == 4);   // run 20
  CHECK(ops::select_rope(RopeMode::kCache, DType::kBF16, 96, 24, false, 16).vec == 4);
  CHECK_THROWS_AS(ops::select_rope(RopeMode::kFreq, DType::kF32, 128, 128, false, 16), kjit::Error);
  CHECK_THROWS_AS(ops::select_rope(RopeMode::kFreq, DType::kBF16, 128, 130, false, 16),
                  kjit::Error);
}

TEST_CASE("rope: the decode kernel serves shapes whose units a warp covers", "[rope]") {
  using kjit::ops::DType;
  using ops::RopeMode;
  auto ok = [](RopeMode m, DType dt, int hd, int rd, bool il, int align) {
    return ops::rope_decode_supported(ops::select_rope(m, dt, hd, rd, il, align));
  };
  CHECK(ok(RopeMode::kFreq, DType::kBF16, 128, 128, false, 16));      // 8 units, 2 angles a lane
  CHECK(ok(RopeMode::kFreq, DType::kF16, 64, 64, false, 16));         // 4 units, 1
  CHECK(ok(RopeMode::kFreq, DType::kBF16, 256, 256, false, 16));      // 16 units, 4
  CHECK(ok(RopeMode::kFreq, DType::kBF16, 1024, 512, false, 16));     // 32 units, 8
  CHECK(ok(RopeMode::kCache, DType::kBF16, 128, 64, true, 16));       // GPT-J, 8 units
  CHECK(ok(RopeMode::kFreq, DType::kBF16, 128, 128, false, 4));       // 2-element vectors, 32 units
  CHECK(ok(RopeMode::kFreq, DType::kBF16, 80, 32, false, 16));        // 2 units, 16 lanes idle
  CHECK_FALSE(ok(RopeMode::kFreq, DType::kBF16, 96, 96, false, 16));  // 6 units
  CHECK_FALSE(ok(RopeMode::kFreq, DType::kF16, 80, 20, false, 16));   // 5 units
  CHECK_FALSE(ok(RopeMode::kFreq, DType::kBF16, 128, 128, true, 2));  // scalar pairs: 64 units
}

TEST_CASE("rope: the op's frequency tables match the independent reference", "[rope]") {
  for (int rot : {2, 64, 128, 512}) {
    auto a = ops::rope_inv_freq(rot, 2.0, 10000.0);
    auto b = kjit::ref::rope_inv_freq(rot, 2.0, 10000.0);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-14));
    // Llama 3.1: the op's clamped blend and Meta's piecewise bands agree everywhere.
    auto c = ops::llama31_inv_freq(rot, 8.0, 500000.0, 1.0, 4.0, 8192.0);
    auto d = kjit::ref::llama31_inv_freq(rot, 8.0, 500000.0, 1.0, 4.0, 8192.0);
    REQUIRE(c.size() == d.size());
    for (size_t i = 0; i < c.size(); ++i) CHECK(c[i] == Approx(d[i]).epsilon(1e-14));
  }
}

TEST_CASE("rope: specs and catalog", "[rope]") {
  const ops::OpDef* d = ops::find_op("rope");
  REQUIRE(d != nullptr);
  const auto cat = d->catalog();
  CHECK(cat.size() <= 45);
  std::set<std::string> uris;
  for (const auto& args : cat) {
    kjit::jit::Spec s = d->make_spec(args);
    CHECK(s.uri.rfind("rope_mode_", 0) == 0);
    CHECK(s.entry_names.size() == 1);
    uris.insert(s.uri);
  }
  CHECK(uris.size() == cat.size());  // no two catalog entries compile the same thing
  auto s = d->make_spec({{"mode", "freq"}, {"dtype", "bf16"}, {"head_dim", "128"}});
  CHECK(s.uri == "rope_mode_freq_dtype_bf16_head_dim_128_rot_dim_128_interleave_0_vec_8");
  // The decode kernel: its own entry, and the early-position variant only with it.
  s = d->make_spec(
      {{"mode", "freq"}, {"dtype", "bf16"}, {"head_dim", "128"}, {"layout", "decode"}});
  CHECK(s.uri == "rope_mode_freq_dtype_bf16_head_dim_128_rot_dim_128_interleave_0_vec_8_decode_1");
  CHECK(s.entry_names.at(0).rfind("kjit::rope::rope_decode_kernel<", 0) == 0);
  s = d->make_spec({{"mode", "cache"},
                    {"dtype", "fp16"},
                    {"head_dim", "64"},
                    {"layout", "decode"},
                    {"early", "1"}});
  CHECK(s.uri ==
        "rope_mode_cache_dtype_fp16_head_dim_64_rot_dim_64_interleave_0_vec_8_decode_1_"
        "early_pos_1");
  CHECK(s.config.find("constexpr bool early_pos = true;") != std::string::npos);
  CHECK_THROWS_AS(
      d->make_spec({{"mode", "freq"}, {"dtype", "bf16"}, {"head_dim", "128"}, {"early", "1"}}),
      kjit::Error);
  // Six units a head (NeoX 96 at 8-element vectors): a warp cannot cover them.
  CHECK_THROWS_AS(
      d->make_spec({{"mode", "freq"}, {"dtype", "bf16"}, {"head_dim", "96"}, {"layout", "decode"}}),
      kjit::Error);
  CHECK_THROWS_AS(d->make_spec({{"mode", "freq"}, {"dtype", "fp32"}, {"head_dim", "128"}}),
                  kjit::Error);
  CHECK_THROWS_AS(d->make_spec({{"mode", "freq"}, {"dtype", "bf16"}, {"head_dim", "2000"}}),
                  kjit::Error);
}
