// kjit_reliability_worker: one process of a reliability test. Each run is a fresh process with
// the settings of its environment (KJIT_CACHE_DIR, KJIT_DISABLE_JIT, ...), as a server's first
// use of a kernel would be.
//
//   build --spec S [--spec S2 ...] [--arch sm_90] [--wait-stdin] [--drop-root] [--fsize BYTES]
//       JitCore::build of each spec in order, in one JitCore; prints one JSON line: ok, stats,
//       each artifact's source and cubin hash (the first one's also at the top level), error.
//   exec-as-nobody PROGRAM ARGS...
//       --drop-root, then execv: runs a program (kjit-cli) where file permissions apply.
//   republish --spec S
//       compiles S into memory, then publishes two valid artifacts of S (the cubin, and the
//       cubin padded with 16 zero bytes under matching metadata) in turn, forever; prints
//       "ready" after the first publish. A kill lands anywhere inside DiskCache::publish.
//   hold-lock PATH
//       takes the entry lock at PATH, prints "locked", then sleeps until killed.
//
// --wait-stdin: block until stdin reaches EOF, so a test can start many workers at once.
// --drop-root: as root, become nobody first, so file permissions apply (tests run as root in CI).
// --fsize: RLIMIT_FSIZE with SIGXFSZ ignored: writes past BYTES fail with EFBIG (a full disk).
#include <grp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/jit_core.hpp"
#include "reliability/support.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/hash.hpp"

using namespace kjit;

namespace {

int usage() {
  std::fprintf(stderr, "usage: kjit_reliability_worker build|republish|hold-lock ...\n");
  return 2;
}

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

bool drop_root() {
  if (::geteuid() != 0) return true;
  const uid_t nobody = 65534;
  return ::setgroups(0, nullptr) == 0 && ::setresgid(nobody, nobody, nobody) == 0 &&
         ::setresuid(nobody, nobody, nobody) == 0;
}

int run_build(const std::vector<jit::Spec>& specs, const jit::ArchTarget& target) {
  nlohmann::json j;
  j["artifacts"] = nlohmann::json::array();
  bool consistent = true;
  try {
    jit::JitCore core(jit::Settings::from_env());
    for (const auto& spec : specs) {
      jit::Artifact a = core.build(spec, target);
      nlohmann::json r;
      r["uri"] = spec.uri;
      r["source"] = a.source == jit::ArtifactSource::kDisk       ? "disk"
                    : a.source == jit::ArtifactSource::kCompiled ? "compiled"
                                                                 : "package";
      r["cubin_xxh3"] = util::xxh3_64_hex(a.cubin);
      r["cubin_size"] = a.cubin.size();
      r["key"] = a.meta.key;
      // What a loader would hand to cuModuleLoadData must be exactly what the metadata says.
      bool ok = a.meta.cubin_size == a.cubin.size() &&
                a.meta.cubin_hash == util::xxh3_64_hex(a.cubin) && a.cubin.size() > 4 &&
                a.cubin.compare(0, 4,
                                "\x7f"
                                "ELF") == 0 &&
                !a.meta.lowered_names.empty();
      if (!ok) j["error"] = spec.uri + ": artifact does not match its metadata";
      consistent = consistent && ok;
      j["artifacts"].push_back(r);
    }
    // The first artifact's fields at the top level: most runs build one spec.
    for (const char* k : {"uri", "source", "cubin_xxh3", "cubin_size", "key"}) {
      j[k] = j["artifacts"][0][k];
    }
    const jit::JitStats& st = core.stats();
    j["compiles"] = st.compiles.load();
    j["disk_hits"] = st.disk_hits.load();
    j["invalid_entries"] = st.invalid_entries.load();
    j["ok"] = consistent;
    print_json(j);
    return consistent ? 0 : 1;
  } catch (const Error& e) {
    j["ok"] = false;
    j["status"] = static_cast<int>(e.status());
    j["error"] = e.what();
  } catch (const std::exception& e) {
    j["ok"] = false;
    j["status"] = static_cast<int>(KJIT_ERROR_INTERNAL);
    j["error"] = std::string("unexpected exception: ") + e.what();
  }
  print_json(j);
  return 1;
}

int run_republish(const jit::Spec& spec, const jit::ArchTarget& target) {
  jit::Settings mem = jit::Settings::from_env();
  mem.disk_cache = false;  // compile into memory only; this process publishes by hand
  jit::JitCore core(mem);
  jit::Artifact a = core.build(spec, target);
  jit::Metadata padded_meta = a.meta;
  std::string padded = a.cubin + std::string(16, '\0');
  padded_meta.cubin_size = padded.size();
  padded_meta.cubin_hash = util::xxh3_64_hex(padded);
  jit::DiskCache cache(jit::Settings::from_env().cache_dir);
  jit::EntryPaths paths = cache.paths(target.sm(), spec.uri, a.meta.key);
  cache.publish(paths, a.meta, a.cubin);
  std::printf("ready\n");
  std::fflush(stdout);
  for (unsigned i = 1;; ++i) {
    if (i % 2) {
      cache.publish(paths, padded_meta, padded);
    } else {
      cache.publish(paths, a.meta, a.cubin);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  if (cmd == "exec-as-nobody" && argc >= 3) {
    if (!drop_root()) {
      std::perror("drop root");
      return 3;
    }
    ::execv(argv[2], argv + 2);
    std::perror("execv");
    return 127;
  }
  if (cmd == "hold-lock" && argc == 3) {
    util::FileLock lock(argv[2]);
    std::printf("locked\n");
    std::fflush(stdout);
    for (;;) ::pause();
  }
  std::vector<std::string> spec_texts;
  std::string arch = "sm_90";
  bool wait_stdin = false, as_nobody = false;
  long long fsize = -1;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--spec" && i + 1 < argc) {
      spec_texts.push_back(argv[++i]);
    } else if (a == "--arch" && i + 1 < argc) {
      arch = argv[++i];
    } else if (a == "--fsize" && i + 1 < argc) {
      fsize = std::atoll(argv[++i]);
    } else if (a == "--wait-stdin") {
      wait_stdin = true;
    } else if (a == "--drop-root") {
      as_nobody = true;
    } else {
      return usage();
    }
  }
  auto target = jit::ArchTarget::parse(arch);
  if (spec_texts.empty() || !target) return usage();
  if (as_nobody && !drop_root()) {
    std::perror("drop root");
    return 3;
  }
  if (fsize >= 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{static_cast<rlim_t>(fsize), static_cast<rlim_t>(fsize)};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) {
      std::perror("setrlimit");
      return 3;
    }
  }
  std::vector<jit::Spec> specs;
  try {
    for (const auto& t : spec_texts) specs.push_back(rel::parse_spec(t));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (wait_stdin) {
    char c;
    while (::read(0, &c, 1) > 0) {
    }
  }
  if (cmd == "build") return run_build(specs, *target);
  if (cmd == "republish") return run_republish(specs.front(), *target);
  return usage();
}
