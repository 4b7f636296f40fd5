// kjit_apply_rope / kjit_apply_llama31_rope (positions from indptr and offsets) without a GPU:
// the C ABI's argument checks, the spec of the indptr position source and its plan, and the
// reference's position rule.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "ops/rope/rope.hpp"
#include "reference/rope_ref.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

char* const kQ = reinterpret_cast<char*>(0x10000000);
char* const kK = reinterpret_cast<char*>(0x20000000);
char* const kQo = reinterpret_cast<char*>(0x30000000);
char* const kKo = reinterpret_cast<char*>(0x40000000);
char* const kIndptr = reinterpret_cast<char*>(0x50000000);
char* const kOffsets = reinterpret_cast<char*>(0x60000000);

// A valid call: 5 tokens of 3 requests, 8 q heads and 2 kv heads of 128, out of place.
struct IndptrCall {
  Tensor q = make_tensor(kQ, {5, 8, 128}, dl_dtype("bf16"));
  Tensor k = make_tensor(kK, {5, 2, 128}, dl_dtype("bf16"));
  Tensor q_out = make_tensor(kQo, {5, 8, 128}, dl_dtype("bf16"));
  Tensor k_out = make_tensor(kKo, {5, 2, 128}, dl_dtype("bf16"));
  Tensor indptr = make_tensor(kIndptr, {4}, dl_dtype("int32"));
  Tensor offsets = make_tensor(kOffsets, {3}, dl_dtype("int32"));
  bool llama31 = false, null_indptr = false, null_offsets = false;
  float high = 4.0f;
  kjit_status run() {
    DLTensor* ip = null_indptr ? nullptr : indptr.get();
    DLTensor* off = null_offsets ? nullptr : offsets.get();
    if (llama31) {
      return kjit_apply_llama31_rope(q.get(), k.get(), ip, off, q_out.get(), k_out.get(), 0,
                                     KJIT_ROPE_NEOX, 8.0f, 500000.0f, 1.0f, high, 8192.0f, nullptr);
    }
    return kjit_apply_rope(q.get(), k.get(), ip, off, q_out.get(), k_out.get(), 0, KJIT_ROPE_NEOX,
                           1.0f, 10000.0f, nullptr);
  }
  const char* name() const { return llama31 ? "kjit_apply_llama31_rope" : "kjit_apply_rope"; }
};

void expect_invalid(IndptrCall& c, const char* fragment) {
  const kjit_status s = c.run();
  const std::string err = kjit_last_error();
  INFO("last error: " << err);
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(err.find(fragment) != std::string::npos);
  CHECK(err.rfind(c.name(), 0) == 0);
}

}  // namespace

TEST_CASE("rope indptr abi: a valid call passes validation", "[c_abi][rope]") {
  KJIT_RUN_WITHOUT_GPU();
  for (bool llama31 : {false, true}) {
    IndptrCall c;
    c.llama31 = llama31;
    CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
    // int64 indptr and offsets, empty requests (batch larger than the token count).
    c.indptr = make_tensor(kIndptr, {9}, dl_dtype("int64"));
    c.offsets = make_tensor(kOffsets, {8}, dl_dtype("int64"));
    CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  }
}

TEST_CASE("rope indptr abi: zero tokens is a successful no-op, batch 0 included", "[c_abi][rope]") {
  IndptrCall c;
  c.q = make_tensor(kQ, {0, 8, 128}, dl_dtype("bf16"));
  c.k = make_tensor(kK, {0, 2, 128}, dl_dtype("bf16"));
  c.q_out = make_tensor(kQo, {0, 8, 128}, dl_dtype("bf16"));
  c.k_out = make_tensor(kKo, {0, 2, 128}, dl_dtype("bf16"));
  CHECK(c.run() == KJIT_SUCCESS);
  c.indptr = make_tensor(kIndptr, {1}, dl_dtype("int32"));
  c.offsets = make_tensor(kOffsets, {0}, dl_dtype("int32"));
  CHECK(c.run() == KJIT_SUCCESS);
  c.offsets = make_tensor(kOffsets, {1}, dl_dtype("int32"));  // still checked
  expect_invalid(c, "offsets has 1 elements");
}

TEST_CASE("rope indptr abi: rejects NULL indptr and offsets", "[c_abi][rope]") {
  for (bool llama31 : {false, true}) {
    IndptrCall c;
    c.llama31 = llama31;
    c.null_indptr = true;
    expect_invalid(c, "indptr is NULL");
    IndptrCall d;
    d.llama31 = llama31;
    d.null_offsets = true;
    expect_invalid(d, "offsets is NULL");
  }
}

