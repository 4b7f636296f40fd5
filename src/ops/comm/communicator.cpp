#include "ops/comm/communicator.hpp"

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/nccl.hpp"
#include "ops/comm/rendezvous.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

// The first bytes of a kjit-made id. NCCL's ids start with a random 64-bit magic, so one of them
// is taken for kjit's with probability 2^-64.
constexpr char kKjitIdTag[8] = {'k', 'j', 'i', 't', '-', 'i', 'd', '1'};
constexpr uint64_t kBlobMagic = 0x6b6a69742d626c31ULL;  // "kjit-bl1"
constexpr const char* kRendezvousDir = "/dev/shm";

size_t half_bytes_for(size_t small_max_bytes) {
  // Whole 256-byte units, so the second half starts as aligned as the first; at least one unit.
  const size_t units = (small_max_bytes + 255) / 256;
  return 256 * (units == 0 ? 1 : units);
}

std::vector<char> exchange(const kjit_comm_options& o, const kjit_comm_id& id, int rank, int world,
                           const CommBlob& mine) {
  if (o.allgather == nullptr) {
    return file_allgather(rendezvous_path(kRendezvousDir, id.bytes, sizeof id.bytes), rank, world,
                          &mine, sizeof mine, o.timeout_ms);
  }
  std::vector<char> all(sizeof mine * world);
  const int r = o.allgather(&mine, all.data(), sizeof mine, o.allgather_user);
  if (r != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->allgather returned {} (0 is success)", r);
  }
  return all;
}

}  // namespace

kjit_comm_options comm_options(const kjit_comm_options* given) {
  kjit_comm_options o;
  kjit_comm_options_init(&o);
  if (given == nullptr) return o;
  if (given->struct_size < sizeof(size_t) + sizeof(o.small_max_bytes)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "options->struct_size is {} (call kjit_comm_options_init first)", given->struct_size);
  }
  // The fields struct_size covers, each whole (a caller built against an older header has fewer).
  auto covers = [&](const auto& field) {
    const size_t end = static_cast<size_t>(reinterpret_cast<const char*>(&field) -
                                           reinterpret_cast<const char*>(given)) +
                       sizeof field;
    return given->struct_size >= end;
  };
  o.small_max_bytes = given->small_max_bytes;
  if (covers(given->nccl)) o.nccl = given->nccl;
  if (covers(given->allgather)) o.allgather = given->allgather;
  if (covers(given->allgather_user)) o.allgather_user = given->allgather_user;
  if (covers(given->timeout_ms)) o.timeout_ms = given->timeout_ms;
  if (o.small_max_bytes > kCommMaxSmallBytes) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->small_max_bytes is {}, more than {} (64 MiB)",
         o.small_max_bytes, kCommMaxSmallBytes);
  }
  if (o.nccl != KJIT_COMM_NCCL_AUTO && o.nccl != KJIT_COMM_NCCL_OFF &&
      o.nccl != KJIT_COMM_NCCL_REQUIRED) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->nccl is {}, not a kjit_comm_nccl (0, 1 or 2)",
         o.nccl);
  }
  if (o.timeout_ms < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->timeout_ms is {}, must be >= 0", o.timeout_ms);
  }
  return o;
}

void check_comm_init(const kjit_comm_id* id, int rank, int world_size, int device,
                     kjit_comm** comm) {
  if (comm == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "comm is NULL");
  *comm = nullptr;
  if (id == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "id is NULL");
  if (world_size < 1 || world_size > comm::kCommMaxRanks) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "world_size is {}, must be 1..{}", world_size,
         comm::kCommMaxRanks);
  }
  if (rank < 0 || rank >= world_size) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "rank is {}, must be 0..{} (world_size {})", rank,
         world_size - 1, world_size);
  }
  if (device < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "device is {}, must be >= 0", device);
}

