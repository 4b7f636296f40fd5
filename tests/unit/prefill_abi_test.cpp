// Prefill attention without a GPU: the exports, the options' defaults, what a plan holds (tiles,
// variant, workspace) for ragged batches, the variants' shared memory and URIs, the run's refusal
// of a plan of the other KV kind, and the fp64 reference on hand-made masks. The hostile-input
// table (tests/reliability/hostile_abi_test.cpp) covers every broken argument of the entry points.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/wgmma_desc.h"
#include "kjit/kjit.h"
#include "ops/attention/prefill.hpp"
#include "reference/prefill_ref.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
namespace ops = kjit::ops;

namespace {

ops::PrefillPlanData plan(const std::vector<int32_t>& qo, const std::vector<int32_t>& kv,
                          int qo_heads, int kv_heads, int head_dim, int page_size,
                          bool causal = true) {
  return ops::plan_batch_prefill(qo.data(), kv.data(), static_cast<int>(qo.size()) - 1, qo_heads,
                                 kv_heads, head_dim, page_size, KJIT_KV_LAYOUT_NHD,
                                 dl_dtype("bf16"), dl_dtype("bf16"), causal ? 1 : 0, 0.0f, 0.0f, -1,
                                 0);
}

// A 64-token plan under `t` must be refused as an invalid argument whose message holds `words`.
void check_tuning_refused(const ops::PrefillTuning& t, const char* words) {
  const int32_t qo[2] = {0, 64}, kv[2] = {0, 64};
  const DLDataType bf{kDLBfloat, 16, 1};
  try {
    ops::plan_batch_prefill(qo, kv, 1, 8, 2, 128, 16, KJIT_KV_LAYOUT_NHD, bf, bf, 1, 0.0f, 0.0f, -1,
                            0, &t);
    FAIL("planned");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find(words) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("prefill abi: libkjit.so exports the prefill entry points", "[c_abi][attention]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  for (const char* name :
       {"kjit_prefill_options_init", "kjit_batch_prefill_plan", "kjit_prefill_plan_workspace_bytes",
        "kjit_prefill_plan_destroy", "kjit_batch_prefill_run", "kjit_batch_prefill_ragged_run"}) {
    INFO(name);
    CHECK(dlsym(lib, name) != nullptr);
  }
  dlclose(lib);
}

TEST_CASE("prefill abi: options defaults and NULL-safe calls", "[c_abi][attention]") {
  kjit_prefill_options o;
  std::memset(&o, 0x5A, sizeof(o));
  kjit_prefill_options_init(&o);
  CHECK(o.struct_size == sizeof(kjit_prefill_options));
  CHECK(o.causal == 1);
  CHECK(o.sm_scale == 0.0f);
  CHECK(o.logits_soft_cap == 0.0f);
  CHECK(o.window_left == -1);
  kjit_prefill_options_init(nullptr);
  kjit_prefill_plan_destroy(nullptr);
  CHECK(kjit_prefill_plan_workspace_bytes(nullptr) == 0);
}

TEST_CASE("prefill abi: a plan counts each request's row tiles", "[c_abi][attention]") {
  // The plan's device picks the kernel: wgmma on an sm_90a one (128-key tiles; 128 rows a CTA at
  // every head_dim), else mma.sync (64-key tiles; at head_dim 256 64 rows over 32-key tiles).
  const bool wgmma = kjit::test::gpu_caps().sm90a();
  // Group 4, 128 rows a CTA at head_dim 128: 1 -> 1 tile, 0 -> 0, 32 -> 1, 33 -> 2, 1000 -> 32.
  const auto pl = plan({0, 1, 1, 33, 66, 1066}, {0, 1, 2, 5, 9, 80}, 32, 8, 128, 16);
  CHECK(pl.cfg.warps == 8);
  CHECK(pl.cfg.kv_tile == (wgmma ? 128 : 64));
  CHECK(pl.group == 4);
  CHECK(pl.total_q == 1066);
  CHECK(pl.tiles == 1 + 0 + 1 + 2 + 32);
  CHECK(pl.workspace_bytes == 0);
  CHECK(pl.sm_scale == Approx(1.0 / std::sqrt(128.0)));
  // head_dim 256, 100 rows: one tile of 128 rows (wgmma, 64-key tiles) or two of 64.
  const auto p256 = plan({0, 100}, {0, 100}, 8, 8, 256, 0, false);
  CHECK(p256.cfg.warps == (wgmma ? 8 : 4));
  CHECK(p256.cfg.kv_tile == (wgmma ? 64 : 32));
  CHECK(p256.tiles == (wgmma ? 1 : 2));
  CHECK(p256.page_size == 0);
  CHECK(p256.causal == 0);
}

TEST_CASE("prefill abi: a plan whose grid of tiles x kv heads passes INT_MAX is refused",
          "[c_abi][attention]") {
  // Group 1 at head_dim 128: 128 rows a CTA, so 1.1e9 tokens are 8593750 tiles, x 256 kv heads
  // 2.2e9 CTAs (the rows alone, 1.1e9, are within the plan's INT_MAX of rows).
  const int32_t tokens = 1100000000;
  try {
    plan({0, tokens}, {0, tokens}, 256, 256, 128, 0);
    FAIL("planned a grid past INT_MAX");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
    CHECK_THAT(e.what(), Catch::Contains("8593750 x 256"));
  }
  // At 128 kv heads it fits (1.1e9 CTAs).
  CHECK(plan({0, tokens}, {0, tokens}, 128, 128, 128, 0).tiles == 8593750);
}

// The CTA order: the heads' longest tiles first where the grid is at most four waves (one CTA
// an SM), the heads one by one above that and without a device.
TEST_CASE("prefill abi: the plan's CTA order follows the waves", "[c_abi][attention]") {
  CHECK(ops::prefill_head_inner(512, 132));  // 2k tokens, GQA 4, 8 kv heads: 3.9 waves
  CHECK(ops::prefill_head_inner(528, 132));
  CHECK_FALSE(ops::prefill_head_inner(529, 132));
  CHECK_FALSE(ops::prefill_head_inner(2048, 132));  // 8k tokens: 15.5 waves
  CHECK_FALSE(ops::prefill_head_inner(512, 0));     // no device
}

TEST_CASE("prefill abi: variants fit the shared memory they ask for", "[c_abi][attention]") {
  for (int d : {64, 128, 256}) {
    const ops::PrefillConfig c = ops::select_prefill(kjit::ops::DType::kBF16, d, 4, {}, false);
    INFO(d);
    CHECK(ops::prefill_smem_bytes(c) <= 164 * 1024 - 1024);  // an A100 runs every one
    const std::string uri = ops::prefill_spec(c).uri;
    CHECK(uri.rfind("prefill_attention_dtype_bf16_head_dim_" + std::to_string(d), 0) == 0);
  }
  kjit::ops::SmemBudget tiny;
  tiny.per_block = 48 * 1024;
  CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kBF16, 128, 4, tiny, false));
  CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kF32, 128, 4, {}, false));
  CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kBF16, 96, 4, {}, false));
  CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kBF16, 128, 17, {}, false));
}

