// GPU tests of kjit_top_k against the fp64 reference (ref::top_k: descending, NaN above +Inf,
// equal values by ascending index). Every row of every case: the indices exactly the reference's,
// each value bit for bit the input element it names, the outputs' padding still poisoned.
// Rows with many ties (values from a handful of levels, 16-bit roundings of close values), all
// -Inf, NaN, signed zeros and +-Inf; k = 1, k = vocab for small rows, k = 1024 over 256K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "reference/half.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// What a row holds.
enum class Fill { kUniform, kLevels, kAllEqual, kNegInf, kSpecials };

double draw(Fill f, std::mt19937_64& rng, int64_t i) {
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  switch (f) {
    case Fill::kUniform: return u(rng);
    case Fill::kLevels: return std::floor(u(rng));  // 8 levels: ties everywhere
    case Fill::kAllEqual: return 0.5;
    case Fill::kNegInf: return -kInf;
    case Fill::kSpecials: {
      const int pick = static_cast<int>(rng() % 16);
      if (pick == 0) return kNaN;
      if (pick == 1) return kInf;
      if (pick == 2) return -kInf;
      if (pick == 3) return (i & 1) ? -0.0 : 0.0;
      return std::floor(u(rng));
    }
  }
  return 0.0;
}

struct Case {
  std::string dtype = "fp32";
  int64_t batch = 3, vocab = 1000, k = 8;
  int64_t in_pad = 0, out_pad = 0;  // elements after each row (row strides vocab + pad, k + pad)
  size_t offset = 0;                // elements: the input starts this far into its buffer
  std::vector<Fill> fills = {Fill::kUniform};  // row r takes fills[r % size]
};

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(c.dtype << " batch=" << c.batch << " vocab=" << c.vocab << " k=" << c.k
               << " pads=" << c.in_pad << "/" << c.out_pad << " offset=" << c.offset);
  const size_t es = ref::elem_size(c.dtype);
  const int64_t in_stride = c.vocab + c.in_pad, out_stride = c.k + c.out_pad;
  const size_t in_elems = c.offset + static_cast<size_t>((c.batch - 1) * in_stride + c.vocab);
  std::vector<unsigned char> in_host(in_elems * es, 0xFF);
  std::vector<std::vector<double>> rows(static_cast<size_t>(c.batch));
  for (int64_t r = 0; r < c.batch; ++r) {
    const Fill f = c.fills[static_cast<size_t>(r) % c.fills.size()];
    auto& row = rows[static_cast<size_t>(r)];
    row.resize(static_cast<size_t>(c.vocab));
    for (int64_t i = 0; i < c.vocab; ++i) {
      const size_t at = c.offset + static_cast<size_t>(r * in_stride + i);
      ref::store_elem(in_host.data(), at, draw(f, rng, i), c.dtype);
      row[static_cast<size_t>(i)] = ref::load_elem(in_host.data(), at, c.dtype);
    }
  }
  DeviceBuffer in_dev(in_host.size());
  in_dev.upload(in_host.data(), in_host.size());
  const size_t out_elems = static_cast<size_t>((c.batch - 1) * out_stride + c.k);
  DeviceBuffer val_dev(out_elems * es), idx_dev(out_elems * 4);
  val_dev.fill(0xFF);  // poison: NaN in every float format, -1 as an index
  idx_dev.fill(0xFF);
  auto in_t = make_tensor(static_cast<char*>(in_dev.get()) + c.offset * es, {c.batch, c.vocab},
                          dl_dtype(c.dtype), {in_stride, 1});
  auto val_t = make_tensor(val_dev.get(), {c.batch, c.k}, dl_dtype(c.dtype), {out_stride, 1});
  auto idx_t = make_tensor(idx_dev.get(), {c.batch, c.k}, dl_dtype("int32"), {out_stride, 1});
  const kjit_status s =
      kjit_top_k(in_t.get(), val_t.get(), idx_t.get(), static_cast<int>(c.k), nullptr);
  INFO(kjit_last_error());
  REQUIRE(s == KJIT_SUCCESS);
  device_synchronize();
  std::vector<unsigned char> vals(out_elems * es);
  std::vector<int32_t> idx(out_elems);
  val_dev.download(vals.data(), vals.size());
  idx_dev.download(idx.data(), idx.size() * 4);

  long wrong_index = 0, wrong_value = 0, written_pad = 0;
  for (int64_t r = 0; r < c.batch; ++r) {
    const std::vector<int64_t> want = ref::top_k(rows[static_cast<size_t>(r)], c.k);
    for (int64_t j = 0; j < out_stride && r * out_stride + j < static_cast<int64_t>(out_elems);
         ++j) {
      const size_t at = static_cast<size_t>(r * out_stride + j);
      if (j >= c.k) {  // padding between rows: untouched
        const bool poisoned =
            idx[at] == -1 && std::all_of(vals.begin() + at * es, vals.begin() + (at + 1) * es,
                                         [](unsigned char b) { return b == 0xFF; });
        if (!poisoned) ++written_pad;
        continue;
      }
      const int64_t w = want[static_cast<size_t>(j)];
      if (idx[at] != w) {
        if (wrong_index++ < 5) {
          UNSCOPED_INFO("row " << r << " rank " << j << ": index " << idx[at] << ", want " << w
                               << " (value " << rows[static_cast<size_t>(r)][w] << ")");
        }
        continue;
      }
      const size_t src = c.offset + static_cast<size_t>(r * in_stride + w);
      if (std::memcmp(vals.data() + at * es, in_host.data() + src * es, es) != 0) {
        if (wrong_value++ < 5) UNSCOPED_INFO("row " << r << " rank " << j << ": value differs");
      }
    }
  }
  CHECK(wrong_index == 0);
  CHECK(wrong_value == 0);
  CHECK(written_pad == 0);
}

}  // namespace

