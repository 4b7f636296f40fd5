// The MoE family on the GPU against the fp64 CPU reference (tools/devkit/reference/moe_ref.hpp),
// on fresh random inputs with outputs poisoned first: routing (softmax / sigmoid, bias, groups,
// renormalize, exact ties), the permutation (exact, stable) and finalize, the permute -> finalize
// round trip (bit exact), and the grouped GEMM per expert against fp64 in both layouts (experts
// with 0, 1 and many rows, skewed routing, odd n / k, both paths), masked counts changed between
// CUDA graph replays.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "kjit/kjit.h"
#include "ops/moe/moe.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "reference/moe_ref.hpp"
#include "support/gpu.hpp"

using namespace kjit::test;
namespace ref = kjit::ref;
namespace ops = kjit::ops;

namespace {

// A host array and its device copy.
template <typename T>
struct Buf {
  std::vector<T> host;
  DeviceBuffer dev;
  explicit Buf(std::vector<T> h) : host(std::move(h)), dev(bytes(host.size())) { upload(); }
  // n elements of poison on the device (bytes 0xFF: NaN as a float, -1 as an int).
  explicit Buf(size_t n) : host(n), dev(bytes(n)) { dev.fill(0xFF); }
  static size_t bytes(size_t n) { return std::max<size_t>(1, n * sizeof(T)); }
  std::vector<T>& download() {
    if (!host.empty()) dev.download(host.data(), host.size() * sizeof(T));
    return host;
  }
  void upload() {
    if (!host.empty()) dev.upload(host.data(), host.size() * sizeof(T));
  }
};

// Raw element storage of a float dtype (fp32 / fp16 / bf16), with its values as the reference
// sees them.
struct Elems {
  std::string dtype;
  std::vector<unsigned char> bytes;
  Elems(std::string dt, size_t n) : dtype(std::move(dt)), bytes(n * ref::elem_size(dtype), 0xFF) {}
  size_t size() const { return bytes.size() / ref::elem_size(dtype); }
  double at(size_t i) const { return ref::load_elem(bytes.data(), i, dtype); }
  void set(size_t i, double v) { ref::store_elem(bytes.data(), i, v, dtype); }
};

struct DevElems {
  Elems e;
  DeviceBuffer dev;
  explicit DevElems(Elems x) : e(std::move(x)), dev(std::max<size_t>(1, e.bytes.size())) {
    dev.upload(e.bytes.data(), e.bytes.size());
  }
  Elems& download() {
    dev.download(e.bytes.data(), e.bytes.size());
    return e;
  }
};

Elems random_elems(const std::string& dt, size_t n, std::mt19937_64& rng, double lo = -1.0,
                   double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Elems x(dt, n);
  for (size_t i = 0; i < n; ++i) x.set(i, dist(rng));
  return x;
}

// ---- routing ----------------------------------------------------------------------------------

struct RouteCase {
  std::string dtype;
  int tokens, experts, top_k;
  ref::MoeRouteOptions o;
  bool bias = false;
  bool integer_logits = false;  // values in {0, 1, 2}: exact ties everywhere
};

void run_route(const RouteCase& c, std::mt19937_64& rng) {
  INFO(c.dtype << " tokens " << c.tokens << " experts " << c.experts << " top_k " << c.top_k
               << " sigmoid " << c.o.sigmoid << " renorm " << c.o.renormalize << " groups "
               << c.o.n_group << "/" << c.o.topk_group << " bias " << c.bias << " ties "
               << c.integer_logits);
  const size_t n = static_cast<size_t>(c.tokens) * c.experts;
  Elems logits = random_elems(c.dtype, n, rng, -4.0, 4.0);
  if (c.integer_logits) {
    std::uniform_int_distribution<int> pick(0, 2);
    for (size_t i = 0; i < n; ++i) logits.set(i, pick(rng));
  }
  std::uniform_real_distribution<double> bias_dist(-0.5, 0.5);
  std::vector<float> bias(c.experts);
  for (float& b : bias) b = static_cast<float>(bias_dist(rng));
  DevElems logits_d(logits);
  Buf<float> bias_d(bias);
  auto ids_d = Buf<int32_t>(static_cast<size_t>(c.tokens) * c.top_k);
  auto w_d = Buf<float>(static_cast<size_t>(c.tokens) * c.top_k);
  auto lt = make_tensor(logits_d.dev.get(), {c.tokens, c.experts}, dl_dtype(c.dtype));
  auto bt = make_tensor(bias_d.dev.get(), {c.experts}, dl_dtype("fp32"));
  auto it = make_tensor(ids_d.dev.get(), {c.tokens, c.top_k}, dl_dtype("int32"));
  auto wt = make_tensor(w_d.dev.get(), {c.tokens, c.top_k}, dl_dtype("fp32"));
  kjit_moe_route_options o;
  kjit_moe_route_options_init(&o);
  o.scoring = c.o.sigmoid ? KJIT_MOE_SCORING_SIGMOID : KJIT_MOE_SCORING_SOFTMAX;
  o.renormalize = c.o.renormalize ? 1 : 0;
  o.n_group = c.o.n_group;
  o.topk_group = c.o.topk_group;
  o.routed_scaling_factor = static_cast<float>(c.o.routed_scaling_factor);
  const kjit_status st =
      kjit_moe_route(lt.get(), c.bias ? bt.get() : nullptr, it.get(), wt.get(), &o, nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  const auto& ids = ids_d.download();
  const auto& w = w_d.download();

  long bad = 0;
  std::vector<double> row(c.experts), bias_row(bias.begin(), bias.end());
  for (int t = 0; t < c.tokens; ++t) {
    for (int e = 0; e < c.experts; ++e) row[e] = logits.at(static_cast<size_t>(t) * c.experts + e);
    const ref::MoeRouteToken r = ref::moe_route_token(
        row.data(), c.bias ? bias_row.data() : nullptr, c.experts, c.top_k, c.o);
    const int* got = &ids[static_cast<size_t>(t) * c.top_k];
    bool ok = true;
    if (c.integer_logits) {
      // Exact ties: the order must be torch.topk's, id for id.
      ok = std::equal(r.ids.begin(), r.ids.end(), got);
    } else {
      // Near-ties may resolve either way between fp32 and fp64: each place must hold a distinct,
      // eligible expert whose reference choice value is the reference's at that place.
      for (int j = 0; j < c.top_k && ok; ++j) {
        const int id = got[j];
        ok = id >= 0 && id < c.experts && r.eligible[id] &&
             std::count(got, got + c.top_k, id) == 1 &&
             std::fabs(r.choice[id] - r.choice[r.ids[j]]) <= 1e-5;
      }
    }
    // Weights from the GPU's own ids (the reference's scores), so a near-tie does not fail them.
    double sum = 0.0;
    for (int j = 0; ok && j < c.top_k; ++j) sum += r.score[got[j]];
    for (int j = 0; ok && j < c.top_k; ++j) {
      const double want =
          (c.o.renormalize ? r.score[got[j]] / sum : r.score[got[j]]) * c.o.routed_scaling_factor;
      const double g = w[static_cast<size_t>(t) * c.top_k + j];
      ok = std::fabs(g - want) <= 1e-5 * std::fabs(want) + 1e-7;  // NaN fails
    }
    if (!ok && bad++ < 3) {
      std::string gs, ws;
      for (int j = 0; j < c.top_k; ++j) {
        gs += std::to_string(got[j]) + ":" +
              std::to_string(w[static_cast<size_t>(t) * c.top_k + j]) + " ";
        ws += std::to_string(r.ids[j]) + ":" + std::to_string(r.weights[j]) + " ";
      }
      UNSCOPED_INFO("token " << t << " got " << gs << " want " << ws);
    }
  }
  CHECK(bad == 0);
}

// ---- permutation and finalize -----------------------------------------------------------------

struct Permuted {
  Buf<int32_t> offsets, p2s, s2p;
  DevElems rows;
  Permuted(int experts, size_t pairs, const std::string& dtype, int hidden)
      : offsets(static_cast<size_t>(experts) + 1),
        p2s(pairs),
        s2p(pairs),
        rows(Elems(dtype, pairs * hidden)) {}
};

// kjit_moe_permute of x [tokens, hidden] by ids; checks every output exactly against the
// reference.
std::unique_ptr<Permuted> run_permute(const Elems& x, int tokens, int hidden,
                                      const std::vector<int32_t>& ids, int top_k, int experts) {
  INFO("permute tokens " << tokens << " hidden " << hidden << " top_k " << top_k << " experts "
                         << experts << " " << x.dtype);
  const size_t pairs = static_cast<size_t>(tokens) * top_k;
  DevElems x_d(x);
  Buf<int32_t> ids_d(ids);
  auto owned = std::make_unique<Permuted>(experts, pairs, x.dtype, hidden);
  Permuted& p = *owned;
  auto xt = make_tensor(x_d.dev.get(), {tokens, hidden}, dl_dtype(x.dtype));
  auto it = make_tensor(ids_d.dev.get(), {tokens, top_k}, dl_dtype("int32"));
  auto pt = make_tensor(p.rows.dev.get(), {static_cast<int64_t>(pairs), hidden}, dl_dtype(x.dtype));
  auto ot = make_tensor(p.offsets.dev.get(), {experts + 1}, dl_dtype("int32"));
  auto p2st = make_tensor(p.p2s.dev.get(), {static_cast<int64_t>(pairs)}, dl_dtype("int32"));
  auto s2pt = make_tensor(p.s2p.dev.get(), {tokens, top_k}, dl_dtype("int32"));
  const kjit_status st =
      kjit_moe_permute(xt.get(), it.get(), pt.get(), ot.get(), p2st.get(), s2pt.get(), nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  const ref::MoePermutation want = ref::moe_permute(ids, experts);
  CHECK(p.offsets.download() == want.offsets);
  CHECK(p.p2s.download() == want.permuted_to_src);
  CHECK(p.s2p.download() == want.src_to_permuted);
  const Elems& got = p.rows.download();
  long bad = 0;
  for (size_t d = 0; d < pairs; ++d) {
    const size_t t = static_cast<size_t>(want.permuted_to_src[d] / top_k);
    bad += std::memcmp(&got.bytes[d * hidden * ref::elem_size(x.dtype)],
                       &x.bytes[t * hidden * ref::elem_size(x.dtype)],
                       hidden * ref::elem_size(x.dtype)) != 0;
  }
  CHECK(bad == 0);
  return owned;
}

std::vector<int32_t> random_ids(int tokens, int top_k, int experts, std::mt19937_64& rng,
                                double skew = 0.0) {
  std::vector<int32_t> ids;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    // Skewed routing: expert 0 in the first slot of a `skew` share of the tokens.
    if (u(rng) < skew) std::iter_swap(all.begin(), std::find(all.begin(), all.end(), 0));
    ids.insert(ids.end(), all.begin(), all.begin() + top_k);
  }
  return ids;
}

// kjit_moe_finalize against fp64: out[t] = sum_j w * expert_out[s2p] + shared.
void check_finalize(const std::string& dt, int tokens, int hidden, int top_k, int rows,
                    const std::vector<int32_t>& s2p, bool shared, std::mt19937_64& rng) {
  INFO("finalize " << dt << " tokens " << tokens << " hidden " << hidden << " top_k " << top_k
                   << " shared " << shared);
  Elems eo = random_elems(dt, static_cast<size_t>(rows) * hidden, rng);
  Elems sh = random_elems(dt, static_cast<size_t>(tokens) * hidden, rng);
  std::uniform_real_distribution<double> wd(0.0, 1.0);
  std::vector<float> w(static_cast<size_t>(tokens) * top_k);
  for (float& v : w) v = static_cast<float>(wd(rng));
  DevElems eo_d(eo), sh_d(sh), out_d(Elems(dt, static_cast<size_t>(tokens) * hidden));
  Buf<int32_t> s2p_d(s2p);
  Buf<float> w_d(w);
  auto et = make_tensor(eo_d.dev.get(), {rows, hidden}, dl_dtype(dt));
  auto st_ = make_tensor(s2p_d.dev.get(), {tokens, top_k}, dl_dtype("int32"));
  auto wt = make_tensor(w_d.dev.get(), {tokens, top_k}, dl_dtype("fp32"));
  auto sht = make_tensor(sh_d.dev.get(), {tokens, hidden}, dl_dtype(dt));
  auto ot = make_tensor(out_d.dev.get(), {tokens, hidden}, dl_dtype(dt));
  const kjit_status st = kjit_moe_finalize(et.get(), st_.get(), wt.get(),
                                           shared ? sht.get() : nullptr, ot.get(), nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  const Elems& got = out_d.download();
  long bad = 0;
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < hidden; ++c) {
      double want = shared ? sh.at(static_cast<size_t>(t) * hidden + c) : 0.0,
             mag = std::fabs(want);
      for (int j = 0; j < top_k; ++j) {
        const int r = s2p[static_cast<size_t>(t) * top_k + j];
        if (r < 0) continue;
        const double term =
            w[static_cast<size_t>(t) * top_k + j] * eo.at(static_cast<size_t>(r) * hidden + c);
        want += term;
        mag += std::fabs(term);
      }
      const double g = got.at(static_cast<size_t>(t) * hidden + c);
      const double tol = ref::unit_roundoff(dt) * std::fabs(want) + 0x1p-22 * (top_k + 1) * mag;
      if (!(std::fabs(g - want) <= tol) && bad++ < 3) {
        UNSCOPED_INFO("token " << t << " col " << c << " got " << g << " want " << want);
      }
    }
  }
  CHECK(bad == 0);
}

// ---- grouped GEMM -----------------------------------------------------------------------------

struct GroupedCase {
  std::string dtype = "bf16", out_dtype = "bf16";
  std::vector<int> counts;  // rows per expert
  int n = 0, k = 0;
  bool masked = false;
  int max_rows = 0;    // masked: rows per expert's slot (counts may exceed it: clamped)
  int spare_rows = 0;  // contiguous: rows of a past offsets[experts] (must stay poisoned)
};

// Checks out (poisoned before the call) against fp64: rows of each expert's range, and poison
// everywhere else.
void check_grouped(const GroupedCase& c, const Elems& a, const Elems& b, const Elems& out,
                   const std::vector<int64_t>& first, const std::vector<int64_t>& used,
                   int64_t total_rows) {
  const int experts = static_cast<int>(c.counts.size());
  std::vector<int> expert_of(static_cast<size_t>(total_rows), -1);
  for (int e = 0; e < experts; ++e) {
    for (int64_t r = first[e]; r < first[e] + used[e]; ++r) expert_of[r] = e;
  }
  std::vector<double> arow(c.k), bk(static_cast<size_t>(c.k));
  long bad = 0, touched = 0;
  for (int64_t r = 0; r < total_rows; ++r) {
    const int e = expert_of[r];
    if (e < 0) {
      for (int j = 0; j < c.n; ++j)
        touched += !std::isnan(out.at(static_cast<size_t>(r) * c.n + j));
      continue;
    }
    for (int i = 0; i < c.k; ++i) arow[i] = a.at(static_cast<size_t>(r) * c.k + i);
    for (int j = 0; j < c.n; ++j) {
      for (int i = 0; i < c.k; ++i) bk[i] = b.at((static_cast<size_t>(e) * c.n + j) * c.k + i);
      double sum_abs = 0.0;
      const double want =
          ref::gemm_element(arow.data(), bk.data(), c.k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      const double g = out.at(static_cast<size_t>(r) * c.n + j);
      if (!(std::fabs(g - want) <= ref::gemm_tolerance(c.out_dtype, want, sum_abs, c.k)) &&
          bad++ < 5) {
        UNSCOPED_INFO("expert " << e << " row " << r << " col " << j << " got " << g << " want "
                                << want);
      }
    }
  }
  CHECK(bad == 0);
  CHECK(touched == 0);
}

void run_grouped(const GroupedCase& c, std::mt19937_64& rng) {
  const int experts = static_cast<int>(c.counts.size());
  std::vector<int64_t> first(experts), used(experts);
  int64_t rows = 0;
  for (int e = 0; e < experts; ++e) {
    if (c.masked) {
      first[e] = int64_t{e} * c.max_rows;
      used[e] = std::clamp<int64_t>(c.counts[e], 0, c.max_rows);
    } else {
      first[e] = rows;
      used[e] = c.counts[e];
      rows += c.counts[e];
    }
  }
  rows = c.masked ? int64_t{experts} * c.max_rows : rows + c.spare_rows;
  INFO((c.masked ? "masked " : "contiguous ")
       << c.dtype << "->" << c.out_dtype << " experts " << experts << " rows " << rows << " n "
       << c.n << " k " << c.k);
  const size_t es = ref::elem_size(c.dtype);
  const bool tma = c.k % 8 == 0 && c.k > 0;
  const ops::MoeGemmConfig cfg = ops::select_moe_gemm(
      ops::dtype_from_name(c.dtype), ops::dtype_from_name(c.out_dtype), rows,
      c.masked ? c.max_rows : rows / experts, c.n, c.k, experts, ops::gemm_target(0, tma));
  INFO("path " << ops::gemm_path_name(cfg.path) << " bn " << cfg.bn);
  (void)es;
  const Elems a = random_elems(c.dtype, static_cast<size_t>(rows) * c.k, rng);
  const Elems b = random_elems(c.dtype, static_cast<size_t>(experts) * c.n * c.k, rng);
  DevElems a_d(a), b_d(b), out_d(Elems(c.out_dtype, static_cast<size_t>(rows) * c.n));
  std::vector<int32_t> sched;
  if (c.masked) {
    sched.assign(c.counts.begin(), c.counts.end());
  } else {
    sched.push_back(0);
    for (int e = 0; e < experts; ++e) sched.push_back(sched.back() + c.counts[e]);
  }
  Buf<int32_t> sched_d(sched);
  auto bt = make_tensor(b_d.dev.get(), {experts, c.n, c.k}, dl_dtype(c.dtype));
  kjit_status st;
  if (c.masked) {
    auto at = make_tensor(a_d.dev.get(), {experts, c.max_rows, c.k}, dl_dtype(c.dtype));
    auto ct = make_tensor(sched_d.dev.get(), {experts}, dl_dtype("int32"));
    auto ot = make_tensor(out_d.dev.get(), {experts, c.max_rows, c.n}, dl_dtype(c.out_dtype));
    st = kjit_moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), nullptr);
  } else {
    auto at = make_tensor(a_d.dev.get(), {rows, c.k}, dl_dtype(c.dtype));
    auto ct = make_tensor(sched_d.dev.get(), {experts + 1}, dl_dtype("int32"));
    auto ot = make_tensor(out_d.dev.get(), {rows, c.n}, dl_dtype(c.out_dtype));
    st = kjit_moe_grouped_gemm(at.get(), bt.get(), ct.get(), ot.get(), nullptr);
  }
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  check_grouped(c, a, b, out_d.download(), first, used, rows);
}

