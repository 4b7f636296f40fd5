// Checks of the no-device path (a valid call stops at the missing device with
// KJIT_ERROR_NO_DEVICE) must run on a machine with a GPU too, where the same calls would launch
// on fake pointers. KJIT_RUN_WITHOUT_GPU() at the top of such a test case: with a GPU it runs the
// test case again in a child process of the same binary that sees no device
// (CUDA_VISIBLE_DEVICES=-1) and checks that the child ran it and passed; without a GPU, or in that
// child, it does nothing and the test goes on. Either way the checks run, none is skipped.
#pragma once

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/gpu.hpp"

extern char** environ;

namespace kjit::test {

// Set in the child, so a child that still sees a GPU fails instead of recursing.
inline constexpr const char* kGpuHiddenEnv = "KJIT_TEST_GPU_HIDDEN";

struct ChildRun {
  int status = -1;  // exit status, or -1 when it did not exit normally
  std::string output;
};

// Runs test case `name` of this binary in a child that sees no CUDA device; stdout and stderr
// together.
inline ChildRun rerun_without_gpu(const std::string& name) {
  // Catch's test spec: ',' '[' ']' and '\' are special; a backslash escapes them.
  std::string spec;
  for (char ch : name) {
    if (ch == ',' || ch == '[' || ch == ']' || ch == '\\') spec += '\\';
    spec += ch;
  }
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    env_store.push_back(kv);
  }
  env_store.push_back("CUDA_VISIBLE_DEVICES=-1");
  env_store.push_back(std::string(kGpuHiddenEnv) + "=1");
  std::vector<char*> envp;
  for (auto& kv : env_store) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", arg0 = "no-gpu-child";
  std::vector<char*> argv = {arg0.data(), spec.data(), nullptr};

  ChildRun r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, static_cast<size_t>(n));
    int ws = 0;
    if (::waitpid(pid, &ws, 0) == pid && WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
  } else {
    r.output = "posix_spawn failed";
  }
  ::close(fds[0]);
  return r;
}

// Why no device is usable here (the capability helper's reason, which kjit's NO_DEVICE errors
// carry): a missing libcuda.so.1 on a machine without a driver, cuInit's error in the child.
inline std::string no_device_reason() {
  std::string why;
  REQUIRE_FALSE(gpu_available(&why));
  REQUIRE_FALSE(why.empty());
  return why;
}

// The GPU machine's half of KJIT_RUN_WITHOUT_GPU.
inline void check_in_child_without_gpu(const std::string& name) {
  INFO("test case '" << name << "' with CUDA_VISIBLE_DEVICES=-1");
  // In the child, a GPU still visible means the variable did not hide it: the no-device checks
  // cannot run here, and must not silently pass.
  REQUIRE(std::getenv(kGpuHiddenEnv) == nullptr);
  const ChildRun r = rerun_without_gpu(name);
  INFO(r.output);
  CHECK(r.status == 0);
  // It ran exactly this test case and every assertion passed.
  CHECK(r.output.find("All tests passed") != std::string::npos);
  CHECK(r.output.find(" in 1 test case)") != std::string::npos);
}

}  // namespace kjit::test

#define KJIT_RUN_WITHOUT_GPU()                                                                  \
  do {                                                                                          \
    if (::kjit::test::gpu_available()) {                                                        \
      ::kjit::test::check_in_child_without_gpu(Catch::getResultCapture().getCurrentTestName()); \
      return;                                                                                   \
    }                                                                                           \
  } while (0)
