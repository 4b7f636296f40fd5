// `kjit-cli bench` cases of the MoE family: the grouped GEMM (contiguous layout) over routed
// tokens.
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "commands.hpp"
#include "kjit/kjit.h"
#include "ops/moe/moe.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"

namespace kjit::cli {
namespace {

// Rows per expert of `tokens` tokens routed to top_k of `experts` each. even: token t's slots go
// to experts (t * top_k + j) % experts, so every expert gets the same share (+-1); skew: the
// first slot of 90% of the tokens goes to expert 0, the rest as even.
std::vector<int64_t> routed_rows(int64_t tokens, int64_t top_k, int64_t experts, bool skew) {
  std::vector<int64_t> rows(static_cast<size_t>(experts), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t e = (t * top_k + j) % experts;
      if (skew && j == 0 && t % 10 != 9) e = 0;
      ++rows[static_cast<size_t>(e)];
    }
  }
  return rows;
}

int bench_moe_grouped_gemm(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.count("dtype") != 0 ? args.at("dtype") : "bf16";
  const int64_t experts = ops::positive_int_arg(args, "experts", 1024);
  const int64_t top_k = ops::positive_int_arg(args, "top_k", 64);
  const int64_t tokens = ops::positive_int_arg(args, "tokens", 1 << 20);
  const int64_t n = ops::positive_int_arg(args, "n", 1 << 20);
  const int64_t k = ops::positive_int_arg(args, "k", 1 << 20);
  const std::string routing = args.count("routing") != 0 ? args.at("routing") : "even";
  if (dtype != "bf16" && dtype != "fp16")
    throw UsageError("moe_grouped_gemm: dtype is bf16 or fp16");
  if (routing != "even" && routing != "skew") {
    throw UsageError("moe_grouped_gemm: routing is even or skew");
  }
  if (top_k > experts) throw UsageError("moe_grouped_gemm: top_k exceeds experts");
  check_gpu();
  const size_t es = ref::elem_size(dtype);
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int64_t> counts = routed_rows(tokens, top_k, experts, routing == "skew");
  std::vector<int32_t> offsets = {0};
  for (int64_t c : counts) offsets.push_back(offsets.back() + static_cast<int32_t>(c));
  const int64_t rows = tokens * top_k;
  const int64_t active =
      std::count_if(counts.begin(), counts.end(), [](int64_t c) { return c > 0; });

  Packed in;
  const size_t a_at = in.add(static_cast<size_t>(rows * k) * es);
  const size_t b_at = in.add(static_cast<size_t>(experts * n * k) * es);
  const size_t off_at = add_int32s(in, offsets);
  fill_uniform(in.host.data() + a_at, static_cast<size_t>(rows * k), dtype, rng, -1.0, 1.0);
  fill_uniform(in.host.data() + b_at, static_cast<size_t>(experts * n * k), dtype, rng, -1.0, 1.0);
  in.upload();
  test::DeviceBuffer y(static_cast<size_t>(rows * n) * es);
  y.fill(0xFF);
  auto at = test::make_tensor(in.at(a_at), {rows, k}, test::dl_dtype(dtype));
  auto bt = test::make_tensor(in.at(b_at), {experts, n, k}, test::dl_dtype(dtype));
  auto ot = test::make_tensor(in.at(off_at), {experts + 1}, test::dl_dtype("int32"));
  auto yt = test::make_tensor(y.get(), {rows, n}, test::dl_dtype(dtype));
  const ops::MoeGemmConfig cfg = ops::select_moe_gemm(
      ops::dtype_from_name(dtype), ops::dtype_from_name(dtype), rows, rows / experts, n, k, experts,
      ops::gemm_target(0, (k * static_cast<int64_t>(es)) % 16 == 0));

  BenchCase c;
  c.op = "moe_grouped_gemm";
  c.uri = ops::moe_gemm_spec(cfg).uri;
  c.dtype = dtype;
  c.shape = {
      {"experts", experts}, {"top_k", top_k},          {"tokens", tokens}, {"n", n}, {"k", k},
      {"routing", routing}, {"active_experts", active}};
  c.label = fmt::format("moe_grouped_gemm {} e={} top{} tokens={} n={} k={} {} ({})", dtype,
                        experts, top_k, tokens, n, k, routing, ops::gemm_path_name(cfg.path));
  c.launch = [&](CUstream stream) {
    ops::moe_grouped_gemm(at.get(), bt.get(), ot.get(), yt.get(), stream);
  };
  // The active experts' weights are read once; a and out once.
  c.bytes = static_cast<double>((rows * k + active * n * k + rows * n) * es);
  c.flops = 2.0 * static_cast<double>(rows) * n * k;
  c.copy_src = in.at(0);
  c.copy_bytes = std::min(static_cast<size_t>(c.bytes / 2), in.host.size());

  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> yh(static_cast<size_t>(rows * n) * es);
    y.download(yh.data(), yh.size());
    std::vector<double> a_row(static_cast<size_t>(k)), b_row(static_cast<size_t>(k));
    for (const auto& [r, j] : gemm_check_picks(rows, n, k, rng)) {
      const int64_t e = std::upper_bound(offsets.begin(), offsets.end(), static_cast<int32_t>(r)) -
                        offsets.begin() - 1;
      for (int64_t i = 0; i < k; ++i) {
        a_row[i] = ref::load_elem(in.host.data() + a_at, static_cast<size_t>(r * k + i), dtype);
        b_row[i] =
            ref::load_elem(in.host.data() + b_at, static_cast<size_t>((e * n + j) * k + i), dtype);
      }
      double sum_abs = 0.0;
      const double want =
          ref::gemm_element(a_row.data(), b_row.data(), k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      chk.add(ref::load_elem(yh.data(), static_cast<size_t>(r * n + j), dtype), want,
              ref::gemm_tolerance(dtype, want, sum_abs, k));
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_moe_benches(std::vector<BenchEntry>& out) {
  out.push_back({"moe_grouped_gemm",
                 {"experts", "top_k", "tokens", "n", "k"},
                 {"dtype", "routing"},
                 bench_moe_grouped_gemm,
                 "experts, top_k, tokens, n, k (b is [experts, n, k]); dtype (bf16|fp16, default "
                 "bf16), routing (even|skew: 90% of first slots to expert 0; default even)"});
}

}  // namespace kjit::cli
