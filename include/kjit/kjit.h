/*
 * kjit: run-time compiled GPU kernels for LLM inference.
 *
 * The C ABI is the only public surface of libkjit.so. Conventions:
 *  - Every function returns a kjit_status (or a plain value where it cannot fail).
 *  - On failure, kjit_last_error() returns a message for the calling thread (for compile failures
 *    it holds the NVRTC log and the specialization URI). No C++ exception crosses this boundary.
 *  - Tensors are DLPack DLTensor (dlpack/dlpack.h).
 *  - Parameters come in one order: the object the call runs with (a decode plan), the tensors it
 *    only reads, the tensors it writes (in place or not), then scalars, enums and option
 *    structs, then `stream`: a CUstream / cudaStream_t, NULL meaning the legacy default stream.
 *    A function that creates an object hands it back through its last parameter.
 *  - A choice among named alternatives is an enum (kjit_rope_layout, kjit_kv_layout).
 *  - Options that grow are versioned structs whose first field is `struct_size`: their `_init`
 *    function fills this header's layout with the defaults, NULL stands for the defaults, and the
 *    library reads only the fields struct_size covers, so a caller built against an older header
 *    keeps working. A new option is a new field, not a new function.
 *  - The runtime is process-global and created lazily on first use. Unless a function says
 *    otherwise it is safe to call from any number of threads at once.
 *  - Ops only enqueue work on `stream`; they never synchronize with the host once the
 *    specialization is loaded (the first call of a specialization may compile it).
 *
 * ABI 2 (kjit 0.3.0) changed these signatures to follow the rules above; rebuild callers of ABI 1:
 *  - kjit_fused_add_rmsnorm, kjit_gemma_fused_add_rmsnorm: weight first (it is only read).
 *  - kjit_apply_rope_pos_ids, kjit_apply_llama31_rope_pos_ids: pos_ids before q_out, k_out; the
 *    pair layout is a kjit_rope_layout (was int interleave, same values).
 *  - kjit_apply_rope_with_cos_sin_cache: (positions, cos_sin_cache, q, k, head_size, layout);
 *    layout is a kjit_rope_layout (was int is_neox, the opposite meaning).
 *  - kjit_append_paged_kv_cache: the page table (kv_indices, kv_indptr, kv_last_page_len) before
 *    the caches; layout is a kjit_kv_layout, as in kjit_batch_decode_plan (same values).
 *  - The samplers, renorm, mask and softmax functions take their scalar parameters (top_k, top_p,
 *    min_p, temperature) in a kjit_sampling_options instead of positional arguments.
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
  KJIT_ERROR_INTERNAL = 9,
  /* The call needs a specialization that is not loaded yet while its stream captures a CUDA
   * graph: compiling or loading a module there would break the capture. Load it before capture
   * (kjit_precompile, or one call outside capture); the capture is left intact. */
  KJIT_ERROR_CAPTURING = 10
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

/* ---- Engine life cycle: configuration, warm-up, support queries --------------------------- */

/*
 * Settings an engine owns instead of environment variables. Versioned by struct_size:
 * kjit_config_init fills this header's layout with "take it from the environment" for every
 * field, and the library reads only the fields struct_size covers.
 */
typedef struct kjit_config {
  size_t struct_size;    /* sizeof(kjit_config) */
  const char* cache_dir; /* the disk cache (else KJIT_CACHE_DIR, else ~/.cache/kjit); NULL: env */
  const char* aot_dir;   /* ':'-separated AOT package folders (KJIT_AOT_DIR); NULL: env */
  int disable_jit;       /* 1: never compile, only cached / AOT cubins (KJIT_DISABLE_JIT); 0: may
                          * compile; -1: env */
  int log_level;         /* API call log level 0, 1, 3, 5 or 10 (KJIT_LOGLEVEL); -1: env */
} kjit_config;

/* Fills `config` with struct_size and -1 / NULL everywhere (each setting from the environment). */
KJIT_API void kjit_config_init(kjit_config* config);

/*
 * Applies `config` to the process-wide runtime. It must come before the first call that reads
 * the cache or compiles (any op, kjit_precompile, kjit_op_supported): afterwards the runtime
 * exists and this returns KJIT_ERROR_INVALID_ARGUMENT, changing nothing. Strings are copied.
 * Thread-safety: safe, but racing it against the first op call decides which one comes first.
 */
KJIT_API kjit_status kjit_configure(const kjit_config* config);

/*
 * Warm-up before graph capture: compiles (or reads from the cache / an AOT package) the
 * specialization that `op` uses for `params`, and loads it on device `device_id`, without
 * launching anything, so that the first captured call finds it loaded. device_id -1 compiles for
 * every target of the arch context (KJIT_CUDA_ARCH_LIST and the visible devices) and loads
 * nothing: a build step on a machine without a GPU.
 * op: a registry name, as `kjit-cli ops` lists them ("rmsnorm", "decode_attention", ...).
 * params: "name=value" pairs separated by commas or spaces, the `kjit-cli compile --set` grammar
 *   and axes ("dtype=bf16,hidden=4096,rows=1").
 * Returns KJIT_ERROR_INVALID_ARGUMENT for an unknown op or parameter, KJIT_ERROR_UNSUPPORTED when
 * the values name no specialization the op has or the arch cannot run it, and the statuses of a
 * compile (COMPILE, JIT_DISABLED, CACHE, NO_DEVICE, CUDA).
 * Thread-safety: safe from any thread; concurrent warm-ups of one specialization compile it once.
 */
KJIT_API kjit_status kjit_precompile(const char* op, const char* params, int device_id);

/* What kjit_precompile_file did. compiled and cached count a specialization once per target it
 * was built for (device_id -1) or once (a device); skipped and failed count specializations.
 * Set struct_size = sizeof(kjit_precompile_counts) before the call; the library writes only the
 * fields struct_size covers. */
typedef struct kjit_precompile_counts {
  size_t struct_size;
  int compiled; /* compiled by NVRTC in this call */
  int cached;   /* found in the disk cache or an AOT package, or already loaded */
  int skipped;  /* no target (or not the device) can run it: an sm_90 cluster variant on sm_80 */
  int failed;   /* not compiled or loaded; the first failure is the returned status */
} kjit_precompile_counts;

/*
 * Warm-up from the files the bench and the trace dump use: kjit_precompile for every
 * specialization that the calls `path` describes select.
 * path: a definition (bench/definitions/NAME.json, or a KJIT_TRACE_DUMP definitions/ file: each
 *   specialization a call of it may select, whatever its var axes and device), a workload file
 *   (JSON lines {"definition": NAME, "axes": {var axis: value}}: the files of bench/workloads, a
 *   trace's workloads/NAME.jsonl, `kjit-cli bench --from` input; what those calls select), or a
 *   folder of them (its .json and .jsonl files). A line's definition comes from the definitions/
 * folder beside the file's folder, else from kjit's own definitions of that name. device_id: as
 * kjit_precompile (-1: build for the arch context, load nothing). counts: NULL, or filled as above
 * (on failure too). The whole file is read and mapped before anything compiles: a file that cannot
 * be read, text that is not JSON, an unknown definition or op, or a line that maps to no
 * specialization is KJIT_ERROR_INVALID_ARGUMENT naming the file and line, with nothing compiled.
 * Then every specialization is attempted; the status is that of the first that failed (COMPILE,
 * JIT_DISABLED, CACHE, NO_DEVICE, CUDA), its message naming the line that asked for it.
 * Thread-safety: as kjit_precompile.
 */
KJIT_API kjit_status kjit_precompile_file(const char* path, int device_id,
                                          kjit_precompile_counts* counts);

/*
 * Would a call of `op` with `params` run on `arch` ("sm_90a", "9.0", ...; NULL: every visible
 * device)? KJIT_SUCCESS when it would; otherwise the status the call would fail with
 * (KJIT_ERROR_UNSUPPORTED, KJIT_ERROR_INVALID_ARGUMENT) and the reason in kjit_last_error(). The
 * answer comes from the checks the op itself makes; nothing is compiled or loaded.
 * Thread-safety: safe from any thread.
 */
KJIT_API kjit_status kjit_op_supported(const char* op, const char* params, const char* arch);

/* ---- Normalization ------------------------------------------------------------------------ */

/*
 * out = input * rsqrt(mean(input^2, last dim) + eps) * weight
 *
 * input, out: [..., hidden], bf16 / fp16 / fp32 (same dtype), on one CUDA device. The last dim
 *   must be contiguous (stride 1); the leading dims must collapse into rows with one row stride
 *   (row-strided views such as x[:, :hidden] are accepted). out may alias input exactly.
 * weight: [hidden], same dtype, contiguous; out must not overlap it.
 * Any hidden size 1..262144 works. 16-byte aligned pointers and row strides take the 16-byte vector
 * path; otherwise the widest vector width the alignment allows is used (down to scalar): never an
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
KJIT_API kjit_status kjit_fused_add_rmsnorm(const DLTensor* weight, DLTensor* input,
                                            DLTensor* residual, float eps, void* stream);

/* kjit_fused_add_rmsnorm with Gemma's (weight + 1). Same rules. */
KJIT_API kjit_status kjit_gemma_fused_add_rmsnorm(const DLTensor* weight, DLTensor* input,
                                                  DLTensor* residual, float eps, void* stream);

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
/* As kjit_silu_and_mul with sigmoid(x) = 1 / (1 + exp(-x)) and no x factor: the GLU gate,
 * out = sigmoid(x[..., :d]) * x[..., d:]. */
KJIT_API kjit_status kjit_sigmoid_and_mul(const DLTensor* input, DLTensor* out, void* stream);

/* ---- Rotary position embedding (kernels/rope, src/ops/rope) -------------------------------- */

/* Which dims of a head form the rotated pairs, for frequency index i < rotary_dim / 2. */
typedef enum kjit_rope_layout {
  KJIT_ROPE_NEOX = 0,       /* (i, i + rotary_dim / 2): NeoX / Llama, "rotate half" */
  KJIT_ROPE_INTERLEAVED = 1 /* (2i, 2i + 1): GPT-J */
} kjit_rope_layout;

