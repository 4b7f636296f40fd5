// Shared by the reliability tests and their worker binary: specs small enough to compile in tens
// of milliseconds (so loops of real NVRTC compiles stay cheap in CI), child processes with
// captured output, and file-tree snapshots.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "jit/arch.hpp"
#include "jit/settings.hpp"
#include "jit/spec.hpp"

namespace kjit::rel {

namespace fs = std::filesystem;

// The target every compile here uses: compile-only work needs no GPU.
inline const jit::ArchTarget kTarget{9, 0, false};

// A one-line kernel; `n` makes distinct specializations (distinct cache entries). `pad` adds a
// define of that many bytes to the options, which lengthens the JSON sidecar but not the cubin.
jit::Spec tiny_spec(int n, int pad = 0);

// "tiny:<n>[:<pad>]" or "op:<name>:<k>=<v>,<k>=<v>" (a registry op, as `kjit-cli compile --set`).
// Throws std::invalid_argument on a malformed string.
jit::Spec parse_spec(const std::string& text);

// Settings of a private cache under `dir` (the tests never touch the user's cache).
jit::Settings settings_in(const fs::path& cache_dir);

// Paths of the build's executables (compiled in by CMake).
const char* worker_path();
const char* cli_path();

// A child process: fork + execve with stdout and stderr captured. The destructor kills (SIGKILL)
// and reaps one that is still running, so a failed assertion never leaks processes.
class Child {
 public:
  // env: "NAME=VALUE" sets or overrides a variable of this process's environment, "NAME" (no
  // '=') removes it. stdin_fd >= 0 becomes the child's stdin (else /dev/null).
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                 int stdin_fd = -1, const std::string& cwd = "");
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until stdout holds `text`; false on exit or timeout first.
  bool wait_for_output(const std::string& text, double timeout_s);
  void kill(int sig = SIGKILL);
  // Waits for the exit, collecting output; false on timeout, when the child is killed (unless
  // kill_on_timeout is false: then it keeps running and wait can be called again).
  bool wait(double timeout_s, bool kill_on_timeout = true);
  bool exited() const { return done_; }
  int exit_code() const { return exit_code_; }  // -1 when killed by a signal
  int term_signal() const { return term_signal_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  void drain(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool done_ = false;
  int exit_code_ = -1, term_signal_ = 0;
  std::string out_, err_;
};

// Runs a worker to completion; the child's JSON result line is parsed by the caller.
struct WorkerResult {
  int exit_code = -1;
  int term_signal = 0;
  std::string out, err;
  bool ok = false;  // exited 0 with a JSON line that says ok
  std::string source;
  long compiles = 0, disk_hits = 0, invalid_entries = 0;
  int status = 0;  // kjit_status of a failure
  std::string error;
  std::string cubin_hash;  // xxh3_64 hex of the cubin it got
  unsigned long long cubin_size = 0;
};
// The last line of `out` that starts with '{' (a worker's result), or "".
std::string last_json_line(const std::string& out);
WorkerResult parse_worker_output(int exit_code, int term_signal, const std::string& out,
                                 const std::string& err);
WorkerResult run_worker(const std::vector<std::string>& args, const std::vector<std::string>& env,
                        double timeout_s = 120);

// path (relative) -> size and mtime, of every file under `root` (empty when it is missing).
struct FileState {
  uintmax_t size = 0;
  long long mtime_ns = 0;
  bool operator==(const FileState& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
};
std::map<std::string, FileState> snapshot(const fs::path& root);
// Every regular file under `root` whose name contains `fragment`.
std::vector<fs::path> files_containing(const fs::path& root, const std::string& fragment);

// Redirects this process's stderr (where kjit logs) into a temp file for the object's life.
class StderrCapture {
 public:
  StderrCapture();
  ~StderrCapture();
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  std::string text();  // what was written so far

 private:
  int saved_ = -1;
  int fd_ = -1;
};

// chmod -R: directories and files get `mode` (used to make trees read-only for non-root users).
void chmod_tree(const fs::path& root, fs::perms mode);

}  // namespace kjit::rel
