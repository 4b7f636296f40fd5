#include "support/shell.hpp"

#include <sys/wait.h>

#include <cstdio>

namespace kjit::test {

ShellRun run_shell(const std::string& command) {
  ShellRun r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace kjit::test
