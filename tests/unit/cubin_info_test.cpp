#include <catch2/catch.hpp>

#include "jit/cubin_info.hpp"

TEST_CASE("cubin info: garbage and truncated input give unknown, not a crash", "[cubin_info]") {
  using kjit::jit::cubin_kernel_info;
  for (std::string bad : {std::string(),
                          std::string("\x7f"
                                      "ELF"),
                          std::string(64, '\0'),
                          std::string("\x7f"
                                      "ELF\x02\x01\x01") +
                              std::string(200, '\xff')}) {
    auto info = cubin_kernel_info(bad, "_Z1kv");
    CHECK(info.registers == -1);
    CHECK(info.shared_bytes == -1);
  }
}