TEST_CASE("top_k gpu: every dtype, odd and aligned rows, k from 1 to the row", "[gpu][top_k]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (int64_t v : {1, 7, 33, 1000, 1001}) {
      for (int64_t k : {int64_t{1}, std::min<int64_t>(5, v), v}) {
        Case c;
        c.dtype = dt;
        c.vocab = v;
        c.k = k;
        c.batch = 5;
        c.fills = {Fill::kUniform, Fill::kLevels, Fill::kSpecials};
        run_case(c, rng);
      }
    }
  }
}

TEST_CASE("top_k gpu: ties, -inf rows, NaN and signed zeros", "[gpu][top_k]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    Case c;
    c.dtype = dt;
    c.batch = 8;
    c.vocab = 4099;
    c.fills = {Fill::kLevels, Fill::kAllEqual, Fill::kNegInf, Fill::kSpecials};
    for (int64_t k : {1, 2, 100, 1024}) {
      c.k = k;
      run_case(c, rng);
    }
  }
}

TEST_CASE("top_k gpu: Llama 3 and 256K vocabularies, k up to 1024", "[gpu][top_k]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp32", "bf16"}) {
    for (int64_t k : {1, 50, 1024}) {
      Case c;
      c.dtype = dt;
      c.batch = 3;
      c.vocab = 128256;
      c.k = k;
      c.fills = {Fill::kUniform, Fill::kLevels, Fill::kSpecials};
      run_case(c, rng);
    }
  }
  Case big;
  big.vocab = 262144;
  big.batch = 2;
  big.k = 1024;
  big.dtype = "fp16";  // 16-bit: thousands of ties at the k-th value
  run_case(big, rng);
}

TEST_CASE("top_k gpu: strided and misaligned rows take the scalar path", "[gpu][top_k]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp32", "bf16"}) {
    Case c;
    c.dtype = dt;
    c.batch = 4;
    c.vocab = 3000;
    c.k = 64;
    c.in_pad = 5;
    c.out_pad = 3;
    c.offset = 1;
    c.fills = {Fill::kUniform, Fill::kSpecials};
    run_case(c, rng);
  }
}

TEST_CASE("top_k gpu: k above 1024 is unsupported, with a message", "[gpu][top_k]") {
  DeviceBuffer buf(1 << 20);
  char* p = static_cast<char*>(buf.get());
  auto in = make_tensor(p, {1, 4096}, dl_dtype("fp32"));
  auto v = make_tensor(p + 65536, {1, 1025}, dl_dtype("fp32"));
  auto ix = make_tensor(p + 131072, {1, 1025}, dl_dtype("int32"));
  CHECK(kjit_top_k(in.get(), v.get(), ix.get(), 1025, nullptr) == KJIT_ERROR_UNSUPPORTED);
  CHECK(std::string(kjit_last_error()).find("k up to 1024") != std::string::npos);
}
