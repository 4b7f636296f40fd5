// Rotary position embedding (RoPE) on q and k, with FlashInfer's and vLLM's semantics.
//
// For each token t, head h and rotated pair (i1, i2) with frequency index f:
//   out[i1] = x[i1] * cos(a) - x[i2] * sin(a)
//   out[i2] = x[i2] * cos(a) + x[i1] * sin(a)
// Pairs are (f, f + ROT_DIM / 2) for "rotate half" (NeoX, INTERLEAVE = false) and (2f, 2f + 1)
// for GPT-J style (INTERLEAVE = true), f < ROT_DIM / 2. Dims >= ROT_DIM pass through unchanged.
// The angle a comes from either
//   - kModeFreq: a = pos * inv_freq[f], with inv_freq computed on the host in double (it holds
//     the rope_scale and the Llama 3.1 band scaling) and passed in the params, or
//   - kModeCache: cos(a) = cache[pos][f] and sin(a) = cache[pos][ROT_DIM / 2 + f].
// and pos is pos_ids[t], or (kModeIndptr, kModeFreq's angles) offsets[b] + t - indptr[b] for
// token t of request b (indptr_position).
//
// Accuracy of kModeFreq. inv_freq[f] / pi travels as two floats (hi + lo, 48 bits), and
// pos * hi is formed exactly as a float pair with an fma, so the angle, reduced modulo 2 pi
// exactly (sincospif needs only t mod 2, which is exact in fp32), is off by at most 3e-7 rad
// from the fp64 value of pos * inv_freq for every |pos| < 2^24: position 131072 is as accurate
// as position 1. Rounding pos * inv_freq once to fp32, as a plain `sincosf(pos * freq)` does,
// would put up to 0.008 rad of error into the highest frequency at that position: a bf16 ulp,
// or 16 fp16 ulps, of output error. sincospif adds at most 1 ulp (fp32 outputs; 16-bit outputs
// take the hardware sin / cos, 9e-7 rad in all: fast_sincos_of_position). Positions beyond 2^24 are
// first rounded to fp32.
//
// Work split: sin and cos depend on (token, f) only, so a thread computes them once for its
// slice of the frequencies and then applies them to many heads of the token. A head takes
// kUnits threads (each holding one 16-byte vector of each half, or a vector of pairs); a block
// holds blockDim.x / kUnits head slots and covers one token's heads [chunk * heads_per_chunk,
// ...). The host picks several chunks per token when there are few tokens (decode), so that
// every SM still gets a block, and one chunk per token for prefill, which best amortizes the
// sin / cos work over the heads.
#pragma once

#include "common/fastdiv.cuh"
#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "rope/rope_params.h"

