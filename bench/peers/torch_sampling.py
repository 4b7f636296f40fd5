#!/usr/bin/env python3
"""PyTorch peers of kjit's sampling ops (`kjit-cli bench top_p_sampling | top_k_top_p_sampling |
argmax | softmax | top_k`: torch.topk), timed under the same TIMER/FLUSH runs as `kjit-cli bench` times kjit
(peer_timing.py; --runs). One JSON line per result, naming its timer and flush.

The samplers are the usual sort-based implementations engines fall back to (vLLM's
apply_top_k_top_p, SGLang's torch path): sort the row, cumulative sum, mask, renormalize,
torch.multinomial, gather the index. FlashInfer's kernels are timed beside them as backend
"flashinfer" when flashinfer loads (flashinfer_env.py: the packed .whl/ copy first; one line and
no flashinfer rows when it does not; --no-flashinfer leaves them out): its sorting-free samplers,
softmax, top_k, the renormalizations and the logit mask; min_p_sampling, top_k_sampling,
top_k_top_p_sampling_probs (from probabilities) and chain_speculative_sampling (--draft tokens a
request) are FlashInfer ops kjit-cli bench does not time, with a sort-based torch peer where one
is short (min_p, top_k). Inputs are drawn like kjit-cli's: probabilities are a softmax of
N(0, sigma) logits per row; logits are N(0, sigma) in the given dtype. bytes = the
probabilities / logits read (plus softmax's fp32 write, a renormalized or masked row's write),
as in kjit-cli."""
import argparse
import sys

import torch

import flashinfer_env
from peer_timing import add_runs_argument, time_fn, timed_row

OPS = ["top_p_sampling", "top_k_top_p_sampling", "argmax", "softmax", "top_k",
       "top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits", "min_p_sampling",
       "top_k_sampling", "top_k_top_p_sampling_probs", "chain_speculative_sampling"]


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


