#!/usr/bin/env python3
"""PyTorch peer of kjit_moe_grouped_gemm: torch._grouped_mm(a, b_t, offs=ends) with a [rows, k]
(tokens * top_k rows, sorted by expert), the experts' weights b [experts, n, k] passed as
b.transpose(-2, -1) ([experts, k, n], the layout _grouped_mm wants), and offs the int32 end row
of each expert (kjit's expert_offsets[1:]). Routing as `kjit-cli bench moe_grouped_gemm`: even
(token t's slot j to expert (t * top_k + j) % experts) or skew (90% of first slots to expert 0).
Timed under the same TIMER/FLUSH runs as kjit-cli bench (peer_timing.py; --runs). PyTorch is the
reference implementation here, so it is not checked. One JSON line per result, with TFLOP/s and
the GB/s of the bytes moved (a, the active experts' weights, out).

--swiglu: the peer of kjit's gate_up GEMM with silu_and_mul in its epilogue (kjit-cli bench
moe_grouped_gemm --set swiglu=1): b is w13 [experts, n = 2 I, k] (gate rows, then up rows), timed as
_grouped_mm then F.silu(gate) * up, out [rows, I].

--forward: the peer of kjit_moe_forward (kjit-cli bench moe_forward), --shapes
EXPERTSxTOP_KxTOKENSxHIDDENxINTER: the same layer composed from PyTorch pieces, softmax top-k
renormalized (torch.topk), a stable argsort by expert with bincount offsets, _grouped_mm gate_up,
F.silu(gate) * up, _grouped_mm down, and the weighted sum over top-k with index_add_ in fp32; even
logits (uniform) or skew (expert 0 favoured for 90% of the tokens).

--fp8: the peers of kjit_moe_grouped_gemm_fp8 (kjit-cli bench moe_grouped_gemm_fp8; with
--swiglu, its SwiGLU form), two rows per shape. PyTorch has no grouped GEMM with DeepSeek-V3's
block scales, so: "torch-scaled_grouped_mm-rowwise", torch._scaled_grouped_mm over the same e4m3
operands with one scale per row of a and per column of each expert's b (a coarser scaling, the
nearest fp8 grouped GEMM PyTorch has; skipped with a message where this build or GPU lacks it),
and "torch-grouped_mm-dequant-bf16", the bf16 _grouped_mm of the operands dequantized once
outside the timing (what an engine without an fp8 grouped kernel would run)."""
import argparse
import sys

import torch
import torch.nn.functional as F

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


