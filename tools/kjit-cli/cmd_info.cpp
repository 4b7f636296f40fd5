// kjit-cli info / ops: what this build, this machine and the registry offer. Both work without a
// GPU or a driver: a missing piece is reported, never fatal.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "jit/arch.hpp"
#include "jit/compiler.hpp"
#include "runtime/jit_core.hpp"
#include "jit/settings.hpp"
#include "kjit/kjit.h"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"

extern char** environ;

namespace kjit::cli {
namespace {

using json = nlohmann::ordered_json;

constexpr const char* kArchVar = "KJIT_CUDA_ARCH_LIST";

// The settings the library would use. A bad KJIT_CUDA_ARCH_LIST makes from_env throw; `info` is
// where one looks when that happens, so it reports the error and shows the rest without it.
jit::Settings read_settings(std::string* arch_error) {
  try {
    return jit::Settings::from_env();
  } catch (const Error& e) {
    *arch_error = e.what();
    std::string saved = std::getenv(kArchVar);
    ::unsetenv(kArchVar);
    jit::Settings s = jit::Settings::from_env();
    ::setenv(kArchVar, saved.c_str(), 1);
    return s;
  }
}

json collect_info() {
  json j;
  j["kjit_version"] = jit::kjit_version();
  j["abi_version"] = kjit_abi_version();
  j["nvrtc_version"] = jit::nvrtc_version();

  std::string why;
  if (cuda::driver_available(&why)) {
    int v = cuda::driver().version;
    j["driver"] = {{"available", true}, {"version", fmt::format("{}.{}", v / 1000, v % 1000 / 10)}};
  } else {
    j["driver"] = {{"available", false}, {"error", why}};
  }

  j["devices"] = json::array();
  std::vector<std::string> device_targets;
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceInfo& d = cuda::device_info(i);
    std::string sm = fmt::format("sm_{}{}", d.major, d.minor);
    j["devices"].push_back({{"ordinal", i},
                            {"name", d.name},
                            {"sm", sm},
                            {"sm_count", d.sm_count},
                            {"memory_gib", d.total_mem / double(1ULL << 30)},
                            {"l2_mib", d.l2_bytes / double(1 << 20)}});
    if (std::find(device_targets.begin(), device_targets.end(), sm) == device_targets.end()) {
      device_targets.push_back(sm);
    }
  }

  std::string arch_error;
  jit::Settings s = read_settings(&arch_error);
  j["arch_list"] = json::array();
  if (!arch_error.empty()) {
    j["arch_list_source"] = "error";
    j["arch_list_error"] = arch_error;
  } else if (!s.arch_list.empty()) {
    j["arch_list_source"] = kArchVar;
    for (const auto& t : s.arch_list) j["arch_list"].push_back(t.sm());
  } else if (!device_targets.empty()) {
    j["arch_list_source"] = "devices";
    j["arch_list"] = device_targets;
  } else {
    j["arch_list_source"] = "none";
  }

  j["cache_dir"] = s.cache_dir.string();
  j["gen_dir"] = s.gen_dir.string();
  j["aot_dirs"] = json::array();
  for (const auto& d : s.aot_dirs) j["aot_dirs"].push_back(d.string());
  j["artifact_dir"] = s.artifact_dir.string();
  j["artifact_url"] = s.artifact_url;
  try {
    j["cuda_home"] = jit::find_cuda_home().string();
  } catch (const Error& e) {
    j["cuda_home"] = nullptr;
    j["cuda_home_error"] = e.what();
  }

