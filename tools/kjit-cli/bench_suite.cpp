// See bench_suite.hpp.
#include "bench_suite.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

namespace kjit::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

[[noreturn]] void bad(const std::string& where, int line, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}:{}: {}", where, line, what));
}

void only_keys(const json& j, const std::set<std::string>& allowed, const std::string& where,
               int line, const char* what) {
  for (const auto& [k, v] : j.items()) {
    if (allowed.count(k) == 0) {
      std::string names;
      for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
      bad(where, line, fmt::format("{} has no key \"{}\" (it takes: {})", what, k, names));
    }
  }
}

int positive_int(const json& v, const std::string& key, int most, const std::string& where,
                 int line) {
  if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > most) {
    bad(where, line, fmt::format("\"{}\" must be an integer from 1 to {}", key, most));
  }
  return v.get<int>();
}

Timing parse_run(const json& v, const std::string& where, int line) {
  if (!v.is_string()) bad(where, line, "each run must be a string \"TIMER/FLUSH\"");
  const std::string s = v.get<std::string>();
  const size_t slash = s.find('/');
  if (slash == std::string::npos) {
    bad(where, line, "run \"" + s + "\" is not TIMER/FLUSH (e.g. \"cupti/dirty\")");
  }
  Timing r;
  r.timer = s.substr(0, slash);
  try {
    r.flush = parse_flush(s.substr(slash + 1));
    check_timer_flush(r.timer, r.flush);
  } catch (const std::invalid_argument& e) {
    bad(where, line, "run \"" + s + "\": " + e.what());
  }
  return r;
}

std::vector<Timing> parse_runs(const json& v, const std::string& where, int line) {
  if (!v.is_array() || v.empty()) bad(where, line, "\"runs\" must be a non-empty array");
  std::vector<Timing> out;
  for (const auto& r : v) out.push_back(parse_run(r, where, line));
  return out;
}

// Applies the row keys of `j` to `r` (a row, or the defaults a row starts from).
void apply_row_keys(const json& j, SuiteRow& r, const std::string& where, int line) {
  if (j.contains("runs")) {
    r.runs = parse_runs(j["runs"], where, line);
  }
  if (j.contains("backends")) {
    if (!j["backends"].is_string()) bad(where, line, "\"backends\" must be a string");
    try {
      r.backends = parse_backends({j["backends"].get<std::string>()});
    } catch (const std::invalid_argument& e) {
      bad(where, line, e.what());
    }
  }
  if (j.contains("repeat")) r.repeat = positive_int(j["repeat"], "repeat", 100, where, line);
  if (j.contains("iters")) r.iters = positive_int(j["iters"], "iters", 10000000, where, line);
  if (j.contains("warmup")) {
    const json& w = j["warmup"];
    if (!w.is_number_integer() || w.get<long long>() < 0 || w.get<long long>() > 1000000) {
      bad(where, line, "\"warmup\" must be an integer from 0 to 1000000");
    }
    r.warmup = w.get<int>();
  }
  if (j.contains("headline")) {
    if (!j["headline"].is_boolean()) bad(where, line, "\"headline\" must be true or false");
    r.headline = j["headline"].get<bool>();
  }
}

}  // namespace

std::map<std::string, std::string> set_values(const nlohmann::json& set, const std::string& where) {
  if (!set.is_object()) throw std::invalid_argument(where + "\"set\" must be an object");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : set.items()) {
    if (v.is_string()) {
      out[k] = v.get<std::string>();
    } else if (v.is_number()) {
      out[k] = v.dump();  // integers as written; floats in their shortest exact form
    } else if (v.is_boolean()) {
      out[k] = v.get<bool>() ? "1" : "0";
    } else {
      throw std::invalid_argument(where + "set." + k + " must be a string, a number or a boolean");
    }
  }
  return out;
}

std::vector<std::pair<int, json>> json_lines(std::istream& in, const std::string& where) {
  std::vector<std::pair<int, json>> out;
  std::string s;
  for (int no = 1; std::getline(in, s); ++no) {
    const size_t first = s.find_first_not_of(" \t\r");
    if (first == std::string::npos || s[first] == '#') continue;
    try {
      out.emplace_back(no, json::parse(s));
    } catch (const json::exception& e) {
      bad(where, no, std::string("not JSON: ") + e.what());
    }
  }
  return out;
}

