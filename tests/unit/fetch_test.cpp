// Artifact fetching without a GPU: `kjit-cli aot fetch` from a file:// repository and from a
// loopback HTTP server (python3 -m http.server style, started here), auto-fetch on first use,
// checksum rejection, offline failures, bounded parallelism.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "aot/curl_loader.hpp"
#include "aot/fetch.hpp"
#include "aot/package.hpp"
#include "runtime/jit_core.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/registry.hpp"
#include "support/shell.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

using namespace kjit;
using kjit::test::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

Run cli(const std::string& env, const std::string& args) {
  TempDir tmp;
  fs::path err = tmp.path() / "stderr";
  std::string cmd = env + " '" KJIT_CLI_PATH "' " + args + " 2>'" + err.string() + "'";
  Run r;
  const kjit::test::ShellRun sh = kjit::test::run_shell(cmd);
  REQUIRE(sh.code != -1);
  r.code = sh.code;
  r.out = sh.out;
  r.err = util::read_file(err).value_or("");
  return r;
}

// The repository: one op's catalog for sm_80 + sm_90a (28 entries, 56 files), built once per
// process from a JIT cache shared with aot_test.
const fs::path& repository() {
  static TempDir dir;
  static fs::path pkg = [] {
    fs::path p = dir.path() / "repo";
    std::string cache = (fs::path(KJIT_CLI_PATH).parent_path() / "aot-test-cache").string();
    Run r =
        cli("KJIT_CACHE_DIR='" + cache + "'", "aot build --arch \"8.0 9.0a\" --out '" + p.string() +
                                                  "' --ops append_paged_kv -j 2 --json");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return p;
  }();
  return pkg;
}

// Downloads need libcurl, which kjit loads at run time and hosts may lack (the H200 machine,
// say). Tests that download say so and stop where it is missing; everywhere CI runs it is present.
bool curl_missing() {
  try {
    aot::curl();
    return false;
  } catch (const Error& e) {
    WARN("skipped: libcurl cannot be loaded here: " << e.what());
    return true;
  }
}

size_t repository_entries() {
  auto text = util::read_file(repository() / "index.json");
  REQUIRE(text);
  return json::parse(*text).at("entries").size();
}

// Environment for a fetch into `art` with nothing else configured.
std::string fetch_env(const fs::path& art, const std::string& extra = "") {
  return "KJIT_ARTIFACT_DIR='" + art.string() + "' KJIT_AOT_DIR= KJIT_CACHE_DIR='" +
         (art.parent_path() / "cache").string() + "' KJIT_ARTIFACT_URL= " + extra;
}

const char* kFetchArgs = "aot fetch --arch \"sm_80 sm_90a\" --ops append_paged_kv --json";

std::string file_url(const fs::path& p) {
  return "file://" + p.string();
}

size_t count_files(const fs::path& dir, const std::string& needle) {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec)) {
    n += e.path().filename().string().find(needle) != std::string::npos;
  }
  return n;
}

jit::Settings settings_for(const TempDir& dir) {
  jit::Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  s.artifact_dir = dir.path() / "artifacts";
  s.disable_jit = true;
  s.artifact_retries = 0;
  return s;
}

// A loopback HTTP server over `root` that records the most requests it ever had in flight. Each
// request holds for 20 ms before it is answered, so parallel clients really overlap; the count
// drops before the response is sent, so it never exceeds what the client has in flight.
class HttpServer {
 public:
  static bool python_available() {
    return std::system("python3 -c 'import http.server' >/dev/null 2>&1") == 0;
  }

