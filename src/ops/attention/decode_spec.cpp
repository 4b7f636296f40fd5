// Decode attention's specialization: the spec a DecodeConfig compiles to (the op's registry
// entry is in attention_desc.cpp).
#include <string>
#include <vector>

#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_internal.hpp"
#include "util/error.hpp"

namespace kjit::ops {

std::string decode_uri(const DecodeConfig& c) {
  return decode_spec(c).uri;
}

jit::Spec decode_spec(const DecodeConfig& c) {
  const char* q_type = device_type_name(c.q_dtype);
  // Clusters and distributed shared memory are sm_90's.
  jit::SpecBuilder b("decode_attention", {"common", "attention"}, "attention/decode.cuh",
                     {c.cluster_merge != 0 ? "sm_90+" : "sm_80+"});
  b.type("q_dtype", dtype_name(c.q_dtype), q_type);
  // The mma operand type: fp16 for an fp8 cache (its values enter scaled by 2^-8), else q's.
  b.type("mma_dtype", c.kv_fp8 ? "fp16" : dtype_name(c.q_dtype), c.kv_fp8 ? "__half" : q_type);
  b.flag("kv_fp8", c.kv_fp8 != 0);
  b.value("head_dim", c.head_dim).value("n_tiles", c.n_tiles).value("warps", c.warps);
  b.value("stage_tokens", c.stage_tokens).value("stages", c.stages).value("cp_bytes", c.cp_bytes);
  // Left out of the URI at their defaults: one head per CTA, 32-bit offsets, one tile at a time.
  b.value("heads_per_cta", c.heads_per_cta, 1).value("addr", c.addr, 2);
  b.value("joint_tiles", c.joint_tiles, 1).flag("cluster_merge", c.cluster_merge != 0, true);
  b.entry("kjit::attention::decode_kernel");
  b.entry("kjit::attention::decode_merge_kernel", {"q_dtype", "head_dim"});
  return b.build();
}

}  // namespace kjit::ops
