// GPU tests of kjit_chain_speculative_sampling against the CPU reference (ref::chain_speculative,
// written from kjit.h): each request's kept draft tokens, the -1 tail, the accepted / emitted
// counts exactly, and the drawn token as the reference draws it with the same Philox numbers
// (or a neighbour when u * total falls within rounding of a boundary). A distribution test checks
// the property speculative sampling exists for: the first output token follows the target's p_0
// whatever the draft model proposed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

struct SpecCase {
  int64_t batch = 4, n = 4, vocab = 1000;
  int64_t step_pad = 0;       // elements after each step's row of probabilities
  bool per_row_seed = false;  // seed / offset [batch] instead of [1]
  bool counts = true;         // pass accepted / emitted
  double agree = 0.5;         // draft and target share this fraction of their mass
  bool bad_ids = false;       // some draft ids outside [0, vocab)
};

template <class T>
std::unique_ptr<DeviceBuffer> upload(const std::vector<T>& v) {
  auto d = std::make_unique<DeviceBuffer>(std::max<size_t>(1, v.size() * sizeof(T)));
  if (!v.empty()) d->upload(v.data(), v.size() * sizeof(T));
  return d;
}

// Random non-negative rows (many tiny values, a few large), unnormalized.
void random_row(float* row, int64_t vocab, std::mt19937_64& rng) {
  std::exponential_distribution<float> e(1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t v = 0; v < vocab; ++v) row[v] = u(rng) < 0.05f ? e(rng) * 20.0f : e(rng) * 0.01f;
}

void run_case(const SpecCase& c, std::mt19937_64& rng) {
  INFO("batch=" << c.batch << " n=" << c.n << " vocab=" << c.vocab << " pad=" << c.step_pad
                << (c.per_row_seed ? " per-row seeds" : "") << " agree=" << c.agree
                << (c.bad_ids ? " bad ids" : ""));
  const int64_t B = c.batch, n = c.n, V = c.vocab, rs = V + c.step_pad;
  // Host copies in the reference's layout ([n or n + 1, vocab] per request).
  std::vector<float> draft(static_cast<size_t>(B * n * V)),
      target(static_cast<size_t>(B * (n + 1) * V));
  std::vector<int32_t> ids(static_cast<size_t>(B * n));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i <= n; ++i) {
      float* t = &target[static_cast<size_t>((b * (n + 1) + i) * V)];
      random_row(t, V, rng);
      if (i == n) break;
      float* q = &draft[static_cast<size_t>((b * n + i) * V)];
      random_row(q, V, rng);
      for (int64_t v = 0; v < V; ++v)
        q[v] = static_cast<float>(c.agree * t[v] + (1 - c.agree) * q[v]);
      // The draft token: drawn from q (as a draft model would), sometimes out of range.
      double total = 0;
      for (int64_t v = 0; v < V; ++v) total += q[v];
      double goal = u01(rng) * total, run = 0;
      int32_t d = static_cast<int32_t>(V - 1);
      for (int64_t v = 0; v < V; ++v) {
        run += q[v];
        if (goal < run) {
          d = static_cast<int32_t>(v);
          break;
        }
      }
      if (c.bad_ids && u01(rng) < 0.3) d = u01(rng) < 0.5 ? -1 : static_cast<int32_t>(V + 5);
      ids[static_cast<size_t>(b * n + i)] = d;
    }
  }
  // Device copies with padded steps.
  auto padded = [&](const std::vector<float>& h, int64_t steps) {
    std::vector<float> out(static_cast<size_t>(B * steps * rs), std::nanf(""));
    for (int64_t r = 0; r < B * steps; ++r) {
      std::memcpy(&out[static_cast<size_t>(r * rs)], &h[static_cast<size_t>(r * V)],
                  static_cast<size_t>(V) * sizeof(float));
    }
    return out;
  };
  auto dd = upload(padded(draft, n)), td = upload(padded(target, n + 1)), idd = upload(ids);
  const int64_t ns = c.per_row_seed ? B : 1;
  std::vector<uint64_t> seeds(static_cast<size_t>(ns)), offsets(static_cast<size_t>(ns));
  for (auto& s : seeds) s = rng();
  for (auto& o : offsets) o = rng() >> 8;
  auto sd = upload(seeds), od = upload(offsets);
  DeviceBuffer outd(static_cast<size_t>(B * (n + 1)) * 4), accd(static_cast<size_t>(B) * 4),
      emid(static_cast<size_t>(B) * 4);
  for (DeviceBuffer* d : {&outd, &accd, &emid}) d->fill(0x7F);  // poison

  Tensor dp = make_tensor(dd->get(), {B, n, V}, dl_dtype("fp32"), {n * rs, rs, 1});
  Tensor tp = make_tensor(td->get(), {B, n + 1, V}, dl_dtype("fp32"), {(n + 1) * rs, rs, 1});
  Tensor it = make_tensor(idd->get(), {B, n}, dl_dtype("int32"));
  Tensor st = make_tensor(sd->get(), {ns}, dl_dtype("int64"));
  Tensor ot = make_tensor(od->get(), {ns}, dl_dtype("int64"));
  Tensor out = make_tensor(outd.get(), {B, n + 1}, dl_dtype("int32"));
  Tensor acc = make_tensor(accd.get(), {B}, dl_dtype("int32"));
  Tensor emi = make_tensor(emid.get(), {B}, dl_dtype("int32"));
  REQUIRE(kjit_chain_speculative_sampling(dp.get(), it.get(), tp.get(), st.get(), ot.get(),
                                          out.get(), c.counts ? acc.get() : nullptr,
                                          c.counts ? emi.get() : nullptr, nullptr) == KJIT_SUCCESS);
  device_synchronize();
  std::vector<int32_t> got(static_cast<size_t>(B * (n + 1))), got_acc(static_cast<size_t>(B)),
      got_emi(static_cast<size_t>(B));
  outd.download(got.data(), got.size() * 4);
  accd.download(got_acc.data(), got_acc.size() * 4);
  emid.download(got_emi.data(), got_emi.size() * 4);

  long bad = 0, neighbours = 0;
  for (int64_t b = 0; b < B; ++b) {
    const size_t s = c.per_row_seed ? static_cast<size_t>(b) : 0;
    const ref::SpeculativeRow want = ref::chain_speculative(
        &draft[static_cast<size_t>(b * n * V)], &ids[static_cast<size_t>(b * n)],
        &target[static_cast<size_t>(b * (n + 1) * V)], static_cast<int>(n), static_cast<int>(V),
        seeds[s], offsets[s], c.per_row_seed ? 0u : static_cast<uint32_t>(b));
    for (int64_t i = 0; i <= n; ++i) {
      const int32_t g = got[static_cast<size_t>(b * (n + 1) + i)];
      const bool ok =
          i == want.pos ? ref::speculative_draw_ok(want, g) : g == want.out[static_cast<size_t>(i)];
      if (ok && i == want.pos && g != want.out[static_cast<size_t>(i)]) ++neighbours;
      if (!ok && bad++ < 5) {
        UNSCOPED_INFO("request " << b << " position " << i << ": got " << g << ", want "
                                 << want.out[static_cast<size_t>(i)] << " (drawn at " << want.pos
                                 << ")");
      }
    }
    if (c.counts) {
      CHECK(got_acc[static_cast<size_t>(b)] == want.accepted);
      CHECK(got_emi[static_cast<size_t>(b)] == want.emitted);
    } else {
      CHECK(got_acc[static_cast<size_t>(b)] == 0x7F7F7F7F);  // not written
    }
  }
  CHECK(bad == 0);
  CHECK(neighbours <= 1);
}

}  // namespace

