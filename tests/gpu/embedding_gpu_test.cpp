// kjit_embedding on the GPU against the CPU reference, on fresh random tables and ids.
//
// The gather is a copy, so the check is exact: every output row must hold its table row bit for
// bit (zeros for an id outside the table), and every byte of the output buffer outside the rows
// (padding between strided rows, the bytes before a misaligned view) must still hold the 0xFF
// poison it started with.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/embedding/embedding.hpp"
#include "reference/embedding_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct EmbCase {
  std::string dtype = "bf16";
  std::string index = "int32";
  int64_t vocab = 1000, hidden = 256, tokens = 7;
  int64_t table_pad = 0, out_pad = 0;  // elements after each row
  size_t offset = 0;                   // elements: misaligns the table and out views
  bool invalid = false;                // add ids outside [0, vocab)
};

std::string describe(const EmbCase& c) {
  return c.dtype + " ids " + c.index + " vocab=" + std::to_string(c.vocab) +
         " hidden=" + std::to_string(c.hidden) + " tokens=" + std::to_string(c.tokens) +
         " pads=" + std::to_string(c.table_pad) + "/" + std::to_string(c.out_pad) +
         " offset=" + std::to_string(c.offset) + (c.invalid ? " invalid" : "");
}

void run_case(const EmbCase& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const size_t es = ref::elem_size(c.dtype);
  const int64_t ts = c.hidden + c.table_pad, os = c.hidden + c.out_pad;

  // The table: random values, as the GPU will read them (rounded to the dtype).
  std::normal_distribution<double> normal(0.0, 1.0);
  const size_t table_elems = c.offset + static_cast<size_t>((c.vocab - 1) * ts + c.hidden);
  std::vector<unsigned char> table_host(table_elems * es, 0xFF);
  std::vector<double> table(static_cast<size_t>(c.vocab * c.hidden));
  for (int64_t r = 0; r < c.vocab; ++r) {
    for (int64_t h = 0; h < c.hidden; ++h) {
      const size_t at = c.offset + static_cast<size_t>(r * ts + h);
      ref::store_elem(table_host.data(), at, normal(rng), c.dtype);
      table[static_cast<size_t>(r * c.hidden + h)] = ref::load_elem(table_host.data(), at, c.dtype);
    }
  }

  // Ids: random rows, repeats included; with `invalid`, some past either end.
  std::uniform_int_distribution<int64_t> pick(0, c.vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(c.tokens));
  for (auto& id : ids) id = pick(rng);
  if (c.invalid && c.tokens >= 3) {
    ids[0] = -1;
    ids[1] = c.vocab;
    ids[static_cast<size_t>(c.tokens - 1)] = c.index == "int64" ? int64_t{1} << 40 : -2147483647;
  }
  const bool i64 = c.index == "int64";
  std::vector<unsigned char> ids_host(ids.size() * (i64 ? 8 : 4));
  for (size_t t = 0; t < ids.size(); ++t) {
    if (i64) {
      std::memcpy(ids_host.data() + 8 * t, &ids[t], 8);
    } else {
      const auto v = static_cast<int32_t>(ids[t]);
      std::memcpy(ids_host.data() + 4 * t, &v, 4);
    }
  }

  DeviceBuffer d_table(table_host.size());
  d_table.upload(table_host.data(), table_host.size());
  DeviceBuffer d_ids(std::max<size_t>(ids_host.size(), 8));
  if (!ids_host.empty()) d_ids.upload(ids_host.data(), ids_host.size());
  const size_t out_elems =
      c.offset + static_cast<size_t>(c.tokens == 0 ? 0 : (c.tokens - 1) * os + c.hidden);
  DeviceBuffer d_out(std::max<size_t>(out_elems * es, 16));
  d_out.fill(0xFF);

  Tensor tt = make_tensor(static_cast<char*>(d_table.get()) + c.offset * es, {c.vocab, c.hidden},
                          dl_dtype(c.dtype), {ts, 1});
  Tensor it = make_tensor(d_ids.get(), {c.tokens}, dl_dtype(c.index));
  Tensor ot = make_tensor(static_cast<char*>(d_out.get()) + c.offset * es, {c.tokens, c.hidden},
                          dl_dtype(c.dtype), {os, 1});
  REQUIRE(kjit_embedding(tt.get(), it.get(), ot.get(), nullptr) == KJIT_SUCCESS);
  device_synchronize();

  std::vector<unsigned char> out_host(d_out.size());
  d_out.download(out_host.data(), out_host.size());
  const std::vector<double> want = ref::embedding(table, c.vocab, c.hidden, ids);
  std::vector<bool> written(out_host.size() / es, false);
  int64_t bad = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < c.hidden; ++h) {
      const size_t at = c.offset + static_cast<size_t>(t * os + h);
      written[at] = true;
      const double got = ref::load_elem(out_host.data(), at, c.dtype);
      const double w = want[static_cast<size_t>(t * c.hidden + h)];
      // Exact, and NaN (the poison) fails: got == w is false for it.
      if (!(got == w) && bad++ < 5) {
        UNSCOPED_INFO("token " << t << " (id " << ids[static_cast<size_t>(t)] << ") dim " << h
                               << ": got " << got << ", want " << w);
      }
    }
  }
  CHECK(bad == 0);
  // Nothing outside the rows was written: the poison is intact, byte for byte.
  int64_t touched = 0;
  for (size_t e = 0; e < written.size(); ++e) {
    if (written[e]) continue;
    for (size_t b = 0; b < es; ++b) touched += out_host[e * es + b] != 0xFF;
  }
  CHECK(touched == 0);
}

}  // namespace

TEST_CASE("embedding gpu: every dtype and id type, odd sizes, ids outside the table",
          "[gpu][embedding]") {
  std::mt19937_64 rng(Catch::rngSeed() + 29);
  for (const char* dt : {"bf16", "fp16", "fp32"}) {
    for (const char* index : {"int32", "int64"}) {
      for (int64_t hidden : {1, 7, 64, 520, 1023, 4096}) {
        for (int64_t tokens : {1, 5, 300}) {
          EmbCase c;
          c.dtype = dt;
          c.index = index;
          c.hidden = hidden;
          c.tokens = tokens;
          c.vocab = 997;
          c.invalid = tokens >= 5;
          run_case(c, rng);
        }
      }
    }
  }
}

TEST_CASE("embedding gpu: strided and misaligned views, more rows than one grid covers",
          "[gpu][embedding]") {
  std::mt19937_64 rng(Catch::rngSeed() + 30);
  for (const char* dt : {"bf16", "fp32"}) {
    EmbCase padded;
    padded.dtype = dt;
    padded.hidden = 1000;
    padded.table_pad = 24;
    padded.out_pad = 3;
    padded.tokens = 129;
    run_case(padded, rng);
    EmbCase misaligned = padded;
    misaligned.offset = 1;
    misaligned.table_pad = 1;
    misaligned.out_pad = 0;
    misaligned.invalid = true;
    run_case(misaligned, rng);
  }
  // More rows than the grid's y extent (65535 blocks of one row each), so the row loop runs.
  EmbCase many;
  many.hidden = 1024;
  many.tokens = 65535 + 77;
  many.vocab = 50;
  many.invalid = true;
  run_case(many, rng);
}

TEST_CASE("embedding gpu: zero tokens succeeds and writes nothing", "[gpu][embedding]") {
  std::mt19937_64 rng(Catch::rngSeed() + 31);
  EmbCase none;
  none.tokens = 0;
  run_case(none, rng);
}
