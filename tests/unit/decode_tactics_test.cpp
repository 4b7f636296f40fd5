// Decode attention's tactics without a GPU (src/ops/attention/decode_tactics.*): names and their
// round trip, validity from the plan's own checks, the candidates (the heuristic's pick first),
// the bucket, and the plan-time choice (forced, blocklist, stored record, default) against a
// tuner with its own store; a stale tactic space is a miss.
#include <catch2/catch.hpp>

#include <dlpack/dlpack.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "ops/precompile.hpp"
#include "support/temp_dir.hpp"
#include "tune/autotuner.hpp"
#include "tune/tune_store.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
using ops::DecodeMerge;
using ops::DecodePlanner;
using ops::DecodeTactic;

namespace {

const DLDataType kBf16{kDLBfloat, 16, 1};
const DLDataType kE4m3{10, 8, 1};

// Requests of `pages` pages of 16 tokens each (GQA 32 / 8, head_dim 128), planned for 132 SMs
// without a device.
struct Shape {
  int batch = 1;
  int pages = 512;  // 8192 tokens
  int num_splits = 0;
  int window_left = -1;
  DLDataType kv = kBf16;
  std::vector<int32_t> indptr() const {
    std::vector<int32_t> p(static_cast<size_t>(batch) + 1);
    for (int b = 0; b <= batch; ++b) p[static_cast<size_t>(b)] = b * pages;
    return p;
  }
};

// The planner keeps a pointer to the page table: the shape owns it.
struct Planned {
  std::vector<int32_t> indptr;
  DecodePlanner planner;
  explicit Planned(const Shape& s)
      : indptr(s.indptr()),
        planner(indptr.data(), s.batch, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD, kBf16, s.kv, 0.0f, 0.0f,
                s.window_left, s.num_splits, 132, 0) {}
};

DecodeTactic tactic(const char* name) {
  const std::optional<DecodeTactic> t = DecodeTactic::parse(name);
  INFO(name);
  REQUIRE(t.has_value());
  return *t;
}

tune::Fingerprint fake_gpu() {
  return {"Fake H200", 132, 13000, "13.0", "0.0.0-test"};
}

std::unique_ptr<tune::Autotuner> make_tuner(const test::TempDir& dir, std::string block = "",
                                            std::string force = "",
                                            tune::TuneMode mode = tune::TuneMode::kStored) {
  tune::TuneSettings s;
  s.mode = mode;
  s.rules = tune::TacticRules(block, force);
  return std::make_unique<tune::Autotuner>(
      s, std::make_unique<tune::TuneStore>(dir.path() / "tuning"));
}

tune::TuneKey key_of(const DecodePlanner& p) {
  return {ops::kDecodeTuneOp, ops::kDecodeTacticSpace, p.bucket(), "eager-cold"};
}

void store(const tune::Autotuner& tuner, const tune::TuneKey& key, const std::string& tactic,
           const std::string& dflt) {
  tune::TuneRecord rec;
  rec.tactic = tactic;
  rec.default_tactic = dflt;
  rec.when = "2026-12-05T00:00:00Z";
  rec.tried = {{dflt, 20.0, 19.5, 21.0, 15}, {tactic, 15.0, 14.8, 15.3, 15}};
  tuner.store()->put(fake_gpu(), key, rec);
}

// plan_batch_decode of `s` choosing through `tuner`.
ops::DecodePlanData plan_with(const Shape& s, tune::Autotuner& tuner,
                              std::optional<tune::TuneMode> mode = std::nullopt) {
  const tune::Fingerprint fp = fake_gpu();
  ops::DecodeTuneRequest r;
  r.req.mode = mode;
  r.tuner = &tuner;
  r.fp = &fp;
  const std::vector<int32_t> ptr = s.indptr();
  return ops::plan_batch_decode(ptr.data(), s.batch, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD, kBf16,
                                s.kv, 0.0f, 0.0f, s.window_left, s.num_splits, 132, 0, nullptr, &r);
}

}  // namespace

