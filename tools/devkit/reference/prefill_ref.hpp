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
// out, lse and tol only, and q must be safe to call at once (k and v are read once per request,
// before its rows, from the calling thread).
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
    // The request's keys and values, decoded once ([kv_heads][kv_len][D]; rows of invalid pages
    // stay 0 and are never read): the accessors cost more than the arithmetic, and every query
    // row of the request reads them.
    const size_t KD = static_cast<size_t>(kv_len * D);
    std::vector<double> kd(static_cast<size_t>(a.kv_heads) * KD), vd(kd.size());
    for (int64_t h = 0; h < a.kv_heads; ++h) {
      for (int64_t j = 0; j < kv_len; ++j) {
        const int64_t page = pages[static_cast<size_t>(j)];
        if (page < 0) continue;
        const size_t at = static_cast<size_t>(h) * KD + static_cast<size_t>(j * D);
        for (int64_t d = 0; d < D; ++d) {
          kd[at + static_cast<size_t>(d)] = k(page, slots[static_cast<size_t>(j)], h, d);
          vd[at + static_cast<size_t>(d)] = v(page, slots[static_cast<size_t>(j)], h, d);
        }
      }
    }
    rows(q_len, [&](int64_t t, int) {
      const int64_t diag = kv_len - q_len + t;
      const int64_t hi = a.causal ? std::min(kv_len, diag + 1) : kv_len;
      const int64_t lo = a.window_left >= 0 ? std::max<int64_t>(0, diag - a.window_left) : 0;
      std::vector<size_t> keys;
      for (int64_t j = lo; j < hi; ++j) {
        if (pages[static_cast<size_t>(j)] >= 0) keys.push_back(static_cast<size_t>(j));
      }
      const int64_t r = q0 + t;
      std::vector<double> qd(static_cast<size_t>(D));
      for (int64_t i = 0; i < a.qo_heads; ++i) {
        const int64_t h = i / group;
        const size_t row = static_cast<size_t>(r * a.qo_heads + i);
        for (int64_t d = 0; d < D; ++d) qd[static_cast<size_t>(d)] = q(r, i, d);
        // Element d of key keys[j] of head h in kd / vd.
        const auto at = [&](size_t j, int64_t d) {
          return static_cast<size_t>(h) * KD + keys[j] * static_cast<size_t>(D) +
                 static_cast<size_t>(d);
        };
        lse[row] = attend_query(
            keys.size(), D, a.sm_scale, a.soft_cap,
            [&](size_t j, int64_t d) { return qd[static_cast<size_t>(d)] * kd[at(j, d)]; },
            [&](size_t j, int64_t d) { return vd[at(j, d)]; }, &out[row * static_cast<size_t>(D)],
            tol, tol ? &tol->out[row * static_cast<size_t>(D)] : nullptr,
            tol ? &tol->lse[row] : nullptr);
      }
    });
  }
}

}  // namespace kjit::ref
