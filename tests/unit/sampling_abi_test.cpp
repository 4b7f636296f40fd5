// The sampling family without a GPU: every rejected argument of the C ABI (one test each; all
// are rejected before any driver call), the pure parts of the ops (dispatch, specs, catalog),
// and the CPU reference itself (Philox known answers, the tie rules of the sets).
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "cuda/launch.hpp"
#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "ops/sampling/sampling.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"
#include "support/sampling_options.hpp"
#include "util/error.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::SamplingOptions;
using kjit::test::Tensor;
namespace ops = kjit::ops;
namespace ref = kjit::ref;

namespace {

// Fake device addresses: never dereferenced, since every call here fails validation first.
char* const kProbs = reinterpret_cast<char*>(0x10000000);
char* const kKArr = reinterpret_cast<char*>(0x20000000);
char* const kPArr = reinterpret_cast<char*>(0x21000000);
char* const kTArr = reinterpret_cast<char*>(0x22000000);
char* const kSeed = reinterpret_cast<char*>(0x30000000);
char* const kOffset = reinterpret_cast<char*>(0x31000000);
char* const kSamples = reinterpret_cast<char*>(0x40000000);
char* const kValid = reinterpret_cast<char*>(0x41000000);
char* const kOut = reinterpret_cast<char*>(0x50000000);

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

DLDataType uint_type(int bits) {
  return DLDataType{kDLUInt, static_cast<uint8_t>(bits), 1};
}

std::string last_error() {
  return kjit_last_error();
}

// The fused logits sampler: every argument kind the samplers take.
struct Logits {
  Tensor x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"));
  Tensor k_arr = make_tensor(kKArr, {4}, dl_dtype("int32"));
  Tensor p_arr = make_tensor(kPArr, {4}, dl_dtype("fp32"));
  Tensor t_arr = make_tensor(kTArr, {4}, dl_dtype("fp32"));
  Tensor seed = make_tensor(kSeed, {1}, dl_dtype("int64"));
  Tensor offset = make_tensor(kOffset, {1}, dl_dtype("int64"));
  Tensor samples = make_tensor(kSamples, {4}, dl_dtype("int32"));
  Tensor valid = make_tensor(kValid, {4}, uint_type(8));
  bool use_k_arr = false, use_p_arr = false, use_t_arr = false, use_valid = true;
  int top_k = 50;
  float top_p = 0.9f, temperature = 0.7f;
  kjit_status run() {
    return kjit_top_k_top_p_sampling_from_logits(
        x.get(), use_k_arr ? k_arr.get() : nullptr, use_p_arr ? p_arr.get() : nullptr,
        use_t_arr ? t_arr.get() : nullptr, seed.get(), offset.get(), samples.get(),
        use_valid ? valid.get() : nullptr,
        SamplingOptions().top_k(top_k).top_p(top_p).temperature(temperature), nullptr);
  }
};

// The probability samplers, through kjit_top_p_sampling_from_probs unless `fn` says otherwise.
struct Probs {
  Tensor x = make_tensor(kProbs, {4, 1000}, dl_dtype("fp32"));
  Tensor seed = make_tensor(kSeed, {4}, dl_dtype("int64"));
  Tensor offset = make_tensor(kOffset, {1}, uint_type(64));
  Tensor samples = make_tensor(kSamples, {4}, dl_dtype("int64"));
  Tensor valid = make_tensor(kValid, {4}, uint_type(8));
  Tensor arr = make_tensor(kPArr, {4}, dl_dtype("fp32"));
  bool use_arr = false;
  float top_p = 0.9f;
  kjit_status run() {
    return kjit_top_p_sampling_from_probs(x.get(), use_arr ? arr.get() : nullptr, seed.get(),
                                          offset.get(), samples.get(), valid.get(),
                                          SamplingOptions().top_p(top_p), nullptr);
  }
};

template <typename C>
void expect(C& c, kjit_status want, const char* fragment, const char* api) {
  kjit_status s = c.run();
  INFO("last error: " << last_error());
  CHECK(s == want);
  CHECK(last_error().find(fragment) != std::string::npos);
  CHECK(last_error().find(api) == 0);  // the guard names the entry point
}

void invalid(Logits& c, const char* fragment) {
  expect(c, KJIT_ERROR_INVALID_ARGUMENT, fragment, "kjit_top_k_top_p_sampling_from_logits");
}
void invalid(Probs& c, const char* fragment) {
  expect(c, KJIT_ERROR_INVALID_ARGUMENT, fragment, "kjit_top_p_sampling_from_probs");
}

}  // namespace

// ================================ exports and naming ============================================

TEST_CASE("sampling abi: libkjit.so exports every sampling entry point", "[c_abi][sampling]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  for (const char* name : {"kjit_softmax", "kjit_sampling_options_init", "kjit_sampling_from_probs",
                           "kjit_top_k_sampling_from_probs", "kjit_top_p_sampling_from_probs",
                           "kjit_min_p_sampling_from_probs", "kjit_top_k_top_p_sampling_from_probs",
                           "kjit_top_k_top_p_sampling_from_logits", "kjit_top_k_renorm_probs",
                           "kjit_top_p_renorm_probs", "kjit_top_k_mask_logits", "kjit_argmax"}) {
    INFO(name);
    CHECK(dlsym(lib, name) != nullptr);
  }
  dlclose(lib);
}

