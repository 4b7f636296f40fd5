// kjit-engine: runs a Llama-3 / Qwen3 checkpoint on kjit over token-id prompts.
//
//   kjit-engine MODEL_DIR --prompts FILE [--max-new-tokens N] [--max-batch B] [sampling]
//               [--eos ID ... | --ignore-eos] [--stats] [--no-graph] [--fp8]
//   kjit-engine MODEL_DIR --prompts FILE --decode-steps S --dump-logits OUT   (teacher forcing)
//   kjit-engine MODEL_DIR --speed B,L,N   (timing: B requests of L random ids, N decode steps)
//   --no-weights-early: the projections wait for the kernel ahead before streaming their weights
//   (kjit_gemm_options::weights_early off: the A/B of that option).
//
// FILE holds one request per line, its token ids separated by spaces; generating, a line may
// start with "K:" to give that request its own token budget. Generating is continuous batching
// (scheduler.hpp): B slots (default: every request at once) decode together, a request leaves
// at an end-of-sequence id (config.json's eos_token_id, or --eos) or after its budget, and the
// next waiting one is prefilled into its slot. The tokens (greedy, or --top-k / --top-p /
// --temperature / --seed) are printed one line per request, and with --out-tokens written to a
// file the same way. Teacher forcing, the last S ids of each line are fed as S decode steps after
// a prefill of the rest, and OUT receives the fp32 logits of every position: the prefill's rows
// (request after request, each prompt's tokens in order), then each decode step's rows (one per
// request). Timing, B random prompts of L ids are prefilled (after one untimed admit of the same
// shape loads the kernels) and N greedy decode steps run over them (after the step that captures
// the graph); one JSON line gives the prefill and per-step times.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "config.hpp"
#include "engine.hpp"
#include "scheduler.hpp"