// Rows per expert: `experts` experts over `rows` rows, with experts of 0 and 1 rows and the rest
// random.
std::vector<int> uneven_counts(int experts, int rows, std::mt19937_64& rng) {
  std::vector<int> counts(experts, 0);
  counts[1 % experts] = 1;
  std::uniform_int_distribution<int> pick(2, experts - 1);
  for (int r = 1; r < rows; ++r) ++counts[experts > 2 ? pick(rng) : 0];
  return counts;
}

bool tensor_cores() {
  return gpu_caps().sm90a();
}

}  // namespace

TEST_CASE("moe gpu: routing against the fp64 reference", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp32", "bf16", "fp16"}) {
    for (bool renorm : {false, true}) {
      // Mixtral / Qwen3-like softmax, odd sizes.
      for (const auto& [tokens, experts, k] :
           std::vector<std::array<int, 3>>{{1, 8, 2}, {37, 128, 8}, {5, 7, 3}, {300, 33, 1}}) {
        RouteCase c{dt, tokens, experts, k};
        c.o.renormalize = renorm;
        run_route(c, rng);
        c.bias = true;
        run_route(c, rng);
      }
      // DeepSeek-V3: sigmoid, correction bias, 8 groups keep 4, scaled.
      RouteCase ds{dt, 77, 256, 8};
      ds.o = {true, renorm, 8, 4, 2.5};
      ds.bias = true;
      run_route(ds, rng);
      RouteCase g{dt, 19, 60, 6};  // groups of 15, top 6 within 2 of 4 groups
      g.o = {false, renorm, 4, 2, 1.0};
      run_route(g, rng);
    }
  }
}