/*
 * Rotary position embedding of q and k (FlashInfer's apply_rope_pos_ids). For each token t, head
 * and frequency index i < rotary_dim / 2, with angle a = (pos_ids[t] / rope_scale) *
 * rope_theta^(-2i / rotary_dim), the pair (x1, x2) becomes (x1 cos a - x2 sin a,
 * x2 cos a + x1 sin a), the pairs chosen by `layout`. Dims >= rotary_dim are copied unchanged.
 *
 * q, q_out: [tokens, num_qo_heads, head_dim]; k, k_out: [tokens, num_kv_heads, head_dim] (the
 *   head counts may differ: GQA / MQA). bf16 / fp16, all four the same dtype, on one CUDA
 *   device. The last dim must be contiguous; the token and head strides are free (views of a
 *   fused qkv tensor are fine). q_out may be q itself (the same view: in place), else it must
 *   not overlap q, k, k_out or pos_ids; likewise k_out. Any alignment works (narrower vectors).
 * pos_ids: [tokens], int32 or int64, contiguous.
 * rotary_dim: even, 2..head_dim; 0 means head_dim. head_dim up to 1024, rotary_dim up to 512.
 * layout: KJIT_ROPE_NEOX or KJIT_ROPE_INTERLEAVED. rope_scale, rope_theta: finite, > 0.
 * Accuracy: the angle is formed from the double-precision inverse frequency carried as two
 *   floats and reduced exactly, then sin / cos come from the hardware's fp32 approximations, so
 *   for |pos| < 2^24 the angle is within 9e-7 rad of the exact value at any position (a plain
 *   fp32 pos * freq would be off by up to 0.008 rad at position 131072); one rounding to the
 *   output type (docs/c-api.md).
 * Zero tokens (or no heads) is a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_apply_rope_pos_ids(const DLTensor* q, const DLTensor* k,
                                             const DLTensor* pos_ids, DLTensor* q_out,
                                             DLTensor* k_out, int rotary_dim,
                                             kjit_rope_layout layout, float rope_scale,
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
    const DLTensor* q, const DLTensor* k, const DLTensor* pos_ids, DLTensor* q_out, DLTensor* k_out,
    int rotary_dim, kjit_rope_layout layout, float rope_scale, float rope_theta,
    float low_freq_factor, float high_freq_factor, float old_context_len, void* stream);

/*
 * Rotary embedding from a precomputed cos / sin cache, in place (vLLM's and SGLang's
 * rotary_embedding, FlashInfer's apply_rope_with_cos_sin_cache). For token t with p =
 * positions[t]: cos a_i = cos_sin_cache[p][i], sin a_i = cos_sin_cache[p][rotary_dim / 2 + i],
 * applied to the pairs `layout` names (as kjit_apply_rope_pos_ids); dims >= rotary_dim are left
 * as they are.
 *
 * q: [tokens, num_heads * head_size] or [tokens, num_heads, head_size]; k likewise with its own
 *   head count, or NULL (no key). bf16 / fp16, same dtype, one CUDA device, last dim
 *   contiguous, token (and head) strides free; q and k must not overlap.
 * positions: [tokens], int32 or int64, contiguous. A token whose position is outside
 *   [0, max_position) is left unchanged (no read past the cache).
 * cos_sin_cache: [max_position, rotary_dim], fp32 or q's dtype, last dim contiguous;
 *   rotary_dim even, 2..head_size (up to 512). head_size: > 0 (up to 1024).
 * layout: KJIT_ROPE_NEOX or KJIT_ROPE_INTERLEAVED.
 * Zero tokens is a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_apply_rope_with_cos_sin_cache(const DLTensor* positions,
                                                        const DLTensor* cos_sin_cache, DLTensor* q,
                                                        DLTensor* k, int head_size,
                                                        kjit_rope_layout layout, void* stream);

/*
 * Per-head RMSNorm of q and k, then RoPE, in place, in one launch (Qwen3's q_norm / k_norm and
 * rotary embedding over the q and k heads of a fused qkv projection). For every token and head
 * of q (weight q_weight) and of k (weight k_weight), in fp32:
 *   n[d] = x[d] / sqrt(mean over d of x[d]^2 + eps) * weight[d]   (all head_dim dims)
 * then n's first rotary_dim dims are rotated as kjit_apply_rope_pos_ids rotates them, and the
 * head is rounded once to its dtype.
 *
 * q: [tokens, num_qo_heads, head_dim]; k: [tokens, num_kv_heads, head_dim]; bf16 / fp16, one
 *   dtype and CUDA device; last dim contiguous, token and head strides free (the q and k parts
 *   of a [tokens, (num_qo_heads + 2 num_kv_heads) * head_dim] qkv GEMM output); q and k must not
 *   overlap.
 * q_weight, k_weight: [head_dim], q's dtype, contiguous. Must not overlap q or k.
 * pos_ids: [tokens], int32 or int64, contiguous. eps: finite, >= 0.
 * rotary_dim, layout, rope_scale, rope_theta: as kjit_apply_rope_pos_ids.
 * head_dim up to 1024, rotary_dim up to 512; any alignment works (narrower vectors). Zero tokens
 *   is a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_qk_rmsnorm_rope(const DLTensor* q_weight, const DLTensor* k_weight,
                                          const DLTensor* pos_ids, DLTensor* q, DLTensor* k,
                                          float eps, int rotary_dim, kjit_rope_layout layout,
                                          float rope_scale, float rope_theta, void* stream);

/*
 * kjit_apply_rope_pos_ids with the positions of a ragged batch (FlashInfer's apply_rope): the
 * tokens [indptr[b], indptr[b + 1]) belong to request b, and token t of request b is at
 * position offsets[b] + t - indptr[b]. Rotation, accuracy and everything else as
 * kjit_apply_rope_pos_ids.
 *
 * indptr: [batch + 1]; offsets: [batch]; both int32 or both int64, contiguous, on q's device;
 *   q_out / k_out must not overlap them. batch 0 takes zero tokens only.
 * The caller's contract (not checked: the data is on the device): indptr is non-decreasing,
 *   indptr[0] = 0 and indptr[batch] = tokens; empty requests are fine. Otherwise each token still
 *   takes the position of some request (never a read or a write out of bounds).
 * The request of each token is found on the device (a bisection of indptr: no host
 *   synchronization; the call can be captured in a CUDA graph).
 */
KJIT_API kjit_status kjit_apply_rope(const DLTensor* q, const DLTensor* k, const DLTensor* indptr,
                                     const DLTensor* offsets, DLTensor* q_out, DLTensor* k_out,
                                     int rotary_dim, kjit_rope_layout layout, float rope_scale,
                                     float rope_theta, void* stream);

/* kjit_apply_rope with Llama 3.1's frequency scaling (FlashInfer's apply_llama31_rope): the
 * frequencies of kjit_apply_llama31_rope_pos_ids, the positions of kjit_apply_rope. */
KJIT_API kjit_status kjit_apply_llama31_rope(const DLTensor* q, const DLTensor* k,
                                             const DLTensor* indptr, const DLTensor* offsets,
                                             DLTensor* q_out, DLTensor* k_out, int rotary_dim,
                                             kjit_rope_layout layout, float rope_scale,
                                             float rope_theta, float low_freq_factor,
                                             float high_freq_factor, float old_context_len,
                                             void* stream);

/* ---- Paged KV cache (kernels/kv_cache, src/ops/kv_cache) ----------------------------------- */

/* The dims of a paged KV cache tensor. */
typedef enum kjit_kv_layout {
  KJIT_KV_LAYOUT_NHD = 0, /* [num_pages, page_size, num_kv_heads, head_dim] */
  KJIT_KV_LAYOUT_HND = 1  /* [num_pages, num_kv_heads, page_size, head_dim] */
} kjit_kv_layout;

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
 *   8-bit (fp8) caches take kjit_append_paged_kv_cache_fp8 (here KJIT_ERROR_UNSUPPORTED).
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
KJIT_API kjit_status kjit_append_paged_kv_cache(
    const DLTensor* append_k, const DLTensor* append_v, const DLTensor* batch_indices,
    const DLTensor* positions, const DLTensor* kv_indices, const DLTensor* kv_indptr,
    const DLTensor* kv_last_page_len, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
    kjit_kv_layout layout, void* stream);

/*
 * kjit_append_paged_kv_cache into float8 e4m3 caches (the caches kjit_batch_decode_run reads
 * with k_scale / v_scale): each element x of a key row is stored as e4m3(x / k_scale) (x / in
 * fp32, rounded to nearest even, saturated to +-448, NaN kept; a scale that is not > 0 stores
 * zeros), values likewise with v_scale, so dequantization is code * scale.
 *
 * k_scale, v_scale: fp32 on the device, contiguous, both [1] (one scale per tensor: the decode's
 *   k_scale / v_scale) or both [num_kv_heads] (one per kv head). Read on the device, so a
 *   captured graph replays with the scales' current contents. Must not overlap the caches.
 * paged_k_cache, paged_v_cache: float8_e4m3fn (DLPack code KJIT_DL_FLOAT8_E4M3FN, 8 bits);
 *   append_k / append_v bf16, fp16 or fp32. Everything else as kjit_append_paged_kv_cache.
 */
KJIT_API kjit_status kjit_append_paged_kv_cache_fp8(
    const DLTensor* append_k, const DLTensor* append_v, const DLTensor* batch_indices,
    const DLTensor* positions, const DLTensor* kv_indices, const DLTensor* kv_indptr,
    const DLTensor* kv_last_page_len, const DLTensor* k_scale, const DLTensor* v_scale,
    DLTensor* paged_k_cache, DLTensor* paged_v_cache, kjit_kv_layout layout, void* stream);

/*
 * RoPE and the paged KV append in one launch (FlashInfer's fused rope + append): q is rotated
 * into q_out, k is rotated on its way into paged_k_cache and v is appended to paged_v_cache.
 * The result is bit for bit kjit_apply_rope_pos_ids(q, k, pos_ids -> q_out, k_rot, rotary_dim,
 * rope_layout, rope_scale, rope_theta) followed by kjit_append_paged_kv_cache(k_rot, v, ...)
 * (no scales) or kjit_append_paged_kv_cache_fp8(k_rot, v, ..., k_scale, v_scale) (scales).
 *
 * q, q_out: [nnz, num_qo_heads, head_dim]; k, v: [nnz, num_kv_heads, head_dim]; bf16 / fp16,
 *   one dtype, one CUDA device; last dim contiguous, token and head strides free (views of a
 *   fused qkv tensor are fine). q_out may be q itself (in place), else it must not overlap
 *   any other argument.
 * pos_ids: [nnz], int32 or int64: the RoPE position of each token (as kjit_apply_rope_pos_ids).
 * batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len, paged_k_cache,
 *   paged_v_cache, kv_layout: as kjit_append_paged_kv_cache (positions place the token in its
 *   request's pages; a skipped token's q is still rotated). The caches must not overlap any
 *   other argument.
 * k_scale, v_scale: both NULL (the caches hold q's dtype) or both given (float8_e4m3fn caches,
 *   each element stored as e4m3(x / scale) as kjit_append_paged_kv_cache_fp8: [1] or
 *   [num_kv_heads] fp32 on the device).
 * rotary_dim, rope_layout, rope_scale, rope_theta: as kjit_apply_rope_pos_ids.
 * head_dim up to 1024, rotary_dim up to 512; any alignment works (narrower vectors). nnz = 0 is
 *   a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_rope_append_paged_kv_cache(
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos_ids,
    const DLTensor* batch_indices, const DLTensor* positions, const DLTensor* kv_indices,
    const DLTensor* kv_indptr, const DLTensor* kv_last_page_len, const DLTensor* k_scale,
    const DLTensor* v_scale, DLTensor* q_out, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
    int rotary_dim, kjit_rope_layout rope_layout, float rope_scale, float rope_theta,
    kjit_kv_layout kv_layout, void* stream);

/*
 * kjit_rope_append_paged_kv_cache with Llama 3.1's frequency scaling: the frequencies of
 * kjit_apply_llama31_rope_pos_ids (low_freq_factor, high_freq_factor and old_context_len checked
 * as there), so the result is bit for bit kjit_apply_llama31_rope_pos_ids followed by the append.
 * Everything else as kjit_rope_append_paged_kv_cache.
 */