// The wgmma kernel is the default on sm_90a, the mma.sync kernel elsewhere; asked for, the wgmma
// kernel serves head_dim 64 and 128 on sm_90a (128-row CTAs over 128-key tiles in a 2-stage ring)
// and 256 (64-key tiles) and is refused elsewhere.
TEST_CASE("prefill abi: the sm_90a kernel on request, and its limits", "[c_abi][attention]") {
  using ops::PrefillKernel;
  constexpr int kWgmma = static_cast<int>(PrefillKernel::kWgmmaSm90a);
  for (int d : {64, 128}) {
    INFO(d);
    const ops::PrefillConfig c =
        ops::select_prefill(kjit::ops::DType::kF16, d, 8, {}, true, kWgmma);
    CHECK(c.kernel == PrefillKernel::kWgmmaSm90a);
    CHECK(ops::prefill_rows(c) == 128);
    CHECK(c.kv_tile == 128);
    CHECK(c.stages == 2);
    CHECK(ops::prefill_smem_bytes(c) == (128 + 4 * 128) * d * 2 + 1024);
    const kjit::jit::Spec s = ops::prefill_spec(c);
    CHECK(s.uri.rfind("prefill_attention_kernel_wgmma_dtype_fp16_head_dim_" + std::to_string(d),
                      0) == 0);
    CHECK(s.arch_families == std::vector<std::string>{"sm_90a"});
    // The default on sm_90a, and the mma.sync kernel elsewhere or on request.
    CHECK(ops::select_prefill(kjit::ops::DType::kF16, d, 8, {}, true).kernel ==
          PrefillKernel::kWgmmaSm90a);
    CHECK(ops::select_prefill(kjit::ops::DType::kF16, d, 8, {}, false).kernel ==
          PrefillKernel::kMmaSm80);
    CHECK(ops::select_prefill(kjit::ops::DType::kF16, d, 8, {}, true, 0).kernel ==
          PrefillKernel::kMmaSm80);
    CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kF16, d, 8, {}, false, kWgmma));
  }
  // head_dim 256: 64-key tiles (O takes 128 registers a thread), 193 KB, no persistent form.
  const ops::PrefillConfig c256 = ops::select_prefill(kjit::ops::DType::kBF16, 256, 8, {}, true);
  CHECK(c256.kernel == PrefillKernel::kWgmmaSm90a);
  CHECK(c256.kv_tile == 64);
  CHECK(c256.stages == 2);
  CHECK(ops::prefill_smem_bytes(c256) == (128 + 4 * 64) * 256 * 2 + 1024);
  CHECK(ops::prefill_spec(c256).uri.find("head_dim_256_kv_tile_64_stages_2") != std::string::npos);
  CHECK(ops::select_prefill(kjit::ops::DType::kBF16, 256, 8, {}, true, kWgmma).kv_tile == 64);
  ops::PrefillConfig p256 = c256;
  p256.persistent = 1;
  CHECK(ops::prefill_smem_bytes(p256) > 227 * 1024);
  CHECK(ops::select_prefill(kjit::ops::DType::kBF16, 256, 8, {}, false).kernel ==
        PrefillKernel::kMmaSm80);
  CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kBF16, 128, 8, {}, true, 2));
  // V's N-major descriptor (kernels/common/wgmma_desc.h): start >> 4, 64-column blocks 16 KB
  // apart (leading offset), 8-key groups 1024 bytes apart (stride offset), 128-byte swizzle.
  CHECK(kjit::wgmma::mnmajor_sw128_desc(0x2000 + 2048, 128 * 128) ==
        ((0x2800ull >> 4) | (1024ull << 16) | (64ull << 32) | (1ull << 62)));
  kjit::ops::SmemBudget small;
  small.per_block = 160 * 1024;
  CHECK_THROWS(ops::select_prefill(kjit::ops::DType::kBF16, 128, 8, small, true, kWgmma));
  // Where its shared memory does not fit, the default falls back to the mma.sync kernel.
  CHECK(ops::select_prefill(kjit::ops::DType::kBF16, 128, 8, small, true).kernel ==
        PrefillKernel::kMmaSm80);
  CHECK(ops::select_prefill(kjit::ops::DType::kBF16, 256, 8, small, true).kernel ==
        PrefillKernel::kMmaSm80);
}

