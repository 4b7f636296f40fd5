#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

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

void DiskCache::touch(const fs::path& cubin_path) {
  // utimensat(UTIME_NOW) is one syscall and needs no read of the file; failures (read-only
  // cache) only cost pruning precision.
  struct timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  ::utimensat(AT_FDCWD, cubin_path.c_str(), now, 0);
}

}  // namespace kjit::jit
