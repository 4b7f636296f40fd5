// The embedding family without a GPU: the entry point is exported, the vector width follows the
// hidden size and the alignment, and unsupported requests say why. The rejected arguments are in
// tests/reliability/hostile_abi_test.cpp (embedding_api), every one before any driver call.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>

#include "kjit/kjit.h"
#include "ops/embedding/embedding.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"

namespace ops = kjit::ops;
using ops::DType;

TEST_CASE("embedding abi: libkjit.so exports kjit_embedding", "[c_abi][embedding]") {
  void* lib = dlopen(KJIT_SHARED_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  CHECK(dlsym(lib, "kjit_embedding") != nullptr);
  dlclose(lib);
}

TEST_CASE("embedding: the widest vector the hidden size and the alignment allow", "[embedding]") {
  CHECK(ops::select_embedding(DType::kBF16, DType::kI32, 4096, 16).vec == 8);
  CHECK(ops::select_embedding(DType::kF32, DType::kI64, 4096, 16).vec == 4);
  CHECK(ops::select_embedding(DType::kBF16, DType::kI32, 4100, 16).vec == 4);  // 4100 = 4 * 1025
  CHECK(ops::select_embedding(DType::kBF16, DType::kI32, 4096, 4).vec == 2);   // 4-byte rows
  CHECK(ops::select_embedding(DType::kF16, DType::kI32, 7, 16).vec == 1);
}

TEST_CASE("embedding: unsupported dtypes and sizes are rejected with the reason", "[embedding]") {
  auto status_of = [](auto&& f) {
    try {
      f();
    } catch (const kjit::Error& e) {
      return e.status();
    }
    return KJIT_SUCCESS;
  };
  CHECK(status_of([] { ops::select_embedding(DType::kI32, DType::kI32, 64, 16); }) ==
        KJIT_ERROR_UNSUPPORTED);
  CHECK(status_of([] { ops::select_embedding(DType::kBF16, DType::kF32, 64, 16); }) ==
        KJIT_ERROR_UNSUPPORTED);
  CHECK(status_of([] { ops::select_embedding(DType::kBF16, DType::kI32, 0, 16); }) ==
        KJIT_ERROR_UNSUPPORTED);
  CHECK(status_of([] { ops::select_embedding(DType::kBF16, DType::kI32, (1 << 24) + 1, 16); }) ==
        KJIT_ERROR_UNSUPPORTED);
}

TEST_CASE("embedding: URIs name dtype, id type and width, and the catalog is every variant",
          "[embedding]") {
  const std::string uri =
      ops::embedding_uri(ops::select_embedding(DType::kBF16, DType::kI64, 8, 16));
  CHECK(uri.find("embedding") == 0);
  CHECK(uri.find("bf16") != std::string::npos);
  CHECK(uri.find("int64") != std::string::npos);
  CHECK(uri.find("vec_8") != std::string::npos);
  const ops::OpDef* def = ops::find_op("embedding");
  REQUIRE(def != nullptr);
  CHECK(def->catalog().size() == 22);  // (bf16, fp16: 4 widths; fp32: 3) x 2 id types
  for (const auto& set : def->catalog()) CHECK(def->make_spec(set).uri.find("embedding") == 0);
}
