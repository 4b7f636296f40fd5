// The fp8 GEMM and the fp8 quantization without a GPU: the C ABI's argument checks (rejected
// before any driver call, so the same without a device), scale-mode inference, the path choice,
// the specs and catalogs, and the host e4m3 reference the GPU tests trust.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <string>

#include "gemm/gemm_fp8_params.h"
#include "kjit/kjit.h"
#include "ops/gemm/gemm_fp8.hpp"
#include "ops/quant/quant_fp8.hpp"
#include "ops/registry.hpp"
#include "reference/fp8_ref.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

char* const kA = reinterpret_cast<char*>(0x10000000);
char* const kB = reinterpret_cast<char*>(0x20000000);
char* const kSa = reinterpret_cast<char*>(0x28000000);
char* const kSb = reinterpret_cast<char*>(0x2C000000);
char* const kOut = reinterpret_cast<char*>(0x30000000);

// A valid per-row call: a [4, 256], b [300, 256], out [4, 300].
struct Call {
  Tensor a = make_tensor(kA, {4, 256}, dl_dtype("e4m3"));
  Tensor b = make_tensor(kB, {300, 256}, dl_dtype("e4m3"));
  Tensor sa = make_tensor(kSa, {4}, dl_dtype("fp32"));
  Tensor sb = make_tensor(kSb, {300}, dl_dtype("fp32"));
  Tensor out = make_tensor(kOut, {4, 300}, dl_dtype("bf16"));
  const kjit_gemm_options* options = nullptr;
  kjit_status run() {
    return kjit_gemm_fp8(a.get(), b.get(), sa.get(), sb.get(), out.get(), options, nullptr);
  }
  void block_scales(int64_t m, int64_t n, int64_t k) {
    sa = make_tensor(kSa, {m, (k + 127) / 128}, dl_dtype("fp32"));
    sb = make_tensor(kSb, {(n + 127) / 128, (k + 127) / 128}, dl_dtype("fp32"));
  }
};

struct Quant {
  Tensor in = make_tensor(kA, {4, 300}, dl_dtype("bf16"));
  Tensor out = make_tensor(kB, {4, 300}, dl_dtype("e4m3"));
  Tensor scale = make_tensor(kSa, {4, 3}, dl_dtype("fp32"));
  kjit_fp8_scaling scaling = KJIT_FP8_PER_GROUP_128;
  kjit_status run() { return kjit_quant_fp8(in.get(), out.get(), scale.get(), scaling, nullptr); }
};

// The call (a Call or a Quant) fails validation naming `fragment`, and the guard names `entry`.
template <class C>
void expect_invalid(C& c, const char* fragment, const char* entry) {
  const kjit_status s = c.run();
  const std::string err = kjit_last_error();
  INFO("last error: " << err);
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(err.find(fragment) != std::string::npos);
  CHECK(err.find(entry) == 0);
}
void expect_invalid(Call& c, const char* fragment) {
  expect_invalid(c, fragment, "kjit_gemm_fp8");
}
void expect_invalid(Quant& q, const char* fragment) {
  expect_invalid(q, fragment, "kjit_quant_fp8");
}

// An H100 / H200 (sm_90, 227 KB of opt-in shared memory).
ops::GemmTarget h100(bool tma_ok) {
  ops::GemmTarget t;
  t.cc_major = 9;
  t.max_smem_optin = 232448;
  t.sm_count = 132;
  t.tma_ok = tma_ok;
  return t;
}

}  // namespace

TEST_CASE("gemm_fp8 abi: libkjit.so exports kjit_gemm_fp8 and kjit_quant_fp8", "[c_abi][fp8]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_gemm_fp8") != nullptr);
  CHECK(dlsym(lib, "kjit_quant_fp8") != nullptr);
  dlclose(lib);
}

