// kjit_silu_and_mul / kjit_gelu_and_mul / kjit_gelu_tanh_and_mul / kjit_sigmoid_and_mul on the GPU
// against the fp64 CPU reference, on fresh random inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "reference/activation_ref.hpp"
#include "reference/half.hpp"
#include "support/gpu.hpp"
#include "support/parallel_rows.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;
using ref::ActKind;

namespace {

using ActFn = kjit_status (*)(const DLTensor*, DLTensor*, void*);

ActFn entry(ActKind a) {
  switch (a) {
    case ActKind::kSilu: return kjit_silu_and_mul;
    case ActKind::kGelu: return kjit_gelu_and_mul;
    case ActKind::kGeluTanh: return kjit_gelu_tanh_and_mul;
    case ActKind::kSigmoid: return kjit_sigmoid_and_mul;
  }
  return nullptr;
}

constexpr ActKind kAllActs[] = {ActKind::kSilu, ActKind::kGelu, ActKind::kGeluTanh,
                                ActKind::kSigmoid};

struct Case {
  ActKind act;
  std::string dtype;
  int64_t rows;
  int64_t d;
  int64_t in_stride = 0;    // 0 = compact (2d)
  int64_t out_stride = 0;   // 0 = compact (d)
  size_t in_offset = 0;     // start the input view this many elements into its buffer
  size_t out_offset = 0;    // same for out (misalignment)
  double gate_range = 4.0;  // gate ~ U(-gate_range, gate_range): wide ranges reach the tails
};

std::string describe(const Case& c) {
  return std::string(ref::act_kind_name(c.act)) + " " + c.dtype +
         " rows=" + std::to_string(c.rows) + " d=" + std::to_string(c.d) +
         " in_stride=" + std::to_string(c.in_stride) +
         " out_stride=" + std::to_string(c.out_stride) +
         " in_offset=" + std::to_string(c.in_offset) +
         " out_offset=" + std::to_string(c.out_offset) +
         " gate_range=" + std::to_string(c.gate_range);
}

void run_case(const Case& c, std::mt19937_64& rng) {
  INFO(describe(c));
  const size_t es = ref::elem_size(c.dtype);
  const int64_t is = c.in_stride ? c.in_stride : 2 * c.d;
  const int64_t os = c.out_stride ? c.out_stride : c.d;
  const size_t in_elems = c.in_offset + static_cast<size_t>((c.rows - 1) * is + 2 * c.d);
  const size_t out_elems = c.out_offset + static_cast<size_t>((c.rows - 1) * os + c.d);

  // Host image of the input buffer, gaps included; the gaps get random values too so a kernel
  // that reads them would show in the output. Filled in blocks of 64K elements on every core,
  // each block from its own generator seeded from rng (the large cases hold 10^8 elements).
  std::vector<unsigned char> in_host(in_elems * es);
  constexpr size_t kFillBlock = size_t{1} << 16;
  const uint64_t fill_seed = rng();
  parallel_rows(
      static_cast<int64_t>((in_elems + kFillBlock - 1) / kFillBlock), [&](int64_t blk, int) {
        std::mt19937_64 g(fill_seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(blk + 1)));
        std::uniform_real_distribution<double> gate_dist(-c.gate_range, c.gate_range);
        std::uniform_real_distribution<double> up_dist(-3.0, 3.0);
        const size_t end = std::min(in_elems, static_cast<size_t>(blk + 1) * kFillBlock);
        for (size_t i = static_cast<size_t>(blk) * kFillBlock; i < end; ++i) {
          const int64_t col = i < c.in_offset ? 0 : static_cast<int64_t>(i - c.in_offset) % is;
          ref::store_elem(in_host.data(), i, col < c.d ? gate_dist(g) : up_dist(g), c.dtype);
        }
      });

  DeviceBuffer in_dev(in_host.size()), out_dev(out_elems * es);
  in_dev.upload(in_host.data(), in_host.size());
  out_dev.fill(0xFF);  // poison: NaN in every float format

