// Hostile input for every public function of include/kjit/kjit.h, table-driven: each entry is a
// valid call plus the ways to break it. Every tensor argument of every function gets every
// generic breakage (NULL, ndim, shapes, dtype, device, strides, alignment, byte_offset); each
// function adds its own (mismatched shapes, aliasing, bad integers) and every float scalar gets
// NaN and both infinities.
//
// What makes this meaningful without a GPU: the unbroken call must fail with
// KJIT_ERROR_NO_DEVICE (it got past validation to the driver), and every broken one must fail
// with KJIT_ERROR_INVALID_ARGUMENT or KJIT_ERROR_UNSUPPORTED, a message that starts with the
// function's name, and never NO_DEVICE: validation happens before any driver call, so nothing
// can launch on bad input. Zero-size calls must succeed without reaching the driver.
#include <catch2/catch.hpp>

#include <climits>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "api/entry_points.hpp"
#include "kjit/kjit.h"
#include "ops/comm/communicator.hpp"
#include "support/gpu.hpp"
#include "support/no_gpu.hpp"

using kjit::test::dl_dtype;
using kjit::test::make_tensor;
using kjit::test::Tensor;

namespace {

// Fake device addresses, 256-byte aligned and far apart: never dereferenced.
char* addr(int slot) {
  return reinterpret_cast<char*>(static_cast<uintptr_t>(0x10000000) * static_cast<uintptr_t>(slot));
}

struct Arg {
  std::string name;  // as the messages name it
  Tensor t;
  bool nullable = false;
  bool null = false;
  bool any_dtype = false;  // documented to take any element type (a workspace)
  bool bool_ok = false;    // documented to take DLPack's bool (code 6) as well
};

struct PlanDeleter {
  void operator()(kjit_decode_plan* p) const { kjit_decode_plan_destroy(p); }
};
using PlanPtr = std::shared_ptr<kjit_decode_plan>;

struct Call {
  PlanPtr plan;                                // for kjit_batch_decode_run
  std::shared_ptr<kjit_prefill_plan> prefill;  // for the prefill runs
  std::shared_ptr<kjit_comm> comm;             // for the all-reduces
  std::vector<Arg> tensors;
  std::vector<std::pair<std::string, float>> floats;
  std::vector<std::pair<std::string, int>> ints;
  DLTensor* t(size_t i) { return tensors[i].null ? nullptr : tensors[i].t.get(); }
  float f(size_t i) const { return floats[i].second; }
  int n(size_t i) const { return ints[i].second; }
  Arg& arg(const std::string& name) {
    for (auto& a : tensors) {
      if (a.name == name) return a;
    }
    throw std::logic_error("no tensor argument " + name);
  }
  float& scalar(const std::string& name) {
    for (auto& [n, v] : floats) {
      if (n == name) return v;
    }
    throw std::logic_error("no float argument " + name);
  }
  int& integer(const std::string& name) {
    for (auto& [n, v] : ints) {
      if (n == name) return v;
    }
    throw std::logic_error("no int argument " + name);
  }
  // The sampling functions' kjit_sampling_options: the defaults, with this call's top_k, top_p,
  // min_p, temperature and struct_size where it has them.
  kjit_sampling_options sampling_options() const {
    kjit_sampling_options o;
    kjit_sampling_options_init(&o);
    for (const auto& [n, v] : ints) {
      if (n == "top_k") o.top_k = v;
      if (n == "struct_size") o.struct_size = static_cast<size_t>(v);
    }
    for (const auto& [n, v] : floats) {
      if (n == "top_p") o.top_p = v;
      if (n == "min_p") o.min_p = v;
      if (n == "temperature") o.temperature = v;
    }
    return o;
  }
  // The GEMMs' kjit_gemm_options: this call's alpha, beta and struct_size, and its autotune and
  // tune_timing where it has them.
  kjit_gemm_options gemm_options() {
    kjit_gemm_options o;
    kjit_gemm_options_init(&o);
    o.alpha = scalar("alpha");
    o.beta = scalar("beta");
    o.struct_size = static_cast<size_t>(integer("struct_size"));
    for (const auto& [n, v] : ints) {
      if (n == "autotune") o.autotune = v;
      if (n == "tune_timing") o.tune_timing = v;
    }
    return o;
  }
};

struct Mutation {
  std::string what;
  std::function<void(Call&)> apply;
  std::string arg;  // the argument the message must name ("" = not checked)
};

struct Api {
  std::string name;
  std::function<Call()> make;  // a valid call
  std::function<kjit_status(Call&)> invoke;
  std::vector<Mutation> specific;
  std::function<void(Call&)> zero_size;  // turns the call into a documented no-op
  // False when the float scalars are ignored in this call (per-row tensors given instead).
  bool check_floats = true;
};

Arg arg(const std::string& name, int slot, std::vector<int64_t> shape, const char* dtype,
        bool nullable = false) {
  return Arg{name, make_tensor(addr(slot), std::move(shape), dl_dtype(dtype)), nullable, false};
}

// Replaces a tensor's shape (and drops its strides).
void reshape(Arg& a, std::vector<int64_t> shape) {
  a.t = make_tensor(a.t.t.data, std::move(shape), a.t.t.dtype);
}

void set_strides(Arg& a, std::vector<int64_t> strides) {
  a.t.strides = std::move(strides);
  a.t.t.strides = a.t.strides.data();
}

std::vector<int64_t> compact_strides(const Arg& a) {
  std::vector<int64_t> s(a.t.shape.size());
  int64_t st = 1;
  for (size_t i = s.size(); i-- > 0;) {
    s[i] = st;
    st *= std::max<int64_t>(a.t.shape[i], 1);
  }
  return s;
}

// Every generic breakage of tensor argument `i` of a call.
std::vector<Mutation> tensor_mutations(const Call& proto, size_t i) {
  const Arg& a0 = proto.tensors[i];
  const std::string nm = a0.name;
  std::vector<Mutation> m;
  auto add = [&](std::string what, std::function<void(Arg&)> f) {
    m.push_back({nm + ": " + what, [i, f](Call& c) { f(c.tensors[i]); }, nm});
  };
  if (!a0.nullable) add("NULL", [](Arg& a) { a.null = true; });
  add("NULL data with elements", [](Arg& a) { a.t.t.data = nullptr; });
  add("NULL shape", [](Arg& a) { a.t.t.shape = nullptr; });
  add("ndim 0", [](Arg& a) { a.t.t.ndim = 0; });
  add("ndim -1", [](Arg& a) { a.t.t.ndim = -1; });
  add("ndim 9", [](Arg& a) {
    std::vector<int64_t> s(9 - a.t.shape.size(), 1);
    s.insert(s.end(), a.t.shape.begin(), a.t.shape.end());
    reshape(a, s);
  });
  add("ndim INT_MAX", [](Arg& a) { a.t.t.ndim = INT_MAX; });
  add("dim 0 negative", [](Arg& a) { a.t.shape[0] = -1; });
  add("dim 0 INT64_MIN", [](Arg& a) { a.t.shape[0] = INT64_MIN; });
  add("element count overflows int64", [](Arg& a) {
    for (auto& d : a.t.shape) d = int64_t{1} << 40;
    if (a.t.shape.size() == 1) a.t.shape[0] = INT64_MAX;  // then the byte count overflows
  });
  add("byte count overflows int64", [](Arg& a) {
    for (auto& d : a.t.shape) d = 1;
    a.t.shape.back() = INT64_MAX / 2 + 1;
  });
  if (!a0.any_dtype) {
    add("dtype code opaque handle", [](Arg& a) { a.t.t.dtype = {kDLOpaqueHandle, 64, 1}; });
    add("dtype code 200", [](Arg& a) { a.t.t.dtype.code = 200; });
    if (!a0.bool_ok) {
      add("dtype code 6 (bool in DLPack 0.8+)", [](Arg& a) { a.t.t.dtype = {6, 8, 1}; });
    }
    add("dtype bits 0", [](Arg& a) { a.t.t.dtype.bits = 0; });
    if (a0.t.t.dtype.bits != 8) {
      add("dtype bits 8 (fp8-like)", [](Arg& a) { a.t.t.dtype.bits = 8; });
    }
    add("dtype bits 24", [](Arg& a) { a.t.t.dtype.bits = 24; });
    add("lanes 0", [](Arg& a) { a.t.t.dtype.lanes = 0; });
    add("lanes 2", [](Arg& a) { a.t.t.dtype.lanes = 2; });
    add("lanes 65535", [](Arg& a) { a.t.t.dtype.lanes = 65535; });
  }
  add("host memory (kDLCPU)", [](Arg& a) { a.t.t.device.device_type = kDLCPU; });
  add("pinned host memory (kDLCUDAHost)", [](Arg& a) { a.t.t.device.device_type = kDLCUDAHost; });
  add("ROCm device", [](Arg& a) { a.t.t.device.device_type = kDLROCM; });
  add("device type 0", [](Arg& a) { a.t.t.device.device_type = static_cast<DLDeviceType>(0); });
  add("device type 999", [](Arg& a) { a.t.t.device.device_type = static_cast<DLDeviceType>(999); });
  add("device id -1", [](Arg& a) { a.t.t.device.device_id = -1; });
  add("device id INT_MIN", [](Arg& a) { a.t.t.device.device_id = INT_MIN; });
  // Whichever check meets the mismatch first, its message names both sides, so this one too.
  add("device id 1 beside cuda:0", [](Arg& a) { a.t.t.device.device_id = 1; });
  add("last dim stride 2", [](Arg& a) {
    auto s = compact_strides(a);
    for (auto& x : s) x *= 2;
    if (a.t.shape.back() < 2) a.t.shape.back() = 2;  // a size-1 dim may carry any stride
    set_strides(a, s);
  });
  add("last dim stride 0 (broadcast)", [](Arg& a) {
    auto s = compact_strides(a);
    s.back() = 0;
    if (a.t.shape.back() < 2) a.t.shape.back() = 2;
    set_strides(a, s);
  });
  add("last dim stride -1", [](Arg& a) {
    auto s = compact_strides(a);
    s.back() = -1;
    if (a.t.shape.back() < 2) a.t.shape.back() = 2;
    set_strides(a, s);
  });
  if (a0.t.shape.size() >= 2 && a0.t.shape[0] > 1) {
    add("dim 0 stride negative", [](Arg& a) {
      auto s = compact_strides(a);
      s[0] = -s[0];
      set_strides(a, s);
    });
    add("dim 0 stride overflows", [](Arg& a) {
      auto s = compact_strides(a);
      s[0] = INT64_MAX / 2;
      set_strides(a, s);
    });
  }
  if (a0.t.t.dtype.bits > 8 && !a0.any_dtype) {  // 1-byte elements align anywhere
    add("data misaligned by 1 byte",
        [](Arg& a) { a.t.t.data = static_cast<char*>(a.t.t.data) + 1; });
    add("byte_offset 1", [](Arg& a) { a.t.t.byte_offset = 1; });
  }
  add("byte_offset wraps the address space to NULL", [](Arg& a) {
    a.t.t.byte_offset = ~static_cast<uint64_t>(reinterpret_cast<uintptr_t>(a.t.t.data)) + 1;
  });
  add("byte_offset wraps past the top of the address space",
      [](Arg& a) { a.t.t.byte_offset = UINT64_MAX - 255; });
  return m;
}

// NaN and both infinities for every float scalar.
std::vector<Mutation> float_mutations(const Call& proto) {
  std::vector<Mutation> m;
  for (size_t i = 0; i < proto.floats.size(); ++i) {
    const std::string nm = proto.floats[i].first;
    for (float v :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::signaling_NaN()}) {
      std::ostringstream what;
      what << nm << " = " << v;
      m.push_back({what.str(), [i, v](Call& c) { c.floats[i].second = v; }, nm});
    }
  }
  return m;
}

Mutation set_int(const std::string& name, int v) {
  return {name + " = " + std::to_string(v), [name, v](Call& c) { c.integer(name) = v; }, name};
}
Mutation set_float(const std::string& name, float v) {
  std::ostringstream what;
  what << name << " = " << v;
  return {what.str(), [name, v](Call& c) { c.scalar(name) = v; }, name};
}

// ---- The table ---------------------------------------------------------------------------------

// out = rmsnorm(input) * weight, and the Gemma variant.
Api rmsnorm_api(const std::string& name,
                kjit_status (*fn)(const DLTensor*, const DLTensor*, DLTensor*, float, void*)) {
  Api api;
  api.name = name;
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 64}, "bf16"));
    c.tensors.push_back(arg("weight", 2, {64}, "bf16"));
    c.tensors.push_back(arg("out", 3, {4, 64}, "bf16"));
    c.floats = {{"eps", 1e-6f}};
    return c;
  };
  api.invoke = [fn](Call& c) { return fn(c.t(0), c.t(1), c.t(2), c.f(0), nullptr); };
  api.specific = {
      {"weight of the wrong length", [](Call& c) { reshape(c.arg("weight"), {63}); }, "weight"},
      {"weight 2-D",
       [](Call& c) {
         reshape(c.arg("weight"), {1, 64});
       },
       "weight"},
      {"out of another row count",
       [](Call& c) {
         reshape(c.arg("out"), {5, 64});
       },
       "out"},
      {"out of another width",
       [](Call& c) {
         reshape(c.arg("out"), {4, 32});
       },
       "out"},
      {"out of another dtype", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp16"); }, "out"},
      {"weight of another dtype", [](Call& c) { c.arg("weight").t.t.dtype = dl_dtype("fp32"); },
       "weight"},
      {"int32 tensors",
       [](Call& c) {
         for (auto& a : c.tensors) a.t.t.dtype = dl_dtype("int32");
       },
       ""},
      {"out partially overlaps input",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("input").t.t.data) + 64; },
       "out"},
      {"out overlaps weight", [](Call& c) { c.arg("out").t.t.data = c.arg("weight").t.t.data; },
       "out"},
      {"input rows overlap",
       [](Call& c) {
         set_strides(c.arg("input"), {32, 1});
       },
       "input"},
      {"input dims that do not collapse into rows",
       [](Call& c) {
         reshape(c.arg("input"), {2, 2, 64});
         set_strides(c.arg("input"), {1000, 64, 1});
         reshape(c.arg("out"), {2, 2, 64});
       },
       "input"},
      set_float("eps", -1e-6f),
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 64});
    reshape(c.arg("out"), {0, 64});
  };
  return api;
}

// input, residual in place.
Api fused_api(const std::string& name,
              kjit_status (*fn)(const DLTensor*, DLTensor*, DLTensor*, float, void*)) {
  Api api;
  api.name = name;
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("weight", 3, {64}, "fp16"));
    c.tensors.push_back(arg("input", 1, {4, 64}, "fp16"));
    c.tensors.push_back(arg("residual", 2, {4, 64}, "fp16"));
    c.floats = {{"eps", 1e-6f}};
    return c;
  };
  api.invoke = [fn](Call& c) { return fn(c.t(0), c.t(1), c.t(2), c.f(0), nullptr); };
  api.specific = {
      {"residual of another shape",
       [](Call& c) {
         reshape(c.arg("residual"), {5, 64});
       },
       "residual"},
      {"weight of the wrong length", [](Call& c) { reshape(c.arg("weight"), {65}); }, "weight"},
      {"residual is input (same view)",
       [](Call& c) { c.arg("residual").t.t.data = c.arg("input").t.t.data; }, "residual"},
      {"residual partially overlaps input",
       [](Call& c) {
         c.arg("residual").t.t.data = static_cast<char*>(c.arg("input").t.t.data) + 128;
       },
       "residual"},
      {"weight overlaps input", [](Call& c) { c.arg("weight").t.t.data = c.arg("input").t.t.data; },
       "weight"},
      {"residual of another dtype", [](Call& c) { c.arg("residual").t.t.dtype = dl_dtype("bf16"); },
       "residual"},
      set_float("eps", -1.0f),
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 64});
    reshape(c.arg("residual"), {0, 64});
  };
  return api;
}

Api layernorm_api() {
  Api api;
  api.name = "kjit_layernorm";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 64}, "bf16"));
    c.tensors.push_back(arg("gamma", 2, {64}, "fp32"));
    c.tensors.push_back(arg("beta", 3, {64}, "fp32"));
    c.tensors.push_back(arg("out", 4, {4, 64}, "bf16"));
    c.floats = {{"eps", 1e-5f}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_layernorm(c.t(0), c.t(1), c.t(2), c.t(3), c.f(0), nullptr);
  };
  api.specific = {
      {"gamma of the wrong length", [](Call& c) { reshape(c.arg("gamma"), {63}); }, "gamma"},
      {"beta of another dtype than gamma",
       [](Call& c) { c.arg("beta").t.t.dtype = dl_dtype("bf16"); }, "beta"},
      {"fp16 gamma beside bf16 input",
       [](Call& c) {
         c.arg("gamma").t.t.dtype = dl_dtype("fp16");
         c.arg("beta").t.t.dtype = dl_dtype("fp16");
       },
       ""},
      {"out of another shape",
       [](Call& c) {
         reshape(c.arg("out"), {4, 65});
       },
       "out"},
      {"out overlaps gamma", [](Call& c) { c.arg("out").t.t.data = c.arg("gamma").t.t.data; },
       "out"},
      {"out partially overlaps input",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("input").t.t.data) + 2; },
       "out"},
      set_float("eps", -1.0f),
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 64});
    reshape(c.arg("out"), {0, 64});
  };
  return api;
}

