// `kjit-cli bench` cases of the attention family: paged decode attention (plan once, time the
// run) and a read-only bandwidth probe over the same bytes, the ceiling decode is held to; batch
// prefill over a paged or ragged KV (FLOP-bound: TFLOP/s of the pairs the mask leaves).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_probe.hpp"
#include "commands.hpp"
#include "decode_inputs.hpp"
#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "kjit/kjit.h"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/prefill.hpp"
#include "reference/attention_ref.hpp"
#include "reference/half.hpp"
#include "reference/prefill_ref.hpp"
#include "support/gpu.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

// Fills n elements fast (the caches run to gigabytes): 12 random bits index a table of values
// uniform in [-1, 1) (16-bit dtypes) or of e4m3 bytes with exponent field 0..9 (|x| <= 7.5).
void fill_fast(unsigned char* dst, size_t n, const std::string& dtype, bool fp8,
               std::mt19937_64& rng) {
  std::vector<uint16_t> table(4096);
  for (size_t i = 0; i < table.size(); ++i) {
    if (fp8) {
      table[i] = static_cast<uint16_t>((rng() & 0x80) | ((rng() % 10) << 3) | (rng() & 7));
    } else {
      const float x = static_cast<float>(static_cast<double>(i) / 2048.0 - 1.0);
      table[i] = dtype == "bf16" ? ref::float_to_bf16(x) : ref::float_to_fp16(x);
    }
  }
  uint64_t s = rng() | 1;
  size_t i = 0;
  while (i < n) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    for (int k = 0; k < 5 && i < n; ++k, ++i) {
      const uint16_t v = table[(s >> (12 * k)) & 4095];
      if (fp8) {
        dst[i] = static_cast<unsigned char>(v);
      } else {
        std::memcpy(dst + 2 * i, &v, 2);
      }
    }
  }
}

}  // namespace

ops::DecodePlanner DecodeInputs::planner() const {
  return ops::DecodePlanner(indptr.data(), static_cast<int>(B), static_cast<int>(hq),
                            static_cast<int>(hk), static_cast<int>(D), static_cast<int>(P),
                            nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, qdt, kvdt, 0.0f, 0.0f,
                            -1, num_splits, 0, 0);
}

ops::DecodePlanData DecodeInputs::plan(const ops::DecodeTactic* forced,
                                       const ops::DecodeTuneRequest* tune) const {
  return ops::plan_batch_decode(indptr.data(), static_cast<int>(B), static_cast<int>(hq),
                                static_cast<int>(hk), static_cast<int>(D), static_cast<int>(P),
                                nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, qdt, kvdt, 0.0f,
                                0.0f, -1, num_splits, 0, 0, forced, tune);
}

void DecodeInputs::run(const kjit_decode_plan* plan, DLTensor* ws, CUstream stream) {
  const kjit_status s =
      kjit_batch_decode_run(plan, qt.get(), kct.get(), vct.get(), it.get(), pt.get(), lt.get(), ws,
                            ot.get(), nullptr, 1.0f, 1.0f, stream);
  if (s != KJIT_SUCCESS) throw Error(s, kjit_last_error());
}

