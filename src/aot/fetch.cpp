#include "aot/fetch.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "aot/curl_loader.hpp"
#include "cache/metadata.hpp"
#include "kjit/version.h"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"

namespace kjit::aot {
namespace {

constexpr size_t kMaxIndexBytes = size_t{64} << 20;

// A failed attempt. Transient failures (connection, timeout, 5xx, a corrupted transfer) are worth
// another attempt; a 404 or a missing file:// path is not.
class TransferError : public std::runtime_error {
 public:
  TransferError(const std::string& what, bool retryable)
      : std::runtime_error(what), retryable_(retryable) {}
  bool retryable() const { return retryable_; }

 private:
  bool retryable_;
};

struct Counters {
  std::atomic<int> active{0};
  std::atomic<int> peak{0};
};

struct Sink {
  std::string* body;
  size_t cap;
  bool overflow = false;
};

size_t on_data(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body->size() + n > sink->cap) {
    sink->overflow = true;
    return 0;  // makes libcurl stop with CURLE_WRITE_ERROR
  }
  sink->body->append(data, n);
  return n;
}

std::string join_url(const std::string& base, const std::string& rel) {
  size_t end = base.size();
  while (end > 0 && base[end - 1] == '/') --end;
  return base.substr(0, end) + "/" + rel;
}

// One easy handle, used by one thread; libcurl keeps its connection open between requests, so a
// session is one connection to an http server.
class Session {
 public:
  explicit Session(Counters* counters) : api_(curl()), counters_(counters) {
    handle_ = api_.easy_init();
  }
  ~Session() {
    if (handle_ != nullptr) api_.easy_cleanup(handle_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::string get(const std::string& url, size_t cap) {
    if (handle_ == nullptr) throw TransferError("curl_easy_init failed", false);
    const CurlApi& c = api_;
    c.easy_reset(handle_);
    std::string body;
    Sink sink{&body, cap};
    char error[CURL_ERROR_SIZE] = {0};
    c.easy_setopt(handle_, CURLOPT_URL, url.c_str());
    c.easy_setopt(handle_, CURLOPT_WRITEFUNCTION, &on_data);
    c.easy_setopt(handle_, CURLOPT_WRITEDATA, &sink);
    c.easy_setopt(handle_, CURLOPT_ERRORBUFFER, error);
    c.easy_setopt(handle_, CURLOPT_FAILONERROR, 1L);
    c.easy_setopt(handle_, CURLOPT_FOLLOWLOCATION, 1L);
    c.easy_setopt(handle_, CURLOPT_MAXREDIRS, 5L);
    c.easy_setopt(handle_, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM timeouts: we run on threads
    c.easy_setopt(handle_, CURLOPT_CONNECTTIMEOUT, 10L);
    // A stalled transfer (under 1 KB/s for 30 s) fails and is retried rather than hanging.
    c.easy_setopt(handle_, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    c.easy_setopt(handle_, CURLOPT_LOW_SPEED_TIME, 30L);
    c.easy_setopt(handle_, CURLOPT_USERAGENT, "kjit/" KJIT_VERSION_STRING);
    int now = ++counters_->active;
    int peak = counters_->peak.load();
    while (now > peak && !counters_->peak.compare_exchange_weak(peak, now)) {
    }
    CURLcode rc = c.easy_perform(handle_);
    --counters_->active;
    if (rc == CURLE_OK) return body;
    if (sink.overflow) {
      throw TransferError(fmt::format("{}: larger than the {} bytes expected", url, cap), false);
    }
    long code = 0;
    c.easy_getinfo(handle_, CURLINFO_RESPONSE_CODE, &code);
    std::string why = error[0] ? error : c.easy_strerror(rc);
    bool permanent = (rc == CURLE_HTTP_RETURNED_ERROR && code >= 400 && code < 500 && code != 408 &&
                      code != 429) ||
                     rc == CURLE_FILE_COULDNT_READ_FILE || rc == CURLE_UNSUPPORTED_PROTOCOL ||
                     rc == CURLE_URL_MALFORMAT || rc == CURLE_REMOTE_FILE_NOT_FOUND;
    throw TransferError(fmt::format("GET {}: {}", url, why), !permanent);
  }

 private:
  const CurlApi& api_;
  Counters* counters_;
  CURL* handle_ = nullptr;
};

template <class F>
void with_retries(const FetchOptions& o, const std::string& what, F&& attempt) {
  for (int n = 0;; ++n) {
    try {
      attempt();
      return;
    } catch (const TransferError& e) {
      if (!e.retryable() || n >= o.retries) {
        if (n == 0) throw Error(KJIT_ERROR_CACHE, e.what());
        throw Error(KJIT_ERROR_CACHE,
                    fmt::format("{} (gave up after {} attempts)", e.what(), n + 1));
      }
      const long long wait = std::min<long long>(30000, static_cast<long long>(o.backoff_ms) << n);
      if (o.log) (*o.log)("retrying {} in {} ms: {}", what, wait, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
    }
  }
}

void warn_skip_checksum() {
  static std::once_flag once;
  std::call_once(once, [] {
    util::log(
        "warning: KJIT_ARTIFACT_SKIP_CHECKSUM=1: artifacts are not checked against their "
        "SHA-256 (a debugging aid; never use it in production)");
  });
}

// Downloads one entry unless the artifact dir has it already. Returns true when it downloaded.
bool fetch_one(const FetchOptions& o, Session& s, const PackageEntry& e) {
  const std::string stem = entry_stem(e.arch, e.uri, e.key);
  fs::path lock_path = o.dir / (stem + ".lock");
  util::make_dirs(lock_path.parent_path());
  util::FileLock lock(lock_path);
  // Checked under the lock: another process may have published it while this one waited.
  if (!check_entry(o.dir, e, o.skip_checksum)) {
    if (o.log) (*o.log)("{} is already in {}", stem, o.dir.string());
    return false;
  }
  std::string cubin, metadata;
  auto t0 = std::chrono::steady_clock::now();
  with_retries(o, stem, [&] {
    cubin = s.get(join_url(o.url, e.file), e.size);
    metadata = s.get(join_url(o.url, e.metadata), e.metadata_size);
    // A transfer can be corrupted on the way; a corrupted file on the server fails every time.
    if (auto why = check_entry_bytes(e, cubin, metadata, o.skip_checksum)) {
      throw TransferError(fmt::format("{}: rejected: {}", join_url(o.url, e.file), *why), true);
    }
  });
  write_entry_files(o.dir, e, cubin, metadata);
  if (o.log) {
    std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
    (*o.log)("downloaded {} ({} bytes{}) in {:.1f} ms into {}", stem, e.size,
             o.skip_checksum ? ", SHA-256 NOT checked" : ", SHA-256 ok", dt.count(),
             o.dir.string());
  }
  return true;
}

// Adds `arrived` to o.dir/index.json. A dir holding another kjit or NVRTC version's package is
// started over: one index describes one build.
void merge_index(const FetchOptions& o, const PackageIndex& remote,
                 const std::vector<PackageEntry>& arrived) {
  util::FileLock lock(o.dir / "index.lock");
  PackageIndex local;
  bool fresh = true;
  if (auto text = util::read_file(o.dir / kIndexName)) {
    try {
      local = PackageIndex::from_json(*text);
      fresh =
          local.kjit_version != remote.kjit_version || local.nvrtc_version != remote.nvrtc_version;
    } catch (const Error& e) {
      if (o.log) (*o.log)("replacing the invalid index of {}: {}", o.dir.string(), e.what());
    }
  }
  if (fresh) {
    local = PackageIndex{};
    local.kjit_version = remote.kjit_version;
    local.nvrtc_version = remote.nvrtc_version;
  }
  local.created = remote.created;
  std::map<std::pair<std::string, std::string>, PackageEntry> merged;
  for (auto& e : local.entries) merged[{e.arch, e.uri}] = e;
  for (const auto& e : arrived) merged[{e.arch, e.uri}] = e;
  local.entries.clear();
  local.archs.clear();
  for (auto& [name, e] : merged) {
    if (std::find(local.archs.begin(), local.archs.end(), e.arch) == local.archs.end()) {
      local.archs.push_back(e.arch);
    }
    local.entries.push_back(std::move(e));
  }
  local.reindex();
  util::write_file_atomic(o.dir / kIndexName, local.to_json());
}

}  // namespace

void check_url(const std::string& url) {
  for (const char* scheme : {"http://", "https://", "file://"}) {
    if (url.rfind(scheme, 0) == 0 && url.size() > std::char_traits<char>::length(scheme)) return;
  }
  fail(KJIT_ERROR_INVALID_ARGUMENT,
       "KJIT_ARTIFACT_URL='{}' must start with http://, https:// or file://", url);
}

PackageIndex fetch_index(const FetchOptions& o) {
  check_url(o.url);
  Counters counters;
  Session s(&counters);
  const std::string url = join_url(o.url, kIndexName);
  std::string body;
  with_retries(o, url, [&] { body = s.get(url, kMaxIndexBytes); });
  try {
    return PackageIndex::from_json(body);
  } catch (const Error& e) {
    fail(KJIT_ERROR_CACHE, "repository index {}: {}", url, e.what());
  }
}

FetchResult fetch_entries(const FetchOptions& o, const PackageIndex& remote,
                          const std::vector<PackageEntry>& entries,
                          const std::function<void(size_t, size_t)>& progress) {
  FetchResult r;
  if (entries.empty()) return r;
  check_url(o.url);
  curl();  // no libcurl: one clear error now rather than one per entry
  if (o.skip_checksum) warn_skip_checksum();
  util::make_dirs(o.dir);
  Counters counters;
  std::mutex mu;
  std::vector<PackageEntry> arrived;
  size_t done = 0;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    Session s(&counters);
    for (size_t i; (i = next++) < entries.size();) {
      const PackageEntry& e = entries[i];
      std::string error;
      bool downloaded = false;
      try {
        downloaded = fetch_one(o, s, e);
      } catch (const std::exception& ex) {
        error = ex.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) {
        arrived.push_back(e);
        (downloaded ? r.downloaded : r.present)++;
      } else {
        if (o.log) (*o.log)("failed: {}", error);
        r.failures.push_back({entry_stem(e.arch, e.uri, e.key), error});
      }
      ++done;
      if (progress) progress(done, entries.size());
    }
  };
  const size_t threads = std::clamp<size_t>(o.jobs < 1 ? 1 : o.jobs, 1, entries.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  r.peak_transfers = counters.peak.load();
  std::sort(r.failures.begin(), r.failures.end(),
            [](const FetchFailure& a, const FetchFailure& b) { return a.name < b.name; });
  if (!arrived.empty()) merge_index(o, remote, arrived);
  return r;
}

}  // namespace kjit::aot
