#include "aot/packages.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "aot/fetch.hpp"
#include "kjit/version.h"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"

namespace kjit::aot {
namespace {

std::string arch_names(const std::vector<Wanted>& wanted) {
  std::string s;
  for (const auto& w : wanted) s += (s.empty() ? "" : " or ") + w.target.sm();
  return s;
}

}  // namespace

Packages::Packages(const jit::Settings& settings)
    : settings_(settings), log_(settings.artifact_log) {
  auto add = [&](const fs::path& p, const char* role) {
    if (p.empty()) return;
    for (const auto& d : dirs_) {
      if (d.path == p) return;
    }
    dirs_.push_back({p, role});
  };
  for (const auto& d : settings_.aot_dirs) add(d, "KJIT_AOT_DIR");
  add(settings_.artifact_dir, "artifact dir");
  indexes_.resize(dirs_.size());
  if (settings_.artifact_skip_checksum && !dirs_.empty()) {
    util::log(
        "warning: KJIT_ARTIFACT_SKIP_CHECKSUM=1: package files are not checked against their "
        "SHA-256 (a debugging aid; never use it in production)");
  }
}

Packages::~Packages() = default;

void Packages::warn_once(const std::string& text) {
  if (warned_.insert(text).second) util::log("warning: {}", text);
  log_("{}", text);
}

Packages::CachedIndex& Packages::index_of(size_t i) {
  CachedIndex& ci = indexes_[i];
  const SearchDir& d = dirs_[i];
  fs::path path = d.path / kIndexName;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const long long mtime = exists ? st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec : -1;
  const long long size = exists ? static_cast<long long>(st.st_size) : -1;
  const long long inode = exists ? static_cast<long long>(st.st_ino) : -1;
  if (ci.loaded && ci.mtime_ns == mtime && ci.size == size && ci.inode == inode) return ci;

  ci = CachedIndex{};
  ci.loaded = true;
  ci.mtime_ns = mtime;
  ci.size = size;
  ci.inode = inode;
  if (!exists) {
    std::error_code ec;
    ci.problem = fs::is_directory(d.path, ec) ? "no index.json" : "does not exist";
    return ci;
  }
  auto text = util::read_file(path);
  if (!text) {
    ci.problem = "index.json is unreadable";
    warn_once(fmt::format("{} {}: {}", d.role, d.path.string(), ci.problem));
    return ci;
  }
  try {
    ci.index = PackageIndex::from_json(*text);
  } catch (const Error& e) {
    ci.problem = e.what();
    warn_once(fmt::format("not using {} {}: {}", d.role, d.path.string(), ci.problem));
    return ci;
  }
  const PackageIndex& idx = *ci.index;
  if (!versions_compatible(idx.kjit_version, KJIT_VERSION_STRING)) {
    const bool allow = settings_.aot_allow_version_mismatch;
    ci.version_ok = allow;
    std::string text = fmt::format(
        "{} {} was built by kjit {}, this is kjit {} (major.minor must match); {}", d.role,
        d.path.string(), idx.kjit_version, KJIT_VERSION_STRING,
        allow ? "using it anyway: KJIT_AOT_ALLOW_VERSION_MISMATCH=1"
              : "not using it (KJIT_AOT_ALLOW_VERSION_MISMATCH=1 overrides, for diagnosis only)");
    if (!allow) ci.problem = text;
    warn_once(text);
  }
  log_("read {}/index.json: {} entries for [{}], kjit {}, NVRTC {}", d.path.string(),
       idx.entries.size(), fmt::join(idx.archs, " "), idx.kjit_version, idx.nvrtc_version);
  return ci;
}

std::optional<Found> Packages::find_in(size_t i, const std::string& uri,
                                       const std::vector<Wanted>& wanted, std::string* note) {
  const SearchDir& d = dirs_[i];
  CachedIndex& ci = index_of(i);
  if (!ci.index || !ci.version_ok) {
    *note = ci.problem;
    return std::nullopt;
  }
  std::string reasons;
  auto refuse = [&](const std::string& arch, const std::string& why) {
    reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : ", ", arch, why);
  };
  for (const auto& w : wanted) {
    const std::string arch = w.target.sm();
    const PackageEntry* e = ci.index->find(uri, arch);
    if (e == nullptr) continue;
    if (e->content_key != w.content_key) {
      // Another kjit patch release whose kernel sources differ, or other options (-G, -lineinfo):
      // a valid cubin, but not the code this kjit would run.
      refuse(arch, "built from other kernel sources or options than this kjit's");
      log_("{} {}: {} {} skipped: its content key differs from this kjit's", d.role,
           d.path.string(), uri, arch);
      continue;
    }
    Found f;
    if (auto why = check_entry(d.path, *e, settings_.artifact_skip_checksum, &f.meta, &f.cubin)) {
      ++rejected_;
      warn_once(
          fmt::format("{} {}: not using {} ({}): {}", d.role, d.path.string(), uri, arch, *why));
      refuse(arch, *why);
      continue;
    }
    // A hand-assembled package may mix builds: each entry's own version counts too.
    if (!versions_compatible(f.meta.inputs.kjit_version, KJIT_VERSION_STRING) &&
        !settings_.aot_allow_version_mismatch) {
      refuse(arch, fmt::format("built by kjit {}, this is kjit {} (major.minor must match)",
                               f.meta.inputs.kjit_version, KJIT_VERSION_STRING));
      continue;
    }
    f.cubin_path = d.path / e->file;
    f.dir = d.path;
    log_("{} {}: from {} {} ({})", uri, arch, d.role, d.path.string(),
         e->key == w.key ? "exact key"
                         : fmt::format("same sources; built with NVRTC {} / kjit {}",
                                       f.meta.inputs.nvrtc_version, f.meta.inputs.kjit_version));
    return f;
  }
  *note = reasons.empty() ? fmt::format("no entry for {}", arch_names(wanted)) : reasons;
  return std::nullopt;
}

