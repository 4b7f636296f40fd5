#!/usr/bin/env python3
"""Pre-builds, with FlashInfer's own JIT (nvcc, ninja), the FlashInfer modules the FlashInfer
peers call on an sm_90a GPU, here on a machine without one, and installs each as FlashInfer's
package-local AOT module: <site>/flashinfer/data/aot/<name>/<name>.so. flashinfer.jit.env's
get_aot_artifacts() looks there first, and a module found there is loaded as it is (no arch or
version check, no ninja, no sources), so the GPU machine compiles nothing. Run by
flashinfer_pack.sh with .whl/site-packages first on sys.path, FLASHINFER_CUDA_ARCH_LIST=9.0a and
FLASHINFER_WORKSPACE_BASE in a scratch folder (the build tree: generated sources, objects).

--list prints the module names without building (what `flashinfer_peers.py --check` also reports
on the GPU machine: prebuilt or not). --keep-list FILE writes the package's files the peers need
on the GPU machine, for flashinfer_pack.sh to drop the rest: the Python modules loaded by
`import flashinfer`, by the public functions the peers call and by the module specs below (the
peers' first call of a module runs its gen_*() again, which reads csrc templates and copies host
sources into the workspace before finding the prebuilt .so), and every package file those
gen_*() calls open. --verify-names calls the peers' FlashInfer functions on CPU tensors with the
module loads intercepted and checks that each asks for a module built here.

The names are FlashInfer's URIs for the calls the peers make: bf16 q / kv / out, int32 indices,
head_dim 128, no RoPE in the kernel, no sliding window, no soft cap; the prefill wrappers run
backend fa3 (what "auto" resolves to on sm_90a), the decode wrapper backend fa2 without tensor
cores (its CUDA-core kernel: the batch_decode module)."""
import argparse
import os
import shutil
import subprocess
import sys
import time


def specs():
    """[(family, JitSpec)] for every module a FlashInfer peer call loads on sm_90a."""
    import torch
    from flashinfer.jit import activation, cascade, norm, page, rope, sampling, topk
    from flashinfer.jit.attention import modules as attn

    bf16, i32 = torch.bfloat16, torch.int32
    # (dtype_q, dtype_kv, dtype_o, dtype_idx, head_dim_qk, head_dim_vo, pos_encoding_mode,
    #  use_sliding_window, use_logits_soft_cap): what the wrappers' plan() passes
    decode_args = (bf16, bf16, bf16, i32, 128, 128, 0, False, False)
    out = [
        ("norm", norm.gen_norm_module()),
        ("activation", activation.gen_act_and_mul_module("silu")),
        ("activation", activation.gen_act_and_mul_module("gelu")),
        ("activation", activation.gen_act_and_mul_module("gelu_tanh")),
        ("rope", rope.gen_rope_module()),
        ("kv_cache", page.gen_page_module()),
        ("cascade", cascade.gen_cascade_module()),
        ("sampling", sampling.gen_sampling_module()),
        ("sampling", topk.gen_topk_module()),
        ("decode", attn.gen_batch_decode_module(*decode_args)),
        # + use_fp16_qk_reduction: the prefill wrappers (ragged, paged) on sm_90a.
        ("prefill", attn.gen_batch_prefill_module("fa3", *decode_args, False)),
    ]
    if os.environ.get("FI_PREBUILD_FA2", "0") == "1":
        # The fa2 prefill kernel (backend="fa2", and the decode wrapper with
        # use_tensor_cores=True): FlashInfer's equal-stride primary module.
        out.append(("prefill-fa2",
                    attn._gen_batch_prefill_primary_module("fa2", *decode_args, False)))
    return out


# The public functions the peers call (torch_peers.py, torch_sampling.py, flashinfer_peers.py).
API = ("rmsnorm", "fused_add_rmsnorm", "layernorm", "silu_and_mul", "gelu_and_mul",
       "gelu_tanh_and_mul", "apply_rope_pos_ids", "apply_rope", "apply_llama31_rope_pos_ids",
       "append_paged_kv_cache", "merge_state", "top_k", "BatchDecodeWithPagedKVCacheWrapper",
       "BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper")
SAMPLING_API = ("top_p_sampling_from_probs", "top_k_top_p_sampling_from_logits", "softmax",
                "top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits",
                "min_p_sampling_from_probs", "top_k_sampling_from_probs",
                "top_k_top_p_sampling_from_probs", "chain_speculative_sampling")


