// The sampling family on the GPU against the CPU reference
// (tools/devkit/reference/sampling_ref.hpp): every drawn token is in the reference set (ties
// included), draws follow the renormalized distribution (chi-square over >= 10^5 draws), edge cases
// (k = 1, p = 1, k = vocab, all-equal rows, NaN / zero rows, greedy), determinism and fresh draws
// per offset, CUDA-graph replay with the offset bumped in device memory, renormalization, masking,
// softmax and argmax. The samplers' two kernel paths (one block per row; a thread-block cluster per
// row on sm_90+) are each forced and must draw the same tokens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "ops/sampling/sampling.hpp"
#include "reference/half.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"
#include "support/sampling_options.hpp"
#include "util/error.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// ---- Inputs -------------------------------------------------------------------------------------

// A [batch, vocab] matrix on the device (rows `stride` apart, starting `offset_elems` into the
// buffer) and the values the GPU reads, as doubles.
struct Matrix {
  std::string dtype;
  int64_t batch = 0, vocab = 0, stride = 0;
  size_t offset_elems = 0;
  std::vector<double> values;  // [batch * vocab], compact
  std::unique_ptr<DeviceBuffer> dev;
  Tensor t;
  double at(int64_t r, int64_t i) const { return values[static_cast<size_t>(r * vocab + i)]; }
  std::vector<double> row(int64_t r) const {
    return {values.begin() + r * vocab, values.begin() + (r + 1) * vocab};
  }
};

// gen(r, i) gives the value; rows are stored `stride` apart (0: compact).
template <typename Gen>
Matrix make_matrix(const std::string& dtype, int64_t batch, int64_t vocab, Gen gen,
                   int64_t stride = 0, size_t offset_elems = 0) {
  Matrix m;
  m.dtype = dtype;
  m.batch = batch;
  m.vocab = vocab;
  m.stride = stride ? stride : vocab;
  m.offset_elems = offset_elems;
  const size_t es = ref::elem_size(dtype);
  const size_t elems =
      offset_elems + static_cast<size_t>(std::max<int64_t>(0, (batch - 1) * m.stride + vocab));
  std::vector<unsigned char> host(std::max<size_t>(elems, 1) * es, 0xFF);
  m.values.resize(static_cast<size_t>(batch * vocab));
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      const size_t at = offset_elems + static_cast<size_t>(r * m.stride + i);
      ref::store_elem(host.data(), at, gen(r, i), dtype);
      m.values[static_cast<size_t>(r * vocab + i)] = ref::load_elem(host.data(), at, dtype);
    }
  }
  m.dev = std::make_unique<DeviceBuffer>(host.size());
  m.dev->upload(host.data(), host.size());
  char* base = static_cast<char*>(m.dev->get()) + offset_elems * es;
  m.t = make_tensor(base, {batch, vocab}, dl_dtype(dtype), {m.stride, 1});
  return m;
}

// Probabilities of a softmax over N(0, sigma) logits, different per row, stored as fp32.
Matrix random_probs(std::mt19937_64& rng, int64_t batch, int64_t vocab, double sigma,
                    int64_t stride = 0, size_t offset_elems = 0) {
  std::normal_distribution<double> n(0.0, sigma);
  std::vector<double> all(static_cast<size_t>(batch * vocab));
  for (int64_t r = 0; r < batch; ++r) {
    double m = -kInf, s = 0;
    for (int64_t i = 0; i < vocab; ++i) m = std::max(m, all[r * vocab + i] = n(rng));
    for (int64_t i = 0; i < vocab; ++i) s += all[r * vocab + i] = std::exp(all[r * vocab + i] - m);
    for (int64_t i = 0; i < vocab; ++i) all[r * vocab + i] /= s;
  }
  return make_matrix(
      "fp32", batch, vocab, [&](int64_t r, int64_t i) { return all[r * vocab + i]; }, stride,
      offset_elems);
}

