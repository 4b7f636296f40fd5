// GPU tests of kjit_argmax on both launches: one block per row (every arch) and, on sm_90+, a
// thread-block cluster of 2, 4 or 8 blocks per row that split the row into contiguous parts
// (forced through an ops::ArgmaxTuning, and the heuristic's own choice). Every row is checked
// against torch.argmax's rule in fp64 (ref::argmax): the first maximum, NaN larger than
// everything, -0 and +0 equal; ties are placed across the parts' boundaries on purpose.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
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

// A [batch, vocab] matrix on the device, rows `stride` elements apart starting `offset` elements
// into the buffer (the rest poisoned with 0xFF, a NaN pattern the kernel must never read), and
// the values the GPU reads, as doubles.
struct Matrix {
  int64_t batch = 0, vocab = 0;
  std::vector<double> values;
  std::unique_ptr<DeviceBuffer> dev;
  Tensor t;
  std::vector<double> row(int64_t r) const {
    return {values.begin() + r * vocab, values.begin() + (r + 1) * vocab};
  }
};

template <typename Gen>
Matrix make_matrix(const std::string& dtype, int64_t batch, int64_t vocab, Gen gen,
                   bool misaligned) {
  Matrix m;
  m.batch = batch;
  m.vocab = vocab;
  const int64_t stride = misaligned ? vocab + 1 : vocab;
  const size_t offset = misaligned ? 1 : 0;
  const size_t es = ref::elem_size(dtype);
  const size_t elems = offset + static_cast<size_t>((batch - 1) * stride + vocab);
  std::vector<unsigned char> host(elems * es, 0xFF);
  m.values.resize(static_cast<size_t>(batch * vocab));
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      const size_t at = offset + static_cast<size_t>(r * stride + i);
      ref::store_elem(host.data(), at, gen(r, i), dtype);
      m.values[static_cast<size_t>(r * vocab + i)] = ref::load_elem(host.data(), at, dtype);
    }
  }
  m.dev = std::make_unique<DeviceBuffer>(host.size());
  m.dev->upload(host.data(), host.size());
  m.t = make_tensor(static_cast<char*>(m.dev->get()) + offset * es, {batch, vocab}, dl_dtype(dtype),
                    {stride, 1});
  return m;
}

// kjit_argmax's ops-layer call under a tuning (the C entry point takes the plan's), its error as
// a status.
kjit_status argmax_tuned(const DLTensor* x, DLTensor* out, const ops::ArgmaxTuning& tuning) {
  try {
    ops::argmax(x, out, nullptr, tuning);
  } catch (const kjit::Error& e) {
    return e.status();
  }
  return KJIT_SUCCESS;
}

struct Path {
  ops::ArgmaxPath path;
  int cluster;      // blocks per row when forced; 0 for the heuristic
  int threads = 0;  // forced block size (kjit-cli bench --set threads=N); 0: the plan's
  int unroll = 0;   // forced loads per lane (--set unroll=N); 0: the plan's
  std::string name() const {
    std::string n = path == ops::ArgmaxPath::kBlock     ? "block"
                    : path == ops::ArgmaxPath::kCluster ? "cluster " + std::to_string(cluster)
                                                        : "auto";
    if (threads) n += " threads " + std::to_string(threads);
    if (unroll) n += " unroll " + std::to_string(unroll);
    return n;
  }
};

bool has_clusters() {
  return kjit::test::gpu_caps().sm90();
}

// Every launch the bench can select: both paths, each cluster size, and block sizes and loads
// per lane other than the plan's (96 threads: three warps, so rows take many strides and the
// last group of a part is partly out of range; unroll 8 and 2 are the spilling and the narrow
// variants).
std::vector<Path> paths() {
  std::vector<Path> out{{ops::ArgmaxPath::kBlock, 0},
                        {ops::ArgmaxPath::kAuto, 0},
                        {ops::ArgmaxPath::kBlock, 0, 96, 0},
                        {ops::ArgmaxPath::kBlock, 0, 0, 8},
                        {ops::ArgmaxPath::kAuto, 0, 256, 2}};
  if (has_clusters()) {
    for (int c : {2, 4, 8}) out.push_back({ops::ArgmaxPath::kCluster, c});
    out.push_back({ops::ArgmaxPath::kCluster, 8, 256, 0});
    out.push_back({ops::ArgmaxPath::kCluster, 4, 1024, 8});
    out.push_back({ops::ArgmaxPath::kCluster, 2, 96, 1});
  }
  return out;
}

// The first element of part k of a row split `cluster` ways, as the kernel splits it.
int64_t part_start(int64_t vocab, int cluster, int vec, int k) {
  const int64_t part = ((vocab + cluster - 1) / cluster + vec - 1) / vec * vec;
  return std::min(vocab, k * part);
}

void check_all_rows(Matrix& x, const Path& p, const std::string& what) {
  for (const char* ot : {"int32", "int64"}) {
    DeviceBuffer out(static_cast<size_t>(x.batch) * 8);
    out.fill(0xFF);
    auto out_t = make_tensor(out.get(), {x.batch}, dl_dtype(ot));
    REQUIRE(argmax_tuned(x.t.get(), out_t.get(), {p.path, p.cluster, p.threads, p.unroll}) ==
            KJIT_SUCCESS);
    device_synchronize();
    std::vector<int64_t> got(static_cast<size_t>(x.batch));
    if (std::string(ot) == "int64") {
      out.download(got.data(), got.size() * 8);
    } else {
      std::vector<int32_t> g32(got.size());
      out.download(g32.data(), g32.size() * 4);
      std::copy(g32.begin(), g32.end(), got.begin());
    }
    for (int64_t r = 0; r < x.batch; ++r) {
      INFO(what << " path " << p.name() << " row " << r << " " << ot);
      CHECK(got[static_cast<size_t>(r)] == ref::argmax(x.row(r)));
    }
  }
}

}  // namespace

