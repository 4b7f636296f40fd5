/*
 * kjit: run-time compiled GPU kernels for LLM inference.
 *
 * The C ABI is the only public surface of libkjit.so. Conventions:
 *  - Every function returns a kjit_status (or a plain value where it cannot fail).
 *  - On failure, kjit_last_error() returns a message for the calling thread (for compile failures
 *    it holds the NVRTC log and the specialization URI). No C++ exception crosses this boundary.
 *  - Tensors are DLPack DLTensor (dlpack/dlpack.h). Inputs come first, then outputs, then
 *    scalars, then `stream`: a CUstream / cudaStream_t, NULL meaning the legacy default stream.
 *  - The runtime is process-global and created lazily on first use. Unless a function says
 *    otherwise it is safe to call from any number of threads at once.
 *  - Ops only enqueue work on `stream`; they never synchronize with the host once the
 *    specialization is loaded (the first call of a specialization may compile it).
 */
#ifndef KJIT_KJIT_H
#define KJIT_KJIT_H

#include <dlpack/dlpack.h>

#include "kjit/version.h"

#if defined(_WIN32)
#define KJIT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define KJIT_API __attribute__((visibility("default")))
#else
#define KJIT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kjit_status {
  KJIT_SUCCESS = 0,
  /* A null pointer, a wrong dtype, shape, stride, alignment or device, a bad scalar. */
  KJIT_ERROR_INVALID_ARGUMENT = 1,
  /* A well-formed request this build or this GPU cannot serve (e.g. no arch in common). */
  KJIT_ERROR_UNSUPPORTED = 2,
  /* No CUDA driver (libcuda.so.1) or no CUDA device; compile and cache work still do. */
  KJIT_ERROR_NO_DEVICE = 3,
  /* A CUDA driver call failed; the message names the call and the CUresult. */
  KJIT_ERROR_CUDA = 4,
  /* NVRTC failed; the message holds the URI and the compile log. */
  KJIT_ERROR_COMPILE = 5,
  /* KJIT_DISABLE_JIT=1 and no valid cached module exists; the message names the URI. */
  KJIT_ERROR_JIT_DISABLED = 6,
  /* Reading or writing the disk cache failed in a way that could not be worked around. */
  KJIT_ERROR_CACHE = 7,
  KJIT_ERROR_OUT_OF_MEMORY = 8,
  KJIT_ERROR_INTERNAL = 9
} kjit_status;

/* ---- Versions and errors (thread-safe, never fail) ------------------------------------------ */

/* "MAJOR.MINOR.PATCH" of the loaded library (compare with KJIT_VERSION_STRING). */
KJIT_API const char* kjit_version_string(void);
/* MAJOR*10000 + MINOR*100 + PATCH of the loaded library. */
KJIT_API int kjit_version_number(void);
/* KJIT_ABI_VERSION of the loaded library; a mismatch with the header means rebuild. */
KJIT_API int kjit_abi_version(void);
/* Static text for a status code ("KJIT_ERROR_INVALID_ARGUMENT", ...). */
KJIT_API const char* kjit_status_string(kjit_status status);
/* Detail of the last failure on the calling thread; "" if the last call succeeded. The pointer
 * stays valid until the next kjit call on the same thread. */
KJIT_API const char* kjit_last_error(void);

/* ---- Normalization ------------------------------------------------------------------------ */

/*
 * out = input * rsqrt(mean(input^2, last dim) + eps) * weight
 *
 * input, out: [..., hidden], bf16 / fp16 / fp32 (same dtype), on one CUDA device. The last dim
 *   must be contiguous (stride 1); the leading dims must collapse into rows with one row stride
 *   (row-strided views such as x[:, :hidden] are accepted). out may alias input exactly.
 * weight: [hidden], same dtype, contiguous; out must not overlap it.
 * Any hidden size works. 16-byte aligned pointers and row strides take the 16-byte vector path;
 * otherwise the widest vector width the alignment allows is used (down to scalar): never an
 * error. eps must be finite and >= 0. Zero rows is a successful no-op.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out,
                                  float eps, void* stream);

/*
 * Gemma-style RMSNorm: out = input * rsqrt(mean(input^2, last dim) + eps) * (weight + 1), the
 * + 1 done in fp32 (as Gemma's reference implementation does). Arguments, alignment, aliasing,
 * zero-size and thread-safety rules as kjit_rmsnorm.
 */