Api act_api(const std::string& name, kjit_status (*fn)(const DLTensor*, DLTensor*, void*)) {
  Api api;
  api.name = name;
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 128}, "bf16"));
    c.tensors.push_back(arg("out", 2, {4, 64}, "bf16"));
    return c;
  };
  api.invoke = [fn](Call& c) { return fn(c.t(0), c.t(1), nullptr); };
  api.specific = {
      {"input of odd width",
       [](Call& c) {
         reshape(c.arg("input"), {4, 127});
       },
       ""},
      {"out as wide as input",
       [](Call& c) {
         reshape(c.arg("out"), {4, 128});
       },
       "out"},
      {"out of another row count",
       [](Call& c) {
         reshape(c.arg("out"), {3, 64});
       },
       "out"},
      {"out of another dtype", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp32"); }, "out"},
      {"out is input (in place)", [](Call& c) { c.arg("out").t.t.data = c.arg("input").t.t.data; },
       "out"},
      {"out inside input",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("input").t.t.data) + 256; },
       "out"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 128});
    reshape(c.arg("out"), {0, 64});
  };
  return api;
}

// The gated activations share one signature and one set of rules, so every `kjit_*_and_mul` row
// of the entry-point table (src/api/entry_points.hpp) gets act_api's cases: a new activation
// needs no line here.
template <typename Fn>
void add_activation(std::vector<Api>& t, const std::string& name, Fn fn) {
  if constexpr (std::is_same_v<Fn, kjit_status (*)(const DLTensor*, DLTensor*, void*)>) {
    const std::string suffix = "_and_mul";
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      t.push_back(act_api(name, fn));
    }
  }
}

void add_activations(std::vector<Api>& t) {
  const size_t before = t.size();
#define KJIT_HOSTILE_ACTIVATION(fn, args) add_activation(t, #fn, &fn);
  KJIT_TENSOR_ENTRY_POINTS(KJIT_HOSTILE_ACTIVATION)
#undef KJIT_HOSTILE_ACTIVATION
  if (t.size() < before + 3) throw std::logic_error("the activation rows went missing");
}

Call rope_call(bool llama31) {
  Call c;
  c.tensors.push_back(arg("q", 1, {4, 8, 128}, "bf16"));
  c.tensors.push_back(arg("k", 2, {4, 2, 128}, "bf16"));
  c.tensors.push_back(arg("pos_ids", 5, {4}, "int32"));
  c.tensors.push_back(arg("q_out", 3, {4, 8, 128}, "bf16"));
  c.tensors.push_back(arg("k_out", 4, {4, 2, 128}, "bf16"));
  c.ints = {{"rotary_dim", 0}, {"layout", KJIT_ROPE_NEOX}};
  c.floats = {{"rope_scale", 1.0f}, {"rope_theta", 10000.0f}};
  if (llama31) {
    c.floats.push_back({"low_freq_factor", 1.0f});
    c.floats.push_back({"high_freq_factor", 4.0f});
    c.floats.push_back({"old_context_len", 8192.0f});
  }
  return c;
}

// The RoPE scalars' breakages (head_dim 128), for every entry point that takes them; `layout`
// names its kjit_rope_layout argument.
std::vector<Mutation> rope_scalar_mutations(const std::string& layout) {
  return {set_int("rotary_dim", -2),
          set_int("rotary_dim", 3),
          set_int("rotary_dim", 130),
          set_int("rotary_dim", INT_MAX),
          set_int("rotary_dim", INT_MIN),
          set_int(layout, 2),
          set_int(layout, -1),
          set_float("rope_scale", 0.0f),
          set_float("rope_scale", -1.0f),
          set_float("rope_theta", 0.0f),
          set_float("rope_theta", -10000.0f)};
}

std::vector<Mutation> rope_mutations() {
  std::vector<Mutation> m = rope_scalar_mutations("layout");
  const std::vector<Mutation> own = {
      {"q_out of another shape",
       [](Call& c) {
         reshape(c.arg("q_out"), {4, 8, 64});
       },
       "q_out"},
      {"k of another head_dim",
       [](Call& c) {
         reshape(c.arg("k"), {4, 2, 64});
       },
       "k"},
      {"k of another token count",
       [](Call& c) {
         reshape(c.arg("k"), {5, 2, 128});
       },
       "k"},
      {"q 2-D",
       [](Call& c) {
         reshape(c.arg("q"), {4, 1024});
       },
       "q"},
      {"pos_ids of another length", [](Call& c) { reshape(c.arg("pos_ids"), {3}); }, "pos_ids"},
      {"pos_ids fp32", [](Call& c) { c.arg("pos_ids").t.t.dtype = dl_dtype("fp32"); }, "pos_ids"},
      {"pos_ids strided", [](Call& c) { set_strides(c.arg("pos_ids"), {2}); }, "pos_ids"},
      {"fp32 q, k and outputs",
       [](Call& c) {
         for (const char* n : {"q", "k", "q_out", "k_out"}) c.arg(n).t.t.dtype = dl_dtype("fp32");
       },
       ""},
      {"head_dim 2048",
       [](Call& c) {
         reshape(c.arg("q"), {4, 8, 2048});
         reshape(c.arg("q_out"), {4, 8, 2048});
         reshape(c.arg("k"), {4, 2, 2048});
         reshape(c.arg("k_out"), {4, 2, 2048});
       },
       ""},
      {"q_out overlaps k", [](Call& c) { c.arg("q_out").t.t.data = c.arg("k").t.t.data; }, "q_out"},
      {"k_out overlaps pos_ids",
       [](Call& c) { c.arg("k_out").t.t.data = c.arg("pos_ids").t.t.data; }, "k_out"},
      {"q_out heads overlap each other",
       [](Call& c) {
         set_strides(c.arg("q_out"), {8 * 128, 64, 1});
       },
       "q_out"},
  };
  m.insert(m.end(), own.begin(), own.end());
  return m;
}

Api rope_api() {
  Api api;
  api.name = "kjit_apply_rope_pos_ids";
  api.make = [] { return rope_call(false); };
  api.invoke = [](Call& c) {
    return kjit_apply_rope_pos_ids(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.n(0),
                                   static_cast<kjit_rope_layout>(c.n(1)), c.f(0), c.f(1), nullptr);
  };
  api.specific = rope_mutations();
  api.zero_size = [](Call& c) {
    reshape(c.arg("q"), {0, 8, 128});
    reshape(c.arg("k"), {0, 2, 128});
    reshape(c.arg("q_out"), {0, 8, 128});
    reshape(c.arg("k_out"), {0, 2, 128});
    reshape(c.arg("pos_ids"), {0});
  };
  return api;
}

Api llama31_rope_api() {
  Api api = rope_api();
  api.name = "kjit_apply_llama31_rope_pos_ids";
  api.make = [] { return rope_call(true); };
  api.invoke = [](Call& c) {
    return kjit_apply_llama31_rope_pos_ids(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.n(0),
                                           static_cast<kjit_rope_layout>(c.n(1)), c.f(0), c.f(1),
                                           c.f(2), c.f(3), c.f(4), nullptr);
  };
  api.specific.push_back(set_float("low_freq_factor", 0.0f));
  api.specific.push_back(set_float("high_freq_factor", 1.0f));  // must exceed low_freq_factor
  api.specific.push_back(set_float("high_freq_factor", 0.5f));
  api.specific.push_back(set_float("old_context_len", 0.0f));
  api.specific.push_back(set_float("old_context_len", -8192.0f));
  return api;
}

Api cos_sin_cache_api() {
  Api api;
  api.name = "kjit_apply_rope_with_cos_sin_cache";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("positions", 1, {4}, "int64"));
    c.tensors.push_back(arg("cos_sin_cache", 4, {4096, 128}, "fp32"));
    c.tensors.push_back(arg("q", 2, {4, 8 * 128}, "bf16"));
    c.tensors.push_back(arg("k", 3, {4, 2 * 128}, "bf16", /*nullable=*/true));
    c.ints = {{"head_size", 128}, {"layout", KJIT_ROPE_NEOX}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_apply_rope_with_cos_sin_cache(c.t(0), c.t(1), c.t(2), c.t(3), c.n(0),
                                              static_cast<kjit_rope_layout>(c.n(1)), nullptr);
  };
  api.specific = {
      set_int("head_size", 0),
      set_int("head_size", -128),
      set_int("head_size", 100),
      set_int("head_size", 2048),
      set_int("head_size", INT_MAX),
      set_int("layout", 2),
      set_int("layout", -1),
      {"cos_sin_cache of odd width",
       [](Call& c) {
         reshape(c.arg("cos_sin_cache"), {4096, 127});
       },
       "cos_sin_cache"},
      {"cos_sin_cache wider than head_size",
       [](Call& c) {
         reshape(c.arg("cos_sin_cache"), {4096, 256});
       },
       "cos_sin_cache"},
      {"cos_sin_cache fp16 beside bf16 q",
       [](Call& c) { c.arg("cos_sin_cache").t.t.dtype = dl_dtype("fp16"); }, "cos_sin_cache"},
      {"cos_sin_cache 1-D", [](Call& c) { reshape(c.arg("cos_sin_cache"), {4096 * 128}); },
       "cos_sin_cache"},
      {"positions of another length", [](Call& c) { reshape(c.arg("positions"), {5}); },
       "positions"},
      {"positions fp32", [](Call& c) { c.arg("positions").t.t.dtype = dl_dtype("fp32"); },
       "positions"},
      {"k of another token count",
       [](Call& c) {
         reshape(c.arg("k"), {3, 256});
       },
       "k"},
      {"k of another dtype", [](Call& c) { c.arg("k").t.t.dtype = dl_dtype("fp16"); }, "k"},
      {"k is q", [](Call& c) { c.arg("k").t.t.data = c.arg("q").t.t.data; }, "k"},
      {"q width not a multiple of head_size",
       [](Call& c) {
         reshape(c.arg("q"), {4, 1000});
       },
       "q"},
      {"q overlaps positions", [](Call& c) { c.arg("q").t.t.data = c.arg("positions").t.t.data; },
       "q"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("positions"), {0});
    reshape(c.arg("q"), {0, 8 * 128});
    reshape(c.arg("k"), {0, 2 * 128});
  };
  return api;
}

// The valid append call: 5 tokens, 2 kv heads of 128, 3 requests, 16 pages of 16 slots (NHD);
// with `fp8`, e4m3 caches and per-head scales (kjit_append_paged_kv_cache_fp8's arguments).
Call append_kv_call(bool fp8) {
  Call c;
  c.tensors.push_back(arg("append_k", 1, {5, 2, 128}, "bf16"));
  c.tensors.push_back(arg("append_v", 2, {5, 2, 128}, "bf16"));
  c.tensors.push_back(arg("batch_indices", 3, {5}, "int32"));
  c.tensors.push_back(arg("positions", 4, {5}, "int32"));
  c.tensors.push_back(arg("kv_indices", 7, {7}, "int32"));
  c.tensors.push_back(arg("kv_indptr", 8, {4}, "int32"));
  c.tensors.push_back(arg("kv_last_page_len", 9, {3}, "int32"));
  if (fp8) {
    c.tensors.push_back(arg("k_scale", 10, {2}, "fp32"));
    c.tensors.push_back(arg("v_scale", 11, {2}, "fp32"));
  }
  const char* cache = fp8 ? "e4m3" : "bf16";
  c.tensors.push_back(arg("paged_k_cache", 5, {16, 16, 2, 128}, cache));
  c.tensors.push_back(arg("paged_v_cache", 6, {16, 16, 2, 128}, cache));
  c.ints = {{"layout", KJIT_KV_LAYOUT_NHD}};
  return c;
}

void append_kv_zero_size(Call& c) {
  reshape(c.arg("append_k"), {0, 2, 128});
  reshape(c.arg("append_v"), {0, 2, 128});
  reshape(c.arg("batch_indices"), {0});
  reshape(c.arg("positions"), {0});
}

Api append_kv_api() {
  Api api;
  api.name = "kjit_append_paged_kv_cache";
  api.make = [] { return append_kv_call(false); };
  api.invoke = [](Call& c) {
    return kjit_append_paged_kv_cache(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6),
                                      c.t(7), c.t(8), static_cast<kjit_kv_layout>(c.n(0)), nullptr);
  };
  api.specific = {
      set_int("layout", 2),
      set_int("layout", -1),
      {"append_v of another shape",
       [](Call& c) {
         reshape(c.arg("append_v"), {5, 2, 64});
       },
       "append_v"},
      {"append_k 2-D",
       [](Call& c) {
         reshape(c.arg("append_k"), {5, 256});
       },
       "append_k"},
      {"batch_indices int64", [](Call& c) { c.arg("batch_indices").t.t.dtype = dl_dtype("int64"); },
       "batch_indices"},
      {"positions of another length", [](Call& c) { reshape(c.arg("positions"), {4}); },
       "positions"},
      {"kv_indptr fp32", [](Call& c) { c.arg("kv_indptr").t.t.dtype = dl_dtype("fp32"); },
       "kv_indptr"},
      {"kv_last_page_len of another batch",
       [](Call& c) { reshape(c.arg("kv_last_page_len"), {4}); }, "kv_last_page_len"},
      {"paged caches of another head_dim",
       [](Call& c) {
         reshape(c.arg("paged_k_cache"), {16, 16, 2, 64});
         reshape(c.arg("paged_v_cache"), {16, 16, 2, 64});
       },
       ""},
      {"paged_v_cache of another shape",
       [](Call& c) {
         reshape(c.arg("paged_v_cache"), {8, 16, 2, 128});
       },
       "paged_v_cache"},
      {"paged caches fp8",
       [](Call& c) {
         for (const char* n : {"append_k", "append_v", "paged_k_cache", "paged_v_cache"}) {
           c.arg(n).t.t.dtype = DLDataType{kDLFloat, 8, 1};
         }
       },
       ""},
      {"paged_v_cache is paged_k_cache",
       [](Call& c) { c.arg("paged_v_cache").t.t.data = c.arg("paged_k_cache").t.t.data; },
       "paged_v_cache"},
      {"paged_k_cache overlaps append_k",
       [](Call& c) { c.arg("paged_k_cache").t.t.data = c.arg("append_k").t.t.data; },
       "paged_k_cache"},
      {"paged_k_cache slots overlap each other",
       [](Call& c) {
         set_strides(c.arg("paged_k_cache"), {16 * 2 * 128, 2 * 128, 64, 1});
       },
       "paged_k_cache"},
  };
  api.zero_size = append_kv_zero_size;
  return api;
}

// kjit_append_paged_kv_cache_fp8: the call above into e4m3 caches with per-head scales.
Api append_kv_fp8_api() {
  Api api;
  api.name = "kjit_append_paged_kv_cache_fp8";
  api.make = [] { return append_kv_call(true); };
  api.invoke = [](Call& c) {
    return kjit_append_paged_kv_cache_fp8(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6),
                                          c.t(7), c.t(8), c.t(9), c.t(10),
                                          static_cast<kjit_kv_layout>(c.n(0)), nullptr);
  };
  api.specific = {
      set_int("layout", 2),
      {"bf16 caches",
       [](Call& c) {
         c.arg("paged_k_cache").t.t.dtype = c.arg("paged_v_cache").t.t.dtype = dl_dtype("bf16");
       },
       "paged_k_cache"},
      {"k_scale fp16", [](Call& c) { c.arg("k_scale").t.t.dtype = dl_dtype("fp16"); }, "k_scale"},
      {"v_scale of 3", [](Call& c) { reshape(c.arg("v_scale"), {3}); }, "v_scale"},
      {"k_scale per tensor, v_scale per head", [](Call& c) { reshape(c.arg("k_scale"), {1}); },
       "v_scale"},
      {"paged_v_cache over v_scale",
       [](Call& c) { c.arg("paged_v_cache").t.t.data = c.arg("v_scale").t.t.data; },
       "paged_v_cache"},
  };
  api.zero_size = append_kv_zero_size;
  return api;
}

// The valid fused RoPE + append call: 5 tokens, 8 q heads and 2 kv heads of 128, the append
// call's page table and caches; with `fp8`, e4m3 caches and per-head scales, else no scales.
Call rope_append_call(bool fp8) {
  Call c;
  c.tensors.push_back(arg("q", 12, {5, 8, 128}, "bf16"));
  c.tensors.push_back(arg("k", 1, {5, 2, 128}, "bf16"));
  c.tensors.push_back(arg("v", 2, {5, 2, 128}, "bf16"));
  c.tensors.push_back(arg("pos_ids", 13, {5}, "int64"));
  c.tensors.push_back(arg("batch_indices", 3, {5}, "int32"));
  c.tensors.push_back(arg("positions", 4, {5}, "int32"));
  c.tensors.push_back(arg("kv_indices", 7, {7}, "int32"));
  c.tensors.push_back(arg("kv_indptr", 8, {4}, "int32"));
  c.tensors.push_back(arg("kv_last_page_len", 9, {3}, "int32"));
  c.tensors.push_back(arg("k_scale", 10, {2}, "fp32", /*nullable=*/true));
  c.tensors.push_back(arg("v_scale", 11, {2}, "fp32", /*nullable=*/true));
  c.tensors.back().null = c.tensors[c.tensors.size() - 2].null = !fp8;
  c.tensors.push_back(arg("q_out", 14, {5, 8, 128}, "bf16"));
  const char* cache = fp8 ? "e4m3" : "bf16";
  c.tensors.push_back(arg("paged_k_cache", 5, {16, 16, 2, 128}, cache));
  c.tensors.push_back(arg("paged_v_cache", 6, {16, 16, 2, 128}, cache));
  c.ints = {{"rotary_dim", 0}, {"rope_layout", KJIT_ROPE_NEOX}, {"kv_layout", KJIT_KV_LAYOUT_NHD}};
  c.floats = {{"rope_scale", 1.0f}, {"rope_theta", 10000.0f}};
  return c;
}

