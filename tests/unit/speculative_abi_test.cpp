// kjit_chain_speculative_sampling without a GPU: each rejected argument (all rejected before any
// driver call), the limits on num_draft, and the descriptor's spec and definitions.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>

#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;

namespace {

char* addr(unsigned long long a) {
  return reinterpret_cast<char*>(a);
}

// A valid call: 3 requests, 4 draft tokens, a vocabulary of 1000 (fake device addresses).
struct Call {
  int64_t n = 4;
  Tensor dp = make_tensor(addr(0x10000000), {3, 4, 1000}, dl_dtype("fp32"));
  Tensor ids = make_tensor(addr(0x11000000), {3, 4}, dl_dtype("int32"));
  Tensor tp = make_tensor(addr(0x12000000), {3, 5, 1000}, dl_dtype("fp32"));
  Tensor seed = make_tensor(addr(0x13000000), {1}, dl_dtype("int64"));
  Tensor offset = make_tensor(addr(0x13100000), {3}, DLDataType{kDLUInt, 64, 1});
  Tensor out = make_tensor(addr(0x14000000), {3, 5}, dl_dtype("int32"));
  Tensor acc = make_tensor(addr(0x15000000), {3}, dl_dtype("int32"));
  Tensor emi = make_tensor(addr(0x16000000), {3}, dl_dtype("int32"));
  bool counts = true;
  kjit_status run() {
    return kjit_chain_speculative_sampling(dp.get(), ids.get(), tp.get(), seed.get(), offset.get(),
                                           out.get(), counts ? acc.get() : nullptr,
                                           counts ? emi.get() : nullptr, nullptr);
  }
};

void expect(Call& c, kjit_status want, const char* fragment) {
  const kjit_status s = c.run();
  const std::string e = kjit_last_error();
  INFO("last error: " << e);
  CHECK(s == want);
  CHECK(e.find(fragment) != std::string::npos);
  CHECK(e.find("kjit_chain_speculative_sampling") == 0);
}

}  // namespace

TEST_CASE("speculative abi: exported and accepting a valid call", "[c_abi][sampling]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_chain_speculative_sampling") != nullptr);
  dlclose(lib);
  KJIT_RUN_WITHOUT_GPU();
  Call c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  c.counts = false;  // accepted / emitted are optional
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  Call strided;  // padded steps and requests
  strided.dp = make_tensor(addr(0x10000000), {3, 4, 1000}, dl_dtype("fp32"), {8192, 2048, 1});
  CHECK(strided.run() == KJIT_ERROR_NO_DEVICE);
}