TEST_CASE("moe gpu: routing ties follow torch.topk (lower index first)", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"fp32", "bf16"}) {
    for (bool sigmoid : {false, true}) {
      RouteCase c{dt, 129, 64, 8};
      c.o.sigmoid = sigmoid;
      c.integer_logits = true;
      run_route(c, rng);
      c.o.n_group = 8;  // equal group scores too: the lower group first
      c.o.topk_group = 3;
      run_route(c, rng);
    }
  }
}

TEST_CASE("moe gpu: permute is a stable sort, finalize a weighted sum", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp32", "fp16"}) {
    for (const auto& [tokens, top_k, experts, hidden] : std::vector<std::array<int, 4>>{
             {1, 1, 1, 8}, {7, 2, 8, 40}, {300, 8, 256, 136}, {1100, 6, 60, 33}, {3, 4, 511, 7}}) {
      const Elems x = random_elems(dt, static_cast<size_t>(tokens) * hidden, rng);
      std::vector<int32_t> ids = random_ids(tokens, top_k, experts, rng, 0.0);
      auto p = run_permute(x, tokens, hidden, ids, top_k, experts);
      const int rows = tokens * top_k;
      check_finalize(dt, tokens, hidden, top_k, rows, p->s2p.host, false, rng);
      check_finalize(dt, tokens, hidden, top_k, rows, p->s2p.host, true, rng);
    }
  }
  // Ids outside [0, experts) (another rank's experts) sort last and finalize skips them.
  const Elems x = random_elems("bf16", 50 * 24, rng);
  std::vector<int32_t> ids = random_ids(50, 4, 16, rng);
  for (size_t i = 0; i < ids.size(); i += 3) ids[i] = i % 2 ? -1 : 16 + static_cast<int>(i);
  auto p = run_permute(x, 50, 24, ids, 4, 16);
  CHECK(std::count(p->s2p.host.begin(), p->s2p.host.end(), -1) ==
        static_cast<long>((ids.size() + 2) / 3));
  check_finalize("bf16", 50, 24, 4, 200, p->s2p.host, true, rng);
  // Skewed routing: one expert takes 90% of the tokens' first slots.
  const Elems xs = random_elems("bf16", 2000 * 64, rng);
  run_permute(xs, 2000, 64, random_ids(2000, 8, 128, rng, 0.9), 8, 128);
}

