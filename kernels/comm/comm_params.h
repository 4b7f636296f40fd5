// Parameters of the tensor-parallel communication kernels (kernels/comm/*.cuh) and the layout of
// the peer-shared region each rank allocates once at kjit_comm_init. Included by NVRTC and by the
// host (src/ops/comm/), so plain C types only. The names and namespace are part of the kernels'
// mangled names: keep them.
//
// The region (one cuMemAlloc per rank, mapped into every other rank through CUDA IPC):
//   [0, kCommFlagsBytes)              flags[kCommMaxBlocks][kCommMaxRanks] (u32): flags[b][s] is
//                                     the epoch at which rank s's block b last arrived here
//   [kCommFlagsBytes, +8)             epoch, blocks_done (u32): this rank's call counter, only
//                                     ever touched by this rank
//   [kCommDataOffset, + 2 half_bytes) two staging halves, used by calls of odd / even epoch
#pragma once

namespace kjit {
namespace comm {

// Protocol sizes (not hardware limits): at most this many ranks, and a grid of at most this many
// blocks, each block with its own arrival flag per rank.
constexpr int kCommMaxRanks = 8;
constexpr int kCommMaxBlocks = 128;
constexpr long long kCommFlagsBytes = 4LL * kCommMaxBlocks * kCommMaxRanks;
constexpr long long kCommDataOffset = kCommFlagsBytes + 256;  // 256-byte aligned staging

// What both one-shot kernels know of the communicator.
struct CommPeers {
  char* region[kCommMaxRanks];  // each rank's region as mapped here (this rank's own included)
  long long half_bytes;         // bytes of one staging half
  int rank;
  int world;
};

// one_shot_all_reduce_kernel (kernels/comm/all_reduce.cuh).
struct AllReduceParams {
  CommPeers peers;
  const void* in;  // [numel], compact
  void* out;       // [numel], compact; may be in itself
  long long numel;
};

// all_reduce_add_rmsnorm_kernel (kernels/comm/all_reduce.cuh).
struct AllReduceAddRmsNormParams {
  CommPeers peers;
  const void* in;      // [rows, hidden], row stride in_stride: this rank's partial sums
  void* residual;      // [rows, hidden], row stride res_stride: read, then overwritten by the sum
  const void* weight;  // [hidden]
  void* out;           // [rows, hidden], row stride out_stride: the norm
  long long rows;
  long long hidden;
  long long in_stride;
  long long res_stride;
  long long out_stride;
  float eps;
};

}  // namespace comm
}  // namespace kjit
