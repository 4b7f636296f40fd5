// fp64 CPU reference for batch prefill attention over a paged or a ragged KV, written from the
// definition in kjit.h (kjit_batch_prefill_plan), independently of the kernel: for every query
// row the attended keys are listed by the mask rules, then attend_query (attention_ref.hpp) does
// a two-pass softmax. Page rules are decode's (decode_ref_range / decode_ref_page).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/attention_ref.hpp"

namespace kjit::ref {

struct PrefillRefArgs {
  int64_t batch = 0, qo_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t page_size = 0;  // 0: ragged KV (kv_indptr in rows of k / v)
  int64_t num_pages = 0;  // paged: pages in the caches; ragged: rows of k / v
  double sm_scale = 0, soft_cap = 0;
  bool causal = true;
  int window_left = -1;
  std::vector<int32_t> qo_indptr, kv_indptr, kv_indices, last_page_len;
};

// out[row][i][d] and lse[row][i] (natural log) for every row of q ([total_q, qo_heads, D]) that a
// request owns; rows no request owns stay 0 / -inf. q(row, i, d) and k / v(page, slot, kv_head,
// d) return the stored values as doubles; for a ragged KV page is the row of k / v and slot 0.
// rows(n, f) calls f(t, worker) once for each of a request's n query tokens, in any order and
// from any threads (the GPU tests pass test::parallel_rows): each token writes its own rows of
// out, lse and tol only, and q, k and v must be safe to call at once.
template <class Q, class K, class V, class Rows = SequentialRows>
void prefill_attention(const PrefillRefArgs& a, int64_t total_q, Q&& q, K&& k, V&& v,
                       std::vector<double>& out, std::vector<double>& lse,
                       DecodeTolerance* tol = nullptr, Rows&& rows = Rows{}) {
  const int64_t D = a.head_dim, group = a.qo_heads / a.kv_heads;
  out.assign(static_cast<size_t>(total_q * a.qo_heads * D), 0.0);
  lse.assign(static_cast<size_t>(total_q * a.qo_heads), -std::numeric_limits<double>::infinity());
  if (tol) {
    tol->out.assign(out.size(), 1e-6);
    tol->lse.assign(lse.size(), 0.0);
  }
  DecodeRefArgs kv;  // the page rules of decode
  kv.page_size = a.page_size;
  kv.num_pages = a.num_pages;
  kv.indptr = a.kv_indptr;
  kv.indices = a.kv_indices;
  kv.last_page_len = a.last_page_len;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t q0 = a.qo_indptr[static_cast<size_t>(b)];
    const int64_t q_len = a.qo_indptr[static_cast<size_t>(b + 1)] - q0;
    // Every key's (page, slot), or page -1 when the table gives no valid row.
    std::vector<int64_t> pages, slots;
    if (a.page_size > 0) {
      int64_t start = 0, len = 0;
      decode_ref_range(kv, b, start, len);
      for (int64_t t = 0; t < len; ++t) {
        pages.push_back(decode_ref_page(kv, b, t));
        slots.push_back(t % a.page_size);
      }
    } else {
      const int64_t first = a.kv_indptr[static_cast<size_t>(b)];
      const int64_t len = std::max<int64_t>(0, a.kv_indptr[static_cast<size_t>(b + 1)] - first);
      for (int64_t t = 0; t < len; ++t) {
        pages.push_back(first + t < a.num_pages ? first + t : -1);
        slots.push_back(0);
      }
    }
    const int64_t kv_len = static_cast<int64_t>(pages.size());
    rows(q_len, [&](int64_t t, int) {
      const int64_t diag = kv_len - q_len + t;
      const int64_t hi = a.causal ? std::min(kv_len, diag + 1) : kv_len;
      const int64_t lo = a.window_left >= 0 ? std::max<int64_t>(0, diag - a.window_left) : 0;
      std::vector<size_t> keys;
      for (int64_t j = lo; j < hi; ++j) {
        if (pages[static_cast<size_t>(j)] >= 0) keys.push_back(static_cast<size_t>(j));
      }
      const int64_t r = q0 + t;
      for (int64_t i = 0; i < a.qo_heads; ++i) {
        const int64_t h = i / group;
        const size_t row = static_cast<size_t>(r * a.qo_heads + i);
        auto key = [&](size_t j) { return keys[j]; };
        lse[row] = attend_query(
            keys.size(), D, a.sm_scale, a.soft_cap,
            [&](size_t j, int64_t d) { return q(r, i, d) * k(pages[key(j)], slots[key(j)], h, d); },
            [&](size_t j, int64_t d) { return v(pages[key(j)], slots[key(j)], h, d); },
            &out[row * static_cast<size_t>(D)], tol,
            tol ? &tol->out[row * static_cast<size_t>(D)] : nullptr,
            tol ? &tol->lse[row] : nullptr);
      }
    });
  }
}

}  // namespace kjit::ref
