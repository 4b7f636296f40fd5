// The order of instructions ptxas emits, read from the sm_90a cubins NVRTC builds (no GPU, no
// nvdisasm: CI has neither). What is checked is where the decode-size paths were lost before:
// ptxas sank read-only parameter loads past the
// PDL wait and the row reduction, formed RoPE's head addresses after the position load and a
// run-time division, and spilled in RoPE's decode launch.
//
// Hopper SASS is 16 bytes an instruction; the opcode is in the low bits of the first 8 bytes
// (nvdisasm -hex, CUDA 13.0, over the norm, RoPE and KV append kernels: every one of 102
// mnemonics had its own low 12 bits). The few this test needs:
//   LDG 0x981 (.CONSTANT, the read-only path: bit 15 of the second 8 bytes; .STRONG.SYS, the
//   ld.volatile of pdl_pin_before_wait / pdl_pin_float: bit 16), ACQBULK 0x82e
//   (griddepcontrol.wait), STL 0x387 / LDL 0x983 (local memory), MUFU 0x108 in the low 9 bits
//   (an integer division by a run-time value takes MUFU.RCP), SHFL 0x589 (lane in a register) /
//   0xf89 (immediate), BAR 0xb1d, FRND 0x307.
// A wrong table would fail the "exactly one wait" checks rather than pass silently.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jit/cubin_info.hpp"
#include "runtime/jit_core.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/norm/layernorm.hpp"
#include "ops/norm/norm.hpp"
#include "ops/rope/rope.hpp"
#include "support/temp_dir.hpp"

using namespace kjit;
using kjit::test::TempDir;

namespace {

enum class Op { kLdg, kLdgConstant, kLdgStrong, kWait, kLocal, kMufu, kShfl, kBar, kFrnd, kOther };

struct Sass {
  std::vector<Op> ops;

  size_t count(Op op, size_t from = 0, size_t to = SIZE_MAX) const {
    size_t n = 0;
    for (size_t i = from; i < ops.size() && i < to; ++i) n += ops[i] == op;
    return n;
  }
  size_t first(Op op, size_t from = 0) const {
    for (size_t i = from; i < ops.size(); ++i) {
      if (ops[i] == op) return i;
    }
    return SIZE_MAX;
  }
  size_t first_load(size_t from = 0) const {
    return std::min(
        {first(Op::kLdg, from), first(Op::kLdgConstant, from), first(Op::kLdgStrong, from)});
  }
  size_t last(Op op) const {
    for (size_t i = ops.size(); i-- > 0;) {
      if (ops[i] == op) return i;
    }
    return SIZE_MAX;
  }
};

Sass decode(const std::string& code) {
  Sass s;
  for (size_t off = 0; off + 16 <= code.size(); off += 16) {
    uint64_t lo, hi;
    std::memcpy(&lo, code.data() + off, 8);
    std::memcpy(&hi, code.data() + off + 8, 8);
    const unsigned op12 = lo & 0xfff;
    Op op = Op::kOther;
    if (op12 == 0x981) {
      op = (hi & 0x8000) != 0 ? Op::kLdgConstant : (hi & 0x10000) != 0 ? Op::kLdgStrong : Op::kLdg;
    } else if (op12 == 0x589 || op12 == 0xf89) {
      op = Op::kShfl;
    } else if (op12 == 0xb1d) {
      op = Op::kBar;
    } else if (op12 == 0x307) {
      op = Op::kFrnd;
    } else if (op12 == 0x82e) {
      op = Op::kWait;
    } else if (op12 == 0x387 || op12 == 0x983) {
      op = Op::kLocal;
    } else if ((lo & 0x1ff) == 0x108) {
      op = Op::kMufu;
    }
    s.ops.push_back(op);
  }
  return s;
}

// One core for the file: each spec compiles once (a few seconds each).
jit::JitCore& core() {
  static TempDir dir;
  static jit::JitCore c([] {
    jit::Settings s;
    s.cache_dir = dir.path() / "cache";
    s.gen_dir = s.cache_dir / "generated";
    return s;
  }());
  return c;
}

Sass sass_of(const jit::Spec& spec) {
  const jit::Artifact a = core().build(spec, jit::ArchTarget{9, 0, true});
  REQUIRE(a.meta.lowered_names.size() == 1);
  const std::string code = jit::cubin_kernel_code(a.cubin, a.meta.lowered_names[0].second);
  REQUIRE(code.size() >= 16);
  return decode(code);
}

// Vectors of a row one thread holds (the kernels' kIters).
int iters(int hidden, int vec, int tpr) {
  return (hidden / vec + tpr - 1) / tpr;
}

}  // namespace

