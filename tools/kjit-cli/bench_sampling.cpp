// `kjit-cli bench` cases of the sampling family: top_p / top_k / min_p / top_k_top_p sampling from
// probabilities, top_k_top_p_sampling (fused from logits), argmax and softmax. The check of a
// sampler is the exactness of its draws: every drawn token must be in the CPU reference's set (rows
// whose boundary token sits within rounding of the threshold accept either answer, and are
// counted). bytes = the probabilities / logits read (plus softmax's fp32 write).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_probe.hpp"
#include "commands.hpp"
#include "cuda/device.hpp"
#include "kjit/kjit.h"
#include "ops/sampling/sampling.hpp"
#include "reference/half.hpp"
#include "reference/sampling_ref.hpp"
#include "support/gpu.hpp"
#include "support/parallel_rows.hpp"
#include "support/sampling_options.hpp"
#include "util/error.hpp"

namespace kjit::cli {
namespace {

double float_arg(const ops::SetArgs& args, const std::string& name, double dflt, double lo,
                 double hi) {
  auto it = args.find(name);
  if (it == args.end()) return dflt;
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw UsageError(fmt::format("{}={} is not a number", name, it->second));
  }
  if (!(v >= lo && v <= hi)) throw UsageError(fmt::format("{} must be in [{}, {}]", name, lo, hi));
  return v;
}

// Logits like a language model's: N(0, sigma), a different row each time; in blocks of 64K on
// every core, each block from its own generator seeded from rng (batch 1024 holds 10^8).
std::vector<double> random_logits(std::vector<unsigned char>& host, size_t n,
                                  const std::string& dtype, std::mt19937_64& rng, double sigma) {
  host.resize(n * ref::elem_size(dtype));
  std::vector<double> v(n);
  constexpr size_t kBlock = size_t{1} << 16;
  const uint64_t seed = rng();
  test::parallel_rows(static_cast<int64_t>((n + kBlock - 1) / kBlock), [&](int64_t blk, int) {
    std::mt19937_64 g(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(blk + 1)));
    std::normal_distribution<double> nd(0.0, sigma);
    const size_t end = std::min(n, static_cast<size_t>(blk + 1) * kBlock);
    for (size_t i = static_cast<size_t>(blk) * kBlock; i < end; ++i) {
      ref::store_elem(host.data(), i, nd(g), dtype);
      v[i] = ref::load_elem(host.data(), i, dtype);
    }
  });
  return v;
}

// The input the logit benches share: dtype, batch and vocab from --set (a usage error before any
// GPU work), one fresh row of N(0, sigma) logits per row in that dtype, on the device, as xt.
struct LogitRows {
  LogitRows(const ops::SetArgs& args, int64_t max_vocab, double sigma)
      : dtype(args.at("dtype")),
        batch(ops::positive_int_arg(args, "batch", 1 << 20)),
        vocab(ops::positive_int_arg(args, "vocab", max_vocab)),
        n(static_cast<size_t>(batch * vocab)),
        es(dtype == "fp32" || dtype == "bf16" || dtype == "fp16"
               ? ref::elem_size(dtype)
               : throw UsageError("dtype must be fp32, bf16 or fp16")) {
    check_gpu();
    std::mt19937_64 rng(std::random_device{}());
    v = random_logits(host, n, dtype, rng, sigma);
    x = std::make_unique<test::DeviceBuffer>(host.size());
    x->upload(host.data(), host.size());
    xt = test::make_tensor(x->get(), {batch, vocab}, test::dl_dtype(dtype));
  }
  // Whether the rows allow the 16-byte vector path.
  bool aligned() const { return vocab % static_cast<int64_t>(16 / es) == 0; }

  std::string dtype;
  int64_t batch, vocab;
  size_t n, es;  // elements, bytes per element
  std::vector<unsigned char> host;
  std::vector<double> v;  // the stored values, as fp64
  std::unique_ptr<test::DeviceBuffer> x;
  test::Tensor xt;
};

// The input the probability benches share: batch and vocab from --set, one row per row of the
// softmax of fresh N(0, sigma) logits, stored as fp32, on the device, as xt; v holds the stored
// values as fp64.
struct ProbRows {
  ProbRows(const ops::SetArgs& args, double sigma)
      : batch(ops::positive_int_arg(args, "batch", 1 << 20)),
        vocab(ops::positive_int_arg(args, "vocab", ops::kFilterMaxVocab)),
        n(static_cast<size_t>(batch * vocab)) {
    check_gpu();
    std::mt19937_64 rng(std::random_device{}());
    v = random_logits(host, n, "fp32", rng, sigma);
    test::parallel_rows(batch, [&](int64_t r, int) {
      double* row = v.data() + r * vocab;
      double m = -INFINITY, s = 0;
      for (int64_t i = 0; i < vocab; ++i) m = std::max(m, row[i]);
      for (int64_t i = 0; i < vocab; ++i) s += row[i] = std::exp(row[i] - m);
      for (int64_t i = 0; i < vocab; ++i) {
        const size_t at = static_cast<size_t>(r * vocab + i);
        ref::store_elem(host.data(), at, row[i] / s, "fp32");
        row[i] = ref::load_elem(host.data(), at, "fp32");
      }
    });
    x = std::make_unique<test::DeviceBuffer>(host.size());
    x->upload(host.data(), host.size());
    xt = test::make_tensor(x->get(), {batch, vocab}, test::dl_dtype("fp32"));
  }
  std::vector<double> row(int64_t r) const {
    return std::vector<double>(v.begin() + r * vocab, v.begin() + (r + 1) * vocab);
  }

