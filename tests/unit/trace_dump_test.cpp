// KJIT_TRACE_DUMP (src/ops/trace_dump.*) without a GPU: the hooks write each definition once and
// each distinct var-axis set once, under the names the definitions use; what they write is valid
// `kjit-cli bench --from` input; calls that fail validation or have zero size write nothing.
// Launching ops with tracing on is tests/gpu/trace_dump_gpu_test.cpp.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/definitions.hpp"
#include "ops/trace_dump.hpp"
#include "support/gpu.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
namespace trace = kjit::ops::trace;
using kjit::ops::DType;

namespace {

std::vector<nlohmann::json> lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

size_t files_in(const fs::path& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    n += it->is_regular_file();
  }
  return n;
}

// Turns tracing on into a fresh folder for the test, and off again after it.
struct Tracing {
  kjit::test::TempDir dir;
  Tracing() { trace::set_dir_for_testing(dir.path().string()); }
  ~Tracing() { trace::set_dir_for_testing(""); }
  fs::path def(const std::string& name) const {
    return dir.path() / "definitions" / (name + ".json");
  }
  fs::path work(const std::string& name) const {
    return dir.path() / "workloads" / (name + ".jsonl");
  }
};

}  // namespace

TEST_CASE("trace dump: one definition per combination, one line per distinct var values",
          "[trace]") {
  Tracing t;
  REQUIRE(trace::enabled());
  trace::rmsnorm(DType::kBF16, 4096, 7, false);
  trace::rmsnorm(DType::kBF16, 4096, 7, false);  // seen: nothing new
  trace::rmsnorm(DType::kBF16, 4096, 9, false);
  trace::rmsnorm(DType::kF16, 4096, 7, false);  // another dtype: another definition
  trace::rmsnorm(DType::kBF16, 4096, 7, true);  // Gemma: another definition

  const auto def = kjit::util::read_file(t.def("rmsnorm_h4096"));
  REQUIRE(def.has_value());
  CHECK(*def ==
        kjit::ops::definition_json(kjit::ops::rmsnorm_definition(DType::kBF16, 4096, false)));
  const auto w = lines(t.work("rmsnorm_h4096"));
  REQUIRE(w.size() == 2);
  CHECK(w[0].at("definition") == "rmsnorm_h4096");
  CHECK(w[0].at("axes") == nlohmann::json({{"batch_size", 7}}));
  CHECK(w[1].at("axes") == nlohmann::json({{"batch_size", 9}}));
  CHECK(w[1].at("op") == "rmsnorm");
  CHECK(w[1].at("set") == nlohmann::json({{"dtype", "bf16"}, {"hidden", "4096"}, {"rows", "9"}}));
  CHECK(fs::exists(t.def("rmsnorm_h4096_fp16")));
  CHECK(lines(t.work("gemma_rmsnorm_h4096")).at(0).at("set").at("gemma") == "1");
  CHECK(files_in(t.dir.path()) == 6);
}

TEST_CASE("trace dump: every hook writes under its definition's name", "[trace]") {
  Tracing t;
  trace::rmsnorm(DType::kF32, 127, 3, false);
  trace::fused_add_rmsnorm(DType::kBF16, 8192, 64, true);
  trace::layernorm(DType::kF16, DType::kF32, 2048, 5);
  trace::act_and_mul(kjit::ops::Act::kGeluTanh, DType::kBF16, 9216, 1);
  kjit::ops::RopeDefAxes r;
  r.qo_heads = 32;
  r.kv_heads = 8;
  r.head_dim = r.rotary_dim = 128;
  trace::rope(r, 17, 0);
  r.kind = kjit::ops::RopeKind::kLlama31;
  trace::rope(r, 17, 0);
  r.kind = kjit::ops::RopeKind::kCosSinCache;
  r.cache_dtype = DType::kF32;
  trace::rope(r, 17, 4096);
  trace::append_paged_kv(DType::kBF16, 8, 128, 16, false, 64, 64, 70, 100);

  int defs = 0;
  for (const auto& e : fs::directory_iterator(t.dir.path() / "definitions")) {
    ++defs;
    const auto j = nlohmann::json::parse(*kjit::util::read_file(e.path()));
    INFO(e.path());
    CHECK(j.at("name") == e.path().stem().string());
    const auto w = lines(t.work(e.path().stem().string()));
    REQUIRE(w.size() == 1);
    // The var axes recorded are exactly the definition's var axes.
    std::set<std::string> vars, seen;
    for (const auto& [name, axis] : j.at("axes").items()) {
      if (axis.at("type") == "var") vars.insert(name);
    }
    for (const auto& [name, v] : w[0].at("axes").items()) seen.insert(name);
    CHECK(seen == vars);
  }
  CHECK(defs == 8);
  const auto cache_line = lines(t.work("rope_cos_sin_cache_q32_k8_d128_csfp32")).at(0);
  CHECK(cache_line.at("axes").at("max_position") == 4096);
  CHECK_FALSE(cache_line.contains("op"));  // no bench for the cache kernel yet
  const auto kv = lines(t.work("append_paged_kv_k8_d128_ps16_hnd")).at(0);
  CHECK(kv.at("axes").at("len_indptr") == 65);
  CHECK(kv.at("set").at("layout") == "hnd");
}

