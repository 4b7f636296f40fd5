// See precompile.hpp.
#include "ops/precompile.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "util/error.hpp"
#include "util/fs.hpp"

namespace kjit::ops {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Collects specs by URI and prefixes a failure with where it came from.
struct Collector {
  std::vector<PrecompileSpec> specs;
  std::set<std::string> uris;

  void add(const std::string& where, const Definition& d, const VarAxes& axes) {
    try {
      auto [op, sets] = precompile_sets_for(d, axes);
      for (const SetArgs& args : sets) {
        jit::Spec spec = op->make_spec(args);
        if (uris.insert(spec.uri).second) specs.push_back({where, std::move(spec)});
      }
    } catch (const Error& e) {
      fail(e.status(), "{}: {}", where, e.what());
    }
  }
};

Definition read_definition(const fs::path& file) {
  const auto text = util::read_file(file);
  if (!text) fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: cannot read", file.string());
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception& e) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: not JSON: {}", file.string(), e.what());
  }
  try {
    return definition_from_json(j);
  } catch (const json::exception& e) {  // a field of the wrong type
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: not a definition: {}", file.string(), e.what());
  } catch (const Error& e) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: {}", file.string(), e.what());
  }
}

// A workload line's definition: the file beside the workload's folder, else the registry's.
Definition find_definition(const fs::path& workload, const std::string& name) {
  const fs::path file = workload.parent_path().parent_path() / "definitions" / (name + ".json");
  std::error_code ec;
  if (fs::is_regular_file(file, ec)) return read_definition(file);
  for (const OpDef& op : op_registry()) {
    if (!op.definitions) continue;
    for (Definition& d : op.definitions()) {
      if (d.name == name) return std::move(d);
    }
  }
  fail(KJIT_ERROR_INVALID_ARGUMENT,
       "no definition '{}' ({} does not exist, and kjit has none of "
       "that name)",
       name, file.string());
}

void read_workload(const fs::path& file, const std::string& text, Collector& out) {
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = fmt::format("{}:{}", file.string(), no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: not JSON: {}", where, e.what());
    }
    if (!j.is_object() || !j.contains("definition") || !j["definition"].is_string()) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: needs \"definition\": \"<name>\"", where);
    }
    VarAxes axes;
    if (j.contains("axes")) {
      if (!j["axes"].is_object())
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: \"axes\" is no object", where);
      for (const auto& [name, v] : j["axes"].items()) {
        if (!v.is_number_integer()) {
          fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: axis {} is not an integer", where, name);
        }
        axes[name] = v.get<int64_t>();
      }
    }
    Definition d;
    try {
      d = find_definition(file, j["definition"].get<std::string>());
    } catch (const Error& e) {
      fail(e.status(), "{}: {}", where, e.what());
    }
    out.add(where, d, axes);
  }
}

void read_file(const fs::path& file, Collector& out) {
  const auto text = util::read_file(file);
  if (!text) fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: cannot read", file.string());
  // One JSON object with an op type is a definition; anything else is read as JSON lines.
  json whole = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (whole.is_object() && whole.contains("op_type")) {
    out.add(file.string(), read_definition(file), {});
    return;
  }
  read_workload(file, *text, out);
}

}  // namespace

std::pair<const OpDef*, std::vector<SetArgs>> precompile_sets_for(const Definition& d,
                                                                  const VarAxes& axes) {
  const OpDef& op = op_or_throw(d.op);
  if (!op.precompile_sets) {
    fail(KJIT_ERROR_INTERNAL, "op {} has no precompile mapping", op.name);
  }
  std::vector<SetArgs> sets = op.precompile_sets(d, axes);
  if (sets.empty()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {} maps to no {} specialization", d.name,
         op.name);
  }
  return {&op, std::move(sets)};
}

std::vector<PrecompileSpec> precompile_specs_from(const std::string& path) {
  Collector out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() && (ext == ".json" || ext == ".jsonl")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) read_file(f, out);
  } else if (fs::exists(path, ec)) {
    read_file(path, out);
  } else {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: no such file or folder", path);
  }
  return std::move(out.specs);
}

std::vector<TacticSpec> tactic_specs_for(const std::string& op, int space_version,
                                         const std::string& bucket, const std::string& tactic,
                                         const std::vector<jit::ArchTarget>& archs) {
  const OpDef* def = find_op(op);
  if (def == nullptr || !def->tactic_specs) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is not an op with tactics", op);
  }
  if (space_version != def->tactic_space) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tactic space v{}, this kjit's {} tactics are v{}",
         space_version, op, def->tactic_space);
  }
  std::vector<TacticSpec> out;
  std::set<std::string> seen;
  for (const jit::ArchTarget& target : archs) {
    for (jit::Spec& spec : def->tactic_specs(bucket, tactic, target)) {
      if (jit::family_supports(spec.arch_families, target) &&
          seen.insert(target.sm() + "/" + spec.uri).second) {
        out.push_back({std::move(spec), target});
      }
    }
  }
  if (out.empty()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} {} is not valid for {} on {}", op, tactic, bucket,
         jit::format_arch_list(archs));
  }
  return out;
}

}  // namespace kjit::ops