  int64_t batch, vocab;
  size_t n;
  std::vector<unsigned char> host;
  std::vector<double> v;
  std::unique_ptr<test::DeviceBuffer> x;
  test::Tensor xt;
};

// --set path=auto|single|cluster (default auto) and, with path=cluster, cluster=N (2..16; default:
// chosen by the batch) force the samplers' kernel path
// for the case, so that the one-block and the cluster path can be timed side by side in one run;
// threads=N (a multiple of 32 to 1024) forces the block size, mass=bounds|exact the top-p search,
// blocks_per_sm=N (path=single) caps the blocks an SM runs at once (fewer rows in flight).
// The case calls the ops layer with these as its ops::SampleTuning.
class PathChoice {
 public:
  explicit PathChoice(const ops::SetArgs& args) {
    const std::string path = args.count("path") ? args.at("path") : "auto";
    if (args.count("cluster")) {
      if (path != "cluster") throw UsageError("cluster=N needs path=cluster");
      tuning_.cluster =
          static_cast<int>(ops::positive_int_arg(args, "cluster", ops::kSampleMaxCluster));
      if (tuning_.cluster < 1) throw UsageError("cluster must be 1..16");
    }
    if (path == "auto") {
      tuning_.path = ops::SamplePath::kAuto;
    } else if (path == "single") {
      tuning_.path = ops::SamplePath::kSingle;
    } else if (path == "cluster") {
      tuning_.path = ops::SamplePath::kCluster;
    } else {
      throw UsageError("path must be auto, single or cluster");
    }
    tuning_.threads =
        args.count("threads") ? static_cast<int>(ops::positive_int_arg(args, "threads", 1024)) : 0;
    if (args.count("blocks_per_sm")) {
      if (path != "single") throw UsageError("blocks_per_sm=N needs path=single");
      tuning_.blocks_per_sm = static_cast<int>(ops::positive_int_arg(args, "blocks_per_sm", 32));
    }
    const std::string mass = args.count("mass") ? args.at("mass") : "";
    if (!mass.empty() && mass != "bounds" && mass != "exact") {
      throw UsageError("mass must be bounds or exact");
    }
    tuning_.mass = mass.empty() ? -1 : (mass == "exact" ? 1 : 0);
    ops::check_sample_tuning(tuning_);
    label_ = path == "auto" ? "" : fmt::format(" path={}", path);
    if (tuning_.cluster > 0) label_ += fmt::format(" cluster={}", tuning_.cluster);
    if (tuning_.threads > 0) label_ += fmt::format(" threads={}", tuning_.threads);
    if (tuning_.blocks_per_sm > 0)
      label_ += fmt::format(" blocks_per_sm={}", tuning_.blocks_per_sm);
    if (!mass.empty()) label_ += fmt::format(" mass={}", mass);
  }

  const ops::SampleTuning& tuning() const { return tuning_; }
  // What every call of the case reports having run (the same each time).
  ops::SampleRan* ran() const { return &ran_; }
  const std::string& label() const { return label_; }
  // After the first call: what the launch took, for the label and the URI.
  void describe_ran(BenchCase& c, ops::FilterConfig cfg) const {
    const int n = ran_.cluster_size;
    c.label += ran_.cluster_kernel() ? fmt::format(" (ran: cluster of {})", n)
                                     : std::string(" (ran: one block)");
    cfg.cluster = ran_.cluster_kernel() ? 1 : 0;
    cfg.mass = ran_.mass;
    c.uri = ops::filter_uri(cfg);
  }
  // The URI the case holds before its first call (describe_ran then names the launch's, which
  // the rows report): the cluster variant's when forced.
  std::string uri(ops::FilterConfig cfg, bool top_k_rows) const {
    cfg.cluster = tuning_.path == ops::SamplePath::kCluster ? 1 : 0;
    cfg.mass = ops::sample_mass(tuning_, top_k_rows);
    return ops::filter_uri(cfg);
  }

