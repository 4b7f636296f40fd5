#include "util/log.hpp"

#include <cstdio>
#include <mutex>

namespace kjit::util {

void log_line(std::string_view line) {
  // One fwrite per line under a lock, so lines from threads do not interleave.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[kjit] %.*s\n", static_cast<int>(line.size()), line.data());
  std::fflush(stderr);
}

}  // namespace kjit::util