Api rope_append_api(bool fp8) {
  Api api;
  api.name = "kjit_rope_append_paged_kv_cache";
  api.make = [fp8] { return rope_append_call(fp8); };
  api.invoke = [](Call& c) {
    return kjit_rope_append_paged_kv_cache(
        c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6), c.t(7), c.t(8), c.t(9), c.t(10),
        c.t(11), c.t(12), c.t(13), c.n(0), static_cast<kjit_rope_layout>(c.n(1)), c.f(0), c.f(1),
        static_cast<kjit_kv_layout>(c.n(2)), nullptr);
  };
  api.specific = rope_scalar_mutations("rope_layout");
  const std::vector<Mutation> own = {
      set_int("kv_layout", 2),
      set_int("kv_layout", -1),
      {"v of another shape",
       [](Call& c) {
         reshape(c.arg("v"), {5, 3, 128});
       },
       "v"},
      {"k of another head_dim",
       [](Call& c) {
         reshape(c.arg("k"), {5, 2, 64});
       },
       "k"},
      {"q of another token count",
       [](Call& c) {
         reshape(c.arg("q"), {4, 8, 128});
       },
       ""},
      {"q_out of another shape",
       [](Call& c) {
         reshape(c.arg("q_out"), {5, 4, 128});
       },
       "q_out"},
      {"v fp16 beside bf16 q", [](Call& c) { c.arg("v").t.t.dtype = dl_dtype("fp16"); }, "v"},
      {"pos_ids of another length", [](Call& c) { reshape(c.arg("pos_ids"), {4}); }, "pos_ids"},
      {"positions of another length", [](Call& c) { reshape(c.arg("positions"), {4}); },
       "positions"},
      {"kv_last_page_len of another batch",
       [](Call& c) { reshape(c.arg("kv_last_page_len"), {4}); }, "kv_last_page_len"},
      {"fp32 q, k, v and outputs",
       [](Call& c) {
         for (const char* n : {"q", "k", "v", "q_out"}) c.arg(n).t.t.dtype = dl_dtype("fp32");
       },
       ""},
      {"q_out overlaps v", [](Call& c) { c.arg("q_out").t.t.data = c.arg("v").t.t.data; }, "q_out"},
      {"q_out overlaps kv_indptr",
       [](Call& c) { c.arg("q_out").t.t.data = c.arg("kv_indptr").t.t.data; }, "q_out"},
      {"paged_k_cache overlaps q",
       [](Call& c) { c.arg("paged_k_cache").t.t.data = c.arg("q").t.t.data; }, "paged_k_cache"},
      {"paged_v_cache overlaps q_out",
       [](Call& c) { c.arg("paged_v_cache").t.t.data = c.arg("q_out").t.t.data; }, "paged_v_cache"},
      {"paged caches of another head count",
       [](Call& c) {
         reshape(c.arg("paged_k_cache"), {16, 16, 4, 128});
         reshape(c.arg("paged_v_cache"), {16, 16, 4, 128});
       },
       "paged_k_cache"},
  };
  api.specific.insert(api.specific.end(), own.begin(), own.end());
  if (fp8) {
    api.specific.push_back(
        {"k_scale NULL alone", [](Call& c) { c.arg("k_scale").null = true; }, "k_scale"});
    api.specific.push_back(
        {"v_scale NULL alone", [](Call& c) { c.arg("v_scale").null = true; }, "v_scale"});
    api.specific.push_back({"bf16 caches with scales",
                            [](Call& c) {
                              c.arg("paged_k_cache").t.t.dtype = dl_dtype("bf16");
                              c.arg("paged_v_cache").t.t.dtype = dl_dtype("bf16");
                            },
                            "paged_k_cache"});
    api.specific.push_back(
        {"v_scale of 3", [](Call& c) { reshape(c.arg("v_scale"), {3}); }, "v_scale"});
  } else {
    api.specific.push_back({"e4m3 caches without scales",
                            [](Call& c) {
                              c.arg("paged_k_cache").t.t.dtype = dl_dtype("e4m3");
                              c.arg("paged_v_cache").t.t.dtype = dl_dtype("e4m3");
                            },
                            "paged_k_cache"});
  }
  api.zero_size = [](Call& c) {
    reshape(c.arg("q"), {0, 8, 128});
    reshape(c.arg("k"), {0, 2, 128});
    reshape(c.arg("v"), {0, 2, 128});
    reshape(c.arg("q_out"), {0, 8, 128});
    for (const char* n : {"pos_ids", "batch_indices", "positions"}) reshape(c.arg(n), {0});
  };
  return api;
}

// kjit_llama31_rope_append_paged_kv_cache: rope_append_api's call and breakages, with Llama 3.1's
// three scalars and theirs.
Api llama31_rope_append_api(bool fp8) {
  Api api = rope_append_api(fp8);
  api.name = "kjit_llama31_rope_append_paged_kv_cache";
  api.make = [fp8] {
    Call c = rope_append_call(fp8);
    c.floats.push_back({"low_freq_factor", 1.0f});
    c.floats.push_back({"high_freq_factor", 4.0f});
    c.floats.push_back({"old_context_len", 8192.0f});
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_llama31_rope_append_paged_kv_cache(
        c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6), c.t(7), c.t(8), c.t(9), c.t(10),
        c.t(11), c.t(12), c.t(13), c.n(0), static_cast<kjit_rope_layout>(c.n(1)), c.f(0), c.f(1),
        c.f(2), c.f(3), c.f(4), static_cast<kjit_kv_layout>(c.n(2)), nullptr);
  };
  api.specific.push_back(set_float("low_freq_factor", 0.0f));
  api.specific.push_back(set_float("high_freq_factor", 1.0f));  // must exceed low_freq_factor
  api.specific.push_back(set_float("old_context_len", -8192.0f));
  return api;
}

// kjit_qk_rmsnorm_rope: q and k as the views of a fused qkv row (4 tokens, 8 q heads and 2 kv
// heads of 128: rows of 12 heads).
Api qk_norm_rope_api() {
  Api api;
  api.name = "kjit_qk_rmsnorm_rope";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("q_weight", 2, {128}, "bf16"));
    c.tensors.push_back(arg("k_weight", 3, {128}, "bf16"));
    c.tensors.push_back(arg("pos_ids", 4, {4}, "int32"));
    c.tensors.push_back(arg("q", 1, {4, 8, 128}, "bf16"));
    set_strides(c.tensors.back(), {12 * 128, 128, 1});
    c.tensors.push_back(arg("k", 1, {4, 2, 128}, "bf16"));
    c.tensors.back().t.t.data = static_cast<char*>(c.tensors.back().t.t.data) + 8 * 128 * 2;
    set_strides(c.tensors.back(), {12 * 128, 128, 1});
    c.ints = {{"rotary_dim", 0}, {"layout", KJIT_ROPE_NEOX}};
    c.floats = {{"eps", 1e-6f}, {"rope_scale", 1.0f}, {"rope_theta", 1e6f}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_qk_rmsnorm_rope(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.f(0), c.n(0),
                                static_cast<kjit_rope_layout>(c.n(1)), c.f(1), c.f(2), nullptr);
  };
  api.specific = rope_scalar_mutations("layout");
  const std::vector<Mutation> own = {
      set_float("eps", -1.0f),
      {"q_weight of another length", [](Call& c) { reshape(c.arg("q_weight"), {64}); }, "q_weight"},
      {"k_weight fp16", [](Call& c) { c.arg("k_weight").t.t.dtype = dl_dtype("fp16"); },
       "k_weight"},
      {"k of another head_dim",
       [](Call& c) {
         reshape(c.arg("k"), {4, 2, 64});
       },
       "k"},
      {"k of another token count",
       [](Call& c) {
         reshape(c.arg("k"), {5, 2, 128});
       },
       "k"},
      {"k overlaps q", [](Call& c) { c.arg("k").t.t.data = c.arg("q").t.t.data; }, "k"},
      {"q overlaps q_weight", [](Call& c) { c.arg("q_weight").t.t.data = c.arg("q").t.t.data; },
       "q"},
      {"pos_ids of another length", [](Call& c) { reshape(c.arg("pos_ids"), {3}); }, "pos_ids"},
      {"fp32 q, k and weights",
       [](Call& c) {
         for (const char* n : {"q", "k", "q_weight", "k_weight"}) {
           c.arg(n).t.t.dtype = dl_dtype("fp32");
         }
       },
       ""},
      {"q heads overlap each other",
       [](Call& c) {
         set_strides(c.arg("q"), {12 * 128, 64, 1});
       },
       "q"},
  };
  api.specific.insert(api.specific.end(), own.begin(), own.end());
  api.zero_size = [](Call& c) {
    reshape(c.arg("q"), {0, 8, 128});
    reshape(c.arg("k"), {0, 2, 128});
    reshape(c.arg("pos_ids"), {0});
  };
  return api;
}

// kjit_apply_rope / kjit_apply_llama31_rope: 4 tokens of 2 requests (indptr [3], offsets [2]),
// 8 q heads and 2 kv heads of 128.
Api rope_indptr_api(bool llama31) {
  Api api;
  api.name = llama31 ? "kjit_apply_llama31_rope" : "kjit_apply_rope";
  api.make = [llama31] {
    Call c = rope_call(llama31);
    c.tensors.erase(c.tensors.begin() + 2);  // pos_ids
    c.tensors.insert(c.tensors.begin() + 2, arg("indptr", 5, {3}, "int32"));
    c.tensors.insert(c.tensors.begin() + 3, arg("offsets", 6, {2}, "int32"));
    return c;
  };
  api.invoke = [llama31](Call& c) {
    const auto layout = static_cast<kjit_rope_layout>(c.n(1));
    if (llama31) {
      return kjit_apply_llama31_rope(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.n(0), layout,
                                     c.f(0), c.f(1), c.f(2), c.f(3), c.f(4), nullptr);
    }
    return kjit_apply_rope(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.n(0), layout, c.f(0),
                           c.f(1), nullptr);
  };
  api.specific = rope_scalar_mutations("layout");
  const std::vector<Mutation> own = {
      {"q_out of another shape",
       [](Call& c) {
         reshape(c.arg("q_out"), {4, 8, 64});
       },
       "q_out"},
      {"k of another token count",
       [](Call& c) {
         reshape(c.arg("k"), {5, 2, 128});
       },
       "k"},
      {"indptr empty", [](Call& c) { reshape(c.arg("indptr"), {0}); }, "indptr"},
      {"indptr 2-D",
       [](Call& c) {
         reshape(c.arg("indptr"), {3, 1});
       },
       "indptr"},
      {"indptr fp32", [](Call& c) { c.arg("indptr").t.t.dtype = dl_dtype("fp32"); }, "indptr"},
      {"indptr strided", [](Call& c) { set_strides(c.arg("indptr"), {2}); }, "indptr"},
      {"offsets of another length", [](Call& c) { reshape(c.arg("offsets"), {3}); }, "offsets"},
      {"offsets int64, indptr int32",
       [](Call& c) { c.arg("offsets").t.t.dtype = dl_dtype("int64"); }, "offsets"},
      {"no request but tokens",
       [](Call& c) {
         reshape(c.arg("indptr"), {1});
         reshape(c.arg("offsets"), {0});
       },
       "indptr"},
      {"q_out overlaps indptr", [](Call& c) { c.arg("q_out").t.t.data = c.arg("indptr").t.t.data; },
       "q_out"},
      {"k_out overlaps offsets",
       [](Call& c) { c.arg("k_out").t.t.data = c.arg("offsets").t.t.data; }, "k_out"},
      {"fp32 q, k and outputs",
       [](Call& c) {
         for (const char* n : {"q", "k", "q_out", "k_out"}) c.arg(n).t.t.dtype = dl_dtype("fp32");
       },
       ""},
  };
  api.specific.insert(api.specific.end(), own.begin(), own.end());
  if (llama31) {
    api.specific.push_back(set_float("high_freq_factor", 0.5f));
    api.specific.push_back(set_float("old_context_len", 0.0f));
  }
  api.zero_size = [](Call& c) {
    reshape(c.arg("q"), {0, 8, 128});
    reshape(c.arg("k"), {0, 2, 128});
    reshape(c.arg("q_out"), {0, 8, 128});
    reshape(c.arg("k_out"), {0, 2, 128});
    reshape(c.arg("indptr"), {1});
    reshape(c.arg("offsets"), {0});
  };
  return api;
}

// kjit_top_k: 4 rows of 1000 bf16, k = 8.
Api top_k_api() {
  Api api;
  api.name = "kjit_top_k";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 1000}, "bf16"));
    c.tensors.push_back(arg("values", 2, {4, 8}, "bf16"));
    c.tensors.push_back(arg("indices", 3, {4, 8}, "int32"));
    c.ints = {{"k", 8}};
    return c;
  };
  api.invoke = [](Call& c) { return kjit_top_k(c.t(0), c.t(1), c.t(2), c.n(0), nullptr); };
  api.specific = {
      set_int("k", 0),
      set_int("k", -8),
      set_int("k", 1001),  // above the row length
      {"k above 1024 in a longer row",
       [](Call& c) {
         reshape(c.arg("input"), {4, 2000});
         reshape(c.arg("values"), {4, 1025});
         reshape(c.arg("indices"), {4, 1025});
         c.integer("k") = 1025;
       },
       "k"},
      {"values of another k",
       [](Call& c) {
         reshape(c.arg("values"), {4, 9});
       },
       "values"},
      {"indices of another batch",
       [](Call& c) {
         reshape(c.arg("indices"), {3, 8});
       },
       "indices"},
      {"values fp32", [](Call& c) { c.arg("values").t.t.dtype = dl_dtype("fp32"); }, "values"},
      {"indices int64", [](Call& c) { c.arg("indices").t.t.dtype = dl_dtype("int64"); }, "indices"},
      {"values 1-D", [](Call& c) { reshape(c.arg("values"), {32}); }, "values"},
      {"values inside input", [](Call& c) { c.arg("values").t.t.data = c.arg("input").t.t.data; },
       "values"},
      {"indices inside values",
       [](Call& c) { c.arg("indices").t.t.data = c.arg("values").t.t.data; }, "indices"},
      {"input int32", [](Call& c) { c.arg("input").t.t.dtype = dl_dtype("int32"); }, ""},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 1000});
    reshape(c.arg("values"), {0, 8});
    reshape(c.arg("indices"), {0, 8});
  };
  return api;
}

// ---- Attention
// -----------------------------------------------------------------------------------

// A plan for 3 requests (3, 0 and 4 pages of 16), 32 / 8 heads of 128, made without a device
// (num_sms given). Four splits, so the run needs (and checks) its workspace.
PlanPtr decode_plan(int batch = 3) {
  const std::vector<int32_t> indptr =
      batch == 0 ? std::vector<int32_t>{0} : std::vector<int32_t>{0, 3, 3, 7};
  kjit_decode_options o;
  kjit_decode_options_init(&o);
  o.num_sms = 132;
  o.num_splits = 4;
  kjit_decode_plan* p = nullptr;
  const kjit_status s =
      kjit_batch_decode_plan(indptr.data(), batch, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD,
                             dl_dtype("bf16"), dl_dtype("bf16"), &o, 0, &p);
  INFO(kjit_last_error());
  REQUIRE(s == KJIT_SUCCESS);
  return PlanPtr(p, PlanDeleter());
}

