// SHA-256 of artifact files (OpenSSL libcrypto): what an AOT package index records per file and
// what every load and download is checked against. XXH3 guards the cache against accidents;
// a package may come from another machine or a mirror, so it gets a cryptographic digest.
#pragma once

#include <string>
#include <string_view>

namespace kjit::aot {

// 64 lowercase hex digits. Throws kjit::Error(KJIT_ERROR_INTERNAL) if libcrypto fails.
std::string sha256_hex(std::string_view data);

}  // namespace kjit::aot
