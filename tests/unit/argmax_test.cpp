// The argmax launch choice (one block per row, or a sm_90 cluster of blocks per row) and the
// specs it compiles; the GPU side is tests/gpu/argmax_gpu_test.cpp.
#include <catch2/catch.hpp>

#include <string>

#include "kjit/kjit.h"
#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/sampling/sampling.hpp"
#include "util/error.hpp"

namespace ops = kjit::ops;
using ops::ArgmaxPath;

namespace {

kjit_status status_of(ArgmaxPath path, int cluster, int cc_major) {
  try {
    ops::argmax_cluster_size(path, cluster, 1, 128256, 132, cc_major);
  } catch (const kjit::Error& e) {
    return e.status();
  }
  return KJIT_SUCCESS;
}

}  // namespace

TEST_CASE("argmax: on sm_90 rows split while the grid fits one wave of 512-thread blocks",
          "[argmax]") {
  const auto size = [](int64_t batch, int64_t vocab, int cc) {
    return ops::argmax_cluster_size(ArgmaxPath::kAuto, 0, batch, vocab, 132, cc);
  };
  // 132 SMs x 4 blocks = 528 slots.
  CHECK(size(1, 128256, 9) == 8);
  CHECK(size(8, 128256, 9) == 8);
  CHECK(size(64, 128256, 9) == 8);   // 512 blocks
  CHECK(size(66, 128256, 9) == 8);   // 528
  CHECK(size(67, 128256, 9) == 4);   // 8 per row would be 536
  CHECK(size(132, 128256, 9) == 4);  // 528
  CHECK(size(133, 128256, 9) == 2);
  CHECK(size(256, 128256, 9) == 2);  // 512
  CHECK(size(264, 128256, 9) == 2);
  CHECK(size(265, 128256, 9) == 1);
  CHECK(size(1, 32000, 9) == 4);  // parts of >= 4096 elements
  CHECK(size(1, 8191, 9) == 1);
  CHECK(size(1, 128256, 8) == 1);  // sm_80: no clusters
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kAuto, 0, 64, 128256, 78, 9) == 4);  // fewer SMs
}

TEST_CASE("argmax: the plan's block size, loads per lane and forced shapes", "[argmax]") {
  using ops::DType;
  // Four 16-byte loads per lane for every dtype; the scalar path keeps eight.
  auto p = ops::plan_argmax(DType::kF32, 64, 128256, true, 132, 9);
  CHECK(p.cfg.vec == 4);
  CHECK(p.cfg.unroll == 4);
  CHECK(p.cfg.cluster == 8);
  CHECK(p.threads == 256);  // 512 blocks > 132 SMs; 512 threads would run two groups each
  p = ops::plan_argmax(DType::kBF16, 64, 128256, true, 132, 9);
  CHECK(p.cfg.cluster == 8);
  CHECK(p.threads == 256);  // the floor: 512 threads would run one group each
  p = ops::plan_argmax(DType::kBF16, 256, 128256, true, 132, 9);
  CHECK(p.cfg.vec == 8);
  CHECK(p.cfg.unroll == 4);
  CHECK(p.cfg.cluster == 2);
  CHECK(p.threads == 512);  // 3.9 groups per thread
  p = ops::plan_argmax(DType::kF32, 256, 128256, true, 132, 9);
  CHECK(p.cfg.cluster == 2);
  CHECK(p.threads == 512);
  p = ops::plan_argmax(DType::kF32, 1, 128256, true, 132, 9);
  CHECK(p.cfg.cluster == 8);
  CHECK(p.threads == 1024);  // 8 blocks: as wide as a 16032-element part takes
  p = ops::plan_argmax(DType::kF32, 1, 1000, true, 132, 9);
  CHECK(p.cfg.cluster == 1);
  CHECK(p.threads == 64);  // 1000 / 16 per lane, rounded up to warps
  p = ops::plan_argmax(DType::kF16, 300, 7, false, 132, 9);
  CHECK(p.cfg.vec == 1);
  CHECK(p.cfg.unroll == 8);
  CHECK(p.threads == 32);
  p = ops::plan_argmax(DType::kBF16, 64, 128256, true, 108, 8);  // sm_80: one block per row
  CHECK(p.cfg.cluster == 1);
  CHECK(p.threads == 1024);  // 64 blocks on 108 SMs: full-width blocks
  // A tuning's block size and unroll; zero fields keep the plan's.
  ops::ArgmaxTuning shape;
  shape.threads = 128;
  shape.unroll = 2;
  p = ops::plan_argmax(DType::kF32, 64, 128256, true, 132, 9, shape);
  CHECK(p.threads == 128);
  CHECK(p.cfg.unroll == 2);
  CHECK(ops::argmax_uri(p.cfg) == "argmax_dtype_fp32_vec_4_unroll_2_cluster_8");
  p = ops::plan_argmax(DType::kF32, 64, 128256, true, 132, 9);
  CHECK(p.threads == 256);
  CHECK(p.cfg.unroll == 4);
  const auto status = [](int threads, int unroll) {
    try {
      ops::check_argmax_tuning({ArgmaxPath::kAuto, 0, threads, unroll});
    } catch (const kjit::Error& e) {
      return e.status();
    }
    return KJIT_SUCCESS;
  };
  CHECK(status(48, 0) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status(2048, 0) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status(-32, 0) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status(0, 3) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status(0, 16) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status(0, 0) == KJIT_SUCCESS);
}

