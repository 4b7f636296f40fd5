// kjit-cli compile: builds cubins into the disk cache ahead of use, one op or a whole catalog.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cuda/device.hpp"
#include "jit/arch.hpp"
#include "jit/arch_context.hpp"
#include "jit/compiler.hpp"
#include "runtime/jit_core.hpp"
#include "ops/precompile.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"
#include "workers.hpp"

namespace kjit::cli {
namespace {

using json = nlohmann::ordered_json;

struct CompileOptions {
  std::string op;
  std::vector<std::string> sets;
  bool all = false;
  std::vector<std::string> ops;
  std::string from;  // a definition or workload file, or a folder of them
  std::vector<std::string> archs;
  int jobs = 1;
  bool json = false;
};

struct Failure {
  std::string uri, arch, error;
};

struct Plan {
  std::vector<jit::Spec> specs;
  std::vector<std::pair<size_t, jit::ArchTarget>> items;  // spec index, target
  std::vector<Failure> failures;  // specs that could not be made or have no supported target
};

}  // namespace

ops::SetArgs parse_sets(const std::vector<std::string>& sets) {
  ops::SetArgs out;
  for (const auto& s : sets) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(fmt::format("--set {}: expected name=value", s));
    }
    if (!out.emplace(s.substr(0, eq), s.substr(eq + 1)).second) {
      throw UsageError(fmt::format("--set {} given twice", s.substr(0, eq)));
    }
  }
  return out;
}

