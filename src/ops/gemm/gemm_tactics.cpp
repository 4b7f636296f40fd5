#include "ops/gemm/gemm_tactics.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <type_traits>
#include <unordered_map>

#include "cuda/launch.hpp"
#include "diag/call_log.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/log.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {

// TMA's coordinates are int32 (gemm.cpp's launch paths check the same bound).
using cuda::kMaxTmaSide;

// The sm90 kernel's tile widths and depths worth timing: the heuristic's two (128 x 6, 256 x 4)
// and a shallower ring of each (the same tiles, less shared memory to fill before the first MMA).
constexpr int kSm90Tiles[][2] = {{128, 4}, {128, 6}, {256, 3}, {256, 4}};
// The persistent kernel's: the heuristic's two tiles at their depths. A shallower ring buys it
// nothing (its fill overlaps the previous tile's epilogue), so the shallow ones are left out.
constexpr int kSm90PersistentTiles[][2] = {{128, 6}, {256, 4}};
// The mma_sm80 kernel's: both widths at the default depths (48 KB, two blocks per SM anywhere) and
// one stage deeper (64 / 60 KB: on parts with the shared memory for it, a longer ring per block).
constexpr int kMmaTiles[][2] = {{64, 4}, {128, 3}, {64, 3}, {128, 4}};

bool decode_sides_ok(const GemmTarget& t, int64_t n, int64_t k) {
  return t.cc_major == 9 && t.cc_minor == 0 && t.tma_ok && n <= kMaxTmaSide && k <= kMaxTmaSide &&
         ceil_div(n, gemm::kGemmDecodeRows) * gemm::kGemmDecodeMaxSplit <= kMaxTmaSide;
}

