#include "jit/sources.hpp"

#include <algorithm>
#include <filesystem>

#include "jit/embedded_sources.hpp"
#include "util/env.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

namespace kjit::jit {

const std::vector<SourceFile>& embedded_sources() {
  static const std::vector<SourceFile> files = [] {
    std::vector<SourceFile> v;
    for (size_t i = 0; i < kEmbeddedSourceCount; ++i) {
      const EmbeddedSource& e = kEmbeddedSources[i];
      v.push_back({e.name, std::string(e.data, e.size)});
    }
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.name < b.name; });
    return v;
  }();
  return files;
}

namespace {

bool in_dirs(const std::string& name, const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) {
    if (name.size() > d.size() && name.compare(0, d.size(), d) == 0 && name[d.size()] == '/') {
      return true;
    }
  }
  return false;
}

std::vector<SourceFile> from_disk(const std::filesystem::path& root,
                                  const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::vector<SourceFile> v;
  for (const auto& d : dirs) {
    fs::path dir = root / d;
    if (!fs::is_directory(dir)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "KJIT_KERNEL_DIR={} has no folder '{}'", root.string(), d);
    }
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      auto ext = entry.path().extension().string();
      if (ext != ".cuh" && ext != ".h" && ext != ".cu") continue;
      auto content = util::read_file(entry.path());
      if (!content) fail(KJIT_ERROR_INVALID_ARGUMENT, "cannot read {}", entry.path().string());
      v.push_back({fs::relative(entry.path(), root).generic_string(), std::move(*content)});
    }
  }
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return v;
}

}  // namespace

bool kernel_dir_override() {
  auto root = util::env_get("KJIT_KERNEL_DIR");
  return root && !root->empty();
}

std::vector<SourceFile> sources_for(const std::vector<std::string>& dirs) {
  if (auto root = util::env_get("KJIT_KERNEL_DIR"); root && !root->empty()) {
    return from_disk(*root, dirs);
  }
  std::vector<SourceFile> v;
  for (const auto& f : embedded_sources()) {
    if (in_dirs(f.name, dirs)) v.push_back(f);
  }
  return v;
}

}  // namespace kjit::jit
