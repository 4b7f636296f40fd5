#include "runtime/jit_core.hpp"

#include <nlohmann/json.hpp>

#include "aot/packages.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "jit/compiler.hpp"
#include "jit/cubin_info.hpp"
#include "jit/sources.hpp"
#include "kjit/version.h"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/log.hpp"

namespace kjit::jit {

std::string kjit_version() {
  return KJIT_VERSION_STRING;
}

JitCore::JitCore(Settings settings)
    : settings_(std::move(settings)), packages_(std::make_unique<aot::Packages>(settings_)) {}

JitCore::~JitCore() = default;

namespace {
std::mutex g_config_mu;
bool g_created = false;
SettingsOverride g_override;
}  // namespace

JitCore& JitCore::global() {
  static JitCore core([] {
    std::lock_guard<std::mutex> lock(g_config_mu);
    g_created = true;
    Settings s = Settings::from_env();
    g_override.apply(s);
    return s;
  }());
  return core;
}

bool JitCore::configure_global(const SettingsOverride& o) {
  std::lock_guard<std::mutex> lock(g_config_mu);
  if (g_created) return false;
  g_override = o;
  return true;
}

void ScopedCallStream::check_not_capturing(const std::string& uri) {
  if (!set_ || !cuda::driver_available()) return;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cuda::driver().cuStreamIsCapturing(static_cast<CUstream>(current_), &status) ==
          CUDA_SUCCESS &&
      status != CU_STREAM_CAPTURE_STATUS_NONE) {
    fail(KJIT_ERROR_CAPTURING,
         "{} is not loaded yet and the call's stream is capturing a CUDA graph; load it before "
         "the capture (kjit_precompile, or one call outside it)",
         uri);
  }
}

Artifact JitCore::build(const Spec& spec, const ArchTarget& target) {
  return build_impl(spec, target, false);
}

Artifact JitCore::build_impl(const Spec& spec, const ArchTarget& target, bool for_device) {
  if (!family_supports(spec.arch_families, target)) {
    select_targets(spec.arch_families, {target}, spec.uri);  // throws with both lists
  }
  std::vector<SourceFile> sources = sources_for(spec.kernel_dirs);
  KeyInputs inputs = make_key_inputs(spec, sources, semantic_options(spec, target, settings_),
                                     target, nvrtc_version(), kjit_version());
  std::string key = compute_key(inputs).hex();
  // Packages come before the disk cache: a shipped cubin costs a read and a SHA-256.
  std::vector<aot::Wanted> wanted{aot::make_wanted(target, inputs, key)};
  ArchTarget specific = target;
  specific.arch_specific = true;
  if (for_device && !target.arch_specific && family_supports(spec.arch_families, specific)) {
    // The device is exactly this compute capability, so a package built for sm_XYa serves it
    // too; compile-only requests (for_device false) get exactly the target they named.
    wanted.push_back(aot::make_wanted(spec, sources, specific, settings_));
  }
  std::string searched;
  auto packaged = [&](aot::Found f) {
    stats_.package_hits++;
    return Artifact{std::move(f.meta), std::move(f.cubin), ArtifactSource::kPackage,
                    std::move(f.cubin_path)};
  };
  if (auto f = packages_->find(spec.uri, wanted, &searched)) return packaged(std::move(*f));
  if (!settings_.disk_cache) {
    if (auto f = packages_->auto_fetch(spec.uri, wanted, &searched)) return packaged(std::move(*f));
    if (settings_.disable_jit) {
      fail(KJIT_ERROR_JIT_DISABLED,
           "{} ({}) is not loaded, KJIT_DISABLE_JIT=1 forbids compiling it and KJIT_JIT_CACHE=0 "
           "turns the disk cache off (packages searched: {})",
           spec.uri, target.sm(), searched);
    }
    return compile(spec, target, sources, inputs, key);
  }
  DiskCache cache = disk_cache();
  EntryPaths paths = cache.paths(target.sm(), spec.uri, key);
  // Lock-free fast path: most processes find a published entry.
  std::string problem;
  if (auto e = cache.load(paths, key, inputs, &problem)) {
    stats_.disk_hits++;
    DiskCache::touch(paths.cubin);
    return {std::move(e->meta), std::move(e->cubin), ArtifactSource::kDisk, paths.cubin};
  }
  if (auto f = packages_->auto_fetch(spec.uri, wanted, &searched)) return packaged(std::move(*f));
  return build_locked(spec, target, sources, inputs, key, paths, searched);
}

