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
#include "diag/trace_dump.hpp"
#include "ops/activation/activation_desc.hpp"
#include "ops/attention/attention_desc.hpp"
#include "ops/gemm/gemm_desc.hpp"
#include "ops/kv_cache/kv_cache_desc.hpp"
#include "ops/norm/norm_desc.hpp"
#include "ops/quant/fused_quant_desc.hpp"
#include "ops/rope/rope_desc.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "support/gpu.hpp"
#include "support/sampling_options.hpp"
#include "support/no_gpu.hpp"
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

// Checks every definition written under `dir`: its file is named after it, it has exactly one
// workload line, and that line records exactly the definition's var axes. Returns how many.
int check_one_line_each(const fs::path& dir) {
  int defs = 0;
  for (const auto& e : fs::directory_iterator(dir / "definitions")) {
    ++defs;
    const auto j = nlohmann::json::parse(*kjit::util::read_file(e.path()));
    INFO(e.path());
    CHECK(j.at("name") == e.path().stem().string());
    const auto w = lines(dir / "workloads" / (e.path().stem().string() + ".jsonl"));
    REQUIRE(w.size() == 1);
    CHECK(w[0].at("definition") == j.at("name"));
    std::set<std::string> vars, seen;
    for (const auto& [name, axis] : j.at("axes").items()) {
      if (axis.at("type") == "var") vars.insert(name);
    }
    for (const auto& [name, v] : w[0].at("axes").items()) seen.insert(name);
    CHECK(seen == vars);
  }
  return defs;
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
  trace::append_paged_kv(DType::kBF16, 0, 8, 128, 16, false, 64, 64, 70, 100);
  trace::append_paged_kv(DType::kBF16, 8, 8, 128, 16, true, 64, 64, 70, 100);  // e4m3, per head
  trace::gemm(DType::kBF16, DType::kBF16, 16, 4096, 14336, false);
  trace::gemm(DType::kF16, DType::kF32, 3, 64, 40, true);
  trace::rmsnorm_quant_fp8(DType::kBF16, false, 16, 4096);
  trace::rmsnorm_quant_fp8(DType::kBF16, true, 16, 4096);
  trace::silu_and_mul_quant_fp8(DType::kBF16, 5, 14336);

  CHECK(check_one_line_each(t.dir.path()) == 14);
  const auto fused_line = lines(t.work("fused_add_rmsnorm_quant_fp8_h4096")).at(0);
  CHECK(fused_line.at("op") == "rmsnorm_quant_fp8");
  CHECK(fused_line.at("set").at("residual") == "1");
  CHECK(lines(t.work("silu_and_mul_quant_fp8_d14336")).at(0).at("axes").at("groups") == 112);
  const auto gemm_line = lines(t.work("gemm_n4096_k14336")).at(0);
  CHECK(gemm_line.at("axes").at("m") == 16);
  CHECK(gemm_line.at("op") == "gemm");
  CHECK(gemm_line.at("set").at("k") == "14336");
  // `bench gemm` has no bias: such a call records its definition and axes, no bench row.
  CHECK_FALSE(lines(t.work("gemm_n64_k40_fp16_out_fp32_bias")).at(0).contains("op"));
  const auto cache_line = lines(t.work("rope_cos_sin_cache_q32_k8_d128_csfp32")).at(0);
  CHECK(cache_line.at("axes").at("max_position") == 4096);
  CHECK_FALSE(cache_line.contains("op"));  // no bench for the cache kernel yet
  const auto kv = lines(t.work("append_paged_kv_k8_d128_ps16_hnd")).at(0);
  CHECK(kv.at("axes").at("len_indptr") == 65);
  CHECK(kv.at("set").at("layout") == "hnd");
  const auto kv8 = lines(t.work("append_paged_kv_k8_d128_ps16_e4m3")).at(0);
  CHECK(kv8.at("axes").at("num_scales") == 8);
  CHECK(kv8.at("set").at("cache") == "e4m3");
  CHECK(kv8.at("set").at("scales") == "head");
}