TEST_CASE("gemm_fp8 abi: rejects NULL tensors", "[c_abi][fp8]") {
  Call c;
  CHECK(kjit_gemm_fp8(nullptr, c.b.get(), c.sa.get(), c.sb.get(), c.out.get(), nullptr, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("a is NULL") != std::string::npos);
  CHECK(kjit_gemm_fp8(c.a.get(), c.b.get(), nullptr, c.sb.get(), c.out.get(), nullptr, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("scale_a is NULL") != std::string::npos);
  CHECK(kjit_gemm_fp8(c.a.get(), c.b.get(), c.sa.get(), nullptr, c.out.get(), nullptr, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("scale_b is NULL") != std::string::npos);
}

TEST_CASE("gemm_fp8 abi: rejects operands that are not e4m3 and scales that are not fp32",
          "[c_abi][fp8]") {
  Call bf;
  bf.a = make_tensor(kA, {4, 256}, dl_dtype("bf16"));
  bf.b = make_tensor(kB, {300, 256}, dl_dtype("bf16"));
  expect_invalid(bf, "float8_e4m3fn");
  Call mixed;
  mixed.b = make_tensor(kB, {300, 256}, dl_dtype("bf16"));
  expect_invalid(mixed, "b");
  Call u8;  // uint8 bytes are not e4m3
  u8.a = make_tensor(kA, {4, 256}, DLDataType{kDLUInt, 8, 1});
  expect_invalid(u8, "a");
  Call sa;
  sa.sa = make_tensor(kSa, {4}, dl_dtype("bf16"));
  expect_invalid(sa, "scale_a must be fp32");
  Call sb;
  sb.sb = make_tensor(kSb, {300}, dl_dtype("fp16"));
  expect_invalid(sb, "scale_b must be fp32");
  Call out;
  out.out = make_tensor(kOut, {4, 300}, dl_dtype("int32"));
  CHECK(out.run() == KJIT_ERROR_UNSUPPORTED);
  Call out8;
  out8.out = make_tensor(kOut, {4, 300}, dl_dtype("e4m3"));
  CHECK(out8.run() == KJIT_ERROR_UNSUPPORTED);
}

TEST_CASE("gemm_fp8 abi: rejects operand shape mismatches", "[c_abi][fp8]") {
  Call k;
  k.b = make_tensor(kB, {300, 255}, dl_dtype("e4m3"));
  expect_invalid(k, "k");
  Call n;
  n.out = make_tensor(kOut, {4, 299}, dl_dtype("bf16"));
  expect_invalid(n, "(n)");
  Call b3;
  b3.b = make_tensor(kB, {1, 300, 256}, dl_dtype("e4m3"));
  expect_invalid(b3, "2-D");
}

TEST_CASE("gemm_fp8 abi: rejects scale shapes that name no mode", "[c_abi][fp8]") {
  Call rows;
  rows.sa = make_tensor(kSa, {5}, dl_dtype("fp32"));
  expect_invalid(rows, "scale_a is [5]");
  Call cols;
  cols.sb = make_tensor(kSb, {299}, dl_dtype("fp32"));
  expect_invalid(cols, "scale_b is [299]");
  Call half_block;  // a 2-D scale_a beside a 1-D scale_b
  half_block.sa = make_tensor(kSa, {4, 2}, dl_dtype("fp32"));
  expect_invalid(half_block, "scale_b");
  Call block_k;
  block_k.block_scales(4, 300, 256);
  block_k.sa = make_tensor(kSa, {4, 3}, dl_dtype("fp32"));  // ceil(256 / 128) = 2 chunks
  expect_invalid(block_k, "scale_a is [4, 3]");
  Call block_n;
  block_n.block_scales(4, 300, 256);
  block_n.sb = make_tensor(kSb, {2, 2}, dl_dtype("fp32"));  // ceil(300 / 128) = 3 blocks
  expect_invalid(block_n, "scale_b is [2, 2]");
  Call scalar;  // 0-D is not [1]
  scalar.sa = make_tensor(kSa, {}, dl_dtype("fp32"));
  expect_invalid(scalar, "scale_a");
  Call strided;  // block scales must be compact
  strided.block_scales(4, 300, 256);
  strided.sa = make_tensor(kSa, {4, 2}, dl_dtype("fp32"), {4, 1});
  expect_invalid(strided, "compact");
  Call dev;
  dev.sb = make_tensor(kSb, {300}, dl_dtype("fp32"), {}, 1);
  expect_invalid(dev, "scale_b is on cuda:1");
}

TEST_CASE("gemm_fp8 abi: rejects an out overlapping an operand or a scale", "[c_abi][fp8]") {
  Call a;
  a.out = make_tensor(kA, {4, 300}, dl_dtype("bf16"));
  expect_invalid(a, "overlaps a");
  Call s;
  s.out = make_tensor(kSa, {4, 300}, dl_dtype("bf16"));
  expect_invalid(s, "overlaps scale_a");
  Call nan;
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  o.alpha = INFINITY;
  nan.options = &o;
  expect_invalid(nan, "finite");
}

TEST_CASE("gemm_fp8 abi: options.weights_early is 0 or 1", "[c_abi][fp8]") {
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  CHECK(o.weights_early == 0);
  for (int bad : {-1, 2}) {
    Call c;
    o.weights_early = bad;
    c.options = &o;
    expect_invalid(c, "weights_early");
  }
  // Either valid value passes validation (the call then needs a device).
  KJIT_RUN_WITHOUT_GPU();
  for (int ok : {0, 1}) {
    Call c;
    o.weights_early = ok;
    c.options = &o;
    CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  }
}

TEST_CASE("gemm_fp8 abi: valid calls of every mode report no device without a GPU",
          "[c_abi][fp8]") {
  KJIT_RUN_WITHOUT_GPU();
  Call row;
  CHECK(row.run() == KJIT_ERROR_NO_DEVICE);
  Call tensor;
  tensor.sa = make_tensor(kSa, {1}, dl_dtype("fp32"));
  tensor.sb = make_tensor(kSb, {1}, dl_dtype("fp32"));
  CHECK(tensor.run() == KJIT_ERROR_NO_DEVICE);
  Call mixed;
  mixed.sb = make_tensor(kSb, {1}, dl_dtype("fp32"));
  CHECK(mixed.run() == KJIT_ERROR_NO_DEVICE);
  Call block;
  block.block_scales(4, 300, 256);
  CHECK(block.run() == KJIT_ERROR_NO_DEVICE);
  // k = 13: not a multiple of 128 (a partial last chunk), nor of 16 (the fallback); leading dims.
  Call odd;
  odd.a = make_tensor(kA, {2, 3, 13}, dl_dtype("e4m3"));
  odd.b = make_tensor(kB, {7, 13}, dl_dtype("e4m3"));
  odd.out = make_tensor(kOut, {2, 3, 7}, dl_dtype("fp32"));
  odd.block_scales(6, 7, 13);
  CHECK(odd.run() == KJIT_ERROR_NO_DEVICE);
  Call z;
  z.a = make_tensor(nullptr, {0, 256}, dl_dtype("e4m3"));
  z.out = make_tensor(nullptr, {0, 300}, dl_dtype("bf16"));
  z.sa = make_tensor(nullptr, {0}, dl_dtype("fp32"));
  CHECK(z.run() == KJIT_SUCCESS);
}

TEST_CASE("quant_fp8 abi: rejects bad tensors, shapes and scalings", "[c_abi][fp8]") {
  Quant dt;
  dt.in = make_tensor(kA, {4, 300}, dl_dtype("fp32"));
  CHECK(dt.run() == KJIT_ERROR_UNSUPPORTED);
  Quant od;
  od.out = make_tensor(kB, {4, 300}, dl_dtype("bf16"));
  expect_invalid(od, "out must be float8_e4m3fn");
  Quant sd;
  sd.scale = make_tensor(kSa, {4, 3}, dl_dtype("bf16"));
  expect_invalid(sd, "scale must be fp32");
  Quant shape;
  shape.out = make_tensor(kB, {4, 299}, dl_dtype("e4m3"));
  expect_invalid(shape, "out's shape");
  Quant groups;
  groups.scale = make_tensor(kSa, {4, 2}, dl_dtype("fp32"));
  expect_invalid(groups, "[m, ceil(k / 128)] = [4, 3]");
  Quant row;
  row.scaling = KJIT_FP8_PER_ROW;
  expect_invalid(row, "[m] = [4] per row");
  Quant tensor;
  tensor.scaling = KJIT_FP8_PER_TENSOR;
  tensor.scale = make_tensor(kSa, {4}, dl_dtype("fp32"));
  expect_invalid(tensor, "[1] per tensor");
  Quant bad;
  bad.scaling = static_cast<kjit_fp8_scaling>(3);
  expect_invalid(bad, "scaling is 3");
  Quant strided;
  strided.scale = make_tensor(kSa, {4, 3}, dl_dtype("fp32"), {5, 1});
  expect_invalid(strided, "compact");
  Quant alias;
  alias.out = make_tensor(kA + 2, {4, 300}, dl_dtype("e4m3"));
  expect_invalid(alias, "overlaps input");
  Quant null_scale;
  CHECK(kjit_quant_fp8(null_scale.in.get(), null_scale.out.get(), nullptr, KJIT_FP8_PER_TENSOR,
                       nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("quant_fp8 abi: valid calls report no device without a GPU", "[c_abi][fp8]") {
  KJIT_RUN_WITHOUT_GPU();
  Quant g;
  CHECK(g.run() == KJIT_ERROR_NO_DEVICE);
  Quant r;
  r.scaling = KJIT_FP8_PER_ROW;
  r.in = make_tensor(kA, {2, 2, 300}, dl_dtype("fp16"), {1200, 600, 1});  // row-strided
  r.out = make_tensor(kB, {2, 2, 300}, dl_dtype("e4m3"));
  r.scale = make_tensor(kSa, {4}, dl_dtype("fp32"));
  CHECK(r.run() == KJIT_ERROR_NO_DEVICE);
  Quant t;
  t.scaling = KJIT_FP8_PER_TENSOR;
  t.scale = make_tensor(kSa, {1}, dl_dtype("fp32"));
  CHECK(t.run() == KJIT_ERROR_NO_DEVICE);
  Quant z;
  z.in = make_tensor(nullptr, {0, 300}, dl_dtype("bf16"));
  z.out = make_tensor(nullptr, {0, 300}, dl_dtype("e4m3"));
  z.scale = make_tensor(nullptr, {0, 3}, dl_dtype("fp32"));
  CHECK(z.run() == KJIT_SUCCESS);
}

// ---- The pure parts ----------------------------------------------------------------------------

TEST_CASE("gemm_fp8: select takes sm90 only where TMA and wgmma can serve", "[fp8]") {
  using ops::DType;
  using ops::Fp8Scales;
  using ops::GemmPath;
  const auto bf16 = DType::kBF16;
  const auto tr = Fp8Scales::kTensorRow;
  CHECK(ops::select_gemm_fp8(bf16, tr, 129, 4096, 4096, h100(true)).path == GemmPath::kSm90);
  // 128-wide tiles, or wider ones where their whole waves beat the 128-wide ones'
  // (gemm_fp8_wide_tile): 192 per tensor / per row, 256 with block scales.
  const auto block = Fp8Scales::kBlock;
  CHECK(ops::select_gemm_fp8(bf16, tr, 4096, 4096, 4096, h100(true)).bn == 128);
  CHECK(ops::select_gemm_fp8(bf16, tr, 4096, 4096, 14336, h100(true)).bn == 128);
  CHECK(ops::select_gemm_fp8(bf16, tr, 256, 28672, 4096, h100(true)).bn == 128);
  // 4096 x 4096: 4 whole waves of 256-wide tiles against 8 of 128-wide ones (192: 6 against 8).
  CHECK(ops::select_gemm_fp8(bf16, block, 4096, 4096, 14336, h100(true)).bn == 256);
  CHECK(ops::select_gemm_fp8(bf16, block, 4096, 4352, 4096, h100(true)).bn == 128);
  CHECK(ops::select_gemm_fp8(bf16, block, 256, 28672, 4096, h100(true)).bn == 128);
  for (const auto& [m, n] :
       {std::pair<int64_t, int64_t>{8192, 8192}, {4096, 28672}, {8192, 28672}}) {
    for (const auto scales : {tr, block}) {
      INFO("m " << m << " n " << n << " block " << (scales == block));
      const ops::GemmFp8Config wide = ops::select_gemm_fp8(bf16, scales, m, n, 4096, h100(true));
      CHECK(wide.path == GemmPath::kSm90);
      CHECK(wide.bn == (scales == block ? 256 : 192));
      CHECK(wide.stages == (scales == block ? 4 : 5));
      CHECK(wide.persistent == 0);
    }
  }
  // An out the TMA-store epilogue can take (a TMA-ready 16-bit out, beta 0): the 192-wide tile
  // at 4 stages so its 32 KB of staging fit, the 128- and 256-wide tiles at their depths; an fp32
  // out keeps the register epilogue and the depth.
  ops::GemmTarget staged = h100(true);
  staged.tma_store_ok = true;
  for (const auto scales : {tr, block}) {
    const ops::GemmFp8Config w = ops::select_gemm_fp8(bf16, scales, 4096, 28672, 4096, staged);
    CHECK(w.bn == (scales == block ? 256 : 192));
    CHECK(w.stages == 4);
    CHECK(w.tma_out == 1);
    const ops::GemmFp8Config n = ops::select_gemm_fp8(bf16, tr, 4096, 4096, 4096, staged);
    CHECK(n.bn == 128);
    CHECK(n.stages == 6);
    CHECK(n.tma_out == 1);
    const ops::GemmFp8Config f32 =
        ops::select_gemm_fp8(DType::kF32, scales, 4096, 28672, 4096, staged);
    CHECK(f32.stages == (scales == block ? 4 : 5));
    CHECK(f32.tma_out == 0);
    CHECK(ops::select_gemm_fp8(bf16, scales, 4096, 28672, 4096, h100(true)).tma_out == 0);
  }
  CHECK(ops::gemm_fp8_forced_config("sm90_bn192_s5",
                                    ops::select_gemm_fp8(bf16, tr, 4096, 28672, 4096, staged), 4096,
                                    28672, 4096, staged)
            .tma_out == 0);  // 5 stages of 40 KB leave no room for the staging
  CHECK(ops::gemm_fp8_forced_config("sm90_bn192_s4_p",
                                    ops::select_gemm_fp8(bf16, tr, 4096, 28672, 4096, staged), 4096,
                                    28672, 4096, staged)
            .tma_out == 1);
  // sm90_stages_for: a stage fewer only where the staging would not fit beside the default ring.
  CHECK(ops::sm90_stages_for(staged, bf16, 192) == 4);
  CHECK(ops::sm90_stages_for(staged, bf16, 128) == 6);
  CHECK(ops::sm90_stages_for(staged, bf16, 256) == 4);
  CHECK(ops::sm90_stages_for(staged, DType::kF32, 192) == 5);
  CHECK(ops::sm90_stages_for(h100(true), bf16, 192) == 5);
  CHECK(ops::sm90_stages_for(ops::hopper_gemm_target(true), DType::kF16, 192) == 4);
  // Not where the shared memory holds 6 stages of 32 KB but not 5 of 40 KB.
  ops::GemmTarget small_smem = h100(true);
  small_smem.max_smem_optin = 200 * 1024;
  CHECK(ops::select_gemm_fp8(bf16, tr, 8192, 8192, 8192, small_smem).path == GemmPath::kSm90);
  CHECK(ops::select_gemm_fp8(bf16, tr, 8192, 8192, 8192, small_smem).bn == 128);
  CHECK(ops::select_gemm_fp8(bf16, tr, 64, 64, 64, h100(false)).path == GemmPath::kSimt);
  ops::GemmTarget a100 = h100(true);
  a100.cc_major = 8;
  CHECK(ops::select_gemm_fp8(bf16, tr, 64, 64, 64, a100).path == GemmPath::kSimt);
  CHECK_THROWS_AS(ops::select_gemm_fp8(DType::kI32, tr, 8, 8, 8, h100(true)), kjit::Error);
}

TEST_CASE("gemm_fp8: a forced sm90 tactic keeps the call's scales and needs the sm90 kernel",
          "[fp8]") {
  using ops::GemmPath;
  const auto bf16 = ops::DType::kBF16;
  for (const auto scales : {ops::Fp8Scales::kTensorRow, ops::Fp8Scales::kBlock}) {
    // A decode-size call forced onto the persistent sm90 kernel, and a large one.
    for (int64_t m : {int64_t{16}, int64_t{1000}}) {
      INFO("m " << m << " block " << (scales == ops::Fp8Scales::kBlock));
      const ops::GemmFp8Config sel = ops::select_gemm_fp8(bf16, scales, m, 3000, 272, h100(true));
      const ops::GemmFp8Config c =
          ops::gemm_fp8_forced_config("sm90_bn128_s6_p", sel, m, 3000, 272, h100(true));
      CHECK(c.path == GemmPath::kSm90);
      CHECK(c.scales == scales);
      CHECK(c.bn == 128);
      CHECK(c.stages == 6);
      CHECK(c.tokens == 0);
      CHECK(c.persistent == 1);
      const ops::GemmFp8Config one =
          ops::gemm_fp8_forced_config("sm90_bn128_s4", sel, m, 3000, 272, h100(true));
      CHECK(one.persistent == 0);
      CHECK(one.stages == 4);
      // The 192-wide tile without block scales only.
      if (scales == ops::Fp8Scales::kTensorRow) {
        const ops::GemmFp8Config wide =
            ops::gemm_fp8_forced_config("sm90_bn192_s5", sel, m, 3000, 272, h100(true));
        CHECK(wide.bn == 192);
        CHECK(wide.stages == 5);
        CHECK(wide.persistent == 0);
        CHECK(ops::gemm_fp8_spec(wide).uri.find("_bn_192_stages_5") != std::string::npos);
        CHECK(ops::gemm_fp8_forced_config("sm90_bn192_s5_p", sel, m, 3000, 272, h100(true))
                  .persistent == 1);
      } else {
        CHECK_THROWS_AS(ops::gemm_fp8_forced_config("sm90_bn192_s5", sel, m, 3000, 272, h100(true)),
                        kjit::Error);
      }
      // The 256-wide tile in every scale mode, both forms.
      for (const bool pers : {false, true}) {
        const ops::GemmFp8Config w256 = ops::gemm_fp8_forced_config(
            pers ? "sm90_bn256_s4_p" : "sm90_bn256_s4", sel, m, 3000, 272, h100(true));
        CHECK(w256.bn == 256);
        CHECK(w256.stages == 4);
        CHECK(w256.persistent == (pers ? 1 : 0));
        CHECK(w256.scales == scales);
        CHECK(ops::gemm_fp8_spec(w256).uri.find("_bn_256_stages_4") != std::string::npos);
      }
    }
  }
  const ops::GemmFp8Config sel =
      ops::select_gemm_fp8(bf16, ops::Fp8Scales::kTensorRow, 1000, 3000, 272, h100(true));
  // Not an sm90 tactic of the fp8 kernel's widths, a ring past the shared memory (5 stages of 48 KB
  // at 256), a device or operands the sm90 kernel cannot take.
  for (const char* bad : {"sm90_bn256_s5", "sm90_bn64_s4", "sm90_bn128_s9_p", "sm90_bn128_s1",
                          "mma_bn64_s4", "decode_t16_split2", "simt", "sm90_bn128_s6_q",
                          "sm90_bn192_s6_p", "sm90_bn192_s6", "sm90_bn192_s6_p2", ""}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(ops::gemm_fp8_forced_config(bad, sel, 1000, 3000, 272, h100(true)),
                    kjit::Error);
  }
  ops::GemmTarget small = h100(true);
  small.max_smem_optin = 150000;
  CHECK_THROWS_AS(ops::gemm_fp8_forced_config("sm90_bn128_s6_p", sel, 1000, 3000, 272, small),
                  kjit::Error);
  CHECK(ops::gemm_fp8_forced_config("sm90_bn128_s4_p", sel, 1000, 3000, 272, small).stages == 4);
  CHECK_THROWS_AS(ops::gemm_fp8_forced_config("sm90_bn128_s6_p", sel, 1000, 3000, 272, h100(false)),
                  kjit::Error);
  // The decode kernel at the narrowest token tile holding m with a named ring (one block an SM),
  // or its own; not another tile, not a ring past the shared memory, not past 128 rows; also
  // where the selection takes the tiles (100 x 28672 x 4096: past 64 rows at K <= 8192).
  const ops::GemmFp8Config dsel =
      ops::select_gemm_fp8(bf16, ops::Fp8Scales::kTensorRow, 64, 4096, 14336, h100(true));
  REQUIRE(dsel.path == ops::GemmPath::kSm90Decode);
  REQUIRE(dsel.tokens == 64);
  const ops::GemmFp8Config deep =
      ops::gemm_fp8_forced_config("decode_t64_s9_split4", dsel, 64, 4096, 14336, h100(true));
  CHECK(deep.path == ops::GemmPath::kSm90Decode);
  CHECK(deep.tokens == 64);
  CHECK(deep.stages == 9);
  CHECK(deep.scales == dsel.scales);
  CHECK(
      ops::gemm_fp8_forced_config("decode_t64_split2", dsel, 64, 4096, 14336, h100(true)).stages ==
      dsel.stages);
  for (const char* bad : {"decode_t32_s9_split4", "decode_t64_s10_split4", "decode_t64_s1_split4",
                          "decode_t128_s7_split1"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(ops::gemm_fp8_forced_config(bad, dsel, 64, 4096, 14336, h100(true)),
                    kjit::Error);
  }
  CHECK_THROWS_AS(ops::gemm_fp8_forced_config("decode_t64_s9_split4", dsel, 64, 4096, 14336, small),
                  kjit::Error);
  const ops::GemmFp8Config tsel =
      ops::select_gemm_fp8(bf16, ops::Fp8Scales::kTensorRow, 100, 28672, 4096, h100(true));
  REQUIRE(tsel.path == ops::GemmPath::kSm90);
  const ops::GemmFp8Config forced =
      ops::gemm_fp8_forced_config("decode_t128_s6_split2", tsel, 100, 28672, 4096, h100(true));
  CHECK(forced.path == ops::GemmPath::kSm90Decode);
  CHECK(forced.tokens == 128);
  CHECK(forced.stages == 6);
  CHECK(forced.bn == 0);
  CHECK(forced.tma_out == 0);
  // Operands TMA cannot describe.
  CHECK_THROWS_AS(
      ops::gemm_fp8_forced_config("decode_t128_split2", tsel, 100, 28672, 4096, h100(false)),
      kjit::Error);
}

TEST_CASE("gemm_fp8: select takes the mma.sync kernel on sm_89+ rows cp.async can copy", "[fp8]") {
  using ops::DType;
  using ops::Fp8Scales;
  using ops::GemmPath;
  const auto bf16 = DType::kBF16;
  // sm_90a with rows TMA refuses (k not a multiple of 16) but cp.async copies; an sm_89 part with
  // TMA-ready rows: the mma.sync kernel, 128 x 64 tiles, 4 stages, in every scale mode.
  ops::GemmTarget hopper = h100(false);
  hopper.cp_async_ok = true;
  ops::GemmTarget ada = h100(true);
  ada.cc_major = 8;
  ada.cc_minor = 9;
  ada.max_smem_optin = 101376;
  ada.cp_async_ok = true;
  for (const ops::GemmTarget& t : {hopper, ada}) {
    for (Fp8Scales sc : {Fp8Scales::kTensorRow, Fp8Scales::kBlock}) {
      for (DType od : {bf16, DType::kF32}) {
        const ops::GemmFp8Config c = ops::select_gemm_fp8(od, sc, 7, 200, 136, t);
        CHECK(c.path == GemmPath::kMmaSm80);
        CHECK(c.bn == 64);
        CHECK(c.stages == 4);
        CHECK(c.scales == Fp8Scales::kTensorRow);  // one kernel for every mode
      }
    }
  }
  // sm_80 / sm_86 have no e4m3 mma.sync; rows cp.async cannot copy go to the fallback too.
  ops::GemmTarget a100 = ada;
  a100.cc_minor = 0;
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 7, 200, 136, a100).path ==
        GemmPath::kSimt);
  ops::GemmTarget sm86 = ada;
  sm86.cc_minor = 6;
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 7, 200, 136, sm86).path ==
        GemmPath::kSimt);
  ops::GemmTarget unaligned = ada;
  unaligned.tma_ok = unaligned.cp_async_ok = false;
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kBlock, 7, 200, 136, unaligned).path ==
        GemmPath::kSimt);
}

TEST_CASE("gemm_fp8: select takes the decode kernel where kjit_gemm takes its decode path",
          "[fp8]") {
  using ops::DType;
  using ops::Fp8Scales;
  using ops::GemmPath;
  const auto bf16 = DType::kBF16;
  for (const Fp8Scales sc : {Fp8Scales::kTensorRow, Fp8Scales::kBlock}) {
    for (const DType od : {DType::kBF16, DType::kF16, DType::kF32}) {
      // m -> the token tile, its depth (two blocks an SM below 128 tokens, one at 128).
      const int cases[][3] = {{1, 16, 6},  {7, 16, 6},  {16, 16, 6},  {17, 32, 5},
                              {33, 64, 4}, {64, 64, 4}, {65, 128, 7}, {128, 128, 7}};
      for (const auto& c : cases) {
        INFO("m " << c[0]);
        const ops::GemmFp8Config cfg = ops::select_gemm_fp8(od, sc, c[0], 4096, 14336, h100(true));
        CHECK(cfg.path == GemmPath::kSm90Decode);
        CHECK(cfg.tokens == c[1]);
        CHECK(cfg.stages == c[2]);
        CHECK(cfg.scales == sc);
        CHECK(cfg.out_dtype == od);
        // Every selected depth fits the shared memory its blocks per SM share.
        const int blocks = kjit::gemm::gemm_fp8_decode_blocks_per_sm(cfg.tokens);
        CHECK(blocks * (kjit::gemm::gemm_decode_smem_bytes(cfg.tokens, cfg.stages) + 1024) <=
              232448 + 1024);
        CHECK(kjit::gemm::gemm_decode_smem_bytes(cfg.tokens, cfg.stages + 1) * blocks >
              232448 + 1024 - 1024 * blocks);
      }
    }
  }
  // Past 64 rows only where n has fewer 128-row tiles than SMs (kjit_gemm's rule): 28672 rows
  // are 224 tiles on 132 SMs; and only where K exceeds 8192 (gemm_tiles_beat_decode).
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 64, 28672, 4096, h100(true)).path ==
        GemmPath::kSm90Decode);
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 65, 28672, 4096, h100(true)).path ==
        GemmPath::kSm90);
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kBlock, 64, 6144, 4096, h100(true)).path ==
        GemmPath::kSm90Decode);
  for (const int64_t m : {65, 128, 129}) {
    INFO("m " << m);
    CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kBlock, m, 6144, 4096, h100(true)).path ==
          GemmPath::kSm90);
    CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, m, 8192, 8192, h100(true)).path ==
          GemmPath::kSm90);
  }
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 128, 8192, 8208, h100(true)).path ==
        GemmPath::kSm90Decode);
  // Not without TMA-ready operands, nor on plain sm_90 or sm_89.
  ops::GemmTarget no_tma = h100(false);
  no_tma.cp_async_ok = true;
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 1, 4096, 4096, no_tma).path ==
        GemmPath::kMmaSm80);
  ops::GemmTarget ada = h100(true);
  ada.cc_major = 8;
  ada.cc_minor = 9;
  ada.max_smem_optin = 101376;
  ada.cp_async_ok = true;
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 1, 4096, 4096, ada).path ==
        GemmPath::kMmaSm80);
  // A device whose shared memory holds no two decode stages takes the tiles' path (or none).
  ops::GemmTarget small = h100(true);
  small.max_smem_optin = 32 * 1024;
  CHECK(ops::select_gemm_fp8(bf16, Fp8Scales::kTensorRow, 1, 4096, 4096, small).path !=
        GemmPath::kSm90Decode);
  // The URI names every setting.
  CHECK(ops::gemm_fp8_spec(
            ops::select_gemm_fp8(DType::kF32, Fp8Scales::kBlock, 33, 4096, 14336, h100(true)))
            .uri == "gemm_fp8_path_decode_out_dtype_fp32_tokens_64_stages_4_block_1");
}

