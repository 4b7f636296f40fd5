// Warm-up from files (src/ops/precompile.hpp, each family's precompile_sets): every committed
// definition and workload line maps to specializations the op can make, at least one of them in
// its catalog, and a definition alone covers what each of its lines selects; bad files are
// argument errors naming the file and line. `kjit-cli compile --from` compiles a file's specs
// into a private cache for sm_90a, and a second run finds them all cached. The C entry point's
// compile (a fresh process: the runtime is process-wide) is tests/unit/engine_config_main.cpp.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "kjit/kjit.h"
#include "ops/precompile.hpp"
#include "ops/registry.hpp"
#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
using namespace kjit;

namespace {

const fs::path kBench = fs::path(KJIT_SOURCE_DIR) / "bench";

ops::Definition committed_definition(const std::string& name) {
  const auto text = util::read_file(kBench / "definitions" / (name + ".json"));
  REQUIRE(text.has_value());
  return ops::definition_from_json(nlohmann::json::parse(*text));
}

// The URIs of the specs a call of `d` with `axes` selects; every one of them must be makeable.
std::set<std::string> mapped_uris(const ops::Definition& d, const ops::VarAxes& axes) {
  std::set<std::string> uris;
  auto [op, sets] = ops::precompile_sets_for(d, axes);
  REQUIRE(op->name == d.op);
  CHECK_FALSE(sets.empty());
  for (const ops::SetArgs& args : sets) {
    try {
      uris.insert(op->make_spec(args).uri);
    } catch (const Error& e) {
      FAIL_CHECK(e.what());
    }
  }
  return uris;
}

// Every op's catalog URIs, by op.
const std::map<std::string, std::set<std::string>>& catalog_uris() {
  static const auto all = [] {
    std::map<std::string, std::set<std::string>> out;
    for (const ops::OpDef& op : ops::op_registry()) {
      for (const ops::SetArgs& args : op.catalog()) out[op.name].insert(op.make_spec(args).uri);
    }
    return out;
  }();
  return all;
}

bool any_in_catalog(const std::string& op, const std::set<std::string>& uris) {
  const auto& cat = catalog_uris().at(op);
  for (const auto& u : uris) {
    if (cat.count(u)) return true;
  }
  return false;
}

// `path` with `text`, for the bad-file cases.
fs::path write(const test::TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir.path() / name;
  util::write_file_atomic(p, text);
  return p;
}

// precompile_specs_from(path)'s argument error, whose message must hold `needle`.
void check_refused(const fs::path& path, const std::string& needle) {
  INFO(path);
  try {
    ops::precompile_specs_from(path.string());
    FAIL("accepted");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
  // The C entry point: the same refusal, before anything compiles.
  kjit_precompile_counts counts{};
  counts.struct_size = sizeof counts;
  counts.compiled = counts.failed = -1;
  CHECK(kjit_precompile_file(path.c_str(), -1, &counts) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find(needle) != std::string::npos);
  CHECK(counts.compiled == 0);
  CHECK(counts.failed == 0);
}

}  // namespace

TEST_CASE("precompile: every committed definition maps to specs in its op's catalog",
          "[precompile]") {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kBench / "definitions")) {
    if (e.path().extension() != ".json") continue;
    ++n;
    const ops::Definition d = committed_definition(e.path().stem().string());
    INFO(d.name);
    CHECK(any_in_catalog(d.op, mapped_uris(d, {})));
  }
  CHECK(n >= 80);
  // Each family's ops take part (a new family's definitions are walked above once exported).
  for (const ops::OpDef& op : ops::op_registry()) {
    INFO(op.name);
    CHECK(static_cast<bool>(op.precompile_sets));
  }
}

TEST_CASE(
    "precompile: every committed workload line maps to specs in its op's catalog, which "
    "its definition alone covers",
    "[precompile]") {
  int lines = 0;
  for (const auto& e : fs::directory_iterator(kBench / "workloads")) {
    if (e.path().extension() != ".jsonl") continue;
    std::ifstream f(e.path());
    int no = 0;
    for (std::string line; std::getline(f, line);) {
      ++no;
      if (line.empty() || line[0] == '#') continue;
      ++lines;
      INFO(e.path().filename().string() << ":" << no);
      const auto j = nlohmann::json::parse(line);
      const ops::Definition d = committed_definition(j.at("definition").get<std::string>());
      ops::VarAxes axes;
      for (const auto& [k, v] : j.at("axes").items()) axes[k] = v.get<int64_t>();
      const std::set<std::string> uris = mapped_uris(d, axes);
      CHECK(any_in_catalog(d.op, uris));
      const std::set<std::string> all = mapped_uris(d, {});
      for (const auto& u : uris) {
        INFO(u);
        CHECK(all.count(u));
      }
    }
    // The whole file reads (its definitions from bench/definitions, beside bench/workloads).
    CHECK_FALSE(ops::precompile_specs_from(e.path().string()).empty());
  }
  CHECK(lines >= 80);  // Llama-3-8B and -70B, 40 lines each
}