TEST_CASE("rope indptr abi: rejects sizes that do not match", "[c_abi][rope]") {
  IndptrCall c;
  c.offsets = make_tensor(kOffsets, {4}, dl_dtype("int32"));
  expect_invalid(c, "offsets has 4 elements but indptr has 4 (batch 3)");
  IndptrCall e;
  e.indptr = make_tensor(kIndptr, {0}, dl_dtype("int32"));
  expect_invalid(e, "indptr must have batch + 1 >= 1 elements");
  IndptrCall z;  // batch 0 with tokens
  z.indptr = make_tensor(kIndptr, {1}, dl_dtype("int32"));
  z.offsets = make_tensor(kOffsets, {0}, dl_dtype("int32"));
  expect_invalid(z, "indptr has no request (batch 0) but q has 5 tokens");
}

TEST_CASE("rope indptr abi: rejects bad dtypes, ranks, strides and devices", "[c_abi][rope]") {
  IndptrCall c;
  c.offsets = make_tensor(kOffsets, {3}, dl_dtype("int64"));
  expect_invalid(c, "offsets is int64 but indptr is int32");
  IndptrCall f;
  f.indptr = make_tensor(kIndptr, {4}, dl_dtype("fp32"));
  expect_invalid(f, "indptr must be int32 or int64");
  IndptrCall r;
  r.offsets = make_tensor(kOffsets, {3, 1}, dl_dtype("int32"));
  expect_invalid(r, "offsets must be [batch]");
  IndptrCall s;
  s.indptr = make_tensor(kIndptr, {4}, dl_dtype("int32"), {2});
  expect_invalid(s, "indptr last dim has stride 2");
  IndptrCall d;
  d.indptr.t.device.device_id = 1;
  expect_invalid(d, "indptr is on cuda:1");
}

TEST_CASE("rope indptr abi: rejects outputs overlapping indptr or offsets", "[c_abi][rope]") {
  IndptrCall c;
  c.indptr = make_tensor(kQo, {4}, dl_dtype("int32"));
  expect_invalid(c, "q_out overlaps indptr");
  IndptrCall d;
  d.offsets = make_tensor(kKo + 64, {3}, dl_dtype("int32"));
  expect_invalid(d, "k_out overlaps offsets");
}

TEST_CASE("rope indptr abi: the shared rope and llama31 checks apply", "[c_abi][rope]") {
  IndptrCall c;
  c.k = make_tensor(kK, {4, 2, 128}, dl_dtype("bf16"));
  expect_invalid(c, "k has 4 tokens but q has 5");
  IndptrCall l;
  l.llama31 = true;
  l.high = 0.5f;
  expect_invalid(l, "high_freq_factor");
}

TEST_CASE("rope indptr: its own mode in the URI, both kernels, the frequency plan", "[rope]") {
  const ops::OpDef* d = ops::find_op("rope");
  REQUIRE(d != nullptr);
  auto s = d->make_spec({{"mode", "indptr"}, {"dtype", "bf16"}, {"head_dim", "128"}});
  CHECK(s.uri == "rope_mode_indptr_dtype_bf16_head_dim_128_rot_dim_128_interleave_0_vec_8");
  CHECK(s.config.find("constexpr int mode = 2;") != std::string::npos);
  s = d->make_spec(
      {{"mode", "indptr"}, {"dtype", "fp16"}, {"head_dim", "64"}, {"layout", "decode"}});
  CHECK(s.entry_names.at(0).rfind("kjit::rope::rope_decode_kernel<", 0) == 0);
  // The frequency table's layouts: the decode kernel at decode sizes, unit-major where it cannot
  // serve the shape, slot-major beyond.
  using kjit::ops::DType;
  const ops::RopeConfig c =
      ops::select_rope(ops::RopeMode::kIndptr, DType::kBF16, 128, 128, false, 16);
  CHECK(ops::plan_rope(c, 1, false).decode == 1);
  CHECK(ops::plan_rope(c, 1, true).early_pos == 1);
  const ops::RopeConfig six =
      ops::select_rope(ops::RopeMode::kIndptr, DType::kBF16, 96, 96, false, 16);
  CHECK(ops::plan_rope(six, 1, false).unit_major == 1);
  CHECK(ops::plan_rope(c, 4096, false).unit_major == 0);
  CHECK(ops::plan_rope(c, 4096, false).decode == 0);
  bool in_catalog = false;
  for (const auto& args : d->catalog()) in_catalog |= args.at("mode") == "indptr";
  CHECK(in_catalog);
}

TEST_CASE("rope indptr: the reference's positions follow each request, empty ones included",
          "[rope]") {
  // Requests of 2, 0, 3 and 0 tokens at offsets 7, 100, 40, 9.
  const std::vector<int64_t> indptr = {0, 2, 2, 5, 5}, offsets = {7, 100, 40, 9};
  CHECK(kjit::ref::indptr_positions(indptr, offsets) == std::vector<int64_t>{7, 8, 40, 41, 42});
  CHECK(kjit::ref::indptr_positions({0}, {}).empty());
}
