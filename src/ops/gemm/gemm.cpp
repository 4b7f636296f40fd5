#include "ops/gemm/gemm.hpp"

#include <cmath>
#include <cstring>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "cuda/tensor_map.hpp"
#include "runtime/jit_core.hpp"
#include "ops/gemm/gemm_desc.hpp"
#include "ops/tensor.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

static_assert(sizeof(CUtensorMap) == sizeof(gemm::TensorMapBytes) &&
                  alignof(CUtensorMap) <= alignof(gemm::TensorMapBytes),
              "TensorMapBytes holds a CUtensorMap");

// TMA coordinates are int32: larger sides go to the fallback.
constexpr int64_t kMaxTmaSide = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridY = 65535;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

bool tma_describable(const RowMatrix& m) {
  const auto addr = reinterpret_cast<uintptr_t>(m.data);
  const int64_t stride_bytes = m.row_stride * static_cast<int64_t>(dtype_size(m.dtype));
  return addr % 16 == 0 && (m.rows == 1 || stride_bytes % 16 == 0) &&
         (m.cols * static_cast<int64_t>(dtype_size(m.dtype))) % 16 == 0 && m.rows <= kMaxTmaSide &&
         m.cols <= kMaxTmaSide;
}

bool overlaps(const RowMatrix& x, const RowMatrix& y) {
  return x.numel() != 0 && y.numel() != 0 && (x.data == y.data || partially_overlaps(x, y));
}

gemm::TensorMapBytes tensor_map(const RowMatrix& m, uint32_t box_rows) {
  cuda::TensorMap2d t;
  t.ptr = m.data;
  t.elem_bytes = static_cast<int>(dtype_size(m.dtype));
  t.rows = static_cast<uint64_t>(m.rows);
  t.cols = static_cast<uint64_t>(m.cols);
  // A single row's stride is never used; TMA still wants a valid one.
  t.row_stride_bytes = static_cast<uint64_t>(m.rows == 1 ? m.cols : m.row_stride) * t.elem_bytes;
  t.box_rows = box_rows;
  t.box_cols = gemm::kGemmBlockK;
  t.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  const CUtensorMap map = cuda::make_tensor_map_2d(t);
  gemm::TensorMapBytes out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

const char* gemm_path_name(GemmPath p) {
  return p == GemmPath::kSm90 ? "sm90" : "simt";
}

GemmTarget gemm_target(int device, bool tma_ok) {
  const cuda::DeviceInfo& dev = cuda::device_info(device);
  GemmTarget t;
  t.cc_major = dev.major;
  t.cc_minor = dev.minor;
  t.max_smem_optin = dev.max_smem_optin;
  t.tma_ok = tma_ok;
  return t;
}

bool sm90_can_run(const GemmTarget& target, int64_t m, int64_t n, int64_t k, int bn, int stages) {
  return target.cc_major == 9 && target.cc_minor == 0 && target.tma_ok && m <= kMaxTmaSide &&
         n <= kMaxTmaSide && k <= kMaxTmaSide &&
         gemm::gemm_sm90_smem_bytes(bn, stages) <= target.max_smem_optin &&
         ceil_div(m, gemm::kGemmBlockM) * ceil_div(n, bn) <= kMaxTmaSide;
}

void check_simt_grid(const char* op, int64_t m, int64_t n) {
  if (ceil_div(m, gemm::kGemmSimtTile) > kMaxGridY ||
      ceil_div(n, gemm::kGemmSimtTile) > kMaxTmaSide) {
    fail(KJIT_ERROR_UNSUPPORTED, "{}: m = {} exceeds the {} rows one launch covers", op, m,
         kMaxGridY * gemm::kGemmSimtTile);
  }
}

GemmConfig select_gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k,
                       const GemmTarget& target) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "gemm supports bf16 and fp16 a and b, not {}", dtype_name(dtype));
  }
  if (!is_float(out_dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "gemm's out is fp32, fp16 or bf16, not {}", dtype_name(out_dtype));
  }
  GemmConfig c;
  c.dtype = dtype;
  c.out_dtype = out_dtype;
  // Wide tiles halve the reads of a per output once there are rows enough to fill them; decode
  // shapes keep 128 so more blocks share the weight stream.
  const int bn = m >= 512 ? 256 : 128;
  const int stages = bn == 256 ? 4 : 6;
  if (sm90_can_run(target, m, n, k, bn, stages)) {
    c.path = GemmPath::kSm90;
    c.bn = bn;
    c.stages = stages;
    return c;
  }
  check_simt_grid("gemm", m, n);
  c.path = GemmPath::kSimt;
  return c;
}

jit::Spec gemm_spec(const GemmConfig& c) {
  const bool sm90 = c.path == GemmPath::kSm90;
  jit::SpecBuilder b(
      "gemm", {"common", "gemm"}, sm90 ? "gemm/gemm_sm90.cuh" : "gemm/gemm_simt.cuh",
      sm90 ? std::vector<std::string>{"sm_90a"} : std::vector<std::string>{"sm_80+"});
  b.choice("path", gemm_path_name(c.path), static_cast<int>(c.path));
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.type("out_dtype", dtype_name(c.out_dtype), device_type_name(c.out_dtype));
  if (sm90) {
    b.value("bn", c.bn).value("stages", c.stages);
    b.entry("kjit::gemm::gemm_sm90_kernel", {"dtype", "out_dtype", "bn", "stages"});
  } else {
    b.entry("kjit::gemm::gemm_simt_kernel", {"dtype", "out_dtype"});
  }
  return b.build();
}

