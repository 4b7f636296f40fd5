#include "jit/compiler.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "jit/nvrtc.hpp"
#include "util/error.hpp"
#include "util/glob.hpp"
#include "util/log.hpp"

namespace kjit::jit {

std::vector<std::string> semantic_options(const Spec& spec, const ArchTarget& target,
                                          const Settings& settings) {
  std::vector<std::string> opts = {
      "-std=c++17",
      "--gpu-architecture=" + target.sm(),
      "-default-device",  // kernels/ code is device-only; saves __device__ noise
      "-DNDEBUG",
  };
  if (settings.debug) opts.push_back("-G");
  if (settings.lineinfo) opts.push_back("-lineinfo");
  for (const auto& o : spec.extra_options) opts.push_back(o);
  return opts;
}

namespace {

void check_nvrtc(nvrtcResult r, const char* what, const std::string& uri) {
  if (r != NVRTC_SUCCESS) {
    fail(KJIT_ERROR_COMPILE, "{}: {} failed: {}", uri, what, nvrtc().nvrtcGetErrorString(r));
  }
}

struct Program {
  nvrtcProgram prog = nullptr;
  ~Program() {
    if (prog) nvrtc().nvrtcDestroyProgram(&prog);
  }
};

}  // namespace

void check_nvrtc_target(const ArchTarget& target) {
  const std::vector<int> archs = nvrtc_supported_archs();
  if (archs.empty() || std::find(archs.begin(), archs.end(), target.cc()) != archs.end()) return;
  std::string list;
  for (int a : archs) list += fmt::format(" sm_{}", a);
  fail(KJIT_ERROR_UNSUPPORTED, "NVRTC {} cannot compile for {} (it targets:{})", nvrtc_version(),
       target.sm(), list);
}

std::vector<std::string> ptxas_advisories(const std::string& log) {
  std::vector<std::string> out;
  for (std::string line : util::split_list(log, '\n')) {
    // ptxas' C75xx notes: "Potential Performance Loss: ..." and the waits it inserted.
    const size_t note = line.find(": (C75");
    if (line.find("ptxas") == std::string::npos || note == std::string::npos) continue;
    if (line.back() == '\r') line.pop_back();
    out.push_back(line.substr(note + 2));
  }
  return out;
}

CompileOutput compile_cubin(const Spec& spec, const std::vector<SourceFile>& sources,
                            const ArchTarget& target, const Settings& settings) {
  const Nvrtc& nv = nvrtc();  // first: without NVRTC nothing below matters
  check_nvrtc_target(target);
  auto cuda_home = find_cuda_home();
  std::vector<std::string> opts = semantic_options(spec, target, settings);
  opts.push_back("-I" + (cuda_home / "include").string());
  opts.push_back("-I" + (cuda_home / "include" / "cccl").string());
  // kjit keeps its own cache; NVRTC's codegen cache (12.9+) would only blur compile timings.
  opts.push_back("--no-cache");
  // Automatic PCH (opt-in, KJIT_JIT_PCH=1) is off by default: it makes a process's first compile
  // ~30 ms slower (it writes the header PCH), saves 0-7% over a batch of hundreds, and leaves
  // ~10 MB per compiled specialization in $TMPDIR/__nvrtc_auto_pch_<pid>_*, which NVRTC removes
  // only in its exit handler: a killed process, or a forked worker that _exits, leaks them all.
  // It caches headers by name for the life of the process: safe for the embedded kernels, which
  // cannot change, but not for KJIT_KERNEL_DIR, whose files may be edited between two compiles.
  if (settings.use_pch && !kernel_dir_override()) opts.push_back("-pch");

  std::vector<const char*> header_data, header_names;
  for (const auto& s : sources) {
    header_data.push_back(s.content.c_str());
    header_names.push_back(s.name.c_str());
  }
  std::vector<const char*> opt_ptrs;
  for (const auto& o : opts) opt_ptrs.push_back(o.c_str());

  // NVRTC runs one front end at a time per process anyway; the lock makes that explicit and
  // keeps the PCH heap consistent.
  static std::mutex nvrtc_mutex;
  std::lock_guard<std::mutex> lock(nvrtc_mutex);
  auto t0 = std::chrono::steady_clock::now();

  Program p;
  std::string main_name = spec.uri + ".cu";
  const std::string main = main_source(spec);
  nvrtcResult cr = NVRTC_SUCCESS;
  CompileOutput out;
  for (;;) {
    if (p.prog) nv.nvrtcDestroyProgram(&p.prog);
    check_nvrtc(nv.nvrtcCreateProgram(&p.prog, main.c_str(), main_name.c_str(),
                                      static_cast<int>(header_data.size()), header_data.data(),
                                      header_names.data()),
                "nvrtcCreateProgram", spec.uri);
    for (const auto& e : spec.entry_names) {
      check_nvrtc(nv.nvrtcAddNameExpression(p.prog, e.c_str()), "nvrtcAddNameExpression", spec.uri);
    }
    cr = nv.nvrtcCompileProgram(p.prog, static_cast<int>(opt_ptrs.size()), opt_ptrs.data());
    out.log.clear();
    size_t log_size = 0;
    nv.nvrtcGetProgramLogSize(p.prog, &log_size);
    if (log_size > 1) {
      out.log.resize(log_size);
      nv.nvrtcGetProgramLog(p.prog, out.log.data());
      out.log.resize(log_size - 1);
    }
    // NVRTC keeps its precompiled-header heap in a memory-mapped temp file: with the temp dir
    // full (or RLIMIT_FSIZE) every -pch compile fails this way, although compiling needs no disk.
    // -pch does not change the code, so compile again without it.
    auto pch = std::find(opts.begin(), opts.end(), "-pch");
    if (cr == NVRTC_SUCCESS || pch == opts.end() ||
        out.log.find("unable to obtain mapped memory") == std::string::npos) {
      break;
    }
    util::log(
        "warning: NVRTC could not map memory for precompiled headers (temp dir full?); "
        "compiling {} without -pch",
        spec.uri);
    opts.erase(pch);
    opt_ptrs.clear();
    for (const auto& o : opts) opt_ptrs.push_back(o.c_str());
  }
  if (cr != NVRTC_SUCCESS) {
    std::string opt_text;
    for (const auto& o : opts) opt_text += " " + o;
    fail(KJIT_ERROR_COMPILE, "NVRTC failed to compile {} for {}: {}\noptions:{}\n{}", spec.uri,
         target.sm(), nv.nvrtcGetErrorString(cr), opt_text, out.log);
  }
  size_t cubin_size = 0;
  check_nvrtc(nv.nvrtcGetCUBINSize(p.prog, &cubin_size), "nvrtcGetCUBINSize", spec.uri);
  out.cubin.resize(cubin_size);
  check_nvrtc(nv.nvrtcGetCUBIN(p.prog, out.cubin.data()), "nvrtcGetCUBIN", spec.uri);
  for (const auto& e : spec.entry_names) {
    const char* lowered = nullptr;
    check_nvrtc(nv.nvrtcGetLoweredName(p.prog, e.c_str(), &lowered), "nvrtcGetLoweredName",
                spec.uri);
    out.lowered_names.emplace_back(e, lowered);
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kjit::jit
