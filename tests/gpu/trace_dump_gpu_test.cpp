// KJIT_TRACE_DUMP with real launches: each op call that reaches a kernel records its definition
// and var-axis values (through the hook in the op, not a direct call), repeated calls add
// nothing, the outputs are still right, and the recorded lines are `bench --from` input.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/definitions.hpp"
#include "ops/trace_dump.hpp"
#include "reference/half.hpp"
#include "reference/norm_ref.hpp"
#include "support/gpu.hpp"
#include "support/temp_dir.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
namespace trace = kjit::ops::trace;
using namespace kjit::test;
namespace ref = kjit::ref;

namespace {

std::vector<nlohmann::json> lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("trace dump gpu: launched ops record their definitions once", "[gpu][trace]") {
  TempDir dir;
  trace::set_dir_for_testing(dir.path().string());
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  const int64_t hidden = 4096, d = 1024;

  // rmsnorm at 3 rows twice and at 5 rows once: two workload lines, right outputs.
  for (int64_t rows : {3, 3, 5}) {
    const size_t n = static_cast<size_t>(rows * hidden);
    std::vector<unsigned char> xh(n * 2), wh(hidden * 2), yh(n * 2);
    std::vector<double> xd(n), wd(hidden);
    for (size_t i = 0; i < n; ++i) {
      ref::store_elem(xh.data(), i, dist(rng), "bf16");
      xd[i] = ref::load_elem(xh.data(), i, "bf16");
    }
    for (int64_t i = 0; i < hidden; ++i) {
      ref::store_elem(wh.data(), i, dist(rng), "bf16");
      wd[i] = ref::load_elem(wh.data(), i, "bf16");
    }
    DeviceBuffer x(xh.size()), w(wh.size()), y(yh.size());
    x.upload(xh.data(), xh.size());
    w.upload(wh.data(), wh.size());
    y.fill(0xFF);
    auto xt = make_tensor(x.get(), {rows, hidden}, dl_dtype("bf16"));
    auto wt = make_tensor(w.get(), {hidden}, dl_dtype("bf16"));
    auto yt = make_tensor(y.get(), {rows, hidden}, dl_dtype("bf16"));
    REQUIRE(kjit_rmsnorm(xt.get(), wt.get(), yt.get(), 1e-6f, nullptr) == KJIT_SUCCESS);
    device_synchronize();
    y.download(yh.data(), yh.size());
    const auto want = ref::rmsnorm(xd, wd, rows, hidden, 1e-6);
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(ref::load_elem(yh.data(), i, "bf16") ==
              Approx(want[i]).margin(1e-6).epsilon(3 * ref::unit_roundoff("bf16")));
    }
  }
  // silu_and_mul at 2 rows.
  {
    DeviceBuffer x(2 * 2 * d * 2), y(2 * d * 2);
    x.fill(0);
    auto xt = make_tensor(x.get(), {2, 2 * d}, dl_dtype("bf16"));
    auto yt = make_tensor(y.get(), {2, d}, dl_dtype("bf16"));
    REQUIRE(kjit_silu_and_mul(xt.get(), yt.get(), nullptr) == KJIT_SUCCESS);
    device_synchronize();
  }
  trace::set_dir_for_testing("");

  const fs::path defs = dir.path() / "definitions", work = dir.path() / "workloads";
  const auto def = kjit::util::read_file(defs / "rmsnorm_h4096.json");
  REQUIRE(def.has_value());
  CHECK(*def == kjit::ops::definition_json(
                    kjit::ops::rmsnorm_definition(kjit::ops::DType::kBF16, hidden, false)));
  const auto w = lines(work / "rmsnorm_h4096.jsonl");
  REQUIRE(w.size() == 2);
  CHECK(w[0].at("axes").at("batch_size") == 3);
  CHECK(w[1].at("axes").at("batch_size") == 5);
  const auto s = lines(work / "silu_and_mul_d1024.jsonl");
  REQUIRE(s.size() == 1);
  CHECK(s[0].at("set").at("rows") == "2");
  CHECK(fs::exists(defs / "silu_and_mul_d1024.json"));
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 4);

  // Off again: a launch writes nothing more.
  DeviceBuffer x(2 * 2 * d * 2), y(2 * d * 2);
  x.fill(0);
  auto x2 = make_tensor(x.get(), {1, 2 * d}, dl_dtype("bf16"));
  auto y2 = make_tensor(y.get(), {1, d}, dl_dtype("bf16"));
  REQUIRE(kjit_silu_and_mul(x2.get(), y2.get(), nullptr) == KJIT_SUCCESS);
  device_synchronize();
  CHECK(lines(work / "silu_and_mul_d1024.jsonl").size() == 1);
}