std::optional<Found> Packages::find(const std::string& uri, const std::vector<Wanted>& wanted,
                                    std::string* searched) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string notes;
  for (size_t i = 0; i < dirs_.size(); ++i) {
    std::string note;
    if (auto f = find_in(i, uri, wanted, &note)) return f;
    notes += fmt::format("{}{} {}: {}", notes.empty() ? "" : "; ", dirs_[i].role,
                         dirs_[i].path.string(), note);
  }
  if (dirs_.empty()) notes = "no package dir configured";
  log_("{} ({}): not in a package: {}", uri, arch_names(wanted), notes);
  if (searched) *searched += (searched->empty() ? "" : "; ") + notes;
  return std::nullopt;
}

std::optional<Found> Packages::auto_fetch(const std::string& uri, const std::vector<Wanted>& wanted,
                                          std::string* searched) {
  std::lock_guard<std::mutex> lock(mu_);
  auto skip = [&](const std::string& why) -> std::optional<Found> {
    if (searched) *searched += (searched->empty() ? "" : "; ") + why;
    return std::nullopt;
  };
  const std::string& url = settings_.artifact_url;
  if (settings_.offline) return skip("not downloaded: KJIT_OFFLINE=1");
  if (url.empty()) return skip("not downloaded: KJIT_ARTIFACT_URL is unset");
  if (!settings_.artifact_auto_fetch) {
    return skip(
        "not downloaded: KJIT_ARTIFACT_AUTO_FETCH is off (kjit-cli aot fetch downloads "
        "ahead of use)");
  }
  auto dir_it = std::find_if(dirs_.begin(), dirs_.end(),
                             [&](const SearchDir& d) { return d.path == settings_.artifact_dir; });
  if (settings_.artifact_dir.empty() || dir_it == dirs_.end()) {
    return skip("not downloaded: no artifact dir");
  }
  FetchOptions o;
  o.url = url;
  o.dir = settings_.artifact_dir;
  o.jobs = 1;
  o.retries = settings_.artifact_retries;
  o.skip_checksum = settings_.artifact_skip_checksum;
  o.log = &log_;
  if (!remote_loaded_) {
    remote_loaded_ = true;
    try {
      remote_ = fetch_index(o);
    } catch (const Error& e) {
      remote_problem_ = e.what();
      warn_once(fmt::format("artifact repository {}: {}", url, remote_problem_));
    }
  }
  if (!remote_) return skip("not downloaded: " + remote_problem_);
  if (!versions_compatible(remote_->kjit_version, KJIT_VERSION_STRING) &&
      !settings_.aot_allow_version_mismatch) {
    return skip(fmt::format(
        "not downloaded: the repository {} holds kjit {}, this is kjit {} (major.minor must "
        "match)",
        url, remote_->kjit_version, KJIT_VERSION_STRING));
  }
  const PackageEntry* pick = nullptr;
  const Wanted* picked = nullptr;
  for (const auto& w : wanted) {
    const PackageEntry* e = remote_->find(uri, w.target.sm());
    if (e != nullptr && e->content_key == w.content_key) {
      pick = e;
      picked = &w;
      break;
    }
  }
  if (pick == nullptr) {
    return skip(
        fmt::format("not downloaded: the repository {} has no entry for {} ({}) built "
                    "from this kjit's sources",
                    url, uri, arch_names(wanted)));
  }
  FetchResult r;
  try {
    r = fetch_entries(o, *remote_, {*pick});
  } catch (const Error& e) {
    warn_once(fmt::format("downloading {}: {}", pick->file, e.what()));
    return skip(fmt::format("download failed: {}", e.what()));
  }
  if (!r.failures.empty()) {
    warn_once(fmt::format("downloading {}: {}", pick->file, r.failures[0].error));
    return skip("download failed: " + r.failures[0].error);
  }
  std::string note;
  if (auto f = find_in(static_cast<size_t>(dir_it - dirs_.begin()), uri, {*picked}, &note)) {
    return f;
  }
  return skip("downloaded but not usable: " + note);
}

}  // namespace kjit::aot