  HttpServer(const fs::path& root, const TempDir& work) : stats_(work.path() / "stats") {
    fs::path script = work.path() / "server.py";
    fs::path port_file = work.path() / "port";
    util::write_file_atomic(script, R"(import http.server, os, sys, threading, time
root, port_file, stats_file = sys.argv[1:4]
lock = threading.Lock()
state = {'active': 0, 'peak': 0, 'served': 0}

def publish(path, text):
    with open(path + '.tmp', 'w') as f:
        f.write(text)
    os.replace(path + '.tmp', path)

class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=root, **kwargs)
    def log_message(self, *args):
        pass
    def do_GET(self):
        with lock:
            state['active'] += 1
            state['peak'] = max(state['peak'], state['active'])
        time.sleep(0.02)
        with lock:
            state['active'] -= 1
            state['served'] += 1
            publish(stats_file, '%d %d\n' % (state['peak'], state['served']))
        super().do_GET()

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

server = Server(('127.0.0.1', 0), Handler)
publish(port_file, str(server.server_address[1]))
server.serve_forever()
)");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("python3", "python3", script.c_str(), root.c_str(), port_file.c_str(),
               stats_.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    REQUIRE(pid_ > 0);
    for (int i = 0; i < 200 && !fs::exists(port_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    auto port = util::read_file(port_file);
    REQUIRE(port);
    url_ = "http://127.0.0.1:" + *port;
  }
  ~HttpServer() { stop(); }

  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  const std::string& url() const { return url_; }
  // {most requests in flight at once, requests served}
  std::pair<int, int> stats() const {
    int peak = 0, served = 0;
    if (auto s = util::read_file(stats_)) std::sscanf(s->c_str(), "%d %d", &peak, &served);
    return {peak, served};
  }

 private:
  fs::path stats_;
  pid_t pid_ = -1;
  std::string url_;
};

}  // namespace

TEST_CASE("fetch: a file:// repository fills the artifact dir, 4 transfers at a time", "[fetch]") {
  if (curl_missing()) return;
  TempDir dir;
  fs::path art = dir.path() / "artifacts";
  const size_t n = repository_entries();
  REQUIRE(n >= 8);
  Run r =
      cli(fetch_env(art), std::string(kFetchArgs) + " -j 4 --url '" + file_url(repository()) + "'");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  json j = json::parse(r.out);
  CHECK(j.at("wanted") == n);
  CHECK(j.at("downloaded") == n);
  CHECK(j.at("failures").empty());
  CHECK(j.at("peak_transfers").get<int>() >= 1);
  CHECK(j.at("peak_transfers").get<int>() <= 4);
  CHECK(count_files(art, ".cubin") == n);
  CHECK(count_files(art, ".tmp.") == 0);
  CHECK(cli("", "aot verify '" + art.string() + "'").code == 0);

  // Everything is there now: nothing is downloaded again.
  Run again =
      cli(fetch_env(art), std::string(kFetchArgs) + " --url '" + file_url(repository()) + "'");
  REQUIRE(again.code == 0);
  CHECK(json::parse(again.out).at("downloaded") == 0);
  CHECK(json::parse(again.out).at("present") == n);

  // And the library loads from the artifact dir with JIT disabled.
  jit::JitCore core(settings_for(dir));
  jit::Spec spec =
      ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kBF16, 128, 16));
  jit::Artifact a = core.build(spec, jit::ArchTarget{9, 0, true});
  CHECK(a.source == jit::ArtifactSource::kPackage);
  CHECK(a.cubin_path.parent_path() == art / "sm_90a");
  CHECK(core.stats().compiles == 0);
}

TEST_CASE("fetch: a corrupted file in the repository is rejected and nothing of it published",
          "[fetch]") {
  if (curl_missing()) return;
  TempDir dir;
  fs::path repo = dir.path() / "repo";
  fs::copy(repository(), repo, fs::copy_options::recursive);
  json idx = json::parse(*util::read_file(repo / "index.json"));
  const json bad = idx.at("entries").at(5);
  fs::path cubin = repo / bad.at("file").get<std::string>();
  std::string bytes = *util::read_file(cubin);
  bytes[bytes.size() / 2] ^= 0x01;
  util::write_file_atomic(cubin, bytes);

  fs::path art = dir.path() / "artifacts";
  Run r = cli(fetch_env(art, "KJIT_ARTIFACT_RETRIES=1"),
              std::string(kFetchArgs) + " --url '" + file_url(repo) + "'");
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  json j = json::parse(r.out);
  REQUIRE(j.at("failures").size() == 1);
  std::string why = j.at("failures")[0].at("error");
  CHECK(why.find("SHA-256") != std::string::npos);
  CHECK(why.find("gave up after 2 attempts") != std::string::npos);
  CHECK(j.at("downloaded") == repository_entries() - 1);
  // Neither file of the rejected entry, no temp file, and the index does not list it.
  CHECK_FALSE(fs::exists(art / bad.at("file").get<std::string>()));
  CHECK_FALSE(fs::exists(art / bad.at("metadata").get<std::string>()));
  CHECK(count_files(art, ".tmp.") == 0);
  auto local = aot::PackageIndex::from_json(*util::read_file(art / "index.json"));
  CHECK(local.find(bad.at("uri"), bad.at("arch")) == nullptr);
  CHECK(local.entries.size() == repository_entries() - 1);
  CHECK(cli("", "aot verify '" + art.string() + "'").code == 0);
}

