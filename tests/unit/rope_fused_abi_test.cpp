// The fused RoPE ops without a GPU (kjit_rope_append_paged_kv_cache, kjit_qk_rmsnorm_rope): the
// C ABI's own checks (the generic ones are the hostile-input table's), all before any driver
// call, then the pure parts: the vector width against the caches' alignment, the specs and the
// descriptors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "jit/arch.hpp"
#include "jit/cubin_info.hpp"
#include "jit/settings.hpp"
#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "ops/rope/qk_norm_rope.hpp"
#include "ops/rope/rope_append.hpp"
#include "ops/rope/rope_desc.hpp"
#include "runtime/jit_core.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "support/sass_scan.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

char* fake(int slot) {
  return reinterpret_cast<char*>(static_cast<uintptr_t>(0x10000000) * static_cast<uintptr_t>(slot));
}

// A valid call: 5 tokens, 8 q heads and 2 kv heads of 128, 3 requests, 16 pages of 16 slots.
struct Call {
  Tensor q = make_tensor(fake(1), {5, 8, 128}, dl_dtype("bf16"));
  Tensor k = make_tensor(fake(2), {5, 2, 128}, dl_dtype("bf16"));
  Tensor v = make_tensor(fake(3), {5, 2, 128}, dl_dtype("bf16"));
  Tensor pos_ids = make_tensor(fake(4), {5}, dl_dtype("int32"));
  Tensor bi = make_tensor(fake(5), {5}, dl_dtype("int32"));
  Tensor pos = make_tensor(fake(6), {5}, dl_dtype("int32"));
  Tensor idx = make_tensor(fake(7), {7}, dl_dtype("int32"));
  Tensor ptr = make_tensor(fake(8), {4}, dl_dtype("int32"));
  Tensor last = make_tensor(fake(9), {3}, dl_dtype("int32"));
  Tensor ks = make_tensor(fake(10), {2}, dl_dtype("fp32"));
  Tensor vs = make_tensor(fake(11), {2}, dl_dtype("fp32"));
  Tensor q_out = make_tensor(fake(12), {5, 8, 128}, dl_dtype("bf16"));
  Tensor kc = make_tensor(fake(13), {16, 16, 2, 128}, dl_dtype("bf16"));
  Tensor vc = make_tensor(fake(14), {16, 16, 2, 128}, dl_dtype("bf16"));
  bool scales = false;
  int rotary_dim = 0;
  kjit_status run() {
    return kjit_rope_append_paged_kv_cache(
        q.get(), k.get(), v.get(), pos_ids.get(), bi.get(), pos.get(), idx.get(), ptr.get(),
        last.get(), scales ? ks.get() : nullptr, scales ? vs.get() : nullptr, q_out.get(), kc.get(),
        vc.get(), rotary_dim, KJIT_ROPE_NEOX, 1.0f, 10000.0f, KJIT_KV_LAYOUT_NHD, nullptr);
  }
  void e4m3() {
    scales = true;
    kc.t.dtype = vc.t.dtype = dl_dtype("e4m3");
  }
};

void expect_invalid(Call& c, const char* fragment) {
  const kjit_status s = c.run();
  const std::string msg = kjit_last_error();
  INFO("last error: " << msg);
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(msg.find(fragment) != std::string::npos);
  CHECK(msg.rfind("kjit_rope_append_paged_kv_cache: ", 0) == 0);
}

}  // namespace

TEST_CASE("rope append abi: valid calls reach the driver, 16-bit and e4m3 caches, in place",
          "[rope_append]") {
  KJIT_RUN_WITHOUT_GPU();
  Call c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  c.e4m3();
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  Call in_place;
  in_place.q_out = make_tensor(fake(1), {5, 8, 128}, dl_dtype("bf16"));
  CHECK(in_place.run() == KJIT_ERROR_NO_DEVICE);
}

