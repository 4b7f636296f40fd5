// The subcommands of kjit-cli. Each add_* function registers its subcommand(s) on `app`; the
// callbacks run inside app.parse() and store their exit code in `exit_code`. kjit::Error escapes
// to main, which turns it into a message and an exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "ops/registry.hpp"

namespace kjit::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoDevice = 3;

inline constexpr const char* kExitCodesFooter =
    "Exit codes:\n"
    "  0  success\n"
    "  1  something failed (a compile, a spec, the cache, no target arch)\n"
    "  2  usage error (bad option, unknown op, bad --set / --arch / --ops)\n"
    "  3  a CUDA driver or device was needed and there is none";

// A mistake in the command line found after CLI11 parsed it (unknown op, `--set` without '=').
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `--set name=value` arguments as a map; UsageError on a missing '=' or a name given twice.
ops::SetArgs parse_sets(const std::vector<std::string>& sets);

void add_info_commands(CLI::App& app, int& exit_code);  // info, ops
void add_compile_command(CLI::App& app, int& exit_code);
void add_cache_commands(CLI::App& app, int& exit_code);  // cache inspect|clear|dir
void add_bench_command(CLI::App& app, int& exit_code);   // bench <op>
void add_tune_commands(CLI::App& app, int& exit_code);   // tune show|clear
void add_aot_commands(CLI::App& app, int& exit_code);    // aot build|verify|list|fetch
void add_defs_commands(CLI::App& app, int& exit_code);   // defs list|export
void add_replay_command(CLI::App& app, int& exit_code);  // replay <dump dir>

}  // namespace kjit::cli
