// A fresh directory under $TMPDIR, removed with everything in it on destruction.
#pragma once

#include <filesystem>
#include <string>

namespace kjit::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable for the scope and restores the old value (or unsets) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);  // value nullptr = unset
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace kjit::test