// ================================ the input matrix ===============================================

TEST_CASE("sampling abi: rejects a NULL logits", "[c_abi][sampling]") {
  Logits c;
  CHECK(kjit_top_k_top_p_sampling_from_logits(
            nullptr, nullptr, nullptr, nullptr, c.seed.get(), c.offset.get(), c.samples.get(),
            nullptr, SamplingOptions().top_k(5).top_p(0.9f).temperature(1.0f),
            nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("logits is NULL") != std::string::npos);
}

TEST_CASE("sampling abi: rejects a NULL probs", "[c_abi][sampling]") {
  Probs c;
  CHECK(kjit_sampling_from_probs(nullptr, c.seed.get(), c.offset.get(), c.samples.get(), nullptr,
                                 nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("probs is NULL") != std::string::npos);
  CHECK(last_error().find("kjit_sampling_from_probs") == 0);
}

TEST_CASE("sampling abi: rejects 1-D and 3-D inputs", "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {1000}, dl_dtype("bf16"));
  invalid(c, "must be 2-D [batch, vocab]");
  c.x = make_tensor(kProbs, {2, 2, 1000}, dl_dtype("bf16"));
  invalid(c, "must be 2-D [batch, vocab]");
}

TEST_CASE("sampling abi: rejects a non-contiguous vocab dim", "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"), {1, 4});
  invalid(c, "last dim has stride");
}

TEST_CASE("sampling abi: rejects host memory", "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"), {}, 0, kDLCPU);
  invalid(c, "expected kDLCUDA");
}

TEST_CASE("sampling abi: rejects a misaligned input", "[c_abi][sampling]") {
  Probs c;
  c.x = make_tensor(kProbs + 2, {4, 1000}, dl_dtype("fp32"));
  invalid(c, "aligned");  // "not aligned" / "misaligned"
}

TEST_CASE("sampling abi: bf16 probabilities are unsupported", "[c_abi][sampling]") {
  Probs c;
  c.x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"));
  expect(c, KJIT_ERROR_UNSUPPORTED, "must be fp32", "kjit_top_p_sampling_from_probs");
}

TEST_CASE("sampling abi: integer logits are unsupported", "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {4, 1000}, dl_dtype("int32"));
  expect(c, KJIT_ERROR_UNSUPPORTED, "fp32, bf16 or fp16", "kjit_top_k_top_p_sampling_from_logits");
}

TEST_CASE("sampling abi: a vocabulary above 262144 is unsupported", "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {4, 262145}, dl_dtype("bf16"));
  expect(c, KJIT_ERROR_UNSUPPORTED, "1..262144", "kjit_top_k_top_p_sampling_from_logits");
}

TEST_CASE("sampling abi: an empty vocabulary is rejected when there are rows",
          "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {4, 0}, dl_dtype("bf16"));
  invalid(c, "empty vocabulary");
}

TEST_CASE("sampling abi: batch 0 is a validated no-op", "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {0, 1000}, dl_dtype("bf16"));
  c.samples = make_tensor(kSamples, {0}, dl_dtype("int32"));
  c.valid = make_tensor(kValid, {0}, uint_type(8));
  CHECK(c.run() == KJIT_SUCCESS);
  c.samples = make_tensor(kSamples, {0}, dl_dtype("fp32"));
  invalid(c, "samples must be int32 or int64");
}

// ================================ scalar parameters ==============================================