TEST_CASE("speculative abi: rejects NULL tensors", "[c_abi][sampling]") {
  Call c;
  CHECK(kjit_chain_speculative_sampling(nullptr, c.ids.get(), c.tp.get(), c.seed.get(),
                                        c.offset.get(), c.out.get(), nullptr, nullptr,
                                        nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("draft_probs is NULL") != std::string::npos);
  CHECK(kjit_chain_speculative_sampling(c.dp.get(), c.ids.get(), c.tp.get(), c.seed.get(),
                                        c.offset.get(), nullptr, nullptr, nullptr,
                                        nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("output_token_ids is NULL") != std::string::npos);
}

TEST_CASE("speculative abi: rejects wrong dtypes and shapes", "[c_abi][sampling]") {
  Call bf16;
  bf16.dp.t.dtype = dl_dtype("bf16");
  expect(bf16, KJIT_ERROR_INVALID_ARGUMENT, "draft_probs must be fp32, got bf16");
  Call steps;  // target_probs needs one more step than draft_probs
  steps.tp = make_tensor(addr(0x12000000), {3, 4, 1000}, dl_dtype("fp32"));
  expect(steps, KJIT_ERROR_INVALID_ARGUMENT, "target_probs must be [batch = 3, num_draft + 1 = 5");
  Call two_d;
  two_d.dp = make_tensor(addr(0x10000000), {3, 4000}, dl_dtype("fp32"));
  expect(two_d, KJIT_ERROR_INVALID_ARGUMENT, "draft_probs must be 3-D");
  Call ids64;
  ids64.ids.t.dtype = dl_dtype("int64");
  expect(ids64, KJIT_ERROR_INVALID_ARGUMENT, "draft_token_ids must be int32");
  Call out_short;
  out_short.out = make_tensor(addr(0x14000000), {3, 4}, dl_dtype("int32"));
  expect(out_short, KJIT_ERROR_INVALID_ARGUMENT, "output_token_ids must be [batch = 3, 5]");
  Call seed32;
  seed32.seed.t.dtype = dl_dtype("int32");
  expect(seed32, KJIT_ERROR_INVALID_ARGUMENT, "seed must be int64 or uint64");
  Call offset2;
  offset2.offset = make_tensor(addr(0x13100000), {2}, dl_dtype("int64"));
  expect(offset2, KJIT_ERROR_INVALID_ARGUMENT, "offset has 2 elements, expected 1 or 3");
  Call acc64;
  acc64.acc.t.dtype = dl_dtype("int64");
  expect(acc64, KJIT_ERROR_INVALID_ARGUMENT, "accepted must be int32");
}

TEST_CASE("speculative abi: rejects outputs over inputs or each other", "[c_abi][sampling]") {
  Call over;
  over.out.t.data = over.ids.t.data;
  expect(over, KJIT_ERROR_INVALID_ARGUMENT, "output_token_ids overlaps draft_token_ids");
  Call both;
  both.emi.t.data = both.acc.t.data;
  expect(both, KJIT_ERROR_INVALID_ARGUMENT, "overlaps");
  Call rows;  // rows of the output overlapping each other
  rows.out = make_tensor(addr(0x14000000), {3, 5}, dl_dtype("int32"), {2, 1});
  expect(rows, KJIT_ERROR_INVALID_ARGUMENT, "output_token_ids has rows that overlap");
}

TEST_CASE("speculative abi: num_draft 1..31, batch 0 is a validated no-op", "[c_abi][sampling]") {
  Call none;
  none.dp = make_tensor(addr(0x10000000), {3, 0, 1000}, dl_dtype("fp32"));
  none.ids = make_tensor(addr(0x11000000), {3, 0}, dl_dtype("int32"));
  none.tp = make_tensor(addr(0x12000000), {3, 1, 1000}, dl_dtype("fp32"));
  none.out = make_tensor(addr(0x14000000), {3, 1}, dl_dtype("int32"));
  expect(none, KJIT_ERROR_INVALID_ARGUMENT, "1..31 draft tokens per request, not 0");
  Call many;
  many.dp = make_tensor(addr(0x10000000), {3, 32, 1000}, dl_dtype("fp32"));
  many.ids = make_tensor(addr(0x11000000), {3, 32}, dl_dtype("int32"));
  many.tp = make_tensor(addr(0x12000000), {3, 33, 1000}, dl_dtype("fp32"));
  many.out = make_tensor(addr(0x14000000), {3, 33}, dl_dtype("int32"));
  expect(many, KJIT_ERROR_UNSUPPORTED, "1..31 draft tokens per request, not 32");
  Call empty;
  empty.dp = make_tensor(nullptr, {0, 4, 1000}, dl_dtype("fp32"));
  empty.ids = make_tensor(nullptr, {0, 4}, dl_dtype("int32"));
  empty.tp = make_tensor(nullptr, {0, 5, 1000}, dl_dtype("fp32"));
  empty.out = make_tensor(nullptr, {0, 5}, dl_dtype("int32"));
  empty.offset = make_tensor(addr(0x13100000), {1}, dl_dtype("int64"));
  empty.counts = false;
  CHECK(empty.run() == KJIT_SUCCESS);
}

TEST_CASE("speculative: one spec, definitions with their entry point", "[sampling]") {
  const kjit::ops::OpDef* d = kjit::ops::find_op("chain_speculative_sampling");
  REQUIRE(d != nullptr);
  CHECK(d->catalog().size() == 1);
  CHECK(d->make_spec({}).uri == "chain_speculative_sampling_threads_1024");
  const auto defs = d->definitions();
  REQUIRE(defs.size() == 2);
  CHECK(defs[0].entry == "kjit_chain_speculative_sampling");
  CHECK(defs[0].const_axis("num_steps") == defs[0].const_axis("num_draft") + 1);
}
