// The attention family without a GPU: the C ABI's argument checks for the decode plan, the run
// and merge_states (one test per rejected case, all rejected before any driver call), then the
// pure parts: the split-KV planner on the benchmark shapes, configs and shared memory, specs and
// catalog, the fp8 unpacking trick and the references on hand-made cases.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <cstddef>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/merge_states.hpp"
#include "ops/registry.hpp"
#include "reference/attention_ref.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;
namespace ops = kjit::ops;

namespace {

// Fake device addresses, 256-byte aligned and far apart: never dereferenced, since every call
// here fails validation first (or stops at the missing driver).
char* const kQ = reinterpret_cast<char*>(0x10000000);
char* const kKc = reinterpret_cast<char*>(0x20000000);
char* const kVc = reinterpret_cast<char*>(0x30000000);
char* const kIdx = reinterpret_cast<char*>(0x40000000);
char* const kPtr = reinterpret_cast<char*>(0x41000000);
char* const kLast = reinterpret_cast<char*>(0x42000000);
char* const kWs = reinterpret_cast<char*>(0x50000000);
char* const kOut = reinterpret_cast<char*>(0x60000000);
char* const kLse = reinterpret_cast<char*>(0x61000000);

std::string last_error() {
  return kjit_last_error();
}

const DLDataType kE4m3{10, 8, 1};  // DLPack 1.1 kDLFloat8_e4m3fn

// Plan arguments; the defaults make a valid plan without a device (num_sms given).
struct PlanArgs {
  std::vector<int32_t> indptr = {0, 3, 3, 7};  // 3 requests: 3, 0 and 4 pages
  int batch = 3, qo = 32, kv = 8, head_dim = 128, page_size = 16;
  int layout = KJIT_KV_LAYOUT_NHD;
  DLDataType q_dtype = dl_dtype("bf16"), kv_dtype = dl_dtype("bf16");
  kjit_decode_options o = [] {
    kjit_decode_options x;
    kjit_decode_options_init(&x);
    x.num_sms = 132;
    return x;
  }();
  int device = 0;
  const int32_t* indptr_ptr() const { return indptr.empty() ? nullptr : indptr.data(); }
  kjit_status plan(kjit_decode_plan** p) const {
    return kjit_batch_decode_plan(indptr_ptr(), batch, qo, kv, head_dim, page_size,
                                  static_cast<kjit_kv_layout>(layout), q_dtype, kv_dtype, &o,
                                  device, p);
  }
};

struct PlanDeleter {
  void operator()(kjit_decode_plan* p) const { kjit_decode_plan_destroy(p); }
};
using PlanPtr = std::unique_ptr<kjit_decode_plan, PlanDeleter>;

PlanPtr make_plan(const PlanArgs& a) {
  kjit_decode_plan* p = nullptr;
  const kjit_status s = a.plan(&p);
  INFO("last error: " << last_error());
  REQUIRE(s == KJIT_SUCCESS);
  REQUIRE(p != nullptr);
  return PlanPtr(p);
}

void expect_plan_status(const PlanArgs& a, kjit_status want, const char* fragment) {
  kjit_decode_plan* p = reinterpret_cast<kjit_decode_plan*>(0x1);  // must be reset to NULL
  const kjit_status s = a.plan(&p);
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(p == nullptr);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find("kjit_batch_decode_plan") == 0);
}

// A valid run of a plan for PlanArgs{} (3 requests, 32/8 heads of 128, NHD pages of 16).
struct RunCall {
  PlanArgs args;
  PlanPtr plan = make_plan(args);
  Tensor q = make_tensor(kQ, {3, 32, 128}, dl_dtype("bf16"));
  Tensor kc = make_tensor(kKc, {20, 16, 8, 128}, dl_dtype("bf16"));
  Tensor vc = make_tensor(kVc, {20, 16, 8, 128}, dl_dtype("bf16"));
  Tensor idx = make_tensor(kIdx, {7}, dl_dtype("int32"));
  Tensor ptr = make_tensor(kPtr, {4}, dl_dtype("int32"));
  Tensor last = make_tensor(kLast, {3}, dl_dtype("int32"));
  Tensor ws = make_tensor(kWs, {1 << 24}, dl_dtype("int32"));
  Tensor out = make_tensor(kOut, {3, 32, 128}, dl_dtype("bf16"));
  Tensor lse = make_tensor(kLse, {3, 32}, dl_dtype("fp32"));
  bool with_lse = true;
  float k_scale = 1.0f, v_scale = 1.0f;
  const kjit_decode_plan* plan_ptr = nullptr;  // overrides plan when set
  kjit_status run() {
    return kjit_batch_decode_run(plan_ptr ? plan_ptr : plan.get(), q.get(), kc.get(), vc.get(),
                                 idx.get(), ptr.get(), last.get(), ws.get(), out.get(),
                                 with_lse ? lse.get() : nullptr, k_scale, v_scale, nullptr);
  }
  // The same call with tensor argument `which` (0..8) replaced by NULL.
  kjit_status run_with_null(int which) {
    DLTensor* a[9] = {q.get(),    kc.get(), vc.get(),  idx.get(), ptr.get(),
                      last.get(), ws.get(), out.get(), lse.get()};
    a[which] = nullptr;
    return kjit_batch_decode_run(plan.get(), a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                 1.0f, 1.0f, nullptr);
  }
};

void expect_run_status(RunCall& c, kjit_status want, const char* fragment) {
  const kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find("kjit_batch_decode_run") == 0);
}

void expect_run_invalid(RunCall& c, const char* fragment) {
  expect_run_status(c, KJIT_ERROR_INVALID_ARGUMENT, fragment);
}

// A call that passes validation: without a GPU it stops at the missing driver.
void expect_run_valid(RunCall& c) {
  // Only reached without a GPU: the test case starts with KJIT_RUN_WITHOUT_GPU().
  REQUIRE_FALSE(kjit::test::gpu_available());
  const kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == KJIT_ERROR_NO_DEVICE);
}

// An fp8 plan and caches.
RunCall fp8_call() {
  RunCall c;
  c.args.kv_dtype = kE4m3;
  c.plan = make_plan(c.args);
  c.kc.t.dtype = c.vc.t.dtype = kE4m3;
  return c;
}

}  // namespace

TEST_CASE("attention abi: libkjit.so exports the attention entry points", "[c_abi][attention]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  for (const char* name :
       {"kjit_decode_options_init", "kjit_batch_decode_plan", "kjit_decode_plan_workspace_bytes",
        "kjit_decode_plan_num_splits", "kjit_decode_plan_tactic", "kjit_decode_plan_destroy",
        "kjit_batch_decode_run", "kjit_merge_states", "kjit_merge_states_n"}) {
    INFO(name);
    CHECK(dlsym(lib, name) != nullptr);
  }
  dlclose(lib);
}

