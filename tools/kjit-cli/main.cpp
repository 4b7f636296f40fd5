// kjit-cli: inspect kjit, compile specializations ahead of use, manage the disk cache.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"

int main(int argc, char** argv) {
  using namespace kjit::cli;
  CLI::App app("kjit-cli: compile kjit kernels ahead of use, inspect the cache and the setup",
               "kjit-cli");
  app.footer(kExitCodesFooter);
  app.set_version_flag("--version", kjit::jit::kjit_version());
  app.require_subcommand(1);
  int exit_code = kExitOk;
  add_info_commands(app, exit_code);
  add_compile_command(app, exit_code);
  add_cache_commands(app, exit_code);
  add_bench_command(app, exit_code);
  add_aot_commands(app, exit_code);
  add_defs_commands(app, exit_code);
  add_replay_command(app, exit_code);
  add_tune_commands(app, exit_code);

  // A first word that is no command (and no option): name it, which CLI11's "A subcommand is
  // required" does not.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += " " + sub->get_name();
    }
    if (!known) {
      fmt::print(stderr, "kjit-cli: unknown command '{}' (commands:{})\n", argv[1], names);
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
    return exit_code;
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here too, with exit code 0.
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  } catch (const UsageError& e) {
    fmt::print(stderr, "kjit-cli: {}\nRun with --help for more information.\n", e.what());
    return kExitUsage;
  } catch (const kjit::Error& e) {
    fmt::print(stderr, "kjit-cli: {}\n", e.what());
    return e.status() == KJIT_ERROR_NO_DEVICE ? kExitNoDevice : kExitFailure;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kjit-cli: {}\n", e.what());
    return kExitFailure;
  }
}