void make_kjit_comm_id(kjit_comm_id* id) {
  std::random_device rd;
  for (size_t i = 0; i < sizeof id->bytes; i += 4) {
    const unsigned v = rd();
    std::memcpy(id->bytes + i, &v, 4);
  }
  std::memcpy(id->bytes, kKjitIdTag, sizeof kKjitIdTag);
}

bool is_kjit_comm_id(const kjit_comm_id& id) {
  return std::memcmp(id.bytes, kKjitIdTag, sizeof kKjitIdTag) == 0;
}

std::string comm_nccl_plan(const kjit_comm_options& o, const kjit_comm_id& id, int world,
                           bool nccl_loads, const std::string& nccl_missing) {
  // A group of one needs no NCCL: its all-reduce is a copy, whatever the size.
  if (world == 1) return "a group of one has no NCCL communicator";
  std::string why;
  kjit_status status = KJIT_ERROR_INVALID_ARGUMENT;
  if (o.nccl == KJIT_COMM_NCCL_OFF) {
    return "the communicator was made with options->nccl = KJIT_COMM_NCCL_OFF";
  } else if (is_kjit_comm_id(id)) {
    why = "the communicator's id is kjit-made, not NCCL's (kjit_comm_get_unique_id found no NCCL)";
  } else if (!nccl_loads) {
    why = nccl_missing;
    status = KJIT_ERROR_UNSUPPORTED;
  }
  if (!why.empty() && o.nccl == KJIT_COMM_NCCL_REQUIRED) {
    fail(status, "options->nccl is KJIT_COMM_NCCL_REQUIRED, but {}", why);
  }
  return why;
}

void check_comm_blobs(const CommBlob* all, int world, const CommBlob& mine) {
  for (int r = 0; r < world; ++r) {
    const CommBlob& b = all[r];
    if (b.magic != kBlobMagic || b.rank != r || b.world != world) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "rank {} of the exchange says rank {} of world size {}: every rank must pass the same "
           "id and world size, and a rank number of its own",
           r, b.rank, b.world);
    }
    if (b.half_bytes != mine.half_bytes || b.nccl != mine.nccl) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "rank {} has small_max_bytes staging of {} bytes and NCCL {}, this rank (rank {}) {} "
           "and {}: every rank must pass the same options (and find NCCL alike)",
           r, b.half_bytes, b.nccl ? "on" : "off", mine.rank, mine.half_bytes,
           mine.nccl ? "on" : "off");
    }
  }
}

std::string comm_shared_gpu(const CommBlob* all, int world) {
  for (int r = 0; r < world; ++r) {
    for (int s = r + 1; s < world; ++s) {
      if (std::memcmp(all[r].pci, all[s].pci, sizeof all[r].pci) == 0) {
        return fmt::format("ranks {} and {} share one GPU, and NCCL refuses two ranks on one GPU",
                           r, s);
      }
    }
  }
  return "";
}

void comm_unique_id(kjit_comm_id* id) {
  if (id == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "id is NULL");
  static_assert(sizeof id->bytes == cuda::kNcclUniqueIdBytes);
  if (cuda::nccl_available()) {
    cuda::NcclUniqueId u{};
    cuda::nccl_check(cuda::nccl().ncclGetUniqueId(&u), "ncclGetUniqueId");
    std::memcpy(id->bytes, u.internal, sizeof id->bytes);
    return;
  }
  make_kjit_comm_id(id);
}

