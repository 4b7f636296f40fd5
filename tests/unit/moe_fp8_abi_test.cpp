// The fp8 block-scaled grouped GEMM without a GPU: kjit_moe_grouped_gemm_fp8{,_masked}'s argument
// checks (rejected before any driver call), its selection (sm_90a only: a clear
// KJIT_ERROR_UNSUPPORTED elsewhere), spec and registry entry.
#include <catch2/catch.hpp>

#include <string>

#include "kjit/kjit.h"
#include "ops/moe/moe.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first (or
// has nothing to do).
char* addr(unsigned i) {
  return reinterpret_cast<char*>(0x10000000ull + 0x4000000ull * i);
}

// A valid call (experts 4, k 256, n 256, rows 10 / max_rows 6); each test breaks one argument.
struct Fp8Call {
  bool masked = false;
  int64_t experts = 4, n = 256, k = 256, rows = 10, max_rows = 6;
  Tensor a, b, sa, sb, sched, out;
  explicit Fp8Call(bool m) : masked(m) {
    const DLDataType f8 = dl_dtype("e4m3"), f32 = dl_dtype("fp32");
    b = make_tensor(addr(1), {experts, n, k}, f8);
    sb = make_tensor(addr(3), {experts, n / 128, k / 128}, f32);
    if (masked) {
      a = make_tensor(addr(0), {experts, max_rows, k}, f8);
      sa = make_tensor(addr(2), {experts, max_rows, k / 128}, f32);
      sched = make_tensor(addr(4), {experts}, dl_dtype("int32"));
      out = make_tensor(addr(5), {experts, max_rows, n}, dl_dtype("bf16"));
    } else {
      a = make_tensor(addr(0), {rows, k}, f8);
      sa = make_tensor(addr(2), {rows, k / 128}, f32);
      sched = make_tensor(addr(4), {experts + 1}, dl_dtype("int32"));
      out = make_tensor(addr(5), {rows, n}, dl_dtype("bf16"));
    }
  }
  kjit_status run() {
    return masked ? kjit_moe_grouped_gemm_fp8_masked(a.get(), b.get(), sa.get(), sb.get(),
                                                     sched.get(), out.get(), nullptr)
                  : kjit_moe_grouped_gemm_fp8(a.get(), b.get(), sa.get(), sb.get(), sched.get(),
                                              out.get(), nullptr);
  }
  void rejects(const char* fragment, kjit_status want = KJIT_ERROR_INVALID_ARGUMENT) {
    const kjit_status s = run();
    const std::string err = kjit_last_error();
    INFO((masked ? "masked" : "contiguous") << ": " << err);
    CHECK(s == want);
    CHECK(err.find(fragment) != std::string::npos);
    CHECK(err.find(masked ? "kjit_moe_grouped_gemm_fp8_masked" : "kjit_moe_grouped_gemm_fp8") == 0);
  }
};

ops::GemmTarget h200() {
  ops::GemmTarget t;
  t.cc_major = 9;
  t.max_smem_optin = 232448;
  t.sm_count = 132;
  t.tma_ok = true;
  return t;
}

}  // namespace