Suite parse_suite(const std::string& text, const std::string& where, const std::string& stem) {
  Suite suite;
  suite.name = stem;
  SuiteRow defaults;
  defaults.runs = {{"cupti", Flush::kRead}};
  std::set<std::string> names;
  std::istringstream in(text);
  std::string s;
  bool first = true;
  for (int line = 1; std::getline(in, s); ++line) {
    const size_t at = s.find_first_not_of(" \t\r");
    if (at == std::string::npos || s[at] == '#') continue;
    json j;
    try {
      j = json::parse(s);
    } catch (const json::exception& e) {
      bad(where, line, std::string("not JSON: ") + e.what());
    }
    if (!j.is_object()) bad(where, line, "each line must be a JSON object");
    const bool was_first = first;
    first = false;
    if (j.contains("suite")) {
      if (!was_first) bad(where, line, "the \"suite\" line must come first");
      only_keys(j, {"suite", "about"}, where, line, "the suite line");
      if (!j["suite"].is_string() || j["suite"].get<std::string>().empty()) {
        bad(where, line, "\"suite\" must be a non-empty string");
      }
      suite.name = j["suite"].get<std::string>();
      if (j.contains("about") && j["about"].is_string()) suite.about = j["about"];
      continue;
    }
    if (j.contains("defaults")) {
      only_keys(j, {"defaults"}, where, line, "a defaults line");
      if (!j["defaults"].is_object()) bad(where, line, "\"defaults\" must be an object");
      only_keys(j["defaults"], {"runs", "backends", "repeat", "iters", "warmup", "headline"}, where,
                line, "defaults");
      apply_row_keys(j["defaults"], defaults, where, line);
      continue;
    }
    if (j.contains("peer")) {
      only_keys(j, {"peer", "args", "runs"}, where, line, "a peer line");
      SuitePeer p;
      p.line = line;
      if (!j["peer"].is_string()) bad(where, line, "\"peer\" must be a script name");
      p.script = j["peer"].get<std::string>();
      // A bare name: the script is looked up in bench/peers/ only.
      if (p.script.empty() || p.script.find('/') != std::string::npos || p.script.size() < 4 ||
          p.script.substr(p.script.size() - 3) != ".py") {
        bad(where, line, "\"peer\" must name a script of bench/peers/ (\"torch_peers.py\")");
      }
      if (j.contains("args")) {
        if (!j["args"].is_array()) bad(where, line, "\"args\" must be an array of strings");
        for (const auto& a : j["args"]) {
          if (!a.is_string()) bad(where, line, "\"args\" must be an array of strings");
          const std::string arg = a.get<std::string>();
          if (arg == "--runs" || arg == "--json") {
            bad(where, line, "\"args\" must not set --runs or --json: the runner does");
          }
          p.args.push_back(a.get<std::string>());
        }
      }
      if (j.contains("runs")) p.runs = parse_runs(j["runs"], where, line);
      for (const Timing& t : p.runs) {
        if (t.timer == "cupti") {
          bad(where, line, "a peer times with events, events-batched or graph, not cupti");
        }
      }
      suite.peers.push_back(std::move(p));
      continue;
    }
    only_keys(j, {"name", "op", "set", "runs", "backends", "repeat", "iters", "warmup", "headline"},
              where, line, "a row");
    if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
      bad(where, line, "a row needs \"name\" (unique in the suite)");
    }
    if (!j.contains("op") || !j["op"].is_string()) bad(where, line, "a row needs \"op\"");
    SuiteRow r = defaults;
    r.line = line;
    r.name = j["name"].get<std::string>();
    if (!names.insert(r.name).second) bad(where, line, "row name \"" + r.name + "\" given twice");
    r.op = j["op"].get<std::string>();
    if (j.contains("set")) {
      try {
        r.sets = set_values(j["set"], "");
      } catch (const std::invalid_argument& e) {
        bad(where, line, e.what());
      }
    }
    apply_row_keys(j, r, where, line);
    suite.rows.push_back(std::move(r));
  }
  if (suite.rows.empty()) {
    throw std::invalid_argument(where + ": no rows (a row is a line with \"name\" and \"op\")");
  }
  return suite;
}

std::string find_suite(const std::string& name_or_path, const std::vector<std::string>& dirs) {
  const bool is_path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 6 && name_or_path.compare(name_or_path.size() - 6, 6, ".jsonl") == 0);
  if (is_path) {
    if (!fs::is_regular_file(name_or_path)) {
      throw std::invalid_argument("--suite " + name_or_path + ": no such file");
    }
    return name_or_path;
  }
  std::set<std::string> known;
  for (const auto& d : dirs) {
    const fs::path p = fs::path(d) / (name_or_path + ".jsonl");
    if (fs::is_regular_file(p)) return p.string();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".jsonl") known.insert(e.path().stem().string());
    }
  }
  std::string names;
  for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  throw std::invalid_argument("--suite " + name_or_path + ": no such suite in " + searched +
                              (names.empty() ? "" : " (suites: " + names + ")"));
}

}  // namespace kjit::cli