TEST_CASE("precompile: a line selects its call's specs, a definition alone every choice",
          "[precompile]") {
  // rmsnorm: decode and prefill row counts select different kernels; the definition has both.
  const ops::Definition rms = committed_definition("rmsnorm_h4096");
  const auto one = mapped_uris(rms, {{"batch_size", 1}});
  const auto many = mapped_uris(rms, {{"batch_size", 16384}});
  CHECK(one.size() == 1);
  CHECK(many.size() == 1);
  CHECK(one != many);
  const auto any = mapped_uris(rms, {});
  CHECK(any.count(*one.begin()));
  CHECK(any.count(*many.begin()));
  // A file of lines gives each spec once, named by the first line that asked for it.
  const auto specs =
      ops::precompile_specs_from((kBench / "workloads" / "llama3-8b.jsonl").string());
  std::set<std::string> uris;
  for (const auto& s : specs) {
    CHECK(uris.insert(s.spec.uri).second);
    CHECK(s.where.find("llama3-8b.jsonl:") != std::string::npos);
  }
  // A folder reads each of its files.
  CHECK(ops::precompile_specs_from((kBench / "workloads").string()).size() >= specs.size());
}

TEST_CASE("precompile: bad files are argument errors naming the file and line", "[precompile]") {
  test::TempDir dir;
  check_refused(dir.path() / "missing.jsonl", "missing.jsonl");
  check_refused(write(dir, "broken.jsonl", "# a comment\n{\"definition\": \"rmsnorm_h4096\",\n"),
                "broken.jsonl:2: not JSON");
  check_refused(write(dir, "broken.json", "{\"name\": \"x\", \"op_type\": "), "broken.json:1");
  check_refused(write(dir, "nodef.jsonl", "{\"axes\": {\"batch_size\": 1}}\n"),
                "nodef.jsonl:1: needs \"definition\"");
  check_refused(write(dir, "unknown.jsonl", "{\"definition\": \"rmsnorm_h12\", \"axes\": {}}\n"),
                "unknown.jsonl:1: no definition 'rmsnorm_h12'");
  check_refused(write(dir, "axes.jsonl",
                      "{\"definition\": \"rmsnorm_h4096\", \"axes\": {\"batch_size\": "
                      "\"one\"}}\n"),
                "axes.jsonl:1: axis batch_size");
  // A definition of an op kjit does not have, and one whose const axes its op lacks.
  std::string def = *util::read_file(kBench / "definitions" / "rmsnorm_h4096.json");
  std::string unknown_op = def;
  unknown_op.replace(unknown_op.find("\"kjit_op\": \"rmsnorm\""), 20, "\"kjit_op\": \"no_op\"  ");
  check_refused(write(dir, "no_op.json", unknown_op), "no op 'no_op'");
  std::string no_hidden = def;
  no_hidden.replace(no_hidden.find("\"hidden_size\""), 13, "\"width_size\"");
  check_refused(write(dir, "no_hidden.json", no_hidden), "no const axis 'hidden_size'");
  // Too short a counts struct, and no path.
  kjit_precompile_counts small{};
  small.struct_size = 4;
  CHECK(kjit_precompile_file((kBench / "workloads").c_str(), -1, &small) ==
        KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kjit_last_error()).find("struct_size") != std::string::npos);
  CHECK(kjit_precompile_file(nullptr, -1, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("precompile: kjit-cli compile --from compiles a file's specs, then finds them cached",
          "[precompile][cli]") {
  test::TempDir dir;
  const fs::path file = write(dir, "w.jsonl",
                              "{\"definition\": \"rmsnorm_h4096\", \"axes\": {\"batch_size\": 1}}\n"
                              "{\"definition\": \"silu_and_mul_d14336\", \"axes\": "
                              "{\"num_tokens\": 8}}\n");
  // No device: a visible GPU's own target joins --arch's (ArchContext), which would double the
  // counts on a GPU machine.
  auto run = [&] {
    const std::string cmd = "CUDA_VISIBLE_DEVICES=-1 KJIT_CACHE_DIR='" +
                            (dir.path() / "cache").string() + "' '" +
                            KJIT_CLI_PATH "' compile --from '" + file.string() +
                            "' --arch sm_90a --json 2>'" + (dir.path() / "stderr").string() + "'";
    const test::ShellRun r = test::run_shell(cmd);
    INFO(r.out << util::read_file(dir.path() / "stderr").value_or(""));
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  };
  const auto first = run();
  CHECK(first.at("compiled") == 2);
  CHECK(first.at("failed") == 0);
  const auto second = run();
  CHECK(second.at("compiled") == 0);
  CHECK(second.at("cached") == 2);
}