TEST_CASE("moe gpu: permute then finalize gives the tokens back bit for bit", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int top_k : {1, 2, 4, 8}) {
    const int tokens = 257, hidden = 72, experts = 32;
    const Elems x = random_elems("bf16", static_cast<size_t>(tokens) * hidden, rng);
    auto p =
        run_permute(x, tokens, hidden, random_ids(tokens, top_k, experts, rng), top_k, experts);
    // Weights 1 / top_k: each term and partial sum is exact in fp32, so out == x exactly.
    Buf<float> w(std::vector<float>(static_cast<size_t>(tokens) * top_k, 1.0f / top_k));
    DevElems out(Elems("bf16", static_cast<size_t>(tokens) * hidden));
    auto et = make_tensor(p->rows.dev.get(), {tokens * top_k, hidden}, dl_dtype("bf16"));
    auto st_ = make_tensor(p->s2p.dev.get(), {tokens, top_k}, dl_dtype("int32"));
    auto wt = make_tensor(w.dev.get(), {tokens, top_k}, dl_dtype("fp32"));
    auto ot = make_tensor(out.dev.get(), {tokens, hidden}, dl_dtype("bf16"));
    REQUIRE(kjit_moe_finalize(et.get(), st_.get(), wt.get(), nullptr, ot.get(), nullptr) ==
            KJIT_SUCCESS);
    device_synchronize();
    CHECK(out.download().bytes == x.bytes);
  }
}