std::unique_ptr<DecodeInputs> make_decode_inputs(const ops::SetArgs& args) {
  auto x = std::make_unique<DecodeInputs>();
  x->dtype = args.at("dtype");
  if (x->dtype == "fp32") throw UsageError("decode_attention supports dtype bf16 or fp16");
  x->kv_dtype = args.count("kv_dtype") ? args.at("kv_dtype") : x->dtype;
  if (x->kv_dtype != x->dtype && x->kv_dtype != "e4m3") {
    throw UsageError("kv_dtype must be the q dtype or e4m3");
  }
  x->fp8 = x->kv_dtype == "e4m3";
  x->B = ops::positive_int_arg(args, "batch", 1 << 16);
  x->L = ops::positive_int_arg(args, "kv_len", 1 << 24);
  x->hq = ops::positive_int_arg(args, "qo_heads", 1024);
  x->hk = ops::positive_int_arg(args, "kv_heads", 1024);
  x->D = ops::positive_int_arg(args, "head_dim", 256);
  x->P = ops::positive_int_arg(args, "page_size", 1024);
  x->num_splits = args.count("num_splits")
                      ? static_cast<int>(ops::positive_int_arg(args, "num_splits", 256))
                      : 0;
  x->layout = args.count("layout") ? args.at("layout") : "nhd";
  if (x->layout != "nhd" && x->layout != "hnd") throw UsageError("layout must be nhd or hnd");
  x->nhd = x->layout == "nhd";
  const size_t es_q = ref::elem_size(x->dtype), es_kv = x->fp8 ? 1 : es_q;
  check_gpu();
  const int64_t B = x->B, L = x->L, hq = x->hq, hk = x->hk, D = x->D, P = x->P;

  // Every request has kv_len positions on distinct pages in random order (a fragmented pool).
  x->rng.seed(std::random_device{}());
  x->pages_per = (L + P - 1) / P;
  x->num_pages = B * x->pages_per;
  x->indices.resize(static_cast<size_t>(x->num_pages));
  std::iota(x->indices.begin(), x->indices.end(), 0);
  std::shuffle(x->indices.begin(), x->indices.end(), x->rng);
  x->indptr = {0};
  for (int64_t b = 0; b < B; ++b) {
    x->indptr.push_back(static_cast<int32_t>((b + 1) * x->pages_per));
    x->last.push_back(static_cast<int32_t>(L - (x->pages_per - 1) * P));
  }

  // Caches k | v in one buffer, q and the page table in another, out (poisoned) apart.
  const size_t cache_elems = static_cast<size_t>(x->num_pages * P * hk * D);
  x->kc_at = x->caches.add(cache_elems * es_kv);
  x->vc_at = x->caches.add(cache_elems * es_kv);
  fill_fast(x->caches.host.data() + x->kc_at, cache_elems, x->dtype, x->fp8, x->rng);
  fill_fast(x->caches.host.data() + x->vc_at, cache_elems, x->dtype, x->fp8, x->rng);
  x->caches.upload();
  const size_t nq = static_cast<size_t>(B * hq * D);
  x->q_at = x->in.add(nq * es_q);
  fill_uniform(x->in.host.data() + x->q_at, nq, x->dtype, x->rng, -2.0, 2.0);
  x->idx_at = add_int32s(x->in, x->indices);
  x->ptr_at = add_int32s(x->in, x->indptr);
  x->last_at = add_int32s(x->in, x->last);
  x->in.upload();
  x->out = std::make_unique<test::DeviceBuffer>(nq * es_q);
  x->out->fill(0xFF);

  x->qdt = test::dl_dtype(x->dtype);
  x->kvdt = x->fp8 ? DLDataType{10, 8, 1} : x->qdt;  // kDLFloat8_e4m3fn
  const DLDataType i32 = test::dl_dtype("int32");
  const std::vector<int64_t> cshape = x->nhd ? std::vector<int64_t>{x->num_pages, P, hk, D}
                                             : std::vector<int64_t>{x->num_pages, hk, P, D};
  x->qt = test::make_tensor(x->in.at(x->q_at), {B, hq, D}, x->qdt);
  x->kct = test::make_tensor(x->caches.at(x->kc_at), cshape, x->kvdt);
  x->vct = test::make_tensor(x->caches.at(x->vc_at), cshape, x->kvdt);
  x->it = test::make_tensor(x->in.at(x->idx_at), {x->num_pages}, i32);
  x->pt = test::make_tensor(x->in.at(x->ptr_at), {B + 1}, i32);
  x->lt = test::make_tensor(x->in.at(x->last_at), {B}, i32);
  x->ot = test::make_tensor(x->out->get(), {B, hq, D}, x->qdt);
  return x;
}