def sort_top_k_renorm(probs, k):
    """Zero what is below the row's k-th largest probability (ties kept), renormalize."""
    kth = torch.topk(probs, k, dim=-1).values[..., -1:]
    kept = probs.masked_fill(probs < kth, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def sort_top_p_renorm(probs, p):
    """Keep the smallest prefix of the sorted row whose mass reaches p, renormalize."""
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    sorted_p = sorted_p.masked_fill(cum - sorted_p > p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, idx, sorted_p)
    return kept / kept.sum(dim=-1, keepdim=True)


def mask_top_k(logits, k):
    """-inf below the row's k-th largest logit (ties kept)."""
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def min_p_sample(probs, min_p):
    """Keep the probabilities >= min_p x the row's largest, then draw."""
    top = probs.amax(dim=-1, keepdim=True)
    return torch.multinomial(probs.masked_fill(probs < min_p * top, 0.0), 1).squeeze(-1)


def top_k_sample(probs, k):
    """Draw among the row's k largest probabilities."""
    vals, idx = torch.topk(probs, k, dim=-1)
    return torch.gather(idx, -1, torch.multinomial(vals, 1)).squeeze(-1)


def make_case(op, batch, vocab, dt, args, fi):
    """Inputs, the peers ({name: fn}) and the bytes one call reads (and writes). fi: the
    flashinfer module or None (no flashinfer peer)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    logits = torch.randn(batch, vocab, device="cuda", generator=g) * args.sigma
    peers = {}
    s = fi.sampling if fi is not None else None
    if op in ("top_p_sampling", "top_k_renorm_probs", "top_p_renorm_probs", "min_p_sampling",
              "top_k_sampling", "top_k_top_p_sampling_probs", "chain_speculative_sampling"):
        probs = torch.softmax(logits, dim=-1)  # fp32, as kjit-cli's
        if op == "top_p_sampling":
            peers["torch-sort"] = lambda: sort_top_p(probs, args.p)
            if s:
                peers["flashinfer"] = lambda: s.top_p_sampling_from_probs(probs, args.p)
            return peers, probs.nbytes
        if op == "top_k_renorm_probs":
            peers["torch"] = lambda: sort_top_k_renorm(probs, args.k)
            if s:
                peers["flashinfer"] = lambda: s.top_k_renorm_probs(probs, args.k)
            return peers, 2 * probs.nbytes
        if op == "top_p_renorm_probs":
            peers["torch-sort"] = lambda: sort_top_p_renorm(probs, args.p)
            if s:
                peers["flashinfer"] = lambda: s.top_p_renorm_probs(probs, args.p)
            return peers, 2 * probs.nbytes
        if op == "min_p_sampling":
            peers["torch"] = lambda: min_p_sample(probs, args.min_p)
            if s:
                peers["flashinfer"] = lambda: s.min_p_sampling_from_probs(probs, args.min_p)
            return peers, probs.nbytes
        if op == "top_k_sampling":
            peers["torch"] = lambda: top_k_sample(probs, args.k)
            if s:
                peers["flashinfer"] = lambda: s.top_k_sampling_from_probs(probs, args.k)
            return peers, probs.nbytes
        if op == "top_k_top_p_sampling_probs":
            peers["torch-sort"] = lambda: sort_top_p(sort_top_k_renorm(probs, args.k), args.p)
            if s:
                peers["flashinfer"] = lambda: s.top_k_top_p_sampling_from_probs(
                    probs, args.k, args.p)
            return peers, probs.nbytes
        # chain_speculative_sampling: `draft` draft tokens a request; target_probs has one row
        # more a request (the bonus token); batch x vocab is the target's per-step row count.
        n = args.draft
        draft = torch.softmax(torch.randn(batch, n, vocab, device="cuda", generator=g) *
                              args.sigma, dim=-1)
        target = torch.softmax(torch.randn(batch, n + 1, vocab, device="cuda", generator=g) *
                               args.sigma, dim=-1)
        ids = torch.multinomial(draft.view(-1, vocab), 1).view(batch, n).to(torch.int32)
        if s:
            peers["flashinfer"] = lambda: s.chain_speculative_sampling(draft, ids, target)
        return peers, draft.nbytes + target.nbytes
    x = logits.to(dt)
    if op == "top_k_top_p_sampling":
        peers["torch-sort"] = lambda: sort_top_k_top_p(x, args.k, args.p, args.temperature)
        if s:
            peers["flashinfer"] = lambda: s.top_k_top_p_sampling_from_logits(
                x / args.temperature, args.k, args.p)
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
        if s:
            peers["flashinfer"] = lambda: s.softmax(x, args.temperature)
        return peers, x.nbytes + batch * vocab * 4
    if op == "top_k":
        peers["torch"] = lambda: torch.topk(x, args.k, dim=-1)
        if fi is not None:
            peers["flashinfer"] = lambda: fi.top_k(x, args.k)
        return peers, x.nbytes
    if op == "top_k_mask_logits":
        peers["torch"] = lambda: mask_top_k(x, args.k)
        if s:
            peers["flashinfer"] = lambda: s.top_k_mask_logits(x, args.k)
        return peers, 2 * x.nbytes
    raise ValueError(op)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="top_p_sampling", choices=OPS)
    ap.add_argument("--shapes", default="1x128256,64x128256,128x128256",
                    help="batch x vocab, comma-separated")
    ap.add_argument("--dtype", default="bf16", help="logits dtype (probabilities are fp32)")
    ap.add_argument("--p", type=float, default=0.9)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--min-p", type=float, default=0.1)
    ap.add_argument("--draft", type=int, default=4,
                    help="chain_speculative_sampling: draft tokens a request")
    ap.add_argument("--no-flashinfer", action="store_true", help="no flashinfer rows")
    ap.add_argument("--sigma", type=float, default=2.0)
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    out = open(args.json, "a") if args.json else None
    fi = None
    if args.op != "argmax" and not args.no_flashinfer:
        fi = flashinfer_env.load()
    for shape in args.shapes.split(","):
        batch, vocab = map(int, shape.split("x"))
        peers, nbytes = make_case(args.op, batch, vocab, dt, args, fi)
        src = torch.empty(max(nbytes // 2 // 4, 1), dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        shape_row = {"batch": batch, "vocab": vocab, "sigma": args.sigma}
        if args.op in ("top_p_sampling", "top_k_top_p_sampling", "top_p_renorm_probs",
                       "top_k_top_p_sampling_probs"):
            shape_row["p"] = args.p
        if args.op in ("top_k_top_p_sampling", "top_k", "top_k_renorm_probs", "top_k_mask_logits",
                       "top_k_sampling", "top_k_top_p_sampling_probs"):
            shape_row["k"] = args.k
        if args.op in ("top_k_top_p_sampling", "softmax"):
            shape_row["temperature"] = args.temperature
        if args.op == "min_p_sampling":
            shape_row["min_p"] = args.min_p
        if args.op == "chain_speculative_sampling":
            shape_row["draft"] = args.draft
        # The ops that read fp32 probabilities whatever --dtype says.
        probs_in = args.op in ("top_p_sampling", "top_k_renorm_probs", "top_p_renorm_probs",
                               "min_p_sampling", "top_k_sampling", "top_k_top_p_sampling_probs",
                               "chain_speculative_sampling")
        for timer, flush in args.runs:
            copy = time_fn(lambda: dst.copy_(src), timer, flush)
            copy_gbps = 2 * src.nbytes / (copy["median_us"] * 1e3)
            for name, fn in peers.items():
                flashinfer = name == "flashinfer"
                if not flashinfer:
                    fn()
                row = {"op": args.op, "backend": name, "shape": shape_row,
                       "dtype": "fp32" if probs_in else args.dtype,
                       "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
                if flashinfer:
                    row["flashinfer"] = fi.__version__
                # FlashInfer's first call inside the row's error handling (see torch_peers.py).
                timed_row(row, fn, timer, flush, nbytes,
                          f"{args.op:22s} {name:12s} batch={batch:5d} vocab={vocab:7d}", out,
                          copy_gbps, warm=flashinfer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
