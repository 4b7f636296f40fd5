// A host barrier among the processes of one communication group, for the tests and the bench to
// put before kjit_comm_destroy (collective: no rank may free its staging region while another can
// still read it). It meets through kjit's /dev/shm rendezvous under a key derived from the
// group's id, so it needs nothing the group does not already share.
#pragma once

#include "kjit/kjit.h"
#include "ops/comm/rendezvous.hpp"

namespace kjit::test {

inline void comm_barrier(const kjit_comm_id& id, int rank, int world) {
  kjit_comm_id key = id;
  key.bytes[sizeof key.bytes - 1] ^= 0x5a;  // not the id's own rendezvous file
  const char mine = 1;
  ops::file_allgather(ops::rendezvous_path("/dev/shm", key.bytes, sizeof key.bytes), rank, world,
                      &mine, 1, 120000);
}

}  // namespace kjit::test