namespace {

int bench_decode_attention(const ops::SetArgs& args, const BenchOptions& opts) {
  // A forced tactic (`--set tactic=split8_cluster`, docs/autotune.md names them) instead of the
  // plan's choice: one device call can sweep tactics against the default plan. A name that is
  // no tactic is refused before the inputs are built.
  std::optional<ops::DecodeTactic> forced;
  if (args.count("tactic")) {
    forced = ops::DecodeTactic::parse(args.at("tactic"));
    if (!forced) throw UsageError("tactic '" + args.at("tactic") + "' is not a decode tactic name");
  }
  std::unique_ptr<DecodeInputs> xp = make_decode_inputs(args);
  DecodeInputs& x = *xp;
  const std::string &dtype = x.dtype, &kv_dtype = x.kv_dtype, &layout = x.layout;
  const bool fp8 = x.fp8, nhd = x.nhd;
  const int64_t B = x.B, L = x.L, hq = x.hq, hk = x.hk, D = x.D, P = x.P;
  const int64_t pages_per = x.pages_per, num_pages = x.num_pages;
  const size_t es_q = ref::elem_size(dtype), es_kv = fp8 ? 1 : es_q;
  const size_t nq = static_cast<size_t>(B * hq * D);
  const std::vector<int32_t>&indices = x.indices, &last = x.last, &indptr = x.indptr;
  const Packed &caches = x.caches, &in = x.in;
  const size_t kc_at = x.kc_at, vc_at = x.vc_at, q_at = x.q_at;
  std::mt19937_64& rng = x.rng;

  // The plan as an engine gets it (the autotuner's choice), or the forced tactic's.
  kjit_decode_plan plan;
  const bool tuned = forced.has_value();
  plan.data = x.plan(tuned ? &*forced : nullptr);
  const kjit_decode_plan* raw_plan = &plan;
  const ops::DecodePlanData& pd = plan.data;
  const std::string variant = fmt::format(
      "{} ({}): w{} ts{} st{} hp{} cps{} merge={} addr={} jt{}{}", pd.tactic, pd.tactic_source,
      pd.cfg.warps, pd.cfg.stage_tokens, pd.cfg.stages, pd.cfg.heads_per_cta, pd.ctas_per_sm,
      pd.split.max_splits <= 1
          ? "none"
          : (pd.cfg.cluster_merge ? "cluster" : (pd.fused_merge ? "fused" : "kernel")),
      pd.cfg.addr == 1 ? "64" : "32", pd.cfg.joint_tiles, pd.pdl ? " pdl" : "");
  const size_t ws_bytes = kjit_decode_plan_workspace_bytes(raw_plan);
  const int plan_splits = kjit_decode_plan_num_splits(raw_plan);
  test::DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
  ws.fill(0);  // the fused merge's counters start at zero (every run leaves them zero)
  auto wt =
      test::make_tensor(ws.get(), {static_cast<int64_t>(ws.size())}, DLDataType{kDLUInt, 8, 1});

  const double kv_bytes = 2.0 * static_cast<double>(B * L * hk * D) * es_kv;
  BenchCase c;
  c.op = "decode_attention";
  c.uri = ops::decode_uri(pd.cfg);
  c.dtype = dtype;
  c.shape = {{"batch", B},         {"kv_len", L},          {"qo_heads", hq},
             {"kv_heads", hk},     {"head_dim", D},        {"page_size", P},
             {"layout", layout},   {"kv_dtype", kv_dtype}, {"splits", plan_splits},
             {"variant", variant}, {"tuned", tuned},       {"workspace_bytes", ws_bytes}};
  c.label = fmt::format(
      "decode_attention {} kv={} {} batch={} kv_len={} heads={}/{} head_dim={} "
      "page={} splits={} [{}{}]",
      dtype, kv_dtype, layout, B, L, hq, hk, D, P, plan_splits, variant, tuned ? ", tuned" : "");
  c.launch = [&](CUstream stream) { x.run(raw_plan, wt.get(), stream); };
  // Reads every K and V byte of the requests once, q and the page table; writes out.
  c.bytes = kv_bytes + 2.0 * static_cast<double>(nq * es_q) +
            4.0 * static_cast<double>(indices.size() + indptr.size() + last.size());
  c.copy_src = caches.dev->get();
  c.copy_bytes = static_cast<size_t>(c.bytes / 2);
  c.flops = 4.0 * static_cast<double>(B * L * hq * D);

  // The check: the fp64 reference on up to 4 requests (first, last and two at random; the full
  // batch would take minutes on the host), every qo head of each.
  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> got(nq * es_q);
    x.out->download(got.data(), got.size());
    std::vector<int64_t> picks = {0, B - 1};
    std::uniform_int_distribution<int64_t> pick(0, B - 1);
    for (int k = 0; k < 2; ++k) picks.push_back(pick(rng));
    std::sort(picks.begin(), picks.end());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    const double u_p = (dtype == "bf16" && !fp8) ? 0x1p-8 : 0x1p-11;
    const double u_out = ref::unit_roundoff(dtype);
    const double vmax = fp8 ? 7.5 : 1.0;
    c.shape["checked_requests"] = picks.size();
    for (int64_t b : picks) {
      ref::DecodeRefArgs a;
      a.batch = 1;
      a.qo_heads = hq;
      a.kv_heads = hk;
      a.head_dim = D;
      a.page_size = P;
      a.num_pages = num_pages;
      a.sm_scale = 1.0 / std::sqrt(static_cast<double>(D));
      a.indptr = {0, static_cast<int32_t>(pages_per)};
      a.indices.assign(indices.begin() + b * pages_per, indices.begin() + (b + 1) * pages_per);
      a.last_page_len = {last[static_cast<size_t>(b)]};
      auto elem = [&](size_t at, int64_t page, int64_t slot, int64_t h, int64_t d) {
        const size_t i = static_cast<size_t>(nhd ? ((page * P + slot) * hk + h) * D + d
                                                 : ((page * hk + h) * P + slot) * D + d);
        if (fp8) return ref::e4m3_to_double(caches.host[at + i]);
        return ref::load_elem(caches.host.data() + at, i, dtype);
      };
      auto q = [&](int64_t, int64_t i, int64_t d) {
        return ref::load_elem(in.host.data() + q_at, static_cast<size_t>((b * hq + i) * D + d),
                              dtype);
      };
      auto k = [&](int64_t pg, int64_t s, int64_t h, int64_t d) {
        return elem(kc_at, pg, s, h, d);
      };
      auto v = [&](int64_t pg, int64_t s, int64_t h, int64_t d) {
        return elem(vc_at, pg, s, h, d);
      };
      std::vector<double> want, lse;
      ref::decode_attention(a, q, k, v, want, lse);
      for (int64_t i = 0; i < hq * D; ++i) {
        const double w = want[static_cast<size_t>(i)];
        chk.add(ref::load_elem(got.data(), static_cast<size_t>(b * hq * D + i), dtype), w,
                3 * u_p * vmax + 2 * u_out * std::fabs(w) + 1e-6);
      }
    }
  }
  int rc = report(c, chk, first_ms, opts);

