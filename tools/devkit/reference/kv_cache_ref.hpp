// CPU reference for the paged KV cache append: where each appended token lands, written from
// FlashInfer's definition (page = kv_indices[kv_indptr[b] + pos / page_size], slot =
// pos % page_size) plus kjit's documented skip rules for out-of-range page tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <utility>
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

// A random batch the append tests write: requests of lengths from [1, max_seq], each appending the
// last [1, max_append] positions of its sequence, on distinct pages in random order (plus
// spare_pages that no request uses). Tokens are in request order until shuffle_tokens.
struct AppendBatch {
  std::vector<int32_t> indptr{0}, indices, last_page_len, batch_indices, positions;
  std::vector<int64_t> pages;  // per request
  int64_t num_pages = 0;
};

inline AppendBatch random_append_batch(int64_t batch, int64_t max_seq, int64_t max_append,
                                       int64_t page_size, int64_t spare_pages,
                                       std::mt19937_64& rng) {
  AppendBatch a;
  std::uniform_int_distribution<int64_t> seq_dist(1, max_seq);
  std::vector<int64_t> seq(static_cast<size_t>(batch)), napp(seq.size());
  a.pages.resize(seq.size());
  int64_t used = 0;
  for (size_t b = 0; b < seq.size(); ++b) {
    seq[b] = seq_dist(rng);
    napp[b] = std::uniform_int_distribution<int64_t>(1, std::min(max_append, seq[b]))(rng);
    a.pages[b] = (seq[b] + page_size - 1) / page_size;
    used += a.pages[b];
  }
  a.num_pages = used + spare_pages;
  std::vector<int32_t> perm(static_cast<size_t>(a.num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t b = 0; b < seq.size(); ++b) {
    for (int64_t i = 0; i < a.pages[b]; ++i) a.indices.push_back(perm[a.indices.size()]);
    a.indptr.push_back(static_cast<int32_t>(a.indices.size()));
    a.last_page_len.push_back(static_cast<int32_t>(seq[b] - (a.pages[b] - 1) * page_size));
    for (int64_t p = seq[b] - napp[b]; p < seq[b]; ++p) {
      a.batch_indices.push_back(static_cast<int32_t>(b));
      a.positions.push_back(static_cast<int32_t>(p));
    }
  }
  return a;
}

// The tokens (batch_indices with positions) in a random order.
inline void shuffle_tokens(AppendBatch& a, std::mt19937_64& rng) {
  std::vector<size_t> order(a.batch_indices.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> bi(order.size()), pos(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    bi[i] = a.batch_indices[order[i]];
    pos[i] = a.positions[order[i]];
  }
  a.batch_indices = std::move(bi);
  a.positions = std::move(pos);
}

}  // namespace kjit::ref
