// The MoE family without a GPU: the C ABI's argument checks (rejected before any driver call),
// the routing options struct, and the pure parts of the ops: limits, path and tile choices,
// specs.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "kjit/kjit.h"
#include "moe/moe_params.h"
#include "ops/moe/moe.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first.
char* const kIn = reinterpret_cast<char*>(0x10000000);
char* const kIn2 = reinterpret_cast<char*>(0x14000000);
char* const kOut = reinterpret_cast<char*>(0x20000000);
char* const kOut2 = reinterpret_cast<char*>(0x24000000);
char* const kOut3 = reinterpret_cast<char*>(0x28000000);
char* const kOut4 = reinterpret_cast<char*>(0x2c000000);

void expect(kjit_status s, kjit_status want, const char* fragment, const char* api) {
  const std::string err = kjit_last_error();
  INFO("last error: " << err);
  CHECK(s == want);
  CHECK(err.find(fragment) != std::string::npos);
  CHECK(err.find(api) == 0);  // the guard names the entry point
}

struct Route {
  Tensor logits = make_tensor(kIn, {4, 64}, dl_dtype("fp32"));
  Tensor bias = make_tensor(kIn2, {64}, dl_dtype("fp32"));
  Tensor ids = make_tensor(kOut, {4, 8}, dl_dtype("int32"));
  Tensor w = make_tensor(kOut2, {4, 8}, dl_dtype("fp32"));
  kjit_moe_route_options o{};
  Route() { kjit_moe_route_options_init(&o); }
  kjit_status run() {
    return kjit_moe_route(logits.get(), bias.get(), ids.get(), w.get(), &o, nullptr);
  }
};

void route_invalid(Route& r, const char* fragment, kjit_status want = KJIT_ERROR_INVALID_ARGUMENT) {
  expect(r.run(), want, fragment, "kjit_moe_route");
}

}  // namespace

TEST_CASE("moe abi: routing options and arguments", "[moe]") {
  kjit_moe_route_options o;
  kjit_moe_route_options_init(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.scoring == KJIT_MOE_SCORING_SOFTMAX);
  CHECK(o.n_group == 1);
  CHECK(o.topk_group == 1);
  CHECK(o.renormalize == 0);
  CHECK(o.routed_scaling_factor == 1.0f);
  kjit_moe_route_options_init(nullptr);  // ignored

  {
    Route r;
    r.o.struct_size = 4;
    route_invalid(r, "kjit_moe_route_options_init");
  }
  {
    Route r;
    r.o.scoring = 2;
    route_invalid(r, "scoring");
  }
  {
    Route r;
    r.o.renormalize = 5;
    route_invalid(r, "renormalize");
  }
  {
    Route r;
    r.o.routed_scaling_factor = NAN;
    route_invalid(r, "routed_scaling_factor");
  }
  {
    Route r;
    r.o.n_group = 3;
    route_invalid(r, "n_group");
  }  // 64 % 3 != 0
  {
    Route r;
    r.o.n_group = 64;
    route_invalid(r, "n_group");
  }  // groups of 1
  {
    Route r;
    r.o.n_group = 8;
    r.o.topk_group = 9;
    route_invalid(r, "topk_group");
  }
  {
    Route r;
    r.o.n_group = 16;
    r.o.topk_group = 1;
    route_invalid(r, "topk_group");
  }  // 8 > 1 x 4
  {
    Route r;
    r.ids = make_tensor(kOut, {4, 9}, dl_dtype("int32"));
    r.w = make_tensor(kOut2, {4, 9}, dl_dtype("fp32"));
    route_invalid(r, "top 9", KJIT_ERROR_UNSUPPORTED);
  }
  {
    Route r;
    r.logits = make_tensor(kIn, {4, 300}, dl_dtype("fp32"));
    r.bias = make_tensor(kIn2, {300}, dl_dtype("fp32"));
    route_invalid(r, "300 experts", KJIT_ERROR_UNSUPPORTED);
  }
  {
    Route r;
    r.ids = make_tensor(kOut, {4, 8}, dl_dtype("int64"));
    route_invalid(r, "topk_ids must be int32");
  }
  {
    Route r;
    r.w = make_tensor(kOut2, {5, 8}, dl_dtype("fp32"));
    route_invalid(r, "topk_weights must be [4, 8]");
  }
  {
    Route r;
    r.bias = make_tensor(kIn2, {63}, dl_dtype("fp32"));
    route_invalid(r, "bias must be [64]");
  }
  {
    Route r;
    r.w = make_tensor(kOut, {4, 8}, dl_dtype("fp32"));
    route_invalid(r, "overlaps");
  }
  {
    Route r;
    r.logits = make_tensor(kIn, {4, 64}, dl_dtype("int32"));
    route_invalid(r, "logits", KJIT_ERROR_UNSUPPORTED);
  }
}