namespace kjit {
namespace rope {

namespace detail {

// sin and cos of pi * pos * (g_hi + g_lo), accurate to 3e-7 absolute for |pos| < 2^24.
KJIT_DEVICE KJIT_FORCEINLINE void sincos_of_position(float pos, float g_hi, float g_lo, float* s,
                                                     float* c) {
  const float hi = pos * g_hi;
  // pos * g_hi == hi + lo exactly (fma residual); the g_lo term is ~2^-24 of hi, so its own
  // rounding is far below what matters.
  float lo = fmaf(pos, g_hi, -hi);
  lo = fmaf(pos, g_lo, lo);
  // hi - 2 * rint(hi / 2) is exact (Sterbenz), so the reduction loses nothing; the sum with lo
  // rounds once, at |t| <= ~1.
  const float t = (hi - 2.0f * rintf(0.5f * hi)) + lo;
  sincospif(t, s, c);
}

// Same reduction, then the hardware sin / cos (MUFU): |pi * t| <= ~pi, where __sincosf is within
// 4.2e-7 absolute, so the angle's error grows from 3e-7 to under 9e-7 rad, far below a 16-bit
// output's rounding (bf16 2^-9, fp16 2^-12 relative). Two MUFU instead of ~35 FMA-pipe
// instructions per angle: the angle math is most of a decode-size block's issue time.
KJIT_DEVICE KJIT_FORCEINLINE void fast_sincos_of_position(float pos, float g_hi, float g_lo,
                                                          float* s, float* c) {
  const float hi = pos * g_hi;
  float lo = fmaf(pos, g_hi, -hi);
  lo = fmaf(pos, g_lo, lo);
  const float t = (hi - 2.0f * rintf(0.5f * hi)) + lo;
  __sincosf(3.14159265358979f * t, s, c);
}

// For the fused kernels (rope_append.cuh, qk_norm_rope.cuh): a block's token and chunk and a
// thread's head slot and unit, slot-major; then the sin / cos of the unit's FREQS frequencies at
// the token's position, as rope_kernel's 16-bit path computes them (so the rotation is its).
struct SlotMajorThread {
  int token, chunk, slots, unit, slot;
};
template <int UNITS>
KJIT_DEVICE KJIT_FORCEINLINE SlotMajorThread slot_major_thread(const RopeArgs& a) {
  SlotMajorThread t;
  t.token = fast_div(int(blockIdx.x), a.chunks_div);
  t.chunk = int(blockIdx.x) - t.token * a.chunks;
  t.slots = int(blockDim.x) / UNITS;
  t.unit = int(threadIdx.x) % UNITS;
  t.slot = int(threadIdx.x) / UNITS;
  return t;
}
template <int FREQS>
KJIT_DEVICE KJIT_FORCEINLINE void unit_angles(const RopeArgs& a, const float* freq, int token,
                                              int unit, float (&cs)[FREQS], float (&sn)[FREQS]) {
  const long long pos = a.pos_bytes == 8 ? __ldg(static_cast<const long long*>(a.pos) + token)
                                         : __ldg(static_cast<const int*>(a.pos) + token);
  const int f0 = unit * FREQS;
#pragma unroll
  for (int e = 0; e < FREQS; ++e) {
    fast_sincos_of_position(float(pos), freq[2 * (f0 + e)], freq[2 * (f0 + e) + 1], &sn[e], &cs[e]);
  }
}

KJIT_DEVICE KJIT_FORCEINLINE long long load_index(const void* p, int i, int bytes) {
  return bytes == 8 ? static_cast<const long long*>(p)[i] : static_cast<const int*>(p)[i];
}

// kModeIndptr: the position of `token`, offsets[b] + token - indptr[b] for the last b < batch
// with indptr[b] <= token (b = 0 when there is none), found by bisection: ceil(log2(batch))
// dependent loads, each the same address across the block (one request per warp). It reads
// indptr[0, batch) and offsets[0, batch) only, so an indptr that is not non-decreasing (the
// caller's contract) gives wrong positions, never an out-of-bounds read. Plain loads: the decode
// kernel relies on ptxas keeping them where they are written (see rope_decode_kernel).
KJIT_DEVICE KJIT_FORCEINLINE long long indptr_position(const RopeArgs& a, int token) {
  int lo = 0, hi = a.batch;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (load_index(a.indptr, mid, a.pos_bytes) <= token) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return load_index(a.pos, lo, a.pos_bytes) + token - load_index(a.indptr, lo, a.pos_bytes);
}

KJIT_DEVICE KJIT_FORCEINLINE float load_cache(const void* row, long long i, int dtype) {
  if (dtype == kCacheF32) return __ldg(static_cast<const float*>(row) + i);
  if (dtype == kCacheF16) return to_float(__ldg(static_cast<const __half*>(row) + i));
  return to_float(__ldg(static_cast<const __nv_bfloat16*>(row) + i));
}

// The heads [begin, end) of one token that the token's block `chunk` covers (q heads, then k).
struct HeadChunk {
  int begin, end;
};

KJIT_DEVICE KJIT_FORCEINLINE HeadChunk head_chunk(const RopeArgs& a, int chunk) {
  const int total = a.q_heads + a.k_heads;
  const int begin = chunk * a.heads_per_chunk;
  return {begin, min(begin + a.heads_per_chunk, total)};
}

// One head's rotated slice in fp32, in place: v holds N / VEC vectors of VEC elements, and each
// of the FREQS pairs is rotated by its (cos, sin). NeoX pairs element f of each half; GPT-J the
// f-th adjacent pair.
template <bool INTERLEAVE, int VEC, int FREQS, int N>
KJIT_DEVICE KJIT_FORCEINLINE void rotate_pairs(const float (&cs)[FREQS], const float (&sn)[FREQS],
                                               float (&v)[N]) {
#pragma unroll
  for (int f = 0; f < FREQS; ++f) {
    const int i1 = INTERLEAVE ? 2 * f : f;
    const int i2 = INTERLEAVE ? 2 * f + 1 : VEC + f;
    const float a = v[i1], b = v[i2];
    v[i1] = fmaf(a, cs[f], -b * sn[f]);
    v[i2] = fmaf(b, cs[f], a * sn[f]);
  }
}

// rotate_pairs of the vectors x, converted to fp32 into v.
template <bool INTERLEAVE, typename T, int VEC, int FREQS, int N>
KJIT_DEVICE KJIT_FORCEINLINE void rotate(const Vec<T, VEC>* x, const float (&cs)[FREQS],
                                         const float (&sn)[FREQS], float (&v)[N]) {
#pragma unroll
  for (int j = 0; j < N / VEC; ++j) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[j * VEC + e] = to_float(x[j][e]);
  }
  rotate_pairs<INTERLEAVE, VEC>(cs, sn, v);
}

// What both RoPE kernels share: the shape's checks and sizes, and a token's heads (q heads first,
// then k heads, each with its own strides) with the copy of their dims past ROT_DIM.
template <typename DTYPE, int HEAD_DIM, int ROT_DIM, bool INTERLEAVE, int VEC, int MODE>
struct RopeShape {
  static_assert(ROT_DIM >= 2 && ROT_DIM % 2 == 0 && ROT_DIM <= HEAD_DIM, "bad ROT_DIM");
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0 && VEC * sizeof(DTYPE) <= 16, "bad VEC");
  static_assert(HEAD_DIM % VEC == 0 && ROT_DIM % VEC == 0, "dims must be multiples of VEC");
  static_assert(INTERLEAVE || (ROT_DIM / 2) % VEC == 0, "NeoX halves must be multiples of VEC");
  static_assert(MODE == kModeFreq || MODE == kModeCache || MODE == kModeIndptr, "bad MODE");