TEST_CASE("moe gpu: grouped GEMM per expert against fp64", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* od : {"bf16", "fp32"}) {
    // Experts of 0, 1 and many rows; n and k off the tile edges; k % 8 == 0 takes the wgmma path
    // on an H100 / H200, odd k the fallback.
    for (const auto& [experts, rows, n, k] : std::vector<std::array<int, 4>>{
             {4, 300, 136, 72}, {8, 700, 256, 64}, {16, 40, 200, 136}, {5, 130, 96, 67}}) {
      GroupedCase c;
      c.out_dtype = od;
      c.counts = uneven_counts(experts, rows, rng);
      c.n = n;
      c.k = k;
      c.spare_rows = 5;
      run_grouped(c, rng);
    }
  }
  // fp16, and every expert empty but one.
  GroupedCase h;
  h.dtype = h.out_dtype = "fp16";
  h.counts = {0, 0, 257, 0};
  h.n = 130;
  h.k = 64;
  run_grouped(h, rng);
  // Skewed: one expert takes 90% of 2000 rows (wide tiles on the wgmma path).
  GroupedCase s;
  s.counts.assign(32, 6);
  s.counts[3] = 1814;
  s.n = 384;
  s.k = 256;
  run_grouped(s, rng);
  // Many experts with a row or two each (decode).
  GroupedCase d;
  for (int e = 0; e < 128; ++e) d.counts.push_back(e % 3 == 0 ? 1 : e % 3 == 1 ? 0 : 2);
  d.n = 192;
  d.k = 128;
  run_grouped(d, rng);
}

