// C entry points of an engine's life cycle: configuration before first use, warm-up before graph
// capture, and support queries (kjit.h, "Engine life cycle").
#include <fmt/format.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "api/guard.hpp"
#include "cuda/device.hpp"
#include "diag/call_log.hpp"
#include "jit/arch_context.hpp"
#include "runtime/jit_core.hpp"
#include "ops/precompile.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"

namespace {

using kjit::fail;

// The fields of `c` that its struct_size covers, over "all from the environment".
kjit_config read_config(const kjit_config* c) {
  kjit_config r;
  kjit_config_init(&r);
  if (c == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "config is NULL");
  if (c->struct_size < offsetof(kjit_config, aot_dir) + sizeof(const char*)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "config->struct_size is {} (call kjit_config_init first)",
         c->struct_size);
  }
  auto covered = [&](size_t offset, size_t size) { return c->struct_size >= offset + size; };
  r.cache_dir = c->cache_dir;
  r.aot_dir = c->aot_dir;
  if (covered(offsetof(kjit_config, disable_jit), sizeof(int))) r.disable_jit = c->disable_jit;
  if (covered(offsetof(kjit_config, log_level), sizeof(int))) r.log_level = c->log_level;
  if (r.disable_jit < -1 || r.disable_jit > 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "config->disable_jit is {} (0, 1 or -1)", r.disable_jit);
  }
  if (r.log_level < -1 || r.log_level > 10) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "config->log_level is {} (0..10 or -1)", r.log_level);
  }
  if (r.cache_dir != nullptr && *r.cache_dir == '\0') {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "config->cache_dir is empty (NULL takes the environment's)");
  }
  return r;
}

// The op's spec for `params`, made by the registry the way the op's own call makes it.
kjit::jit::Spec spec_for(const char* op, const char* params) {
  if (op == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "op is NULL");
  const kjit::ops::OpDef& def = kjit::ops::op_or_throw(op);
  const kjit::ops::SetArgs args = kjit::ops::parse_set_list(params == nullptr ? "" : params);
  return def.make_spec(args);
}

// What a warm-up loads or builds for: a device (device_id >= 0), or the arch context's targets.
// Made once per call, so a missing driver or device fails the call once, before any spec.
struct WarmUpTarget {
  int device_id = -1;
  int major = 0, minor = 0;                       // the device's compute capability
  std::optional<kjit::jit::ArchContext> context;  // device_id -1

  explicit WarmUpTarget(int device) : device_id(device) {
    if (device_id < -1) fail(KJIT_ERROR_INVALID_ARGUMENT, "device_id {} (>= 0, or -1)", device_id);
    if (device_id >= 0) {
      const auto& info = kjit::cuda::device_info(device_id);
      major = info.major;
      minor = info.minor;
    } else {
      context =
          kjit::jit::ArchContext::current({}, kjit::jit::JitCore::global().settings().arch_list);
    }
  }
};

// kjit_precompile_file's counts (kjit_precompile_counts without its size).
struct WarmUpCounts {
  int compiled = 0, cached = 0, skipped = 0, failed = 0;
};

// Loads or builds `spec` for `where`. Without `counts` (kjit_precompile) a spec that no target
// can run is refused (KJIT_ERROR_UNSUPPORTED); with them (a file names every arch's variants) it
// is counted as skipped.
void warm_up(const kjit::jit::Spec& spec, const WarmUpTarget& where, WarmUpCounts* counts) {
  kjit::jit::JitCore& core = kjit::jit::JitCore::global();
  auto unsupported = [&](const kjit::Error& e) {
    if (counts == nullptr || e.status() != KJIT_ERROR_UNSUPPORTED) throw;
    ++counts->skipped;
  };
  if (where.device_id >= 0) {
    if (counts != nullptr) {
      try {
        kjit::jit::select_device_target(spec.arch_families, where.major, where.minor, spec.uri);
      } catch (const kjit::Error& e) {
        return unsupported(e);
      }
    }
    // A compile shows in the runtime's counter (another thread's compile at the same moment may
    // count this spec as compiled: the split is informational).
    const long before = core.stats().compiles.load();
    core.kernel(spec.uri, where.device_id, [&] { return spec; });
    if (counts != nullptr) {
      ++(core.stats().compiles.load() > before ? counts->compiled : counts->cached);
    }
    return;
  }
  std::vector<kjit::jit::ArchTarget> targets;
  std::vector<std::string> skipped;
  try {
    targets = where.context->targets_for(spec, &skipped);
  } catch (const kjit::Error& e) {
    return unsupported(e);
  }
  for (const auto& t : targets) {
    const kjit::jit::Artifact a = core.build(spec, t);
    if (counts != nullptr) {
      ++(a.source == kjit::jit::ArtifactSource::kCompiled ? counts->compiled : counts->cached);
    }
  }
}