Api decode_run_api() {
  Api api;
  api.name = "kjit_batch_decode_run";
  api.make = [] {
    Call c;
    c.plan = decode_plan();
    c.tensors.push_back(arg("q", 1, {3, 32, 128}, "bf16"));
    c.tensors.push_back(arg("k_cache", 2, {20, 16, 8, 128}, "bf16"));
    c.tensors.push_back(arg("v_cache", 3, {20, 16, 8, 128}, "bf16"));
    c.tensors.push_back(arg("kv_indices", 4, {7}, "int32"));
    c.tensors.push_back(arg("kv_indptr", 5, {4}, "int32"));
    c.tensors.push_back(arg("kv_last_page_len", 6, {3}, "int32"));
    c.tensors.push_back(arg("workspace", 7, {1 << 24}, "int32"));
    c.tensors.back().any_dtype = true;
    c.tensors.push_back(arg("out", 8, {3, 32, 128}, "bf16"));
    c.tensors.push_back(arg("lse", 9, {3, 32}, "fp32", /*nullable=*/true));
    c.floats = {{"k_scale", 1.0f}, {"v_scale", 1.0f}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_batch_decode_run(c.plan.get(), c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5),
                                 c.t(6), c.t(7), c.t(8), c.f(0), c.f(1), nullptr);
  };
  api.specific = {
      {"NULL plan", [](Call& c) { c.plan.reset(); }, "plan"},
      set_float("k_scale", 0.0f),
      set_float("v_scale", -1.0f),
      {"q of another head count",
       [](Call& c) {
         reshape(c.arg("q"), {3, 16, 128});
       },
       "q"},
      {"q of another batch",
       [](Call& c) {
         reshape(c.arg("q"), {4, 32, 128});
       },
       "q"},
      {"q of another head_dim",
       [](Call& c) {
         reshape(c.arg("q"), {3, 32, 64});
       },
       "q"},
      {"q fp16 (the plan says bf16)", [](Call& c) { c.arg("q").t.t.dtype = dl_dtype("fp16"); },
       "q"},
      {"k_cache of another head_dim",
       [](Call& c) {
         reshape(c.arg("k_cache"), {20, 16, 8, 64});
       },
       "k_cache"},
      {"v_cache of another shape",
       [](Call& c) {
         reshape(c.arg("v_cache"), {20, 16, 4, 128});
       },
       "v_cache"},
      {"kv_indptr of another batch", [](Call& c) { reshape(c.arg("kv_indptr"), {3}); },
       "kv_indptr"},
      {"kv_indices int64", [](Call& c) { c.arg("kv_indices").t.t.dtype = dl_dtype("int64"); },
       "kv_indices"},
      {"workspace too small", [](Call& c) { reshape(c.arg("workspace"), {100}); }, "workspace"},
      {"workspace not 16-byte aligned",
       [](Call& c) {
         c.arg("workspace").t.t.data = static_cast<char*>(c.arg("workspace").t.t.data) + 4;
       },
       "workspace"},
      {"out of another dtype", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp16"); }, "out"},
      {"out of another shape",
       [](Call& c) {
         reshape(c.arg("out"), {3, 32, 64});
       },
       "out"},
      {"lse of another shape",
       [](Call& c) {
         reshape(c.arg("lse"), {3, 16});
       },
       "lse"},
      {"lse bf16", [](Call& c) { c.arg("lse").t.t.dtype = dl_dtype("bf16"); }, "lse"},
      {"out overlaps q", [](Call& c) { c.arg("out").t.t.data = c.arg("q").t.t.data; }, "out"},
      {"lse overlaps out", [](Call& c) { c.arg("lse").t.t.data = c.arg("out").t.t.data; }, ""},
      {"workspace overlaps k_cache",
       [](Call& c) { c.arg("workspace").t.t.data = c.arg("k_cache").t.t.data; }, ""},
  };
  api.zero_size = [](Call& c) {
    c.plan = decode_plan(0);
    reshape(c.arg("q"), {0, 32, 128});
    reshape(c.arg("out"), {0, 32, 128});
    reshape(c.arg("lse"), {0, 32});
    reshape(c.arg("kv_indptr"), {1});
    reshape(c.arg("kv_last_page_len"), {0});
  };
  return api;
}

// A prefill plan for 3 requests (5, 0 and 2 query rows; 3, 0 and 4 pages of 16, or ragged: 40,
// 0 and 60 key rows), 32 / 8 heads of 128, made without a device.
std::shared_ptr<kjit_prefill_plan> prefill_plan(int batch, bool ragged) {
  const std::vector<int32_t> qo =
      batch == 0 ? std::vector<int32_t>{0} : std::vector<int32_t>{0, 5, 5, 7};
  const std::vector<int32_t> kv = batch == 0 ? std::vector<int32_t>{0}
                                  : ragged   ? std::vector<int32_t>{0, 40, 40, 100}
                                             : std::vector<int32_t>{0, 3, 3, 7};
  kjit_prefill_plan* p = nullptr;
  const kjit_status s = kjit_batch_prefill_plan(qo.data(), kv.data(), batch, 32, 8, 128,
                                                ragged ? 0 : 16, KJIT_KV_LAYOUT_NHD,
                                                dl_dtype("bf16"), dl_dtype("bf16"), nullptr, 0, &p);
  INFO(kjit_last_error());
  REQUIRE(s == KJIT_SUCCESS);
  return std::shared_ptr<kjit_prefill_plan>(p, kjit_prefill_plan_destroy);
}

// The breakages both prefill runs share (k and v named k_name / v_name).
std::vector<Mutation> prefill_common_breakages(const std::string& k_name,
                                               const std::string& v_name) {
  return {
      {"NULL plan", [](Call& c) { c.prefill.reset(); }, "plan"},
      {"a decode plan's bytes as the plan",
       [](Call& c) {
         c.prefill = std::shared_ptr<kjit_prefill_plan>(
             reinterpret_cast<kjit_prefill_plan*>(new char[256]()),
             [](kjit_prefill_plan* p) { delete[] reinterpret_cast<char*>(p); });
       },
       "plan"},
      set_float("k_scale", 0.0f),
      set_float("v_scale", -1.0f),
      {"q of another head count",
       [](Call& c) {
         reshape(c.arg("q"), {7, 16, 128});
       },
       "q"},
      {"q of another head_dim",
       [](Call& c) {
         reshape(c.arg("q"), {7, 32, 64});
       },
       "q"},
      {"q fp16 (the plan says bf16)", [](Call& c) { c.arg("q").t.t.dtype = dl_dtype("fp16"); },
       "q"},
      {"q rows 4-byte aligned",
       [](Call& c) { c.arg("q").t.t.data = static_cast<char*>(c.arg("q").t.t.data) + 4; }, "q"},
      {k_name + " of another head_dim",
       [k_name](Call& c) {
         auto& t = c.arg(k_name).t;
         std::vector<int64_t> shape(t.shape);
         shape.back() = 64;
         reshape(c.arg(k_name), shape);
       },
       k_name},
      {v_name + " fp16", [v_name](Call& c) { c.arg(v_name).t.t.dtype = dl_dtype("fp16"); }, v_name},
      {"qo_indptr of another batch", [](Call& c) { reshape(c.arg("qo_indptr"), {3}); },
       "qo_indptr"},
      {"kv_indptr int64", [](Call& c) { c.arg("kv_indptr").t.t.dtype = dl_dtype("int64"); },
       "kv_indptr"},
      {"out of another dtype", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp16"); }, "out"},
      {"out of another row count",
       [](Call& c) {
         reshape(c.arg("out"), {6, 32, 128});
       },
       "out"},
      {"lse of another shape",
       [](Call& c) {
         reshape(c.arg("lse"), {7, 16});
       },
       "lse"},
      {"lse bf16", [](Call& c) { c.arg("lse").t.t.dtype = dl_dtype("bf16"); }, "lse"},
      {"out overlaps q", [](Call& c) { c.arg("out").t.t.data = c.arg("q").t.t.data; }, "out"},
      {"lse overlaps out", [](Call& c) { c.arg("lse").t.t.data = c.arg("out").t.t.data; }, ""},
  };
}

Api prefill_run_api() {
  Api api;
  api.name = "kjit_batch_prefill_run";
  api.make = [] {
    Call c;
    c.prefill = prefill_plan(3, false);
    c.tensors.push_back(arg("q", 1, {7, 32, 128}, "bf16"));
    c.tensors.push_back(arg("k_cache", 2, {20, 16, 8, 128}, "bf16"));
    c.tensors.push_back(arg("v_cache", 3, {20, 16, 8, 128}, "bf16"));
    c.tensors.push_back(arg("qo_indptr", 4, {4}, "int32"));
    c.tensors.push_back(arg("kv_indices", 5, {7}, "int32"));
    c.tensors.push_back(arg("kv_indptr", 6, {4}, "int32"));
    c.tensors.push_back(arg("kv_last_page_len", 7, {3}, "int32"));
    c.tensors.push_back(arg("workspace", 8, {16}, "int32", /*nullable=*/true));
    c.tensors.back().any_dtype = true;
    c.tensors.push_back(arg("out", 9, {7, 32, 128}, "bf16"));
    c.tensors.push_back(arg("lse", 10, {7, 32}, "fp32", /*nullable=*/true));
    c.floats = {{"k_scale", 1.0f}, {"v_scale", 1.0f}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_batch_prefill_run(c.prefill.get(), c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5),
                                  c.t(6), c.t(7), c.t(8), c.t(9), c.f(0), c.f(1), nullptr);
  };
  api.specific = prefill_common_breakages("k_cache", "v_cache");
  api.specific.push_back(
      {"a ragged plan", [](Call& c) { c.prefill = prefill_plan(3, true); }, "plan"});
  api.specific.push_back({"v_cache of another page size",
                          [](Call& c) {
                            reshape(c.arg("v_cache"), {20, 8, 8, 128});
                          },
                          "v_cache"});
  api.specific.push_back({"kv_last_page_len of another batch",
                          [](Call& c) { reshape(c.arg("kv_last_page_len"), {4}); },
                          "kv_last_page_len"});
  api.zero_size = [](Call& c) {
    c.prefill = prefill_plan(0, false);
    reshape(c.arg("q"), {0, 32, 128});
    reshape(c.arg("out"), {0, 32, 128});
    reshape(c.arg("lse"), {0, 32});
    reshape(c.arg("qo_indptr"), {1});
    reshape(c.arg("kv_indptr"), {1});
    reshape(c.arg("kv_last_page_len"), {0});
  };
  return api;
}

Api prefill_ragged_run_api() {
  Api api;
  api.name = "kjit_batch_prefill_ragged_run";
  api.make = [] {
    Call c;
    c.prefill = prefill_plan(3, true);
    c.tensors.push_back(arg("q", 1, {7, 32, 128}, "bf16"));
    c.tensors.push_back(arg("k", 2, {100, 8, 128}, "bf16"));
    c.tensors.push_back(arg("v", 3, {100, 8, 128}, "bf16"));
    c.tensors.push_back(arg("qo_indptr", 4, {4}, "int32"));
    c.tensors.push_back(arg("kv_indptr", 5, {4}, "int32"));
    c.tensors.push_back(arg("workspace", 6, {16}, "int32", /*nullable=*/true));
    c.tensors.back().any_dtype = true;
    c.tensors.push_back(arg("out", 7, {7, 32, 128}, "bf16"));
    c.tensors.push_back(arg("lse", 8, {7, 32}, "fp32", /*nullable=*/true));
    c.floats = {{"k_scale", 1.0f}, {"v_scale", 1.0f}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_batch_prefill_ragged_run(c.prefill.get(), c.t(0), c.t(1), c.t(2), c.t(3), c.t(4),
                                         c.t(5), c.t(6), c.t(7), c.f(0), c.f(1), nullptr);
  };
  api.specific = prefill_common_breakages("k", "v");
  api.specific.push_back(
      {"a paged plan", [](Call& c) { c.prefill = prefill_plan(3, false); }, "plan"});
  api.specific.push_back({"v of another row count",
                          [](Call& c) {
                            reshape(c.arg("v"), {99, 8, 128});
                          },
                          "v"});
  api.zero_size = [](Call& c) {
    c.prefill = prefill_plan(0, true);
    reshape(c.arg("q"), {0, 32, 128});
    reshape(c.arg("out"), {0, 32, 128});
    reshape(c.arg("lse"), {0, 32});
    reshape(c.arg("qo_indptr"), {1});
    reshape(c.arg("kv_indptr"), {1});
  };
  return api;
}

Api merge_states_api() {
  Api api;
  api.name = "kjit_merge_states";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("v_a", 1, {5, 8, 128}, "bf16"));
    c.tensors.push_back(arg("s_a", 2, {5, 8}, "fp32"));
    c.tensors.push_back(arg("v_b", 3, {5, 8, 128}, "bf16"));
    c.tensors.push_back(arg("s_b", 4, {5, 8}, "fp32"));
    c.tensors.push_back(arg("v_out", 5, {5, 8, 128}, "bf16"));
    c.tensors.push_back(arg("s_out", 6, {5, 8}, "fp32", /*nullable=*/true));
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_merge_states(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), nullptr);
  };
  api.specific = {
      {"v_b of another shape",
       [](Call& c) {
         reshape(c.arg("v_b"), {5, 8, 64});
       },
       "v_b"},
      {"s_a of another shape",
       [](Call& c) {
         reshape(c.arg("s_a"), {5, 4});
       },
       "s_a"},
      {"s_b bf16", [](Call& c) { c.arg("s_b").t.t.dtype = dl_dtype("bf16"); }, "s_b"},
      {"v_out of another dtype", [](Call& c) { c.arg("v_out").t.t.dtype = dl_dtype("fp16"); },
       "v_out"},
      {"v_out partially overlaps v_b",
       [](Call& c) { c.arg("v_out").t.t.data = static_cast<char*>(c.arg("v_b").t.t.data) + 256; },
       "v_out"},
      {"s_out overlaps v_a", [](Call& c) { c.arg("s_out").t.t.data = c.arg("v_a").t.t.data; },
       "s_out"},
      {"v_out overlaps s_a", [](Call& c) { c.arg("v_out").t.t.data = c.arg("s_a").t.t.data; },
       "v_out"},
  };
  api.zero_size = [](Call& c) {
    for (const char* n : {"v_a", "v_b", "v_out"}) reshape(c.arg(n), {0, 8, 128});
    for (const char* n : {"s_a", "s_b", "s_out"}) reshape(c.arg(n), {0, 8});
  };
  return api;
}

Api merge_states_n_api() {
  Api api;
  api.name = "kjit_merge_states_n";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("v", 1, {3, 5, 8, 128}, "fp16"));
    c.tensors.push_back(arg("s", 2, {3, 5, 8}, "fp32"));
    c.tensors.push_back(arg("v_out", 3, {5, 8, 128}, "fp16"));
    c.tensors.push_back(arg("s_out", 4, {5, 8}, "fp32", /*nullable=*/true));
    return c;
  };
  api.invoke = [](Call& c) { return kjit_merge_states_n(c.t(0), c.t(1), c.t(2), c.t(3), nullptr); };
  api.specific = {
      {"s of another state count",
       [](Call& c) {
         reshape(c.arg("s"), {2, 5, 8});
       },
       "s"},
      {"v_out of another shape",
       [](Call& c) {
         reshape(c.arg("v_out"), {5, 8, 64});
       },
       "v_out"},
      {"v_out inside v", [](Call& c) { c.arg("v_out").t.t.data = c.arg("v").t.t.data; }, "v_out"},
      {"s_out inside s", [](Call& c) { c.arg("s_out").t.t.data = c.arg("s").t.t.data; }, "s_out"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("v"), {3, 0, 8, 128});
    reshape(c.arg("s"), {3, 0, 8});
    reshape(c.arg("v_out"), {0, 8, 128});
    reshape(c.arg("s_out"), {0, 8});
  };
  return api;
}

// ---- Sampling
// ------------------------------------------------------------------------------------

// The arguments the samplers share, around a [4, 1000] input. Per-row parameter tensors are
// passed when `per_row` (their scalars are then ignored), else NULL (the scalars are checked).
struct SamplerShape {
  const char* input = "probs";
  const char* input_dtype = "fp32";
  std::vector<std::string> arrays;  // per-row parameter tensors, in argument order
  bool per_row = false;
};

Call sampler_call(const SamplerShape& sh) {
  Call c;
  c.tensors.push_back(arg(sh.input, 1, {4, 1000}, sh.input_dtype));
  int slot = 2;
  for (const auto& a : sh.arrays) {
    c.tensors.push_back(arg(a, slot++, {4}, a == "top_k_arr" ? "int32" : "fp32", true));
    c.tensors.back().null = !sh.per_row;
  }
  c.tensors.push_back(arg("seed", 10, {1}, "int64"));
  c.tensors.push_back(arg("offset", 11, {4}, "int64"));
  c.tensors.push_back(arg("samples", 12, {4}, "int32"));
  c.tensors.push_back(Arg{"valid", make_tensor(addr(13), {4}, DLDataType{kDLUInt, 8, 1}), true});
  c.tensors.back().bool_ok = true;
  return c;
}

std::vector<Mutation> sampler_mutations(const SamplerShape& sh) {
  std::vector<Mutation> m = {
      {"input 1-D", [sh](Call& c) { reshape(c.arg(sh.input), {4000}); }, sh.input},
      {"input with an empty vocabulary",
       [sh](Call& c) {
         reshape(c.arg(sh.input), {4, 0});
       },
       sh.input},
      {"seed empty", [](Call& c) { reshape(c.arg("seed"), {0}); }, "seed"},
      {"seed of another length", [](Call& c) { reshape(c.arg("seed"), {3}); }, "seed"},
      {"seed int32", [](Call& c) { c.arg("seed").t.t.dtype = dl_dtype("int32"); }, "seed"},
      {"offset fp32", [](Call& c) { c.arg("offset").t.t.dtype = dl_dtype("fp32"); }, "offset"},
      {"samples of another length", [](Call& c) { reshape(c.arg("samples"), {5}); }, "samples"},
      {"samples fp32", [](Call& c) { c.arg("samples").t.t.dtype = dl_dtype("fp32"); }, "samples"},
      {"valid int32", [](Call& c) { c.arg("valid").t.t.dtype = dl_dtype("int32"); }, "valid"},
      {"samples overlap the input",
       [sh](Call& c) { c.arg("samples").t.t.data = c.arg(sh.input).t.t.data; }, "samples"},
      {"valid overlaps samples",
       [](Call& c) { c.arg("valid").t.t.data = c.arg("samples").t.t.data; }, ""},
      {"samples overlap seed", [](Call& c) { c.arg("samples").t.t.data = c.arg("seed").t.t.data; },
       "samples"},
  };
  if (sh.per_row) {
    for (const auto& a : sh.arrays) {
      m.push_back({a + " of another length", [a](Call& c) { reshape(c.arg(a), {3}); }, a});
      m.push_back({a + " int8",
                   [a](Call& c) {
                     c.arg(a).t.t.dtype = DLDataType{kDLInt, 8, 1};
                   },
                   a});
      m.push_back({"samples overlap " + a,
                   [a](Call& c) { c.arg("samples").t.t.data = c.arg(a).t.t.data; }, "samples"});
    }
  }
  return m;
}

void sampler_zero_size(Call& c) {
  reshape(c.tensors[0], {0, 1000});
  for (auto& a : c.tensors) {
    // seed and offset hold one value for every row; an empty one is an error.
    if (a.name == "offset") reshape(a, {1});
    if (a.name != "seed" && a.name != "offset" && &a != &c.tensors[0]) reshape(a, {0});
  }
}