// ---- Plan ---------------------------------------------------------------------------------------

TEST_CASE("attention abi: options defaults, NULL-safe queries and destroy", "[c_abi][attention]") {
  kjit_decode_options o;
  std::memset(&o, 0x5A, sizeof(o));
  kjit_decode_options_init(&o);
  CHECK(o.struct_size == sizeof(kjit_decode_options));
  CHECK(o.sm_scale == 0.0f);
  CHECK(o.logits_soft_cap == 0.0f);
  CHECK(o.window_left == -1);
  CHECK(o.num_splits == 0);
  CHECK(o.num_sms == 0);
  CHECK(o.autotune == -1);
  CHECK(o.tune_timing == KJIT_TUNE_EAGER_COLD);
  kjit_decode_options_init(nullptr);
  kjit_decode_plan_destroy(nullptr);
  CHECK(kjit_decode_plan_workspace_bytes(nullptr) == 0);
  CHECK(kjit_decode_plan_num_splits(nullptr) == 0);
  CHECK(std::string(kjit_decode_plan_tactic(nullptr)).empty());
}

TEST_CASE("attention abi: a plan names its tactic and autotune and tune_timing are checked",
          "[c_abi][attention]") {
  PlanArgs a;
  a.o.autotune = 0;  // the heuristic: the same tactic whatever the store holds
  PlanPtr p = make_plan(a);
  const std::string tactic = kjit_decode_plan_tactic(p.get());
  CHECK(tactic.rfind("split", 0) == 0);  // every decode tactic name starts with its split count
  for (int autotune : {-1, 1, 2}) {
    PlanArgs b;
    b.o.autotune = autotune;
    b.o.tune_timing = KJIT_TUNE_GRAPH_HOT;
    make_plan(b);
  }
  PlanArgs bad;
  bad.o.autotune = 3;
  kjit_decode_plan* q = nullptr;
  CHECK(bad.plan(&q) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("autotune") != std::string::npos);
  CHECK(q == nullptr);
  bad.o.autotune = -1;
  bad.o.tune_timing = 4;
  CHECK(bad.plan(&q) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("tune_timing") != std::string::npos);
  // A caller built against the header before the two fields: struct_size stops short of them.
  PlanArgs old;
  old.o.autotune = 99;
  old.o.struct_size = offsetof(kjit_decode_options, autotune);
  PlanPtr r = make_plan(old);
  CHECK(std::string(kjit_decode_plan_tactic(r.get())) == tactic);
}

TEST_CASE("attention abi: plans without a device when num_sms is given", "[c_abi][attention]") {
  PlanArgs a;
  PlanPtr p = make_plan(a);
  CHECK(kjit_decode_plan_num_splits(p.get()) >= 1);
  PlanArgs none;  // options NULL: defaults
  kjit_decode_plan* q = nullptr;
  const kjit_status s =
      kjit_batch_decode_plan(none.indptr.data(), 3, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD,
                             dl_dtype("bf16"), dl_dtype("bf16"), nullptr, 0, &q);
  if (kjit::test::gpu_available()) {
    CHECK(s == KJIT_SUCCESS);
  } else {
    CHECK(s == KJIT_ERROR_NO_DEVICE);
    CHECK(last_error().find("set num_sms to plan without a device") != std::string::npos);
    CHECK(q == nullptr);
  }
  kjit_decode_plan_destroy(q);
}

TEST_CASE("attention abi: plan rejects a NULL out pointer", "[c_abi][attention]") {
  PlanArgs a;
  CHECK(a.plan(nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("plan (the out pointer) is NULL") != std::string::npos);
}

TEST_CASE("attention abi: plan rejects a negative batch", "[c_abi][attention]") {
  PlanArgs a;
  a.batch = -1;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "batch must be >= 0, got -1");
}

TEST_CASE("attention abi: plan rejects a NULL kv_indptr_host", "[c_abi][attention]") {
  PlanArgs a;
  a.indptr.clear();
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host is NULL");
}

TEST_CASE("attention abi: plan rejects a decreasing kv_indptr_host", "[c_abi][attention]") {
  PlanArgs a;
  a.indptr = {0, 3, 2, 7};
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host decreases at 2: 3 then 2");
}

TEST_CASE("attention abi: plan rejects a negative kv_indptr_host[0]", "[c_abi][attention]") {
  PlanArgs a;
  a.indptr = {-1, 3, 3, 7};
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host[0] must be >= 0, got -1");
}

TEST_CASE("attention abi: plan rejects zero heads", "[c_abi][attention]") {
  PlanArgs a;
  a.kv = 0;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "num_qo_heads and num_kv_heads must be >= 1");
}

TEST_CASE("attention abi: plan rejects a group size that does not divide", "[c_abi][attention]") {
  PlanArgs a;
  a.qo = 30;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT,
                     "num_qo_heads (30) must be a multiple of num_kv_heads (8)");
}

TEST_CASE("attention abi: plan rejects a group of 32 as unsupported", "[c_abi][attention]") {
  PlanArgs a;
  a.qo = 64;
  a.kv = 2;
  expect_plan_status(a, KJIT_ERROR_UNSUPPORTED, "1..16 query heads per kv head");
}

TEST_CASE("attention abi: plan rejects head_dim 96 as unsupported", "[c_abi][attention]") {
  PlanArgs a;
  a.head_dim = 96;
  expect_plan_status(a, KJIT_ERROR_UNSUPPORTED, "head_dim 64, 128 and 256, not 96");
}

TEST_CASE("attention abi: plan rejects head_dim 0", "[c_abi][attention]") {
  PlanArgs a;
  a.head_dim = 0;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "head_dim must be >= 1, got 0");
}

TEST_CASE("attention abi: plan rejects page_size 0", "[c_abi][attention]") {
  PlanArgs a;
  a.page_size = 0;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "page_size must be >= 1, got 0");
}

TEST_CASE("attention abi: plan rejects an unknown layout", "[c_abi][attention]") {
  PlanArgs a;
  a.layout = 2;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "layout must be KJIT_KV_LAYOUT_NHD (0)");
}

TEST_CASE("attention abi: plan rejects fp32 q as unsupported", "[c_abi][attention]") {
  PlanArgs a;
  a.q_dtype = a.kv_dtype = dl_dtype("fp32");
  expect_plan_status(a, KJIT_ERROR_UNSUPPORTED, "bf16 and fp16 q, not fp32");
}

TEST_CASE("attention abi: plan rejects an integer q dtype", "[c_abi][attention]") {
  PlanArgs a;
  a.q_dtype = dl_dtype("int32");
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "q_dtype int32 is not a float dtype");
}

TEST_CASE("attention abi: plan rejects mixed 16-bit q and kv as unsupported",
          "[c_abi][attention]") {
  PlanArgs a;
  a.kv_dtype = dl_dtype("fp16");
  expect_plan_status(a, KJIT_ERROR_UNSUPPORTED, "kv_dtype = q_dtype or fp8 e4m3, not fp16");
}