TEST_CASE("argmax: forced paths", "[argmax]") {
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kBlock, 0, 1, 128256, 132, 9) == 1);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kCluster, 4, 1000, 128256, 132, 9) == 4);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kCluster, 0, 1000, 128256, 132, 9) == 2);
  CHECK(status_of(ArgmaxPath::kCluster, 2, 8) == KJIT_ERROR_UNSUPPORTED);
  CHECK(status_of(ArgmaxPath::kCluster, 3, 9) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status_of(ArgmaxPath::kCluster, 16, 9) == KJIT_ERROR_INVALID_ARGUMENT);
  // A tuning's path steers the plan; the default tuning keeps the heuristic's.
  ops::ArgmaxTuning t;
  t.path = ArgmaxPath::kBlock;
  CHECK(ops::plan_argmax(ops::DType::kF32, 1, 128256, true, 132, 9, t).cfg.cluster == 1);
  t.path = ArgmaxPath::kCluster;
  t.cluster = 2;
  CHECK(ops::plan_argmax(ops::DType::kF32, 1, 128256, true, 132, 9, t).cfg.cluster == 2);
  CHECK(ops::plan_argmax(ops::DType::kF32, 1, 128256, true, 132, 9).cfg.cluster == 8);
}

TEST_CASE("argmax: the cluster spec is its own sm_90+ kernel, one block per row is unchanged",
          "[argmax]") {
  ops::RowConfig c = ops::select_argmax(ops::DType::kBF16, 128256, true);
  CHECK(ops::argmax_uri(c) == "argmax_dtype_bf16_vec_8_unroll_4");
  const auto one = ops::argmax_spec(c);
  CHECK(one.entry_names.at(0).find("argmax_kernel<") != std::string::npos);
  CHECK(one.arch_families == std::vector<std::string>{"sm_80+"});
  c.cluster = 8;
  const auto cl = ops::argmax_spec(c);
  CHECK(cl.uri == "argmax_dtype_bf16_vec_8_unroll_4_cluster_8");
  CHECK(cl.entry_names.at(0) ==
        "kjit::sampling::argmax_cluster_kernel<kjit_spec::dtype, kjit_spec::vec, "
        "kjit_spec::unroll, kjit_spec::cluster>");
  CHECK(cl.arch_families == std::vector<std::string>{"sm_90+"});
  CHECK(cl.config.find("constexpr int cluster = 8;") != std::string::npos);
}

TEST_CASE("argmax: the op definition takes no search axis", "[argmax]") {
  const ops::OpDef* d = ops::find_op("argmax");
  REQUIRE(d != nullptr);
  CHECK(d->make_spec({{"dtype", "fp32"}}).uri == "argmax_dtype_fp32_vec_4_unroll_4");
  CHECK_THROWS(d->make_spec({{"dtype", "fp32"}, {"search", "float"}}));
}