  char* in_ptr = static_cast<char*>(in_dev.get()) + c.in_offset * es;
  char* out_ptr = static_cast<char*>(out_dev.get()) + c.out_offset * es;
  auto in_t = make_tensor(in_ptr, {c.rows, 2 * c.d}, dl_dtype(c.dtype), {is, 1});
  auto out_t = make_tensor(out_ptr, {c.rows, c.d}, dl_dtype(c.dtype), {os, 1});
  kjit_status st = entry(c.act)(in_t.get(), out_t.get(), nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();

  std::vector<unsigned char> out_host(out_elems * es);
  out_dev.download(out_host.data(), out_host.size());
  // The reference reads the same rounded values the GPU reads, element by element, so large
  // cases need no fp64 copy of the whole input; rows on every core.
  const RowTally t = tally_rows(c.rows, [&](int64_t r, RowTally& t, int) {
    for (int64_t i = 0; i < c.d; ++i) {
      const size_t g_at = c.in_offset + static_cast<size_t>(r * is + i);
      const double gate = ref::load_elem(in_host.data(), g_at, c.dtype);
      const double up = ref::load_elem(in_host.data(), g_at + static_cast<size_t>(c.d), c.dtype);
      const double want = ref::activate(c.act, gate) * up;
      const double got =
          ref::load_elem(out_host.data(), c.out_offset + static_cast<size_t>(r * os + i), c.dtype);
      const double tol = ref::act_and_mul_tolerance(c.dtype, want, gate, up);
      if (!(std::fabs(got - want) <= tol)) {  // NaN (untouched poison) fails too
        t.miss(r, [&] {
          std::ostringstream m;
          m << "row " << r << " col " << i << " gate " << gate << " up " << up << " got " << got
            << " want " << want << " tol " << tol;
          return m.str();
        });
      }
    }
  });
  for (const auto& m : t.misses) UNSCOPED_INFO(m.second);
  CHECK(t.bad == 0);
  // Everything outside the view keeps the poison: the leading offset, the gaps between strided
  // rows. The kernel writes only the view.
  long touched = 0;
  for (size_t i = 0; i < c.out_offset; ++i) {
    touched += !std::isnan(ref::load_elem(out_host.data(), i, c.dtype));
  }
  for (int64_t r = 0; r + 1 < c.rows; ++r) {
    for (int64_t i = c.d; i < os; ++i) {
      touched += !std::isnan(
          ref::load_elem(out_host.data(), c.out_offset + static_cast<size_t>(r * os + i), c.dtype));
    }
  }
  CHECK(touched == 0);
}

}  // namespace

TEST_CASE("act_and_mul gpu: every activation and dtype, many d, odd ones included",
          "[gpu][activation]") {
  std::mt19937_64 rng(std::random_device{}());
  for (ActKind a : kAllActs) {
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      // 16-byte paths (Llama 8B 14336, Llama 2 7B 11008, Qwen2 7B 18944, Mistral 14336), d that
      // only allows 8, 4 or 2-byte vectors (4100, 6, 2050), and odd d (scalar).
      for (int64_t d :
           {1, 2, 3, 6, 7, 8, 64, 127, 1000, 2050, 4096, 4100, 4097, 11008, 14336, 18944}) {
        for (int64_t rows : {1, 3, 67}) run_case({a, dt, rows, d}, rng);
      }
    }
  }
}