KJIT_API kjit_status kjit_gemma_rmsnorm(const DLTensor* input, const DLTensor* weight,
                                        DLTensor* out, float eps, void* stream);

/*
 * Residual add fused with RMSNorm, both in place:
 *   residual = input + residual           (fp32 add, rounded to the dtype: the new residual)
 *   input    = residual * rsqrt(mean(residual^2, last dim) + eps) * weight
 * The norm reads the new residual as rounded to the dtype, so the result matches the unfused
 * `residual = input + residual; input = rmsnorm(residual)`.
 *
 * input, residual: [..., hidden], same shape, bf16 / fp16 / fp32 (same dtype), on one CUDA
 *   device. The last dim must be contiguous (stride 1); the leading dims must collapse into rows
 *   with one row stride each (row-strided views are accepted, and the two strides may differ).
 *   input and residual must not overlap (not even as the same view).
 * weight: [hidden], same dtype, contiguous; must not overlap input or residual.
 * Any hidden size 1..262144 works; alignment selects the vector width, never an error (as
 * kjit_rmsnorm). eps must be finite and >= 0. Zero rows is a successful no-op.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_fused_add_rmsnorm(DLTensor* input, DLTensor* residual,
                                            const DLTensor* weight, float eps, void* stream);

/* kjit_fused_add_rmsnorm with Gemma's (weight + 1). Same rules. */
KJIT_API kjit_status kjit_gemma_fused_add_rmsnorm(DLTensor* input, DLTensor* residual,
                                                  const DLTensor* weight, float eps, void* stream);

/*
 * out = (input - mean) * rsqrt(var + eps) * gamma + beta over the last dim, with the biased
 * variance var = mean((input - mean)^2). fp32 statistics, computed in two passes (mean first,
 * then squared deviations), so rows with a large common offset keep their precision; one
 * rounding to the output type.
 *
 * input, out: [..., hidden], bf16 / fp16 / fp32 (same dtype and shape), on one CUDA device. The
 *   last dim must be contiguous (stride 1); the leading dims must collapse into rows with one
 *   row stride (row-strided views are accepted). out may alias input exactly (in place).
 * gamma, beta: [hidden], contiguous, the same dtype as each other: input's dtype, or fp32 beside
 *   bf16 / fp16 input (other mixes: KJIT_ERROR_UNSUPPORTED). out must not overlap them.
 * Any hidden size 1..262144 works; alignment selects the vector width, never an error (as
 * kjit_rmsnorm). eps must be finite and >= 0. Zero rows is a successful no-op.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_layernorm(const DLTensor* input, const DLTensor* gamma,
                                    const DLTensor* beta, DLTensor* out, float eps, void* stream);

/* ---- Activations (kernels/activation, src/ops/activation) ---------------------------------- */

/*
 * Gated MLP activations: out = act(input[..., :d]) * input[..., d:], computed in fp32, one
 * rounding to the output type. silu(x) = x / (1 + exp(-x)) (SwiGLU);
 * gelu(x) = 0.5 x (1 + erf(x / sqrt(2))) (exact GeGLU, as PyTorch's approximate='none');
 * gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (approximate='tanh').
 *
 * input: [..., 2*d], out: [..., d] with the same leading dims; bf16 / fp16 / fp32 (same dtype),
 *   on one CUDA device. The last dim must be contiguous (stride 1); the leading dims must
 *   collapse into rows with one row stride (row-strided views are accepted). out must not
 *   overlap input at all (no in-place form: out is half as wide).
 * Any d from 1 to 2^24 works. The vector width is the widest (up to 16 bytes) that divides d and
 * that both pointers and both row strides are aligned to; odd d or misaligned views run
 * narrower, down to scalar: never an error. Zero rows (or d = 0) is a successful no-op.
 * Accuracy: fp32 math with __expf / erff; beyond the output rounding the error is a few fp32
 * ulp of the result plus about |x * up| * 2^-22 in the tails (docs/c-api.md).
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_silu_and_mul(const DLTensor* input, DLTensor* out, void* stream);
/* As kjit_silu_and_mul with the exact (erf) GELU. */
KJIT_API kjit_status kjit_gelu_and_mul(const DLTensor* input, DLTensor* out, void* stream);
/* As kjit_silu_and_mul with the tanh-approximated GELU. */
KJIT_API kjit_status kjit_gelu_tanh_and_mul(const DLTensor* input, DLTensor* out, void* stream);

