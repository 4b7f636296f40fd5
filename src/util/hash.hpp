// XXH3 hashing for cache identity and artifact integrity.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit::util {

struct Hash128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
  // 32 lowercase hex digits, hi first.
  std::string hex() const;
  bool operator==(const Hash128& o) const { return hi == o.hi && lo == o.lo; }
};

Hash128 xxh3_128(std::string_view data);
// 16 hex digits of XXH3-64: for content digests in metadata (source files, cubins).
std::string xxh3_64_hex(std::string_view data);

// Streaming XXH3-128. Each add() is length-prefixed, so ("ab","c") and ("a","bc") differ.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  Hasher& add(std::string_view field);
  Hash128 digest() const;

 private:
  void* state_;
};

}  // namespace kjit::util
