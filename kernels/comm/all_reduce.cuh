// All-reduce (sum) over the ranks of a communicator, one-shot over peer-mapped staging buffers
// (protocol in one_shot.cuh), and the same fused with the residual add and RMSNorm that follow
// it in a tensor-parallel decoder block:
//
//   all_reduce:              out = DTYPE(sum over ranks of in), summed in fp32 in rank order
//   all_reduce_add_rmsnorm:  a = DTYPE(sum over ranks of in) (as all_reduce stores it);
//                            residual = DTYPE(a + residual);
//                            out = DTYPE(residual * rsqrt(mean(residual^2) + eps) * weight)
//
// The fused form is the unfused pair all_reduce then kjit_fused_add_rmsnorm (the norm family's
// add_rows / normalise, kernels/norm/fused_add_rmsnorm.cuh), with the summed row never written
// to memory.
#pragma once

#include "common/prelude.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "comm/comm_params.h"
#include "comm/one_shot.cuh"
#include "norm/fused_add_rmsnorm.cuh"

namespace kjit {
namespace comm {

// Launch with the same grid on every rank: grid = min(ceil(numel / VEC / THREADS),
// kCommMaxBlocks), block = THREADS, no dynamic shared memory; never as a programmatic dependent
// (the epoch read needs the previous call complete). numel is a multiple of VEC; in, out and the
// staging halves are aligned to VEC * sizeof(DTYPE); numel * sizeof(DTYPE) <= half_bytes.
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, int WORLD, int VEC, int THREADS>
__global__ void __launch_bounds__(THREADS)
one_shot_all_reduce_kernel(const __grid_constant__ AllReduceParams p) {
  // clang-format on
  using V = Vec<DTYPE, VEC>;
  const u32 epoch = one_shot::begin(p.peers);
  // int indices: a message is at most 64 MiB (kjit_comm_options), so below 2^31 vectors; with
  // 64-bit ones ptxas spilled 8 bytes (fp32, 4 ranks, sm_90a).
  const int vecs = int(p.numel / VEC);
  const int first = int(blockIdx.x) * THREADS + int(threadIdx.x);
  const int step = int(gridDim.x) * THREADS;

  DTYPE* staged = one_shot::own_staging<DTYPE>(p.peers, epoch);
  const DTYPE* in = static_cast<const DTYPE*>(p.in);
  for (int v = first; v < vecs; v += step) {
    V x;
    x.load(in + (long long)v * VEC);
    x.store(staged + (long long)v * VEC);
  }
  one_shot::arrive_and_wait<WORLD>(p.peers, epoch);

  DTYPE* out = static_cast<DTYPE*>(p.out);
  for (int v = first; v < vecs; v += step) {
    float acc[VEC];
    one_shot::sum_staged<WORLD, V, DTYPE>(acc, p.peers, epoch, (long long)v * VEC);
    V o;
    norm::detail::round_into(o, [&](int e) { return acc[e]; });
    o.store(out + (long long)v * VEC);
  }
  one_shot::finish(p.peers, epoch);
}

// Launch with the same grid on every rank: grid = min(rows, kCommMaxBlocks) (a block takes rows
// blockIdx.x, + gridDim.x, ...), block = THREADS, no dynamic shared memory; not as a programmatic
// dependent. hidden is a multiple of VEC; every pointer and row stride is aligned to
// VEC * sizeof(DTYPE); rows * hidden * sizeof(DTYPE) <= half_bytes. residual overlaps nothing
// else; out may not overlap residual or weight (in may be out).
// clang-format off
template <typename DTYPE, int WORLD, int VEC, int THREADS>
__global__ void __launch_bounds__(THREADS)
all_reduce_add_rmsnorm_kernel(const __grid_constant__ AllReduceAddRmsNormParams p) {
  // clang-format on
  using V = Vec<DTYPE, VEC>;
  const u32 epoch = one_shot::begin(p.peers);
  const long long vecs = p.hidden / VEC;

  // Rows are staged compact (row r at r * hidden), whatever in's row stride.
  DTYPE* staged = one_shot::own_staging<DTYPE>(p.peers, epoch);
  const DTYPE* in = static_cast<const DTYPE*>(p.in);
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    for (long long v = threadIdx.x; v < vecs; v += THREADS) {
      V x;
      x.load(in + row * p.in_stride + v * VEC);
      x.store(staged + row * p.hidden + v * VEC);
    }
  }
  one_shot::arrive_and_wait<WORLD>(p.peers, epoch);

  __shared__ float partials[THREADS / 32];
  const DTYPE* w = static_cast<const DTYPE*>(p.weight);
  const float inv_hidden = 1.0f / float(p.hidden);
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    DTYPE* res = static_cast<DTYPE*>(p.residual) + row * p.res_stride;
    DTYPE* out = static_cast<DTYPE*>(p.out) + row * p.out_stride;
    float ss = 0.0f;
    // Not unrolled: the loads of every rank's vector already fill the registers (fp32 with 8
    // ranks spilled when two iterations were interleaved).
#pragma unroll 1
    for (long long v = threadIdx.x; v < vecs; v += THREADS) {
      float acc[VEC];
      one_shot::sum_staged<WORLD, V, DTYPE>(acc, p.peers, epoch, row * p.hidden + v * VEC);
      V a;
      norm::detail::round_into(a, [&](int e) { return acc[e]; });
      V r;
      r.load(res + v * VEC);
      V s;
      ss = norm::fused_add_rmsnorm::add_rows(s, a, r, ss);
      s.store(res + v * VEC);
    }
    // Ends on a barrier, so the next row may reuse partials.
    const float inv_rms = rsqrtf(block_reduce_sum<THREADS>(ss, partials) * inv_hidden + p.eps);
    // Each thread reads back only the residual vectors it wrote itself (program order).
    for (long long v = threadIdx.x; v < vecs; v += THREADS) {
      V s;
      s.load(res + v * VEC);
      V wv;
      wv.load_ro(w + v * VEC);
      V o;
      norm::fused_add_rmsnorm::normalise(o, s, wv, inv_rms, 0.0f);
      o.store(out + v * VEC);
    }
  }
  one_shot::finish(p.peers, epoch);
}

}  // namespace comm
}  // namespace kjit
