// kjit-cli cache inspect|clear|dir: the on-disk cache of the current settings (KJIT_CACHE_DIR...).
#include <algorithm>
#include <memory>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "jit/jit_core.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

json entry_json(const jit::ListedEntry& e) {
  json j = {{"uri", e.uri},
            {"arch", e.arch},
            {"cubin_size", e.cubin_size},
            {"created", nullptr},
            {"compile_ms", nullptr},
            {"registers", nullptr},
            {"valid", e.problem.empty()},
            {"problem", e.problem},
            {"json_path", e.json_path.string()}};
  if (e.meta) {
    j["created"] = e.meta->created;
    j["compile_ms"] = e.meta->compile_ms;
    j["registers"] = e.meta->registers;
  }
  return j;
}

int run_inspect(bool as_json) {
  jit::DiskCache cache = jit::JitCore::global().disk_cache();
  // Validated against this kjit and this NVRTC: an entry another version wrote shows as invalid.
  auto entries = cache.list(jit::kjit_version(), jit::nvrtc_version());
  json rows = json::array();
  size_t valid = 0;
  unsigned long long bytes = 0;
  for (const auto& e : entries) {
    rows.push_back(entry_json(e));
    valid += e.problem.empty();
    bytes += e.cubin_size;
  }
  if (as_json) {
    json out = {{"cache_dir", cache.root().string()},
                {"entries", rows},
                {"total", entries.size()},
                {"valid", valid},
                {"invalid", entries.size() - valid},
                {"bytes", bytes}};
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
    return kExitOk;
  }
  size_t width = 3;
  for (const auto& e : entries) width = std::max(width, e.uri.size());
  fmt::print("{:<{}}  {:<7}  {:>9}  {:<20}  {:>10}  {:>4}  {}\n", "URI", width, "ARCH", "BYTES",
             "CREATED", "COMPILE MS", "REGS", "STATUS");
  for (const auto& e : entries) {
    const auto& m = e.meta;
    fmt::print("{:<{}}  {:<7}  {:>9}  {:<20}  {:>10}  {:>4}  {}\n", e.uri, width, e.arch,
               e.cubin_size, m ? m->created : "-", m ? fmt::format("{:.1f}", m->compile_ms) : "-",
               m && m->registers >= 0 ? std::to_string(m->registers) : "-",
               e.problem.empty() ? "valid" : e.problem);
  }
  fmt::print("{} entries in {}: {} valid, {} invalid, {} bytes\n", entries.size(),
             cache.entries_dir().string(), valid, entries.size() - valid, bytes);
  return kExitOk;
}

// Counts sidecars only: list() would also read and hash every cubin just to delete it.
size_t count_entries(const fs::path& entries_dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(entries_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    n += it->path().extension() == ".json";
  }
  return n;
}

int run_clear() {
  jit::DiskCache cache = jit::JitCore::global().disk_cache();
  size_t n = count_entries(cache.entries_dir());
  // Only the folders kjit owns under the cache root; an explicit KJIT_GEN_DIR is the user's.
  for (const fs::path& dir : {cache.entries_dir(), cache.root() / "generated"}) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) fail(KJIT_ERROR_CACHE, "cannot remove {}: {}", dir.string(), ec.message());
  }
  fmt::print("removed {} entries from {}\n", n, cache.root().string());
  return kExitOk;
}

}  // namespace

void add_cache_commands(CLI::App& app, int& exit_code) {
  CLI::App* cache = app.add_subcommand("cache", "Inspect or clear the disk cache");
  cache->footer(kExitCodesFooter);
  cache->require_subcommand(1);

  auto as_json = std::make_shared<bool>(false);
  CLI::App* inspect = cache->add_subcommand("inspect", "List entries and check each one");
  inspect->add_flag("--json", *as_json, "Print one JSON document on stdout");
  inspect->callback([as_json, &exit_code] { exit_code = run_inspect(*as_json); });

  cache->add_subcommand("clear", "Remove every entry and the generated sources")
      ->callback([&exit_code] { exit_code = run_clear(); });
  cache->add_subcommand("dir", "Print the cache folder")->callback([&exit_code] {
    fmt::print("{}\n", jit::JitCore::global().settings().cache_dir.string());
    exit_code = kExitOk;
  });
}

}  // namespace kjit::cli
