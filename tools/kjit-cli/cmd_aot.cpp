// kjit-cli aot build|verify|list|fetch: ahead-of-time packages of cubins (docs/aot.md).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aot/fetch.hpp"
#include "aot/package.hpp"
#include "aot/packages.hpp"
#include "aot/sha256.hpp"
#include "commands.hpp"
#include "cuda/device.hpp"
#include "jit/arch.hpp"
#include "jit/compiler.hpp"
#include "runtime/jit_core.hpp"
#include "jit/sources.hpp"
#include "ops/precompile.hpp"
#include "ops/registry.hpp"
#include "tune/packaged_records.hpp"
#include "util/env.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/glob.hpp"
#include "workers.hpp"

namespace kjit::cli {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::vector<jit::ArchTarget> parse_archs(const std::vector<std::string>& texts) {
  std::vector<jit::ArchTarget> out;
  for (const auto& text : texts) {
    std::vector<jit::ArchTarget> parsed;
    try {
      parsed = jit::parse_arch_list(text);
    } catch (const Error& e) {
      throw UsageError(fmt::format("--arch: {}", e.what()));
    }
    for (const auto& t : parsed) {
      if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
  }
  return out;
}

std::vector<const ops::OpDef*> selected_ops(const std::vector<std::string>& names) {
  std::vector<const ops::OpDef*> defs;
  for (const auto& name : names) {
    const ops::OpDef* d = ops::find_op(name);
    if (!d) throw UsageError(fmt::format("--ops: unknown op '{}' (see kjit-cli ops)", name));
    defs.push_back(d);
  }
  if (names.empty()) {
    for (const auto& d : ops::op_registry()) defs.push_back(&d);
  }
  return defs;
}

// The catalog specs of `defs`, each once. A catalog row that does not make a spec is the
// library's bug: it goes to `failures`.
std::vector<jit::Spec> catalog_specs(const std::vector<const ops::OpDef*>& defs,
                                     std::vector<std::pair<std::string, std::string>>* failures) {
  std::vector<jit::Spec> specs;
  std::set<std::string> seen;
  for (const ops::OpDef* def : defs) {
    if (!def->catalog) continue;
    for (const auto& row : def->catalog()) {
      try {
        jit::Spec s = def->make_spec(row);
        if (seen.insert(s.uri).second) specs.push_back(std::move(s));
      } catch (const Error& e) {
        failures->emplace_back(def->name, e.what());
      }
    }
  }
  return specs;
}

// "[12/80] uri sm_90a": rewritten in place on a terminal; elsewhere (CI logs) every tenth.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) == 1) {}
  void step(const std::string& what) {
    ++done_;
    if (tty_) {
      fmt::print(stderr, "\r\x1b[K[{}/{}] {}", done_, total_, what);
      if (done_ == total_) fmt::print(stderr, "\n");
    } else if (total_ > 0 && (done_ * 10 / total_ != (done_ - 1) * 10 / total_)) {
      fmt::print(stderr, "[{}/{}] {}\n", done_, total_, what);
    }
    std::fflush(stderr);
  }

