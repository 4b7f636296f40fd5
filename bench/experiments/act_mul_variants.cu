// Load / store policy and geometry variants of silu_and_mul (bf16, 16384 x 14336) timed beside a
// device-to-device copy of the same bytes, to find what separates kjit's kernel (97.3% of copy)
// from torch.compile's (100.3%) in round 13. A standalone probe, not part of the library: build
// on the H200 with `nvcc -O3 -arch=sm_90a -o /tmp/amv bench/experiments/act_mul_variants.cu`.
// Timing: CUDA events around 20 back-to-back launches, median of 30 samples, hot L2 (the way
// `kjit-cli bench --timer events-batched --hot-l2` times).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define CK(x)                                                               \
  do {                                                                      \
    cudaError_t e = (x);                                                    \
    if (e != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      return 1;                                                             \
    }                                                                       \
  } while (0)

constexpr int kRows = 16384, kD = 14336, kVec = 8;

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fdividef(g, 1.0f + __expf(-g)) * u;
}

// LOAD 0: ld.global.lu (kjit today), 1: plain ld.global, 2: ld.global.nc (read-only path).
// STORE 0: plain, 1: st.global.cs.
template <int LOAD>
__device__ __forceinline__ uint4 ld(const uint4* p) {
  if constexpr (LOAD == 0) return __ldlu(p);
  if constexpr (LOAD == 1) return *p;
  return __ldg(p);
}

__device__ __forceinline__ uint4 combine(uint4 a, uint4 b) {
  const __nv_bfloat162* ga = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* ub = reinterpret_cast<const __nv_bfloat162*>(&b);
  uint4 o;
  __nv_bfloat162* oo = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 g = __bfloat1622float2(ga[i]), u = __bfloat1622float2(ub[i]);
    oo[i] = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
  }
  return o;
}

// 2-D grid as kjit: x over a row's vector chunks (UNROLL vectors a thread), y over rows.
template <int LOAD, int STORE, int UNROLL>
__global__ void __launch_bounds__(128) rows_kernel(const __nv_bfloat16* in, __nv_bfloat16* out) {
  const int n_vec = kD / kVec;
  const int step = gridDim.x * blockDim.x;
  const long long row = blockIdx.y;
  const uint4* g = reinterpret_cast<const uint4*>(in + row * 2 * kD);
  const uint4* u = reinterpret_cast<const uint4*>(in + row * 2 * kD + kD);
  uint4* y = reinterpret_cast<uint4*>(out + row * kD);
  const int v0 = blockIdx.x * blockDim.x + threadIdx.x;
  uint4 a[UNROLL], b[UNROLL];
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {
    const int v = v0 + k * step;
    if (v < n_vec) {
      a[k] = ld<LOAD>(g + v);
      b[k] = ld<LOAD>(u + v);
    }
  }
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {
    const int v = v0 + k * step;
    if (v < n_vec) {
      const uint4 o = combine(a[k], b[k]);
      if constexpr (STORE == 1) {
        __stcs(y + v, o);
      } else {
        y[v] = o;
      }
    }
  }
}

// Flat 1-D grid as Triton's pointwise kernels: one vector of out per thread, index split into
// (row, column) by a division.
template <int LOAD>
__global__ void __launch_bounds__(128) flat_kernel(const __nv_bfloat16* in, __nv_bfloat16* out) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // vector of out
  const long long row = i / (kD / kVec), col = i % (kD / kVec);
  const uint4* g = reinterpret_cast<const uint4*>(in + row * 2 * kD) + col;
  const uint4 a = ld<LOAD>(g), b = ld<LOAD>(g + kD / kVec);
  reinterpret_cast<uint4*>(out)[i] = combine(a, b);
}

// Persistent: grid of BLOCKS_PER_SM x SMs, each thread strides over the flat vector index.
template <int LOAD, int UNROLL>
__global__ void __launch_bounds__(128)
    persistent_kernel(const __nv_bfloat16* in, __nv_bfloat16* out, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < n;
       i0 += UNROLL * stride) {
    uint4 a[UNROLL], b[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
      const long long i = i0 + k * stride;
      if (i < n) {
        const long long row = i / (kD / kVec), col = i % (kD / kVec);
        const uint4* g = reinterpret_cast<const uint4*>(in + row * 2 * kD) + col;
        a[k] = ld<LOAD>(g);
        b[k] = ld<LOAD>(g + kD / kVec);
      }
    }
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
      const long long i = i0 + k * stride;
      if (i < n) reinterpret_cast<uint4*>(out)[i] = combine(a[k], b[k]);
    }
  }
}

