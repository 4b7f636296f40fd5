// Building blocks shared by the row-wise normalisations (RMSNorm, fused add + RMSNorm,
// LayerNorm): how much of a row a thread may keep in registers, the row reduction, and the
// launch shapes those reductions accept.
#pragma once

#include "common/prelude.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"

namespace kjit {
namespace norm {
namespace detail {

// A thread keeps its share of the row in registers when it is at most this many vectors
// (128 bytes at 16-byte vectors); beyond that the unrolled row would crowd out occupancy.
constexpr int kMaxCachedVecs = 8;

// Registers left for addresses, loop state and the reduction when sizing register arrays.
constexpr int kRegReserve = 32;

KJIT_HOST_DEVICE constexpr int clamp_int(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// What __launch_bounds__(threads) lets the compiler use per thread; register arrays are sized
// against it so a cached row never spills to local memory.
KJIT_HOST_DEVICE constexpr int reg_cap(int threads) {
  return clamp_int(65536 / threads, 24, 255);
}

// 32-bit registers one Vec<T, VEC> occupies.
template <typename T, int VEC>
KJIT_HOST_DEVICE constexpr int regs_per_vec() {
  return int(VEC * sizeof(T) + 3) / 4;
}

// Only shapes whose row reduction is a warp shuffle (rows of at most a warp, whole warps per
// block so every shuffle has 32 lanes) or a block reduction over a block that holds one row (so
// the block is all-in or all-out of range and no barrier is stranded).
KJIT_HOST_DEVICE constexpr bool valid_row_shape(int threads_per_row, int rows_per_block) {
  return threads_per_row >= 1 && rows_per_block >= 1 && threads_per_row * rows_per_block <= 1024 &&
         ((threads_per_row <= 32 && (threads_per_row & (threads_per_row - 1)) == 0 &&
           threads_per_row * rows_per_block % 32 == 0) ||
          (rows_per_block == 1 && threads_per_row % 32 == 0));
}

// Rows within one warp reduce with shuffles alone; a block per row goes through shared memory.
// Safe to call twice in a row with the same `partials` (block_reduce_sum ends on a barrier) unless
// ONCE: the last use of `partials` in the kernel, no trailing barrier.
template <int THREADS_PER_ROW, bool ONCE = false>
KJIT_DEVICE KJIT_FORCEINLINE float row_sum(float s, float* partials) {
  if constexpr (THREADS_PER_ROW <= 32) {
    (void)partials;
    return warp_reduce_sum<THREADS_PER_ROW>(s);
  } else {
    return block_reduce_sum<THREADS_PER_ROW, ONCE>(s, partials);
  }
}

// out[e] = T(value(e)) for e < VEC. 16-bit types convert two at a time (cvt.rn.f16x2.f32 /
// cvt.rn.bf16x2.f32, the same round-to-nearest-even as from_float): one instruction per pair
// that writes the packed register directly. Element-wise 16-bit writes into a vector that stays
// live made ptxas spill for sm_90 (fp16 x 4096 fused add + RMSNorm: 24 bytes; none this way).
template <typename T, int VEC, typename F>
KJIT_DEVICE KJIT_FORCEINLINE void round_into(Vec<T, VEC>& out, F&& value) {
  constexpr bool kPairs = VEC % 2 == 0;
  if constexpr (kPairs && IsSame<T, __half>::value) {
#pragma unroll
    for (int e = 0; e < VEC; e += 2) {
      reinterpret_cast<__half2*>(out.v)[e / 2] = __floats2half2_rn(value(e), value(e + 1));
    }
  } else if constexpr (kPairs && IsSame<T, __nv_bfloat16>::value) {
#pragma unroll
    for (int e = 0; e < VEC; e += 2) {
      reinterpret_cast<__nv_bfloat162*>(out.v)[e / 2] =
          __floats2bfloat162_rn(value(e), value(e + 1));
    }
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = from_float<T>(value(e));
  }
}

// N elements of T read as one or more accesses of at most 16 bytes: lets a parameter vector be
// wider than the activation vector it pairs with (fp32 gamma beside 8 bf16 inputs is 32 bytes).
// The pointer must be aligned to min(N * sizeof(T), 16) bytes.
template <typename T, int N>
struct ParamVec {
  static constexpr int kPer = int(N * sizeof(T)) <= 16 ? N : int(16 / sizeof(T));
  static constexpr int kParts = N / kPer;
  static_assert(kPer * kParts == N, "N must be a power of two");
  Vec<T, kPer> part[kParts];

  KJIT_DEVICE KJIT_FORCEINLINE float get(int i) const { return to_float(part[i / kPer][i % kPer]); }
  // Read-only path: parameters are never written by the kernels that read them.
  KJIT_DEVICE KJIT_FORCEINLINE void load_ro(const T* p) {
#pragma unroll
    for (int j = 0; j < kParts; ++j) part[j].load_ro(p + j * kPer);
  }
  // Coherent load: see the kernels for why it is sometimes preferred on read-only data.
  KJIT_DEVICE KJIT_FORCEINLINE void load(const T* p) {
#pragma unroll
    for (int j = 0; j < kParts; ++j) part[j].load(p + j * kPer);
  }
};

// The decode-size variants (EARLY_PARAMS): load(k, v) for each vector v = t + k * THREADS_PER_ROW
// of the row that thread t of its row takes (the indices the kernels' row loops use), then the
// programmatic-launch wait. load reads row-length parameters (weight, gamma, beta) with plain
// loads, which ptxas keeps before the wait; no kernel on the stream writes them while a forward
// pass runs (see pdl_wait in prelude.cuh), so their L2 round trip overlaps the predecessor's tail.
template <int THREADS_PER_ROW, int THREADS, int VECS, typename F>
KJIT_DEVICE KJIT_FORCEINLINE void load_params_then_wait(F&& load) {
  constexpr int kIters = (VECS + THREADS_PER_ROW - 1) / THREADS_PER_ROW;
  constexpr bool kEven = VECS % THREADS_PER_ROW == 0;
  const int t = THREADS_PER_ROW == THREADS ? int(threadIdx.x) : int(threadIdx.x) % THREADS_PER_ROW;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int v = t + k * THREADS_PER_ROW;
    if (kEven || k < kIters - 1 || v < VECS) load(k, v);
  }
  pdl_wait();
  pdl_launch_dependents();
}

// A row-length parameter vector (weight, gamma, beta: PV, a Vec or ParamVec) for each of a
// thread's vectors of a row held in registers, read at one of three points: before the
// programmatic-launch wait (EARLY, plain loads: see load_params_then_wait), with the row
// (PREFETCH: read-only loads issued beside x's, whose latency they hide where the registers allow
// holding them), or only when the output loop needs it (neither).
template <typename PV, int ITERS, bool EARLY, bool PREFETCH>
struct RowParam {
  PV early[EARLY ? ITERS : 1];
  PV with_row[PREFETCH && !EARLY ? ITERS : 1];

