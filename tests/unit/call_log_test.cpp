// The API call log (KJIT_LOGLEVEL and friends, docs/logging.md) without a GPU: settings parsing,
// the level-0 path (describer never runs, nothing allocated), each level's exact lines, filters,
// statistics and dumps of host tensors (which the ops reject, after the log has them), the dump
// bounds, and `kjit-cli replay` on dumps it cannot or must not reproduce.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/call_log.hpp"
#include "diag/dump.hpp"
#include "api/guard.hpp"
#include "runtime/jit_core.hpp"
#include "kjit/kjit.h"
#include "support/gpu.hpp"
#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "util/glob.hpp"
#include "diag/safetensors.hpp"

// ---- Counting allocations on the calling thread -------------------------------------------------
// Replaces the global operator new for this test binary; it only counts while a test asks. Every
// replaceable form is replaced, so each allocation and its release both go through malloc / free
// (AddressSanitizer's alloc-dealloc-mismatch check stays on: a form left to ASan, e.g. Catch2's
// new (std::nothrow), would otherwise be released by the replaced delete).

namespace {
std::atomic<long> g_allocations{0};
thread_local bool t_count_allocations = false;

void* counted_alloc_or_null(std::size_t n) noexcept {
  if (t_count_allocations) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* counted_alloc(std::size_t n) {
  if (void* p = counted_alloc_or_null(n)) return p;
  throw std::bad_alloc();
}
void* counted_aligned_alloc_or_null(std::size_t n, std::align_val_t a) noexcept {
  if (t_count_allocations) g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  const std::size_t align = std::max(static_cast<std::size_t>(a), sizeof(void*));
  return posix_memalign(&p, align, n ? n : 1) == 0 ? p : nullptr;
}
void* counted_aligned_alloc(std::size_t n, std::align_val_t a) {
  if (void* p = counted_aligned_alloc_or_null(n, a)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) {
  return counted_alloc(n);
}
void* operator new[](std::size_t n) {
  return counted_alloc(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc_or_null(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc_or_null(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_aligned_alloc(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_aligned_alloc(n, a);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_aligned_alloc_or_null(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_aligned_alloc_or_null(n, a);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace {

namespace fs = std::filesystem;
namespace st = kjit::util::safetensors;
using kjit::api::CallLog;
using kjit::api::guarded;
using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::ScopedEnv;
using kjit::test::TempDir;
using kjit::test::Tensor;

// Rereads the settings when the test's variables go out of scope, so later tests run unlogged.
struct ReloadOnExit {
  ~ReloadOnExit() { kjit::api::reload_log_settings(); }
};

// The logging variables for one test, every other one unset; the log goes to log.<pid>.txt.
struct LogEnv {
  explicit LogEnv(const char* level, const char* include = nullptr, const char* exclude = nullptr,
                  const char* max_count = nullptr, const char* max_bytes = nullptr)
      : level_("KJIT_LOGLEVEL", level),
        dest_("KJIT_LOGDEST", (dir.path() / "log.%i.txt").c_str()),
        include_("KJIT_LOG_INCLUDE", include),
        exclude_("KJIT_LOG_EXCLUDE", exclude),
        dump_dir_("KJIT_DUMP_DIR", (dir.path() / "dumps").c_str()),
        max_count_("KJIT_DUMP_MAX_COUNT", max_count),
        max_bytes_("KJIT_DUMP_MAX_BYTES", max_bytes) {
    kjit::api::reload_log_settings();
  }
  fs::path log_path() const { return dir.path() / ("log." + std::to_string(::getpid()) + ".txt"); }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::ifstream f(log_path());
    for (std::string l; std::getline(f, l);) out.push_back(l);
    return out;
  }
  std::vector<fs::path> dumps() const {
    std::vector<fs::path> out;
    if (!fs::exists(dir.path() / "dumps")) return out;
    for (auto& e : fs::directory_iterator(dir.path() / "dumps")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }

  ReloadOnExit reload_;
  TempDir dir;

 private:
  ScopedEnv level_;
  ScopedEnv dest_, include_, exclude_, dump_dir_, max_count_, max_bytes_;
};

// Splits "[kjit-api PID:CALL] rest" into the call number and the rest; -1 when not a log line.
long call_of(const std::string& line, std::string* rest = nullptr) {
  static const std::regex re(R"(^\[kjit-api (\d+):(\d+)\] (.*)$)");
  std::smatch m;
  if (!std::regex_match(line, m, re)) return -1;
  if (std::stol(m[1]) != ::getpid()) return -1;
  if (rest) *rest = m[3];
  return std::stol(m[2]);
}

// The lines of one call without their prefix.
std::vector<std::string> bodies(const std::vector<std::string>& lines, long call) {
  std::vector<std::string> out;
  for (const auto& l : lines) {
    std::string rest;
    if (call_of(l, &rest) == call) out.push_back(rest);
  }
  return out;
}

long last_call(const std::vector<std::string>& lines) {
  long c = -1;
  for (const auto& l : lines) c = std::max(c, call_of(l));
  return c;
}

// Fake device addresses: never dereferenced (these calls fail validation, and the log does not
// read device memory below level 5).
void* const kIn = reinterpret_cast<void*>(0x10000000);
void* const kW = reinterpret_cast<void*>(0x20000000);
void* const kOut = reinterpret_cast<void*>(0x30000000);

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CliRun {
  int code = -1;
  std::string out;
};

// kjit-cli with the logging variables removed, so the replay itself is not logged.
CliRun cli(const std::string& args) {
  std::string cmd =
      "env -u KJIT_LOGLEVEL -u KJIT_LOGDEST -u KJIT_DUMP_DIR '" KJIT_CLI_PATH "' " + args + " 2>&1";
  CliRun r;
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  REQUIRE(sh.code != -1);
  r.code = sh.code;
  r.out = sh.out;
  return r;
}

}  // namespace

// ---- Settings -----------------------------------------------------------------------------------

TEST_CASE("call log: KJIT_LOGLEVEL values round down to a documented level", "[call_log]") {
  using kjit::api::parse_log_level;
  const std::pair<const char*, int> rows[] = {
      {"0", 0},   {"1", 1}, {"2", 1},   {"3", 3},   {"4", 3},
      {"5", 5},   {"9", 5}, {"10", 10}, {"11", 10}, {"99999999999999999999999", 0},
      {" 3 ", 3}, {"", 0}};
  for (const auto& [text, level] : rows) {
    INFO(text);
    CHECK(parse_log_level(text) == level);
  }
  for (const char* bad : {"abc", "-1", "3.5", "1e3", "0x3", "99999999999999999999999"}) {
    INFO(bad);
    bool ok = true;
    CHECK(parse_log_level(bad, &ok) == 0);
    CHECK_FALSE(ok);
  }
  bool ok = false;
  CHECK(parse_log_level("10", &ok) == 10);
  CHECK(ok);
}

TEST_CASE("call log: byte counts take binary suffixes", "[call_log]") {
  using kjit::api::parse_byte_count;
  uint64_t v = 0;
  CHECK(parse_byte_count("0", &v));
  CHECK(v == 0);
  CHECK(parse_byte_count("1234", &v));
  CHECK(v == 1234);
  CHECK(parse_byte_count("20G", &v));
  CHECK(v == (20ull << 30));
  CHECK(parse_byte_count("3k", &v));
  CHECK(v == 3072);
  CHECK(parse_byte_count("5MiB", &v));
  CHECK(v == (5ull << 20));
  CHECK(parse_byte_count("2 TB", &v));
  CHECK(v == (2ull << 40));
  CHECK(parse_byte_count("7B", &v));
  CHECK(v == 7);
  for (const char* bad :
       {"", "G", "1.5G", "-1", "12X", "1GG", "99999999999999999999", "17179869184T"}) {
    INFO(bad);
    CHECK_FALSE(parse_byte_count(bad, &v));
  }
}

TEST_CASE("call log: KJIT_LOGDEST replaces every %i with the pid", "[call_log]") {
  using kjit::api::expand_log_dest;
  CHECK(expand_log_dest("/tmp/kjit.%i.log", 4242) == "/tmp/kjit.4242.log");
  CHECK(expand_log_dest("%i/%i", 7) == "7/7");
  CHECK(expand_log_dest("a%xb%", 7) == "a%xb%");
  CHECK(expand_log_dest("stderr", 7) == "stderr");
}

TEST_CASE("call log: comma lists are trimmed and empty items dropped", "[call_log]") {
  CHECK(kjit::util::split_list(" a, b,,c , ") == std::vector<std::string>{"a", "b", "c"});
  CHECK(kjit::util::split_list("").empty());
  CHECK(kjit::util::glob_match("kjit_*rope*", "kjit_apply_rope_pos_ids"));
  CHECK_FALSE(kjit::util::glob_match("rope", "kjit_apply_rope_pos_ids"));
}

TEST_CASE("call log: include and exclude patterns select APIs", "[call_log]") {
  kjit::api::LogSettings s;
  using kjit::api::api_selected;
  CHECK(api_selected(s, "kjit_rmsnorm"));  // no patterns: everything
  s.include = {"rmsnorm"};                 // the short name matches ...
  CHECK(api_selected(s, "kjit_rmsnorm"));
  CHECK_FALSE(api_selected(s, "kjit_gemma_rmsnorm"));  // ... the whole of it
  s.include = {"kjit_rmsnorm"};                        // so does the full one
  CHECK(api_selected(s, "kjit_rmsnorm"));
  s.include = {"*rmsnorm*", "layernorm"};
  CHECK(api_selected(s, "kjit_gemma_fused_add_rmsnorm"));
  CHECK(api_selected(s, "kjit_layernorm"));
  CHECK_FALSE(api_selected(s, "kjit_silu_and_mul"));
  s.exclude = {"gemma_*"};  // exclude wins
  CHECK_FALSE(api_selected(s, "kjit_gemma_rmsnorm"));
  CHECK(api_selected(s, "kjit_rmsnorm"));
  s.include.clear();
  s.exclude = {"kjit_apply_*"};
  CHECK_FALSE(api_selected(s, "kjit_apply_rope_pos_ids"));
  CHECK(api_selected(s, "kjit_append_paged_kv_cache"));
}

TEST_CASE("call log: settings come from the environment, bad values warn and fall back",
          "[call_log]") {
  ReloadOnExit reload;
  ScopedEnv a("KJIT_LOGLEVEL", "4"), b("KJIT_LOGDEST", "stdout"), c("KJIT_LOG_INCLUDE", "x, y"),
      d("KJIT_LOG_EXCLUDE", "z"), e("KJIT_DUMP_DIR", "/tmp/d"), f("KJIT_DUMP_MAX_COUNT", "lots"),
      g("KJIT_DUMP_MAX_BYTES", "1M");
  kjit::api::LogSettings s = kjit::api::LogSettings::from_env();
  CHECK(s.level == 3);
  CHECK(s.dest == "stdout");
  CHECK(s.include == std::vector<std::string>{"x", "y"});
  CHECK(s.exclude == std::vector<std::string>{"z"});
  CHECK(s.dump_dir == "/tmp/d");
  CHECK(s.dump_max_count == 1000);  // "lots" is not a count
  CHECK(s.dump_max_bytes == (1ull << 20));
  REQUIRE(s.warnings.size() == 1);
  CHECK(s.warnings[0].find("KJIT_DUMP_MAX_COUNT=lots") != std::string::npos);

  ScopedEnv h("KJIT_LOGLEVEL", nullptr), i("KJIT_DUMP_MAX_COUNT", nullptr),
      j("KJIT_DUMP_MAX_BYTES", nullptr), k("KJIT_LOGDEST", nullptr);
  s = kjit::api::LogSettings::from_env();
  CHECK(s.level == 0);
  CHECK(s.dest == "stderr");
  CHECK(s.dump_max_count == 1000);
  CHECK(s.dump_max_bytes == (20ull << 30));
  CHECK(s.warnings.empty());
}

// ---- Level 0 ------------------------------------------------------------------------------------

TEST_CASE("call log: level 0 never runs the describer and allocates nothing", "[call_log]") {
  ReloadOnExit reload;
  ScopedEnv level("KJIT_LOGLEVEL", nullptr);
  kjit::api::reload_log_settings();
  int described = 0, ran = 0;
  const long before = g_allocations.load();
  t_count_allocations = true;
  for (int i = 0; i < 1000; ++i) {
    kjit_status s = guarded(
        "kjit_test_level0",
        [&](CallLog& log) {
          ++described;
          log.scalar("x", i);
        },
        [&] { ++ran; });
    if (s != KJIT_SUCCESS) break;
  }
  t_count_allocations = false;
  CHECK(g_allocations.load() - before == 0);
  CHECK(described == 0);
  CHECK(ran == 1000);
}

TEST_CASE("call log: the allocation counter sees allocations (so the level-0 test can fail)",
          "[call_log]") {
  const long before = g_allocations.load();
  t_count_allocations = true;
  auto* p = new std::vector<int>(100);
  t_count_allocations = false;
  delete p;
  CHECK(g_allocations.load() - before >= 2);
}

TEST_CASE("call log: level 0 writes nothing and opens no file", "[call_log]") {
  LogEnv env("0");
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  CHECK(kjit_rmsnorm(in.get(), nullptr, in.get(), 1e-6f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK_FALSE(fs::exists(env.log_path()));
}

TEST_CASE("call log: level 1 logs the name (and a failure), never the arguments", "[call_log]") {
  LogEnv env("1");
  int described = 0;
  CHECK(guarded(
            "kjit_test_l1", [&](CallLog&) { ++described; }, [] {}) == KJIT_SUCCESS);
  CHECK(guarded(
            "kjit_test_l1", [&](CallLog&) { ++described; },
            [] { kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "boom {}", 1); }) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(described == 0);
  auto lines = env.lines();
  REQUIRE(lines.size() == 3);
  const long first = call_of(lines[0]);
  REQUIRE(first > 0);
  auto a = bodies(lines, first);
  REQUIRE(a.size() == 1);
  CHECK(std::regex_match(a[0], std::regex(R"(kjit_test_l1 tid=\d+)")));
  auto b = bodies(lines, first + 1);
  REQUIRE(b.size() == 2);
  CHECK(std::regex_match(b[0], std::regex(R"(kjit_test_l1 tid=\d+)")));
  CHECK(b[1] == "-> KJIT_ERROR_INVALID_ARGUMENT: kjit_test_l1: boom 1");
}

// ---- Level 3 ------------------------------------------------------------------------------------

TEST_CASE("call log: level 3 logs every argument and the error of a rejected kjit_rmsnorm",
          "[call_log]") {
  // The same call unlogged, for its status and message.
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor w = make_tensor(kW, {64}, dl_dtype("fp16"));  // wrong dtype: rejected
  Tensor out = make_tensor(kOut, {4, 64}, dl_dtype("bf16"), {128, 1});
  out.t.byte_offset = 2;
  const kjit_status plain = kjit_rmsnorm(in.get(), w.get(), out.get(), 1e-6f, nullptr);
  const std::string plain_error = kjit_last_error();
  REQUIRE(plain == KJIT_ERROR_INVALID_ARGUMENT);

  LogEnv env("3");
  CHECK(kjit_rmsnorm(in.get(), w.get(), out.get(), 1e-6f, nullptr) == plain);
  CHECK(kjit_last_error() == plain_error);  // logging changes neither
  auto lines = env.lines();
  const long call = last_call(lines);
  auto b = bodies(lines, call);
  REQUIRE(b.size() == 7);
  CHECK(lines.size() == 7);
  CHECK(std::regex_match(b[0], std::regex(R"(kjit_rmsnorm tid=\d+)")));
  CHECK(b[1] == "  in input: bf16[4,64] strides=null offset=0 cuda:0 ptr=0x10000000 align=256");
  CHECK(b[2] == "  in weight: fp16[64] strides=null offset=0 cuda:0 ptr=0x20000000 align=256");
  CHECK(b[3] == "  out out: bf16[4,64] strides=[128,1] offset=2 cuda:0 ptr=0x30000000 align=2");
  CHECK(b[4] == "  scalar eps: 1e-06 (float32)");
  CHECK(b[5] == "  stream: 0x0");
  CHECK(b[6] == "-> KJIT_ERROR_INVALID_ARGUMENT: " + plain_error);
}

TEST_CASE("call log: level 3 shows NULL and malformed tensors without reading them", "[call_log]") {
  LogEnv env("3");
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  DLTensor bad = in.t;
  bad.ndim = -3;
  DLTensor no_shape = in.t;
  no_shape.shape = nullptr;
  CHECK(kjit_rmsnorm(&bad, nullptr, &no_shape, 1e-6f, reinterpret_cast<void*>(0x1234)) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  auto b = bodies(env.lines(), last_call(env.lines()));
  REQUIRE(b.size() == 7);
  CHECK(b[1] ==
        "  in input: bf16[ndim=-3 invalid] strides=null offset=0 cuda:0 ptr=0x10000000 "
        "align=256");
  CHECK(b[2] == "  in weight: NULL");
  CHECK(b[3] ==
        "  out out: bf16[ndim=2 shape=NULL] strides=null offset=0 cuda:0 "
        "ptr=0x10000000 align=256");
  CHECK(b[5] == "  stream: 0x1234");
}

TEST_CASE("call log: level 3 logs scalars of every type, the kernel and success", "[call_log]") {
  LogEnv env("3");
  std::vector<std::string> seen_during;
  kjit_status s = guarded(
      "kjit_test_l3",
      [&](CallLog& log) {
        log.scalar("a", 0.1f).scalar("b", 0.1).scalar("c", -3).scalar("d", int64_t{1} << 40);
        log.scalar("e", std::numeric_limits<float>::quiet_NaN()).stream(nullptr);
      },
      [&] {
        // The arguments are on disk before the body runs (a launch that kills the process
        // cannot take them with it).
        seen_during = env.lines();
        kjit::jit::LoadedKernel k;
        k.uri = "rmsnorm_dtype_bf16_hidden_64";
        k.target = {9, 0, false};
        k.device = 0;
        kjit::jit::notify_kernel(k);
      });
  CHECK(s == KJIT_SUCCESS);
  auto lines = env.lines();
  auto b = bodies(lines, last_call(lines));
  REQUIRE(b.size() == 9);
  CHECK(b[1] == "  scalar a: 0.1 (float32)");
  CHECK(b[2] == "  scalar b: 0.1 (float64)");
  CHECK(b[3] == "  scalar c: -3 (int32)");
  CHECK(b[4] == "  scalar d: 1099511627776 (int64)");
  CHECK(b[5] == "  scalar e: nan (float32)");
  CHECK(b[6] == "  stream: 0x0");
  CHECK(b[7] == "  kernel: rmsnorm_dtype_bf16_hidden_64 arch=sm_90 device=0");
  CHECK(b[8] == "-> KJIT_SUCCESS");
  CHECK(seen_during.size() == 7);  // header + 6 arguments, before the body
}

TEST_CASE("call log: level 3 logs an options struct field by field and an enum as its value",
          "[call_log]") {
  LogEnv env("3");
  std::vector<float> p = {0.5f, 0.5f};
  std::vector<float> y(2);
  Tensor probs = make_tensor(p.data(), {1, 2}, dl_dtype("fp32"), {}, 0, kDLCPU);
  Tensor out = make_tensor(y.data(), {1, 2}, dl_dtype("fp32"), {}, 0, kDLCPU);
  auto has = [&](const std::string& line) {
    auto b = bodies(env.lines(), last_call(env.lines()));
    return std::find(b.begin(), b.end(), line) != b.end();
  };
  kjit_sampling_options o;
  kjit_sampling_options_init(&o);
  o.top_k = 7;
  o.top_p = 0.25f;  // past struct_size: the call uses (and the log shows) the default
  o.struct_size = offsetof(kjit_sampling_options, top_k) + sizeof(int);
  kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(), &o, nullptr);
  CHECK(has("  scalar options.top_k: 7 (int32)"));
  CHECK(has("  scalar options.top_p: 1 (float32)"));
  CHECK(has("  scalar options.temperature: 1 (float32)"));
  CHECK_FALSE(has("  scalar options.struct_size: 3 (int64)"));
  kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(), nullptr, nullptr);
  CHECK(has("  scalar options.top_k: 2147483647 (int32)"));
  o.struct_size = 3;  // unreadable: logged alone, so that a replay fails the same way
  kjit_top_k_renorm_probs(probs.get(), nullptr, out.get(), &o, nullptr);
  CHECK(has("  scalar options.struct_size: 3 (int64)"));
  CHECK_FALSE(has("  scalar options.top_k: 7 (int32)"));
  kjit_apply_rope_with_cos_sin_cache(nullptr, nullptr, nullptr, nullptr, 4, KJIT_ROPE_INTERLEAVED,
                                     nullptr);
  CHECK(has("  scalar layout: 1 (int32)"));
}

TEST_CASE("call log: an entry point without a describer logs its name and status", "[call_log]") {
  LogEnv env("3");
  CHECK(guarded("kjit_test_plain", [] {}) == KJIT_SUCCESS);
  auto b = bodies(env.lines(), last_call(env.lines()));
  REQUIRE(b.size() == 2);
  CHECK(b[0].rfind("kjit_test_plain tid=", 0) == 0);
  CHECK(b[1] == "-> KJIT_SUCCESS");
}

TEST_CASE("call log: include / exclude decide per API, describer included", "[call_log]") {
  {
    LogEnv env("3", "layernorm,kjit_test_in*");
    int described = 0;
    guarded(
        "kjit_test_out", [&](CallLog&) { ++described; }, [] {});
    guarded(
        "kjit_test_in", [&](CallLog&) { ++described; }, [] {});
    Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
    kjit_rmsnorm(in.get(), nullptr, in.get(), 1e-6f, nullptr);
    kjit_layernorm(in.get(), nullptr, nullptr, in.get(), 1e-6f, nullptr);
    CHECK(described == 1);
    std::string text = read_text(env.log_path());
    CHECK(text.find("kjit_test_in tid=") != std::string::npos);
    CHECK(text.find("kjit_layernorm tid=") != std::string::npos);
    CHECK(text.find("kjit_test_out") == std::string::npos);
    CHECK(text.find("kjit_rmsnorm") == std::string::npos);
  }
  {
    LogEnv env("3", nullptr, "*norm*");
    Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
    kjit_rmsnorm(in.get(), nullptr, in.get(), 1e-6f, nullptr);
    kjit_silu_and_mul(in.get(), nullptr, nullptr);
    std::string text = read_text(env.log_path());
    CHECK(text.find("kjit_rmsnorm") == std::string::npos);
    CHECK(text.find("kjit_silu_and_mul tid=") != std::string::npos);
  }
}

TEST_CASE("call log: blocks from threads never interleave", "[call_log]") {
  LogEnv env("3");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 200; ++i) {
        guarded(
            "kjit_test_threads",
            [&](CallLog& log) { log.scalar("i", i).scalar("x", 1.5f).stream(nullptr); }, [] {});
      }
    });
  }
  for (auto& t : threads) t.join();
  auto lines = env.lines();
  CHECK(lines.size() == 800 * 5);
  std::map<long, std::vector<std::string>> calls;
  for (const auto& l : lines) {
    std::string rest;
    long c = call_of(l, &rest);
    REQUIRE(c > 0);
    calls[c].push_back(rest);
  }
  CHECK(calls.size() == 800);
  for (const auto& [c, b] : calls) {
    REQUIRE(b.size() == 5);
    CHECK(b[0].rfind("kjit_test_threads tid=", 0) == 0);
    CHECK(b[2] == "  scalar x: 1.5 (float32)");
    CHECK(b[4] == "-> KJIT_SUCCESS");
  }
}

// ---- Level 5: statistics ------------------------------------------------------------------------

TEST_CASE("call log: level 5 gives statistics of host inputs, strided views gathered",
          "[call_log]") {
  LogEnv env("5");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // [2, 3] with a row stride of 4: the gap element (NaN) is not part of the tensor.
  std::vector<float> x = {1.0f, -2.0f, 3.5f, nan, 0.25f, inf, nan, 99.0f};
  std::vector<float> w = {1.0f, 1.0f, 1.0f};
  std::vector<float> y(8, 0.0f);
  Tensor in = make_tensor(x.data(), {2, 3}, dl_dtype("fp32"), {4, 1}, 0, kDLCPU);
  Tensor wt = make_tensor(w.data(), {3}, dl_dtype("fp32"), {}, 0, kDLCPU);
  Tensor out = make_tensor(y.data(), {2, 3}, dl_dtype("fp32"), {}, 0, kDLCPU);
  // Elements: 1, -2, 3.5 | 0.25, inf, nan -> finite 1, -2, 3.5, 0.25.
  CHECK(kjit_rmsnorm(in.get(), wt.get(), out.get(), 1e-6f, nullptr) ==
        KJIT_ERROR_INVALID_ARGUMENT);  // host tensors: rejected, after the log read them
  auto b = bodies(env.lines(), last_call(env.lines()));
  REQUIRE(b.size() == 9);
  CHECK(b[6] == "  stats before input: min=-2 max=3.5 mean=0.6875 nan=1 inf=1 n=6");
  CHECK(b[7] == "  stats before weight: min=1 max=1 mean=1 nan=0 inf=0 n=3");
  CHECK(b[8].rfind("-> KJIT_ERROR_INVALID_ARGUMENT: ", 0) == 0);
}

TEST_CASE("call log: level 5 statistics of bf16, int32 and empty host tensors", "[call_log]") {
  LogEnv env("5");
  std::vector<uint16_t> bf = {0x3F80, 0xC000, 0x7FC0, 0x4040};  // 1, -2, nan, 3
  std::vector<int32_t> ids = {5, -7, 11};
  Tensor q = make_tensor(bf.data(), {1, 1, 4}, dl_dtype("bf16"), {}, 0, kDLCPU);
  Tensor pos = make_tensor(ids.data(), {3}, dl_dtype("int32"), {}, 0, kDLCPU);
  Tensor none = make_tensor(bf.data(), {0, 1, 4}, dl_dtype("bf16"), {}, 0, kDLCPU);
  kjit_apply_rope_with_cos_sin_cache(pos.get(), nullptr, q.get(), none.get(), 4, KJIT_ROPE_NEOX,
                                     nullptr);
  auto b = bodies(env.lines(), last_call(env.lines()));
  std::vector<std::string> stats;
  for (const auto& l : b) {
    if (l.rfind("  stats ", 0) == 0) stats.push_back(l);
  }
  REQUIRE(stats.size() == 4);
  CHECK(stats[0] == "  stats before positions: min=-7 max=11 mean=3 nan=0 inf=0 n=3");
  CHECK(stats[1] == "  stats before cos_sin_cache: unavailable (NULL)");
  CHECK(stats[2] == "  stats before q: min=-2 max=3 mean=0.666667 nan=1 inf=0 n=4");
  CHECK(stats[3] == "  stats before k: min=- max=- mean=- nan=0 inf=0 n=0");
}

TEST_CASE("call log: level 5 never faults on device pointers it cannot read", "[call_log]") {
  LogEnv env("5");
  Tensor in = make_tensor(kIn, {4, 64}, dl_dtype("bf16"));
  Tensor w = make_tensor(kW, {64}, dl_dtype("fp16"));
  CHECK(kjit_rmsnorm(in.get(), w.get(), in.get(), 1e-6f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  auto b = bodies(env.lines(), last_call(env.lines()));
  // Without a GPU the sync fails and says why; with one the fake addresses fail to copy.
  bool unavailable = false;
  for (const auto& l : b) {
    unavailable = unavailable || l.rfind("  stats before input: unavailable (", 0) == 0;
  }
  CHECK(unavailable);
  CHECK(b.back().rfind("-> KJIT_ERROR_INVALID_ARGUMENT: ", 0) == 0);
}

// ---- Level 10: dumps ----------------------------------------------------------------------------

namespace {

// A host-tensor rmsnorm: rejected by validation, but dumped (inputs, call.json) first.
struct HostCall {
  std::vector<float> x = {1, 2, 3, 99, 4, 5, 6, 99};  // [2, 3] with row stride 4
  std::vector<float> w = {0.5f, 0.25f, 0.125f};
  std::vector<float> y = std::vector<float>(6, 0.0f);
  Tensor in = make_tensor(x.data(), {2, 3}, dl_dtype("fp32"), {4, 1}, 0, kDLCPU);
  Tensor wt = make_tensor(w.data(), {3}, dl_dtype("fp32"), {}, 0, kDLCPU);
  Tensor out = make_tensor(y.data(), {2, 3}, dl_dtype("fp32"), {}, 0, kDLCPU);
  kjit_status run() { return kjit_rmsnorm(in.get(), wt.get(), out.get(), 1e-6f, nullptr); }
  // In and weight are written (36 bytes); out would be on success (24 more), so 60 are reserved.
  static constexpr uint64_t kWritten = 36, kReserved = 60;
};

}  // namespace

TEST_CASE("call log: level 10 dumps a call's inputs and call.json before running it",
          "[call_log]") {
  LogEnv env("10");
  HostCall c;
  CHECK(c.run() == KJIT_ERROR_INVALID_ARGUMENT);
  const std::string error = kjit_last_error();
  auto dumps = env.dumps();
  REQUIRE(dumps.size() == 1);
  const std::string name = dumps[0].filename().string();
  CHECK(std::regex_match(name, std::regex(R"(\d{8}-\d{6}\.\d{3}_pid)" + std::to_string(::getpid()) +
                                          R"(_kjit_rmsnorm_call\d{4,})")));
  // The log names the folder.
  CHECK(read_text(env.log_path()).find("  dump: " + dumps[0].string() + "\n") != std::string::npos);

  st::File in = st::File::read(dumps[0] / "inputs.safetensors");
  REQUIRE(in.tensors().size() == 2);
  const st::TensorInfo* x = in.find("input");
  REQUIRE(x != nullptr);
  CHECK(x->dtype == st::Dtype::kF32);
  CHECK(x->shape == std::vector<int64_t>{2, 3});
  const float logical[] = {1, 2, 3, 4, 5, 6};  // the gap is not dumped
  CHECK(in.data(*x) == std::string_view(reinterpret_cast<const char*>(logical), 24));
  const st::TensorInfo* w = in.find("weight");
  REQUIRE(w != nullptr);
  CHECK(in.data(*w) == std::string_view(reinterpret_cast<const char*>(c.w.data()), 12));
  CHECK(in.metadata().at("kjit_api") == "kjit_rmsnorm");
  CHECK_FALSE(fs::exists(dumps[0] / "outputs.safetensors"));  // the call failed

  auto j = nlohmann::json::parse(read_text(dumps[0] / "call.json"));
  CHECK(j["format"] == "kjit-call-dump");
  CHECK(j["api"] == "kjit_rmsnorm");
  CHECK(j["kjit_version"] == KJIT_VERSION_STRING);
  CHECK(j["status"] == "KJIT_ERROR_INVALID_ARGUMENT");
  CHECK(j["message"] == error);
  CHECK(j["loglevel"] == 10);
  CHECK(j["kernels"].empty());
  CHECK(j.contains("jit"));
  REQUIRE(j["args"].size() == 5);
  auto& a0 = j["args"][0];
  CHECK(a0["name"] == "input");
  CHECK(a0["kind"] == "in");
  CHECK(a0["dtype"] == "fp32");
  CHECK(a0["safetensors_dtype"] == "F32");
  CHECK(a0["shape"] == nlohmann::json::array({2, 3}));
  CHECK(a0["strides"] == nlohmann::json::array({4, 1}));
  CHECK(a0["strides_given"] == true);
  CHECK(a0["device"]["label"] == "cpu:0");
  CHECK(a0["data"] == "inputs.safetensors");
  CHECK(j["args"][2]["name"] == "out");
  CHECK(j["args"][2]["kind"] == "out");
  CHECK(j["args"][2]["strides"] == nlohmann::json::array({3, 1}));
  CHECK(j["args"][2]["strides_given"] == false);
  auto& eps = j["args"][3];
  CHECK(eps["kind"] == "scalar");
  CHECK(eps["type"] == "float32");
  float f = 1e-6f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  CHECK(eps["bits"] == fmt::format("{:#010x}", bits));
  CHECK(eps["value"].get<double>() == static_cast<double>(f));
  CHECK(j["args"][4]["kind"] == "stream");
}

TEST_CASE("call log: an in-place call records the alias", "[call_log]") {
  LogEnv env("10");
  HostCall c;
  kjit_rmsnorm(c.in.get(), c.wt.get(), c.in.get(), 1e-6f, nullptr);
  auto dumps = env.dumps();
  REQUIRE(dumps.size() == 1);
  auto j = nlohmann::json::parse(read_text(dumps[0] / "call.json"));
  CHECK(j["args"][2]["alias_of"] == "input");
  CHECK_FALSE(j["args"][0].contains("alias_of"));
}

TEST_CASE("call log: KJIT_DUMP_MAX_COUNT stops at exactly that many dumps", "[call_log]") {
  LogEnv env("10", nullptr, nullptr, "3");
  HostCall c;
  for (int i = 0; i < 6; ++i) c.run();
  CHECK(env.dumps().size() == 3);
  std::string text = read_text(env.log_path());
  const std::string msg = "dump: stopped: KJIT_DUMP_MAX_COUNT=3 reached (3 calls dumped)";
  const size_t at = text.find(msg);
  CHECK(at != std::string::npos);
  CHECK(text.find(msg, at + 1) == std::string::npos);  // said once
  CHECK(text.find("dump: stopped", at + 1) == std::string::npos);
}

TEST_CASE("call log: KJIT_DUMP_MAX_BYTES stops at exactly the byte limit", "[call_log]") {
  // Two calls fit exactly: the second starts with 36 written and reserves 60 -> 96.
  const uint64_t exact = HostCall::kWritten + HostCall::kReserved;
  for (uint64_t limit : {exact, exact - 1}) {
    INFO("limit " << limit);
    LogEnv env("10", nullptr, nullptr, nullptr, std::to_string(limit).c_str());
    HostCall c;
    for (int i = 0; i < 4; ++i) c.run();
    auto dumps = env.dumps();
    CHECK(dumps.size() == (limit == exact ? 2u : 1u));
    uint64_t bytes = 0;
    for (const auto& d : dumps) {
      st::File f = st::File::read(d / "inputs.safetensors");
      for (const auto& t : f.tensors()) bytes += f.data(t).size();
    }
    CHECK(bytes == dumps.size() * HostCall::kWritten);
    CHECK(bytes <= limit);
    std::string text = read_text(env.log_path());
    CHECK(text.find(fmt::format("dump: stopped: KJIT_DUMP_MAX_BYTES={} reached", limit)) !=
          std::string::npos);
  }
}

TEST_CASE("call log: the dump budget counts and refunds exactly", "[call_log]") {
  kjit::api::DumpBudget b(2, 100);
  std::string why;
  using R = kjit::api::DumpBudget::Result;
  CHECK(b.reserve(60, &why) == R::kGranted);
  b.refund(20);
  CHECK(b.bytes() == 40);
  CHECK(b.reserve(60, &why) == R::kGranted);  // 100: exactly the limit
  CHECK(b.count() == 2);
  CHECK(b.reserve(0, &why) == R::kStoppedNow);  // a third dump: count
  CHECK(why.find("KJIT_DUMP_MAX_COUNT=2") != std::string::npos);
  CHECK(b.reserve(0, &why) == R::kStopped);
  kjit::api::DumpBudget c(10, 100);
  CHECK(c.reserve(101, &why) == R::kStoppedNow);
  CHECK(c.reserve(1, &why) == R::kStopped);  // stopped for good
}

TEST_CASE("call log: tensor walks and host reads follow the strides", "[call_log]") {
  // A transposed [3, 2] view of a [2, 3] buffer: column-major walk.
  std::vector<int32_t> buf = {0, 1, 2, 3, 4, 5};
  Tensor t = make_tensor(buf.data(), {3, 2}, dl_dtype("int32"), {1, 3}, 0, kDLCPU);
  std::string why;
  auto d = kjit::api::describe_tensor(t.get(), &why);
  REQUIRE(d.has_value());
  std::string out;
  REQUIRE(kjit::api::read_tensor(*d, 100, out, &why));
  const int32_t want[] = {0, 3, 1, 4, 2, 5};
  CHECK(out == std::string(reinterpret_cast<const char*>(want), sizeof want));
  REQUIRE(kjit::api::read_tensor(*d, 4, out, &why));  // a cap takes the first elements
  CHECK(out == std::string(reinterpret_cast<const char*>(want), 16));
  // A negative stride walks backwards from element 0.
  Tensor r = make_tensor(buf.data() + 5, {6}, dl_dtype("int32"), {-1}, 0, kDLCPU);
  d = kjit::api::describe_tensor(r.get(), &why);
  REQUIRE(d.has_value());
  REQUIRE(kjit::api::read_tensor(*d, 100, out, &why));
  const int32_t rev[] = {5, 4, 3, 2, 1, 0};
  CHECK(out == std::string(reinterpret_cast<const char*>(rev), sizeof rev));
  int64_t lo = 0, hi = 0;
  kjit::api::offset_range(*d, &lo, &hi);
  CHECK(lo == -5);
  CHECK(hi == 0);
  // Tensors that cannot be walked are refused with the reason.
  Tensor big = make_tensor(buf.data(), {1ll << 40, 1ll << 40}, dl_dtype("int32"));
  CHECK_FALSE(kjit::api::describe_tensor(big.get(), &why).has_value());
  CHECK(why == "size overflows");
  Tensor huge_stride = make_tensor(buf.data(), {3, 2}, dl_dtype("int32"), {1ll << 62, 1});
  CHECK_FALSE(kjit::api::describe_tensor(huge_stride.get(), &why).has_value());
  CHECK(why == "strides overflow");
  DLTensor odd = t.t;
  odd.dtype = {kDLFloat, 4, 1};
  CHECK_FALSE(kjit::api::describe_tensor(&odd, &why).has_value());
}

TEST_CASE("call log: element values of every safetensors dtype", "[call_log]") {
  using kjit::api::element_value;
  using D = st::Dtype;
  uint16_t h = 0x3C00;  // fp16 1.0
  CHECK(element_value(D::kF16, &h) == 1.0);
  h = 0xFC00;
  CHECK(element_value(D::kF16, &h) == -std::numeric_limits<double>::infinity());
  h = 0x0001;  // smallest fp16 subnormal
  CHECK(element_value(D::kF16, &h) == std::ldexp(1.0, -24));
  uint8_t b = 0x38;  // e4m3fn 1.0
  CHECK(element_value(D::kF8E4M3, &b) == 1.0);
  b = 0x7E;  // e4m3fn 448, its largest
  CHECK(element_value(D::kF8E4M3, &b) == 448.0);
  b = 0x7F;
  CHECK(std::isnan(element_value(D::kF8E4M3, &b)));
  b = 0x3C;  // e5m2 1.0
  CHECK(element_value(D::kF8E5M2, &b) == 1.0);
  b = 0x7C;
  CHECK(std::isinf(element_value(D::kF8E5M2, &b)));
  int64_t i = -5;
  CHECK(element_value(D::kI64, &i) == -5.0);
  uint8_t t = 2;
  CHECK(element_value(D::kBool, &t) == 1.0);
  CHECK(kjit::api::dtype_label(kjit::api::dl_dtype(D::kF8E4M3)) == "fp8_e4m3");
  CHECK(kjit::api::safetensors_dtype(kjit::test::dl_dtype("bf16")) == D::kBF16);
  CHECK_FALSE(kjit::api::safetensors_dtype(DLDataType{kDLFloat, 32, 4}).has_value());
  CHECK(kjit::api::dtype_label(DLDataType{kDLFloat, 32, 4}) == "dtype(code=2,bits=32,lanes=4)");
}

// ---- kjit-cli replay without a GPU (or on dumps it must refuse) ---------------------------------

TEST_CASE("call log: kjit-cli replay refuses unusable dumps and needs a GPU", "[call_log][cli]") {
  TempDir keep;
  fs::path dump;
  {
    LogEnv env("10");
    HostCall c;
    c.run();
    REQUIRE(env.dumps().size() == 1);
    dump = keep.path() / "call";
    fs::copy(env.dumps()[0], dump, fs::copy_options::recursive);
  }
  CliRun r = cli("replay '" + dump.string() + "'");
  INFO(r.out);
  CHECK(r.out.find("replay kjit_rmsnorm (call ") != std::string::npos);
  if (!kjit::test::gpu_available()) {
    CHECK(r.code == 3);
  } else {
    CHECK(r.code == 1);  // recorded on host memory, rejected; on the GPU it runs: differs
  }

  CHECK(cli("replay '" + (keep.path() / "missing").string() + "'").code == 1);

  fs::path broken = keep.path() / "broken";
  fs::copy(dump, broken, fs::copy_options::recursive);
  std::string bytes = read_text(broken / "inputs.safetensors");
  std::ofstream(broken / "inputs.safetensors", std::ios::trunc)
      << bytes.substr(0, bytes.size() - 4);
  r = cli("replay '" + broken.string() + "'");
  CHECK(r.code == 1);
  CHECK(r.out.find("safetensors: ") != std::string::npos);

  fs::path unknown = keep.path() / "unknown";
  fs::copy(dump, unknown, fs::copy_options::recursive);
  auto j = nlohmann::json::parse(read_text(unknown / "call.json"));
  j["api"] = "kjit_no_such_op";
  std::ofstream(unknown / "call.json", std::ios::trunc) << j.dump();
  r = cli("replay '" + unknown.string() + "'");
  CHECK(r.code == 1);
  CHECK(r.out.find("no replay for 'kjit_no_such_op'") != std::string::npos);

  CHECK(cli("replay").code == 2);
}

// Not a timed test: prints the per-call cost of the level-0 check beside a bare call, for the
// record (run with "[.bench]").
TEST_CASE("call log: level-0 overhead per call", "[.bench]") {
  ReloadOnExit reload;
  ScopedEnv level("KJIT_LOGLEVEL", nullptr);
  kjit::api::reload_log_settings();
  volatile int sink = 0;
  auto time = [](auto&& f) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10000000; ++i) f();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           1e7;
  };
  auto body = [&] { sink = sink + 1; };
  double bare = time(body);
  double guard_only = time([&] { kjit::api::guard_detail::run("kjit_bench", body); });
  double logged = time([&] {
    guarded(
        "kjit_bench", [&](CallLog& log) { log.scalar("x", 1); }, body);
  });
  WARN("bare " << bare << " ns/call; the exception guard alone " << guard_only
               << " ns/call; guarded with a describer at level 0 " << logged << " ns/call");
}

TEST_CASE("call log: kjit_moe_forward logs its embedded routing options as options.route.*",
          "[call_log]") {
  LogEnv env("3");
  auto has = [&](const std::string& line) {
    auto b = bodies(env.lines(), last_call(env.lines()));
    return std::find(b.begin(), b.end(), line) != b.end();
  };
  kjit_moe_forward_options o;
  kjit_moe_forward_options_init(&o);
  o.route.scoring = KJIT_MOE_SCORING_SIGMOID;
  o.route.n_group = 4;
  kjit_moe_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 2, &o,
                   nullptr);
  CHECK(has("  scalar top_k: 2 (int32)"));
  CHECK(has("  scalar options.route.scoring: 1 (int32)"));
  CHECK(has("  scalar options.route.n_group: 4 (int32)"));
  CHECK(has("  scalar options.route.routed_scaling_factor: 1 (float32)"));
  o.route.struct_size = 3;  // unreadable: logged alone, so that a replay fails the same way
  kjit_moe_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 2, &o,
                   nullptr);
  CHECK(has("  scalar options.route.struct_size: 3 (int64)"));
  CHECK_FALSE(has("  scalar options.route.n_group: 4 (int32)"));
}