template <typename F>
float time_us(F launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 5; ++i) launch();
  std::vector<float> s;
  for (int r = 0; r < 30; ++r) {
    cudaEventRecord(e0);
    for (int i = 0; i < 20; ++i) launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    s.push_back(ms * 1000 / 20);
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

int main() {
  const size_t in_bytes = size_t(kRows) * 2 * kD * 2, out_bytes = in_bytes / 2;
  const double moved = double(in_bytes + out_bytes);
  __nv_bfloat16 *in, *out, *ref;
  void *c0, *c1;
  CK(cudaMalloc(&in, in_bytes));
  CK(cudaMalloc(&out, out_bytes));
  CK(cudaMalloc(&ref, out_bytes));
  CK(cudaMalloc(&c0, size_t(moved / 2)));
  CK(cudaMalloc(&c1, size_t(moved / 2)));
  {
    std::vector<__nv_bfloat16> h(in_bytes / 2);
    unsigned s = 12345;
    for (auto& x : h) {
      s = s * 1664525u + 1013904223u;
      x = __float2bfloat16(float(s >> 8) / float(1 << 24) * 4 - 2);
    }
    CK(cudaMemcpy(in, h.data(), in_bytes, cudaMemcpyHostToDevice));
  }
  const float copy =
      time_us([&] { cudaMemcpyAsync(c1, c0, size_t(moved / 2), cudaMemcpyDeviceToDevice); });
  std::printf("copy of %.0f MB: %.2f us, %.0f GB/s\n", moved / 2e6, copy, moved / copy / 1e3);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int n_vec = kD / kVec;
  rows_kernel<1, 0, 1><<<dim3(n_vec / 128, kRows), 128>>>(in, ref);
  CK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> href(out_bytes / 2), hout(out_bytes / 2);
  CK(cudaMemcpy(href.data(), ref, out_bytes, cudaMemcpyDeviceToHost));
  auto report = [&](const char* name, auto launch) {
    cudaMemset(out, 0xff, out_bytes);
    const float t = time_us(launch);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(hout.data(), out, out_bytes, cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (size_t i = 0; i < hout.size(); ++i) {
      bad +=
          reinterpret_cast<unsigned short&>(hout[i]) != reinterpret_cast<unsigned short&>(href[i]);
    }
    std::printf("%-44s %8.2f us %6.0f GB/s %5.1f%% of copy  %s%s\n", name, t, moved / t / 1e3,
                100 * copy / t, bad ? "MISMATCH " : "bitwise equal",
                e ? cudaGetErrorString(e) : "");
  };
#define ROWS(L, S, U)                                                                       \
  report("rows load=" #L " store=" #S " unroll=" #U, [&] {                                  \
    rows_kernel<L, S, U><<<dim3((n_vec + 128 * U - 1) / (128 * U), kRows), 128>>>(in, out); \
  })
  ROWS(0, 0, 2);  // kjit today
  ROWS(1, 0, 2);
  ROWS(2, 0, 2);
  ROWS(0, 1, 2);
  ROWS(1, 1, 2);
  ROWS(0, 0, 1);
  ROWS(1, 0, 1);
  ROWS(0, 0, 4);
  ROWS(1, 0, 4);
  ROWS(1, 1, 4);
  ROWS(0, 0, 7);
  report("flat load=0", [&] { flat_kernel<0><<<long(kRows) * n_vec / 128, 128>>>(in, out); });
  report("flat load=1", [&] { flat_kernel<1><<<long(kRows) * n_vec / 128, 128>>>(in, out); });
  report("flat load=2", [&] { flat_kernel<2><<<long(kRows) * n_vec / 128, 128>>>(in, out); });
  const long long n = (long long)kRows * n_vec;
  for (int bps : {8, 16, 32}) {
    char name[64];
    std::snprintf(name, sizeof name, "persistent load=1 unroll=2 %d blocks/SM", bps);
    report(name, [&] { persistent_kernel<1, 2><<<sms * bps, 128>>>(in, out, n); });
    std::snprintf(name, sizeof name, "persistent load=0 unroll=4 %d blocks/SM", bps);
    report(name, [&] { persistent_kernel<0, 4><<<sms * bps, 128>>>(in, out, n); });
  }
  std::printf("copy again: %.2f us\n", time_us([&] {
                cudaMemcpyAsync(c1, c0, size_t(moved / 2), cudaMemcpyDeviceToDevice);
              }));
  return 0;
}
