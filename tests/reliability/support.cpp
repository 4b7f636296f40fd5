#include "reliability/support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "ops/registry.hpp"

extern char** environ;

namespace kjit::rel {

jit::Spec tiny_spec(int n, int pad) {
  jit::Spec s;
  s.op = "reltiny";
  s.params = {{"n", std::to_string(n)}};
  s.uri = jit::make_uri(s.op, s.params);
  // Options enter the key and the sidecar but not the URI (a file name, at most 255 bytes).
  if (pad > 0) s.extra_options.push_back("-DKJIT_RELIABILITY_PAD=" + std::string(pad, 'x'));
  // No kernel folders: NVRTC parses a few lines, so a compile costs tens of milliseconds.
  s.config = "__global__ void reltiny(int* p) { p[threadIdx.x] = " + std::to_string(n) + "; }\n";
  s.entry_names = {"reltiny"};
  s.arch_families = {"sm_80+"};
  return s;
}

jit::Spec parse_spec(const std::string& text) {
  auto fields = [](const std::string& s, char sep) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string f; std::getline(ss, f, sep);) v.push_back(f);
    return v;
  };
  auto f = fields(text, ':');
  if (f.size() >= 2 && f.size() <= 3 && f[0] == "tiny") {
    return tiny_spec(std::stoi(f[1]), f.size() == 3 ? std::stoi(f[2]) : 0);
  }
  if (f.size() == 3 && f[0] == "op") {
    const ops::OpDef* def = ops::find_op(f[1]);
    if (def == nullptr) throw std::invalid_argument("no op " + f[1]);
    ops::SetArgs args;
    for (const auto& kv : fields(f[2], ',')) {
      auto eq = kv.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("bad --set " + kv);
      args[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    return def->make_spec(args);
  }
  throw std::invalid_argument("bad spec " + text);
}

jit::Settings settings_in(const fs::path& cache_dir) {
  jit::Settings s;
  s.cache_dir = cache_dir;
  s.gen_dir = cache_dir / "generated";
  s.artifact_dir = cache_dir / "artifacts";
  return s;
}

// Defined for the test executable only; the worker, which shares this file, needs neither.
#ifndef KJIT_RELIABILITY_WORKER
#define KJIT_RELIABILITY_WORKER ""
#endif
#ifndef KJIT_CLI_PATH
#define KJIT_CLI_PATH ""
#endif

const char* worker_path() {
  return KJIT_RELIABILITY_WORKER;
}
const char* cli_path() {
  return KJIT_CLI_PATH;
}

// ---- Child
// ---------------------------------------------------------------------------------------

Child::Child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             int stdin_fd, const std::string& cwd) {
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) {
      vars.erase(kv);
    } else {
      vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::dup2(stdin_fd >= 0 ? stdin_fd : devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(devnull);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
}

Child::~Child() {
  if (!done_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Child::drain(int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n == 0) {
    if (timeout_ms > 0) ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    return;
  }
  if (::poll(fds, static_cast<nfds_t>(n), timeout_ms) <= 0) return;
  for (int i = 0; i < n; ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    char buf[65536];
    ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
    if (r > 0) {
      (fds[i].fd == out_fd_ ? out_ : err_).append(buf, static_cast<size_t>(r));
    } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
      int& fd = fds[i].fd == out_fd_ ? out_fd_ : err_fd_;
      ::close(fd);
      fd = -1;
    }
  }
}

bool Child::wait_for_output(const std::string& text, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (out_.find(text) == std::string::npos) {
    if (out_fd_ < 0 || std::chrono::steady_clock::now() > deadline) return false;
    drain(10);
  }
  return true;
}

void Child::kill(int sig) {
  if (!done_ && pid_ > 0) ::kill(pid_, sig);
}

bool Child::wait(double timeout_s, bool kill_on_timeout) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done_) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      done_ = true;
      if (WIFEXITED(st)) exit_code_ = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) term_signal_ = WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      if (!kill_on_timeout) return false;
      kill(SIGKILL);
      int st2 = 0;
      ::waitpid(pid_, &st2, 0);
      done_ = true;
      term_signal_ = SIGKILL;
      return false;
    }
    drain(5);
  }
  while (out_fd_ >= 0 || err_fd_ >= 0) drain(100);
  return true;
}

// ---- Workers
// -------------------------------------------------------------------------------------

std::string last_json_line(const std::string& out) {
  std::string last;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    if (!line.empty() && line[0] == '{') last = line;
  }
  return last;
}

WorkerResult parse_worker_output(int exit_code, int term_signal, const std::string& out,
                                 const std::string& err) {
  WorkerResult r;
  r.exit_code = exit_code;
  r.term_signal = term_signal;
  r.out = out;
  r.err = err;
  const std::string line = last_json_line(out);
  if (line.empty()) return r;
  try {
    auto j = nlohmann::json::parse(line);
    r.ok = exit_code == 0 && j.value("ok", false);
    r.source = j.value("source", "");
    r.compiles = j.value("compiles", 0L);
    r.disk_hits = j.value("disk_hits", 0L);
    r.invalid_entries = j.value("invalid_entries", 0L);
    r.status = j.value("status", 0);
    r.error = j.value("error", "");
    r.cubin_hash = j.value("cubin_xxh3", "");
    r.cubin_size = j.value("cubin_size", 0ULL);
  } catch (const std::exception&) {
    r.ok = false;
  }
  return r;
}

WorkerResult run_worker(const std::vector<std::string>& args, const std::vector<std::string>& env,
                        double timeout_s) {
  std::vector<std::string> argv = {worker_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  Child c(argv, env);
  c.wait(timeout_s);
  return parse_worker_output(c.exit_code(), c.term_signal(), c.out(), c.err());
}

// ---- Files
// ---------------------------------------------------------------------------------------

std::map<std::string, FileState> snapshot(const fs::path& root) {
  std::map<std::string, FileState> m;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    FileState f;
    f.size = S_ISREG(st.st_mode) ? static_cast<uintmax_t>(st.st_size) : 0;
    f.mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
    m[fs::relative(it->path(), root).string()] = f;
  }
  return m;
}

std::vector<fs::path> files_containing(const fs::path& root, const std::string& fragment) {
  std::vector<fs::path> v;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() &&
        it->path().filename().string().find(fragment) != std::string::npos) {
      v.push_back(it->path());
    }
  }
  return v;
}

StderrCapture::StderrCapture() {
  char path[] = "/tmp/kjit-stderr-XXXXXX";
  fd_ = ::mkstemp(path);
  if (fd_ < 0) throw std::runtime_error("mkstemp failed");
  ::unlink(path);
  std::fflush(stderr);
  saved_ = ::dup(2);
  ::dup2(fd_, 2);
}

StderrCapture::~StderrCapture() {
  std::fflush(stderr);
  ::dup2(saved_, 2);
  ::close(saved_);
  ::close(fd_);
}

std::string StderrCapture::text() {
  std::fflush(stderr);
  std::string s;
  char buf[4096];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd_, buf, sizeof buf, off);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return s;
}

void chmod_tree(const fs::path& root, fs::perms mode) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    fs::permissions(it->path(), mode, ec);
  }
  fs::permissions(root, mode, ec);
}

}  // namespace kjit::rel