 private:
  ops::SampleTuning tuning_;
  mutable ops::SampleRan ran_;
  std::string label_;
};

// Device-resident seed, offset and outputs of one sampler.
struct DrawBuffers {
  test::DeviceBuffer seed{8}, offset{8}, samples, valid;
  test::Tensor seed_t, offset_t, samples_t, valid_t;
  explicit DrawBuffers(int64_t batch) : samples(batch * 4), valid(batch) {
    const uint64_t s = 20240601, o = 0;
    seed.upload(&s, 8);
    offset.upload(&o, 8);
    seed_t = test::make_tensor(seed.get(), {1}, test::dl_dtype("int64"));
    offset_t = test::make_tensor(offset.get(), {1}, test::dl_dtype("int64"));
    samples_t = test::make_tensor(samples.get(), {batch}, test::dl_dtype("int32"));
    valid_t = test::make_tensor(valid.get(), {batch}, DLDataType{kDLUInt, 8, 1});
  }
};

// Counts drawn tokens outside each row's reference set (invalid flags count too).
Check check_draws(const std::vector<double>& values, int64_t batch, int64_t vocab,
                  const ref::FilterSpec& spec, double temperature, bool logits,
                  const DrawBuffers& bufs) {
  std::vector<int32_t> got(static_cast<size_t>(batch));
  std::vector<uint8_t> valid(static_cast<size_t>(batch));
  bufs.samples.download(got.data(), got.size() * 4);
  bufs.valid.download(valid.data(), valid.size());
  // Each row's verdict on every core (a row's reference set sorts the row), then added in order.
  enum : uint8_t { kOut, kIn, kInBand };
  std::vector<uint8_t> verdict(static_cast<size_t>(batch));
  test::parallel_rows(batch, [&](int64_t r, int) {
    std::vector<double> w(values.begin() + r * vocab, values.begin() + (r + 1) * vocab);
    if (logits) {
      double m = -INFINITY;
      for (double x : w) m = std::max(m, x);
      for (double& x : w) x = std::exp((x - m) / temperature);
    }
    const auto keep = ref::keep_sets(w, spec);
    const int32_t t = got[static_cast<size_t>(r)];
    const bool ok = valid[static_cast<size_t>(r)] == 1 && t >= 0 && t < vocab &&
                    keep[static_cast<size_t>(t)] != ref::Keep::kNo;
    verdict[static_cast<size_t>(r)] = !ok                                               ? kOut
                                      : keep[static_cast<size_t>(t)] == ref::Keep::kMay ? kInBand
                                                                                        : kIn;
  });
  Check chk;
  long band = 0;
  for (uint8_t v : verdict) {
    chk.add(v == kOut ? 1.0 : 0.0, 0.0, 0.5);
    band += v == kInBand;
  }
  chk.note = fmt::format("{} of {} drawn tokens in the reference set ({} in the rounding band)",
                         batch - chk.bad, batch, band);
  return chk;
}

// The samplers from fp32 probabilities (kjit_top_p / top_k / min_p / top_k_top_p
// _sampling_from_probs): `filters` is the set of kFilter* bits the op applies.
int bench_probs_sampling(const ops::SetArgs& args, const BenchOptions& opts, const char* op,
                         int filters) {
  const bool use_k = filters & ops::kFilterTopK, use_p = filters & ops::kFilterTopP,
             use_min_p = filters & ops::kFilterMinP;
  const int64_t k = args.count("k") ? ops::positive_int_arg(args, "k", 1 << 30) : 50;
  const double p = float_arg(args, "p", 0.9, 1e-6, 1.0);
  const double min_p = float_arg(args, "min_p", 0.1, 0.0, 1.0);
  const double sigma = float_arg(args, "sigma", 2.0, 0.0, 100.0);
  ProbRows in(args, sigma);
  const int64_t batch = in.batch, vocab = in.vocab;
  const size_t n = in.n;
  DrawBuffers bufs(batch);

  const ops::FilterConfig cfg = ops::select_filter(ops::FilterOp::kSample, ops::FilterInput::kProbs,
                                                   ops::DType::kF32, vocab, vocab % 4 == 0);
  const PathChoice path(args);
  BenchCase c;
  c.op = op;
  c.uri = path.uri(cfg, use_k && k < vocab);
  c.dtype = "fp32";
  c.shape = {{"batch", batch}, {"vocab", vocab}};
  std::string params;
  if (use_k) {
    c.shape["k"] = k;
    params += fmt::format(" k={}", k);
  }
  if (use_p) {
    c.shape["p"] = p;
    params += fmt::format(" p={}", p);
  }
  if (use_min_p) {
    c.shape["min_p"] = min_p;
    params += fmt::format(" min_p={}", min_p);
  }
  c.shape["sigma"] = sigma;
  c.label = fmt::format("{} fp32 batch={} vocab={}{}{}", op, batch, vocab, params, path.label());
  ops::SampleArgs sa;  // kjit_<op>_from_probs's
  sa.filters = filters;
  sa.top_k.scalar = static_cast<int>(k);
  sa.top_p.scalar = static_cast<float>(p);
  sa.min_p.scalar = static_cast<float>(min_p);
  c.launch = [&](CUstream stream) {
    ops::sample("probs", ops::FilterInput::kProbs, in.xt.get(), sa, bufs.seed_t.get(),
                bufs.offset_t.get(), bufs.samples_t.get(), bufs.valid_t.get(), stream,
                path.tuning(), path.ran());
  };
  c.bytes = static_cast<double>(n) * 4;
  c.copy_src = in.x->get();
  c.copy_bytes = n * 2;

  const double first_ms = first_call_ms(c);
  path.describe_ran(c, cfg);
  ref::FilterSpec spec;
  if (use_k) spec.top_k = static_cast<int>(k);
  if (use_p) spec.top_p = p;
  if (use_min_p) spec.min_p = min_p;
  spec.value_tol = 2e-5;
  spec.mass_tol = 1e-4;
  return report(c, check_draws(in.v, batch, vocab, spec, 1.0, false, bufs), first_ms, opts);
}

