// Specialization choice, spec rendering and registry entries of the sampling family. The
// argument checks and launches are in sampling_ops.cpp.
#include "ops/sampling/sampling.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.hpp"

namespace kjit::ops {

namespace {

const char* op_name(FilterOp op) {
  switch (op) {
    case FilterOp::kSample: return "sample";
    case FilterOp::kRenorm: return "renorm";
    case FilterOp::kMask: return "mask";
  }
  return "?";
}

const char* input_name(FilterInput in) {
  switch (in) {
    case FilterInput::kProbs: return "probs";
    case FilterInput::kLogits: return "logits";
    case FilterInput::kLogitKeys: return "logitkeys";
  }
  return "?";
}

// The 16-byte path when the caller allows it, else scalar loads with more of them in flight.
void choose_vec(DType dtype, bool vec_ok, int vec_unroll, int& vec, int& unroll) {
  if (vec_ok) {
    vec = static_cast<int>(16 / dtype_size(dtype));
    unroll = vec_unroll;
  } else {
    vec = 1;
    unroll = 8;
  }
}

// softmax_kernel / argmax_kernel<dtype, vec, unroll>, or argmax_cluster_kernel<dtype, vec,
// unroll, cluster> when cluster > 1 (only argmax has a cluster launch; clusters are sm_90+).
jit::Spec row_spec(const char* op, const char* include, const char* kernel, const RowConfig& c) {
  const bool cluster = c.cluster > 1;
  jit::SpecBuilder b(op, {"common", "sampling"}, include, {cluster ? "sm_90+" : "sm_80+"});
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("vec", c.vec).value("unroll", c.unroll);
  if (cluster) b.value("cluster", c.cluster);
  b.entry(fmt::format("kjit::sampling::{}{}_kernel", kernel, cluster ? "_cluster" : ""));
  return b.build();
}

void check_row_kernel(const char* op, DType dtype, int64_t vocab) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports fp32, fp16 and bf16, not {}", op, dtype_name(dtype));
  }
  if (vocab < 1 || vocab > kRowKernelMaxVocab) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports rows of 1..{} elements, not {}", op,
         kRowKernelMaxVocab, vocab);
  }
}

}  // namespace

void check_sample_tuning(const SampleTuning& t) {
  if (t.threads < 0 || t.threads > 1024 || t.threads % 32 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "sampler threads must be 0 (the plan's) or a multiple of 32 to 1024, not {}", t.threads);
  }
  if (t.cluster < 0 || t.cluster == 1 || t.cluster > kSampleMaxCluster) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "cluster size must be 0 (auto) or 2..{}, not {}",
         kSampleMaxCluster, t.cluster);
  }
  if (t.cluster > 0 && t.path != SamplePath::kCluster) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "a cluster size ({}) needs the cluster path", t.cluster);
  }
  if (t.blocks_per_sm < 0 || t.blocks_per_sm > 32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "blocks per SM must be 0 (the occupancy's) or 1..32, not {}",
         t.blocks_per_sm);
  }
  if (t.blocks_per_sm > 0 && t.path != SamplePath::kSingle) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "a blocks-per-SM cap ({}) needs the one-block path",
         t.blocks_per_sm);
  }
  if (t.mass < -1 || t.mass > 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "sampler mass mode must be -1 (the plan's), 0 (bounds) or 1 (exact), not {}", t.mass);
  }
}

int sample_mass(const SampleTuning& tuning, bool top_k_rows) {
  if (top_k_rows) return 0;
  return tuning.mass >= 0 ? tuning.mass : 1;
}

int sampling_block_threads(int64_t vocab, int vec, int unroll) {
  const int64_t per_step = static_cast<int64_t>(vec) * unroll;
  int64_t t = (vocab + per_step - 1) / per_step;
  t = (t + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(t, 32, 1024));
}

int sampling_single_block_threads(int wide, int64_t batch, int sm_count, int64_t row_bytes,
                                  int64_t l2_bytes, int filters) {
  const bool search = (filters & (sampling::kFilterTopK | sampling::kFilterTopP)) != 0;
  const bool overflows_l2 = int64_t{sm_count} * row_bytes > l2_bytes;
  if (batch <= sm_count || !overflows_l2 || !search) return wide;
  return std::min(wide, kSampleSplitThreads);
}

int sampling_cluster_block_threads(int64_t share) {
  int64_t t = (share + 15) / 16;
  t = (t + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(t, 128, kSampleClusterMaxThreads));
}