TEST_CASE("argmax gpu: every path is torch.argmax on odd sizes, ties, NaN and -inf rows",
          "[gpu][argmax]") {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> q(-1000, 1000);
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (int64_t vocab : {1, 7, 1000, 4099, 32000, 128256, 262147}) {
      for (bool misaligned : {false, true}) {
        const int64_t batch = 9;
        Matrix x = make_matrix(
            dt, batch, vocab,
            [&](int64_t r, int64_t i) {
              switch (r) {
                case 0: return i == vocab / 2 || i == vocab - 1 ? kNaN : q(rng) / 8.0;
                case 1: return 1.0;                            // all ties: 0
                case 2: return i == vocab - 1 ? 2.0 : -kInf;   // the last element
                case 3: return -kInf;                          // all -inf: 0
                case 4: return kNaN;                           // all NaN: 0
                case 5: return static_cast<double>(i % 2048);  // ascending runs
                case 6: return i == vocab - 1 ? kInf : q(rng) / 8.0;
                case 7: return i == 3 ? -0.0 : i % 5 == 4 ? 0.0 : -1.0;  // -0 ties +0: 3
                default: return q(rng) / 8.0;                            // many ties among maxima
              }
            },
            misaligned);
        for (const Path& p : paths()) {
          check_all_rows(x, p,
                         std::string(dt) + " vocab " + std::to_string(vocab) +
                             (misaligned ? " misaligned" : ""));
        }
      }
    }
  }
}

TEST_CASE("argmax gpu: ties and NaN across the cluster's part boundaries", "[gpu][argmax][sm90]") {
  for (const char* dt : {"fp32", "bf16"}) {
    for (int64_t vocab : {4099, 128256, 151937}) {
      for (bool misaligned : {false, true}) {
        const int vec = misaligned ? 1 : static_cast<int>(16 / ref::elem_size(dt));
        for (int c : {2, 4, 8}) {
          const int64_t p1 = part_start(vocab, c, vec, 1), p2 = part_start(vocab, c, vec, 2);
          const int64_t last = part_start(vocab, c, vec, c - 1);
          Matrix x = make_matrix(
              dt, 6, vocab,
              [&](int64_t r, int64_t i) {
                switch (r) {
                  case 0: return i == p1 - 1 || i == p1 || i == last ? 5.0 : -1.0;  // p1 - 1
                  case 1: return i >= p1 && (i - p1) % 3 == 0 ? 5.0 : -1.0;  // p1: from part 1
                  case 2: return i == last || i == vocab - 1 ? 5.0 : -1.0;   // the last part
                  case 3: return i == p2 || i == vocab - 1 ? kNaN : (i == 0 ? kInf : -1.0);
                  case 4: return i == p1 ? 0.0 : (i == p1 + 1 ? -0.0 : -1.0);   // -0 == +0: p1
                  default: return i == p1 - 1 ? -0.0 : (i == p1 ? 0.0 : -1.0);  // p1 - 1
                }
              },
              misaligned);
          for (const Path& p :
               {Path{ops::ArgmaxPath::kCluster, c}, Path{ops::ArgmaxPath::kCluster, c, 96, 0},
                Path{ops::ArgmaxPath::kCluster, c, 512, 8}}) {
            check_all_rows(x, p,
                           std::string(dt) + " vocab " + std::to_string(vocab) +
                               (misaligned ? " misaligned" : ""));
          }
        }
      }
    }
  }
}

TEST_CASE("argmax gpu: decode and large batches under the heuristic, forced paths agree",
          "[gpu][argmax]") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> n(0.0, 3.0);
  for (const char* dt : {"bf16", "fp32"}) {
    // 64 and 256 rows: the bench's shapes (clusters of 8 and 2 under the plan on 132 SMs).
    for (int64_t batch : {1, 3, 64, 256, 300}) {
      Matrix x = make_matrix(
          dt, batch, 128256, [&](int64_t, int64_t) { return n(rng); }, false);
      for (const Path& p : paths()) {
        check_all_rows(x, p, std::string(dt) + " batch " + std::to_string(batch));
      }
    }
  }
}

TEST_CASE("argmax gpu: a forced cluster path is served on sm_90+, unsupported below",
          "[gpu][argmax]") {
  Matrix x = make_matrix(
      "fp32", 2, 1000, [](int64_t, int64_t i) { return static_cast<double>(i % 600); }, false);
  if (has_clusters()) {
    check_all_rows(x, {ops::ArgmaxPath::kCluster, 2}, "fp32 vocab 1000");
    return;
  }
  DeviceBuffer out(16);
  auto out_t = make_tensor(out.get(), {2}, dl_dtype("int64"));
  CHECK(argmax_tuned(x.t.get(), out_t.get(), {ops::ArgmaxPath::kCluster, 2}) ==
        KJIT_ERROR_UNSUPPORTED);
}