TEST_CASE("decode tactics: names round-trip and only canonical names parse", "[tune][attention]") {
  DecodeTactic t;
  CHECK(t.name() == "planned");
  t.splits = 4;
  t.merge = DecodeMerge::kCluster;
  CHECK(t.name() == "split4_cluster");
  t.splits = 1;
  CHECK(t.name() == "split1");  // one split merges nothing
  t = {};
  t.splits = 8;
  t.merge = DecodeMerge::kKernel;
  t.stages = 3;
  CHECK(t.name() == "split8_kernel_s3");
  t = {};
  t.warps = 2;
  t.stage_tokens = 64;
  t.joint_tiles = 2;
  t.addr = 1;
  t.pdl = 0;
  CHECK(t.name() == "w2_ts64_jt2_addr64_pdl0");
  for (const char* name :
       {"planned", "split1", "split2_kernel", "split16_fused", "split4_cluster", "split8_kernel_s3",
        "fused", "cluster_hp2", "s3_w8_ts16_hp8",
        "split5_kernel_s2_w2_ts32_hp2_jt2_cps3_addr32_pdl1", "hp4", "addr64", "pdl0"}) {
    INFO(name);
    const std::optional<DecodeTactic> p = DecodeTactic::parse(name);
    REQUIRE(p.has_value());
    CHECK(p->name() == name);
  }
  for (const char* bad :
       {"", "split", "split0", "split04", "split1_kernel", "kernel_split4", "split4_kernel_kernel",
        "split4_kernel_fused", "s3_split4", "w0", "w2_w2", "addr16", "pdl2", "split4_", "_split4",
        "split4_cluster_x", "planned_w2", "split-1", "ts64_w2"}) {
    INFO(bad);
    CHECK_FALSE(DecodeTactic::parse(bad).has_value());
  }
  CHECK(tactic("split4_kernel") == tactic("split4_kernel"));
  CHECK_FALSE(tactic("split4_kernel") == tactic("split4_fused"));
}

TEST_CASE(
    "decode tactics: the heuristic's pick is the first candidate, every candidate plans as "
    "named",
    "[tune][attention]") {
  for (const Shape& s : {Shape{1, 512}, Shape{64, 256}, Shape{3, 1}, Shape{0, 0}, Shape{256, 128},
                         Shape{7, 40, 5}, Shape{2, 512, 0, 300}, Shape{16, 2048, 0, -1, kE4m3}}) {
    INFO("batch " << s.batch << " pages " << s.pages << " num_splits " << s.num_splits << " window "
                  << s.window_left);
    const Planned p(s);
    const std::vector<DecodeTactic> all = p.planner.tactics();
    REQUIRE_FALSE(all.empty());
    const DecodeTactic dflt = p.planner.default_tactic();
    CHECK(all.front() == dflt);
    CHECK(dflt.splits == p.planner.heuristic().split.max_splits);
    std::set<std::string> names;
    for (const DecodeTactic& t : all) {
      INFO(t.name());
      CHECK(names.insert(t.name()).second);  // one tactic, one name
      CHECK(DecodeTactic::parse(t.name()).has_value());
      if (t == dflt) continue;
      CHECK(p.planner.valid(t));
      const ops::DecodePlanData pl = p.planner.with(t);
      CHECK(pl.split.max_splits == t.splits);
      if (t.splits > 1) {
        CHECK(pl.cfg.cluster_merge == (t.merge == DecodeMerge::kCluster ? 1 : 0));
        CHECK(pl.fused_merge == (t.merge == DecodeMerge::kFused ? 1 : 0));
      }
      if (t.merge == DecodeMerge::kCluster) CHECK(t.splits <= ops::kDecodeClusterMax);
      if (t.stages != 0) CHECK(pl.cfg.stages == t.stages);
      if (s.num_splits > 0) CHECK(t.splits == dflt.splits);  // the caller's split count holds
    }
  }
  // A long request offers splits with every merge and the pipeline depths; a 16-token one
  // nothing but its one split and the depths.
  const Planned longer(Shape{1, 512});
  const std::vector<DecodeTactic> l = longer.planner.tactics();
  auto has = [](const std::vector<DecodeTactic>& v, const char* name) {
    return std::find(v.begin(), v.end(), tactic(name)) != v.end();
  };
  CHECK(has(l, "split1"));
  CHECK(has(l, "split8_fused"));
  CHECK(has(l, "split16_cluster"));
  CHECK_FALSE(has(l, "split24_cluster"));  // a cluster merges up to 16 splits
  CHECK(has(l, "split128_kernel"));
  const Planned shorter(Shape{3, 1});
  for (const DecodeTactic& t : shorter.planner.tactics()) CHECK(t.splits == 1);
}