bool simt_grid_ok(int64_t m, int64_t n) {
  try {
    check_simt_grid("gemm", m, n);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::string GemmTactic::name() const {
  switch (path) {
    case GemmPath::kSm90:
      return fmt::format("sm90_bn{}_s{}{}", bn, stages, pair ? "_p2" : persistent ? "_p" : "");
    case GemmPath::kSm90Decode:
      return stages != 0 ? fmt::format("decode_t{}_s{}_split{}", tokens, stages, split)
                         : fmt::format("decode_t{}_split{}", tokens, split);
    case GemmPath::kMmaSm80: return fmt::format("mma_bn{}_s{}", bn, stages);
    case GemmPath::kSimt: break;
  }
  return "simt";
}

std::optional<GemmTactic> GemmTactic::parse(std::string_view name) {
  GemmTactic t;
  const std::string s(name);
  int a = 0, b = 0, c = 0, used = 0;
  if (s == "simt") return t;
  // The persistent suffixes (_p, _p2 for pairs): what precedes one must be a whole sm90 name (the
  // canonical check below refuses it on any other path).
  const auto ends_with = [&](const char* tail) {
    const size_t n = std::strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
  };
  const size_t body = ends_with("_p2") ? s.size() - 3 : ends_with("_p") ? s.size() - 2 : s.size();
  if (std::sscanf(s.c_str(), "sm90_bn%d_s%d%n", &a, &b, &used) == 2 &&
      used == static_cast<int>(body)) {
    t.path = GemmPath::kSm90;
    t.bn = a;
    t.stages = b;
    t.persistent = body != s.size();
    t.pair = ends_with("_p2");
  } else if (std::sscanf(s.c_str(), "mma_bn%d_s%d%n", &a, &b, &used) == 2 &&
             used == static_cast<int>(s.size())) {
    t.path = GemmPath::kMmaSm80;
    t.bn = a;
    t.stages = b;
  } else if (std::sscanf(s.c_str(), "decode_t%d_split%d%n", &a, &b, &used) == 2 &&
             used == static_cast<int>(s.size())) {
    t.path = GemmPath::kSm90Decode;
    t.tokens = a;
    t.split = b;
  } else if (std::sscanf(s.c_str(), "decode_t%d_s%d_split%d%n", &a, &c, &b, &used) == 3 &&
             used == static_cast<int>(s.size())) {
    t.path = GemmPath::kSm90Decode;
    t.tokens = a;
    t.stages = c;
    t.split = b;
  } else {
    return std::nullopt;
  }
  // Only the canonical spelling ("sm90_bn128_s6", not "sm90_bn0128_s6"): one tactic, one name.
  if (t.name() != s) return std::nullopt;
  return t;
}

GemmConfig gemm_config_of(const GemmTactic& t, DType dtype, DType out_dtype,
                          const GemmTarget& target) {
  GemmConfig c;
  c.path = t.path;
  c.dtype = dtype;
  c.out_dtype = out_dtype;
  if (t.path == GemmPath::kSm90 || t.path == GemmPath::kMmaSm80) {
    c.bn = t.bn;
    c.stages = t.stages;
    c.persistent = t.pair ? 2 : t.persistent ? 1 : 0;
    if (t.path == GemmPath::kSm90) {
      c.tma_out = gemm_tma_out(target, out_dtype, t.bn, t.stages) ? 1 : 0;
    }
  } else if (t.path == GemmPath::kSm90Decode) {
    c.tokens = t.tokens;
    c.stages = t.stages != 0 ? t.stages : gemm_decode_stages(t.tokens, target.max_smem_optin);
  }
  return c;
}

GemmTactic gemm_tactic_of(const GemmConfig& c, int split) {
  GemmTactic t;
  t.path = c.path;
  if (c.path == GemmPath::kSm90 || c.path == GemmPath::kMmaSm80) {
    t.bn = c.bn;
    t.stages = c.stages;
    t.persistent = c.persistent != 0;
    t.pair = c.persistent == 2;
  } else if (c.path == GemmPath::kSm90Decode) {
    t.tokens = c.tokens;
    t.split = split;
  }
  return t;
}

int64_t gemm_m_bucket(int64_t m) {
  int64_t b = 1;
  while (b < m) b *= 2;
  return b;
}

std::string gemm_bucket(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k, bool bias,
                        bool beta) {
  return fmt::format("dtype={},out={},m={},n={},k={},bias={:d},beta={:d}", dtype_name(dtype),
                     dtype_name(out_dtype), gemm_m_bucket(m), n, k, bias, beta);
}

bool gemm_tactic_valid(const GemmTactic& t, int64_t m_bucket, int64_t n, int64_t k,
                       const GemmTarget& target) {
  if (t.persistent && t.path != GemmPath::kSm90) return false;  // no other kernel has the form
  if (t.pair && !t.persistent) return false;
  switch (t.path) {
    case GemmPath::kSm90:
      return (t.bn == 128 || t.bn == 256) && t.stages >= 2 && t.stages <= 8 &&
             sm90_can_run(target, m_bucket, n, k, t.bn, t.stages);
    case GemmPath::kSm90Decode: {
      // The kernel's token tiles; one at least as wide as the bucket's rows (the tile holds every
      // token), and no wider than the heuristic's (a wider one only streams zeros).
      const bool tile_ok =
          (t.tokens == 16 || t.tokens == 32 || t.tokens == 64 || t.tokens == 128) &&
          t.tokens == std::max<int64_t>(16, m_bucket);
      // Splits of 1..8 blocks: a portable cluster size; blocks without K contribute zeros.
      const bool split_ok = t.split >= 1 && t.split <= gemm::kGemmDecodeMaxSplit;
      // A named ring depth: 2 stages at least (one loading while one multiplies).
      const bool stages_ok = t.stages == 0 || t.stages >= 2;
      if (!tile_ok || !split_ok || !stages_ok || !decode_sides_ok(target, n, k)) return false;
      const int stages =
          t.stages != 0 ? t.stages : gemm_decode_stages(t.tokens, target.max_smem_optin);
      return gemm::gemm_decode_smem_bytes(t.tokens, stages) <= target.max_smem_optin;
    }
    case GemmPath::kMmaSm80: return mma_sm80_can_run(target, m_bucket, n, k, t.bn, t.stages);
    case GemmPath::kSimt: break;
  }
  return simt_grid_ok(m_bucket, n);
}

std::vector<jit::Spec> gemm_tactic_specs(const std::string& bucket, const std::string& tactic,
                                         const jit::ArchTarget& arch) {
  const std::optional<GemmTactic> t = GemmTactic::parse(tactic);
  if (!t) fail(KJIT_ERROR_INVALID_ARGUMENT, "'{}' is not a gemm tactic", tactic);
  const SetArgs f = parse_set_list(bucket);
  auto flag = [&](const char* name) {
    const auto it = f.find(name);
    return it != f.end() && it->second == "1";
  };
  auto field = [&](const char* name) -> const std::string& {
    const auto it = f.find(name);
    if (it == f.end())
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm bucket '{}' has no {}", bucket, name);
    return it->second;
  };
  auto number = [&](const char* name) {
    field(name);
    return static_cast<int64_t>(positive_int_arg(f, name, 1ll << 40));
  };
  const DType dtype = dtype_from_name(field("dtype"));
  const DType out = dtype_from_name(field("out"));
  const int64_t m = number("m"), n = number("n"), k = number("k");
  // The text must read back as itself: a bucket of another layout (or tactic space) maps nothing.
  if (gemm_bucket(dtype, out, m, n, k, flag("bias"), flag("beta")) != bucket) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "'{}' is not a gemm bucket (it reads back as '{}')", bucket,
         gemm_bucket(dtype, out, m, n, k, flag("bias"), flag("beta")));
  }
  select_gemm(dtype, out, m, n, k, GemmTarget{});  // the dtypes gemm serves
  GemmTarget target;
  target.cc_major = arch.major;
  target.cc_minor = arch.minor;
  target.max_smem_optin = (arch_smem_per_sm_kb(arch) - 1) * 1024;
  target.tma_ok = true;
  target.cp_async_ok = true;
  target.tma_store_ok = !flag("beta");  // kjit_gemm's outs are mostly TMA-ready
  if (!gemm_tactic_valid(*t, m, n, k, target)) return {};
  return {gemm_spec(gemm_config_of(*t, dtype, out, target))};
}