TEST_CASE("prefill abi: fp8 e4m3 keys and values take the wgmma kernel at 64 and 128 on sm_90a",
          "[c_abi][attention]") {
  using ops::PrefillKernel;
  const int32_t qo[2] = {0, 64}, kv[2] = {0, 4};
  for (const char* q : {"bf16", "fp16"}) {
    INFO(q);
    for (int d : {64, 128, 256}) {
      // Both spellings of an fp8 cache: float8_e4m3fn and raw bytes.
      for (const DLDataType kvt : {dl_dtype("e4m3"), DLDataType{kDLUInt, 8, 1}}) {
        // The plan's device: the wgmma kernel on an sm_90a one below head_dim 256, else mma.sync.
        const ops::PrefillPlanData pl = ops::plan_batch_prefill(
            qo, kv, 1, 32, 8, d, 16, KJIT_KV_LAYOUT_NHD, dl_dtype(q), kvt, 1, 0.0f, 0.0f, -1, 0);
        CHECK(pl.cfg.kernel == (kjit::test::gpu_caps().sm90a() && d != 256
                                    ? PrefillKernel::kWgmmaSm90a
                                    : PrefillKernel::kMmaSm80));
        CHECK(pl.cfg.kv_fp8 == 1);
        CHECK(pl.cfg.dtype == ops::dtype_from_name(q));
      }
      // On sm_90a the wgmma kernel's fp8 form at head_dim 64 and 128 (raw e4m3 tiles beside the
      // ring, fp16 MMAs), the default as for 16-bit caches; at 256 the mma.sync one (forcing
      // wgmma there is refused), as where the raw tiles do not fit.
      const auto dt = ops::dtype_from_name(q);
      CHECK(ops::select_prefill(dt, d, 4, {}, true, -1, true).kernel ==
            (d == 256 ? PrefillKernel::kMmaSm80 : PrefillKernel::kWgmmaSm90a));
      const int wgmma = static_cast<int>(PrefillKernel::kWgmmaSm90a);
      if (d != 256) {
        const ops::PrefillConfig w = ops::select_prefill(dt, d, 4, {}, true, wgmma, true);
        CHECK(w.kernel == PrefillKernel::kWgmmaSm90a);
        CHECK(w.kv_fp8 == 1);
        // The raw tiles: kv_tile x head_dim bytes each for K and V past the 16-bit form's bytes.
        ops::PrefillConfig w16 = w;
        w16.kv_fp8 = 0;
        CHECK(ops::prefill_smem_bytes(w) == ops::prefill_smem_bytes(w16) + 2 * w.kv_tile * d);
        CHECK(ops::prefill_spec(w).uri.find("_mma_dtype_fp16_kv_fp8_1") != std::string::npos);
        // Neither its persistent form nor the ping-pong schedule takes fp8.
        for (const bool pp : {false, true}) {
          ops::PrefillTuning t;
          t.kernel = wgmma;
          (pp ? t.pingpong : t.persistent) = 1;
          try {
            ops::plan_batch_prefill(qo, kv, 1, 32, 8, d, 16, KJIT_KV_LAYOUT_NHD, dl_dtype(q),
                                    dl_dtype("e4m3"), 1, 0.0f, 0.0f, -1, 0, &t);
            FAIL("planned");
          } catch (const kjit::Error& e) {
            CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
            CHECK(std::string(e.what()).find("fp8") != std::string::npos);
          }
        }
        continue;
      }
      try {
        ops::select_prefill(dt, d, 4, {}, true, wgmma, true);
        FAIL("selected");
      } catch (const kjit::Error& e) {
        CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
        CHECK(std::string(e.what()).find("fp8") != std::string::npos);
      }
    }
  }
  // Its spec: fp16 MMAs, named in the URI; the 16-bit specs keep theirs.
  ops::PrefillConfig c = ops::select_prefill(ops::DType::kBF16, 128, 4, {}, false, -1, true);
  CHECK(ops::prefill_spec(c).uri ==
        "prefill_attention_dtype_bf16_head_dim_128_warps_8_kv_tile_64_mma_dtype_fp16_kv_fp8_1");
  c.kv_fp8 = 0;
  CHECK(ops::prefill_spec(c).uri == "prefill_attention_dtype_bf16_head_dim_128_warps_8_kv_tile_64");
  // fp8 with an fp32 q, or an int8 cache: refused, naming the pair.
  for (const auto& [qt, kt] : {std::pair{dl_dtype("fp32"), dl_dtype("e4m3")},
                               std::pair{dl_dtype("bf16"), DLDataType{kDLInt, 8, 1}}}) {
    try {
      ops::plan_batch_prefill(qo, kv, 1, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD, qt, kt, 1, 0.0f, 0.0f,
                              -1, 0);
      FAIL("planned");
    } catch (const kjit::Error& e) {
      CHECK(e.status() != KJIT_SUCCESS);
      CHECK(std::string(e.what()).find("kv_dtype") != std::string::npos);
    }
  }
}