KJIT_API kjit_status kjit_llama31_rope_append_paged_kv_cache(
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos_ids,
    const DLTensor* batch_indices, const DLTensor* positions, const DLTensor* kv_indices,
    const DLTensor* kv_indptr, const DLTensor* kv_last_page_len, const DLTensor* k_scale,
    const DLTensor* v_scale, DLTensor* q_out, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
    int rotary_dim, kjit_rope_layout rope_layout, float rope_scale, float rope_theta,
    float low_freq_factor, float high_freq_factor, float old_context_len, kjit_kv_layout kv_layout,
    void* stream);

/* ---- Attention (kernels/attention, src/ops/decode_attention, src/ops/merge_states) ---------- */

/*
 * Batch decode attention over a paged KV cache (FlashInfer's BatchDecodeWithPagedKVCache): one
 * query token per request, in two steps.
 *
 * kjit_batch_decode_plan (host only: no allocation, no launch, no device memory touched) reads
 * the host copy of kv_indptr, picks the specialization and the split-KV partition for the
 * device's SM count, and says how much workspace the runs need. kjit_batch_decode_run only
 * launches kernels: no host synchronization, allocation or copy, so it can be captured in a CUDA
 * graph and replayed after the page table's device contents change. A plan serves any number of
 * runs (every layer of a step, every step while the batch's shape stays the same); replan when
 * the lengths change a lot, since the partition follows them (the results never depend on it).
 *
 * For request b and qo head i (kv head i / (num_qo_heads / num_kv_heads), as FlashInfer):
 *   len = (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b]
 *   positions t in [start, len), start = max(0, len - 1 - window_left) (0 when window_left = -1)
 *   x_t = sm_scale * k_scale * (q . k_t), or cap * tanh(that / cap) with a soft cap
 *   out = v_scale * sum_t softmax(x)_t v_t,   lse = log(sum_t exp(x_t))  (natural log)
 * The key at position t is page kv_indices[kv_indptr[b] + t / page_size], slot t % page_size.
 * A request with no positions gets out = 0 and lse = -inf.
 */
typedef struct kjit_decode_plan kjit_decode_plan;

/* How the autotuner times a tactic when a call measures (docs/autotune.md): one call per sample
 * or one replay of a CUDA graph of calls, each sample after flushing the L2 (cold) or not (hot).
 * Pick the way the call runs in deployment; results measured one way are kept apart. */
typedef enum kjit_tune_timing {
  KJIT_TUNE_EAGER_COLD = 0,
  KJIT_TUNE_EAGER_HOT = 1,
  KJIT_TUNE_GRAPH_COLD = 2,
  KJIT_TUNE_GRAPH_HOT = 3
} kjit_tune_timing;

/* Options of a plan. Versioned by struct_size: kjit_decode_options_init fills the defaults for
 * this header's layout, and the library reads only the fields that struct_size covers. */
typedef struct kjit_decode_options {
  size_t struct_size;    /* sizeof(kjit_decode_options) */
  float sm_scale;        /* logit scale; 0 (default): 1 / sqrt(head_dim); else finite > 0 */
  float logits_soft_cap; /* 0 (default): off; > 0: x = cap * tanh(x / cap) (Gemma 2) */
  int window_left;       /* -1 (default): off; >= 0: attend to the last window_left + 1 positions */
  int num_splits;        /* 0 (default): chosen by the plan; n >= 1: split each request's
                            positions into at most n parts (1: never split) */
  int num_sms;           /* 0 (default): the device's SM count; n > 0: plan for n SMs */
  int autotune;    /* -1 (default): as KJIT_AUTOTUNE says; 0: the heuristic (KJIT_FORCE_TACTIC and
                      the blocklist still apply); 1, 2: use a stored tuning result of the plan's
                      bucket when there is one (a plan never measures: kjit-cli tune --from
                      stores results; docs/autotune.md) */
  int tune_timing; /* kjit_tune_timing whose stored results the plan uses; KJIT_TUNE_EAGER_COLD
                      (default) */
} kjit_decode_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_decode_options_init(kjit_decode_options* options);

/*
 * Plans decode runs. On success *plan owns a new plan (free it with kjit_decode_plan_destroy);
 * on failure *plan is set to NULL (when plan itself is not NULL).
 *
 * kv_indptr_host: host memory, batch + 1 int32 values, non-decreasing from >= 0 (NULL allowed
 *   when batch = 0). Only the page counts matter; kv_last_page_len is not needed here.
 * batch >= 0. num_qo_heads, num_kv_heads >= 1, num_qo_heads a multiple of num_kv_heads; the
 *   group size (their ratio) 1..16 (larger: KJIT_ERROR_UNSUPPORTED).
 * head_dim: 64, 128 or 256 (others: KJIT_ERROR_UNSUPPORTED). page_size >= 1 (any size; page
 *   tables are read per token). layout: KJIT_KV_LAYOUT_NHD or KJIT_KV_LAYOUT_HND.
 * q_dtype: bf16 or fp16 (out has this dtype too). kv_dtype: q_dtype, or fp8 e4m3 (DLPack 1.1's
 *   kDLFloat8_e4m3fn = code 10, or kDLUInt, bits 8, for caches exported as raw bytes); fp8 keys
 *   and values are multiplied by the run's k_scale / v_scale. Other pairs: UNSUPPORTED.
 * options: NULL for the defaults.
 * device_id: the CUDA device the runs use. Its SM count and shared memory are queried unless
 *   options->num_sms > 0 and no driver is present (then an H100 / H200-class device is assumed).
 * Thread-safe.
 */
KJIT_API kjit_status kjit_batch_decode_plan(const int32_t* kv_indptr_host, int batch,
                                            int num_qo_heads, int num_kv_heads, int head_dim,
                                            int page_size, kjit_kv_layout layout,
                                            DLDataType q_dtype, DLDataType kv_dtype,
                                            const kjit_decode_options* options, int device_id,
                                            kjit_decode_plan** plan);

/* Workspace bytes kjit_batch_decode_run needs with this plan (0: none; NULL plan: 0). */
KJIT_API size_t kjit_decode_plan_workspace_bytes(const kjit_decode_plan* plan);
/* The largest number of parts the plan splits one request into (1: no split; NULL plan: 0). */
KJIT_API int kjit_decode_plan_num_splits(const kjit_decode_plan* plan);
/* The tactic the plan runs (docs/autotune.md: e.g. "split4_cluster"), as KJIT_FORCE_TACTIC and
 * KJIT_TACTICS_BLOCKLIST spell it; "" for a NULL plan. Valid while the plan lives. */
KJIT_API const char* kjit_decode_plan_tactic(const kjit_decode_plan* plan);
/* Frees a plan; NULL is a no-op. Not while a kjit_batch_decode_run with it is in progress on
 * another thread (launched runs do not use the plan: destroying it after the call returns is
 * fine even before the GPU has run them). */
KJIT_API void kjit_decode_plan_destroy(kjit_decode_plan* plan);

/*
 * Launches the planned decode attention on `stream`.
 *
 * q: [batch, num_qo_heads, head_dim], the plan's q dtype, last dim contiguous, other strides
 *   free (element alignment suffices).
 * k_cache, v_cache: 4-D in the plan's layout ([num_pages, page_size, num_kv_heads, head_dim] or
 *   [num_pages, num_kv_heads, page_size, head_dim]), same shape, the plan's kv dtype, last dim
 *   contiguous, other strides free (k and v may be the halves of one [num_pages, 2, ...]
 *   tensor). Rows 16-byte aligned run fastest; 8- or 4-byte aligned rows run a narrower copy;
 *   less is KJIT_ERROR_UNSUPPORTED.
 * kv_indices [nnz_pages], kv_indptr [batch + 1], kv_last_page_len [batch]: int32, contiguous,
 *   on the device. Read on the device only, and never trusted for memory safety: a page slot
 *   outside [kv_indptr[b], kv_indptr[b+1]) or outside kv_indices, or a page id outside
 *   [0, num_pages), contributes nothing; kv_last_page_len is clamped to [0, page_size]. Their
 *   contents may differ from what was planned (any lengths are computed correctly).
 * workspace: device memory of at least kjit_decode_plan_workspace_bytes(plan) bytes, any dtype,
 *   contiguous, 16-byte aligned; NULL when that is 0. Overwritten; two runs in flight at once
 *   must not share a workspace (runs on one stream are ordered: one workspace serves them all).
 * out: [batch, num_qo_heads, head_dim], q's dtype, last dim contiguous, other strides free.
 * lse: NULL, or [batch, num_qo_heads] fp32 (natural log), strides free.
 *   out, lse and workspace must not overlap each other or any input.
 * k_scale, v_scale: finite, > 0 (1 for a 16-bit cache; fp8 caches' dequantization scales).
 * batch = 0 is a successful no-op after validation. The first run of a specialization may
 * compile or load it: run once before capturing a graph. Thread-safe (one plan may be used from
 * several threads at once, with distinct workspaces).
 */
KJIT_API kjit_status kjit_batch_decode_run(const kjit_decode_plan* plan, const DLTensor* q,
                                           const DLTensor* k_cache, const DLTensor* v_cache,
                                           const DLTensor* kv_indices, const DLTensor* kv_indptr,
                                           const DLTensor* kv_last_page_len, DLTensor* workspace,
                                           DLTensor* out, DLTensor* lse, float k_scale,
                                           float v_scale, void* stream);

/*
 * Batch prefill / append attention (FlashInfer's BatchPrefillWithPagedKVCache and
 * BatchPrefillWithRaggedKVCache): many query tokens per request against the request's keys, over
 * the decode page table (kjit_batch_prefill_run) or over packed k / v (a first prefill without
 * a cache: kjit_batch_prefill_ragged_run), in two steps as decode: a host-only plan
 * (kjit_batch_prefill_plan: no allocation, no launch, no device memory touched), then runs that
 * only launch (no host synchronization, allocation or copy: capturable in a CUDA graph).
 *
 * Request b owns rows qo_indptr[b] .. qo_indptr[b+1] of q: q_len new tokens, the last q_len of
 * its kv_len keys (kv_len from the page table as in decode, or kv_indptr[b+1] - kv_indptr[b]
 * rows of the ragged k / v). For qo head i (kv head i / (num_qo_heads / num_kv_heads)) and the
 * request's query token t (0-based), the keys j in [0, kv_len) attended are
 *   all of them (non-causal), or j <= kv_len - q_len + t (causal: new tokens see every cached key
 *   and causally each other), and with window_left >= 0 also j >= kv_len - q_len + t - window_left;
 *   x_j = sm_scale * k_scale * (q . k_j), or cap * tanh(that / cap) with a soft cap;
 *   out = v_scale * sum_j softmax(x)_j v_j,   lse = log(sum_j exp(x_j))  (natural log).
 * A query without keys gets out = 0 and lse = -inf: lse is decode's, so kjit_merge_states
 * combines a prefill over part of the keys with another over the rest (cascade / shared-prefix
 * attention: docs/c-api.md has the recipe).
 */