Api sampler_api(const std::string& name, const SamplerShape& sh,
                std::vector<std::pair<std::string, float>> floats,
                std::vector<std::pair<std::string, int>> ints,
                std::function<kjit_status(Call&)> invoke, std::vector<Mutation> scalar_bad) {
  Api api;
  api.name = name;
  const bool options = !floats.empty() || !ints.empty();
  api.make = [sh, floats, ints, options] {
    Call c = sampler_call(sh);
    c.floats = floats;
    c.ints = ints;
    if (options) c.ints.push_back({"struct_size", int{sizeof(kjit_sampling_options)}});
    return c;
  };
  api.invoke = std::move(invoke);
  api.specific = sampler_mutations(sh);
  if (!sh.per_row) {
    api.specific.insert(api.specific.end(), scalar_bad.begin(), scalar_bad.end());
  }
  if (options) {
    api.specific.push_back(set_int("struct_size", 0));
    api.specific.push_back(set_int("struct_size", 3));
  }
  api.check_floats = !sh.per_row;
  api.zero_size = sampler_zero_size;
  return api;
}

// Each sampler twice: with per-row parameter tensors, and with the scalars.
void add_samplers(std::vector<Api>& t) {
  for (bool per_row : {false, true}) {
    SamplerShape plain{"probs", "fp32", {}, per_row};
    if (!per_row) {
      t.push_back(sampler_api("kjit_sampling_from_probs", plain, {}, {},
                              [](Call& c) {
                                return kjit_sampling_from_probs(c.t(0), c.t(1), c.t(2), c.t(3),
                                                                c.t(4), nullptr);
                              },
                              {}));
    }
    SamplerShape k{"probs", "fp32", {"top_k_arr"}, per_row};
    t.push_back(
        sampler_api("kjit_top_k_sampling_from_probs", k, {}, {{"top_k", 50}},
                    [](Call& c) {
                      const kjit_sampling_options o = c.sampling_options();
                      return kjit_top_k_sampling_from_probs(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4),
                                                            c.t(5), &o, nullptr);
                    },
                    {set_int("top_k", 0), set_int("top_k", -5), set_int("top_k", INT_MIN)}));
    SamplerShape p{"probs", "fp32", {"top_p_arr"}, per_row};
    t.push_back(sampler_api(
        "kjit_top_p_sampling_from_probs", p, {{"top_p", 0.9f}}, {},
        [](Call& c) {
          const kjit_sampling_options o = c.sampling_options();
          return kjit_top_p_sampling_from_probs(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), &o,
                                                nullptr);
        },
        {set_float("top_p", 0.0f), set_float("top_p", 1.5f), set_float("top_p", -0.1f)}));
    SamplerShape mp{"probs", "fp32", {"min_p_arr"}, per_row};
    t.push_back(sampler_api("kjit_min_p_sampling_from_probs", mp, {{"min_p", 0.1f}}, {},
                            [](Call& c) {
                              const kjit_sampling_options o = c.sampling_options();
                              return kjit_min_p_sampling_from_probs(c.t(0), c.t(1), c.t(2), c.t(3),
                                                                    c.t(4), c.t(5), &o, nullptr);
                            },
                            {set_float("min_p", -0.1f), set_float("min_p", 1.5f)}));
    SamplerShape kp{"probs", "fp32", {"top_k_arr", "top_p_arr"}, per_row};
    t.push_back(
        sampler_api("kjit_top_k_top_p_sampling_from_probs", kp, {{"top_p", 0.9f}}, {{"top_k", 50}},
                    [](Call& c) {
                      const kjit_sampling_options o = c.sampling_options();
                      return kjit_top_k_top_p_sampling_from_probs(
                          c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6), &o, nullptr);
                    },
                    {set_int("top_k", 0), set_float("top_p", 0.0f), set_float("top_p", 2.0f)}));
    SamplerShape lg{"logits", "bf16", {"top_k_arr", "top_p_arr", "temperature_arr"}, per_row};
    t.push_back(sampler_api(
        "kjit_top_k_top_p_sampling_from_logits", lg, {{"top_p", 0.9f}, {"temperature", 0.7f}},
        {{"top_k", 50}},
        [](Call& c) {
          const kjit_sampling_options o = c.sampling_options();
          return kjit_top_k_top_p_sampling_from_logits(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4),
                                                       c.t(5), c.t(6), c.t(7), &o, nullptr);
        },
        {set_int("top_k", -1), set_float("top_p", 0.0f), set_float("temperature", -1.0f)}));
  }
}

// probs / logits -> out of the same shape, with one per-row parameter or its scalar.
template <class Scalar>
Api filter_api(const std::string& name, const char* input, const char* dtype, const char* out_dtype,
               const std::string& array, bool per_row, std::pair<std::string, Scalar> scalar,
               kjit_status (*fn)(const DLTensor*, const DLTensor*, DLTensor*,
                                 const kjit_sampling_options*, void*),
               std::vector<Mutation> scalar_bad) {
  Api api;
  api.name = name;
  api.make = [=] {
    Call c;
    c.tensors.push_back(arg(input, 1, {4, 1000}, dtype));
    c.tensors.push_back(arg(array, 2, {4}, array == "top_k_arr" ? "int32" : "fp32", true));
    c.tensors.back().null = !per_row;
    c.tensors.push_back(arg("out", 3, {4, 1000}, out_dtype));
    if constexpr (std::is_same_v<Scalar, int>) {
      c.ints = {{scalar.first, scalar.second}};
    } else {
      c.floats = {{scalar.first, scalar.second}};
    }
    c.ints.push_back({"struct_size", int{sizeof(kjit_sampling_options)}});
    return c;
  };
  api.invoke = [fn](Call& c) {
    const kjit_sampling_options o = c.sampling_options();
    return fn(c.t(0), c.t(1), c.t(2), &o, nullptr);
  };
  const std::string in = input;
  api.specific = {
      {"out of another shape",
       [](Call& c) {
         reshape(c.arg("out"), {4, 999});
       },
       "out"},
      {"out partially overlaps the input",
       [in](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg(in).t.t.data) + 64; },
       "out"},
      {"input 3-D",
       [in](Call& c) {
         reshape(c.arg(in), {4, 1, 1000});
       },
       in},
  };
  if (per_row) {
    api.specific.push_back(
        {array + " of another length", [array](Call& c) { reshape(c.arg(array), {5}); }, array});
    api.specific.push_back({"out overlaps " + array,
                            [array](Call& c) { c.arg("out").t.t.data = c.arg(array).t.t.data; },
                            "out"});
  } else {
    api.specific.insert(api.specific.end(), scalar_bad.begin(), scalar_bad.end());
  }
  api.specific.push_back(set_int("struct_size", 0));
  api.specific.push_back(set_int("struct_size", 3));
  api.check_floats = !per_row;
  api.zero_size = [in, array](Call& c) {
    reshape(c.arg(in), {0, 1000});
    reshape(c.arg(array), {0});
    reshape(c.arg("out"), {0, 1000});
  };
  return api;
}

void add_filters(std::vector<Api>& t) {
  for (bool per_row : {false, true}) {
    t.push_back(filter_api<int>("kjit_top_k_renorm_probs", "probs", "fp32", "fp32", "top_k_arr",
                                per_row, {"top_k", 20}, kjit_top_k_renorm_probs,
                                {set_int("top_k", 0), set_int("top_k", -1)}));
    t.push_back(filter_api<float>("kjit_top_p_renorm_probs", "probs", "fp32", "fp32", "top_p_arr",
                                  per_row, {"top_p", 0.8f}, kjit_top_p_renorm_probs,
                                  {set_float("top_p", 0.0f), set_float("top_p", 1.01f)}));
    t.push_back(filter_api<int>("kjit_top_k_mask_logits", "logits", "fp16", "fp16", "top_k_arr",
                                per_row, {"top_k", 20}, kjit_top_k_mask_logits,
                                {set_int("top_k", 0)}));
    t.push_back(filter_api<float>(
        "kjit_softmax", "logits", "bf16", "fp32", "temperature_arr", per_row, {"temperature", 1.0f},
        kjit_softmax, {set_float("temperature", 0.0f), set_float("temperature", -1.0f)}));
  }
}

Api argmax_api() {
  Api api;
  api.name = "kjit_argmax";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 1000}, "fp16"));
    c.tensors.push_back(arg("out", 2, {4}, "int64"));
    return c;
  };
  api.invoke = [](Call& c) { return kjit_argmax(c.t(0), c.t(1), nullptr); };
  api.specific = {
      {"out of another length", [](Call& c) { reshape(c.arg("out"), {5}); }, "out"},
      {"out fp32", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp32"); }, "out"},
      {"out inside input", [](Call& c) { c.arg("out").t.t.data = c.arg("input").t.t.data; }, "out"},
      {"input with an empty vocabulary",
       [](Call& c) {
         reshape(c.arg("input"), {4, 0});
       },
       "input"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 1000});
    reshape(c.arg("out"), {0});
  };
  return api;
}

Api speculative_api() {
  Api api;
  api.name = "kjit_chain_speculative_sampling";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("draft_probs", 1, {3, 4, 1000}, "fp32"));
    c.tensors.push_back(arg("draft_token_ids", 2, {3, 4}, "int32"));
    c.tensors.push_back(arg("target_probs", 3, {3, 5, 1000}, "fp32"));
    c.tensors.push_back(arg("seed", 4, {1}, "int64"));
    c.tensors.push_back(arg("offset", 5, {3}, "int64"));
    c.tensors.push_back(arg("output_token_ids", 6, {3, 5}, "int32"));
    c.tensors.push_back(arg("accepted", 7, {3}, "int32", /*nullable=*/true));
    c.tensors.push_back(arg("emitted", 8, {3}, "int32", /*nullable=*/true));
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_chain_speculative_sampling(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6),
                                           c.t(7), nullptr);
  };
  api.specific = {
      {"target_probs without the bonus step",
       [](Call& c) {
         reshape(c.arg("target_probs"), {3, 4, 1000});
       },
       "target_probs"},
      {"32 draft tokens",
       [](Call& c) {
         reshape(c.arg("draft_probs"), {3, 32, 1000});
         reshape(c.arg("draft_token_ids"), {3, 32});
         reshape(c.arg("target_probs"), {3, 33, 1000});
         reshape(c.arg("output_token_ids"), {3, 33});
       },
       ""},
      {"emitted over accepted",
       [](Call& c) { c.arg("emitted").t.t.data = c.arg("accepted").t.t.data; }, ""},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("draft_probs"), {0, 4, 1000});
    reshape(c.arg("draft_token_ids"), {0, 4});
    reshape(c.arg("target_probs"), {0, 5, 1000});
    reshape(c.arg("output_token_ids"), {0, 5});
    reshape(c.arg("offset"), {1});
    reshape(c.arg("accepted"), {0});
    reshape(c.arg("emitted"), {0});
  };
  return api;
}

// out = alpha * a . b^T + beta * out + bias; alpha, beta and the options' struct_size come from
// the call's scalars.
Api gemm_api() {
  Api api;
  api.name = "kjit_gemm";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("a", 1, {4, 64}, "bf16"));
    c.tensors.push_back(arg("b", 2, {32, 64}, "bf16"));
    c.tensors.push_back(arg("bias", 3, {32}, "bf16", true));
    c.tensors.push_back(arg("out", 4, {4, 32}, "fp32"));
    c.floats = {{"alpha", 1.0f}, {"beta", 0.5f}};
    c.ints = {{"struct_size", static_cast<int>(sizeof(kjit_gemm_options))},
              {"autotune", 0},
              {"tune_timing", KJIT_TUNE_GRAPH_COLD}};
    return c;
  };
  api.invoke = [](Call& c) {
    const kjit_gemm_options o = c.gemm_options();
    return kjit_gemm(c.t(0), c.t(1), c.t(2), c.t(3), &o, nullptr);
  };
  api.specific = {
      {"b with another k",
       [](Call& c) {
         reshape(c.arg("b"), {32, 63});
       },
       "b"},
      {"b 3-D",
       [](Call& c) {
         reshape(c.arg("b"), {1, 32, 64});
       },
       "b"},
      {"out of another width",
       [](Call& c) {
         reshape(c.arg("out"), {4, 31});
       },
       "out"},
      {"out of another row count",
       [](Call& c) {
         reshape(c.arg("out"), {5, 32});
       },
       "out"},
      {"bias of the wrong length", [](Call& c) { reshape(c.arg("bias"), {31}); }, "bias"},
      {"bias 2-D",
       [](Call& c) {
         reshape(c.arg("bias"), {1, 32});
       },
       "bias"},
      {"bias of another dtype", [](Call& c) { c.arg("bias").t.t.dtype = dl_dtype("fp16"); },
       "bias"},
      {"b of another dtype", [](Call& c) { c.arg("b").t.t.dtype = dl_dtype("fp16"); }, "b"},
      {"fp32 operands",
       [](Call& c) {
         c.arg("a").t.t.dtype = dl_dtype("fp32");
         c.arg("b").t.t.dtype = dl_dtype("fp32");
       },
       "a"},
      {"int32 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("int32"); }, "out"},
      {"out inside a", [](Call& c) { c.arg("out").t.t.data = c.arg("a").t.t.data; }, "out"},
      {"out inside b",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("b").t.t.data) + 64; },
       "out"},
      {"options struct_size 0", [](Call& c) { c.integer("struct_size") = 0; }, "struct_size"},
      {"options struct_size 4", [](Call& c) { c.integer("struct_size") = 4; }, "struct_size"},
      set_int("autotune", 3),
      set_int("autotune", -2),
      set_int("tune_timing", 4),
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("a"), {0, 64});
    reshape(c.arg("out"), {0, 32});
  };
  return api;
}

// kjit_gemm_fp8 with per-row scales (the scale shapes' own breakages name the mode rules).
Api gemm_fp8_api() {
  Api api;
  api.name = "kjit_gemm_fp8";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("a", 1, {4, 256}, "e4m3"));
    c.tensors.push_back(arg("b", 2, {32, 256}, "e4m3"));
    c.tensors.push_back(arg("scale_a", 3, {4}, "fp32"));
    c.tensors.push_back(arg("scale_b", 5, {32}, "fp32"));
    c.tensors.push_back(arg("out", 4, {4, 32}, "bf16"));
    c.floats = {{"alpha", 1.0f}, {"beta", 0.5f}};
    c.ints = {{"struct_size", static_cast<int>(sizeof(kjit_gemm_options))}};
    return c;
  };
  api.invoke = [](Call& c) {
    const kjit_gemm_options o = c.gemm_options();
    return kjit_gemm_fp8(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), &o, nullptr);
  };
  api.specific = {
      {"b with another k",
       [](Call& c) {
         reshape(c.arg("b"), {32, 255});
       },
       "b"},
      {"bf16 operands",
       [](Call& c) {
         c.arg("a").t.t.dtype = dl_dtype("bf16");
         c.arg("b").t.t.dtype = dl_dtype("bf16");
       },
       "a"},
      {"b of another dtype", [](Call& c) { c.arg("b").t.t.dtype = dl_dtype("bf16"); }, "b"},
      {"e4m3 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("e4m3"); }, "out"},
      {"scale_a of another length", [](Call& c) { reshape(c.arg("scale_a"), {3}); }, "scale_a"},
      {"scale_b of another length", [](Call& c) { reshape(c.arg("scale_b"), {31}); }, "scale_b"},
      {"scale_a 2-D beside a 1-D scale_b",
       [](Call& c) {
         reshape(c.arg("scale_a"), {4, 2});
       },
       "scale_b"},
      {"block scale_b with the wrong chunk count",
       [](Call& c) {
         reshape(c.arg("scale_a"), {4, 2});
         reshape(c.arg("scale_b"), {1, 3});
       },
       "scale_b"},
      {"bf16 scale_a", [](Call& c) { c.arg("scale_a").t.t.dtype = dl_dtype("bf16"); }, "scale_a"},
      {"out inside scale_b", [](Call& c) { c.arg("out").t.t.data = c.arg("scale_b").t.t.data; },
       "out"},
      {"out inside a", [](Call& c) { c.arg("out").t.t.data = c.arg("a").t.t.data; }, "out"},
      {"options struct_size 0", [](Call& c) { c.integer("struct_size") = 0; }, "struct_size"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("a"), {0, 256});
    reshape(c.arg("out"), {0, 32});
    reshape(c.arg("scale_a"), {0});
  };
  return api;
}

Api quant_fp8_api() {
  Api api;
  api.name = "kjit_quant_fp8";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 300}, "bf16"));
    c.tensors.push_back(arg("out", 2, {4, 300}, "e4m3"));
    c.tensors.push_back(arg("scale", 3, {4, 3}, "fp32"));
    c.ints = {{"scaling", KJIT_FP8_PER_GROUP_128}};
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_quant_fp8(c.t(0), c.t(1), c.t(2), static_cast<kjit_fp8_scaling>(c.n(0)), nullptr);
  };
  api.specific = {
      set_int("scaling", 3),
      set_int("scaling", -1),
      {"per-row scaling with group scales", [](Call& c) { c.integer("scaling") = 1; }, "scale"},
      {"fp32 input", [](Call& c) { c.arg("input").t.t.dtype = dl_dtype("fp32"); }, "input"},
      {"bf16 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("bf16"); }, "out"},
      {"out of another shape",
       [](Call& c) {
         reshape(c.arg("out"), {4, 301});
       },
       "out"},
      {"scale with too few groups",
       [](Call& c) {
         reshape(c.arg("scale"), {4, 2});
       },
       "scale"},
      {"out inside input",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("input").t.t.data) + 2; },
       "out"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 300});
    reshape(c.arg("out"), {0, 300});
    reshape(c.arg("scale"), {0, 3});
  };
  return api;
}

