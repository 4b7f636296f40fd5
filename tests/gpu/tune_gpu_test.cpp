// The autotuner on the GPU. Its timer (src/tune/gpu_timer.*): every mode returns one positive
// sample per request, and the samples scale with the work (a memset eight times larger takes
// several times longer), so a tactic's time is the tactic's, not the harness's. Then kjit_gemm
// through it (below).
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "gemm_test_util.hpp"
#include "kjit/kjit.h"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "reference/gemm_ref.hpp"
#include "reference/half.hpp"
#include "runtime/jit_core.hpp"
#include "support/gpu.hpp"
#include "tune/autotuner.hpp"
#include "tune/gpu_timer.hpp"
#include "tune/process_tuner.hpp"
#include "util/fs.hpp"

extern char** environ;

using namespace kjit;
namespace ops = kjit::ops;
namespace ref = kjit::ref;

TEST_CASE("tune gpu: the timer measures the work in every mode", "[gpu][tune]") {
  test::DeviceBuffer buf(size_t{512} << 20);
  const auto d_ptr = reinterpret_cast<CUdeviceptr>(buf.get());
  auto memset_of = [&](size_t bytes) {
    return [d_ptr, bytes](CUstream s) {
      KJIT_CU_CHECK(cuda::driver().cuMemsetD8Async(d_ptr, 0x5a, bytes, s));
    };
  };
  for (const char* name : {"eager-cold", "eager-hot", "graph-cold", "graph-hot"}) {
    INFO(name);
    const tune::TimingMode mode = tune::TimingMode::parse(name);
    CHECK(mode.name() == name);
    const std::vector<double> small = tune::time_on_gpu(0, memset_of(size_t{64} << 20), mode, 9);
    const std::vector<double> large = tune::time_on_gpu(0, memset_of(size_t{512} << 20), mode, 9);
    REQUIRE(small.size() == 9);
    REQUIRE(large.size() == 9);
    for (double x : small) CHECK((std::isfinite(x) && x > 0));
    const double s = tune::summarize("small", small).median_us;
    const double l = tune::summarize("large", large).median_us;
    INFO("64 MB " << s << " us, 512 MB " << l << " us");
    CHECK(l > 4 * s);
    // 64 MB written in more than 5 us would be over 13 TB/s: not a real measurement.
    CHECK(s > 5.0);
  }
  CHECK_THROWS(tune::TimingMode::parse("graph"));
}

// ---- kjit_gemm through the autotuner ------------------------------------------------------------
// Every tactic of a decode and a large bucket against the fp64 reference (a tactic the tuner may
// pick must be correct, whichever it is), then a real tuning run in a child process (CUDA
// contexts do not survive fork: the test binary runs its hidden child case again): its record is
// stored, the tuned call is checked against the reference, and under stream capture the stored
// result is used without measuring, while an unseen bucket gets the default and stores nothing.

