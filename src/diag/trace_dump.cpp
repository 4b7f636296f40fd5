// See trace_dump.hpp.
#include "diag/trace_dump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <unordered_map>

#include "runtime/jit_core.hpp"
#include "util/env.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"

namespace kjit::ops::trace {

std::atomic<int> g_state{-1};

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct Seen {
  std::set<std::string> var_keys;
  bool capped = false;
};

struct Recorder {
  std::mutex mu;
  fs::path dir;  // empty until the first record
  std::unordered_map<std::string, Seen> seen;
  bool warned = false;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

const fs::path& resolve_dir(Recorder& r) {
  if (r.dir.empty()) {
    auto d = util::env_get("KJIT_TRACE_DUMP_DIR");
    r.dir =
        d && !d->empty() ? fs::path(*d) : jit::JitCore::global().settings().cache_dir / "traces";
  }
  return r.dir;
}

// One write(2) with O_APPEND, so lines from concurrent processes stay whole.
void append_line(const fs::path& file, const std::string& line) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + file.string());
  const std::string data = line + "\n";
  const ssize_t n = ::write(fd, data.data(), data.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(data.size())) {
    throw std::system_error(err, std::generic_category(), "write " + file.string());
  }
}

// Records one call: `name` is its definition (built by make_def only when new to this process),
// `axes` its var-axis values, `bench_op` + `set` the `kjit-cli bench` that times it (none: null).
template <class MakeDef>
void record(const std::string& name, const ojson& axes, const char* bench_op, const ojson& set,
            MakeDef&& make_def) noexcept {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  try {
    const std::string key = axes.dump();
    auto [it, new_name] = r.seen.try_emplace(name);
    Seen& s = it->second;
    if (s.var_keys.count(key)) return;
    if (static_cast<int>(s.var_keys.size()) >= kMaxWorkloadsPerDefinition) {
      if (!s.capped) {
        util::log("trace dump: {} has {} distinct workloads; recording no more of them", name,
                  kMaxWorkloadsPerDefinition);
        s.capped = true;
      }
      return;
    }
    s.var_keys.insert(key);
    const fs::path& dir = resolve_dir(r);
    if (new_name) {
      util::make_dirs(dir / "definitions");
      util::make_dirs(dir / "workloads");
      util::write_file_atomic(dir / "definitions" / (name + ".json"), definition_json(make_def()));
    }
    ojson line = {{"definition", name}, {"axes", axes}};
    if (bench_op != nullptr) {
      line["op"] = bench_op;
      line["set"] = set;
    }
    append_line(dir / "workloads" / (name + ".jsonl"), line.dump());
  } catch (const std::exception& e) {
    if (!r.warned) {
      util::log("trace dump into {} failed (further failures are silent): {}", r.dir.string(),
                e.what());
      r.warned = true;
    }
  }
}

std::string str(int64_t v) {
  return std::to_string(v);
}

}  // namespace

bool read_state() noexcept {
  const bool on = util::env_flag("KJIT_TRACE_DUMP", false);
  g_state.store(on ? 1 : 0, std::memory_order_relaxed);
  return on;
}

void set_dir_for_testing(const std::string& dir) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.dir = dir;
  r.seen.clear();
  r.warned = false;
  g_state.store(dir.empty() ? 0 : 1, std::memory_order_relaxed);
}

void rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept {
  ojson set = {{"dtype", dtype_name(dtype)}, {"hidden", str(hidden)}, {"rows", str(rows)}};
  if (gemma) set["gemma"] = "1";
  record(fmt::format("{}rmsnorm_h{}{}", gemma ? "gemma_" : "", hidden,
                     dtype == DType::kBF16 ? "" : std::string("_") + dtype_name(dtype)),
         {{"batch_size", rows}}, "rmsnorm", set,
         [&] { return rmsnorm_definition(dtype, hidden, gemma); });
}

void fused_add_rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept {
  ojson set = {{"dtype", dtype_name(dtype)}, {"hidden", str(hidden)}, {"rows", str(rows)}};
  if (gemma) set["gemma"] = "1";
  record(fmt::format("{}fused_add_rmsnorm_h{}{}", gemma ? "gemma_" : "", hidden,
                     dtype == DType::kBF16 ? "" : std::string("_") + dtype_name(dtype)),
         {{"batch_size", rows}}, "fused_add_rmsnorm", set,
         [&] { return fused_add_rmsnorm_definition(dtype, hidden, gemma); });
}

void layernorm(DType dtype, DType param_dtype, int64_t hidden, int64_t rows) noexcept {
  // The name is cheap next to the definition, but not free: build it once per call here.
  const Definition d = layernorm_definition(dtype, param_dtype, hidden);
  record(d.name, {{"batch_size", rows}}, "layernorm",
         {{"dtype", dtype_name(dtype)},
          {"wdtype", dtype_name(param_dtype)},
          {"hidden", str(hidden)},
          {"rows", str(rows)}},
         [&] { return d; });
}