def time_rows(args, out, op, backend, sh, fn, nbytes, label, flops, dtype="bf16"):
    """fn timed under each of args.runs, one JSON row each (TFLOP/s from `flops`)."""
    for timer, flush in args.runs:
        row = {"op": op, "backend": backend, "shape": sh, "dtype": dtype,
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        try:
            row = timed_row(row, fn, timer, flush, nbytes, label, out, warm=True)
        except RuntimeError as err:  # an unsupported shape or build: say so, keep going
            print(f"{label}: {err}", flush=True)
            continue
        if "median_us" in row:
            row["tflops"] = flops / (row["median_us"] * 1e6)
            print(f"  {row['tflops']:8.1f} TFLOP/s", flush=True)


def moe_forward(x, logits, w13_t, w2_t, top_k):
    """The whole layer from PyTorch pieces; w13_t [E, H, 2 I] and w2_t [E, I, H] (transposed)."""
    experts, inter = w13_t.shape[0], w2_t.shape[1]
    scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(scores, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.bincount(flat, minlength=experts).cumsum(0).to(torch.int32)
    src = order // top_k
    gate_up = torch._grouped_mm(x[src], w13_t, offs=offs)
    h = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    y = torch._grouped_mm(h, w2_t, offs=offs)
    out = torch.zeros(x.shape, device=x.device, dtype=torch.float32)
    out.index_add_(0, src, y.float() * weights.flatten()[order].unsqueeze(1))
    return out.to(x.dtype)


def run_forward(args, out):
    for shape in args.shapes.split(","):
        experts, top_k, tokens, hidden, inter = map(int, shape.split("x"))
        x = (torch.rand(tokens, hidden, device="cuda") * 2 - 1).to(torch.bfloat16)
        logits = torch.rand(tokens, experts, device="cuda") * 2 - 1
        if args.routing == "skew":
            logits[torch.arange(tokens, device="cuda") % 10 != 9, 0] += 8.0
        s13, s2 = 2.0 / hidden ** 0.5, 2.0 / inter ** 0.5
        w13 = ((torch.rand(experts, 2 * inter, hidden, device="cuda") * 2 - 1) * s13).to(
            torch.bfloat16)
        w2 = ((torch.rand(experts, hidden, inter, device="cuda") * 2 - 1) * s2).to(torch.bfloat16)
        w13_t, w2_t = w13.transpose(-2, -1), w2.transpose(-2, -1)
        fn = lambda: moe_forward(x, logits, w13_t, w2_t, top_k)
        active = int(torch.topk(logits, top_k, dim=-1).indices.unique().numel())
        pairs = tokens * top_k
        nbytes = ((2 * tokens * hidden + active * 3 * inter * hidden +
                   2 * pairs * (2 * hidden + inter)) * 2 + tokens * experts * 4)
        sh = {"experts": experts, "top_k": top_k, "tokens": tokens, "hidden": hidden,
              "inter": inter, "routing": args.routing, "active_experts": active}
        time_rows(args, out, "moe_forward", "torch-composed", sh, fn, nbytes,
                  f"moe_forward torch e={experts} top{top_k} tokens={tokens} hidden={hidden} "
                  f"inter={inter}", 6.0 * pairs * inter * hidden)


def run_fp8(args, out):
    for shape in args.shapes.split(","):
        experts, top_k, tokens, n, k = map(int, shape.split("x"))
        counts = routed_rows(tokens, top_k, experts, args.routing == "skew")
        rows = tokens * top_k
        a32 = torch.rand(rows, k, device="cuda") * 2 - 1
        offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
        active = sum(1 for c in counts if c > 0)
        out_n = n // 2 if args.swiglu else n
        sh = {"experts": experts, "top_k": top_k, "tokens": tokens, "n": n, "k": k,
              "routing": args.routing, "active_experts": active}
        if args.swiglu:
            sh["swiglu"] = 1
        tail = f"e={experts} top{top_k} tokens={tokens} n={n} k={k}" + (
            " swiglu" if args.swiglu else "")

        def swiglu(gemm):
            if not args.swiglu:
                return gemm
            return lambda: (lambda gu: F.silu(gu[:, :out_n]) * gu[:, out_n:])(gemm())

        # Rowwise e4m3: scale_a [rows], scale_b [experts, n]; b passed as [experts, k, n]
        # column-major (b.transpose), as _scaled_grouped_mm wants.
        sa = a32.abs().amax(dim=1).clamp(min=1e-12) / 448
        a8 = (a32 / sa[:, None]).to(torch.float8_e4m3fn)
        # One expert at a time: DeepSeek-V3's weights in fp32 would not fit beside the rest.
        sb = torch.empty(experts, n, device="cuda")
        b8 = torch.empty(experts, n, k, device="cuda", dtype=torch.float8_e4m3fn)
        for e in range(experts):
            b32 = (torch.rand(n, k, device="cuda") * 2 - 1) / 16
            sb[e] = b32.abs().amax(dim=1).clamp(min=1e-12) / 448
            b8[e] = (b32 / sb[e][:, None]).to(torch.float8_e4m3fn)
        if hasattr(torch, "_scaled_grouped_mm"):
            b8_t = b8.transpose(-2, -1)
            fn = swiglu(lambda: torch._scaled_grouped_mm(a8, b8_t, sa, sb, offs=offs,
                                                         out_dtype=torch.bfloat16))
            nbytes = rows * k + active * n * k + (rows + active * n) * 4 + rows * out_n * 2
            time_rows(args, out, "moe_grouped_gemm_fp8", "torch-scaled_grouped_mm-rowwise", sh,
                      fn, nbytes, f"moe_grouped_gemm_fp8 torch _scaled_grouped_mm {tail}",
                      2.0 * rows * n * k, dtype="e4m3")
        else:
            print("torch._scaled_grouped_mm: not in this PyTorch build", flush=True)
        a16 = (a8.float() * sa[:, None]).to(torch.bfloat16)
        b16 = torch.empty(experts, n, k, device="cuda", dtype=torch.bfloat16)
        for e in range(experts):
            b16[e] = (b8[e].float() * sb[e][:, None]).to(torch.bfloat16)
        b16_t = b16.transpose(-2, -1)
        fn = swiglu(lambda: torch._grouped_mm(a16, b16_t, offs=offs))
        nbytes = (rows * k + active * n * k + rows * out_n) * 2
        time_rows(args, out, "moe_grouped_gemm_fp8", "torch-grouped_mm-dequant-bf16", sh, fn,
                  nbytes, f"moe_grouped_gemm_fp8 torch bf16 _grouped_mm dequantized {tail}",
                  2.0 * rows * n * k, dtype="e4m3")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8x2x64x28672x4096",
                    help="comma-separated EXPERTSxTOP_KxTOKENSxNxK")
    ap.add_argument("--routing", default="even", choices=["even", "skew"])
    ap.add_argument("--swiglu", action="store_true",
                    help="b is w13 (n = 2 I); time _grouped_mm then F.silu(gate) * up")
    ap.add_argument("--forward", action="store_true",
                    help="the whole layer; --shapes EXPERTSxTOP_KxTOKENSxHIDDENxINTER")
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    ap.add_argument("--fp8", action="store_true",
                    help="kjit_moe_grouped_gemm_fp8's peers (rowwise _scaled_grouped_mm and the "
                         "bf16 _grouped_mm of the dequantized operands)")
    args = ap.parse_args()
    out = open(args.json, "a") if args.json else None
    if args.fp8:
        run_fp8(args, out)
        return 0
    if args.forward:
        run_forward(args, out)
        return 0
    for shape in args.shapes.split(","):
        experts, top_k, tokens, n, k = map(int, shape.split("x"))
        counts = routed_rows(tokens, top_k, experts, args.routing == "skew")
        rows = tokens * top_k
        a = (torch.rand(rows, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(experts, n, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b_t = b.transpose(-2, -1)
        offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
        fn = lambda: torch._grouped_mm(a, b_t, offs=offs)
        if args.swiglu:
            half = n // 2
            gemm = fn
            fn = lambda: (lambda gu: F.silu(gu[:, :half]) * gu[:, half:])(gemm())
        out_n = n // 2 if args.swiglu else n
        active = sum(1 for c in counts if c > 0)
        nbytes = (rows * k + active * n * k + rows * out_n) * 2
        sh = {"experts": experts, "top_k": top_k, "tokens": tokens, "n": n, "k": k,
              "routing": args.routing, "active_experts": active}
        if args.swiglu:
            sh["swiglu"] = 1
        time_rows(args, out, "moe_grouped_gemm", "torch-grouped_mm", sh, fn, nbytes,
                  f"moe_grouped_gemm torch e={experts} top{top_k} tokens={tokens} n={n} k={k}"
                  + (" swiglu" if args.swiglu else ""), 2.0 * rows * n * k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
