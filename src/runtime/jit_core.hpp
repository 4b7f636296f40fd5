// The one build-and-load pipeline every op uses:
//
//   kernel(uri, device)                      hot path: in-process map, no hashing, no I/O
//     -> make_spec()                         only on an in-process miss
//     -> select_device_target()              never compiles for a family the spec excludes
//     -> build(spec, target):
//          AOT package / artifact dir entry? checked against version, sources, SHA-256
//          valid disk entry?                 lock-free read, validated before use
//          auto-fetch (opt-in)?              into the artifact dir, verified first
//          -> flock(entry) -> check again    concurrent processes compile once
//          -> NVRTC -> publish (atomic)      KJIT_DISABLE_JIT stops here with an error
//     -> cuModuleLoadData in the device's primary context, cuFuncLoad (no lazy load later)
//
// It lives in src/runtime/, above jit/ (compile), cache/ (disk) and aot/ (packages), which it ties
// together; none of those includes it. The namespace stays kjit::jit: ops call it the JIT.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "jit/arch.hpp"
#include "jit/call_stream.hpp"
#include "cache/disk_cache.hpp"
#include "cache/metadata.hpp"
#include "jit/settings.hpp"
#include "jit/spec.hpp"
#include "util/hash.hpp"

namespace kjit::aot {
class Packages;
}

namespace kjit::jit {

// kPackage: from an AOT package or the artifact dir (docs/aot.md).
enum class ArtifactSource { kDisk, kCompiled, kPackage };

struct Artifact {
  Metadata meta;
  std::string cubin;
  ArtifactSource source = ArtifactSource::kCompiled;
  fs::path cubin_path;  // empty when not on disk
};

struct LoadedKernel {
  std::string uri;
  ArchTarget target;
  int device = 0;
  CUmodule module = nullptr;
  std::vector<CUfunction> functions;  // in spec.entry_names order
};

// Lets the API call log (src/api/call_log) name the kernels a call runs: kernel_for reports each
// kernel it returns to the calling thread's observer, before the op launches it. With no observer
// installed in any thread that costs one relaxed load per call.
class KernelObserver {
 public:
  virtual void on_kernel(const LoadedKernel& k) noexcept = 0;

 protected:
  ~KernelObserver() = default;
};
inline std::atomic<int> g_kernel_observers{0};
inline thread_local KernelObserver* t_kernel_observer = nullptr;

inline void notify_kernel(const LoadedKernel& k) noexcept {
  if (g_kernel_observers.load(std::memory_order_relaxed) != 0 && t_kernel_observer != nullptr) {
    t_kernel_observer->on_kernel(k);
  }
}

// Installs `o` as the calling thread's observer for the scope.
class ScopedKernelObserver {
 public:
  explicit ScopedKernelObserver(KernelObserver* o) : prev_(t_kernel_observer) {
    t_kernel_observer = o;
    g_kernel_observers.fetch_add(1, std::memory_order_relaxed);
  }
  ~ScopedKernelObserver() {
    g_kernel_observers.fetch_sub(1, std::memory_order_relaxed);
    t_kernel_observer = prev_;
  }
  ScopedKernelObserver(const ScopedKernelObserver&) = delete;
  ScopedKernelObserver& operator=(const ScopedKernelObserver&) = delete;

 private:
  KernelObserver* prev_;
};

struct JitStats {
  std::atomic<long> compiles{0};
  std::atomic<long> disk_hits{0};
  std::atomic<long> invalid_entries{0};  // found on disk, rejected, rebuilt
  std::atomic<long> loads{0};            // modules loaded onto a device
  std::atomic<long> package_hits{0};     // served from an AOT package or the artifact dir
};

class JitCore {
 public:
  explicit JitCore(Settings settings);
  ~JitCore();
  // The process-wide instance used by the C ABI, configured from the environment (and what
  // configure_global installed before) on first use.
  static JitCore& global();
  // Installs `o` for global() to apply over the environment. False, changing nothing, when
  // global() already exists.
  static bool configure_global(const SettingsOverride& o);

  const Settings& settings() const { return settings_; }
  const JitStats& stats() const { return stats_; }
  DiskCache disk_cache() const { return DiskCache(settings_.cache_dir); }

  // The cubin of `spec` for `target`: from a valid disk entry or compiled (then published).
  // Works without a GPU. Throws kjit::Error (COMPILE, JIT_DISABLED, UNSUPPORTED, ...).
  Artifact build(const Spec& spec, const ArchTarget& target);

  // The loaded kernel of `uri` on `device`; `make_spec` runs only when it is not loaded yet.
  // Thread-safe; the returned reference lives as long as this JitCore.
  const LoadedKernel& kernel(const std::string& uri, int device,
                             const std::function<Spec()>& make_spec);

  // The per-call path of every op: the same kernel, found by hashing the bytes of the op's
  // dispatch config instead of building its URI (which allocates a dozen strings; at decode
  // sizes that host time is the kernel's time). A config with padding would hash garbage, so
  // only padding-free configs compile; every field of one is then part of its identity.
  template <class Config, class MakeSpec>
  const LoadedKernel& kernel_for(std::string_view op, const Config& cfg, int device,
                                 MakeSpec&& make_spec) {
    static_assert(std::has_unique_object_representations_v<Config>,
                  "a dispatch config must have no padding: its bytes are its cache key");
    char bytes[128 + sizeof(Config) + sizeof(int)];
    static_assert(sizeof(Config) <= 256, "a dispatch config is a handful of integers");
    const size_t n = op.size() < 128 ? op.size() : 128;
    std::memcpy(bytes, op.data(), n);
    std::memcpy(bytes + n, &cfg, sizeof(Config));
    std::memcpy(bytes + n + sizeof(Config), &device, sizeof(int));
    const util::Hash128 h = util::xxh3_128({bytes, n + sizeof(Config) + sizeof(int)});
    const LoadedKernel* k = find_fast(h);
    if (k == nullptr) k = &kernel_slow(h, device, make_spec());
    notify_kernel(*k);
    return *k;
  }

 private:
  Artifact build_impl(const Spec& spec, const ArchTarget& target, bool for_device);
  Artifact build_locked(const Spec& spec, const ArchTarget& target,
                        const std::vector<SourceFile>& sources, const KeyInputs& inputs,
                        const std::string& key, const EntryPaths& paths,
                        const std::string& searched);
  Artifact compile(const Spec& spec, const ArchTarget& target,
                   const std::vector<SourceFile>& sources, const KeyInputs& inputs,
                   const std::string& key);
  void write_generated(const Spec& spec, const std::vector<SourceFile>& sources,
                       const KeyInputs& inputs);
  std::unique_ptr<LoadedKernel> load(const Spec& spec, int device);
  const LoadedKernel* find_fast(const util::Hash128& h);
  const LoadedKernel& kernel_slow(const util::Hash128& h, int device, const Spec& spec);

  struct Hash128Hasher {
    size_t operator()(const util::Hash128& h) const { return static_cast<size_t>(h.lo); }
  };

  Settings settings_;
  std::unique_ptr<aot::Packages> packages_;  // KJIT_AOT_DIR, the artifact dir, fetching
  JitStats stats_;
  std::shared_mutex loaded_mu_;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> loaded_;
  std::unordered_map<util::Hash128, const LoadedKernel*, Hash128Hasher> fast_;
  // One lock per map key for cold loads, so specs and devices load side by side (NVRTC itself
  // compiles one program at a time: jit/compiler.cpp).
  std::mutex key_locks_mu_;
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> key_locks_;
};

std::string kjit_version();

}  // namespace kjit::jit