  template <typename T>
  KJIT_DEVICE KJIT_FORCEINLINE void load_early(int k, const T* p) {
    early[k].load(p);
  }
  template <typename T>
  KJIT_DEVICE KJIT_FORCEINLINE void load_with_row(int k, const T* p) {
    if constexpr (PREFETCH && !EARLY) with_row[k].load_ro(p);
  }
  // The parameters of vector k (at p) into out (an out parameter: a returned vector had its
  // 16-bit halves unpacked in another order).
  template <typename T>
  KJIT_DEVICE KJIT_FORCEINLINE void get(int k, const T* p, PV& out) const {
    if constexpr (EARLY) {
      out = early[k];
    } else if constexpr (PREFETCH) {
      out = with_row[k];
    } else {
      // A coherent load on purpose: it stays ordered after the previous store, so ptxas cannot
      // hoist every parameter load to the top and overflow the tight register cap that made the
      // kernel skip the prefetch in the first place.
      out.load(p);
    }
  }
};

// ss + the sum of x[e]^2 over the vector, in fp32.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE float add_squares(float ss, const V& x) {
#pragma unroll
  for (int e = 0; e < V::kSize; ++e) {
    const float f = to_float(x[e]);
    ss = fmaf(f, f, ss);
  }
  return ss;
}

// Where a thread stands: which of its row's threads it is (tid), the row, and whether that row
// exists (an inactive thread stays for its warp's shuffles on row 0 and skips memory).
struct RowPlace {
  int tid;
  i64 row;
  bool active;
};

// The row skeleton the three norm kernels share: the launch shape's checks and sizes, the entry
// (early parameter reads and the programmatic-launch wait), the thread's place in the grid, the
// walks over the thread's vectors of a row and the row reduction. Each kernel adds its
// arithmetic, as lambdas these walks call for each vector that exists.
//
// A row of HIDDEN elements is kVecs vectors of VEC; thread tid of the row's THREADS_PER_ROW takes
// vectors v = tid + k * THREADS_PER_ROW, k < kIters, so a warp covers consecutive vectors
// (coalesced) and only the last k can run past the row end. ROWS_PER_BLOCK rows share a block.
// A row held in registers is walked with each(); a longer one in chunks of vectors loaded
// together (each_in_chunk), the first pass forwards, the second backwards from last_chunk (see
// rmsnorm_kernel).
template <typename DTYPE, int HIDDEN, int VEC, int THREADS_PER_ROW, int ROWS_PER_BLOCK>
struct RowWalk {
  static_assert(HIDDEN >= 1, "HIDDEN must be positive");
  static_assert(VEC >= 1 && HIDDEN % VEC == 0, "HIDDEN must be a multiple of VEC");
  static_assert(VEC * sizeof(DTYPE) <= 16, "a vector must fit one 16-byte access");
  // Only shapes whose row reduction cannot strand a shuffle or a barrier (see valid_row_shape).
  static_assert(valid_row_shape(THREADS_PER_ROW, ROWS_PER_BLOCK),
                "use THREADS_PER_ROW == 32 (or a power of two below it, with whole warps per "
                "block), or ROWS_PER_BLOCK == 1 with THREADS_PER_ROW a multiple of 32; at most "
                "1024 threads per block");

