// kjit-engine: runs a Llama-3 / Qwen3 checkpoint on kjit over a batch of token-id prompts.
//
//   kjit-engine MODEL_DIR --prompts FILE [--max-new-tokens N] [sampling] [--stats] [--no-graph]
//   kjit-engine MODEL_DIR --prompts FILE --decode-steps S --dump-logits OUT   (teacher forcing)
//
// FILE holds one request per line, its token ids separated by spaces. Generating, each line is a
// prompt and N tokens follow it (greedy, or --top-k / --top-p / --temperature / --seed); they
// are printed, one line per request, and with --out-tokens written to a file the same way.
// Teacher forcing, the last S ids of each line are fed as S decode steps after a prefill of the
// rest, and OUT receives the fp32 logits of every position: the prefill's rows (request after
// request, each prompt's tokens in order), then each decode step's rows (one per request).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "config.hpp"
#include "engine.hpp"

namespace {

struct Args {
  std::string model, prompts, dump_logits, out_tokens;
  int max_new_tokens = 16, decode_steps = -1, page_size = 16, device = 0;
  bool stats = false, graph = true;
  engine::SamplingConfig sampling;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "kjit-engine: " << why << "\n"
            << "usage: kjit-engine MODEL_DIR --prompts FILE [--max-new-tokens N] [--top-k K]\n"
            << "         [--top-p P] [--temperature T] [--seed S] [--out-tokens FILE]\n"
            << "         [--decode-steps S --dump-logits FILE] [--page-size N] [--device N]\n"
            << "         [--stats] [--no-graph]\n";
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
    else if (!o.empty() && o[0] == '-')
      usage("unknown option " + o);
    else if (a.model.empty())
      a.model = o;
    else
      usage("more than one model folder");
  }
  if (a.model.empty() || a.prompts.empty()) usage("MODEL_DIR and --prompts are required");
  if (!a.dump_logits.empty() && a.decode_steps < 0) usage("--dump-logits needs --decode-steps");
  if (a.page_size < 1 || a.max_new_tokens < 0) usage("bad --page-size or --max-new-tokens");
  return a;
}

std::vector<std::vector<int32_t>> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    long long id = 0;
    while (ss >> id) ids.push_back(static_cast<int32_t>(id));
    if (!ids.empty()) out.push_back(std::move(ids));
  }
  if (out.empty()) throw std::runtime_error(path + ": no prompts");
  return out;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Args& a) {
  const engine::ModelConfig cfg = engine::read_config(a.model);
  const engine::Checkpoint ckpt(a.model);
  auto t0 = std::chrono::steady_clock::now();
  engine::Engine eng(ckpt, cfg, a.device);
  std::printf(
      "model: %s, %d layers, hidden %d, heads %d/%d x %d, vocab %d; %.1f MB of weights "
      "uploaded in %.0f ms\n",
      cfg.architecture.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_q_heads, cfg.num_kv_heads,
      cfg.head_dim, cfg.vocab_size, eng.weight_bytes() / 1e6, ms_since(t0));

  std::vector<std::vector<int32_t>> seqs = read_prompts(a.prompts);
  const bool teacher = !a.dump_logits.empty();
  const int steps = teacher ? a.decode_steps : a.max_new_tokens;
  std::vector<std::vector<int32_t>> prompts = seqs;
  int longest = 0;
  for (auto& p : prompts) {
    if (teacher) {
      if (static_cast<int>(p.size()) <= steps) {
        throw std::runtime_error("a line has no more tokens than --decode-steps");
      }
      p.resize(p.size() - static_cast<size_t>(steps));
    }
    longest = std::max(longest, static_cast<int>(p.size()));
  }
  engine::RunOptions opt;
  opt.max_total_len = longest + steps;
  opt.page_size = a.page_size;
  opt.all_logits = teacher;
  opt.use_graph = a.graph;
  opt.sampling = a.sampling;

  std::FILE* dump = nullptr;
  if (teacher) {
    dump = std::fopen(a.dump_logits.c_str(), "wb");
    if (dump == nullptr) throw std::runtime_error(a.dump_logits + ": cannot write");
  }
  auto write_logits = [&] {
    const std::vector<float> l = eng.logits();
    if (std::fwrite(l.data(), sizeof(float), l.size(), dump) != l.size()) {
      throw std::runtime_error(a.dump_logits + ": write failed");
    }
  };

  int prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int>(p.size());
  t0 = std::chrono::steady_clock::now();
  eng.prefill(prompts, opt);
  const double prefill_ms = ms_since(t0);
  std::printf(
      "prefill: %zu requests, %d tokens in %.2f ms (%.0f tokens/s; includes first-use "
      "kernel loads)\n",
      prompts.size(), prompt_tokens, prefill_ms, prompt_tokens / prefill_ms * 1e3);
  if (teacher) write_logits();

  std::vector<std::vector<int32_t>> generated(prompts.size());
  if (!teacher) {
    for (size_t b = 0; b < prompts.size(); ++b) generated[b].push_back(eng.first_tokens()[b]);
  }
  double replay_ms = 0;
  for (int s = 0; s < steps; ++s) {
    if (!teacher && s + 1 == steps) break;  // the prefill sampled the first of the N tokens
    std::vector<int32_t> forced;
    if (teacher) {
      for (size_t b = 0; b < seqs.size(); ++b) forced.push_back(seqs[b][prompts[b].size() + s]);
    }
    t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> next = eng.decode(forced);
    if (s > 0) replay_ms += ms_since(t0);
    if (teacher) write_logits();
    for (size_t b = 0; b < next.size(); ++b) generated[b].push_back(next[b]);
  }
  const int timed = teacher ? steps - 1 : steps - 2;
  if (timed > 0) {
    const double step_ms = replay_ms / timed;
    std::printf(
        "decode: %d steps at batch %zu, %.3f ms per step (%s, host-timed with the token "
        "copy back), %.0f tokens/s\n",
        timed, prompts.size(), step_ms, a.graph ? "graph replay" : "eager",
        prompts.size() / step_ms * 1e3);
  }
  if (dump != nullptr) std::fclose(dump);

  if (a.stats) {
    const engine::StepStats& st = eng.step_stats();
    std::printf(
        "stats: a decode step makes %d kjit calls, %d per layer x %d layers + %d; "
        "its graph holds %d kernel nodes (%.1f per layer)\n",
        st.kjit_calls, st.kjit_calls_per_layer, cfg.num_layers,
        st.kjit_calls - st.kjit_calls_per_layer * cfg.num_layers, st.graph_kernels,
        static_cast<double>(st.graph_kernels) / cfg.num_layers);
  }
  if (!teacher) {
    std::ofstream out;
    if (!a.out_tokens.empty()) out.open(a.out_tokens);
    for (size_t b = 0; b < generated.size(); ++b) {
      std::string line;
      for (int32_t t : generated[b]) line += (line.empty() ? "" : " ") + std::to_string(t);
      std::printf("request %zu: %s\n", b, line.c_str());
      if (out.is_open()) out << line << "\n";
    }
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