 private:
  size_t total_, done_ = 0;
  bool tty_;
};

// ---- aot build ---------------------------------------------------------------------------------

struct BuildOptions {
  std::vector<std::string> archs;
  fs::path out;
  std::vector<std::string> ops;
  int jobs = 1;
  bool json = false;
  std::string tuning_device = "*";  // the tuning records packed: of devices matching this glob
  bool no_tuning = false;
};

// The core that builds package entries: the JIT cache may serve a compile it already has (same
// key, same bytes), but no package may serve another package.
jit::JitCore& build_core() {
  static jit::JitCore core([] {
    jit::Settings s = jit::Settings::from_env();
    s.aot_dirs.clear();
    s.artifact_dir.clear();
    s.artifact_url.clear();
    s.artifact_auto_fetch = false;
    return s;
  }());
  return core;
}

json build_entry(const jit::Spec& spec, const jit::ArchTarget& target, const fs::path& out) {
  jit::Artifact a = build_core().build(spec, target);
  const std::string metadata = a.meta.to_json();
  aot::PackageEntry e;
  e.uri = spec.uri;
  e.op = spec.op;
  e.arch = target.sm();
  e.key = a.meta.key;
  e.content_key = aot::content_key(a.meta.inputs);
  const std::string stem = aot::entry_stem(e.arch, e.uri, e.key);
  e.file = stem + ".cubin";
  e.metadata = stem + ".json";
  e.size = a.cubin.size();
  e.metadata_size = metadata.size();
  e.sha256 = aot::sha256_hex(a.cubin);
  e.metadata_sha256 = aot::sha256_hex(metadata);
  aot::write_entry_files(out, e, a.cubin, metadata);
  return {{"ok", true},
          {"source", a.source == jit::ArtifactSource::kDisk ? "cache" : "compiled"},
          {"uri", e.uri},
          {"op", e.op},
          {"arch", e.arch},
          {"key", e.key},
          {"content_key", e.content_key},
          {"file", e.file},
          {"size", e.size},
          {"sha256", e.sha256},
          {"metadata", e.metadata},
          {"metadata_size", e.metadata_size},
          {"metadata_sha256", e.metadata_sha256}};
}

aot::PackageEntry entry_from_json(const json& r) {
  aot::PackageEntry e;
  e.uri = r.at("uri");
  e.op = r.at("op");
  e.arch = r.at("arch");
  e.key = r.at("key");
  e.content_key = r.at("content_key");
  e.file = r.at("file");
  e.size = r.at("size");
  e.sha256 = r.at("sha256");
  e.metadata = r.at("metadata");
  e.metadata_size = r.at("metadata_size");
  e.metadata_sha256 = r.at("metadata_sha256");
  return e;
}

// What a package build compiles: specs, and the (spec, target) items to build, each once.
struct BuildPlan {
  std::vector<jit::Spec> specs;
  std::vector<std::pair<size_t, jit::ArchTarget>> items;
  size_t catalog_items = 0;  // the catalogs' items come first, then the tactics' kernels
  size_t skipped = 0;        // catalog (spec, arch) pairs outside the spec's arch families

  // The item of (spec, target), added when new.
  size_t add(jit::Spec spec, const jit::ArchTarget& target) {
    auto known = spec_of_.find(spec.uri);
    if (known == spec_of_.end()) {
      known = spec_of_.emplace(spec.uri, specs.size()).first;
      specs.push_back(std::move(spec));
    }
    const std::string name = target.sm() + "/" + specs[known->second].uri;
    auto it = item_of_.find(name);
    if (it == item_of_.end()) {
      it = item_of_.emplace(name, items.size()).first;
      items.emplace_back(known->second, target);
    }
    return it->second;
  }