kjit_comm* comm_init(const kjit_comm_id* id, int rank, int world_size, int device,
                     const kjit_comm_options* options) {
  const kjit_comm_options o = comm_options(options);
  std::string nccl_missing;
  // NCCL is not even loaded for a communicator that cannot use it.
  const bool nccl_loads = world_size > 1 && o.nccl != KJIT_COMM_NCCL_OFF && !is_kjit_comm_id(*id) &&
                          cuda::nccl_available(&nccl_missing);
  const std::string no_nccl = comm_nccl_plan(o, *id, world_size, nccl_loads, nccl_missing);

  const cuda::Driver& d = cuda::driver();
  cuda::device_info(device);  // INVALID_ARGUMENT for an ordinal out of range
  cuda::ScopedDevice scope(device);
  auto c = std::make_unique<kjit_comm>();
  c->rank = rank;
  c->world = world_size;
  c->device = device;
  c->small_max_bytes = o.small_max_bytes;
  c->no_nccl = no_nccl;
  c->peers.rank = rank;
  c->peers.world = world_size;
  c->peers.half_bytes = static_cast<long long>(half_bytes_for(o.small_max_bytes));
  const size_t region = static_cast<size_t>(comm::kCommDataOffset + 2 * c->peers.half_bytes);
  KJIT_CU_CHECK(d.cuMemAlloc(&c->own, region));
  // Flags and epoch start at zero on every rank before any rank can learn this region's handle.
  KJIT_CU_CHECK(d.cuMemsetD8(c->own, 0, static_cast<size_t>(comm::kCommDataOffset)));
  c->peers.region[rank] = reinterpret_cast<char*>(c->own);

  CommBlob mine{};
  mine.magic = kBlobMagic;
  mine.rank = rank;
  mine.world = world_size;
  mine.half_bytes = c->peers.half_bytes;
  mine.nccl = no_nccl.empty() ? 1 : 0;
  CUdevice dev = 0;
  KJIT_CU_CHECK(d.cuDeviceGet(&dev, device));
  const CUdevice_attribute pci[3] = {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
                                     CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
                                     CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID};
  for (int i = 0; i < 3; ++i) KJIT_CU_CHECK(d.cuDeviceGetAttribute(&mine.pci[i], pci[i], dev));
  std::vector<CommBlob> blobs(world_size, mine);
  if (world_size > 1) {
    KJIT_CU_CHECK(d.cuIpcGetMemHandle(&mine.handle, c->own));
    const std::vector<char> all = exchange(o, *id, rank, world_size, mine);
    std::memcpy(blobs.data(), all.data(), sizeof(CommBlob) * world_size);
  }
  check_comm_blobs(blobs.data(), world_size, mine);
  if (c->no_nccl.empty()) {
    const std::string shared = comm_shared_gpu(blobs.data(), world_size);
    if (!shared.empty() && o.nccl == KJIT_COMM_NCCL_REQUIRED) {
      fail(KJIT_ERROR_UNSUPPORTED, "options->nccl is KJIT_COMM_NCCL_REQUIRED, but {}", shared);
    }
    c->no_nccl = shared;
  }
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    CUdeviceptr p = 0;
    KJIT_CU_CHECK(d.cuIpcOpenMemHandle(&p, blobs[r].handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    c->peers.region[r] = reinterpret_cast<char*>(p);
  }
  if (c->no_nccl.empty()) {
    const cuda::Nccl& n = cuda::nccl();
    cuda::NcclUniqueId u{};
    std::memcpy(u.internal, id->bytes, sizeof u.internal);
    cuda::NcclComm nc = nullptr;
    cuda::nccl_check(n.ncclCommInitRank(&nc, world_size, u, rank), "ncclCommInitRank");
    c->nccl = nc;
  }
  return c.release();
}

}  // namespace kjit::ops

kjit_comm::~kjit_comm() {
  std::string why;
  if (!kjit::cuda::driver_available(&why)) return;
  try {
    const kjit::cuda::Driver& d = kjit::cuda::driver();
    kjit::cuda::ScopedDevice scope(device);
    if (nccl != nullptr)
      kjit::cuda::nccl().ncclCommDestroy(static_cast<kjit::cuda::NcclComm>(nccl));
    for (int r = 0; r < world; ++r) {
      if (r != rank && peers.region[r] != nullptr) {
        d.cuIpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(peers.region[r]));
      }
    }
    if (own != 0) d.cuMemFree(own);
  } catch (...) {
    // A destructor reports nothing: the process's driver state is what it is.
  }
}
