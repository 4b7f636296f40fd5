// The exchange kjit_comm_init needs once: every rank's small host blob (its staging region's
// CUDA IPC handle and its settings) to every rank. An engine that has a process group already
// passes its all-gather (kjit_comm_options.allgather); otherwise ranks on one host meet through a
// file in /dev/shm named after the communicator's id.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kjit::ops {

// The rendezvous file of one communicator: <dir>/kjit-comm-<32 hex digits of the id's hash>.
std::string rendezvous_path(const std::string& dir, const void* id, size_t id_bytes);

// Publishes `mine` (bytes long) as rank `rank` of `world` in the file at `path` and waits, polling,
// until every rank has: returns the world blobs in rank order. The last rank to read removes the
// file. Throws KJIT_ERROR_INVALID_ARGUMENT when the file was made for another world size or blob
// size, or when rank's slot is taken, and when not every rank has arrived within timeout_ms
// (naming the missing ranks); the file is then removed, so a retry starts afresh.
std::vector<char> file_allgather(const std::string& path, int rank, int world, const void* mine,
                                 size_t bytes, int timeout_ms);

}  // namespace kjit::ops