int bench_top_k_top_p_sampling(const ops::SetArgs& args, const BenchOptions& opts) {
  const int64_t k = args.count("k") ? ops::positive_int_arg(args, "k", 1 << 30) : 50;
  const double p = float_arg(args, "p", 0.9, 1e-6, 1.0);
  const double temperature = float_arg(args, "temperature", 1.0, 1e-3, 100.0);
  const double sigma = float_arg(args, "sigma", 2.0, 0.0, 100.0);
  LogitRows in(args, ops::kFilterMaxVocab, sigma);
  const std::string& dtype = in.dtype;
  const int64_t batch = in.batch, vocab = in.vocab;
  const size_t n = in.n, es = in.es;
  DrawBuffers bufs(batch);

  const ops::DType dt = *ops::dtype_of(test::dl_dtype(dtype));
  const ops::FilterConfig cfg = ops::select_filter(
      ops::FilterOp::kSample, ops::FilterInput::kLogits, dt, vocab, in.aligned());
  const PathChoice path(args);
  BenchCase c;
  c.op = "top_k_top_p_sampling";
  c.uri = path.uri(cfg, k < vocab);
  c.dtype = dtype;
  c.shape = {{"batch", batch}, {"vocab", vocab}, {"k", k}, {"p", p}, {"temperature", temperature},
             {"sigma", sigma}};
  c.label = fmt::format("top_k_top_p_sampling {} batch={} vocab={} k={} p={} T={}{}", dtype, batch,
                        vocab, k, p, temperature, path.label());
  ops::SampleArgs sa;  // kjit_top_k_top_p_sampling_from_logits's
  sa.filters = ops::kFilterTopK | ops::kFilterTopP;
  sa.top_k.scalar = static_cast<int>(k);
  sa.top_p.scalar = static_cast<float>(p);
  sa.temperature.scalar = static_cast<float>(temperature);
  c.launch = [&](CUstream stream) {
    ops::sample("logits", ops::FilterInput::kLogits, in.xt.get(), sa, bufs.seed_t.get(),
                bufs.offset_t.get(), bufs.samples_t.get(), bufs.valid_t.get(), stream,
                path.tuning(), path.ran());
  };
  c.bytes = static_cast<double>(n * es);
  c.copy_src = in.x->get();
  c.copy_bytes = n * es / 2;

  const double first_ms = first_call_ms(c);
  path.describe_ran(c, cfg);
  ref::FilterSpec spec;
  spec.top_k = static_cast<int>(k);
  spec.top_p = p;
  spec.value_tol = 2e-5;
  spec.mass_tol = 2e-4;
  return report(c, check_draws(in.v, batch, vocab, spec, temperature, true, bufs), first_ms, opts);
}

