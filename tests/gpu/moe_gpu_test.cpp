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
#include <sstream>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "gemm_test_util.hpp"
#include "kjit/kjit.h"
#include "moe_test_util.hpp"
#include "ops/moe/moe.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "reference/moe_ref.hpp"
#include "support/gpu.hpp"
#include "support/parallel_rows.hpp"

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

// Tokens whose routing (ids [tokens, top_k], weights) differs from the fp64 reference's on
// logits [tokens, experts]; the first three are reported.
long route_mismatches(const Elems& logits, const double* bias, int tokens, int experts, int top_k,
                      const ref::MoeRouteOptions& o, bool exact_ties, const int32_t* ids,
                      const float* w) {
  long bad = 0;
  std::vector<double> row(experts);
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) row[e] = logits.at(static_cast<size_t>(t) * experts + e);
    const ref::MoeRouteToken r = ref::moe_route_token(row.data(), bias, experts, top_k, o);
    const int* got = &ids[static_cast<size_t>(t) * top_k];
    bool ok = true;
    if (exact_ties) {
      // Exact ties: the order must be torch.topk's, id for id.
      ok = std::equal(r.ids.begin(), r.ids.end(), got);
    } else {
      // Near-ties may resolve either way between fp32 and fp64: each place must hold a distinct,
      // eligible expert whose reference choice value is the reference's at that place.
      for (int j = 0; j < top_k && ok; ++j) {
        const int id = got[j];
        ok = id >= 0 && id < experts && r.eligible[id] && std::count(got, got + top_k, id) == 1 &&
             std::fabs(r.choice[id] - r.choice[r.ids[j]]) <= 1e-5;
      }
    }
    // Weights from the GPU's own ids (the reference's scores), so a near-tie does not fail them.
    double sum = 0.0;
    for (int j = 0; ok && j < top_k; ++j) sum += r.score[got[j]];
    for (int j = 0; ok && j < top_k; ++j) {
      const double want =
          (o.renormalize ? r.score[got[j]] / sum : r.score[got[j]]) * o.routed_scaling_factor;
      const double g = w[static_cast<size_t>(t) * top_k + j];
      ok = std::fabs(g - want) <= 1e-5 * std::fabs(want) + 1e-7;  // NaN fails
    }
    if (!ok && bad++ < 3) {
      std::string gs, ws;
      for (int j = 0; j < top_k; ++j) {
        gs += std::to_string(got[j]) + ":" + std::to_string(w[static_cast<size_t>(t) * top_k + j]) +
              " ";
        ws += std::to_string(r.ids[j]) + ":" + std::to_string(r.weights[j]) + " ";
      }
      UNSCOPED_INFO("token " << t << " got " << gs << " want " << ws);
    }
  }
  return bad;
}

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

  std::vector<double> bias_row(bias.begin(), bias.end());
  CHECK(route_mismatches(logits, c.bias ? bias_row.data() : nullptr, c.tokens, c.experts, c.top_k,
                         c.o, c.integer_logits, ids.data(), w.data()) == 0);
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
  // A forced kernel or split: the call goes through the ops layer (kjit's entry points pass the
  // default).
  ops::MoeGemmTuning tuning;
  bool tuned() const { return forced(tuning); }
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
  // Every core: per-worker row buffers.
  std::vector<std::vector<double>> bufs(static_cast<size_t>(reference_workers()),
                                        std::vector<double>(2 * static_cast<size_t>(c.k)));
  const RowTally t = tally_rows(total_rows, [&](int64_t r, RowTally& t, int w) {
    const int e = expert_of[r];
    if (e < 0) {
      for (int j = 0; j < c.n; ++j)
        t.touched += !std::isnan(out.at(static_cast<size_t>(r) * c.n + j));
      return;
    }
    double* arow = bufs[static_cast<size_t>(w)].data();
    double* bk = arow + c.k;
    for (int i = 0; i < c.k; ++i) arow[i] = a.at(static_cast<size_t>(r) * c.k + i);
    for (int j = 0; j < c.n; ++j) {
      for (int i = 0; i < c.k; ++i) bk[i] = b.at((static_cast<size_t>(e) * c.n + j) * c.k + i);
      double sum_abs = 0.0;
      const double want = ref::gemm_element(arow, bk, c.k, 1.0, 0.0, 0.0, 0.0, &sum_abs);
      const double g = out.at(static_cast<size_t>(r) * c.n + j);
      if (!(std::fabs(g - want) <= ref::gemm_tolerance(c.out_dtype, want, sum_abs, c.k))) {
        t.miss(r, [&] {
          std::ostringstream m;
          m << "expert " << e << " row " << r << " col " << j << " got " << g << " want " << want;
          return m.str();
        });
      }
    }
  });
  for (const auto& m : t.misses) UNSCOPED_INFO(m.second);
  CHECK(t.bad == 0);
  CHECK(t.touched == 0);
}

// Where each expert's rows sit in a grouped GEMM's a / out (first, and used: the counts as the
// kernel clamps them), a's rows, and the schedule tensor (masked: the counts as given;
// contiguous: the offsets, with spare_rows past the last).
struct GroupedRows {
  std::vector<int64_t> first, used;
  int64_t rows = 0;
  std::vector<int32_t> sched;
};

GroupedRows grouped_rows(const std::vector<int>& counts, bool masked, int max_rows,
                         int spare_rows) {
  const int experts = static_cast<int>(counts.size());
  GroupedRows g;
  g.first.resize(experts);
  g.used.resize(experts);
  if (!masked) g.sched.push_back(0);
  for (int e = 0; e < experts; ++e) {
    if (masked) {
      g.first[e] = int64_t{e} * max_rows;
      g.used[e] = std::clamp<int64_t>(counts[e], 0, max_rows);
      g.sched.push_back(counts[e]);
    } else {
      g.first[e] = g.rows;
      g.used[e] = counts[e];
      g.rows += counts[e];
      g.sched.push_back(g.sched.back() + counts[e]);
    }
  }
  g.rows = masked ? int64_t{experts} * max_rows : g.rows + spare_rows;
  return g;
}