template <typename T>
std::unique_ptr<DeviceBuffer> upload_vec(const std::vector<T>& v) {
  auto b = std::make_unique<DeviceBuffer>(std::max<size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) b->upload(v.data(), v.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> download_vec(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n) b.download(v.data(), n * sizeof(T));
  return v;
}

// ---- A sampler call -----------------------------------------------------------------------------

// kTopPMinP: top-p and min-p on one row, which the ops layer takes and no C entry point offers.
enum class Api { kPlain, kTopK, kTopP, kMinP, kTopKTopP, kLogits, kTopPMinP };

// Filter parameters: per-row vectors when non-empty, else the scalars.
struct Params {
  int top_k = 0;
  float top_p = 1.0f, min_p = 0.0f, temperature = 1.0f;
  std::vector<int32_t> top_k_rows;
  std::vector<float> top_p_rows, min_p_rows, temp_rows;
};

// Runs one draw per offset; returns samples[offset_index][row] and valid flags.
struct Draws {
  std::vector<std::vector<int64_t>> samples;
  std::vector<std::vector<uint8_t>> valid;
};

// The sampler tuning of the enclosing ForcePath / ForceMass scopes, and what the latest call under
// one ran. Calls under a scope go through the ops layer, which takes the tuning as an argument
// (the C entry points take the plan's).
kjit::ops::SampleTuning g_tuning;
int g_tuned_scopes = 0;
kjit::ops::SampleRan g_ran;

// The ops-layer call behind the C entry point of `api`, under g_tuning; its error as a status.
kjit_status sample_tuned(Api api, const DLTensor* x, const DLTensor* k_arr, const DLTensor* p_arr,
                         const DLTensor* m_arr, const DLTensor* t_arr, const Params& prm,
                         const DLTensor* seed, const DLTensor* offset, DLTensor* samples,
                         DLTensor* valid, void* stream) {
  namespace ops = kjit::ops;
  ops::SampleArgs a;
  switch (api) {
    case Api::kPlain: break;
    case Api::kTopK: a.filters = ops::kFilterTopK; break;
    case Api::kTopP: a.filters = ops::kFilterTopP; break;
    case Api::kMinP: a.filters = ops::kFilterMinP; break;
    case Api::kTopPMinP: a.filters = ops::kFilterTopP | ops::kFilterMinP; break;
    case Api::kTopKTopP:
    case Api::kLogits: a.filters = ops::kFilterTopK | ops::kFilterTopP; break;
  }
  a.top_k = {k_arr, prm.top_k};
  a.top_p = {p_arr, prm.top_p};
  a.min_p = {m_arr, prm.min_p};
  a.temperature = {t_arr, prm.temperature};
  const bool logits = api == Api::kLogits;
  try {
    ops::sample(logits ? "logits" : "probs",
                logits ? ops::FilterInput::kLogits : ops::FilterInput::kProbs, x, a, seed, offset,
                samples, valid, stream, g_tuning, &g_ran);
  } catch (const kjit::Error& e) {
    return e.status();
  }
  return KJIT_SUCCESS;
}

Draws draw(Api api, Matrix& x, const Params& prm, uint64_t seed, std::vector<uint64_t> offsets,
           bool int64_out = false, std::vector<uint64_t> row_seeds = {}) {
  const int64_t b = x.batch;
  auto seed_dev = upload_vec(row_seeds.empty() ? std::vector<uint64_t>{seed} : row_seeds);
  DeviceBuffer offset_dev(8);
  auto seed_t = make_tensor(seed_dev->get(), {row_seeds.empty() ? 1 : b}, dl_dtype("int64"));
  auto offset_t = make_tensor(offset_dev.get(), {1}, dl_dtype("int64"));
  DeviceBuffer samples_dev(static_cast<size_t>(std::max<int64_t>(b, 1)) * 8), valid_dev(b + 1);
  auto samples_t = make_tensor(samples_dev.get(), {b}, dl_dtype(int64_out ? "int64" : "int32"));
  auto valid_t = make_tensor(valid_dev.get(), {b}, DLDataType{kDLUInt, 8, 1});
  auto k_dev = upload_vec(prm.top_k_rows);
  auto p_dev = upload_vec(prm.top_p_rows);
  auto m_dev = upload_vec(prm.min_p_rows);
  auto t_dev = upload_vec(prm.temp_rows);
  auto k_t = make_tensor(k_dev->get(), {b}, dl_dtype("int32"));
  auto p_t = make_tensor(p_dev->get(), {b}, dl_dtype("fp32"));
  auto m_t = make_tensor(m_dev->get(), {b}, dl_dtype("fp32"));
  auto t_t = make_tensor(t_dev->get(), {b}, dl_dtype("fp32"));
  const DLTensor* k_arr = prm.top_k_rows.empty() ? nullptr : k_t.get();
  const DLTensor* p_arr = prm.top_p_rows.empty() ? nullptr : p_t.get();
  const DLTensor* m_arr = prm.min_p_rows.empty() ? nullptr : m_t.get();
  const DLTensor* t_arr = prm.temp_rows.empty() ? nullptr : t_t.get();
  Draws d;
  for (uint64_t off : offsets) {
    offset_dev.upload(&off, 8);
    samples_dev.fill(0x5A);  // poison
    valid_dev.fill(0x5A);
    const DLTensor *xs = x.t.get(), *sd = seed_t.get(), *of = offset_t.get();
    DLTensor *out = samples_t.get(), *val = valid_t.get();
    kjit_status st = KJIT_SUCCESS;
    if (g_tuned_scopes > 0) {
      st = sample_tuned(api, xs, k_arr, p_arr, m_arr, t_arr, prm, sd, of, out, val, nullptr);
    } else {
      switch (api) {
        case Api::kPlain: st = kjit_sampling_from_probs(xs, sd, of, out, val, nullptr); break;
        case Api::kTopK:
          st = kjit_top_k_sampling_from_probs(xs, k_arr, sd, of, out, val,
                                              SamplingOptions().top_k(prm.top_k), nullptr);
          break;
        case Api::kTopP:
          st = kjit_top_p_sampling_from_probs(xs, p_arr, sd, of, out, val,
                                              SamplingOptions().top_p(prm.top_p), nullptr);
          break;
        case Api::kMinP:
          st = kjit_min_p_sampling_from_probs(xs, m_arr, sd, of, out, val,
                                              SamplingOptions().min_p(prm.min_p), nullptr);
          break;
        case Api::kTopKTopP:
          st = kjit_top_k_top_p_sampling_from_probs(
              xs, k_arr, p_arr, sd, of, out, val,
              SamplingOptions().top_k(prm.top_k).top_p(prm.top_p), nullptr);
          break;
        case Api::kLogits:
          st = kjit_top_k_top_p_sampling_from_logits(
              xs, k_arr, p_arr, t_arr, sd, of, out, val,
              SamplingOptions().top_k(prm.top_k).top_p(prm.top_p).temperature(prm.temperature),
              nullptr);
          break;
        case Api::kTopPMinP: FAIL("top-p with min-p runs under a tuned scope only");
      }
    }
    INFO("kjit_last_error: " << kjit_last_error());
    REQUIRE(st == KJIT_SUCCESS);
    device_synchronize();
    std::vector<int64_t> s(static_cast<size_t>(b));
    if (int64_out) {
      s = download_vec<int64_t>(samples_dev, static_cast<size_t>(b));
    } else {
      auto s32 = download_vec<int32_t>(samples_dev, static_cast<size_t>(b));
      std::copy(s32.begin(), s32.end(), s.begin());
    }
    d.samples.push_back(s);
    d.valid.push_back(download_vec<uint8_t>(valid_dev, static_cast<size_t>(b)));
  }
  return d;
}

// KJIT_TEST_UNDER_SANITIZER=1 (set by the H200 sanitizer scripts): compute-sanitizer racecheck
// runs these kernels ~1000x slower, so each draw loop keeps two offsets and the distribution
// checks keep only their exact parts (no impossible token). The statistics need the full run.
bool under_sanitizer() {
  const char* v = std::getenv("KJIT_TEST_UNDER_SANITIZER");
  return v != nullptr && std::string(v) == "1";
}

// Under KJIT_TEST_UNDER_SANITIZER=1 a vocabulary above 16384 runs at 16384: one cluster-path
// launch at 128256 tokens takes minutes under racecheck, and the kernels' code paths
// are the same (a test that needs the cluster path forces it).
int64_t sanitizer_vocab(int64_t vocab) {
  return under_sanitizer() ? std::min<int64_t>(vocab, 16384) : vocab;
}

// `values` mapped through `cap` (a sanitizer_* function), each result once, in order.
template <typename T, typename Cap>
std::vector<T> capped_once(std::initializer_list<T> values, Cap cap) {
  std::vector<T> out;
  for (T v : values) {
    v = cap(v);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

// A test's vocabularies through sanitizer_vocab, each once.
std::vector<int64_t> vocabularies(std::initializer_list<int64_t> vocabs) {
  return capped_once(vocabs, sanitizer_vocab);
}

// Forces the samplers' kernel path for a scope (cluster size 0: chosen by the batch).
struct ForcePath {
  ForcePath(kjit::ops::SamplePath p, int cluster = 0) {
    g_tuning.path = p;
    g_tuning.cluster = cluster;
    ++g_tuned_scopes;
  }
  ~ForcePath() {
    g_tuning.path = kjit::ops::SamplePath::kAuto;
    g_tuning.cluster = 0;
    --g_tuned_scopes;
  }
  ForcePath(const ForcePath&) = delete;
  ForcePath& operator=(const ForcePath&) = delete;
};

// Under KJIT_TEST_UNDER_SANITIZER=1 a forced cluster has 2 blocks and a distribution test at
// most 4 rows: racecheck takes 276 s over one launch of the 16-block cluster kernel at 4096
// tokens and 7 s (process and compile included) at 2 blocks, and the kernel's code is the same
// at every cluster size.
// Tests that do not force a path run the one-block path there (the batch alone would pick a
// cluster at small batches), and a forced cluster of automatic size (0, which picks 16 at small
// batches) runs at 2; the cluster tests cover it.
int sanitizer_cluster(int n) {
  return under_sanitizer() && (n == 0 || n > 2) ? 2 : n;
}

std::vector<int> cluster_sizes(std::initializer_list<int> sizes) {
  return capped_once(sizes, sanitizer_cluster);
}

int64_t sanitizer_batch(int64_t batch) {
  return under_sanitizer() ? std::min<int64_t>(batch, 4) : batch;
}

kjit::ops::SamplePath sanitizer_auto_path() {
  return under_sanitizer() ? kjit::ops::SamplePath::kSingle : kjit::ops::SamplePath::kAuto;
}

std::vector<uint64_t> range_offsets(uint64_t first, int n) {
  if (under_sanitizer()) n = std::min(n, 2);
  std::vector<uint64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The weights the kernel samples from: the probabilities, or exp((x - max) / T) of the logits.
std::vector<double> weights_of(Api api, const std::vector<double>& x, double temperature) {
  if (api != Api::kLogits) return x;
  const double m = *std::max_element(x.begin(), x.end());
  std::vector<double> w(x.size());
  for (size_t i = 0; i < x.size(); ++i) w[i] = std::exp((x[i] - m) / temperature);
  return w;
}

ref::FilterSpec spec_of(Api api, const Params& prm, int64_t r) {
  ref::FilterSpec f;
  const bool has_k = api == Api::kTopK || api == Api::kTopKTopP || api == Api::kLogits;
  const bool has_p =
      api == Api::kTopP || api == Api::kTopKTopP || api == Api::kLogits || api == Api::kTopPMinP;
  const bool has_min_p = api == Api::kMinP || api == Api::kTopPMinP;
  if (has_k) f.top_k = prm.top_k_rows.empty() ? prm.top_k : prm.top_k_rows[r];
  if (has_p) f.top_p = prm.top_p_rows.empty() ? prm.top_p : prm.top_p_rows[r];
  if (has_min_p) f.min_p = prm.min_p_rows.empty() ? prm.min_p : prm.min_p_rows[r];
  // Probabilities are compared exactly by the kernel (keys are their bits; min-p multiplies in
  // fp32 as the reference does); logits' weights come from an fp32 exp2.
  f.value_tol = api == Api::kLogits ? 2e-5 : 0.0;
  f.mass_tol = api == Api::kLogits ? 2e-4 : 1e-4;
  return f;
}

double temperature_of(const Params& prm, int64_t r) {
  return prm.temp_rows.empty() ? prm.temperature : prm.temp_rows[r];
}

// Every draw of every row is a valid token of the row's reference set.
void check_in_set(Api api, const Matrix& x, const Params& prm, const Draws& d) {
  long outside = 0, invalid = 0, in_band = 0, total = 0;
  for (int64_t r = 0; r < x.batch; ++r) {
    const auto w = weights_of(api, x.row(r), temperature_of(prm, r));
    const auto keep = ref::keep_sets(w, spec_of(api, prm, r));
    for (size_t k = 0; k < d.samples.size(); ++k) {
      const int64_t t = d.samples[k][r];
      ++total;
      if (d.valid[k][r] != 1 || t < 0 || t >= x.vocab) {
        if (invalid++ < 5) UNSCOPED_INFO("row " << r << " draw " << k << ": token " << t);
        continue;
      }
      if (keep[t] == ref::Keep::kNo) {
        if (outside++ < 5) {
          UNSCOPED_INFO("row " << r << " draw " << k << ": token " << t << " (w " << w[t]
                               << ") is outside the set");
        }
      }
      in_band += keep[t] == ref::Keep::kMay;
    }
  }
  INFO(total << " draws, " << in_band << " in the rounding band");
  CHECK(invalid == 0);
  CHECK(outside == 0);
  CHECK(total > 0);
}

// Draw counts of row 0 over every row and offset (rows must be identical).
std::vector<long> histogram(const Draws& d, int64_t vocab, long& n) {
  std::vector<long> c(static_cast<size_t>(vocab), 0);
  n = 0;
  for (const auto& s : d.samples) {
    for (int64_t t : s) {
      if (t >= 0 && t < vocab) ++c[static_cast<size_t>(t)];
      ++n;
    }
  }
  return c;
}

// Chi-square and total variation of the draws against the renormalized target. The bound is
// ~6 standard deviations of the chi-square law above its mean, so a correct kernel passes and a
// kernel drawing e.g. uniformly within the set, or from the unfiltered row, fails by far.
void check_distribution(const Draws& d, const std::vector<double>& target, int64_t vocab) {
  long n = 0;
  const auto counts = histogram(d, vocab, n);
  int dof = 0;
  long impossible = 0;
  const double chi = ref::chi_square(counts, target, n, dof, impossible);
  double tv = 0;
  for (int64_t i = 0; i < vocab; ++i) tv += std::fabs(double(counts[i]) / n - target[i]);
  tv /= 2;
  INFO("draws " << n << ", chi2 " << chi << " with " << dof << " dof, TV " << tv);
  CHECK(impossible == 0);
  if (under_sanitizer()) {
    WARN("KJIT_TEST_UNDER_SANITIZER=1: " << n << " draws, statistics not checked");
    CHECK(n > 0);
    return;
  }
  CHECK(n >= 100000);
  CHECK(chi < ref::chi_square_limit(dof));
  CHECK(tv < 0.02);
}

}  // namespace

// ================================ exactness =====================================================

TEST_CASE("sampling gpu: every draw is in the reference set, odd vocabularies included",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const int64_t vocab : vocabularies({1, 7, 1000, 4097, 128256})) {
    const int64_t batch = vocab >= 100000 ? 16 : 64;
    Matrix x = random_probs(rng, batch, vocab, 3.0);
    INFO("vocab " << vocab);
    Params k;
    k.top_k = static_cast<int>(std::min<int64_t>(vocab, 50));
    check_in_set(Api::kTopK, x, k, draw(Api::kTopK, x, k, 1, range_offsets(0, 8)));
    for (float p : {0.1f, 0.5f, 0.9f, 0.99f}) {
      Params pp;
      pp.top_p = p;
      INFO("top_p " << p);
      check_in_set(Api::kTopP, x, pp, draw(Api::kTopP, x, pp, 2, range_offsets(0, 8)));
    }
    Params m;
    m.min_p = 0.05f;
    check_in_set(Api::kMinP, x, m, draw(Api::kMinP, x, m, 3, range_offsets(0, 8)));
    Params kp;
    kp.top_k = static_cast<int>(std::min<int64_t>(vocab, 200));
    kp.top_p = 0.8f;
    check_in_set(Api::kTopKTopP, x, kp, draw(Api::kTopKTopP, x, kp, 4, range_offsets(0, 8)));
    Params none;
    check_in_set(Api::kPlain, x, none, draw(Api::kPlain, x, none, 5, range_offsets(0, 4)));
  }
}

TEST_CASE("sampling gpu: per-row parameters, each row against its own set", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = 256, vocab = 32000;
  Matrix x = random_probs(rng, batch, vocab, 2.0);
  std::uniform_int_distribution<int> kd(-2, 3000);
  std::uniform_real_distribution<float> pd(0.05f, 1.2f);  // > 1: top-p off for the row
  Params prm;
  for (int64_t r = 0; r < batch; ++r) {
    prm.top_k_rows.push_back(r % 17 == 0 ? 0 : kd(rng));  // <= 0: top-k off for the row
    prm.top_p_rows.push_back(std::min(pd(rng), 1.0f));
    prm.min_p_rows.push_back(r % 5 == 0 ? 0.0f : pd(rng) / 4);
  }
  check_in_set(Api::kTopK, x, prm, draw(Api::kTopK, x, prm, 11, range_offsets(100, 6)));
  check_in_set(Api::kTopP, x, prm, draw(Api::kTopP, x, prm, 12, range_offsets(100, 6)));
  check_in_set(Api::kMinP, x, prm, draw(Api::kMinP, x, prm, 13, range_offsets(100, 6)));
  check_in_set(Api::kTopKTopP, x, prm, draw(Api::kTopKTopP, x, prm, 14, range_offsets(100, 6)));
}

TEST_CASE("sampling gpu: ties at the boundary, heavy ties, and very peaked rows",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  // Values from a few levels, so every boundary is a tie group (and groups are large).
  std::uniform_int_distribution<int> level(0, 4);
  const int64_t batch = 128, vocab = 5000;
  std::vector<double> lv = {0.0, 1.0, 2.0, 4.0, 8.0};
  Matrix x = make_matrix("fp32", batch, vocab, [&](int64_t, int64_t) {
    return lv[static_cast<size_t>(level(rng))] / 20000.0;
  });
  for (int k : {1, 2, 50, 999, 1000, 1001, 4999}) {
    Params prm;
    prm.top_k = k;
    INFO("top_k " << k);
    check_in_set(Api::kTopK, x, prm, draw(Api::kTopK, x, prm, 21, range_offsets(0, 6)));
  }
  for (float p : {0.01f, 0.3f, 0.5f, 0.75f, 0.999f}) {
    Params prm;
    prm.top_p = p;
    INFO("top_p " << p);
    check_in_set(Api::kTopP, x, prm, draw(Api::kTopP, x, prm, 22, range_offsets(0, 6)));
  }
  // Top-k with every boundary token tied: over many draws the whole tie group shows up.
  Matrix eq = make_matrix("fp32", 1024, 100, [](int64_t, int64_t i) { return i < 90 ? 1.0 : 0.5; });
  Params k1;
  k1.top_k = 1;
  const Draws d = draw(Api::kTopK, eq, k1, 23, {0, 1, 2});  // 3072 draws: each tie ~34 times
  std::vector<int> seen(100, 0);
  for (const auto& s : d.samples) {
    for (int64_t t : s) seen.at(static_cast<size_t>(t)) = 1;
  }
  CHECK(std::accumulate(seen.begin(), seen.begin() + 90, 0) == 90);  // all 90 tied maxima
  CHECK(std::accumulate(seen.begin() + 90, seen.end(), 0) == 0);
  // One dominant token plus a long flat tail (top-p thresholds deep in the tail).
  Matrix peaked = make_matrix(
      "fp32", 32, 131072, [&](int64_t r, int64_t i) { return i == r * 7 ? 0.5 : 0.5 / 131071.0; });
  for (float p : {0.4f, 0.5f, 0.6f, 0.9999f}) {
    Params prm;
    prm.top_p = p;
    INFO("peaked top_p " << p);
    check_in_set(Api::kTopP, peaked, prm, draw(Api::kTopP, peaked, prm, 24, range_offsets(0, 4)));
  }
}

TEST_CASE("sampling gpu: logits (fp32, bf16, fp16) with temperature, top-k and top-p",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> n(0.0, 3.0);
  const ForcePath path(sanitizer_auto_path());
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (const int64_t vocab : vocabularies({7, 1000, 128256, 262144})) {
      const int64_t batch = vocab >= 100000 ? 8 : 64;
      Matrix x = make_matrix(dt, batch, vocab, [&](int64_t, int64_t) { return n(rng); });
      INFO(dt << " vocab " << vocab);
      for (auto [k, p, t] : {std::tuple<int, float, float>{50, 0.9f, 0.7f},
                             {static_cast<int>(vocab), 0.5f, 1.0f},
                             {20, 1.0f, 1.5f},
                             {1000000, 1.0f, 0.3f}}) {
        Params prm;
        prm.top_k = k;
        prm.top_p = p;
        prm.temperature = t;
        INFO("k " << k << " p " << p << " T " << t);
        check_in_set(Api::kLogits, x, prm, draw(Api::kLogits, x, prm, 31, range_offsets(0, 4)));
      }
    }
  }
}

TEST_CASE("sampling gpu: strided rows, misaligned rows (scalar path) and batch 1024",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  Params prm;
  prm.top_k = 40;
  prm.top_p = 0.9f;
  Matrix strided = random_probs(rng, 33, 4096, 2.0, 4096 + 64);
  check_in_set(Api::kTopKTopP, strided, prm,
               draw(Api::kTopKTopP, strided, prm, 41, range_offsets(0, 4)));
  Matrix misaligned = random_probs(rng, 33, 4096, 2.0, 4099, 1);
  check_in_set(Api::kTopKTopP, misaligned, prm,
               draw(Api::kTopKTopP, misaligned, prm, 42, range_offsets(0, 4)));
  Matrix big = random_probs(rng, 1024, 1000, 2.0);
  check_in_set(Api::kTopKTopP, big, prm, draw(Api::kTopKTopP, big, prm, 43, range_offsets(0, 2)));
  check_in_set(Api::kTopP, big, prm,
               draw(Api::kTopP, big, prm, 44, range_offsets(0, 2), /*int64_out=*/true));
}

// ================================ distributions =================================================

TEST_CASE("sampling gpu: draws follow the renormalized distribution (>= 1e5 draws)",
          "[gpu][sampling]") {
  // A skewed small row, repeated in 1024 rows (independent streams), 100 offsets.
  const int64_t vocab = 24;
  std::vector<double> base(vocab);
  for (int64_t i = 0; i < vocab; ++i) base[i] = 1.0 / (1.0 + i) + (i % 3 == 0 ? 0.05 : 0.0);
  double s = std::accumulate(base.begin(), base.end(), 0.0);
  for (double& v : base) v /= s;
  Matrix x = make_matrix("fp32", 1024, vocab, [&](int64_t, int64_t i) { return base[i]; });
  const auto offsets = range_offsets(1000, 100);
  struct Case {
    Api api;
    Params prm;
  };
  std::vector<Case> cases(5);
  cases[0].api = Api::kPlain;
  cases[1].api = Api::kTopK;
  cases[1].prm.top_k = 6;
  cases[2].api = Api::kTopP;
  cases[2].prm.top_p = 0.6f;
  cases[3].api = Api::kMinP;
  cases[3].prm.min_p = 0.15f;
  cases[4].api = Api::kTopKTopP;
  cases[4].prm.top_k = 10;
  cases[4].prm.top_p = 0.7f;
  for (const Case& c : cases) {
    INFO("api " << static_cast<int>(c.api));
    const auto w = weights_of(c.api, x.row(0), 1.0);
    const auto keep = ref::keep_sets(w, spec_of(c.api, c.prm, 0));
    for (auto k : keep) REQUIRE(k != ref::Keep::kMay);  // a row with no rounding ambiguity
    check_distribution(draw(c.api, x, c.prm, 77, offsets), ref::target_distribution(w, keep),
                       vocab);
  }
  // Logits with temperature: the target is softmax(x / T) restricted and renormalized.
  Matrix lx =
      make_matrix("bf16", 1024, vocab, [&](int64_t, int64_t i) { return std::log(base[i]); });
  Params lp;
  lp.top_k = 12;
  lp.top_p = 0.8f;
  lp.temperature = 0.8f;
  const auto w = weights_of(Api::kLogits, lx.row(0), 0.8);
  const auto keep = ref::keep_sets(w, spec_of(Api::kLogits, lp, 0));
  for (auto k : keep) REQUIRE(k != ref::Keep::kMay);
  check_distribution(draw(Api::kLogits, lx, lp, 78, offsets), ref::target_distribution(w, keep),
                     vocab);
}

TEST_CASE("sampling gpu: logits draw softmax(x / T) in fp32, bf16 and fp16 (409600 draws)",
          "[gpu][sampling]") {
  // No filter: the draws against the tempered distribution itself, on 16 tokens whose
  // probabilities run from ~0.5 down to ~3e-5 (12 expected draws), so a sampler off by a small
  // continuous bias fails: the mean-logit z-test sees a temperature 2% off (z ~ 12 at this
  // count), the chi-square a 1% uniform admixture in the rare tokens (reference_test.cpp
  // simulates both against these statistics).
  const int64_t vocab = 16, batch = 1024;
  const auto offsets = range_offsets(5000, 400);
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (float t : {0.7f, 1.3f}) {
      const double step = 0.45 * t / 0.7;  // the same probabilities at both temperatures
      Matrix x = make_matrix(dt, batch, vocab, [&](int64_t, int64_t i) { return -step * i; });
      Params prm;
      prm.top_k = 1000000;  // off
      prm.temperature = t;
      const auto xs = x.row(0);  // the values as stored in dt
      const auto w = weights_of(Api::kLogits, xs, t);
      const auto target =
          ref::target_distribution(w, std::vector<ref::Keep>(w.size(), ref::Keep::kMust));
      INFO(dt << " T " << t);
      const Draws d = draw(Api::kLogits, x, prm, 79, offsets);
      check_distribution(d, target, vocab);
      if (under_sanitizer()) continue;
      long n = 0;
      const auto counts = histogram(d, vocab, n);
      const double z = ref::mean_score_z(counts, target, xs, n);
      INFO("mean-logit z " << z);
      CHECK(std::fabs(z) < 6.0);
    }
  }
}