/* ---- Rotary position embedding (kernels/rope, src/ops/rope) -------------------------------- */

/*
 * Rotary position embedding of q and k (FlashInfer's apply_rope_pos_ids). For each token t, head
 * and frequency index i < rotary_dim / 2, with angle a = (pos_ids[t] / rope_scale) *
 * rope_theta^(-2i / rotary_dim), the pair (x1, x2) becomes (x1 cos a - x2 sin a,
 * x2 cos a + x1 sin a). Pairs are (i, i + rotary_dim / 2) when interleave = 0 (NeoX, "rotate
 * half") and (2i, 2i + 1) when interleave = 1 (GPT-J). Dims >= rotary_dim are copied unchanged.
 *
 * q, q_out: [tokens, num_qo_heads, head_dim]; k, k_out: [tokens, num_kv_heads, head_dim] (the
 *   head counts may differ: GQA / MQA). bf16 / fp16, all four the same dtype, on one CUDA
 *   device. The last dim must be contiguous; the token and head strides are free (views of a
 *   fused qkv tensor are fine). q_out may be q itself (the same view: in place), else it must
 *   not overlap q, k, k_out or pos_ids; likewise k_out. Any alignment works (narrower vectors).
 * pos_ids: [tokens], int32 or int64, contiguous.
 * rotary_dim: even, 2..head_dim; 0 means head_dim. head_dim up to 1024, rotary_dim up to 512.
 * interleave: 0 or 1. rope_scale, rope_theta: finite, > 0.
 * Accuracy: the angle is formed from the double-precision inverse frequency carried as two
 *   floats, so for |pos| < 2^24 it is within 3e-7 rad of the exact value at any position (a
 *   plain fp32 pos * freq would be off by up to 0.008 rad at position 131072); sin / cos are
 *   fp32 (sincospif); one rounding to the output type.
 * Zero tokens (or no heads) is a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_apply_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                             DLTensor* k_out, const DLTensor* pos_ids,
                                             int rotary_dim, int interleave, float rope_scale,
                                             float rope_theta, void* stream);

/*
 * kjit_apply_rope_pos_ids with Llama 3.1's frequency scaling (FlashInfer's
 * apply_llama31_rope_pos_ids; Llama 3.1 uses rope_scale 8, rope_theta 500000,
 * low_freq_factor 1, high_freq_factor 4, old_context_len 8192). With f = rope_theta^(-2i /
 * rotary_dim) and smooth = clamp((old_context_len * f / (2 pi) - low_freq_factor) /
 * (high_freq_factor - low_freq_factor), 0, 1), the frequency is (1 - smooth) * f / rope_scale +
 * smooth * f: scaled in the low band, kept in the high band, blended in between; a = pos * that.
 * low_freq_factor, old_context_len: finite, > 0; high_freq_factor: finite, > low_freq_factor.
 * Everything else as kjit_apply_rope_pos_ids.
 */
KJIT_API kjit_status kjit_apply_llama31_rope_pos_ids(
    const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out, const DLTensor* pos_ids,
    int rotary_dim, int interleave, float rope_scale, float rope_theta, float low_freq_factor,
    float high_freq_factor, float old_context_len, void* stream);