TEST_CASE("fetch: a configured local package is preferred to any download", "[fetch]") {
  TempDir dir;
  fs::path art = dir.path() / "artifacts";
  Run r = cli(fetch_env(art) + " KJIT_AOT_DIR='" + repository().string() + "'",
              std::string(kFetchArgs) + " --url http://127.0.0.1:9/nothing-listens-here");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(json::parse(r.out).at("present") == repository_entries());
  CHECK(json::parse(r.out).at("downloaded") == 0);
  CHECK_FALSE(fs::exists(art));
}

TEST_CASE("fetch: offline or without a URL a missing artifact is a hard failure", "[fetch]") {
  TempDir dir;
  fs::path art = dir.path() / "artifacts";
  Run off = cli(fetch_env(art, "KJIT_OFFLINE=1"),
                std::string(kFetchArgs) + " --url '" + file_url(repository()) + "'");
  CHECK(off.code == 1);
  CHECK(off.err.find("KJIT_OFFLINE=1") != std::string::npos);
  CHECK(off.err.find("append_paged_kv_") != std::string::npos);
  CHECK(off.err.find(art.string()) != std::string::npos);
  CHECK_FALSE(fs::exists(art / "index.json"));
  Run nourl = cli(fetch_env(art), kFetchArgs);
  CHECK(nourl.code == 1);
  CHECK(nourl.err.find("KJIT_ARTIFACT_URL") != std::string::npos);

  // The library: JIT disabled, auto-fetch on but offline.
  jit::Settings s = settings_for(dir);
  s.artifact_url = file_url(repository());
  s.artifact_auto_fetch = true;
  s.offline = true;
  jit::JitCore core(s);
  jit::Spec spec =
      ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kBF16, 128, 16));
  try {
    core.build(spec, jit::ArchTarget{9, 0, true});
    FAIL("built offline without a package");
  } catch (const Error& e) {
    CHECK(e.status() == KJIT_ERROR_JIT_DISABLED);
    std::string m = e.what();
    CHECK(m.find(spec.uri) != std::string::npos);
    CHECK(m.find("KJIT_OFFLINE=1") != std::string::npos);
    CHECK(m.find(art.string()) != std::string::npos);
  }
}

TEST_CASE("fetch: auto-fetch downloads the one cubin a first use needs", "[fetch]") {
  if (curl_missing()) return;
  TempDir dir;
  jit::Settings s = settings_for(dir);
  s.artifact_url = file_url(repository());
  s.artifact_auto_fetch = true;
  jit::JitCore core(s);
  jit::Spec a = ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kBF16, 128, 16));
  jit::Spec b = ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kF16, 64, 16));
  CHECK(core.build(a, jit::ArchTarget{9, 0, true}).source == jit::ArtifactSource::kPackage);
  CHECK(count_files(s.artifact_dir, ".cubin") == 1);
  CHECK(core.build(b, jit::ArchTarget{8, 0, false}).source == jit::ArtifactSource::kPackage);
  CHECK(count_files(s.artifact_dir, ".cubin") == 2);
  CHECK(core.stats().compiles == 0);
  auto local = aot::PackageIndex::from_json(*util::read_file(s.artifact_dir / "index.json"));
  CHECK(local.entries.size() == 2);
  CHECK(local.find(b.uri, "sm_80") != nullptr);
  // A spec the repository lacks still fails clearly with JIT disabled.
  jit::Spec missing =
      ops::append_paged_kv_spec(ops::select_append_paged_kv(ops::DType::kBF16, 48, 16));
  try {
    core.build(missing, jit::ArchTarget{9, 0, true});
    FAIL("built a spec nobody has");
  } catch (const Error& e) {
    CHECK(e.status() == KJIT_ERROR_JIT_DISABLED);
    CHECK(std::string(e.what()).find("has no entry for " + missing.uri) != std::string::npos);
  }
}