namespace {

jit::ArchContext make_request(const std::vector<std::string>& archs) {
  std::vector<jit::ArchTarget> listed;
  for (const auto& text : archs) {
    std::vector<jit::ArchTarget> parsed;
    try {
      parsed = jit::parse_arch_list(text);
    } catch (const Error& e) {
      throw UsageError(fmt::format("--arch: {}", e.what()));
    }
    if (parsed.empty()) throw UsageError("--arch: empty list");
    // Without NVRTC a target can still be served from the cache; a compile will say it.
    for (const auto& t : jit::nvrtc_available() ? parsed : std::vector<jit::ArchTarget>{}) {
      try {
        jit::check_nvrtc_target(t);  // sm_999: a usage error, not NVRTC's own words later
      } catch (const Error& e) {
        if (e.status() != KJIT_ERROR_UNSUPPORTED) throw;
        throw UsageError(fmt::format("--arch: {}", e.what()));
      }
    }
    listed.insert(listed.end(), parsed.begin(), parsed.end());
  }
  try {
    return jit::ArchContext::current(listed, jit::JitCore::global().settings().arch_list);
  } catch (const Error& e) {
    // A plain runtime_error: exit 1, not the NO_DEVICE code, since --arch would have done.
    if (e.status() == KJIT_ERROR_NO_DEVICE) throw std::runtime_error(e.what());
    throw;
  }
}

std::string describe_args(const std::string& op, const ops::SetArgs& args) {
  std::string s;
  for (const auto& [k, v] : args) s += fmt::format("{}{}={}", s.empty() ? "" : ",", k, v);
  return fmt::format("{}({})", op, s);
}

std::vector<const ops::OpDef*> selected_ops(const CompileOptions& o) {
  std::vector<const ops::OpDef*> defs;
  if (!o.all) {
    const ops::OpDef* d = ops::find_op(o.op);
    if (!d) throw UsageError(fmt::format("unknown op '{}' (see kjit-cli ops)", o.op));
    return {d};
  }
  for (const auto& name : o.ops) {
    const ops::OpDef* d = ops::find_op(name);
    if (!d) throw UsageError(fmt::format("--ops: unknown op '{}' (see kjit-cli ops)", name));
    defs.push_back(d);
  }
  if (o.ops.empty()) {
    for (const auto& d : ops::op_registry()) defs.push_back(&d);
  }
  return defs;
}

void check_set_args_usage(const ops::OpDef& def, const ops::SetArgs& args) {
  try {
    ops::check_set_args(def, args);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// The specs a --from file asks for; a file that cannot be read or mapped is a usage error.
std::vector<ops::PrecompileSpec> specs_from_file(const std::string& path) {
  try {
    return ops::precompile_specs_from(path);
  } catch (const Error& e) {
    if (e.status() == KJIT_ERROR_INVALID_ARGUMENT)
      throw UsageError("--from " + std::string(e.what()));
    throw;
  }
}

// `from`: the specs of --from, else the op's --set values or the catalogs.
Plan make_plan(const CompileOptions& o, const jit::ArchContext& req,
               std::vector<ops::PrecompileSpec> from) {
  Plan plan;
  std::set<std::string> seen;  // two catalog rows can map to one specialization
  auto add_spec = [&](jit::Spec spec) {
    if (!seen.insert(spec.uri).second) return;
    std::vector<std::string> skipped;
    try {
      for (const auto& t : req.targets_for(spec, &skipped)) {
        plan.items.emplace_back(plan.specs.size(), t);
      }
    } catch (const Error& e) {
      if (e.status() != KJIT_ERROR_UNSUPPORTED) throw;
      if (!o.from.empty()) {
        // A file names the variants of every arch (the sm_90 cluster paths, say).
        fmt::print(stderr, "kjit-cli: skipping {}: it supports only [{}], the targets are {}\n",
                   spec.uri, fmt::join(spec.arch_families, " "), req.describe());
        return;
      }
      plan.failures.push_back({spec.uri, req.describe(), e.what()});
      return;
    }
    if (!o.all) {
      for (const auto& s : skipped) {
        fmt::print(stderr, "kjit-cli: skipping {}: {} supports only [{}]\n", s, spec.uri,
                   fmt::join(spec.arch_families, " "));
      }
    }
    plan.specs.push_back(std::move(spec));
  };

  if (!o.from.empty()) {
    for (ops::PrecompileSpec& s : from) add_spec(std::move(s.spec));
    return plan;
  }
  for (const ops::OpDef* def : selected_ops(o)) {
    std::vector<ops::SetArgs> rows = o.all ? def->catalog() : std::vector{parse_sets(o.sets)};
    for (const auto& args : rows) {
      try {
        add_spec(def->make_spec(args));
      } catch (const Error& e) {
        // The user's own --set values are a usage error; a bad catalog row is the library's.
        if (!o.all &&
            (e.status() == KJIT_ERROR_INVALID_ARGUMENT || e.status() == KJIT_ERROR_UNSUPPORTED)) {
          throw UsageError(e.what());
        }
        plan.failures.push_back({describe_args(def->name, args), "", e.what()});
      }
    }
  }
  return plan;
}

json build_one(const jit::Spec& spec, const jit::ArchTarget& target) {
  const auto t0 = std::chrono::steady_clock::now();
  jit::Artifact a = jit::JitCore::global().build(spec, target);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return {{"op", spec.op},
          {"uri", spec.uri},
          {"arch", target.sm()},
          // A cubin served by an AOT package or the artifact dir was not compiled either.
          {"source", a.source == jit::ArtifactSource::kCompiled ? "compiled" : "disk"},
          // This request's time (a cache hit's is a read and a hash), and the NVRTC time the
          // entry took when it was compiled.
          {"ms", ms},
          {"compile_ms", a.meta.compile_ms},
          {"cubin_size", a.cubin.size()},
          {"cubin_path", a.cubin_path.string()},
          {"registers", a.meta.registers},
          {"ptxas_advisories", a.meta.ptxas_advisories},
          {"ok", true}};
}

// Results whose compile carried a ptxas C75xx performance note.
size_t with_advisories(const std::vector<json>& results) {
  size_t n = 0;
  for (const auto& r : results) n += !r["ptxas_advisories"].empty();
  return n;
}

void print_human(const std::vector<json>& results, const std::vector<Failure>& failures,
                 size_t compiled, size_t cached, double seconds, int jobs) {
  size_t width = 0;
  for (const auto& r : results)
    width = std::max(width, r["uri"].get_ref<const std::string&>().size());
  for (const auto& f : failures) width = std::max(width, f.uri.size());
  for (const auto& r : results) {
    std::string path = r["cubin_path"];
    fmt::print("{:<8}  {:<7}  {:<{}}  {:8.1f} ms  {:>8} B  {}\n",
               r["source"] == "disk" ? "cached" : "compiled", r["arch"].get<std::string>(),
               r["uri"].get<std::string>(), width, r["ms"].get<double>(),
               r["cubin_size"].get<size_t>(), path.empty() ? "(not on disk)" : path);
  }
  for (const auto& f : failures) fmt::print("{:<8}  {:<7}  {}\n", "failed", f.arch, f.uri);
  for (const auto& r : results) {
    for (const auto& line : r["ptxas_advisories"]) {
      fmt::print("ptxas     {:<7}  {}: {}\n", r["arch"].get<std::string>(),
                 r["uri"].get<std::string>(), line.get<std::string>());
    }
  }
  std::fflush(stdout);
  for (const auto& f : failures) {
    // kjit's own messages name the URI already; a lost worker's does not.
    if (f.error.find(f.uri) != std::string::npos) {
      fmt::print(stderr, "kjit-cli: {}\n", f.error);
    } else {
      fmt::print(stderr, "kjit-cli: {} ({}): {}\n", f.uri, f.arch.empty() ? "-" : f.arch, f.error);
    }
  }
  std::fflush(stderr);
  fmt::print("{} compiled, {} cached, {} failed in {:.1f} s (-j {})", compiled, cached,
             failures.size(), seconds, jobs);
  const size_t advised = with_advisories(results);
  if (advised > 0) fmt::print("; {} with ptxas performance advisories", advised);
  fmt::print("\n");
}

int run_compile(const CompileOptions& o) {
  if (!o.all && o.op.empty() && o.from.empty()) {
    throw UsageError("compile needs an op name, --all or --from FILE");
  }
  auto t0 = std::chrono::steady_clock::now();
  // Usage mistakes in the op, its --set values or the --from file come before the question of
  // targets.
  std::vector<ops::PrecompileSpec> from;
  if (o.from.empty()) {
    for (const ops::OpDef* def : selected_ops(o)) {
      if (!o.all) check_set_args_usage(*def, parse_sets(o.sets));
    }
  } else {
    from = specs_from_file(o.from);
  }
  jit::ArchContext req = make_request(o.archs);
  Plan plan = make_plan(o, req, std::move(from));

  std::string why;
  int jobs = clamp_jobs(o.jobs, plan.items.size(), &why);
  if (!why.empty()) fmt::print(stderr, "kjit-cli: {}\n", why);

  std::vector<json> outcome(plan.items.size());
  size_t done = 0;
  const bool progress = ::isatty(STDERR_FILENO) == 1;
  auto item_name = [&](size_t i) {
    return std::make_pair(plan.specs[plan.items[i].first].uri, plan.items[i].second.sm());
  };
  run_items(
      plan.items.size(), jobs,
      [&](size_t i) { return build_one(plan.specs[plan.items[i].first], plan.items[i].second); },
      [&](size_t i, const json& r) {
        outcome[i] = r;
        if (progress) {
          auto [uri, arch] = item_name(i);
          std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
          fmt::print(stderr, "[{}/{}] {} {} ({:.1f} s)\n", ++done, plan.items.size(), uri, arch,
                     dt.count());
        }
      });

  std::vector<json> results;
  size_t compiled = 0, cached = 0;
  for (size_t i = 0; i < outcome.size(); ++i) {
    const json& r = outcome[i];
    if (r.value("ok", false)) {
      (r["source"] == "disk" ? cached : compiled)++;
      results.push_back(r);
    } else {
      auto [uri, arch] = item_name(i);
      plan.failures.push_back({uri, arch, r.value("error", "no result")});
    }
  }
  std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;

  if (o.json) {
    json out = {{"results", results},
                {"failures", json::array()},
                {"compiled", compiled},
                {"cached", cached},
                {"failed", plan.failures.size()},
                {"ptxas_advisories", with_advisories(results)}};
    for (const auto& f : plan.failures) {
      out["failures"].push_back({{"uri", f.uri}, {"arch", f.arch}, {"error", f.error}});
    }
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    print_human(results, plan.failures, compiled, cached, wall.count(), jobs);
  }
  // Compiled but not published: the cache could not be written (read-only, full). The cubins
  // existed only in this process, so the command did not do its job.
  size_t not_saved = 0;
  for (const auto& r : results) {
    not_saved += r["source"] == "compiled" && r["cubin_path"].get<std::string>().empty();
  }
  if (not_saved > 0 && jit::JitCore::global().settings().disk_cache) {
    fmt::print(stderr,
               "kjit-cli: {} compiled specializations were not saved: the cache at {} is "
               "not writable (see the warnings above)\n",
               not_saved, jit::JitCore::global().settings().cache_dir.string());
    return kExitFailure;
  }
  return plan.failures.empty() ? kExitOk : kExitFailure;
}

}  // namespace

void add_compile_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<CompileOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile specializations into the disk cache");
  sub->footer(kExitCodesFooter);
  CLI::Option* op = sub->add_option("op", o->op, "Op to compile (see `kjit-cli ops`)");
  CLI::Option* set = sub->add_option("--set", o->sets, "Specialization value, repeatable")
                         ->type_name("NAME=VALUE")
                         ->allow_extra_args(false);
  CLI::Option* all = sub->add_flag("--all", o->all, "Compile every op's catalog");
  sub->add_option("--ops", o->ops, "With --all: only these ops")
      ->delimiter(',')
      ->type_name("A,B")
      ->needs(all);
  CLI::Option* from =
      sub->add_option("--from", o->from,
                      "Compile what the calls of a definition (.json) or workload file (.jsonl: "
                      "bench/workloads, a KJIT_TRACE_DUMP workloads/ file), or a folder of them, "
                      "select")
          ->type_name("PATH");
  sub->add_option("--arch", o->archs,
                  "Targets, e.g. \"sm_80 sm_90a\" or 8.0,9.0a (repeatable; default: "
                  "KJIT_CUDA_ARCH_LIST, else the visible GPUs)")
      ->type_name("LIST")
      ->allow_extra_args(false);
  sub->add_option("-j,--jobs", o->jobs, "Worker processes, clamped to cores and memory")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print one JSON document on stdout");
  op->excludes(all);
  set->excludes(all);
  from->excludes(op)->excludes(set)->excludes(all);
  sub->callback([o, &exit_code] { exit_code = run_compile(*o); });
}

}  // namespace kjit::cli