TEST_CASE("act_and_mul gpu: decode and prefill row counts", "[gpu][activation]") {
  std::mt19937_64 rng(std::random_device{}());
  for (ActKind a : kAllActs) {
    for (int64_t rows : {1, 2, 15, 64, 1000, 4096}) run_case({a, "bf16", rows, 14336}, rng);
  }
  run_case({ActKind::kSilu, "bf16", 16384, 4096}, rng);
  run_case({ActKind::kSilu, "fp16", 8192, 2048}, rng);
  run_case({ActKind::kGelu, "fp32", 8192, 1024}, rng);
  // Short rows share a block (block_y > 1); many of them.
  run_case({ActKind::kGeluTanh, "bf16", 20000, 16}, rng);
  run_case({ActKind::kSilu, "fp32", 5000, 3}, rng);
  run_case({ActKind::kSigmoid, "bf16", 16384, 4096}, rng);
  run_case({ActKind::kSigmoid, "fp16", 8192, 2048}, rng);
  run_case({ActKind::kSigmoid, "fp32", 5000, 3}, rng);
}

TEST_CASE("act_and_mul gpu: more rows than the 65535 grid rows loop inside the kernel",
          "[gpu][activation]") {
  std::mt19937_64 rng(std::random_device{}());
  // d = 129 (scalar path) puts one row in each block, so 70001 rows need the row loop.
  run_case({ActKind::kSilu, "fp16", 70001, 129}, rng);
  run_case({ActKind::kGelu, "bf16", 70001, 1024}, rng);
  run_case({ActKind::kSigmoid, "fp16", 70001, 129}, rng);
}

TEST_CASE("act_and_mul gpu: strided rows and misaligned views", "[gpu][activation]") {
  std::mt19937_64 rng(std::random_device{}());
  for (ActKind a : kAllActs) {
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      run_case({a, dt, 33, 4096, 2 * 4096 + 64, 4096 + 8}, rng);  // row-strided, aligned
      run_case({a, dt, 33, 4096, 2 * 4096 + 3, 4096 + 5}, rng);   // strides break alignment
      run_case({a, dt, 17, 2048, 0, 0, 1, 0}, rng);               // input off by one element
      run_case({a, dt, 17, 2048, 0, 0, 0, 1}, rng);               // out off by one element
      run_case({a, dt, 17, 2048, 0, 0, 2, 6}, rng);               // 4- / 12-byte offsets
      run_case({a, dt, 5, 333, 1000, 777, 3, 1}, rng);            // odd everything
      run_case({a, dt, 1, 4096, 0, 0, 1, 1}, rng);                // one misaligned row
    }
  }
}

TEST_CASE("act_and_mul gpu: the tails of each activation", "[gpu][activation]") {
  std::mt19937_64 rng(std::random_device{}());
  // Gates far into both tails: exp over- and underflow, 1 + erf cancelling, x^3 growing.
  for (ActKind a : kAllActs) {
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (double range : {12.0, 40.0, 200.0}) run_case({a, dt, 9, 4096, 0, 0, 0, 0, range}, rng);
    }
  }
}

TEST_CASE("act_and_mul gpu: special values", "[gpu][activation]") {
  // Exact expectations for the values whose limit is certain: act(0) = 0, act(+large) = x,
  // act(-large) = -0 (then * up), and NaN propagates; for the GLU gate (no x factor)
  // sigmoid(0) = 1/2, sigmoid(+large) = 1, sigmoid(-large) = 0.
  const std::vector<float> gate = {0.0f, -0.0f, 1e4f, -1e4f, 3e38f, -3e38f, NAN, 1.0f};
  const std::vector<float> up = {5.0f, 5.0f, 2.0f, 2.0f, 1.0f, 1.0f, 1.0f, NAN};
  const int64_t d = static_cast<int64_t>(gate.size());
  std::vector<float> in(gate);
  in.insert(in.end(), up.begin(), up.end());
  DeviceBuffer in_dev(in.size() * 4), out_dev(d * 4);
  in_dev.upload(in.data(), in.size() * 4);
  for (ActKind a : kAllActs) {
    INFO(ref::act_kind_name(a));
    out_dev.fill(0xFF);
    auto in_t = make_tensor(in_dev.get(), {1, 2 * d}, dl_dtype("fp32"));
    auto out_t = make_tensor(out_dev.get(), {1, d}, dl_dtype("fp32"));
    REQUIRE(entry(a)(in_t.get(), out_t.get(), nullptr) == KJIT_SUCCESS);
    std::vector<float> out(static_cast<size_t>(d));
    out_dev.download(out.data(), out.size() * 4);
    const bool gate_only = a == ActKind::kSigmoid;
    CHECK(out[0] == (gate_only ? 2.5f : 0.0f));
    CHECK(out[1] == (gate_only ? 2.5f : 0.0f));
    CHECK(out[2] == (gate_only ? 2.0f : 2e4f));
    CHECK(out[3] == 0.0f);
    CHECK(out[4] == (gate_only ? 1.0f : 3e38f));
    CHECK(out[5] == 0.0f);
    CHECK(std::isnan(out[6]));
    CHECK(std::isnan(out[7]));
  }
}