Api embedding_api() {
  Api api;
  api.name = "kjit_embedding";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("table", 1, {1000, 256}, "bf16"));
    c.tensors.push_back(arg("ids", 2, {7}, "int32"));
    c.tensors.push_back(arg("out", 3, {7, 256}, "bf16"));
    return c;
  };
  api.invoke = [](Call& c) { return kjit_embedding(c.t(0), c.t(1), c.t(2), nullptr); };
  api.specific = {
      {"out with other rows than ids",
       [](Call& c) {
         reshape(c.arg("out"), {8, 256});
       },
       "out"},
      {"out of another hidden size",
       [](Call& c) {
         reshape(c.arg("out"), {7, 255});
       },
       "out"},
      {"out fp16", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp16"); }, "out"},
      {"ids fp32", [](Call& c) { c.arg("ids").t.t.dtype = dl_dtype("fp32"); }, "ids"},
      {"ids 2-D",
       [](Call& c) {
         reshape(c.arg("ids"), {7, 1});
       },
       "ids"},
      {"table 3-D",
       [](Call& c) {
         reshape(c.arg("table"), {10, 100, 256});
       },
       "table"},
      {"out 3-D",
       [](Call& c) {
         reshape(c.arg("out"), {7, 1, 256});
       },
       "out"},
      {"out inside table", [](Call& c) { c.arg("out").t.t.data = c.arg("table").t.t.data; }, "out"},
      {"out over ids", [](Call& c) { c.arg("out").t.t.data = c.arg("ids").t.t.data; }, "out"},
      {"table with no rows",
       [](Call& c) {
         reshape(c.arg("table"), {0, 256});
       },
       "table"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("ids"), {0});
    reshape(c.arg("out"), {0, 256});
  };
  return api;
}

// ---- Communication
// A communicator as the host knows it (two ranks on cuda:0, no NCCL, 1 MiB one-shot limit),
// without device resources: kjit_comm_init needs a device, and every call here stops before any.
std::shared_ptr<kjit_comm> host_comm() {
  auto c = std::make_shared<kjit_comm>();
  c->world = 2;
  c->small_max_bytes = size_t{1} << 20;
  c->no_nccl = "NCCL not found (host-only communicator)";
  return c;
}

// kjit_all_reduce, and with `fused` kjit_all_reduce_add_rmsnorm.
Api all_reduce_api(bool fused) {
  Api api;
  api.name = fused ? "kjit_all_reduce_add_rmsnorm" : "kjit_all_reduce";
  api.make = [fused] {
    Call c;
    c.comm = host_comm();
    c.tensors.push_back(arg("in", 1, {64, 4096}, "bf16"));
    if (fused) {
      c.tensors.push_back(arg("weight", 2, {4096}, "bf16"));
      c.tensors.push_back(arg("residual", 3, {64, 4096}, "bf16"));
      c.floats = {{"eps", 1e-6f}};
    }
    c.tensors.push_back(arg("out", 4, {64, 4096}, "bf16"));
    return c;
  };
  api.invoke = [fused](Call& c) {
    if (fused) {
      return kjit_all_reduce_add_rmsnorm(c.comm.get(), c.t(0), c.t(1), c.t(2), c.t(3), c.f(0),
                                         nullptr);
    }
    return kjit_all_reduce(c.comm.get(), c.t(0), c.t(1), nullptr);
  };
  api.specific = {
      {"NULL comm", [](Call& c) { c.comm.reset(); }, "comm"},
      {"out of another shape",
       [](Call& c) {
         reshape(c.arg("out"), {64, 4095});
       },
       "out"},
      {"out fp16", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp16"); }, "out"},
      {"in and out int32",
       [](Call& c) {
         for (auto& a : c.tensors) a.t.t.dtype = dl_dtype("int32");
       },
       ""},
      {"out inside in",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("in").t.t.data) + 512; },
       "out"},
      {"on cuda:1, the communicator on cuda:0",
       [](Call& c) {
         for (auto& a : c.tensors) a.t.t.device.device_id = 1;
       },
       "device"},
      {"4 MiB: over the one-shot limit, no NCCL",
       [](Call& c) {
         for (auto& a : c.tensors) {
           if (a.t.shape.size() == 2) reshape(a, {512, 4096});
         }
       },
       "NCCL"},
  };
  if (fused) {
    api.specific.push_back({"residual is in",
                            [](Call& c) { c.arg("residual").t.t.data = c.arg("in").t.t.data; },
                            "residual"});
    api.specific.push_back(
        {"weight of another length", [](Call& c) { reshape(c.arg("weight"), {4095}); }, "weight"});
    api.specific.push_back(set_float("eps", -1.0f));
  } else {
    api.specific.push_back({"in with padded rows (not compact)",
                            [](Call& c) {
                              set_strides(c.arg("in"), {4104, 1});
                            },
                            "in"});
  }
  api.zero_size = [](Call& c) {
    for (auto& a : c.tensors) {
      if (a.t.shape.size() == 2) reshape(a, {0, 4096});
    }
  };
  return api;
}

// The fused fp8 quantizations: rmsnorm (with the residual add when `residual`) and silu_and_mul.
Api rmsnorm_quant_fp8_api(bool residual) {
  Api api;
  api.name = residual ? "kjit_fused_add_rmsnorm_quant_fp8" : "kjit_rmsnorm_quant_fp8";
  api.make = [residual] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 256}, "bf16"));
    c.tensors.push_back(arg("weight", 2, {256}, "bf16"));
    if (residual) c.tensors.push_back(arg("residual", 3, {4, 256}, "bf16"));
    c.tensors.push_back(arg("out", 4, {4, 256}, "e4m3"));
    c.tensors.push_back(arg("scale", 5, {4}, "fp32"));
    c.floats = {{"eps", 1e-6f}};
    return c;
  };
  api.invoke = [residual](Call& c) {
    return residual ? kjit_fused_add_rmsnorm_quant_fp8(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4),
                                                       c.f(0), nullptr)
                    : kjit_rmsnorm_quant_fp8(c.t(0), c.t(1), c.t(2), c.t(3), c.f(0), nullptr);
  };
  api.specific = {
      {"weight of the wrong length", [](Call& c) { reshape(c.arg("weight"), {255}); }, "weight"},
      {"out of another shape",
       [](Call& c) {
         reshape(c.arg("out"), {4, 255});
       },
       "out"},
      {"bf16 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("bf16"); }, "out"},
      {"scale of another length", [](Call& c) { reshape(c.arg("scale"), {5}); }, "scale"},
      {"bf16 scale", [](Call& c) { c.arg("scale").t.t.dtype = dl_dtype("bf16"); }, "scale"},
      {"out inside input", [](Call& c) { c.arg("out").t.t.data = c.arg("input").t.t.data; }, "out"},
      {"scale inside input", [](Call& c) { c.arg("scale").t.t.data = c.arg("input").t.t.data; },
       "scale"},
      set_float("eps", -1.0f),
  };
  if (residual) {
    api.specific.push_back({"residual of another shape",
                            [](Call& c) {
                              reshape(c.arg("residual"), {5, 256});
                            },
                            "residual"});
    api.specific.push_back({"residual is input",
                            [](Call& c) { c.arg("residual").t.t.data = c.arg("input").t.t.data; },
                            "residual"});
  }
  api.zero_size = [residual](Call& c) {
    reshape(c.arg("input"), {0, 256});
    if (residual) reshape(c.arg("residual"), {0, 256});
    reshape(c.arg("out"), {0, 256});
    reshape(c.arg("scale"), {0});
  };
  return api;
}

Api silu_and_mul_quant_fp8_api() {
  Api api;
  api.name = "kjit_silu_and_mul_quant_fp8";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("input", 1, {4, 600}, "bf16"));
    c.tensors.push_back(arg("out", 2, {4, 300}, "e4m3"));
    c.tensors.push_back(arg("scale", 3, {4, 3}, "fp32"));
    return c;
  };
  api.invoke = [](Call& c) { return kjit_silu_and_mul_quant_fp8(c.t(0), c.t(1), c.t(2), nullptr); };
  api.specific = {
      {"odd input width",
       [](Call& c) {
         reshape(c.arg("input"), {4, 599});
       },
       "input"},
      {"out of the full width",
       [](Call& c) {
         reshape(c.arg("out"), {4, 600});
       },
       "out"},
      {"bf16 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("bf16"); }, "out"},
      {"scale with too few groups",
       [](Call& c) {
         reshape(c.arg("scale"), {4, 2});
       },
       "scale"},
      {"per-row scale", [](Call& c) { reshape(c.arg("scale"), {4}); }, "scale"},
      {"out inside input",
       [](Call& c) { c.arg("out").t.t.data = static_cast<char*>(c.arg("input").t.t.data) + 2; },
       "out"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("input"), {0, 600});
    reshape(c.arg("out"), {0, 300});
    reshape(c.arg("scale"), {0, 3});
  };
  return api;
}

// kjit_moe_route with DeepSeek-V3-style options (the option fields are its scalars).
Api moe_route_api() {
  Api api;
  api.name = "kjit_moe_route";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("logits", 1, {4, 64}, "fp32"));
    c.tensors.push_back(arg("bias", 2, {64}, "fp32", true));
    c.tensors.push_back(arg("topk_ids", 3, {4, 8}, "int32"));
    c.tensors.push_back(arg("topk_weights", 4, {4, 8}, "fp32"));
    c.ints = {{"scoring", KJIT_MOE_SCORING_SIGMOID},
              {"renormalize", 1},
              {"n_group", 8},
              {"topk_group", 4},
              {"struct_size", static_cast<int>(sizeof(kjit_moe_route_options))}};
    c.floats = {{"routed_scaling_factor", 2.5f}};
    return c;
  };
  api.invoke = [](Call& c) {
    kjit_moe_route_options o;
    kjit_moe_route_options_init(&o);
    o.scoring = c.integer("scoring");
    o.renormalize = c.integer("renormalize");
    o.n_group = c.integer("n_group");
    o.topk_group = c.integer("topk_group");
    o.routed_scaling_factor = c.scalar("routed_scaling_factor");
    o.struct_size = static_cast<size_t>(c.integer("struct_size"));
    return kjit_moe_route(c.t(0), c.t(1), c.t(2), c.t(3), &o, nullptr);
  };
  api.specific = {
      set_int("scoring", 2),
      set_int("renormalize", 2),
      set_int("n_group", 3),
      set_int("n_group", 0),
      set_int("topk_group", 9),
      set_int("topk_group", 0),
      {"options struct_size 0", [](Call& c) { c.integer("struct_size") = 0; }, "struct_size"},
      {"int64 topk_ids", [](Call& c) { c.arg("topk_ids").t.t.dtype = dl_dtype("int64"); },
       "topk_ids"},
      {"bias of another length", [](Call& c) { reshape(c.arg("bias"), {63}); }, "bias"},
      {"topk_weights of another top_k",
       [](Call& c) {
         reshape(c.arg("topk_weights"), {4, 7});
       },
       "topk_weights"},
      {"int32 logits", [](Call& c) { c.arg("logits").t.t.dtype = dl_dtype("int32"); }, "logits"},
      {"topk_weights inside topk_ids",
       [](Call& c) { c.arg("topk_weights").t.t.data = c.arg("topk_ids").t.t.data; },
       "topk_weights"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("logits"), {0, 64});
    reshape(c.arg("topk_ids"), {0, 8});
    reshape(c.arg("topk_weights"), {0, 8});
  };
  return api;
}

Api moe_permute_api() {
  Api api;
  api.name = "kjit_moe_permute";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("x", 1, {4, 64}, "bf16"));
    c.tensors.push_back(arg("topk_ids", 2, {4, 2}, "int32"));
    c.tensors.push_back(arg("permuted", 3, {8, 64}, "bf16"));
    c.tensors.push_back(arg("expert_offsets", 4, {9}, "int32"));
    c.tensors.push_back(arg("permuted_to_src", 5, {8}, "int32"));
    c.tensors.push_back(arg("src_to_permuted", 6, {4, 2}, "int32"));
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_moe_permute(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), nullptr);
  };
  api.specific = {
      {"permuted with too few rows",
       [](Call& c) {
         reshape(c.arg("permuted"), {7, 64});
       },
       "permuted"},
      {"permuted of another dtype", [](Call& c) { c.arg("permuted").t.t.dtype = dl_dtype("fp16"); },
       "permuted"},
      {"expert_offsets without experts", [](Call& c) { reshape(c.arg("expert_offsets"), {1}); },
       "expert_offsets"},
      {"600 experts", [](Call& c) { reshape(c.arg("expert_offsets"), {601}); }, "experts"},
      {"src_to_permuted 1-D", [](Call& c) { reshape(c.arg("src_to_permuted"), {8}); },
       "src_to_permuted"},
      {"permuted_to_src inside expert_offsets",
       [](Call& c) {
         c.arg("permuted_to_src").t.t.data =
             static_cast<char*>(c.arg("expert_offsets").t.t.data) + 8;
       },
       "permuted_to_src"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("x"), {0, 64});
    reshape(c.arg("topk_ids"), {0, 2});
    reshape(c.arg("permuted"), {0, 64});
    reshape(c.arg("permuted_to_src"), {0});
    reshape(c.arg("src_to_permuted"), {0, 2});
  };
  return api;
}

Api moe_finalize_api() {
  Api api;
  api.name = "kjit_moe_finalize";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("expert_out", 1, {8, 64}, "bf16"));
    c.tensors.push_back(arg("src_to_permuted", 2, {4, 2}, "int32"));
    c.tensors.push_back(arg("topk_weights", 3, {4, 2}, "fp32"));
    c.tensors.push_back(arg("shared_out", 4, {4, 64}, "bf16", true));
    c.tensors.push_back(arg("out", 5, {4, 64}, "bf16"));
    return c;
  };
  api.invoke = [](Call& c) {
    return kjit_moe_finalize(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), nullptr);
  };
  api.specific = {
      {"out of another width",
       [](Call& c) {
         reshape(c.arg("out"), {4, 63});
       },
       "out"},
      {"fp32 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("fp32"); }, "out"},
      {"top_k 9",
       [](Call& c) {
         reshape(c.arg("src_to_permuted"), {4, 9});
         reshape(c.arg("topk_weights"), {4, 9});
       },
       "top_k"},
      {"shared_out of another row count",
       [](Call& c) {
         reshape(c.arg("shared_out"), {5, 64});
       },
       "shared_out"},
      {"out inside expert_out",
       [](Call& c) { c.arg("out").t.t.data = c.arg("expert_out").t.t.data; }, "out"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("src_to_permuted"), {0, 2});
    reshape(c.arg("topk_weights"), {0, 2});
    reshape(c.arg("shared_out"), {0, 64});
    reshape(c.arg("out"), {0, 64});
  };
  return api;
}

// kjit_moe_forward (tokens 4, hidden 64, experts 8, intermediate 32, top 2) with DeepSeek-style
// routing options (its fields, and top_k, are the scalars).
// The layer's options from a call's scalars (kjit_moe_forward and _fp8).
kjit_moe_forward_options moe_forward_options(Call& c) {
  kjit_moe_forward_options o;
  kjit_moe_forward_options_init(&o);
  o.route.scoring = c.integer("scoring");
  o.route.renormalize = c.integer("renormalize");
  o.route.n_group = c.integer("n_group");
  o.route.topk_group = c.integer("topk_group");
  o.route.routed_scaling_factor = c.scalar("routed_scaling_factor");
  o.route.struct_size = static_cast<size_t>(c.integer("route.struct_size"));
  o.struct_size = static_cast<size_t>(c.integer("struct_size"));
  return o;
}

Api moe_forward_api() {
  Api api;
  api.name = "kjit_moe_forward";
  api.make = [] {
    Call c;
    c.tensors.push_back(arg("x", 1, {4, 64}, "bf16"));
    c.tensors.push_back(arg("router_logits", 2, {4, 8}, "fp32"));
    c.tensors.push_back(arg("bias", 3, {8}, "fp32", true));
    c.tensors.push_back(arg("w13", 4, {8, 64, 64}, "bf16"));
    c.tensors.push_back(arg("w2", 5, {8, 64, 32}, "bf16"));
    c.tensors.push_back(arg("shared_out", 6, {4, 64}, "bf16", true));
    c.tensors.push_back(arg("workspace", 7, {1 << 20}, "int32"));
    c.tensors.back().any_dtype = true;
    c.tensors.push_back(arg("out", 8, {4, 64}, "bf16"));
    c.ints = {{"top_k", 2},
              {"scoring", KJIT_MOE_SCORING_SIGMOID},
              {"renormalize", 1},
              {"n_group", 4},
              {"topk_group", 2},
              {"struct_size", static_cast<int>(sizeof(kjit_moe_forward_options))},
              {"route.struct_size", static_cast<int>(sizeof(kjit_moe_route_options))}};
    c.floats = {{"routed_scaling_factor", 2.5f}};
    return c;
  };
  api.invoke = [](Call& c) {
    const kjit_moe_forward_options o = moe_forward_options(c);
    return kjit_moe_forward(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6), c.t(7),
                            c.integer("top_k"), &o, nullptr);
  };
  api.specific = {
      set_int("top_k", 0),
      set_int("top_k", 9),
      set_int("top_k", INT_MIN),
      set_int("scoring", 2),
      set_int("n_group", 3),
      set_int("topk_group", 5),
      {"options struct_size 0", [](Call& c) { c.integer("struct_size") = 0; }, "struct_size"},
      {"route struct_size 0", [](Call& c) { c.integer("route.struct_size") = 0; },
       "route.struct_size"},
      {"w13 of an odd row count",
       [](Call& c) {
         reshape(c.arg("w13"), {8, 63, 64});
       },
       "w13"},
      {"w13 of another hidden",
       [](Call& c) {
         reshape(c.arg("w13"), {8, 64, 32});
       },
       "w13"},
      {"w2 transposed",
       [](Call& c) {
         reshape(c.arg("w2"), {8, 32, 64});
       },
       "w2"},
      {"w2 fp16", [](Call& c) { c.arg("w2").t.t.dtype = dl_dtype("fp16"); }, "w2"},
      {"router_logits of another token count",
       [](Call& c) {
         reshape(c.arg("router_logits"), {5, 8});
       },
       "router_logits"},
      {"bias of another length", [](Call& c) { reshape(c.arg("bias"), {7}); }, "bias"},
      {"shared_out of another shape",
       [](Call& c) {
         reshape(c.arg("shared_out"), {4, 32});
       },
       "shared_out"},
      {"workspace one word short", [](Call& c) { reshape(c.arg("workspace"), {100}); },
       "workspace"},
      {"out inside the workspace",
       [](Call& c) { c.arg("out").t.t.data = c.arg("workspace").t.t.data; }, "out"},
      {"workspace over w13", [](Call& c) { c.arg("workspace").t.t.data = c.arg("w13").t.t.data; },
       "workspace"},
      {"out inside x", [](Call& c) { c.arg("out").t.t.data = c.arg("x").t.t.data; }, "out"},
      {"fp32 layer",
       [](Call& c) {
         for (const char* n : {"x", "w13", "w2", "shared_out", "out"}) {
           c.arg(n).t.t.dtype = dl_dtype("fp32");
         }
       },
       "x"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("x"), {0, 64});
    reshape(c.arg("router_logits"), {0, 8});
    reshape(c.arg("shared_out"), {0, 64});
    reshape(c.arg("out"), {0, 64});
  };
  return api;
}

