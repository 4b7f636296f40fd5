// C entry points of an engine's life cycle: configuration before first use, warm-up before graph
// capture, and support queries (kjit.h, "Engine life cycle").
#include <cstddef>
#include <string>

#include "api/guard.hpp"
#include "cuda/device.hpp"
#include "diag/call_log.hpp"
#include "jit/arch_context.hpp"
#include "runtime/jit_core.hpp"
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
    kjit::jit::JitCore& core = kjit::jit::JitCore::global();
    if (device_id >= 0) {
      core.kernel(spec.uri, device_id, [&] { return spec; });
      return;
    }
    if (device_id != -1) fail(KJIT_ERROR_INVALID_ARGUMENT, "device_id {} (>= 0, or -1)", device_id);
    const auto ctx = kjit::jit::ArchContext::current({}, core.settings().arch_list);
    std::vector<std::string> skipped;
    for (const auto& t : ctx.targets_for(spec, &skipped)) core.build(spec, t);
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
