#include "aot/sha256.hpp"

#include <openssl/evp.h>

#include "util/error.hpp"

namespace kjit::aot {

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1 || len != 32) {
    fail(KJIT_ERROR_INTERNAL, "SHA-256 failed in libcrypto");
  }
  static const char digits[] = "0123456789abcdef";
  std::string hex(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  return hex;
}

}  // namespace kjit::aot