FilterConfig select_filter(FilterOp op, FilterInput input, DType dtype, int64_t vocab,
                           bool vec_ok) {
  const bool logit_input = input != FilterInput::kProbs;
  if (op == FilterOp::kMask ? input != FilterInput::kLogitKeys : input == FilterInput::kLogitKeys) {
    fail(KJIT_ERROR_UNSUPPORTED, "sampling filter: op {} does not take {} input", op_name(op),
         input_name(input));
  }
  if (op == FilterOp::kRenorm && input != FilterInput::kProbs) {
    fail(KJIT_ERROR_UNSUPPORTED, "renormalization works on probabilities, not logits");
  }
  if (logit_input ? !is_float(dtype) : dtype != DType::kF32) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} {} must be {}, not {}", op_name(op), input_name(input),
         logit_input ? "fp32, bf16 or fp16" : "fp32", dtype_name(dtype));
  }
  if (vocab < 1 || vocab > kFilterMaxVocab) {
    fail(KJIT_ERROR_UNSUPPORTED, "sampling filters support vocabularies of 1..{}, not {}",
         kFilterMaxVocab, vocab);
  }
  FilterConfig c;
  c.op = op;
  c.input = input;
  c.dtype = dtype;
  choose_vec(dtype, vec_ok, 2, c.vec, c.unroll);
  // Four elements a vector for every dtype (8-byte loads for 16-bit logits), so a segment is 256
  // tokens whatever the input: the B1 draw's scan and its warp's rescan walk one segment, and
  // per-phase timing on an H200 put bf16's 512-token segments 2.8 us behind fp32 there.
  c.vec = std::min(c.vec, 4);
  return c;
}

RowConfig select_softmax(DType dtype, int64_t vocab, bool vec_ok) {
  check_row_kernel("softmax", dtype, vocab);
  RowConfig c;
  c.dtype = dtype;
  choose_vec(dtype, vec_ok, 2, c.vec, c.unroll);
  return c;
}

RowConfig select_argmax(DType dtype, int64_t vocab, bool vec_ok) {
  check_row_kernel("argmax", dtype, vocab);
  RowConfig c;
  c.dtype = dtype;
  // A pure read: four 16-byte loads in flight per lane at 2048 threads per SM (the kernels stay
  // within 32 registers) is the read probe's 128 KB per SM. 16-bit types too: their maxima are
  // taken on packed pairs, so their loads cost no more registers than fp32's.
  choose_vec(dtype, vec_ok, 4, c.vec, c.unroll);
  return c;
}

std::string filter_uri(const FilterConfig& c) {
  return filter_spec(c).uri;
}

// filter_kernel<dtype, vec, unroll, input, op, cluster, mass>: FilterConfig's fields by name;
// op and input by their enum values (kernels/sampling/sampling.cuh kOp*, kInput*). The cluster
// and exact-mass variants alone name their axis in the URI.
jit::Spec filter_spec(const FilterConfig& c) {
  jit::SpecBuilder b("sampling_filter", {"common", "sampling"}, "sampling/sampling.cuh",
                     {c.cluster ? "sm_90+" : "sm_80+"});  // clusters and DSMEM are sm_90's
  b.value("op", static_cast<int>(c.op)).value("input", static_cast<int>(c.input));
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("vec", c.vec).value("unroll", c.unroll);
  b.value("cluster", c.cluster, /*uri_default=*/0).value("mass", c.mass, /*uri_default=*/0);
  b.entry("kjit::sampling::filter_kernel",
          {"dtype", "vec", "unroll", "input", "op", "cluster", "mass"});
  return b.build();
}

jit::Spec softmax_spec(const RowConfig& c) {
  return row_spec("softmax", "sampling/softmax.cuh", "softmax", c);
}
std::string softmax_uri(const RowConfig& c) {
  return softmax_spec(c).uri;
}
jit::Spec argmax_spec(const RowConfig& c) {
  return row_spec("argmax", "sampling/argmax.cuh", "argmax", c);
}
std::string argmax_uri(const RowConfig& c) {
  return argmax_spec(c).uri;
}

namespace {
// Block slots per SM the argmax kernels are sized for: __launch_bounds__(1024, 2) holds them to
// 32 registers, so 2048 threads (four 512-thread blocks) fit on an SM.
constexpr int kArgmaxThreadsPerSm = 2048;
constexpr int kArgmaxSplitThreads = 512;
// Load groups a thread should run at least, once the grid passes the SM count: a thread's first
// group always runs the index search and its block and cluster reductions are fixed, so at one
// or two groups those dominate (H200, V 128256, clusters of 8: fp32 B64 12.99 us with
// 512-thread blocks, 11.26 with 256; bf16 B64 10.34 / 9.82; bf16 B256 in clusters of 2, where
// 512 threads already run 3.9 groups, lost with 256: 23.57 / 24.80).
constexpr int kArgmaxMinGroups = 3;
constexpr int kArgmaxMinSplitThreads = 256;
}  // namespace