TEST_CASE("speculative gpu: outputs and counts equal the reference", "[gpu][sampling]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int64_t n : {1, 2, 4, 8, 31}) {
    for (int64_t vocab : {1, 7, 1000, 32000}) {
      for (double agree : {0.0, 0.5, 0.95}) {
        SpecCase c;
        c.n = n;
        c.vocab = vocab;
        c.agree = agree;
        c.batch = n == 31 ? 3 : 9;
        run_case(c, rng);
      }
    }
  }
  SpecCase big;  // Llama 3's vocabulary, a decode batch, per-request seeds, padded steps
  big.batch = 64;
  big.vocab = 128256;
  big.n = 4;
  big.per_row_seed = true;
  big.step_pad = 16;
  run_case(big, rng);
  SpecCase odd;  // out-of-range draft ids are rejected; no counts asked for
  odd.bad_ids = true;
  odd.counts = false;
  odd.batch = 33;
  odd.vocab = 4099;
  odd.step_pad = 3;
  run_case(odd, rng);
}

TEST_CASE("speculative gpu: equal models accept everything, empty and NaN rows give -1",
          "[gpu][sampling]") {
  const int64_t n = 3, V = 64;
  std::vector<float> probs(static_cast<size_t>((n + 1) * V));
  std::mt19937_64 rng(7);
  for (int64_t i = 0; i <= n; ++i) random_row(&probs[static_cast<size_t>(i * V)], V, rng);
  std::vector<float> draft(probs.begin(), probs.begin() + n * V);
  std::vector<int32_t> ids = {5, 17, 40};
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<float> target = probs;
    // 0: identical models; 1: the bonus step all zero; 2: a NaN in the bonus step.
    if (variant == 1) std::fill(target.begin() + n * V, target.end(), 0.0f);
    if (variant == 2) target[static_cast<size_t>(n * V + 9)] = std::nanf("");
    auto dd = upload(draft), td = upload(target), idd = upload(ids);
    auto sd = upload(std::vector<uint64_t>{42}), od = upload(std::vector<uint64_t>{3});
    DeviceBuffer outd(static_cast<size_t>(n + 1) * 4), accd(4), emid(4);
    outd.fill(0x7F);
    Tensor dp = make_tensor(dd->get(), {1, n, V}, dl_dtype("fp32"));
    Tensor tp = make_tensor(td->get(), {1, n + 1, V}, dl_dtype("fp32"));
    Tensor it = make_tensor(idd->get(), {1, n}, dl_dtype("int32"));
    Tensor st = make_tensor(sd->get(), {1}, DLDataType{kDLUInt, 64, 1});
    Tensor ot = make_tensor(od->get(), {1}, DLDataType{kDLUInt, 64, 1});
    Tensor out = make_tensor(outd.get(), {1, n + 1}, dl_dtype("int32"));
    Tensor acc = make_tensor(accd.get(), {1}, dl_dtype("int32"));
    Tensor emi = make_tensor(emid.get(), {1}, dl_dtype("int32"));
    REQUIRE(kjit_chain_speculative_sampling(dp.get(), it.get(), tp.get(), st.get(), ot.get(),
                                            out.get(), acc.get(), emi.get(),
                                            nullptr) == KJIT_SUCCESS);
    device_synchronize();
    std::vector<int32_t> got(static_cast<size_t>(n + 1));
    int32_t a = -2, e = -2;
    outd.download(got.data(), got.size() * 4);
    accd.download(&a, 4);
    emid.download(&e, 4);
    INFO("variant " << variant);
    CHECK(a == n);  // q(d) > 0 and p(d) = q(d): u * q < p for every u < 1
    CHECK(e == n);
    for (int64_t i = 0; i < n; ++i) CHECK(got[static_cast<size_t>(i)] == ids[i]);
    if (variant == 0) {
      CHECK(got[n] >= 0);
      CHECK(got[n] < V);
    } else {
      CHECK(got[n] == -1);
    }
  }
}