  using V = Vec<DTYPE, VEC>;
  static constexpr int kHalf = ROT_DIM / 2;
  // Elements one thread rotates per head: a vector of each half (NeoX), or a run of whole pairs
  // (GPT-J; two scalars when the alignment allows no wider vector).
  static constexpr int kUnit = INTERLEAVE ? (VEC < 2 ? 2 : VEC) : VEC;
  static constexpr int kLoads = INTERLEAVE ? kUnit / VEC : 2;                // vectors per head
  static constexpr int kUnits = INTERLEAVE ? ROT_DIM / kUnit : kHalf / VEC;  // threads per head
  static constexpr int kFreqs = INTERLEAVE ? kUnit / 2 : VEC;                // angles per thread
  static constexpr int kPassVecs = (HEAD_DIM - ROT_DIM) / VEC;

  // Offset in the head of the j-th vector of thread `unit`.
  static KJIT_DEVICE KJIT_FORCEINLINE int elem_offset(int unit, int j) {
    return INTERLEAVE ? unit * kUnit + j * VEC : j * kHalf + unit * VEC;
  }

  // Head h of token tk, read and written.
  static KJIT_DEVICE KJIT_FORCEINLINE const DTYPE* head_in(const RopeArgs& a, long long tk, int h) {
    return h < a.q_heads
               ? static_cast<const DTYPE*>(a.q_in) + tk * a.q_in_st + h * a.q_in_sh
               : static_cast<const DTYPE*>(a.k_in) + tk * a.k_in_st + (h - a.q_heads) * a.k_in_sh;
  }
  static KJIT_DEVICE KJIT_FORCEINLINE DTYPE* head_out(const RopeArgs& a, long long tk, int h) {
    return h < a.q_heads
               ? static_cast<DTYPE*>(a.q_out) + tk * a.q_out_st + h * a.q_out_sh
               : static_cast<DTYPE*>(a.k_out) + tk * a.k_out_st + (h - a.q_heads) * a.k_out_sh;
  }