void act_and_mul(Act act, DType dtype, int64_t d, int64_t rows) noexcept {
  const char* op_type = act == Act::kSilu   ? "silu_and_mul"
                        : act == Act::kGelu ? "gelu_and_mul"
                                            : "gelu_tanh_and_mul";
  record(fmt::format("{}_d{}{}", op_type, d,
                     dtype == DType::kBF16 ? "" : std::string("_") + dtype_name(dtype)),
         {{"num_tokens", rows}}, "act_and_mul",
         {{"act", act_name(act)}, {"dtype", dtype_name(dtype)}, {"d", str(d)}, {"rows", str(rows)}},
         [&] { return act_and_mul_definition(act, dtype, d); });
}

void rope(const RopeDefAxes& a, int64_t tokens, int64_t max_position) noexcept {
  const Definition d = rope_definition(a);
  ojson axes = {{"num_tokens", tokens}};
  if (a.kind == RopeKind::kCosSinCache) axes["max_position"] = max_position;
  // pos_ids and llama31 run the same kernel on the same bytes (only the frequencies differ), so
  // `bench rope` times both; the cos/sin-cache kernel has no bench yet.
  const bool benchable = a.kind != RopeKind::kCosSinCache;
  record(d.name, axes, benchable ? "rope" : nullptr,
         {{"dtype", dtype_name(a.dtype)},
          {"tokens", str(tokens)},
          {"qo_heads", str(a.qo_heads)},
          {"kv_heads", str(a.kv_heads)},
          {"head_dim", str(a.head_dim)},
          {"rotary_dim", str(a.rotary_dim)},
          {"interleave", a.interleave ? "1" : "0"}},
         [&] { return d; });
}

void append_paged_kv(DType dtype, int64_t kv_heads, int64_t head_dim, int64_t page_size, bool nhd,
                     int64_t tokens, int64_t batch, int64_t num_kv_indices,
                     int64_t num_pages) noexcept {
  const Definition d = append_paged_kv_definition(dtype, kv_heads, head_dim, page_size, nhd);
  record(d.name,
         {{"num_tokens", tokens},
          {"batch_size", batch},
          {"len_indptr", batch + 1},
          {"num_kv_indices", num_kv_indices},
          {"num_pages", num_pages}},
         "append_paged_kv",
         {{"dtype", dtype_name(dtype)},
          {"tokens", str(tokens)},
          {"kv_heads", str(kv_heads)},
          {"head_dim", str(head_dim)},
          {"page_size", str(page_size)},
          {"batch", str(batch)},
          {"layout", nhd ? "nhd" : "hnd"}},
         [&] { return d; });
}

void batch_decode(const DecodeDefAxes& a, int64_t batch, int64_t num_kv_indices, int64_t num_pages,
                  int64_t kv_len) noexcept {
  const Definition d = batch_decode_definition(a);
  ojson set = {{"dtype", dtype_name(a.dtype)},
               {"batch", str(batch)},
               {"kv_len", str(std::max<int64_t>(kv_len, 1))},
               {"qo_heads", str(a.qo_heads)},
               {"kv_heads", str(a.kv_heads)},
               {"head_dim", str(a.head_dim)},
               {"page_size", str(a.page_size)},
               {"layout", a.nhd ? "nhd" : "hnd"}};
  if (a.kv_fp8) set["kv_dtype"] = "e4m3";
  record(d.name,
         {{"batch_size", batch},
          {"len_indptr", batch + 1},
          {"num_kv_indices", num_kv_indices},
          {"num_pages", num_pages}},
         "decode_attention", set, [&] { return d; });
}

void merge_states(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs) noexcept {
  // No bench times merge_states yet.
  const Definition d = merge_states_definition(dtype, heads, head_dim, false);
  record(d.name, {{"seq_len", seqs}}, nullptr, nullptr, [&] { return d; });
}

void merge_states_n(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs,
                    int64_t num_states) noexcept {
  const Definition d = merge_states_definition(dtype, heads, head_dim, true);
  record(d.name, {{"num_states", num_states}, {"seq_len", seqs}}, nullptr, nullptr,
         [&] { return d; });
}

void sampling(SamplingKind kind, DType dtype, int64_t vocab, int64_t batch) noexcept {
  const Definition d = sampling_definition(kind, dtype, vocab);
  // The sampling benches time these four at their default filter parameters; the other entry
  // points have no bench yet.
  const char* bench_op = nullptr;
  ojson set = {{"batch", str(batch)}, {"vocab", str(vocab)}};
  switch (kind) {
    case SamplingKind::kTopPFromProbs: bench_op = "top_p_sampling"; break;
    case SamplingKind::kTopKTopPFromLogits: bench_op = "top_k_top_p_sampling"; break;
    case SamplingKind::kSoftmax: bench_op = "softmax"; break;
    case SamplingKind::kArgmax: bench_op = "argmax"; break;
    default: break;
  }
  if (bench_op != nullptr && sampling_reads_logits(kind)) set["dtype"] = dtype_name(dtype);
  record(d.name, {{"batch_size", batch}}, bench_op, set, [&] { return d; });
}

}  // namespace kjit::ops::trace