  // The read-only probe over the same number of bytes (K then V), timed the same way.
  const int rc2 = report_read_probe(caches.dev->get(), kv_bytes, c.label, opts);
  return rc != kExitOk ? rc : rc2;
}

struct PrefillPlanDeleter {
  void operator()(kjit_prefill_plan* p) const { kjit_prefill_plan_destroy(p); }
};

// "512,1024,..." as lengths.
std::vector<int64_t> parse_lens(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos ||
        item.size() > 8) {
      throw UsageError("lens must be comma-separated lengths, got '" + s + "'");
    }
    out.push_back(std::stoll(item));
    at = comma + 1;
  }
  return out;
}

// Prefill over a paged cache (page_size >= 1) or ragged k / v (page_size 0): batch requests of
// q_len new tokens over kv_len keys each, or `lens` (q = kv per request) for a ragged batch.
int bench_batch_prefill(const ops::SetArgs& args, const BenchOptions& opts) {
  const std::string dtype = args.at("dtype");
  if (dtype == "fp32") throw UsageError("batch_prefill supports dtype bf16 or fp16");
  const int64_t hq = ops::positive_int_arg(args, "qo_heads", 1024);
  const int64_t hk = ops::positive_int_arg(args, "kv_heads", 1024);
  const int64_t D = ops::positive_int_arg(args, "head_dim", 256);
  const int64_t P =
      args.at("page_size") == "0" ? 0 : ops::positive_int_arg(args, "page_size", 1024);
  const bool causal = flag_arg(args, "causal");
  const std::string layout = args.count("layout") ? args.at("layout") : "nhd";
  if (layout != "nhd" && layout != "hnd") throw UsageError("layout must be nhd or hnd");
  const bool nhd = layout == "nhd";
  // kv_dtype e4m3: fp8 keys and values (the plan's mma.sync kernel, or kernel=wgmma_sm90a).
  const std::string kv_dtype = args.count("kv_dtype") ? args.at("kv_dtype") : dtype;
  if (kv_dtype != dtype && kv_dtype != "e4m3") {
    throw UsageError("kv_dtype must be the q dtype or e4m3");
  }
  const bool fp8 = kv_dtype == "e4m3";
  std::vector<int64_t> q_lens, kv_lens;
  if (args.count("lens")) {
    q_lens = parse_lens(args.at("lens"));
    kv_lens = q_lens;
  } else {
    const int64_t B = ops::positive_int_arg(args, "batch", 1 << 16);
    const int64_t ql = ops::positive_int_arg(args, "q_len", 1 << 20);
    const int64_t kl = args.count("kv_len") ? ops::positive_int_arg(args, "kv_len", 1 << 22) : ql;
    if (kl < ql) throw UsageError("kv_len must be >= q_len (the new tokens are among the keys)");
    q_lens.assign(static_cast<size_t>(B), ql);
    kv_lens.assign(static_cast<size_t>(B), kl);
  }
  const int64_t B = static_cast<int64_t>(q_lens.size());
  const size_t es = ref::elem_size(dtype), es_kv = fp8 ? 1 : es;
  check_gpu();

  // Page table (a fragmented pool: distinct pages in random order) or ragged rows.
  std::mt19937_64 rng(std::random_device{}());
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0}, indices, last;
  for (int64_t l : q_lens) qo_indptr.push_back(static_cast<int32_t>(qo_indptr.back() + l));
  int64_t units = 0;  // pages, or ragged rows
  for (int64_t l : kv_lens) {
    units += P > 0 ? (l + P - 1) / P : l;
    kv_indptr.push_back(static_cast<int32_t>(units));
    if (P > 0) last.push_back(static_cast<int32_t>(l - ((l + P - 1) / P - 1) * P));
  }
  if (P > 0) {
    indices.resize(static_cast<size_t>(units));
    std::iota(indices.begin(), indices.end(), 0);
    std::shuffle(indices.begin(), indices.end(), rng);
  }
  const int64_t total_q = qo_indptr.back();
  const int64_t unit_elems = (P > 0 ? P : 1) * hk * D;
  const size_t kv_elems = static_cast<size_t>(units * unit_elems);
  Packed kv;
  const size_t k_at = kv.add(kv_elems * es_kv), v_at = kv.add(kv_elems * es_kv);
  fill_fast(kv.host.data() + k_at, kv_elems, dtype, fp8, rng);
  fill_fast(kv.host.data() + v_at, kv_elems, dtype, fp8, rng);
  kv.upload();
  Packed in;
  const size_t nq = static_cast<size_t>(total_q * hq * D);
  const size_t q_at = in.add(nq * es);
  fill_uniform(in.host.data() + q_at, nq, dtype, rng, -2.0, 2.0);
  const size_t qo_at = add_int32s(in, qo_indptr), kvp_at = add_int32s(in, kv_indptr);
  const size_t idx_at = add_int32s(in, indices), last_at = add_int32s(in, last);
  in.upload();
  test::DeviceBuffer out(std::max<size_t>(nq * es, 16));
  out.fill(0xFF);

  const DLDataType dt = test::dl_dtype(dtype), i32 = test::dl_dtype("int32");
  const DLDataType kvdt = fp8 ? DLDataType{10, 8, 1} : dt;  // kDLFloat8_e4m3fn
  kjit_prefill_options o;
  kjit_prefill_options_init(&o);
  o.causal = causal ? 1 : 0;
  kjit_prefill_plan* raw_plan = nullptr;
  const kjit_status st = kjit_batch_prefill_plan(
      qo_indptr.data(), kv_indptr.data(), static_cast<int>(B), static_cast<int>(hq),
      static_cast<int>(hk), static_cast<int>(D), static_cast<int>(P),
      nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, dt, kvdt, &o, 0, &raw_plan);
  if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  std::unique_ptr<kjit_prefill_plan, PrefillPlanDeleter> plan(raw_plan);
  if (args.count("kernel") || args.count("stages")) {
    // The tuning path (ops::PrefillTuning): the named kernel instead of the planned one, and or
    // the ring depth.
    const std::string k = args.count("kernel") ? args.at("kernel") : "wgmma_sm90a";
    if (k != "mma_sm80" && k != "wgmma_sm90a" && k != "wgmma_pingpong_sm90a" &&
        k != "wgmma_persistent_sm90a") {
      throw UsageError(
          "kernel must be mma_sm80, wgmma_sm90a, wgmma_pingpong_sm90a or wgmma_persistent_sm90a");
    }
    ops::PrefillTuning tune;
    tune.kernel = static_cast<int>(k == "mma_sm80" ? ops::PrefillKernel::kMmaSm80
                                                   : ops::PrefillKernel::kWgmmaSm90a);
    tune.pingpong = k == "wgmma_pingpong_sm90a" ? 1 : 0;
    tune.persistent = k == "wgmma_persistent_sm90a" ? 1 : 0;
    if (args.count("stages")) {
      tune.stages = static_cast<int>(ops::positive_int_arg(args, "stages", ops::kPrefillMaxStages));
    }
    raw_plan->data = ops::plan_batch_prefill(
        qo_indptr.data(), kv_indptr.data(), static_cast<int>(B), static_cast<int>(hq),
        static_cast<int>(hk), static_cast<int>(D), static_cast<int>(P),
        nhd ? KJIT_KV_LAYOUT_NHD : KJIT_KV_LAYOUT_HND, dt, kvdt, o.causal, o.sm_scale,
        o.logits_soft_cap, o.window_left, 0, &tune);
  }

  const std::vector<int64_t> kv_shape = P == 0 ? std::vector<int64_t>{units, hk, D}
                                        : nhd  ? std::vector<int64_t>{units, P, hk, D}
                                               : std::vector<int64_t>{units, hk, P, D};
  auto qt = test::make_tensor(in.at(q_at), {total_q, hq, D}, dt);
  auto kt = test::make_tensor(kv.at(k_at), kv_shape, kvdt);
  auto vt = test::make_tensor(kv.at(v_at), kv_shape, kvdt);
  auto qot = test::make_tensor(in.at(qo_at), {B + 1}, i32);
  auto kvt = test::make_tensor(in.at(kvp_at), {B + 1}, i32);
  auto it = test::make_tensor(in.at(idx_at), {static_cast<int64_t>(indices.size())}, i32);
  auto lt = test::make_tensor(in.at(last_at), {static_cast<int64_t>(last.size())}, i32);
  auto ot = test::make_tensor(out.get(), {total_q, hq, D}, dt);

  // The work the masks leave: attended (query, key) pairs, 4 FLOPs per pair, head and dim.
  double pairs = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t ql = q_lens[static_cast<size_t>(b)], kl = kv_lens[static_cast<size_t>(b)];
    pairs += causal ? static_cast<double>(ql) * static_cast<double>(kl - ql) +
                          static_cast<double>(ql) * static_cast<double>(ql + 1) / 2.0
                    : static_cast<double>(ql) * static_cast<double>(kl);
  }
  std::string lens_text;
  for (size_t b = 0; b < q_lens.size() && b < 4; ++b) {
    lens_text += fmt::format("{}{}/{}", b ? "," : "", q_lens[b], kv_lens[b]);
  }
  if (q_lens.size() > 4) lens_text += ",...";
  BenchCase c;
  c.op = "batch_prefill";
  c.uri = ops::prefill_spec(raw_plan->data.cfg).uri;
  c.dtype = dtype;
  c.shape = {{"batch", B},        {"total_q", total_q}, {"qo_heads", hq},   {"kv_heads", hk},
             {"head_dim", D},     {"page_size", P},     {"layout", layout}, {"causal", causal},
             {"lens", lens_text}, {"pairs", pairs}};
  if (fp8) c.shape["kv_dtype"] = kv_dtype;
  c.label = fmt::format("batch_prefill {}{} {} {} batch={} q/kv={} heads={}/{} head_dim={} page={}",
                        dtype, fp8 ? "/e4m3" : "", causal ? "causal" : "full",
                        P > 0 ? layout : "ragged", B, lens_text, hq, hk, D, P);
  c.launch = [&](CUstream stream) {
    const kjit_status s =
        P > 0 ? kjit_batch_prefill_run(raw_plan, qt.get(), kt.get(), vt.get(), qot.get(), it.get(),
                                       kvt.get(), lt.get(), nullptr, ot.get(), nullptr, 1.0f, 1.0f,
                                       stream)
              : kjit_batch_prefill_ragged_run(raw_plan, qt.get(), kt.get(), vt.get(), qot.get(),
                                              kvt.get(), nullptr, ot.get(), nullptr, 1.0f, 1.0f,
                                              stream);
    if (s != KJIT_SUCCESS) throw Error(s, kjit_last_error());
  };
  c.bytes = 2.0 * static_cast<double>(kv_elems * es_kv) + 2.0 * static_cast<double>(nq * es);
  c.flops = 4.0 * pairs * static_cast<double>(hq * D);

  // The check: the fp64 reference on 8 query rows (each request's last one first, then random
  // ones), every qo head, each as a one-row problem over the keys its mask leaves.
  const double first_ms = first_call_ms(c);
  Check chk;
  if (opts.check) {
    std::vector<unsigned char> got(nq * es);
    out.download(got.data(), got.size());
    std::vector<std::pair<int64_t, int64_t>> rows;  // (request, token)
    for (int64_t b = 0; b < B && rows.size() < 4; ++b) {
      if (q_lens[static_cast<size_t>(b)] > 0)
        rows.push_back({b, q_lens[static_cast<size_t>(b)] - 1});
    }
    std::uniform_int_distribution<int64_t> pick_b(0, B - 1);
    for (int tries = 0; rows.size() < 8 && tries < 64; ++tries) {
      const int64_t b = pick_b(rng), ql = q_lens[static_cast<size_t>(b)];
      if (ql > 0) rows.push_back({b, std::uniform_int_distribution<int64_t>(0, ql - 1)(rng)});
    }
    c.shape["checked_rows"] = rows.size();
    for (const auto& picked : rows) {
      // Plain locals: the key lambda below captures the request (C++17 cannot capture a binding).
      const int64_t b = picked.first, t = picked.second;
      const int64_t ql = q_lens[static_cast<size_t>(b)], kl = kv_lens[static_cast<size_t>(b)];
      const int64_t keys = causal ? kl - ql + t + 1 : kl;  // one query row sees these keys
      ref::PrefillRefArgs a;
      a.batch = 1;
      a.qo_heads = hq;
      a.kv_heads = hk;
      a.head_dim = D;
      a.num_pages = keys;
      a.sm_scale = 1.0 / std::sqrt(static_cast<double>(D));
      a.causal = causal;
      a.qo_indptr = {0, 1};
      a.kv_indptr = {0, static_cast<int32_t>(keys)};
      const int64_t row = qo_indptr[static_cast<size_t>(b)] + t;
      auto elem = [&](size_t at, int64_t key, int64_t h, int64_t d) {
        int64_t unit = kv_indptr[static_cast<size_t>(b)] + key, slot = 0;
        if (P > 0) {
          unit = indices[static_cast<size_t>(kv_indptr[static_cast<size_t>(b)] + key / P)];
          slot = key % P;
        }
        const int64_t i = P == 0 ? (unit * hk + h) * D + d
                          : nhd  ? ((unit * P + slot) * hk + h) * D + d
                                 : ((unit * hk + h) * P + slot) * D + d;
        if (fp8) return ref::e4m3_to_double(kv.host[at + static_cast<size_t>(i)]);
        return ref::load_elem(kv.host.data() + at, static_cast<size_t>(i), dtype);
      };
      auto q = [&](int64_t, int64_t i, int64_t d) {
        return ref::load_elem(in.host.data() + q_at, static_cast<size_t>((row * hq + i) * D + d),
                              dtype);
      };
      auto k = [&](int64_t key, int64_t, int64_t h, int64_t d) { return elem(k_at, key, h, d); };
      auto v = [&](int64_t key, int64_t, int64_t h, int64_t d) { return elem(v_at, key, h, d); };
      std::vector<double> want, lse;
      ref::DecodeTolerance tol;
      // P is rounded to the MMAs' type: fp16 for fp8 keys and values whatever q's.
      const bool bf16_p = dtype == "bf16" && !fp8;
      tol.u_p = bf16_p ? 0x1p-8 : 0x1p-11;
      tol.eta_p = bf16_p ? 0x1p-134 : 0x1p-25;
      tol.u_out = ref::unit_roundoff(dtype);
      ref::prefill_attention(a, 1, q, k, v, want, lse, &tol);
      for (int64_t i = 0; i < hq * D; ++i) {
        chk.add(ref::load_elem(got.data(), static_cast<size_t>(row * hq * D + i), dtype),
                want[static_cast<size_t>(i)], tol.out[static_cast<size_t>(i)]);
      }
    }
  }
  return report(c, chk, first_ms, opts);
}

}  // namespace