  // Dims past ROT_DIM of heads h, h + step, ... < h_end: nothing to do in place; out of place
  // they are copied. The views do not overlap then (the host checks), which is what lets the loop
  // keep several loads in flight.
  static KJIT_DEVICE KJIT_FORCEINLINE void copy_pass(const RopeArgs& a, long long tk, int h,
                                                     int h_end, int step, int unit) {
    if constexpr (kPassVecs > 0) {
      for (; h < h_end; h += step) {
        if (!(h < a.q_heads ? a.copy_q_pass : a.copy_k_pass)) continue;
        const DTYPE* __restrict__ src = head_in(a, tk, h) + ROT_DIM;
        DTYPE* __restrict__ dst = head_out(a, tk, h) + ROT_DIM;
#pragma unroll 4
        for (int v = unit; v < kPassVecs; v += kUnits) {
          V t;
          t.load(src + v * VEC);
          t.store(dst + v * VEC);
        }
      }
    }
  }
};

}  // namespace detail

// Launch with grid = tokens * p.a.chunks and block = kUnits * slots threads (any slots >= 1, at
// most 256 threads), no shared memory, where kUnits = ROT_DIM / 2 / VEC (NeoX) or
// ROT_DIM / max(VEC, 2) (GPT-J). q_in, q_out, k_in, k_out and their token and head strides must
// be aligned to VEC * sizeof(DTYPE) bytes; HEAD_DIM and ROT_DIM (NeoX: ROT_DIM / 2) must be
// multiples of VEC. An out view is its in view (in place) or overlaps nothing the kernel reads.
// kModeCache tokens whose position is outside [0, max_pos) are left untouched (no read past the
// cache).
// Min 3 blocks of 256 (6 of the host's 128-thread blocks) caps registers at 80: loads issued
// before the angle math raised them to 104 and cost residency; measured on the H200 at 65536
// tokens x 40 heads x 128 bf16: 89.7% of copy (old order, 80 regs), 84.0% (new order, 104),
// 93.2-93.7% (new order, capped).
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, int HEAD_DIM, int ROT_DIM, bool INTERLEAVE, int VEC, int MODE,
          bool UNIT_MAJOR>