TEST_CASE("decode tactics: validity is the plan's own checks", "[tune][attention]") {
  const Planned p(Shape{1, 512});
  CHECK(p.planner.valid(tactic("split16_cluster")));
  CHECK_FALSE(p.planner.valid(tactic("split17_cluster")));  // past a cluster
  CHECK_FALSE(p.planner.valid(tactic("cluster")));          // the wave model's 32 splits
  CHECK_FALSE(p.planner.valid(tactic("w3")));
  CHECK_FALSE(p.planner.valid(tactic("hp3")));
  CHECK_FALSE(p.planner.valid(tactic("s8_ts128")));  // more shared memory than a CTA may have
  CHECK_FALSE(p.planner.valid(tactic("jt2")));       // one tile per warp: nothing to pair
  CHECK(p.planner.valid(tactic("w2_ts64_jt2")));
  // A split count the lengths cannot reach is not that tactic: 16 tokens split at most 16 ways.
  const Planned tiny(Shape{1, 1});
  CHECK(tiny.planner.valid(tactic("split1")));
  CHECK(tiny.planner.valid(tactic("split16_kernel")));
  CHECK_FALSE(tiny.planner.valid(tactic("split32_kernel")));
  // With the caller's num_splits, only that count.
  const Planned fixed(Shape{1, 512, 4});
  CHECK(fixed.planner.valid(tactic("split4_fused")));
  CHECK_FALSE(fixed.planner.valid(tactic("split8_fused")));
  // Invalid tactics throw from with() with the plan's message.
  CHECK_THROWS_AS(p.planner.with(tactic("w3")), kjit::Error);
}

TEST_CASE("decode tactics: the bucket", "[tune][attention]") {
  CHECK(ops::decode_len_bucket(1) == 1);
  CHECK(ops::decode_len_bucket(1000) == 1024);
  CHECK(ops::decode_len_bucket(1024) == 1024);
  CHECK(ops::decode_len_bucket(1025) == 2048);
  const Planned a(Shape{5, 63});  // 1008 tokens
  CHECK(a.planner.bucket() ==
        "q=bf16,kv=bf16,batch=8,kv_len=1024,kv_heads=8,group=4,head_dim=128,page=16,layout=nhd,"
        "sms=132");
  // Batch and the longest length to powers of two: one bucket for 5..8 requests of 513..1024.
  CHECK(Planned(Shape{8, 64}).planner.bucket() == a.planner.bucket());
  CHECK(Planned(Shape{7, 33}).planner.bucket() == a.planner.bucket());
  CHECK(Planned(Shape{9, 63}).planner.bucket() != a.planner.bucket());
  CHECK(Planned(Shape{5, 65}).planner.bucket() != a.planner.bucket());
  // The window bounds the attended length; the cache dtype and the caller's split count are in.
  CHECK(Planned(Shape{5, 512, 0, 1000}).planner.bucket() == a.planner.bucket());
  CHECK(Planned(Shape{5, 63, 0, -1, kE4m3}).planner.bucket().find("kv=e4m3") != std::string::npos);
  CHECK(Planned(Shape{5, 63, 4}).planner.bucket() == a.planner.bucket() + ",splits=4");
}

TEST_CASE("decode tactics: a plan runs the stored tactic of its bucket", "[tune][attention]") {
  test::TempDir dir;
  auto tuner = make_tuner(dir);
  const Shape s{1, 512};
  const Planned p(s);
  const std::string dflt = p.planner.default_tactic().name();
  // Nothing stored: the heuristic, as an untuned plan.
  ops::DecodePlanData pl = plan_with(s, *tuner);
  CHECK(std::string(pl.tactic) == dflt);
  CHECK(std::string(pl.tactic_source) == "default");
  CHECK(pl.split.max_splits == p.planner.heuristic().split.max_splits);
  CHECK(pl.split.chunk == p.planner.heuristic().split.chunk);
  // Stored: a fresh tuner (its answers are remembered) plans the record's tactic.
  store(*tuner, key_of(p.planner), "split8_cluster", dflt);
  tuner = make_tuner(dir);
  pl = plan_with(s, *tuner);
  CHECK(std::string(pl.tactic) == "split8_cluster");
  CHECK(std::string(pl.tactic_source) == "stored");
  CHECK(pl.split.max_splits == 8);
  CHECK(pl.cfg.cluster_merge == 1);
  // Another shape of the same bucket gets it too; the caller's mode 0 ignores the store.
  CHECK(std::string(plan_with(Shape{1, 400}, *tuner).tactic) == "split8_cluster");
  pl = plan_with(s, *tuner, tune::TuneMode::kOff);
  CHECK(std::string(pl.tactic) == dflt);
  CHECK(pl.cfg.cluster_merge == 0);
  // The tuning modes (KJIT_AUTOTUNE=1, 2) measure nothing at plan time: the record runs.
  for (tune::TuneMode m : {tune::TuneMode::kUnseen, tune::TuneMode::kRetune}) {
    CHECK(std::string(plan_with(s, *tuner, m).tactic) == "split8_cluster");
    CHECK(std::string(plan_with(s, *make_tuner(dir, "", "", m)).tactic) == "split8_cluster");
  }
  // A stored tactic the call cannot run (16 tokens split at most 16 ways) gives the default.
  const Shape tiny{1, 1};
  store(*tuner, key_of(Planned(tiny).planner), "split32_kernel", "split1");
  CHECK(std::string(plan_with(tiny, *tuner).tactic) == "split1");
}