Artifact JitCore::build_locked(const Spec& spec, const ArchTarget& target,
                               const std::vector<SourceFile>& sources, const KeyInputs& inputs,
                               const std::string& key, const EntryPaths& paths,
                               const std::string& searched) {
  DiskCache cache = disk_cache();
  std::unique_ptr<util::FileLock> lock;
  if (!settings_.disable_jit) {
    try {
      util::make_dirs(paths.lock.parent_path());
      lock = std::make_unique<util::FileLock>(paths.lock);
    } catch (const Error& e) {
      // A read-only or full cache must not stop inference: compile into memory instead.
      util::log("warning: {}; compiling {} without the disk cache", e.what(), spec.uri);
      return compile(spec, target, sources, inputs, key);
    }
  }
  // Check again under the lock: another process may have published while we waited.
  std::string problem;
  if (auto e = cache.load(paths, key, inputs, &problem)) {
    stats_.disk_hits++;
    return {std::move(e->meta), std::move(e->cubin), ArtifactSource::kDisk, paths.cubin};
  }
  if (!problem.empty()) {
    stats_.invalid_entries++;
    util::log("cache entry {} is invalid ({}); {}", paths.json.string(), problem,
              settings_.disable_jit ? "not loading it" : "rebuilding it");
  }
  if (settings_.disable_jit) {
    fail(KJIT_ERROR_JIT_DISABLED,
         "{} ({}) has no valid cached module{} and KJIT_DISABLE_JIT=1 forbids compiling it "
         "(looked for {}; packages searched: {})",
         spec.uri, target.sm(), problem.empty() ? "" : " (" + problem + ")", paths.json.string(),
         searched);
  }
  Artifact a = compile(spec, target, sources, inputs, key);
  try {
    cache.publish(paths, a.meta, a.cubin);
    a.cubin_path = paths.cubin;
  } catch (const Error& e) {
    util::log("warning: {}; {} stays in memory only", e.what(), spec.uri);
  }
  lock.reset();  // the new entry is published: it may be pruned like any other (least used last)
  if (settings_.cache_max_bytes > 0) {
    const PruneResult r = cache.prune(settings_.cache_max_bytes, settings_.gen_dir);
    if (settings_.verbose && r.removed > 0) {
      util::log("KJIT_CACHE_MAX_SIZE: pruned {} of {} entries ({} bytes)", r.removed, r.entries,
                r.freed);
    }
  }
  return a;
}

Artifact JitCore::compile(const Spec& spec, const ArchTarget& target,
                          const std::vector<SourceFile>& sources, const KeyInputs& inputs,
                          const std::string& key) {
  if (settings_.disable_jit) {
    fail(KJIT_ERROR_JIT_DISABLED, "{} ({}) needs a compile and KJIT_DISABLE_JIT=1", spec.uri,
         target.sm());
  }
  // The rendered sources are for reading and debugging a specialization (they were 70% of a
  // full catalog's bytes): written when asked for, by KJIT_GEN_DIR, KJIT_JIT_VERBOSE or
  // KJIT_JIT_DEBUG.
  if (settings_.gen_dir_explicit ||
      (settings_.disk_cache && (settings_.verbose || settings_.debug))) {
    try {
      write_generated(spec, sources, inputs);
    } catch (const Error& e) {
      util::log("warning: generated sources not written: {}", e.what());
    }
  }
  CompileOutput out = compile_cubin(spec, sources, target, settings_);
  stats_.compiles++;
  const std::vector<std::string> advisories = ptxas_advisories(out.log);
  for (const auto& line : advisories) {
    util::log("warning: ptxas on {} for {}: {}", spec.uri, target.sm(), line);
  }
  if (settings_.verbose) {
    std::string opts;
    for (const auto& o : inputs.options) opts += " " + o;
    util::log("compiled {} for {} in {:.1f} ms ({} bytes):{}", spec.uri, target.sm(),
              out.compile_ms, out.cubin.size(), opts);
  }
  Artifact a;
  a.source = ArtifactSource::kCompiled;
  Metadata& m = a.meta;
  m.key = key;
  m.uri = spec.uri;
  m.inputs = inputs;
  m.lowered_names = out.lowered_names;
  m.cubin_size = out.cubin.size();
  m.cubin_hash = util::xxh3_64_hex(out.cubin);
  m.compile_ms = out.compile_ms;
  m.created = utc_now_iso();
  m.ptxas_advisories = advisories;
  if (!out.lowered_names.empty()) {
    CubinKernelInfo info = cubin_kernel_info(out.cubin, out.lowered_names.front().second);
    m.registers = info.registers;
    m.shared_bytes = info.shared_bytes;
  }
  a.cubin = std::move(out.cubin);
  return a;
}