__global__ void __launch_bounds__(256, UNIT_MAJOR ? 2 : 3)
rope_kernel(const __grid_constant__ RopeParams<MODE != kModeCache ? ROT_DIM / 2 : 1> p) {
  // clang-format on
  pdl_enter();  // before any global access: see prelude.cuh
  using Shape = detail::RopeShape<DTYPE, HEAD_DIM, ROT_DIM, INTERLEAVE, VEC, MODE>;
  constexpr int kHalf = Shape::kHalf;
  constexpr int kLoads = Shape::kLoads;
  constexpr int kUnits = Shape::kUnits;
  constexpr int kFreqs = Shape::kFreqs;
  // Heads whose loads a thread issues together: 4 heads of NeoX 16-byte vectors are 128 bytes in
  // flight per thread, enough to cover DRAM latency at full occupancy without spilling.
  constexpr int kInFlight = 4;
  using V = Vec<DTYPE, VEC>;

  // Divisions by host-computed multipliers (common/fastdiv.cuh): a run-time division here was
  // ~20 dependent instructions ahead of every address. (A (tokens, chunks) grid would spare this
  // one, but it made ptxas spill more in kModeCache: 54 -> 90 bytes at bf16 x 128.)
  const int token = fast_div(int(blockIdx.x), p.a.chunks_div);
  const int chunk = int(blockIdx.x) - token * p.a.chunks;
  const int slots = int(blockDim.x) / kUnits;
  // Slot-major (thread t is unit t % kUnits of slot t / kUnits): a warp reads whole heads, the
  // layout for bandwidth. Unit-major (unit t / slots of slot t % slots; the host picks it at decode
  // sizes): a warp's threads share one or two units, so their reads of the frequency table, which
  // are indexed by unit, hit the constant cache at one or two addresses instead of up to eight
  // serialized ones; lanes then read 16 bytes of many heads per request, which costs bandwidth
  // (76.9% of copy against 92.2% at 65536 tokens on the H200) but not latency.
  const int unit =
      UNIT_MAJOR ? fast_div(int(threadIdx.x), p.a.slots_div) : int(threadIdx.x) % kUnits;
  const int slot = UNIT_MAJOR ? int(threadIdx.x) - unit * slots : int(threadIdx.x) / kUnits;
  const int f0 = unit * kFreqs;
  // The position is read after the first heads' loads are issued (below): nothing about a head's
  // address depends on it, and read first it held them back (ptxas moved it to a uniform
  // register, which waits for the load, ahead of the head addresses): two serial L2 round trips
  // at decode sizes instead of one.
  long long pos = 0;
  auto load_position = [&] {
    if constexpr (MODE == kModeIndptr) {
      pos = detail::indptr_position(p.a, token);
    } else {
      pos = p.a.pos_bytes == 8 ? __ldg(static_cast<const long long*>(p.a.pos) + token)
                               : __ldg(static_cast<const int*>(p.a.pos) + token);
    }
  };
  // Computed after the first heads' loads are issued (below), so sincospif / the cache reads
  // overlap their DRAM latency instead of preceding it: at prefill sizes each block is one
  // token's ~10 KB and lives for about one DRAM round trip.
  float cs[kFreqs], sn[kFreqs];
  auto compute_angles = [&] {
    if constexpr (MODE != kModeCache) {
      const float pf = float(pos);
#pragma unroll
      for (int e = 0; e < kFreqs; ++e) {
        // fp32 outputs keep the 1-ulp sincospif; 16-bit outputs cannot see the difference.
        if constexpr (sizeof(DTYPE) == 2) {
          detail::fast_sincos_of_position(pf, p.freq[2 * (f0 + e)], p.freq[2 * (f0 + e) + 1],
                                          &sn[e], &cs[e]);
        } else {
          detail::sincos_of_position(pf, p.freq[2 * (f0 + e)], p.freq[2 * (f0 + e) + 1], &sn[e],
                                     &cs[e]);
        }
      }
    } else {
      const char* row = static_cast<const char*>(p.a.cos_sin) +
                        pos * p.a.cache_stride * (p.a.cache_dtype == kCacheF32 ? 4 : 2);
#pragma unroll
      for (int e = 0; e < kFreqs; ++e) {
        cs[e] = detail::load_cache(row, f0 + e, p.a.cache_dtype);
        sn[e] = detail::load_cache(row, kHalf + f0 + e, p.a.cache_dtype);
      }
    }
  };
  bool have_angles = false;

  // Offset in the head of this thread's j-th vector.
  auto elem_offset = [unit](int j) { return Shape::elem_offset(unit, j); };
  const detail::HeadChunk heads = detail::head_chunk(p.a, chunk);
  const int h_begin = heads.begin, h_end = heads.end;
  const long long tk = token;

  for (int h0 = h_begin + slot; h0 < h_end; h0 += kInFlight * slots) {
    V x[kInFlight][kLoads];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots;
      if (h < h_end) {
        const DTYPE* src = Shape::head_in(p.a, tk, h);
#pragma unroll
        for (int j = 0; j < kLoads; ++j) x[i][j].load(src + elem_offset(j));
      }
    }
    if (!have_angles) {
      load_position();
      // The whole block belongs to this token, so leaving early strands nothing; the heads
      // just loaded are in bounds whatever the position.
      if (MODE == kModeCache && (pos < 0 || pos >= p.a.max_pos)) return;
      compute_angles();
      have_angles = true;
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots;
      if (h < h_end) {
        float v[kLoads * VEC];
        detail::rotate<INTERLEAVE>(x[i], cs, sn, v);
        DTYPE* dst = Shape::head_out(p.a, tk, h);
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
          V o;
#pragma unroll
          for (int e = 0; e < VEC; ++e) o[e] = from_float<DTYPE>(v[j * VEC + e]);
          o.store(dst + elem_offset(j));
        }
      }
    }
  }

  Shape::copy_pass(p.a, tk, h_begin + slot, h_end, slots, unit);
}

