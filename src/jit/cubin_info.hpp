// Resource usage read from a cubin's ELF section headers, for the cache metadata and
// `kjit-cli cache inspect`, without a GPU.
#pragma once

#include <string>

namespace kjit::jit {

struct CubinKernelInfo {
  int registers = -1;  // per thread; -1 when not found
  // Size of the kernel's static shared memory section; on sm_80+ it includes the 1 KB the
  // toolchain reserves per block. 0 when the kernel has none, -1 when not found.
  int shared_bytes = -1;
};

CubinKernelInfo cubin_kernel_info(const std::string& cubin, const std::string& lowered_name);

// The machine code of one kernel (its .text.<lowered_name> section), empty when not found. For
// tests that check the order of instructions ptxas emitted (tests/unit/codegen_order_test.cpp).
std::string cubin_kernel_code(const std::string& cubin, const std::string& lowered_name);

}  // namespace kjit::jit