TEST_CASE("fetch: http:// from a loopback server, 4 requests at a time at most", "[fetch]") {
  if (curl_missing()) return;
  if (!HttpServer::python_available()) {
    WARN("skipped: python3 with http.server is not available to serve the repository");
    return;
  }
  TempDir dir;
  fs::path repo = dir.path() / "repo";
  fs::copy(repository(), repo, fs::copy_options::recursive);
  HttpServer server(repo, dir);
  const size_t n = repository_entries();

  fs::path art = dir.path() / "artifacts";
  Run r = cli(fetch_env(art), std::string(kFetchArgs) + " -j 4 --url " + server.url());
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  json j = json::parse(r.out);
  CHECK(j.at("downloaded") == n);
  CHECK(j.at("peak_transfers").get<int>() <= 4);
  auto [peak, served] = server.stats();
  CHECK(served == static_cast<int>(2 * n + 1));  // every cubin and sidecar, and the index
  CHECK(served >= 50);
  CHECK(peak <= 4);
  CHECK(peak >= 2);  // the downloads did overlap
  CHECK(cli("", "aot verify '" + art.string() + "'").code == 0);

  // A corrupted file on the server: rejected, nothing of it published.
  json idx = json::parse(*util::read_file(repo / "index.json"));
  const json bad = idx.at("entries").at(0);
  std::string bytes = *util::read_file(repo / bad.at("file").get<std::string>());
  bytes[bytes.size() - 1] ^= 0x40;
  util::write_file_atomic(repo / bad.at("file").get<std::string>(), bytes);
  fs::path art2 = dir.path() / "artifacts2";
  Run c = cli(fetch_env(art2, "KJIT_ARTIFACT_RETRIES=0"),
              std::string(kFetchArgs) + " --url " + server.url());
  CHECK(c.code == 1);
  REQUIRE(json::parse(c.out).at("failures").size() == 1);
  CHECK(json::parse(c.out).at("failures")[0].at("error").get<std::string>().find("SHA-256") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(art2 / bad.at("file").get<std::string>()));
  CHECK_FALSE(fs::exists(art2 / bad.at("metadata").get<std::string>()));

  // Server down: retried, then a clear failure naming the URL.
  server.stop();
  fs::path art3 = dir.path() / "artifacts3";
  auto t0 = std::chrono::steady_clock::now();
  Run down = cli(fetch_env(art3, "KJIT_ARTIFACT_RETRIES=2"),
                 std::string(kFetchArgs) + " --url " + server.url());
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  CHECK(down.code == 1);
  CHECK(down.err.find(server.url() + "/index.json") != std::string::npos);
  CHECK(down.err.find("gave up after 3 attempts") != std::string::npos);
  CHECK(dt.count() >= 0.7);  // backoff 250 ms + 500 ms between the attempts
  CHECK_FALSE(fs::exists(art3 / "index.json"));
}

TEST_CASE("fetch: bad URLs and a missing libcurl are clear errors", "[fetch]") {
  TempDir dir;
  fs::path art = dir.path() / "artifacts";
  Run ftp = cli(fetch_env(art), std::string(kFetchArgs) + " --url ftp://example.com/pkg");
  CHECK(ftp.code == 1);
  CHECK(ftp.err.find("must start with http://, https:// or file://") != std::string::npos);
  Run nocurl = cli(fetch_env(art, "KJIT_CURL_LIBRARY=/nonexistent/libcurl.so.4"),
                   std::string(kFetchArgs) + " --url '" + file_url(repository()) + "'");
  CHECK(nocurl.code == 1);
  CHECK(nocurl.err.find("needs libcurl") != std::string::npos);
  CHECK(nocurl.err.find("/nonexistent/libcurl.so.4") != std::string::npos);
  if (curl_missing()) return;
  Run missing = cli(fetch_env(art), std::string(kFetchArgs) + " --url '" +
                                        file_url(dir.path() / "no-such-repo") + "'");
  CHECK(missing.code == 1);
  CHECK(missing.err.find("index.json") != std::string::npos);
}

