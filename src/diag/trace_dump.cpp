// See trace_dump.hpp.
#include "diag/trace_dump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <unordered_map>

#include "runtime/jit_core.hpp"
#include "util/env.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"

namespace kjit::ops::trace {

std::atomic<int> g_state{-1};

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct Seen {
  std::set<std::string> var_keys;
  bool capped = false;
};

struct Recorder {
  std::mutex mu;
  fs::path dir;  // empty until the first record
  std::unordered_map<std::string, Seen> seen;
  bool warned = false;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

const fs::path& resolve_dir(Recorder& r) {
  if (r.dir.empty()) {
    auto d = util::env_get("KJIT_TRACE_DUMP_DIR");
    r.dir =
        d && !d->empty() ? fs::path(*d) : jit::JitCore::global().settings().cache_dir / "traces";
  }
  return r.dir;
}

// One write(2) with O_APPEND, so lines from concurrent processes stay whole.
void append_line(const fs::path& file, const std::string& line) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + file.string());
  const std::string data = line + "\n";
  const ssize_t n = ::write(fd, data.data(), data.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(data.size())) {
    throw std::system_error(err, std::generic_category(), "write " + file.string());
  }
}

}  // namespace

namespace detail {

void record(const std::string& name, const ojson& axes, const char* bench_op, const ojson& set,
            Definition (*make_def)(const void*), const void* make_def_state) noexcept {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  try {
    const std::string key = axes.dump();
    auto [it, new_name] = r.seen.try_emplace(name);
    Seen& s = it->second;
    if (s.var_keys.count(key)) return;
    if (static_cast<int>(s.var_keys.size()) >= kMaxWorkloadsPerDefinition) {
      if (!s.capped) {
        util::log("trace dump: {} has {} distinct workloads; recording no more of them", name,
                  kMaxWorkloadsPerDefinition);
        s.capped = true;
      }
      return;
    }
    s.var_keys.insert(key);
    const fs::path& dir = resolve_dir(r);
    if (new_name) {
      util::make_dirs(dir / "definitions");
      util::make_dirs(dir / "workloads");
      util::write_file_atomic(dir / "definitions" / (name + ".json"),
                              definition_json(make_def(make_def_state)));
    }
    ojson line = {{"definition", name}, {"axes", axes}};
    if (bench_op != nullptr) {
      line["op"] = bench_op;
      line["set"] = set;
    }
    append_line(dir / "workloads" / (name + ".jsonl"), line.dump());
  } catch (const std::exception& e) {
    if (!r.warned) {
      util::log("trace dump into {} failed (further failures are silent): {}", r.dir.string(),
                e.what());
      r.warned = true;
    }
  }
}

}  // namespace detail

bool read_state() noexcept {
  const bool on = util::env_flag("KJIT_TRACE_DUMP", false);
  g_state.store(on ? 1 : 0, std::memory_order_relaxed);
  return on;
}

void set_dir_for_testing(const std::string& dir) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.dir = dir;
  r.seen.clear();
  r.warned = false;
  g_state.store(dir.empty() ? 0 : 1, std::memory_order_relaxed);
}

}  // namespace kjit::ops::trace
