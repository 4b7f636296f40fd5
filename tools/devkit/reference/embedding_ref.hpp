// CPU reference for the token-embedding gather, written from nn.Embedding's definition plus
// kjit's documented rule for ids outside the table (a row of zeros).
#pragma once

#include <cstdint>
#include <vector>

namespace kjit::ref {

// out[t, :] = table[ids[t], :] for [vocab, hidden] row-major `table`, as doubles; zeros for an id
// outside [0, vocab).
inline std::vector<double> embedding(const std::vector<double>& table, int64_t vocab,
                                     int64_t hidden, const std::vector<int64_t>& ids) {
  std::vector<double> out(ids.size() * static_cast<size_t>(hidden), 0.0);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) continue;
    for (int64_t h = 0; h < hidden; ++h) {
      out[t * static_cast<size_t>(hidden) + static_cast<size_t>(h)] =
          table[static_cast<size_t>(ids[t] * hidden + h)];
    }
  }
  return out;
}

}  // namespace kjit::ref
