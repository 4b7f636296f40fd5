// kjit_gemm's tactics for the autotuner without a GPU (src/ops/gemm/gemm_tactics.*): names that
// round-trip, the tactic list and its validity on a Hopper-like target and elsewhere, the shape
// bucket, the heuristic's pick always first among the candidates (and the kernel it names being
// the one the untuned call runs), and the choice rules over those names with a fake timer: a
// blocklisted default falls back, a forced tactic that is not valid for the call is reported and
// ignored. Also the options' tuning fields through the C ABI, and the decode kernel's catalog
// specs (every token tile and ring depth, the tactics' deep rings among them; bf16 in and out)
// compiled for sm_90a without spills.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gemm/gemm_fp8_params.h"
#include "kjit/kjit.h"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "ops/precompile.hpp"
#include "support/decode_catalog.hpp"
#include "support/gpu.hpp"
#include "support/temp_dir.hpp"
#include "tune/autotuner.hpp"
#include "util/error.hpp"

using namespace kjit;
namespace ops = kjit::ops;

namespace {

// cp_async_ok: the rows are 16-byte aligned even where TMA cannot describe the operands (a k
// that is not a multiple of 8).
ops::GemmTarget hopper(int smem = 232448, bool tma_ok = true) {
  ops::GemmTarget t;
  t.cc_major = 9;
  t.cc_minor = 0;
  t.max_smem_optin = smem;
  t.sm_count = 132;
  t.tma_ok = tma_ok;
  t.cp_async_ok = true;
  return t;
}

std::vector<std::string> names_of(const std::vector<ops::GemmTactic>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts) out.push_back(t.name());
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The heuristic's tactic for a call (the decode path's split as a fixed stand-in for the one the
// loaded kernel's residency gives).
ops::GemmTactic default_of(int64_t m, int64_t n, int64_t k, const ops::GemmTarget& t) {
  const ops::GemmConfig c = ops::select_gemm(ops::DType::kBF16, ops::DType::kBF16, m, n, k, t);
  return ops::gemm_tactic_of(c, c.path == ops::GemmPath::kSm90Decode ? 3 : 0);
}

// Samples of `us` with a little spread, the shape the autotuner's summaries expect.
std::vector<double> samples(double us) {
  std::vector<double> s;
  for (int i = 0; i < 15; ++i) s.push_back(us * (1.0 + 0.001 * (i % 5)));
  return s;
}

tune::Autotuner tuner(const test::TempDir& dir, const std::string& block,
                      const std::string& force) {
  tune::TuneSettings s;
  s.mode = tune::TuneMode::kUnseen;
  s.rules = tune::TacticRules(block, force);
  return tune::Autotuner(s, std::make_unique<tune::TuneStore>(dir.path() / "tuning"));
}

const tune::Fingerprint kH200{"NVIDIA H200", 132, 13000, "13.0", "0.4.0"};

}  // namespace

