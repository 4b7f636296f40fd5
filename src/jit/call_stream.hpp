#pragma once

#include <string>

namespace kjit::jit {

// The stream of the C call running on this thread (set by api::entry), so that a cold load can
// refuse to run while that stream captures a CUDA graph (KJIT_ERROR_CAPTURING) instead of
// breaking the capture.
class ScopedCallStream {
 public:
  explicit ScopedCallStream(void* stream) : prev_(current_), prev_set_(set_) {
    current_ = stream;
    set_ = true;
  }
  ~ScopedCallStream() {
    current_ = prev_;
    set_ = prev_set_;
  }
  ScopedCallStream(const ScopedCallStream&) = delete;
  ScopedCallStream& operator=(const ScopedCallStream&) = delete;
  // Throws KJIT_ERROR_CAPTURING when this thread's call stream is capturing.
  static void check_not_capturing(const std::string& uri);

 private:
  static inline thread_local void* current_ = nullptr;
  static inline thread_local bool set_ = false;
  void* prev_;
  bool prev_set_;
};

}  // namespace kjit::jit