namespace {

struct Args {
  std::string model, prompts, dump_logits, out_tokens;
  int max_new_tokens = 16, decode_steps = -1, page_size = 16, device = 0;
  int max_batch = 0, max_prefill_tokens = 0;  // 0: every request at once / what that needs
  int speed_batch = 0, speed_context = 0, speed_steps = 0;  // --speed B,L,N
  std::vector<int32_t> eos;
  bool eos_given = false, ignore_eos = false, stats = false, graph = true, fp8 = false,
       weights_early = true;
  engine::SamplingConfig sampling;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr
      << "kjit-engine: " << why << "\n"
      << "usage: kjit-engine MODEL_DIR --prompts FILE [--max-new-tokens N] [--top-k K]\n"
      << "         [--top-p P] [--temperature T] [--seed S] [--out-tokens FILE]\n"
      << "         [--max-batch B] [--max-prefill-tokens N] [--eos ID]... [--ignore-eos]\n"
      << "         [--decode-steps S --dump-logits FILE] [--page-size N] [--device N]\n"
      << "         [--stats] [--no-graph] [--fp8]\n"
      << "       kjit-engine MODEL_DIR --speed B,L,N [--max-prefill-tokens N] [--page-size N]\n"
      << "       (either form: [--no-weights-early])\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  // A number, all of the argument: "--top-k 5x" is a usage error, not an exception.
  auto number = [&](int& i, auto parse) {
    const std::string option = argv[i], text = value(i);
    try {
      size_t used = 0;
      const auto v = parse(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
    usage(option + ": '" + text + "' is not a number");
  };
  auto int_value = [&](int& i) {
    return number(i, [](const std::string& t, size_t* n) { return std::stoi(t, n); });
  };
  auto float_value = [&](int& i) {
    return number(i, [](const std::string& t, size_t* n) { return std::stof(t, n); });
  };
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    if (o == "--prompts")
      a.prompts = value(i);
    else if (o == "--dump-logits")
      a.dump_logits = value(i);
    else if (o == "--out-tokens")
      a.out_tokens = value(i);
    else if (o == "--max-new-tokens")
      a.max_new_tokens = int_value(i);
    else if (o == "--decode-steps")
      a.decode_steps = int_value(i);
    else if (o == "--page-size")
      a.page_size = int_value(i);
    else if (o == "--max-batch")
      a.max_batch = int_value(i);
    else if (o == "--max-prefill-tokens")
      a.max_prefill_tokens = int_value(i);
    else if (o == "--eos")
      a.eos.push_back(int_value(i)), a.eos_given = true;
    else if (o == "--ignore-eos")
      a.ignore_eos = true;
    else if (o == "--device")
      a.device = int_value(i);
    else if (o == "--top-k")
      a.sampling.top_k = int_value(i), a.sampling.greedy = false;
    else if (o == "--top-p")
      a.sampling.top_p = float_value(i), a.sampling.greedy = false;
    else if (o == "--temperature")
      a.sampling.temperature = float_value(i), a.sampling.greedy = false;
    else if (o == "--seed")
      a.sampling.seed = number(i, [](const std::string& t, size_t* n) { return std::stoll(t, n); });
    else if (o == "--stats")
      a.stats = true;
    else if (o == "--no-graph")
      a.graph = false;
    else if (o == "--fp8")
      a.fp8 = true;
    else if (o == "--no-weights-early")
      a.weights_early = false;
    else if (o == "--speed") {
      const std::string text = value(i);
      char tail = 0;
      if (std::sscanf(text.c_str(), "%d,%d,%d%c", &a.speed_batch, &a.speed_context, &a.speed_steps,
                      &tail) != 3 ||
          a.speed_batch < 1 || a.speed_context < 1 || a.speed_steps < 0) {
        usage("--speed: '" + text + "' is not B,L,N (B, L >= 1, N >= 0)");
      }
    } else if (!o.empty() && o[0] == '-')
      usage("unknown option " + o);
    else if (a.model.empty())
      a.model = o;
    else
      usage("more than one model folder");
  }
  if (a.model.empty()) usage("MODEL_DIR is required");
  if (a.prompts.empty() == (a.speed_batch == 0)) usage("one of --prompts and --speed is required");
  if (a.speed_batch > 0 && (!a.dump_logits.empty() || !a.out_tokens.empty() || !a.graph)) {
    usage("--speed times graph replay and writes no tokens or logits");
  }
  if (!a.dump_logits.empty() && a.decode_steps < 0) usage("--dump-logits needs --decode-steps");
  if (a.page_size < 1 || a.max_new_tokens < 0) usage("bad --page-size or --max-new-tokens");
  if (a.max_batch < 0 || a.max_prefill_tokens < 0) usage("bad --max-batch or --max-prefill-tokens");
  if (a.eos_given && a.ignore_eos) usage("--eos and --ignore-eos together");
  return a;
}

// One request per line: token ids, optionally after "K:" (that request's token budget; -1 when
// absent).
std::vector<engine::Request> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<engine::Request> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    engine::Request q;
    q.max_new_tokens = -1;
    std::istringstream ss(line);
    std::string word;
    while (ss >> word) {
      const bool budget = q.prompt.empty() && q.max_new_tokens < 0 && word.back() == ':';
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(budget ? word.substr(0, word.size() - 1) : word, &used);
      } catch (const std::exception&) {
      }
      if (used != word.size() - (budget ? 1 : 0) || v < 0 || v > INT32_MAX) {
        throw std::runtime_error(path + ":" + std::to_string(n) + ": '" + word +
                                 "' is not a token id (or a leading 'K:' budget)");
      }
      if (budget) {
        q.max_new_tokens = static_cast<int>(v);
      } else {
        q.prompt.push_back(static_cast<int32_t>(v));
      }
    }
    if (!q.prompt.empty()) out.push_back(std::move(q));
  }
  if (out.empty()) throw std::runtime_error(path + ": no prompts");
  return out;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The engine behind the scheduler, timed: admits (prefills, first-use kernel loads included) and
// decode steps (the first one holds the eager pass and the capture).
class TimedEngine : public engine::Backend {
 public:
  explicit TimedEngine(engine::Engine& e) : e_(e) {}
  std::vector<int32_t> admit(const std::vector<int>& slots,
                             const std::vector<std::vector<int32_t>>& prompts) override {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = e_.admit(slots, prompts);
    admit_ms += ms_since(t0);
    for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
    return out;
  }
  std::vector<int32_t> decode(const std::vector<int32_t>& tokens) override {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = e_.decode(tokens);
    if (steps++ > 0) step_ms += ms_since(t0);
    return out;
  }
  void release(int slot) override { e_.release(slot); }
  double admit_ms = 0, step_ms = 0;
  int64_t prompt_tokens = 0;
  int steps = 0;

 private:
  engine::Engine& e_;
};