TEST_CASE("rope append abi: scales both or neither, and they decide the cache dtype",
          "[rope_append]") {
  Call one;
  one.e4m3();
  const kjit_status s = kjit_rope_append_paged_kv_cache(
      one.q.get(), one.k.get(), one.v.get(), one.pos_ids.get(), one.bi.get(), one.pos.get(),
      one.idx.get(), one.ptr.get(), one.last.get(), one.ks.get(), nullptr, one.q_out.get(),
      one.kc.get(), one.vc.get(), 0, KJIT_ROPE_NEOX, 1.0f, 10000.0f, KJIT_KV_LAYOUT_NHD, nullptr);
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("v_scale is NULL but k_scale is not") !=
        std::string::npos);
  Call no_scales;  // e4m3 caches without scales
  no_scales.kc.t.dtype = no_scales.vc.t.dtype = dl_dtype("e4m3");
  CHECK(no_scales.run() == KJIT_ERROR_UNSUPPORTED);
  CHECK(std::string(kjit_last_error()).find("paged_k_cache") != std::string::npos);
  Call bf16_caches;  // scales beside bf16 caches
  bf16_caches.scales = true;
  expect_invalid(bf16_caches, "paged_k_cache must be float8_e4m3fn");
}

TEST_CASE("rope append abi: q, k, v and q_out agree, and nothing written overlaps",
          "[rope_append]") {
  Call v_heads;
  v_heads.v = make_tensor(fake(3), {5, 3, 128}, dl_dtype("bf16"));
  expect_invalid(v_heads, "v dim 1 is 3 but k dim 1 is 2");
  Call qo;
  qo.q_out = make_tensor(fake(3), {5, 8, 128}, dl_dtype("bf16"));
  expect_invalid(qo, "q_out overlaps v");
  Call qo_table;
  qo_table.q_out = make_tensor(fake(8), {5, 8, 128}, dl_dtype("bf16"));
  expect_invalid(qo_table, "q_out overlaps kv_indptr");
  Call cache_q;
  cache_q.kc = make_tensor(fake(1), {16, 16, 2, 128}, dl_dtype("bf16"));
  expect_invalid(cache_q, "paged_k_cache overlaps q");
  Call cache_qo;
  cache_qo.vc = make_tensor(fake(12), {16, 16, 2, 128}, dl_dtype("bf16"));
  expect_invalid(cache_qo, "paged_v_cache overlaps q_out");
  Call pos;
  pos.pos_ids = make_tensor(fake(4), {5}, dl_dtype("fp32"));
  expect_invalid(pos, "pos_ids must be int32 or int64");
  Call rot;
  rot.rotary_dim = 5;
  expect_invalid(rot, "rotary_dim must be even");
  Call caches;
  caches.kc = make_tensor(fake(13), {16, 16, 2, 64}, dl_dtype("bf16"));
  caches.vc = make_tensor(fake(14), {16, 16, 2, 64}, dl_dtype("bf16"));
  expect_invalid(caches, "but k has 2 heads of 128");
}

namespace {

// kjit_llama31_rope_append_paged_kv_cache over c's tensors with Llama 3.1's scalars but these
// three.
kjit_status run_llama31(Call& c, float low, float high, float old_context_len) {
  return kjit_llama31_rope_append_paged_kv_cache(
      c.q.get(), c.k.get(), c.v.get(), c.pos_ids.get(), c.bi.get(), c.pos.get(), c.idx.get(),
      c.ptr.get(), c.last.get(), nullptr, nullptr, c.q_out.get(), c.kc.get(), c.vc.get(), 0,
      KJIT_ROPE_NEOX, 8.0f, 500000.0f, low, high, old_context_len, KJIT_KV_LAYOUT_NHD, nullptr);
}

}  // namespace