TEST_CASE("decode tactics: forced beats the blocklist and the store, the blocklist the store",
          "[tune][attention]") {
  test::TempDir dir;
  const Shape s{1, 512};
  const Planned p(s);
  const std::string dflt = p.planner.default_tactic().name();
  store(*make_tuner(dir), key_of(p.planner), "split8_cluster", dflt);
  {
    auto tuner = make_tuner(dir, "decode_attention:split8*");
    const ops::DecodePlanData pl = plan_with(s, *tuner);
    CHECK(std::string(pl.tactic) == dflt);
    CHECK(std::string(pl.tactic_source) == "default");
  }
  {
    auto tuner = make_tuner(dir, "decode_attention:*", "decode_attention:split2_fused");
    const ops::DecodePlanData pl = plan_with(s, *tuner);
    CHECK(std::string(pl.tactic) == "split2_fused");
    CHECK(std::string(pl.tactic_source) == "forced");
    CHECK(pl.fused_merge == 1);
    CHECK(pl.split.max_splits == 2);
  }
  {
    // A literal name outside the tuned space, valid here, can be forced (diagnosis).
    auto tuner = make_tuner(dir, "", "decode_attention:split5_kernel_w2");
    const ops::DecodePlanData pl = plan_with(s, *tuner);
    CHECK(std::string(pl.tactic) == "split5_kernel_w2");
    CHECK(pl.cfg.warps == 2);
    CHECK(pl.split.max_splits == 5);
  }
  {
    // A forced name that is not valid here is passed over: the store decides.
    auto tuner = make_tuner(dir, "", "decode_attention:split17_cluster");
    CHECK(std::string(plan_with(s, *tuner).tactic) == "split8_cluster");
  }
  {
    // A blocked default falls back to the first allowed candidate, which the plan runs.
    auto tuner = make_tuner(dir, "decode_attention:" + dflt + ",decode_attention:split8*");
    const ops::DecodePlanData pl = plan_with(s, *tuner);
    CHECK(std::string(pl.tactic) != dflt);
    CHECK(pl.split.max_splits == tactic(pl.tactic).splits);
  }
  {
    // Forced by the caller (tests, bench): no tuner is asked.
    const DecodeTactic f = tactic("split3_fused");
    const std::vector<int32_t> ptr = s.indptr();
    const ops::DecodePlanData pl =
        ops::plan_batch_decode(ptr.data(), 1, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD, kBf16, kBf16,
                               0.0f, 0.0f, -1, 0, 132, 0, &f);
    CHECK(std::string(pl.tactic) == "split3_fused");
    CHECK(std::string(pl.tactic_source) == "forced");
  }
}

TEST_CASE("decode tactics: a record of another tactic space is a miss", "[tune][attention]") {
  test::TempDir dir;
  const Shape s{1, 512};
  const Planned p(s);
  const std::string dflt = p.planner.default_tactic().name();
  auto tuner = make_tuner(dir);
  // Written under an older space: another key, never found for this one.
  tune::TuneKey old = key_of(p.planner);
  old.space_version = ops::kDecodeTacticSpace - 1;
  store(*tuner, old, "split8_cluster", dflt);
  CHECK(std::string(plan_with(s, *make_tuner(dir)).tactic) == dflt);
  // And a file at this key's path that says another space is refused, not used.
  const tune::TuneKey now = key_of(p.planner);
  tune::TuneRecord rec;
  rec.tactic = "split8_cluster";
  rec.default_tactic = dflt;
  rec.when = "2026-12-05T00:00:00Z";
  util::make_dirs(tuner->store()->path_of(fake_gpu(), now).parent_path());
  util::write_file_atomic(tuner->store()->path_of(fake_gpu(), now),
                          tune::record_json(fake_gpu(), old, rec));
  CHECK_FALSE(tuner->store()->find(fake_gpu(), now).has_value());
  CHECK(std::string(plan_with(s, *make_tuner(dir)).tactic) == dflt);
}