TEST_CASE("moe fp8 abi: grouped GEMM arguments", "[moe][fp8]") {
  const DLDataType f32 = dl_dtype("fp32");
  for (const bool masked : {false, true}) {
    {
      Fp8Call c(masked);  // bf16 operands go to kjit_moe_grouped_gemm
      c.a.t.dtype = c.b.t.dtype = dl_dtype("bf16");
      c.rejects("float8_e4m3fn");
    }
    {
      Fp8Call c(masked);
      c.b.t.dtype = dl_dtype("bf16");
      c.rejects("b is bf16 but a is e4m3");
    }
    {
      Fp8Call c(masked);  // scale_a one chunk short
      c.sa = masked ? make_tensor(addr(2), {4, 6, 1}, f32) : make_tensor(addr(2), {10, 1}, f32);
      c.rejects("scale_a is");
    }
    {
      Fp8Call c(masked);  // per-row scale_a (kjit_gemm_fp8's other modes are not served)
      c.sa = make_tensor(addr(2), {masked ? 24 : 10}, f32);
      c.rejects("ceil(k / 128)");
    }
    {
      Fp8Call c(masked);  // scale_b without the experts dim
      c.sb = make_tensor(addr(3), {2, 2}, f32);
      c.rejects("scale_b is [2, 2]");
    }
    {
      Fp8Call c(masked);  // scale_b per expert but one n block short
      c.sb = make_tensor(addr(3), {4, 1, 2}, f32);
      c.rejects("[experts, ceil(n / 128), ceil(k / 128)] = [4, 2, 2]");
    }
    {
      Fp8Call c(masked);
      c.sb.t.dtype = dl_dtype("bf16");
      c.rejects("scale_b must be fp32");
    }
    {
      Fp8Call c(masked);  // a padded scale_b
      c.sb = make_tensor(addr(3), {4, 2, 2}, f32, {8, 4, 1});
      c.rejects("scale_b must be compact");
    }
    {
      Fp8Call c(masked);
      c.sa.t.device.device_id = 1;
      c.rejects("scale_a is on cuda:1");
    }
    {
      Fp8Call c(masked);  // out over the scales
      c.out.t.data = c.sb.t.data;
      c.rejects("out overlaps");
    }
    {
      Fp8Call c(masked);
      c.sa.t.data = nullptr;
      c.rejects("scale_a");
    }
    {
      Fp8Call c(masked);
      c.sched.t.dtype = dl_dtype("int64");
      c.rejects("must be int32");
    }
    {
      Fp8Call c(masked);  // out of a's rows but the wrong width
      c.out = masked ? make_tensor(addr(5), {4, 6, 128}, dl_dtype("bf16"))
                     : make_tensor(addr(5), {10, 128}, dl_dtype("bf16"));
      c.rejects("out must be");
    }
  }
  {
    // No rows: a successful no-op after validation (no driver call).
    Fp8Call c(false);
    c.rows = 0;
    c.a = make_tensor(addr(0), {0, 256}, dl_dtype("e4m3"));
    c.sa = make_tensor(addr(2), {0, 2}, f32);
    c.out = make_tensor(addr(5), {0, 256}, dl_dtype("bf16"));
    INFO(kjit_last_error());
    CHECK(c.run() == KJIT_SUCCESS);
    Fp8Call m(true);
    m.a = make_tensor(addr(0), {4, 0, 256}, dl_dtype("e4m3"));
    m.sa = make_tensor(addr(2), {4, 0, 2}, f32);
    m.out = make_tensor(addr(5), {4, 0, 256}, dl_dtype("bf16"));
    CHECK(m.run() == KJIT_SUCCESS);
  }
}