TEST_CASE("gemm tactics: names round-trip and only canonical spellings parse", "[gemm][tune]") {
  for (const char* name :
       {"simt", "sm90_bn128_s6", "sm90_bn256_s3", "sm90_bn128_s6_p", "sm90_bn256_s4_p",
        "sm90_bn256_s4_p2", "sm90_bn128_s6_p2", "decode_t16_split1", "decode_t128_split8",
        "decode_t64_s9_split4", "decode_t16_s12_split1", "mma_bn64_s4", "mma_bn128_s3"}) {
    INFO(name);
    const auto t = ops::GemmTactic::parse(name);
    REQUIRE(t);
    CHECK(t->name() == name);
  }
  CHECK(ops::GemmTactic::parse("sm90_bn128_s6")->path == ops::GemmPath::kSm90);
  CHECK_FALSE(ops::GemmTactic::parse("sm90_bn128_s6")->persistent);
  const auto p = ops::GemmTactic::parse("sm90_bn256_s4_p");
  REQUIRE(p);
  CHECK(p->path == ops::GemmPath::kSm90);
  CHECK(p->bn == 256);
  CHECK(p->stages == 4);
  CHECK(p->persistent);
  CHECK_FALSE(p->pair);
  CHECK_FALSE(*p == *ops::GemmTactic::parse("sm90_bn256_s4"));
  const auto p2 = ops::GemmTactic::parse("sm90_bn256_s4_p2");
  REQUIRE(p2);
  CHECK(p2->persistent);
  CHECK(p2->pair);
  CHECK(p2->bn == 256);
  CHECK_FALSE(*p2 == *p);
  CHECK(ops::GemmTactic::parse("decode_t32_split4")->split == 4);
  CHECK(ops::GemmTactic::parse("decode_t32_split4")->stages == 0);  // the tile's own ring
  const auto deep = ops::GemmTactic::parse("decode_t64_s9_split4");
  REQUIRE(deep);
  CHECK(deep->path == ops::GemmPath::kSm90Decode);
  CHECK(deep->tokens == 64);
  CHECK(deep->stages == 9);
  CHECK(deep->split == 4);
  CHECK_FALSE(*deep == *ops::GemmTactic::parse("decode_t64_split4"));
  const auto mma = ops::GemmTactic::parse("mma_bn64_s3");
  REQUIRE(mma);
  CHECK(mma->path == ops::GemmPath::kMmaSm80);
  CHECK(mma->bn == 64);
  CHECK(mma->stages == 3);
  for (const char* bad : {"",
                          "SIMT",
                          "sm90_bn128",
                          "sm90_bn0128_s6",
                          "sm90_bn128_s6x",
                          "decode_t16_split",
                          "decode_t16_split4 ",
                          "gemm:simt",
                          "sm90-bn128-s6",
                          "mma_bn064_s3",
                          "mma_bn64",
                          "mma_sm80_bn64_s3",
                          "mma_bn64_s3_",
                          "sm90_bn128_s6_P",
                          "sm90_bn128_s6__p",
                          "sm90_bn128_s6_p_p",
                          "sm90_bn128_s6p",
                          "sm90_bn128_p",
                          "sm90_bn0128_s6_p",
                          "_p",
                          "sm90_bn128_s6_p ",
                          "sm90_bn128_s6_p3",
                          "sm90_bn128_s6_p02",
                          "sm90_bn128_s6_p2_p",
                          "sm90_bn128_s6_2",
                          "mma_bn64_s4_p2",
                          "decode_t16_split1_p2",
                          "mma_bn64_s4_p",
                          "decode_t16_split1_p",
                          "decode_t64_s09_split4",
                          "decode_t64_s9",
                          "decode_t64_s9_split",
                          "decode_t64_split4_s9",
                          "decode_t64_s_split4",
                          "simt_p"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(ops::GemmTactic::parse(bad));
  }
}

TEST_CASE("gemm tactics: the candidates of decode and large shapes on sm_90", "[gemm][tune]") {
  const ops::GemmTarget t = hopper();
  // m = 1: the decode kernel at every split, the four sm90 tiles and the fallback; the mma_sm80
  // tiles only where no sm90 tile runs.
  const ops::GemmTactic d1 = default_of(1, 4096, 4096, t);
  CHECK(d1.name() == "decode_t16_split3");
  const auto one = names_of(ops::gemm_tactics(d1, ops::gemm_m_bucket(1), 4096, 4096, t));
  CHECK(one.front() == "decode_t16_split3");
  // Each split at the tile's ring (two blocks an SM) and at the deepest one of one block an SM.
  const int deep16 = ops::gemm_decode_stages(16, t.max_smem_optin, 1);
  CHECK(deep16 > ops::gemm_decode_stages(16, t.max_smem_optin));
  CHECK(one.size() == 8 + 8 + 4 + 1);
  for (int s = 1; s <= 8; ++s) {
    CHECK(has(one, "decode_t16_split" + std::to_string(s)));
    CHECK(has(one, "decode_t16_s" + std::to_string(deep16) + "_split" + std::to_string(s)));
  }
  for (const char* s : {"sm90_bn128_s4", "sm90_bn128_s6", "sm90_bn256_s3", "sm90_bn256_s4", "simt"})
    CHECK(has(one, s));
  for (const char* s : {"mma_bn64_s3", "mma_bn64_s4", "mma_bn128_s3", "mma_bn128_s4"})
    CHECK_FALSE(has(one, s));
  CHECK(std::set<std::string>(one.begin(), one.end()).size() == one.size());
  // m = 100 rounds up to the 128-token tile; m = 4096 has no decode tactic.
  const auto mid =
      names_of(ops::gemm_tactics(default_of(100, 4096, 14336, t), 128, 4096, 14336, t));
  CHECK(has(mid, "decode_t128_split1"));
  CHECK_FALSE(has(mid, "decode_t64_split1"));
  const ops::GemmTactic big = default_of(4096, 28672, 4096, t);
  // 32 x 112 tiles of 256 at K 4096 on 132 SMs: persistent blocks by default.
  CHECK(big.name() == "sm90_bn256_s4_p");
  const auto large = names_of(ops::gemm_tactics(big, 4096, 28672, 4096, t));
  // 32 x 224 tiles of 128 on 132 SMs: the persistent forms join the candidates (the pairs, _p2,
  // are forced only so far).
  CHECK(large == std::vector<std::string>{"sm90_bn256_s4_p", "sm90_bn128_s4", "sm90_bn128_s6",
                                          "sm90_bn256_s3", "sm90_bn256_s4", "sm90_bn128_s6_p",
                                          "simt"});
  CHECK(default_of(4096, 28672, 8192, t).name() == "sm90_bn256_s4");
  CHECK(default_of(4096, 6144, 4096, t).name() == "sm90_bn256_s4");
  // Where every block has one 128-wide tile at most they would time the same work: not timed.
  const auto few =
      names_of(ops::gemm_tactics(default_of(1024, 2048, 4096, t), 1024, 2048, 4096, t));
  CHECK_FALSE(has(few, "sm90_bn128_s6_p"));
  CHECK_FALSE(has(few, "sm90_bn256_s4_p"));
  CHECK(has(few, "sm90_bn128_s6"));
}

TEST_CASE("gemm tactics: validity follows the launch paths' checks", "[gemm][tune]") {
  const auto valid = [](const char* name, int64_t m, int64_t n, int64_t k,
                        const ops::GemmTarget& t) {
    return ops::gemm_tactic_valid(*ops::GemmTactic::parse(name), m, n, k, t);
  };
  CHECK(valid("sm90_bn256_s4", 512, 4096, 4096, hopper()));
  // Shared memory: 150 KB holds 4 stages of 128 or 3 of 256, not 6 or 4.
  CHECK(valid("sm90_bn128_s4", 512, 4096, 4096, hopper(150000)));
  CHECK(valid("sm90_bn256_s3", 512, 4096, 4096, hopper(150000)));
  CHECK_FALSE(valid("sm90_bn128_s6", 512, 4096, 4096, hopper(150000)));
  CHECK_FALSE(valid("sm90_bn256_s4", 512, 4096, 4096, hopper(150000)));
  // Tiles and stages outside the kernel's forms.
  CHECK_FALSE(valid("sm90_bn64_s4", 512, 4096, 4096, hopper()));
  CHECK_FALSE(valid("sm90_bn128_s1", 512, 4096, 4096, hopper()));
  CHECK_FALSE(valid("sm90_bn128_s9", 512, 4096, 4096, hopper()));
  // The decode tile must hold the bucket's rows and be the narrowest that does.
  CHECK(valid("decode_t32_split4", 32, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t16_split4", 32, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t64_split4", 32, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t128_split4", 256, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t32_split9", 32, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t32_split0", 32, 4096, 4096, hopper()));
  // A named ring: at least 2 stages, within the shared memory of one block (64 tokens: 9 stages
  // of 24 KB fit 227 KB, 10 do not).
  CHECK(valid("decode_t64_s9_split4", 64, 4096, 4096, hopper()));
  CHECK(valid("decode_t64_s2_split4", 64, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t64_s10_split4", 64, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t64_s1_split4", 64, 4096, 4096, hopper()));
  CHECK_FALSE(valid("decode_t64_s9_split4", 64, 4096, 4096, hopper(150000)));
  // The config a deeper ring runs, and the default's tactic (the selection's ring, unnamed).
  const ops::GemmConfig dc = ops::gemm_config_of(*ops::GemmTactic::parse("decode_t64_s9_split4"),
                                                 ops::DType::kBF16, ops::DType::kBF16, hopper());
  CHECK(dc.path == ops::GemmPath::kSm90Decode);
  CHECK(dc.tokens == 64);
  CHECK(dc.stages == 9);
  const ops::GemmConfig dd = ops::gemm_config_of(*ops::GemmTactic::parse("decode_t64_split4"),
                                                 ops::DType::kBF16, ops::DType::kBF16, hopper());
  CHECK(dd.stages == ops::gemm_decode_stages(64, hopper().max_smem_optin));
  CHECK(ops::gemm_tactic_of(dd, 4).name() == "decode_t64_split4");
  CHECK(ops::gemm_spec(dc).uri != ops::gemm_spec(dd).uri);
  // The persistent form is valid exactly where the one-tile kernel is: any shape (odd edges, one
  // tile, more tiles than SMs), the same shared memory, the same devices and operands.
  for (const char* tile : {"sm90_bn128_s4", "sm90_bn128_s6", "sm90_bn256_s3", "sm90_bn256_s4"}) {
    for (const ops::GemmTarget& t : {hopper(), hopper(150000), hopper(232448, false)}) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
               {1, 8, 8}, {1024, 3000, 1000}, {8192, 28672, 4096}, {4096, 1 << 20, 72}}) {
        INFO(tile << " m " << m << " n " << n << " k " << k << " smem " << t.max_smem_optin);
        CHECK(valid(tile, m, n, k, t) == valid((std::string(tile) + "_p").c_str(), m, n, k, t));
      }
    }
  }
  CHECK(valid("sm90_bn128_s6_p", 1024, 3000, 1000, hopper()));
  // No other path has a persistent form, however the tactic was built.
  ops::GemmTactic mma_p = *ops::GemmTactic::parse("mma_bn64_s4");
  mma_p.persistent = true;
  CHECK_FALSE(ops::gemm_tactic_valid(mma_p, 512, 4096, 4096, hopper()));
  // The config a persistent tactic runs, and back.
  const ops::GemmConfig pc = ops::gemm_config_of(*ops::GemmTactic::parse("sm90_bn128_s6_p"),
                                                 ops::DType::kBF16, ops::DType::kF32, hopper());
  CHECK(pc.path == ops::GemmPath::kSm90);
  CHECK(pc.persistent == 1);
  CHECK(ops::gemm_tactic_of(pc, 0).name() == "sm90_bn128_s6_p");
  // A pair is a persistent form; its config is persistent 2, and back.
  ops::GemmTactic pair_only = *ops::GemmTactic::parse("sm90_bn128_s6");
  pair_only.pair = true;
  CHECK_FALSE(ops::gemm_tactic_valid(pair_only, 1024, 3000, 1000, hopper()));
  CHECK(valid("sm90_bn256_s4_p2", 1024, 3000, 1000, hopper()));
  const ops::GemmConfig pp = ops::gemm_config_of(*ops::GemmTactic::parse("sm90_bn256_s4_p2"),
                                                 ops::DType::kBF16, ops::DType::kBF16, hopper());
  CHECK(pp.persistent == 2);
  CHECK(ops::gemm_tactic_of(pp, 0).name() == "sm90_bn256_s4_p2");
  // TMA: operands it cannot describe, or another device, leave the mma_sm80 kernel (where the
  // rows are 16-byte aligned) and the fallback.
  const ops::GemmTarget a100 = [] {
    ops::GemmTarget a = hopper();
    a.cc_major = 8;
    return a;
  }();
  const std::vector<std::string> mma_and_simt = {"mma_bn64_s4", "mma_bn128_s3", "mma_bn64_s3",
                                                 "mma_bn128_s4", "simt"};
  for (const ops::GemmTarget& t : {hopper(232448, false), a100}) {
    CHECK_FALSE(valid("sm90_bn128_s6", 512, 4096, 4096, t));
    CHECK_FALSE(valid("decode_t16_split1", 1, 4096, 4096, t));
    CHECK(valid("simt", 512, 4096, 4096, t));
    CHECK(valid("mma_bn128_s4", 512, 4096, 4096, t));
    const ops::GemmTactic d = default_of(7, 4096, 4096, t);
    CHECK(d.name() == "mma_bn64_s4");  // 1 x 32 tiles of 128 leave SMs idle
    CHECK(names_of(ops::gemm_tactics(d, 8, 4096, 4096, t)) == mma_and_simt);
  }
  // Rows that are not 16-byte aligned: only the fallback.
  ops::GemmTarget unaligned = hopper(232448, false);
  unaligned.cp_async_ok = false;
  CHECK_FALSE(valid("mma_bn64_s4", 512, 4096, 4096, unaligned));
  CHECK(names_of(ops::gemm_tactics(default_of(7, 4096, 4096, unaligned), 8, 4096, 4096,
                                   unaligned)) == std::vector<std::string>{"simt"});
  // mma_sm80: the kernel's widths and depths, on any sm_80+ device, within its shared memory.
  CHECK_FALSE(valid("mma_bn256_s3", 512, 4096, 4096, a100));
  CHECK_FALSE(valid("mma_bn128_s1", 512, 4096, 4096, a100));
  CHECK_FALSE(valid("mma_bn128_s7", 512, 4096, 4096, a100));
  CHECK(valid("mma_bn128_s6", 512, 4096, 4096, a100));
  CHECK_FALSE(valid("mma_bn128_s6", 512, 4096, 4096, hopper(65536)));
  ops::GemmTarget turing = a100;
  turing.cc_major = 7;
  CHECK_FALSE(valid("mma_bn64_s4", 512, 4096, 4096, turing));
  // Past the fallback's grid nothing is valid.
  CHECK_FALSE(valid("simt", int64_t{1} << 23, 64, 64, hopper(232448, false)));
}