TEST_CASE("codegen: decode-size norms load their parameters before the PDL wait (sm_90a)",
          "[codegen]") {
  using ops::DType;
  struct Case {
    const char* name;
    jit::Spec spec;
    int param_loads;  // 16-byte parameter loads per thread
  };
  const ops::RmsNormConfig rms = ops::select_rmsnorm(DType::kBF16, 4096, 16, 1);
  const ops::RmsNormConfig fused = ops::select_fused_add_rmsnorm(DType::kBF16, 4096, 16, 64);
  const ops::LayerNormConfig ln =
      ops::select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 1);
  const ops::LayerNormConfig ln32 =
      ops::select_layernorm(DType::kBF16, DType::kF32, 4096, 16, 16, 64);
  const ops::LayerNormConfig ln_two =
      ops::select_layernorm(DType::kF16, DType::kF16, 2048, 16, 16, ops::kNormEarlyParamsMaxRows);
  REQUIRE(rms.early_params == 1);
  REQUIRE(fused.early_params == 1);
  REQUIRE(ln.early_params == 1);
  REQUIRE(ln_two.early_params == 1);  // 256 rows: about four vectors a thread, parameters early
  const int k_rms = iters(rms.hidden, rms.vec, rms.threads_per_row);
  const Case cases[] = {
      {"rmsnorm bf16 x 4096, 1 row", ops::rmsnorm_spec(rms), k_rms},
      {"fused_add_rmsnorm bf16 x 4096, 64 rows", ops::fused_add_rmsnorm_spec(fused),
       iters(fused.hidden, fused.vec, fused.threads_per_row)},
      {"layernorm bf16 x 4096, 1 row", ops::layernorm_spec(ln),
       2 * iters(ln.hidden, ln.vec, ln.threads_per_row)},
      // fp32 gamma / beta beside 8 bf16 activations: two 16-byte accesses a vector.
      {"layernorm bf16 / fp32 x 4096, 64 rows", ops::layernorm_spec(ln32),
       4 * iters(ln32.hidden, ln32.vec, ln32.threads_per_row)},
      {"layernorm fp16 x 2048, 256 rows", ops::layernorm_spec(ln_two),
       2 * iters(ln_two.hidden, ln_two.vec, ln_two.threads_per_row)},
  };
  for (const Case& c : cases) {
    INFO(c.name << " (" << c.spec.uri << ")");
    const Sass s = sass_of(c.spec);
    REQUIRE(s.count(Op::kWait) == 1);
    const size_t wait = s.first(Op::kWait);
    // Every parameter load is ahead of the wait, as plain loads; nothing else is.
    CHECK(s.count(Op::kLdg, 0, wait) == static_cast<size_t>(c.param_loads));
    CHECK(s.count(Op::kLdgConstant, 0, wait) == 0);
    // No parameter load is left after it: the row's loads are all that follow.
    CHECK(s.count(Op::kLdgConstant, wait) == 0);
    CHECK(s.count(Op::kLocal) == 0);
  }
}