TEST_CASE("fetch: processes fetching into one artifact dir download each file once", "[fetch]") {
  if (curl_missing()) return;
  TempDir dir;
  fs::path art = dir.path() / "artifacts";
  const int procs = 3;
  std::string script = "cd '" + dir.path().string() + "' && for i in $(seq 1 " +
                       std::to_string(procs) + "); do " + fetch_env(art) + " '" KJIT_CLI_PATH "' " +
                       kFetchArgs + " -j 2 --url '" + file_url(repository()) +
                       "' > out$i.json 2> err$i.txt & done; wait";
  REQUIRE(std::system(script.c_str()) == 0);
  size_t downloaded = 0;
  for (int i = 1; i <= procs; ++i) {
    auto text = util::read_file(dir.path() / ("out" + std::to_string(i) + ".json"));
    REQUIRE(text);
    INFO("process " << i << ": " << *text);
    json j = json::parse(*text);
    CHECK(j.at("failures").empty());
    CHECK(j.at("present").get<size_t>() + j.at("downloaded").get<size_t>() +
              j.at("already_downloaded").get<size_t>() ==
          repository_entries());
    downloaded += j.at("downloaded").get<size_t>();
  }
  CHECK(downloaded == repository_entries());  // the per-entry lock: nobody downloads twice
  auto local = aot::PackageIndex::from_json(*util::read_file(art / "index.json"));
  CHECK(local.entries.size() == repository_entries());  // every merge kept the others' entries
  CHECK(cli("", "aot verify '" + art.string() + "'").code == 0);
}

TEST_CASE("fetch: KJIT_ARTIFACT_SKIP_CHECKSUM is a logged debugging aid", "[fetch]") {
  if (curl_missing()) return;
  TempDir dir;
  fs::path repo = dir.path() / "repo";
  fs::copy(repository(), repo, fs::copy_options::recursive);
  json idx = json::parse(*util::read_file(repo / "index.json"));
  idx["entries"][2]["sha256"] = std::string(64, '0');  // a stale index, intact files
  util::write_file_atomic(repo / "index.json", idx.dump(2));
  const std::string args = std::string(kFetchArgs) + " --url '" + file_url(repo) + "'";

  Run strict = cli(fetch_env(dir.path() / "a", "KJIT_ARTIFACT_RETRIES=0"), args);
  CHECK(strict.code == 1);
  REQUIRE(json::parse(strict.out).at("failures").size() == 1);

  fs::path art = dir.path() / "b";
  Run skip = cli(fetch_env(art, "KJIT_ARTIFACT_SKIP_CHECKSUM=1"), args);
  INFO(skip.out << skip.err);
  CHECK(skip.code == 0);
  CHECK(skip.err.find("warning: KJIT_ARTIFACT_SKIP_CHECKSUM=1") != std::string::npos);
  CHECK(json::parse(skip.out).at("downloaded") == repository_entries());
  // The stale checksum came along: a normal load refuses that entry, a skipping one takes it.
  const json e = idx["entries"][2];
  auto target = *jit::ArchTarget::parse(e.at("arch").get<std::string>());
  jit::Spec spec;
  for (const auto& row : ops::find_op("append_paged_kv")->catalog()) {
    jit::Spec s = ops::find_op("append_paged_kv")->make_spec(row);
    if (s.uri == e.at("uri")) spec = s;
  }
  REQUIRE(!spec.uri.empty());
  jit::Settings s = settings_for(dir);
  s.artifact_dir = art;
  {
    jit::JitCore core(s);
    CHECK_THROWS_AS(core.build(spec, target), Error);
  }
  s.artifact_skip_checksum = true;
  jit::JitCore core(s);
  CHECK(core.build(spec, target).source == jit::ArtifactSource::kPackage);
}
