// The GEMM family without a GPU: the C ABI's argument checks (rejected before any driver call),
// the options struct, then the pure parts of the op: path choice, the TMA rules, the wgmma
// descriptor's bits, specs and catalog.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <array>
#include <string>

#include "common/wgmma_desc.h"
#include "cuda/tensor_map.hpp"
#include "kjit/kjit.h"
#include "ops/gemm/gemm.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first (or
// stops at the missing device).
char* const kA = reinterpret_cast<char*>(0x10000000);
char* const kB = reinterpret_cast<char*>(0x20000000);
char* const kBias = reinterpret_cast<char*>(0x28000000);
char* const kOut = reinterpret_cast<char*>(0x30000000);

struct Call {
  Tensor a = make_tensor(kA, {4, 64}, dl_dtype("bf16"));
  Tensor b = make_tensor(kB, {32, 64}, dl_dtype("bf16"));
  Tensor bias = make_tensor(kBias, {32}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 32}, dl_dtype("bf16"));
  bool with_bias = false;
  const kjit_gemm_options* options = nullptr;
  kjit_status run() {
    return kjit_gemm(a.get(), b.get(), with_bias ? bias.get() : nullptr, out.get(), options,
                     nullptr);
  }
};

void expect_invalid(Call& c, const char* fragment) {
  const kjit_status s = c.run();
  const std::string err = kjit_last_error();
  INFO("last error: " << err);
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(err.find(fragment) != std::string::npos);
  CHECK(err.find("kjit_gemm") == 0);  // the guard names the entry point
}

ops::GemmTarget h100(bool tma_ok, bool cp_async_ok = false) {
  ops::GemmTarget t;
  t.cc_major = 9;
  t.cc_minor = 0;
  t.max_smem_optin = 232448;
  t.sm_count = 132;
  t.tma_ok = tma_ok;
  t.cp_async_ok = tma_ok || cp_async_ok;
  return t;
}

// An A100 (164 KB opt-in, 108 SMs), an RTX 4090 (sm_89, 100 KB, 128 SMs).
ops::GemmTarget device(int major, int minor, int smem, int sms, bool cp_async_ok) {
  ops::GemmTarget t;
  t.cc_major = major;
  t.cc_minor = minor;
  t.max_smem_optin = smem;
  t.sm_count = sms;
  t.tma_ok = cp_async_ok;  // what TMA would accept on sm_90a: no path here reads it
  t.cp_async_ok = cp_async_ok;
  return t;
}

}  // namespace

TEST_CASE("gemm abi: libkjit.so exports kjit_gemm and its options init", "[c_abi][gemm]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_gemm") != nullptr);
  CHECK(dlsym(lib, "kjit_gemm_options_init") != nullptr);
  dlclose(lib);
}

TEST_CASE("gemm abi: options init fills the defaults and ignores NULL", "[c_abi][gemm]") {
  kjit_gemm_options o;
  o.alpha = 7.0f;
  kjit_gemm_options_init(&o);
  CHECK(o.struct_size == sizeof(kjit_gemm_options));
  CHECK(o.alpha == 1.0f);
  CHECK(o.beta == 0.0f);
  kjit_gemm_options_init(nullptr);
}