// Decode sizes (the host picks it for at most kRopeUnitMajorMaxTokens tokens when the shape
// allows, see rope_decode_supported in src/ops/rope/rope.cpp): a block covers one token's heads
// [chunk * heads_per_chunk, ...), slot-major (a warp reads whole heads), and a thread owns at
// most a head or two, so what decides its time is the path after the programmatic-launch wait.
// Three things make that path short:
//   - Everything that does not read global memory is done before the wait (pinned there with
//     pdl_pin_before_wait / pdl_pin_float): the token, unit and slot, the first head's addresses
//     and this lane's frequency pairs (kernel parameters, not memory any kernel writes).
//   - Each angle is computed once per warp instead of once per head: a warp covers every unit
//     (32 % kUnits == 0), so lane l computes the angles of frequencies l * kA .. l * kA + kA - 1
//     (kA = ceil(ROT_DIM / 2 / 32)) and each lane takes the kFreqs of its unit with shuffles. The
//     generic kernel's thread computed kFreqs angles (8 for bf16 x 128: 16 MUFU and 8 FRND, on
//     quarter-rate pipes) for one head; here it computes kA (2 for bf16 x 128). The angle math
//     is the generic kernel's, so results are bitwise equal to it.
//   - The head's and the position's loads are the first instructions after the wait.
// EARLY_POS (the host's KJIT_PDL_EARLY_INDICES): the position load is issued before the wait and
// consumed after it, so the angles (or, in kModeCache, the cache row's loads) follow the wait
// at once, beside the head's loads. Only the load goes early: computing the angles before the
// wait too was 0.25 us slower back to back on the H200 than the default (a dependent
// block's time before its wait is on the chain when it exceeds the predecessor's time after
// its own). The caller promises that the kernel just before does not write pos_ids (kModeIndptr:
// indptr and offsets, whose whole search then runs before the wait).
// Launch with grid = tokens * p.a.chunks and block = kUnits * slots threads, a multiple of 32,
// at most 256; the rest as rope_kernel.
// clang-format off
template <typename DTYPE, int HEAD_DIM, int ROT_DIM, bool INTERLEAVE, int VEC, int MODE,
          bool EARLY_POS>