void add_attention_benches(std::vector<BenchEntry>& out) {
  out.push_back(
      {"decode_attention",
       {"dtype", "batch", "kv_len", "qo_heads", "kv_heads", "head_dim", "page_size"},
       {"kv_dtype", "layout", "num_splits", "tactic"},
       bench_decode_attention,
       "dtype (q), batch, kv_len, qo_heads, kv_heads, head_dim, page_size, optional "
       "kv_dtype (e4m3), layout (nhd|hnd), num_splits; tactic (a forced tactic: split8_cluster, "
       "split4_kernel_s3, w2_ts64_jt2, ...; docs/autotune.md); "
       "checked on up to 4 requests, then a read-only probe of the same bytes"});
  out.push_back(
      {"batch_prefill",
       {"dtype", "qo_heads", "kv_heads", "head_dim", "page_size"},
       {"batch", "q_len", "kv_len", "lens", "causal", "layout", "kernel", "stages", "kv_dtype"},
       bench_batch_prefill,
       "dtype, qo_heads, kv_heads, head_dim, page_size (0: ragged k / v), and batch + q_len "
       "(+ kv_len >= q_len: the new tokens end the keys) or lens (comma-separated q = kv "
       "lengths), causal (0|1), layout (nhd|hnd), kv_dtype (e4m3: fp8 keys and values); "
       "tuning override kernel "
       "(mma_sm80|wgmma_sm90a|wgmma_pingpong_sm90a|wgmma_persistent_sm90a) and stages (the "
       "wgmma kernel's ring depth, 2 .. 6); FLOPs count the pairs the mask leaves; checked on 8 "
       "query rows"});
}

}  // namespace kjit::cli
