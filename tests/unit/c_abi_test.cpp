// The C ABI's argument checks, one test per rejected case. Every case here is rejected before
// any driver call, so they run identically with or without a GPU.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kjit/kjit.h"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first.
void* const kIn = reinterpret_cast<void*>(0x10000000);
void* const kW = reinterpret_cast<void*>(0x20000000);
void* const kOut = reinterpret_cast<void*>(0x30000000);

struct Call {
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor w = make_tensor(kW, {64}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"));
  float eps = 1e-6f;
  kjit_status run() { return kjit_rmsnorm(in.get(), w.get(), out.get(), eps, nullptr); }
};

void expect_invalid(Call& c, const char* fragment) {
  kjit_status s = c.run();
  INFO("last error: " << kjit_last_error());
  CHECK(s == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find(fragment) != std::string::npos);
  CHECK(std::string(kjit_last_error()).find("kjit_rmsnorm") == 0);
}

}  // namespace

TEST_CASE("c abi: versions agree with the header", "[c_abi]") {
  CHECK(std::string(kjit_version_string()) == KJIT_VERSION_STRING);
  CHECK(kjit_version_number() == KJIT_VERSION_NUMBER);
  CHECK(kjit_abi_version() == KJIT_ABI_VERSION);
}

TEST_CASE("c abi: every status has a name", "[c_abi]") {
  for (int s = KJIT_SUCCESS; s <= KJIT_ERROR_CAPTURING; ++s) {
    std::string name = kjit_status_string(static_cast<kjit_status>(s));
    CHECK(name.rfind("KJIT_", 0) == 0);
    CHECK(name != "KJIT_ERROR_UNKNOWN_STATUS");
  }
  CHECK(std::string(kjit_status_string(static_cast<kjit_status>(999))) ==
        "KJIT_ERROR_UNKNOWN_STATUS");
}

TEST_CASE("c abi: libkjit.so exports the C ABI and nothing else", "[c_abi]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  auto version = reinterpret_cast<const char* (*)()>(dlsym(lib, "kjit_version_string"));
  REQUIRE(version != nullptr);
  CHECK(std::string(version()) == KJIT_VERSION_STRING);
  CHECK(dlsym(lib, "kjit_rmsnorm") != nullptr);
  CHECK(dlsym(lib, "_ZN4kjit3jit7JitCore6globalEv") == nullptr);  // internals stay hidden
  dlclose(lib);
}

