#include "workers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include <fmt/format.h>

namespace kjit::cli {
namespace {

using json = nlohmann::ordered_json;

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// MemAvailable in bytes, or 0 when /proc/meminfo cannot tell.
unsigned long long mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return kb * 1024;
  }
  return 0;
}

json failure(std::string error) {
  return {{"ok", false}, {"error", std::move(error)}};
}

json run_one(const std::function<json(size_t)>& run_item, size_t i) {
  try {
    return run_item(i);
  } catch (const std::exception& e) {
    return failure(e.what());
  }
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void child_main(int fd, size_t first, size_t n, size_t stride,
                             const std::function<json(size_t)>& run_item) {
  for (size_t i = first; i < n; i += stride) {
    json line = {{"i", i}, {"r", run_one(run_item, i)}};
    // replace: an NVRTC log is not guaranteed to be UTF-8, and dump() would throw on it.
    if (!write_all(fd, line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n")) {
      ::_exit(1);
    }
  }
  // _exit: no atexit handlers or static destructors of the parent's state in the child.
  ::_exit(0);
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("worker exited with signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  if (WIFEXITED(status)) return fmt::format("worker exited with status {}", WEXITSTATUS(status));
  return "worker ended abnormally";
}

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  size_t first = 0;
  std::string buffer;          // a partial line
  std::vector<bool> reported;  // by slot: item first + k * stride
  std::string start_error;     // set when pipe or fork failed
};

}  // namespace

int clamp_jobs(int requested, size_t items, std::string* why) {
  int jobs = std::max(1, requested);
  int cores = usable_cores();
  unsigned long long avail = mem_available();
  int by_mem = avail ? static_cast<int>(std::max(1ULL, avail / (3ULL << 29))) : jobs;  // 1.5 GiB
  int clamped = std::min({jobs, cores, by_mem, static_cast<int>(std::max<size_t>(1, items))});
  if (clamped < jobs && why && items > static_cast<size_t>(clamped)) {
    *why = fmt::format("using {} worker(s), not {}: {} usable core(s), {:.1f} GiB available",
                       clamped, jobs, cores, avail / double(1ULL << 30));
  }
  return clamped;
}

void run_items(size_t n, int jobs, const std::function<json(size_t)>& run_item,
               const std::function<void(size_t, const json&)>& on_done) {
  if (jobs <= 1 || n <= 1) {
    for (size_t i = 0; i < n; ++i) on_done(i, run_one(run_item, i));
    return;
  }
  const size_t stride = static_cast<size_t>(jobs);
  std::fflush(nullptr);  // or the children would flush our buffered output again
  std::vector<Worker> workers(stride);
  for (size_t k = 0; k < stride; ++k) {
    Worker& w = workers[k];
    w.first = k;
    w.reported.assign((n - k + stride - 1) / stride, false);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      w.start_error = fmt::format("could not start a worker: pipe: {}", std::strerror(errno));
      continue;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      child_main(fds[1], k, n, stride, run_item);
    }
    ::close(fds[1]);  // so that EOF on fds[0] means the child is gone
    if (pid < 0) {
      w.start_error = fmt::format("could not start a worker: fork: {}", std::strerror(errno));
      ::close(fds[0]);
      continue;
    }
    w.pid = pid;
    w.fd = fds[0];
  }

  auto finish = [&](Worker& w, const std::string& why) {
    for (size_t s = 0; s < w.reported.size(); ++s) {
      if (!w.reported[s]) on_done(w.first + s * stride, failure(why));
    }
  };
  for (auto& w : workers) {
    if (w.pid < 0) finish(w, w.start_error);
  }

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (auto& w : workers) {
      if (w.fd >= 0) {
        fds.push_back({w.fd, POLLIN, 0});
        owners.push_back(&w);
      }
    }
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    for (size_t p = 0; p < fds.size(); ++p) {
      if (fds[p].revents == 0) continue;
      Worker& w = *owners[p];
      char chunk[65536];
      ssize_t got = ::read(w.fd, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got > 0) {
        w.buffer.append(chunk, static_cast<size_t>(got));
        size_t nl;
        while ((nl = w.buffer.find('\n')) != std::string::npos) {
          json line = json::parse(w.buffer.substr(0, nl), nullptr, false);
          w.buffer.erase(0, nl + 1);
          if (line.is_discarded() || !line.contains("i") || !line["i"].is_number_unsigned()) {
            continue;  // its item counts as lost when the worker ends
          }
          size_t i = line["i"].get<size_t>();
          size_t slot = (i - w.first) / stride;
          if (i < w.first || (i - w.first) % stride != 0 || slot >= w.reported.size() ||
              w.reported[slot]) {
            continue;
          }
          w.reported[slot] = true;
          on_done(i, line["r"]);
        }
        continue;
      }
      // EOF or a read error: the child is done or dead.
      ::close(w.fd);
      w.fd = -1;
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      std::string why = describe_exit(status);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) why += " before reporting this item";
      finish(w, why);
    }
  }
}

}  // namespace kjit::cli