GemmOperands gemm_operands(const DLTensor* a, const DLTensor* b, DLTensor* out) {
  GemmOperands g;
  g.a = as_row_matrix(a, "a");
  g.b = as_row_matrix(b, "b");
  g.out = as_row_matrix(out, "out");
  if (b->ndim != 2) fail(KJIT_ERROR_INVALID_ARGUMENT, "b must be 2-D [n, k], has ndim {}", b->ndim);
  check_same_dtype(g.a, "a", g.b, "b");
  check_same_device(g.a, "a", g.b, "b");
  check_same_device(g.a, "a", g.out, "out");
  if (out->ndim != a->ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out has ndim {} but a has {}", out->ndim, a->ndim);
  }
  for (int i = 0; i + 1 < a->ndim; ++i) {
    if (out->shape[i] != a->shape[i]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "out dim {} is {} but a's is {}", i, out->shape[i],
           a->shape[i]);
    }
  }
  // From the shapes: a RowMatrix without columns has no rows either (k = 0 is a valid call).
  g.n = b->shape[0];
  g.k = g.a.cols;
  if (b->shape[1] != g.k) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "b is [{}, {}] but a's last dim (k) is {}", g.n, b->shape[1],
         g.k);
  }
  if (g.out.cols != g.n) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out's last dim is {} but b has {} rows (n)", g.out.cols,
         g.n);
  }
  if (overlaps(g.out, g.a)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps a (gemm is not in place)");
  }
  if (overlaps(g.out, g.b)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps b (gemm is not in place)");
  }
  g.m = g.out.rows;  // a's leading dims (checked equal)
  return g;
}

gemm::GemmParams gemm_params(const GemmOperands& g, float alpha, float beta) {
  gemm::GemmParams p{};
  p.a = g.a.data;
  p.b = g.b.data;
  p.out = g.out.data;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.a_stride = g.a.row_stride;
  p.b_stride = g.b.row_stride;
  p.out_stride = g.out.row_stride;
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

cuda::LaunchConfig gemm_launch_config(GemmPath path, int bn, int stages, int64_t m, int64_t n,
                                      void* stream) {
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  if (path == GemmPath::kSm90) {
    lc.grid_x = static_cast<unsigned>(ceil_div(n, bn) * ceil_div(m, gemm::kGemmBlockM));
    lc.block_x = gemm::kGemmSm90Threads;
    lc.smem_bytes = static_cast<unsigned>(gemm::gemm_sm90_smem_bytes(bn, stages));
  } else {
    lc.grid_x = static_cast<unsigned>(ceil_div(n, gemm::kGemmSimtTile));
    lc.grid_y = static_cast<unsigned>(ceil_div(m, gemm::kGemmSimtTile));
    lc.block_x = gemm::kGemmSimtThreads;
  }
  return lc;
}

void gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out, float alpha,
          float beta, void* stream) {
  const GemmOperands g = gemm_operands(a, b, out);
  const RowMatrix& x = g.a;
  const RowMatrix& w = g.b;
  const RowMatrix& y = g.out;
  const int64_t n = g.n;
  const int64_t k = g.k;
  RowMatrix bv;
  if (bias != nullptr) {
    bv = as_row_matrix(bias, "bias");
    if (bias->ndim != 1 || bv.cols != n) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "bias must be [n] = [{}]", n);
    }
    check_same_dtype(x, "a", bv, "bias");
    check_same_device(x, "a", bv, "bias");
    if (overlaps(y, bv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps bias");
  }
  if (!std::isfinite(alpha) || !std::isfinite(beta)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "alpha ({}) and beta ({}) must be finite", alpha, beta);
  }
  if (n == 0) return;  // after validation: a zero-size call is still checked
  const int64_t m = g.m;
  if (m == 0) return;
  // Unsupported dtypes are reported before any driver call, so also without a GPU.
  select_gemm(x.dtype, y.dtype, m, n, k, GemmTarget{});
  if (trace::enabled()) trace::gemm(x.dtype, y.dtype, m, n, k, bias != nullptr);

  const GemmTarget target =
      gemm_target(x.device, k > 0 && tma_describable(x) && tma_describable(w));
  const GemmConfig cfg = select_gemm(x.dtype, y.dtype, m, n, k, target);
  const jit::LoadedKernel& kern =
      jit::JitCore::global().kernel_for("gemm", cfg, x.device, [&] { return gemm_spec(cfg); });

  gemm::GemmParams p = gemm_params(g, alpha, beta);
  p.bias = bias != nullptr ? bv.data : nullptr;
  const cuda::LaunchConfig lc = gemm_launch_config(cfg.path, cfg.bn, cfg.stages, m, n, stream);
  if (cfg.path == GemmPath::kSm90) {
    p.tma_a = tensor_map(x, gemm::kGemmBlockM);
    p.tma_b = tensor_map(w, static_cast<uint32_t>(cfg.bn));
  }
  cuda::ScopedDevice scope(x.device);
  cuda::launch(kern.functions.at(0), lc, &p);
}

}  // namespace kjit::ops