std::vector<GemmTactic> gemm_tactics(const GemmTactic& dflt, int64_t m, int64_t n, int64_t k,
                                     const GemmTarget& target) {
  std::vector<GemmTactic> out{dflt};
  auto add = [&](const GemmTactic& t) {
    if (!(t == dflt) && gemm_tactic_valid(t, m, n, k, target)) out.push_back(t);
  };
  if (m <= gemm::kGemmDecodeMaxTokens) {
    GemmTactic d;
    d.path = GemmPath::kSm90Decode;
    d.tokens = static_cast<int>(std::max<int64_t>(16, m));
    // The default ring (two blocks an SM) and, where it is deeper, the ring of one block an SM:
    // more weight bytes in flight a block where the tokens' tile takes a third to a half of each
    // stage (64 and 128 tokens), at the cost of the second block's overlap.
    const int deep = gemm_decode_stages(d.tokens, target.max_smem_optin, 1);
    const bool deeper = deep > gemm_decode_stages(d.tokens, target.max_smem_optin);
    for (int s = 1; s <= gemm::kGemmDecodeMaxSplit; ++s) {
      d.split = s;
      d.stages = 0;
      add(d);
      if (deeper) {
        d.stages = deep;
        add(d);
      }
    }
  }
  const auto add_tiles = [&](GemmPath path, const auto& tiles, bool persistent) {
    size_t valid = 0;
    for (const auto& [bn, stages] : tiles) {
      GemmTactic t;
      t.path = path;
      t.bn = bn;
      t.stages = stages;
      t.persistent = persistent;
      valid += gemm_tactic_valid(t, m, n, k, target) ? 1 : 0;
      add(t);
    }
    return valid;
  };
  // mma.sync runs at about half the wgmma tiles' rate on sm_90a (300 against 650-800 TFLOP/s on
  // an H200 at large shapes), so it is a candidate only where no sm90 tile can run: devices
  // without wgmma, and calls TMA cannot describe. Timing it beside them would only add compiles.
  if (add_tiles(GemmPath::kSm90, kSm90Tiles, false) == 0) {
    add_tiles(GemmPath::kMmaSm80, kMmaTiles, false);
  } else if (ceil_div(m, gemm::kGemmBlockM) * ceil_div(n, 128) > target.sm_count) {
    // Persistent blocks differ from the one-tile kernel only where a block gets more than one
    // tile (at 128 wide; at 256 it may still be one each, which the timing then shows).
    add_tiles(GemmPath::kSm90, kSm90PersistentTiles, true);
  }
  add(GemmTactic{});
  return out;
}