TEST_CASE("gemm tactics: the bucket keeps N, K, dtypes and epilogue exact, M a power of two",
          "[gemm][tune]") {
  CHECK(ops::gemm_m_bucket(1) == 1);
  CHECK(ops::gemm_m_bucket(3) == 4);
  CHECK(ops::gemm_m_bucket(16) == 16);
  CHECK(ops::gemm_m_bucket(17) == 32);
  CHECK(ops::gemm_m_bucket(4097) == 8192);
  CHECK(ops::gemm_bucket(ops::DType::kBF16, ops::DType::kF32, 17, 4096, 14336, true, false) ==
        "dtype=bf16,out=fp32,m=32,n=4096,k=14336,bias=1,beta=0");
  CHECK(ops::gemm_bucket(ops::DType::kF16, ops::DType::kF16, 32, 4095, 14336, false, true) ==
        "dtype=fp16,out=fp16,m=32,n=4095,k=14336,bias=0,beta=1");
}

TEST_CASE("gemm tactics: the default is a valid candidate and names the untuned kernel",
          "[gemm][tune]") {
  // Odd sizes and both sides of every heuristic boundary (64 / 128 rows, 512 rows).
  for (const ops::GemmTarget& t : {hopper(), hopper(232448, false), hopper(150000)}) {
    for (int64_t m :
         {1, 3, 16, 17, 63, 64, 65, 100, 127, 128, 129, 255, 300, 511, 512, 513, 4095}) {
      for (int64_t n : {1, 129, 4096, 28672}) {
        for (int64_t k : {8, 4096, 14336}) {
          INFO("m " << m << " n " << n << " k " << k << " smem " << t.max_smem_optin << " tma "
                    << t.tma_ok);
          const ops::GemmConfig c =
              ops::select_gemm(ops::DType::kBF16, ops::DType::kBF16, m, n, k, t);
          const ops::GemmTactic d = default_of(m, n, k, t);
          const auto list = ops::gemm_tactics(d, ops::gemm_m_bucket(m), n, k, t);
          REQUIRE(list.front() == d);
          for (const auto& x : list)
            CHECK(ops::gemm_tactic_valid(x, ops::gemm_m_bucket(m), n, k, t));
          const ops::GemmConfig back = ops::gemm_config_of(d, c.dtype, c.out_dtype, t);
          CHECK(back.path == c.path);
          CHECK(back.bn == c.bn);
          CHECK(back.stages == c.stages);
          CHECK(back.tokens == c.tokens);
          // Persistent blocks only where a block walks many short tiles (K <= 4096, more than
          // eight tiles an SM).
          const int64_t tiles = (m + 127) / 128 * ((n + c.bn - 1) / std::max(c.bn, 1));
          const bool many = c.path == ops::GemmPath::kSm90 && k <= 4096 && tiles > 8 * 132;
          CHECK(c.persistent == (many ? 1 : 0));
          CHECK(d.persistent == many);
        }
      }
    }
  }
}

