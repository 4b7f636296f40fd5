// kjit_comm (include/kjit/kjit.h): a rank's place in a tensor-parallel group, its staging region
// and every peer's (mapped once at init through CUDA IPC), and its NCCL communicator when
// messages above the one-shot size have NCCL to go to. Device code: kernels/comm/.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

#include "kjit/kjit.h"
#include "comm/comm_params.h"

namespace kjit::ops {

// The largest small_max_bytes an options struct may ask for (each rank then holds twice that).
inline constexpr size_t kCommMaxSmallBytes = size_t{64} << 20;
inline constexpr size_t kCommDefaultSmallBytes = size_t{1} << 20;
inline constexpr int kCommDefaultTimeoutMs = 60000;

// The options a communicator is made with, checked (kjit_comm_options, NULL: the defaults).
// Throws KJIT_ERROR_INVALID_ARGUMENT naming the field.
kjit_comm_options comm_options(const kjit_comm_options* options);

// Checks kjit_comm_init's other arguments; throws KJIT_ERROR_INVALID_ARGUMENT naming the first
// bad one.
void check_comm_init(const kjit_comm_id* id, int rank, int world_size, int device,
                     kjit_comm** comm);

// A kjit-made id (random bytes behind a tag) rather than NCCL's: such a communicator has no
// NCCL path.
void make_kjit_comm_id(kjit_comm_id* id);
bool is_kjit_comm_id(const kjit_comm_id& id);

// Whether this communicator gets an NCCL communicator: "" when it does, else why not (the text
// large messages then fail with). Throws KJIT_ERROR_UNSUPPORTED (NCCL not found) or
// KJIT_ERROR_INVALID_ARGUMENT (a kjit-made id) when options.nccl is KJIT_COMM_NCCL_REQUIRED.
std::string comm_nccl_plan(const kjit_comm_options& options, const kjit_comm_id& id, int world,
                           bool nccl_loads, const std::string& nccl_missing);

// What one rank publishes at init, and checks of every rank's against its own (same world,
// same staging size, same NCCL plan, slot r from rank r).
struct CommBlob {
  uint64_t magic;
  int32_t rank;
  int32_t world;
  int64_t half_bytes;
  int32_t nccl;    // 1: this rank can create an NCCL communicator
  int32_t pci[3];  // the GPU's PCI domain, bus and device
  CUipcMemHandle handle;
};
void check_comm_blobs(const CommBlob* all, int world, const CommBlob& mine);

// "" when every rank has a GPU of its own, else which ranks share one (NCCL refuses two ranks on
// one GPU, so such a group has no NCCL path; every rank sees the same blobs and decides alike).
std::string comm_shared_gpu(const CommBlob* all, int world);

}  // namespace kjit::ops

struct kjit_comm {
  int rank = 0;
  int world = 1;
  int device = 0;
  size_t small_max_bytes = 0;     // the one-shot path's largest message
  kjit::comm::CommPeers peers{};  // regions as mapped here, half_bytes, rank, world
  CUdeviceptr own = 0;            // this rank's region (peers.region[rank])
  void* nccl = nullptr;           // a kjit::cuda::NcclComm, or NULL
  std::string no_nccl;            // why nccl is NULL ("" when it is not)

  kjit_comm() = default;
  kjit_comm(const kjit_comm&) = delete;
  kjit_comm& operator=(const kjit_comm&) = delete;
  // Unmaps the peers, destroys the NCCL communicator and frees the region; never throws.
  ~kjit_comm();
};

namespace kjit::ops {

// kjit_comm_init: validates, allocates and clears the region, exchanges handles (options'
// all-gather, else the /dev/shm file), maps the peers, creates the NCCL communicator.
kjit_comm* comm_init(const kjit_comm_id* id, int rank, int world_size, int device,
                     const kjit_comm_options* options);

// kjit_comm_get_unique_id: NCCL's id when NCCL loads, else a kjit-made one.
void comm_unique_id(kjit_comm_id* id);

}  // namespace kjit::ops
