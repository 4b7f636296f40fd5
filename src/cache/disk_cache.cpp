#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>

#include "util/error.hpp"
#include "util/fs.hpp"

namespace kjit::jit {

EntryPaths DiskCache::paths(const std::string& arch, const std::string& uri,
                            const std::string& key) const {
  fs::path base = entries_dir() / arch / (uri + "-" + key.substr(0, 16));
  EntryPaths p;
  p.cubin = base;
  p.cubin += ".cubin";
  p.json = base;
  p.json += ".json";
  p.lock = base;
  p.lock += ".lock";
  return p;
}

std::optional<CachedEntry> DiskCache::load(const EntryPaths& p, const std::string& key,
                                           const KeyInputs& expected, std::string* problem) const {
  auto json = util::read_file(p.json);
  if (!json) return std::nullopt;  // a plain miss
  auto set_problem = [&](std::string why) {
    if (problem) *problem = std::move(why);
    return std::nullopt;
  };
  auto cubin = util::read_file(p.cubin);
  if (!cubin) return set_problem("metadata present but cubin missing");
  CachedEntry e;
  try {
    e.meta = Metadata::from_json(*json);
  } catch (const Error& err) {
    return set_problem(err.what());
  }
  if (auto why = validate_entry(e.meta, *cubin, key, expected)) return set_problem(*why);
  e.cubin = std::move(*cubin);
  return e;
}

void DiskCache::publish(const EntryPaths& p, const Metadata& meta, const std::string& cubin) const {
  util::make_dirs(p.json.parent_path());
  util::write_file_atomic(p.cubin, cubin);
  try {
    util::write_file_atomic(p.json, meta.to_json());
  } catch (const Error&) {
    // A cubin without its sidecar is never loaded, but nothing lists or prunes it either: on a
    // full disk it would only hold on to the space. The caller holds the entry lock, so no
    // other writer can have paired a sidecar with it meanwhile.
    std::error_code ec;
    fs::remove(p.cubin, ec);
    throw;
  }
}

std::vector<ListedEntry> DiskCache::list(const std::string& kjit_version,
                                         const std::string& nvrtc_version) const {
  std::vector<ListedEntry> out;
  std::error_code ec;
  if (!fs::is_directory(entries_dir(), ec)) return out;
  for (const auto& arch_dir : fs::directory_iterator(entries_dir(), ec)) {
    if (!arch_dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(arch_dir.path(), ec)) {
      if (f.path().extension() != ".json") continue;
      ListedEntry row;
      row.json_path = f.path();
      row.arch = arch_dir.path().filename().string();
      std::string stem = f.path().stem().string();
      row.uri = stem.size() > 17 ? stem.substr(0, stem.size() - 17) : stem;
      fs::path cubin_path = f.path();
      cubin_path.replace_extension(".cubin");
      auto cubin = util::read_file(cubin_path);
      if (cubin) row.cubin_size = cubin->size();
      struct stat st {};
      if (::stat(cubin_path.c_str(), &st) == 0) row.last_used = st.st_mtime;
      auto json = util::read_file(f.path());
      if (json) row.json_size = json->size();
      try {
        if (!json) throw Error(KJIT_ERROR_CACHE, "unreadable metadata");
        Metadata m = Metadata::from_json(*json);
        row.uri = m.uri;
        KeyInputs expected = m.inputs;
        expected.kjit_version = kjit_version;
        expected.nvrtc_version = nvrtc_version;
        expected.arch = row.arch;
        if (!cubin) {
          row.problem = "cubin missing";
        } else if (auto why = validate_entry(m, *cubin, m.key, expected)) {
          row.problem = *why;
        } else if (stem != m.uri + "-" + m.key.substr(0, 16)) {
          row.problem = "file name does not match uri and key";
        }
        row.meta = std::move(m);
      } catch (const Error& e) {
        row.problem = e.what();
      }
      out.push_back(std::move(row));
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.json_path < b.json_path; });
  return out;
}

bool DiskCache::remove(const fs::path& json_path) {
  std::error_code ec;
  bool ok = true;
  for (const char* ext : {".json", ".cubin", ".lock"}) {
    fs::path p = json_path;
    p.replace_extension(ext);
    fs::remove(p, ec);
    ok = ok && !ec;
  }
  return ok;
}

namespace {

struct SizedEntry {
  fs::path json;
  std::string uri;  // from the file name: <uri>-<key16>.json
  uint64_t bytes = 0;
  int64_t last_used = 0;
};

uint64_t file_size_or_0(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

uint64_t tree_bytes(const fs::path& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) n += st.st_size;
  }
  return n;
}

// Sizes and use times only (no hashing): pruning must stay cheap.
std::vector<SizedEntry> sized_entries(const fs::path& entries_dir) {
  std::vector<SizedEntry> out;
  std::error_code ec;
  for (const auto& arch_dir : fs::directory_iterator(entries_dir, ec)) {
    if (!arch_dir.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(arch_dir.path(), ec)) {
      if (f.path().extension() != ".json") continue;
      SizedEntry e;
      e.json = f.path();
      const std::string stem = f.path().stem().string();
      e.uri = stem.size() > 17 ? stem.substr(0, stem.size() - 17) : stem;
      fs::path cubin = f.path();
      cubin.replace_extension(".cubin");
      struct stat st {};
      if (::stat(cubin.c_str(), &st) == 0) {
        e.bytes += static_cast<uint64_t>(st.st_size);
        e.last_used = st.st_mtime;
      }
      e.bytes += file_size_or_0(f.path());
      out.push_back(std::move(e));
    }
  }
  std::sort(out.begin(), out.end(), [](const SizedEntry& a, const SizedEntry& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.json < b.json;
  });
  return out;
}

}  // namespace

