// kjit-cli defs list / export: the definitions each registry op exports (each family's
// src/ops/<family>/<family>_desc.cpp), one JSON file each: the committed set under
// bench/definitions/ is `defs export` of this build, and a CTest fails when the two differ.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

namespace kjit::cli {
namespace {

namespace fs = std::filesystem;

// Every exported definition, by name; a name two ops (or one op twice) define is a library bug.
std::map<std::string, ops::Definition> all_definitions() {
  std::map<std::string, ops::Definition> out;
  for (const auto& op : ops::op_registry()) {
    if (!op.definitions) continue;
    for (auto& d : op.definitions()) {
      const std::string name = d.name;
      if (!out.emplace(name, std::move(d)).second) {
        throw Error(KJIT_ERROR_INTERNAL, "two definitions are named " + name);
      }
    }
  }
  return out;
}

}  // namespace

void add_defs_commands(CLI::App& app, int& exit_code) {
  auto* defs =
      app.add_subcommand("defs", "The op definitions (flashinfer-bench shaped) kjit exports");
  defs->require_subcommand(1);

  auto* list = defs->add_subcommand("list", "List the definitions: name, op, const axes");
  auto list_json = std::make_shared<bool>(false);
  list->add_flag("--json", *list_json, "the full definitions as a JSON array");
  list->callback([list_json, &exit_code] {
    const auto all = all_definitions();
    if (*list_json) {
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      for (const auto& [name, d] : all)
        arr.push_back(nlohmann::ordered_json::parse(definition_json(d)));
      fmt::print("{}\n", arr.dump(2));
    } else {
      for (const auto& [name, d] : all) {
        std::string consts;
        for (const auto& a : d.axes) {
          if (a.is_const) consts += fmt::format(" {}={}", a.name, a.value);
        }
        fmt::print("{:<40} {:<18} {}\n", name, d.op, consts);
      }
      fmt::print("{} definitions\n", all.size());
    }
    exit_code = kExitOk;
  });

  struct ExportOpts {
    std::string dir;
    bool clean = false;
  };
  auto eo = std::make_shared<ExportOpts>();
  auto* exp = defs->add_subcommand("export", "Write one <name>.json per definition into DIR");
  exp->add_option("dir", eo->dir, "output folder (created when missing)")->required();
  exp->add_flag("--clean", eo->clean,
                "also remove the *.json files in DIR that are not definitions any more");
  exp->callback([eo, &exit_code] {
    const auto all = all_definitions();
    util::make_dirs(eo->dir);
    int written = 0, removed = 0;
    for (const auto& [name, d] : all) {
      if (util::write_file_if_different(fs::path(eo->dir) / (name + ".json"), definition_json(d))) {
        ++written;
      }
    }
    if (eo->clean) {
      for (const auto& e : fs::directory_iterator(eo->dir)) {
        const std::string stem = e.path().stem().string();
        if (e.path().extension() == ".json" && !all.count(stem)) {
          fs::remove(e.path());
          ++removed;
        }
      }
    }
    fmt::print("{} definitions in {} ({} written, {} removed)\n", all.size(), eo->dir, written,
               removed);
    exit_code = kExitOk;
  });
}

}  // namespace kjit::cli
