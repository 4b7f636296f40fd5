#include "scheduler.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

namespace engine {

std::vector<std::vector<int32_t>> run_requests(Backend& backend,
                                               const std::vector<Request>& requests,
                                               const SchedulerOptions& opt, SchedulerStats* stats) {
  if (opt.slots < 1 || opt.max_prefill_tokens < 1) {
    throw std::invalid_argument("scheduler: slots and max_prefill_tokens must be >= 1");
  }
  SchedulerStats st;
  std::vector<std::vector<int32_t>> out(requests.size());
  std::deque<int> waiting;
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request& q = requests[r];
    if (q.prompt.empty()) throw std::invalid_argument("request " + std::to_string(r) + ": empty");
    if (static_cast<int64_t>(q.prompt.size()) > opt.max_prefill_tokens) {
      throw std::invalid_argument("request " + std::to_string(r) + ": a prompt of " +
                                  std::to_string(q.prompt.size()) +
                                  " tokens exceeds the prefill "
                                  "budget of " +
                                  std::to_string(opt.max_prefill_tokens));
    }
    if (q.max_new_tokens < 0) {
      throw std::invalid_argument("request " + std::to_string(r) + ": max_new_tokens < 0");
    }
    if (q.max_new_tokens > 0) waiting.push_back(static_cast<int>(r));  // else nothing to do
  }
  std::vector<int> owner(static_cast<size_t>(opt.slots), -1);  // request per slot
  int active = 0;
  // A request that just received a token ends there: its budget is spent or it was an EOS.
  auto finish_if_done = [&](int slot) {
    const int r = owner[static_cast<size_t>(slot)];
    const std::vector<int32_t>& got = out[static_cast<size_t>(r)];
    const bool eos = std::find(opt.eos.begin(), opt.eos.end(), got.back()) != opt.eos.end();
    if (eos || static_cast<int>(got.size()) >= requests[static_cast<size_t>(r)].max_new_tokens) {
      backend.release(slot);
      owner[static_cast<size_t>(slot)] = -1;
      --active;
    }
  };
  while (!waiting.empty() || active > 0) {
    // Admit: free slots in ascending order, waiting requests in arrival order.
    std::vector<int> slots;
    std::vector<std::vector<int32_t>> prompts;
    int64_t tokens = 0;
    for (int s = 0; s < opt.slots && !waiting.empty(); ++s) {
      if (owner[static_cast<size_t>(s)] >= 0) continue;
      const Request& q = requests[static_cast<size_t>(waiting.front())];
      if (tokens + static_cast<int64_t>(q.prompt.size()) > opt.max_prefill_tokens) break;
      tokens += static_cast<int64_t>(q.prompt.size());
      owner[static_cast<size_t>(s)] = waiting.front();
      waiting.pop_front();
      slots.push_back(s);
      prompts.push_back(q.prompt);
    }
    if (!slots.empty()) {
      const std::vector<int32_t> first = backend.admit(slots, prompts);
      if (first.size() != slots.size()) throw std::runtime_error("admit: one token per request");
      ++st.admits;
      active += static_cast<int>(slots.size());
      for (size_t i = 0; i < slots.size(); ++i) {
        out[static_cast<size_t>(owner[static_cast<size_t>(slots[i])])].push_back(first[i]);
        finish_if_done(slots[i]);
      }
    }
    if (active == 0) continue;
    std::vector<int32_t> feed(static_cast<size_t>(opt.slots), 0);
    for (int s = 0; s < opt.slots; ++s) {
      const int r = owner[static_cast<size_t>(s)];
      if (r >= 0) feed[static_cast<size_t>(s)] = out[static_cast<size_t>(r)].back();
    }
    const std::vector<int32_t> next = backend.decode(feed);
    if (next.size() != feed.size()) throw std::runtime_error("decode: one token per slot");
    ++st.decode_steps;
    st.slot_steps += active;
    st.max_active = std::max(st.max_active, active);
    for (int s = 0; s < opt.slots; ++s) {
      const int r = owner[static_cast<size_t>(s)];
      if (r < 0) continue;
      out[static_cast<size_t>(r)].push_back(next[static_cast<size_t>(s)]);
      finish_if_done(s);
    }
  }
  if (stats != nullptr) *stats = st;
  return out;
}

}  // namespace engine