/*
 * Rotary embedding from a precomputed cos / sin cache, in place (vLLM's and SGLang's
 * rotary_embedding, FlashInfer's apply_rope_with_cos_sin_cache). For token t with p =
 * positions[t]: cos a_i = cos_sin_cache[p][i], sin a_i = cos_sin_cache[p][rotary_dim / 2 + i],
 * applied to pairs (i, i + rotary_dim / 2) when is_neox = 1 or (2i, 2i + 1) when is_neox = 0;
 * dims >= rotary_dim are left as they are.
 *
 * q: [tokens, num_heads * head_size] or [tokens, num_heads, head_size]; k likewise with its own
 *   head count, or NULL (no key). bf16 / fp16, same dtype, one CUDA device, last dim
 *   contiguous, token (and head) strides free; q and k must not overlap.
 * positions: [tokens], int32 or int64, contiguous. A token whose position is outside
 *   [0, max_position) is left unchanged (no read past the cache).
 * cos_sin_cache: [max_position, rotary_dim], fp32 or q's dtype, last dim contiguous;
 *   rotary_dim even, 2..head_size (up to 512). head_size: > 0 (up to 1024). is_neox: 0 or 1.
 * Zero tokens is a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_apply_rope_with_cos_sin_cache(const DLTensor* positions, DLTensor* q,
                                                        DLTensor* k, int head_size,
                                                        const DLTensor* cos_sin_cache, int is_neox,
                                                        void* stream);

/* ---- Paged KV cache (kernels/kv_cache, src/ops/kv_cache) ----------------------------------- */

/* Paged KV cache layouts: [num_pages, page_size, num_kv_heads, head_dim] (NHD) or
 * [num_pages, num_kv_heads, page_size, head_dim] (HND). */
#define KJIT_KV_LAYOUT_NHD 0
#define KJIT_KV_LAYOUT_HND 1

/*
 * Append tokens' keys and values to a paged KV cache (FlashInfer's append_paged_kv_cache).
 * Token t goes to request b = batch_indices[t] at position p = positions[t] of that request's
 * sequence: page kv_indices[kv_indptr[b] + p / page_size], slot p % page_size. Nothing else in
 * the caches is written.
 *
 * append_k, append_v: [nnz, num_kv_heads, head_dim], same shape and dtype (bf16 / fp16 / fp32),
 *   last dim contiguous, token and head strides free.
 * batch_indices, positions: [nnz] int32, contiguous.
 * paged_k_cache, paged_v_cache: 4-D in `layout` (KJIT_KV_LAYOUT_NHD or _HND), same shape and
 *   dtype as the append tensors, last dim contiguous, other strides free (so k and v may be the
 *   two halves of one [num_pages, 2, ...] cache). They must not overlap each other or any input.
 *   8-bit (fp8) caches are KJIT_ERROR_UNSUPPORTED for now.
 * kv_indptr: [batch + 1], kv_indices: [nnz_pages], kv_last_page_len: [batch], int32,
 *   contiguous. kv_last_page_len is checked for shape only and not read (as in FlashInfer).
 * The page table is read on the device only: no host synchronization, so the call can be
 *   captured in a CUDA graph. A token whose request index is outside [0, batch), whose position
 *   is negative, whose page slot falls outside its request's [kv_indptr[b], kv_indptr[b + 1])
 *   or outside kv_indices, or whose page id is outside [0, num_pages) is skipped: nothing is
 *   written out of bounds. Two tokens naming the same slot race (one of them wins).
 * head_dim up to 1024; any alignment works (narrower vectors). nnz = 0 is a successful no-op
 *   after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_append_paged_kv_cache(const DLTensor* append_k, const DLTensor* append_v,
                                                const DLTensor* batch_indices,
                                                const DLTensor* positions, DLTensor* paged_k_cache,
                                                DLTensor* paged_v_cache, const DLTensor* kv_indices,
                                                const DLTensor* kv_indptr,
                                                const DLTensor* kv_last_page_len, int layout,
                                                void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KJIT_KJIT_H */