typedef struct kjit_prefill_plan kjit_prefill_plan;

/* Options of a prefill plan. Versioned by struct_size: kjit_prefill_options_init fills the
 * defaults for this header's layout, and the library reads only the fields struct_size covers. */
typedef struct kjit_prefill_options {
  size_t struct_size;    /* sizeof(kjit_prefill_options) */
  int causal;            /* 1 (default): causal, aligned to the end of the keys; 0: off */
  float sm_scale;        /* logit scale; 0 (default): 1 / sqrt(head_dim); else finite > 0 */
  float logits_soft_cap; /* 0 (default): off; > 0: x = cap * tanh(x / cap) (Gemma 2) */
  int window_left;       /* -1 (default): off; >= 0: keys j >= kv_len - q_len + t - window_left */
} kjit_prefill_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_prefill_options_init(kjit_prefill_options* options);

/*
 * Plans prefill runs. On success *plan owns a new plan (free it with kjit_prefill_plan_destroy);
 * on failure *plan is set to NULL (when plan itself is not NULL).
 *
 * qo_indptr_host, kv_indptr_host: host memory, batch + 1 int32 values each, non-decreasing from
 *   >= 0 (NULL allowed when batch = 0). kv_indptr_host counts pages (page_size >= 1) or rows of
 *   the ragged k / v (page_size = 0). The plan sizes the launch from qo_indptr_host: a run's
 *   device qo_indptr must hold the same lengths (replan when they change; kv lengths may change
 *   freely between runs).
 * batch >= 0. num_qo_heads, num_kv_heads >= 1, num_qo_heads a multiple of num_kv_heads, group
 *   size 1..16 (larger: KJIT_ERROR_UNSUPPORTED). head_dim: 64, 128 or 256 (others: UNSUPPORTED).
 * page_size: >= 1 for a paged KV (any size), 0 for a ragged KV. layout: KJIT_KV_LAYOUT_NHD or
 *   _HND (paged only; ignored when page_size = 0).
 * q_dtype: bf16 or fp16; kv_dtype: the same, or fp8 e4m3 (as kjit_batch_decode_plan takes it:
 *   KJIT_DL_FLOAT8_E4M3FN or raw 8-bit kDLUInt), whose keys and values the runs multiply by
 *   k_scale / v_scale; such plans run the mma.sync kernel (fp16 MMAs) on every device.
 * options: NULL for the defaults (causal).
 * device_id: the CUDA device the runs use (its shared memory is queried when a driver is
 *   present). Thread-safe.
 */
KJIT_API kjit_status kjit_batch_prefill_plan(const int32_t* qo_indptr_host,
                                             const int32_t* kv_indptr_host, int batch,
                                             int num_qo_heads, int num_kv_heads, int head_dim,
                                             int page_size, kjit_kv_layout layout,
                                             DLDataType q_dtype, DLDataType kv_dtype,
                                             const kjit_prefill_options* options, int device_id,
                                             kjit_prefill_plan** plan);

/* Workspace bytes the runs need with this plan (0: none, today for every plan; NULL plan: 0). */
KJIT_API size_t kjit_prefill_plan_workspace_bytes(const kjit_prefill_plan* plan);
/* Frees a plan; NULL is a no-op. Not while a run with it is in progress on another thread
 * (launched runs do not use the plan). */
KJIT_API void kjit_prefill_plan_destroy(kjit_prefill_plan* plan);

/*
 * Launches the planned prefill over a paged KV cache on `stream`.
 *
 * q: [total_q, num_qo_heads, head_dim], the plan's dtype, last dim contiguous, other strides
 *   free; rows 16-byte aligned (strides multiples of 8 elements), less is UNSUPPORTED.
 * k_cache, v_cache: 4-D in the plan's layout, as kjit_batch_decode_run takes them (k and v may
 *   be the halves of one [num_pages, 2, ...] tensor); rows 16-byte aligned.
 * qo_indptr [batch + 1], kv_indices [nnz_pages], kv_indptr [batch + 1], kv_last_page_len
 *   [batch]: int32, contiguous, on the device, read on the device only and never trusted for
 *   memory safety: a request's rows are clamped to [0, total_q), and page slots and ids are
 *   checked as kjit_batch_decode_run checks them (invalid ones contribute nothing).
 * workspace: kjit_prefill_plan_workspace_bytes(plan) bytes as decode takes it; NULL when 0.
 * out: [total_q, num_qo_heads, head_dim], q's dtype, last dim contiguous, rows 4-byte aligned.
 *   Rows no request owns are not written.
 * lse: NULL, or [total_q, num_qo_heads] fp32 (natural log), strides free.
 *   out, lse and workspace must not overlap each other or any input.
 * k_scale, v_scale: finite, > 0 (the fp8 caches' dequantization scales; 1 for 16-bit caches).
 * batch = 0 is a successful no-op after validation. The first run of a specialization may
 * compile or load it: run once before capturing a graph. Thread-safe.
 */
KJIT_API kjit_status kjit_batch_prefill_run(const kjit_prefill_plan* plan, const DLTensor* q,
                                            const DLTensor* k_cache, const DLTensor* v_cache,
                                            const DLTensor* qo_indptr, const DLTensor* kv_indices,
                                            const DLTensor* kv_indptr,
                                            const DLTensor* kv_last_page_len, DLTensor* workspace,
                                            DLTensor* out, DLTensor* lse, float k_scale,
                                            float v_scale, void* stream);

/*
 * Launches the planned prefill over ragged keys and values (a plan with page_size 0): request b
 * attends rows kv_indptr[b] .. kv_indptr[b+1] of k and v, [total_kv, num_kv_heads, head_dim]
 * each, the plan's dtype, last dim contiguous, rows 16-byte aligned. Rows outside [0, total_kv)
 * contribute nothing. Everything else as kjit_batch_prefill_run.
 */
KJIT_API kjit_status kjit_batch_prefill_ragged_run(const kjit_prefill_plan* plan, const DLTensor* q,
                                                   const DLTensor* k, const DLTensor* v,
                                                   const DLTensor* qo_indptr,
                                                   const DLTensor* kv_indptr, DLTensor* workspace,
                                                   DLTensor* out, DLTensor* lse, float k_scale,
                                                   float v_scale, void* stream);

/*
 * Merges two attention states over disjoint key sets (FlashInfer's merge_state; cascade and
 * shared-prefix attention): with s the log-sum-exp (natural log) of each state's logits,
 *   s_out = log(exp(s_a) + exp(s_b)),  v_out = exp(s_a - s_out) v_a + exp(s_b - s_out) v_b.
 * A state with s = -inf counts as empty; two empty states give v_out = 0, s_out = -inf. NaN in
 * s propagates to v_out and s_out.
 *
 * v_a, v_b, v_out: [seqs, heads, dim], same shape, bf16 / fp16 / fp32 (same dtype), last dim
 *   contiguous, other strides free; any dim (narrower vectors when alignment asks).
 * s_a, s_b: [seqs, heads] fp32, strides free. s_out: the same, or NULL.
 * v_out may be v_a or v_b itself and s_out s_a or s_b itself (in place); no other overlap.
 * Zero seqs or heads is a successful no-op after validation.
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_merge_states(const DLTensor* v_a, const DLTensor* s_a,
                                       const DLTensor* v_b, const DLTensor* s_b, DLTensor* v_out,
                                       DLTensor* s_out, void* stream);

/*
 * Merges n states per (seq, head): v [n, seqs, heads, dim], s [n, seqs, heads] -> v_out
 * [seqs, heads, dim], s_out [seqs, heads] or NULL; the math of kjit_merge_states folded over
 * the n states (n >= 1; n = 0 gives v_out = 0, s_out = -inf). Dtype and stride rules as
 * kjit_merge_states; v_out and s_out must not overlap any input.
 */
KJIT_API kjit_status kjit_merge_states_n(const DLTensor* v, const DLTensor* s, DLTensor* v_out,
                                         DLTensor* s_out, void* stream);

/* ---- Sampling (kernels/sampling, src/ops/sampling) ----------------------------------------- */

/*
 * Conventions of the sampling functions:
 *  - probs / logits: [batch, vocab], last dim contiguous, rows may be strided. probs are fp32;
 *    logits fp32, bf16 or fp16. Probabilities need not be normalized: a row is sampled in
 *    proportion to its values. vocab 1..262144 for the samplers and filters.
 *  - Filter parameters come per row or as one value for every row: a parameter's `*_arr` device
 *    tensor ([batch], contiguous; top_k int32 or int64, the others fp32) is used when it is not
 *    NULL, and the field of `options` (kjit_sampling_options, below) otherwise; a function reads
 *    only the fields of its own filters. A field in use is checked here: top_k >= 1, top_p in
 *    (0, 1], min_p in [0, 1], temperature finite and >= 0. Per-row values are read on the
 *    device: top_k <= 0 or >= vocab, top_p >= 1 and min_p <= 0 turn that filter off for the
 *    row; top_p NaN or <= 0, min_p NaN or > 1, and temperature < 0, NaN or Inf make the row
 *    invalid. temperature 0 is greedy (the first maximum logit).
 *  - Sets, ties included: top-k keeps every token whose value is >= the k-th largest value
 *    (so ties at the boundary are all kept: possibly more than k tokens); top-p keeps every
 *    token for which the mass of strictly larger tokens is < top_p * the row's mass (the
 *    smallest high-probability set reaching top_p, plus all ties of its last value); min-p
 *    keeps value >= fl(min_p * max value). With top-k and top-p together, top-k applies first
 *    and top_p is relative to the top-k set's mass. For logits, top-k ranks the logits
 *    themselves and the other filters the fp32 weights exp((x - max) / T). The sampled token is
 *    always in the set and drawn in proportion to its weight within it, each weight counted in
 *    units of 2^-31 of the row's largest weight (rounded down). No sort of the vocabulary and no
 *    host synchronization.
 *  - Randomness: Philox4x32-10 keyed by seed, counter (offset, row, 0): seed and offset are
 *    device tensors (int64 or uint64, 1 element or [batch]) read by the kernel, so a captured
 *    CUDA graph draws fresh tokens on replay when the caller updates offset in place (any change
 *    gives independent draws; bumping it by 1 per step is enough). The same seed, offset and
 *    inputs give the same tokens. With a [batch] seed a row's draw depends only on its own
 *    seed and offset, not on its position in the batch.
 *  - samples: [batch] int32 or int64. valid: NULL or [batch] uint8 / bool; 1 for a sampled row,
 *    0 for an invalid row (NaN, Inf or negative probabilities, an all-zero row, NaN or +Inf
 *    logits or all -Inf, a bad per-row parameter). An invalid row's sample is -1 either way.
 *    Outputs must not overlap any argument.
 *  - batch = 0 is a successful no-op after validation; vocab = 0 with batch > 0 is an error.
 *  - Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */

/* The one-value-for-every-row filter parameters. Versioned by struct_size (see the conventions at
 * the top); kjit_sampling_options_init turns every filter off and sets temperature 1. */
typedef struct kjit_sampling_options {
  size_t struct_size; /* sizeof(kjit_sampling_options) */
  int top_k;          /* >= 1; vocab or more: no top-k. Default 2147483647 (INT32_MAX: off) */
  float top_p;        /* (0, 1]; 1 (default): no top-p */
  float min_p;        /* [0, 1]; 0 (default): no min-p */
  float temperature;  /* finite, >= 0 (0: greedy; kjit_softmax: > 0). Default 1 */
} kjit_sampling_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_sampling_options_init(kjit_sampling_options* options);

KJIT_API kjit_status kjit_sampling_from_probs(const DLTensor* probs, const DLTensor* seed,
                                              const DLTensor* offset, DLTensor* samples,
                                              DLTensor* valid, void* stream);
KJIT_API kjit_status kjit_top_k_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_k_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream);
KJIT_API kjit_status kjit_top_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_p_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream);
KJIT_API kjit_status kjit_min_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* min_p_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream);
KJIT_API kjit_status kjit_top_k_top_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid,
    const kjit_sampling_options* options, void* stream);
/* Temperature, softmax, top-k, top-p and the draw in one kernel (the default options turn top-k
 * and top-p off and leave the logits unscaled). */
KJIT_API kjit_status kjit_top_k_top_p_sampling_from_logits(
    const DLTensor* logits, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* temperature_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream);

/*
 * Renormalize over the top-k / top-p set: out = p / (mass of the set) inside it, 0 outside.
 * probs, out: [batch, vocab] fp32; out may be probs itself (same view), else must not overlap
 * it. A row that the samplers would report invalid is written as zeros. Zero-size: no-op.
 */
KJIT_API kjit_status kjit_top_k_renorm_probs(const DLTensor* probs, const DLTensor* top_k_arr,
                                             DLTensor* out, const kjit_sampling_options* options,
                                             void* stream);
KJIT_API kjit_status kjit_top_p_renorm_probs(const DLTensor* probs, const DLTensor* top_p_arr,
                                             DLTensor* out, const kjit_sampling_options* options,
                                             void* stream);

/*
 * out = logits inside the top-k set (by logit value, ties kept), -Inf outside. logits, out:
 * [batch, vocab], fp32 / bf16 / fp16, same dtype; out may be logits itself. A row with a NaN,
 * or whose top_k is off, is copied unchanged. Zero-size: no-op.
 */
KJIT_API kjit_status kjit_top_k_mask_logits(const DLTensor* logits, const DLTensor* top_k_arr,
                                            DLTensor* out, const kjit_sampling_options* options,
                                            void* stream);

/*
 * out = softmax(logits / temperature) over the last dim: logits [batch, vocab] fp32 / bf16 /
 * fp16 (vocab up to 2^24), out [batch, vocab] fp32 (may be logits itself when that is fp32).
 * temperature_arr: NULL or [batch] fp32; without it options->temperature, finite and > 0. A
 * row with a NaN or +Inf logit, only -Inf logits or a per-row temperature that is not finite and
 * > 0 is written as NaN. Zero-size: no-op.
 */
KJIT_API kjit_status kjit_softmax(const DLTensor* logits, const DLTensor* temperature_arr,
                                  DLTensor* out, const kjit_sampling_options* options,
                                  void* stream);

/*
 * out[b] = index of the largest element of input[b] (the first on ties; NaN counts as the
 * largest, as torch.argmax). input: [batch, vocab] fp32 / bf16 / fp16, vocab 1..2^24; out:
 * [batch] int32 or int64. batch = 0: no-op.
 */
KJIT_API kjit_status kjit_argmax(const DLTensor* input, DLTensor* out, void* stream);

/*
 * Chain speculative sampling (FlashInfer's chain_speculative_sampling): verifies each request's
 * num_draft draft tokens against the target model and draws the next token, in one launch.
 *
 * draft_probs: [batch, num_draft, vocab] fp32, the draft model's distributions q_i;
 * target_probs: [batch, num_draft + 1, vocab] fp32, the target model's p_0 .. p_num_draft; both
 *   last dim contiguous, other strides free, non-negative (need not be normalized).
 * draft_token_ids: [batch, num_draft] int32, last dim contiguous. 1 <= num_draft <= 31.
 * seed, offset: as the samplers (conventions above); draw i of the row's Philox stream is u_i
 *   for draft token i, draw num_draft the drawn token's uniform.
 * For request b, draft token i (id d) is accepted when u_i * q_i(d) < p_i(d); an id outside
 *   [0, vocab) is rejected. With j the first rejected position (num_draft if none):
 *   output_token_ids[b] = d_0 .. d_{j-1}, then a token drawn from max(0, p_j - q_j) (from p_j when
 *   that is all zero) or, when j = num_draft, from p_num_draft; then -1 up to num_draft. A drawn
 *   distribution without a positive finite mass (NaN, Inf, all zero) gives -1 there.
 * output_token_ids: [batch, num_draft + 1] int32, last dim contiguous.
 * accepted, emitted: NULL or [batch] int32, written (not accumulated): the number of draft tokens
 *   accepted each on its own (ignoring the stop at j) and the number kept (j).
 * Outputs must not overlap any argument. batch = 0 is a successful no-op after validation.
 * Graph-safe: reads seed / offset on the device, no host synchronization.
 */
KJIT_API kjit_status kjit_chain_speculative_sampling(const DLTensor* draft_probs,
                                                     const DLTensor* draft_token_ids,
                                                     const DLTensor* target_probs,
                                                     const DLTensor* seed, const DLTensor* offset,
                                                     DLTensor* output_token_ids, DLTensor* accepted,
                                                     DLTensor* emitted, void* stream);

/*
 * The k largest elements of each row and their indices (torch.topk(input, k, largest=True,
 * sorted=True) with int32 indices): values[b] descending, indices[b][j] the position of
 * values[b][j] in input[b]. Equal values come in ascending index order (torch documents no order
 * for ties; this one is deterministic); NaN counts as larger than +Inf, as torch.topk and
 * torch.sort order it, and -0 as equal to +0. A value is the input element itself (its sign of
 * zero and NaN payload kept).
 * input: [batch, vocab] fp32 / bf16 / fp16, last dim contiguous, row stride free; vocab up to
 *   2^24. values: [batch, k], input's dtype; indices: [batch, k] int32; each last dim
 *   contiguous; neither may overlap the other or input.
 * k: 1..vocab; above 1024 it is KJIT_ERROR_UNSUPPORTED. batch = 0: a successful no-op after
 *   validation. Graph-safe: one launch, no host synchronization.
 */
KJIT_API kjit_status kjit_top_k(const DLTensor* input, DLTensor* values, DLTensor* indices, int k,
                                void* stream);

/* ---- GEMM (kernels/gemm, src/ops/gemm) ------------------------------------------------------ */

/* Options of kjit_gemm. Versioned by struct_size: kjit_gemm_options_init fills the defaults for
 * this header's layout, and the library reads only the fields that struct_size covers. */
typedef struct kjit_gemm_options {
  size_t struct_size; /* sizeof(kjit_gemm_options) */
  float alpha;        /* 1 (default); finite */
  float beta;         /* 0 (default): out is only written; else out is read first; finite */
  int autotune;       /* kjit_gemm only (kjit_gemm_fp8 has one way to run a shape). -1 (default):
                         as KJIT_AUTOTUNE says; 0: the heuristic (KJIT_FORCE_TACTIC and the
                         blocklist still apply); 1: measure this call's shape bucket when no result
                         is stored; 2: measure it again, once per process. A call whose stream is
                         being captured never measures (it uses the stored result or the heuristic) */
  int tune_timing;    /* kjit_tune_timing of a measurement; KJIT_TUNE_EAGER_COLD (default) */
  int weights_early;  /* kjit_gemm and kjit_gemm_fp8. 0 (default) or 1: the caller's promise that
                         the kernel launched just before this call on the same stream does not
                         write b (a model weight, loaded once; for kjit_gemm_fp8 nor scale_b).
                         Then, on sm_90 at decode sizes (the weight-streaming path) and unless
                         KJIT_PDL=0, the call launches as a programmatic dependent of that kernel
                         and starts loading b while it finishes; a, bias, the scales and out are
                         read, and out written, only after it has completed, in a CUDA graph
                         too. No effect on other paths (docs/c-api.md, "Launch mode") */
} kjit_gemm_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_gemm_options_init(kjit_gemm_options* options);

/*
 * out = alpha * a . b^T + beta * out + bias, accumulated in fp32 (PyTorch's Linear:
 * out = a @ b.T + bias with b the weight).
 *
 * a: [..., k], bf16 or fp16, last dim contiguous, leading dims collapsing into m rows with one
 *   row stride (a row-strided view is fine).
 * b: [n, k], a's dtype, last dim contiguous, row stride free.
 * bias: [n], a's dtype, or NULL.
 * out: [..., n] with a's leading dims, bf16, fp16 or fp32, last dim contiguous, row stride free;
 *   it must not overlap a, b or bias. Read only when beta != 0.
 * options: NULL for the defaults (alpha 1, beta 0).
 * On an sm_90 device the call runs on tensor cores (TMA + wgmma) when a and b start at 16-byte
 * aligned addresses and their row strides are multiples of 16 bytes (k a multiple of 8 for
 * compact tensors); otherwise, and on other sm_80+ devices, mma.sync tensor-core tiles serve it
 * when a's and b's bases and row strides are 16-byte aligned (any k), and a slower fp32 path
 * when they are not. With decode
 * sizes (m <= 32; m <= 64 unless n / 128 exceeds the SM count; m <= 128 where k > 8192 and n / 128
 * is below the SM count) the tensor-core path streams b over every SM, splitting k across a
 * thread-block cluster; it needs no workspace either. On the sm_90 tiles a bf16 / fp16 out whose
 * base is 16-byte aligned, row stride and n multiples of 8 elements, is written through shared
 * memory by TMA when beta is 0 (faster on large shapes; any other out is written from registers,
 * with the same results). k = 0
 * gives out = beta * out + bias. Other dtypes: KJIT_ERROR_UNSUPPORTED. Thread-safe.
 */