TEST_CASE("gemm abi: rejects NULL tensors", "[c_abi][gemm]") {
  Call c;
  CHECK(kjit_gemm(nullptr, c.b.get(), nullptr, c.out.get(), nullptr, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("a is NULL") != std::string::npos);
  CHECK(kjit_gemm(c.a.get(), nullptr, nullptr, c.out.get(), nullptr, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("b is NULL") != std::string::npos);
  CHECK(kjit_gemm(c.a.get(), c.b.get(), nullptr, nullptr, nullptr, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("out is NULL") != std::string::npos);
}

TEST_CASE("gemm abi: rejects mismatched dtypes", "[c_abi][gemm]") {
  Call c;
  c.b = make_tensor(kB, {32, 64}, dl_dtype("fp16"));
  expect_invalid(c, "b");
  Call d;
  d.with_bias = true;
  d.bias = make_tensor(kBias, {32}, dl_dtype("fp32"));
  expect_invalid(d, "bias");
}

TEST_CASE("gemm abi: unsupported dtypes are UNSUPPORTED, before any device", "[c_abi][gemm]") {
  Call c;
  c.a = make_tensor(kA, {4, 64}, dl_dtype("fp32"));
  c.b = make_tensor(kB, {32, 64}, dl_dtype("fp32"));
  CHECK(c.run() == KJIT_ERROR_UNSUPPORTED);
  CHECK(std::string(kjit_last_error()).find("bf16 and fp16") != std::string::npos);
  Call i;
  i.out = make_tensor(kOut, {4, 32}, dl_dtype("int32"));
  CHECK(i.run() == KJIT_ERROR_UNSUPPORTED);
}

TEST_CASE("gemm abi: rejects shape mismatches", "[c_abi][gemm]") {
  Call k;
  k.b = make_tensor(kB, {32, 63}, dl_dtype("bf16"));
  expect_invalid(k, "k");
  Call n;
  n.out = make_tensor(kOut, {4, 31}, dl_dtype("bf16"));
  expect_invalid(n, "(n)");
  Call m;
  m.out = make_tensor(kOut, {5, 32}, dl_dtype("bf16"));
  expect_invalid(m, "out dim 0");
  Call b3;
  b3.b = make_tensor(kB, {2, 16, 64}, dl_dtype("bf16"));
  expect_invalid(b3, "2-D");
  Call bias;
  bias.with_bias = true;
  bias.bias = make_tensor(kBias, {31}, dl_dtype("bf16"));
  expect_invalid(bias, "bias must be [n]");
  Call bias2;
  bias2.with_bias = true;
  bias2.bias = make_tensor(kBias, {1, 32}, dl_dtype("bf16"));
  expect_invalid(bias2, "bias must be [n]");
}

TEST_CASE("gemm abi: rejects other devices and host memory", "[c_abi][gemm]") {
  Call c;
  c.b = make_tensor(kB, {32, 64}, dl_dtype("bf16"), {}, 1);
  expect_invalid(c, "b is on cuda:1");
  Call o;
  o.out = make_tensor(kOut, {4, 32}, dl_dtype("bf16"), {}, 1);
  expect_invalid(o, "out is on cuda:1");
  Call h;
  h.a = make_tensor(kA, {4, 64}, dl_dtype("bf16"), {}, 0, kDLCPU);
  expect_invalid(h, "a");
}

TEST_CASE("gemm abi: rejects an out that overlaps an input", "[c_abi][gemm]") {
  Call c;
  c.out = make_tensor(kA, {4, 32}, dl_dtype("bf16"));  // the start of a
  expect_invalid(c, "overlaps a");
  Call w;
  w.out = make_tensor(kB + 64, {4, 32}, dl_dtype("bf16"));
  expect_invalid(w, "overlaps b");
}

TEST_CASE("gemm abi: rejects non-finite alpha and beta", "[c_abi][gemm]") {
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  o.beta = std::nanf("");
  Call c;
  c.options = &o;
  expect_invalid(c, "finite");
}

TEST_CASE("gemm abi: rejects an options struct too small for alpha", "[c_abi][gemm]") {
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  o.struct_size = sizeof(size_t);
  Call c;
  c.options = &o;
  expect_invalid(c, "struct_size");
}

TEST_CASE("gemm abi: rejects a column-strided a", "[c_abi][gemm]") {
  Call c;
  c.a = make_tensor(kA, {4, 64}, dl_dtype("bf16"), {128, 2});
  expect_invalid(c, "a");
}

TEST_CASE("gemm abi: valid calls, aligned or not, report no device without a GPU",
          "[c_abi][gemm]") {
  KJIT_RUN_WITHOUT_GPU();
  Call c;
  c.with_bias = true;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  // Odd k, a misaligned base and row-strided views pass validation (the fallback serves them).
  Call m;
  m.a = make_tensor(kA + 2, {3, 13}, dl_dtype("fp16"), {17, 1});
  m.b = make_tensor(kB, {9, 13}, dl_dtype("fp16"));
  m.out = make_tensor(kOut + 4, {3, 9}, dl_dtype("fp32"), {11, 1});
  CHECK(m.run() == KJIT_ERROR_NO_DEVICE);
  // A struct_size covering alpha only (an older header) is read, beta defaulted.
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  o.struct_size = sizeof(size_t) + sizeof(float);
  o.beta = std::nanf("");  // not covered: never read
  c.options = &o;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  // k = 0 is a call (out = beta * out + bias), not a no-op.
  Call k0;
  k0.a = make_tensor(kA, {3, 0}, dl_dtype("bf16"));
  k0.b = make_tensor(kB, {32, 0}, dl_dtype("bf16"));
  k0.out = make_tensor(kOut, {3, 32}, dl_dtype("bf16"));
  CHECK(k0.run() == KJIT_ERROR_NO_DEVICE);
  // Zero rows or columns: validated, then nothing to do.
  Call z;
  z.a = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
  z.out = make_tensor(nullptr, {0, 32}, dl_dtype("bf16"));
  CHECK(z.run() == KJIT_SUCCESS);
}

// ---- The pure parts of the op ------------------------------------------------------------------

TEST_CASE("gemm: select_gemm takes the sm90 path only where TMA and wgmma can serve", "[gemm]") {
  using ops::DType;
  using ops::GemmPath;
  const auto bf16 = DType::kBF16;
  CHECK(ops::select_gemm(bf16, bf16, 129, 4096, 4096, h100(true)).path == GemmPath::kSm90);
  CHECK(ops::select_gemm(bf16, bf16, 129, 4096, 4096, h100(true)).bn == 128);
  CHECK(ops::select_gemm(bf16, bf16, 4096, 4096, 4096, h100(true)).bn == 256);
  // The TMA-store epilogue where the call's out can take it (tma_store_ok: TMA-ready, beta 0) and
  // is 16-bit; both tiles at their default depths leave room for its staging.
  {
    ops::GemmTarget staged = h100(true);
    staged.tma_store_ok = true;
    for (const int64_t m : {129, 4096}) {
      const ops::GemmConfig c = ops::select_gemm(bf16, bf16, m, 4096, 4096, staged);
      CHECK(c.tma_out == 1);
      CHECK(c.stages == ops::sm90_default_stages(c.bn));
      CHECK(ops::select_gemm(bf16, ops::DType::kF32, m, 4096, 4096, staged).tma_out == 0);
      CHECK(ops::select_gemm(bf16, bf16, m, 4096, 4096, h100(true)).tma_out == 0);
    }
    CHECK(ops::select_gemm(bf16, bf16, 16, 4096, 4096, staged).tma_out == 0);  // decode path
    CHECK_FALSE(ops::gemm_tma_out(staged, bf16, 128, 7));  // 224 KB of ring: no room
    CHECK(ops::gemm_tma_out(staged, ops::DType::kF16, 256, 4));
  }
  CHECK(ops::select_gemm(bf16, DType::kF32, 4096, 4096, 4096, h100(false)).path == GemmPath::kSimt);
  // Other devices and sm_90a calls the wgmma paths cannot take go to mma_sm80 (next test case).
  ops::GemmTarget a100 = h100(true);
  a100.cc_major = 8;
  CHECK(ops::select_gemm(bf16, bf16, 64, 64, 64, a100).path == GemmPath::kMmaSm80);
  ops::GemmTarget b200 = h100(true);
  b200.cc_major = 10;
  CHECK(ops::select_gemm(bf16, bf16, 64, 64, 64, b200).path == GemmPath::kMmaSm80);
  ops::GemmTarget small = h100(true);
  small.max_smem_optin = 100 * 1024;
  CHECK(ops::select_gemm(bf16, bf16, 200, 64, 64, small).path == GemmPath::kMmaSm80);
  CHECK_THROWS_AS(ops::select_gemm(DType::kF32, bf16, 8, 8, 8, h100(true)), kjit::Error);
  CHECK_THROWS_AS(ops::select_gemm(bf16, DType::kI32, 8, 8, 8, h100(true)), kjit::Error);
}

TEST_CASE("gemm: select_gemm takes mma_sm80 on every sm_80+ call it can serve", "[gemm]") {
  using ops::DType;
  using ops::GemmPath;
  const auto bf16 = DType::kBF16;
  const ops::GemmTarget a100 = device(8, 0, 166912, 108, true);
  const ops::GemmTarget ada = device(8, 9, 101376, 128, true);
  const ops::GemmTarget sm86 = device(8, 6, 101376, 84, true);
  for (const ops::GemmTarget& t : {a100, ada, sm86, device(12, 0, 101376, 84, true)}) {
    INFO("sm_" << t.cc_major << t.cc_minor);
    for (DType dt : {bf16, DType::kF16}) {
      for (DType od : {dt, DType::kF32}) {
        // Any m, n and k, K tails included: the kernel zero-fills every edge.
        for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
                 {1, 8, 16}, {7, 72, 40}, {129, 200, 8192}, {4096, 28672, 4096}, {3, 5, 13}}) {
          const ops::GemmConfig c = ops::select_gemm(dt, od, m, n, k, t);
          CHECK(c.path == GemmPath::kMmaSm80);
          CHECK(c.stages == ops::gemm_mma_sm80_stages(c.bn));
          CHECK(kjit::gemm::gemm_mma_sm80_smem_bytes(c.bn, c.stages) == 48 * 1024);
          // Two blocks per SM on every part.
          CHECK(2 * kjit::gemm::gemm_mma_sm80_smem_bytes(c.bn, c.stages) <= t.max_smem_optin);
        }
      }
    }
    // Rows cp.async cannot copy in 16 bytes: the fallback.
    ops::GemmTarget unaligned = t;
    unaligned.tma_ok = unaligned.cp_async_ok = false;
    CHECK(ops::select_gemm(bf16, bf16, 512, 4096, 4096, unaligned).path == GemmPath::kSimt);
  }
  // The 128-wide tile where its tiles cover the SMs, else 64 (108 SMs: 7 x 16 = 112 tiles fill
  // them, 6 x 16 = 96 do not).
  CHECK(ops::select_gemm(bf16, bf16, 7 * 128, 2048, 4096, a100).bn == 128);
  CHECK(ops::select_gemm(bf16, bf16, 6 * 128, 2048, 4096, a100).bn == 64);
  CHECK(ops::select_gemm(bf16, bf16, 1, 4096, 4096, a100).bn == 64);
  CHECK(ops::select_gemm(bf16, bf16, 8192, 8192, 8192, a100).bn == 128);
  CHECK(ops::gemm_mma_sm80_stages(128) == 3);
  CHECK(ops::gemm_mma_sm80_stages(64) == 4);
  // sm_90a: TMA-ready calls keep the wgmma paths; a k TMA refuses (k * 2 not a multiple of 16)
  // with 16-byte aligned rows takes mma_sm80, rows cp.async cannot copy the fallback.
  CHECK(ops::select_gemm(bf16, bf16, 1, 4096, 4096, h100(true)).path == GemmPath::kSm90Decode);
  CHECK(ops::select_gemm(bf16, bf16, 4096, 4096, 4096, h100(true)).path == GemmPath::kSm90);
  CHECK(ops::select_gemm(bf16, bf16, 1, 4096, 4100, h100(false, true)).path == GemmPath::kMmaSm80);
  CHECK(ops::select_gemm(bf16, bf16, 4096, 4096, 4100, h100(false, true)).path ==
        GemmPath::kMmaSm80);
  CHECK(ops::select_gemm(bf16, bf16, 4096, 4096, 4100, h100(false, false)).path == GemmPath::kSimt);
  // mma.sync m16n8k16 on bf16 and cp.async are sm_80 instructions.
  CHECK_FALSE(ops::mma_sm80_can_run(device(7, 5, 65536, 40, true), 64, 64, 64, 128, 3));
}

TEST_CASE("gemm: mma_sm80's validity: alignment, tiles, depth, shared memory, counts", "[gemm]") {
  const ops::GemmTarget a100 = device(8, 0, 166912, 108, true);
  CHECK(ops::mma_sm80_can_run(a100, 1, 1, 1, 64, 4));
  CHECK(ops::mma_sm80_can_run(a100, 1, 1, 0, 128, 3));  // k = 0: beta * out + bias
  CHECK_FALSE(ops::mma_sm80_can_run(device(8, 0, 166912, 108, false), 1, 1, 1, 64, 4));
  for (int bn : {32, 96, 256}) CHECK_FALSE(ops::mma_sm80_can_run(a100, 64, 64, 64, bn, 3));
  for (int st : {1, 7}) CHECK_FALSE(ops::mma_sm80_can_run(a100, 64, 64, 64, 128, st));
  // 6 stages of 128 wide are 96 KB: an A100 holds them, a block limited to 64 KB does not.
  CHECK(ops::mma_sm80_can_run(a100, 64, 64, 64, 128, 6));
  CHECK(kjit::gemm::gemm_mma_sm80_smem_bytes(128, 6) == 96 * 1024);
  CHECK_FALSE(ops::mma_sm80_can_run(device(8, 9, 65536, 128, true), 64, 64, 64, 128, 6));
  // Tile and K block counts are int32 in the kernel.
  const int64_t big = int64_t{1} << 40;
  CHECK_FALSE(ops::mma_sm80_can_run(a100, big, big, 64, 128, 3));
  CHECK_FALSE(ops::mma_sm80_can_run(a100, 64, 64, big, 128, 3));
  CHECK_FALSE(ops::mma_sm80_can_run(a100, int64_t{1} << 31, 1, 64, 128, 3));
  CHECK(ops::mma_sm80_can_run(a100, int64_t{1} << 30, 128, 64, 128, 3));
}

TEST_CASE("gemm: cp_async_ready and tma_describable read the rows' alignment", "[gemm]") {
  auto rm = [](char* data, int64_t rows, int64_t cols, int64_t stride) {
    ops::RowMatrix m;
    m.data = data;
    m.rows = rows;
    m.cols = cols;
    m.row_stride = stride;
    m.dtype = ops::DType::kBF16;
    return m;
  };
  CHECK(ops::cp_async_ready(rm(kA, 4, 64, 64)));
  CHECK(ops::tma_describable(rm(kA, 4, 64, 64)));
  // k = 36 in rows of 40: cp.async copies them, TMA's rule (k * 2 % 16) refuses.
  CHECK(ops::cp_async_ready(rm(kA, 4, 36, 40)));
  CHECK_FALSE(ops::tma_describable(rm(kA, 4, 36, 40)));
  CHECK_FALSE(ops::cp_async_ready(rm(kA, 4, 36, 36)));  // 72-byte rows
  CHECK_FALSE(ops::cp_async_ready(rm(kA + 8, 4, 64, 64)));
  CHECK(ops::cp_async_ready(rm(kA, 1, 13, 13)));  // one row: its stride is never used
  CHECK_FALSE(ops::cp_async_ready(rm(kA + 2, 1, 13, 13)));
}

TEST_CASE("gemm: the decode path's token tile, depth and split", "[gemm]") {
  using ops::DType;
  using ops::GemmPath;
  const auto bf16 = DType::kBF16;
  // m <= 128 on sm_90a: the smallest wgmma width that holds the tokens, as deep as two blocks per
  // SM allow (227 KB opt-in: 6, 5, 4, 3 stages).
  const std::vector<std::array<int, 3>> want = {{1, 16, 6},  {16, 16, 6},  {17, 32, 5},
                                                {64, 64, 4}, {65, 128, 3}, {128, 128, 3}};
  for (const auto& [m, tokens, stages] : want) {
    INFO("m = " << m);
    const ops::GemmConfig c = ops::select_gemm(bf16, bf16, m, 4096, 14336, h100(true));
    CHECK(c.path == GemmPath::kSm90Decode);
    CHECK(c.tokens == tokens);
    CHECK(c.stages == stages);
    CHECK(2 * (kjit::gemm::gemm_decode_smem_bytes(tokens, stages) + 1024) <= 232448 + 1024);
  }
  CHECK(ops::select_gemm(bf16, bf16, 8, 64, 64, h100(false)).path == GemmPath::kSimt);
  // 33-64 rows: the decode kernel unless the 128-wide sm90 tiles outnumber the SMs (then 256
  // wide); 65-128 rows: only where its 128-row weight tiles leave SMs idle and K is past 8192.
  const auto pick = [&](int64_t m, int64_t n, int64_t k) {
    return ops::select_gemm(bf16, bf16, m, n, k, h100(true));
  };
  CHECK(pick(32, 28672, 4096).path == GemmPath::kSm90Decode);
  CHECK(pick(64, 16896, 4096).path == GemmPath::kSm90Decode);
  CHECK(pick(64, 16897, 4096).path == GemmPath::kSm90);
  CHECK(pick(64, 16897, 4096).bn == 256);
  CHECK(pick(128, 16768, 14336).path == GemmPath::kSm90Decode);
  CHECK(pick(128, 16769, 14336).path == GemmPath::kSm90);
  CHECK(pick(128, 6144, 4096).path == GemmPath::kSm90);
  CHECK(pick(128, 6144, 4096).bn == 128);
  CHECK(pick(128, 8192, 8192).path == GemmPath::kSm90);
  CHECK(pick(128, 28672, 4096).bn == 256);
  CHECK(pick(128, 28672, 4096).persistent == 0);
  // The largest split whose clusters (one per 128-row weight tile) all run at once, at most 8, at
  // least 4 K blocks per block. 132 SMs of two blocks each, every cluster placeable:
  ops::GemmResidency even{};
  for (int s = 1; s <= kjit::gemm::kGemmDecodeMaxSplit; ++s) even[s] = 264 / s;
  CHECK(ops::gemm_decode_split(28672, 4096, even) == 1);
  CHECK(ops::gemm_decode_split(4096, 14336, even) == 8);
  CHECK(ops::gemm_decode_split(6144, 4096, even) == 5);
  CHECK(ops::gemm_decode_split(8192, 8192, even) == 4);
  CHECK(ops::gemm_decode_split(200, 512, even) == 2);
  CHECK(ops::gemm_decode_split(200, 16, even) == 1);
  // Clusters of 8 that the GPCs cannot all place leave 32 tiles to 7 blocks each.
  ops::GemmResidency ragged = even;
  ragged[8] = 30;
  CHECK(ops::gemm_decode_split(4096, 14336, ragged) == 7);
  ops::GemmResidency none{};
  CHECK(ops::gemm_decode_split(4096, 14336, none) == 1);
}

TEST_CASE("gemm: the tensor map rules name what TMA needs", "[gemm]") {
  kjit::cuda::TensorMap2d t;
  t.ptr = kA;
  t.elem_bytes = 2;
  t.rows = 100;
  t.cols = 64;
  t.row_stride_bytes = 128;
  t.box_rows = 128;
  t.box_cols = 64;
  t.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  CHECK_NOTHROW(kjit::cuda::check_tensor_map_2d(t));
  auto message = [](const kjit::cuda::TensorMap2d& bad) {
    try {
      kjit::cuda::check_tensor_map_2d(bad);
    } catch (const kjit::Error& e) {
      CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto m = t;
  m.ptr = kA + 8;
  CHECK(message(m).find("16-byte aligned") != std::string::npos);
  auto s = t;
  s.row_stride_bytes = 136 + 2;
  CHECK(message(s).find("multiple of 16") != std::string::npos);
  auto w = t;
  w.box_cols = 128;  // 256 bytes: wider than the 128-byte swizzle
  CHECK(message(w).find("swizzle") != std::string::npos);
  auto b = t;
  b.box_rows = 257;
  CHECK(message(b).find("box") != std::string::npos);
  auto e = t;
  e.elem_bytes = 8;
  CHECK(message(e).find("element size") != std::string::npos);
}

TEST_CASE("gemm: the wgmma descriptor has the PTX ISA's bit layout", "[gemm]") {
  namespace wg = kjit::wgmma;
  // start address >> 4 in bits 0-13, leading offset >> 4 in 16-29, stride offset >> 4 in 32-45,
  // swizzle in 62-63.
  static_assert(wg::smem_desc(0x400, 0, 0, wg::kSwizzleNone) == 0x40);
  static_assert(wg::smem_desc(0, 16, 0, wg::kSwizzleNone) == (1ull << 16));
  static_assert(wg::smem_desc(0, 0, 1024, wg::kSwizzleNone) == (64ull << 32));
  static_assert(wg::smem_desc(0, 0, 0, wg::kSwizzle128B) == (1ull << 62));
  static_assert(wg::smem_desc(0, 0, 0, wg::kSwizzle32B) == (3ull << 62));
  // The address keeps 18 bits (the shared window), the offsets 14 bits after the shift.
  CHECK(wg::smem_desc(0x7FFF0, 0, 0, 0) == (0x7FFF0u & 0x3FFFFu) >> 4);
  CHECK(wg::kmajor_sw128_desc(0x1000 + 32) ==
        ((0x1020ull >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62)));
}

TEST_CASE("gemm: specs and the catalog", "[gemm]") {
  const ops::OpDef& def = ops::op_or_throw("gemm");
  const auto catalog = def.catalog();
  CHECK(catalog.size() == 80);
  int sm90 = 0, decode = 0, mma = 0, persistent = 0, tma = 0, pairs = 0;
  for (const auto& args : catalog) {
    const kjit::jit::Spec s = def.make_spec(args);
    INFO(s.uri);
    const std::string& path = args.at("path");
    sm90 += path == "sm90";
    decode += path == "decode";
    mma += path == "sm80";
    const bool any_arch = path == "simt" || path == "sm80";
    CHECK(s.arch_families == std::vector<std::string>{any_arch ? "sm_80+" : "sm_90a"});
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
    const char* entry = path == "sm90" ? (p ? "gemm_sm90_persistent_kernel" : "gemm_sm90_kernel")
                        : path == "decode" ? "gemm_decode_sm90_kernel"
                        : path == "sm80"   ? "gemm_mma_sm80_kernel"
                                           : "gemm_simt_kernel";
    CHECK(s.entry_names.at(0).find(entry) != std::string::npos);
  }
  CHECK(sm90 == 36);
  // Both tiles, both dtypes, out in the input dtype or fp32, alone and in pairs; staged.
  CHECK(persistent == 24);
  CHECK(pairs == 12);
  CHECK(tma == 12);  // both tiles and the three forms, both dtypes, out in the input dtype
  // A pair is a setting of the persistent kernel only.
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"pair", "1"}}),
      kjit::Error);
  // The TMA-store epilogue: its flag last in the URI (omitted when 0), the entry's last template
  // argument; an fp32 out, a ring that leaves no room for the 32 KB of staging (7 stages of
  // 32 KB) and the other paths are refused.
  CHECK(def.make_spec({{"path", "sm90"},
                       {"dtype", "bf16"},
                       {"out_dtype", "bf16"},
                       {"bn", "256"},
                       {"persistent", "1"},
                       {"tma_out", "1"}})
            .uri ==
        "gemm_path_sm90_dtype_bf16_out_dtype_bf16_bn_256_stages_4_persistent_1_tma_out_1");
  const kjit::jit::Spec staged128 =
      def.make_spec({{"path", "sm90"}, {"dtype", "fp16"}, {"out_dtype", "fp16"}, {"tma_out", "1"}});
  CHECK(staged128.uri == "gemm_path_sm90_dtype_fp16_out_dtype_fp16_bn_128_stages_6_tma_out_1");
  CHECK(staged128.entry_names.at(0).find(", kjit_spec::tma_out>") != std::string::npos);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "fp32"}, {"tma_out", "1"}}),
      kjit::Error);
  CHECK_THROWS_AS(def.make_spec({{"path", "sm90"},
                                 {"dtype", "bf16"},
                                 {"out_dtype", "bf16"},
                                 {"stages", "7"},
                                 {"tma_out", "1"}}),
                  kjit::Error);
  CHECK_THROWS_AS(
      def.make_spec(
          {{"path", "decode"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"tma_out", "1"}}),
      kjit::Error);
  CHECK(decode == 32);  // every token tile at two rings (two blocks an SM, one), dtypes and outs
  CHECK(mma == 8);
  // The decode tile's ring: the tactics' deeper one fits one block an SM (64 tokens: 9 of 24 KB),
  // one stage more does not; depths past 6 are the decode path's only.
  CHECK(def.make_spec({{"path", "decode"},
                       {"dtype", "bf16"},
                       {"out_dtype", "bf16"},
                       {"tokens", "64"},
                       {"stages", "9"}})
            .uri == "gemm_path_decode_dtype_bf16_out_dtype_bf16_tokens_64_stages_9");
  CHECK_THROWS_AS(def.make_spec({{"path", "decode"},
                                 {"dtype", "bf16"},
                                 {"out_dtype", "bf16"},
                                 {"tokens", "64"},
                                 {"stages", "10"}}),
                  kjit::Error);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"stages", "7"}}),
      kjit::Error);
  // The URI reads as path, dtype and tile; stages default per width.
  CHECK(def.make_spec({{"path", "sm80"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}}).uri ==
        "gemm_path_sm80_dtype_bf16_out_dtype_bf16_bn_128_stages_3");
  CHECK(def.make_spec({{"path", "sm80"}, {"dtype", "fp16"}, {"out_dtype", "fp32"}, {"bn", "64"}})
            .uri == "gemm_path_sm80_dtype_fp16_out_dtype_fp32_bn_64_stages_4");
  CHECK(def.make_spec({{"path", "sm80"},
                       {"dtype", "bf16"},
                       {"out_dtype", "bf16"},
                       {"bn", "64"},
                       {"stages", "3"}})
            .entry_names.at(0)
            .find("gemm_mma_sm80_kernel") != std::string::npos);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm80"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"bn", "256"}}),
      kjit::Error);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm80"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"tokens", "16"}}),
      kjit::Error);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"bn", "64"}}),
      kjit::Error);
  CHECK(def.make_spec(
               {{"path", "decode"}, {"dtype", "fp16"}, {"out_dtype", "fp32"}, {"tokens", "32"}})
            .uri == "gemm_path_decode_dtype_fp16_out_dtype_fp32_tokens_32_stages_5");
  CHECK_THROWS_AS(
      def.make_spec({{"path", "decode"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"bn", "128"}}),
      kjit::Error);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"tokens", "16"}}),
      kjit::Error);
  ops::GemmConfig c;
  c.path = ops::GemmPath::kSm90;
  c.bn = 256;
  c.stages = 4;
  CHECK(ops::gemm_spec(c).uri == "gemm_path_sm90_dtype_bf16_out_dtype_bf16_bn_256_stages_4");
  CHECK(ops::gemm_spec(c).entry_names.at(0).find("gemm_sm90_kernel<") != std::string::npos);
  // The persistent form: the same URI plus persistent_1 (the one-tile URIs are unchanged), its
  // own entry with the same template arguments.
  c.persistent = 1;
  const kjit::jit::Spec ps = ops::gemm_spec(c);
  CHECK(ps.uri == "gemm_path_sm90_dtype_bf16_out_dtype_bf16_bn_256_stages_4_persistent_1");
  CHECK(ps.entry_names.at(0).find("gemm_sm90_persistent_kernel<") != std::string::npos);
  CHECK(def.make_spec({{"path", "sm90"},
                       {"dtype", "bf16"},
                       {"out_dtype", "bf16"},
                       {"bn", "256"},
                       {"persistent", "1"}})
            .uri == ps.uri);
  CHECK(def.make_spec({{"path", "sm90"},
                       {"dtype", "bf16"},
                       {"out_dtype", "bf16"},
                       {"bn", "256"},
                       {"persistent", "0"}})
            .uri == "gemm_path_sm90_dtype_bf16_out_dtype_bf16_bn_256_stages_4");
  for (const char* path : {"decode", "sm80", "simt"}) {
    INFO(path);
    CHECK_THROWS_AS(
        def.make_spec(
            {{"path", path}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"persistent", "1"}}),
        kjit::Error);
  }
  CHECK_THROWS_AS(
      def.make_spec(
          {{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"persistent", "2"}}),
      kjit::Error);
  CHECK_THROWS_AS(
      def.make_spec({{"path", "simt"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"bn", "128"}}),
      kjit::Error);
}