TEST_CASE("decode tactics: a record's tactic maps to the kernels its run asks for",
          "[tune][attention][aot]") {
  // fp16, GQA 32 / 8 of head_dim 64: the catalog has no cluster merge and no 2-stage ring there.
  const DLDataType kF16{kDLFloat, 16, 1};
  const int batch = 8, pages = 256;  // 4096 tokens each
  std::vector<int32_t> ptr(batch + 1);
  for (int b = 0; b <= batch; ++b) ptr[static_cast<size_t>(b)] = b * pages;
  const DecodePlanner planner(ptr.data(), batch, 32, 8, 64, 16, KJIT_KV_LAYOUT_NHD, kF16, kF16,
                              0.0f, 0.0f, -1, 0, 132, 0);
  const std::string bucket = planner.bucket();
  const jit::ArchTarget sm80{8, 0, false}, sm90a{9, 0, true};
  for (const char* name :
       {"split4_cluster", "split8_kernel_s2", "split1", "split16_fused", "split4_cluster_addr64"}) {
    INFO(name);
    const DecodeTactic t = tactic(name);
    REQUIRE(planner.valid(t));
    // The run's kernel: the plan of the forced tactic, 16-byte rows, 32- or 64-bit offsets.
    const ops::DecodePlanData pl =
        ops::plan_batch_decode(ptr.data(), batch, 32, 8, 64, 16, KJIT_KV_LAYOUT_NHD, kF16, kF16,
                               0.0f, 0.0f, -1, 0, 132, 0, &t);
    ops::DecodeConfig cfg = pl.cfg;
    cfg.cp_bytes = 16;
    const std::vector<jit::Spec> specs = ops::decode_tactic_specs(bucket, name, sm90a);
    REQUIRE(specs.size() == (t.addr == 1 ? 1u : 2u));
    CHECK(specs[0].uri == ops::decode_spec(cfg).uri);
    if (t.addr != 1) {
      cfg.addr = 1;
      CHECK(specs[1].uri == ops::decode_spec(cfg).uri);
    }
  }
  CHECK(ops::decode_tactic_specs(bucket, "split4_cluster", sm90a)[0].uri.find("cluster") !=
        std::string::npos);
  // Not valid for the bucket: a cluster of 32; a split the lengths never reach.
  CHECK(ops::decode_tactic_specs(bucket, "split32_cluster", sm90a).empty());
  CHECK(ops::decode_tactic_specs(bucket, "split3_kernel_s9", sm90a).empty());
  // The cluster kernels are sm_90's: tactic_specs_for keeps them to sm_90a; a merge kernel plan
  // runs on both (each at its arch's shared memory).
  const auto cluster = ops::tactic_specs_for("decode_attention", ops::kDecodeTacticSpace, bucket,
                                             "split4_cluster", {sm80, sm90a});
  REQUIRE(cluster.size() == 2);
  for (const ops::TacticSpec& k : cluster) CHECK(k.target == sm90a);
  const auto kernel = ops::tactic_specs_for("decode_attention", ops::kDecodeTacticSpace, bucket,
                                            "split4_kernel_s2", {sm80, sm90a});
  CHECK(kernel.size() == 4);
  // What does not map is an error naming why.
  auto error_of = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
      return std::string(e.what());
    }
    FAIL("no error");
    return std::string();
  };
  CHECK_THAT(error_of([&] { ops::decode_tactic_specs(bucket, "split4_warp", sm90a); }),
             Catch::Contains("not a decode_attention tactic"));
  CHECK_THAT(error_of([&] { ops::decode_tactic_specs("q=fp16,batch=8", "split1", sm90a); }),
             Catch::Contains("has no"));
  std::string odd = bucket;
  odd.replace(odd.find("batch=8"), 7, "batch=6");  // not a power of two: no bucket reads so
  CHECK_THAT(error_of([&] { ops::decode_tactic_specs(odd, "split1", sm90a); }),
             Catch::Contains("reads back as"));
  CHECK_THAT(error_of([&] {
               ops::tactic_specs_for("decode_attention", ops::kDecodeTacticSpace + 1, bucket,
                                     "split1", {sm90a});
             }),
             Catch::Contains("tactic space"));
  CHECK_THAT(error_of([&] {
               ops::tactic_specs_for("decode_attention", ops::kDecodeTacticSpace, bucket,
                                     "split32_cluster", {sm80, sm90a});
             }),
             Catch::Contains("not valid"));
  CHECK_THAT(error_of([&] { ops::tactic_specs_for("rmsnorm", 1, "x=1", "a", {sm90a}); }),
             Catch::Contains("not an op with tactics"));
}