TEST_CASE("codegen: other kernels load nothing before the PDL wait (sm_90a)", "[codegen]") {
  using ops::DType;
  ops::RopeConfig rope = ops::select_rope(ops::RopeMode::kFreq, DType::kBF16, 128, 128, false, 16);
  rope.unit_major = true;
  const jit::Spec specs[] = {
      // Large row counts keep the default kernels (their parameters read after the wait, through
      // the read-only path, as before the decode variant existed).
      ops::rmsnorm_spec(ops::select_rmsnorm(DType::kBF16, 4096, 16)),
      ops::fused_add_rmsnorm_spec(ops::select_fused_add_rmsnorm(DType::kBF16, 4096, 16)),
      ops::layernorm_spec(ops::select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16)),
      ops::rope_spec(rope),
      ops::append_paged_kv_spec(ops::select_append_paged_kv(DType::kBF16, 128, 16)),
  };
  for (const jit::Spec& spec : specs) {
    INFO(spec.uri);
    const Sass s = sass_of(spec);
    REQUIRE(s.count(Op::kWait) == 1);
    const size_t wait = s.first(Op::kWait);
    CHECK(s.first_load() > wait);
  }
  // The large-shape norms do read their parameters through the read-only path (a check that the
  // .CONSTANT bit is read right: the decode test above relies on its absence).
  CHECK(sass_of(ops::rmsnorm_spec(ops::select_rmsnorm(DType::kBF16, 4096, 16)))
            .count(Op::kLdgConstant) > 0);
}

TEST_CASE("codegen: RoPE at decode sizes: no spill, head loads first, no division (sm_90a)",
          "[codegen]") {
  for (ops::DType dt : {ops::DType::kBF16, ops::DType::kF16}) {
    for (int hd : {64, 128}) {
      ops::RopeConfig c = ops::select_rope(ops::RopeMode::kFreq, dt, hd, hd, false, 16);
      c.unit_major = true;  // what the host picks for <= 128 tokens
      const jit::Spec spec = ops::rope_spec(c);
      INFO(spec.uri);
      const Sass s = sass_of(spec);
      REQUIRE(s.count(Op::kWait) == 1);
      const size_t wait = s.first(Op::kWait);
      CHECK(s.count(Op::kLocal) == 0);
      // The first load after the wait is a head (plain), not the position (read-only path).
      const size_t head = s.first(Op::kLdg, wait);
      REQUIRE(head != SIZE_MAX);
      CHECK(head < s.first(Op::kLdgConstant, wait));
      // Nothing on the way to it takes MUFU (a run-time integer division's MUFU.RCP).
      CHECK(s.count(Op::kMufu, wait, head) == 0);
    }
  }
}

TEST_CASE("codegen: KV append divides by multipliers, not MUFU.RCP (sm_90a)", "[codegen]") {
  for (int hd : {64, 128, 256}) {
    const jit::Spec spec =
        ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kBF16, hd, 16));
    INFO(spec.uri);
    const Sass s = sass_of(spec);
    REQUIRE(s.count(Op::kWait) == 1);
    CHECK(s.count(Op::kMufu) == 0);
    CHECK(s.count(Op::kLocal) == 0);
  }
}

TEST_CASE("codegen: RoPE decode kernel: warp-shared angles, set-up before the wait (sm_90a)",
          "[codegen]") {
  for (ops::DType dt : {ops::DType::kBF16, ops::DType::kF16}) {
    for (int hd : {64, 128}) {
      for (int early : {0, 1}) {
        ops::RopeConfig c = ops::select_rope(ops::RopeMode::kFreq, dt, hd, hd, false, 16);
        REQUIRE(ops::rope_decode_supported(c));
        c.decode = 1;  // what the host picks for <= 128 tokens
        c.early_pos = early;
        const jit::Spec spec = ops::rope_spec(c);
        INFO(spec.uri);
        const Sass s = sass_of(spec);
        REQUIRE(s.count(Op::kWait) == 1);
        const size_t wait = s.first(Op::kWait);
        CHECK(s.count(Op::kLocal) == 0);
        // One angle per lane and frequency it owns (hd / 2 / 32, at least 1), not one per
        // frequency of the thread's unit (8): sin and cos, one FRND each.
        const size_t per_lane = static_cast<size_t>(std::max(1, hd / 2 / 32));
        CHECK(s.count(Op::kMufu) == 2 * per_lane);
        CHECK(s.count(Op::kFrnd) == per_lane);
        CHECK(s.count(Op::kShfl) == 2 * static_cast<size_t>(c.vec));  // sin and cos of the unit's
        CHECK(s.count(Op::kLdgConstant) == 0);
        // The pins' loads (never taken) are all before the wait.
        CHECK(s.count(Op::kLdgStrong, wait) == 0);
        CHECK(s.count(Op::kLdgStrong, 0, wait) >= 1);
        // The first load after the wait (a head, or the position) follows it within a few
        // instructions: addresses and the frequency pairs are formed before it.
        const size_t after = s.first_load(wait);
        REQUIRE(after != SIZE_MAX);
        CHECK(after - wait <= 24);
        if (early == 0) {
          // Nothing but the pins reads memory before the wait; the angle math follows it.
          CHECK(s.count(Op::kLdg, 0, wait) == 0);
          CHECK(s.first(Op::kMufu) > wait);
        } else {
          // The position load (int32 or int64) issued before the wait, the angle math after
          // it (computing the angles before the wait was 0.25 us slower back to back).
          CHECK(s.count(Op::kLdg, 0, wait) == 2);
          CHECK(s.first(Op::kMufu) > wait);
        }
      }
    }
  }
}