// Teacher forcing: every request admitted at once, then the forced decode steps; the logits of
// every position to `dump`.
void teacher_forcing(engine::Engine& eng, const Args& a, const std::vector<engine::Request>& seqs,
                     engine::RunOptions opt) {
  const int steps = a.decode_steps;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> slots;
  int total = 0, longest = 0;
  for (const engine::Request& q : seqs) {
    if (static_cast<int>(q.prompt.size()) <= steps) {
      throw std::runtime_error("a line has no more tokens than --decode-steps");
    }
    prompts.emplace_back(q.prompt.begin(), q.prompt.end() - steps);
    slots.push_back(static_cast<int>(slots.size()));
    total += static_cast<int>(prompts.back().size());
    longest = std::max(longest, static_cast<int>(prompts.back().size()));
  }
  opt.max_batch = static_cast<int>(seqs.size());
  opt.max_total_len = longest + steps;
  opt.max_prefill_tokens = total;
  opt.all_logits = true;
  eng.reserve(opt);
  std::FILE* dump = std::fopen(a.dump_logits.c_str(), "wb");
  if (dump == nullptr) throw std::runtime_error(a.dump_logits + ": cannot write");
  auto write_logits = [&] {
    const std::vector<float> l = eng.logits();
    if (std::fwrite(l.data(), sizeof(float), l.size(), dump) != l.size()) {
      std::fclose(dump);
      throw std::runtime_error(a.dump_logits + ": write failed");
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  eng.admit(slots, prompts);
  std::printf("prefill: %zu requests, %d tokens in %.2f ms (includes first-use kernel loads)\n",
              prompts.size(), total, ms_since(t0));
  write_logits();
  double replay_ms = 0;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> forced;
    for (size_t b = 0; b < seqs.size(); ++b)
      forced.push_back(seqs[b].prompt[prompts[b].size() + s]);
    t0 = std::chrono::steady_clock::now();
    eng.decode(forced);
    if (s > 0) replay_ms += ms_since(t0);
    write_logits();
  }
  std::fclose(dump);
  if (steps > 1) {
    std::printf("decode: %d steps at batch %zu, %.3f ms per step (%s, host-timed)\n", steps - 1,
                seqs.size(), replay_ms / (steps - 1), a.graph ? "graph replay" : "eager");
  }
}

// --speed: prefill of B random prompts of L ids in admits of at most --max-prefill-tokens tokens
// (default 8192, and one prompt at least), after an untimed admit of the same shape that loads
// the kernels; then N greedy decode steps over the B slots, after the step that captures the
// graph. Host-timed: each admit and step returns its sampled tokens to the host.
void speed(engine::Engine& eng, const engine::ModelConfig& cfg, const Args& a,
           engine::RunOptions opt) {
  const int B = a.speed_batch, L = a.speed_context, N = a.speed_steps;
  const int budget = a.max_prefill_tokens > 0 ? a.max_prefill_tokens : 8192;
  const int per_admit = std::max(1, std::min(B, budget / L));
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> id(0, cfg.vocab_size - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B), std::vector<int32_t>(L));
  for (auto& p : prompts)
    for (int32_t& t : p) t = id(rng);
  opt.max_batch = B;
  opt.max_total_len = L + N + 1;
  opt.max_prefill_tokens = per_admit * L;
  opt.sampling = engine::SamplingConfig{};
  eng.reserve(opt);
  auto admit = [&](int first, int n) {
    std::vector<int> slots;
    for (int b = first; b < first + n; ++b) slots.push_back(b);
    return eng.admit(slots, std::vector<std::vector<int32_t>>(prompts.begin() + first,
                                                              prompts.begin() + first + n));
  };
  admit(0, per_admit);
  for (int b = 0; b < per_admit; ++b) eng.release(b);
  std::vector<int32_t> tokens;
  auto t0 = std::chrono::steady_clock::now();
  for (int b = 0; b < B; b += per_admit) {
    const std::vector<int32_t> first = admit(b, std::min(per_admit, B - b));
    tokens.insert(tokens.end(), first.begin(), first.end());
  }
  const double prefill_ms = ms_since(t0);
  double step_ms = 0;
  if (N > 0) {
    tokens = eng.decode(tokens);
    t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < N; ++s) tokens = eng.decode(tokens);
    step_ms = ms_since(t0) / N;
  }
  std::printf(
      "{\"batch\": %d, \"context\": %d, \"prefill_tokens\": %lld, \"prefill_admits\": %d, "
      "\"prefill_ms\": %.3f, \"prefill_tokens_per_s\": %.1f, \"decode_steps\": %d, "
      "\"step_ms\": %.4f, \"decode_tokens_per_s\": %.1f, \"weight_bytes\": %zu}\n",
      B, L, static_cast<long long>(B) * L, (B + per_admit - 1) / per_admit, prefill_ms,
      static_cast<double>(B) * L / prefill_ms * 1e3, N, step_ms, N > 0 ? B / step_ms * 1e3 : 0.0,
      eng.weight_bytes());
}