TEST_CASE("speculative gpu: the first output token follows the target distribution",
          "[gpu][sampling]") {
  // 20000 requests share one draft / target pair of 6-token distributions that disagree a lot;
  // each has its own seed. Whatever the draft proposed, the first output token (kept draft token
  // or residual draw) must be distributed as the normalized p_0.
  const int64_t B = 20000, n = 2, V = 6;
  const std::vector<float> p0 = {0.05f, 0.30f, 0.10f, 0.25f, 0.00f, 0.30f};
  const std::vector<float> q0 = {0.40f, 0.05f, 0.20f, 0.05f, 0.20f, 0.10f};
  std::vector<float> draft(static_cast<size_t>(B * n * V)),
      target(static_cast<size_t>(B * (n + 1) * V));
  std::vector<int32_t> ids(static_cast<size_t>(B * n));
  std::mt19937_64 rng(std::random_device{}());
  std::discrete_distribution<int> draw_q(q0.begin(), q0.end());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i <= n; ++i) {
      std::memcpy(&target[static_cast<size_t>((b * (n + 1) + i) * V)], p0.data(), V * 4);
      if (i < n) {
        std::memcpy(&draft[static_cast<size_t>((b * n + i) * V)], q0.data(), V * 4);
        ids[static_cast<size_t>(b * n + i)] = draw_q(rng);
      }
    }
  }
  std::vector<uint64_t> seeds(static_cast<size_t>(B)), offsets(static_cast<size_t>(B), 1);
  for (auto& s : seeds) s = rng();
  auto dd = upload(draft), td = upload(target), idd = upload(ids), sd = upload(seeds),
       od = upload(offsets);
  DeviceBuffer outd(static_cast<size_t>(B * (n + 1)) * 4);
  outd.fill(0x7F);
  Tensor dp = make_tensor(dd->get(), {B, n, V}, dl_dtype("fp32"));
  Tensor tp = make_tensor(td->get(), {B, n + 1, V}, dl_dtype("fp32"));
  Tensor it = make_tensor(idd->get(), {B, n}, dl_dtype("int32"));
  Tensor st = make_tensor(sd->get(), {B}, dl_dtype("int64"));
  Tensor ot = make_tensor(od->get(), {B}, dl_dtype("int64"));
  Tensor out = make_tensor(outd.get(), {B, n + 1}, dl_dtype("int32"));
  REQUIRE(kjit_chain_speculative_sampling(dp.get(), it.get(), tp.get(), st.get(), ot.get(),
                                          out.get(), nullptr, nullptr, nullptr) == KJIT_SUCCESS);
  device_synchronize();
  std::vector<int32_t> got(static_cast<size_t>(B * (n + 1)));
  outd.download(got.data(), got.size() * 4);
  std::vector<long> counts(V, 0);
  long invalid = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t t = got[static_cast<size_t>(b * (n + 1))];
    if (t < 0 || t >= V) {
      ++invalid;
    } else {
      ++counts[static_cast<size_t>(t)];
    }
  }
  CHECK(invalid == 0);
  std::vector<double> p(p0.begin(), p0.end());
  long impossible = 0;
  int dof = 0;
  const double chi2 = ref::chi_square(counts, p, B, dof, impossible);
  INFO("chi2 " << chi2 << " with " << dof << " degrees of freedom");
  CHECK(impossible == 0);
  CHECK(chi2 < ref::chi_square_limit(dof));
}