TEST_CASE("codegen: KV append with early indices: the index chain before the wait (sm_90a)",
          "[codegen]") {
  for (int hd : {64, 128, 256}) {
    ops::AppendPagedKvConfig c = ops::select_append_paged_kv(ops::DType::kBF16, hd, 16);
    c.early_indices = 1;
    const jit::Spec spec = ops::append_paged_kv_spec(c);
    INFO(spec.uri);
    const Sass s = sass_of(spec);
    REQUIRE(s.count(Op::kWait) == 1);
    const size_t wait = s.first(Op::kWait);
    CHECK(s.count(Op::kMufu) == 0);
    CHECK(s.count(Op::kLocal) == 0);
    // batch index, position, kv_indptr (warp-wide and per thread), kv_indices: plain loads, all
    // before the wait; after it only the k / v rows (read-only path), right after it.
    CHECK(s.count(Op::kLdg, 0, wait) >= 5);
    CHECK(s.count(Op::kLdg, wait) == 0);
    CHECK(s.count(Op::kLdgConstant, 0, wait) == 0);
    const int vecs = hd / 8, tpr = std::min(vecs, 32);
    CHECK(s.count(Op::kLdgConstant, wait) == 2 * static_cast<size_t>((vecs + tpr - 1) / tpr));
    REQUIRE(s.first_load(wait) != SIZE_MAX);
    CHECK(s.first_load(wait) - wait <= 12);
  }
}

TEST_CASE("codegen: decode-size norms: fewest barriers, no division (sm_90a)", "[codegen]") {
  using ops::DType;
  const ops::LayerNormConfig ln =
      ops::select_layernorm(DType::kBF16, DType::kBF16, 4096, 16, 16, 64);
  struct Case {
    const char* name;
    jit::Spec spec;
    size_t barriers;
    size_t shuffles;
  };
  REQUIRE(ln.threads_per_row == 512);  // one vector a thread
  // 512 threads a row (one vector a thread): each row reduction is 5 shuffles within the warp,
  // then 4 over the 16 warps' partials, and one barrier (RMSNorm, the fused add). LayerNorm
  // reduces twice (the mean, then the squared deviations) through the same shared partials: the
  // first reduction keeps its trailing barrier so the second cannot overwrite a partial a slow
  // warp has not read.
  const Case cases[] = {
      {"rmsnorm", ops::rmsnorm_spec(ops::select_rmsnorm(DType::kBF16, 4096, 16, 64)), 1, 9},
      {"fused_add_rmsnorm",
       ops::fused_add_rmsnorm_spec(ops::select_fused_add_rmsnorm(DType::kBF16, 4096, 16, 64)), 1,
       9},
      {"layernorm", ops::layernorm_spec(ln), 3, 18},
  };
  for (const Case& c : cases) {
    INFO(c.name << " (" << c.spec.uri << ")");
    const Sass s = sass_of(c.spec);
    CHECK(s.count(Op::kBar) == c.barriers);
    CHECK(s.count(Op::kMufu) == 1);  // the rsqrt; no reciprocal of a division
    CHECK(s.count(Op::kShfl) == c.shuffles);
  }
}