void JitCore::write_generated(const Spec& spec, const std::vector<SourceFile>& sources,
                              const KeyInputs& inputs) {
  fs::path dir = settings_.gen_dir / spec.uri;
  util::make_dirs(dir);
  util::write_file_if_different(dir / (spec.uri + ".cu"), main_source(spec));
  for (const auto& s : sources) {
    util::make_dirs((dir / "kernels" / s.name).parent_path());
    util::write_file_if_different(dir / "kernels" / s.name, s.content);
  }
  nlohmann::json m;
  m["uri"] = spec.uri;
  m["main"] = spec.uri + ".cu";
  m["entry_names"] = spec.entry_names;
  m["sources"] = nlohmann::json::array();
  for (const auto& [name, hash] : inputs.source_hashes) m["sources"].push_back({name, hash});
  m["options"] = inputs.options;
  m["arch"] = inputs.arch;
  m["nvrtc_version"] = inputs.nvrtc_version;
  m["kjit_version"] = inputs.kjit_version;
  m["include_dirs"] = {"kernels", "<cuda>/include", "<cuda>/include/cccl"};
  util::write_file_if_different(dir / ("manifest-" + inputs.arch + ".json"), m.dump(2) + "\n");
}

const LoadedKernel& JitCore::kernel(const std::string& uri, int device,
                                    const std::function<Spec()>& make_spec) {
  std::string map_key = uri + "@" + std::to_string(device);
  {
    std::shared_lock<std::shared_mutex> lock(loaded_mu_);
    auto it = loaded_.find(map_key);
    if (it != loaded_.end()) return *it->second;
  }
  ScopedCallStream::check_not_capturing(uri);
  std::shared_ptr<std::mutex> key_lock;
  {
    std::lock_guard<std::mutex> lock(key_locks_mu_);
    auto& slot = key_locks_[map_key];
    if (!slot) slot = std::make_shared<std::mutex>();
    key_lock = slot;
  }
  std::lock_guard<std::mutex> build_lock(*key_lock);
  {
    std::shared_lock<std::shared_mutex> lock(loaded_mu_);
    auto it = loaded_.find(map_key);
    if (it != loaded_.end()) return *it->second;
  }
  auto k = load(make_spec(), device);
  std::unique_lock<std::shared_mutex> lock(loaded_mu_);
  auto& slot = loaded_[map_key];
  slot = std::move(k);
  return *slot;
}

const LoadedKernel* JitCore::find_fast(const util::Hash128& h) {
  std::shared_lock<std::shared_mutex> lock(loaded_mu_);
  auto it = fast_.find(h);
  return it == fast_.end() ? nullptr : it->second;
}

const LoadedKernel& JitCore::kernel_slow(const util::Hash128& h, int device, const Spec& spec) {
  const LoadedKernel& k = kernel(spec.uri, device, [&] { return spec; });
  std::unique_lock<std::shared_mutex> lock(loaded_mu_);
  fast_.emplace(h, &k);
  return k;
}

std::unique_ptr<LoadedKernel> JitCore::load(const Spec& spec, int device) {
  const cuda::DeviceInfo& info = cuda::device_info(device);
  ArchTarget target = select_device_target(spec.arch_families, info.major, info.minor, spec.uri);
  Artifact a = build_impl(spec, target, true);
  const cuda::Driver& d = cuda::driver();
  cuda::ScopedDevice scope(device);
  auto k = std::make_unique<LoadedKernel>();
  k->uri = spec.uri;
  k->target = target;
  // A package may serve a plain target with its arch-specific sibling: record what was loaded.
  if (auto t = ArchTarget::parse(a.meta.inputs.arch)) k->target = *t;
  k->device = device;
  KJIT_CU_CHECK(d.cuModuleLoadData(&k->module, a.cubin.data()));
  for (const auto& [expr, lowered] : a.meta.lowered_names) {
    CUfunction fn = nullptr;
    KJIT_CU_CHECK(d.cuModuleGetFunction(&fn, k->module, lowered.c_str()));
    // Force the load now: lazy loading would otherwise happen at the first launch, inside a
    // timed region or a stream capture.
    if (d.cuFuncLoad) KJIT_CU_CHECK(d.cuFuncLoad(fn));
    k->functions.push_back(fn);
  }
  stats_.loads++;
  return k;
}

}  // namespace kjit::jit