void run_grouped(const GroupedCase& c, std::mt19937_64& rng) {
  const int experts = static_cast<int>(c.counts.size());
  const GroupedRows layout = grouped_rows(c.counts, c.masked, c.max_rows, c.spare_rows);
  const int64_t rows = layout.rows;
  INFO((c.masked ? "masked " : "contiguous ")
       << c.dtype << "->" << c.out_dtype << " experts " << experts << " rows " << rows << " n "
       << c.n << " k " << c.k);
  const size_t es = ref::elem_size(c.dtype);
  const bool tma = c.k % 8 == 0 && c.k > 0;
  const ops::MoeGemmConfig cfg = ops::select_moe_gemm(
      ops::dtype_from_name(c.dtype), ops::dtype_from_name(c.out_dtype), rows,
      c.masked ? c.max_rows : rows / experts, c.n, c.k, experts, ops::gemm_target(0, tma),
      ops::moe_decode_rows(c.masked, rows, c.max_rows, experts));
  INFO("path " << ops::gemm_path_name(cfg.path) << " bn " << cfg.bn << " tokens " << cfg.tokens
               << " force " << static_cast<int>(c.tuning.force) << " split " << c.tuning.split
               << " persistent " << c.tuning.persistent << " forced bn " << c.tuning.bn);
  (void)es;
  const Elems a = random_elems(c.dtype, static_cast<size_t>(rows) * c.k, rng);
  const Elems b = random_elems(c.dtype, static_cast<size_t>(experts) * c.n * c.k, rng);
  DevElems a_d(a), b_d(b), out_d(Elems(c.out_dtype, static_cast<size_t>(rows) * c.n));
  Buf<int32_t> sched_d(layout.sched);
  auto bt = make_tensor(b_d.dev.get(), {experts, c.n, c.k}, dl_dtype(c.dtype));
  kjit_status st;
  if (c.masked) {
    auto at = make_tensor(a_d.dev.get(), {experts, c.max_rows, c.k}, dl_dtype(c.dtype));
    auto ct = make_tensor(sched_d.dev.get(), {experts}, dl_dtype("int32"));
    auto ot = make_tensor(out_d.dev.get(), {experts, c.max_rows, c.n}, dl_dtype(c.out_dtype));
    if (c.tuned()) {
      REQUIRE_NOTHROW(
          ops::moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), nullptr, c.tuning));
      st = KJIT_SUCCESS;
    } else {
      st = kjit_moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), nullptr);
    }
  } else {
    auto at = make_tensor(a_d.dev.get(), {rows, c.k}, dl_dtype(c.dtype));
    auto ct = make_tensor(sched_d.dev.get(), {experts + 1}, dl_dtype("int32"));
    auto ot = make_tensor(out_d.dev.get(), {rows, c.n}, dl_dtype(c.out_dtype));
    if (c.tuned()) {
      REQUIRE_NOTHROW(
          ops::moe_grouped_gemm(at.get(), bt.get(), ct.get(), ot.get(), nullptr, c.tuning));
      st = KJIT_SUCCESS;
    } else {
      st = kjit_moe_grouped_gemm(at.get(), bt.get(), ct.get(), ot.get(), nullptr);
    }
  }
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  check_grouped(c, a, b, out_d.download(), layout.first, layout.used, rows);
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

namespace {

// One masked grouped GEMM call (bf16, [experts, max_rows, k] . [n, k]^T) through the C entry
// point, or the ops layer where the tuning forces a kernel.
void call_masked(Tensor& at, Tensor& bt, Tensor& ct, Tensor& ot, const ops::MoeGemmTuning& tuning,
                 CUstream stream) {
  if (forced(tuning)) {
    REQUIRE_NOTHROW(
        ops::moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), stream, tuning));
  } else {
    REQUIRE(kjit_moe_grouped_gemm_masked(at.get(), bt.get(), ct.get(), ot.get(), stream) ==
            KJIT_SUCCESS);
  }
}