TEST_CASE("moe abi: permute, finalize and grouped GEMM arguments", "[moe]") {
  auto permute = [](Tensor& x, Tensor& ids, Tensor& perm, Tensor& off, Tensor& p2s, Tensor& s2p) {
    return kjit_moe_permute(x.get(), ids.get(), perm.get(), off.get(), p2s.get(), s2p.get(),
                            nullptr);
  };
  Tensor x = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor ids = make_tensor(kIn2, {4, 2}, dl_dtype("int32"));
  Tensor perm = make_tensor(kOut, {8, 64}, dl_dtype("bf16"));
  Tensor off = make_tensor(kOut2, {9}, dl_dtype("int32"));
  Tensor p2s = make_tensor(kOut3, {8}, dl_dtype("int32"));
  Tensor s2p = make_tensor(kOut4, {4, 2}, dl_dtype("int32"));
  Tensor bad_perm = make_tensor(kOut, {7, 64}, dl_dtype("bf16"));
  expect(permute(x, ids, bad_perm, off, p2s, s2p), KJIT_ERROR_INVALID_ARGUMENT,
         "permuted must be [tokens * top_k, hidden]", "kjit_moe_permute");
  Tensor big_off = make_tensor(kOut2, {600}, dl_dtype("int32"));
  expect(permute(x, ids, perm, big_off, p2s, s2p), KJIT_ERROR_UNSUPPORTED, "599 experts",
         "kjit_moe_permute");
  Tensor p2s_alias = make_tensor(kOut2 + 16, {8}, dl_dtype("int32"));
  expect(permute(x, ids, perm, off, p2s_alias, s2p), KJIT_ERROR_INVALID_ARGUMENT, "overlaps",
         "kjit_moe_permute");
  Tensor perm_fp16 = make_tensor(kOut, {8, 64}, dl_dtype("fp16"));
  expect(permute(x, ids, perm_fp16, off, p2s, s2p), KJIT_ERROR_INVALID_ARGUMENT, "permuted",
         "kjit_moe_permute");

  Tensor eo = make_tensor(kIn, {8, 64}, dl_dtype("bf16"));
  Tensor w = make_tensor(kIn2, {4, 2}, dl_dtype("fp32"));
  Tensor out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"));
  Tensor out_fp32 = make_tensor(kOut, {4, 64}, dl_dtype("fp32"));
  expect(kjit_moe_finalize(eo.get(), s2p.get(), w.get(), nullptr, out_fp32.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "out", "kjit_moe_finalize");
  Tensor s2p9 = make_tensor(kOut4, {4, 9}, dl_dtype("int32"));
  Tensor w9 = make_tensor(kIn2, {4, 9}, dl_dtype("fp32"));
  expect(kjit_moe_finalize(eo.get(), s2p9.get(), w9.get(), nullptr, out.get(), nullptr),
         KJIT_ERROR_UNSUPPORTED, "top_k 9", "kjit_moe_finalize");
  Tensor shared_part = make_tensor(kOut + 2, {4, 64}, dl_dtype("bf16"));
  expect(kjit_moe_finalize(eo.get(), s2p.get(), w.get(), shared_part.get(), out.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "out overlaps shared_out", "kjit_moe_finalize");

  Tensor a = make_tensor(kIn, {10, 64}, dl_dtype("bf16"));
  Tensor b = make_tensor(kIn2, {4, 32, 64}, dl_dtype("bf16"));
  Tensor offsets = make_tensor(kOut2, {5}, dl_dtype("int32"));
  Tensor gout = make_tensor(kOut, {10, 32}, dl_dtype("bf16"));
  Tensor offsets4 = make_tensor(kOut2, {4}, dl_dtype("int32"));
  expect(kjit_moe_grouped_gemm(a.get(), b.get(), offsets4.get(), gout.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "expert_offsets must be [5]", "kjit_moe_grouped_gemm");
  Tensor b2 = make_tensor(kIn2, {128, 64}, dl_dtype("bf16"));
  expect(kjit_moe_grouped_gemm(a.get(), b2.get(), offsets.get(), gout.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "b must be [experts, n, k]", "kjit_moe_grouped_gemm");
  Tensor a_k = make_tensor(kIn, {10, 48}, dl_dtype("bf16"));
  expect(kjit_moe_grouped_gemm(a_k.get(), b.get(), offsets.get(), gout.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "k", "kjit_moe_grouped_gemm");
  Tensor gout_alias = make_tensor(kIn, {10, 32}, dl_dtype("bf16"));
  expect(kjit_moe_grouped_gemm(a.get(), b.get(), offsets.get(), gout_alias.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "out overlaps a", "kjit_moe_grouped_gemm");
  Tensor a_fp32 = make_tensor(kIn, {10, 64}, dl_dtype("fp32"));
  Tensor b_fp32 = make_tensor(kIn2, {4, 32, 64}, dl_dtype("fp32"));
  expect(kjit_moe_grouped_gemm(a_fp32.get(), b_fp32.get(), offsets.get(), gout.get(), nullptr),
         KJIT_ERROR_UNSUPPORTED, "bf16 and fp16", "kjit_moe_grouped_gemm");

  Tensor am = make_tensor(kIn, {4, 16, 64}, dl_dtype("bf16"));
  Tensor counts = make_tensor(kOut2, {4}, dl_dtype("int32"));
  Tensor mout = make_tensor(kOut, {4, 16, 32}, dl_dtype("bf16"));
  Tensor mout_bad = make_tensor(kOut, {4, 15, 32}, dl_dtype("bf16"));
  expect(kjit_moe_grouped_gemm_masked(am.get(), b.get(), counts.get(), mout_bad.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "out must be [experts, max_rows, n]",
         "kjit_moe_grouped_gemm_masked");
  Tensor am3 = make_tensor(kIn, {3, 16, 64}, dl_dtype("bf16"));
  expect(kjit_moe_grouped_gemm_masked(am3.get(), b.get(), counts.get(), mout.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "a has 3 experts but b has 4",
         "kjit_moe_grouped_gemm_masked");
  Tensor counts64 = make_tensor(kOut2, {4}, dl_dtype("int64"));
  expect(kjit_moe_grouped_gemm_masked(am.get(), b.get(), counts64.get(), mout.get(), nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "counts must be int32", "kjit_moe_grouped_gemm_masked");
}

TEST_CASE("moe abi: which outs the grouped tiles store through TMA", "[moe]") {
  // moe_tma_out: a 16-bit out TMA can describe (16-byte aligned base and rows, n a multiple of 8)
  // and a ring that leaves the 32 KB of staging room on the device; the grouped GEMMs never read
  // out, so no beta to ask about. No device: the address is only inspected.
  const ops::GemmTarget h200 = ops::hopper_gemm_target(false);  // tma_store_ok is moe_tma_out's
  ops::RowMatrix out;
  out.data = reinterpret_cast<void*>(uintptr_t{1} << 20);
  out.rows = 1000;
  out.cols = 1536;
  out.row_stride = 1536;
  out.dtype = ops::DType::kBF16;
  CHECK(ops::moe_tma_out(out, h200, 256, 4));
  CHECK(ops::moe_tma_out(out, h200, 128, 6));
  CHECK_FALSE(ops::moe_tma_out(out, h200, 128, 7));  // 224 KB of ring: no room
  ops::RowMatrix f32 = out;
  f32.dtype = ops::DType::kF32;
  CHECK_FALSE(ops::moe_tma_out(f32, h200, 128, 6));
  ops::RowMatrix fp16 = out;
  fp16.dtype = ops::DType::kF16;
  CHECK(ops::moe_tma_out(fp16, h200, 128, 6));
  ops::RowMatrix strided = out;
  strided.row_stride = 1540;  // 3080-byte rows
  CHECK_FALSE(ops::moe_tma_out(strided, h200, 128, 6));
  ops::RowMatrix odd = out;
  odd.cols = odd.row_stride = 1500;  // 3000-byte rows, n off 8
  CHECK_FALSE(ops::moe_tma_out(odd, h200, 128, 6));
  ops::RowMatrix shifted = out;
  shifted.data = static_cast<char*>(out.data) + 8;
  CHECK_FALSE(ops::moe_tma_out(shifted, h200, 128, 6));
  ops::GemmTarget small = h200;
  small.max_smem_optin = 200 * 1024;
  CHECK_FALSE(ops::moe_tma_out(out, small, 128, 6));
}

TEST_CASE("moe abi: choices and specs", "[moe]") {
  ops::GemmTarget h200;
  h200.cc_major = 9;
  h200.max_smem_optin = 232448;
  h200.sm_count = 132;
  h200.tma_ok = true;
  using ops::DType;
  const ops::MoeGemmConfig prefill =
      ops::select_moe_gemm(DType::kBF16, DType::kBF16, 32768, 128, 4096, 7168, 256, h200);
  CHECK(prefill.path == ops::GemmPath::kSm90);
  CHECK(prefill.bn == 256);  // DeepSeek-V3's 128 rows an expert (ops::moe_wide_tile)
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 4096, 1024, 4096, 4096, 4, h200).bn ==
        256);
  // From 128 rows an expert (ops::moe_wide_tile): Qwen3-30B-A3B's gate_up at 4096 and 2048 tokens
  // take 256-wide tiles, 1024 tokens (64 rows an expert) 128-wide ones.
  const ops::MoeGemmConfig qwen_4k =
      ops::select_moe_gemm(DType::kBF16, DType::kBF16, 32768, 256, 1536, 2048, 128, h200);
  CHECK(qwen_4k.bn == 256);
  CHECK(qwen_4k.stages == 4);
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 16384, 128, 1536, 2048, 128, h200).bn ==
        256);
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 8192, 64, 1536, 2048, 128, h200).bn ==
        128);
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 16256, 127, 1536, 2048, 128, h200).bn ==
        128);
  // MoeGemmTuning::bn forces a width on the tile path, with its ring depth, and refuses the rest.
  ops::MoeGemmTuning wide;
  wide.bn = 256;
  ops::MoeGemmConfig forced = prefill;
  ops::moe_gemm_width(forced, wide);
  CHECK(forced.bn == 256);
  CHECK(forced.stages == 4);
  CHECK(ops::moe_gemm_spec(forced).uri.find("_bn_256_stages_4") != std::string::npos);
  wide.bn = 128;
  ops::moe_gemm_width(forced, wide);
  CHECK(forced.bn == 128);
  CHECK(forced.stages == 6);
  wide.bn = 192;
  CHECK_THROWS_WITH(ops::moe_gemm_width(forced, wide), Catch::Contains("128 or 256, not 192"));
  wide.bn = 256;
  ops::MoeGemmConfig simt = forced;
  simt.path = ops::GemmPath::kSimt;
  CHECK_THROWS_WITH(ops::moe_gemm_width(simt, wide), Catch::Contains("sm90 tile kernel's"));
  ops::GemmTarget ampere = h200;
  ampere.cc_major = 8;
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kF32, 64, 8, 256, 256, 8, ampere).path ==
        ops::GemmPath::kSimt);
  h200.tma_ok = false;
  CHECK(ops::select_moe_gemm(DType::kF16, DType::kF16, 64, 8, 256, 67, 8, h200).path ==
        ops::GemmPath::kSimt);
  // Past the fallback grid's rows: a clear refusal, not a wrong launch.
  CHECK_THROWS_AS(
      ops::select_moe_gemm(DType::kBF16, DType::kBF16, int64_t{1} << 23, 8, 256, 256, 8, ampere),
      kjit::Error);

  CHECK(ops::select_moe_permute(DType::kBF16, 256, 16, 7168).buckets == 512);
  CHECK(ops::select_moe_permute(DType::kBF16, 8, 16, 4096).buckets == 32);
  CHECK(ops::select_moe_permute(DType::kBF16, 8, 16, 4096).vec == 8);
  CHECK(ops::select_moe_permute(DType::kBF16, 8, 2, 4096).vec == 1);
  CHECK(ops::select_moe_permute(DType::kF32, 8, 16, 6).vec == 2);
  CHECK(ops::select_moe_finalize(DType::kBF16, 16, 7168).vec == 8);

  const std::string uri = ops::moe_gemm_spec(prefill).uri;
  CHECK(uri.find("moe_grouped_gemm") == 0);
  CHECK(uri.find("sm90") != std::string::npos);
  for (const char* op : {"moe_route", "moe_permute", "moe_finalize", "moe_grouped_gemm"}) {
    const ops::OpDef& d = ops::op_or_throw(op);
    INFO(op);
    CHECK_FALSE(d.catalog().empty());
    for (const auto& set : d.catalog()) CHECK_NOTHROW(d.make_spec(set));
  }
}

