// Softmax's row split without a GPU: the plan's blocks per row and the cluster specs.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ops/registry.hpp"
#include "ops/sampling/sampling.hpp"
#include "util/error.hpp"

namespace ops = kjit::ops;

TEST_CASE("softmax split: clusters on sm_90 while the batch leaves SMs idle", "[sampling]") {
  // H200: 132 SMs.
  CHECK(ops::softmax_cluster_size(1, 128256, 132, 9) == 8);
  CHECK(ops::softmax_cluster_size(8, 128256, 132, 9) == 8);
  CHECK(ops::softmax_cluster_size(16, 128256, 132, 9) == 8);
  CHECK(ops::softmax_cluster_size(17, 128256, 132, 9) == 4);
  CHECK(ops::softmax_cluster_size(64, 128256, 132, 9) == 2);
  CHECK(ops::softmax_cluster_size(66, 128256, 132, 9) == 2);
  CHECK(ops::softmax_cluster_size(67, 128256, 132, 9) == 1);
  CHECK(ops::softmax_cluster_size(256, 128256, 132, 9) == 1);
  // Parts keep >= 4096 elements; no clusters before sm_90.
  CHECK(ops::softmax_cluster_size(1, 8192, 132, 9) == 2);
  CHECK(ops::softmax_cluster_size(1, 8191, 132, 9) == 1);
  CHECK(ops::softmax_cluster_size(1, 128256, 108, 8) == 1);
}

TEST_CASE("softmax split: the cluster kernel is its own sm_90 spec", "[sampling]") {
  const ops::OpDef* d = ops::find_op("softmax");
  REQUIRE(d != nullptr);
  auto s = d->make_spec({{"dtype", "fp32"}, {"cluster", "8"}});
  CHECK(s.uri == "softmax_dtype_fp32_vec_4_unroll_2_cluster_8");
  CHECK(s.entry_names.at(0).rfind("kjit::sampling::softmax_cluster_kernel<", 0) == 0);
  CHECK(s.arch_families == std::vector<std::string>{"sm_90+"});
  s = d->make_spec({{"dtype", "bf16"}});
  CHECK(s.uri == "softmax_dtype_bf16_vec_8_unroll_2");
  CHECK(s.arch_families == std::vector<std::string>{"sm_80+"});
  CHECK_THROWS_AS(d->make_spec({{"dtype", "fp32"}, {"cluster", "16"}}), kjit::Error);
}