KJIT_API kjit_status kjit_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias,
                               DLTensor* out, const kjit_gemm_options* options, void* stream);

/*
 * DLPack 1.1's type code of float8_e4m3fn (kDLFloat8_e4m3fn, what torch.float8_e4m3fn exports):
 * fp8 tensors are {KJIT_DL_FLOAT8_E4M3FN, 8, 1}. Spelled here because older dlpack.h headers
 * (0.x, the one kjit builds against) lack it.
 */
#define KJIT_DL_FLOAT8_E4M3FN 10

/*
 * out = alpha * (a . b^T, each product dequantized by its scales) + beta * out, e4m3 operands,
 * fp32 accumulation (DeepSeek-V3 / vLLM / torch._scaled_mm conventions).
 *
 * a: [..., k] float8_e4m3fn, last dim contiguous, leading dims collapsing into m rows with one
 *   row stride. b: [n, k] float8_e4m3fn (the weight, PyTorch Linear layout), last dim contiguous.
 * out: [..., n] with a's leading dims, bf16, fp16 or fp32, last dim contiguous, row stride free;
 *   it must not overlap a, b or the scales. Read only when beta != 0.
 * scale_a, scale_b: fp32, compact. The scale mode is read from their shapes:
 *  - per tensor: [1]; per row: scale_a [m] (one per row of a: per token), scale_b [n] (one per
 *    row of b: per output channel). The two sides may mix (a per row, b per tensor, ...):
 *    out[i, j] = scale_a[i or 0] * scale_b[j or 0] * sum_k a[i, k] * b[j, k].
 *  - blocks (DeepSeek-V3): scale_a [m, ceil(k / 128)], one per 1 x 128 group of a row;
 *    scale_b [ceil(n / 128), ceil(k / 128)], one per 128 x 128 block of b, applied per 128-wide
 *    K chunk. k need not be a multiple of 128: the last chunk is shorter. Both scales 2-D.
 *   kjit_quant_fp8 writes scale_a in exactly these layouts. In every mode each 128-wide K chunk
 *   is summed on its own and added to an fp32 result, so the error of the tensor cores' fp8
 *   accumulation (14 significant bits) stays that of one chunk however long k is.
 * options: kjit_gemm_options (alpha, beta, weights_early); NULL for the defaults (alpha 1, beta 0).
 * Any k >= 0 (k = 0 gives out = beta * out). On an sm_90 device the call runs on tensor cores
 * (TMA + wgmma; at decode sizes, up to 128 rows of a, a kernel that streams the weight with K
 * split over a thread-block cluster) when a and b start at 16-byte aligned addresses with row
 * strides multiples of 16 bytes (k a multiple of 16 for compact tensors); otherwise, on sm_89+
 * devices, mma.sync e4m3 tiles serve it when a's and b's bases and row strides are 16-byte
 * aligned (any k), and an fp32 fallback when they are not or the device is sm_80 / sm_86. The
 * sm_90 tiles write a bf16 / fp16 out through shared memory and TMA as kjit_gemm's do.
 * Thread-safe.
 */
KJIT_API kjit_status kjit_gemm_fp8(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
                                   const DLTensor* scale_b, DLTensor* out,
                                   const kjit_gemm_options* options, void* stream);

/* ---- fp8 quantization (kernels/quant, src/ops/quant) ---------------------------------------- */

/* How kjit_quant_fp8 scales: one scale for the tensor, one per row (token), or one per 1 x 128
 * group of a row (DeepSeek-V3's activations). */
typedef enum kjit_fp8_scaling {
  KJIT_FP8_PER_TENSOR = 0,
  KJIT_FP8_PER_ROW = 1,
  KJIT_FP8_PER_GROUP_128 = 2
} kjit_fp8_scaling;

/*
 * Dynamic fp8 quantization: scale = amax / 448 over each tensor, row or 1 x 128 group, and
 * out = e4m3(x / scale), rounded to nearest even and saturated to +-448 (a scale of 0, an
 * all-zero group, gives zeros). Inputs should be finite: NaN stays NaN and is left out of the
 * amax, an infinity gives an infinite scale.
 *
 * input: [..., k] bf16 or fp16, last dim contiguous, leading dims collapsing into m rows with one
 *   row stride. out: [..., k] float8_e4m3fn with input's shape, last dim contiguous, row stride
 *   free, not overlapping input or scale.
 * scale: fp32, compact: [1] per tensor, [m] per row, [m, ceil(k / 128)] per group: the layouts
 *   kjit_gemm_fp8 reads as scale_a.
 * Per tensor runs a memset and two kernels (the amax through a device-wide atomic max, then the
 * conversion), with no host synchronization, so it can be captured in a CUDA graph. Zero-size:
 * no-op. Thread-safe.
 */
KJIT_API kjit_status kjit_quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale,
                                    kjit_fp8_scaling scaling, void* stream);

/* ---- Token embedding (kernels/embedding, src/ops/embedding) --------------------------------- */

/*
 * out[t, :] = table[ids[t], :] (PyTorch's nn.Embedding forward), a plain copy of each row.
 *
 * table: [vocab, hidden], bf16 / fp16 / fp32, last dim contiguous, row stride free.
 * ids: [tokens], int32 or int64, contiguous, on the table's device. Read on the device only (no
 *   host synchronization, so the call can be captured in a CUDA graph and replayed with new ids):
 *   an id outside [0, vocab) writes a row of zeros, never a read outside the table.
 * out: [tokens, hidden], table's dtype, last dim contiguous, row stride free; it must not overlap
 *   table or ids.
 * Any hidden size 1..2^24 works; the vector width is the widest (up to 16 bytes) that divides
 * hidden and that both pointers and row strides are aligned to, down to scalar: never an error.
 * tokens = 0 is a successful no-op after validation; vocab = 0 with tokens > 0 is an error.
 * Launched as the elementwise ops are (docs/c-api.md, "Launch mode").
 * Thread-safety: safe from any thread; launches on `stream` and returns without waiting.
 */
KJIT_API kjit_status kjit_embedding(const DLTensor* table, const DLTensor* ids, DLTensor* out,
                                    void* stream);

/*
 * RMSNorm quantized per row (token) to fp8, fused: y = input * rsqrt(mean(input^2) + eps) *
 * weight in fp32, never rounded to bf16 / fp16; scale[r] = max |y| over row r / 448; out =
 * e4m3(y / scale[r]) as kjit_quant_fp8 rounds (nearest even, saturating; zeros under a zero
 * scale). out and scale are kjit_gemm_fp8's a and per-row scale_a.
 *
 * input: [..., hidden] bf16 or fp16, last dim contiguous, leading dims collapsing into m rows with
 *   one row stride. weight: [hidden], input's dtype, contiguous. out: input's shape,
 *   float8_e4m3fn, last dim contiguous. scale: [m] fp32, compact. out and scale overlap nothing
 *   else. eps finite, >= 0. Zero rows: no-op. Thread-safe.
 */
KJIT_API kjit_status kjit_rmsnorm_quant_fp8(const DLTensor* input, const DLTensor* weight,
                                            DLTensor* out, DLTensor* scale, float eps,
                                            void* stream);

/*
 * kjit_fused_add_rmsnorm's residual add, then kjit_rmsnorm_quant_fp8 of the new residual:
 *   residual = input + residual   (fp32 add, rounded to the dtype: bit for bit the unfused op's)
 *   out, scale = the per-row fp8 quantization of rmsnorm(residual) (no rounding in between)
 * residual: input's shape and dtype, last dim contiguous, overlapping nothing else. input is only
 * read. Other arguments as kjit_rmsnorm_quant_fp8.
 */
KJIT_API kjit_status kjit_fused_add_rmsnorm_quant_fp8(const DLTensor* input, const DLTensor* weight,
                                                      DLTensor* residual, DLTensor* out,
                                                      DLTensor* scale, float eps, void* stream);

/*
 * kjit_silu_and_mul quantized per 1 x 128 group to fp8, fused: y = silu(input[..., :d]) *
 * input[..., d:] in fp32, never rounded to bf16 / fp16; scale[r, g] = max |y| over columns
 * 128 g .. 128 g + 127 of row r / 448; out = e4m3(y / scale) as kjit_quant_fp8 rounds. out and
 * scale are kjit_gemm_fp8's a and block scale_a ([m, ceil(d / 128)]).
 *
 * input: [..., 2 d] bf16 or fp16, last dim contiguous, leading dims collapsing into m rows with
 *   one row stride. out: [..., d] float8_e4m3fn, last dim contiguous, not overlapping input.
 *   scale: [m, ceil(d / 128)] fp32, compact. Zero size: no-op. Thread-safe.
 */
KJIT_API kjit_status kjit_silu_and_mul_quant_fp8(const DLTensor* input, DLTensor* out,
                                                 DLTensor* scale, void* stream);

/* ---- Mixture of experts (kernels/moe, src/ops/moe) ------------------------------------------ */

/* How kjit_moe_route scores the router logits. */
typedef enum kjit_moe_scoring {
  KJIT_MOE_SCORING_SOFTMAX = 0, /* softmax over the experts (Mixtral, Qwen3-MoE) */
  KJIT_MOE_SCORING_SIGMOID = 1  /* sigmoid of each logit (DeepSeek-V3) */
} kjit_moe_scoring;

/* Options of kjit_moe_route. Versioned by struct_size: kjit_moe_route_options_init fills the
 * defaults for this header's layout, and the library reads only the fields struct_size covers. */
typedef struct kjit_moe_route_options {
  size_t struct_size;          /* sizeof(kjit_moe_route_options) */
  int scoring;                 /* a kjit_moe_scoring; KJIT_MOE_SCORING_SOFTMAX (default) */
  int renormalize;             /* 1: weights divided by their sum over the top k; 0 (default) */
  int n_group;                 /* 1 (default): no groups; else 2 .. 32 groups of experts */
  int topk_group;              /* groups kept, 1 .. n_group; 1 (default) */
  float routed_scaling_factor; /* weights' final factor, finite; 1 (default) */
} kjit_moe_route_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_moe_route_options_init(kjit_moe_route_options* options);

/*
 * MoE routing, one token per row of logits:
 *   score = softmax(logits row) or sigmoid(logits) (options->scoring), in fp32;
 *   choice = score + bias (bias, the correction bias, steers the selection only);
 *   with n_group > 1 the experts form n_group equal groups of consecutive ids, a group scores
 *   the sum of its two largest choice values, and only the topk_group best groups' experts may
 *   be selected (DeepSeek-V3; experts of other groups are never selected);
 *   topk_ids = the top_k eligible experts by choice, largest first; equal values by lower index
 *   first (the order torch.topk returns in practice, which PyTorch does not document), NaN above
 *   every number (as torch.topk);
 *   topk_weights = their unbiased scores, divided by their sum when options->renormalize, times
 *   options->routed_scaling_factor.
 * logits: [tokens, experts] fp32 / bf16 / fp16, last dim contiguous; experts 1 .. 256.
 * bias: [experts] fp32 or NULL. topk_ids: [tokens, top_k] int32, topk_weights [tokens, top_k]
 * fp32, both compact, top_k 1 .. 8 (and <= topk_group * experts / n_group).
 * options: NULL for the defaults. Zero tokens: no-op. Graph-safe (one kernel). Thread-safe.
 */