TEST_CASE("moe fp8 abi: sm_90a only, choices and specs", "[moe][fp8]") {
  using ops::DType;
  const ops::MoeGemmFp8Config c =
      ops::select_moe_gemm_fp8(DType::kBF16, 32768, 4096, 7168, 256, false, h200());
  CHECK(c.stages == 6);
  CHECK(c.swiglu == 0);
  CHECK(ops::select_moe_gemm_fp8(DType::kBF16, 8, 1536, 2048, 128, true, h200()).swiglu == 1);
  // Elsewhere a clear refusal, naming what is missing: no fallback serves fp8 experts.
  const auto refused = [](const ops::GemmTarget& t, int64_t n, int64_t k, bool swiglu,
                          const char* fragment) {
    try {
      ops::select_moe_gemm_fp8(DType::kBF16, 64, n, k, 8, swiglu, t);
      FAIL("accepted");
    } catch (const kjit::Error& e) {
      INFO(e.what());
      CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
    }
  };
  ops::GemmTarget ampere = h200();
  ampere.cc_major = 8;
  refused(ampere, 256, 256, false, "sm_90a");
  ops::GemmTarget blackwell = h200();
  blackwell.cc_major = 10;
  refused(blackwell, 256, 256, false, "this one: 10.0");
  ops::GemmTarget untma = h200();
  untma.tma_ok = false;  // k = 40, or a misaligned base
  refused(untma, 256, 40, false, "k > 0 a multiple of 16");
  // The SwiGLU tile's up slice must sit in one 128-row scale block: I a multiple of 64.
  refused(h200(), 2 * 136, 256, true, "I a multiple of 64");
  refused(h200(), 255, 256, true, "I a multiple of 64");
  CHECK_THROWS_AS(ops::select_moe_gemm_fp8(DType::kI32, 64, 256, 256, 8, false, h200()),
                  kjit::Error);

  const std::string uri = ops::moe_gemm_fp8_spec(c).uri;
  CHECK(uri.find("moe_grouped_gemm_fp8") == 0);
  CHECK(uri.find("swiglu") == std::string::npos);  // false is left out of the URI
  ops::MoeGemmFp8Config sw = c;
  sw.swiglu = 1;
  CHECK(ops::moe_gemm_fp8_spec(sw).uri != uri);
  CHECK(ops::moe_gemm_fp8_spec(c).arch_families == std::vector<std::string>{"sm_90a"});

  const ops::OpDef& d = ops::op_or_throw("moe_grouped_gemm_fp8");
  CHECK(d.arch_families == std::vector<std::string>{"sm_90a"});
  REQUIRE_FALSE(d.catalog().empty());
  for (const auto& set : d.catalog()) CHECK_NOTHROW(d.make_spec(set));
  CHECK(d.make_spec({{"out_dtype", "bf16"}}).uri == uri);
  CHECK_FALSE(d.definitions().empty());

  // The forced 256-wide tile (MoeGemmTuning::bn): 4 stages, its own URI; not on the decode
  // path, not another width, and with SwiGLU only where I is a multiple of 128.
  ops::MoeGemmTuning wide;
  wide.bn = 256;
  ops::MoeGemmFp8Config w = c;
  ops::moe_gemm_fp8_width(w, wide, 4096, false);
  CHECK(w.bn == 256);
  CHECK(w.stages == 4);
  CHECK(ops::moe_gemm_fp8_spec(w).uri.find("_bn_256_stages_4") != std::string::npos);
  CHECK(d.make_spec({{"out_dtype", "bf16"}, {"bn", "256"}}).uri == ops::moe_gemm_fp8_spec(w).uri);
  ops::MoeGemmFp8Config sw256 = c;
  ops::moe_gemm_fp8_width(sw256, wide, 2 * 768, true);
  CHECK(sw256.bn == 256);
  ops::MoeGemmFp8Config odd = c;
  CHECK_THROWS_AS(ops::moe_gemm_fp8_width(odd, wide, 2 * 192, true), kjit::Error);
  ops::MoeGemmFp8Config dec =
      ops::select_moe_gemm_fp8(DType::kBF16, 8, 1536, 2048, 128, false, h200(), 8);
  REQUIRE(dec.tokens != 0);
  CHECK_THROWS_AS(ops::moe_gemm_fp8_width(dec, wide, 1536, false), kjit::Error);
  ops::MoeGemmTuning bad;
  bad.bn = 192;
  ops::MoeGemmFp8Config b192 = c;
  CHECK_THROWS_AS(ops::moe_gemm_fp8_width(b192, bad, 4096, false), kjit::Error);
  ops::MoeGemmFp8Config plain = c;
  ops::moe_gemm_fp8_width(plain, ops::MoeGemmTuning{}, 4096, false);  // 0: the selection's
  CHECK(plain.bn == 128);
  CHECK_THROWS(d.make_spec({{"out_dtype", "bf16"}, {"bn", "256"}, {"tokens", "16"}}));
  // The selection's width: 256 from 256 rows an expert (ops::moe_fp8_wide_tile: Qwen3-30B-A3B
  // at 4096 tokens, plain and SwiGLU), not where a SwiGLU tile's halves would straddle scale
  // blocks (I 192); a forced 128 takes it back with its ring depth.
  for (const bool swiglu : {false, true}) {
    const ops::MoeGemmFp8Config q =
        ops::select_moe_gemm_fp8(DType::kBF16, 32768, 1536, 2048, 128, swiglu, h200());
    CHECK(q.bn == 256);
    CHECK(q.stages == 4);
  }
  CHECK(ops::select_moe_gemm_fp8(DType::kBF16, 32768, 384, 2048, 128, true, h200()).bn == 128);
  // At 128 rows an expert (2048 tokens) the fp8 rule keeps 128-wide tiles, unlike the bf16 one.
  CHECK(ops::select_moe_gemm_fp8(DType::kBF16, 16384, 1536, 2048, 128, false, h200()).bn == 128);
  ops::MoeGemmFp8Config back =
      ops::select_moe_gemm_fp8(DType::kBF16, 32768, 1536, 2048, 128, false, h200());
  ops::MoeGemmTuning narrow;
  narrow.bn = 128;
  ops::moe_gemm_fp8_width(back, narrow, 1536, false);
  CHECK(back.bn == 128);
  CHECK(back.stages == 6);
}