void check_argmax_tuning(const ArgmaxTuning& t) {
  if (t.threads < 0 || t.threads > 1024 || t.threads % 32 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "argmax: threads must be 0 or a multiple of 32 to 1024, not {}", t.threads);
  }
  if (t.unroll != 0 && t.unroll != 1 && t.unroll != 2 && t.unroll != 4 && t.unroll != 8) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "argmax: unroll must be 0, 1, 2, 4 or 8, not {}", t.unroll);
  }
}

ArgmaxPlan plan_argmax(DType dtype, int64_t batch, int64_t vocab, bool vec_ok, int sm_count,
                       int cc_major, const ArgmaxTuning& tuning) {
  check_argmax_tuning(tuning);
  ArgmaxPlan p;
  p.cfg = select_argmax(dtype, vocab, vec_ok);
  if (tuning.unroll > 0) p.cfg.unroll = tuning.unroll;
  p.cfg.cluster =
      argmax_cluster_size(tuning.path, tuning.cluster, batch, vocab, sm_count, cc_major);
  const int64_t part =
      ((vocab + p.cfg.cluster - 1) / p.cfg.cluster + p.cfg.vec - 1) / p.cfg.vec * p.cfg.vec;
  // Fewer blocks than SMs: each block as wide as its part allows (the bytes in flight are the
  // block's). More: 512-thread blocks, four per SM, so a grid within 4 * SMs runs in one wave
  // and the last blocks of a wave idle at most a quarter of an SM.
  int cap = 1024;
  if (batch * p.cfg.cluster > sm_count) {
    cap = kArgmaxSplitThreads;
    const int64_t per_group = int64_t{p.cfg.vec} * p.cfg.unroll;
    while (cap > kArgmaxMinSplitThreads && part < int64_t{cap} * per_group * kArgmaxMinGroups) {
      cap /= 2;
    }
  }
  if (tuning.threads > 0) cap = tuning.threads;
  p.threads = std::min(cap, sampling_block_threads(part, p.cfg.vec, p.cfg.unroll));
  return p;
}

int argmax_cluster_size(ArgmaxPath path, int forced_cluster, int64_t batch, int64_t vocab,
                        int sm_count, int cc_major) {
  if (path == ArgmaxPath::kBlock) return 1;
  if (path == ArgmaxPath::kCluster && cc_major < 9) {
    fail(KJIT_ERROR_UNSUPPORTED, "argmax: the cluster path needs sm_90 or newer, not sm_{}0",
         cc_major);
  }
  if (path == ArgmaxPath::kCluster && forced_cluster > 0) {
    if (forced_cluster != 2 && forced_cluster != 4 && forced_cluster != 8) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "argmax: cluster size must be 2, 4 or 8, not {}",
           forced_cluster);
    }
    return forced_cluster;
  }
  if (cc_major < 9) return 1;
  // Split rows while the grid still fits one wave of 512-thread blocks (4 per SM). Clusters of
  // 1024-thread blocks lost at B64 (16.4 / 19.1 us against 13.6 for one block per row) because
  // those blocks took 37 registers: one block per SM, so 256 or 512 blocks ran in 2-4 waves, each
  // only one or two loads deep. At <= 32 registers and 512 threads, B64 in clusters of 8 is 512
  // blocks on 528 slots, every SM streaming. Each part keeps >= 4096 elements.
  int c = 1;
  while (c < 8 && batch * c * 2 * kArgmaxSplitThreads <= int64_t{sm_count} * kArgmaxThreadsPerSm &&
         vocab / (2 * c) >= 4096) {
    c *= 2;
  }
  if (path == ArgmaxPath::kCluster && c == 1) c = 2;
  return c;
}

int softmax_cluster_size(int64_t batch, int64_t vocab, int sm_count, int cc_major) {
  if (cc_major < 9) return 1;
  // One 1024-thread block a row reads at one SM's pace (a 128256-token row alone leaves the
  // other SMs idle); a cluster splits the row while batch x blocks still fits one block per SM.
  int c = 1;
  while (c < 8 && batch * c * 2 <= sm_count && vocab / (2 * c) >= 4096) c *= 2;
  return c;
}

RowConfig select_top_k(DType dtype, int64_t vocab, int64_t k, bool vec_ok) {
  check_row_kernel("top_k", dtype, vocab);
  if (k > kTopKMaxK) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "top_k supports k up to {} (the candidates sit in shared memory), "
         "not {}",
         kTopKMaxK, k);
  }
  RowConfig c;
  c.dtype = dtype;
  // Up to five passes over the row, each as argmax's read (four 16-byte loads in flight a lane).
  choose_vec(dtype, vec_ok, 4, c.vec, c.unroll);
  return c;
}

jit::Spec top_k_spec(const RowConfig& c) {
  return row_spec("top_k", "sampling/top_k.cuh", "top_k", c);
}
std::string top_k_uri(const RowConfig& c) {
  return top_k_spec(c).uri;
}

}  // namespace kjit::ops