// The wgmma kernel's ping-pong schedule is a tuning choice of that kernel alone: its own URI, the
// same sizes, and a clear refusal on the mma.sync kernel (the plan's own choice without an sm_90a
// device) or for a value other than 0 / 1.
TEST_CASE("prefill abi: the ping-pong schedule is the wgmma kernel's", "[c_abi][attention]") {
  ops::PrefillConfig c = ops::select_prefill(kjit::ops::DType::kBF16, 128, 4, {}, true,
                                             static_cast<int>(ops::PrefillKernel::kWgmmaSm90a));
  const std::string plain = ops::prefill_spec(c).uri;
  c.pingpong = 1;
  const kjit::jit::Spec s = ops::prefill_spec(c);
  CHECK(s.uri == plain + "_pingpong_1");
  CHECK(ops::prefill_smem_bytes(c) == (128 + 4 * 128) * 128 * 2 + 1024);
  for (int kernel : {-1, static_cast<int>(ops::PrefillKernel::kMmaSm80)}) {
    for (int pingpong : {1, 2}) {
      if (kernel == -1 && pingpong == 1 && kjit::test::gpu_caps().sm90a()) continue;  // wgmma's
      INFO("kernel " << kernel << " pingpong " << pingpong);
      ops::PrefillTuning t;
      t.kernel = kernel;
      t.pingpong = pingpong;
      check_tuning_refused(t, "ping-pong");
    }
  }
}

