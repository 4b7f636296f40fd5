// kjit-cli cache inspect|verify|clear|prune|dir: the on-disk cache of the current settings
// (KJIT_CACHE_DIR...).
#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <ctime>
#include <memory>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "jit/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "runtime/jit_core.hpp"
#include "util/env.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string iso_utc(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Entries whose URI matches the glob (all when it is empty).
std::vector<jit::ListedEntry> list_entries(const jit::DiskCache& cache, const std::string& glob) {
  auto entries = cache.list(jit::kjit_version(), jit::nvrtc_version());
  if (!glob.empty()) {
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [&](const jit::ListedEntry& e) {
                                   return ::fnmatch(glob.c_str(), e.uri.c_str(), 0) != 0;
                                 }),
                  entries.end());
  }
  return entries;
}

json entry_json(const jit::ListedEntry& e) {
  json j = {{"uri", e.uri},
            {"arch", e.arch},
            {"cubin_size", e.cubin_size},
            {"created", nullptr},
            {"last_used", iso_utc(e.last_used)},
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

int run_inspect(bool as_json, const std::string& glob) {
  jit::DiskCache cache = jit::JitCore::global().disk_cache();
  // Validated against this kjit and this NVRTC: an entry another version wrote shows as invalid.
  auto entries = list_entries(cache, glob);
  json rows = json::array();
  size_t valid = 0;
  unsigned long long bytes = 0;
  for (const auto& e : entries) {
    rows.push_back(entry_json(e));
    valid += e.problem.empty();
    bytes += e.cubin_size + e.json_size;
  }
  // Rendered sources count against the size a prune keeps, so they are reported beside it.
  const uint64_t gen_bytes =
      jit::DiskCache::generated_bytes(jit::JitCore::global().settings().gen_dir);
  if (as_json) {
    json out = {{"cache_dir", cache.root().string()},
                {"entries", rows},
                {"total", entries.size()},
                {"valid", valid},
                {"invalid", entries.size() - valid},
                {"bytes", bytes},
                {"generated_bytes", gen_bytes}};
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
    return kExitOk;
  }
  size_t width = 3;
  for (const auto& e : entries) width = std::max(width, e.uri.size());
  fmt::print("{:<{}}  {:<7}  {:>9}  {:<20}  {:<20}  {:>10}  {:>4}  {}\n", "URI", width, "ARCH",
             "BYTES", "CREATED", "LAST USED", "COMPILE MS", "REGS", "STATUS");
  for (const auto& e : entries) {
    const auto& m = e.meta;
    fmt::print("{:<{}}  {:<7}  {:>9}  {:<20}  {:<20}  {:>10}  {:>4}  {}\n", e.uri, width, e.arch,
               e.cubin_size, m ? m->created : "-", iso_utc(e.last_used),
               m ? fmt::format("{:.1f}", m->compile_ms) : "-",
               m && m->registers >= 0 ? std::to_string(m->registers) : "-",
               e.problem.empty() ? "valid" : e.problem);
  }
  fmt::print(
      "{} entries in {}: {} valid, {} invalid, {} bytes (cubins + sidecars); {} bytes of "
      "generated sources\n",
      entries.size(), cache.entries_dir().string(), valid, entries.size() - valid, bytes,
      gen_bytes);
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

int run_clear(const std::string& glob) {
  jit::DiskCache cache = jit::JitCore::global().disk_cache();
  if (!glob.empty()) {
    size_t n = 0;
    for (const auto& e : list_entries(cache, glob)) n += jit::DiskCache::remove(e.json_path);
    fmt::print("removed {} entries matching '{}' from {}\n", n, glob, cache.root().string());
    return kExitOk;
  }
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

// A temp file that a writer killed between create and rename left behind: util::
// write_file_atomic names them "<target>.tmp.<pid>.<n>". Nothing reads them; only these commands
// remove them.
struct TempFile {
  fs::path path;
  uint64_t bytes = 0;
  int64_t age_s = 0;
  long long pid = 0;
  bool removed = false;
};

// A writer holds its temp file for the few milliseconds of one write + fsync: one this old is
// not being written any more, even on a slow network file system.
constexpr int64_t kStaleTempSeconds = 10 * 60;

// The writer pid in a temp file's name, or -1 when the name is not a temp file's.
long long temp_writer_pid(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return -1;
  const std::string rest = name.substr(at + 5);  // "<pid>.<n>"
  const size_t dot = rest.find('.');
  auto digits = [](const std::string& d) {
    return !d.empty() && d.size() <= 18 &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) {
    return -1;
  }
  return std::stoll(rest.substr(0, dot));
}

// Whether a process with this pid runs in this pid namespace (EPERM: it does, as another user).
// A pid that was reused keeps its file until that process ends too: the safe side.
bool process_alive(long long pid) {
  if (pid <= 0 || pid > INT_MAX) return false;  // no process has it
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Temp files under the folders kjit writes in the cache (entries and generated sources) that are
// older than kStaleTempSeconds and whose writer no longer runs; removed when `remove` is set.
std::vector<TempFile> stale_temp_files(const jit::DiskCache& cache, bool remove) {
  std::vector<TempFile> out;
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (const fs::path& dir : {cache.entries_dir(), cache.root() / "generated"}) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const long long pid = temp_writer_pid(it->path().filename().string());
      struct stat st {};
      if (pid < 0 || ::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      TempFile t;
      t.path = it->path();
      t.bytes = static_cast<uint64_t>(st.st_size);
      t.age_s = now - static_cast<int64_t>(st.st_mtime);
      t.pid = pid;
      if (t.age_s < kStaleTempSeconds || process_alive(pid)) continue;
      out.push_back(std::move(t));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  if (remove) {
    for (TempFile& t : out) {
      std::error_code ec;
      t.removed = fs::remove(t.path, ec) && !ec;
    }
  }
  return out;
}

std::string temp_file_text(const TempFile& t) {
  return fmt::format("{}: temp file of writer pid {} (no longer running), {} bytes, {} min old",
                     t.path.string(), t.pid, t.bytes, t.age_s / 60);
}

// Re-hashes every entry (list() validates each cubin against its sidecar) and finds stale temp
// files; --fix removes both. Exit 1 while invalid entries remain (temp files are never read, so
// they do not make the cache invalid).
int run_verify(bool fix, bool as_json) {
  jit::DiskCache cache = jit::JitCore::global().disk_cache();
  auto entries = list_entries(cache, "");
  const auto temps = stale_temp_files(cache, fix);
  json temp_rows = json::array();
  size_t temps_removed = 0;
  for (const TempFile& t : temps) {
    temps_removed += t.removed;
    temp_rows.push_back({{"path", t.path.string()},
                         {"bytes", t.bytes},
                         {"age_s", t.age_s},
                         {"pid", t.pid},
                         {"removed", t.removed}});
    if (!as_json) fmt::print("{}  {}\n", t.removed ? "removed" : "STALE  ", temp_file_text(t));
  }
  json bad = json::array();
  size_t removed = 0;
  for (const auto& e : entries) {
    if (e.problem.empty()) continue;
    bool gone = fix && jit::DiskCache::remove(e.json_path);
    removed += gone;
    bad.push_back({{"uri", e.uri},
                   {"arch", e.arch},
                   {"problem", e.problem},
                   {"json_path", e.json_path.string()},
                   {"removed", gone}});
    if (!as_json) {
      fmt::print("{}  {}  {}: {}\n", gone ? "removed" : "INVALID", e.arch, e.uri, e.problem);
    }
  }
  size_t remaining = bad.size() - removed;
  if (fix && remaining > 0) {
    // Say why the exit code is 1: --fix was asked for and could not do it.
    fmt::print(stderr,
               "kjit-cli: {} invalid entries could not be removed from {} (not writable?)\n",
               remaining, cache.entries_dir().string());
  }
  if (as_json) {
    json out = {{"cache_dir", cache.root().string()},
                {"checked", entries.size()},
                {"invalid", bad},
                {"removed", removed},
                {"remaining_invalid", remaining},
                {"stale_temp_files", temp_rows},
                {"temp_files_removed", temps_removed}};
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    fmt::print("{} entries checked: {} valid, {} invalid, {} removed\n", entries.size(),
               entries.size() - bad.size(), bad.size(), removed);
    if (!temps.empty()) {
      fmt::print("{} stale temp files of killed writers, {} removed{}\n", temps.size(),
                 temps_removed, fix ? "" : " (--fix removes them)");
    }
  }
  return remaining == 0 ? kExitOk : kExitFailure;
}

// "500M", "2GiB", "4096" -> bytes (K/M/G/T are powers of 1024; KJIT_CACHE_MAX_SIZE's syntax).
uint64_t parse_size(const std::string& text) {
  uint64_t v = 0;
  if (!util::parse_byte_count(text, &v)) {
    throw UsageError("--max-size " + text + ": expected a size like 500M or 2G");
  }
  return v;
}

// Stale temp files first (they hold space and are never read), then what DiskCache::prune does
// (the same bound KJIT_CACHE_MAX_SIZE keeps): exit 1 when the cache is still over the limit.
int run_prune(const std::string& max_size) {
  const uint64_t limit = parse_size(max_size);
  const auto& settings = jit::JitCore::global().settings();
  jit::DiskCache cache(settings.cache_dir);
  size_t temps_removed = 0;
  uint64_t temp_bytes = 0;
  for (const TempFile& t : stale_temp_files(cache, true)) {
    if (!t.removed) continue;
    ++temps_removed;
    temp_bytes += t.bytes;
  }
  if (temps_removed > 0) {
    fmt::print("removed {} stale temp files of killed writers ({} bytes)\n", temps_removed,
               temp_bytes);
  }
  const jit::PruneResult r = cache.prune(limit, settings.gen_dir);
  fmt::print(
      "pruned {} of {} entries and {} generated source folders ({} bytes); {} bytes remain "
      "(limit {}){}\n",
      r.removed, r.entries, r.generated_removed, r.freed, r.remaining, limit,
      r.busy > 0 ? fmt::format("; {} entries skipped while another process built them", r.busy)
                 : "");
  if (r.remaining > limit) {
    fmt::print(stderr, "kjit-cli: the cache is still over the limit ({} > {} bytes){}\n",
               r.remaining, limit,
               r.busy > 0 ? "" : ": entries could not be removed (read-only cache?)");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void add_cache_commands(CLI::App& app, int& exit_code) {
  CLI::App* cache = app.add_subcommand("cache", "Inspect or clear the disk cache");
  cache->footer(kExitCodesFooter);
  cache->require_subcommand(1);

  struct Opts {
    bool json = false;
    bool fix = false;
    std::string filter;
    std::string max_size;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* inspect = cache->add_subcommand("inspect", "List entries and check each one");
  inspect->add_flag("--json", o->json, "Print one JSON document on stdout");
  inspect->add_option("--filter", o->filter, "Only URIs matching this glob");
  inspect->callback([o, &exit_code] { exit_code = run_inspect(o->json, o->filter); });

  CLI::App* verify = cache->add_subcommand(
      "verify", "Re-hash every entry, report invalid ones and stale temp files");
  verify->add_flag("--fix", o->fix,
                   "Remove the invalid entries and the temp files of killed writers");
  verify->add_flag("--json", o->json, "Print one JSON document on stdout");
  verify->callback([o, &exit_code] { exit_code = run_verify(o->fix, o->json); });

  CLI::App* clear = cache->add_subcommand("clear", "Remove entries and the generated sources");
  clear->add_option("--filter", o->filter, "Only URIs matching this glob (keeps generated/)");
  clear->callback([o, &exit_code] { exit_code = run_clear(o->filter); });

  CLI::App* prune =
      cache->add_subcommand("prune", "Remove stale temp files, then least recently used entries");
  prune->add_option("--max-size", o->max_size, "Keep at most this much (e.g. 500M, 2G)")
      ->required();
  prune->callback([o, &exit_code] { exit_code = run_prune(o->max_size); });

  cache->add_subcommand("dir", "Print the cache folder")->callback([&exit_code] {
    fmt::print("{}\n", jit::JitCore::global().settings().cache_dir.string());
    exit_code = kExitOk;
  });
}

}  // namespace kjit::cli
