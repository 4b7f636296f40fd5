#!/usr/bin/env python3
"""PyTorch peers of `kjit-cli bench decode_attention`: scaled_dot_product_attention on the same
shapes with a dense KV cache (q [B, Hq, 1, D], k / v [B, Hkv, L, D], enable_gqa=True), once per
SDPA backend (cuDNN, flash, memory-efficient; a backend that refuses the shape gets a row with
its error). PyTorch is not checked here; kjit's result is (kjit-cli bench checks it).

Timed under the same TIMER/FLUSH runs as `kjit-cli bench` times kjit (peer_timing.py; --runs,
e.g. events/read,events/dirty: one call per sample after the flush). Bytes counted as kjit
counts them: K and V read once, q read, out written. One JSON line per result, naming its timer
and flush."""
import argparse
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
    # batch x kv_len, the shapes by default
    ap.add_argument("--shapes", default="64x4096,256x2048,1x8192,16x32768")
    ap.add_argument("--qo-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--backends", default="cudnn,flash,efficient")
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    hq, hk, d = args.qo_heads, args.kv_heads, args.head_dim
    out = open(args.json, "a") if args.json else None
    for shape in args.shapes.split(","):
        b, l = map(int, shape.split("x"))
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=dt)
        k = torch.randn(b, hk, l, d, device="cuda", dtype=dt)
        v = torch.randn(b, hk, l, d, device="cuda", dtype=dt)
        nbytes = k.nbytes + v.nbytes + 2 * q.nbytes
        for name in args.backends.split(","):
            for timer, flush in args.runs:
                row = {"op": "decode_attention", "backend": f"torch-sdpa-{name}",
                       "shape": {"batch": b, "kv_len": l, "qo_heads": hq, "kv_heads": hk,
                                 "head_dim": d, "layout": "dense"},
                       "dtype": args.dtype, "gpu": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "timer": timer, "flush": flush}

                def fn():
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

                with sdpa_kernel(BACKENDS[name]):
                    timed_row(row, fn, timer, flush, nbytes,
                              f"decode_attention torch-sdpa-{name:9s} {shape:>10s}", out,
                              warm=True)
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