// The persistent form is a tuning choice of the wgmma kernel alone, without ping-pong: its own URI
// and entry point, a second Q buffer in its shared memory, and a clear refusal elsewhere.
TEST_CASE("prefill abi: the persistent form is the wgmma kernel's", "[c_abi][attention]") {
  ops::PrefillConfig c = ops::select_prefill(kjit::ops::DType::kBF16, 128, 4, {}, true,
                                             static_cast<int>(ops::PrefillKernel::kWgmmaSm90a));
  const std::string plain = ops::prefill_spec(c).uri;
  c.persistent = 1;
  const kjit::jit::Spec s = ops::prefill_spec(c);
  CHECK(s.uri == plain + "_persistent_1");
  REQUIRE(s.entry_names.size() == 1);
  CHECK(s.entry_names[0].rfind("kjit::attention::prefill_sm90_persistent_kernel<", 0) == 0);
  CHECK(ops::prefill_smem_bytes(c) == (2 * 128 + 4 * 128) * 128 * 2 + 1024);
  // On mma.sync (the plan's default without an sm_90a device), asked for or not, and a value
  // past 1.
  for (int kernel : {-1, static_cast<int>(ops::PrefillKernel::kMmaSm80)}) {
    for (int persistent : {1, 2}) {
      if (kernel == -1 && persistent == 1 && kjit::test::gpu_caps().sm90a()) continue;  // wgmma's
      INFO("kernel " << kernel << " persistent " << persistent);
      ops::PrefillTuning t;
      t.kernel = kernel;
      t.persistent = persistent;
      check_tuning_refused(t, "persistent form");
    }
  }
}

// The ring depth is a tuning choice of the wgmma kernel alone: its own URI and shared memory, and
// a clear refusal on the mma.sync kernel or outside 2 .. kPrefillMaxStages.
TEST_CASE("prefill abi: the ring depth is the wgmma kernel's", "[c_abi][attention]") {
  ops::PrefillConfig c = ops::select_prefill(kjit::ops::DType::kBF16, 64, 4, {}, true,
                                             static_cast<int>(ops::PrefillKernel::kWgmmaSm90a));
  CHECK(c.stages == 2);
  const std::string plain = ops::prefill_spec(c).uri;
  CHECK(plain.find("_stages_2") != std::string::npos);
  c.stages = 4;
  CHECK(ops::prefill_spec(c).uri.find("_stages_4") != std::string::npos);
  CHECK(ops::prefill_smem_bytes(c) == (128 + 8 * 128) * 64 * 2 + 1024);
  for (int kernel : {-1, static_cast<int>(ops::PrefillKernel::kMmaSm80)}) {
    for (int stages : {1, 3, ops::kPrefillMaxStages + 1}) {
      if (kernel == -1 && stages == 3 && kjit::test::gpu_caps().sm90a()) continue;  // wgmma's
      INFO("kernel " << kernel << " stages " << stages);
      ops::PrefillTuning t;
      t.kernel = kernel;
      t.stages = stages;
      check_tuning_refused(t, "ring depth");
    }
  }
}