  using V = Vec<DTYPE, VEC>;
  static constexpr int kThreads = THREADS_PER_ROW * ROWS_PER_BLOCK;
  static constexpr int kVecs = HIDDEN / VEC;
  static constexpr int kIters = (kVecs + THREADS_PER_ROW - 1) / THREADS_PER_ROW;
  // When the vectors split evenly across the row's threads, no bounds checks are emitted at all.
  static constexpr bool kEven = kVecs % THREADS_PER_ROW == 0;
  // What __launch_bounds__(kThreads) lets the compiler use per thread, less the reserve: register
  // arrays are sized against it so a cached row never spills to local memory.
  static constexpr int kRegBudget = reg_cap(kThreads) - kRegReserve;
  static constexpr int kRegsPerVec = regs_per_vec<DTYPE, VEC>();
  // Block-reduction slots: only referenced (and so only allocated) when a row spans several warps.
  static constexpr int kPartials = THREADS_PER_ROW >= 32 ? THREADS_PER_ROW / 32 : 1;

  // The kernel: the entry, then body(place, partials) for the thread's row, partials being the
  // row reduction's shared memory (sum). EARLY: early(k, v) reads the row-length parameters of
  // each of the thread's vectors before the programmatic-launch wait (load_params_then_wait);
  // else only the wait (pdl_enter, see prelude.cuh). With a warp or more per row, being out of
  // range is uniform across everything that synchronises (the warp, or the whole block when it
  // holds a single row), so those threads leave before body and strand no shuffle or barrier.
  // Rows narrower than a warp share their warp's shuffles with neighbouring rows, so there an
  // out-of-range row stays (inactive, on row 0) and only skips memory.
  template <bool EARLY, typename Early, typename Body>
  static KJIT_DEVICE KJIT_FORCEINLINE void run(const long long& rows, Early&& early, Body&& body) {
    if constexpr (EARLY) {
      load_params_then_wait<THREADS_PER_ROW, kThreads, kVecs>(early);
    } else {
      pdl_enter();
    }
    RowPlace at;
    at.tid = THREADS_PER_ROW == kThreads ? int(threadIdx.x) : int(threadIdx.x) % THREADS_PER_ROW;
    at.row = i64(blockIdx.x) * ROWS_PER_BLOCK + int(threadIdx.x) / THREADS_PER_ROW;
    if (THREADS_PER_ROW >= 32 && at.row >= rows) return;
    at.active = THREADS_PER_ROW >= 32 || at.row < rows;
    if (!at.active) at.row = 0;
    __shared__ float partials[kPartials];
    body(at, partials);
  }

  // run() for the RMS norms, whose one early parameter is the weight: EARLY reads wk's (a
  // RowParam's) vectors from w before the wait.
  template <bool EARLY, typename W, typename Body>
  static KJIT_DEVICE KJIT_FORCEINLINE void run(const long long& rows, W& wk, const DTYPE* w,
                                               Body&& body) {
    run<EARLY>(
        rows, [&](int k, int v) { wk.load_early(k, w + v * VEC); }, body);
  }

  // Whether a thread may hold its share of the row in registers at regs_per_k registers for each
  // of its vectors (the row and what the kernel keeps beside it).
  static constexpr bool holds(int regs_per_k) {
    return kIters <= kMaxCachedVecs && kIters * regs_per_k <= kRegBudget;
  }

  // f(k, v) for each vector v = tid + k * THREADS_PER_ROW (k < kIters) of a row held in
  // registers that exists.
  template <typename F>
  static KJIT_DEVICE KJIT_FORCEINLINE void each(const RowPlace& at, F&& f) {
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int v = at.tid + k * THREADS_PER_ROW;
      if (in_row(at.active, k, v)) f(k, v);
    }
  }