TEST_CASE("sampling gpu: all-equal probabilities draw uniformly", "[gpu][sampling]") {
  const int64_t vocab = 37;
  Matrix x = make_matrix("fp32", 1024, vocab, [](int64_t, int64_t) { return 1.0 / 37.0; });
  std::vector<double> uniform(vocab, 1.0 / vocab);
  Params none;
  check_distribution(draw(Api::kPlain, x, none, 5, range_offsets(0, 100)), uniform, vocab);
  Params k1;
  k1.top_k = 1;  // every token ties with the maximum: all are kept
  check_distribution(draw(Api::kTopK, x, k1, 6, range_offsets(0, 100)), uniform, vocab);
  Params p;
  p.top_p = 0.01f;  // the first token reaches 1%; its ties come along: all of them
  check_distribution(draw(Api::kTopP, x, p, 7, range_offsets(0, 100)), uniform, vocab);
}

// ================================ edge cases ====================================================

TEST_CASE("sampling gpu: k = 1 is argmax, greedy temperature 0 is the first maximum",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  Matrix x = random_probs(rng, 128, 50000, 2.0);
  Params k1;
  k1.top_k = 1;
  const Draws d = draw(Api::kTopK, x, k1, 9, range_offsets(0, 3));
  for (int64_t r = 0; r < x.batch; ++r) {
    const int64_t want = ref::argmax(x.row(r));
    for (const auto& s : d.samples) CHECK(s[r] == want);
  }
  std::normal_distribution<double> n(0.0, 2.0);
  Matrix lx = make_matrix("bf16", 64, 1000, [&](int64_t, int64_t) { return n(rng); });
  Params greedy;
  greedy.top_k = 1000;
  greedy.temperature = 0.0f;
  const Draws g = draw(Api::kLogits, lx, greedy, 9, range_offsets(0, 2));
  Params per_row = greedy;
  per_row.temperature = 1.0f;
  per_row.temp_rows.assign(64, 0.0f);
  const Draws g2 = draw(Api::kLogits, lx, per_row, 9, {0});
  for (int64_t r = 0; r < lx.batch; ++r) {
    const int64_t want = ref::argmax(lx.row(r));  // bf16 ties resolve to the first
    CHECK(g.samples[0][r] == want);
    CHECK(g.samples[1][r] == want);
    CHECK(g2.samples[0][r] == want);
    CHECK(g.valid[0][r] == 1);
  }
}

