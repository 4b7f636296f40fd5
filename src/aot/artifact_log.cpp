#include "aot/artifact_log.hpp"

#include <cerrno>
#include <cstring>

#include "util/log.hpp"

namespace kjit::aot {

ArtifactLog::~ArtifactLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void ArtifactLog::write(std::string_view line) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::FILE* out = stderr;
  if (target_ != "stderr") {
    if (file_ == nullptr && !open_failed_) {
      file_ = std::fopen(target_.c_str(), "ae");
      if (file_ == nullptr) {
        open_failed_ = true;
        util::log("warning: KJIT_ARTIFACT_LOG={}: {}; logging to stderr", target_,
                  std::strerror(errno));
      }
    }
    if (file_ != nullptr) out = file_;
  }
  std::fprintf(out, "[kjit artifact] %.*s\n", static_cast<int>(line.size()), line.data());
  std::fflush(out);
}

}  // namespace kjit::aot
