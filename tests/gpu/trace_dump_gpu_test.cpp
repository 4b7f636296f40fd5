// KJIT_TRACE_DUMP with real launches: each op call that reaches a kernel records its definition
// and var-axis values (through the hook in the op, not a direct call), repeated calls add
// nothing, the outputs are still right, and the recorded lines are `bench --from` input.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "diag/trace_dump.hpp"
#include "ops/attention/attention_desc.hpp"
#include "ops/norm/norm_desc.hpp"
#include "reference/attention_ref.hpp"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"
#include "support/sampling_options.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
namespace trace = kjit::ops::trace;
using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

std::vector<nlohmann::json> lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Exit status of `kjit-cli bench --from FILE --dry-run`.
int dry_run(const fs::path& file, const fs::path& cache) {
  const std::string cmd = "KJIT_CACHE_DIR='" + cache.string() +
                          "' '" KJIT_CLI_PATH "' bench --from '" + file.string() +
                          "' --dry-run >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<unsigned char> random_elems(size_t n, const char* dtype, std::mt19937_64& rng,
                                        double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<unsigned char> b(n * ref::elem_size(dtype));
  for (size_t i = 0; i < n; ++i) ref::store_elem(b.data(), i, dist(rng), dtype);
  return b;
}

std::unique_ptr<DeviceBuffer> on_device(const void* host, size_t bytes) {
  auto d = std::make_unique<DeviceBuffer>(std::max<size_t>(bytes, 16));
  d->upload(host, bytes);
  return d;
}

}  // namespace

TEST_CASE("trace dump gpu: launched ops record their definitions once", "[gpu][trace]") {
  TempDir dir;
  trace::set_dir_for_testing(dir.path().string());
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  const int64_t hidden = 4096, d = 1024;

  // rmsnorm at 3 rows twice and at 5 rows once: two workload lines, right outputs.
  for (int64_t rows : {3, 3, 5}) {
    const size_t n = static_cast<size_t>(rows * hidden);
    std::vector<unsigned char> xh(n * 2), wh(hidden * 2), yh(n * 2);
    std::vector<double> xd(n), wd(hidden);
    for (size_t i = 0; i < n; ++i) {
      ref::store_elem(xh.data(), i, dist(rng), "bf16");
      xd[i] = ref::load_elem(xh.data(), i, "bf16");
    }
    for (int64_t i = 0; i < hidden; ++i) {
      ref::store_elem(wh.data(), i, dist(rng), "bf16");
      wd[i] = ref::load_elem(wh.data(), i, "bf16");
    }
    DeviceBuffer x(xh.size()), w(wh.size()), y(yh.size());
    x.upload(xh.data(), xh.size());
    w.upload(wh.data(), wh.size());
    y.fill(0xFF);
    auto xt = make_tensor(x.get(), {rows, hidden}, dl_dtype("bf16"));
    auto wt = make_tensor(w.get(), {hidden}, dl_dtype("bf16"));
    auto yt = make_tensor(y.get(), {rows, hidden}, dl_dtype("bf16"));
    REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, nullptr) == KJIT_SUCCESS);
    device_synchronize();
    y.download(yh.data(), yh.size());
    const auto want = ref::rmsnorm(xd, wd, rows, hidden, 1e-6);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(ref::load_elem(yh.data(), i, "bf16") ==
              Approx(want[i]).margin(1e-6).epsilon(3 * ref::unit_roundoff("bf16")));
    }
  }
  // silu_and_mul at 2 rows.
  {
    DeviceBuffer x(2 * 2 * d * 2), y(2 * d * 2);
    x.fill(0);
    auto xt = make_tensor(x.get(), {2, 2 * d}, dl_dtype("bf16"));
    auto yt = make_tensor(y.get(), {2, d}, dl_dtype("bf16"));
    REQUIRE(kjit_silu_and_mul(xt.get(), yt.get(), nullptr) == KJIT_SUCCESS);
    device_synchronize();
  }
  trace::set_dir_for_testing("");

  const fs::path defs = dir.path() / "definitions", work = dir.path() / "workloads";
  const auto def = kjit::util::read_file(defs / "rmsnorm_h4096.json");
  REQUIRE(def.has_value());
  CHECK(*def == kjit::ops::definition_json(
                    kjit::ops::rmsnorm_definition(kjit::ops::DType::kBF16, hidden, false)));
  const auto w = lines(work / "rmsnorm_h4096.jsonl");
  REQUIRE(w.size() == 2);
  CHECK(w[0].at("axes").at("batch_size") == 3);
  CHECK(w[1].at("axes").at("batch_size") == 5);
  const auto s = lines(work / "silu_and_mul_d1024.jsonl");
  REQUIRE(s.size() == 1);
  CHECK(s[0].at("set").at("rows") == "2");
  CHECK(fs::exists(defs / "silu_and_mul_d1024.json"));
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 4);

  // Off again: a launch writes nothing more.
  DeviceBuffer x(2 * 2 * d * 2), y(2 * d * 2);
  x.fill(0);
  auto x2 = make_tensor(x.get(), {1, 2 * d}, dl_dtype("bf16"));
  auto y2 = make_tensor(y.get(), {1, d}, dl_dtype("bf16"));
  REQUIRE(kjit_silu_and_mul(x2.get(), y2.get(), nullptr) == KJIT_SUCCESS);
  device_synchronize();
  CHECK(lines(work / "silu_and_mul_d1024.jsonl").size() == 1);
}

