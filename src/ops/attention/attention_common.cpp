// See attention_common.hpp.
#include "ops/attention/attention_common.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "util/error.hpp"

namespace kjit::ops::attention_detail {

StridedView int_vector(const DLTensor* t, const char* name, int device) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim != 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 1-D, got ndim {}", name, v.ndim);
  if (v.dtype != DType::kI32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, got {}", name, dtype_name(v.dtype));
  }
  if (v.shape[0] > 1 && v.strides[0] != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be contiguous, has stride {}", name, v.strides[0]);
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but the plan is for cuda:{}", name,
         v.device, device);
  }
  return v;
}

void check_device(const StridedView& v, const char* name, int device) {
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but the plan is for cuda:{}", name,
         v.device, device);
  }
}

StridedView workspace_view(const DLTensor* t, size_t workspace_bytes, int device,
                           const char* user) {
  if (t == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is NULL but {} needs {} bytes", user,
         workspace_bytes);
  }
  if (t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is on device type {} (expected kDLCUDA)",
         static_cast<int>(t->device.device_type));
  }
  if (t->device.device_id != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is on cuda:{} but {} is for cuda:{}",
         t->device.device_id, user, device);
  }
  if (t->ndim < 1 || t->ndim > kMaxDims || t->shape == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has ndim {} (expected 1..{})", t->ndim, kMaxDims);
  }
  if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has a dtype of {} bits x {} lanes", t->dtype.bits,
         t->dtype.lanes);
  }
  int64_t numel = 1, expect = 1;
  bool compact = true;
  for (int i = t->ndim - 1; i >= 0; --i) {
    const int64_t s = t->shape[i];
    if (s < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has negative dim {} = {}", i, s);
    if (t->strides != nullptr && s > 1 && t->strides[i] != expect) compact = false;
    if (s > 0 && numel > (INT64_MAX / 16) / s) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is too large to address");
    }
    numel *= s;
    expect *= s;
  }
  if (!compact) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace must be contiguous");
  const uint64_t bytes = static_cast<uint64_t>(numel) * (t->dtype.bits / 8);
  if (bytes < workspace_bytes) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has {} bytes but {} needs {}", bytes, user,
         workspace_bytes);
  }
  if (t->data == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace data is NULL");
  char* data = reinterpret_cast<char*>(data_address(t, "workspace"));
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace must be 16-byte aligned");
  }
  StridedView v;
  v.data = data;
  v.dtype = DType::kI32;
  v.device = device;
  v.ndim = 1;
  v.shape[0] = static_cast<int64_t>(workspace_bytes / 4);
  v.strides[0] = 1;
  return v;
}

StridedView no_view() {
  StridedView v;
  v.ndim = 1;
  v.shape[0] = 0;
  return v;
}

void check_scale(float x, const char* name) {
  if (!std::isfinite(x) || x <= 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be finite and > 0, got {}", name, x);
  }
}

void check_score_options(float sm_scale, float logits_soft_cap, int window_left) {
  if (std::isnan(sm_scale) || std::isinf(sm_scale) || sm_scale < 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "sm_scale must be finite and >= 0 (0: 1/sqrt(head_dim)), "
         "got {}",
         sm_scale);
  }
  if (!std::isfinite(logits_soft_cap) || logits_soft_cap < 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "logits_soft_cap must be finite and >= 0 (0: off), got {}",
         logits_soft_cap);
  }
  if (window_left < -1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "window_left must be -1 (off) or >= 0, got {}", window_left);
  }
}

void check_head_counts(int num_qo_heads, int num_kv_heads, int head_dim) {
  if (num_qo_heads < 1 || num_kv_heads < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "num_qo_heads and num_kv_heads must be >= 1, got {} and {}",
         num_qo_heads, num_kv_heads);
  }
  if (num_qo_heads % num_kv_heads != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "num_qo_heads ({}) must be a multiple of num_kv_heads ({})",
         num_qo_heads, num_kv_heads);
  }
  if (head_dim < 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "head_dim must be >= 1, got {}", head_dim);
}

void check_attention_support(const char* op, DType dtype, int64_t head_dim, int64_t group,
                             int64_t max_group) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports bf16 and fp16 q, not {}", op, dtype_name(dtype));
  }
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports head_dim 64, 128 and 256, not {}", op, head_dim);
  }
  if (group < 1 || group > max_group) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports 1..{} query heads per kv head, not {}", op, max_group,
         group);
  }
}

void check_disjoint(std::initializer_list<NamedView> inputs,
                    std::initializer_list<NamedView> outputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    if (self_overlaps(*o->first)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has strides under which elements overlap", o->second);
    }
    for (const auto& [in, in_name] : inputs) {
      if (views_overlap(*o->first, *in)) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", o->second, in_name);
      }
    }
    for (auto p = outputs.begin(); p != o; ++p) {
      if (views_overlap(*o->first, *p->first)) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", o->second, p->second);
      }
    }
  }
}

ScoreScales score_scales(float sm_scale, float soft_cap, float k_scale, float v_scale,
                         float kv_unscale) {
  float score_scale = sm_scale * k_scale * kv_unscale;
  float cap_out = 0.0f;
  if (soft_cap > 0.0f) {
    score_scale /= soft_cap;
    cap_out = soft_cap * kLog2e;
  } else {
    score_scale *= kLog2e;
  }
  const float v_eff = v_scale * kv_unscale;
  if (!std::isfinite(score_scale) || score_scale == 0.0f || !std::isfinite(v_eff)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "sm_scale {} x k_scale {} (or v_scale {}) overflows or underflows fp32", sm_scale, k_scale,
         v_scale);
  }
  return {score_scale, cap_out, v_eff};
}

// Two CTAs of ~100 KB per SM is the design point of both kernels, and the driver's default
// carveout choice need not allow it. They read almost nothing through L1 (cp.async.cg bypasses
// it).
void prefer_max_shared(CUfunction fn) {
  static std::mutex mu;
  static std::unordered_set<CUfunction> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert(fn).second) return;
  KJIT_CU_CHECK(cuda::driver().cuFuncSetAttribute(
      fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100));
}

bool device_budget(int device_id, int num_sms, SmemBudget* budget_out, int* sms_out) {
  SmemBudget& budget = *budget_out;
  int& sms = *sms_out;
  sms = num_sms;
  std::string why;
  const bool have_driver = cuda::driver_available(&why);
  if (have_driver) {
    const cuda::DeviceInfo& info = cuda::device_info(device_id);
    if (sms == 0) sms = info.sm_count;
    const cuda::Driver& d = cuda::driver();
    CUdevice dev = 0;
    KJIT_CU_CHECK(d.cuDeviceGet(&dev, device_id));
    int per_sm = 0, reserved = 0;
    KJIT_CU_CHECK(d.cuDeviceGetAttribute(
        &per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev));
    KJIT_CU_CHECK(d.cuDeviceGetAttribute(
        &reserved, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev));
    budget.per_sm = per_sm;
    budget.per_block = info.max_smem_optin;
    budget.reserved = reserved;
  } else if (sms == 0) {
    fail(KJIT_ERROR_NO_DEVICE,
         "cannot query cuda:{} for its SM count (set num_sms to plan "
         "without a device): {}",
         device_id, why);
  }
  return have_driver;
}

}  // namespace kjit::ops::attention_detail