TEST_CASE("act_and_mul gpu: 3-D views, input untouched, user stream, repeatable",
          "[gpu][activation]") {
  const auto& drv = kjit::cuda::driver();
  CUstream s = nullptr;
  REQUIRE(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const int64_t batch = 4, seq = 32, d = 11008;
  const size_t n_in = static_cast<size_t>(batch * seq * 2 * d), n_out = n_in / 2;
  std::vector<uint16_t> xh(n_in);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> dist(-3, 3);
  for (auto& v : xh) v = ref::float_to_bf16(dist(rng));
  DeviceBuffer x(n_in * 2), y1(n_out * 2), y2(n_out * 2);
  x.upload(xh.data(), n_in * 2);
  y1.fill(0xFF);
  y2.fill(0xFF);
  auto xt = make_tensor(x.get(), {batch, seq, 2 * d}, dl_dtype("bf16"));
  auto y1t = make_tensor(y1.get(), {batch, seq, d}, dl_dtype("bf16"));
  auto y2t = make_tensor(y2.get(), {batch, seq, d}, dl_dtype("bf16"));
  for (ActKind a : kAllActs) {
    INFO(ref::act_kind_name(a));
    REQUIRE(entry(a)(xt.get(), y1t.get(), s) == KJIT_SUCCESS);
    REQUIRE(entry(a)(xt.get(), y2t.get(), s) == KJIT_SUCCESS);
    REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
    std::vector<uint16_t> a1(n_out), a2(n_out), xa(n_in);
    y1.download(a1.data(), n_out * 2);
    y2.download(a2.data(), n_out * 2);
    x.download(xa.data(), n_in * 2);
    // Counts, not the vectors: a failure must not print millions of elements.
    CHECK(std::mismatch(a1.begin(), a1.end(), a2.begin()).first == a1.end());  // deterministic
    CHECK(std::mismatch(xa.begin(), xa.end(), xh.begin()).first == xa.end());  // only read
    long bad = 0;
    for (size_t r = 0; r < static_cast<size_t>(batch * seq); ++r) {
      for (size_t i = 0; i < static_cast<size_t>(d); ++i) {
        const double g = ref::bf16_to_float(xh[r * 2 * d + i]);
        const double u = ref::bf16_to_float(xh[r * 2 * d + d + i]);
        const double want = ref::activate(a, g) * u;
        const double got = ref::bf16_to_float(a1[r * d + i]);
        bad += !(std::fabs(got - want) <= ref::act_and_mul_tolerance("bf16", want, g, u));
      }
    }
    CHECK(bad == 0);
  }
  drv.cuStreamDestroy(s);
}

TEST_CASE("act_and_mul gpu: a device id that does not exist is an argument error",
          "[gpu][activation]") {
  DeviceBuffer buf(4096);
  auto x = make_tensor(buf.get(), {2, 128}, dl_dtype("bf16"), {}, 63);
  auto y = make_tensor(static_cast<char*>(buf.get()) + 1024, {2, 64}, dl_dtype("bf16"), {}, 63);
  CHECK(kjit_silu_and_mul(x.get(), y.get(), nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("device 63") != std::string::npos);
}
