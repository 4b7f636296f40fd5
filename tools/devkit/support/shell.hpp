// Runs a shell command line (tests run kjit-cli and tools this way) and returns its exit code and
// stdout; stderr goes wherever the command line redirects it.
#pragma once

#include <string>

namespace kjit::test {

struct ShellRun {
  int code = -1;  // the exit status; -1 when it did not exit normally or could not start
  std::string out;
};

ShellRun run_shell(const std::string& command);

}  // namespace kjit::test