TEST_CASE("c abi: rmsnorm rejects a NULL input", "[c_abi]") {
  Call c;
  CHECK(kjit_rmsnorm(nullptr, c.w.get(), c.out.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("input is NULL") != std::string::npos);
}

TEST_CASE("c abi: rmsnorm rejects a NULL weight", "[c_abi]") {
  Call c;
  CHECK(kjit_rmsnorm(c.in.get(), nullptr, c.out.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("weight is NULL") != std::string::npos);
}

TEST_CASE("c abi: rmsnorm rejects a NULL out", "[c_abi]") {
  Call c;
  CHECK(kjit_rmsnorm(c.in.get(), c.w.get(), nullptr, 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("out is NULL") != std::string::npos);
}

TEST_CASE("c abi: rmsnorm rejects NULL data with elements", "[c_abi]") {
  Call c;
  c.in.t.data = nullptr;
  expect_invalid(c, "data is NULL");
}

TEST_CASE("c abi: rmsnorm rejects a NULL shape", "[c_abi]") {
  Call c;
  c.in.t.shape = nullptr;
  expect_invalid(c, "NULL shape");
}

TEST_CASE("c abi: rmsnorm rejects ndim 0", "[c_abi]") {
  Call c;
  c.in.t.ndim = 0;
  expect_invalid(c, "ndim 0");
}

TEST_CASE("c abi: rmsnorm rejects ndim above 8", "[c_abi]") {
  Call c;
  c.in = make_tensor(kIn, {1, 1, 1, 1, 1, 1, 1, 4, 64}, dl_dtype("bf16"));
  expect_invalid(c, "ndim 9");
}

TEST_CASE("c abi: rmsnorm rejects a negative dim", "[c_abi]") {
  Call c;
  c.in.shape[0] = -4;
  expect_invalid(c, "negative");
}

TEST_CASE("c abi: rmsnorm rejects shapes whose element count overflows", "[c_abi]") {
  Call c;
  c.in = make_tensor(kIn, {1LL << 40, 1LL << 40, 64}, dl_dtype("bf16"));
  expect_invalid(c, "overflow");
}

TEST_CASE("c abi: rmsnorm rejects an unsupported dtype", "[c_abi]") {
  Call c;
  c.in.t.dtype = c.w.t.dtype = c.out.t.dtype = dl_dtype("int32");
  CHECK(c.run() == KJIT_ERROR_UNSUPPORTED);
  CHECK(std::string(kjit_last_error()).find("int32") != std::string::npos);
}

TEST_CASE("c abi: rmsnorm rejects an unknown dtype code", "[c_abi]") {
  Call c;
  c.in.t.dtype = {kDLOpaqueHandle, 8, 1};
  expect_invalid(c, "unsupported dtype");
}

TEST_CASE("c abi: rmsnorm rejects vector lanes", "[c_abi]") {
  Call c;
  c.in.t.dtype.lanes = 2;
  expect_invalid(c, "lanes");
}

TEST_CASE("c abi: rmsnorm rejects mismatched dtypes", "[c_abi]") {
  Call c;
  c.w.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "weight is fp16 but input is bf16");
  Call d;
  d.out.t.dtype = dl_dtype("fp32");
  expect_invalid(d, "out is fp32");
}

TEST_CASE("c abi: rmsnorm rejects host memory", "[c_abi]") {
  Call c;
  c.in.t.device = {kDLCPU, 0};
  expect_invalid(c, "device type 1");
}

TEST_CASE("c abi: rmsnorm rejects tensors on different devices", "[c_abi]") {
  Call c;
  c.out.t.device.device_id = 1;
  expect_invalid(c, "cuda:1");
}

TEST_CASE("c abi: rmsnorm rejects a negative device id", "[c_abi]") {
  Call c;
  c.in.t.device.device_id = -1;
  c.w.t.device.device_id = -1;
  c.out.t.device.device_id = -1;
  expect_invalid(c, "device id -1");
}

TEST_CASE("c abi: rmsnorm rejects a weight of the wrong length", "[c_abi]") {
  Call c;
  c.w = make_tensor(kW, {63}, dl_dtype("bf16"));
  expect_invalid(c, "weight must be [hidden=64]");
}

TEST_CASE("c abi: rmsnorm rejects a 2-D weight", "[c_abi]") {
  Call c;
  c.w = make_tensor(kW, {1, 64}, dl_dtype("bf16"));
  expect_invalid(c, "weight must be");
}

TEST_CASE("c abi: rmsnorm rejects out of another shape", "[c_abi]") {
  Call c;
  c.out = make_tensor(kOut, {2, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "ndim");
  Call d;
  d.out = make_tensor(kOut, {5, 64}, dl_dtype("bf16"));
  expect_invalid(d, "out dim 0 is 5");
}

TEST_CASE("c abi: rmsnorm rejects a non-contiguous last dim", "[c_abi]") {
  Call c;
  c.in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"), {128, 2});
  expect_invalid(c, "must be contiguous");
}

TEST_CASE("c abi: rmsnorm rejects leading dims that do not collapse", "[c_abi]") {
  Call c;
  c.in = make_tensor(kIn, {2, 2, 64}, dl_dtype("bf16"), {1000, 64, 1});
  c.out = make_tensor(kOut, {2, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "does not collapse");
}

TEST_CASE("c abi: rmsnorm rejects rows that overlap", "[c_abi]") {
  Call c;
  c.out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"), {32, 1});
  expect_invalid(c, "less than the row length");
}

TEST_CASE("c abi: rmsnorm rejects out partially overlapping input", "[c_abi]") {
  Call c;
  c.out = make_tensor(static_cast<char*>(kIn) + 64, {4, 64}, dl_dtype("bf16"));
  expect_invalid(c, "overlaps");
}

TEST_CASE("c abi: rmsnorm rejects NaN, infinite and negative eps", "[c_abi]") {
  for (float eps :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e-6f}) {
    Call c;
    c.eps = eps;
    expect_invalid(c, "eps");
  }
}

TEST_CASE("c abi: zero rows is a successful no-op, but still validated", "[c_abi]") {
  Call c;
  c.in = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
  c.out = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
  CHECK(c.run() == KJIT_SUCCESS);
  CHECK(std::string(kjit_last_error()).empty());
  c.eps = -1.0f;
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("c abi: a valid call reports no device without a GPU, and errors are per thread",
          "[c_abi]") {
  KJIT_RUN_WITHOUT_GPU();
  Call c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
  std::string msg = kjit_last_error();
  CHECK(msg.find(kjit::test::no_device_reason()) != std::string::npos);
  // A misaligned but valid view takes the scalar path: still no validation error.
  Call m;
  m.in = make_tensor(static_cast<char*>(kIn) + 2, {4, 63}, dl_dtype("bf16"), {63, 1});
  m.out = make_tensor(kOut, {4, 63}, dl_dtype("bf16"));
  m.w = make_tensor(kW, {63}, dl_dtype("bf16"));
  CHECK(m.run() == KJIT_ERROR_NO_DEVICE);
}

TEST_CASE("c abi: the no-GPU rerun runs the named test case in a child, commas and all",
          "[c_abi]") {
  // What KJIT_RUN_WITHOUT_GPU does on a GPU machine, done here on any: the child finds exactly
  // this test case (its name has a comma, which Catch would read as two names), runs it and
  // passes; a name that matches nothing is not taken for a pass.
  const auto r = kjit::test::rerun_without_gpu(
      "c abi: a valid call reports no device without a GPU, and errors are per thread");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("All tests passed") != std::string::npos);
  CHECK(r.output.find(" in 1 test case)") != std::string::npos);
  const auto none = kjit::test::rerun_without_gpu("c abi: no such test case");
  INFO(none.output);
  CHECK(none.output.find(" in 1 test case)") == std::string::npos);
}
