// The shared-memory matrix descriptor of Hopper's wgmma (PTX ISA, "Matrix Descriptor Format"):
// one definition that NVRTC and the host compiler both include, so the unit tests check the bit
// layout without a GPU. Plain C types only.
//
//   bits  0-13  start address >> 4 (shared window, 18 bits of address)
//   bits 16-29  leading dimension byte offset >> 4
//   bits 32-45  stride dimension byte offset >> 4
//   bits 49-51  matrix base offset (0: the swizzle pattern starts at a 1024-byte boundary)
//   bits 62-63  swizzle: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KJIT_WGMMA_DESC_FN __host__ __device__ constexpr inline
#else
#define KJIT_WGMMA_DESC_FN constexpr inline
#endif

namespace kjit {
namespace wgmma {

enum : unsigned { kSwizzleNone = 0, kSwizzle128B = 1, kSwizzle64B = 2, kSwizzle32B = 3 };

KJIT_WGMMA_DESC_FN unsigned long long smem_desc(unsigned smem_addr, unsigned lbo_bytes,
                                                unsigned sbo_bytes, unsigned swizzle) {
  return static_cast<unsigned long long>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<unsigned long long>((sbo_bytes >> 4) & 0x3FFFu) << 32) |
         (static_cast<unsigned long long>(swizzle & 3u) << 62);
}

// A K-major operand tile as TMA writes it with 128-byte swizzling: one 128-byte row (64 bf16 /
// fp16 of K) per M or N index, 8-row core-matrix groups 1024 bytes apart (the stride offset).
// The leading offset is unused for this layout (K fits in one swizzle row); 16 bytes is the
// value the ISA's canonical layouts give it. The tile must start at a 1024-byte boundary (base
// offset 0); a K step inside the row advances the start address by 32 bytes per k16.
KJIT_WGMMA_DESC_FN unsigned long long kmajor_sw128_desc(unsigned smem_addr) {
  return smem_desc(smem_addr, 16, 1024, kSwizzle128B);
}

// An MN-major (transposed) operand tile with 128-byte swizzling: 128-byte rows of 64 bf16 /
// fp16 along M or N, one row per K index, 8-row groups 1024 bytes apart (the stride offset), and
// the next 64 elements of M or N `block_bytes` further on (the leading offset: the tile is stored
// as blocks of 64 columns). A k16 step advances the start address by 16 rows (2048 bytes), which
// keeps the 1024-byte boundary the swizzle pattern starts on.
KJIT_WGMMA_DESC_FN unsigned long long mnmajor_sw128_desc(unsigned smem_addr, unsigned block_bytes) {
  return smem_desc(smem_addr, block_bytes, 1024, kSwizzle128B);
}

}  // namespace wgmma
}  // namespace kjit
