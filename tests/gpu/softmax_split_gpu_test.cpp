// GPU tests of softmax's row split (softmax_cluster_kernel, sm_90+): batches 1, 3 and 8 over a
// 128256-token vocabulary and odd ones (the scalar path), each launch the op can take (one block
// a row, clusters of 2, 4 and 8 blocks, and the plan's), against the fp64 reference on fresh
// logits, with per-row temperatures, rows the kernel must write as NaN (a NaN logit, a +Inf
// logit, a bad temperature, only -Inf) and a row whose maximum sits in the last block's part.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "kjit/kjit.h"
#include "ops/sampling/sampling.hpp"
#include "reference/half.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;
namespace ops = kjit::ops;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Row r's logits: N(0, 4), with the specials of the file comment on rows 1, 2, 4 and 5 (when the
// batch has them) and the maximum at the end of row 0.
double logit(int64_t r, int64_t i, int64_t vocab, std::mt19937_64& rng) {
  std::normal_distribution<double> n(0.0, 4.0);
  if (r == 0 && i == vocab - 1) return 40.0;
  if (r == 1 && i == vocab / 2) return kNaN;
  if (r == 4 && i == 3) return kInf;
  if (r == 5) return -kInf;
  return n(rng);
}

void run_case(const std::string& dt, int64_t batch, int64_t vocab, bool in_place, int cluster,
              std::mt19937_64& rng) {
  INFO(dt << " batch=" << batch << " vocab=" << vocab << (in_place ? " in place" : "")
          << " cluster=" << cluster);
  const size_t es = ref::elem_size(dt);
  const size_t n = static_cast<size_t>(batch * vocab);
  std::vector<unsigned char> host(n * es);
  std::vector<double> x(n);
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      const size_t at = static_cast<size_t>(r * vocab + i);
      ref::store_elem(host.data(), at, logit(r, i, vocab, rng), dt);
      x[at] = ref::load_elem(host.data(), at, dt);
    }
  }
  std::vector<float> temps(static_cast<size_t>(batch));
  for (int64_t r = 0; r < batch; ++r) temps[static_cast<size_t>(r)] = 0.5f + 0.25f * (r % 4);
  if (batch > 2) temps[2] = 0.0f;  // invalid: the row is NaN
  DeviceBuffer in(host.size()), out(n * 4), tb(temps.size() * 4);
  in.upload(host.data(), host.size());
  tb.upload(temps.data(), temps.size() * 4);
  // Poison: 0x7B7B7B7B is fp32 1.3e36, neither a probability nor NaN.
  out.fill(0x7B);
  auto xt = make_tensor(in.get(), {batch, vocab}, dl_dtype(dt));
  auto ot = make_tensor(in_place ? in.get() : out.get(), {batch, vocab}, dl_dtype("fp32"));
  auto tt = make_tensor(tb.get(), {batch}, dl_dtype("fp32"));
  ops::SoftmaxTuning tuning;
  tuning.cluster = cluster;
  REQUIRE_NOTHROW(
      ops::softmax(xt.get(), ot.get(), ops::RowParam<float>{tt.get(), 1.0f}, nullptr, tuning));
  device_synchronize();
  std::vector<float> got(n);
  (in_place ? in : out).download(got.data(), n * 4);
  long bad = 0;
  for (int64_t r = 0; r < batch; ++r) {
    const std::vector<double> row(x.begin() + r * vocab, x.begin() + (r + 1) * vocab);
    const float t = temps[static_cast<size_t>(r)];
    const auto want = t > 0.0f ? ref::softmax(row, t) : std::vector<double>{};
    for (int64_t i = 0; i < vocab; ++i) {
      const double g = got[static_cast<size_t>(r * vocab + i)];
      const bool ok = want.empty() ? std::isnan(g)
                                   : std::fabs(g - want[static_cast<size_t>(i)]) <=
                                         2e-5 * want[static_cast<size_t>(i)] + 1e-30;
      if (!ok && bad++ < 5) {
        UNSCOPED_INFO("row " << r << " col " << i << " got " << g << " want "
                             << (want.empty() ? kNaN : want[static_cast<size_t>(i)]));
      }
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("softmax gpu: a row split over a cluster matches fp64 (B 1, 3, 8, V 128256 and odd)",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  const bool sm90 = gpu_caps().sm90();
  std::vector<int> clusters = {0, 1};
  if (sm90) clusters.insert(clusters.end(), {2, 4, 8});
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (int64_t batch : {1, 3, 8}) {
      for (int64_t vocab : {128256, 128257, 32771}) {
        for (int cluster : clusters) run_case(dt, batch, vocab, false, cluster, rng);
      }
    }
  }
  for (int cluster : clusters) run_case("fp32", 6, 128256, true, cluster, rng);  // out = logits
  // A part shorter than a block's stride, and rows shorter than the cluster's vectors.
  if (sm90) {
    run_case("bf16", 2, 1000, false, 8, rng);
    run_case("fp32", 2, 7, false, 8, rng);
  }
}

TEST_CASE("softmax gpu: the plan splits rows on sm_90 only while the batch leaves SMs idle",
          "[gpu][sampling]") {
  const int sms = kjit::cuda::device_info(0).sm_count;
  const int major = gpu_caps().sm90() ? 9 : 8;
  CHECK(ops::softmax_cluster_size(1, 128256, sms, major) == (major >= 9 ? 8 : 1));
  CHECK(ops::softmax_cluster_size(int64_t{sms}, 128256, sms, major) == 1);
  if (major < 9) {
    // A forced cluster on an older GPU is refused, not launched.
    DeviceBuffer in(4096 * 4), out(4096 * 4);
    auto xt = make_tensor(in.get(), {1, 4096}, dl_dtype("fp32"));
    auto ot = make_tensor(out.get(), {1, 4096}, dl_dtype("fp32"));
    ops::SoftmaxTuning t;
    t.cluster = 2;
    CHECK_THROWS_AS(
        ops::softmax(xt.get(), ot.get(), ops::RowParam<float>{nullptr, 1.0f}, nullptr, t),
        kjit::Error);
  }
}
