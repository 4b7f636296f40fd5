// kjit_top_k without a GPU: the C ABI's argument checks (rejected before any driver call), the
// spec and the reference's order.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "ops/sampling/sampling.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

char* const kIn = reinterpret_cast<char*>(0x10000000);
char* const kVal = reinterpret_cast<char*>(0x20000000);
char* const kIdx = reinterpret_cast<char*>(0x30000000);

// A valid call: 4 rows of 1000 bf16, k = 8.
struct TopKCall {
  Tensor in = make_tensor(kIn, {4, 1000}, dl_dtype("bf16"));
  Tensor val = make_tensor(kVal, {4, 8}, dl_dtype("bf16"));
  Tensor idx = make_tensor(kIdx, {4, 8}, dl_dtype("int32"));
  int k = 8;
  kjit_status run() { return kjit_top_k(in.get(), val.get(), idx.get(), k, nullptr); }
};

void expect(TopKCall& c, kjit_status want, const char* fragment) {
  const kjit_status s = c.run();
  const std::string err = kjit_last_error();
  INFO("last error: " << err);
  CHECK(s == want);
  CHECK(err.find(fragment) != std::string::npos);
  CHECK(err.rfind("kjit_top_k", 0) == 0);
}

}  // namespace

TEST_CASE("top_k abi: a valid call passes validation, zero rows is a no-op", "[c_abi][top_k]") {
  KJIT_RUN_WITHOUT_GPU();
  TopKCall c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  c.k = 1000;  // k = vocab
  c.val = make_tensor(kVal, {4, 1000}, dl_dtype("bf16"));
  c.idx = make_tensor(kIdx, {4, 1000}, dl_dtype("int32"));
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  TopKCall z;
  z.in = make_tensor(kIn, {0, 1000}, dl_dtype("bf16"));
  z.val = make_tensor(kVal, {0, 8}, dl_dtype("bf16"));
  z.idx = make_tensor(kIdx, {0, 8}, dl_dtype("int32"));
  CHECK(z.run() == KJIT_SUCCESS);
}

TEST_CASE("top_k abi: rejects k outside 1..vocab, and k above 1024 as unsupported",
          "[c_abi][top_k]") {
  TopKCall c;
  c.k = 0;
  expect(c, KJIT_ERROR_INVALID_ARGUMENT, "k must be >= 1");
  c.k = 1001;
  expect(c, KJIT_ERROR_INVALID_ARGUMENT, "k (1001) exceeds the row length (1000)");
  TopKCall big;
  big.in = make_tensor(kIn, {4, 4096}, dl_dtype("fp32"));
  big.val = make_tensor(kVal, {4, 1025}, dl_dtype("fp32"));
  big.idx = make_tensor(kIdx, {4, 1025}, dl_dtype("int32"));
  big.k = 1025;
  expect(big, KJIT_ERROR_UNSUPPORTED, "top_k supports k up to 1024");
}

TEST_CASE("top_k abi: rejects outputs of another shape, dtype or place", "[c_abi][top_k]") {
  TopKCall a;
  a.val = make_tensor(kVal, {4, 9}, dl_dtype("bf16"));
  expect(a, KJIT_ERROR_INVALID_ARGUMENT, "values must be [4, 8] (batch, k)");
  TopKCall b;
  b.idx = make_tensor(kIdx, {4, 8}, dl_dtype("int64"));
  expect(b, KJIT_ERROR_INVALID_ARGUMENT, "indices must be int32, got int64");
  TopKCall d;
  d.val = make_tensor(kVal, {4, 8}, dl_dtype("fp32"));
  expect(d, KJIT_ERROR_INVALID_ARGUMENT, "values must be bf16, got fp32");
  TopKCall e;
  e.val = make_tensor(kIn + 64, {4, 8}, dl_dtype("bf16"));
  expect(e, KJIT_ERROR_INVALID_ARGUMENT, "values overlaps input");
  TopKCall f;
  f.idx = make_tensor(kVal, {4, 8}, dl_dtype("int32"));
  expect(f, KJIT_ERROR_INVALID_ARGUMENT, "overlaps");
  TopKCall g;
  g.idx.t.device.device_id = 1;
  expect(g, KJIT_ERROR_INVALID_ARGUMENT, "indices");
  TopKCall h;
  h.in = make_tensor(kIn, {4, 1000}, dl_dtype("int32"));
  h.val = make_tensor(kVal, {4, 8}, dl_dtype("int32"));
  expect(h, KJIT_ERROR_UNSUPPORTED, "top_k supports fp32, fp16 and bf16");
}

TEST_CASE("top_k: specs by dtype and alignment", "[top_k]") {
  const ops::OpDef* d = ops::find_op("top_k");
  REQUIRE(d != nullptr);
  auto s = d->make_spec({{"dtype", "bf16"}});
  CHECK(s.uri == "top_k_dtype_bf16_vec_8_unroll_4");
  CHECK(s.entry_names.at(0).rfind("kjit::sampling::top_k_kernel<", 0) == 0);
  s = d->make_spec({{"dtype", "fp32"}, {"align", "4"}});
  CHECK(s.uri == "top_k_dtype_fp32_vec_1_unroll_8");
  CHECK_THROWS_AS(d->make_spec({{"dtype", "fp32"}, {"k", "1025"}}), kjit::Error);
  for (const auto& args : d->catalog()) CHECK_NOTHROW(d->make_spec(args));
}

TEST_CASE("top_k: the reference orders NaN first, then by value, ties by index", "[top_k]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> x = {1.0, nan, -0.0, inf, 1.0, 0.0, nan, -inf};
  CHECK(kjit::ref::top_k(x, 8) == std::vector<int64_t>{1, 6, 3, 0, 4, 2, 5, 7});
  CHECK(kjit::ref::top_k(x, 1) == std::vector<int64_t>{1});
}
