// The continuous-batching scheduler without a GPU: a fake backend whose "model" is a hash of
// each slot's token sequence checks every call it receives (admits into free slots only, a fed
// token is the one the scheduler got for that request, free slots are fed 0, each request is
// released once), and every request's tokens must equal running that request alone, whatever
// the slot count, prefill budget or end-of-sequence tokens. Exit status 0 when every check holds.
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "scheduler.hpp"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// The fake model's next token after a sequence.
int32_t next_token(const std::vector<int32_t>& seq) {
  uint32_t h = 2166136261u;
  for (int32_t t : seq) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
  return static_cast<int32_t>(h % 50u);  // a small vocabulary, so EOS tokens do occur
}

// One request run alone: what the scheduler must reproduce.
std::vector<int32_t> alone(const engine::Request& q, const std::vector<int32_t>& eos) {
  std::vector<int32_t> seq = q.prompt, out;
  while (static_cast<int>(out.size()) < q.max_new_tokens) {
    const int32_t t = next_token(seq);
    out.push_back(t);
    seq.push_back(t);
    bool end = false;
    for (int32_t e : eos) end |= e == t;
    if (end) break;
  }
  return out;
}

class FakeBackend : public engine::Backend {
 public:
  explicit FakeBackend(int slots) : seq_(static_cast<size_t>(slots)), busy_(slots, false) {}
  std::vector<int32_t> admit(const std::vector<int>& slots,
                             const std::vector<std::vector<int32_t>>& prompts) override {
    check(slots.size() == prompts.size() && !slots.empty(), "admit: one prompt per slot");
    std::vector<int32_t> first;
    for (size_t i = 0; i < slots.size(); ++i) {
      const size_t s = static_cast<size_t>(slots[i]);
      check(s < busy_.size() && !busy_[s], "admit into a free slot");
      busy_[s] = true;
      seq_[s] = prompts[i];
      first.push_back(next_token(seq_[s]));
      seq_[s].push_back(first.back());
    }
    pending_.assign(busy_.size(), -1);
    for (size_t s = 0; s < busy_.size(); ++s) {
      if (busy_[s]) pending_[s] = seq_[s].back();
    }
    ++admits_;
    return first;
  }
  std::vector<int32_t> decode(const std::vector<int32_t>& tokens) override {
    check(tokens.size() == busy_.size(), "decode: one token per slot");
    std::vector<int32_t> next(busy_.size(), 12345);
    for (size_t s = 0; s < busy_.size(); ++s) {
      if (!busy_[s]) {
        check(tokens[s] == 0, "a free slot is fed 0");
        continue;
      }
      check(tokens[s] == pending_[s], "a slot is fed the token its request got last");
      next[s] = next_token(seq_[s]);
      seq_[s].push_back(next[s]);
      pending_[s] = next[s];
    }
    return next;
  }
  void release(int slot) override {
    const size_t s = static_cast<size_t>(slot);
    check(s < busy_.size() && busy_[s], "release a busy slot");
    busy_[s] = false;
    ++releases_;
  }
  int admits_ = 0, releases_ = 0;

 private:
  std::vector<std::vector<int32_t>> seq_;
  std::vector<bool> busy_;
  std::vector<int32_t> pending_;
};

std::vector<engine::Request> make_requests(int n, uint32_t seed) {
  std::vector<engine::Request> out;
  uint32_t x = seed;
  auto rnd = [&x](int m) {
    x = x * 1664525u + 1013904223u;
    return static_cast<int>((x >> 8) % static_cast<uint32_t>(m));
  };
  for (int i = 0; i < n; ++i) {
    engine::Request q;
    const int len = 1 + rnd(40);
    for (int j = 0; j < len; ++j) q.prompt.push_back(rnd(50));
    q.max_new_tokens = rnd(5) == 0 ? rnd(2) : 1 + rnd(30);  // some 0 and 1
    out.push_back(q);
  }
  return out;
}

void run_case(int n, int slots, int budget, const std::vector<int32_t>& eos, uint32_t seed) {
  const std::string name = "n " + std::to_string(n) + ", slots " + std::to_string(slots) +
                           ", budget " + std::to_string(budget) + ", eos " +
                           std::to_string(eos.size());
  const std::vector<engine::Request> reqs = make_requests(n, seed);
  FakeBackend be(slots);
  engine::SchedulerOptions opt;
  opt.slots = slots;
  opt.max_prefill_tokens = budget;
  opt.eos = eos;
  engine::SchedulerStats st;
  const auto got = engine::run_requests(be, reqs, opt, &st);
  check(got.size() == reqs.size(), name + ": one output per request");
  int started = 0;
  for (size_t r = 0; r < reqs.size() && r < got.size(); ++r) {
    check(got[r] == alone(reqs[r], eos),
          name + ": request " + std::to_string(r) + " equals the request run alone");
    started += reqs[r].max_new_tokens > 0;
  }
  check(be.releases_ == started, name + ": every started request released once");
  check(st.max_active <= slots, name + ": never more requests than slots");
  check(st.admits == be.admits_, name + ": admits counted");
  if (slots >= n && budget >= 40 * n) check(st.admits <= 1, name + ": everything admitted at once");
}

template <typename E, typename F>
void expect_throw(F f, const std::string& what) {
  try {
    f();
  } catch (const E&) {
    return;
  }
  check(false, what + ": no exception");
}

}  // namespace

int main() {
  for (int slots : {1, 2, 3, 8, 40}) {
    for (int budget : {40, 97, 4096}) {
      run_case(23, slots, budget, {}, 7u + static_cast<uint32_t>(slots));
      run_case(23, slots, budget, {3, 17}, 11u + static_cast<uint32_t>(budget));
    }
  }
  run_case(0, 4, 100, {}, 1u);
  engine::SchedulerOptions opt;
  FakeBackend be(1);
  std::vector<engine::Request> long_prompt(1);
  long_prompt[0].prompt.assign(200, 1);
  opt.max_prefill_tokens = 100;
  expect_throw<std::invalid_argument>([&] { engine::run_requests(be, long_prompt, opt); },
                                      "a prompt over the prefill budget");
  opt.slots = 0;
  expect_throw<std::invalid_argument>([&] { engine::run_requests(be, {}, opt); }, "zero slots");
  std::vector<engine::Request> empty(1);
  opt.slots = 1;
  expect_throw<std::invalid_argument>([&] { engine::run_requests(be, empty, opt); },
                                      "an empty prompt");
  if (failures == 0) std::printf("scheduler: every check passed\n");
  return failures == 0 ? 0 : 1;
}