TEST_CASE("sampling abi: rejects top_k <= 0", "[c_abi][sampling]") {
  for (int k : {0, -1}) {
    Logits c;
    c.top_k = k;
    invalid(c, "top_k must be >= 1");
  }
  Probs p;
  Tensor seed = make_tensor(kSeed, {1}, dl_dtype("int64"));
  CHECK(kjit_top_k_sampling_from_probs(p.x.get(), nullptr, seed.get(), p.offset.get(),
                                       p.samples.get(), nullptr, SamplingOptions().top_k(0),
                                       nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("top_k must be >= 1") != std::string::npos);
}

TEST_CASE("sampling abi: rejects top_p outside 0 < p <= 1", "[c_abi][sampling]") {
  for (float p : {0.0f, -0.5f, 1.5f, kNaN, kInf}) {
    Probs c;
    c.top_p = p;
    invalid(c, "top_p must be in (0, 1]");
    Logits l;
    l.top_p = p;
    invalid(l, "top_p must be in (0, 1]");
  }
}

TEST_CASE("sampling abi: rejects min_p outside [0, 1]", "[c_abi][sampling]") {
  Probs c;
  for (float m : {-0.1f, 1.5f, kNaN}) {
    CHECK(kjit_min_p_sampling_from_probs(c.x.get(), nullptr, c.seed.get(), c.offset.get(),
                                         c.samples.get(), nullptr, SamplingOptions().min_p(m),
                                         nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(last_error().find("min_p must be in [0, 1]") != std::string::npos);
  }
}

TEST_CASE("sampling abi: rejects a NaN, negative or infinite temperature", "[c_abi][sampling]") {
  for (float t : {kNaN, -1.0f, kInf}) {
    Logits c;
    c.temperature = t;
    invalid(c, "temperature must be finite and >= 0");
  }
}

TEST_CASE("sampling abi: the scalars are not checked when per-row tensors replace them",
          "[c_abi][sampling]") {
  // Every scalar is out of range but ignored; the call then fails on something else (the empty
  // vocabulary), which shows that validation went past the scalars.
  Logits c;
  c.use_k_arr = c.use_p_arr = c.use_t_arr = true;
  c.top_k = 0;
  c.top_p = kNaN;
  c.temperature = -1;
  c.x = make_tensor(kProbs, {4, 0}, dl_dtype("bf16"));
  invalid(c, "empty vocabulary");
}

// ================================ kjit_sampling_options ==========================================

TEST_CASE("sampling abi: kjit_sampling_options_init turns every filter off", "[c_abi][sampling]") {
  kjit_sampling_options o;
  std::memset(&o, 0x5A, sizeof o);
  kjit_sampling_options_init(&o);
  CHECK(o.struct_size == sizeof(kjit_sampling_options));
  CHECK(o.top_k == INT32_MAX);
  CHECK(o.top_p == 1.0f);
  CHECK(o.min_p == 0.0f);
  CHECK(o.temperature == 1.0f);
  kjit_sampling_options_init(nullptr);  // ignored
}

TEST_CASE("sampling abi: NULL options are the defaults, which pass every scalar check",
          "[c_abi][sampling]") {
  // Each call then fails on the empty vocabulary: validation went past the scalars.
  Logits c;
  c.x = make_tensor(kProbs, {4, 0}, dl_dtype("bf16"));
  CHECK(kjit_top_k_top_p_sampling_from_logits(c.x.get(), nullptr, nullptr, nullptr, c.seed.get(),
                                              c.offset.get(), c.samples.get(), nullptr, nullptr,
                                              nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("empty vocabulary") != std::string::npos);
  Probs p;
  p.x = make_tensor(kProbs, {4, 0}, dl_dtype("fp32"));
  CHECK(kjit_min_p_sampling_from_probs(p.x.get(), nullptr, p.seed.get(), p.offset.get(),
                                       p.samples.get(), nullptr, nullptr,
                                       nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("empty vocabulary") != std::string::npos);
}

TEST_CASE("sampling abi: options are read only as far as struct_size covers them",
          "[c_abi][sampling]") {
  Logits c;
  c.x = make_tensor(kProbs, {4, 0}, dl_dtype("bf16"));
  kjit_sampling_options o;
  kjit_sampling_options_init(&o);
  o.top_k = 5;
  o.top_p = 0.0f;  // out of range, but past the struct_size of a caller that knows only top_k
  o.temperature = -1.0f;
  o.struct_size = offsetof(kjit_sampling_options, top_k) + sizeof(int);
  auto run = [&] {
    return kjit_top_k_top_p_sampling_from_logits(c.x.get(), nullptr, nullptr, nullptr, c.seed.get(),
                                                 c.offset.get(), c.samples.get(), nullptr, &o,
                                                 nullptr);
  };
  CHECK(run() == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("empty vocabulary") != std::string::npos);
  o.struct_size = offsetof(kjit_sampling_options, top_p) + sizeof(float);  // now top_p is read
  CHECK(run() == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("top_p must be in (0, 1]") != std::string::npos);
  o.struct_size = sizeof(kjit_sampling_options) + 16;  // a newer caller's larger struct
  o.top_p = 0.9f;
  CHECK(run() == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("temperature must be finite and >= 0") != std::string::npos);
  for (size_t size : {size_t{0}, size_t{3}, offsetof(kjit_sampling_options, top_k)}) {
    o.struct_size = size;
    CHECK(run() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(last_error().find("options->struct_size is " + std::to_string(size) +
                            " (call kjit_sampling_options_init first)") != std::string::npos);
  }
}

// ================================ per-row parameter tensors ======================================

TEST_CASE("sampling abi: rejects a top_k_arr of the wrong dtype", "[c_abi][sampling]") {
  Logits c;
  c.use_k_arr = true;
  c.k_arr = make_tensor(kKArr, {4}, dl_dtype("fp32"));
  invalid(c, "top_k_arr must be int32 or int64");
}

TEST_CASE("sampling abi: rejects a top_k_arr of the wrong length", "[c_abi][sampling]") {
  Logits c;
  c.use_k_arr = true;
  c.k_arr = make_tensor(kKArr, {5}, dl_dtype("int64"));
  invalid(c, "top_k_arr has 5 elements, expected 4");
}

TEST_CASE("sampling abi: rejects a 2-D top_p_arr", "[c_abi][sampling]") {
  Logits c;
  c.use_p_arr = true;
  c.p_arr = make_tensor(kPArr, {4, 1}, dl_dtype("fp32"));
  invalid(c, "top_p_arr must be 1-D");
}

TEST_CASE("sampling abi: rejects a top_p_arr of the wrong dtype", "[c_abi][sampling]") {
  Probs c;
  c.use_arr = true;
  c.arr = make_tensor(kPArr, {4}, dl_dtype("bf16"));
  invalid(c, "top_p_arr must be fp32");
}

TEST_CASE("sampling abi: rejects a strided temperature_arr", "[c_abi][sampling]") {
  Logits c;
  c.use_t_arr = true;
  c.t_arr = make_tensor(kTArr, {4}, dl_dtype("fp32"), {2});
  invalid(c, "temperature_arr has stride 2");
}

TEST_CASE("sampling abi: rejects a misaligned temperature_arr", "[c_abi][sampling]") {
  Logits c;
  c.use_t_arr = true;
  c.t_arr = make_tensor(kTArr + 1, {4}, dl_dtype("fp32"));
  invalid(c, "temperature_arr is misaligned");
}

TEST_CASE("sampling abi: rejects a min_p_arr on another device", "[c_abi][sampling]") {
  Probs c;
  Tensor m = make_tensor(kPArr, {4}, dl_dtype("fp32"), {}, 1);
  CHECK(kjit_min_p_sampling_from_probs(c.x.get(), m.get(), c.seed.get(), c.offset.get(),
                                       c.samples.get(), nullptr, SamplingOptions().min_p(0.1f),
                                       nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("min_p_arr is on cuda:1") != std::string::npos);
}

// ================================ seed and offset ================================================

TEST_CASE("sampling abi: rejects a NULL seed or offset", "[c_abi][sampling]") {
  Logits c;
  CHECK(kjit_top_k_top_p_sampling_from_logits(
            c.x.get(), nullptr, nullptr, nullptr, nullptr, c.offset.get(), c.samples.get(), nullptr,
            SamplingOptions().top_k(5).top_p(0.9f).temperature(1.0f),
            nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("seed is NULL") != std::string::npos);
  CHECK(kjit_top_k_top_p_sampling_from_logits(
            c.x.get(), nullptr, nullptr, nullptr, c.seed.get(), nullptr, c.samples.get(), nullptr,
            SamplingOptions().top_k(5).top_p(0.9f).temperature(1.0f),
            nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("offset is NULL") != std::string::npos);
}

TEST_CASE("sampling abi: rejects a seed that is not 64-bit integer", "[c_abi][sampling]") {
  for (const char* dt : {"int32", "fp32"}) {
    Logits c;
    c.seed = make_tensor(kSeed, {1}, dl_dtype(dt));
    invalid(c, "seed must be int64 or uint64");
  }
}

TEST_CASE("sampling abi: rejects an offset of neither 1 nor batch elements", "[c_abi][sampling]") {
  Logits c;
  c.offset = make_tensor(kOffset, {2}, dl_dtype("int64"));
  invalid(c, "offset has 2 elements, expected 1 or 4");
  c.offset = make_tensor(kOffset, {0}, dl_dtype("int64"));
  invalid(c, "offset has 0 elements");
}

TEST_CASE("sampling abi: rejects an offset in host memory", "[c_abi][sampling]") {
  Logits c;
  c.offset = make_tensor(kOffset, {1}, dl_dtype("int64"), {}, 0, kDLCPU);
  invalid(c, "offset is on device type");
}

TEST_CASE("sampling abi: rejects a misaligned seed", "[c_abi][sampling]") {
  Logits c;
  c.seed = make_tensor(kSeed + 4, {1}, dl_dtype("int64"));
  invalid(c, "seed is misaligned");
}

// ================================ outputs ========================================================

TEST_CASE("sampling abi: rejects a NULL samples", "[c_abi][sampling]") {
  Logits c;
  CHECK(kjit_top_k_top_p_sampling_from_logits(
            c.x.get(), nullptr, nullptr, nullptr, c.seed.get(), c.offset.get(), nullptr, nullptr,
            SamplingOptions().top_k(5).top_p(0.9f).temperature(1.0f),
            nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("samples is NULL") != std::string::npos);
}

TEST_CASE("sampling abi: rejects samples of the wrong dtype or length", "[c_abi][sampling]") {
  Logits c;
  c.samples = make_tensor(kSamples, {4}, dl_dtype("fp32"));
  invalid(c, "samples must be int32 or int64");
  c.samples = make_tensor(kSamples, {3}, dl_dtype("int32"));
  invalid(c, "samples has 3 elements, expected 4");
}

TEST_CASE("sampling abi: rejects samples on another device", "[c_abi][sampling]") {
  Logits c;
  c.samples = make_tensor(kSamples, {4}, dl_dtype("int32"), {}, 2);
  invalid(c, "samples is on cuda:2");
}

TEST_CASE("sampling abi: rejects valid of the wrong dtype or length", "[c_abi][sampling]") {
  Logits c;
  c.valid = make_tensor(kValid, {4}, dl_dtype("int32"));
  invalid(c, "valid must be uint8 or bool");
  c.valid = make_tensor(kValid, {8}, uint_type(8));
  invalid(c, "valid has 8 elements, expected 4");
}

TEST_CASE("sampling abi: accepts a bool valid (DLPack code 6)", "[c_abi][sampling]") {
  Logits c;
  c.valid = make_tensor(kValid, {4}, DLDataType{6, 8, 1});
  c.x = make_tensor(kProbs, {4, 0}, dl_dtype("bf16"));  // stop right after the argument checks
  invalid(c, "empty vocabulary");
}

TEST_CASE("sampling abi: rejects samples overlapping the input", "[c_abi][sampling]") {
  Logits c;
  c.samples = make_tensor(kProbs + 64, {4}, dl_dtype("int32"));
  invalid(c, "samples overlaps logits");
}

TEST_CASE("sampling abi: rejects valid overlapping samples", "[c_abi][sampling]") {
  Logits c;
  c.valid = make_tensor(kSamples + 2, {4}, uint_type(8));
  invalid(c, "overlaps");
}

TEST_CASE("sampling abi: rejects samples overlapping the offset", "[c_abi][sampling]") {
  Logits c;
  c.samples = make_tensor(kOffset, {4}, dl_dtype("int32"));
  invalid(c, "samples overlaps offset");
}

// ================================ renorm, mask, softmax, argmax ==================================

TEST_CASE("sampling abi: renorm rejects an out of another dtype or shape", "[c_abi][sampling]") {
  Tensor probs = make_tensor(kProbs, {4, 1000}, dl_dtype("fp32"));
  Tensor out = make_tensor(kOut, {4, 1000}, dl_dtype("bf16"));
  CHECK(kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(), SamplingOptions().top_k(5),
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out must be fp32") != std::string::npos);
  out = make_tensor(kOut, {4, 999}, dl_dtype("fp32"));
  CHECK(kjit_top_p_renorm_probs(probs.get(), nullptr, out.get(), SamplingOptions().top_p(0.5f),
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out must be [4, 1000]") != std::string::npos);
}

TEST_CASE("sampling abi: renorm rejects a partial overlap but allows in place",
          "[c_abi][sampling]") {
  Tensor probs = make_tensor(kProbs, {4, 1000}, dl_dtype("fp32"));
  Tensor out = make_tensor(kProbs + 4000, {4, 1000}, dl_dtype("fp32"));
  CHECK(kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(), SamplingOptions().top_k(5),
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out overlaps probs") != std::string::npos);
  // In place is accepted: with zero rows the call succeeds after validation.
  Tensor empty = make_tensor(kProbs, {0, 1000}, dl_dtype("fp32"));
  CHECK(kjit_top_k_renorm_probs(empty.get(), nullptr, empty.get(), SamplingOptions().top_k(5),
                                nullptr) == KJIT_SUCCESS);
}

TEST_CASE("sampling abi: renorm rejects bad scalars", "[c_abi][sampling]") {
  Tensor probs = make_tensor(kProbs, {4, 1000}, dl_dtype("fp32"));
  Tensor out = make_tensor(kOut, {4, 1000}, dl_dtype("fp32"));
  CHECK(kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(), SamplingOptions().top_k(0),
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("top_k must be >= 1") != std::string::npos);
  CHECK(kjit_top_p_renorm_probs(probs.get(), nullptr, out.get(), SamplingOptions().top_p(kNaN),
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("top_p must be in (0, 1]") != std::string::npos);
}

TEST_CASE("sampling abi: mask rejects an out of another dtype", "[c_abi][sampling]") {
  Tensor x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 1000}, dl_dtype("fp32"));
  CHECK(kjit_top_k_mask_logits(x.get(), nullptr, out.get(), SamplingOptions().top_k(5), nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out must be bf16") != std::string::npos);
  CHECK(last_error().find("kjit_top_k_mask_logits") == 0);
}

TEST_CASE("sampling abi: softmax rejects a zero or NaN temperature", "[c_abi][sampling]") {
  Tensor x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 1000}, dl_dtype("fp32"));
  for (float t : {0.0f, kNaN, -2.0f}) {
    CHECK(kjit_softmax(x.get(), nullptr, out.get(), SamplingOptions().temperature(t), nullptr) ==
          KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(last_error().find("temperature must be finite and > 0") != std::string::npos);
  }
}

TEST_CASE("sampling abi: softmax rejects a non-fp32 out and a bf16 alias", "[c_abi][sampling]") {
  Tensor x = make_tensor(kProbs, {4, 1000}, dl_dtype("bf16"));
  Tensor out = make_tensor(kOut, {4, 1000}, dl_dtype("bf16"));
  CHECK(kjit_softmax(x.get(), nullptr, out.get(), SamplingOptions().temperature(1.0f), nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out must be fp32") != std::string::npos);
  Tensor alias = make_tensor(kProbs, {4, 500}, dl_dtype("fp32"));
  Tensor x2 = make_tensor(kProbs, {4, 500}, dl_dtype("bf16"));
  CHECK(kjit_softmax(x2.get(), nullptr, alias.get(), SamplingOptions().temperature(1.0f),
                     nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("alias logits only when both are fp32") != std::string::npos);
}

TEST_CASE("sampling abi: argmax rejects a float out, a wrong length, an empty row",
          "[c_abi][sampling]") {
  Tensor x = make_tensor(kProbs, {4, 1000}, dl_dtype("fp32"));
  Tensor out = make_tensor(kOut, {4}, dl_dtype("fp32"));
  CHECK(kjit_argmax(x.get(), out.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out must be int32 or int64") != std::string::npos);
  out = make_tensor(kOut, {5}, dl_dtype("int64"));
  CHECK(kjit_argmax(x.get(), out.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("out has 5 elements") != std::string::npos);
  x = make_tensor(kProbs, {4, 0}, dl_dtype("fp32"));
  out = make_tensor(kOut, {4}, dl_dtype("int64"));
  CHECK(kjit_argmax(x.get(), out.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("empty vocabulary") != std::string::npos);
  CHECK(kjit_argmax(nullptr, out.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(last_error().find("input is NULL") != std::string::npos);
}

// ================================ dispatch, specs, catalog =======================================

TEST_CASE("sampling ops: vector width follows alignment and vocabulary", "[sampling]") {
  auto c = ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kProbs, ops::DType::kF32,
                              128256, true);
  CHECK(c.vec == 4);
  c = ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kLogits, ops::DType::kBF16,
                         128256, true);
  CHECK(c.vec == 4);  // four elements a vector at every dtype: 256-token segments
  CHECK(32 * c.vec * c.unroll == 256);
  c = ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kLogits, ops::DType::kBF16, 7,
                         false);
  CHECK(c.vec == 1);
  // Every variant's segment (32 * vec * unroll) keeps 262144 tokens within 1024 segments.
  for (const auto& cfg : {ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kProbs,
                                             ops::DType::kF32, 262144, true),
                          ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kProbs,
                                             ops::DType::kF32, 262144, false),
                          ops::select_filter(ops::FilterOp::kMask, ops::FilterInput::kLogitKeys,
                                             ops::DType::kF16, 262144, true)}) {
    CHECK(262144 / (32 * cfg.vec * cfg.unroll) <= 1024);
  }
  CHECK(ops::sampling_block_threads(7, 1, 8) == 32);
  CHECK(ops::sampling_block_threads(128256, 4, 2) == 1024);
  CHECK(ops::sampling_block_threads(1000, 4, 2) == 128);
  // More rows than SMs whose wave overflows the L2, with a top-k / top-p search: 512-thread
  // blocks (two an SM); otherwise the plan's width.
  const int64_t fp32_row = 128256 * 4, bf16_row = 128256 * 2, l2 = 50 << 20;
  const int topp = kjit::sampling::kFilterTopP, topk = kjit::sampling::kFilterTopK;
  const int minp = kjit::sampling::kFilterMinP;
  CHECK(ops::sampling_single_block_threads(1024, 132, 132, fp32_row, l2, topp) == 1024);
  CHECK(ops::sampling_single_block_threads(1024, 133, 132, fp32_row, l2, topp) ==
        ops::kSampleSplitThreads);
  CHECK(ops::sampling_single_block_threads(1024, 1024, 132, fp32_row, l2, topk | minp) == 512);
  CHECK(ops::sampling_single_block_threads(1024, 1024, 132, bf16_row, l2, topk | topp) == 1024);
  CHECK(ops::sampling_single_block_threads(1024, 1024, 132, fp32_row, l2, minp) == 1024);
  CHECK(ops::sampling_single_block_threads(128, 1024, 132, fp32_row, l2, topp) == 128);
}

TEST_CASE("sampling ops: unsupported combinations are named", "[sampling]") {
  CHECK_THROWS_WITH(ops::select_filter(ops::FilterOp::kRenorm, ops::FilterInput::kLogits,
                                       ops::DType::kF32, 100, true),
                    Catch::Contains("probabilities"));
  CHECK_THROWS_WITH(ops::select_filter(ops::FilterOp::kMask, ops::FilterInput::kProbs,
                                       ops::DType::kF32, 100, true),
                    Catch::Contains("does not take"));
  CHECK_THROWS_WITH(ops::select_argmax(ops::DType::kI32, 100, true), Catch::Contains("int32"));
  CHECK_THROWS_WITH(ops::select_softmax(ops::DType::kF32, (1 << 24) + 1, true),
                    Catch::Contains("1..16777216"));
}

// The status kjit::Error carries out of f, or KJIT_SUCCESS when f returns.
template <typename F>
kjit_status status_thrown(F&& f) {
  try {
    f();
  } catch (const kjit::Error& e) {
    return e.status();
  }
  return KJIT_SUCCESS;
}

TEST_CASE("sampling ops: specs name the kernel and the URI holds every config field",
          "[sampling]") {
  const auto cfg = ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kLogits,
                                      ops::DType::kBF16, 128256, true);
  const auto s = ops::filter_spec(cfg);
  CHECK(s.uri == "sampling_filter_op_0_input_1_dtype_bf16_vec_4_unroll_2");
  CHECK(s.entry_names.at(0) ==
        "kjit::sampling::filter_kernel<kjit_spec::dtype, kjit_spec::vec, kjit_spec::unroll, "
        "kjit_spec::input, kjit_spec::op, kjit_spec::cluster, kjit_spec::mass>");
  CHECK(s.config.find("constexpr int input = 1;") != std::string::npos);
  CHECK(s.config.find("constexpr int mass = 0;") != std::string::npos);
  auto exact = cfg;
  exact.mass = 1;
  const auto se = ops::filter_spec(exact);
  CHECK(se.uri == "sampling_filter_op_0_input_1_dtype_bf16_vec_4_unroll_2_mass_1");
  CHECK(se.config.find("constexpr int mass = 1;") != std::string::npos);
  exact.cluster = 1;
  CHECK(ops::filter_spec(exact).uri ==
        "sampling_filter_op_0_input_1_dtype_bf16_vec_4_unroll_2_cluster_1_mass_1");
  // Only samplers take the exact-mass search.
  const ops::OpDef* d = ops::find_op("sampling_filter");
  REQUIRE(d != nullptr);
  CHECK(status_thrown([&] {
          d->make_spec({{"op", "renorm"}, {"dtype", "fp32"}, {"mass", "exact"}});
        }) == KJIT_ERROR_UNSUPPORTED);
  CHECK(ops::argmax_uri(ops::select_argmax(ops::DType::kF32, 100, true)) ==
        "argmax_dtype_fp32_vec_4_unroll_4");
  CHECK(ops::softmax_spec(ops::select_softmax(ops::DType::kF16, 7, false)).uri ==
        "softmax_dtype_fp16_vec_1_unroll_8");
}

TEST_CASE("sampling ops: a sampler tuning is refused when no launch can take it", "[sampling]") {
  const auto tuned = [](int threads, int cluster, int mass) {
    ops::SampleTuning t;
    t.path = ops::SamplePath::kCluster;
    t.threads = threads;
    t.cluster = cluster;
    t.mass = mass;
    return status_thrown([&] { ops::check_sample_tuning(t); });
  };
  for (int bad : {-32, 1, 33, 1056}) {
    INFO("threads " << bad);
    CHECK(tuned(bad, 0, -1) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  for (int bad : {-1, 1, 17}) {
    INFO("cluster " << bad);
    CHECK(tuned(0, bad, -1) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  CHECK(tuned(0, 2, -1) == KJIT_SUCCESS);
  // The path a cluster size or a blocks-per-SM cap needs: the cluster path for the one (a size of
  // 2..16), the one-block path for the other (1..32).
  const auto on_path = [](ops::SamplePath path, int cluster, int blocks_per_sm) {
    ops::SampleTuning t;
    t.path = path;
    t.cluster = cluster;
    t.blocks_per_sm = blocks_per_sm;
    return status_thrown([&] { ops::check_sample_tuning(t); });
  };
  using ops::SamplePath;
  for (int bad : {-1, 33}) {
    INFO("blocks_per_sm " << bad);
    CHECK(on_path(SamplePath::kSingle, 0, bad) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  CHECK(on_path(SamplePath::kSingle, 0, 1) == KJIT_SUCCESS);
  for (SamplePath path : {SamplePath::kAuto, SamplePath::kCluster}) {
    CHECK(on_path(path, 0, 1) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  for (SamplePath path : {SamplePath::kAuto, SamplePath::kSingle}) {
    CHECK(on_path(path, 2, 0) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  for (int bad : {-2, 2, 7}) {
    INFO("mass " << bad);
    CHECK(tuned(0, 0, bad) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  CHECK(tuned(256, 16, 1) == KJIT_SUCCESS);
  CHECK(tuned(0, 0, -1) == KJIT_SUCCESS);
}

TEST_CASE("sampling ops: shared-memory padding caps the blocks an SM runs", "[sampling]") {
  // An H100 / H200: 228 KB an SM, 1 KB reserved a block, 227 KB a block with opt-in.
  const int sm = 233472, reserved = 1024, optin = 232448, stat = 20000;
  CHECK(kjit::cuda::smem_padding_for_blocks(0, stat, sm, reserved, optin) == 0u);
  CHECK(kjit::cuda::smem_padding_for_blocks(1, stat, sm, reserved, optin) == 212448u);
  CHECK(kjit::cuda::smem_padding_for_blocks(32, stat, sm, reserved, optin) == 0u);  // no room
  for (int blocks = 1; blocks <= 8; ++blocks) {
    INFO("blocks " << blocks);
    const long per =
        stat + reserved +
        static_cast<long>(kjit::cuda::smem_padding_for_blocks(blocks, stat, sm, reserved, optin));
    CHECK(blocks * per <= sm);       // that many fit
    CHECK((blocks + 1) * per > sm);  // one more does not
    CHECK(per - reserved <= optin);  // a block may have it
  }
}

TEST_CASE("sampling ops: cluster blocks take about 16 elements a thread, at most 512",
          "[sampling]") {
  CHECK(ops::sampling_cluster_block_threads((128256 + 15) / 16) == 512);  // B1, 16 blocks
  CHECK(ops::sampling_cluster_block_threads((128256 + 15) / 16 * 3 / 4) == 384);
  CHECK(ops::sampling_cluster_block_threads(128256 / 2) == ops::kSampleClusterMaxThreads);
  CHECK(ops::sampling_cluster_block_threads(2000) == 128);
  CHECK(ops::sampling_cluster_block_threads(1) == 128);
  for (int64_t share = 1; share <= 262144; share = share * 3 + 1) {
    const int t = ops::sampling_cluster_block_threads(share);
    CHECK(t % 32 == 0);
    CHECK(t >= 128);
    CHECK(t <= ops::kSampleClusterMaxThreads);
  }
}

TEST_CASE("sampling ops: the plan's mass mode is exact unless the rows may have a top-k",
          "[sampling]") {
  ops::SampleTuning t;
  CHECK(ops::sample_mass(t, false) == 1);
  CHECK(ops::sample_mass(t, true) == 0);
  t.mass = 1;
  CHECK(ops::sample_mass(t, false) == 1);
  // The exact kernels have no top-k search: rows that may have a top-k count whatever is forced.
  CHECK(ops::sample_mass(t, true) == 0);
  t.mass = 0;
  CHECK(ops::sample_mass(t, false) == 0);
}

// The cap bounds what `compile --all` costs CI (each sampling spec takes 1-2.5 s of NVRTC per
// arch); 52 since every sampler comes with its exact-mass twin (the plan launches both).
TEST_CASE("sampling ops: the catalogs are distinct and stay within 52 specs", "[sampling]") {
  size_t total = 0;
  for (const char* name : {"sampling_filter", "softmax", "argmax"}) {
    const ops::OpDef* d = ops::find_op(name);
    REQUIRE(d != nullptr);
    std::set<std::string> uris;
    for (const auto& args : d->catalog()) uris.insert(d->make_spec(args).uri);
    CHECK(uris.size() == d->catalog().size());
    total += uris.size();
  }
  CHECK(total <= 52);
  // Every sampler the catalog compiles has its other mass mode there too.
  const ops::OpDef* d = ops::find_op("sampling_filter");
  const std::vector<ops::SetArgs> catalog = d->catalog();
  const std::set<ops::SetArgs> all(catalog.begin(), catalog.end());
  size_t samplers = 0;
  for (ops::SetArgs args : all) {
    if (args.at("op") != "sample") continue;
    ++samplers;
    const bool exact = args.count("mass") != 0;
    if (exact) {
      args.erase("mass");
    } else {
      args["mass"] = "exact";
    }
    INFO(d->make_spec(args).uri);
    CHECK(all.count(args) == 1);
  }
  CHECK(samplers == 24);  // (probs, 3 logits dtypes) x (16-byte, scalar, cluster), both modes
}

// ================================ the reference =================================================

TEST_CASE("sampling reference: Philox4x32-10 known answers", "[sampling][reference]") {
  // Random123's kat_vectors for philox4x32 with 10 rounds.
  auto r = ref::philox4x32_10(ref::Philox4{{0, 0, 0, 0}}, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  r = ref::philox4x32_10(ref::Philox4{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  CHECK(r.v[0] == 0x408f276du);
  CHECK(r.v[1] == 0x41c83b0eu);
  CHECK(r.v[2] == 0xa20bc7c6u);
  CHECK(r.v[3] == 0x6d5451fdu);
  r = ref::philox4x32_10(ref::Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                         0xa4093822u, 0x299f31d0u);
  CHECK(r.v[0] == 0xd16cfe09u);
  CHECK(r.v[1] == 0x94fdccebu);
  CHECK(r.v[2] == 0x5001e420u);
  CHECK(r.v[3] == 0x24126ea1u);
  const double u = ref::sampling_uniform(1, 2, 3);
  CHECK(u >= 0.0);
  CHECK(u < 1.0);
  CHECK(u != ref::sampling_uniform(1, 3, 3));
}

TEST_CASE("sampling reference: ties at the boundary are kept together", "[sampling][reference]") {
  using K = ref::Keep;
  const std::vector<double> w = {0.1, 0.3, 0.2, 0.2, 0.2, 0.0};
  ref::FilterSpec f;
  f.top_k = 2;  // the 2nd largest is 0.2: every 0.2 is kept
  auto keep = ref::keep_sets(w, f);
  CHECK(keep == std::vector<K>{K::kNo, K::kMust, K::kMust, K::kMust, K::kMust, K::kNo});
  f = {};
  f.top_p = 0.3;  // 0.3 alone reaches 0.3 of the mass: only it
  CHECK(ref::keep_sets(w, f) == std::vector<K>{K::kNo, K::kMust, K::kNo, K::kNo, K::kNo, K::kNo});
  f.top_p = 0.31;  // needs one 0.2: all three 0.2 come along
  CHECK(ref::keep_sets(w, f) ==
        std::vector<K>{K::kNo, K::kMust, K::kMust, K::kMust, K::kMust, K::kNo});
  f = {};
  f.top_k = 1;
  f.top_p = 0.5;  // top-k first: {0.3}, then any p keeps it
  CHECK(ref::keep_sets(w, f) == std::vector<K>{K::kNo, K::kMust, K::kNo, K::kNo, K::kNo, K::kNo});
  f = {};
  f.min_p = 0.5;  // >= 0.15
  CHECK(ref::keep_sets(w, f) ==
        std::vector<K>{K::kNo, K::kMust, K::kMust, K::kMust, K::kMust, K::kNo});
  f.mass_tol = 0.0;
  f.value_tol = 0.5;  // the band around 0.15 reaches 0.1
  CHECK(ref::keep_sets(w, f)[0] == K::kMay);
}

TEST_CASE("sampling reference: inverse CDF, softmax and argmax", "[sampling][reference]") {
  const std::vector<double> w = {0.0, 1.0, 0.0, 3.0};
  const std::vector<ref::Keep> all(4, ref::Keep::kMust);
  CHECK(ref::inverse_cdf(w, all, 0.0) == 1);
  CHECK(ref::inverse_cdf(w, all, 0.2499) == 1);
  CHECK(ref::inverse_cdf(w, all, 0.25) == 3);
  CHECK(ref::inverse_cdf(w, all, 0.999999) == 3);
  const auto p = ref::softmax({0.0, std::log(3.0)}, 1.0);
  REQUIRE(p.size() == 2);
  CHECK(p[1] == Approx(0.75));
  CHECK(ref::softmax({1.0, std::nan("")}, 1.0).empty());
  CHECK(ref::argmax({1.0, 3.0, 3.0}) == 1);
  CHECK(ref::argmax({1.0, std::nan(""), 5.0, std::nan("")}) == 1);
}
