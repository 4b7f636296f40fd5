// Argument checks of the normalization family beyond kjit_rmsnorm (c_abi_test.cpp): Gemma
// RMSNorm, fused residual add + RMSNorm (plain and Gemma) and LayerNorm. One test per rejected
// case; every case is rejected before any driver call, so these run with or without a GPU.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <limits>
#include <string>

#include "jit/spec.hpp"
#include "kjit/kjit.h"
#include "ops/norm/layernorm.hpp"
#include "ops/registry.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first (or
// stops at the missing driver).
char* const kIn = reinterpret_cast<char*>(0x10000000);
char* const kRes = reinterpret_cast<char*>(0x20000000);
char* const kW = reinterpret_cast<char*>(0x30000000);
char* const kB = reinterpret_cast<char*>(0x40000000);
char* const kOut = reinterpret_cast<char*>(0x50000000);

bool has(const char* fragment) {
  return std::string(kjit_last_error()).find(fragment) != std::string::npos;
}
bool starts_with(const char* prefix) {
  return std::string(kjit_last_error()).rfind(prefix, 0) == 0;
}

const float kBadEps[] = {std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity(), -1e-6f};

// ---- Fused add + RMSNorm: every case runs through both entry points ---------------------------

struct Fused {
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor res = make_tensor(kRes, {4, 64}, dl_dtype("bf16"));
  Tensor w = make_tensor(kW, {64}, dl_dtype("bf16"));
  float eps = 1e-6f;
  kjit_status run(bool gemma) {
    auto fn = gemma ? kjit_gemma_fused_add_rmsnorm : kjit_fused_add_rmsnorm;
    return fn(w.get(), in.get(), res.get(), eps, nullptr);
  }
};

void expect_fused(Fused& c, kjit_status want, const char* fragment) {
  for (bool gemma : {false, true}) {
    const char* name = gemma ? "kjit_gemma_fused_add_rmsnorm" : "kjit_fused_add_rmsnorm";
    kjit_status s = c.run(gemma);
    INFO(name << ": " << kjit_last_error());
    CHECK(s == want);
    CHECK(has(fragment));
    CHECK(starts_with(name));
  }
}

void expect_fused_invalid(Fused& c, const char* fragment) {
  expect_fused(c, KJIT_ERROR_INVALID_ARGUMENT, fragment);
}

// ---- LayerNorm ----------------------------------------------------------------------------------

