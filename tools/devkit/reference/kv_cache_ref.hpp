// CPU reference for the paged KV cache append: where each appended token lands, written from
// FlashInfer's definition (page = kv_indices[kv_indptr[b] + pos / page_size], slot =
// pos % page_size) plus kjit's documented skip rules for out-of-range page tables.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kjit::ref {

struct PageSlot {
  int64_t page = 0;
  int64_t slot = 0;
};

// The (page, slot) token t is written to, or nothing when kjit skips it: a request index outside
// [0, batch), a negative position, a page slot outside [indptr[b], indptr[b + 1]) or outside
// indices, or a page id outside [0, num_pages).
inline std::optional<PageSlot> append_target(const std::vector<int32_t>& batch_indices,
                                             const std::vector<int32_t>& positions,
                                             const std::vector<int32_t>& indptr,
                                             const std::vector<int32_t>& indices, int64_t t,
                                             int64_t page_size, int64_t num_pages) {
  const int64_t batch = static_cast<int64_t>(indptr.size()) - 1;
  const int64_t b = batch_indices[static_cast<size_t>(t)];
  const int64_t pos = positions[static_cast<size_t>(t)];
  if (b < 0 || b >= batch || pos < 0) return std::nullopt;
  const int64_t begin = indptr[static_cast<size_t>(b)];
  const int64_t end = indptr[static_cast<size_t>(b + 1)];
  const int64_t i = begin + pos / page_size;
  if (begin < 0 || i >= end || i >= static_cast<int64_t>(indices.size())) return std::nullopt;
  const int64_t page = indices[static_cast<size_t>(i)];
  if (page < 0 || page >= num_pages) return std::nullopt;
  return PageSlot{page, pos % page_size};
}

}  // namespace kjit::ref
