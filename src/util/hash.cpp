#include "util/hash.hpp"

#define XXH_INLINE_ALL  // header-only: the H200 machine has no libxxhash
#include <fmt/format.h>
#include <xxhash.h>

namespace kjit::util {

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", hi, lo);
}

Hash128 xxh3_128(std::string_view data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return {h.high64, h.low64};
}

std::string xxh3_64_hex(std::string_view data) {
  return fmt::format("{:016x}", XXH3_64bits(data.data(), data.size()));
}

Hasher::Hasher() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}

Hasher::~Hasher() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Hasher& Hasher::add(std::string_view field) {
  auto* st = static_cast<XXH3_state_t*>(state_);
  uint64_t n = field.size();
  XXH3_128bits_update(st, &n, sizeof(n));
  XXH3_128bits_update(st, field.data(), field.size());
  return *this;
}

Hash128 Hasher::digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {h.high64, h.low64};
}

}  // namespace kjit::util