KJIT_API kjit_status kjit_moe_route(const DLTensor* logits, const DLTensor* bias,
                                    DLTensor* topk_ids, DLTensor* topk_weights,
                                    const kjit_moe_route_options* options, void* stream);

/*
 * Sorts the (token, slot) pairs by expert for a grouped GEMM, on the device (no host sync,
 * graph-safe: two kernels, no workspace). Stable: within an expert, rows keep token order.
 * x: [tokens, hidden] fp32 / fp16 / bf16, last dim contiguous. topk_ids: [tokens, top_k] int32
 * compact (kjit_moe_route's). Written:
 *   permuted [tokens * top_k, hidden] (x's dtype): row d = x[permuted_to_src[d] / top_k];
 *   expert_offsets [experts + 1] int32 (experts 1 .. 511): expert e's rows are
 *     expert_offsets[e] .. expert_offsets[e + 1] - 1 (kjit_moe_grouped_gemm's offsets);
 *   permuted_to_src [tokens * top_k] int32: the pair t * top_k + j of each permuted row;
 *   src_to_permuted [tokens, top_k] int32: the inverse, the permuted row of each pair
 *     (kjit_moe_finalize's map).
 * Ids outside [0, experts) (an expert-parallel rank's remote experts) are sorted after
 * expert_offsets[experts], their src_to_permuted is -1, and kjit_moe_finalize skips them. No
 * output may overlap another or an input. The sort runs in one thread block: it costs tens of
 * microseconds at prefill sizes. For fp8 experts, kjit_quant_fp8 (per 1 x 128 group) of permuted
 * gives the grouped GEMM's scale_a. No pairs (tokens * top_k = 0): no-op, expert_offsets left as
 * they are. Thread-safe.
 */
KJIT_API kjit_status kjit_moe_permute(const DLTensor* x, const DLTensor* topk_ids,
                                      DLTensor* permuted, DLTensor* expert_offsets,
                                      DLTensor* permuted_to_src, DLTensor* src_to_permuted,
                                      void* stream);

/*
 * out[t] = sum over j of topk_weights[t, j] * expert_out[src_to_permuted[t, j]] (+ shared_out[t]),
 * summed in fp32 in slot order, then rounded to out's dtype. Slots whose src_to_permuted is -1
 * (or outside expert_out's rows) add nothing.
 * expert_out: [rows, hidden] fp32 / fp16 / bf16 (the grouped GEMM's output, permuted order).
 * src_to_permuted: [tokens, top_k] int32, topk_weights: [tokens, top_k] fp32, compact; top_k <= 8.
 * shared_out: [tokens, hidden] (the shared expert's output) or NULL. out: [tokens, hidden];
 * expert_out's dtype for all three; out may be shared_out itself, and overlaps nothing else.
 * Zero-size: no-op. Graph-safe. Thread-safe.
 */
KJIT_API kjit_status kjit_moe_finalize(const DLTensor* expert_out, const DLTensor* src_to_permuted,
                                       const DLTensor* topk_weights, const DLTensor* shared_out,
                                       DLTensor* out, void* stream);

/*
 * Grouped GEMM, contiguous layout: for each expert e, rows expert_offsets[e] ..
 * expert_offsets[e + 1] - 1 of out = the same rows of a . b[e]^T, fp32 accumulation.
 * a: [rows, k] bf16 / fp16, last dim contiguous (kjit_moe_permute's permuted).
 * b: [experts, n, k] a's dtype (each expert's weight as a Linear's), last dim contiguous, one row
 *   stride over experts * n rows. expert_offsets: [experts + 1] int32 on the device, read by the
 *   kernel (no host sync: graph-safe with routing that changes between replays); they must be
 *   non-decreasing (values are clamped into [0, rows], so bad offsets cannot write outside out).
 * out: [rows, n] bf16 / fp16 / fp32, not overlapping a, b or expert_offsets; rows outside
 *   [offsets[0], offsets[experts]) are not written.
 * On an sm_90 device with TMA-ready a and b (16-byte aligned bases and row strides) the call runs
 * on tensor cores (wgmma, a tile schedule per expert; at decode sizes, chosen from the shapes, a
 * weight-streaming kernel that reads only the active experts' weights); otherwise an fp32
 * fallback serves it. Thread-safe.
 */
KJIT_API kjit_status kjit_moe_grouped_gemm(const DLTensor* a, const DLTensor* b,
                                           const DLTensor* expert_offsets, DLTensor* out,
                                           void* stream);

/*
 * Grouped GEMM, masked layout (fixed shapes for CUDA-graph decode): out[e, i] = a[e, i] . b[e]^T
 * for i < counts[e]; a: [experts, max_rows, k], counts: [experts] int32 on the device (values
 * clamped into [0, max_rows]), out: [experts, max_rows, n]; rows at or past counts[e] are not
 * written. Otherwise as kjit_moe_grouped_gemm.
 */
KJIT_API kjit_status kjit_moe_grouped_gemm_masked(const DLTensor* a, const DLTensor* b,
                                                  const DLTensor* counts, DLTensor* out,
                                                  void* stream);

/* Options of kjit_moe_forward. Versioned by struct_size: kjit_moe_forward_options_init fills the
 * defaults for this header's layout (route included, with its own struct_size), and the library
 * reads only the fields struct_size covers. */
typedef struct kjit_moe_forward_options {
  size_t struct_size;           /* sizeof(kjit_moe_forward_options) */
  kjit_moe_route_options route; /* the routing (kjit_moe_route's options); its defaults */
} kjit_moe_forward_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_moe_forward_options_init(kjit_moe_forward_options* options);

/*
 * The workspace kjit_moe_forward needs, in bytes, for tokens tokens routed to top_k of experts
 * experts, x [tokens, hidden] and experts of intermediate size intermediate, of dtype bf16 or
 * fp16 (kDLBfloat 16 / kDLFloat 16): the experts' weights' dtype, x's too; float8_e4m3fn
 * ({KJIT_DL_FLOAT8_E4M3FN, 8, 1}) sizes kjit_moe_forward_fp8's (x bf16 or fp16 either way). Pure
 * host arithmetic: no device, no compile. Rejects (KJIT_ERROR_INVALID_ARGUMENT) negative sizes,
 * top_k outside 1 .. experts, a NULL bytes and a size that overflows; bytes is then left as it was.
 * Thread-safe.
 */
KJIT_API kjit_status kjit_moe_forward_workspace_bytes(int64_t tokens, int64_t experts,
                                                      int64_t top_k, int64_t hidden,
                                                      int64_t intermediate, DLDataType dtype,
                                                      size_t* bytes);

/*
 * A whole MoE layer (SwiGLU experts) in one call:
 *   kjit_moe_route(router_logits, bias, options->route) -> top_k ids and weights per token;
 *   kjit_moe_permute(x) -> rows sorted by expert;
 *   gate_up = rows . w13[e]^T ([rows, 2 intermediate]), h = silu(gate_up[:, :I]) *
 *     gate_up[:, I:] ([rows, intermediate]) (on sm_90a in the gate_up GEMM's epilogue, in fp32,
 *     rounded once; elsewhere kjit_silu_and_mul of the rounded gate_up);
 *   y = h . w2[e]^T ([rows, hidden]);
 *   out = kjit_moe_finalize(y, topk weights, shared_out).
 * Intermediates are rounded to x's dtype between steps (as the separate ops round them).
 * x: [tokens, hidden] bf16 / fp16, last dim contiguous. router_logits: [tokens, experts] fp32 /
 *   bf16 / fp16 (kjit_moe_route's logits); bias: [experts] fp32 or NULL (its correction bias).
 * w13: [experts, 2 intermediate, hidden] x's dtype, gate rows 0 .. I - 1 then up rows I .. 2I - 1
 *   (vLLM / transformers layout), compact. w2: [experts, hidden, intermediate], compact.
 * shared_out: [tokens, hidden] x's dtype (the shared expert's output, added) or NULL.
 * workspace: at least kjit_moe_forward_workspace_bytes(...) bytes of device memory, 1-D,
 *   contiguous, any dtype, 16-byte aligned; overwritten (two calls in flight at once need two).
 * out: [tokens, hidden] x's dtype, may be shared_out itself, overlapping nothing else.
 * top_k: 1 .. 8, at most experts (experts 1 .. 256; top_k <= topk_group * experts / n_group).
 * options: NULL for the defaults. Graph-safe: no host sync, no allocation, launches sized by the
 * shapes only (routing that changes between replays is served); the first call of a shape may
 * compile or load, so run it once before capturing. Zero tokens: no-op after validation.
 * Every argument is checked before the first launch. Thread-safe.
 */
KJIT_API kjit_status kjit_moe_forward(const DLTensor* x, const DLTensor* router_logits,
                                      const DLTensor* bias, const DLTensor* w13, const DLTensor* w2,
                                      const DLTensor* shared_out, DLTensor* workspace,
                                      DLTensor* out, int top_k,
                                      const kjit_moe_forward_options* options, void* stream);

/*
 * fp8 block-scaled grouped GEMM, contiguous layout (DeepSeek-V3's scaling): for each expert e,
 * rows expert_offsets[e] .. expert_offsets[e + 1] - 1 of out = the same rows of a . b[e]^T with
 * every product dequantized by its scales, each 128-wide K chunk summed on its own and added to
 * an fp32 result (kjit_gemm_fp8's block mode, per expert):
 *   out[i, j] = sum_c scale_a[i, c] * scale_b[e, j / 128, c] * sum_{k in chunk c} a[i, k] b[e, j,
 * k]. a: [rows, k] float8_e4m3fn, last dim contiguous; scale_a: [rows, ceil(k / 128)] fp32 compact,
 *   one per 1 x 128 group of a row. kjit_quant_fp8(permuted, ..., KJIT_FP8_PER_GROUP_128) of
 *   kjit_moe_permute's rows writes both.
 * b: [experts, n, k] float8_e4m3fn (each expert's weight as a Linear's), last dim contiguous, one
 *   row stride over experts * n rows; scale_b: [experts, ceil(n / 128), ceil(k / 128)] fp32
 *   compact, one per 128 x 128 block of b[e] (the checkpoints' weight_scale_inv).
 * expert_offsets, out: as kjit_moe_grouped_gemm's (out bf16 / fp16 / fp32, not overlapping a, b,
 *   the scales or expert_offsets; rows outside [offsets[0], offsets[experts]) are not written).
 * sm_90a only: a compute capability 9.0 device and a, b TMA can read (16-byte aligned bases and
 * row strides, k > 0 a multiple of 16); elsewhere KJIT_ERROR_UNSUPPORTED (no fallback). Rows = 0
 * or n = 0: no-op after validation. Graph-safe. Thread-safe.
 */
