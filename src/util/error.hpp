// The one exception type inside kjit. It carries the kjit_status the C boundary returns; the
// C entry points (src/api) catch it and turn it into status + thread-local message.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "kjit/kjit.h"

namespace kjit {

class Error : public std::runtime_error {
 public:
  Error(kjit_status status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  kjit_status status() const noexcept { return status_; }

 private:
  kjit_status status_;
};

template <typename... Args>
[[noreturn]] void fail(kjit_status status, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(status, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kjit