TEST_CASE("trace dump gpu: decode attention, merge_states and sampling record once",
          "[gpu][trace]") {
  TempDir dir;
  trace::set_dir_for_testing(dir.path().string());
  std::mt19937_64 rng(11);

  // Decode with Llama-3-8B heads: 2 requests of 37 and 5 tokens in pages of 16 (3 + 1 of a pool
  // of 6, shuffled), run twice (one workload line), checked against the fp64 reference.
  const int64_t B = 2, HQ = 32, HK = 8, D = 128, P = 16, NP = 6;
  const std::vector<int32_t> indptr = {0, 3, 4}, indices = {4, 0, 2, 5}, last = {5, 5};
  const size_t nq = static_cast<size_t>(B * HQ * D), ncache = static_cast<size_t>(NP * P * HK * D);
  const auto qh = random_elems(nq, "bf16", rng, -2.0, 2.0);
  const auto kh = random_elems(ncache, "bf16", rng, -1.0, 1.0);
  const auto vh = random_elems(ncache, "bf16", rng, -1.0, 1.0);
  auto qd = on_device(qh.data(), qh.size()), kd = on_device(kh.data(), kh.size());
  auto vd = on_device(vh.data(), vh.size());
  auto idxd = on_device(indices.data(), indices.size() * 4);
  auto ptrd = on_device(indptr.data(), indptr.size() * 4);
  auto lastd = on_device(last.data(), last.size() * 4);
  DeviceBuffer outd(nq * 2), lsed(static_cast<size_t>(B * HQ) * 4);
  kjit_decode_plan* plan = nullptr;
  REQUIRE(kjit_batch_decode_plan(indptr.data(), 2, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD,
                                 dl_dtype("bf16"), dl_dtype("bf16"), nullptr, 0,
                                 &plan) == KJIT_SUCCESS);
  DeviceBuffer ws(std::max<size_t>(kjit_decode_plan_workspace_bytes(plan), 16));
  {
    auto q = make_tensor(qd->get(), {B, HQ, D}, dl_dtype("bf16"));
    auto kc = make_tensor(kd->get(), {NP, P, HK, D}, dl_dtype("bf16"));
    auto vc = make_tensor(vd->get(), {NP, P, HK, D}, dl_dtype("bf16"));
    auto idx = make_tensor(idxd->get(), {4}, dl_dtype("int32"));
    auto ptr = make_tensor(ptrd->get(), {3}, dl_dtype("int32"));
    auto lst = make_tensor(lastd->get(), {2}, dl_dtype("int32"));
    auto wst = make_tensor(ws.get(), {static_cast<int64_t>(ws.size() / 4)}, dl_dtype("int32"));
    auto out = make_tensor(outd.get(), {B, HQ, D}, dl_dtype("bf16"));
    auto lse = make_tensor(lsed.get(), {B, HQ}, dl_dtype("fp32"));
    for (int rep = 0; rep < 2; ++rep) {
      outd.fill(0xFF);
      lsed.fill(0xFF);
      REQUIRE(kjit_batch_decode_run(plan, q.get(), kc.get(), vc.get(), idx.get(), ptr.get(),
                                    lst.get(), wst.get(), out.get(), lse.get(), 1.0f, 1.0f,
                                    nullptr) == KJIT_SUCCESS);
      device_synchronize();
    }
  }
  kjit_decode_plan_destroy(plan);
  {
    std::vector<unsigned char> got(nq * 2);
    std::vector<float> got_lse(static_cast<size_t>(B * HQ));
    outd.download(got.data(), got.size());
    lsed.download(got_lse.data(), got_lse.size() * 4);
    ref::DecodeRefArgs a;
    a.batch = B;
    a.qo_heads = HQ;
    a.kv_heads = HK;
    a.head_dim = D;
    a.page_size = P;
    a.num_pages = NP;
    a.sm_scale = 1.0 / std::sqrt(static_cast<double>(D));
    a.indptr = indptr;
    a.indices = indices;
    a.last_page_len = last;
    auto elem = [](const std::vector<unsigned char>& c, int64_t page, int64_t slot, int64_t h,
                   int64_t d) {
      return ref::load_elem(c.data(), static_cast<size_t>(((page * P + slot) * HK + h) * D + d),
                            "bf16");
    };
    std::vector<double> want, want_lse;
    ref::decode_attention(
        a,
        [&](int64_t b, int64_t i, int64_t d) {
          return ref::load_elem(qh.data(), static_cast<size_t>((b * HQ + i) * D + d), "bf16");
        },
        [&](int64_t pg, int64_t sl, int64_t h, int64_t d) { return elem(kh, pg, sl, h, d); },
        [&](int64_t pg, int64_t sl, int64_t h, int64_t d) { return elem(vh, pg, sl, h, d); }, want,
        want_lse);
    long bad = 0;
    for (size_t i = 0; i < nq; ++i) {
      // P.V takes bf16 probabilities; values in [-1, 1]; one rounding to bf16.
      const double tol = 3 * 0x1p-8 + 2 * ref::unit_roundoff("bf16") * std::fabs(want[i]) + 1e-6;
      bad += !(std::fabs(ref::load_elem(got.data(), i, "bf16") - want[i]) <= tol);
    }
    for (size_t i = 0; i < got_lse.size(); ++i) {
      bad += !(std::fabs(got_lse[i] - want_lse[i]) <= 2e-4 * (1 + std::fabs(want_lse[i])));
    }
    CHECK(bad == 0);
  }

  // merge_states of two bf16 states, [3 seqs, 32 heads, 128].
  {
    const int64_t S = 3, H = 32, n = S * H * D;
    const auto va = random_elems(static_cast<size_t>(n), "bf16", rng, -1.0, 1.0);
    const auto vb = random_elems(static_cast<size_t>(n), "bf16", rng, -1.0, 1.0);
    const auto sa = random_elems(static_cast<size_t>(S * H), "fp32", rng, -5.0, 5.0);
    const auto sb = random_elems(static_cast<size_t>(S * H), "fp32", rng, -5.0, 5.0);
    auto vad = on_device(va.data(), va.size()), vbd = on_device(vb.data(), vb.size());
    auto sad = on_device(sa.data(), sa.size()), sbd = on_device(sb.data(), sb.size());
    DeviceBuffer vod(static_cast<size_t>(n) * 2);
    vod.fill(0xFF);
    auto vat = make_tensor(vad->get(), {S, H, D}, dl_dtype("bf16"));
    auto vbt = make_tensor(vbd->get(), {S, H, D}, dl_dtype("bf16"));
    auto sat = make_tensor(sad->get(), {S, H}, dl_dtype("fp32"));
    auto sbt = make_tensor(sbd->get(), {S, H}, dl_dtype("fp32"));
    auto vot = make_tensor(vod.get(), {S, H, D}, dl_dtype("bf16"));
    REQUIRE(kjit_merge_states(vat.get(), sat.get(), vbt.get(), sbt.get(), vot.get(), nullptr,
                              nullptr) == KJIT_SUCCESS);
    device_synchronize();
    std::vector<unsigned char> got(static_cast<size_t>(n) * 2);
    vod.download(got.data(), got.size());
    long bad = 0;
    for (int64_t r = 0; r < S * H; ++r) {
      const std::vector<double> s = {ref::load_elem(sa.data(), static_cast<size_t>(r), "fp32"),
                                     ref::load_elem(sb.data(), static_cast<size_t>(r), "fp32")};
      std::vector<double> want;
      double s_out = 0;
      ref::merge_states(
          s, D,
          [&](size_t i, int64_t d) {
            return ref::load_elem(i == 0 ? va.data() : vb.data(), static_cast<size_t>(r * D + d),
                                  "bf16");
          },
          want, s_out);
      for (int64_t d = 0; d < D; ++d) {
        const double w = want[static_cast<size_t>(d)];
        const double g = ref::load_elem(got.data(), static_cast<size_t>(r * D + d), "bf16");
        bad += !(std::fabs(g - w) <= 2 * ref::unit_roundoff("bf16") * std::fabs(w) + 1e-5);
      }
    }
    CHECK(bad == 0);
  }

  // argmax at 3 rows (twice) and 5 rows; top-k 1 sampling from logits, which must draw the
  // argmax.
  const int64_t V = 32000;
  const auto logits = random_elems(static_cast<size_t>(5 * V), "fp32", rng, -4.0, 4.0);
  auto ld = on_device(logits.data(), logits.size());
  std::vector<int64_t> want_idx;
  for (int64_t r = 0; r < 5; ++r) {
    std::vector<double> row(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) {
      row[static_cast<size_t>(i)] =
          ref::load_elem(logits.data(), static_cast<size_t>(r * V + i), "fp32");
    }
    want_idx.push_back(ref::argmax(row));
  }
  DeviceBuffer idxo(5 * 8);
  for (int64_t rows : {3, 3, 5}) {
    idxo.fill(0xFF);
    auto in = make_tensor(ld->get(), {rows, V}, dl_dtype("fp32"));
    auto out = make_tensor(idxo.get(), {rows}, dl_dtype("int64"));
    REQUIRE(kjit_argmax(in.get(), out.get(), nullptr) == KJIT_SUCCESS);
    device_synchronize();
    std::vector<int64_t> got(static_cast<size_t>(rows));
    idxo.download(got.data(), got.size() * 8);
    for (int64_t r = 0; r < rows; ++r) CHECK(got[static_cast<size_t>(r)] == want_idx[r]);
  }
  {
    const uint64_t seed_offset[2] = {1234, 7};
    auto so = on_device(seed_offset, sizeof seed_offset);
    DeviceBuffer samples(4 * 4), valid(16);
    samples.fill(0xFF);
    valid.fill(0x5A);  // poison: neither 0 nor 1
    auto in = make_tensor(ld->get(), {4, V}, dl_dtype("fp32"));
    auto seed = make_tensor(so->get(), {1}, dl_dtype("int64"));
    auto offset = make_tensor(static_cast<char*>(so->get()) + 8, {1}, dl_dtype("int64"));
    auto st = make_tensor(samples.get(), {4}, dl_dtype("int32"));
    auto vt = make_tensor(valid.get(), {4}, DLDataType{kDLUInt, 8, 1});
    REQUIRE(kjit_top_k_top_p_sampling_from_logits(
                in.get(), nullptr, nullptr, nullptr, seed.get(), offset.get(), st.get(), vt.get(),
                SamplingOptions().top_k(1).top_p(0.9f).temperature(1.0f), nullptr) == KJIT_SUCCESS);
    device_synchronize();
    int32_t got[4];
    unsigned char ok[4];
    samples.download(got, sizeof got);
    valid.download(ok, sizeof ok);
    for (int r = 0; r < 4; ++r) {
      CHECK(ok[r] == 1);
      CHECK(got[r] == want_idx[static_cast<size_t>(r)]);
    }
  }
  trace::set_dir_for_testing("");

  const fs::path defs = dir.path() / "definitions", work = dir.path() / "workloads";
  const auto dec_def = kjit::util::read_file(defs / "batch_decode_q32_k8_d128_ps16.json");
  REQUIRE(dec_def.has_value());
  CHECK(*dec_def == kjit::ops::definition_json(kjit::ops::batch_decode_definition(
                        {kjit::ops::DType::kBF16, false, 32, 8, 128, 16, true})));
  const auto dec = lines(work / "batch_decode_q32_k8_d128_ps16.jsonl");
  REQUIRE(dec.size() == 1);
  CHECK(dec[0].at("axes") ==
        nlohmann::json(
            {{"batch_size", 2}, {"len_indptr", 3}, {"num_kv_indices", 4}, {"num_pages", 6}}));
  CHECK(dec[0].at("set").at("kv_len") == "32");  // 4 pages of 16 over 2 requests
  const auto merge = lines(work / "merge_states_h32_d128.jsonl");
  REQUIRE(merge.size() == 1);
  CHECK(merge[0].at("axes").at("seq_len") == 3);
  const auto am = lines(work / "argmax_v32000_fp32.jsonl");
  REQUIRE(am.size() == 2);
  CHECK(am[0].at("axes").at("batch_size") == 3);
  CHECK(am[1].at("axes").at("batch_size") == 5);
  const auto smp = lines(work / "top_k_top_p_sampling_from_logits_v32000_fp32.jsonl");
  REQUIRE(smp.size() == 1);
  CHECK(smp[0].at("op") == "top_k_top_p_sampling");
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 8);
  for (const char* name : {"batch_decode_q32_k8_d128_ps16", "argmax_v32000_fp32",
                           "top_k_top_p_sampling_from_logits_v32000_fp32"}) {
    INFO(name);
    CHECK(dry_run(work / (std::string(name) + ".jsonl"), dir.path()) == 0);
  }

  // Off again: a launch writes nothing more.
  auto in = make_tensor(ld->get(), {2, V}, dl_dtype("fp32"));
  auto out = make_tensor(idxo.get(), {2}, dl_dtype("int64"));
  REQUIRE(kjit_argmax(in.get(), out.get(), nullptr) == KJIT_SUCCESS);
  device_synchronize();
  CHECK(lines(work / "argmax_v32000_fp32.jsonl").size() == 2);
}
