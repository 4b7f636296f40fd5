#!/usr/bin/env python3
"""PyTorch peer of kjit_moe_grouped_gemm: torch._grouped_mm(a, b_t, offs=ends) with a [rows, k]
(tokens * top_k rows, sorted by expert), the experts' weights b [experts, n, k] passed as
b.transpose(-2, -1) ([experts, k, n], the layout _grouped_mm wants), and offs the int32 end row
of each expert (kjit's expert_offsets[1:]). Routing as `kjit-cli bench moe_grouped_gemm`: even
(token t's slot j to expert (t * top_k + j) % experts) or skew (90% of first slots to expert 0).
Timed under the same TIMER/FLUSH runs as kjit-cli bench (peer_timing.py; --runs). PyTorch is the
reference implementation here, so it is not checked. One JSON line per result, with TFLOP/s and
the GB/s of the bytes moved (a, the active experts' weights, out)."""
import argparse
import sys

import torch

from peer_timing import add_runs_argument, timed_row


def routed_rows(tokens, top_k, experts, skew):
    rows = [0] * experts
    for t in range(tokens):
        for j in range(top_k):
            e = (t * top_k + j) % experts
            if skew and j == 0 and t % 10 != 9:
                e = 0
            rows[e] += 1
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8x2x64x28672x4096",
                    help="comma-separated EXPERTSxTOP_KxTOKENSxNxK")
    ap.add_argument("--routing", default="even", choices=["even", "skew"])
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    args = ap.parse_args()
    out = open(args.json, "a") if args.json else None
    for shape in args.shapes.split(","):
        experts, top_k, tokens, n, k = map(int, shape.split("x"))
        counts = routed_rows(tokens, top_k, experts, args.routing == "skew")
        rows = tokens * top_k
        a = (torch.rand(rows, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(experts, n, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b_t = b.transpose(-2, -1)
        offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
        fn = lambda: torch._grouped_mm(a, b_t, offs=offs)
        active = sum(1 for c in counts if c > 0)
        nbytes = (rows * k + active * n * k + rows * n) * 2
        sh = {"experts": experts, "top_k": top_k, "tokens": tokens, "n": n, "k": k,
              "routing": args.routing, "active_experts": active}
        for timer, flush in args.runs:
            row = {"op": "moe_grouped_gemm", "backend": "torch-grouped_mm", "shape": sh,
                   "dtype": "bf16", "gpu": torch.cuda.get_device_name(),
                   "torch": torch.__version__}
            try:
                row = timed_row(row, fn, timer, flush, nbytes,
                                f"moe_grouped_gemm torch e={experts} top{top_k} tokens={tokens} "
                                f"n={n} k={k}", out, warm=True)
            except RuntimeError as err:  # an unsupported shape or build: say so, keep going
                print(f"moe_grouped_gemm torch {shape}: {err}", flush=True)
                continue
            if "median_us" in row:
                row["tflops"] = 2.0 * rows * n * k / (row["median_us"] * 1e6)
                print(f"  {row['tflops']:8.1f} TFLOP/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