TEST_CASE("trace dump: the attention and sampling hooks", "[trace]") {
  using kjit::ops::DecodeDefAxes;
  using kjit::ops::SamplingKind;
  Tracing t;
  const DecodeDefAxes llama8b{DType::kBF16, false, 32, 8, 128, 16, true};
  trace::batch_decode(llama8b, 8, 2048, 4096, 4096);
  trace::batch_decode(llama8b, 8, 2048, 4096, 4100);  // same var axes: nothing new
  trace::batch_decode(llama8b, 64, 16384, 20000, 4096);
  trace::batch_decode({DType::kF16, true, 28, 4, 128, 1, false}, 3, 70, 100, 0);
  trace::merge_states(DType::kBF16, 32, 128, 5);
  trace::merge_states_n(DType::kF32, 64, 128, 5, 4);
  trace::sampling(SamplingKind::kTopKTopPFromLogits, DType::kF32, 128256, 8);
  trace::sampling(SamplingKind::kTopPFromProbs, DType::kF32, 151936, 8);
  trace::sampling(SamplingKind::kMinPFromProbs, DType::kF32, 32000, 2);
  trace::sampling(SamplingKind::kArgmax, DType::kBF16, 128256, 1);
  trace::sampling(SamplingKind::kTopKMaskLogits, DType::kF16, 1000, 3);

  // Each file is the definition the hook's arguments name.
  const auto def = kjit::util::read_file(t.def("batch_decode_q32_k8_d128_ps16"));
  REQUIRE(def.has_value());
  CHECK(*def == kjit::ops::definition_json(kjit::ops::batch_decode_definition(llama8b)));
  CHECK(*kjit::util::read_file(t.def("top_k_top_p_sampling_from_logits_v128256_fp32")) ==
        kjit::ops::definition_json(kjit::ops::sampling_definition(SamplingKind::kTopKTopPFromLogits,
                                                                  DType::kF32, 128256)));
  CHECK(fs::exists(t.def("batch_decode_q28_k4_d128_ps1_hnd_kve4m3_fp16")));
  CHECK(fs::exists(t.def("merge_states_h32_d128")));
  CHECK(fs::exists(t.def("merge_states_n_h64_d128_fp32")));
  CHECK(fs::exists(t.def("top_p_sampling_from_probs_v151936")));
  CHECK(fs::exists(t.def("min_p_sampling_from_probs_v32000")));
  CHECK(fs::exists(t.def("argmax_v128256")));
  CHECK(fs::exists(t.def("top_k_mask_logits_v1000_fp16")));

  const auto w = lines(t.work("batch_decode_q32_k8_d128_ps16"));
  REQUIRE(w.size() == 2);
  CHECK(w[0].at("axes") ==
        nlohmann::json(
            {{"batch_size", 8}, {"len_indptr", 9}, {"num_kv_indices", 2048}, {"num_pages", 4096}}));
  CHECK(w[0].at("op") == "decode_attention");
  CHECK(w[0].at("set") == nlohmann::json({{"dtype", "bf16"},
                                          {"batch", "8"},
                                          {"kv_len", "4096"},
                                          {"qo_heads", "32"},
                                          {"kv_heads", "8"},
                                          {"head_dim", "128"},
                                          {"page_size", "16"},
                                          {"layout", "nhd"}}));
  CHECK(w[1].at("axes").at("batch_size") == 64);
  // An fp8 HND cache is benched as one; a plan of empty requests still benches one position.
  const auto fp8 = lines(t.work("batch_decode_q28_k4_d128_ps1_hnd_kve4m3_fp16")).at(0);
  CHECK(fp8.at("set").at("kv_dtype") == "e4m3");
  CHECK(fp8.at("set").at("layout") == "hnd");
  CHECK(fp8.at("set").at("dtype") == "fp16");
  CHECK(fp8.at("set").at("kv_len") == "1");
  // merge_states has no bench: the line names the definition and its axes only.
  const auto merge = lines(t.work("merge_states_n_h64_d128_fp32")).at(0);
  CHECK(merge.at("axes") == nlohmann::json({{"num_states", 4}, {"seq_len", 5}}));
  CHECK_FALSE(merge.contains("op"));
  const auto topkp = lines(t.work("top_k_top_p_sampling_from_logits_v128256_fp32")).at(0);
  CHECK(topkp.at("op") == "top_k_top_p_sampling");
  CHECK(topkp.at("set") ==
        nlohmann::json({{"batch", "8"}, {"vocab", "128256"}, {"dtype", "fp32"}}));
  const auto topp = lines(t.work("top_p_sampling_from_probs_v151936")).at(0);
  CHECK(topp.at("op") == "top_p_sampling");
  CHECK(topp.at("set") == nlohmann::json({{"batch", "8"}, {"vocab", "151936"}}));
  CHECK(lines(t.work("argmax_v128256")).at(0).at("set").at("dtype") == "bf16");
  const auto minp = lines(t.work("min_p_sampling_from_probs_v32000")).at(0);
  CHECK(minp.at("op") == "min_p_sampling");
  CHECK_FALSE(minp.at("set").contains("dtype"));  // probabilities are fp32
  const auto mask = lines(t.work("top_k_mask_logits_v1000_fp16")).at(0);
  CHECK(mask.at("op") == "top_k_mask_logits");
  CHECK(mask.at("set").at("dtype") == "fp16");

  fs::remove(t.work("batch_decode_q32_k8_d128_ps16"));  // the one with two lines
  fs::remove(t.def("batch_decode_q32_k8_d128_ps16"));
  CHECK(check_one_line_each(t.dir.path()) == 8);
}

