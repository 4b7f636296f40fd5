// `kjit-cli bench` case of the token-embedding gather.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "ops/embedding/embedding.hpp"
#include "ops/pdl.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

int bench_embedding(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  const int64_t vocab = ops::positive_int_arg(args, "vocab", 1 << 22);
  const int64_t hidden = ops::positive_int_arg(args, "hidden", ops::kEmbeddingMaxHidden);
  const int64_t tokens = ops::positive_int_arg(args, "tokens", 1 << 24);
  const std::string index = args.count("index") ? args.at("index") : "int32";
  if (index != "int32" && index != "int64") throw UsageError("index must be int32 or int64");
  const size_t es = ref::elem_size(dtype), is = index == "int64" ? 8 : 4;
  check_gpu();

  // Random rows of the table, repeats included, as a batch of prompts would have.
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(tokens));
  for (auto& id : ids) id = pick(rng);
  Packed in;
  const size_t table_at = in.add(static_cast<size_t>(vocab * hidden) * es);
  const size_t ids_at = in.add(ids.size() * is);
  fill_uniform(in.host.data() + table_at, static_cast<size_t>(vocab * hidden), dtype, rng, -1, 1);
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto v32 = static_cast<int32_t>(ids[t]);
    std::memcpy(in.host.data() + ids_at + t * is,
                is == 8 ? static_cast<const void*>(&ids[t]) : &v32, is);
  }
  in.upload();
  Packed out;
  const size_t out_at = out.add(static_cast<size_t>(tokens * hidden) * es);
  out.upload();
  out.dev->fill(0xFF);  // poison: NaN in every float format
  const DLDataType dl = test::dl_dtype(dtype);
  auto table = test::make_tensor(in.at(table_at), {vocab, hidden}, dl);
  auto idt = test::make_tensor(in.at(ids_at), {tokens}, test::dl_dtype(index));
  auto ot = test::make_tensor(out.at(out_at), {tokens, hidden}, dl);

  const ops::EmbeddingConfig cfg =
      ops::select_embedding(*ops::dtype_of(dl), *ops::dtype_of(idt.t.dtype), hidden, 16);
  BenchCase c;
  c.op = "embedding";
  c.uri = ops::embedding_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"vocab", vocab}, {"hidden", hidden}, {"tokens", tokens}, {"index", index}};
  c.label = fmt::format("embedding {} vocab={} hidden={} tokens={} ids {}", dtype, vocab, hidden,
                        tokens, index);
  // The ops-layer call: what kjit_embedding runs, in the bench's launch mode.
  c.launch = [&](CUstream stream) {
    ops::embedding(table.get(), idt.get(), ot.get(), stream, bench_elementwise_launch());
  };
  // Reads each id and its row, writes the row.
  const size_t row_bytes = static_cast<size_t>(hidden) * es;
  c.bytes = 2.0 * static_cast<double>(tokens) * row_bytes + static_cast<double>(ids.size() * is);
  c.copy_src = in.dev->get();
  // The same bytes written, read from the inputs' buffer (the table and ids, if no larger).
  c.copy_bytes = std::min(static_cast<size_t>(tokens) * row_bytes, in.host.size());

  // Every output row must be its table row, bit for bit.
  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(opts.check ? out.host.size() : 0);
  if (opts.check) out.dev->download(got.data(), got.size());
  const Check all = check_rows(opts.check ? tokens : 0, [&](int64_t t, Check& chk) {
    const unsigned char* row = got.data() + out_at + static_cast<size_t>(t) * row_bytes;
    const unsigned char* want =
        in.host.data() + table_at + static_cast<size_t>(ids[static_cast<size_t>(t)]) * row_bytes;
    for (int64_t h = 0; h < hidden; ++h) {
      chk.add(ref::load_elem(row, static_cast<size_t>(h), dtype),
              ref::load_elem(want, static_cast<size_t>(h), dtype), 0.0);
    }
  });
  return report(c, all, first_ms, opts);
}

}  // namespace

void add_embedding_benches(std::vector<BenchEntry>& out) {
  out.push_back({"embedding",
                 {"dtype", "vocab", "hidden", "tokens"},
                 {"index"},
                 bench_embedding,
                 "dtype, vocab, hidden, tokens, optional index (int32|int64, default int32)"});
}

}  // namespace kjit::cli