TEST_CASE("gemm_fp8 and quant_fp8: specs and catalogs", "[fp8]") {
  const ops::OpDef& def = ops::op_or_throw("gemm_fp8");
  int sm90 = 0, mma = 0, decode = 0, persistent = 0, tma = 0, pairs = 0;
  for (const auto& args : def.catalog()) {
    const kjit::jit::Spec s = def.make_spec(args);
    INFO(s.uri);
    const std::string& path = args.at("path");
    sm90 += path == "sm90";
    mma += path == "sm80";
    decode += path == "decode";
    CHECK(s.arch_families == std::vector<std::string>{path == "sm90" || path == "decode" ? "sm_90a"
                                                      : path == "sm80"                   ? "sm_89+"
                                                                       : "sm_80+"});
    const bool p = args.count("persistent") != 0 && args.at("persistent") == "1";
    persistent += p;
    CHECK((s.uri.find("persistent_1") != std::string::npos) == p);
    const bool staged = args.count("tma_out") != 0;
    tma += staged;
    CHECK((s.uri.find("_tma_out_1") != std::string::npos) == staged);
    const bool pair = args.count("pair") != 0 && args.at("pair") == "1";
    pairs += pair;
    CHECK((s.uri.find("_pair_1") != std::string::npos) == pair);
    if (p) CHECK(s.entry_names.at(0).find(", kjit_spec::pair>") != std::string::npos);
    CHECK(s.entry_names.at(0).find(
              path == "sm90"     ? (p ? "gemm_fp8_sm90_persistent_kernel" : "gemm_fp8_sm90_kernel")
              : path == "decode" ? "gemm_fp8_decode_sm90_kernel"
              : path == "sm80"   ? "gemm_fp8_mma_kernel"
                                 : "gemm_fp8_simt_kernel") != std::string::npos);
  }
  CHECK(sm90 == 35);
  // bf16 / fp32 out: 128 and 256 wide in both scale forms, 192; staged, alone and in pairs.
  CHECK(persistent == 20);
  CHECK(pairs == 5);  // staged: 128 and 256 wide in both scale forms, 192
  CHECK(tma == 15);   // bf16 out: 128 and 256 wide in both scale forms, 192, all three forms
  CHECK_THROWS_AS(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"pair", "1"}}),
                  kjit::Error);
  // The TMA-store epilogue: the 192-wide tile's default depth drops to 4 (5 leave no room for the
  // staging); an fp32 out, too deep a ring or another path is refused.
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"bn", "192"}, {"tma_out", "1"}})
            .uri == "gemm_fp8_path_sm90_out_dtype_bf16_bn_192_stages_4_block_0_tma_out_1");
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "fp16"}, {"tma_out", "1"}}).uri ==
        "gemm_fp8_path_sm90_out_dtype_fp16_bn_128_stages_6_block_0_tma_out_1");
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"tma_out", "0"}}).uri ==
        "gemm_fp8_path_sm90_out_dtype_bf16_bn_128_stages_6_block_0");
  CHECK_THROWS_AS(def.make_spec({{"path", "sm90"},
                                 {"out_dtype", "bf16"},
                                 {"bn", "192"},
                                 {"stages", "5"},
                                 {"tma_out", "1"}}),
                  kjit::Error);
  CHECK_THROWS_AS(def.make_spec({{"path", "sm90"}, {"out_dtype", "fp32"}, {"tma_out", "1"}}),
                  kjit::Error);
  CHECK_THROWS_AS(def.make_spec({{"path", "decode"}, {"out_dtype", "bf16"}, {"tma_out", "1"}}),
                  kjit::Error);
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"tma_out", "1"}})
            .entry_names.at(0)
            .find(", kjit_spec::tma_out>") != std::string::npos);
  // The 192-wide tile: per tensor / row, both forms, 5 stages by default (6 of 40 KB pass the
  // shared memory).
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"bn", "192"}}).uri ==
        "gemm_fp8_path_sm90_out_dtype_bf16_bn_192_stages_5_block_0");
  CHECK_THROWS(
      def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"bn", "192"}, {"scales", "block"}}));
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"bn", "192"}, {"persistent", "1"}})
            .uri == "gemm_fp8_path_sm90_out_dtype_bf16_bn_192_stages_5_block_0_persistent_1");
  CHECK_THROWS(def.make_spec({{"path", "decode"}, {"out_dtype", "bf16"}, {"bn", "192"}}));
  CHECK(mma == 2);
  // 4 token tiles x 2 scale forms x 2 outs, and with a bf16 out the deeper ring of 16-64 tokens
  // in both scale forms.
  CHECK(decode == 16 + 6);
  CHECK(
      def.make_spec({{"path", "decode"}, {"out_dtype", "bf16"}, {"tokens", "64"}, {"stages", "9"}})
          .uri == "gemm_fp8_path_decode_out_dtype_bf16_tokens_64_stages_9_block_0");
  CHECK_THROWS(def.make_spec(
      {{"path", "decode"}, {"out_dtype", "bf16"}, {"tokens", "64"}, {"stages", "10"}}));
  CHECK_THROWS(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"stages", "8"}}));
  // make_spec's default depth is select_gemm_fp8's on the H100 / H200.
  CHECK(def.make_spec(
               {{"path", "decode"}, {"out_dtype", "bf16"}, {"tokens", "128"}, {"scales", "block"}})
            .uri == "gemm_fp8_path_decode_out_dtype_bf16_tokens_128_stages_7_block_1");
  CHECK(def.make_spec({{"path", "decode"}, {"out_dtype", "fp32"}, {"tokens", "16"}}).uri ==
        "gemm_fp8_path_decode_out_dtype_fp32_tokens_16_stages_6_block_0");
  CHECK_THROWS_AS(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"tokens", "16"}}),
                  kjit::Error);
  CHECK(def.make_spec({{"path", "sm80"}, {"out_dtype", "fp32"}}).uri ==
        "gemm_fp8_path_sm80_out_dtype_fp32_bn_64_stages_4");
  CHECK_THROWS_AS(def.make_spec({{"path", "sm80"}, {"out_dtype", "bf16"}, {"scales", "block"}}),
                  kjit::Error);
  ops::GemmFp8Config c;
  c.path = ops::GemmPath::kSm90;
  c.scales = ops::Fp8Scales::kBlock;
  c.bn = 128;
  c.stages = 6;
  CHECK(ops::gemm_fp8_spec(c).uri == "gemm_fp8_path_sm90_out_dtype_bf16_bn_128_stages_6_block_1");
  c.persistent = 1;
  const kjit::jit::Spec ps = ops::gemm_fp8_spec(c);
  CHECK(ps.uri == "gemm_fp8_path_sm90_out_dtype_bf16_bn_128_stages_6_block_1_persistent_1");
  CHECK(ps.entry_names.at(0).find("gemm_fp8_sm90_persistent_kernel<") != std::string::npos);
  CHECK(def.make_spec(
               {{"path", "sm90"}, {"out_dtype", "bf16"}, {"scales", "block"}, {"persistent", "1"}})
            .uri == ps.uri);
  CHECK_THROWS_AS(def.make_spec({{"path", "decode"}, {"out_dtype", "bf16"}, {"persistent", "1"}}),
                  kjit::Error);
  CHECK_THROWS_AS(def.make_spec({{"path", "sm80"}, {"out_dtype", "bf16"}, {"persistent", "1"}}),
                  kjit::Error);
  // The 256-wide tile: 4 stages of 48 KB by default, every scale form; not 64 wide.
  CHECK(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"bn", "256"}, {"scales", "block"}})
            .uri == "gemm_fp8_path_sm90_out_dtype_bf16_bn_256_stages_4_block_1");
  CHECK_THROWS_AS(def.make_spec({{"path", "sm90"}, {"out_dtype", "bf16"}, {"bn", "64"}}),
                  kjit::Error);
  CHECK_THROWS_AS(def.make_spec({{"path", "simt"}, {"out_dtype", "bf16"}, {"scales", "block"}}),
                  kjit::Error);
  const ops::OpDef& q = ops::op_or_throw("quant_fp8");
  CHECK(q.catalog().size() == 6);
  const kjit::jit::Spec t = q.make_spec({{"dtype", "bf16"}, {"scaling", "tensor"}});
  CHECK(t.entry_names.size() == 2);  // the amax and the conversion
  CHECK(q.make_spec({{"dtype", "fp16"}, {"scaling", "group"}}).entry_names.size() == 1);
}