TEST_CASE("gemm tactics: a blocklisted default falls back, an invalid forced tactic is ignored",
          "[gemm][tune]") {
  const ops::GemmTarget t = hopper();
  const ops::GemmTactic d = default_of(16, 4096, 14336, t);
  const auto names = names_of(ops::gemm_tactics(d, 16, 4096, 14336, t));
  const tune::TuneKey key{
      ops::kGemmTuneOp, ops::kGemmTacticSpace,
      ops::gemm_bucket(ops::DType::kBF16, ops::DType::kBF16, 16, 4096, 14336, false, false),
      "eager-cold"};
  std::map<std::string, int> timed;
  const tune::Measure fake = [&](const std::string& name) {
    ++timed[name];
    return samples(name == "sm90_bn128_s4" ? 5.0 : 20.0);
  };
  {
    test::TempDir dir;
    tune::Autotuner a = tuner(dir, "gemm:decode_*", "");
    const tune::Choice c = a.choose(kH200, key, names, d.name(), nullptr);
    CHECK(c.tactic == "sm90_bn128_s4");  // the first allowed after the blocked decode tactics
    CHECK(c.note.find("default " + d.name() + " blocked") != std::string::npos);
  }
  {
    test::TempDir dir;
    tune::Autotuner a = tuner(dir, "", "gemm:sm90_bn64_s4,gemm:decode_t64_*");
    const tune::Choice c = a.choose(kH200, key, names, d.name(), nullptr, tune::TuneMode::kOff);
    CHECK(c.tactic == d.name());
    CHECK(c.source == tune::Choice::Source::kDefault);
    CHECK(c.note.find("names no valid tactic") != std::string::npos);
    CHECK(c.note.find("gemm:sm90_bn64_s4") != std::string::npos);
  }
  {
    // Tuned over the GEMM names: the fast tactic wins, every allowed one is timed once, the
    // blocked ones never.
    test::TempDir dir;
    tune::Autotuner a = tuner(dir, "gemm:simt", "");
    const tune::Choice c = a.choose(kH200, key, names, d.name(), &fake);
    CHECK(c.tactic == "sm90_bn128_s4");
    CHECK(c.source == tune::Choice::Source::kTuned);
    CHECK(timed.count("simt") == 0);
    CHECK(timed[d.name()] == 2);  // first and again last
    CHECK(timed["sm90_bn256_s4"] == 1);
    CHECK(timed.size() == names.size() - 1);
    // Asked again without a timer under re-tuning (a captured stream): the stored answer.
    tune::Autotuner b = tuner(dir, "gemm:simt", "");
    const tune::Choice s = b.choose(kH200, key, names, d.name(), nullptr, tune::TuneMode::kRetune);
    CHECK(s.tactic == "sm90_bn128_s4");
    CHECK(s.source == tune::Choice::Source::kStored);
  }
  {
    // Without a stored result a call that cannot measure gets the default, not remembered.
    test::TempDir dir;
    tune::Autotuner a = tuner(dir, "", "");
    const tune::Choice c = a.choose(kH200, key, names, d.name(), nullptr);
    CHECK(c.tactic == d.name());
    CHECK_FALSE(c.final);
    CHECK(a.choose(kH200, key, names, d.name(), &fake).tactic == "sm90_bn128_s4");
  }
}

