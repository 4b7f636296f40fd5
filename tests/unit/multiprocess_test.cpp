// Concurrent first use from many processes: exactly one compiles, all succeed.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "cache/disk_cache.hpp"
#include "jit/compiler.hpp"
#include "runtime/jit_core.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

using namespace kjit;

TEST_CASE("multi-process: 8 processes compile one spec into an empty cache once", "[process]") {
  test::TempDir dir;
  const int n = 8;
  std::string script = "cd '" + dir.path().string() + "' && for i in $(seq 1 " + std::to_string(n) +
                       "); do KJIT_CACHE_DIR='" + (dir.path() / "cache").string() +
                       "' '" KJIT_CLI_PATH
                       "' compile rmsnorm --set dtype=fp16 --set hidden=3000 --arch sm_90 "
                       "--json > out$i.json 2> err$i.txt & done; wait";
  REQUIRE(std::system(script.c_str()) == 0);
  int compiled = 0, cached = 0;
  for (int i = 1; i <= n; ++i) {
    auto text = util::read_file(dir.path() / ("out" + std::to_string(i) + ".json"));
    REQUIRE(text);
    INFO("process " << i << " wrote: " << *text);
    auto j = nlohmann::json::parse(*text);
    CHECK(j.at("failed").get<int>() == 0);
    compiled += j.at("compiled").get<int>();
    cached += j.at("cached").get<int>();
  }
  CHECK(compiled == 1);
  CHECK(cached == n - 1);
  auto rows = jit::DiskCache(dir.path() / "cache").list(jit::kjit_version(), jit::nvrtc_version());
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].problem.empty());
}
