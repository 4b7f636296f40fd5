// Runs independent work items in worker processes. NVRTC serializes compiles within a process, so
// threads would not overlap them; processes do.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>

namespace kjit::cli {

// Keys stay in the order they were set, so documents print in their documented order.
using Json = nlohmann::ordered_json;

// How many workers to use for `requested` jobs and `items` work items: at least 1, at most the
// usable cores, the items, and MemAvailable / 1.5 GiB (one NVRTC front end can take that much).
// Sets `*why` when it lowered `requested`.
int clamp_jobs(int requested, size_t items, std::string* why);

// Calls run_item(i) for every i < n: in this process when jobs == 1, else in `jobs` forked
// children (child k takes k, k + jobs, ...) that send each result back as one JSON line. Must be
// called before this process uses NVRTC or starts threads. on_done(i, result) runs here, in
// completion order. An exception from run_item, or a child that dies before reporting item i,
// gives result {"ok": false, "error": "..."}.
void run_items(size_t n, int jobs, const std::function<Json(size_t)>& run_item,
               const std::function<void(size_t, const Json&)>& on_done);

}  // namespace kjit::cli
