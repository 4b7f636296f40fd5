// The activation family without a GPU: the C ABI's argument checks (one test per rejected case,
// all rejected before any driver call), then the pure parts of the op: vector-width choice,
// launch shape, specs and catalog.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/entry_points.hpp"
#include "kjit/kjit.h"
#include "ops/activation/activation.hpp"
#include "ops/registry.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first.
char* const kIn = reinterpret_cast<char*>(0x10000000);
char* const kOut = reinterpret_cast<char*>(0x30000000);

using ActFn = kjit_status (*)(const DLTensor*, DLTensor*, void*);

struct Call {
  Tensor in = make_tensor(kIn, {4, 128}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"));
  ActFn fn = kjit_silu_and_mul;
  const char* name = "kjit_silu_and_mul";
  kjit_status run() { return fn(in.get(), out.get(), nullptr); }
};

std::string last_error() {
  return kjit_last_error();
}

void expect_status(Call& c, kjit_status want, const char* fragment) {
  kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find(c.name) == 0);  // the guard names the entry point
}

void expect_invalid(Call& c, const char* fragment) {
  expect_status(c, KJIT_ERROR_INVALID_ARGUMENT, fragment);
}

template <typename Fn>
void add_act_entry(std::vector<std::pair<std::string, ActFn>>& out, const char* name, Fn fn) {
  if constexpr (std::is_same_v<Fn, ActFn>) {
    const std::string n = name;
    if (n.size() > 8 && n.compare(n.size() - 8, 8, "_and_mul") == 0) out.emplace_back(n, fn);
  }
}

// Every kjit_*_and_mul row of the entry-point table (src/api/entry_points.hpp), with its function.
std::vector<std::pair<std::string, ActFn>> act_entry_points() {
  std::vector<std::pair<std::string, ActFn>> out;
#define KJIT_ACT_ENTRY(fn, args) add_act_entry(out, #fn, &fn);
  KJIT_TENSOR_ENTRY_POINTS(KJIT_ACT_ENTRY)
#undef KJIT_ACT_ENTRY
  return out;
}

}  // namespace

TEST_CASE("activation abi: libkjit.so exports an entry point per activation, each with a row",
          "[c_abi][activation]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  std::set<std::string> want;
  for (const ops::ActivationInfo& a : ops::kActivations) {
    const std::string entry = std::string("kjit_") + a.op_type;
    INFO(entry);
    CHECK(dlsym(lib, entry.c_str()) != nullptr);
    want.insert(entry);
  }
  dlclose(lib);
  std::set<std::string> rows;
  for (const auto& [name, fn] : act_entry_points()) rows.insert(name);
  CHECK(want.size() >= 3);
  CHECK(rows == want);
}

TEST_CASE("activation abi: each entry point names itself in its errors", "[c_abi][activation]") {
  for (const auto& [name, fn] : act_entry_points()) {
    Call c;
    c.fn = fn;
    c.name = name.c_str();
    c.in.shape[1] = 127;
    expect_invalid(c, "must be even");
  }
}