def keep_list():
    """Package-relative paths (flashinfer/...) the peers need besides data/aot (see --keep-list)."""
    import builtins
    import flashinfer

    root = os.path.dirname(os.path.abspath(flashinfer.__file__))
    opened = set()
    real_open = builtins.open

    def spy(file, *a, **k):
        path = os.path.abspath(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else ""
        if path.startswith(root + os.sep):
            opened.add(path)
        return real_open(file, *a, **k)

    builtins.open = spy
    try:
        for name in API:
            getattr(flashinfer, name)
        for name in SAMPLING_API:
            getattr(flashinfer.sampling, name)
        import flashinfer.triton.page  # noqa: F401  get_batch_indices_positions's kernel
        specs()
    finally:
        builtins.open = real_open
    files = set(opened)
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f and os.path.abspath(f).startswith(root + os.sep):
            files.add(os.path.abspath(f))
    return sorted("flashinfer/" + os.path.relpath(f, root) for f in files)


def verify_names():
    """Calls the peers' public FlashInfer functions on small CPU tensors with every module load
    intercepted, and says which module each asks for and whether specs() builds it: a check,
    without a GPU, that the prebuilt names are the ones the calls want. The capability queries
    answer sm_90 and pinned memory is plain; a call that stops before asking for a module (a
    device check on the CPU tensor) says so. Returns the number of modules asked for and not
    built."""
    import torch
    import flashinfer
    import flashinfer.topk
    import flashinfer.utils
    from flashinfer.jit import core

    class Asked(Exception):
        pass

    def intercept(spec):
        raise Asked(spec.name)

    core.JitSpecNvcc.build_and_load = intercept
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.is_available = lambda: True
    flashinfer.utils.get_compute_capability = lambda dev: (9, 0)
    flashinfer.topk.get_compute_capability = lambda dev: (9, 0)
    for fn in ("empty", "zeros"):
        real = getattr(torch, fn)
        setattr(torch, fn, lambda *a, real=real, **k: real(*a, **{x: y for x, y in k.items()
                                                                   if x != "pin_memory"}))
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    built = {spec.name for _, spec in specs()}
    bf16, i32 = torch.bfloat16, torch.int32
    ws = torch.zeros(1 << 20, dtype=torch.uint8)
    indptr, idx = torch.tensor([0, 4], dtype=i32), torch.arange(4, dtype=i32)
    last, qo = torch.tensor([16], dtype=i32), torch.tensor([0, 64], dtype=i32)
    x, w = torch.randn(4, 256, dtype=bf16), torch.randn(256, dtype=bf16)
    q, k = torch.randn(4, 32, 128, dtype=bf16), torch.randn(4, 8, 128, dtype=bf16)
    pos = torch.arange(4, dtype=i32)
    probs = torch.softmax(torch.randn(2, 1000), -1)
    s = flashinfer.sampling

    def decode():
        d = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", backend="fa2")
        d.plan(indptr, idx, last, 32, 8, 128, 16, q_data_type=bf16, kv_data_type=bf16)

    def ragged():
        r = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa3")
        r.plan(qo, qo, 32, 8, 128, causal=True, q_data_type=bf16, kv_data_type=bf16)

    def paged():
        p = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
        p.plan(qo, indptr, idx, last, 32, 8, 128, 16, causal=True, q_data_type=bf16,
               kv_data_type=bf16)

    kc = torch.zeros(8, 16, 8, 128, dtype=bf16)
    calls = {
        "rmsnorm": lambda: flashinfer.rmsnorm(x, w),
        "fused_add_rmsnorm": lambda: flashinfer.fused_add_rmsnorm(x, x.clone(), w),
        "layernorm": lambda: flashinfer.layernorm(x, w.float(), w.float()),
        "silu_and_mul": lambda: flashinfer.silu_and_mul(x),
        "gelu_and_mul": lambda: flashinfer.gelu_and_mul(x),
        "gelu_tanh_and_mul": lambda: flashinfer.gelu_tanh_and_mul(x),
        "apply_rope_pos_ids": lambda: flashinfer.apply_rope_pos_ids(q, k, pos),
        "apply_rope": lambda: flashinfer.apply_rope(q, k, indptr, torch.tensor([7], dtype=i32)),
        "apply_llama31_rope_pos_ids": lambda: flashinfer.apply_llama31_rope_pos_ids(q, k, pos),
        "append_paged_kv_cache": lambda: flashinfer.append_paged_kv_cache(
            k, k, torch.zeros(4, dtype=i32), pos, (kc, kc), idx, indptr, last),
        "merge_state": lambda: flashinfer.merge_state(q, torch.randn(4, 32), q,
                                                      torch.randn(4, 32)),
        "decode wrapper (fa2)": decode,
        "ragged prefill wrapper (fa3)": ragged,
        "paged prefill wrapper (fa3)": paged,
        "top_p_sampling_from_probs": lambda: s.top_p_sampling_from_probs(probs, 0.9),
        "top_k_top_p_sampling_from_logits": lambda: s.top_k_top_p_sampling_from_logits(
            torch.randn(2, 1000), 50, 0.9),
        "top_k_renorm_probs": lambda: s.top_k_renorm_probs(probs, 50),
        "top_p_renorm_probs": lambda: s.top_p_renorm_probs(probs, 0.9),
        "top_k_mask_logits": lambda: s.top_k_mask_logits(torch.randn(2, 1000), 50),
        "min_p_sampling_from_probs": lambda: s.min_p_sampling_from_probs(probs, 0.1),
        "top_k_sampling_from_probs": lambda: s.top_k_sampling_from_probs(probs, 50),
        "top_k_top_p_sampling_from_probs": lambda: s.top_k_top_p_sampling_from_probs(
            probs, 50, 0.9),
        "chain_speculative_sampling": lambda: s.chain_speculative_sampling(
            torch.softmax(torch.randn(2, 4, 1000), -1), torch.zeros(2, 4, dtype=i32),
            torch.softmax(torch.randn(2, 5, 1000), -1)),
    }
    missing = 0
    for label, call in calls.items():
        try:
            call()
            state = "asked for no module"
        except Asked as e:
            ok = str(e) in built
            missing += not ok
            state = f"{e} ({'built here' if ok else 'NOT BUILT: add it to specs()'})"
        except Exception as e:  # stopped on the CPU before asking: nothing to compare
            state = f"not traced on the CPU ({type(e).__name__})"
        print(f"  {label:34s} -> {state}", flush=True)
    return missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify-names", action="store_true",
                    help="check, on the CPU, that the peers' calls ask for the modules built")
    ap.add_argument("--list", action="store_true", help="print the module names and exit")
    ap.add_argument("--keep-list", metavar="FILE",
                    help="write the package files the peers need to FILE and exit")
    ap.add_argument("--strip", default="strip", help="strip(1) for the installed .so files")
    args = ap.parse_args()
    import flashinfer
    from flashinfer.jit import env as jit_env

    if args.verify_names:
        missing = verify_names()
        print(f"flashinfer_prebuild: {missing} module names asked for and not built")
        return 1 if missing else 0
    if args.keep_list:
        files = keep_list()
        with open(args.keep_list, "w") as f:
            f.write("\n".join(files) + "\n")
        print(f"flashinfer_prebuild: {len(files)} package files kept in {args.keep_list}")
        return 0
    todo = specs()
    if args.list:
        for family, spec in todo:
            print(f"{family:10s} {spec.name}")
        return 0
    arch = os.environ.get("FLASHINFER_CUDA_ARCH_LIST")
    print(f"flashinfer {flashinfer.__version__} from {os.path.dirname(flashinfer.__file__)}; "
          f"FLASHINFER_CUDA_ARCH_LIST={arch}; build tree {jit_env.FLASHINFER_JIT_DIR}; "
          f"AOT folder {jit_env.FLASHINFER_AOT_DIR}", flush=True)
    if arch != "9.0a":
        print("flashinfer_prebuild: set FLASHINFER_CUDA_ARCH_LIST=9.0a", file=sys.stderr)
        return 2
    failed = []
    for family, spec in todo:
        dst = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
        if dst.exists():
            print(f"{family:10s} {spec.name}: prebuilt ({dst.stat().st_size / 1e6:.1f} MB)",
                  flush=True)
            continue
        t0 = time.time()
        try:
            spec.build(verbose=os.environ.get("FLASHINFER_JIT_VERBOSE") == "1")
        except Exception as e:  # report it, build the rest
            failed.append(spec.name)
            print(f"{family:10s} {spec.name}: BUILD FAILED after {time.time() - t0:.0f} s: "
                  f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", flush=True)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(".so.tmp")
        shutil.copyfile(spec.jit_library_path, tmp)
        subprocess.run([args.strip, "--strip-unneeded", str(tmp)], check=True)
        os.replace(tmp, dst)
        print(f"{family:10s} {spec.name}: built in {time.time() - t0:.0f} s, "
              f"{dst.stat().st_size / 1e6:.1f} MB stripped", flush=True)
    if failed:
        print(f"flashinfer_prebuild: {len(failed)} modules failed: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