namespace {

// A valid kjit_moe_forward call on fake addresses (tokens 4, hidden 64, experts 8, I 32, top 2):
// every test breaks one argument, so validation stops the call before any driver call.
struct Forward {
  static constexpr int64_t kTokens = 4, kHidden = 64, kExperts = 8, kInter = 32;
  int top_k = 2;
  size_t ws_bytes =
      ops::moe_forward_layout(kTokens, kExperts, 2, kHidden, kInter, ops::DType::kBF16).bytes;
  Tensor x = make_tensor(kIn, {kTokens, kHidden}, dl_dtype("bf16"));
  Tensor logits = make_tensor(kIn2, {kTokens, kExperts}, dl_dtype("fp32"));
  Tensor w13 = make_tensor(reinterpret_cast<char*>(0x30000000), {kExperts, 2 * kInter, kHidden},
                           dl_dtype("bf16"));
  Tensor w2 = make_tensor(reinterpret_cast<char*>(0x34000000), {kExperts, kHidden, kInter},
                          dl_dtype("bf16"));
  Tensor shared = make_tensor(kOut2, {kTokens, kHidden}, dl_dtype("bf16"));
  Tensor ws = make_tensor(kOut3, {static_cast<int64_t>(ws_bytes)}, DLDataType{kDLUInt, 8, 1});
  Tensor out = make_tensor(kOut, {kTokens, kHidden}, dl_dtype("bf16"));
  kjit_moe_forward_options o{};
  Forward() { kjit_moe_forward_options_init(&o); }
  kjit_status run() {
    return kjit_moe_forward(x.get(), logits.get(), nullptr, w13.get(), w2.get(), shared.get(),
                            ws.get(), out.get(), top_k, &o, nullptr);
  }
  void rejects(const char* fragment, kjit_status want = KJIT_ERROR_INVALID_ARGUMENT) {
    expect(run(), want, fragment, "kjit_moe_forward");
  }
};

}  // namespace

