// File-system primitives for the disk cache: atomic publish and per-entry locks.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kjit::util {

namespace fs = std::filesystem;

// Whole file contents, or nullopt if it cannot be opened or read.
std::optional<std::string> read_file(const fs::path& path);

// Creates `dir` and its parents; throws kjit::Error(KJIT_ERROR_CACHE) on failure.
void make_dirs(const fs::path& dir);

// Writes `data` to a unique temp file in path's folder, fsyncs it, renames it over `path` and
// fsyncs the folder. Readers see the old file or the new one, never a partial one; a process
// killed mid-write leaves at most a "*.tmp.*" file that nobody reads. Throws
// kjit::Error(KJIT_ERROR_CACHE) on failure (disk full, read-only, ...), removing the temp file.
void write_file_atomic(const fs::path& path, std::string_view data);

// Writes only when the current contents differ (keeps mtimes stable for tools that watch them).
// Returns true when it wrote.
bool write_file_if_different(const fs::path& path, std::string_view data);

// An exclusive flock(2) on `path` (created if missing), released on destruction. The kernel drops
// the lock when its holder dies, so a lock file left behind by a killed process is harmless.
class FileLock {
 public:
  explicit FileLock(const fs::path& path);  // blocks until acquired; throws on error
  // The lock if no other holder has it now, else nullptr (never blocks). Throws on error.
  static std::unique_ptr<FileLock> try_acquire(const fs::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  FileLock() = default;
  int fd_ = -1;
};

}  // namespace kjit::util
