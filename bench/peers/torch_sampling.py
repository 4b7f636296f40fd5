#!/usr/bin/env python3
"""PyTorch peers of kjit's sampling ops (`kjit-cli bench top_p_sampling | top_k_top_p_sampling |
argmax | softmax | top_k`: torch.topk), timed under the same TIMER/FLUSH runs as `kjit-cli bench` times kjit
(peer_timing.py; --runs). One JSON line per result, naming its timer and flush.

The samplers are the usual sort-based implementations engines fall back to (vLLM's
apply_top_k_top_p, SGLang's torch path): sort the row, cumulative sum, mask, renormalize,
torch.multinomial, gather the index. FlashInfer's sorting-free samplers are timed too when the
flashinfer package is importable. Inputs are drawn like kjit-cli's: probabilities are a softmax
of N(0, sigma) logits per row; logits are N(0, sigma) in the given dtype. bytes = the
probabilities / logits read (plus softmax's fp32 write), as in kjit-cli."""
import argparse
import sys

import torch

from peer_timing import add_runs_argument, time_fn, timed_row


def sort_top_p(probs, p):
    """Keep the smallest prefix of the sorted row whose mass reaches p, then draw."""
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    sorted_p = sorted_p.masked_fill(cum - sorted_p > p, 0.0)
    choice = torch.multinomial(sorted_p, 1)
    return torch.gather(idx, -1, choice).squeeze(-1)


def sort_top_k_top_p(logits, k, p, temperature):
    """Temperature, top-k mask, softmax, then sort-based top-p on the renormalized set."""
    x = logits.float() / temperature
    if k < x.shape[-1]:
        kth = torch.topk(x, k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    return sort_top_p(probs, p)


def make_case(op, batch, vocab, dt, args):
    """Inputs, the peers ({name: fn}) and the bytes one call reads (and writes)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    logits = torch.randn(batch, vocab, device="cuda", generator=g) * args.sigma
    peers = {}
    if op == "top_p_sampling":
        probs = torch.softmax(logits, dim=-1)
        peers["torch-sort"] = lambda: sort_top_p(probs, args.p)
        try:
            import flashinfer  # noqa: F401
            peers["flashinfer"] = lambda: flashinfer.sampling.top_p_sampling_from_probs(
                probs, args.p)
        except Exception:  # not installed or another API: no such peer
            pass
        return peers, probs.nbytes
    x = logits.to(dt)
    if op == "top_k_top_p_sampling":
        peers["torch-sort"] = lambda: sort_top_k_top_p(x, args.k, args.p, args.temperature)
        try:
            import flashinfer  # noqa: F401
            peers["flashinfer"] = lambda: flashinfer.sampling.top_k_top_p_sampling_from_logits(
                x / args.temperature, args.k, args.p)
        except Exception:
            pass
        return peers, x.nbytes
    if op == "argmax":
        peers["torch"] = lambda: torch.argmax(x, dim=-1)
        return peers, x.nbytes
    if op == "softmax":
        eager = lambda: torch.softmax(x.float() / args.temperature, dim=-1)
        peers["torch"] = eager
        # Issue 30's target: a fresh static-shape compile per shape (one function reused across
        # shapes would turn dynamic after the second).
        torch._dynamo.reset()
        peers["torch-compile"] = torch.compile(eager, dynamic=False)
        return peers, x.nbytes + batch * vocab * 4
    if op == "top_k":
        peers["torch"] = lambda: torch.topk(x, args.k, dim=-1)
        return peers, x.nbytes
    raise ValueError(op)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="top_p_sampling",
                    choices=["top_p_sampling", "top_k_top_p_sampling", "argmax", "softmax", "top_k"])
    ap.add_argument("--shapes", default="1x128256,64x128256,128x128256",
                    help="batch x vocab, comma-separated")
    ap.add_argument("--dtype", default="bf16", help="logits dtype (probabilities are fp32)")
    ap.add_argument("--p", type=float, default=0.9)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--sigma", type=float, default=2.0)
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    out = open(args.json, "a") if args.json else None
    for shape in args.shapes.split(","):
        batch, vocab = map(int, shape.split("x"))
        peers, nbytes = make_case(args.op, batch, vocab, dt, args)
        src = torch.empty(max(nbytes // 2 // 4, 1), dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        shape_row = {"batch": batch, "vocab": vocab}
        if args.op in ("top_p_sampling", "top_k_top_p_sampling"):
            shape_row["p"] = args.p
        if args.op in ("top_k_top_p_sampling", "top_k"):
            shape_row["k"] = args.k
        if args.op in ("top_k_top_p_sampling", "softmax"):
            shape_row["temperature"] = args.temperature
        for timer, flush in args.runs:
            copy = time_fn(lambda: dst.copy_(src), timer, flush)
            copy_gbps = 2 * src.nbytes / (copy["median_us"] * 1e3)
            for name, fn in peers.items():
                fn()
                row = {"op": args.op, "backend": name, "shape": shape_row,
                       "dtype": "fp32" if args.op == "top_p_sampling" else args.dtype,
                       "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
                timed_row(row, fn, timer, flush, nbytes,
                          f"{args.op:22s} {name:12s} batch={batch:5d} vocab={vocab:7d}", out,
                          copy_gbps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