__global__ void __launch_bounds__(256)
rope_decode_kernel(const __grid_constant__ RopeParams<MODE != kModeCache ? ROT_DIM / 2 : 1> p) {
  // clang-format on
  using Shape = detail::RopeShape<DTYPE, HEAD_DIM, ROT_DIM, INTERLEAVE, VEC, MODE>;
  static_assert(sizeof(DTYPE) == 2, "16-bit q / k only (as the host serves)");
  constexpr int kHalf = Shape::kHalf;
  constexpr int kLoads = Shape::kLoads;
  constexpr int kUnits = Shape::kUnits;
  constexpr int kFreqs = Shape::kFreqs;
  static_assert(kUnits * kFreqs == kHalf, "a head's units cover its frequencies");
  static_assert(kUnits <= 32 && 32 % kUnits == 0, "a warp must cover every unit");
  // Angles per lane: lane l owns frequencies l * kA + r, r < kA.
  constexpr int kA = kHalf <= 32 ? 1 : kHalf / 32;
  static_assert(kA * 32 >= kHalf && kFreqs % kA == 0, "angles per lane");
  using V = Vec<DTYPE, VEC>;

  const int token = fast_div(int(blockIdx.x), p.a.chunks_div);
  const int chunk = int(blockIdx.x) - token * p.a.chunks;
  const int slots = int(blockDim.x) / kUnits;
  const int unit = int(threadIdx.x) % kUnits;
  const int slot = int(threadIdx.x) / kUnits;
  const int lane = int(threadIdx.x) & 31;
  auto elem_offset = [unit](int j) { return Shape::elem_offset(unit, j); };
  const detail::HeadChunk heads = detail::head_chunk(p.a, chunk);
  const int h_begin = heads.begin, h_end = heads.end;
  const long long tk = token;
  const int h = h_begin + slot;
  const bool has_head = h < h_end;
  const DTYPE* src = Shape::head_in(p.a, tk, has_head ? h : h_begin) + elem_offset(0);
  DTYPE* dst = Shape::head_out(p.a, tk, has_head ? h : h_begin) + elem_offset(0);

  // This lane's frequencies (clamped: lanes past the last one compute an angle nobody takes).
  int fl[kA];
#pragma unroll
  for (int r = 0; r < kA; ++r) fl[r] = min(lane * kA + r, kHalf - 1);
  float g_hi[MODE != kModeCache ? kA : 1], g_lo[MODE != kModeCache ? kA : 1];
  if constexpr (MODE != kModeCache) {
#pragma unroll
    for (int r = 0; r < kA; ++r) {
      g_hi[r] = p.freq[2 * fl[r]];
      g_lo[r] = p.freq[2 * fl[r] + 1];
    }
  }

  // sin / cos of the lane's own frequencies, then of its unit's, from the lanes that own them.
  float cs[kFreqs], sn[kFreqs];
  long long pos = 0;
  auto load_position = [&] {
    // Plain loads: ptxas keeps them where they are written (a read-only-path load it may sink
    // past the wait).
    if constexpr (MODE == kModeIndptr) {
      pos = detail::indptr_position(p.a, token);
    } else {
      pos = p.a.pos_bytes == 8 ? static_cast<const long long*>(p.a.pos)[token]
                               : static_cast<const int*>(p.a.pos)[token];
    }
  };
  auto compute_angles = [&] {
    float ms[kA], mc[kA];
    if constexpr (MODE != kModeCache) {
      // The int32 positions convert from 32 bits (the value is the same).
      const float pf = p.a.pos_bytes == 8 || MODE == kModeIndptr ? float(pos) : float(int(pos));
#pragma unroll
      for (int r = 0; r < kA; ++r) {
        detail::fast_sincos_of_position(pf, g_hi[r], g_lo[r], &ms[r], &mc[r]);
      }
    } else {
      const char* row = static_cast<const char*>(p.a.cos_sin) +
                        pos * p.a.cache_stride * (p.a.cache_dtype == kCacheF32 ? 4 : 2);
#pragma unroll
      for (int r = 0; r < kA; ++r) {
        mc[r] = detail::load_cache(row, fl[r], p.a.cache_dtype);
        ms[r] = detail::load_cache(row, kHalf + fl[r], p.a.cache_dtype);
      }
    }
#pragma unroll
    for (int e = 0; e < kFreqs; ++e) {
      const int from = unit * (kFreqs / kA) + e / kA;
      cs[e] = __shfl_sync(0xffffffffu, mc[e % kA], from);
      sn[e] = __shfl_sync(0xffffffffu, ms[e % kA], from);
    }
  };

  const int* pos_word = MODE == kModeIndptr
                            ? static_cast<const int*>(p.a.indptr)
                            : static_cast<const int*>(p.a.pos) + token * (p.a.pos_bytes / 4);
  // The first head's addresses (aligned: their OR is never 1).
  pdl_pin_before_wait(
      reinterpret_cast<unsigned long long>(src) | reinterpret_cast<unsigned long long>(dst),
      pos_word);
  // Issued here, consumed after the wait (ptxas keeps a plain load where it is written).
  if constexpr (EARLY_POS) load_position();
  if constexpr (MODE != kModeCache) {
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kA; ++r) sum += g_hi[r] + g_lo[r];
    pdl_pin_float(sum, pos_word);
  }
  pdl_wait();
  pdl_launch_dependents();

  V x[kLoads];
  if (has_head) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) x[j].load(src + (elem_offset(j) - elem_offset(0)));
  }
  if constexpr (!EARLY_POS) load_position();
  if (MODE == kModeCache && (pos < 0 || pos >= p.a.max_pos)) return;
  compute_angles();

  // out: the head's first vector (elem_offset(0)).
  auto rotate_store = [&](const V* xh, DTYPE* out) {
    float v[kLoads * VEC];
    detail::rotate<INTERLEAVE>(xh, cs, sn, v);
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      V o;
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = from_float<DTYPE>(v[j * VEC + e]);
      o.store(out + (elem_offset(j) - elem_offset(0)));
    }
  };
  if (has_head) rotate_store(x, dst);
  // More heads than slots in this block (the host avoids it at decode sizes): one at a time.
  for (int hh = h + slots; hh < h_end; hh += slots) {
    V y[kLoads];
    const DTYPE* s2 = Shape::head_in(p.a, tk, hh);
#pragma unroll
    for (int j = 0; j < kLoads; ++j) y[j].load(s2 + elem_offset(j));
    rotate_store(y, Shape::head_out(p.a, tk, hh) + elem_offset(0));
  }

  Shape::copy_pass(p.a, tk, h, h_end, slots, unit);
}

}  // namespace rope
}  // namespace kjit