// Both layouts of the grouped GEMM: a, b, the schedule tensor, out.
Api moe_grouped_gemm_api(bool masked) {
  Api api;
  api.name = masked ? "kjit_moe_grouped_gemm_masked" : "kjit_moe_grouped_gemm";
  api.make = [masked] {
    Call c;
    if (masked) {
      c.tensors.push_back(arg("a", 1, {4, 16, 64}, "bf16"));
      c.tensors.push_back(arg("b", 2, {4, 32, 64}, "bf16"));
      c.tensors.push_back(arg("counts", 3, {4}, "int32"));
      c.tensors.push_back(arg("out", 4, {4, 16, 32}, "bf16"));
    } else {
      c.tensors.push_back(arg("a", 1, {10, 64}, "bf16"));
      c.tensors.push_back(arg("b", 2, {4, 32, 64}, "bf16"));
      c.tensors.push_back(arg("expert_offsets", 3, {5}, "int32"));
      c.tensors.push_back(arg("out", 4, {10, 32}, "bf16"));
    }
    return c;
  };
  api.invoke = [masked](Call& c) {
    return masked ? kjit_moe_grouped_gemm_masked(c.t(0), c.t(1), c.t(2), c.t(3), nullptr)
                  : kjit_moe_grouped_gemm(c.t(0), c.t(1), c.t(2), c.t(3), nullptr);
  };
  const char* sched = masked ? "counts" : "expert_offsets";
  api.specific = {
      {"b with another k",
       [](Call& c) {
         reshape(c.arg("b"), {4, 32, 63});
       },
       "b"},
      {"b 2-D",
       [](Call& c) {
         reshape(c.arg("b"), {128, 64});
       },
       "b"},
      {"schedule of another length", [sched](Call& c) { reshape(c.arg(sched), {3}); }, sched},
      {"int64 schedule", [sched](Call& c) { c.arg(sched).t.t.dtype = dl_dtype("int64"); }, sched},
      {"fp32 operands",
       [](Call& c) {
         c.arg("a").t.t.dtype = dl_dtype("fp32");
         c.arg("b").t.t.dtype = dl_dtype("fp32");
       },
       "a"},
      {"out inside a", [](Call& c) { c.arg("out").t.t.data = c.arg("a").t.t.data; }, "out"},
      {"out inside b", [](Call& c) { c.arg("out").t.t.data = c.arg("b").t.t.data; }, "out"},
  };
  api.zero_size = [masked](Call& c) {
    reshape(c.arg("a"), masked ? std::vector<int64_t>{4, 0, 64} : std::vector<int64_t>{0, 64});
    reshape(c.arg("out"), masked ? std::vector<int64_t>{4, 0, 32} : std::vector<int64_t>{0, 32});
  };
  return api;
}

// Both layouts of the fp8 block-scaled grouped GEMM: the bf16 row's call and breakages with e4m3
// a and b (k 64, n 32: one scale block each way) and their scales after them.
Api moe_grouped_gemm_fp8_api(bool masked) {
  Api api = moe_grouped_gemm_api(masked);
  api.name = masked ? "kjit_moe_grouped_gemm_fp8_masked" : "kjit_moe_grouped_gemm_fp8";
  const auto bf16_call = api.make;
  api.make = [bf16_call, masked] {
    Call c = bf16_call();
    c.arg("a").t.t.dtype = c.arg("b").t.t.dtype = dl_dtype("e4m3");
    const auto at = c.tensors.begin() + 2;  // a, b, scale_a, scale_b, the schedule, out
    c.tensors.insert(at, arg("scale_b", 6, {4, 1, 1}, "fp32"));
    c.tensors.insert(
        c.tensors.begin() + 2,
        arg("scale_a", 5, masked ? std::vector<int64_t>{4, 16, 1} : std::vector<int64_t>{10, 1},
            "fp32"));
    return c;
  };
  api.invoke = [masked](Call& c) {
    return masked
               ? kjit_moe_grouped_gemm_fp8_masked(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5),
                                                  nullptr)
               : kjit_moe_grouped_gemm_fp8(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), nullptr);
  };
  const std::vector<Mutation> fp8 = {
      {"b of another dtype", [](Call& c) { c.arg("b").t.t.dtype = dl_dtype("bf16"); }, "b"},
      {"e4m3 out", [](Call& c) { c.arg("out").t.t.dtype = dl_dtype("e4m3"); }, "out"},
      {"scale_a one chunk long",
       [masked](Call& c) {
         reshape(c.arg("scale_a"),
                 masked ? std::vector<int64_t>{4, 16, 2} : std::vector<int64_t>{10, 2});
       },
       "scale_a"},
      {"scale_b without its experts dim",
       [](Call& c) {
         reshape(c.arg("scale_b"), {1, 1});
       },
       "scale_b"},
      {"scale_b one expert short",
       [](Call& c) {
         reshape(c.arg("scale_b"), {3, 1, 1});
       },
       "scale_b"},
      {"bf16 scale_b", [](Call& c) { c.arg("scale_b").t.t.dtype = dl_dtype("bf16"); }, "scale_b"},
      {"out inside scale_a", [](Call& c) { c.arg("out").t.t.data = c.arg("scale_a").t.t.data; },
       "out"},
  };
  api.specific.insert(api.specific.end(), fp8.begin(), fp8.end());
  const auto bf16_zero = api.zero_size;
  api.zero_size = [bf16_zero, masked](Call& c) {
    bf16_zero(c);
    reshape(c.arg("scale_a"), masked ? std::vector<int64_t>{4, 0, 1} : std::vector<int64_t>{0, 1});
  };
  return api;
}

// kjit_moe_forward_fp8: hidden 128, intermediate 64 (one scale block each way), 8 experts.
Api moe_forward_fp8_api() {
  Api api = moe_forward_api();
  api.name = "kjit_moe_forward_fp8";
  const auto bf16_call = api.make;
  api.make = [bf16_call] {
    Call c = bf16_call();
    c.tensors.clear();
    c.tensors.push_back(arg("x", 1, {4, 128}, "bf16"));
    c.tensors.push_back(arg("router_logits", 2, {4, 8}, "fp32"));
    c.tensors.push_back(arg("bias", 3, {8}, "fp32", true));
    c.tensors.push_back(arg("w13", 4, {8, 128, 128}, "e4m3"));
    c.tensors.push_back(arg("w13_scale", 10, {8, 1, 1}, "fp32"));
    c.tensors.push_back(arg("w2", 5, {8, 128, 64}, "e4m3"));
    c.tensors.push_back(arg("w2_scale", 11, {8, 1, 1}, "fp32"));
    c.tensors.push_back(arg("shared_out", 6, {4, 128}, "bf16", true));
    c.tensors.push_back(arg("workspace", 7, {1 << 20}, "int32"));
    c.tensors.back().any_dtype = true;
    c.tensors.push_back(arg("out", 8, {4, 128}, "bf16"));
    return c;
  };
  api.invoke = [](Call& c) {
    const kjit_moe_forward_options o = moe_forward_options(c);
    return kjit_moe_forward_fp8(c.t(0), c.t(1), c.t(2), c.t(3), c.t(4), c.t(5), c.t(6), c.t(7),
                                c.t(8), c.t(9), c.integer("top_k"), &o, nullptr);
  };
  api.specific = {
      set_int("top_k", 0),
      set_int("n_group", 3),
      {"bf16 experts", [](Call& c) { c.arg("w13").t.t.dtype = dl_dtype("bf16"); }, "w13"},
      {"w2 of another intermediate",
       [](Call& c) {
         reshape(c.arg("w2"), {8, 128, 32});
       },
       "w2"},
      {"w13_scale per tensor", [](Call& c) { reshape(c.arg("w13_scale"), {1}); }, "w13_scale"},
      {"w2_scale one expert short",
       [](Call& c) {
         reshape(c.arg("w2_scale"), {7, 1, 1});
       },
       "w2_scale"},
      {"bf16 w2_scale", [](Call& c) { c.arg("w2_scale").t.t.dtype = dl_dtype("bf16"); },
       "w2_scale"},
      {"workspace sized for bf16 experts", [](Call& c) { reshape(c.arg("workspace"), {1600}); },
       "workspace"},
      {"workspace over w13_scale",
       [](Call& c) { c.arg("workspace").t.t.data = c.arg("w13_scale").t.t.data; }, "workspace"},
      {"out inside w2_scale", [](Call& c) { c.arg("out").t.t.data = c.arg("w2_scale").t.t.data; },
       "out"},
      {"fp32 x",
       [](Call& c) {
         for (const char* n : {"x", "shared_out", "out"}) c.arg(n).t.t.dtype = dl_dtype("fp32");
       },
       "x"},
  };
  api.zero_size = [](Call& c) {
    reshape(c.arg("x"), {0, 128});
    reshape(c.arg("router_logits"), {0, 8});
    reshape(c.arg("shared_out"), {0, 128});
    reshape(c.arg("out"), {0, 128});
  };
  return api;
}

std::vector<Api> table() {
  std::vector<Api> t = {
      rmsnorm_api("kjit_rmsnorm", kjit_rmsnorm),
      rmsnorm_api("kjit_gemma_rmsnorm", kjit_gemma_rmsnorm),
      fused_api("kjit_fused_add_rmsnorm", kjit_fused_add_rmsnorm),
      fused_api("kjit_gemma_fused_add_rmsnorm", kjit_gemma_fused_add_rmsnorm),
      layernorm_api(),
      rope_api(),
      llama31_rope_api(),
      cos_sin_cache_api(),
      append_kv_api(),
      append_kv_fp8_api(),
      decode_run_api(),
      prefill_run_api(),
      prefill_ragged_run_api(),
      merge_states_api(),
      merge_states_n_api(),
      argmax_api(),
      speculative_api(),
      gemm_api(),
      gemm_fp8_api(),
      quant_fp8_api(),
      embedding_api(),
      rmsnorm_quant_fp8_api(false),
      rmsnorm_quant_fp8_api(true),
      silu_and_mul_quant_fp8_api(),
      moe_route_api(),
      moe_permute_api(),
      moe_finalize_api(),
      moe_grouped_gemm_api(false),
      moe_grouped_gemm_api(true),
      moe_forward_api(),
      rope_append_api(false),
      rope_append_api(true),
      llama31_rope_append_api(false),
      llama31_rope_append_api(true),
      qk_norm_rope_api(),
      moe_grouped_gemm_fp8_api(false),
      moe_grouped_gemm_fp8_api(true),
      moe_forward_fp8_api(),
      rope_indptr_api(false),
      rope_indptr_api(true),
      top_k_api(),
      all_reduce_api(false),
      all_reduce_api(true),
  };
  add_activations(t);
  add_samplers(t);
  add_filters(t);
  return t;
}

// Entry points without tensor arguments: the last two tests below cover them (the communicators'
// life cycle, which needs a device and peers: tests/unit/comm_abi_test.cpp).
const std::set<std::string> kCoveredElsewhere = {"kjit_version_string",
                                                 "kjit_version_number",
                                                 "kjit_abi_version",
                                                 "kjit_status_string",
                                                 "kjit_last_error",
                                                 "kjit_decode_options_init",
                                                 "kjit_sampling_options_init",
                                                 "kjit_batch_decode_plan",
                                                 "kjit_decode_plan_workspace_bytes",
                                                 "kjit_decode_plan_num_splits",
                                                 "kjit_decode_plan_tactic",
                                                 "kjit_decode_plan_destroy",
                                                 "kjit_prefill_options_init",
                                                 "kjit_batch_prefill_plan",
                                                 "kjit_prefill_plan_workspace_bytes",
                                                 "kjit_prefill_plan_destroy",
                                                 "kjit_config_init",
                                                 "kjit_configure",
                                                 "kjit_precompile",
                                                 "kjit_precompile_file",
                                                 "kjit_op_supported",
                                                 "kjit_gemm_options_init",
                                                 "kjit_moe_route_options_init",
                                                 "kjit_moe_forward_options_init",
                                                 "kjit_moe_forward_workspace_bytes",
                                                 "kjit_comm_options_init",
                                                 "kjit_comm_get_unique_id",
                                                 "kjit_comm_init",
                                                 "kjit_comm_destroy"};

bool is_argument_error(kjit_status s) {
  return s == KJIT_ERROR_INVALID_ARGUMENT || s == KJIT_ERROR_UNSUPPORTED;
}

// What is wrong with how a broken call was handled, or "" when it was rejected as it must be:
// an argument error whose message starts with the function and names the broken argument.
std::string rejection_problem(const Api& api, const Mutation& m) {
  Call c = api.make();
  m.apply(c);
  const kjit_status s = api.invoke(c);
  const std::string msg = kjit_last_error();
  std::string why;
  if (!is_argument_error(s)) {
    why = "not rejected";
  } else if (msg.rfind(api.name, 0) != 0 || msg.size() <= api.name.size() + 2) {
    why = "the message does not start with the function";
  } else if (!m.arg.empty() && msg.find(m.arg) == std::string::npos) {
    why = "the message does not name " + m.arg;
  }
  if (why.empty()) return "";
  return api.name + " with " + m.what + ": " + why + " (" + kjit_status_string(s) + ": " + msg +
         ")";
}

std::string join_lines(const std::vector<std::string>& v, size_t max) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += "\n  " + v[i];
  if (v.size() > max) s += "\n  ... and " + std::to_string(v.size() - max) + " more";
  return s;
}

}  // namespace

TEST_CASE("hostile abi: the table covers every public function of kjit.h",
          "[reliability][hostile_abi]") {
  std::ifstream in(KJIT_SOURCE_DIR "/include/kjit/kjit.h");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> declared;
  std::regex decl(R"(KJIT_API\s+[^;(]*?\b(kjit_[a-z0-9_]+)\s*\()");
  const std::string s = text.str();
  for (std::sregex_iterator it(s.begin(), s.end(), decl), end; it != end; ++it) {
    declared.insert((*it)[1]);
  }
  REQUIRE(declared.size() >= 17);
  std::set<std::string> covered = kCoveredElsewhere;
  for (const auto& api : table()) covered.insert(api.name);
  for (const auto& fn : declared) {
    INFO(fn << " is declared in kjit.h: add it to the hostile-input table");
    CHECK(covered.count(fn) == 1);
  }
}

TEST_CASE("hostile abi: every function rejects every broken argument before the driver",
          "[reliability][hostile_abi]") {
  // With a device the valid baseline would launch on fake pointers: there it runs in a child
  // process that sees none.
  KJIT_RUN_WITHOUT_GPU();
  size_t cases = 0;
  std::vector<std::string> problems;
  for (const Api& api : table()) {
    // The unbroken call gets past validation: only the missing driver stops it.
    Call valid = api.make();
    kjit_status base = api.invoke(valid);
    INFO(api.name << " valid call: " << kjit_last_error());
    REQUIRE(base == KJIT_ERROR_NO_DEVICE);

    std::vector<Mutation> all = api.specific;
    const Call proto = api.make();
    for (size_t i = 0; i < proto.tensors.size(); ++i) {
      if (proto.tensors[i].null) continue;  // not passed in this variant
      auto m = tensor_mutations(proto, i);
      all.insert(all.end(), m.begin(), m.end());
    }
    if (api.check_floats) {
      auto f = float_mutations(proto);
      all.insert(all.end(), f.begin(), f.end());
    }
    for (const Mutation& m : all) {
      std::string problem = rejection_problem(api, m);
      if (!problem.empty()) problems.push_back(problem);
      ++cases;
    }
  }
  INFO(problems.size() << " of " << cases
                       << " broken calls mishandled:" << join_lines(problems, 40));
  CHECK(problems.empty());
  CHECK(cases > 2000);
  WARN(cases << " broken calls checked, all rejected before any driver call");
}