TEST_CASE("trace dump: what it writes is bench --from input", "[trace]") {
  Tracing t;
  for (int rows : {1, 8, 64}) trace::rmsnorm(DType::kBF16, 4096, rows, false);
  trace::act_and_mul(kjit::ops::Act::kSilu, DType::kBF16, 14336, 8);
  kjit::ops::RopeDefAxes r;
  r.qo_heads = 32;
  r.kv_heads = 8;
  r.head_dim = r.rotary_dim = 128;
  trace::rope(r, 8, 0);
  trace::append_paged_kv(DType::kBF16, 8, 128, 16, true, 8, 8, 8, 8);
  for (const auto& e : fs::directory_iterator(t.dir.path() / "workloads")) {
    INFO(e.path());
    const std::string cmd = "KJIT_CACHE_DIR='" + t.dir.path().string() +
                            "' '" KJIT_CLI_PATH "' bench --from '" + e.path().string() +
                            "' --dry-run >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("trace dump: at most kMaxWorkloadsPerDefinition lines per definition", "[trace]") {
  Tracing t;
  for (int rows = 1; rows <= trace::kMaxWorkloadsPerDefinition + 50; ++rows) {
    trace::act_and_mul(kjit::ops::Act::kSilu, DType::kBF16, 4096, rows);
  }
  CHECK(lines(t.work("silu_and_mul_d4096")).size() ==
        static_cast<size_t>(trace::kMaxWorkloadsPerDefinition));
}

TEST_CASE("trace dump: rejected and zero-size calls write nothing", "[trace]") {
  Tracing t;
  char* const in = reinterpret_cast<char*>(0x10000000);  // never dereferenced
  char* const w = reinterpret_cast<char*>(0x20000000);
  char* const out = reinterpret_cast<char*>(0x30000000);
  auto x0 = kjit::test::make_tensor(in, {0, 4096}, kjit::test::dl_dtype("bf16"));
  auto wt = kjit::test::make_tensor(w, {4096}, kjit::test::dl_dtype("bf16"));
  auto y0 = kjit::test::make_tensor(out, {0, 4096}, kjit::test::dl_dtype("bf16"));
  CHECK(kjit_rmsnorm(x0.get(), wt.get(), y0.get(), 1e-6f, nullptr) == KJIT_SUCCESS);
  auto g0 = kjit::test::make_tensor(in, {0, 2 * 4096}, kjit::test::dl_dtype("bf16"));
  auto h0 = kjit::test::make_tensor(out, {0, 4096}, kjit::test::dl_dtype("bf16"));
  CHECK(kjit_silu_and_mul(g0.get(), h0.get(), nullptr) == KJIT_SUCCESS);

  // Rejected: a weight of the wrong length, a NaN eps, a null input.
  auto x = kjit::test::make_tensor(in, {4, 4096}, kjit::test::dl_dtype("bf16"));
  auto y = kjit::test::make_tensor(out, {4, 4096}, kjit::test::dl_dtype("bf16"));
  auto w_bad = kjit::test::make_tensor(w, {4095}, kjit::test::dl_dtype("bf16"));
  CHECK(kjit_rmsnorm(x.get(), w_bad.get(), y.get(), 1e-6f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_rmsnorm(x.get(), wt.get(), y.get(), NAN, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kjit_rmsnorm(nullptr, wt.get(), y.get(), 1e-6f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(files_in(t.dir.path()) == 0);
}

TEST_CASE("trace dump: KJIT_TRACE_DUMP is read once, then cached", "[trace]") {
  const char* saved = std::getenv("KJIT_TRACE_DUMP");
  const std::string keep = saved ? saved : "";
  for (const auto& [value, on] : {std::pair{"1", true}, std::pair{"yes", true},
                                  std::pair{"0", false}, std::pair{"off", false}}) {
    INFO(value);
    ::setenv("KJIT_TRACE_DUMP", value, 1);
    trace::g_state.store(-1);  // as in a fresh process
    CHECK(trace::enabled() == on);
    ::setenv("KJIT_TRACE_DUMP", on ? "0" : "1", 1);
    CHECK(trace::enabled() == on);  // cached: later changes of the variable do not count
  }
  ::unsetenv("KJIT_TRACE_DUMP");
  trace::g_state.store(-1);
  CHECK_FALSE(trace::enabled());
  if (saved) ::setenv("KJIT_TRACE_DUMP", keep.c_str(), 1);
  trace::set_dir_for_testing("");
}