  // The first vector index of the last chunk of CHUNK: where the backward pass starts. (The
  // chunk loops themselves stay in the kernels, `#pragma unroll 1`: a chunk's arrays declared in
  // a lambda that such a loop calls were kept in integer registers and changed the code.)
  template <int CHUNK>
  static constexpr int last_chunk() {
    return (kIters - 1) / CHUNK * CHUNK;
  }

  // f(u, v) for each vector v = tid + (k0 + u) * THREADS_PER_ROW (u < CHUNK) of the chunk that
  // exists: beyond the last full chunk some may not, even when kEven.
  template <int CHUNK, typename F>
  static KJIT_DEVICE KJIT_FORCEINLINE void each_in_chunk(const RowPlace& at, int k0, F&& f) {
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) {
      const int v = at.tid + (k0 + u) * THREADS_PER_ROW;
      if (in_range(at.active, v)) f(u, v);
    }
  }

  // 1 / the root mean square of the row whose thread-partial sum of squares is ss (the last use
  // of partials).
  static KJIT_DEVICE KJIT_FORCEINLINE float inv_rms(float ss, float* partials, const float& eps) {
    constexpr float kInvHidden = 1.0f / float(HIDDEN);
    return rsqrtf(sum<true>(ss, partials) * kInvHidden + eps);
  }

  // The RMS norms' output from a row held in registers (src): norm(o, src vector, weight vector)
  // stored to dst, the weight from wk (a RowParam). The row is made opaque first: the compiler
  // re-derives its fp32 values instead of keeping those of the sum of squares alive (twice the
  // registers).
  template <typename W, typename Norm>
  static KJIT_DEVICE KJIT_FORCEINLINE void weigh_cached(const RowPlace& at, V (&src)[kIters],
                                                        const W& wk, const DTYPE* w, DTYPE* dst,
                                                        Norm&& norm) {
    opaque(src);
    each(at, [&](int k, int v) {
      V wv;
      wk.get(k, w + v * VEC, wv);
      V o;
      norm(o, src[k], wv);
      o.store(dst + v * VEC);
    });
  }

  // The RMS norms' second pass over a long row (see rmsnorm_kernel): backwards by chunks of CHUNK,
  // each vector of src re-read as last use beside the weight's (read-only), then
  // norm(o, src vector, weight vector) streamed to dst.
  template <int CHUNK, typename Norm>
  static KJIT_DEVICE KJIT_FORCEINLINE void weigh_backward(const RowPlace& at, const DTYPE* src,
                                                          const DTYPE* w, DTYPE* dst, Norm&& norm) {
#pragma unroll 1
    for (int k0 = last_chunk<CHUNK>(); k0 >= 0; k0 -= CHUNK) {
      V sv[CHUNK];
      V wv[CHUNK];
      each_in_chunk<CHUNK>(at, k0, [&](int u, int v) {
        sv[u].load_last_use(src + v * VEC);
        wv[u].load_ro(w + v * VEC);
      });
      each_in_chunk<CHUNK>(at, k0, [&](int u, int v) {
        V o;
        norm(o, sv[u], wv[u]);
        o.store_streaming(dst + v * VEC);
      });
    }
  }

  // Whether vector v = tid + k * THREADS_PER_ROW of a row held in registers (k < kIters) exists.
  // (The loops test these calls rather than the expressions written out in their conditions: the
  // two compile to different branches and address arithmetic for uneven rows.)
  static KJIT_DEVICE KJIT_FORCEINLINE bool in_row(bool active, int k, int v) {
    return active && (kEven || k < kIters - 1 || v < kVecs);
  }

  // The same for any vector index (long rows' chunks: beyond the last full chunk some vectors may
  // not exist even when kEven).
  static KJIT_DEVICE KJIT_FORCEINLINE bool in_range(bool active, int v) {
    return active && v < kVecs;
  }

  // Hides a cached row's values from the compiler so it re-derives the fp32 values from the
  // packed row in the next loop instead of keeping the previous loop's alive (twice the
  // registers).
  template <int N>
  static KJIT_DEVICE KJIT_FORCEINLINE void opaque(V (&row)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) row[k].opaque();
  }

  // The sum of s over the row's threads (row_sum).
  template <bool ONCE = false>
  static KJIT_DEVICE KJIT_FORCEINLINE float sum(float s, float* partials) {
    return row_sum<THREADS_PER_ROW, ONCE>(s, partials);
  }
};

}  // namespace detail
}  // namespace norm
}  // namespace kjit