TEST_CASE("rope append abi: the llama31 entry checks its frequency scalars", "[rope_append]") {
  struct Bad {
    float low, high, old_context_len;
    const char* fragment;
  };
  for (const Bad& b :
       {Bad{0.0f, 4.0f, 8192.0f, "low_freq_factor"}, Bad{1.0f, 1.0f, 8192.0f, "high_freq_factor"},
        Bad{1.0f, INFINITY, 8192.0f, "high_freq_factor"},
        Bad{1.0f, 4.0f, -8192.0f, "old_context_len"}}) {
    Call c;
    const kjit_status s = run_llama31(c, b.low, b.high, b.old_context_len);
    const std::string msg = kjit_last_error();
    INFO("last error: " << msg);
    CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(msg.find(b.fragment) != std::string::npos);
    CHECK(msg.rfind("kjit_llama31_rope_append_paged_kv_cache: ", 0) == 0);
  }
  // The shared checks hold too.
  Call v_heads;
  v_heads.v = make_tensor(fake(3), {5, 3, 128}, dl_dtype("bf16"));
  CHECK(run_llama31(v_heads, 1.0f, 4.0f, 8192.0f) == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("rope append abi: a valid llama31 call reaches the driver", "[rope_append]") {
  KJIT_RUN_WITHOUT_GPU();
  Call c;
  CHECK(run_llama31(c, 1.0f, 4.0f, 8192.0f) == KJIT_ERROR_NO_DEVICE);
}

TEST_CASE("rope append: the vector narrows to the caches' alignment, the spec names the cache",
          "[rope_append]") {
  using ops::DType;
  // 16-byte aligned everything: 8 bf16 elements.
  auto c = ops::select_rope_append(DType::kBF16, 128, 128, false, 16, false, 16);
  CHECK(c.vec == 8);
  // An e4m3 cache 4 bytes aligned stores 4-byte vectors: 4 elements.
  c = ops::select_rope_append(DType::kBF16, 128, 128, false, 16, true, 4);
  CHECK(c.vec == 4);
  CHECK(c.cache_fp8 == 1);
  // A 16-byte aligned e4m3 cache keeps the q / k width (8 elements = 8 bytes).
  CHECK(ops::select_rope_append(DType::kF16, 128, 64, true, 16, true, 16).vec == 8);
  // Partial rotary of 20 (NeoX halves of 10): 2 elements.
  CHECK(ops::select_rope_append(DType::kBF16, 80, 20, false, 16, false, 16).vec == 2);
  CHECK_THROWS_AS(ops::select_rope_append(DType::kF32, 128, 128, false, 16, false, 16),
                  kjit::Error);
  const auto uri = ops::rope_append_spec(c).uri;
  CHECK(uri.find("rope_append_paged_kv") == 0);
  CHECK(uri.find("cache_fp8") != std::string::npos);
  CHECK(ops::rope_append_spec(ops::select_rope_append(DType::kBF16, 128, 128, false, 16, false, 16))
            .uri.find("cache_fp8") == std::string::npos);
}

TEST_CASE("rope append: descriptor definitions, catalog and precompile sets agree",
          "[rope_append]") {
  const ops::OpDef& d = ops::op_or_throw("rope_append");
  ops::RopeAppendDefAxes a;
  a.qo_heads = 32;
  a.kv_heads = 8;
  a.head_dim = a.rotary_dim = 128;
  a.num_scales = 8;
  a.nhd = false;
  CHECK(ops::rope_append_definition(a).name == "rope_append_paged_kv_q32_k8_d128_ps16_hnd_e4m3");
  for (const auto& def : d.definitions()) {
    INFO(def.name);
    for (const auto& set : d.precompile_sets(def, {})) {
      bool in_catalog = false;
      for (const auto& row : d.catalog()) in_catalog = in_catalog || row == set;
      CHECK(in_catalog);
      CHECK_NOTHROW(d.make_spec(set));
    }
  }
}

namespace {

// A valid kjit_qk_rmsnorm_rope call: q and k views of a fused qkv row (3 tokens, 4 q heads and 2
// kv heads of 128).
struct QkCall {
  Tensor qw = make_tensor(fake(2), {128}, dl_dtype("bf16"));
  Tensor kw = make_tensor(fake(3), {128}, dl_dtype("bf16"));
  Tensor pos = make_tensor(fake(4), {3}, dl_dtype("int64"));
  Tensor q = make_tensor(fake(1), {3, 4, 128}, dl_dtype("bf16"), {8 * 128, 128, 1});
  Tensor k = make_tensor(fake(1) + 4 * 128 * 2, {3, 2, 128}, dl_dtype("bf16"), {8 * 128, 128, 1});
  float eps = 1e-6f;
  kjit_status run() {
    return kjit_qk_rmsnorm_rope(qw.get(), kw.get(), pos.get(), q.get(), k.get(), eps, 0,
                                KJIT_ROPE_NEOX, 1.0f, 1e6f, nullptr);
  }
};

void expect_qk_invalid(QkCall& c, const char* fragment) {
  const kjit_status s = c.run();
  const std::string msg = kjit_last_error();
  INFO("last error: " << msg);
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(msg.find(fragment) != std::string::npos);
  CHECK(msg.rfind("kjit_qk_rmsnorm_rope: ", 0) == 0);
}

}  // namespace

TEST_CASE("qk norm rope abi: qkv views reach the driver, bad weights, eps or aliasing do not",
          "[qk_norm_rope]") {
  KJIT_RUN_WITHOUT_GPU();
  QkCall c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  QkCall w;
  w.qw = make_tensor(fake(2), {64}, dl_dtype("bf16"));
  expect_qk_invalid(w, "q_weight must be [head_dim = 128]");
  QkCall wdt;
  wdt.kw = make_tensor(fake(3), {128}, dl_dtype("fp32"));
  expect_qk_invalid(wdt, "k_weight");
  QkCall eps;
  eps.eps = -1e-6f;
  expect_qk_invalid(eps, "eps must be finite and >= 0");
  QkCall overlap;  // k's heads run into q's
  overlap.k = make_tensor(fake(1) + 3 * 128 * 2, {3, 2, 128}, dl_dtype("bf16"), {8 * 128, 128, 1});
  expect_qk_invalid(overlap, "k overlaps q");
  QkCall wq;  // a weight inside q
  wq.qw = make_tensor(fake(1), {128}, dl_dtype("bf16"));
  expect_qk_invalid(wq, "q overlaps q_weight");
}

TEST_CASE("qk norm rope: select and spec", "[qk_norm_rope]") {
  using ops::DType;
  auto c = ops::select_qk_norm_rope(DType::kBF16, 128, 128, false, 16);
  CHECK(c.vec == 8);
  CHECK(ops::select_qk_norm_rope(DType::kBF16, 128, 128, false, 4).vec == 2);
  CHECK(ops::select_qk_norm_rope(DType::kF16, 80, 20, false, 16).vec == 2);
  CHECK_THROWS_AS(ops::select_qk_norm_rope(DType::kF32, 128, 128, false, 16), kjit::Error);
  CHECK(ops::qk_norm_rope_spec(c).uri.find("qk_norm_rope") == 0);
  const ops::OpDef& d = ops::op_or_throw("qk_norm_rope");
  for (const auto& def : d.definitions()) {
    INFO(def.name);
    for (const auto& set : d.precompile_sets(def, {})) {
      bool in_catalog = false;
      for (const auto& row : d.catalog()) in_catalog = in_catalog || row == set;
      CHECK(in_catalog);
    }
  }
}

// Both fused kernels keep several heads' loads in flight under a register cap (rope_kernel's 3
// blocks of 256; 2 with an e4m3 cache): every catalog spec built for sm_90a without local memory,
// so a cap that starts to spill (one more head in flight, a wider conversion) fails here.
TEST_CASE("rope fused: every catalog spec compiles for sm_90a without local memory",
          "[rope_append][compile]") {
  kjit::test::TempDir dir;  // a fresh cache: every spec compiles here
  kjit::jit::Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  kjit::jit::JitCore core(s);
  int built = 0;
  for (const char* op : {"rope_append", "qk_norm_rope"}) {
    const ops::OpDef& d = ops::op_or_throw(op);
    for (const ops::SetArgs& set : d.catalog()) {
      const kjit::jit::Spec spec = d.make_spec(set);
      INFO(spec.uri);
      const kjit::jit::Artifact a = core.build(spec, kjit::jit::ArchTarget{9, 0, true});
      REQUIRE(a.meta.lowered_names.size() == 1);
      const std::string& name = a.meta.lowered_names[0].second;
      const kjit::jit::CubinKernelInfo info = kjit::jit::cubin_kernel_info(a.cubin, name);
      INFO(info.registers << " registers");
      CHECK(info.registers > 0);
      CHECK(info.registers <= (spec.uri.find("cache_fp8_1") != std::string::npos ? 128 : 80));
      CHECK(kjit::test::local_memory_ops(kjit::jit::cubin_kernel_code(a.cubin, name)) == 0);
      ++built;
    }
  }
  CHECK(built >= 20);
}