// Captures one masked call in a CUDA graph, then replays it `rounds` times with the counts
// counts_of(round) uploaded before each (the graph is never rebuilt), checking every replay
// against fp64 and every row past the counts untouched.
template <typename CountsOf>
void replay_masked(int experts, int max_rows, int n, int k, const ops::MoeGemmTuning& tuning,
                   int rounds, CountsOf counts_of, std::mt19937_64& rng) {
  const auto& d = kjit::cuda::driver();
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
  call_masked(at, bt, ct, ot, tuning, stream);
  REQUIRE(d.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  call_masked(at, bt, ct, ot, tuning, stream);
  REQUIRE(d.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  REQUIRE(d.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  for (int round = 0; round < rounds; ++round) {
    INFO("round " << round);
    GroupedCase c;
    c.masked = true;
    c.max_rows = max_rows;
    c.n = n;
    c.k = k;
    c.counts = counts_of(round);
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

}  // namespace

TEST_CASE("moe gpu: masked grouped GEMM replays in a CUDA graph with new counts", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  const int experts = 8, max_rows = 64;
  std::uniform_int_distribution<int> pick(0, max_rows);
  const auto counts_of = [&](int round) {
    std::vector<int> counts;
    for (int e = 0; e < experts; ++e) counts.push_back(pick(rng));
    counts[round] = 0;
    return counts;
  };
  // The kernel the selection picks (on an H200 the decode kernel: max_rows 64), and on sm_90a
  // the 128-row tile kernel forced.
  replay_masked(experts, max_rows, 256, 128, {}, 3, counts_of, rng);
  if (tensor_cores()) {
    ops::MoeGemmTuning tiles;
    tiles.force = ops::MoeGemmForce::kTiles;
    replay_masked(experts, max_rows, 256, 128, tiles, 3, counts_of, rng);
  }
}

TEST_CASE("moe gpu: the wgmma path serves TMA-ready grouped calls", "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  const ops::GemmTarget t = ops::gemm_target(0, true);
  CHECK(ops::select_moe_gemm(ops::DType::kBF16, ops::DType::kBF16, 4096, 512, 4096, 7168, 8, t)
            .path == ops::GemmPath::kSm90);
  CHECK(ops::select_moe_gemm(ops::DType::kBF16, ops::DType::kBF16, 8, 1, 1536, 2048, 128, t).path ==
        ops::GemmPath::kSm90);
}

// ---- the decode kernel (moe_gemm_decode_sm90.cuh) ----------------------------------------------

TEST_CASE("moe gpu: the decode kernel per expert against fp64", "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  const ops::MoeGemmForce decode = ops::MoeGemmForce::kDecode;
  // Experts of 0, 1 and many rows; n off the 128-row weight tiles, k off the 64-wide K blocks;
  // every split of K (1 .. 8, and the chosen one), bf16 and fp32 out.
  for (const char* od : {"bf16", "fp32"}) {
    for (const int split : {0, 1, 2, 3, 8}) {
      GroupedCase c;
      c.out_dtype = od;
      c.counts = {0, 1, 17, 0, 5, 2};
      c.n = 200;
      c.k = 584;
      c.spare_rows = 3;
      c.tuning.force = decode;
      c.tuning.split = split;
      run_grouped(c, rng);
    }
  }
  // fp16; the 32- and 64-token tiles (every routed row in one tile).
  for (const int rows : {20, 60}) {
    GroupedCase h;
    h.dtype = h.out_dtype = "fp16";
    h.counts = uneven_counts(4, rows, rng);
    h.n = 384;
    h.k = 256;
    h.tuning.force = decode;
    run_grouped(h, rng);
  }
  // Skewed past the tile: expert 0's 150 rows take three 64-row tiles (its weight streamed once
  // per tile), the others one each.
  GroupedCase s;
  s.counts = {150, 2, 0, 7};
  s.n = 136;
  s.k = 128;
  s.tuning.force = decode;
  run_grouped(s, rng);
  // What the selection itself sends to the decode kernel: many experts with 0 - 2 rows each (Qwen3
  // at 16 tokens), and Mixtral's shape at 64 tokens (smaller n and k).
  GroupedCase q;
  for (int e = 0; e < 128; ++e) q.counts.push_back(e % 3 == 0 ? 1 : e % 3 == 1 ? 0 : 2);
  q.n = 192;
  q.k = 128;
  CHECK(ops::moe_decode_rows(false, 127, 0, 128) == 4);
  run_grouped(q, rng);
  GroupedCase m;
  m.counts = uneven_counts(8, 128, rng);
  m.n = 512;
  m.k = 256;
  run_grouped(m, rng);
  // Masked: counts clamped to max_rows (a 32-token tile), a slot of garbage rows past each count.
  GroupedCase k;
  k.masked = true;
  k.max_rows = 20;
  k.counts = {0, 1, 20, 77, -3, 9};
  k.n = 130;
  k.k = 200;
  run_grouped(k, rng);
}

TEST_CASE("moe gpu: the decode kernel replays in a CUDA graph with new counts",
          "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  // The decode form of a CUDA-graph engine: many experts, a row or two each, most empty.
  const int experts = 64, max_rows = 2, n = 320, k = 192;
  REQUIRE(ops::select_moe_gemm(ops::DType::kBF16, ops::DType::kBF16, experts * max_rows, max_rows,
                               n, k, experts, ops::gemm_target(0, true),
                               ops::moe_decode_rows(true, experts * max_rows, max_rows, experts))
              .path == ops::GemmPath::kSm90Decode);
  std::uniform_int_distribution<int> pick(0, 7);
  // Round 0: one active expert; then about a quarter active; round 3: none.
  const auto counts_of = [&](int round) {
    std::vector<int> counts;
    for (int e = 0; e < experts; ++e) {
      const int r = pick(rng);
      counts.push_back(round == 0 ? (e == 17 ? 1 : 0) : round == 3 ? 0 : r < 2 ? r + 1 : 0);
    }
    return counts;
  };
  replay_masked(experts, max_rows, n, k, {}, 4, counts_of, rng);
  // A split K forced: every block of a cluster leaves the loop on the same item.
  ops::MoeGemmTuning split;
  split.split = 3;
  replay_masked(experts, max_rows, n, k, split, 4, counts_of, rng);
}

// ---- the whole layer --------------------------------------------------------------------------

namespace {

struct ForwardCase {
  std::string dtype = "bf16";
  int tokens = 1, experts = 8, top_k = 2, hidden = 64, inter = 32;
  ref::MoeRouteOptions o;
  bool bias = false, shared = false;
  bool in_place = false;  // out is shared_out itself
  double skew = 0.0;      // share of the tokens whose logits favour expert 3 by 8
};

ForwardCase forward_case(const char* dtype, int tokens, int experts, int top_k, int hidden,
                         int inter) {
  ForwardCase c;
  c.dtype = dtype;
  c.tokens = tokens;
  c.experts = experts;
  c.top_k = top_k;
  c.hidden = hidden;
  c.inter = inter;
  return c;
}

// The layer's inputs, as the reference sees them.
struct ForwardData {
  ForwardCase c;
  Elems x, logits, w13, w2, shared;
  std::vector<float> bias;
  ForwardData(const ForwardCase& fc, std::mt19937_64& rng)
      : c(fc),
        x(random_elems(fc.dtype, static_cast<size_t>(fc.tokens) * fc.hidden, rng)),
        logits(random_logits(fc, rng)),
        // Weights scaled so that every intermediate stays near 1 in magnitude.
        w13(random_elems(fc.dtype, static_cast<size_t>(fc.experts) * 2 * fc.inter * fc.hidden, rng,
                         -2.0 / std::sqrt(fc.hidden), 2.0 / std::sqrt(fc.hidden))),
        w2(random_elems(fc.dtype, static_cast<size_t>(fc.experts) * fc.hidden * fc.inter, rng,
                        -2.0 / std::sqrt(fc.inter), 2.0 / std::sqrt(fc.inter))),
        shared(random_elems(fc.dtype, static_cast<size_t>(fc.tokens) * fc.hidden, rng)),
        bias(fc.experts) {
    std::uniform_real_distribution<double> b(-0.3, 0.3);
    for (float& v : bias) v = static_cast<float>(b(rng));
  }
  static Elems random_logits(const ForwardCase& c, std::mt19937_64& rng) {
    Elems l = random_elems("fp32", static_cast<size_t>(c.tokens) * c.experts, rng, -3.0, 3.0);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int t = 0; t < c.tokens; ++t) {
      const size_t i = static_cast<size_t>(t) * c.experts + 3 % c.experts;
      if (u(rng) < c.skew) l.set(i, l.at(i) + 8.0);
    }
    return l;
  }
};

// Checks out [tokens, hidden] of kjit_moe_forward, and the routing it left in the workspace
// (`ws`, downloaded), against the fp64 composition of the references: route, each selected
// expert's SwiGLU FFN, the weighted sum and the shared expert.
void check_forward(const ForwardData& d, const std::vector<unsigned char>& ws, const Elems& out) {
  const ForwardCase& c = d.c;
  const ops::MoeForwardLayout l = ops::moe_forward_layout(c.tokens, c.experts, c.top_k, c.hidden,
                                                          c.inter, ops::dtype_from_name(c.dtype));
  const size_t pairs = static_cast<size_t>(c.tokens) * c.top_k;
  std::vector<int32_t> ids(pairs);
  std::vector<float> w(pairs);
  std::memcpy(ids.data(), ws.data() + l.topk_ids, pairs * 4);
  std::memcpy(w.data(), ws.data() + l.topk_weights, pairs * 4);
  std::vector<double> bias(d.bias.begin(), d.bias.end());
  REQUIRE(route_mismatches(d.logits, c.bias ? bias.data() : nullptr, c.tokens, c.experts, c.top_k,
                           c.o, false, ids.data(), w.data()) == 0);
  auto doubles = [](const Elems& e) {
    std::vector<double> v(e.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = e.at(i);
    return v;
  };
  const std::vector<double> x = doubles(d.x), w13 = doubles(d.w13), w2 = doubles(d.w2);
  const double u = ref::unit_roundoff(c.dtype);
  const size_t h = static_cast<size_t>(c.hidden), i2 = 2 * static_cast<size_t>(c.inter);
  long bad = 0;
  for (int t = 0; t < c.tokens; ++t) {
    std::vector<double> want(h, 0.0), err(h, 0.0), mag(h, 0.0);
    for (size_t col = 0; col < h; ++col) {
      if (c.shared) want[col] = mag[col] = d.shared.at(t * h + col);
      mag[col] = std::fabs(mag[col]);
    }
    for (int j = 0; j < c.top_k; ++j) {
      const size_t e = static_cast<size_t>(ids[static_cast<size_t>(t) * c.top_k + j]);
      const double wt = w[static_cast<size_t>(t) * c.top_k + j];
      const ref::MoeValues y = ref::moe_swiglu_expert(
          &x[t * h], &w13[e * i2 * h], &w2[e * h * c.inter], c.hidden, c.inter, u, u);
      for (size_t col = 0; col < h; ++col) {
        want[col] += wt * y.v[col];
        err[col] += std::fabs(wt) * y.err[col];
        mag[col] += std::fabs(wt * y.v[col]);
      }
    }
    for (size_t col = 0; col < h; ++col) {
      const double tol =
          err[col] + u * (std::fabs(want[col]) + err[col]) + 0x1p-22 * (c.top_k + 1) * mag[col];
      const double g = out.at(t * h + col);
      if (!(std::fabs(g - want[col]) <= tol) && bad++ < 5) {  // NaN fails
        UNSCOPED_INFO("token " << t << " col " << col << " got " << g << " want " << want[col]
                               << " tol " << tol);
      }
    }
  }
  CHECK(bad == 0);
}

// The layer's device buffers: inputs uploaded, out and the workspace poisoned.
struct ForwardRun {
  const ForwardData& d;
  DevElems x, logits, w13, w2, shared, out;
  Buf<float> bias;
  size_t ws_bytes = 0;
  std::unique_ptr<DeviceBuffer> ws;
  Tensor xt, lt, bt, w13t, w2t, st, wst, ot;
  kjit_moe_forward_options o{};
  explicit ForwardRun(const ForwardData& data)
      : d(data),
        x(d.x),
        logits(d.logits),
        w13(d.w13),
        w2(d.w2),
        shared(d.shared),
        out(Elems(d.c.dtype, static_cast<size_t>(d.c.tokens) * d.c.hidden)),
        bias(d.bias) {
    const ForwardCase& c = d.c;
    REQUIRE(kjit_moe_forward_workspace_bytes(c.tokens, c.experts, c.top_k, c.hidden, c.inter,
                                             dl_dtype(c.dtype), &ws_bytes) == KJIT_SUCCESS);
    ws = std::make_unique<DeviceBuffer>(ws_bytes);
    ws->fill(0xFF);
    const DLDataType dt = dl_dtype(c.dtype);
    xt = make_tensor(x.dev.get(), {c.tokens, c.hidden}, dt);
    lt = make_tensor(logits.dev.get(), {c.tokens, c.experts}, dl_dtype("fp32"));
    bt = make_tensor(bias.dev.get(), {c.experts}, dl_dtype("fp32"));
    w13t = make_tensor(w13.dev.get(), {c.experts, 2 * c.inter, c.hidden}, dt);
    w2t = make_tensor(w2.dev.get(), {c.experts, c.hidden, c.inter}, dt);
    st = make_tensor(shared.dev.get(), {c.tokens, c.hidden}, dt);
    wst = make_tensor(ws->get(), {static_cast<int64_t>(ws_bytes)}, DLDataType{kDLUInt, 8, 1});
    ot = make_tensor(c.in_place ? shared.dev.get() : out.dev.get(), {c.tokens, c.hidden}, dt);
    kjit_moe_forward_options_init(&o);
    o.route.scoring = c.o.sigmoid ? KJIT_MOE_SCORING_SIGMOID : KJIT_MOE_SCORING_SOFTMAX;
    o.route.renormalize = c.o.renormalize ? 1 : 0;
    o.route.n_group = c.o.n_group;
    o.route.topk_group = c.o.topk_group;
    o.route.routed_scaling_factor = static_cast<float>(c.o.routed_scaling_factor);
  }
  kjit_status call(CUstream stream) {
    return kjit_moe_forward(xt.get(), lt.get(), d.c.bias ? bt.get() : nullptr, w13t.get(),
                            w2t.get(), d.c.shared ? st.get() : nullptr, wst.get(), ot.get(),
                            d.c.top_k, &o, stream);
  }
  void check() {
    std::vector<unsigned char> host(ws_bytes);
    ws->download(host.data(), ws_bytes);
    check_forward(d, host, d.c.in_place ? shared.download() : out.download());
  }
};

void run_forward(const ForwardCase& c, std::mt19937_64& rng) {
  INFO("forward " << c.dtype << " tokens " << c.tokens << " experts " << c.experts << " top_k "
                  << c.top_k << " hidden " << c.hidden << " inter " << c.inter << " sigmoid "
                  << c.o.sigmoid << " groups " << c.o.n_group << " bias " << c.bias << " shared "
                  << c.shared << " in place " << c.in_place << " skew " << c.skew);
  const ForwardData d(c, rng);
  ForwardRun r(d);
  const kjit_status st = r.call(nullptr);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(st == KJIT_SUCCESS);
  device_synchronize();
  r.check();
}

}  // namespace

TEST_CASE("moe gpu: the whole layer against the fp64 composition of the references", "[gpu][moe]") {
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    // T = 1: most experts get no token; shared expert added.
    ForwardCase one = forward_case(dt, 1, 8, 2, 64, 32);
    one.shared = true;
    one.o.renormalize = true;
    run_forward(one, rng);
    // T = 7, DeepSeek-style routing: sigmoid, correction bias, 4 groups keep 2, scaled.
    ForwardCase ds = forward_case(dt, 7, 16, 4, 136, 72);
    ds.o = {true, true, 4, 2, 2.5};
    ds.bias = true;
    run_forward(ds, rng);
    // T = 300, skewed: expert 3 takes ~90% of the tokens; out written over shared_out.
    ForwardCase skew = forward_case(dt, 300, 16, 2, 128, 96);
    skew.skew = 0.9;
    skew.shared = skew.in_place = true;
    run_forward(skew, rng);
  }
  // Odd hidden and intermediate sizes: TMA cannot describe the rows, the fallback GEMM serves.
  ForwardCase odd = forward_case("bf16", 37, 8, 2, 67, 33);
  odd.shared = true;
  run_forward(odd, rng);
  // Qwen3-like: 128 experts, top 8, many with one token or none.
  ForwardCase qwen = forward_case("bf16", 33, 128, 8, 256, 64);
  qwen.o.renormalize = true;
  run_forward(qwen, rng);
}

TEST_CASE("moe gpu: the whole layer replays in a CUDA graph with new routing", "[gpu][moe]") {
  const auto& drv = kjit::cuda::driver();
  std::mt19937_64 rng(std::random_device{}());
  ForwardCase c = forward_case("bf16", 64, 8, 2, 128, 64);
  c.shared = true;
  ForwardData d(c, rng);
  ForwardRun r(d);
  CUstream stream = nullptr;
  REQUIRE(drv.cuStreamCreate(&stream, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  // Warm-up: the first call may compile and load; capture must not.
  REQUIRE(r.call(stream) == KJIT_SUCCESS);
  REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  REQUIRE(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  const kjit_status captured = r.call(stream);
  REQUIRE(drv.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS);
  INFO("kjit_last_error: " << kjit_last_error());
  REQUIRE(captured == KJIT_SUCCESS);
  REQUIRE(drv.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    // New routing (round 1 skewed onto expert 3), new tokens; outputs and workspace poisoned.
    d.c.skew = round == 1 ? 1.0 : 0.0;
    d.logits = ForwardData::random_logits(d.c, rng);
    d.x = random_elems(c.dtype, static_cast<size_t>(c.tokens) * c.hidden, rng);
    r.logits.dev.upload(d.logits.bytes.data(), d.logits.bytes.size());
    r.x.dev.upload(d.x.bytes.data(), d.x.bytes.size());
    r.out.dev.fill(0xFF);
    r.ws->fill(0xFF);
    REQUIRE(drv.cuGraphLaunch(exec, stream) == CUDA_SUCCESS);
    REQUIRE(drv.cuStreamSynchronize(stream) == CUDA_SUCCESS);
    r.check();
  }
  drv.cuGraphExecDestroy(exec);
  drv.cuGraphDestroy(graph);
  drv.cuStreamDestroy(stream);
}

// ---- the gate / up GEMM with silu_and_mul in its epilogue -------------------------------------

namespace {

struct SwigluCase {
  std::string dtype = "bf16";
  std::vector<int> counts;  // rows per expert (masked: clamped into [0, max_rows])
  int inter = 0, k = 0;
  bool masked = false;
  int max_rows = 0;
  ops::MoeGemmTuning tuning;  // a forced kernel or split
};

// Runs ops::moe_grouped_gemm_swiglu (or _masked) on fresh random operands, out poisoned, and checks
// every expert's rows against fp64 silu(a . gate^T) * (a . up^T), every other row untouched.
// Returns whether the fused path served the call (false: nothing may have been written).
bool run_swiglu(const SwigluCase& c, std::mt19937_64& rng) {
  const int experts = static_cast<int>(c.counts.size());
  const GroupedRows layout = grouped_rows(c.counts, c.masked, c.max_rows, 0);
  const int64_t rows = layout.rows;
  INFO((c.masked ? "masked " : "contiguous ") << c.dtype << " experts " << experts << " rows "
                                              << rows << " inter " << c.inter << " k " << c.k);
  const size_t i2 = 2 * static_cast<size_t>(c.inter);
  const Elems a = random_elems(c.dtype, static_cast<size_t>(rows) * c.k, rng);
  const double scale = 2.0 / std::sqrt(c.k);
  const Elems w13 = random_elems(c.dtype, experts * i2 * c.k, rng, -scale, scale);
  DevElems a_d(a), w_d(w13), out_d(Elems(c.dtype, static_cast<size_t>(rows) * c.inter));
  Buf<int32_t> sched_d(layout.sched);
  const DLDataType dt = dl_dtype(c.dtype);
  auto wt = make_tensor(w_d.dev.get(), {experts, 2 * c.inter, c.k}, dt);
  bool ran = false;
  if (c.masked) {
    auto at = make_tensor(a_d.dev.get(), {experts, c.max_rows, c.k}, dt);
    auto ct = make_tensor(sched_d.dev.get(), {experts}, dl_dtype("int32"));
    auto ot = make_tensor(out_d.dev.get(), {experts, c.max_rows, c.inter}, dt);
    ran = ops::moe_grouped_gemm_swiglu_masked(at.get(), wt.get(), ct.get(), ot.get(), nullptr,
                                              c.tuning);
  } else {
    auto at = make_tensor(a_d.dev.get(), {rows, c.k}, dt);
    auto ct = make_tensor(sched_d.dev.get(), {experts + 1}, dl_dtype("int32"));
    auto ot = make_tensor(out_d.dev.get(), {rows, c.inter}, dt);
    ran = ops::moe_grouped_gemm_swiglu(at.get(), wt.get(), ct.get(), ot.get(), nullptr, c.tuning);
  }
  device_synchronize();
  const Elems& out = out_d.download();
  std::vector<int> expert_of(static_cast<size_t>(rows), -1);
  for (int e = 0; e < experts && ran; ++e) {
    for (int64_t r = layout.first[e]; r < layout.first[e] + layout.used[e]; ++r) expert_of[r] = e;
  }
  // Every core: per-worker row buffers (a's row, the expert's w13 as fp64).
  std::vector<std::vector<double>> bufs(static_cast<size_t>(reference_workers()),
                                        std::vector<double>(c.k + i2 * c.k));
  std::vector<int> loaded(bufs.size(), -1);  // the expert whose w13 a worker's buffer holds
  const RowTally t = tally_rows(rows, [&](int64_t r, RowTally& t, int wi) {
    const int e = expert_of[r];
    if (e < 0) {
      for (int j = 0; j < c.inter; ++j)
        t.touched += !std::isnan(out.at(static_cast<size_t>(r) * c.inter + j));
      return;
    }
    double* arow = bufs[static_cast<size_t>(wi)].data();
    double* w = arow + c.k;
    for (int i = 0; i < c.k; ++i) arow[i] = a.at(static_cast<size_t>(r) * c.k + i);
    if (loaded[static_cast<size_t>(wi)] != e) {
      for (size_t i = 0; i < i2 * c.k; ++i) w[i] = w13.at(e * i2 * c.k + i);
      loaded[static_cast<size_t>(wi)] = e;
    }
    const ref::MoeValues h =
        ref::moe_swiglu_act(arow, w, c.k, c.inter, 0.0, ref::unit_roundoff(c.dtype));
    for (int j = 0; j < c.inter; ++j) {
      const double g = out.at(static_cast<size_t>(r) * c.inter + j);
      if (!(std::fabs(g - h.v[j]) <= h.err[j])) {
        t.miss(r, [&] {
          std::ostringstream m;
          m << "expert " << e << " row " << r << " col " << j << " got " << g << " want " << h.v[j]
            << " tol " << h.err[j];
          return m.str();
        });
      }
    }
  });
  for (const auto& m : t.misses) UNSCOPED_INFO(m.second);
  CHECK(t.bad == 0);
  CHECK(t.touched == 0);
  return ran;
}

}  // namespace

TEST_CASE("moe gpu: gate / up GEMM with silu_and_mul fused, against fp64", "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    // I off the 64-wide gate slices (136 = 2 x 64 + 8), experts of 0, 1 and many rows.
    SwigluCase c;
    c.dtype = dt;
    c.counts = uneven_counts(8, 700, rng);
    c.inter = 136;
    c.k = 72;
    CHECK(run_swiglu(c, rng));
    // Many experts with a row or two each (decode).
    SwigluCase d;
    d.dtype = dt;
    for (int e = 0; e < 128; ++e) d.counts.push_back(e % 3 == 0 ? 1 : e % 3 == 1 ? 0 : 2);
    d.inter = 96;
    d.k = 128;
    CHECK(run_swiglu(d, rng));
    // Skewed, wide tiles (bn 256: 128 gate and 128 up rows per block); I = 200 ends mid-slice.
    SwigluCase s;
    s.dtype = dt;
    s.counts = {0, 2100, 1, 300};
    s.inter = 200;
    s.k = 128;
    CHECK(run_swiglu(s, rng));
    // Masked, counts clamped.
    SwigluCase m;
    m.dtype = dt;
    m.masked = true;
    m.max_rows = 130;
    m.counts = {0, 1, 130, 77, 500, -3};
    m.inter = 80;
    m.k = 64;
    CHECK(run_swiglu(m, rng));
  }
  // The decode kernel's SwiGLU write (64 gate and 64 up rows a block): I off the 64-wide slices
  // (136, 200), a split K, a 64-token tile, masked; and the selection's own decode choice.
  for (const int split : {0, 1, 4}) {
    SwigluCase c;
    c.counts = {0, 1, 9, 0, 3};
    c.inter = 136;
    c.k = 392;
    c.tuning.force = ops::MoeGemmForce::kDecode;
    c.tuning.split = split;
    CHECK(run_swiglu(c, rng));
  }
  SwigluCase w;
  w.dtype = "fp16";
  w.counts = {40, 0, 17, 2};
  w.inter = 200;
  w.k = 128;
  w.tuning.force = ops::MoeGemmForce::kDecode;
  CHECK(run_swiglu(w, rng));
  SwigluCase dm;
  dm.masked = true;
  dm.max_rows = 3;
  dm.counts = {0, 1, 3, 8, 0, 2, -1};
  dm.inter = 96;
  dm.k = 256;
  CHECK(run_swiglu(dm, rng));
  // Rows TMA cannot describe (odd k): not served, nothing written (the caller runs it unfused).
  SwigluCase odd;
  odd.counts = {3, 5};
  odd.inter = 32;
  odd.k = 67;
  CHECK_FALSE(run_swiglu(odd, rng));
}

// ---- the persistent tile kernel (moe_gemm_persistent_sm90.cuh) ---------------------------------

namespace {

// The persistent tile kernel's cases under `persistent` (its one-block form, or its pairs).
void run_persistent_cases(const ops::MoeGemmTuning& persistent, std::mt19937_64& rng) {
  // Experts of 0, 1 and many rows, n and k off the tile edges; k = 64 and 72: one and two stages
  // an item, so each block's items wrap the ring many times (the stage slots' records and the
  // end record); k = 584: more stages an item than the ring holds. bf16 and fp32 out.
  for (const char* od : {"bf16", "fp32"}) {
    for (const auto& [experts, rows, n, k] : std::vector<std::array<int, 4>>{
             {4, 300, 136, 72}, {8, 700, 256, 64}, {16, 40, 200, 584}, {3, 1, 8, 64}}) {
      GroupedCase c;
      c.out_dtype = od;
      c.counts = uneven_counts(experts, rows, rng);
      c.n = n;
      c.k = k;
      c.spare_rows = 5;
      c.tuning = persistent;
      run_grouped(c, rng);
    }
  }
  // fp16, every expert empty but one; and every expert empty (every block's first record is
  // the end one).
  GroupedCase h;
  h.dtype = h.out_dtype = "fp16";
  h.counts = {0, 0, 257, 0};
  h.n = 130;
  h.k = 64;
  h.tuning = persistent;
  run_grouped(h, rng);
  GroupedCase none;
  none.counts = {0, 0, 0};
  none.n = 128;
  none.k = 128;
  none.spare_rows = 4;
  none.tuning = persistent;
  run_grouped(none, rng);
  // Skewed: one expert 90% of 3000 rows (its 22 row tiles, the others' single partial ones).
  GroupedCase s;
  s.counts = skewed_counts(32, 3000, 3);
  s.n = 384;
  s.k = 256;
  s.tuning = persistent;
  run_grouped(s, rng);
  // More items than SMs, with past-the-end row tiles inside a band that has more items than the
  // grid: 24 experts of ~136 rows bound tiles_m at 48 (bands of kMoeGroupM = 4 row tiles) while
  // the schedule has about 45, and n = 4480 (35 column tiles) makes a band 140 items against 132
  // SMs, so a block can meet an item past the end and then a real one of the same band (a `break`
  // there would leave rows unwritten; on a grid of a multiple of 4 blocks a block keeps its row of
  // the band, so there it meets past-the-end items of two columns).
  GroupedCase b;
  b.counts = uneven_counts(24, 3000, rng);
  b.n = 4480;
  b.k = 64;
  b.tuning = persistent;
  run_grouped(b, rng);
  // Wide tiles (bn 256: 512+ rows an expert), several items a block.
  GroupedCase w;
  w.counts = {0, 2100, 1, 1300, 900};
  w.n = 1024;
  w.k = 128;
  w.tuning = persistent;
  run_grouped(w, rng);
  // Masked, counts clamped.
  GroupedCase m;
  m.masked = true;
  m.max_rows = 130;
  m.counts = {0, 1, 130, 77, 500, -3};
  m.n = 160;
  m.k = 136;
  m.tuning = persistent;
  run_grouped(m, rng);
  // A call the tile kernel cannot serve (odd k: the fallback) is refused, not run otherwise.
  GroupedCase odd;
  odd.counts = {3, 5};
  odd.n = 32;
  odd.k = 67;
  odd.tuning = persistent;
  const GroupedRows l = grouped_rows(odd.counts, false, 0, 0);
  const Elems a = random_elems("bf16", static_cast<size_t>(l.rows) * odd.k, rng);
  const Elems bw = random_elems("bf16", size_t{2} * odd.n * odd.k, rng);
  DevElems a_d(a), b_d(bw), out_d(Elems("bf16", static_cast<size_t>(l.rows) * odd.n));
  Buf<int32_t> sched_d(l.sched);
  auto at = make_tensor(a_d.dev.get(), {l.rows, odd.k}, dl_dtype("bf16"));
  auto bt = make_tensor(b_d.dev.get(), {2, odd.n, odd.k}, dl_dtype("bf16"));
  auto ct = make_tensor(sched_d.dev.get(), {3}, dl_dtype("int32"));
  auto ot = make_tensor(out_d.dev.get(), {l.rows, odd.n}, dl_dtype("bf16"));
  CHECK_THROWS(ops::moe_grouped_gemm(at.get(), bt.get(), ct.get(), ot.get(), nullptr, odd.tuning));
}

}  // namespace

TEST_CASE("moe gpu: the persistent tile kernel per expert against fp64", "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  ops::MoeGemmTuning persistent;
  persistent.persistent = true;
  run_persistent_cases(persistent, rng);
}

TEST_CASE("moe gpu: the persistent tile kernel in pairs per expert against fp64",
          "[gpu][moe][sm90a]") {
  // MoeGemmTuning::pair: clusters of two blocks on column tiles 2j and 2j + 1 sharing a's rows;
  // the same cases, where an odd count of column tiles (n 8: one; n 4480: 35) leaves the last
  // pair's second block a column tile past n that must load, release and write nothing.
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  ops::MoeGemmTuning pairs;
  pairs.pair = true;
  run_persistent_cases(pairs, rng);
  // SwiGLU in pairs: I off the 64-wide gate slices, Qwen3's I = 768, skewed routing.
  for (const auto& [experts, rows, inter, k] :
       std::vector<std::array<int, 4>>{{8, 700, 136, 72}, {24, 2000, 768, 64}}) {
    SwigluCase c;
    c.counts = uneven_counts(experts, rows, rng);
    c.inter = inter;
    c.k = k;
    c.tuning = pairs;
    CHECK(run_swiglu(c, rng));
  }
  SwigluCase sk;
  sk.counts = skewed_counts(16, 2000, 5);
  sk.inter = 200;
  sk.k = 128;
  sk.tuning = pairs;
  CHECK(run_swiglu(sk, rng));
}

// The default (no tuning) takes the pairs where experts have one row tile on average over a long K
// (ops::moe_pairs_pay): uneven counts, some experts past 128 rows (two row tiles) and some empty,
// k off the 64-wide K block, an odd count of column tiles; SwiGLU too.
TEST_CASE("moe gpu: the default takes pairs where experts have one row tile over a long K",
          "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  GroupedCase c;
  c.counts = uneven_counts(12, 1100, rng);
  c.counts[3] = 0;
  c.n = 4 * 128 + 8;  // five column tiles: the last pair's second block past n
  c.k = 4096 + 72;
  c.spare_rows = 3;
  REQUIRE(ops::moe_pairs_pay(1100 / 12, c.n, c.k, 128));
  KernelUris seen;
  run_grouped(c, rng);
  REQUIRE_FALSE(seen.uris.empty());
  CHECK(seen.uris.back().find("_pair_1") != std::string::npos);
  SwigluCase w;
  w.counts = uneven_counts(10, 900, rng);
  w.inter = 3 * 64 + 8;
  w.k = 4096;
  KernelUris seen_swiglu;
  CHECK(run_swiglu(w, rng));
  REQUIRE_FALSE(seen_swiglu.uris.empty());
  CHECK(seen_swiglu.uris.back().find("_swiglu_1") != std::string::npos);
  CHECK(seen_swiglu.uris.back().find("_pair_1") != std::string::npos);
}

TEST_CASE("moe gpu: the persistent tile kernel with silu_and_mul fused, against fp64",
          "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  for (const char* dt : {"bf16", "fp16"}) {
    // I off the 64-wide gate slices; Qwen3's I = 768 (12 column tiles: a band of 192 items).
    for (const auto& [experts, rows, inter, k] : std::vector<std::array<int, 4>>{
             {8, 700, 136, 72}, {24, 2000, 768, 64}, {4, 2600, 200, 128}}) {
      SwigluCase c;
      c.dtype = dt;
      c.counts = uneven_counts(experts, rows, rng);
      c.inter = inter;
      c.k = k;
      c.tuning.persistent = true;
      CHECK(run_swiglu(c, rng));
    }
  }
  // Skewed (one expert 90%), masked with counts clamped.
  SwigluCase s;
  s.counts = skewed_counts(16, 2000, 5);
  s.inter = 200;
  s.k = 128;
  s.tuning.persistent = true;
  CHECK(run_swiglu(s, rng));
  SwigluCase m;
  m.masked = true;
  m.max_rows = 130;
  m.counts = {0, 1, 130, 77, 500, -3};
  m.inter = 80;
  m.k = 64;
  m.tuning.persistent = true;
  CHECK(run_swiglu(m, rng));
}

TEST_CASE("moe gpu: the 256-wide tile forced at few rows an expert (MoeGemmTuning::bn)",
          "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  // The selection takes 256-wide tiles from 128 rows an expert (ops::moe_wide_tile; fp8 from 256:
  // ops::moe_fp8_wide_tile); forced below that, most row tiles are partial and n ends inside a tile
  // (n 200, I 136: a 256-wide SwiGLU tile's halves past I), persistent and one block per item.
  for (const bool persistent : {true, false}) {
    ops::MoeGemmTuning t;
    t.bn = 256;
    t.persistent = persistent;
    if (!persistent) t.force = ops::MoeGemmForce::kTiles;
    for (const auto& [experts, rows, n, k] :
         std::vector<std::array<int, 4>>{{16, 700, 200, 72}, {24, 3000, 1536, 128}}) {
      GroupedCase c;
      c.counts = uneven_counts(experts, rows, rng);
      c.n = n;
      c.k = k;
      c.spare_rows = 3;
      c.tuning = t;
      run_grouped(c, rng);
    }
    for (const auto& [experts, rows, inter, k] :
         std::vector<std::array<int, 4>>{{8, 700, 136, 72}, {24, 2000, 768, 64}}) {
      SwigluCase s;
      s.counts = uneven_counts(experts, rows, rng);
      s.inter = inter;
      s.k = k;
      s.tuning = t;
      CHECK(run_swiglu(s, rng));
    }
  }
}

TEST_CASE("moe gpu: the persistent tile kernel replays in a CUDA graph with new counts",
          "[gpu][moe][sm90a]") {
  REQUIRE(tensor_cores());
  std::mt19937_64 rng(std::random_device{}());
  // 16 experts of up to 300 rows, n = 1280: up to 48 x 10 items bound (more than the SMs), the
  // grid fixed at capture. Round 0: one expert holds 90% of the rows; round 1: random; round 2:
  // none (every block ends at once); round 3: every expert full.
  const int experts = 16, max_rows = 300;
  std::uniform_int_distribution<int> pick(0, max_rows);
  const auto counts_of = [&](int round) {
    std::vector<int> counts;
    for (int e = 0; e < experts; ++e) counts.push_back(pick(rng));
    if (round == 0) counts = skewed_counts(experts, max_rows * 10 / 9, 7);
    if (round == 2) counts.assign(experts, 0);
    if (round == 3) counts.assign(experts, max_rows);
    return counts;
  };
  ops::MoeGemmTuning persistent;
  persistent.persistent = true;
  replay_masked(experts, max_rows, 1280, 64, persistent, 4, counts_of, rng);
}

TEST_CASE("moe gpu: the TMA-store epilogue on tiles of whole experts, registers on the rest",
          "[gpu][moe][sm90a]") {
  // A TMA-ready 16-bit out takes the tile kernels' TMA-store form (URI flag tma_out): a tile whose
  // 128 rows are all its expert's stores through shared memory and TMA into the whole out, one
  // that reaches past the expert's last row keeps the register epilogue (the rows after it are
  // the next expert's, which TMA would not clip). Experts of exactly 128 rows, 2 x 128 + 17, 5,
  // none, 3 x 128 and 128 + 100 in one call, contiguous and masked (slots of 400 rows), plain and
  // SwiGLU, one block an item and persistent; out poisoned, every other row checked untouched.
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int> counts = {128, 273, 5, 0, 384, 228};
  for (const bool persistent : {false, true}) {
    ops::MoeGemmTuning t;
    if (persistent) {
      t.persistent = true;
    } else {
      t.force = ops::MoeGemmForce::kTiles;
    }
    for (const bool masked : {false, true}) {
      for (const char* dt : {"bf16", "fp16"}) {
        GroupedCase c;
        c.dtype = c.out_dtype = dt;
        c.counts = counts;
        c.n = 264;  // 4 slabs of the 256-wide tile's first, one of 8 columns in the second
        c.k = 136;
        c.masked = masked;
        c.max_rows = 400;
        c.spare_rows = 3;
        c.tuning = t;
        check_tma_out([&] { run_grouped(c, rng); }, true);
      }
      SwigluCase w;
      w.counts = counts;
      w.inter = 200;  // 3 slabs of 64 and 8 columns past them
      w.k = 136;
      w.masked = masked;
      w.max_rows = 400;
      w.tuning = t;
      check_tma_out([&] { CHECK(run_swiglu(w, rng)); }, true);
    }
  }
  // An fp32 out keeps the register epilogue everywhere.
  GroupedCase f;
  f.out_dtype = "fp32";
  f.counts = counts;
  f.n = 264;
  f.k = 136;
  f.tuning.persistent = true;
  check_tma_out([&] { run_grouped(f, rng); }, false);
}