TEST_CASE("attention abi: plan rejects an integer kv dtype", "[c_abi][attention]") {
  PlanArgs a;
  a.kv_dtype = dl_dtype("int64");
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "kv_dtype int64 is not a float or fp8");
}

TEST_CASE("attention abi: plan accepts fp8 kv as e4m3fn or raw bytes", "[c_abi][attention]") {
  PlanArgs a;
  a.kv_dtype = kE4m3;
  make_plan(a);
  a.kv_dtype = DLDataType{kDLUInt, 8, 1};
  make_plan(a);
  a.q_dtype = dl_dtype("fp16");
  make_plan(a);
  a.kv_dtype = DLDataType{kDLInt, 8, 1};  // int8 is not fp8
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "is not a float or fp8 e4m3 dtype");
}

TEST_CASE("attention abi: plan rejects a NaN sm_scale", "[c_abi][attention]") {
  PlanArgs a;
  a.o.sm_scale = std::numeric_limits<float>::quiet_NaN();
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "sm_scale must be finite and >= 0");
  a.o.sm_scale = -1.0f;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "sm_scale must be finite and >= 0");
  a.o.sm_scale = std::numeric_limits<float>::infinity();
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "sm_scale must be finite and >= 0");
}

TEST_CASE("attention abi: plan rejects a bad logits_soft_cap", "[c_abi][attention]") {
  PlanArgs a;
  a.o.logits_soft_cap = -30.0f;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "logits_soft_cap must be finite and >= 0");
  a.o.logits_soft_cap = std::numeric_limits<float>::quiet_NaN();
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "logits_soft_cap must be finite and >= 0");
}

TEST_CASE("attention abi: plan rejects window_left below -1", "[c_abi][attention]") {
  PlanArgs a;
  a.o.window_left = -2;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "window_left must be -1 (off) or >= 0");
}

TEST_CASE("attention abi: plan rejects a bad num_splits", "[c_abi][attention]") {
  PlanArgs a;
  a.o.num_splits = -1;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "num_splits must be 0 (auto) or 1..256");
  a.o.num_splits = 257;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "num_splits must be 0 (auto) or 1..256");
}

TEST_CASE("attention abi: plan rejects a negative num_sms", "[c_abi][attention]") {
  PlanArgs a;
  a.o.num_sms = -4;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "num_sms must be >= 0, got -4");
}

TEST_CASE("attention abi: plan rejects a negative device id", "[c_abi][attention]") {
  PlanArgs a;
  a.device = -1;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "device_id must be >= 0, got -1");
}

TEST_CASE("attention abi: plan rejects options without struct_size", "[c_abi][attention]") {
  PlanArgs a;
  a.o.struct_size = 0;
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "options->struct_size is 0");
}

TEST_CASE("attention abi: plan reads only the options struct_size covers", "[c_abi][attention]") {
  PlanArgs a;
  a.o.num_splits = 300;  // out of range, but past a shorter (older) struct_size: not read
  a.o.struct_size = offsetof(kjit_decode_options, num_splits);
  if (kjit::test::gpu_available()) {
    make_plan(a);  // num_sms is not read either: the device's count is used
  } else {
    expect_plan_status(a, KJIT_ERROR_NO_DEVICE, "set num_sms");
  }
  a.o.struct_size = sizeof(kjit_decode_options);
  expect_plan_status(a, KJIT_ERROR_INVALID_ARGUMENT, "num_splits must be 0 (auto) or 1..256");
}

TEST_CASE("attention abi: split plans size their workspace, others need none",
          "[c_abi][attention]") {
  PlanArgs a;  // 3 short requests on 132 SMs: split
  a.o.num_splits = 4;
  PlanPtr p = make_plan(a);
  CHECK(kjit_decode_plan_num_splits(p.get()) == 4);
  // batch 3 x 4 splits x 32 heads x (128 floats + 1 lse), each array 256-byte rounded.
  const size_t parts = 3 * 4 * 32;
  CHECK(kjit_decode_plan_workspace_bytes(p.get()) ==
        (parts * 128 * 4 + 255) / 256 * 256 + (parts * 4 + 255) / 256 * 256);
  a.o.num_splits = 1;
  PlanPtr q = make_plan(a);
  CHECK(kjit_decode_plan_num_splits(q.get()) == 1);
  CHECK(kjit_decode_plan_workspace_bytes(q.get()) == 0);
}

// ---- Run ----------------------------------------------------------------------------------------

TEST_CASE("attention abi: run rejects a NULL plan", "[c_abi][attention]") {
  RunCall c;
  c.plan_ptr = nullptr;
  c.plan.reset();
  expect_run_invalid(c, "plan is NULL");
}

TEST_CASE("attention abi: run rejects a plan with a wrong magic or version", "[c_abi][attention]") {
  RunCall c;
  kjit_decode_plan fake;
  fake.data = c.plan->data;
  fake.magic = 0;
  c.plan_ptr = &fake;
  expect_run_invalid(c, "plan is not a kjit_decode_plan");
  fake.magic = kjit_decode_plan::kMagic;
  fake.version = 99;
  expect_run_invalid(c, "plan has version 99");
}