TEST_CASE("moe gpu: masked grouped GEMM, counts clamped", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (int k : {64, 40, 67}) {
    GroupedCase c;
    c.masked = true;
    c.max_rows = 130;
    c.counts = {0, 1, 130, 77, 500, -3};  // 500 and -3 clamp to 130 and 0
    c.n = 160;
    c.k = k;
    run_grouped(c, rng);
  }
}

TEST_CASE("moe gpu: masked grouped GEMM replays in a CUDA graph with new counts", "[gpu][moe]") {
  const auto& d = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  const int experts = 8, max_rows = 64, n = 256, k = 128;
  const Elems a = random_elems("bf16", static_cast<size_t>(experts) * max_rows * k, rng);
  const Elems b = random_elems("bf16", static_cast<size_t>(experts) * n * k, rng);
  DevElems a_d(a), b_d(b), out_d(Elems("bf16", static_cast<size_t>(experts) * max_rows * n));
  Buf<int32_t> counts(std::vector<int32_t>(experts, 1));
  auto at = make_tensor(a_d.dev.get(), {experts, max_rows, k}, dl_dtype("bf16"));
  auto bt = make_tensor(b_d.dev.get(), {experts, n, k}, dl_dtype("bf16"));
  auto ct = make_tensor(counts.dev.get(), {experts}, dl_dtype("int32"));
  auto ot = make_tensor(out_d.dev.get(), {experts, max_rows, n}, dl_dtype("bf16"));
  CUstream stream = nullptr;
  REQUIRE(d.cuStreamCreate(&stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  // Warm-up: the first call may compile and load; capture must not.
  REQUIRE(kjit_moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), stream) ==
          KJIT_SUCCESS);
  REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  const kjit_status captured =
      kjit_moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), stream);
  REQUIRE(d.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  REQUIRE(captured == KJIT_SUCCESS);
  REQUIRE(d.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  std::uniform_int_distribution<int> pick(0, max_rows);
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    GroupedCase c;
    c.masked = true;
    c.max_rows = max_rows;
    c.n = n;
    c.k = k;
    for (int e = 0; e < experts; ++e) c.counts.push_back(pick(rng));
    c.counts[round] = 0;
    counts.host.assign(c.counts.begin(), c.counts.end());
    counts.upload();
    out_d.dev.fill(0xFF);
    REQUIRE(d.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    std::vector<int64_t> first, used;
    for (int e = 0; e < experts; ++e) {
      first.push_back(int64_t{e} * max_rows);
      used.push_back(c.counts[e]);
    }
    check_grouped(c, a, b, out_d.download(), first, used, int64_t{experts} * max_rows);
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
  d.cuStreamDestroy(stream);
}

TEST_CASE("moe gpu: the wgmma path serves TMA-ready grouped calls", "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  const ops::GemmTarget t = ops::gemm_target(0, true);
  CHECK(ops::select_moe_gemm(ops::DType::kBF16, ops::DType::kBF16, 4096, 512, 4096, 7168, 8, t)
            .path == ops::GemmPath::kSm90);
  CHECK(ops::select_moe_gemm(ops::DType::kBF16, ops::DType::kBF16, 8, 1, 1536, 2048, 128, t).path ==
        ops::GemmPath::kSm90);
}
