// The engine life-cycle entry points that need no GPU: support queries, warm-up argument checks,
// the params grammar and the config struct. kjit_configure's effect needs a fresh process:
// tests/unit/engine_config_main.cpp.
#include <catch2/catch.hpp>

#include <string>

#include "kjit/kjit.h"
#include "ops/registry.hpp"
#include "util/error.hpp"

using namespace kjit;

TEST_CASE("engine: params parse like --set, separated by commas or spaces", "[api]") {
  const ops::SetArgs a = ops::parse_set_list("dtype=bf16,hidden=4096  rows=1,");
  CHECK(a == ops::SetArgs{{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "1"}});
  CHECK(ops::parse_set_list("").empty());
  CHECK_THROWS_AS(ops::parse_set_list("dtype"), Error);
  CHECK_THROWS_AS(ops::parse_set_list("=bf16"), Error);
  CHECK_THROWS_AS(ops::parse_set_list("a=1,a=2"), Error);
}

TEST_CASE("engine: kjit_op_supported answers from the op's own checks", "[api]") {
  CHECK(kjit_op_supported("rmsnorm", "dtype=bf16,hidden=4096", "sm_80") == KJIT_SUCCESS);
  CHECK(kjit_op_supported("rmsnorm", "dtype=bf16 hidden=4096", "9.0a") == KJIT_SUCCESS);
  CHECK(std::string(kjit_last_error()).empty());
  // Below the families kjit builds for.
  CHECK(kjit_op_supported("rmsnorm", "dtype=bf16,hidden=4096", "sm_75") == KJIT_ERROR_UNSUPPORTED);
  CHECK(std::string(kjit_last_error()).find("sm_75") != std::string::npos);
  // The cluster merge needs sm_90 (thread block clusters).
  const char* cluster = "q_dtype=bf16,head_dim=128,group=4,merge=cluster";
  CHECK(kjit_op_supported("decode_attention", cluster, "sm_90") == KJIT_SUCCESS);
  CHECK(kjit_op_supported("decode_attention", cluster, "sm_80") == KJIT_ERROR_UNSUPPORTED);
  // Unknown op, parameter and value; a bad arch; NULL.
  CHECK(kjit_op_supported("no_such_op", "", "sm_90") == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("rmsnorm") != std::string::npos);  // lists the ops
  CHECK(kjit_op_supported("rmsnorm", "dtype=bf16,hidden=4096,colour=red", "sm_90") ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_op_supported("rmsnorm", "dtype=int8,hidden=4096", "sm_90") ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_op_supported("rmsnorm", "dtype=bf16,hidden=4096", "sm_9x") ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_op_supported(nullptr, "", "sm_90") == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("engine: kjit_precompile refuses bad requests before compiling", "[api]") {
  CHECK(kjit_precompile("no_such_op", "", -1) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_precompile("rmsnorm", "dtype=bf16", -1) == KJIT_ERROR_INVALID_ARGUMENT);  // hidden?
  CHECK(std::string(kjit_last_error()).find("hidden") != std::string::npos);
  CHECK(kjit_precompile("rmsnorm", "dtype=bf16,hidden=4096", -2) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_precompile(nullptr, nullptr, -1) == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("engine: kjit_config_init and kjit_configure's argument checks", "[api]") {
  kjit_config c;
  kjit_config_init(&c);
  CHECK(c.struct_size == sizeof(kjit_config));
  CHECK(c.cache_dir == nullptr);
  CHECK(c.aot_dir == nullptr);
  CHECK(c.disable_jit == -1);
  CHECK(c.log_level == -1);
  kjit_config_init(nullptr);  // no crash
  CHECK(kjit_configure(nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  kjit_config small = c;
  small.struct_size = 4;
  CHECK(kjit_configure(&small) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("struct_size") != std::string::npos);
  kjit_config bad = c;
  bad.disable_jit = 7;
  CHECK(kjit_configure(&bad) == KJIT_ERROR_INVALID_ARGUMENT);
  bad = c;
  bad.log_level = 11;
  CHECK(kjit_configure(&bad) == KJIT_ERROR_INVALID_ARGUMENT);
  bad = c;
  bad.cache_dir = "";
  CHECK(kjit_configure(&bad) == KJIT_ERROR_INVALID_ARGUMENT);
}