TEST_CASE("activation abi: rejects a NULL input", "[c_abi][activation]") {
  Call c;
  CHECK(kjit_silu_and_mul(nullptr, c.out.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("input is NULL") != std::string::npos);
}

TEST_CASE("activation abi: rejects a NULL out", "[c_abi][activation]") {
  Call c;
  CHECK(kjit_gelu_and_mul(c.in.get(), nullptr, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out is NULL") != std::string::npos);
}

TEST_CASE("activation abi: rejects NULL data with elements", "[c_abi][activation]") {
  Call c;
  c.out.t.data = nullptr;
  expect_invalid(c, "out data is NULL");
}

TEST_CASE("activation abi: rejects a NULL shape", "[c_abi][activation]") {
  Call c;
  c.in.t.shape = nullptr;
  expect_invalid(c, "NULL shape");
}

TEST_CASE("activation abi: rejects ndim 0", "[c_abi][activation]") {
  Call c;
  c.in.t.ndim = 0;
  expect_invalid(c, "ndim 0");
}

TEST_CASE("activation abi: rejects ndim above 8", "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(kIn, {1, 1, 1, 1, 1, 1, 1, 4, 128}, dl_dtype("bf16"));
  expect_invalid(c, "ndim 9");
}

TEST_CASE("activation abi: rejects a negative dim", "[c_abi][activation]") {
  Call c;
  c.out.shape[0] = -4;
  expect_invalid(c, "negative");
}

TEST_CASE("activation abi: rejects shapes whose element count overflows", "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(kIn, {1LL << 40, 1LL << 40, 128}, dl_dtype("bf16"));
  expect_invalid(c, "overflow");
}

TEST_CASE("activation abi: rejects an integer dtype as unsupported", "[c_abi][activation]") {
  Call c;
  c.in.t.dtype = c.out.t.dtype = dl_dtype("int32");
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "int32");
}

TEST_CASE("activation abi: rejects an unknown dtype code", "[c_abi][activation]") {
  Call c;
  c.in.t.dtype = {kDLOpaqueHandle, 8, 1};
  expect_invalid(c, "unsupported dtype");
}

TEST_CASE("activation abi: rejects vector lanes", "[c_abi][activation]") {
  Call c;
  c.out.t.dtype.lanes = 2;
  expect_invalid(c, "lanes");
}

TEST_CASE("activation abi: rejects mismatched dtypes", "[c_abi][activation]") {
  Call c;
  c.out.t.dtype = dl_dtype("fp16");
  expect_invalid(c, "out is fp16 but input is bf16");
}

TEST_CASE("activation abi: rejects host memory", "[c_abi][activation]") {
  Call c;
  c.in.t.device = {kDLCPU, 0};
  expect_invalid(c, "device type 1");
}

TEST_CASE("activation abi: rejects tensors on different devices", "[c_abi][activation]") {
  Call c;
  c.out.t.device.device_id = 1;
  expect_invalid(c, "cuda:1");
}

TEST_CASE("activation abi: rejects a negative device id", "[c_abi][activation]") {
  Call c;
  c.in.t.device.device_id = -1;
  c.out.t.device.device_id = -1;
  expect_invalid(c, "device id -1");
}

TEST_CASE("activation abi: rejects an odd input last dim", "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(kIn, {4, 129}, dl_dtype("bf16"));
  expect_invalid(c, "input last dim must be even");
}

TEST_CASE("activation abi: rejects an out last dim that is not half the input's",
          "[c_abi][activation]") {
  Call c;
  c.out = make_tensor(kOut, {4, 128}, dl_dtype("bf16"));
  expect_invalid(c, "out last dim is 128 but must be half of input's 128 (64)");
}

TEST_CASE("activation abi: rejects out of another ndim", "[c_abi][activation]") {
  Call c;
  c.out = make_tensor(kOut, {2, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "out has ndim 3 but input has 2");
}

TEST_CASE("activation abi: rejects out with other leading dims", "[c_abi][activation]") {
  Call c;
  c.out = make_tensor(kOut, {5, 64}, dl_dtype("bf16"));
  expect_invalid(c, "out dim 0 is 5 but input dim 0 is 4");
}

TEST_CASE("activation abi: rejects a non-contiguous last dim", "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(kIn, {4, 128}, dl_dtype("bf16"), {256, 2});
  expect_invalid(c, "input last dim has stride 2");
}

TEST_CASE("activation abi: rejects a non-contiguous out last dim", "[c_abi][activation]") {
  Call c;
  c.out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"), {128, 2});
  expect_invalid(c, "out last dim has stride 2");
}

TEST_CASE("activation abi: rejects leading dims that do not collapse", "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(kIn, {2, 2, 128}, dl_dtype("bf16"), {1000, 128, 1});
  c.out = make_tensor(kOut, {2, 2, 64}, dl_dtype("bf16"));
  expect_invalid(c, "does not collapse");
}

TEST_CASE("activation abi: rejects rows that overlap", "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(kIn, {4, 128}, dl_dtype("bf16"), {64, 1});
  expect_invalid(c, "less than the row length");
}

TEST_CASE("activation abi: rejects out written over the up half of input", "[c_abi][activation]") {
  // The tempting in-place form: out = input[..., d:]. Rows of out and of the gate interleave.
  Call c;
  c.out = make_tensor(kIn + 64 * 2, {4, 64}, dl_dtype("bf16"), {128, 1});
  expect_invalid(c, "out overlaps input");
}

TEST_CASE("activation abi: rejects out written over the gate half of input",
          "[c_abi][activation]") {
  Call c;
  c.out = make_tensor(kIn, {4, 64}, dl_dtype("bf16"), {128, 1});
  expect_invalid(c, "out overlaps input");
}

TEST_CASE("activation abi: rejects out overlapping the end of input", "[c_abi][activation]") {
  Call c;
  c.out = make_tensor(kIn + (4 * 128 - 1) * 2, {4, 64}, dl_dtype("bf16"));
  expect_invalid(c, "out overlaps input");
}

TEST_CASE("activation abi: rejects d above 2^24 as unsupported", "[c_abi][activation]") {
  Call c;
  const int64_t d = ops::kActAndMulMaxD + 1;
  c.in = make_tensor(kIn, {1, 2 * d}, dl_dtype("bf16"));
  c.out = make_tensor(kIn + 2 * d * 2, {1, d}, dl_dtype("bf16"));
  expect_status(c, KJIT_ERROR_UNSUPPORTED, "d (half the input's last dim)");
}

TEST_CASE("activation abi: zero rows and d = 0 are successful no-ops, but still validated",
          "[c_abi][activation]") {
  Call c;
  c.in = make_tensor(nullptr, {0, 128}, dl_dtype("bf16"));
  c.out = make_tensor(nullptr, {0, 64}, dl_dtype("bf16"));
  CHECK(c.run() == KJIT_SUCCESS);
  CHECK(last_error().empty());
  Call z;
  z.in = make_tensor(nullptr, {4, 0}, dl_dtype("fp16"));
  z.out = make_tensor(nullptr, {4, 0}, dl_dtype("fp16"));
  CHECK(z.run() == KJIT_SUCCESS);
  Call bad;
  bad.in = make_tensor(nullptr, {0, 128}, dl_dtype("bf16"));
  bad.out = make_tensor(nullptr, {0, 65}, dl_dtype("bf16"));
  CHECK(bad.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("activation abi: a valid call reports no device without a GPU", "[c_abi][activation]") {
  KJIT_RUN_WITHOUT_GPU();
  for (ActFn fn : {kjit_silu_and_mul, kjit_gelu_and_mul, kjit_gelu_tanh_and_mul}) {
    Call c;
    c.fn = fn;
    CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
    // Odd d with misaligned, row-strided views takes the scalar path: still no argument error.
    Call m;
    m.fn = fn;
    m.in = make_tensor(kIn + 2, {3, 2 * 63}, dl_dtype("fp16"), {131, 1});
    m.out = make_tensor(kOut + 6, {3, 63}, dl_dtype("fp16"), {65, 1});
    CHECK(m.run() == KJIT_ERROR_NO_DEVICE);
  }
}

// ---- The pure parts of the op ------------------------------------------------------------------

TEST_CASE("activation: the vector width follows d, both alignments and the dtype", "[activation]") {
  using ops::Act;
  using ops::DType;
  auto vec = [](DType t, int64_t d, int align) {
    return ops::select_act_and_mul(Act::kSilu, t, d, align).vec;
  };
  CHECK(vec(DType::kBF16, 14336, 16) == 8);
  CHECK(vec(DType::kF16, 11008, 16) == 8);
  CHECK(vec(DType::kF32, 14336, 16) == 4);
  CHECK(vec(DType::kBF16, 4100, 16) == 4);  // the up half starts 8200 bytes in: 8-byte aligned
  CHECK(vec(DType::kBF16, 4098, 16) == 2);
  CHECK(vec(DType::kBF16, 4097, 16) == 1);
  CHECK(vec(DType::kF32, 6, 16) == 2);
  CHECK(vec(DType::kBF16, 4096, 8) == 4);
  CHECK(vec(DType::kBF16, 4096, 2) == 1);
  CHECK(vec(DType::kF32, 4096, 4) == 1);
  CHECK(vec(DType::kBF16, 1, 16) == 1);
  CHECK_THROWS_AS(ops::select_act_and_mul(Act::kGelu, DType::kI64, 64, 16), kjit::Error);
  CHECK_THROWS_AS(ops::select_act_and_mul(Act::kGelu, DType::kBF16, 0, 16), kjit::Error);
  CHECK_THROWS_AS(ops::select_act_and_mul(Act::kGelu, DType::kBF16, ops::kActAndMulMaxD + 1, 16),
                  kjit::Error);
}

TEST_CASE("activation: the launch shape keeps the kernel's contract and spreads small calls",
          "[activation]") {
  using ops::Act;
  using ops::DType;
  const int sms = 132, threads_per_sm = 2048;
  for (DType t : {DType::kBF16, DType::kF32}) {
    for (int64_t d : {1, 3, 8, 40, 64, 127, 129, 1000, 4097, 14336, 18944, 1 << 24}) {
      for (int align : {16, 2}) {
        const ops::ActAndMulConfig cfg = ops::select_act_and_mul(Act::kSilu, t, d, align);
        const int64_t n_vec = d / cfg.vec;
        for (int64_t rows : {1, 7, 64, 4096, 70001, 1 << 22}) {
          INFO("dtype " << ops::dtype_name(t) << " d " << d << " vec " << cfg.vec << " rows "
                        << rows);
          const ops::ActAndMulShape s = ops::act_and_mul_shape(cfg, rows, d, sms, threads_per_sm);
          CHECK(s.block_x * s.block_y <= unsigned(ops::kActAndMulThreads));
          CHECK(s.block_x >= 1);
          CHECK(s.grid_x >= 1);
          CHECK(s.grid_y >= 1);
          CHECK(s.grid_y <= 65535u);
          // The kernel's int indices rely on this bound.
          CHECK(int64_t{s.grid_x} <= (n_vec + s.block_x - 1) / s.block_x);
          // Rows of at least a warp's vectors are never split below a warp (coalescing).
          if (n_vec >= 32) CHECK(s.block_x >= 32);
        }
      }
    }
  }
  // Decode: one Llama-8B row (1792 16-byte vectors) reaches more SMs than 128-thread blocks would.
  const auto one = ops::act_and_mul_shape(
      ops::select_act_and_mul(Act::kSilu, DType::kBF16, 14336, 16), 1, 14336, sms, threads_per_sm);
  CHECK(one.grid_x * one.grid_y >= 56);
  // Prefill: far more blocks than SMs, each thread with more than one vector.
  const auto big =
      ops::act_and_mul_shape(ops::select_act_and_mul(Act::kSilu, DType::kBF16, 14336, 16), 16384,
                             14336, sms, threads_per_sm);
  CHECK(big.block_x == 128u);
  CHECK(int64_t{big.grid_x} * big.block_x < 1792);
  // Short rows share blocks.
  const auto short_rows = ops::act_and_mul_shape(
      ops::select_act_and_mul(Act::kGelu, DType::kBF16, 16, 16), 20000, 16, sms, threads_per_sm);
  CHECK(short_rows.block_x == 2u);
  CHECK(short_rows.block_y == 64u);
}

TEST_CASE("activation: specs name every parameter and the catalog is the whole family",
          "[activation]") {
  const ops::ActAndMulConfig cfg{ops::Act::kGeluTanh, ops::DType::kBF16, 8};
  const kjit::jit::Spec s = ops::act_and_mul_spec(cfg);
  CHECK(s.uri == "act_and_mul_act_gelutanh_dtype_bf16_vec_8");
  CHECK(s.uri == ops::act_and_mul_uri(cfg));
  CHECK(s.entry_names.size() == 1);
  CHECK(s.config.find("using dtype = __nv_bfloat16;") != std::string::npos);
  CHECK(s.config.find("using act = kjit::activation::GeluTanh;") != std::string::npos);

  const ops::OpDef* def = ops::find_op("act_and_mul");
  REQUIRE(def != nullptr);
  std::set<std::string> uris;
  for (const auto& args : def->catalog()) uris.insert(def->make_spec(args).uri);
  CHECK(uris.size() == 11 * std::size(ops::kActivations));  // each x (4 + 4 + 3 widths)
  CHECK(def->make_spec({{"act", "silu"}, {"dtype", "fp16"}, {"vec", "2"}}).uri ==
        "act_and_mul_act_silu_dtype_fp16_vec_2");
  try {
    def->make_spec({{"act", "silu"}, {"dtype", "fp32"}, {"vec", "8"}});
    FAIL("fp32 x 8 is 32 bytes");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
  }
  CHECK_THROWS_AS(def->make_spec({{"act", "relu"}, {"dtype", "bf16"}, {"vec", "8"}}), kjit::Error);
  CHECK_THROWS_AS(def->make_spec({{"act", "silu"}, {"dtype", "bf16"}}), kjit::Error);
  CHECK_THROWS_AS(def->make_spec({{"act", "silu"}, {"dtype", "bf16"}, {"vec", "3"}}), kjit::Error);
}