namespace {

// a [m, k] and b [n, k] bf16, random in [-1, 1]; bias [n] when asked; out [m, n] bf16 poisoned
// (NaN), or random when beta reads it. `call` runs the GEMM; out is then checked.
void check_tuned_gemm(
    int64_t m, int64_t n, int64_t k, bool with_bias, float beta,
    const std::function<void(const DLTensor*, const DLTensor*, const DLTensor*, DLTensor*)>& call) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  const std::string dt = "bf16";
  auto random = [&](size_t count) {
    std::vector<unsigned char> v(count * 2);
    for (size_t i = 0; i < count; ++i) ref::store_elem(v.data(), i, dist(rng), dt);
    return v;
  };
  const std::vector<unsigned char> a = random(m * k), b = random(n * k), bias = random(n);
  std::vector<unsigned char> out(static_cast<size_t>(m * n) * 2, 0xFF);
  if (beta != 0.0f) out = random(m * n);
  const std::vector<unsigned char> old = out;
  test::DeviceBuffer a_d(a.size()), b_d(b.size()), bias_d(bias.size()), out_d(out.size());
  a_d.upload(a.data(), a.size());
  b_d.upload(b.data(), b.size());
  bias_d.upload(bias.data(), bias.size());
  out_d.upload(out.data(), out.size());
  auto at = test::make_tensor(a_d.get(), {m, k}, test::dl_dtype(dt));
  auto bt = test::make_tensor(b_d.get(), {n, k}, test::dl_dtype(dt));
  auto biast = test::make_tensor(bias_d.get(), {n}, test::dl_dtype(dt));
  auto outt = test::make_tensor(out_d.get(), {m, n}, test::dl_dtype(dt));
  call(at.get(), bt.get(), with_bias ? biast.get() : nullptr, outt.get());
  test::device_synchronize();
  out_d.download(out.data(), out.size());
  std::vector<double> b_rows(static_cast<size_t>(n * k)), bias_v(static_cast<size_t>(n), 0.0);
  for (size_t i = 0; i < b_rows.size(); ++i) b_rows[i] = ref::load_elem(b.data(), i, dt);
  for (int64_t j = 0; with_bias && j < n; ++j) bias_v[j] = ref::load_elem(bias.data(), j, dt);
  const test::GemmOut o{m, n, k, 1.0, beta, n, dt, &out, &old};
  test::check_gemm_out(
      o,
      [&](int64_t r, double* row) {
        for (int64_t i = 0; i < k; ++i) row[i] = ref::load_elem(a.data(), r * k + i, dt);
      },
      b_rows, bias_v,
      [&](double want, double sum_abs) { return ref::gemm_tolerance(dt, want, sum_abs, k); });
}