int run(const Args& a) {
  const engine::ModelConfig cfg = engine::read_config(a.model);
  const engine::Checkpoint ckpt(a.model);
  auto t0 = std::chrono::steady_clock::now();
  engine::Engine eng(ckpt, cfg, a.device, a.fp8);
  std::printf(
      "model: %s, %d layers, hidden %d, heads %d/%d x %d, vocab %d; %.1f MB of weights "
      "uploaded in %.0f ms\n",
      cfg.architecture.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_q_heads, cfg.num_kv_heads,
      cfg.head_dim, cfg.vocab_size, eng.weight_bytes() / 1e6, ms_since(t0));

  engine::RunOptions opt;
  opt.page_size = a.page_size;
  opt.use_graph = a.graph;
  opt.weights_early = a.weights_early;
  opt.sampling = a.sampling;
  if (a.speed_batch > 0) {
    speed(eng, cfg, a, opt);
    return 0;
  }
  std::vector<engine::Request> reqs = read_prompts(a.prompts);
  const bool teacher = !a.dump_logits.empty();
  if (teacher) {
    teacher_forcing(eng, a, reqs, opt);
  } else {
    int longest = 0, longest_prompt = 0, total = 0;
    for (engine::Request& q : reqs) {
      if (q.max_new_tokens < 0) q.max_new_tokens = a.max_new_tokens;
      const int len = static_cast<int>(q.prompt.size());
      longest = std::max(longest, len + q.max_new_tokens);
      longest_prompt = std::max(longest_prompt, len);
      total += len;
    }
    engine::SchedulerOptions so;
    so.slots = a.max_batch > 0 ? a.max_batch : static_cast<int>(reqs.size());
    so.max_prefill_tokens =
        a.max_prefill_tokens > 0
            ? a.max_prefill_tokens
            : (a.max_batch > 0 ? std::max(longest_prompt, std::min(total, 8192)) : total);
    so.eos = a.ignore_eos ? std::vector<int32_t>{} : a.eos_given ? a.eos : cfg.eos_token_ids;
    opt.max_batch = so.slots;
    opt.max_total_len = longest;
    opt.max_prefill_tokens = so.max_prefill_tokens;
    eng.reserve(opt);
    TimedEngine timed(eng);
    engine::SchedulerStats st;
    const std::vector<std::vector<int32_t>> generated = engine::run_requests(timed, reqs, so, &st);
    std::printf(
        "prefill: %d passes, %lld prompt tokens in %.2f ms (%.0f tokens/s; includes first-use "
        "kernel loads)\n",
        st.admits, static_cast<long long>(timed.prompt_tokens), timed.admit_ms,
        timed.prompt_tokens / std::max(timed.admit_ms, 1e-9) * 1e3);
    if (timed.steps > 1) {
      const double step_ms = timed.step_ms / (timed.steps - 1);
      const double occupancy = static_cast<double>(st.slot_steps) / st.decode_steps;
      std::printf(
          "decode: %d steps over %d slots (%.1f busy on average, at most %d), %.3f ms per step "
          "(%s, host-timed with the token copy back), %.0f tokens/s\n",
          timed.steps - 1, so.slots, occupancy, st.max_active, step_ms,
          a.graph ? "graph replay" : "eager", occupancy / step_ms * 1e3);
    }
    std::ofstream out;
    if (!a.out_tokens.empty()) out.open(a.out_tokens);
    for (size_t r = 0; r < generated.size(); ++r) {
      std::string line;
      for (int32_t t : generated[r]) line += (line.empty() ? "" : " ") + std::to_string(t);
      std::printf("request %zu: %s\n", r, line.c_str());
      if (out.is_open()) out << line << "\n";
    }
  }
  if (a.stats) {
    const engine::StepStats& st = eng.step_stats();
    std::printf(
        "stats: a decode step makes %d kjit calls, %d per layer x %d layers + %d; "
        "its graph holds %d kernel nodes (%.1f per layer)\n",
        st.kjit_calls, st.kjit_calls_per_layer, cfg.num_layers,
        st.kjit_calls - st.kjit_calls_per_layer * cfg.num_layers, st.graph_kernels,
        static_cast<double>(st.graph_kernels) / cfg.num_layers);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kjit-engine: %s\n", e.what());
    return 1;
  }
}