TEST_CASE("attention abi: run rejects each NULL tensor", "[c_abi][attention]") {
  const char* names[] = {"q is NULL",
                         "k_cache is NULL",
                         "v_cache is NULL",
                         "kv_indices is NULL",
                         "kv_indptr is NULL",
                         "kv_last_page_len is NULL",
                         nullptr,  // workspace: not needed by this plan
                         "out is NULL",
                         nullptr};  // lse: optional
  for (int i = 0; i < 9; ++i) {
    if (names[i] == nullptr) continue;
    RunCall c;
    INFO(names[i]);
    CHECK(c.run_with_null(i) == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(last_error().find(names[i]) != std::string::npos);
  }
}

TEST_CASE("attention abi: run rejects a NULL workspace when the plan splits",
          "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  CHECK(c.run_with_null(6) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("workspace is NULL but the plan needs") != std::string::npos);
}

TEST_CASE("attention abi: run accepts no lse and no workspace when unsplit", "[c_abi][attention]") {
  KJIT_RUN_WITHOUT_GPU();
  RunCall c;
  c.args.o.num_splits = 1;
  c.plan = make_plan(c.args);
  c.with_lse = false;
  c.ws.t.data = nullptr;  // unused
  c.ws.t.ndim = 0;
  expect_run_valid(c);
}

TEST_CASE("attention abi: run rejects q of another dtype than planned", "[c_abi][attention]") {
  RunCall c;
  c.q.t.dtype = dl_dtype("fp16");
  expect_run_invalid(c, "q is fp16 but the plan's q dtype is bf16");
}

TEST_CASE("attention abi: run rejects q with other heads than planned", "[c_abi][attention]") {
  RunCall c;
  c.q = make_tensor(kQ, {3, 16, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "q is [3, 16, 128] but the plan is for [3, 32, 128]");
}

TEST_CASE("attention abi: run rejects q of another batch than planned", "[c_abi][attention]") {
  RunCall c;
  c.q = make_tensor(kQ, {4, 32, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "q is [4, 32, 128] but the plan is for [3, 32, 128]");
}

TEST_CASE("attention abi: run rejects a 2-D q", "[c_abi][attention]") {
  RunCall c;
  c.q = make_tensor(kQ, {3, 32 * 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "q must be [batch, num_qo_heads, head_dim], got ndim 2");
}

TEST_CASE("attention abi: run rejects q on another device than planned", "[c_abi][attention]") {
  RunCall c;
  c.q.t.device.device_id = 1;
  expect_run_invalid(c, "q is on cuda:1 but the plan is for cuda:0");
}

TEST_CASE("attention abi: run rejects host memory", "[c_abi][attention]") {
  RunCall c;
  c.kc.t.device = {kDLCPU, 0};
  expect_run_invalid(c, "k_cache is on device type 1");
}

TEST_CASE("attention abi: run rejects a non-contiguous head dim", "[c_abi][attention]") {
  RunCall c;
  c.q = make_tensor(kQ, {3, 32, 128}, dl_dtype("bf16"), {8192, 256, 2});
  expect_run_invalid(c, "q last dim has stride 2 (must be contiguous)");
}

TEST_CASE("attention abi: run rejects a cache of another dtype than planned",
          "[c_abi][attention]") {
  RunCall c;
  c.kc.t.dtype = dl_dtype("fp16");
  expect_run_invalid(c, "k_cache is fp16 but the plan's kv dtype is bf16");
}

TEST_CASE("attention abi: run rejects an fp8 cache under a bf16 plan", "[c_abi][attention]") {
  RunCall c;
  c.vc.t.dtype = kE4m3;
  expect_run_invalid(c, "v_cache is fp8 e4m3 but the plan's kv dtype is bf16");
}

TEST_CASE("attention abi: run rejects a bf16 cache under an fp8 plan", "[c_abi][attention]") {
  RunCall c = fp8_call();
  c.kc.t.dtype = dl_dtype("bf16");
  expect_run_invalid(c, "k_cache is bf16 but the plan's kv dtype is fp8 e4m3");
}

TEST_CASE("attention abi: run accepts fp8 caches, e4m3fn or raw bytes", "[c_abi][attention]") {
  KJIT_RUN_WITHOUT_GPU();
  RunCall c = fp8_call();
  expect_run_valid(c);
  c.vc.t.dtype = DLDataType{kDLUInt, 8, 1};
  expect_run_valid(c);
}

TEST_CASE("attention abi: run rejects an fp8 cache of another head_dim", "[c_abi][attention]") {
  RunCall c = fp8_call();
  c.kc = make_tensor(kKc, {20, 16, 8, 64}, kE4m3);
  expect_run_invalid(c, "k_cache has head_dim 64 but the plan has 128");
}

TEST_CASE("attention abi: run rejects an fp8 cache with odd strides", "[c_abi][attention]") {
  RunCall c = fp8_call();
  c.kc = make_tensor(kKc, {20, 16, 8, 128}, kE4m3, {16 * 8 * 129, 8 * 129, 129, 1});
  expect_run_status(c, KJIT_ERROR_UNSUPPORTED, "has an odd stride 129");
}

TEST_CASE("attention abi: run rejects a cache of another page size", "[c_abi][attention]") {
  RunCall c;
  c.kc = make_tensor(kKc, {20, 32, 8, 128}, dl_dtype("bf16"));
  expect_run_invalid(c,
                     "k_cache has page_size 32, 8 kv heads of 128 (NHD layout) but the plan "
                     "has 16, 8 of 128");
}

TEST_CASE("attention abi: run rejects a cache of other kv heads", "[c_abi][attention]") {
  RunCall c;
  c.vc = make_tensor(kVc, {20, 16, 4, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "v_cache has page_size 16, 4 kv heads of 128");
}

TEST_CASE("attention abi: run rejects an NHD-shaped cache under an HND plan",
          "[c_abi][attention]") {
  RunCall c;
  c.args.layout = KJIT_KV_LAYOUT_HND;
  c.plan = make_plan(c.args);
  expect_run_invalid(c, "k_cache has page_size 8, 16 kv heads of 128 (HND layout)");
}

TEST_CASE("attention abi: run rejects a 3-D cache", "[c_abi][attention]") {
  RunCall c;
  c.kc = make_tensor(kKc, {20, 16, 8 * 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "k_cache must be [num_pages, page_size, num_kv_heads, head_dim] (NHD)");
}

TEST_CASE("attention abi: run rejects caches with different page counts", "[c_abi][attention]") {
  RunCall c;
  c.vc = make_tensor(kVc, {19, 16, 8, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "v_cache has 19 pages but k_cache has 20");
}

TEST_CASE("attention abi: run rejects int64 kv_indices", "[c_abi][attention]") {
  RunCall c;
  c.idx.t.dtype = dl_dtype("int64");
  expect_run_invalid(c, "kv_indices must be int32, got int64");
}

TEST_CASE("attention abi: run rejects a strided kv_indices", "[c_abi][attention]") {
  RunCall c;
  c.idx = make_tensor(kIdx, {7}, dl_dtype("int32"), {2});
  expect_run_invalid(c, "kv_indices last dim has stride 2");
}

TEST_CASE("attention abi: run rejects a kv_indptr of another batch", "[c_abi][attention]") {
  RunCall c;
  c.ptr = make_tensor(kPtr, {5}, dl_dtype("int32"));
  expect_run_invalid(c, "kv_indptr has 5 elements but the plan has batch 3");
}

TEST_CASE("attention abi: run rejects a kv_last_page_len of another batch", "[c_abi][attention]") {
  RunCall c;
  c.last = make_tensor(kLast, {2}, dl_dtype("int32"));
  expect_run_invalid(c, "kv_last_page_len has 2 elements but the plan has batch 3");
}

TEST_CASE("attention abi: run rejects the page table on another device", "[c_abi][attention]") {
  RunCall c;
  c.ptr.t.device.device_id = 2;
  expect_run_invalid(c, "kv_indptr is on cuda:2 but the plan is for cuda:0");
}

TEST_CASE("attention abi: run rejects out of another dtype", "[c_abi][attention]") {
  RunCall c;
  c.out.t.dtype = dl_dtype("fp16");
  expect_run_invalid(c, "out is fp16 but q is bf16");
}

TEST_CASE("attention abi: run rejects out of another shape", "[c_abi][attention]") {
  RunCall c;
  c.out = make_tensor(kOut, {3, 32, 64}, dl_dtype("bf16"));
  expect_run_invalid(c, "out must be [3, 32, 128] like q");
}

TEST_CASE("attention abi: run rejects out overlapping q", "[c_abi][attention]") {
  RunCall c;
  c.out = make_tensor(kQ + 256, {3, 32, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "out overlaps q");
}

TEST_CASE("attention abi: run rejects out in place of q", "[c_abi][attention]") {
  RunCall c;
  c.out = make_tensor(kQ, {3, 32, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "out overlaps q");
}

TEST_CASE("attention abi: run rejects out overlapping the v cache", "[c_abi][attention]") {
  RunCall c;
  c.out = make_tensor(kVc + 4096, {3, 32, 128}, dl_dtype("bf16"));
  expect_run_invalid(c, "out overlaps v_cache");
}

TEST_CASE("attention abi: run rejects out whose elements overlap", "[c_abi][attention]") {
  RunCall c;
  c.out = make_tensor(kOut, {3, 32, 128}, dl_dtype("bf16"), {4096, 64, 1});
  expect_run_invalid(c, "out has strides under which elements overlap");
}

TEST_CASE("attention abi: run rejects a non-fp32 lse", "[c_abi][attention]") {
  RunCall c;
  c.lse.t.dtype = dl_dtype("bf16");
  expect_run_invalid(c, "lse must be fp32, got bf16");
}

TEST_CASE("attention abi: run rejects an lse of another shape", "[c_abi][attention]") {
  RunCall c;
  c.lse = make_tensor(kLse, {3, 8}, dl_dtype("fp32"));
  expect_run_invalid(c, "lse must be [3, 32] (batch, num_qo_heads)");
}

TEST_CASE("attention abi: run rejects lse overlapping out", "[c_abi][attention]") {
  RunCall c;
  c.lse = make_tensor(kOut + 128, {3, 32}, dl_dtype("fp32"));
  expect_run_invalid(c, "lse overlaps out");
}

TEST_CASE("attention abi: run rejects a workspace too small for the plan", "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  c.ws = make_tensor(kWs, {100}, DLDataType{kDLUInt, 8, 1});
  expect_run_invalid(c, "workspace has 100 bytes but the plan needs");
}

TEST_CASE("attention abi: run rejects a misaligned workspace", "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  c.ws = make_tensor(kWs + 4, {1 << 20}, dl_dtype("int32"));
  expect_run_invalid(c, "workspace must be 16-byte aligned");
}

TEST_CASE("attention abi: run rejects a non-contiguous workspace", "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  c.ws = make_tensor(kWs, {1 << 20, 2}, dl_dtype("int32"), {4, 1});
  expect_run_invalid(c, "workspace must be contiguous");
}

TEST_CASE("attention abi: run rejects a workspace on another device", "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  c.ws.t.device.device_id = 1;
  expect_run_invalid(c, "workspace is on cuda:1 but the plan is for cuda:0");
}

TEST_CASE("attention abi: run rejects a workspace overlapping out", "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  c.ws = make_tensor(kOut, {1 << 20}, dl_dtype("int32"));
  expect_run_invalid(c, "workspace overlaps out");
}

TEST_CASE("attention abi: run rejects a workspace overlapping the k cache", "[c_abi][attention]") {
  RunCall c;
  c.args.o.num_splits = 4;
  c.plan = make_plan(c.args);
  c.ws = make_tensor(kKc, {1 << 20}, dl_dtype("int32"));
  expect_run_invalid(c, "workspace overlaps k_cache");
}

TEST_CASE("attention abi: run rejects bad k_scale and v_scale", "[c_abi][attention]") {
  RunCall c;
  c.k_scale = std::numeric_limits<float>::quiet_NaN();
  expect_run_invalid(c, "k_scale must be finite and > 0");
  c.k_scale = 0.0f;
  expect_run_invalid(c, "k_scale must be finite and > 0");
  c.k_scale = 1.0f;
  c.v_scale = -std::numeric_limits<float>::infinity();
  expect_run_invalid(c, "v_scale must be finite and > 0");
}

TEST_CASE("attention abi: run rejects cache rows under 4-byte alignment as unsupported",
          "[c_abi][attention]") {
  RunCall c;
  c.kc.t.byte_offset = 2;
  expect_run_status(c, KJIT_ERROR_UNSUPPORTED, "rows are only 2-byte aligned");
}

TEST_CASE("attention abi: run accepts HND, combined caches, strided q and 8-byte rows",
          "[c_abi][attention]") {
  KJIT_RUN_WITHOUT_GPU();
  {
    RunCall c;
    c.args.layout = KJIT_KV_LAYOUT_HND;
    c.plan = make_plan(c.args);
    c.kc = make_tensor(kKc, {20, 8, 16, 128}, dl_dtype("bf16"));
    c.vc = make_tensor(kVc, {20, 8, 16, 128}, dl_dtype("bf16"));
    expect_run_valid(c);
  }
  {
    // k = cache[:, 0], v = cache[:, 1] of one [20, 2, 16, 8, 128] tensor.
    RunCall c;
    const int64_t page = 16 * 8 * 128;
    c.kc = make_tensor(kKc, {20, 16, 8, 128}, dl_dtype("bf16"), {2 * page, 1024, 128, 1});
    c.vc =
        make_tensor(kKc + 2 * page, {20, 16, 8, 128}, dl_dtype("bf16"), {2 * page, 1024, 128, 1});
    expect_run_valid(c);
  }
  {
    RunCall c;  // q as the q part of a fused qkv row [3, (32 + 8 + 8) * 128]
    c.q = make_tensor(kQ, {3, 32, 128}, dl_dtype("bf16"), {48 * 128, 128, 1});
    c.kc.t.byte_offset = 8;  // 8-byte aligned rows: narrower copies, not an error
    expect_run_valid(c);
  }
}

TEST_CASE("attention abi: batch 0 plans and runs as a validated no-op", "[c_abi][attention]") {
  RunCall c;
  c.args.indptr = {0};
  c.args.batch = 0;
  c.plan = make_plan(c.args);
  CHECK(kjit_decode_plan_workspace_bytes(c.plan.get()) == 0);
  c.q = make_tensor(nullptr, {0, 32, 128}, dl_dtype("bf16"));
  c.out = make_tensor(nullptr, {0, 32, 128}, dl_dtype("bf16"));
  c.lse = make_tensor(nullptr, {0, 32}, dl_dtype("fp32"));
  c.ptr = make_tensor(kPtr, {1}, dl_dtype("int32"));
  c.last = make_tensor(nullptr, {0}, dl_dtype("int32"));
  CHECK(c.run() == KJIT_SUCCESS);
  CHECK(last_error().empty());
  c.k_scale = -1.0f;
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

// ---- merge_states
// ---------------------------------------------------------------------------------

namespace {

char* const kVa = reinterpret_cast<char*>(0x70000000);
char* const kSa = reinterpret_cast<char*>(0x71000000);
char* const kVb = reinterpret_cast<char*>(0x72000000);
char* const kSb = reinterpret_cast<char*>(0x73000000);
char* const kVo = reinterpret_cast<char*>(0x74000000);
char* const kSo = reinterpret_cast<char*>(0x75000000);

struct MergeCall {
  Tensor va = make_tensor(kVa, {5, 8, 128}, dl_dtype("bf16"));
  Tensor sa = make_tensor(kSa, {5, 8}, dl_dtype("fp32"));
  Tensor vb = make_tensor(kVb, {5, 8, 128}, dl_dtype("bf16"));
  Tensor sb = make_tensor(kSb, {5, 8}, dl_dtype("fp32"));
  Tensor vo = make_tensor(kVo, {5, 8, 128}, dl_dtype("bf16"));
  Tensor so = make_tensor(kSo, {5, 8}, dl_dtype("fp32"));
  bool with_s_out = true;
  kjit_status run() {
    return kjit_merge_states(va.get(), sa.get(), vb.get(), sb.get(), vo.get(),
                             with_s_out ? so.get() : nullptr, nullptr);
  }
};

void expect_merge_invalid(MergeCall& c, const char* fragment) {
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
  INFO("last error: " << last_error());
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find("kjit_merge_states") == 0);
}

void expect_merge_valid(MergeCall& c) {
  // Only reached without a GPU: the test case starts with KJIT_RUN_WITHOUT_GPU().
  REQUIRE_FALSE(kjit::test::gpu_available());
  const kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == KJIT_ERROR_NO_DEVICE);
}

struct MergeNCall {
  Tensor v = make_tensor(kVa, {3, 5, 8, 128}, dl_dtype("fp16"));
  Tensor s = make_tensor(kSa, {3, 5, 8}, dl_dtype("fp32"));
  Tensor vo = make_tensor(kVo, {5, 8, 128}, dl_dtype("fp16"));
  Tensor so = make_tensor(kSo, {5, 8}, dl_dtype("fp32"));
  kjit_status run() { return kjit_merge_states_n(v.get(), s.get(), vo.get(), so.get(), nullptr); }
};

void expect_merge_n_invalid(MergeNCall& c, const char* fragment) {
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
  INFO("last error: " << last_error());
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find("kjit_merge_states_n") == 0);
}

}  // namespace

TEST_CASE("attention abi: merge_states rejects each NULL tensor", "[c_abi][attention]") {
  for (int i = 0; i < 5; ++i) {
    MergeCall c;
    DLTensor* a[5] = {c.va.get(), c.sa.get(), c.vb.get(), c.sb.get(), c.vo.get()};
    const char* names[5] = {"v_a is NULL", "s_a is NULL", "v_b is NULL", "s_b is NULL",
                            "v_out is NULL"};
    a[i] = nullptr;
    INFO(names[i]);
    CHECK(kjit_merge_states(a[0], a[1], a[2], a[3], a[4], nullptr, nullptr) ==
          KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(last_error().find(names[i]) != std::string::npos);
  }
}

TEST_CASE("attention abi: merge_states accepts no s_out and in-place outputs",
          "[c_abi][attention]") {
  KJIT_RUN_WITHOUT_GPU();
  MergeCall c;
  c.with_s_out = false;
  expect_merge_valid(c);
  MergeCall d;
  d.vo = make_tensor(kVa, {5, 8, 128}, dl_dtype("bf16"));
  d.so = make_tensor(kSb, {5, 8}, dl_dtype("fp32"));
  expect_merge_valid(d);
}

TEST_CASE("attention abi: merge_states rejects an integer v", "[c_abi][attention]") {
  MergeCall c;
  c.va.t.dtype = dl_dtype("int32");
  expect_merge_invalid(c, "v_a must be bf16, fp16 or fp32, got int32");
}

TEST_CASE("attention abi: merge_states rejects mixed v dtypes", "[c_abi][attention]") {
  MergeCall c;
  c.vb.t.dtype = dl_dtype("fp16");
  expect_merge_invalid(c, "v_b is fp16 but v_a is bf16");
}

TEST_CASE("attention abi: merge_states rejects a 2-D v", "[c_abi][attention]") {
  MergeCall c;
  c.vo = make_tensor(kVo, {40, 128}, dl_dtype("bf16"));
  expect_merge_invalid(c, "v_out must be [seqs, heads, dim], got ndim 2");
}

TEST_CASE("attention abi: merge_states rejects v of another shape", "[c_abi][attention]") {
  MergeCall c;
  c.vb = make_tensor(kVb, {5, 8, 64}, dl_dtype("bf16"));
  expect_merge_invalid(c, "v_b dim 2 is 64 but v_a dim 2 is 128");
}

TEST_CASE("attention abi: merge_states rejects a non-fp32 s", "[c_abi][attention]") {
  MergeCall c;
  c.sa.t.dtype = dl_dtype("bf16");
  expect_merge_invalid(c, "s_a must be fp32, got bf16");
}

TEST_CASE("attention abi: merge_states rejects s of another shape", "[c_abi][attention]") {
  MergeCall c;
  c.sb = make_tensor(kSb, {5, 4}, dl_dtype("fp32"));
  expect_merge_invalid(c, "s_b dim 1 is 4 but v_a dim 1 is 8");
}

TEST_CASE("attention abi: merge_states rejects partial overlap of v_out and v_a",
          "[c_abi][attention]") {
  MergeCall c;
  c.vo = make_tensor(kVa + 256, {5, 8, 128}, dl_dtype("bf16"));
  expect_merge_invalid(c, "v_out overlaps v_a without being the same view");
}

TEST_CASE("attention abi: merge_states rejects s_out overlapping v_out", "[c_abi][attention]") {
  MergeCall c;
  c.so = make_tensor(kVo, {5, 8}, dl_dtype("fp32"));
  expect_merge_invalid(c, "s_out overlaps v_out");
}

TEST_CASE("attention abi: merge_states rejects inputs on different devices", "[c_abi][attention]") {
  MergeCall c;
  c.vb.t.device.device_id = 1;
  expect_merge_invalid(c, "v_b is on cuda:1 but v_a is on cuda:0");
}

TEST_CASE("attention abi: merge_states of nothing is a validated no-op", "[c_abi][attention]") {
  MergeCall c;
  c.va = make_tensor(nullptr, {0, 8, 128}, dl_dtype("bf16"));
  c.vb = make_tensor(nullptr, {0, 8, 128}, dl_dtype("bf16"));
  c.vo = make_tensor(nullptr, {0, 8, 128}, dl_dtype("bf16"));
  c.sa = make_tensor(nullptr, {0, 8}, dl_dtype("fp32"));
  c.sb = make_tensor(nullptr, {0, 8}, dl_dtype("fp32"));
  c.so = make_tensor(nullptr, {0, 8}, dl_dtype("fp32"));
  CHECK(c.run() == KJIT_SUCCESS);
  c.sb = make_tensor(nullptr, {0, 8}, dl_dtype("fp16"));
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("attention abi: merge_states_n rejects a 3-D v", "[c_abi][attention]") {
  MergeNCall c;
  c.v = make_tensor(kVa, {15, 8, 128}, dl_dtype("fp16"));
  expect_merge_n_invalid(c, "v must be [n, seqs, heads, dim], got ndim 3");
}

TEST_CASE("attention abi: merge_states_n rejects s of another state count", "[c_abi][attention]") {
  MergeNCall c;
  c.s = make_tensor(kSa, {2, 5, 8}, dl_dtype("fp32"));
  expect_merge_n_invalid(c, "s dim 0 is 2 but v dim 0 is 3");
}

TEST_CASE("attention abi: merge_states_n rejects v_out of another shape", "[c_abi][attention]") {
  MergeNCall c;
  c.vo = make_tensor(kVo, {5, 4, 128}, dl_dtype("fp16"));
  expect_merge_n_invalid(c, "v_out dim 1 is 4 but v dim 2 is 8");
}

TEST_CASE("attention abi: merge_states_n rejects v_out overlapping v", "[c_abi][attention]") {
  MergeNCall c;
  c.vo = make_tensor(kVa, {5, 8, 128}, dl_dtype("fp16"));
  expect_merge_n_invalid(c, "v_out overlaps v");
}

TEST_CASE("attention abi: merge_states_n rejects s_out overlapping s", "[c_abi][attention]") {
  MergeNCall c;
  c.so = make_tensor(kSa + 16, {5, 8}, dl_dtype("fp32"));
  expect_merge_n_invalid(c, "s_out overlaps s");
}

TEST_CASE("attention abi: merge_states_n validates, then needs the device", "[c_abi][attention]") {
  KJIT_RUN_WITHOUT_GPU();
  MergeNCall c;
  CHECK(c.run() == KJIT_ERROR_NO_DEVICE);
}

// ---- Pure parts
// ------------------------------------------------------------------------------------

TEST_CASE("attention: the split planner on the benchmark shapes", "[attention]") {
  // H200: 132 SMs x 2 resident CTAs; 32 / 8 heads of 128, bf16 (512 bytes per position per kv
  // head).
  const int slots = 264, row = 512;
  auto split = [&](std::vector<int64_t> eff) {
    return ops::choose_decode_split(eff, 8, slots, row, 0);
  };
  // Enough CTAs already: no split, no workspace.
  CHECK(split(std::vector<int64_t>(64, 4096)).max_splits == 1);
  CHECK(split(std::vector<int64_t>(256, 2048)).max_splits == 1);
  // One request: spread over every SM (32 x 8 = 256 CTAs of 256 positions).
  const auto one = split({8192});
  CHECK(one.max_splits == 32);
  CHECK(one.chunk == 256);
  // 16 long requests: 128 CTAs unsplit would leave half the slots empty; two halves fill them.
  const auto sixteen = split(std::vector<int64_t>(16, 32768));
  CHECK(sixteen.max_splits == 2);
  CHECK(sixteen.chunk == 16384);
  // One long request among short ones: the long one is split, the short ones are not.
  std::vector<int64_t> ragged(63, 100);
  ragged.push_back(65536);
  const auto r = split(ragged);
  CHECK(r.max_splits > 8);
  CHECK(r.chunk >= 100);
  // Forced: exactly n parts of the longest request.
  const auto forced = ops::choose_decode_split({1000, 10}, 8, slots, row, 4);
  CHECK(forced.max_splits == 4);
  CHECK(forced.chunk == 250);
  CHECK(ops::choose_decode_split({1000}, 8, slots, row, 1).max_splits == 1);
  CHECK(ops::choose_decode_split({3}, 8, slots, row, 8).max_splits == 3);
  // Nothing to split.
  CHECK(ops::choose_decode_split({}, 8, slots, row, 0).max_splits == 1);
  CHECK(ops::choose_decode_split({0, 1}, 8, slots, row, 4).max_splits == 1);
}

TEST_CASE("attention: decode configs fit two CTAs per SM on the H200 and compile to specs",
          "[attention]") {
  using ops::DType;
  const ops::SmemBudget h200;  // the defaults: 228 KB per SM, 227 KB per block
  for (bool fp8 : {false, true}) {
    for (int hd : {64, 128, 256}) {
      for (int group : {1, 5, 8, 9, 16}) {
        int per_sm = 0;
        const ops::DecodeConfig c = ops::select_decode(DType::kBF16, fp8, hd, group, h200, &per_sm);
        INFO("fp8 " << fp8 << " head_dim " << hd << " group " << group);
        CHECK(per_sm == 2);
        CHECK(c.stages >= 3);
        CHECK(2 * (ops::decode_smem_bytes(c) + h200.reserved) <= h200.per_sm);
        CHECK(c.n_tiles == (group <= 8 ? 1 : 2));
        CHECK(c.stage_tokens % (16 * c.warps) == 0);
      }
    }
  }
  // An A100 (164 KB per SM) still gets two CTAs, with a shallower pipeline.
  ops::SmemBudget a100;
  a100.per_sm = 164 * 1024;
  a100.per_block = 163 * 1024;
  int per_sm = 0;
  const auto c = ops::select_decode(DType::kF16, false, 128, 4, a100, &per_sm);
  CHECK(per_sm == 2);
  CHECK(c.stages == 2);
  CHECK(ops::decode_uri(c) ==
        "decode_attention_q_dtype_fp16_mma_dtype_fp16_kv_fp8_0_head_dim_128_n_tiles_1_warps_4_"
        "stage_tokens_64_stages_2_cp_bytes_16");
  CHECK_THROWS_AS(ops::select_decode(DType::kF32, false, 128, 4, a100), kjit::Error);
  CHECK_THROWS_AS(ops::select_decode(DType::kBF16, false, 80, 4, a100), kjit::Error);
  CHECK_THROWS_AS(ops::select_decode(DType::kBF16, false, 128, 17, a100), kjit::Error);
}

TEST_CASE("attention: catalogs are small, unique and build their specs", "[attention]") {
  for (const char* name : {"decode_attention", "merge_states"}) {
    const ops::OpDef* d = ops::find_op(name);
    REQUIRE(d != nullptr);
    const auto cat = d->catalog();
    CHECK(cat.size() <= 40);
    std::set<std::string> uris;
    for (const auto& args : cat) uris.insert(d->make_spec(args).uri);
    CHECK(uris.size() == cat.size());
  }
  const ops::OpDef* d = ops::find_op("decode_attention");
  CHECK(d->make_spec({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}}).uri ==
        "decode_attention_q_dtype_bf16_mma_dtype_bf16_kv_fp8_0_head_dim_128_n_tiles_1_warps_4_"
        "stage_tokens_64_stages_3_cp_bytes_16");
  CHECK(
      d->make_spec({{"q_dtype", "bf16"}, {"kv_dtype", "e4m3"}, {"head_dim", "128"}, {"group", "8"}})
          .uri ==
      "decode_attention_q_dtype_bf16_mma_dtype_fp16_kv_fp8_1_head_dim_128_n_tiles_1_warps_4_"
      "stage_tokens_64_stages_4_cp_bytes_16");
  CHECK_THROWS_AS(
      d->make_spec(
          {{"q_dtype", "bf16"}, {"kv_dtype", "fp16"}, {"head_dim", "128"}, {"group", "4"}}),
      kjit::Error);
  const ops::OpDef* m = ops::find_op("merge_states");
  CHECK(m->make_spec({{"dtype", "bf16"}, {"dim", "128"}}).uri ==
        "merge_states_dtype_bf16_vec_8_threads_per_row_16");
  CHECK(m->make_spec({{"dtype", "fp16"}, {"dim", "100"}}).uri ==
        "merge_states_dtype_fp16_vec_4_threads_per_row_32");
}

TEST_CASE("attention: the fp8 unpacking of the kernel is exact for every e4m3 value",
          "[attention]") {
  // The bit moves of e4m3x4_to_half2x2_scaled (kernels/common/mma_sm80.cuh) on one byte:
  // sign to bit 15, exponent and mantissa to bits 13..7 of an fp16, read as fp16 times 2^8.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;  // NaN
    const uint32_t t = static_cast<uint32_t>(b) << 8;
    const uint16_t h = static_cast<uint16_t>((t & 0x8000u) | ((t >> 1) & 0x3F80u));
    const int exp = (h >> 10) & 31, man = h & 1023;
    double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1.0 + man / 1024.0, exp - 15);
    if (h & 0x8000) v = -v;
    INFO("byte " << b);
    CHECK(v * 256.0 == kjit::ref::e4m3_to_double(static_cast<uint8_t>(b)));
  }
  CHECK(kjit::ref::e4m3_to_double(0x38) == 1.0);
  CHECK(kjit::ref::e4m3_to_double(0x7E) == 448.0);
  CHECK(kjit::ref::e4m3_to_double(0x01) == std::ldexp(1.0, -9));
  CHECK(kjit::ref::e4m3_to_double(0xC0) == -2.0);
  CHECK(std::isnan(kjit::ref::e4m3_to_double(0xFF)));
}

TEST_CASE("attention: the decode reference on hand-made cases", "[attention]") {
  // Two requests, page_size 2, one kv head, group 2, head_dim 2. Request 0: pages {1, 0} with
  // last_page_len 1 -> 3 positions. Request 1: no pages.
  kjit::ref::DecodeRefArgs a;
  a.batch = 2;
  a.qo_heads = 2;
  a.kv_heads = 1;
  a.head_dim = 2;
  a.page_size = 2;
  a.num_pages = 2;
  a.sm_scale = 1.0;
  a.indptr = {0, 2, 2};
  a.indices = {1, 0};
  a.last_page_len = {1, 0};
  // keys by position: t0 = (1, 0), t1 = (0, 1), t2 = (1, 1); values: t0 = (1, 0), t1 = (0, 2),
  // t2 = (3, 3). Page 1 holds t0, t1; page 0 holds t2.
  const double kk[2][2][2] = {{{1, 1}, {9, 9}}, {{1, 0}, {0, 1}}};
  const double vv[2][2][2] = {{{3, 3}, {9, 9}}, {{1, 0}, {0, 2}}};
  const double qq[2][2] = {{0, 0}, {1, 0}};  // head 0: uniform; head 1: favors t0 and t2
  auto q = [&](int64_t, int64_t i, int64_t d) { return qq[i][d]; };
  auto k = [&](int64_t p, int64_t s, int64_t, int64_t d) { return kk[p][s][d]; };
  auto v = [&](int64_t p, int64_t s, int64_t, int64_t d) { return vv[p][s][d]; };
  std::vector<double> out, lse;
  kjit::ref::decode_attention(a, q, k, v, out, lse);
  CHECK(out[0] == Approx(4.0 / 3));
  CHECK(out[1] == Approx(5.0 / 3));
  CHECK(lse[0] == Approx(std::log(3.0)));
  const double e = std::exp(1.0), z = 2 * e + 1;
  CHECK(out[2] == Approx((e * 1 + 0 + e * 3) / z));
  CHECK(out[3] == Approx((0 + 2 + e * 3) / z));
  CHECK(lse[1] == Approx(std::log(z)));
  CHECK(out[4] == 0.0);
  CHECK(std::isinf(lse[2]));
  // A window of one position keeps only t2; a soft cap of 0.5 squashes the logits.
  a.window_left = 0;
  kjit::ref::decode_attention(a, q, k, v, out, lse);
  CHECK(out[2] == Approx(3.0));
  CHECK(lse[1] == Approx(1.0));
  a.window_left = -1;
  a.soft_cap = 0.5;
  kjit::ref::decode_attention(a, q, k, v, out, lse);
  const double c = std::exp(0.5 * std::tanh(2.0)), zc = 2 * c + 1;
  CHECK(lse[1] == Approx(std::log(zc)));
  // A page id out of range drops its positions.
  a.soft_cap = 0;
  a.indices = {1, 7};
  kjit::ref::decode_attention(a, q, k, v, out, lse);
  CHECK(out[0] == Approx(0.5));
  CHECK(lse[0] == Approx(std::log(2.0)));
}

TEST_CASE("attention: the merge reference", "[attention]") {
  std::vector<double> v_out;
  double s_out = 0;
  const double vals[3][2] = {{1, 2}, {3, 4}, {5, 6}};
  auto v = [&](size_t i, int64_t d) { return vals[i][d]; };
  kjit::ref::merge_states({std::log(1.0), std::log(3.0)}, 2, v, v_out, s_out);
  CHECK(s_out == Approx(std::log(4.0)));
  CHECK(v_out[0] == Approx(0.25 * 1 + 0.75 * 3));
  const double inf = std::numeric_limits<double>::infinity();
  kjit::ref::merge_states({-inf, 2.0, -inf}, 2, v, v_out, s_out);
  CHECK(s_out == Approx(2.0));
  CHECK(v_out[1] == Approx(4.0));
  kjit::ref::merge_states({-inf, -inf}, 2, v, v_out, s_out);
  CHECK(std::isinf(s_out));
  CHECK(v_out[0] == 0.0);
}