// Writes the fields of `out` its struct_size covers.
void write_counts(const WarmUpCounts& c, kjit_precompile_counts* out) {
  if (out == nullptr) return;
  auto put = [&](size_t offset, int v) {
    if (out->struct_size >= offset + sizeof(int)) {
      *reinterpret_cast<int*>(reinterpret_cast<char*>(out) + offset) = v;
    }
  };
  put(offsetof(kjit_precompile_counts, compiled), c.compiled);
  put(offsetof(kjit_precompile_counts, cached), c.cached);
  put(offsetof(kjit_precompile_counts, skipped), c.skipped);
  put(offsetof(kjit_precompile_counts, failed), c.failed);
}

}  // namespace

extern "C" {

KJIT_API void kjit_config_init(kjit_config* config) {
  if (config == nullptr) return;
  *config = kjit_config{};
  config->struct_size = sizeof(kjit_config);
  config->cache_dir = nullptr;
  config->aot_dir = nullptr;
  config->disable_jit = -1;
  config->log_level = -1;
}

KJIT_API kjit_status kjit_configure(const kjit_config* config) {
  return kjit::api::guarded("kjit_configure", [&] {
    const kjit_config c = read_config(config);
    kjit::jit::SettingsOverride o;
    if (c.cache_dir != nullptr) o.cache_dir = std::string(c.cache_dir);
    if (c.aot_dir != nullptr) o.aot_dirs = kjit::jit::split_path_list(c.aot_dir);
    if (c.disable_jit >= 0) o.disable_jit = c.disable_jit != 0;
    if (!kjit::jit::JitCore::configure_global(o)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "the runtime already exists (an earlier call read the cache or compiled); call "
           "kjit_configure before any other kjit call");
    }
    if (c.log_level >= 0) kjit::api::set_log_level_override(c.log_level);
  });
}

KJIT_API kjit_status kjit_precompile(const char* op, const char* params, int device_id) {
  return kjit::api::guarded("kjit_precompile", [&] {
    const kjit::jit::Spec spec = spec_for(op, params);
    warm_up(spec, WarmUpTarget(device_id), nullptr);
  });
}

KJIT_API kjit_status kjit_precompile_file(const char* path, int device_id,
                                          kjit_precompile_counts* counts) {
  return kjit::api::guarded("kjit_precompile_file", [&] {
    WarmUpCounts c;
    if (counts != nullptr) {
      if (counts->struct_size < offsetof(kjit_precompile_counts, compiled) + sizeof(int)) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "counts->struct_size is {} (set it to sizeof(kjit_precompile_counts))",
             counts->struct_size);
      }
      write_counts(c, counts);
    }
    if (path == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "path is NULL");
    const std::vector<kjit::ops::PrecompileSpec> specs = kjit::ops::precompile_specs_from(path);
    const WarmUpTarget target(device_id);
    kjit_status first = KJIT_SUCCESS;
    std::string why;
    for (const auto& s : specs) {
      try {
        warm_up(s.spec, target, &c);
      } catch (const kjit::Error& e) {
        ++c.failed;
        if (first == KJIT_SUCCESS) {
          first = e.status();
          why = fmt::format("{}: {}", s.where, e.what());
        }
      }
    }
    write_counts(c, counts);
    if (first != KJIT_SUCCESS) {
      fail(first, "{} (of {} specializations, {} failed)", why, specs.size(), c.failed);
    }
  });
}

KJIT_API kjit_status kjit_op_supported(const char* op, const char* params, const char* arch) {
  return kjit::api::guarded("kjit_op_supported", [&] {
    const kjit::jit::Spec spec = spec_for(op, params);
    if (arch != nullptr) {
      auto t = kjit::jit::ArchTarget::parse(arch);
      if (!t) fail(KJIT_ERROR_INVALID_ARGUMENT, "arch '{}' is not a target (e.g. sm_90a)", arch);
      kjit::jit::select_targets(spec.arch_families, {*t}, spec.uri);  // throws UNSUPPORTED
      return;
    }
    const int n = kjit::cuda::device_count();
    if (n == 0) fail(KJIT_ERROR_NO_DEVICE, "no CUDA device to ask about (pass an arch)");
    for (int d = 0; d < n; ++d) {
      const auto& info = kjit::cuda::device_info(d);
      kjit::jit::select_device_target(spec.arch_families, info.major, info.minor, spec.uri);
    }
  });
}

}  // extern "C"