namespace {

// A valid kjit_moe_forward_fp8 call on fake addresses (tokens 4, hidden 256, experts 8, I 128,
// top 2): every test breaks one argument, so validation stops the call before any driver call.
struct ForwardFp8 {
  static constexpr int64_t kTokens = 4, kHidden = 256, kExperts = 8, kInter = 128;
  int top_k = 2;
  size_t ws_bytes =
      ops::moe_forward_layout(kTokens, kExperts, 2, kHidden, kInter, ops::DType::kE4M3).bytes;
  Tensor x = make_tensor(addr(0), {kTokens, kHidden}, dl_dtype("bf16"));
  Tensor logits = make_tensor(addr(1), {kTokens, kExperts}, dl_dtype("fp32"));
  Tensor w13 = make_tensor(addr(2), {kExperts, 2 * kInter, kHidden}, dl_dtype("e4m3"));
  Tensor w13s = make_tensor(addr(3), {kExperts, 2, 2}, dl_dtype("fp32"));
  Tensor w2 = make_tensor(addr(4), {kExperts, kHidden, kInter}, dl_dtype("e4m3"));
  Tensor w2s = make_tensor(addr(5), {kExperts, 2, 1}, dl_dtype("fp32"));
  Tensor ws = make_tensor(addr(6), {static_cast<int64_t>(ws_bytes)}, DLDataType{kDLUInt, 8, 1});
  Tensor out = make_tensor(addr(7), {kTokens, kHidden}, dl_dtype("bf16"));
  kjit_status run() {
    return kjit_moe_forward_fp8(x.get(), logits.get(), nullptr, w13.get(), w13s.get(), w2.get(),
                                w2s.get(), nullptr, ws.get(), out.get(), top_k, nullptr, nullptr);
  }
  void rejects(const char* fragment, kjit_status want = KJIT_ERROR_INVALID_ARGUMENT) {
    const kjit_status s = run();
    const std::string err = kjit_last_error();
    INFO(err);
    CHECK(s == want);
    CHECK(err.find(fragment) != std::string::npos);
    CHECK(err.find("kjit_moe_forward_fp8") == 0);
  }
};

}  // namespace

TEST_CASE("moe fp8 abi: the fp8 layer's workspace and refusals", "[moe][fp8]") {
  // The fp8 layout: the bf16 one's regions, then x and the activation quantized per group.
  const ops::MoeForwardLayout bf =
      ops::moe_forward_layout(300, 128, 8, 2048, 768, ops::DType::kBF16);
  const ops::MoeForwardLayout f8 =
      ops::moe_forward_layout(300, 128, 8, 2048, 768, ops::DType::kE4M3);
  CHECK(bf.rows_fp8 == 0);
  CHECK(f8.act == bf.act);
  CHECK(f8.rows_fp8 >= bf.bytes);
  CHECK(f8.rows_scale >= f8.rows_fp8 + 2400 * 2048);
  CHECK(f8.act_fp8 >= f8.rows_scale + 2400 * 16 * 4);
  CHECK(f8.act_scale >= f8.act_fp8 + 2400 * 768);
  CHECK(f8.bytes >= f8.act_scale + 2400 * 6 * 4);
  CHECK(f8.bytes % 256 == 0);
  size_t bytes = 0;
  CHECK(kjit_moe_forward_workspace_bytes(300, 128, 8, 2048, 768, dl_dtype("e4m3"), &bytes) ==
        KJIT_SUCCESS);
  CHECK(bytes == f8.bytes);
  CHECK(kjit_moe_forward_workspace_bytes(300, 128, 8, 2048, 768, dl_dtype("int32"), &bytes) ==
        KJIT_ERROR_UNSUPPORTED);

  {
    ForwardFp8 f;  // no tokens: a successful no-op after validation (no driver call)
    f.x = make_tensor(addr(0), {0, 256}, dl_dtype("bf16"));
    f.logits = make_tensor(addr(1), {0, 8}, dl_dtype("fp32"));
    f.out = make_tensor(addr(7), {0, 256}, dl_dtype("bf16"));
    INFO(kjit_last_error());
    CHECK(f.run() == KJIT_SUCCESS);
  }
  {
    ForwardFp8 f;
    f.w13.t.dtype = dl_dtype("bf16");
    f.rejects("w13 must be e4m3");
  }
  {
    ForwardFp8 f;
    f.w2s = make_tensor(addr(5), {8, 2, 2}, dl_dtype("fp32"));
    f.rejects("w2_scale is [8, 2, 2] but must be");
  }
  {
    ForwardFp8 f;
    f.w13s = make_tensor(addr(3), {1}, dl_dtype("fp32"));
    f.rejects("w13_scale");
  }
  {
    ForwardFp8 f;
    f.w13s.t.dtype = dl_dtype("bf16");
    f.rejects("w13_scale must be fp32");
  }
  {
    ForwardFp8 f;  // a workspace sized for bf16 experts lacks the quantized regions
    f.ws = make_tensor(
        addr(6),
        {static_cast<int64_t>(ops::moe_forward_layout(4, 8, 2, 256, 128, ops::DType::kBF16).bytes)},
        DLDataType{kDLUInt, 8, 1});
    f.rejects("workspace");
  }
  {
    ForwardFp8 f;
    f.out.t.data = f.w2s.t.data;
    f.rejects("out overlaps w2_scale");
  }
  {
    ForwardFp8 f;  // fp32 activations
    f.x.t.dtype = f.out.t.dtype = dl_dtype("fp32");
    f.rejects("bf16 or fp16", KJIT_ERROR_UNSUPPORTED);
  }
  {
    ForwardFp8 f;
    f.top_k = 9;
    f.rejects("top_k");
  }
}