struct Ln {
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor g = make_tensor(kW, {64}, dl_dtype("bf16"));
  Tensor b = make_tensor(kB, {64}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"));
  float eps = 1e-5f;
  kjit_status run() { return kjit_layernorm(in.get(), g.get(), b.get(), out.get(), eps, nullptr); }
};

void expect_ln(Ln& c, kjit_status want, const char* fragment) {
  kjit_status s = c.run();
  INFO("kjit_layernorm: " << kjit_last_error());
  CHECK(s == want);
  CHECK(has(fragment));
  CHECK(starts_with("kjit_layernorm"));
}

void expect_ln_invalid(Ln& c, const char* fragment) {
  expect_ln(c, KJIT_ERROR_INVALID_ARGUMENT, fragment);
}

// ---- RMSNorm / Gemma RMSNorm --------------------------------------------------------------------

struct Rms {
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor w = make_tensor(kW, {64}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"));
  kjit_status run(bool gemma) {
    auto fn = gemma ? kjit_gemma_rmsnorm : kjit_rmsnorm;
    return fn(in.get(), w.get(), out.get(), 1e-6f, nullptr);
  }
};

}  // namespace

// ================================ fused_add_rmsnorm (+ gemma) ===================================

TEST_CASE("norm abi: fused_add_rmsnorm rejects a NULL input", "[norm_abi]") {
  Fused c;
  CHECK(kjit_fused_add_rmsnorm(c.w.get(), nullptr, c.res.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("input is NULL"));
  CHECK(kjit_gemma_fused_add_rmsnorm(c.w.get(), nullptr, c.res.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("input is NULL"));
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a NULL residual", "[norm_abi]") {
  Fused c;
  CHECK(kjit_fused_add_rmsnorm(c.w.get(), c.in.get(), nullptr, 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("residual is NULL"));
  CHECK(kjit_gemma_fused_add_rmsnorm(c.w.get(), c.in.get(), nullptr, 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("residual is NULL"));
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a NULL weight", "[norm_abi]") {
  Fused c;
  CHECK(kjit_fused_add_rmsnorm(nullptr, c.in.get(), c.res.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("weight is NULL"));
  CHECK(kjit_gemma_fused_add_rmsnorm(nullptr, c.in.get(), c.res.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("weight is NULL"));
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects NULL data with elements", "[norm_abi]") {
  Fused c;
  c.res.t.data = nullptr;
  expect_fused_invalid(c, "residual data is NULL");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a NULL shape", "[norm_abi]") {
  Fused c;
  c.res.t.shape = nullptr;
  expect_fused_invalid(c, "residual has a NULL shape");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects ndim 0", "[norm_abi]") {
  Fused c;
  c.res.t.ndim = 0;
  expect_fused_invalid(c, "residual has ndim 0");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects ndim above 8", "[norm_abi]") {
  Fused c;
  c.in = make_tensor(kIn, {1, 1, 1, 1, 1, 1, 1, 4, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "input has ndim 9");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a negative dim", "[norm_abi]") {
  Fused c;
  c.res.shape[0] = -4;
  expect_fused_invalid(c, "residual has negative dim");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects shapes whose element count overflows",
          "[norm_abi]") {
  Fused c;
  c.in = make_tensor(kIn, {1LL << 40, 1LL << 40, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "overflow");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects an unsupported dtype", "[norm_abi]") {
  Fused c;
  c.in.t.dtype = c.res.t.dtype = c.w.t.dtype = dl_dtype("int32");
  expect_fused(c, KJIT_ERROR_UNSUPPORTED, "int32");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects an unknown dtype code", "[norm_abi]") {
  Fused c;
  c.res.t.dtype = {kDLOpaqueHandle, 8, 1};
  expect_fused_invalid(c, "residual has unsupported dtype");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects vector lanes", "[norm_abi]") {
  Fused c;
  c.w.t.dtype.lanes = 2;
  expect_fused_invalid(c, "weight has 2 lanes");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a residual of another dtype", "[norm_abi]") {
  Fused c;
  c.res.t.dtype = dl_dtype("fp16");
  expect_fused_invalid(c, "residual is fp16 but input is bf16");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a weight of another dtype", "[norm_abi]") {
  Fused c;
  c.w.t.dtype = dl_dtype("fp32");
  expect_fused_invalid(c, "weight is fp32 but input is bf16");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects host memory", "[norm_abi]") {
  Fused c;
  c.res.t.device = {kDLCPU, 0};
  expect_fused_invalid(c, "residual is on device type 1");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects tensors on different devices", "[norm_abi]") {
  Fused c;
  c.res.t.device.device_id = 1;
  expect_fused_invalid(c, "residual is on cuda:1");
  Fused d;
  d.w.t.device.device_id = 1;
  expect_fused_invalid(d, "weight is on cuda:1");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a negative device id", "[norm_abi]") {
  Fused c;
  c.in.t.device.device_id = c.res.t.device.device_id = c.w.t.device.device_id = -1;
  expect_fused_invalid(c, "device id -1");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a weight of the wrong length", "[norm_abi]") {
  Fused c;
  c.w = make_tensor(kW, {65}, dl_dtype("bf16"));
  expect_fused_invalid(c, "weight must be [hidden=64]");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a 2-D weight", "[norm_abi]") {
  Fused c;
  c.w = make_tensor(kW, {1, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "weight must be [hidden=64], got ndim 2");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a residual of another shape", "[norm_abi]") {
  Fused c;
  c.res = make_tensor(kRes, {2, 2, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "residual has ndim 3 but input has 2");
  Fused d;
  d.res = make_tensor(kRes, {5, 64}, dl_dtype("bf16"));
  expect_fused_invalid(d, "residual dim 0 is 5 but input dim 0 is 4");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a non-contiguous last dim", "[norm_abi]") {
  Fused c;
  c.res = make_tensor(kRes, {4, 64}, dl_dtype("bf16"), {128, 2});
  expect_fused_invalid(c, "residual last dim has stride 2");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects leading dims that do not collapse", "[norm_abi]") {
  Fused c;
  c.in = make_tensor(kIn, {2, 2, 64}, dl_dtype("bf16"), {1000, 64, 1});
  c.res = make_tensor(kRes, {2, 2, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "input dim 0 stride 1000 does not collapse");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects rows that overlap", "[norm_abi]") {
  Fused c;
  c.res = make_tensor(kRes, {4, 64}, dl_dtype("bf16"), {32, 1});
  expect_fused_invalid(c, "less than the row length");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a residual partially overlapping input",
          "[norm_abi]") {
  Fused c;
  c.res = make_tensor(kIn + 64, {4, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "residual overlaps input");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects the residual being the input", "[norm_abi]") {
  Fused c;
  c.res = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "residual overlaps input");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a weight inside input", "[norm_abi]") {
  Fused c;
  c.w = make_tensor(kIn + 128, {64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "input overlaps weight");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a weight inside residual", "[norm_abi]") {
  Fused c;
  c.w = make_tensor(kRes, {64}, dl_dtype("bf16"));
  expect_fused_invalid(c, "residual overlaps weight");
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects NaN, infinite and negative eps", "[norm_abi]") {
  for (float eps : kBadEps) {
    Fused c;
    c.eps = eps;
    expect_fused_invalid(c, "eps must be finite and >= 0");
  }
}

TEST_CASE("norm abi: fused_add_rmsnorm rejects a hidden size above the maximum", "[norm_abi]") {
  Fused c;
  c.in = make_tensor(kIn, {1, 262145}, dl_dtype("bf16"));
  c.res = make_tensor(kRes, {1, 262145}, dl_dtype("bf16"));
  c.w = make_tensor(kW, {262145}, dl_dtype("bf16"));
  expect_fused(c, KJIT_ERROR_UNSUPPORTED, "hidden sizes 1..262144");
}

TEST_CASE("norm abi: fused_add_rmsnorm with zero rows is a successful no-op, still validated",
          "[norm_abi]") {
  for (bool gemma : {false, true}) {
    Fused c;
    c.in = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
    c.res = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
    CHECK(c.run(gemma) == KJIT_SUCCESS);
    CHECK(std::string(kjit_last_error()).empty());
    c.w.t.dtype = dl_dtype("fp16");
    CHECK(c.run(gemma) == KJIT_ERROR_INVALID_ARGUMENT);
  }
}

TEST_CASE("norm abi: a valid fused_add_rmsnorm call reports no device without a GPU",
          "[norm_abi]") {
  KJIT_RUN_WITHOUT_GPU();
  Fused c;
  expect_fused(c, KJIT_ERROR_NO_DEVICE, kjit::test::no_device_reason().c_str());
  // Misaligned, odd-sized, row-strided views with different strides: still valid.
  Fused m;
  m.in = make_tensor(kIn + 2, {4, 63}, dl_dtype("bf16"), {65, 1});
  m.res = make_tensor(kRes, {4, 63}, dl_dtype("bf16"), {100, 1});
  m.w = make_tensor(kW + 6, {63}, dl_dtype("bf16"));
  expect_fused(m, KJIT_ERROR_NO_DEVICE, kjit::test::no_device_reason().c_str());
}

// ========================================= layernorm ============================================

TEST_CASE("norm abi: layernorm rejects a NULL input", "[norm_abi]") {
  Ln c;
  CHECK(kjit_layernorm(nullptr, c.g.get(), c.b.get(), c.out.get(), 1e-5f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("input is NULL"));
}

TEST_CASE("norm abi: layernorm rejects a NULL gamma", "[norm_abi]") {
  Ln c;
  CHECK(kjit_layernorm(c.in.get(), nullptr, c.b.get(), c.out.get(), 1e-5f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("gamma is NULL"));
}

TEST_CASE("norm abi: layernorm rejects a NULL beta", "[norm_abi]") {
  Ln c;
  CHECK(kjit_layernorm(c.in.get(), c.g.get(), nullptr, c.out.get(), 1e-5f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("beta is NULL"));
}

TEST_CASE("norm abi: layernorm rejects a NULL out", "[norm_abi]") {
  Ln c;
  CHECK(kjit_layernorm(c.in.get(), c.g.get(), c.b.get(), nullptr, 1e-5f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("out is NULL"));
}

TEST_CASE("norm abi: layernorm rejects NULL data with elements", "[norm_abi]") {
  Ln c;
  c.b.t.data = nullptr;
  expect_ln_invalid(c, "beta data is NULL");
}

TEST_CASE("norm abi: layernorm rejects a NULL shape", "[norm_abi]") {
  Ln c;
  c.g.t.shape = nullptr;
  expect_ln_invalid(c, "gamma has a NULL shape");
}

TEST_CASE("norm abi: layernorm rejects ndim 0", "[norm_abi]") {
  Ln c;
  c.out.t.ndim = 0;
  expect_ln_invalid(c, "out has ndim 0");
}

TEST_CASE("norm abi: layernorm rejects ndim above 8", "[norm_abi]") {
  Ln c;
  c.in = make_tensor(kIn, {1, 1, 1, 1, 1, 1, 1, 4, 64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "input has ndim 9");
}

TEST_CASE("norm abi: layernorm rejects a negative dim", "[norm_abi]") {
  Ln c;
  c.in.shape[0] = -4;
  expect_ln_invalid(c, "input has negative dim");
}

TEST_CASE("norm abi: layernorm rejects shapes whose element count overflows", "[norm_abi]") {
  Ln c;
  c.out = make_tensor(kOut, {1LL << 40, 1LL << 40, 64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "overflow");
}

TEST_CASE("norm abi: layernorm rejects an unsupported dtype", "[norm_abi]") {
  Ln c;
  c.in.t.dtype = c.g.t.dtype = c.b.t.dtype = c.out.t.dtype = dl_dtype("int32");
  expect_ln(c, KJIT_ERROR_UNSUPPORTED, "layernorm supports fp32, fp16 and bf16, not int32");
}

TEST_CASE("norm abi: layernorm rejects an unknown dtype code", "[norm_abi]") {
  Ln c;
  c.g.t.dtype = {kDLOpaqueHandle, 8, 1};
  expect_ln_invalid(c, "gamma has unsupported dtype");
}

TEST_CASE("norm abi: layernorm rejects vector lanes", "[norm_abi]") {
  Ln c;
  c.b.t.dtype.lanes = 4;
  expect_ln_invalid(c, "beta has 4 lanes");
}

TEST_CASE("norm abi: layernorm rejects out of another dtype", "[norm_abi]") {
  Ln c;
  c.out.t.dtype = dl_dtype("fp32");
  expect_ln_invalid(c, "out is fp32 but input is bf16");
}

TEST_CASE("norm abi: layernorm rejects beta of another dtype than gamma", "[norm_abi]") {
  Ln c;
  c.g.t.dtype = dl_dtype("fp32");
  expect_ln_invalid(c, "beta is bf16 but gamma is fp32");
}

TEST_CASE("norm abi: layernorm rejects fp16 gamma/beta beside bf16 input", "[norm_abi]") {
  Ln c;
  c.g.t.dtype = c.b.t.dtype = dl_dtype("fp16");
  expect_ln(c, KJIT_ERROR_UNSUPPORTED, "gamma/beta in the input dtype (bf16) or fp32, not fp16");
}

TEST_CASE("norm abi: layernorm rejects 16-bit gamma/beta beside fp32 input", "[norm_abi]") {
  Ln c;
  c.in.t.dtype = c.out.t.dtype = dl_dtype("fp32");
  expect_ln(c, KJIT_ERROR_UNSUPPORTED, "gamma/beta in the input dtype (fp32) or fp32, not bf16");
}

TEST_CASE("norm abi: layernorm rejects host memory", "[norm_abi]") {
  Ln c;
  c.g.t.device = {kDLCPU, 0};
  expect_ln_invalid(c, "gamma is on device type 1");
}

TEST_CASE("norm abi: layernorm rejects tensors on different devices", "[norm_abi]") {
  Ln c;
  c.g.t.device.device_id = 1;
  expect_ln_invalid(c, "gamma is on cuda:1");
  Ln d;
  d.b.t.device.device_id = 2;
  expect_ln_invalid(d, "beta is on cuda:2");
  Ln e;
  e.out.t.device.device_id = 3;
  expect_ln_invalid(e, "out is on cuda:3");
}

TEST_CASE("norm abi: layernorm rejects a negative device id", "[norm_abi]") {
  Ln c;
  c.in.t.device.device_id = -1;
  expect_ln_invalid(c, "input has device id -1");
}

TEST_CASE("norm abi: layernorm rejects a gamma of the wrong length", "[norm_abi]") {
  Ln c;
  c.g = make_tensor(kW, {63}, dl_dtype("bf16"));
  expect_ln_invalid(c, "gamma must be [hidden=64]");
}

TEST_CASE("norm abi: layernorm rejects a beta of the wrong length", "[norm_abi]") {
  Ln c;
  c.b = make_tensor(kB, {128}, dl_dtype("bf16"));
  expect_ln_invalid(c, "beta must be [hidden=64]");
}

TEST_CASE("norm abi: layernorm rejects a 2-D gamma", "[norm_abi]") {
  Ln c;
  c.g = make_tensor(kW, {1, 64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "gamma must be [hidden=64], got ndim 2");
}

TEST_CASE("norm abi: layernorm rejects out of another shape", "[norm_abi]") {
  Ln c;
  c.out = make_tensor(kOut, {2, 2, 64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "out has ndim 3 but input has 2");
  Ln d;
  d.out = make_tensor(kOut, {5, 64}, dl_dtype("bf16"));
  expect_ln_invalid(d, "out dim 0 is 5 but input dim 0 is 4");
}

TEST_CASE("norm abi: layernorm rejects a non-contiguous last dim", "[norm_abi]") {
  Ln c;
  c.out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"), {128, 2});
  expect_ln_invalid(c, "out last dim has stride 2");
}

TEST_CASE("norm abi: layernorm rejects leading dims that do not collapse", "[norm_abi]") {
  Ln c;
  c.in = make_tensor(kIn, {2, 2, 64}, dl_dtype("bf16"), {1000, 64, 1});
  c.out = make_tensor(kOut, {2, 2, 64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "does not collapse");
}

TEST_CASE("norm abi: layernorm rejects rows that overlap", "[norm_abi]") {
  Ln c;
  c.in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"), {32, 1});
  expect_ln_invalid(c, "less than the row length");
}

TEST_CASE("norm abi: layernorm rejects out partially overlapping input", "[norm_abi]") {
  Ln c;
  c.out = make_tensor(kIn + 64, {4, 64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "out overlaps input without being the same view");
}

TEST_CASE("norm abi: layernorm rejects out overlapping gamma", "[norm_abi]") {
  Ln c;
  c.g = make_tensor(kOut + 128, {64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "out overlaps gamma");
}

TEST_CASE("norm abi: layernorm rejects out overlapping beta", "[norm_abi]") {
  Ln c;
  c.b = make_tensor(kOut, {64}, dl_dtype("bf16"));
  expect_ln_invalid(c, "out overlaps beta");
}

TEST_CASE("norm abi: layernorm rejects NaN, infinite and negative eps", "[norm_abi]") {
  for (float eps : kBadEps) {
    Ln c;
    c.eps = eps;
    expect_ln_invalid(c, "eps must be finite and >= 0");
  }
}

TEST_CASE("norm abi: layernorm rejects a hidden size above the maximum", "[norm_abi]") {
  Ln c;
  c.in = make_tensor(kIn, {1, 262145}, dl_dtype("fp32"));
  c.out = make_tensor(kOut, {1, 262145}, dl_dtype("fp32"));
  c.g = make_tensor(kW, {262145}, dl_dtype("fp32"));
  c.b = make_tensor(kB, {262145}, dl_dtype("fp32"));
  expect_ln(c, KJIT_ERROR_UNSUPPORTED, "hidden sizes 1..262144");
}

TEST_CASE("norm abi: layernorm with zero rows is a successful no-op, still validated",
          "[norm_abi]") {
  Ln c;
  c.in = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
  c.out = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
  CHECK(c.run() == KJIT_SUCCESS);
  CHECK(std::string(kjit_last_error()).empty());
  c.eps = std::numeric_limits<float>::quiet_NaN();
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("norm abi: a valid layernorm call reports no device without a GPU", "[norm_abi]") {
  KJIT_RUN_WITHOUT_GPU();
  Ln c;
  expect_ln(c, KJIT_ERROR_NO_DEVICE, kjit::test::no_device_reason().c_str());
  // fp32 parameters beside bf16 input, in place, with misaligned odd-sized views: still valid.
  Ln m;
  m.in = make_tensor(kIn + 2, {4, 63}, dl_dtype("bf16"), {65, 1});
  m.out = make_tensor(kIn + 2, {4, 63}, dl_dtype("bf16"), {65, 1});
  m.g = make_tensor(kW + 4, {63}, dl_dtype("fp32"));
  m.b = make_tensor(kB + 12, {63}, dl_dtype("fp32"));
  expect_ln(m, KJIT_ERROR_NO_DEVICE, kjit::test::no_device_reason().c_str());
}

// ================================ rmsnorm / gemma_rmsnorm =======================================

TEST_CASE("norm abi: gemma_rmsnorm rejects a NULL input", "[norm_abi]") {
  Rms c;
  CHECK(kjit_gemma_rmsnorm(nullptr, c.w.get(), c.out.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("input is NULL"));
  CHECK(starts_with("kjit_gemma_rmsnorm"));
}

TEST_CASE("norm abi: gemma_rmsnorm rejects mismatched dtypes", "[norm_abi]") {
  Rms c;
  c.w.t.dtype = dl_dtype("fp32");
  CHECK(c.run(true) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(has("weight is fp32 but input is bf16"));
  CHECK(starts_with("kjit_gemma_rmsnorm"));
}

TEST_CASE("norm abi: rmsnorm and gemma_rmsnorm reject out overlapping weight", "[norm_abi]") {
  for (bool gemma : {false, true}) {
    Rms c;
    c.w = make_tensor(kOut + 128, {64}, dl_dtype("bf16"));
    CHECK(c.run(gemma) == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has("out overlaps weight"));
  }
}

TEST_CASE("norm abi: a valid gemma_rmsnorm call reports no device without a GPU", "[norm_abi]") {
  KJIT_RUN_WITHOUT_GPU();
  Rms c;
  CHECK(c.run(true) == KJIT_ERROR_NO_DEVICE);
  CHECK(starts_with("kjit_gemma_rmsnorm"));
}

TEST_CASE("norm abi: libkjit.so exports the normalization entry points", "[norm_abi]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  for (const char* name : {"kjit_gemma_rmsnorm", "kjit_fused_add_rmsnorm",
                           "kjit_gemma_fused_add_rmsnorm", "kjit_layernorm"}) {
    INFO(name);
    CHECK(dlsym(lib, name) != nullptr);
  }
  dlclose(lib);
}

// ============================ references (checked on known values) ===============================

TEST_CASE("reference: residual_add adds in fp32 and rounds to the dtype", "[reference]") {
  using kjit::ref::residual_add;
  // bf16: 256 + 1 is not representable (8 bits of mantissa): ties to even gives 256.
  CHECK(residual_add({256.0}, {1.0}, "bf16")[0] == 256.0);
  CHECK(residual_add({256.0}, {3.0}, "bf16")[0] == 260.0);
  CHECK(residual_add({2048.0}, {1.0}, "fp16")[0] == 2048.0);
  CHECK(residual_add({0.5}, {0.25}, "fp32")[0] == 0.75);
}

TEST_CASE("reference: layernorm of a known row", "[reference]") {
  // x = [1, 3]: mean 2, biased variance 1.
  std::vector<double> mean, rstd;
  auto y = kjit::ref::layernorm({1, 3}, {2, 3}, {10, 20}, 1, 2, 0.0, &mean, &rstd);
  CHECK(y[0] == Approx(-2 + 10));
  CHECK(y[1] == Approx(3 + 20));
  CHECK(mean[0] == 2.0);
  CHECK(rstd[0] == 1.0);
  // A large common offset does not disturb the two-pass reference.
  auto z = kjit::ref::layernorm({1e8 + 1, 1e8 + 3}, {1, 1}, {0, 0}, 1, 2, 0.0);
  CHECK(z[0] == Approx(-1.0));
  CHECK(z[1] == Approx(1.0));
}

TEST_CASE("layernorm plan: decode-size row counts take one vector a thread", "[norm_abi]") {
  using kjit::ops::DType;
  using kjit::ops::select_layernorm;
  const auto one = select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 1);
  CHECK(kjit::ops::layernorm_uri(one) ==
        "layernorm_dtype_bf16_param_dtype_bf16_hidden_4096_vec_8_threads_per_row_512_"
        "rows_per_block_1_early_params_1");
  const kjit::jit::Spec s = kjit::ops::layernorm_spec(one);
  CHECK(s.config.find("constexpr bool early_params = true;") != std::string::npos);
  CHECK(s.entry_names.at(0).find("kjit_spec::rows_per_block, kjit_spec::early_params>") !=
        std::string::npos);
  // Decode geometry: one vector a thread up to 128 rows, above that about four.
  CHECK(select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 64).threads_per_row == 512);
  CHECK(select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 128).threads_per_row == 512);
  CHECK(select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 129).threads_per_row == 128);
  // Above 256 rows the parameters are read after the PDL wait as well: the default variant.
  const auto many = select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 257);
  CHECK(kjit::ops::layernorm_uri(many) ==
        "layernorm_dtype_bf16_param_dtype_bf16_hidden_4096_vec_8_threads_per_row_128_"
        "rows_per_block_1");
  // Rows too long for the 1024 threads at one vector each keep the same cap.
  CHECK(select_layernorm(DType::kBF16, DType::kBF16, 16384, 16, 16, 1).threads_per_row == 1024);
  CHECK(select_layernorm(DType::kF32, DType::kF32, 4096, 16, 16).threads_per_row == 256);
  // The op definition: --set rows picks the same.
  const kjit::ops::OpDef* d = kjit::ops::find_op("layernorm");
  REQUIRE(d != nullptr);
  CHECK(d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "8"}}).uri ==
        kjit::ops::layernorm_uri(one));
  CHECK(d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}}).uri ==
        kjit::ops::layernorm_uri(many));
}

TEST_CASE("norm plan: up to 256 rows read the parameters before the PDL wait", "[norm_abi]") {
  using kjit::ops::DType;
  const kjit::ops::RmsNormConfig big = kjit::ops::select_rmsnorm(DType::kBF16, 4096, 16);
  CHECK(big.early_params == 0);
  // The default keeps its URI (and its code).
  CHECK(kjit::ops::rmsnorm_uri(big) ==
        "rmsnorm_dtype_bf16_hidden_4096_vec_8_threads_per_row_128_rows_per_block_1");
  CHECK(kjit::ops::rmsnorm_spec(big).config.find("early_params = false;") != std::string::npos);
  for (int64_t rows : {int64_t{1}, int64_t{64}, kjit::ops::kNormEarlyParamsMaxRows}) {
    INFO("rows=" << rows);
    const auto r = kjit::ops::select_rmsnorm(DType::kBF16, 4096, 16, rows);
    CHECK(r.early_params == 1);
    // Up to kNormDecodeGeometryMaxRows rows a thread holds one vector (512 threads), above it
    // about four, as the default.
    CHECK(kjit::ops::rmsnorm_uri(r) ==
          (rows <= kjit::ops::kNormDecodeGeometryMaxRows
               ? "rmsnorm_dtype_bf16_hidden_4096_vec_8_threads_per_row_512_rows_per_block_1_"
                 "early_params_1"
               : "rmsnorm_dtype_bf16_hidden_4096_vec_8_threads_per_row_128_rows_per_block_1_"
                 "early_params_1"));
    const kjit::jit::Spec s = kjit::ops::rmsnorm_spec(r);
    CHECK(s.config.find("constexpr bool early_params = true;") != std::string::npos);
    CHECK(s.entry_names.at(0).find("kjit_spec::early_params>") != std::string::npos);
    CHECK(kjit::ops::select_fused_add_rmsnorm(DType::kF16, 2048, 16, rows).early_params == 1);
    CHECK(kjit::ops::select_layernorm(DType::kBF16, DType::kF32, 4096, 16, 16, rows).early_params ==
          1);
  }
  const int64_t over = kjit::ops::kNormEarlyParamsMaxRows + 1;
  CHECK(kjit::ops::select_rmsnorm(DType::kBF16, 4096, 16, over).early_params == 0);
  CHECK(kjit::ops::select_fused_add_rmsnorm(DType::kF16, 2048, 16, over).early_params == 0);
  CHECK(kjit::ops::select_layernorm(DType::kBF16, DType::kF32, 4096, 16, 16, over).early_params ==
        0);
  // --set rows picks the same; without it, many rows.
  for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
    const kjit::ops::OpDef* d = kjit::ops::find_op(op);
    REQUIRE(d != nullptr);
    const std::string small =
        d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "200"}}).uri;
    const std::string dflt = d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}}).uri;
    CHECK(small == dflt + "_early_params_1");
    const std::string decode =
        d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "8"}}).uri;
    CHECK(decode.find("_threads_per_row_512_rows_per_block_1_early_params_1") != std::string::npos);
    CHECK(d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "257"}}).uri == dflt);
  }
}