TEST_CASE("moe abi: forward options and workspace query", "[moe]") {
  kjit_moe_forward_options o;
  kjit_moe_forward_options_init(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.route.struct_size == sizeof o.route);
  CHECK(o.route.n_group == 1);
  CHECK(o.route.routed_scaling_factor == 1.0f);
  kjit_moe_forward_options_init(nullptr);  // ignored

  const DLDataType bf16 = dl_dtype("bf16");
  size_t bytes = 7;
  REQUIRE(kjit_moe_forward_workspace_bytes(300, 128, 8, 2048, 768, bf16, &bytes) == KJIT_SUCCESS);
  const ops::MoeForwardLayout l =
      ops::moe_forward_layout(300, 128, 8, 2048, 768, ops::DType::kBF16);
  CHECK(bytes == l.bytes);
  // Regions in order, 256-byte aligned, each as large as its tensor.
  const size_t pairs = 2400;
  const std::vector<std::pair<size_t, size_t>> regions = {
      {l.topk_ids, pairs * 4},        {l.topk_weights, pairs * 4},    {l.offsets, 129 * 4},
      {l.permuted_to_src, pairs * 4}, {l.src_to_permuted, pairs * 4}, {l.rows, pairs * 2048 * 2},
      {l.gate_up, pairs * 1536 * 2},  {l.act, pairs * 768 * 2}};
  for (size_t i = 0; i < regions.size(); ++i) {
    INFO("region " << i);
    CHECK(regions[i].first % 256 == 0);
    const size_t end = i + 1 < regions.size() ? regions[i + 1].first : l.bytes;
    CHECK(end >= regions[i].first + regions[i].second);
    CHECK(end - regions[i].first < regions[i].second + 256);
  }
  // fp16 sizes as bf16; zero tokens still need the offsets.
  size_t h = 0;
  REQUIRE(kjit_moe_forward_workspace_bytes(300, 128, 8, 2048, 768, dl_dtype("fp16"), &h) ==
          KJIT_SUCCESS);
  CHECK(h == bytes);
  REQUIRE(kjit_moe_forward_workspace_bytes(0, 8, 2, 64, 32, bf16, &h) == KJIT_SUCCESS);
  CHECK(h == 256);

  bytes = 7;
  const char* api = "kjit_moe_forward_workspace_bytes";
  expect(kjit_moe_forward_workspace_bytes(4, 8, 0, 64, 32, bf16, &bytes),
         KJIT_ERROR_INVALID_ARGUMENT, "top_k (0)", api);
  expect(kjit_moe_forward_workspace_bytes(4, 8, 9, 64, 32, bf16, &bytes),
         KJIT_ERROR_INVALID_ARGUMENT, "top_k (9)", api);
  expect(kjit_moe_forward_workspace_bytes(-1, 8, 2, 64, 32, bf16, &bytes),
         KJIT_ERROR_INVALID_ARGUMENT, "tokens -1", api);
  expect(kjit_moe_forward_workspace_bytes(4, 8, 2, 64, -32, bf16, &bytes),
         KJIT_ERROR_INVALID_ARGUMENT, "intermediate -32", api);
  expect(kjit_moe_forward_workspace_bytes(4, 8, 2, 64, 32, dl_dtype("fp32"), &bytes),
         KJIT_ERROR_UNSUPPORTED, "bf16 or fp16", api);
  expect(kjit_moe_forward_workspace_bytes(4, 8, 2, 64, 32, DLDataType{kDLUInt, 8, 1}, &bytes),
         KJIT_ERROR_UNSUPPORTED, "not bf16 or fp16", api);
  expect(kjit_moe_forward_workspace_bytes(int64_t{1} << 30, 8, 4, 64, 32, bf16, &bytes),
         KJIT_ERROR_INVALID_ARGUMENT, "below 2^31", api);
  expect(kjit_moe_forward_workspace_bytes(1 << 20, 8, 8, int64_t{1} << 50, 32, bf16, &bytes),
         KJIT_ERROR_INVALID_ARGUMENT, "overflows", api);
  CHECK(bytes == 7);  // untouched by a rejected query
  expect(kjit_moe_forward_workspace_bytes(4, 8, 2, 64, 32, bf16, nullptr),
         KJIT_ERROR_INVALID_ARGUMENT, "bytes is NULL", api);
}