TEST_CASE("gemm abi: the tuning options default to the process's and are checked",
          "[c_abi][gemm][tune]") {
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  CHECK(o.autotune == -1);
  CHECK(o.tune_timing == KJIT_TUNE_EAGER_COLD);
  auto a = test::make_tensor(reinterpret_cast<void*>(0x10000000), {4, 64}, test::dl_dtype("bf16"));
  auto b = test::make_tensor(reinterpret_cast<void*>(0x20000000), {32, 64}, test::dl_dtype("bf16"));
  auto out =
      test::make_tensor(reinterpret_cast<void*>(0x30000000), {4, 32}, test::dl_dtype("bf16"));
  for (int bad : {-2, 3}) {
    o.autotune = bad;
    CHECK(kjit_gemm(a.get(), b.get(), nullptr, out.get(), &o, nullptr) ==
          KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kjit_last_error()).find("autotune") != std::string::npos);
  }
  o.autotune = 1;
  for (int bad : {-1, 4}) {
    o.tune_timing = bad;
    CHECK(kjit_gemm(a.get(), b.get(), nullptr, out.get(), &o, nullptr) ==
          KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kjit_last_error()).find("tune_timing") != std::string::npos);
  }
  o.tune_timing = KJIT_TUNE_EAGER_COLD;
  CHECK(o.weights_early == 0);
  for (int bad : {-1, 2}) {
    o.weights_early = bad;
    CHECK(kjit_gemm(a.get(), b.get(), nullptr, out.get(), &o, nullptr) ==
          KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(kjit_last_error()).find("weights_early") != std::string::npos);
  }
  // A caller built before the fields existed passes a shorter struct: its bytes past struct_size
  // are not read (the call fails on its out shape instead, before any device is needed).
  o.struct_size = offsetof(kjit_gemm_options, autotune);
  o.autotune = 99;
  o.tune_timing = 99;
  o.weights_early = 99;
  auto wrong =
      test::make_tensor(reinterpret_cast<void*>(0x30000000), {4, 31}, test::dl_dtype("bf16"));
  CHECK(kjit_gemm(a.get(), b.get(), nullptr, wrong.get(), &o, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  const std::string err = kjit_last_error();
  INFO(err);
  CHECK(err.find("out") != std::string::npos);
  CHECK(err.find("autotune") == std::string::npos);
  CHECK(err.find("tune_timing") == std::string::npos);
  CHECK(err.find("weights_early") == std::string::npos);
}

TEST_CASE("gemm tactics: a record's tactic maps to the kernel its call runs", "[gemm][tune][aot]") {
  const auto bf16 = ops::DType::kBF16;
  const std::string bucket = ops::gemm_bucket(bf16, bf16, 16, 4096, 4096, false, false);
  const jit::ArchTarget sm80{8, 0, false}, sm90{9, 0, false}, sm90a{9, 0, true};
  // On an H200 (227 KB per block): the config kjit_gemm builds for the tactic.
  for (const char* name :
       {"sm90_bn256_s3", "sm90_bn256_s4_p", "decode_t16_split4", "mma_bn64_s3", "simt"}) {
    INFO(name);
    const std::optional<ops::GemmTactic> t = ops::GemmTactic::parse(name);
    REQUIRE(t.has_value());
    const std::vector<jit::Spec> specs = ops::gemm_tactic_specs(bucket, name, sm90a);
    REQUIRE(specs.size() == 1);
    // A beta-0 bucket's out is taken as TMA-ready: the sm90 tiles' TMA-store epilogue.
    ops::GemmTarget staged = hopper();
    staged.tma_store_ok = true;
    CHECK(specs[0].uri == ops::gemm_spec(ops::gemm_config_of(*t, bf16, bf16, staged)).uri);
    CHECK((specs[0].uri.find("_tma_out_1") != std::string::npos) ==
          (t->path == ops::GemmPath::kSm90));
  }
  // With beta the old out is read: the register epilogue.
  const std::string beta_bucket = ops::gemm_bucket(bf16, bf16, 16, 4096, 4096, false, true);
  CHECK(ops::gemm_tactic_specs(beta_bucket, "sm90_bn256_s3", sm90a).at(0).uri.find("tma_out") ==
        std::string::npos);
  CHECK(ops::gemm_tactic_specs(bucket, "sm90_bn256_s4_p", sm90a).at(0).uri.find("persistent_1") !=
        std::string::npos);
  CHECK(ops::gemm_tactic_specs(bucket, "sm90_bn256_s4", sm90a).at(0).uri.find("persistent") ==
        std::string::npos);
  CHECK(ops::gemm_tactic_specs(bucket, "sm90_bn256_s4_p2", sm90a).at(0).uri.find("pair_1") !=
        std::string::npos);
  CHECK(ops::gemm_tactic_specs(bucket, "sm90_bn256_s4_p", sm90a).at(0).uri.find("pair") ==
        std::string::npos);
  // Not valid there: wgmma on sm_80, a token tile wider than the bucket's rows.
  CHECK(ops::gemm_tactic_specs(bucket, "sm90_bn256_s3", sm80).empty());
  CHECK(ops::gemm_tactic_specs(bucket, "sm90_bn256_s4_p", sm80).empty());
  CHECK(ops::gemm_tactic_specs(bucket, "decode_t32_split4", sm90a).empty());
  CHECK(ops::gemm_tactic_specs(bucket, "mma_bn64_s3", sm80).size() == 1);
  // tactic_specs_for keeps each spec to its arch families: the wgmma kernel is sm_90a's only.
  const auto k = ops::tactic_specs_for("gemm", ops::kGemmTacticSpace, bucket, "sm90_bn256_s3",
                                       {sm80, sm90, sm90a});
  REQUIRE(k.size() == 1);
  CHECK(k[0].target == sm90a);
  CHECK(ops::tactic_specs_for("gemm", ops::kGemmTacticSpace, bucket, "mma_bn64_s3", {sm80, sm90a})
            .size() == 2);
  CHECK_THROWS_AS(ops::gemm_tactic_specs(bucket, "sm90_bn0256_s3", sm90a), kjit::Error);
  CHECK_THROWS_AS(ops::gemm_tactic_specs(bucket, "tile128", sm90a), kjit::Error);
  const std::string m12 = "dtype=bf16,out=bf16,m=12,n=4096,k=4096,bias=0,beta=0";
  CHECK_THROWS_AS(ops::gemm_tactic_specs(m12, "simt", sm90a), kjit::Error);
  CHECK_THROWS_AS(
      ops::tactic_specs_for("gemm", ops::kGemmTacticSpace, bucket, "sm90_bn512_s4", {sm80, sm90a}),
      kjit::Error);
}

TEST_CASE("gemm decode: every token tile and ring depth compiles for sm_90a without spills",
          "[gemm][compile]") {
  // bf16 in and out: every token tile, ring depth and scale mode, at a quarter of the compiles.
  test::check_decode_catalog(
      "gemm", "path", "decode", [](int) { return 2; }, 6, true);
  test::check_decode_catalog(
      "gemm_fp8", "path", "decode", [](int t) { return gemm::gemm_fp8_decode_blocks_per_sm(t); }, 9,
      true);
}