TEST_CASE("sampling gpu: p = 1 and k >= vocab are exactly plain sampling", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  Matrix x = random_probs(rng, 200, 3000, 1.5);
  const auto offsets = range_offsets(5, 3);
  Params none;
  const Draws plain = draw(Api::kPlain, x, none, 99, offsets);
  Params p1;
  p1.top_p = 1.0f;
  Params kv;
  kv.top_k = 3000;
  Params both;
  both.top_k = 1 << 30;
  both.top_p = 1.0f;
  CHECK(draw(Api::kTopP, x, p1, 99, offsets).samples == plain.samples);
  CHECK(draw(Api::kTopK, x, kv, 99, offsets).samples == plain.samples);
  CHECK(draw(Api::kTopKTopP, x, both, 99, offsets).samples == plain.samples);
  Params m0;
  m0.min_p = 0.0f;
  CHECK(draw(Api::kMinP, x, m0, 99, offsets).samples == plain.samples);
}

TEST_CASE("sampling gpu: the draw is the inverse CDF of the documented Philox uniform",
          "[gpu][sampling]") {
  // Beyond membership: the token equals the reference's pick for u = Philox(seed, offset, row)
  // (a few may differ where u * total falls within rounding of a token boundary). The pick is
  // made over the exact set of kjit.h's rule (ref::exact, no tolerance band): inverse_cdf counts
  // band tokens as kept, and at p = 0.7 nearly every 20000-token row has one or two tokens
  // within the 1e-4 mass band, about half of which the exact rule (and the kernel, whose top-p
  // sums for probabilities are good to ~1e-7) drops; counting them moves u * total, and with it
  // about one draw in ten. A kernel whose set strays from the exact rule still moves draws here.
  std::mt19937_64 rng(std::random_device{}());
  Matrix x = random_probs(rng, 256, 20000, 2.0);
  const uint64_t seed = 0x1234567890abcdefull;
  for (Api api : {Api::kPlain, Api::kTopP, Api::kTopK, Api::kMinP, Api::kTopKTopP}) {
    Params prm;
    prm.top_k = 100;
    prm.top_p = 0.7f;
    prm.min_p = 0.1f;
    const Draws d = draw(api, x, prm, seed, {42, 43});
    long agree = 0, total = 0;
    for (size_t k = 0; k < d.samples.size(); ++k) {
      for (int64_t r = 0; r < x.batch; ++r) {
        const auto w = x.row(r);
        const auto keep = ref::keep_sets(w, ref::exact(spec_of(api, prm, r)));
        const double u = ref::sampling_uniform(seed, 42 + k, static_cast<uint32_t>(r));
        agree += d.samples[k][r] == ref::inverse_cdf(w, keep, u);
        ++total;
      }
    }
    INFO("api " << static_cast<int>(api) << ": " << agree << " of " << total << " agree");
    CHECK(agree >= total * 99 / 100);
  }
  // Logits with temperature and top-k: the weights are exp((x - max) / T) (fp32 in the kernel,
  // within a few ulps of the reference's), top-p off so no mass boundary is in play.
  std::normal_distribution<double> nd(0.0, 3.0);
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    Matrix lx = make_matrix(dt, 256, 20000, [&](int64_t, int64_t) { return nd(rng); });
    for (int k : {100, 1000000}) {
      Params prm;
      prm.top_k = k;
      prm.temperature = 0.7f;
      const Draws d = draw(Api::kLogits, lx, prm, seed, {42, 43});
      long agree = 0, total = 0;
      for (size_t j = 0; j < d.samples.size(); ++j) {
        for (int64_t r = 0; r < lx.batch; ++r) {
          const auto w = weights_of(Api::kLogits, lx.row(r), 0.7);
          const auto keep = ref::keep_sets(w, ref::exact(spec_of(Api::kLogits, prm, r)));
          const double u = ref::sampling_uniform(seed, 42 + j, static_cast<uint32_t>(r));
          agree += d.samples[j][r] == ref::inverse_cdf(w, keep, u);
          ++total;
        }
      }
      INFO("logits " << dt << " k " << k << ": " << agree << " of " << total << " agree");
      CHECK(agree >= total * 99 / 100);
    }
  }
}

