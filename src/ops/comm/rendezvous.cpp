#include "ops/comm/rendezvous.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <thread>

#include "util/error.hpp"
#include "util/hash.hpp"

namespace kjit::ops {

namespace {

constexpr uint64_t kMagic = 0x6b6a69742d636d31ULL;  // "kjit-cm1"

// The file: a header, then world slots of {present, pad, blob}.
struct Header {
  uint64_t magic;
  uint32_t world;
  uint32_t bytes;
  uint32_t readers;  // ranks that have read every blob; the last one removes the file
  uint32_t pad;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// flock for a scope.
struct Locked {
  int fd;
  Locked(int f, int how) : fd(f) {
    while (::flock(fd, how) != 0 && errno == EINTR) {
    }
  }
  ~Locked() { ::flock(fd, LOCK_UN); }
};

size_t slot_size(size_t bytes) {
  return 8 + bytes;
}

void read_exact(int fd, void* p, size_t n, off_t at, const std::string& path) {
  if (::pread(fd, p, n, at) != static_cast<ssize_t>(n)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "comm rendezvous: cannot read {}: {}", path,
         std::strerror(errno));
  }
}

void write_exact(int fd, const void* p, size_t n, off_t at, const std::string& path) {
  if (::pwrite(fd, p, n, at) != static_cast<ssize_t>(n)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "comm rendezvous: cannot write {}: {}", path,
         std::strerror(errno));
  }
}

}  // namespace

std::string rendezvous_path(const std::string& dir, const void* id, size_t id_bytes) {
  const util::Hash128 h = util::xxh3_128({static_cast<const char*>(id), id_bytes});
  return fmt::format("{}/kjit-comm-{}", dir, h.hex());
}

std::vector<char> file_allgather(const std::string& path, int rank, int world, const void* mine,
                                 size_t bytes, int timeout_ms) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (f.fd < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "comm rendezvous: cannot open {}: {}", path,
         std::strerror(errno));
  }
  const off_t slots_at = sizeof(Header);
  {
    Locked lock(f.fd, LOCK_EX);
    struct stat st {};
    ::fstat(f.fd, &st);
    Header h{};
    if (st.st_size == 0) {
      h = Header{kMagic, static_cast<uint32_t>(world), static_cast<uint32_t>(bytes), 0, 0};
      write_exact(f.fd, &h, sizeof h, 0, path);
      const std::vector<char> empty(slot_size(bytes) * world, 0);
      write_exact(f.fd, empty.data(), empty.size(), slots_at, path);
    } else {
      read_exact(f.fd, &h, sizeof h, 0, path);
      if (h.magic != kMagic || h.world != static_cast<uint32_t>(world) ||
          h.bytes != static_cast<uint32_t>(bytes)) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "comm rendezvous: {} was made for world size {} (this rank says {}): every rank "
             "must pass the same id and world size",
             path, h.world, world);
      }
    }
    const off_t at = slots_at + static_cast<off_t>(slot_size(bytes) * rank);
    uint32_t present = 0;
    read_exact(f.fd, &present, sizeof present, at, path);
    if (present != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "comm rendezvous: rank {} joined twice ({}): every rank needs its own rank number", rank,
           path);
    }
    write_exact(f.fd, mine, bytes, at + 8, path);
    present = 1;
    write_exact(f.fd, &present, sizeof present, at, path);
  }

  std::vector<char> slots(slot_size(bytes) * world);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string missing;
  for (;;) {
    {
      Locked lock(f.fd, LOCK_SH);
      read_exact(f.fd, slots.data(), slots.size(), slots_at, path);
    }
    missing.clear();
    for (int r = 0; r < world; ++r) {
      uint32_t present = 0;
      std::memcpy(&present, slots.data() + slot_size(bytes) * r, sizeof present);
      if (present == 0) missing += fmt::format(" {}", r);
    }
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::unlink(path.c_str());
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "comm rendezvous: ranks{} of {} did not arrive within {} ms ({}); they must call "
           "kjit_comm_init with the same id",
           missing, world, timeout_ms, path);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  {
    Locked lock(f.fd, LOCK_EX);
    Header h{};
    read_exact(f.fd, &h, sizeof h, 0, path);
    ++h.readers;
    write_exact(f.fd, &h, sizeof h, 0, path);
    if (h.readers == static_cast<uint32_t>(world)) ::unlink(path.c_str());
  }
  std::vector<char> out(bytes * world);
  for (int r = 0; r < world; ++r) {
    std::memcpy(out.data() + bytes * r, slots.data() + slot_size(bytes) * r + 8, bytes);
  }
  return out;
}

}  // namespace kjit::ops