int bench_argmax(const ops::SetArgs& args, const BenchOptions& opts) {
  LogitRows in(args, ops::kRowKernelMaxVocab, 2.0);
  const std::string& dtype = in.dtype;
  const int64_t batch = in.batch, vocab = in.vocab;
  const size_t n = in.n, es = in.es;
  const std::vector<double>& v = in.v;
  test::DeviceBuffer out(static_cast<size_t>(batch) * 8);
  auto ot = test::make_tensor(out.get(), {batch}, test::dl_dtype("int64"));
  const ops::DType dt = *ops::dtype_of(test::dl_dtype(dtype));
  // path=auto|block|cluster (cluster=2|4|8 with it, else the heuristic's size), threads=N
  // (32..1024) and unroll=1|2|4|8: the case's ops::ArgmaxTuning, for every call of this run.
  const std::string path = args.count("path") ? args.at("path") : "auto";
  if (path != "auto" && path != "block" && path != "cluster") {
    throw UsageError("path must be auto, block or cluster");
  }
  ops::ArgmaxTuning tuning;
  tuning.cluster =
      args.count("cluster") ? static_cast<int>(ops::positive_int_arg(args, "cluster", 8)) : 0;
  tuning.path = path == "block"     ? ops::ArgmaxPath::kBlock
                : path == "cluster" ? ops::ArgmaxPath::kCluster
                                    : ops::ArgmaxPath::kAuto;
  tuning.threads =
      args.count("threads") ? static_cast<int>(ops::positive_int_arg(args, "threads", 1024)) : 0;
  tuning.unroll =
      args.count("unroll") ? static_cast<int>(ops::positive_int_arg(args, "unroll", 8)) : 0;
  const cuda::DeviceInfo& info = cuda::device_info(0);
  const ops::ArgmaxPlan plan =
      ops::plan_argmax(dt, batch, vocab, in.aligned(), info.sm_count, info.major, tuning);
  BenchCase c;
  c.op = "argmax";
  c.uri = ops::argmax_uri(plan.cfg);
  c.dtype = dtype;
  c.shape = {{"batch", batch}, {"vocab", vocab}, {"threads", plan.threads}};
  c.label = fmt::format("argmax {} batch={} vocab={} blocks/row={} threads={} unroll={}", dtype,
                        batch, vocab, plan.cfg.cluster, plan.threads, plan.cfg.unroll);
  c.launch = [&](CUstream stream) { ops::argmax(in.xt.get(), ot.get(), stream, tuning); };
  c.bytes = static_cast<double>(n * es);
  c.copy_src = in.x->get();
  c.copy_bytes = n * es / 2;
  const double first_ms = first_call_ms(c);
  std::vector<int64_t> got(static_cast<size_t>(batch));
  out.download(got.data(), got.size() * 8);
  Check chk;
  for (int64_t r = 0; r < batch; ++r) {
    const std::vector<double> row(v.begin() + r * vocab, v.begin() + (r + 1) * vocab);
    chk.add(static_cast<double>(got[static_cast<size_t>(r)]), static_cast<double>(ref::argmax(row)),
            0.0);
  }
  const int rc1 = report(c, chk, first_ms, opts);
  // The ceiling: a pure read of the same bytes, timed the same way in the same run.
  const int rc2 =
      report_read_probe(in.x->get(), static_cast<int64_t>(n * es) / 16 * 16, c.label, opts);
  return rc1 != kExitOk ? rc1 : rc2;
}

int bench_softmax(const ops::SetArgs& args, const BenchOptions& opts) {
  const double temperature = float_arg(args, "temperature", 1.0, 1e-3, 100.0);
  LogitRows in(args, ops::kRowKernelMaxVocab, 2.0);
  const std::string& dtype = in.dtype;
  const int64_t batch = in.batch, vocab = in.vocab;
  const size_t n = in.n, es = in.es;
  const std::vector<double>& v = in.v;
  test::DeviceBuffer out(n * 4);
  out.fill(0xFF);
  auto ot = test::make_tensor(out.get(), {batch, vocab}, test::dl_dtype("fp32"));
  const ops::DType dt = *ops::dtype_of(test::dl_dtype(dtype));
  // --set cluster=1|2|4|8: blocks per row forced (an ops::SoftmaxTuning), else the plan's.
  ops::SoftmaxTuning tuning;
  tuning.cluster =
      args.count("cluster") ? static_cast<int>(ops::positive_int_arg(args, "cluster", 8)) : 0;
  ops::RowConfig cfg = ops::select_softmax(dt, vocab, in.aligned());
  const cuda::DeviceInfo& info = cuda::device_info(0);
  cfg.cluster = tuning.cluster > 0
                    ? tuning.cluster
                    : ops::softmax_cluster_size(batch, vocab, info.sm_count, info.major);
  BenchCase c;
  c.op = "softmax";
  c.uri = ops::softmax_uri(cfg);
  c.dtype = dtype;
  c.shape = {{"batch", batch}, {"vocab", vocab}, {"temperature", temperature}};
  c.label = fmt::format("softmax {} batch={} vocab={} T={} blocks/row={}", dtype, batch, vocab,
                        temperature, cfg.cluster);
  // The ops-layer call: what kjit_softmax runs, with the bench's tuning.
  c.launch = [&](CUstream stream) {
    ops::softmax(in.xt.get(), ot.get(),
                 ops::RowParam<float>{nullptr, static_cast<float>(temperature)}, stream, tuning);
  };
  // Two reads of the logits (the second mostly from L2) count once: HBM traffic is one read and
  // the fp32 write.
  c.bytes = static_cast<double>(n * es + n * 4);
  c.copy_src = in.x->get();
  c.copy_bytes = std::min((n * es + n * 4) / 2, n * es);  // as much as the logits allow
  const double first_ms = first_call_ms(c);
  std::vector<float> got(n);
  out.download(got.data(), n * 4);
  Check chk;
  for (int64_t r = 0; r < batch; ++r) {
    const std::vector<double> row(v.begin() + r * vocab, v.begin() + (r + 1) * vocab);
    const std::vector<double> want = ref::softmax(row, temperature);
    for (int64_t i = 0; i < vocab; ++i) {
      chk.add(got[static_cast<size_t>(r * vocab + i)], want[static_cast<size_t>(i)],
              2e-5 * want[static_cast<size_t>(i)] + 1e-30);
    }
  }
  return report(c, chk, first_ms, opts);
}