TEST_CASE("sampling gpu: NaN, negative, infinite and all-zero rows are reported invalid",
          "[gpu][sampling]") {
  const int64_t vocab = 1000;
  // Row 5 holds a -0.0 (a zero weight: valid), row 6 a -Inf, row 7 a NaN beside a +Inf.
  Matrix x = make_matrix("fp32", 8, vocab, [](int64_t r, int64_t i) {
    if (r == 1 && i == 500) return kNaN;
    if (r == 2 && i == 3) return -0.25;
    if (r == 3) return 0.0;
    if (r == 4 && i == 999) return kInf;
    if (r == 5 && i == 7) return -0.0;
    if (r == 6 && i == 640) return -kInf;
    if (r == 7 && (i == 0 || i == 1)) return i == 0 ? kInf : kNaN;
    return 1.0 + (i % 7);
  });
  Params prm;
  prm.top_k = 10;
  prm.top_p = 0.5f;
  for (Api api : {Api::kPlain, Api::kTopK, Api::kTopP, Api::kTopKTopP}) {
    const Draws d = draw(api, x, prm, 1, {0});
    for (int64_t r = 0; r < 8; ++r) {
      const bool bad = (r >= 1 && r <= 4) || r >= 6;
      INFO("api " << static_cast<int>(api) << " row " << r);
      CHECK(d.valid[0][r] == (bad ? 0 : 1));
      if (bad) CHECK(d.samples[0][r] == -1);
      if (!bad) CHECK(d.samples[0][r] >= 0);
    }
  }
  // Per-row parameters out of range make their row invalid, and only it.
  Params rows;
  rows.top_p_rows = {0.5f, 0.0f, static_cast<float>(kNaN), -1.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  Matrix ok = make_matrix("fp32", 8, vocab, [](int64_t, int64_t i) { return 1.0 + i % 5; });
  const Draws d = draw(Api::kTopP, ok, rows, 1, {0});
  for (int64_t r = 0; r < 8; ++r) CHECK(d.valid[0][r] == (r >= 1 && r <= 3 ? 0 : 1));
  // min-p per row (kjit.h): <= 0 is off, NaN or > 1 makes the row invalid (sample -1), 1 keeps
  // the maximum and its ties only (here the 200 tokens i % 5 == 4).
  Params mp;
  mp.min_p_rows = {0.3f, 1.0f, 1.5f, static_cast<float>(kNaN), -0.5f, 0.0f, 1.0f, 2.0f};
  const Draws md = draw(Api::kMinP, ok, mp, 1, range_offsets(0, 16));
  for (size_t j = 0; j < md.samples.size(); ++j) {
    for (int64_t r = 0; r < 8; ++r) {
      const float m = mp.min_p_rows[static_cast<size_t>(r)];
      const bool bad = !(m <= 1.0f);
      INFO("min_p " << m << " row " << r << " draw " << j);
      CHECK(md.valid[j][r] == (bad ? 0 : 1));
      if (bad) CHECK(md.samples[j][r] == -1);
      if (m == 1.0f) CHECK(md.samples[j][r] % 5 == 4);
    }
  }
  {
    Matrix okr = make_matrix("fp32", 6, vocab, [](int64_t, int64_t i) { return 1.0 + i % 5; });
    Params valid_rows;
    valid_rows.min_p_rows = {0.3f, 1.0f, -0.5f, 0.0f, 1.0f, 0.9f};
    check_in_set(Api::kMinP, okr, valid_rows,
                 draw(Api::kMinP, okr, valid_rows, 2, range_offsets(0, 16)));
  }
  // The scalar min_p = 1 (the top of its range): the maximum and its ties, on random rows.
  {
    std::mt19937_64 rng(91);
    Matrix rx = random_probs(rng, 64, 1000, 2.0);
    Params one;
    one.min_p = 1.0f;
    check_in_set(Api::kMinP, rx, one, draw(Api::kMinP, rx, one, 3, range_offsets(0, 4)));
  }
  // Logits: NaN, +Inf, all -Inf, and a negative per-row temperature.
  Matrix lx = make_matrix("fp32", 6, vocab, [](int64_t r, int64_t i) {
    if (r == 1 && i == 2) return kNaN;
    if (r == 2 && i == 2) return kInf;
    if (r == 3) return -kInf;
    if (r == 5 && i != 7) return -kInf;  // a single finite logit: always token 7
    return std::sin(double(i));
  });
  Params lp;
  lp.top_k = 5;
  lp.top_p = 0.9f;
  lp.temp_rows = {1.0f, 1.0f, 1.0f, 1.0f, -1.0f, 1.0f};
  const Draws ld = draw(Api::kLogits, lx, lp, 1, {0});
  const std::vector<int> want_valid = {1, 0, 0, 0, 0, 1};
  for (int64_t r = 0; r < 6; ++r) CHECK(ld.valid[0][r] == want_valid[r]);
  CHECK(ld.samples[0][5] == 7);
}

TEST_CASE("sampling gpu: same seed and offset repeat, other offsets and seeds differ",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  Matrix x = random_probs(rng, 512, 1000, 0.5);  // flat-ish: repeats by chance are rare
  Params prm;
  prm.top_p = 0.95f;
  const Draws a = draw(Api::kTopP, x, prm, 7, {10, 10, 11});
  CHECK(a.samples[0] == a.samples[1]);
  long same = 0;
  for (int64_t r = 0; r < x.batch; ++r) same += a.samples[0][r] == a.samples[2][r];
  CHECK(same < x.batch / 10);
  const Draws b = draw(Api::kTopP, x, prm, 8, {10});
  same = 0;
  for (int64_t r = 0; r < x.batch; ++r) same += a.samples[0][r] == b.samples[0][r];
  CHECK(same < x.batch / 10);
  // Offsets beyond 32 bits use the counter's high word too.
  const Draws c = draw(Api::kTopP, x, prm, 7, {10 + (1ull << 32)});
  same = 0;
  for (int64_t r = 0; r < x.batch; ++r) same += a.samples[0][r] == c.samples[0][r];
  CHECK(same < x.batch / 10);
}

TEST_CASE("sampling gpu: with per-row seeds a row's draw does not depend on its position",
          "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = 64, vocab = 2000;
  Matrix x = random_probs(rng, batch, vocab, 1.0);
  std::vector<int64_t> perm(batch);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  Matrix y =
      make_matrix("fp32", batch, vocab, [&](int64_t r, int64_t i) { return x.at(perm[r], i); });
  std::vector<uint64_t> seeds(batch), seeds_y(batch);
  for (int64_t r = 0; r < batch; ++r) seeds[r] = 1000 + 17 * r;
  for (int64_t r = 0; r < batch; ++r) seeds_y[r] = seeds[perm[r]];
  Params prm;
  prm.top_p = 0.9f;
  const Draws dx = draw(Api::kTopP, x, prm, 0, {3}, false, seeds);
  const Draws dy = draw(Api::kTopP, y, prm, 0, {3}, false, seeds_y);
  for (int64_t r = 0; r < batch; ++r) CHECK(dy.samples[0][r] == dx.samples[0][perm[r]]);
}

TEST_CASE("sampling gpu: a captured graph draws fresh tokens when the offset changes",
          "[gpu][sampling]") {
  const auto& drv = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = 256, vocab = 32000;
  Matrix x = random_probs(rng, batch, vocab, 0.7);
  auto seed_dev = upload_vec(std::vector<uint64_t>{2024});
  auto offset_dev = upload_vec(std::vector<uint64_t>{0});
  DeviceBuffer samples_dev(batch * 4);
  auto seed_t = make_tensor(seed_dev->get(), {1}, dl_dtype("int64"));
  auto offset_t = make_tensor(offset_dev->get(), {1}, dl_dtype("int64"));
  auto samples_t = make_tensor(samples_dev.get(), {batch}, dl_dtype("int32"));
  CUstream s = nullptr;
  REQUIRE(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  auto call = [&] {
    return kjit_top_k_top_p_sampling_from_probs(x.t.get(), nullptr, nullptr, seed_t.get(),
                                                offset_t.get(), samples_t.get(), nullptr,
                                                SamplingOptions().top_k(100).top_p(0.9f), s);
  };
  // Direct calls at offsets 0 and 1: what the graph must reproduce.
  std::vector<std::vector<int32_t>> direct;
  for (uint64_t off : {0ull, 1ull}) {
    offset_dev->upload(&off, 8);
    REQUIRE(call() == KJIT_SUCCESS);  // also loads the kernel before capture
    REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
    direct.push_back(download_vec<int32_t>(samples_dev, batch));
  }
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  const kjit_status st = call();
  REQUIRE(drv.cuStreamEndCapture(s, &graph) == CUDA_SUCCESS);
  INFO(kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  REQUIRE(drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  std::vector<std::vector<int32_t>> replays;
  for (uint64_t off : {0ull, 1ull, 0ull}) {
    offset_dev->upload(&off, 8);
    samples_dev.fill(0xFF);
    REQUIRE(drv.cuGraphLaunch(exec, s) == CUDA_SUCCESS);
    REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
    replays.push_back(download_vec<int32_t>(samples_dev, batch));
  }
  CHECK(replays[0] == direct[0]);
  CHECK(replays[1] == direct[1]);
  CHECK(replays[2] == direct[0]);
  long same = 0;
  for (int64_t r = 0; r < batch; ++r) same += replays[0][r] == replays[1][r];
  CHECK(same < batch / 4);  // a bumped offset draws new tokens
  drv.cuGraphExecDestroy(exec);
  drv.cuGraphDestroy(graph);
  drv.cuStreamDestroy(s);
}

// ================================ the one-block and the cluster path ============================

namespace {

using kjit::ops::SamplePath;

// Whether the device runs thread-block clusters (sm_90+). Elsewhere a forced cluster path must
// be refused as unsupported, which is checked instead.
bool clusters_supported() {
  const auto& info = kjit::cuda::device_info(0);
  if (info.major >= 9) return true;
  std::mt19937_64 rng(1);
  Matrix x = random_probs(rng, 1, 1000, 1.0);
  auto seed_dev = upload_vec(std::vector<uint64_t>{1});
  auto offset_dev = upload_vec(std::vector<uint64_t>{0});
  DeviceBuffer out(8);
  auto seed_t = make_tensor(seed_dev->get(), {1}, dl_dtype("int64"));
  auto offset_t = make_tensor(offset_dev->get(), {1}, dl_dtype("int64"));
  auto out_t = make_tensor(out.get(), {1}, dl_dtype("int32"));
  ForcePath force(SamplePath::kCluster);
  CHECK(sample_tuned(Api::kPlain, x.t.get(), nullptr, nullptr, nullptr, nullptr, Params{},
                     seed_t.get(), offset_t.get(), out_t.get(), nullptr,
                     nullptr) == KJIT_ERROR_UNSUPPORTED);
  return false;
}

// Draws of one case on a forced path.
Draws draw_on(SamplePath path, int cluster, Api api, Matrix& x, const Params& prm, uint64_t seed,
              const std::vector<uint64_t>& offsets, std::vector<uint64_t> row_seeds = {}) {
  ForcePath force(path, cluster);
  Draws d = draw(api, x, prm, seed, offsets, false, std::move(row_seeds));
  if (path == SamplePath::kCluster && cluster > 0) {
    // The launch ran what was forced.
    CHECK(g_ran.cluster_kernel());
    CHECK(g_ran.cluster_size == cluster);
  }
  if (path == SamplePath::kSingle) CHECK_FALSE(g_ran.cluster_kernel());
  return d;
}

// The two paths must agree token for token: the thresholds are the same exact rule (integer
// histograms; fp64 masses that could differ only at ties within ~1e-16 of p * mass), and the
// draw runs on one block over the same per-segment fp32 masses.
void check_same(const Draws& single, const Draws& cluster) {
  REQUIRE(single.samples.size() == cluster.samples.size());
  long differ = 0, total = 0;
  for (size_t k = 0; k < single.samples.size(); ++k) {
    for (size_t r = 0; r < single.samples[k].size(); ++r) {
      ++total;
      const bool same = single.samples[k][r] == cluster.samples[k][r] &&
                        single.valid[k][r] == cluster.valid[k][r];
      if (!same && differ++ < 5) {
        UNSCOPED_INFO("draw " << k << " row " << r << ": one block " << single.samples[k][r]
                              << ", cluster " << cluster.samples[k][r]);
      }
    }
  }
  INFO(total << " draws compared");
  CHECK(total > 0);
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("sampling gpu: the cluster path draws the one-block path's tokens, all in the set",
          "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  std::mt19937_64 rng(std::random_device{}());
  // Odd and tiny vocabularies leave some blocks of a cluster without a segment; 3 and 5 split
  // the segments unevenly; 16 is the non-portable size.
  for (const int64_t vocab : vocabularies({1, 7, 4097, 32000, 128256, 151936})) {
    for (int64_t batch : {1, 3}) {
      Matrix x = random_probs(rng, batch, vocab, 3.0);
      std::vector<Params> ps(5);
      std::vector<Api> apis = {Api::kPlain, Api::kTopK, Api::kTopP, Api::kMinP, Api::kTopKTopP};
      ps[1].top_k = static_cast<int>(std::min<int64_t>(vocab, 50));
      ps[2].top_p = vocab > 1000 ? 0.9f : 0.5f;
      ps[3].min_p = 0.05f;
      ps[4].top_k = static_cast<int>(std::min<int64_t>(vocab, 500));
      ps[4].top_p = 0.8f;
      for (size_t c = 0; c < apis.size(); ++c) {
        INFO("vocab " << vocab << " batch " << batch << " api " << static_cast<int>(apis[c]));
        const auto offsets = range_offsets(100, 4);
        const Draws one = draw_on(SamplePath::kSingle, 0, apis[c], x, ps[c], 11, offsets);
        check_in_set(apis[c], x, ps[c], one);
        for (int n : cluster_sizes({0, 2, 3, 5, 8, 16})) {
          INFO("cluster " << n);
          const Draws cl = draw_on(SamplePath::kCluster, n, apis[c], x, ps[c], 11, offsets);
          check_in_set(apis[c], x, ps[c], cl);
          check_same(one, cl);
        }
      }
    }
  }
}

// Forces the samplers' top-p search for a scope (1: exact significand sums, 0: counts and mass
// bounds).
struct ForceMass {
  explicit ForceMass(int mass) {
    g_tuning.mass = mass;
    ++g_tuned_scopes;
  }
  ~ForceMass() {
    g_tuning.mass = -1;
    --g_tuned_scopes;
  }
  ForceMass(const ForceMass&) = delete;
  ForceMass& operator=(const ForceMass&) = delete;
};

// Rows that put the top-p threshold in awkward binades: all-equal weights (one key), weights
// that are all fp32 subnormals (the binade unit of exponent 1), two binades with ties in each,
// and a softmax row.
Matrix binade_rows(std::mt19937_64& rng, int64_t vocab) {
  std::uniform_real_distribution<double> tiny(1e-44, 1e-39), unit(0.0, 1.0);
  return make_matrix("fp32", 4, vocab, [&](int64_t r, int64_t i) {
    if (r == 0) return 1.0 / double(vocab);
    if (r == 1) return tiny(rng);
    if (r == 2) return i % 3 == 0 ? 0.25 : (i % 3 == 1 ? 0.125 : 0.0);
    return std::exp(4.0 * unit(rng));
  });
}

TEST_CASE("sampling gpu: the exact-mass top-p search draws the counting search's tokens",
          "[gpu][sampling][cluster]") {
  const bool clusters = clusters_supported();
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> n(0.0, 3.0);
  const auto offsets = range_offsets(40, 4);
  // Each case on the counting search (one block), then the exact one on one block and on
  // clusters: the same tokens, all in the reference set. With a top-k a forced exact search runs
  // the counting kernel (sample_mass), which the top-k case checks too.
  auto compare = [&](Api api, Matrix& x, const Params& prm) {
    Draws counted;
    {
      ForceMass bounds(0);
      counted = draw_on(SamplePath::kSingle, 0, api, x, prm, 5, offsets);
    }
    check_in_set(api, x, prm, counted);
    ForceMass exact(1);
    const Draws one = draw_on(SamplePath::kSingle, 0, api, x, prm, 5, offsets);
    check_in_set(api, x, prm, one);
    check_same(counted, one);
    if (!clusters) return;
    for (int c : cluster_sizes({2, 5, 16})) {
      INFO("cluster " << c);
      const Draws cl = draw_on(SamplePath::kCluster, c, api, x, prm, 5, offsets);
      check_in_set(api, x, prm, cl);
      check_same(counted, cl);
    }
  };
  // Under the sanitizer knob one spread and one p: racecheck takes seconds a launch.
  const std::vector<double> sigmas =
      under_sanitizer() ? std::vector<double>{2.0} : std::vector<double>{0.5, 2.0, 4.0};
  const std::vector<float> ps =
      under_sanitizer() ? std::vector<float>{0.9f} : std::vector<float>{0.9f, 0.3f, 0.999f};
  for (const int64_t vocab : vocabularies({7, 4097, 32000, 128256, 151936})) {
    for (const double sigma : sigmas) {
      Matrix x = random_probs(rng, 3, vocab, sigma);
      for (const float p : ps) {
        INFO("probs vocab " << vocab << " sigma " << sigma << " p " << p);
        Params prm;
        prm.top_p = p;
        compare(Api::kTopP, x, prm);
      }
      INFO("probs vocab " << vocab << " sigma " << sigma << " top-k 50 and top-p 0.8");
      Params kp;
      kp.top_k = static_cast<int>(std::min<int64_t>(vocab, 50));
      kp.top_p = 0.8f;
      compare(Api::kTopKTopP, x, kp);
    }
    Matrix b = binade_rows(rng, vocab);
    for (const float p : {0.5f, 0.9f}) {
      INFO("binade rows vocab " << vocab << " p " << p);
      Params prm;
      prm.top_p = p;
      compare(Api::kTopP, b, prm);
    }
    for (const char* dt : {"bf16", "fp32"}) {
      Matrix l = make_matrix(dt, 2, vocab, [&](int64_t, int64_t) { return n(rng); });
      INFO(dt << " logits vocab " << vocab);
      Params prm;
      prm.top_k = static_cast<int>(vocab);  // no top-k: the exact search runs
      prm.top_p = 0.9f;
      prm.temperature = 0.8f;
      compare(Api::kLogits, l, prm);
    }
  }
}

TEST_CASE("sampling gpu: cluster path with weights too small for the fixed-point mass",
          "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  std::mt19937_64 rng(std::random_device{}());
  // Rows near 1e-34 (all normal floats) have no fixed-point scale at any level (2^24 / max
  // overflows), so the top-p search bounds bins by counts alone and the cluster merges carry the
  // counts without the mass arrays; the draws must still be the one-block path's and in the set.
  for (const int64_t vocab : vocabularies({32000, 128256})) {
    const Matrix base = random_probs(rng, 3, vocab, 0.5);
    Matrix x =
        make_matrix("fp32", 3, vocab, [&](int64_t r, int64_t i) { return base.at(r, i) * 1e-30; });
    for (int64_t r = 0; r < x.batch; ++r) {
      const auto row = x.row(r);
      REQUIRE(*std::max_element(row.begin(), row.end()) < 1e-32);
      REQUIRE(*std::min_element(row.begin(), row.end()) > 1.2e-38);
    }
    std::vector<Params> ps(2);
    const std::vector<Api> apis = {Api::kTopP, Api::kTopKTopP};
    ps[0].top_p = 0.9f;
    ps[1].top_k = 500;
    ps[1].top_p = 0.8f;
    for (size_t c = 0; c < apis.size(); ++c) {
      INFO("vocab " << vocab << " api " << static_cast<int>(apis[c]));
      const auto offsets = range_offsets(300, 4);
      const Draws one = draw_on(SamplePath::kSingle, 0, apis[c], x, ps[c], 12, offsets);
      check_in_set(apis[c], x, ps[c], one);
      for (int n : cluster_sizes({2, 3, 8, 16})) {
        INFO("cluster " << n);
        const Draws cl = draw_on(SamplePath::kCluster, n, apis[c], x, ps[c], 12, offsets);
        check_in_set(apis[c], x, ps[c], cl);
        check_same(one, cl);
      }
    }
  }
}

TEST_CASE("sampling gpu: cluster path from logits (fp32, bf16, fp16), per-row parameters",
          "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> nd(0.0, 2.0);
  const int64_t batch = 6;
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (const int64_t vocab : vocabularies({4099, 128256})) {
      Matrix x = make_matrix(dt, batch, vocab, [&](int64_t, int64_t) { return nd(rng); });
      Params prm;
      prm.top_k_rows = {50, 0, 1, 1000, int(vocab), 20};
      prm.top_p_rows = {0.9f, 0.5f, 1.0f, 0.95f, 0.3f, 1.0f};
      prm.temp_rows = {1.0f, 0.7f, 1.3f, 2.0f, 0.5f, 1.0f};
      INFO(dt << " vocab " << vocab);
      const auto offsets = range_offsets(5, 4);
      const Draws one = draw_on(SamplePath::kSingle, 0, Api::kLogits, x, prm, 21, offsets);
      check_in_set(Api::kLogits, x, prm, one);
      for (int n : cluster_sizes({0, 4, 16})) {
        INFO("cluster " << n);
        const Draws cl = draw_on(SamplePath::kCluster, n, Api::kLogits, x, prm, 21, offsets);
        check_in_set(Api::kLogits, x, prm, cl);
        check_same(one, cl);
      }
      // Greedy rows (temperature 0) take the first maximum on both paths.
      Params g = prm;
      g.temp_rows = {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f};
      const Draws g1 = draw_on(SamplePath::kSingle, 0, Api::kLogits, x, g, 22, {0});
      const Draws g2 =
          draw_on(SamplePath::kCluster, sanitizer_cluster(16), Api::kLogits, x, g, 22, {0});
      check_same(g1, g2);
      for (int64_t r : {0, 1, 3, 4, 5}) {
        const auto row = x.row(r);
        const int64_t want = std::max_element(row.begin(), row.end()) - row.begin();
        CHECK(g2.samples[0][r] == want);
      }
    }
  }
}

// Caps the blocks an SM runs on the one-block path for a scope (SampleTuning::blocks_per_sm).
template <int kjit::ops::SampleTuning::*Field>
struct ForceTuning {
  explicit ForceTuning(int v) {
    g_tuning.*Field = v;
    ++g_tuned_scopes;
  }
  ~ForceTuning() {
    g_tuning.*Field = 0;
    --g_tuned_scopes;
  }
  ForceTuning(const ForceTuning&) = delete;
  ForceTuning& operator=(const ForceTuning&) = delete;
};
using ForceBlocksPerSm = ForceTuning<&kjit::ops::SampleTuning::blocks_per_sm>;
using ForceThreads = ForceTuning<&kjit::ops::SampleTuning::threads>;

TEST_CASE("sampling gpu: a blocks-per-SM cap draws the one-block path's tokens",
          "[gpu][sampling]") {
  // The cap only pads shared memory (fewer rows in flight); the kernel and its sums are the same.
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> nd(0.0, 2.0);
  const int64_t batch = sanitizer_batch(300), vocab = sanitizer_vocab(32768);
  Matrix probs = random_probs(rng, batch, vocab, 2.0);
  Matrix logits = make_matrix("bf16", batch, vocab, [&](int64_t, int64_t) { return nd(rng); });
  Params pp, lp;
  pp.top_p = 0.9f;
  lp.top_k = 50;
  lp.top_p = 0.9f;
  const auto offsets = range_offsets(7, 2);
  const Draws p0 = draw_on(SamplePath::kSingle, 0, Api::kTopP, probs, pp, 31, offsets);
  const Draws l0 = draw_on(SamplePath::kSingle, 0, Api::kLogits, logits, lp, 32, offsets);
  for (int blocks : {1, 2, 3}) {
    INFO("blocks_per_sm " << blocks);
    ForceBlocksPerSm cap(blocks);
    const Draws p1 = draw_on(SamplePath::kSingle, 0, Api::kTopP, probs, pp, 31, offsets);
    check_in_set(Api::kTopP, probs, pp, p1);
    check_same(p0, p1);
    const Draws l1 = draw_on(SamplePath::kSingle, 0, Api::kLogits, logits, lp, 32, offsets);
    check_in_set(Api::kLogits, logits, lp, l1);
    check_same(l0, l1);
  }
}

TEST_CASE("sampling gpu: the integer draw is the same at every block size and search",
          "[gpu][sampling]") {
  // The draw sums fixed-point weights (sampling.cuh, fixed_weight), so a row's token depends
  // neither on how its segments are shared among a block's threads (64 threads: fewer than the
  // segments), nor on who summed the segments: the exact top-p list's pass (one block: the fused
  // list), a pass of their own (a list too small for the window; the counting search), or either
  // with min-p beside top-p, whose threshold above the list's window turns the fused sums off.
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = sanitizer_batch(48);
  const auto offsets = range_offsets(11, 3);
  for (const int64_t vocab : vocabularies({4097, 128256})) {
    for (const double sigma : {2.0, 4.0}) {
      INFO("vocab " << vocab << " sigma " << sigma);
      Matrix x = random_probs(rng, batch, vocab, sigma);
      Params prm;
      prm.top_p = 0.9f;
      // min-p 0 (off) on a quarter of the rows, else 2^-1 .. 2^-11 (1 keeps the maxima alone).
      for (int64_t r = 0; r < batch; ++r) {
        prm.min_p_rows.push_back(r % 4 == 0 ? 0.0f : std::ldexp(1.0f, -static_cast<int>(r % 12)));
      }
      Draws base;
      {
        ForceMass counted(0);
        base = draw_on(SamplePath::kSingle, 0, Api::kTopPMinP, x, prm, 9, offsets);
      }
      check_in_set(Api::kTopPMinP, x, prm, base);
      for (const int mass : {0, 1}) {
        for (const int threads : {64, 256, 1024}) {
          INFO("mass " << mass << " threads " << threads);
          ForceMass m(mass);
          ForceThreads t(threads);
          const Draws d = draw_on(SamplePath::kSingle, 0, Api::kTopPMinP, x, prm, 9, offsets);
          check_same(base, d);
        }
      }
    }
  }
}

TEST_CASE("sampling gpu: cluster path reports the same invalid rows", "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  const int64_t batch = 5, vocab = sanitizer_vocab(128256);
  std::mt19937_64 rng(std::random_device{}());
  Matrix ok = random_probs(rng, batch, vocab, 1.0);
  // Row 0 valid, 1 a NaN in the last block's share, 2 negative, 3 all zero, 4 +Inf.
  Matrix x = make_matrix("fp32", batch, vocab, [&](int64_t r, int64_t i) {
    if (r == 1 && i == vocab - 3) return kNaN;
    if (r == 2 && i == (vocab > 70000 ? 70000 : vocab / 2)) return -0.5;
    if (r == 3) return 0.0;
    if (r == 4 && i == 9) return kInf;
    return ok.at(r, i);
  });
  Params prm;
  prm.top_p = 0.9f;
  const Draws one = draw_on(SamplePath::kSingle, 0, Api::kTopP, x, prm, 3, {0, 1});
  for (int n : {sanitizer_cluster(16), 2}) {
    INFO("cluster " << n);
    const Draws cl = draw_on(SamplePath::kCluster, n, Api::kTopP, x, prm, 3, {0, 1});
    check_same(one, cl);
    for (size_t k = 0; k < 2; ++k) {
      CHECK(cl.valid[k][0] == 1);
      for (int64_t r = 1; r < batch; ++r) {
        CHECK(cl.valid[k][r] == 0);
        CHECK(cl.samples[k][r] == -1);
      }
    }
  }
}

TEST_CASE("sampling gpu: cluster path draws follow the renormalized distribution",
          "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  // 24 tokens with weight spread over the whole row (so every block of the cluster holds some),
  // the rest exactly zero; 512 identical rows x 200 offsets.
  const int64_t vocab = sanitizer_vocab(128256), batch = sanitizer_batch(512), kTokens = 24;
  std::vector<double> base(vocab, 0.0);
  double s = 0;
  for (int64_t j = 0; j < kTokens; ++j) {
    const double w = 1.0 / (1.0 + j) + (j % 3 == 0 ? 0.05 : 0.0);
    base[static_cast<size_t>(j * (vocab / kTokens) + (37 * j) % (vocab / kTokens))] = w;
    s += w;
  }
  for (double& v : base) v /= s;
  Matrix x = make_matrix("fp32", batch, vocab, [&](int64_t, int64_t i) { return base[i]; });
  const auto offsets = range_offsets(2000, 200);
  std::vector<std::pair<Api, Params>> cases(4);
  cases[0].first = Api::kPlain;
  cases[1].first = Api::kTopK;
  cases[1].second.top_k = 7;
  cases[2].first = Api::kTopP;
  cases[2].second.top_p = 0.6f;
  cases[3].first = Api::kTopKTopP;
  cases[3].second.top_k = 12;
  cases[3].second.top_p = 0.7f;
  for (int n : cluster_sizes({4, 16})) {
    for (const auto& c : cases) {
      INFO("cluster " << n << " api " << static_cast<int>(c.first));
      const auto w = weights_of(c.first, x.row(0), 1.0);
      const auto keep = ref::keep_sets(w, spec_of(c.first, c.second, 0));
      for (auto k : keep) REQUIRE(k != ref::Keep::kMay);
      check_distribution(draw_on(SamplePath::kCluster, n, c.first, x, c.second, 91, offsets),
                         ref::target_distribution(w, keep), vocab);
    }
  }
}

TEST_CASE("sampling gpu: cluster path is deterministic, per-row seeds ignore the position",
          "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = 12, vocab = sanitizer_vocab(128256);
  Matrix x = random_probs(rng, batch, vocab, 0.3);  // flat-ish: repeats by chance are rare
  Params prm;
  prm.top_p = 0.95f;
  const Draws a =
      draw_on(SamplePath::kCluster, sanitizer_cluster(8), Api::kTopP, x, prm, 7, {10, 10, 11});
  CHECK(a.samples[0] == a.samples[1]);
  long same = 0;
  for (int64_t r = 0; r < batch; ++r) same += a.samples[0][r] == a.samples[2][r];
  CHECK(same <= 1);
  std::vector<int64_t> perm(batch);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  Matrix y =
      make_matrix("fp32", batch, vocab, [&](int64_t r, int64_t i) { return x.at(perm[r], i); });
  std::vector<uint64_t> seeds(batch), seeds_y(batch);
  for (int64_t r = 0; r < batch; ++r) seeds[r] = 1000 + 17 * r;
  for (int64_t r = 0; r < batch; ++r) seeds_y[r] = seeds[perm[r]];
  const int n = sanitizer_cluster(16);
  const Draws dx = draw_on(SamplePath::kCluster, n, Api::kTopP, x, prm, 0, {3}, seeds);
  const Draws dy = draw_on(SamplePath::kCluster, n, Api::kTopP, y, prm, 0, {3}, seeds_y);
  const Draws d1 = draw_on(SamplePath::kSingle, 0, Api::kTopP, y, prm, 0, {3}, seeds_y);
  for (int64_t r = 0; r < batch; ++r) CHECK(dy.samples[0][r] == dx.samples[0][perm[r]]);
  check_same(d1, dy);
}

TEST_CASE("sampling gpu: cluster path replays in a captured graph, auto batch 1 matches",
          "[gpu][sampling][cluster]") {
  if (!clusters_supported()) return;
  const auto& drv = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  const int64_t batch = 2, vocab = sanitizer_vocab(128256);
  Matrix x = random_probs(rng, batch, vocab, 0.7);
  auto seed_dev = upload_vec(std::vector<uint64_t>{2024});
  auto offset_dev = upload_vec(std::vector<uint64_t>{0});
  DeviceBuffer samples_dev(batch * 4);
  auto seed_t = make_tensor(seed_dev->get(), {1}, dl_dtype("int64"));
  auto offset_t = make_tensor(offset_dev->get(), {1}, dl_dtype("int64"));
  auto samples_t = make_tensor(samples_dev.get(), {batch}, dl_dtype("int32"));
  CUstream s = nullptr;
  REQUIRE(drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Params prm;
  prm.top_k = 1000;
  prm.top_p = 0.9f;
  auto call = [&] {  // always under a ForcePath
    return sample_tuned(Api::kTopKTopP, x.t.get(), nullptr, nullptr, nullptr, nullptr, prm,
                        seed_t.get(), offset_t.get(), samples_t.get(), nullptr, s);
  };
  auto run_direct = [&](SamplePath path, int n) {
    ForcePath force(path, n);
    std::vector<std::vector<int32_t>> out;
    for (uint64_t off = 0; off < 8; ++off) {
      offset_dev->upload(&off, 8);
      REQUIRE(call() == KJIT_SUCCESS);
      REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
      out.push_back(download_vec<int32_t>(samples_dev, batch));
    }
    return out;
  };
  const auto single = run_direct(SamplePath::kSingle, 0);
  // Under the sanitizer knob the automatic path is the one-block path: at batch 2 auto picks a
  // 16-block cluster, minutes a launch under racecheck; the forced cluster below runs.
  CHECK(run_direct(sanitizer_auto_path(), 0) == single);
  // auto splits a batch of 2 on sm_90+ (at the full vocabulary)
  if (!under_sanitizer()) CHECK(g_ran.cluster_size > 1);
  CHECK(run_direct(SamplePath::kCluster, sanitizer_cluster(16)) == single);
  long same = 0;
  for (size_t k = 1; k < single.size(); ++k) same += single[k] == single[0];
  CHECK(same < 3);  // the offsets draw different tokens

  ForcePath force(SamplePath::kCluster, sanitizer_cluster(16));
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  const kjit_status st = call();
  REQUIRE(drv.cuStreamEndCapture(s, &graph) == CUDA_SUCCESS);
  INFO(kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  REQUIRE(drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  for (uint64_t off : {0ull, 1ull, 5ull, 0ull}) {
    offset_dev->upload(&off, 8);
    samples_dev.fill(0xFF);
    REQUIRE(drv.cuGraphLaunch(exec, s) == CUDA_SUCCESS);
    REQUIRE(drv.cuStreamSynchronize(s) == CUDA_SUCCESS);
    CHECK(download_vec<int32_t>(samples_dev, batch) == single[off]);
  }
  drv.cuGraphExecDestroy(exec);
  drv.cuGraphDestroy(graph);
  drv.cuStreamDestroy(s);
}

// ================================ renorm, mask, softmax, argmax =================================

TEST_CASE("sampling gpu: top-k / top-p renormalization matches the reference", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t vocab : {7, 1000, 128256}) {
    Matrix x = random_probs(rng, 16, vocab, 2.0);
    for (int mode = 0; mode < 2; ++mode) {
      DeviceBuffer out(static_cast<size_t>(x.batch * vocab) * 4);
      out.fill(0xFF);
      auto out_t = make_tensor(out.get(), {x.batch, vocab}, dl_dtype("fp32"));
      Params prm;
      prm.top_k = 30;
      prm.top_p = 0.7f;
      const kjit_status st =
          mode == 0 ? kjit_top_k_renorm_probs(x.t.get(), nullptr, out_t.get(),
                                              SamplingOptions().top_k(prm.top_k), nullptr)
                    : kjit_top_p_renorm_probs(x.t.get(), nullptr, out_t.get(),
                                              SamplingOptions().top_p(prm.top_p), nullptr);
      INFO(kjit_last_error());
      REQUIRE(st == KJIT_SUCCESS);
      device_synchronize();
      const auto got = download_vec<float>(out, static_cast<size_t>(x.batch * vocab));
      long bad = 0, in_band = 0, not_a_threshold = 0;
      for (int64_t r = 0; r < x.batch; ++r) {
        const auto w = x.row(r);
        const auto keep = ref::keep_sets(w, spec_of(mode == 0 ? Api::kTopK : Api::kTopP, prm, r));
        const ref::RenormCheck c = ref::check_renorm_row(w, keep, got.data() + r * vocab);
        if (c.bad > 0) {
          UNSCOPED_INFO("row " << r << ": " << c.bad << " bad, first col " << c.first_bad << " got "
                               << c.first_got << " want " << c.first_want);
        }
        bad += c.bad;
        in_band += c.in_band;
        not_a_threshold += !c.threshold;
        CHECK(std::fabs(c.sum - 1.0) < 1e-3);
      }
      INFO("vocab " << vocab << " mode " << mode << ": " << in_band << " tokens in the band");
      CHECK(bad == 0);
      CHECK(not_a_threshold == 0);
    }
  }
  // In place, and an all-zero row written as zeros.
  Matrix z = make_matrix("fp32", 2, 100, [](int64_t r, int64_t i) { return r == 0 ? 0.0 : i; });
  REQUIRE(kjit_top_k_renorm_probs(z.t.get(), nullptr, z.t.get(), SamplingOptions().top_k(10),
                                  nullptr) == KJIT_SUCCESS);
  device_synchronize();
  std::vector<float> zh(200);
  z.dev->download(zh.data(), 800);
  for (int i = 0; i < 100; ++i) CHECK(zh[i] == 0.0f);
  for (int i = 0; i < 100; ++i) CHECK(zh[100 + i] == (i >= 90 ? Approx(i / 945.0) : Approx(0)));
}

TEST_CASE("sampling gpu: top-k logit masking keeps ties and copies NaN rows", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> q(-40, 40);
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (int64_t vocab : {7, 1000, 32000}) {
      // Quantized logits: many exact ties at any boundary.
      Matrix x = make_matrix(dt, 9, vocab, [&](int64_t r, int64_t i) {
        return r == 8 && i == 3 ? kNaN : q(rng) / 4.0;
      });
      std::vector<int32_t> ks = {1, 2, 5, 33, static_cast<int32_t>(vocab), 0, -3, 100, 5};
      auto k_dev = upload_vec(ks);
      auto k_t = make_tensor(k_dev->get(), {9}, dl_dtype("int32"));
      DeviceBuffer out(static_cast<size_t>(9 * vocab) * ref::elem_size(dt));
      // Poison: 0x7B in every byte is a finite 1.3e36 in fp32 and bf16 and 61280 in fp16, none of
      // them a logit here, -inf or the NaN a NaN row keeps: an element left unwritten fails.
      out.fill(0x7B);
      auto out_t = make_tensor(out.get(), {9, vocab}, dl_dtype(dt));
      REQUIRE(kjit_top_k_mask_logits(x.t.get(), k_t.get(), out_t.get(), SamplingOptions().top_k(1),
                                     nullptr) == KJIT_SUCCESS);
      device_synchronize();
      std::vector<unsigned char> got(out.size());
      out.download(got.data(), got.size());
      long bad = 0;
      for (int64_t r = 0; r < 9; ++r) {
        auto row = x.row(r);
        std::vector<double> sorted(row);
        std::sort(sorted.begin(), sorted.end(), std::greater<double>());
        const int k = ks[r];
        const bool off = k <= 0 || k >= vocab || r == 8;
        const double vk = off ? -kInf : sorted[static_cast<size_t>(k) - 1];
        for (int64_t i = 0; i < vocab; ++i) {
          const double g = ref::load_elem(got.data(), static_cast<size_t>(r * vocab + i), dt);
          const double want = row[i] >= vk || std::isnan(row[i]) ? row[i] : -kInf;
          const bool ok = std::isnan(want) ? std::isnan(g) : g == want;
          if (!ok && bad++ < 5) UNSCOPED_INFO(dt << " row " << r << " col " << i << " got " << g);
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("sampling gpu: softmax with temperature matches fp64", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> n(0.0, 4.0);
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (int64_t vocab : {1, 7, 1000, 128256}) {
      Matrix x = make_matrix(dt, 6, vocab, [&](int64_t r, int64_t i) {
        if (r == 4 && i == 0) return kNaN;
        if (r == 5) return i == 0 ? 1.0 : -kInf;
        return n(rng);
      });
      const std::vector<float> temps = {1.0f, 0.5f, 2.0f, 0.0f, 1.0f, 1.0f};  // row 3: invalid
      auto t_dev = upload_vec(temps);
      auto t_t = make_tensor(t_dev->get(), {6}, dl_dtype("fp32"));
      DeviceBuffer out(static_cast<size_t>(6 * vocab) * 4);
      // Poison: 0x7B7B7B7B is fp32 1.3e36, neither a probability nor the NaN of an invalid row
      // (row 3), nor the zeros row 5 expects, so an element left unwritten fails on every row.
      out.fill(0x7B);
      auto out_t = make_tensor(out.get(), {6, vocab}, dl_dtype("fp32"));
      REQUIRE(kjit_softmax(x.t.get(), t_t.get(), out_t.get(), SamplingOptions().temperature(1.0f),
                           nullptr) == KJIT_SUCCESS);
      device_synchronize();
      const auto got = download_vec<float>(out, static_cast<size_t>(6 * vocab));
      long bad = 0;
      for (int64_t r = 0; r < 6; ++r) {
        const auto want = r == 3 ? std::vector<double>{} : ref::softmax(x.row(r), temps[r]);
        for (int64_t i = 0; i < vocab; ++i) {
          const double g = got[r * vocab + i];
          const bool ok =
              want.empty() ? std::isnan(g) : std::fabs(g - want[i]) <= 2e-5 * want[i] + 1e-30;
          if (!ok && bad++ < 5) UNSCOPED_INFO(dt << " row " << r << " col " << i << " got " << g);
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("sampling gpu: argmax is torch.argmax (first maximum, NaN largest)", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> q(-1000, 1000);
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (int64_t vocab : {1, 7, 1000, 128256, 262147}) {
      for (bool misaligned : {false, true}) {
        const int64_t batch = 70;
        Matrix x = make_matrix(
            dt, batch, vocab,
            [&](int64_t r, int64_t i) {
              if (r == 1 && (i == vocab / 2 || i == vocab - 1)) return kNaN;
              if (r == 2) return 1.0;  // all ties: index 0
              if (r == 3) return i == vocab - 1 ? 2.0 : -kInf;
              return q(rng) / 8.0;  // many ties among maxima
            },
            misaligned ? vocab + 1 : 0, misaligned ? 1 : 0);
        for (const char* ot : {"int32", "int64"}) {
          DeviceBuffer out(batch * 8);
          out.fill(0xFF);
          auto out_t = make_tensor(out.get(), {batch}, dl_dtype(ot));
          REQUIRE(kjit_argmax(x.t.get(), out_t.get(), nullptr) == KJIT_SUCCESS);
          device_synchronize();
          std::vector<int64_t> got(batch);
          if (std::string(ot) == "int64") {
            got = download_vec<int64_t>(out, batch);
          } else {
            auto g32 = download_vec<int32_t>(out, batch);
            std::copy(g32.begin(), g32.end(), got.begin());
          }
          for (int64_t r = 0; r < batch; ++r) {
            INFO(dt << " vocab " << vocab << " row " << r << " " << ot);
            CHECK(got[r] == ref::argmax(x.row(r)));
          }
        }
      }
    }
  }
}