uint64_t DiskCache::generated_bytes(const fs::path& gen_dir) {
  return tree_bytes(gen_dir);
}

PruneResult DiskCache::prune(uint64_t max_bytes, const fs::path& gen_dir) const {
  PruneResult r;
  std::vector<SizedEntry> entries = sized_entries(entries_dir());
  r.entries = entries.size();
  std::map<std::string, int> live;  // entries per URI
  uint64_t total = 0;
  for (const auto& e : entries) {
    live[e.uri]++;
    total += e.bytes;
  }
  std::error_code ec;
  std::map<std::string, uint64_t> gen;  // generated folder bytes per URI
  for (const auto& d : fs::directory_iterator(gen_dir, ec)) {
    if (d.is_directory()) total += gen[d.path().filename().string()] = tree_bytes(d.path());
  }
  auto drop_generated = [&](const std::string& uri) {
    auto it = gen.find(uri);
    if (it == gen.end()) return;
    std::error_code rec;
    fs::remove_all(gen_dir / uri, rec);
    if (!rec) {
      r.freed += it->second;
      r.generated_removed++;
      gen.erase(it);
    }
  };
  std::vector<std::string> orphans;
  for (const auto& [uri, bytes] : gen) {
    if (live.find(uri) == live.end()) orphans.push_back(uri);
  }
  for (const auto& uri : orphans) {
    if (total - r.freed <= max_bytes) break;
    drop_generated(uri);
  }
  for (const auto& e : entries) {
    if (total - r.freed <= max_bytes) break;
    fs::path lock_path = e.json;
    lock_path.replace_extension(".lock");
    std::unique_ptr<util::FileLock> lock;
    bool unlockable = false;
    try {
      lock = util::FileLock::try_acquire(lock_path);
    } catch (const Error&) {
      unlockable = true;  // a read-only cache: remove() below fails and says so by its result
    }
    if (lock == nullptr && !unlockable) {
      r.busy++;  // another process holds the entry's lock: it is building it
      continue;
    }
    if (!remove(e.json)) continue;
    r.removed++;
    r.freed += e.bytes;
    if (--live[e.uri] == 0) drop_generated(e.uri);
  }
  r.remaining = total - r.freed;
  return r;
}

void DiskCache::touch(const fs::path& cubin_path) {
  // utimensat(UTIME_NOW) is one syscall and needs no read of the file; failures (read-only
  // cache) only cost pruning precision.
  struct timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  ::utimensat(AT_FDCWD, cubin_path.c_str(), now, 0);
}

}  // namespace kjit::jit
