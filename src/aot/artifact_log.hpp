// KJIT_ARTIFACT_LOG: the artifact loader's own log (which package served a kernel, what was
// refused and why, every download and retry), kept apart from API call logging so a deployment
// can watch its package without tracing every call. Off by default; "1" (or "stderr") writes
// "[kjit artifact] ..." lines to stderr, any other value is a file the lines are appended to.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace kjit::aot {

class ArtifactLog {
 public:
  // `target`: "" off, "stderr", or a file path (Settings::artifact_log).
  explicit ArtifactLog(std::string target) : target_(std::move(target)) {}
  ~ArtifactLog();
  ArtifactLog(const ArtifactLog&) = delete;
  ArtifactLog& operator=(const ArtifactLog&) = delete;

  bool on() const { return !target_.empty(); }

  template <typename... Args>
  void operator()(fmt::format_string<Args...> f, Args&&... args) const {
    if (on()) write(fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  void write(std::string_view line) const;

  std::string target_;
  mutable std::mutex mu_;
  mutable std::FILE* file_ = nullptr;
  mutable bool open_failed_ = false;
};

}  // namespace kjit::aot