// The wgmma kernel's TMA view of K and V (kernels/attention/attention_params.h): 4-D maps whose
// boxes are one kv head's box_rows keys x 64 columns, the dimensions ordered by growing stride.
TEST_CASE("prefill abi: the wgmma kernel's TMA view of the KV", "[c_abi][attention]") {
  ops::PrefillPlanData pl;
  pl.cfg = ops::select_prefill(kjit::ops::DType::kBF16, 128, 4, {}, true,
                               static_cast<int>(ops::PrefillKernel::kWgmmaSm90a));
  pl.head_dim = 128;
  pl.num_kv_heads = 8;
  alignas(16) static unsigned char base[16];
  kjit::cuda::TensorMapNd m;
  // NHD pages of 16: [pages, 16, 8, 128].
  pl.page_size = 16;
  pl.layout = KJIT_KV_LAYOUT_NHD;
  CHECK(ops::prefill_box_rows(pl) == 16);
  const int64_t nhd_shape[4] = {1000, 16, 8, 128}, nhd_strides[4] = {16 * 8 * 128, 8 * 128, 128, 1};
  REQUIRE(ops::prefill_kv_tma_view(pl, base, nhd_shape, nhd_strides, m));
  CHECK(m.rank == 4);
  CHECK((m.dims[0] == 128 && m.dims[1] == 8 && m.dims[2] == 16 && m.dims[3] == 1000));
  CHECK(
      (m.strides_bytes[0] == 256 && m.strides_bytes[1] == 2048 && m.strides_bytes[2] == 16 * 2048));
  CHECK((m.box[0] == 64 && m.box[1] == 1 && m.box[2] == 16 && m.box[3] == 1));
  // HND pages of 256 (larger than a 128-key tile: one box inside a page): [pages, 8, 256, 128].
  pl.page_size = 256;
  pl.layout = KJIT_KV_LAYOUT_HND;
  CHECK(ops::prefill_box_rows(pl) == 128);
  const int64_t hnd_shape[4] = {10, 8, 256, 128},
                hnd_strides[4] = {8 * 256 * 128, 256 * 128, 128, 1};
  REQUIRE(ops::prefill_kv_tma_view(pl, base, hnd_shape, hnd_strides, m));
  CHECK((m.dims[1] == 256 && m.dims[2] == 8 && m.dims[3] == 10));
  CHECK((m.strides_bytes[0] == 256 && m.strides_bytes[1] == 256 * 256 &&
         m.strides_bytes[2] == 8 * 256 * 256));
  CHECK((m.box[1] == 128 && m.box[2] == 1));
  // Ragged [rows, 8, 128]: one page of every row; a single kv head's stride is made up.
  pl.page_size = 0;
  pl.layout = KJIT_KV_LAYOUT_NHD;
  CHECK(ops::prefill_box_rows(pl) == 128);
  const int64_t rag_shape[3] = {5000, 1, 128}, rag_strides[3] = {128, 7, 1};
  REQUIRE(ops::prefill_kv_tma_view(pl, base, rag_shape, rag_strides, m));
  CHECK((m.dims[1] == 1 && m.dims[2] == 5000 && m.dims[3] == 1));
  CHECK(
      (m.strides_bytes[0] == 256 && m.strides_bytes[1] == 256 && m.strides_bytes[2] == 256 * 5000));
  CHECK((m.box[1] == 1 && m.box[2] == 128));
  // Key by key: fewer ragged rows than a box, pages not a power of two or under 8 keys, a row
  // stride TMA cannot step.
  const int64_t short_shape[3] = {100, 8, 128}, short_strides[3] = {8 * 128, 128, 1};
  CHECK_FALSE(ops::prefill_kv_tma_view(pl, base, short_shape, short_strides, m));
  const int64_t odd_strides[3] = {8 * 128 + 4, 128, 1};
  CHECK_FALSE(ops::prefill_kv_tma_view(pl, base, rag_shape, odd_strides, m));
  CHECK_FALSE(ops::prefill_kv_tma_view(pl, base + 8, rag_shape, rag_strides, m));
  for (int ps : {1, 4, 24}) {
    pl.page_size = ps;
    CHECK(ops::prefill_box_rows(pl) == 0);
    CHECK_FALSE(ops::prefill_kv_tma_view(pl, base, nhd_shape, nhd_strides, m));
  }
}

