// kjit_all_reduce and kjit_all_reduce_add_rmsnorm on the GPU: each test starts one process per
// rank (tests/gpu/comm_worker.cpp), which checks its outputs against the fp64 reference (exact
// sums of integers, random inputs, in place, strided rows, odd sizes, pipelined calls, a graph
// replayed with new inputs) and prints a digest of each output; here every rank must pass and
// every rank's digests agree (the one-shot kernel sums in rank order, so all ranks hold the same
// bits).
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kjit/kjit.h"
#include "ops/comm/communicator.hpp"
#include "support/gpu.hpp"
#include "support/shell.hpp"

namespace {

std::string hex(const kjit_comm_id& id) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (char c : id.bytes) {
    s += d[(static_cast<unsigned char>(c) >> 4) & 15];
    s += d[static_cast<unsigned char>(c) & 15];
  }
  return s;
}

// Runs `world` workers (rank r on device device_of(r)) and checks them.
void run_group(const std::string& mode, int world, bool one_device, const kjit_comm_id& id) {
  const unsigned long long seed = std::random_device{}();
  std::vector<kjit::test::ShellRun> runs(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    const std::string cmd = std::string(KJIT_COMM_WORKER) + " " + mode + " " + std::to_string(r) +
                            " " + std::to_string(world) + " " + std::to_string(one_device ? 0 : r) +
                            " " + hex(id) + " " + std::to_string(seed) + " 2>&1";
    ranks.emplace_back([&runs, r, cmd] { runs[r] = kjit::test::run_shell(cmd); });
  }
  for (auto& t : ranks) t.join();
  std::map<std::string, std::string> digests;  // case -> rank 0's digest
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world << " (" << mode << ", seed " << seed << "):\n"
                 << runs[r].out);
    CHECK(runs[r].code == 0);
    std::istringstream lines(runs[r].out);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      if (line.rfind("digest ", 0) != 0) continue;
      ++n;
      const size_t cut = line.rfind(' ');
      const std::string what = line.substr(7, cut - 7), value = line.substr(cut + 1);
      if (r == 0) digests[what] = value;
      INFO(what);
      CHECK(digests[what] == value);
    }
    CHECK(n >= 42);  // every case reported
  }
}

}  // namespace

TEST_CASE("comm gpu: a group of one runs the one-shot kernel and copies large messages",
          "[gpu][comm]") {
  kjit_comm_id id;
  kjit::ops::make_kjit_comm_id(&id);
  run_group("ipc", 1, true, id);
}

TEST_CASE("comm gpu: two processes on one device all-reduce through CUDA IPC", "[gpu][comm]") {
  kjit_comm_id id;
  kjit::ops::make_kjit_comm_id(&id);
  run_group("ipc", 2, true, id);
}

TEST_CASE("comm gpu: three processes on one device (an odd group): an NCCL id, NCCL left out",
          "[gpu][comm]") {
  // With NCCL loadable the id is NCCL's, and KJIT_COMM_NCCL_AUTO must still come up: ranks that
  // share a GPU agree to go without NCCL (which would refuse them).
  kjit_comm_id id;
  REQUIRE(kjit_comm_get_unique_id(&id) == KJIT_SUCCESS);
  run_group("auto", 3, true, id);
}

TEST_CASE("comm gpu: two GPUs, NCCL for large messages", "[gpu][comm][multi_gpu]") {
  kjit_comm_id id;
  REQUIRE(kjit_comm_get_unique_id(&id) == KJIT_SUCCESS);
  INFO("an NCCL id needs NCCL: " << kjit_last_error());
  REQUIRE_FALSE(kjit::ops::is_kjit_comm_id(id));
  run_group("nccl", 2, false, id);
}