TEST_CASE("trace dump: attention and sampling entry points record after validation", "[trace]") {
  // Valid calls on fake device pointers stop at the missing device after the hook; with a GPU
  // they would launch on those pointers, so there the test runs in a child that sees none.
  KJIT_RUN_WITHOUT_GPU();
  using kjit::test::dl_dtype;
  using kjit::test::make_tensor;
  Tracing t;
  auto fake = [](uintptr_t a) { return reinterpret_cast<char*>(a); };

  // argmax and a sampler, then the same calls with zero rows (no-ops: nothing recorded).
  for (int64_t batch : {4, 0}) {
    auto logits = make_tensor(fake(0x10000000), {batch, 32000}, dl_dtype("fp32"));
    auto idx = make_tensor(fake(0x20000000), {batch}, dl_dtype("int64"));
    auto rng = make_tensor(fake(0x30000000), {1}, dl_dtype("int64"));
    auto off = make_tensor(fake(0x30001000), {1}, dl_dtype("int64"));
    const kjit_status want = batch > 0 ? KJIT_ERROR_NO_DEVICE : KJIT_SUCCESS;
    CHECK(kjit_argmax(logits.get(), idx.get(), nullptr) == want);
    CHECK(kjit_top_k_top_p_sampling_from_logits(
              logits.get(), nullptr, nullptr, nullptr, rng.get(), off.get(), idx.get(), nullptr,
              kjit::test::SamplingOptions().top_k(50).top_p(0.9f).temperature(1.0f),
              nullptr) == want);
    auto probs = make_tensor(fake(0x40000000), {batch, 32000}, dl_dtype("fp32"));
    auto out = make_tensor(fake(0x50000000), {batch, 32000}, dl_dtype("fp32"));
    CHECK(kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(),
                                  kjit::test::SamplingOptions().top_k(20), nullptr) == want);
  }
  // Rejected: top_p out of range. Nothing recorded.
  {
    auto probs = make_tensor(fake(0x40000000), {4, 32000}, dl_dtype("fp32"));
    auto idx = make_tensor(fake(0x20000000), {4}, dl_dtype("int64"));
    auto rng = make_tensor(fake(0x30000000), {1}, dl_dtype("int64"));
    auto off = make_tensor(fake(0x30001000), {1}, dl_dtype("int64"));
    CHECK(kjit_top_p_sampling_from_probs(probs.get(), nullptr, rng.get(), off.get(), idx.get(),
                                         nullptr, kjit::test::SamplingOptions().top_p(1.5f),
                                         nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  }
  // merge_states_n of 3 states.
  {
    auto v = make_tensor(fake(0x10000000), {3, 5, 32, 128}, dl_dtype("bf16"));
    auto s = make_tensor(fake(0x20000000), {3, 5, 32}, dl_dtype("fp32"));
    auto vo = make_tensor(fake(0x30000000), {5, 32, 128}, dl_dtype("bf16"));
    CHECK(kjit_merge_states_n(v.get(), s.get(), vo.get(), nullptr, nullptr) ==
          KJIT_ERROR_NO_DEVICE);
  }
  // Decode: planned without a device (num_sms given) for 3 requests of 3, 0 and 4 pages of 16;
  // the run records, the plan alone does not.
  {
    kjit_decode_options o;
    kjit_decode_options_init(&o);
    o.num_sms = 132;
    const std::vector<int32_t> indptr = {0, 3, 3, 7};
    kjit_decode_plan* plan = nullptr;
    REQUIRE(kjit_batch_decode_plan(indptr.data(), 3, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD,
                                   dl_dtype("bf16"), dl_dtype("bf16"), &o, 0,
                                   &plan) == KJIT_SUCCESS);
    CHECK(files_in(t.dir.path()) == 8);  // argmax, the sampler, the renorm, merge_states_n
    auto q = make_tensor(fake(0x10000000), {3, 32, 128}, dl_dtype("bf16"));
    auto kc = make_tensor(fake(0x20000000), {20, 16, 8, 128}, dl_dtype("bf16"));
    auto vc = make_tensor(fake(0x30000000), {20, 16, 8, 128}, dl_dtype("bf16"));
    auto idx = make_tensor(fake(0x40000000), {9}, dl_dtype("int32"));
    auto ptr = make_tensor(fake(0x40001000), {4}, dl_dtype("int32"));
    auto last = make_tensor(fake(0x40002000), {3}, dl_dtype("int32"));
    auto ws = make_tensor(fake(0x50000000), {1 << 24}, dl_dtype("int32"));
    auto out = make_tensor(fake(0x60000000), {3, 32, 128}, dl_dtype("bf16"));
    CHECK(kjit_batch_decode_run(plan, q.get(), kc.get(), vc.get(), idx.get(), ptr.get(), last.get(),
                                ws.get(), out.get(), nullptr, 1.0f, 1.0f,
                                nullptr) == KJIT_ERROR_NO_DEVICE);
    // Rejected (k_scale 0): nothing more.
    CHECK(kjit_batch_decode_run(plan, q.get(), kc.get(), vc.get(), idx.get(), ptr.get(), last.get(),
                                ws.get(), out.get(), nullptr, 0.0f, 1.0f,
                                nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
    kjit_decode_plan_destroy(plan);
  }

  CHECK(files_in(t.dir.path()) == 10);
  CHECK(check_one_line_each(t.dir.path()) == 5);
  CHECK(lines(t.work("argmax_v32000_fp32")).at(0).at("axes").at("batch_size") == 4);
  CHECK(fs::exists(t.def("top_k_top_p_sampling_from_logits_v32000_fp32")));
  CHECK(fs::exists(t.def("top_k_renorm_probs_v32000")));
  const auto merge = lines(t.work("merge_states_n_h32_d128")).at(0);
  CHECK(merge.at("axes") == nlohmann::json({{"num_states", 3}, {"seq_len", 5}}));
  const auto dec = lines(t.work("batch_decode_q32_k8_d128_ps16")).at(0);
  CHECK(dec.at("axes") ==
        nlohmann::json(
            {{"batch_size", 3}, {"len_indptr", 4}, {"num_kv_indices", 9}, {"num_pages", 20}}));
  CHECK(dec.at("set").at("kv_len") == "37");  // 7 pages of 16 over 3 requests
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
  trace::append_paged_kv(DType::kBF16, 0, 8, 128, 16, true, 8, 8, 8, 8);
  trace::batch_decode({DType::kBF16, false, 64, 8, 128, 16, true}, 8, 2048, 2048, 4096);
  trace::batch_decode({DType::kBF16, true, 32, 8, 128, 1, false}, 1, 4096, 4096, 4096);
  using kjit::ops::SamplingKind;
  for (auto kind : {SamplingKind::kTopPFromProbs, SamplingKind::kTopKTopPFromLogits,
                    SamplingKind::kSoftmax, SamplingKind::kArgmax}) {
    trace::sampling(kind, DType::kF32, 128256, 8);
  }
  trace::gemm(DType::kBF16, DType::kF32, 8, 4096, 14336, false);
  int files = 0;
  for (const auto& e : fs::directory_iterator(t.dir.path() / "workloads")) {
    INFO(e.path());
    const std::string cmd = "KJIT_CACHE_DIR='" + t.dir.path().string() +
                            "' '" KJIT_CLI_PATH "' bench --from '" + e.path().string() +
                            "' --dry-run >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    ++files;
  }
  CHECK(files == 11);
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