namespace {

// The bytes a call's choice depends on (no padding: they are hashed as they lie).
struct ChoiceKey {
  int32_t device, dtype, out_dtype;
  int32_t path, bn, stages, tokens;  // the default's kernel
  int32_t mode;                      // the call's own, -1: the process's
  int32_t timing;                    // graph * 2 + cold
  int32_t flags;  // tma_ok, bias, beta, cp_async_ok, the default persistent, tma_store_ok
  int64_t m_bucket, n, k;
};
static_assert(std::has_unique_object_representations_v<ChoiceKey>, "hashed as bytes");

struct HashOf {
  size_t operator()(const util::Hash128& h) const { return static_cast<size_t>(h.lo); }
};

std::shared_mutex g_memo_mu;
std::unordered_map<util::Hash128, std::unique_ptr<GemmChoice>, HashOf> g_memo;

bool log_choice(const tune::Choice& ch, bool capturing) {
  return ch.source != tune::Choice::Source::kDefault || !ch.note.empty() || capturing ||
         api::current_log_settings().level >= 1;
}

util::Hash128 choice_hash(const GemmCall& call, const GemmConfig& dflt,
                          const tune::TuneRequest& req) {
  ChoiceKey ck{};
  ck.device = call.device;
  ck.dtype = static_cast<int32_t>(call.dtype);
  ck.out_dtype = static_cast<int32_t>(call.out_dtype);
  ck.path = static_cast<int32_t>(dflt.path);
  ck.bn = dflt.bn;
  ck.stages = dflt.stages;
  ck.tokens = dflt.tokens;
  ck.mode = req.mode ? static_cast<int32_t>(*req.mode) : -1;
  ck.timing = (req.timing.graph ? 2 : 0) + (req.timing.cold ? 1 : 0);
  ck.flags = (call.target.tma_ok ? 1 : 0) | (call.bias ? 2 : 0) | (call.beta ? 4 : 0) |
             (call.target.cp_async_ok ? 8 : 0) | (dflt.persistent != 0 ? 16 : 0) |
             (call.target.tma_store_ok ? 32 : 0);
  ck.m_bucket = gemm_m_bucket(call.m);
  ck.n = call.n;
  ck.k = call.k;
  return util::xxh3_128({reinterpret_cast<const char*>(&ck), sizeof ck});
}

const GemmChoice* find_choice(const util::Hash128& h) {
  std::shared_lock<std::shared_mutex> lock(g_memo_mu);
  auto it = g_memo.find(h);
  return it == g_memo.end() ? nullptr : it->second.get();
}

}  // namespace

const GemmChoice* remembered_gemm_choice(const GemmCall& call, const GemmConfig& dflt,
                                         const tune::TuneRequest& req) {
  return find_choice(choice_hash(call, dflt, req));
}

const GemmChoice& choose_gemm_tactic(const GemmCall& call, const GemmConfig& dflt,
                                     const tune::TuneRequest& req, void* stream,
                                     const GemmDefaultSplit& default_split,
                                     const GemmMeasure& measure) {
  const util::Hash128 h = choice_hash(call, dflt, req);
  if (const GemmChoice* known = find_choice(h)) return *known;
  const int64_t m_bucket = gemm_m_bucket(call.m);
  tune::Autotuner& tuner = tune::process_autotuner();
  const tune::Fingerprint& fp = tune::device_fingerprint(call.device);
  const GemmTactic d =
      gemm_tactic_of(dflt, dflt.path == GemmPath::kSm90Decode ? default_split(dflt) : 0);
  const std::vector<GemmTactic> tactics = gemm_tactics(d, m_bucket, call.n, call.k, call.target);
  std::vector<std::string> names;
  for (const GemmTactic& t : tactics) names.push_back(t.name());
  auto c = std::make_unique<GemmChoice>();
  c->key = tune::TuneKey{
      kGemmTuneOp, kGemmTacticSpace,
      gemm_bucket(call.dtype, call.out_dtype, call.m, call.n, call.k, call.bias, call.beta),
      req.timing.name()};
  const tune::TuneMode mode = req.mode.value_or(tuner.settings().mode);
  const bool capturing = (mode == tune::TuneMode::kUnseen || mode == tune::TuneMode::kRetune) &&
                         tune::stream_capturing(stream);
  const tune::Measure timed = [&](const std::string& name) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return measure(tactics[i]);
    }
    return std::vector<double>{};
  };
  c->choice = tuner.choose(fp, c->key, names, d.name(), capturing ? nullptr : &timed, req.mode);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == c->choice.tactic) c->tactic = tactics[i];
  }
  if (log_choice(c->choice, capturing)) {
    util::log("gemm {} {}: {} ({}{}{})", c->key.bucket, c->key.timing, c->choice.tactic,
              tune::source_name(c->choice.source),
              capturing ? "; the stream is being captured: nothing measured" : "",
              c->choice.note.empty() ? "" : "; " + c->choice.note);
  }
  if (!c->choice.final) {
    // Not remembered: the next call outside capture tunes.
    static thread_local GemmChoice pending;
    pending = *c;
    return pending;
  }
  std::unique_lock<std::shared_mutex> lock(g_memo_mu);
  return *g_memo.emplace(h, std::move(c)).first->second;
}

}  // namespace kjit::ops