TEST_CASE("fp8 reference: e4m3 values, rounding and saturation", "[fp8]") {
  namespace ref = kjit::ref;
  CHECK(ref::e4m3_value(0x38) == 1.0);
  CHECK(ref::e4m3_value(0x7E) == 448.0);
  CHECK(ref::e4m3_value(0x01) == std::ldexp(1.0, -9));
  CHECK(ref::e4m3_value(0x08) == std::ldexp(1.0, -6));
  CHECK(ref::e4m3_value(0xB8) == -1.0);
  CHECK(std::isnan(ref::e4m3_value(0x7F)));
  CHECK(ref::e4m3_code(1.0f) == 0x38);
  CHECK(ref::e4m3_code(448.0f) == 0x7E);
  CHECK(ref::e4m3_code(464.0f) == 0x7E);  // halfway to 480 (no such value): saturates
  CHECK(ref::e4m3_code(1e30f) == 0x7E);
  CHECK(ref::e4m3_code(-1e30f) == 0xFE);
  CHECK(ref::e4m3_code(1.0625f) == 0x38);  // halfway between 1 and 1.125: to the even code
  CHECK(ref::e4m3_code(1.1875f) == 0x3A);  // halfway between 1.125 and 1.25: to the even code
  CHECK(ref::e4m3_code(std::ldexp(1.5f, -10)) == 0x01);  // between 0 and 2^-9, nearer 2^-9
  CHECK(ref::e4m3_code(std::ldexp(1.0f, -10)) == 0x00);  // halfway 0 .. 2^-9: even (zero)
  CHECK(std::isnan(ref::e4m3_value(ref::e4m3_code(NAN))));
  // Every code decodes and encodes back to itself.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    CHECK(ref::e4m3_code(static_cast<float>(ref::e4m3_value(static_cast<uint8_t>(c)))) == c);
  }
}
