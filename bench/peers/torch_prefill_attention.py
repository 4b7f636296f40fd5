#!/usr/bin/env python3
"""PyTorch peer of `kjit-cli bench batch_prefill`: scaled_dot_product_attention on one request
of L tokens (q [1, Hq, L, D], k / v [1, Hkv, L, D], enable_gqa=True), causal or not, once per
SDPA backend (cuDNN by default; a backend that refuses the shape gets a row with its error).
PyTorch is not checked here; kjit's result is (kjit-cli bench checks it). SDPA's causal mask is
aligned to the top left, which equals kjit's (aligned to the end of the keys) only when the query
and key lengths are equal, so only those shapes are offered.

Timed under the same TIMER/FLUSH runs as `kjit-cli bench` (peer_timing.py). FLOPs counted as kjit
counts them: 4 x the (query, key) pairs the mask leaves x heads x head_dim; printed as TFLOP/s."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_timing import add_runs_argument, timed_row

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", default="2048,8192")
    ap.add_argument("--causal", default="1,0", help="which masks to time: 1, 0 or both")
    ap.add_argument("--qo-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--backends", default="cudnn")
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    hq, hk, d = args.qo_heads, args.kv_heads, args.head_dim
    out = open(args.json, "a") if args.json else None
    for length in map(int, args.lens.split(",")):
        q = torch.randn(1, hq, length, d, device="cuda", dtype=dt)
        k = torch.randn(1, hk, length, d, device="cuda", dtype=dt)
        v = torch.randn(1, hk, length, d, device="cuda", dtype=dt)
        nbytes = k.nbytes + v.nbytes + 2 * q.nbytes
        for causal in (c == "1" for c in args.causal.split(",")):
            pairs = length * (length + 1) / 2 if causal else length * length
            flops = 4.0 * pairs * hq * d
            for name in args.backends.split(","):
                for timer, flush in args.runs:
                    row = {"op": "batch_prefill", "backend": f"torch-sdpa-{name}",
                           "shape": {"batch": 1, "q_len": length, "kv_len": length,
                                     "qo_heads": hq, "kv_heads": hk, "head_dim": d,
                                     "causal": causal, "layout": "dense", "pairs": pairs},
                           "dtype": args.dtype, "gpu": torch.cuda.get_device_name(),
                           "torch": torch.__version__}

                    def fn():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                              enable_gqa=True)

                    with sdpa_kernel(BACKENDS[name]):
                        row = timed_row(row, fn, timer, flush, nbytes,
                                        f"batch_prefill torch-sdpa-{name:9s} L={length:6d} "
                                        f"{'causal' if causal else 'full  '}", None, warm=True)
                    if "median_us" in row:
                        row["tflops"] = flops / (row["median_us"] * 1e6)
                        print(f"  {row['tflops']:8.1f} TFLOP/s", flush=True)
                    if out:
                        out.write(json.dumps(row) + "\n")
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
