#include "util/fs.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.hpp"

namespace kjit::util {

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(ss).str();
}

void make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir)) {
    fail(KJIT_ERROR_CACHE, "cannot create directory {}: {}", dir.string(), ec.message());
  }
}

namespace {

bool write_all(int fd, std::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: some file systems refuse fsync on directories
    ::close(fd);
  }
}

}  // namespace

void write_file_atomic(const fs::path& path, std::string_view data) {
  static std::atomic<unsigned> counter{0};
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}.{}", ::getpid(), counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail(KJIT_ERROR_CACHE, "cannot create {}: {}", tmp.string(), std::strerror(errno));
  }
  bool ok = write_all(fd, data);
  int err = errno;
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) err = errno;
    ::unlink(tmp.c_str());
    fail(KJIT_ERROR_CACHE, "cannot write {}: {}", path.string(), std::strerror(err));
  }
  fsync_dir(path.parent_path());
}

bool write_file_if_different(const fs::path& path, std::string_view data) {
  auto cur = read_file(path);
  if (cur && *cur == data) return false;
  write_file_atomic(path, data);
  return true;
}

FileLock::FileLock(const fs::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    fail(KJIT_ERROR_CACHE, "cannot open lock file {}: {}", path.string(), std::strerror(errno));
  }
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail(KJIT_ERROR_CACHE, "cannot lock {}: {}", path.string(), std::strerror(err));
  }
}

std::unique_ptr<FileLock> FileLock::try_acquire(const fs::path& path) {
  std::unique_ptr<FileLock> l(new FileLock());
  l->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (l->fd_ < 0) {
    fail(KJIT_ERROR_CACHE, "cannot open lock file {}: {}", path.string(), std::strerror(errno));
  }
  while (::flock(l->fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return nullptr;
    fail(KJIT_ERROR_CACHE, "cannot lock {}: {}", path.string(), std::strerror(errno));
  }
  return l;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace kjit::util