// Runs this binary's test case `name` in a new process with `env` added; its exit status.
int run_child(const std::string& name, const std::vector<std::string>& env) {
  std::vector<std::string> envs = env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string var = kv.substr(0, kv.find('=') + 1);  // "NAME="
    const bool overridden = std::any_of(env.begin(), env.end(),
                                        [&](const std::string& o) { return o.rfind(var, 0) == 0; });
    if (!overridden) envs.push_back(kv);
  }
  std::vector<char*> envp;
  for (std::string& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", warn = "--warn", no_tests = "NoTests", spec = name;
  std::vector<char*> argv{exe.data(), spec.data(), warn.data(), no_tests.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

constexpr int64_t kTunedM = 5, kUnseenM = 40, kN = 384, kK = 320;

tune::TuneKey gemm_key_of(int64_t m) {
  return {ops::kGemmTuneOp, ops::kGemmTacticSpace,
          ops::gemm_bucket(ops::DType::kBF16, ops::DType::kBF16, m, kN, kK, false, false),
          "eager-cold"};
}

tune::TuneStore process_store() {
  return tune::TuneStore(jit::JitCore::global().settings().cache_dir / "tuning");
}

kjit_status c_gemm(const DLTensor* a, const DLTensor* b, DLTensor* out, int autotune,
                   CUstream stream) {
  kjit_gemm_options o;
  kjit_gemm_options_init(&o);
  o.autotune = autotune;
  return kjit_gemm(a, b, nullptr, out, &o, stream);
}

}  // namespace

TEST_CASE("tune gpu: every gemm tactic of a decode and a large bucket is correct",
          "[gpu][tune][gemm][sm90a]") {
  const ops::GemmTarget target = ops::gemm_target(0, true);
  struct Shape {
    int64_t m, n, k;
    bool bias;
    float beta;
  };
  for (const Shape& s : {Shape{5, 384, 320, true, 0.5f}, Shape{600, 300, 264, false, 0.0f}}) {
    const ops::GemmConfig c =
        ops::select_gemm(ops::DType::kBF16, ops::DType::kBF16, s.m, s.n, s.k, target);
    const auto tactics =
        ops::gemm_tactics(ops::gemm_tactic_of(c, 1), ops::gemm_m_bucket(s.m), s.n, s.k, target);
    CHECK(tactics.size() >= 5);
    for (const ops::GemmTactic& t : tactics) {
      INFO("m " << s.m << " n " << s.n << " k " << s.k << " tactic " << t.name());
      check_tuned_gemm(
          s.m, s.n, s.k, s.bias, s.beta,
          [&](const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out) {
            ops::GemmTuning tuning;
            tuning.tactic = t.name();
            ops::gemm(a, b, bias, out, 1.0f, s.beta, nullptr, tuning);
          });
    }
  }
  // A tactic the call cannot run is refused, not run.
  ops::GemmTuning bad;
  bad.tactic = "decode_t128_split2";  // 600 rows do not fit a 128-token tile
  test::DeviceBuffer buf(size_t{1} << 20);
  auto a = test::make_tensor(buf.get(), {600, 64}, test::dl_dtype("bf16"));
  auto b = test::make_tensor(buf.get(), {64, 64}, test::dl_dtype("bf16"));
  test::DeviceBuffer out_buf(600 * 64 * 2);
  auto out = test::make_tensor(out_buf.get(), {600, 64}, test::dl_dtype("bf16"));
  CHECK_THROWS_WITH(ops::gemm(a.get(), b.get(), nullptr, out.get(), 1.0f, 0.0f, nullptr, bad),
                    Catch::Contains("not valid for this call"));
}

TEST_CASE("tune gpu: the paired persistent tactics are correct", "[gpu][tune][gemm][sm90a]") {
  // Clusters of two blocks sharing b's tile (sm90_*_p2): more pair tiles than clusters run at
  // once (each cluster walks several, its two rings in step), an odd count of row tiles (the last
  // pair's second block has no rows: it must take its stages and write nothing), a row tile and
  // a column tile cut short, K with a short last block, beta and bias (the register epilogue) and
  // beta 0 (the TMA store), and a call with a single row tile.
  REQUIRE(test::gpu_caps().sm90a());
  const ops::GemmTarget target = ops::gemm_target(0, true);
  struct Shape {
    int64_t m, n, k;
    bool bias;
    float beta;
  };
  for (const char* tactic : {"sm90_bn256_s4_p2", "sm90_bn128_s6_p2"}) {
    for (const Shape& s : {Shape{4000, 3000, 264, false, 0.0f}, Shape{1100, 4100, 200, true, 0.5f},
                           Shape{1100, 1000, 72, false, 0.0f}, Shape{100, 300, 64, true, 0.0f}}) {
      const auto t = ops::GemmTactic::parse(tactic);
      REQUIRE(t);
      INFO("m " << s.m << " n " << s.n << " k " << s.k << " tactic " << tactic);
      REQUIRE(ops::gemm_tactic_valid(*t, ops::gemm_m_bucket(s.m), s.n, s.k, target));
      check_tuned_gemm(
          s.m, s.n, s.k, s.bias, s.beta,
          [&](const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out) {
            ops::GemmTuning tuning;
            tuning.tactic = tactic;
            ops::gemm(a, b, bias, out, 1.0f, s.beta, nullptr, tuning);
          });
    }
  }
}

TEST_CASE("tune gpu child: a gemm call in a tuning process", "[.tune_child]") {
  const char* step_env = std::getenv("KJIT_TEST_TUNE_CHILD");
  REQUIRE(step_env != nullptr);
  const std::string step = step_env;
  if (step == "tune") {
    // KJIT_AUTOTUNE=1: the first call measures, stores and runs the winner.
    check_tuned_gemm(kTunedM, kN, kK, false, 0.0f,
                     [](const DLTensor* a, const DLTensor* b, const DLTensor*, DLTensor* out) {
                       REQUIRE(c_gemm(a, b, out, -1, nullptr) == KJIT_SUCCESS);
                     });
    return;
  }
  REQUIRE(step == "capture");  // KJIT_AUTOTUNE=2: re-tune, except where the stream captures
  const auto rec = process_store().find(tune::device_fingerprint(0), gemm_key_of(kTunedM));
  REQUIRE(rec);
  const cuda::Driver& d = cuda::driver();
  CUstream stream = nullptr;
  KJIT_CU_CHECK(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int64_t m : {kTunedM, kUnseenM}) {
    INFO("m " << m);
    check_tuned_gemm(m, kN, kK, false, 0.0f,
                     [&](const DLTensor* a, const DLTensor* b, const DLTensor*, DLTensor* out) {
                       // Kernels load outside the capture (a load inside it is refused): the
                       // default's, and the stored tactic's.
                       REQUIRE(c_gemm(a, b, out, 0, stream) == KJIT_SUCCESS);
                       if (m == kTunedM) {
                         ops::GemmTuning stored;
                         stored.tactic = rec->tactic;
                         ops::gemm(a, b, nullptr, out, 1.0f, 0.0f, stream, stored);
                       }
                       KJIT_CU_CHECK(d.cuStreamSynchronize(stream));
                       KJIT_CU_CHECK(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(out->data),
                                                       0xFF, m * kN * 2, stream));
                       CUgraph graph = nullptr;
                       CUgraphExec exec = nullptr;
                       KJIT_CU_CHECK(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
                       const kjit_status st = c_gemm(a, b, out, -1, stream);
                       const std::string err = kjit_last_error();
                       KJIT_CU_CHECK(d.cuStreamEndCapture(stream, &graph));
                       INFO(err);
                       REQUIRE(st == KJIT_SUCCESS);
                       KJIT_CU_CHECK(d.cuGraphInstantiateWithFlags(&exec, graph, 0));
                       KJIT_CU_CHECK(d.cuGraphLaunch(exec, stream));
                       KJIT_CU_CHECK(d.cuStreamSynchronize(stream));
                       d.cuGraphExecDestroy(exec);
                       d.cuGraphDestroy(graph);
                     });
  }
  d.cuStreamDestroy(stream);
}

TEST_CASE("tune gpu: a gemm tuned in one process is stored, correct, and served under capture",
          "[gpu][tune][gemm][sm90a]") {
  const tune::TuneStore store = process_store();
  const tune::Fingerprint& fp = tune::device_fingerprint(0);
  const std::filesystem::path tuned = store.path_of(fp, gemm_key_of(kTunedM));
  const std::filesystem::path unseen = store.path_of(fp, gemm_key_of(kUnseenM));
  std::filesystem::remove(tuned);
  std::filesystem::remove(unseen);

  REQUIRE(run_child("tune gpu child: a gemm call in a tuning process",
                    {"KJIT_AUTOTUNE=1", "KJIT_TEST_TUNE_CHILD=tune"}) == 0);
  const auto rec = store.find(fp, gemm_key_of(kTunedM));
  REQUIRE(rec);
  // The decode kernel at eight splits, each with its default ring and the deeper ring of one
  // block an SM (16 tokens: 12 stages against 6), and four sm90 tiles were timed (the fallback is
  // not).
  CHECK(rec->tried.size() == 20);
  CHECK(rec->default_tactic.rfind("decode_t16_split", 0) == 0);
  bool chosen_tried = false;
  for (const tune::Measured& m : rec->tried) {
    CHECK(m.median_us > 0);
    chosen_tried |= m.tactic == rec->tactic;
  }
  CHECK(chosen_tried);
  const auto before = util::read_file(tuned);
  REQUIRE(before);

  REQUIRE(run_child("tune gpu child: a gemm call in a tuning process",
                    {"KJIT_AUTOTUNE=2", "KJIT_TEST_TUNE_CHILD=capture"}) == 0);
  CHECK(util::read_file(tuned) == before);       // served, not measured again
  CHECK_FALSE(std::filesystem::exists(unseen));  // the default, nothing measured or stored
  std::filesystem::remove(tuned);
}
