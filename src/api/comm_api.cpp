// C entry points of the communication family.
#include "api/entry.hpp"
#include "ops/comm/all_reduce.hpp"
#include "ops/comm/communicator.hpp"

extern "C" {

KJIT_API void kjit_comm_options_init(kjit_comm_options* options) {
  if (options == nullptr) return;
  *options = kjit_comm_options{};
  options->struct_size = sizeof(kjit_comm_options);
  options->small_max_bytes = kjit::ops::kCommDefaultSmallBytes;
  options->nccl = KJIT_COMM_NCCL_AUTO;
  options->allgather = nullptr;
  options->allgather_user = nullptr;
  options->timeout_ms = kjit::ops::kCommDefaultTimeoutMs;
}

KJIT_API kjit_status kjit_comm_get_unique_id(kjit_comm_id* id) {
  return kjit::api::guarded("kjit_comm_get_unique_id", [&] { kjit::ops::comm_unique_id(id); });
}

KJIT_API kjit_status kjit_comm_init(const kjit_comm_id* id, int rank, int world_size, int device,
                                    const kjit_comm_options* options, kjit_comm** comm) {
  return kjit::api::guarded(
      "kjit_comm_init",
      [&](kjit::api::CallLog& log) {
        log.scalar("rank", rank).scalar("world_size", world_size).scalar("device", device);
      },
      [&] {
        kjit::ops::check_comm_init(id, rank, world_size, device, comm);
        *comm = kjit::ops::comm_init(id, rank, world_size, device, options);
      });
}

KJIT_API void kjit_comm_destroy(kjit_comm* comm) {
  delete comm;
}

KJIT_API kjit_status kjit_all_reduce(kjit_comm* comm, const DLTensor* in, DLTensor* out,
                                     void* stream) {
  return kjit::api::entry<&kjit_all_reduce>([&] { kjit::ops::all_reduce(comm, in, out, stream); },
                                            comm, in, out, stream);
}

KJIT_API kjit_status kjit_all_reduce_add_rmsnorm(kjit_comm* comm, const DLTensor* in,
                                                 const DLTensor* weight, DLTensor* residual,
                                                 DLTensor* out, float eps, void* stream) {
  return kjit::api::entry<&kjit_all_reduce_add_rmsnorm>(
      [&] { kjit::ops::all_reduce_add_rmsnorm(comm, in, weight, residual, out, eps, stream); },
      comm, in, weight, residual, out, eps, stream);
}

}  // extern "C"
