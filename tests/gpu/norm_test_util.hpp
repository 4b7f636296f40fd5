// Helpers for the normalization GPU tests: host images of strided row buffers, their device
// twins, and the comparisons (tolerances say what error each op is allowed, and why).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"
#include "support/parallel_rows.hpp"

namespace kjit::test::norm {

// A [rows, hidden] view inside the host image of a buffer: `offset` elements in, rows `stride`
// elements apart. The image includes the gaps, so a kernel that writes them is caught.
struct RowsImage {
  std::string dtype;
  int64_t rows = 0, hidden = 0, stride = 0;
  size_t offset = 0;
  std::vector<unsigned char> bytes;

  RowsImage(std::string dt, int64_t r, int64_t h, int64_t row_stride = 0, size_t off = 0)
      : dtype(std::move(dt)), rows(r), hidden(h), stride(row_stride ? row_stride : h), offset(off) {
    bytes.resize(elems() * ref::elem_size(dtype));
  }
  size_t elems() const {
    return offset + (rows > 0 ? static_cast<size_t>((rows - 1) * stride + hidden) : 0);
  }
  size_t index(int64_t r, int64_t i) const { return offset + static_cast<size_t>(r * stride + i); }
  double at(int64_t r, int64_t i) const { return ref::load_elem(bytes.data(), index(r, i), dtype); }
  // Every element of the image, gaps included, uniform in [lo, hi) after rounding to dtype; in
  // blocks of 64K elements on every core, each from its own generator seeded from rng.
  void fill(std::mt19937_64& rng, double lo, double hi) {
    constexpr size_t kBlock = size_t{1} << 16;
    const uint64_t seed = rng();
    const size_t n = elems();
    parallel_rows(static_cast<int64_t>((n + kBlock - 1) / kBlock), [&](int64_t blk, int) {
      std::mt19937_64 g(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(blk + 1)));
      std::uniform_real_distribution<double> dist(lo, hi);
      const size_t end = std::min(n, static_cast<size_t>(blk + 1) * kBlock);
      for (size_t i = static_cast<size_t>(blk) * kBlock; i < end; ++i) {
        ref::store_elem(bytes.data(), i, dist(g), dtype);
      }
    });
  }
  // 0xFF in every byte: NaN in every float format, so an element never written shows.
  void poison() { std::fill(bytes.begin(), bytes.end(), static_cast<unsigned char>(0xFF)); }
  // The view's values, compact row-major (what the references take).
  std::vector<double> dense() const {
    std::vector<double> v(static_cast<size_t>(rows * hidden));
    parallel_rows(rows, [&](int64_t r, int) {
      for (int64_t i = 0; i < hidden; ++i) v[static_cast<size_t>(r * hidden + i)] = at(r, i);
    });
    return v;
  }
  bool in_view(size_t e) const {
    if (e < offset) return false;
    const size_t k = e - offset;
    return static_cast<int64_t>(k % static_cast<size_t>(stride)) < hidden;
  }
};

// A device buffer holding a RowsImage, and the DLTensor of its view.
struct DeviceRows {
  std::unique_ptr<DeviceBuffer> buf;
  Tensor view;

  explicit DeviceRows(const RowsImage& img) {
    buf = std::make_unique<DeviceBuffer>(img.bytes.size());
    buf->upload(img.bytes.data(), img.bytes.size());
    char* p = static_cast<char*>(buf->get()) + img.offset * ref::elem_size(img.dtype);
    view = make_tensor(p, {img.rows, img.hidden}, dl_dtype(img.dtype), {img.stride, 1});
  }
  void download(RowsImage& img) const { buf->download(img.bytes.data(), img.bytes.size()); }
};

// Parameter vector [n] of dtype, uniform in [lo, hi): host values (rounded) and device copy.
struct DeviceVector {
  std::vector<double> values;
  std::unique_ptr<DeviceBuffer> buf;
  Tensor t;

  // `offset` elements into its buffer (a misaligned parameter vector when odd).
  DeviceVector(const std::string& dtype, int64_t n, std::mt19937_64& rng, double lo, double hi,
               size_t offset = 0) {
    const size_t es = ref::elem_size(dtype);
    std::vector<unsigned char> host((offset + static_cast<size_t>(n)) * es);
    std::uniform_real_distribution<double> dist(lo, hi);
    values.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const size_t e = offset + static_cast<size_t>(i);
      ref::store_elem(host.data(), e, dist(rng), dtype);
      values[static_cast<size_t>(i)] = ref::load_elem(host.data(), e, dtype);
    }
    buf = std::make_unique<DeviceBuffer>(host.size());
    buf->upload(host.data(), host.size());
    t = make_tensor(static_cast<char*>(buf->get()) + offset * es, {n}, dl_dtype(dtype));
  }
};

// Allowed |got - want| for element (row, col) whose exact value is `want`.
using TolFn = std::function<double(int64_t row, int64_t col, double want)>;

// Elements of the view outside tolerance (NaN counts); reports the first few. Rows on every
// core: tol must be safe to call from several threads.
inline long count_bad(const RowsImage& got, const std::vector<double>& want, const TolFn& tol,
                      const char* what) {
  const RowTally t = tally_rows(got.rows, [&](int64_t r, RowTally& t, int) {
    for (int64_t i = 0; i < got.hidden; ++i) {
      const double w = want[static_cast<size_t>(r * got.hidden + i)];
      const double g = got.at(r, i);
      if (!(std::fabs(g - w) <= tol(r, i, w))) {
        t.miss(r, [&] {
          std::ostringstream m;
          m << what << " row " << r << " col " << i << " got " << g << " want " << w;
          return m.str();
        });
      }
    }
  });
  for (const auto& m : t.misses) UNSCOPED_INFO(m.second);
  return t.bad;
}

// Elements of the view that differ from `want` at all (bitwise, as values of the dtype).
inline long count_inexact(const RowsImage& got, const std::vector<double>& want, const char* what) {
  return count_bad(
      got, want, [](int64_t, int64_t, double) { return 0.0; }, what);
}

// Bytes outside the view that differ between two images of the same buffer: the kernel must
// write only its view.
inline long count_gap_changes(const RowsImage& after, const RowsImage& before) {
  const size_t es = ref::elem_size(after.dtype);
  long changed = 0;
  for (size_t e = 0; e < after.elems(); ++e) {
    if (after.in_view(e)) continue;
    changed += std::memcmp(after.bytes.data() + e * es, before.bytes.data() + e * es, es) != 0;
  }
  return changed;
}

}  // namespace kjit::test::norm