 private:
  std::map<std::string, size_t> spec_of_;  // uri -> spec
  std::map<std::string, size_t> item_of_;  // "<arch>/<uri>" -> item
};

// A tuning record the package takes, with the items of the kernels its tactic runs.
struct PackedRecord {
  fs::path path;
  std::string file;  // as the index lists it
  std::string op, tactic;
  std::vector<size_t> items;
};

// A record left out of the package, and why.
struct SkippedRecord {
  std::string file, op, tactic, why;
};

// The cache's tuning records the package takes (this kjit's and NVRTC's: a record of another
// version is a miss anyway; of the devices asked for), each with the kernels its tactic runs on
// the package's archs added to `plan` (the op's own tactic -> spec mapping, so a read-only host
// that reads the record finds them). A record whose tactic does not map (an op without tactics,
// another tactic space, a tactic unknown or not valid for its bucket) goes to `skipped`.
std::vector<PackedRecord> plan_records(const tune::TuneStore& store, const BuildOptions& o,
                                       const std::vector<jit::ArchTarget>& archs, BuildPlan& plan,
                                       std::vector<SkippedRecord>& skipped) {
  std::vector<PackedRecord> out;
  for (const tune::TuneStore::Entry& e : store.list()) {
    if (!e.origin.empty() || !e.valid || e.fp.kjit != jit::kjit_version() ||
        e.fp.nvrtc != jit::nvrtc_version() || !util::glob_match(o.tuning_device, e.fp.device)) {
      continue;
    }
    PackedRecord r{e.path,
                   "tuning/" + e.path.lexically_relative(store.root()).generic_string(),
                   e.key.op,
                   e.rec.tactic,
                   {}};
    try {
      for (ops::TacticSpec& k : ops::tactic_specs_for(e.key.op, e.key.space_version, e.key.bucket,
                                                      e.rec.tactic, archs)) {
        r.items.push_back(plan.add(std::move(k.spec), k.target));
      }
    } catch (const std::exception& ex) {
      skipped.push_back({r.file, e.key.op, e.rec.tactic, ex.what()});
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

int report_build(const BuildOptions& o, const aot::PackageIndex& index, const json& counts,
                 const std::vector<std::pair<std::string, std::string>>& failures,
                 const std::vector<SkippedRecord>& skipped_records) {
  if (o.json) {
    json out = {{"dir", o.out.string()}, {"archs", index.archs}};
    out.update(counts);
    out["failures"] = json::array();
    for (const auto& [name, error] : failures) {
      out["failures"].push_back({{"name", name}, {"error", error}});
    }
    out["tuning_records"] = index.tuning.size();
    out["tuning_skipped"] = json::array();
    for (const SkippedRecord& r : skipped_records) {
      out["tuning_skipped"].push_back(
          {{"file", r.file}, {"op", r.op}, {"tactic", r.tactic}, {"why", r.why}});
    }
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    for (const auto& [name, error] : failures) {
      fmt::print(stderr, "kjit-cli: failed: {}: {}\n", name, error);
    }
    for (const SkippedRecord& r : skipped_records) {
      fmt::print(stderr, "kjit-cli: tuning record {} ({} {}) not packed: {}\n", r.file, r.op,
                 r.tactic, r.why);
    }
    fmt::print(
        "package {}: {} entries for {} ({} compiled, {} from the JIT cache), {:.1f} MiB; {} "
        "failed; {} spec/arch pairs outside the specs' arch families skipped; {} tuning records "
        "({} tactic kernels added beside the catalogs, {} records not packed); {:.1f} s (-j {})\n",
        o.out.string(), index.entries.size(), fmt::join(index.archs, " "),
        counts["compiled"].get<size_t>(), counts["cached"].get<size_t>(),
        counts["bytes"].get<unsigned long long>() / double(1 << 20), failures.size(),
        counts["skipped"].get<size_t>(), index.tuning.size(),
        counts["tactic_kernels"].get<size_t>(), skipped_records.size(),
        counts["seconds"].get<double>(), counts["jobs"].get<int>());
  }
  return failures.empty() ? kExitOk : kExitFailure;
}

int run_build(const BuildOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<jit::ArchTarget> archs = parse_archs(o.archs);
  if (archs.empty()) throw UsageError("aot build needs --arch, e.g. --arch \"8.0 9.0a\"");
  std::vector<const ops::OpDef*> defs = selected_ops(o.ops);
  util::make_dirs(o.out);

  std::vector<std::pair<std::string, std::string>> failures;  // name, error
  BuildPlan plan;
  for (jit::Spec& spec : catalog_specs(defs, &failures)) {
    for (const auto& t : archs) {
      if (jit::family_supports(spec.arch_families, t)) {
        plan.add(spec, t);
      } else {
        ++plan.skipped;
      }
    }
  }
  plan.catalog_items = plan.items.size();
  // The tuning records, with the kernels their tactics run: a host that loads the package
  // starts tuned, also with KJIT_DISABLE_JIT=1.
  const tune::TuneStore store(jit::Settings::from_env().cache_dir / "tuning");
  std::vector<SkippedRecord> skipped_records;
  std::vector<PackedRecord> records;
  if (!o.no_tuning) records = plan_records(store, o, archs, plan, skipped_records);

  const auto& items = plan.items;
  std::string why;
  int jobs = clamp_jobs(o.jobs, items.size(), &why);
  if (!why.empty()) fmt::print(stderr, "kjit-cli: {}\n", why);
  std::vector<json> results(items.size());
  Progress progress(items.size());
  run_items(
      items.size(), jobs,
      [&](size_t i) { return build_entry(plan.specs[items[i].first], items[i].second, o.out); },
      [&](size_t i, const json& r) {
        results[i] = r;
        progress.step(plan.specs[items[i].first].uri + " " + items[i].second.sm());
      });

  aot::PackageIndex index;
  index.kjit_version = jit::kjit_version();
  index.nvrtc_version = jit::nvrtc_version();
  index.created = jit::utc_now_iso();
  for (const auto& t : archs) index.archs.push_back(t.sm());
  size_t compiled = 0, cached = 0, tactic_kernels = 0;
  unsigned long long bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const json& r = results[i];
    if (!r.value("ok", false)) {
      failures.emplace_back(plan.specs[items[i].first].uri + " " + items[i].second.sm(),
                            r.value("error", "no result"));
      continue;
    }
    (r["source"] == "cache" ? cached : compiled)++;
    tactic_kernels += i >= plan.catalog_items ? 1 : 0;
    index.entries.push_back(entry_from_json(r));
    bytes += index.entries.back().size;
  }
  std::sort(index.entries.begin(), index.entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.arch, a.uri) < std::tie(b.arch, b.uri);
  });
  index.reindex();
  // A record is packed only with every kernel its tactic runs.
  std::set<fs::path> packed;
  for (const PackedRecord& r : records) {
    auto failed = std::find_if(r.items.begin(), r.items.end(),
                               [&](size_t i) { return !results[i].value("ok", false); });
    if (failed == r.items.end()) {
      packed.insert(r.path);
    } else {
      skipped_records.push_back(
          {r.file, r.op, r.tactic,
           fmt::format("its kernel {} {} failed to build", plan.specs[items[*failed].first].uri,
                       items[*failed].second.sm())});
    }
  }
  index.tuning = tune::pack_records(
      store, o.out, [&](const tune::TuneStore::Entry& e) { return packed.count(e.path) != 0; });
  // The index goes last: until it is written the folder is not a (new) package.
  util::write_file_atomic(o.out / aot::kIndexName, index.to_json());
  std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
  const json counts = {
      {"entries", index.entries.size()}, {"compiled", compiled}, {"cached", cached},
      {"skipped", plan.skipped},         {"bytes", bytes},       {"tactic_kernels", tactic_kernels},
      {"seconds", wall.count()},         {"jobs", jobs}};
  return report_build(o, index, counts, failures, skipped_records);
}

// ---- aot verify / list
// ---------------------------------------------------------------------------

aot::PackageIndex read_index(const fs::path& dir) {
  auto text = util::read_file(dir / aot::kIndexName);
  if (!text) fail(KJIT_ERROR_CACHE, "{}: no readable {}", dir.string(), aot::kIndexName);
  return aot::PackageIndex::from_json(*text);
}

// The kernels the package's valid tuning records' tactics run on its archs that it lacks (a
// read-only host reading the record would refuse them); a record whose tactic maps to none is a
// note. Each kernel's spec goes to `by_uri`, so its entry's sources are compared like a catalog
// one's.
std::vector<std::pair<std::string, std::string>> record_kernel_problems(
    const fs::path& dir, const aot::PackageIndex& idx, const tune::TuneStore& records,
    std::map<std::string, jit::Spec>& by_uri, std::vector<std::string>* notes) {
  std::vector<jit::ArchTarget> archs;
  for (const std::string& a : idx.archs) {
    if (auto t = jit::ArchTarget::parse(a)) archs.push_back(*t);
  }
  std::vector<std::pair<std::string, std::string>> problems;
  for (const tune::TuneStore::Entry& e : records.list()) {
    // Only the index's records, those that can be read; the others are reported below. A record
    // of another kjit or NVRTC is a miss on every host: it needs no kernel.
    if (e.origin.empty() || !e.valid || e.fp.kjit != idx.kjit_version ||
        e.fp.nvrtc != idx.nvrtc_version) {
      continue;
    }
    const std::string name = e.path.lexically_relative(dir).generic_string();
    std::vector<ops::TacticSpec> kernels;
    try {
      kernels =
          ops::tactic_specs_for(e.key.op, e.key.space_version, e.key.bucket, e.rec.tactic, archs);
    } catch (const std::exception& ex) {
      // A miss on this kjit's hosts (another tactic space, ...), never a refused kernel.
      notes->push_back(fmt::format("{}: this kjit would not use it ({})", name, ex.what()));
      continue;
    }
    for (ops::TacticSpec& k : kernels) {
      if (!idx.find(k.spec.uri, k.target.sm())) {
        problems.emplace_back(name, fmt::format("its tactic {} runs {} on {}, which the package "
                                                "lacks",
                                                e.rec.tactic, k.spec.uri, k.target.sm()));
      }
      by_uri.emplace(k.spec.uri, std::move(k.spec));
    }
  }
  return problems;
}

int run_verify(const fs::path& dir, bool as_json) {
  std::vector<std::pair<std::string, std::string>> problems;  // what, why
  std::vector<std::string> notes;
  aot::PackageIndex idx;
  try {
    idx = read_index(dir);
  } catch (const Error& e) {
    problems.emplace_back("index.json", e.what());
  }
  const std::string ours = jit::kjit_version();
  size_t checked = 0;
  if (problems.empty()) {
    if (!aot::versions_compatible(idx.kjit_version, ours)) {
      problems.emplace_back(
          "index.json", fmt::format("built by kjit {}, this is kjit {} (major.minor must match)",
                                    idx.kjit_version, ours));
    }
    if (idx.nvrtc_version != jit::nvrtc_version()) {
      notes.push_back(fmt::format("built with NVRTC {}, this NVRTC is {} (not a load condition)",
                                  idx.nvrtc_version, jit::nvrtc_version()));
    }
    // What this kjit would compile for each catalog spec: an entry whose content key differs
    // is never loaded by this build.
    std::vector<std::pair<std::string, std::string>> ignored;
    std::map<std::string, jit::Spec> by_uri;
    for (auto& s : catalog_specs(selected_ops({}), &ignored)) by_uri.emplace(s.uri, std::move(s));
    // The tuning records, with the kernels their tactics run: those must be in the package too.
    tune::TuneStore records(dir / "tuning");
    std::string no_records;
    if (std::optional<tune::RecordPackage> p = tune::read_record_package(dir, &no_records)) {
      records.add_package(std::move(*p));
    }
    for (const auto& [what, why] : record_kernel_problems(dir, idx, records, by_uri, &notes)) {
      problems.emplace_back(what, why);
    }
    jit::Settings settings = jit::Settings::from_env();
    size_t uncatalogued = 0;
    for (const auto& e : idx.entries) {
      ++checked;
      const std::string name = aot::entry_stem(e.arch, e.uri, e.key);
      if (std::find(idx.archs.begin(), idx.archs.end(), e.arch) == idx.archs.end()) {
        problems.emplace_back(name, "arch " + e.arch + " is not in the index's arch list");
      }
      jit::Metadata meta;
      if (auto why = aot::check_entry(dir, e, false, &meta)) {
        problems.emplace_back(name, *why);
        continue;
      }
      if (meta.inputs.kjit_version != idx.kjit_version ||
          meta.inputs.nvrtc_version != idx.nvrtc_version) {
        problems.emplace_back(
            name, fmt::format("metadata says kjit {} / NVRTC {}, the index kjit {} / NVRTC {}",
                              meta.inputs.kjit_version, meta.inputs.nvrtc_version, idx.kjit_version,
                              idx.nvrtc_version));
      }
      auto it = by_uri.find(e.uri);
      if (it == by_uri.end()) {
        ++uncatalogued;
        continue;
      }
      auto target = jit::ArchTarget::parse(e.arch);
      if (!jit::family_supports(it->second.arch_families, *target)) {
        problems.emplace_back(name, fmt::format("{} supports only [{}]", e.uri,
                                                fmt::join(it->second.arch_families, " ")));
        continue;
      }
      auto w =
          aot::make_wanted(it->second, jit::sources_for(it->second.kernel_dirs), *target, settings);
      if (w.content_key != e.content_key) {
        problems.emplace_back(name,
                              "built from other kernel sources or options than this kjit's "
                              "(this kjit would not load it)");
      }
    }
    // The tuning records: their size and SHA-256, and a record that names its own path.
    for (const tune::TuneStore::Entry& e : records.list()) {
      if (e.origin.empty()) continue;  // the files themselves, listed again as the index has them
      ++checked;
      if (!e.valid) problems.emplace_back(e.path.lexically_relative(dir).string(), e.why);
    }
    if (uncatalogued > 0) {
      notes.push_back(
          fmt::format("{} entries are not in this kjit's catalogs or the package's tuning records: "
                      "their sources were not compared",
                      uncatalogued));
    }
  }
  if (as_json) {
    json out = {
        {"dir", dir.string()}, {"kjit_version", ours},   {"package_kjit_version", idx.kjit_version},
        {"checked", checked},  {"ok", problems.empty()}, {"problems", json::array()},
        {"notes", notes}};
    for (const auto& [what, why] : problems) {
      out["problems"].push_back({{"entry", what}, {"problem", why}});
    }
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
  } else {
    for (const auto& [what, why] : problems) fmt::print("FAIL  {}: {}\n", what, why);
    for (const auto& n : notes) fmt::print("note  {}\n", n);
    fmt::print("{}: {} entries checked, {} problem(s)\n", dir.string(), checked, problems.size());
  }
  return problems.empty() ? kExitOk : kExitFailure;
}

int run_list(const fs::path& dir, bool as_json) {
  aot::PackageIndex idx = read_index(dir);
  if (as_json) {
    json j = json::parse(idx.to_json());
    j["dir"] = dir.string();
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  unsigned long long bytes = 0;
  for (const auto& e : idx.entries) bytes += e.size;
  fmt::print("package {}: format {}, kjit {}, NVRTC {}, created {}\n", dir.string(),
             idx.format_version, idx.kjit_version, idx.nvrtc_version, idx.created);
  fmt::print("{} entries for [{}], {:.1f} MiB of cubins\n", idx.entries.size(),
             fmt::join(idx.archs, " "), bytes / double(1 << 20));
  for (const auto& e : idx.entries) {
    fmt::print("{:<7}  {:>9} B  {}  {}\n", e.arch, e.size, e.sha256.substr(0, 12), e.uri);
  }
  for (const auto& t : idx.tuning) {
    fmt::print("tuning   {:>9} B  {}  {} ({})\n", t.size, t.sha256.substr(0, 12), t.file, t.device);
  }
  return kExitOk;
}

// ---- aot fetch
// -----------------------------------------------------------------------------------

struct FetchOptions {
  std::vector<std::string> archs;
  std::vector<std::string> ops;
  std::string url;
  std::string dir;
  int jobs = 0;
  bool json = false;
};

// One specialization this machine needs, with the targets that would serve it, best first.
struct Need {
  std::string uri;
  std::vector<aot::Wanted> wanted;
};

std::vector<Need> needs_for(const std::vector<jit::Spec>& specs,
                            const std::vector<jit::ArchTarget>& listed,
                            const jit::Settings& settings) {
  std::vector<std::pair<int, int>> devices;
  if (listed.empty()) {
    for (int i = 0; i < cuda::device_count(); ++i) {
      const cuda::DeviceInfo& d = cuda::device_info(i);
      if (std::find(devices.begin(), devices.end(), std::make_pair(d.major, d.minor)) ==
          devices.end()) {
        devices.emplace_back(d.major, d.minor);
      }
    }
    if (devices.empty()) {
      throw std::runtime_error("no target arch: no GPU and no --arch / KJIT_CUDA_ARCH_LIST");
    }
  }
  std::vector<Need> needs;
  for (const auto& spec : specs) {
    auto sources = jit::sources_for(spec.kernel_dirs);
    auto want = [&](const jit::ArchTarget& t) {
      return aot::make_wanted(spec, sources, t, settings);
    };
    for (const auto& t : listed) {
      if (jit::family_supports(spec.arch_families, t)) needs.push_back({spec.uri, {want(t)}});
    }
    for (auto [major, minor] : devices) {
      // As a device load would: the plain target, or its arch-specific sibling.
      jit::ArchTarget plain{major, minor, false}, specific{major, minor, true};
      Need n{spec.uri, {}};
      if (jit::family_supports(spec.arch_families, plain)) n.wanted.push_back(want(plain));
      if (jit::family_supports(spec.arch_families, specific)) n.wanted.push_back(want(specific));
      if (!n.wanted.empty()) needs.push_back(std::move(n));
    }
  }
  return needs;
}

std::string describe_dirs(const aot::Packages& p) {
  std::string s;
  for (const auto& d : p.dirs()) {
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", d.role, d.path.string());
  }
  return s.empty() ? "none" : s;
}

int run_fetch(const FetchOptions& o) {
  std::vector<jit::ArchTarget> listed = parse_archs(o.archs);
  std::vector<const ops::OpDef*> defs = selected_ops(o.ops);
  jit::Settings settings = jit::Settings::from_env();
  if (listed.empty()) listed = settings.arch_list;
  if (!o.dir.empty()) settings.artifact_dir = o.dir;
  if (!o.url.empty()) settings.artifact_url = o.url;
  if (o.jobs > 0) settings.artifact_jobs = o.jobs;

  std::vector<std::pair<std::string, std::string>> bad_rows;
  std::vector<jit::Spec> specs = catalog_specs(defs, &bad_rows);
  std::vector<Need> needs = needs_for(specs, listed, settings);

  // A configured local directory always wins over a download.
  aot::Packages local(settings);
  std::vector<const Need*> missing;
  for (const auto& n : needs) {
    if (!local.find(n.uri, n.wanted, nullptr)) missing.push_back(&n);
  }
  const size_t present = needs.size() - missing.size();
  auto report = [&](size_t downloaded, size_t already, const std::vector<aot::FetchFailure>& fails,
                    int peak) {
    if (o.json) {
      json out = {{"url", settings.artifact_url}, {"dir", settings.artifact_dir.string()},
                  {"wanted", needs.size()},       {"present", present},
                  {"downloaded", downloaded},     {"already_downloaded", already},
                  {"peak_transfers", peak},       {"failures", json::array()}};
      for (const auto& f : fails) out["failures"].push_back({{"name", f.name}, {"error", f.error}});
      fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
    } else {
      for (const auto& f : fails) fmt::print(stderr, "kjit-cli: {}: {}\n", f.name, f.error);
      fmt::print("{} wanted, {} present locally, {} downloaded into {}, {} failed\n", needs.size(),
                 present + already, downloaded, settings.artifact_dir.string(), fails.size());
    }
    return fails.empty() ? kExitOk : kExitFailure;
  };
  if (missing.empty()) return report(0, 0, {}, 0);

  auto name_of = [](const Need& n) {
    std::string archs;
    for (const auto& w : n.wanted) archs += (archs.empty() ? "" : " or ") + w.target.sm();
    return fmt::format("{} ({})", n.uri, archs);
  };
  if (settings.offline || settings.artifact_url.empty()) {
    fail(KJIT_ERROR_CACHE, "{}: {} of {} artifacts are missing (first: {}); searched: {}",
         settings.offline ? "KJIT_OFFLINE=1 forbids downloading"
                          : "no repository to download from (KJIT_ARTIFACT_URL or --url)",
         missing.size(), needs.size(), name_of(*missing.front()), describe_dirs(local));
  }

  aot::FetchOptions fo;
  fo.url = settings.artifact_url;
  fo.dir = settings.artifact_dir;
  fo.jobs = settings.artifact_jobs;
  fo.retries = settings.artifact_retries;
  fo.skip_checksum = settings.artifact_skip_checksum;
  fo.log = &local.log();
  aot::PackageIndex remote = aot::fetch_index(fo);
  if (!aot::versions_compatible(remote.kjit_version, jit::kjit_version()) &&
      !settings.aot_allow_version_mismatch) {
    fail(KJIT_ERROR_CACHE,
         "the repository {} holds kjit {}, this is kjit {} (major.minor must match; "
         "KJIT_AOT_ALLOW_VERSION_MISMATCH=1 overrides, for diagnosis only)",
         fo.url, remote.kjit_version, jit::kjit_version());
  }
  std::vector<aot::PackageEntry> todo;
  std::vector<aot::FetchFailure> failures;
  std::set<std::string> queued;
  for (const Need* n : missing) {
    const aot::PackageEntry* pick = nullptr;
    bool other_sources = false;
    for (const auto& w : n->wanted) {
      const aot::PackageEntry* e = remote.find(n->uri, w.target.sm());
      if (e != nullptr && e->content_key == w.content_key) {
        pick = e;
        break;
      }
      other_sources = other_sources || e != nullptr;
    }
    if (pick == nullptr) {
      failures.push_back({name_of(*n), other_sources
                                           ? "the repository's entry was built from other "
                                             "kernel sources or options than this kjit's"
                                           : "not in the repository"});
    } else if (queued.insert(pick->file).second) {
      todo.push_back(*pick);
    }
  }
  Progress progress(todo.size());
  aot::FetchResult r =
      aot::fetch_entries(fo, remote, todo, [&](size_t, size_t) { progress.step("downloaded"); });
  failures.insert(failures.end(), r.failures.begin(), r.failures.end());
  return report(r.downloaded, r.present, failures, r.peak_transfers);
}

}  // namespace

void add_aot_commands(CLI::App& app, int& exit_code) {
  CLI::App* aot = app.add_subcommand("aot", "Ahead-of-time packages: build, verify, list, fetch");
  aot->footer(kExitCodesFooter);
  aot->require_subcommand(1);

  auto b = std::make_shared<BuildOptions>();
  CLI::App* build = aot->add_subcommand("build", "Compile the op catalogs into a package");
  build->footer(kExitCodesFooter);
  build->add_option("--arch", b->archs, "Targets, e.g. \"8.0 9.0a\" (required; no detection)")
      ->type_name("LIST")
      ->allow_extra_args(false)
      ->required();
  build->add_option("--out", b->out, "Package folder (created)")->required();
  build->add_option("--ops", b->ops, "Only these ops")->delimiter(',')->type_name("A,B");
  build->add_option("-j,--jobs", b->jobs, "Worker processes, clamped to cores and memory")
      ->capture_default_str();
  build->add_flag("--json", b->json, "Print one JSON document on stdout");
  build->add_option("--tuning-device", b->tuning_device,
                    "Pack the cache's tuning records of devices matching this glob, with the "
                    "kernels their tactics run (default: every device; records of this kjit and "
                    "NVRTC only)");
  build->add_flag("--no-tuning", b->no_tuning, "Pack no tuning records (nor their kernels)");
  build->callback([b, &exit_code] { exit_code = run_build(*b); });

  auto v = std::make_shared<std::pair<std::string, bool>>();
  CLI::App* verify =
      aot->add_subcommand("verify", "Re-check every checksum and field of a package");
  verify->footer(kExitCodesFooter);
  verify->add_option("dir", v->first, "Package folder")->required();
  verify->add_flag("--json", v->second, "Print one JSON document on stdout");
  verify->callback([v, &exit_code] { exit_code = run_verify(v->first, v->second); });

  auto l = std::make_shared<std::pair<std::string, bool>>();
  CLI::App* list = aot->add_subcommand("list", "Show a package's index");
  list->footer(kExitCodesFooter);
  list->add_option("dir", l->first, "Package folder")->required();
  list->add_flag("--json", l->second, "Print the index as JSON");
  list->callback([l, &exit_code] { exit_code = run_list(l->first, l->second); });

  auto f = std::make_shared<FetchOptions>();
  CLI::App* fetch = aot->add_subcommand(
      "fetch",
      "Download the cubins this machine lacks from KJIT_ARTIFACT_URL into the artifact dir");
  fetch->footer(kExitCodesFooter);
  fetch
      ->add_option("--arch", f->archs,
                   "Targets (default: KJIT_CUDA_ARCH_LIST, else the visible GPUs)")
      ->type_name("LIST")
      ->allow_extra_args(false);
  fetch->add_option("--ops", f->ops, "Only these ops")->delimiter(',')->type_name("A,B");
  fetch->add_option("--url", f->url, "Repository (default: KJIT_ARTIFACT_URL)");
  fetch->add_option("--dir", f->dir, "Artifact dir (default: KJIT_ARTIFACT_DIR)");
  fetch->add_option("-j,--jobs", f->jobs, "Concurrent downloads (default: KJIT_ARTIFACT_JOBS, 4)")
      ->check(CLI::Range(1, 64));
  fetch->add_flag("--json", f->json, "Print one JSON document on stdout");
  fetch->callback([f, &exit_code] { exit_code = run_fetch(*f); });
}

}  // namespace kjit::cli