  std::map<std::string, std::string> env;  // sorted by name
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (kv.rfind("KJIT_", 0) == 0 && eq != std::string::npos) {
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  j["env"] = env;
  j["elementwise_pdl"] = ops::elementwise_pdl_requested();
  j["pdl_early_indices"] = ops::pdl_early_indices_requested();
  return j;
}

void print_info(const json& j) {
  auto row = [](const char* label, const std::string& value) {
    fmt::print("{:<14} {}\n", label, value);
  };
  row("kjit", fmt::format("{} (ABI {})", j["kjit_version"].get<std::string>(),
                          j["abi_version"].get<int>()));
  row("NVRTC", j["nvrtc_version"]);
  const json& drv = j["driver"];
  row("driver",
      drv["available"] ? drv["version"].get<std::string>() : drv["error"].get<std::string>());
  if (j["devices"].empty()) row("devices", "no GPU");
  for (const auto& d : j["devices"]) {
    row(d["ordinal"] == 0 ? "devices" : "",
        fmt::format("{}: {}, {}, {} SMs, {:.1f} GiB, {:.1f} MiB L2", d["ordinal"].get<int>(),
                    d["name"].get<std::string>(), d["sm"].get<std::string>(),
                    d["sm_count"].get<int>(), d["memory_gib"].get<double>(),
                    d["l2_mib"].get<double>()));
  }
  std::string source = j["arch_list_source"];
  std::string archs =
      fmt::format("{}", fmt::join(j["arch_list"].get<std::vector<std::string>>(), " "));
  if (source == "error") {
    row("arch list", "invalid: " + j["arch_list_error"].get<std::string>());
  } else if (source == "none") {
    row("arch list", "none (no GPU and KJIT_CUDA_ARCH_LIST unset)");
  } else {
    row("arch list",
        fmt::format("{} (from {})", archs, source == "devices" ? "the GPUs" : kArchVar));
  }
  row("cache dir", j["cache_dir"]);
  row("generated dir", j["gen_dir"]);
  auto aot = j["aot_dirs"].get<std::vector<std::string>>();
  row("AOT dirs",
      aot.empty() ? "none (KJIT_AOT_DIR unset)" : fmt::format("{}", fmt::join(aot, " ")));
  row("artifact dir", j["artifact_dir"]);
  row("artifact URL", j["artifact_url"].get<std::string>().empty()
                          ? "none (KJIT_ARTIFACT_URL unset)"
                          : j["artifact_url"].get<std::string>());
  row("CUDA home", j["cuda_home"].is_null()
                       ? "not found: " + j["cuda_home_error"].get<std::string>()
                       : j["cuda_home"].get<std::string>());
  row("PDL launches", j["elementwise_pdl"].get<bool>()
                          ? "on: elementwise ops are programmatic dependents on sm_90+ "
                            "(KJIT_PDL=0 turns it off)"
                          : "off (KJIT_PDL): elementwise ops launch plainly");
  row("early indices",
      j["pdl_early_indices"].get<bool>()
          ? "on (KJIT_PDL_EARLY_INDICES): RoPE positions and KV append page tables are read "
            "before the PDL wait at decode sizes"
          : "off (KJIT_PDL_EARLY_INDICES=1 turns it on; see docs/c-api.md, Launch mode)");
  if (j["env"].empty()) row("environment", "no KJIT_* variable set");
  bool first = true;
  for (const auto& [name, value] : j["env"].items()) {
    row(first ? "environment" : "", fmt::format("{}={}", name, value.get<std::string>()));
    first = false;
  }
}

json collect_ops() {
  json ops = json::array();
  for (const auto& def : ops::op_registry()) {
    json axes = json::array();
    for (const auto& a : def.axes) {
      axes.push_back({{"name", a.name},
                      {"type", a.values.empty() ? "int" : "enum"},
                      {"values", a.values},
                      {"required", a.required},
                      {"help", a.help}});
    }
    ops.push_back({{"name", def.name},
                   {"summary", def.summary},
                   {"axes", axes},
                   {"arch_families", def.arch_families},
                   {"catalog_size", def.catalog ? def.catalog().size() : 0}});
  }
  return ops;
}

void print_ops(const json& ops) {
  for (const auto& op : ops) {
    fmt::print("{}  {}\n", op["name"].get<std::string>(), op["summary"].get<std::string>());
    fmt::print("  {:<10} {}\n", "arch",
               fmt::join(op["arch_families"].get<std::vector<std::string>>(), " "));
    fmt::print("  {:<10} {} specializations\n", "catalog", op["catalog_size"].get<size_t>());
    for (const auto& a : op["axes"]) {
      auto values = a["values"].get<std::vector<std::string>>();
      std::string allowed = values.empty() ? "int" : fmt::format("{}", fmt::join(values, "|"));
      fmt::print("  {:<10} {:<16} {:<9} {}\n", a["name"].get<std::string>(), allowed,
                 a["required"] ? "required" : "optional", a["help"].get<std::string>());
    }
  }
}

}  // namespace

void add_info_commands(CLI::App& app, int& exit_code) {
  auto info_json = std::make_shared<bool>(false);
  CLI::App* info = app.add_subcommand("info", "Versions, driver, GPUs, arch list, paths, KJIT_*");
  info->footer(kExitCodesFooter);
  info->add_flag("--json", *info_json, "Print one JSON document on stdout");
  info->callback([info_json, &exit_code] {
    json j = collect_info();
    if (*info_json) {
      // replace: environment values need not be UTF-8.
      fmt::print("{}\n", j.dump(2, ' ', false, json::error_handler_t::replace));
    } else {
      print_info(j);
    }
    exit_code = kExitOk;
  });

  auto ops_json = std::make_shared<bool>(false);
  CLI::App* ops = app.add_subcommand("ops", "The registered ops, their axes and arch families");
  ops->footer(kExitCodesFooter);
  ops->add_flag("--json", *ops_json, "Print one JSON document on stdout");
  ops->callback([ops_json, &exit_code] {
    json list = collect_ops();
    if (*ops_json) {
      fmt::print("{}\n", json{{"ops", list}}.dump(2));
    } else {
      print_ops(list);
    }
    exit_code = kExitOk;
  });
}

}  // namespace kjit::cli