TEST_CASE("prefill abi: a run refuses a plan of the other KV kind", "[c_abi][attention]") {
  const std::vector<int32_t> qo = {0, 4}, kv = {0, 4};
  const DLDataType bf = dl_dtype("bf16");
  for (int ps : {0, 16}) {
    kjit_prefill_plan* p = nullptr;
    REQUIRE(kjit_batch_prefill_plan(qo.data(), kv.data(), 1, 8, 8, 128, ps, KJIT_KV_LAYOUT_NHD, bf,
                                    bf, nullptr, 0, &p) == KJIT_SUCCESS);
    const kjit_status s =
        ps == 0 ? kjit_batch_prefill_run(p, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, nullptr, nullptr, nullptr, 1.0f, 1.0f, nullptr)
                : kjit_batch_prefill_ragged_run(p, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, nullptr, 1.0f, 1.0f, nullptr);
    CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kjit_last_error()).find(ps == 0 ? "ragged" : "paged") != std::string::npos);
    kjit_prefill_plan_destroy(p);
  }
}

// The reference's masks on a hand-made request: 2 new tokens over 4 keys, one head of dim 1, all
// logits 0 (q = 0), values 1, 2, 3, 4: each output is the mean of the keys its mask leaves.
TEST_CASE("prefill abi: the reference's causal and window masks", "[c_abi][attention]") {
  kjit::ref::PrefillRefArgs a;
  a.batch = 1;
  a.qo_heads = a.kv_heads = a.head_dim = 1;
  a.num_pages = 4;
  a.sm_scale = 1;
  a.qo_indptr = {0, 2};
  a.kv_indptr = {0, 4};
  auto q = [](int64_t, int64_t, int64_t) { return 0.0; };
  auto k = [](int64_t, int64_t, int64_t, int64_t) { return 1.0; };
  auto v = [](int64_t row, int64_t, int64_t, int64_t) { return static_cast<double>(row + 1); };
  std::vector<double> out, lse;
  kjit::ref::prefill_attention(a, 2, q, k, v, out, lse);
  CHECK(out[0] == Approx(2.0));  // keys 0..2
  CHECK(out[1] == Approx(2.5));  // keys 0..3
  CHECK(lse[0] == Approx(std::log(3.0)));
  a.window_left = 0;  // only the token's own key
  kjit::ref::prefill_attention(a, 2, q, k, v, out, lse);
  CHECK(out[0] == Approx(3.0));
  CHECK(out[1] == Approx(4.0));
  a.causal = false;
  a.window_left = -1;
  a.kv_indptr = {0, 1};  // fewer keys than new tokens: non-causal still sees them all
  kjit::ref::prefill_attention(a, 2, q, k, v, out, lse);
  CHECK(out[0] == Approx(1.0));
  a.causal = true;  // causal: token 0 sees key j <= 1 - 2 + 0 = -1, none
  kjit::ref::prefill_attention(a, 2, q, k, v, out, lse);
  CHECK(out[0] == 0.0);
  CHECK(std::isinf(lse[0]));
  CHECK(out[1] == Approx(1.0));
}