TEST_CASE("hostile abi: zero-size calls are validated no-ops that never reach the driver",
          "[reliability][hostile_abi]") {
  for (const Api& api : table()) {
    INFO(api.name);
    REQUIRE(api.zero_size);
    Call c = api.make();
    api.zero_size(c);
    kjit_status s = api.invoke(c);
    INFO(kjit_last_error());
    CHECK(s == KJIT_SUCCESS);
    CHECK(std::string(kjit_last_error()).empty());
    // Still validated: a zero-size call with a broken argument fails.
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      // Optional tensors, and a workspace that a batch-0 plan does not use, may be anything.
      if (c.tensors[i].nullable || c.tensors[i].null || c.tensors[i].any_dtype) continue;
      INFO("argument " << c.tensors[i].name);
      Call z = api.make();
      api.zero_size(z);
      z.tensors[i].t.t.dtype.lanes = 2;
      CHECK(is_argument_error(api.invoke(z)));
      Call n = api.make();
      api.zero_size(n);
      n.tensors[i].null = true;
      CHECK(is_argument_error(api.invoke(n)));
    }
    for (size_t i = 0; i < c.floats.size() && api.check_floats; ++i) {
      Call z = api.make();
      api.zero_size(z);
      z.floats[i].second = std::numeric_limits<float>::quiet_NaN();
      CHECK(api.invoke(z) == KJIT_ERROR_INVALID_ARGUMENT);
    }
  }
}

TEST_CASE("hostile abi: the functions without tensors take any value",
          "[reliability][hostile_abi]") {
  for (int s : {INT_MIN, -1, KJIT_ERROR_CAPTURING + 1, 999, INT_MAX}) {
    const char* text = kjit_status_string(static_cast<kjit_status>(s));
    REQUIRE(text != nullptr);
    CHECK(std::string(text) == "KJIT_ERROR_UNKNOWN_STATUS");
  }
  REQUIRE(kjit_version_string() != nullptr);
  CHECK(kjit_version_number() == KJIT_VERSION_NUMBER);
  CHECK(kjit_abi_version() == KJIT_ABI_VERSION);
  // An error's message stays readable until the next call on the thread, then clears.
  CHECK(kjit_rmsnorm(nullptr, nullptr, nullptr, 0.0f, nullptr) == KJIT_ERROR_INVALID_ARGUMENT);
  REQUIRE(kjit_last_error() != nullptr);
  CHECK(std::string(kjit_last_error()).find("kjit_rmsnorm") == 0);
  CHECK(std::string(kjit_version_string()) == KJIT_VERSION_STRING);
}

TEST_CASE("hostile abi: kjit_batch_decode_plan rejects every broken argument",
          "[reliability][hostile_abi]") {
  struct Plan {
    std::vector<int32_t> indptr = {0, 3, 3, 7};
    const int32_t* indptr_ptr = nullptr;  // overrides indptr when set
    bool null_indptr = false;
    int batch = 3, qo = 32, kv = 8, head_dim = 128, page_size = 16;
    int layout = KJIT_KV_LAYOUT_NHD;
    DLDataType q_dtype = dl_dtype("bf16"), kv_dtype = dl_dtype("bf16");
    kjit_decode_options o = [] {
      kjit_decode_options x;
      kjit_decode_options_init(&x);
      x.num_sms = 132;  // plans without a device
      return x;
    }();
    bool null_options = false, null_out = false;
    int device = 0;
    kjit_decode_plan* out = reinterpret_cast<kjit_decode_plan*>(0x1);  // must become NULL
    kjit_status run() {
      return kjit_batch_decode_plan(null_indptr ? nullptr : indptr.data(), batch, qo, kv, head_dim,
                                    page_size, static_cast<kjit_kv_layout>(layout), q_dtype,
                                    kv_dtype, null_options ? nullptr : &o, device,
                                    null_out ? nullptr : &out);
    }
  };
  {
    Plan valid;
    REQUIRE(valid.run() == KJIT_SUCCESS);
    REQUIRE(valid.out != nullptr);
    CHECK(kjit_decode_plan_num_splits(valid.out) >= 1);
    kjit_decode_plan_destroy(valid.out);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::string, std::function<void(Plan&)>>> broken = {
      {"NULL plan out-pointer", [](Plan& p) { p.null_out = true; }},
      {"NULL kv_indptr with requests", [](Plan& p) { p.null_indptr = true; }},
      {"negative batch", [](Plan& p) { p.batch = -1; }},
      {"batch INT_MIN", [](Plan& p) { p.batch = INT_MIN; }},
      {"autotune 3", [](Plan& p) { p.o.autotune = 3; }},
      {"autotune INT_MIN", [](Plan& p) { p.o.autotune = INT_MIN; }},
      {"tune_timing -1", [](Plan& p) { p.o.tune_timing = -1; }},
      {"tune_timing 4", [](Plan& p) { p.o.tune_timing = 4; }},
      {"kv_indptr decreasing",
       [](Plan& p) {
         p.indptr = {0, 3, 2, 7};
       }},
      {"kv_indptr starting below 0",
       [](Plan& p) {
         p.indptr = {-1, 3, 3, 7};
       }},
      {"zero qo heads", [](Plan& p) { p.qo = 0; }},
      {"negative kv heads", [](Plan& p) { p.kv = -8; }},
      {"qo heads not a multiple of kv heads", [](Plan& p) { p.qo = 30; }},
      {"group of 64", [](Plan& p) { p.qo = 512; }},
      {"head_dim 100", [](Plan& p) { p.head_dim = 100; }},
      {"head_dim INT_MAX", [](Plan& p) { p.head_dim = INT_MAX; }},
      {"page_size 0", [](Plan& p) { p.page_size = 0; }},
      {"page_size -16", [](Plan& p) { p.page_size = -16; }},
      {"layout 2", [](Plan& p) { p.layout = 2; }},
      {"q_dtype fp32", [](Plan& p) { p.q_dtype = dl_dtype("fp32"); }},
      {"q_dtype with 2 lanes", [](Plan& p) { p.q_dtype.lanes = 2; }},
      {"q_dtype code 200", [](Plan& p) { p.q_dtype.code = 200; }},
      {"kv_dtype fp16 beside bf16 q", [](Plan& p) { p.kv_dtype = dl_dtype("fp16"); }},
      {"kv_dtype int32", [](Plan& p) { p.kv_dtype = dl_dtype("int32"); }},
      {"options.struct_size 0", [](Plan& p) { p.o.struct_size = 0; }},
      {"options.struct_size 3", [](Plan& p) { p.o.struct_size = 3; }},
      {"options.sm_scale NaN", [nan](Plan& p) { p.o.sm_scale = nan; }},
      {"options.sm_scale Inf", [inf](Plan& p) { p.o.sm_scale = inf; }},
      {"options.sm_scale -1", [](Plan& p) { p.o.sm_scale = -1.0f; }},
      {"options.logits_soft_cap NaN", [nan](Plan& p) { p.o.logits_soft_cap = nan; }},
      {"options.logits_soft_cap -Inf", [inf](Plan& p) { p.o.logits_soft_cap = -inf; }},
      {"options.logits_soft_cap -1", [](Plan& p) { p.o.logits_soft_cap = -1.0f; }},
      {"options.window_left -2", [](Plan& p) { p.o.window_left = -2; }},
      {"options.num_splits -1", [](Plan& p) { p.o.num_splits = -1; }},
      {"options.num_splits 100000", [](Plan& p) { p.o.num_splits = 100000; }},
      {"options.num_sms -1", [](Plan& p) { p.o.num_sms = -1; }},
      {"device id -1", [](Plan& p) { p.device = -1; }},
  };
  for (const auto& [what, f] : broken) {
    Plan p;
    f(p);
    kjit_status s = p.run();
    std::string msg = kjit_last_error();
    INFO(what << " -> " << kjit_status_string(s) << ": " << msg);
    CHECK(is_argument_error(s));
    CHECK(msg.rfind("kjit_batch_decode_plan", 0) == 0);
    if (!p.null_out) CHECK(p.out == nullptr);
  }
  // Extreme but not invalid: a plan or a clear refusal, never a crash (or, under the sanitizers,
  // an overflow).
  for (auto f : std::vector<std::function<void(Plan&)>>{[](Plan& p) {
                                                          p.indptr = {0, INT_MAX, INT_MAX, INT_MAX};
                                                        },
                                                        [](Plan& p) { p.page_size = INT_MAX; },
                                                        [](Plan& p) {
                                                          p.indptr = {0, INT_MAX, INT_MAX, INT_MAX};
                                                          p.page_size = INT_MAX;
                                                          p.o.num_splits = 256;
                                                        }}) {
    Plan p;
    f(p);
    kjit_status s = p.run();
    INFO(kjit_last_error());
    CHECK((s == KJIT_SUCCESS || is_argument_error(s)));
    if (s == KJIT_SUCCESS) kjit_decode_plan_destroy(p.out);
  }
  // The plan's accessors take NULL.
  kjit_decode_options_init(nullptr);
  kjit_sampling_options_init(nullptr);
  CHECK(kjit_decode_plan_workspace_bytes(nullptr) == 0);
  CHECK(kjit_decode_plan_num_splits(nullptr) == 0);
  CHECK(std::string(kjit_decode_plan_tactic(nullptr)).empty());
  kjit_decode_plan_destroy(nullptr);
}

TEST_CASE("hostile abi: kjit_batch_prefill_plan rejects every broken argument",
          "[reliability][hostile_abi]") {
  struct Plan {
    std::vector<int32_t> qo = {0, 5, 5, 7}, kv = {0, 3, 3, 7};
    bool null_qo = false, null_kv = false;
    int batch = 3, qo_heads = 32, kv_heads = 8, head_dim = 128, page_size = 16;
    int layout = KJIT_KV_LAYOUT_NHD;
    DLDataType q_dtype = dl_dtype("bf16"), kv_dtype = dl_dtype("bf16");
    kjit_prefill_options o = [] {
      kjit_prefill_options x;
      kjit_prefill_options_init(&x);
      return x;
    }();
    bool null_options = false, null_out = false;
    int device = 0;
    kjit_prefill_plan* out = reinterpret_cast<kjit_prefill_plan*>(0x1);  // must become NULL
    kjit_status run() {
      return kjit_batch_prefill_plan(
          null_qo ? nullptr : qo.data(), null_kv ? nullptr : kv.data(), batch, qo_heads, kv_heads,
          head_dim, page_size, static_cast<kjit_kv_layout>(layout), q_dtype, kv_dtype,
          null_options ? nullptr : &o, device, null_out ? nullptr : &out);
    }
  };
  {
    Plan valid;
    REQUIRE(valid.run() == KJIT_SUCCESS);
    REQUIRE(valid.out != nullptr);
    CHECK(kjit_prefill_plan_workspace_bytes(valid.out) == 0);
    kjit_prefill_plan_destroy(valid.out);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<std::string, std::function<void(Plan&)>>> broken = {
      {"NULL plan out-pointer", [](Plan& p) { p.null_out = true; }},
      {"NULL qo_indptr with requests", [](Plan& p) { p.null_qo = true; }},
      {"NULL kv_indptr with requests", [](Plan& p) { p.null_kv = true; }},
      {"negative batch", [](Plan& p) { p.batch = -1; }},
      {"qo_indptr decreasing",
       [](Plan& p) {
         p.qo = {0, 5, 4, 7};
       }},
      {"kv_indptr starting below 0",
       [](Plan& p) {
         p.kv = {-1, 3, 3, 7};
       }},
      {"zero qo heads", [](Plan& p) { p.qo_heads = 0; }},
      {"qo heads not a multiple of kv heads", [](Plan& p) { p.qo_heads = 30; }},
      {"group of 32", [](Plan& p) { p.qo_heads = 256; }},
      {"head_dim 96", [](Plan& p) { p.head_dim = 96; }},
      {"page_size -1", [](Plan& p) { p.page_size = -1; }},
      {"layout 2", [](Plan& p) { p.layout = 2; }},
      {"q_dtype fp32", [](Plan& p) { p.q_dtype = dl_dtype("fp32"); }},
      {"kv_dtype fp16 beside bf16 q", [](Plan& p) { p.kv_dtype = dl_dtype("fp16"); }},
      {"kv_dtype fp8 e4m3 beside fp32 q",
       [](Plan& p) {
         p.q_dtype = dl_dtype("fp32");
         p.kv_dtype = DLDataType{10, 8, 1};
       }},
      {"kv_dtype int8",
       [](Plan& p) {
         p.kv_dtype = DLDataType{kDLInt, 8, 1};
       }},
      {"options.struct_size 0", [](Plan& p) { p.o.struct_size = 0; }},
      {"options.causal 2", [](Plan& p) { p.o.causal = 2; }},
      {"options.sm_scale NaN", [nan](Plan& p) { p.o.sm_scale = nan; }},
      {"options.logits_soft_cap -1", [](Plan& p) { p.o.logits_soft_cap = -1.0f; }},
      {"options.window_left -2", [](Plan& p) { p.o.window_left = -2; }},
      {"device id -1", [](Plan& p) { p.device = -1; }},
  };
  for (const auto& [what, f] : broken) {
    Plan p;
    f(p);
    kjit_status s = p.run();
    std::string msg = kjit_last_error();
    INFO(what << " -> " << kjit_status_string(s) << ": " << msg);
    CHECK(is_argument_error(s));
    CHECK(msg.rfind("kjit_batch_prefill_plan", 0) == 0);
    if (!p.null_out) CHECK(p.out == nullptr);
  }
  // Extreme but not invalid: a plan or a clear refusal, never a crash.
  for (auto f :
       std::vector<std::function<void(Plan&)>>{[](Plan& p) {
                                                 p.qo = {0, INT_MAX, INT_MAX, INT_MAX};
                                               },
                                               [](Plan& p) {
                                                 p.qo = {0, INT_MAX / 4, INT_MAX / 4, INT_MAX / 2};
                                                 p.qo_heads = 128;
                                               },
                                               [](Plan& p) { p.page_size = INT_MAX; }}) {
    Plan p;
    f(p);
    kjit_status s = p.run();
    INFO(kjit_last_error());
    CHECK((s == KJIT_SUCCESS || is_argument_error(s)));
    if (s == KJIT_SUCCESS) kjit_prefill_plan_destroy(p.out);
  }
  kjit_prefill_options_init(nullptr);
  CHECK(kjit_prefill_plan_workspace_bytes(nullptr) == 0);
  kjit_prefill_plan_destroy(nullptr);
}

TEST_CASE("hostile abi: the engine life-cycle functions refuse broken arguments",
          "[reliability][hostile_abi]") {
  auto refused = [](const char* fn, kjit_status s) {
    const std::string msg = kjit_last_error();
    INFO(fn << " -> " << kjit_status_string(s) << ": " << msg);
    CHECK(is_argument_error(s));
    CHECK(msg.rfind(fn, 0) == 0);
  };
  kjit_config_init(nullptr);
  kjit_config valid;
  kjit_config_init(&valid);
  refused("kjit_configure", kjit_configure(nullptr));
  for (size_t size : {size_t{0}, size_t{3}, sizeof(size_t)}) {
    kjit_config c = valid;
    c.struct_size = size;
    refused("kjit_configure", kjit_configure(&c));
  }
  for (int bad : {INT_MIN, -2, 2, INT_MAX}) {
    kjit_config c = valid;
    c.disable_jit = bad;
    refused("kjit_configure", kjit_configure(&c));
  }
  for (int bad : {INT_MIN, -2, 11, INT_MAX}) {
    kjit_config c = valid;
    c.log_level = bad;
    refused("kjit_configure", kjit_configure(&c));
  }
  kjit_config empty_dir = valid;
  empty_dir.cache_dir = "";
  refused("kjit_configure", kjit_configure(&empty_dir));
  const std::string long_text(100000, 'x');
  const char* const bad_ops[] = {nullptr,   "",         "no_such_op",
                                 "RMSNORM", "\xff\xfe", long_text.c_str()};
  for (const char* op : bad_ops) {
    refused("kjit_precompile", kjit_precompile(op, "dtype=bf16,hidden=4096", -1));
    refused("kjit_op_supported", kjit_op_supported(op, "dtype=bf16,hidden=4096", "sm_90"));
  }
  const char* const bad_params[] = {"dtype",
                                    "=bf16",
                                    "dtype=bf16,dtype=fp16,hidden=4096",
                                    "dtype=bf16,hidden=0",
                                    "dtype=bf16,hidden=-1",
                                    "dtype=bf16,hidden=99999999999999999999",
                                    "dtype=\xff,hidden=4096",
                                    long_text.c_str()};
  for (const char* params : bad_params) {
    refused("kjit_precompile", kjit_precompile("rmsnorm", params, -1));
    refused("kjit_op_supported", kjit_op_supported("rmsnorm", params, "sm_90"));
  }
  for (int device : {INT_MIN, -2}) {
    refused("kjit_precompile", kjit_precompile("rmsnorm", "dtype=bf16,hidden=4096", device));
  }
  const char* const bad_paths[] = {nullptr, "", "/no/such/workload.jsonl", "\xff\xfe",
                                   long_text.c_str()};
  for (const char* path : bad_paths) {
    refused("kjit_precompile_file", kjit_precompile_file(path, -1, nullptr));
  }
  kjit_precompile_counts short_counts{};
  short_counts.struct_size = 4;
  refused("kjit_precompile_file",
          kjit_precompile_file("/no/such/workload.jsonl", -1, &short_counts));
  for (const char* arch : {"", "sm_", "sm_9x", "x", long_text.c_str()}) {
    refused("kjit_op_supported", kjit_op_supported("rmsnorm", "dtype=bf16,hidden=4096", arch));
  }
}
