// The argmax launch choice (one block per row, or a sm_90 cluster of blocks per row) and the
// specs it compiles; the GPU side is tests/gpu/argmax_gpu_test.cpp.
#include <catch2/catch.hpp>

#include <string>

#include "kjit/kjit.h"
#include "ops/sampling.hpp"
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

TEST_CASE("argmax: small batches on sm_90 get a cluster per row, within half the SMs", "[argmax]") {
  const auto size = [](int64_t batch, int64_t vocab, int cc) {
    return ops::argmax_cluster_size(ArgmaxPath::kAuto, 0, batch, vocab, 132, cc);
  };
  CHECK(size(1, 128256, 9) == 8);
  CHECK(size(8, 128256, 9) == 8);   // 64 blocks
  CHECK(size(9, 128256, 9) == 4);   // 8 per row would be 72 > 66
  CHECK(size(16, 128256, 9) == 4);  // 64 blocks
  CHECK(size(33, 128256, 9) == 2);  // 66 blocks
  CHECK(size(34, 128256, 9) == 1);
  CHECK(size(64, 128256, 9) == 1);  // round 7: one block per row beat clusters of 4 and 8
  CHECK(size(256, 128256, 9) == 1);
  CHECK(size(1, 32000, 9) == 4);  // parts of >= 4096 elements
  CHECK(size(1, 8191, 9) == 1);
  CHECK(size(1, 128256, 8) == 1);  // sm_80: no clusters
}

TEST_CASE("argmax: forced paths", "[argmax]") {
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kBlock, 0, 1, 128256, 132, 9) == 1);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kCluster, 4, 1000, 128256, 132, 9) == 4);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kCluster, 0, 1000, 128256, 132, 9) == 2);
  CHECK(status_of(ArgmaxPath::kCluster, 2, 8) == KJIT_ERROR_UNSUPPORTED);
  CHECK(status_of(ArgmaxPath::kCluster, 3, 9) == KJIT_ERROR_INVALID_ARGUMENT);
  CHECK(status_of(ArgmaxPath::kCluster, 16, 9) == KJIT_ERROR_INVALID_ARGUMENT);
  // The process-wide hook steers kAuto, and kAuto restores the heuristic.
  ops::force_argmax_path(ArgmaxPath::kBlock);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kAuto, 0, 1, 128256, 132, 9) == 1);
  ops::force_argmax_path(ArgmaxPath::kCluster, 2);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kAuto, 0, 1, 128256, 132, 9) == 2);
  ops::force_argmax_path(ArgmaxPath::kAuto);
  CHECK(ops::argmax_cluster_size(ArgmaxPath::kAuto, 0, 1, 128256, 132, 9) == 8);
}

TEST_CASE("argmax: the cluster spec is its own sm_90+ kernel, one block per row is unchanged",
          "[argmax]") {
  ops::RowConfig c = ops::select_argmax(ops::DType::kBF16, 128256, true);
  CHECK(ops::argmax_uri(c) == "argmax_dtype_bf16_vec_8_unroll_2");
  const auto one = ops::argmax_spec(c);
  CHECK(one.entry_names.at(0).find("argmax_kernel<") != std::string::npos);
  CHECK(one.arch_families == std::vector<std::string>{"sm_80+"});
  c.cluster = 8;
  const auto cl = ops::argmax_spec(c);
  CHECK(cl.uri == "argmax_dtype_bf16_vec_8_unroll_2_cluster_8");
  CHECK(cl.entry_names.at(0) ==
        "kjit::sampling::argmax_cluster_kernel<kjit_spec::T, kjit_spec::kVec, "
        "kjit_spec::kUnroll, kjit_spec::kCluster>");
  CHECK(cl.arch_families == std::vector<std::string>{"sm_90+"});
  CHECK(cl.config.find("constexpr int kCluster = 8;") != std::string::npos);
}