KJIT_API kjit_status kjit_moe_grouped_gemm_fp8(const DLTensor* a, const DLTensor* b,
                                               const DLTensor* scale_a, const DLTensor* scale_b,
                                               const DLTensor* expert_offsets, DLTensor* out,
                                               void* stream);

/*
 * fp8 block-scaled grouped GEMM, masked layout: out[e, i] = a[e, i] . b[e]^T dequantized as
 * kjit_moe_grouped_gemm_fp8's, for i < counts[e]; a: [experts, max_rows, k] float8_e4m3fn,
 * scale_a: [experts, max_rows, ceil(k / 128)] fp32 compact, counts: [experts] int32 on the device
 * (clamped into [0, max_rows]), out: [experts, max_rows, n]; rows at or past counts[e] are not
 * written. Otherwise as kjit_moe_grouped_gemm_fp8.
 */
KJIT_API kjit_status kjit_moe_grouped_gemm_fp8_masked(const DLTensor* a, const DLTensor* b,
                                                      const DLTensor* scale_a,
                                                      const DLTensor* scale_b,
                                                      const DLTensor* counts, DLTensor* out,
                                                      void* stream);

/*
 * kjit_moe_forward with fp8 experts (DeepSeek-V3 checkpoints): w13 [experts, 2 intermediate,
 * hidden] and w2 [experts, hidden, intermediate] float8_e4m3fn, compact, with w13_scale
 * [experts, ceil(2 intermediate / 128), ceil(hidden / 128)] and w2_scale [experts,
 * ceil(hidden / 128), ceil(intermediate / 128)] fp32 compact (one per 128 x 128 block). The
 * layer is kjit_moe_forward's with each expert GEMM an fp8 one:
 *   rows = kjit_moe_permute(x), quantized per 1 x 128 group (kjit_quant_fp8);
 *   h = silu(gate) * up from kjit_moe_grouped_gemm_fp8(rows, w13) (in its epilogue, in fp32,
 *     rounded once to x's dtype, when intermediate is a multiple of 64; else gate_up rounded to
 *     x's dtype, then kjit_silu_and_mul_quant_fp8), quantized per 1 x 128 group;
 *   y = kjit_moe_grouped_gemm_fp8(h, w2), rounded to x's dtype; out = kjit_moe_finalize(y).
 * x, shared_out and out bf16 / fp16. workspace: kjit_moe_forward_workspace_bytes(..., dtype =
 * float8_e4m3fn, ...) bytes. sm_90a only, with hidden and intermediate multiples of 16 (the
 * quantized rows TMA reads): elsewhere KJIT_ERROR_UNSUPPORTED before any launch (zero tokens:
 * a no-op after validation). Otherwise as kjit_moe_forward (graph-safe, thread-safe).
 */
KJIT_API kjit_status kjit_moe_forward_fp8(const DLTensor* x, const DLTensor* router_logits,
                                          const DLTensor* bias, const DLTensor* w13,
                                          const DLTensor* w13_scale, const DLTensor* w2,
                                          const DLTensor* w2_scale, const DLTensor* shared_out,
                                          DLTensor* workspace, DLTensor* out, int top_k,
                                          const kjit_moe_forward_options* options, void* stream);

/* ---- Tensor-parallel communication (kernels/comm, src/ops/comm) ----------------------------- */

/*
 * A communicator: one process's rank among world_size processes, each with one GPU (several
 * ranks may share a GPU), on one host. Small messages take a one-shot kernel that reads every
 * rank's staging buffer directly (mapped once at init through CUDA IPC, no NVLink multicast);
 * larger ones take NCCL's all-reduce. NCCL is dlopen'ed (libnccl.so.2, or KJIT_NCCL_PATH): kjit
 * loads and runs without it, and a communicator then serves small messages only. One process per
 * rank: CUDA IPC does not map a buffer into the process that made it. docs/comm.md has the
 * protocol and how to set a group up.
 */
typedef struct kjit_comm kjit_comm;

#define KJIT_COMM_ID_BYTES 128
/* What every rank of a group passes to kjit_comm_init: made by one rank
 * (kjit_comm_get_unique_id) and sent to the others by the engine, as NCCL's ncclUniqueId (it is
 * one, byte for byte, when NCCL loads). */
typedef struct kjit_comm_id {
  char bytes[KJIT_COMM_ID_BYTES];
} kjit_comm_id;

/* An engine's all-gather of small host buffers over its own process group: copies `bytes` bytes
 * from `mine` of every rank into `all` (rank r's at all + r * bytes) of every rank, and returns 0
 * (any other value fails kjit_comm_init). Called once per kjit_comm_init, from its thread. */
typedef int (*kjit_comm_allgather_fn)(const void* mine, void* all, size_t bytes, void* user);

/* Whether a communicator creates an NCCL communicator (the path of messages over
 * small_max_bytes). */
typedef enum kjit_comm_nccl {
  KJIT_COMM_NCCL_AUTO = 0,    /* when NCCL loads, the id is NCCL's, world_size > 1 and no two
                               * ranks share a GPU (NCCL refuses them) (default) */
  KJIT_COMM_NCCL_OFF = 1,     /* never: larger messages are KJIT_ERROR_UNSUPPORTED */
  KJIT_COMM_NCCL_REQUIRED = 2 /* kjit_comm_init fails (KJIT_ERROR_UNSUPPORTED) without it */
} kjit_comm_nccl;

/* Options of a communicator. Versioned by struct_size: kjit_comm_options_init fills the defaults
 * for this header's layout, and the library reads only the fields struct_size covers. Every rank
 * must pass the same small_max_bytes and nccl (kjit_comm_init checks). */
typedef struct kjit_comm_options {
  size_t struct_size;     /* sizeof(kjit_comm_options) */
  size_t small_max_bytes; /* messages of at most this many bytes take the one-shot kernel, larger
                           * ones NCCL; 0 .. 64 MiB; default 1 MiB. Each rank allocates twice this
                           * (plus 4.25 KiB) of device memory at init. */
  int nccl;               /* a kjit_comm_nccl; KJIT_COMM_NCCL_AUTO (default) */
  kjit_comm_allgather_fn allgather; /* the exchange at init; NULL (default): kjit's own, through
                                     * a file in /dev/shm named after the id (one host only) */
  void* allgather_user;             /* passed to allgather */
  int timeout_ms; /* kjit's own exchange: how long to wait for every rank, >= 0; default 60000 */
} kjit_comm_options;

/* Fills *options with the defaults (NULL is ignored). */
KJIT_API void kjit_comm_options_init(kjit_comm_options* options);

/*
 * A new id for one group: NCCL's ncclGetUniqueId when NCCL loads (it starts NCCL's bootstrap
 * listener in this process, which must stay alive until every rank's kjit_comm_init has
 * returned), else random bytes that kjit tags as its own (such a group has no NCCL path). Make it
 * on one rank and send its bytes to the others. Thread-safe.
 */
KJIT_API kjit_status kjit_comm_get_unique_id(kjit_comm_id* id);

/*
 * Joins the group `id` names as rank `rank` (0 .. world_size - 1) of world_size (1 .. 8), on
 * device `device`; blocks until every rank has joined (collective: every rank calls it, with the
 * same id, world_size and options). Allocates and clears this rank's staging region, exchanges
 * its CUDA IPC handle with the others (options->allgather, else the /dev/shm file; ranks that do
 * not arrive within options->timeout_ms fail the call, naming them), maps theirs, and creates the
 * NCCL communicator (options->nccl). On success *comm owns the communicator (free it with
 * kjit_comm_destroy); on failure *comm is NULL.
 * Errors: KJIT_ERROR_INVALID_ARGUMENT (NULL id or comm, rank, world_size, a negative device, an
 * option out of range, ranks that disagree or never arrive), KJIT_ERROR_UNSUPPORTED (NCCL
 * required but not found: "NCCL not found"), KJIT_ERROR_NO_DEVICE, KJIT_ERROR_CUDA (the driver,
 * CUDA IPC or NCCL failed). Thread-safety: safe; each call makes its own communicator.
 */
KJIT_API kjit_status kjit_comm_init(const kjit_comm_id* id, int rank, int world_size, int device,
                                    const kjit_comm_options* options, kjit_comm** comm);

/*
 * Frees a communicator (NULL is ignored). Collective like init: call it on every rank once no
 * rank has work of this communicator pending (their streams synchronized), since the other ranks
 * read this rank's staging region. Not concurrently with a call on the same communicator.
 */
KJIT_API void kjit_comm_destroy(kjit_comm* comm);

/*
 * out = the sum over the group's ranks of in (every rank calls it with the same shape and dtype,
 * and the calls on one communicator in the same order on every rank).
 * in: any shape, bf16 / fp16 / fp32, compact (contiguous). out: in's shape and dtype, compact;
 * may be in itself, else overlapping nothing. Messages of at most small_max_bytes: the one-shot
 * kernel, which sums in fp32 in rank order, so every rank gets the same bits; larger: NCCL's
 * all-reduce (its order and precision), KJIT_ERROR_UNSUPPORTED when the communicator has no NCCL.
 * Graph-safe: no host synchronization; the one-shot kernel keeps its epoch counters in device
 * memory, so a replayed graph synchronizes correctly (capture the same calls on every rank). The
 * first call of a dtype may compile or load: make one before capturing.
 * Zero-size: no-op after validation (on every rank alike). Thread-safety: calls on one
 * communicator must come from one thread at a time; different communicators are independent.
 */
KJIT_API kjit_status kjit_all_reduce(kjit_comm* comm, const DLTensor* in, DLTensor* out,
                                     void* stream);

/*
 * The all-reduce fused with the residual add and RMSNorm that follow it in a decoder block:
 *   a = the sum over ranks of in, rounded to the dtype (as kjit_all_reduce writes it);
 *   residual = residual + a (rounded to the dtype), in place;
 *   out = rmsnorm(residual) * weight (as kjit_fused_add_rmsnorm computes it).
 * in: [..., hidden] bf16 / fp16 / fp32, last dim contiguous, leading dims collapsing into rows
 *   with one row stride. residual: in's shape and dtype, last dim contiguous, overlapping nothing
 *   else. weight: [hidden], in's dtype, contiguous. out: in's shape and dtype; may be in itself,
 *   else overlapping nothing. eps: finite, >= 0.
 * Messages (rows * hidden * element size) of at most small_max_bytes: one kernel; larger: NCCL's
 * all-reduce into out, then kjit_fused_add_rmsnorm over out and residual. Other rules as
 * kjit_all_reduce (collective, graph-safe, same thread rule).
 */
KJIT_API kjit_status kjit_all_reduce_add_rmsnorm(kjit_comm* comm, const DLTensor* in,
                                                 const DLTensor* weight, DLTensor* residual,
                                                 DLTensor* out, float eps, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KJIT_KJIT_H */