// kjit_top_k_mask_logits: keeps the logits >= the row's k-th largest (ties kept), the rest -inf.
// The check is exact: the kernel compares the stored values, so the reference does too.
int bench_top_k_mask_logits(const ops::SetArgs& args, const BenchOptions& opts) {
  const int64_t k = args.count("k") ? ops::positive_int_arg(args, "k", 1 << 30) : 50;
  LogitRows in(args, ops::kFilterMaxVocab, 2.0);
  const std::string& dtype = in.dtype;
  const int64_t batch = in.batch, vocab = in.vocab;
  const size_t n = in.n, es = in.es;
  const std::vector<double>& v = in.v;
  test::DeviceBuffer out(in.host.size());
  out.fill(0xFF);
  auto ot = test::make_tensor(out.get(), {batch, vocab}, test::dl_dtype(dtype));
  const ops::DType dt = *ops::dtype_of(test::dl_dtype(dtype));
  BenchCase c;
  c.op = "top_k_mask_logits";
  c.uri = ops::filter_uri(ops::select_filter(ops::FilterOp::kMask, ops::FilterInput::kLogitKeys, dt,
                                             vocab, in.aligned()));
  c.dtype = dtype;
  c.shape = {{"batch", batch}, {"vocab", vocab}, {"k", k}};
  c.label = fmt::format("top_k_mask_logits {} batch={} vocab={} k={}", dtype, batch, vocab, k);
  c.launch = [&](CUstream stream) {
    const kjit_status st = kjit_top_k_mask_logits(
        in.xt.get(), nullptr, ot.get(), test::SamplingOptions().top_k(static_cast<int>(k)), stream);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = static_cast<double>(2 * n * es);  // the logits read and the masked copy written
  c.copy_src = in.x->get();
  c.copy_bytes = n * es;
  const double first_ms = first_call_ms(c);
  std::vector<unsigned char> got(in.host.size());
  out.download(got.data(), got.size());
  Check chk;
  for (int64_t r = 0; r < batch; ++r) {
    std::vector<double> row(v.begin() + r * vocab, v.begin() + (r + 1) * vocab);
    std::vector<double> sorted = row;
    const int64_t kk = std::min(k, vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (kk - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(kk - 1)];
    for (int64_t i = 0; i < vocab; ++i) {
      const double want = row[static_cast<size_t>(i)] >= kth
                              ? row[static_cast<size_t>(i)]
                              : -std::numeric_limits<double>::infinity();
      const double g = ref::load_elem(got.data(), static_cast<size_t>(r * vocab + i), dtype);
      // A masked element must be -inf exactly (|-inf - -inf| is NaN, so compare it as a flag).
      if (std::isinf(want)) {
        chk.add(g == want ? 0.0 : 1.0, 0.0, 0.0);
      } else {
        chk.add(g, want, 0.0);
      }
    }
  }
  return report(c, chk, first_ms, opts);
}

// kjit_top_k_renorm_probs / kjit_top_p_renorm_probs: p / (mass of the kept set) inside the
// set, 0 outside. The check is ref::check_renorm_row's (the GPU test's): membership against the
// fp64 reference set, values against the mass of the set the kernel kept.
int bench_renorm_probs(const ops::SetArgs& args, const BenchOptions& opts, bool top_k) {
  const int64_t k = args.count("k") ? ops::positive_int_arg(args, "k", 1 << 30) : 50;
  const double p = float_arg(args, "p", 0.9, 1e-6, 1.0);
  ProbRows in(args, 2.0);
  const int64_t batch = in.batch, vocab = in.vocab;
  const size_t n = in.n;
  test::DeviceBuffer out(n * 4);
  out.fill(0xFF);
  auto ot = test::make_tensor(out.get(), {batch, vocab}, test::dl_dtype("fp32"));
  BenchCase c;
  c.op = top_k ? "top_k_renorm_probs" : "top_p_renorm_probs";
  c.uri = ops::filter_uri(ops::select_filter(ops::FilterOp::kRenorm, ops::FilterInput::kProbs,
                                             ops::DType::kF32, vocab, vocab % 4 == 0));
  c.dtype = "fp32";
  c.shape = {{"batch", batch}, {"vocab", vocab}};
  if (top_k) {
    c.shape["k"] = k;
  } else {
    c.shape["p"] = p;
  }
  c.label = top_k ? fmt::format("{} batch={} vocab={} k={}", c.op, batch, vocab, k)
                  : fmt::format("{} batch={} vocab={} p={}", c.op, batch, vocab, p);
  c.launch = [&](CUstream stream) {
    const kjit_status st =
        top_k
            ? kjit_top_k_renorm_probs(in.xt.get(), nullptr, ot.get(),
                                      test::SamplingOptions().top_k(static_cast<int>(k)), stream)
            : kjit_top_p_renorm_probs(in.xt.get(), nullptr, ot.get(),
                                      test::SamplingOptions().top_p(static_cast<float>(p)), stream);
    if (st != KJIT_SUCCESS) throw Error(st, kjit_last_error());
  };
  c.bytes = static_cast<double>(2 * n * 4);  // the probabilities read and the row written
  c.copy_src = in.x->get();
  c.copy_bytes = n * 4;
  const double first_ms = first_call_ms(c);
  std::vector<float> got(n);
  out.download(got.data(), n * 4);
  ref::FilterSpec spec;
  if (top_k) spec.top_k = static_cast<int>(k);
  if (!top_k) spec.top_p = p;
  spec.mass_tol = 1e-4;
  Check chk;
  long band = 0, not_threshold = 0;
  for (int64_t r = 0; r < batch; ++r) {
    const std::vector<double> w = in.row(r);
    const ref::RenormCheck rc =
        ref::check_renorm_row(w, ref::keep_sets(w, spec), got.data() + r * vocab);
    chk.add(static_cast<double>(rc.bad + (rc.threshold ? 0 : 1)), 0.0, 0.5);
    chk.add(rc.sum, 1.0, 1e-3);
    band += rc.in_band;
    not_threshold += !rc.threshold;
  }
  chk.note = fmt::format(
      "{} rows: tokens outside the reference set or off the kept mass, and "
      "rows whose kept set is not a threshold ({}), counted as errors; {} "
      "tokens in the rounding band",
      batch, not_threshold, band);
  return report(c, chk, first_ms, opts);
}

}  // namespace

// kjit_top_k over fresh N(0, sigma) logits: the indices checked exactly against ref::top_k
// (their values are the input's), then timed beside a copy of the logits' bytes.
int bench_top_k(const ops::SetArgs& args, const BenchOptions& opts) {
  LogitRows in(args, ops::kRowKernelMaxVocab, 2.0);
  const int64_t k = args.count("k") ? ops::positive_int_arg(args, "k", in.vocab) : 50;
  const int64_t batch = in.batch, vocab = in.vocab;
  test::DeviceBuffer vals(static_cast<size_t>(batch * k) * in.es),
      idx(static_cast<size_t>(batch * k) * 4);
  vals.fill(0xFF);
  idx.fill(0xFF);
  auto vt = test::make_tensor(vals.get(), {batch, k}, test::dl_dtype(in.dtype));
  auto it = test::make_tensor(idx.get(), {batch, k}, test::dl_dtype("int32"));
  const ops::RowConfig cfg =
      ops::select_top_k(*ops::dtype_of(test::dl_dtype(in.dtype)), vocab, k, in.aligned());
  BenchCase c;
  c.op = "top_k";
  c.uri = ops::top_k_uri(cfg);
  c.dtype = in.dtype;
  c.shape = {{"batch", batch}, {"vocab", vocab}, {"k", k}};
  c.label = fmt::format("top_k {} batch={} vocab={} k={}", in.dtype, batch, vocab, k);
  c.launch = [&](CUstream stream) {
    ops::top_k(in.xt.get(), vt.get(), it.get(), static_cast<int>(k), stream);
  };
  // The passes after the first read the row from L2: HBM traffic is one read and the outputs.
  c.bytes = static_cast<double>(in.n * in.es) + static_cast<double>(batch * k) * (in.es + 4);
  c.copy_src = in.x->get();
  c.copy_bytes = in.n * in.es / 2;
  const double first_ms = first_call_ms(c);
  std::vector<int32_t> got(static_cast<size_t>(batch * k));
  idx.download(got.data(), got.size() * 4);
  Check chk;
  for (int64_t r = 0; r < batch; ++r) {
    const std::vector<double> row(in.v.begin() + r * vocab, in.v.begin() + (r + 1) * vocab);
    const std::vector<int64_t> want = ref::top_k(row, k);
    for (int64_t j = 0; j < k; ++j) {
      chk.add(static_cast<double>(got[static_cast<size_t>(r * k + j)]),
              static_cast<double>(want[static_cast<size_t>(j)]), 0.0);
    }
  }
  return report(c, chk, first_ms, opts);
}

// A probability sampler's optional --set names: its own, then the path choice's.
std::vector<std::string> probs_optional(std::vector<std::string> own) {
  for (const char* a : {"sigma", "path", "cluster", "threads", "mass", "blocks_per_sm"}) {
    own.push_back(a);
  }
  return own;
}

void add_sampling_benches(std::vector<BenchEntry>& out) {
  // The samplers from fp32 probabilities.
#define KJIT_PROBS_HELP(params)                                                            \
  "batch, vocab (fp32 probabilities), optional " params                                    \
  ", sigma (2: logits' spread), path "                                                     \
  "(auto|single|cluster), cluster (1..16, with path=cluster), threads (block size), mass " \
  "(bounds|exact), blocks_per_sm (1..32, with path=single)"
  out.push_back({"top_p_sampling",
                 {"batch", "vocab"},
                 probs_optional({"p"}),
                 [](const ops::SetArgs& a, const BenchOptions& o) {
                   return bench_probs_sampling(a, o, "top_p_sampling", ops::kFilterTopP);
                 },
                 KJIT_PROBS_HELP("p (0.9)")});
  out.push_back({"top_k_sampling",
                 {"batch", "vocab"},
                 probs_optional({"k"}),
                 [](const ops::SetArgs& a, const BenchOptions& o) {
                   return bench_probs_sampling(a, o, "top_k_sampling", ops::kFilterTopK);
                 },
                 KJIT_PROBS_HELP("k (50)")});
  out.push_back({"min_p_sampling",
                 {"batch", "vocab"},
                 probs_optional({"min_p"}),
                 [](const ops::SetArgs& a, const BenchOptions& o) {
                   return bench_probs_sampling(a, o, "min_p_sampling", ops::kFilterMinP);
                 },
                 KJIT_PROBS_HELP("min_p (0.1)")});
  out.push_back({"top_k_top_p_sampling_probs",
                 {"batch", "vocab"},
                 probs_optional({"k", "p"}),
                 [](const ops::SetArgs& a, const BenchOptions& o) {
                   return bench_probs_sampling(a, o, "top_k_top_p_sampling_probs",
                                               ops::kFilterTopK | ops::kFilterTopP);
                 },
                 KJIT_PROBS_HELP("k (50), p (0.9)")});
#undef KJIT_PROBS_HELP
  out.push_back(
      {"top_k_top_p_sampling",
       {"dtype", "batch", "vocab"},
       {"k", "p", "temperature", "sigma", "path", "cluster", "threads", "mass", "blocks_per_sm"},
       bench_top_k_top_p_sampling,
       "dtype, batch, vocab, optional k (50), p (0.9), temperature (1), sigma (2), "
       "path (auto|single|cluster), cluster (1..16, with path=cluster), threads (block "
       "size), mass (bounds|exact: top-p without top-k), blocks_per_sm (1..32, with "
       "path=single)"});
  out.push_back({"argmax",
                 {"dtype", "batch", "vocab"},
                 {"path", "cluster", "threads", "unroll"},
                 bench_argmax,
                 "dtype, batch, vocab, optional path (auto|block|cluster) and cluster (2|4|8), "
                 "threads (32..1024) and unroll (1|2|4|8); then a read-only probe of the same "
                 "bytes"});
  out.push_back({"softmax",
                 {"dtype", "batch", "vocab"},
                 {"temperature", "cluster"},
                 bench_softmax,
                 "dtype, batch, vocab, optional temperature (1), cluster (blocks per row: 1, 2, "
                 "4 or 8; default the plan's)"});
  out.push_back(
      {"top_k_renorm_probs",
       {"batch", "vocab"},
       {"k"},
       [](const ops::SetArgs& a, const BenchOptions& o) { return bench_renorm_probs(a, o, true); },
       "batch, vocab, optional k (50): fp32 probabilities"});
  out.push_back(
      {"top_p_renorm_probs",
       {"batch", "vocab"},
       {"p"},
       [](const ops::SetArgs& a, const BenchOptions& o) { return bench_renorm_probs(a, o, false); },
       "batch, vocab, optional p (0.9): fp32 probabilities"});
  out.push_back({"top_k_mask_logits",
                 {"dtype", "batch", "vocab"},
                 {"k"},
                 bench_top_k_mask_logits,
                 "dtype, batch, vocab, optional k (50)"});
  out.push_back({"top_k",
                 {"dtype", "batch", "vocab"},
                 {"k"},
                 bench_top_k,
                 "dtype, batch, vocab, optional k (50): kjit_top_k's values and int32 indices"});
}

}  // namespace kjit::cli