TEST_CASE("moe abi: forward rejects bad arguments before any launch", "[moe]") {
  {
    Forward f;
    f.top_k = 9;
    f.rejects("top_k (9)");
  }
  {
    Forward f;
    f.top_k = 0;
    f.rejects("top_k (0)");
  }
  {
    Forward f;
    f.w13 = make_tensor(kIn2, {8, 63, 64}, dl_dtype("bf16"));
    f.rejects("w13 must be [experts, 2 intermediate, hidden]");
  }
  {
    Forward f;
    f.w13 = make_tensor(reinterpret_cast<char*>(0x30000000), {7, 64, 64}, dl_dtype("bf16"));
    f.rejects("w13 must be [8, 64, 64]");
  }
  {
    Forward f;
    f.w2 = make_tensor(reinterpret_cast<char*>(0x34000000), {8, 32, 64}, dl_dtype("bf16"));
    f.rejects("w2 must be [8, 64, 32]");
  }
  {
    Forward f;
    f.w2 = make_tensor(reinterpret_cast<char*>(0x34000000), {8, 64, 32}, dl_dtype("fp16"));
    f.rejects("w2 must be x's dtype bf16");
  }
  {
    Forward f;  // rows of w2 padded to 40 elements
    f.w2 = make_tensor(reinterpret_cast<char*>(0x34000000), {8, 64, 32}, dl_dtype("bf16"),
                       {64 * 40, 40, 1});
    f.rejects("w2 must be compact (row stride 40, 32 columns)");
  }
  {
    Forward f;
    f.logits = make_tensor(kIn2, {5, 8}, dl_dtype("fp32"));
    f.rejects("router_logits has 5 rows");
  }
  {
    Forward f;
    f.out = make_tensor(kOut, {4, 63}, dl_dtype("bf16"));
    f.rejects("out must be x's shape");
  }
  {
    Forward f;
    f.shared = make_tensor(kOut2, {4, 64}, dl_dtype("fp16"));
    f.rejects("shared_out");
  }
  {
    Forward f;
    f.ws = make_tensor(kOut3, {static_cast<int64_t>(f.ws_bytes) - 1}, DLDataType{kDLUInt, 8, 1});
    f.rejects("bytes but the call needs");
  }
  {
    Forward f;  // a workspace of int32 words is counted in bytes
    f.ws = make_tensor(kOut3, {static_cast<int64_t>(f.ws_bytes / 4) - 1}, dl_dtype("int32"));
    f.rejects("bytes but the call needs");
  }
  {
    Forward f;
    f.ws = make_tensor(kOut3 + 8, {static_cast<int64_t>(f.ws_bytes)}, DLDataType{kDLUInt, 8, 1});
    f.rejects("16-byte aligned");
  }
  {
    Forward f;
    f.ws = make_tensor(kOut3, {static_cast<int64_t>(f.ws_bytes)}, DLDataType{kDLUInt, 8, 1});
    f.ws.t.device.device_id = 1;
    f.rejects("workspace is on cuda:1 but the call is for cuda:0");
  }
  {
    Forward f;
    f.ws = make_tensor(kOut3, {2, static_cast<int64_t>(f.ws_bytes)}, DLDataType{kDLUInt, 8, 1});
    f.rejects("workspace must be 1-D");
  }
  {
    Forward f;
    f.ws.t.device.device_type = kDLCPU;
    f.rejects("workspace is on device type");
  }
  {
    Forward f;
    f.ws = make_tensor(kIn, {static_cast<int64_t>(f.ws_bytes)}, DLDataType{kDLUInt, 8, 1});
    f.rejects("workspace overlaps x");
  }
  {
    Forward f;
    f.out = make_tensor(kOut3 + 512, {4, 64}, dl_dtype("bf16"));
    f.rejects("out overlaps workspace");
  }
  {
    Forward f;
    f.out = make_tensor(reinterpret_cast<char*>(0x34000000), {4, 64}, dl_dtype("bf16"));
    f.rejects("out overlaps w2");
  }
  {
    Forward f;
    f.out = make_tensor(kOut2 + 2, {4, 64}, dl_dtype("bf16"));
    f.rejects("out overlaps shared_out");
  }
  {
    Forward f;
    f.o.struct_size = 0;
    f.rejects("kjit_moe_forward_options_init");
  }
  {
    Forward f;
    f.o.route.struct_size = 0;
    f.rejects("options->route.struct_size is 0");
  }
  {
    Forward f;
    f.o.route.scoring = 5;
    f.rejects("options->scoring is 5");
  }
  {
    Forward f;  // fp32 everywhere: the layer runs bf16 / fp16 experts only
    f.x = make_tensor(kIn, {4, 64}, dl_dtype("fp32"));
    f.w13 = make_tensor(reinterpret_cast<char*>(0x30000000), {8, 64, 64}, dl_dtype("fp32"));
    f.w2 = make_tensor(reinterpret_cast<char*>(0x34000000), {8, 64, 32}, dl_dtype("fp32"));
    f.out = make_tensor(kOut, {4, 64}, dl_dtype("fp32"));
    f.shared = make_tensor(kOut2, {4, 64}, dl_dtype("fp32"));
    f.rejects("bf16 or fp16", KJIT_ERROR_UNSUPPORTED);
  }
  {
    Forward f;  // zero tokens: validated, then nothing to do (no driver call)
    f.x = make_tensor(kIn, {0, 64}, dl_dtype("bf16"));
    f.logits = make_tensor(kIn2, {0, 8}, dl_dtype("fp32"));
    f.out = make_tensor(kOut, {0, 64}, dl_dtype("bf16"));
    f.shared = make_tensor(kOut2, {0, 64}, dl_dtype("bf16"));
    CHECK(f.run() == KJIT_SUCCESS);
  }
}
