#!/usr/bin/env python3
"""PyTorch (cuBLAS) peer of kjit_gemm: torch.nn.functional.linear(a, b) = a @ b.T with a [m, k]
and the weight b [n, k], timed under the same TIMER/FLUSH runs as `kjit-cli bench gemm`
(peer_timing.py; --runs). PyTorch is the reference implementation here, so it is not checked;
kjit's results are (kjit-cli bench). One JSON line per result, naming its timer and flush, with
TFLOP/s beside the GB/s of the bytes moved (a, b read once, out written once).

With --scales tensor or row it is the peer of kjit_gemm_fp8 instead: torch._scaled_mm on
float8_e4m3fn a [m, k] and b [n, k] (passed as b.t(), the column-major operand cuBLAS wants) with
fp32 scales per tensor ([1], [1]) or per row ([m, 1], [1, n]), bf16 out. PyTorch has no
DeepSeek-V3 block mode on sm_90 to compare kjit's "block" rows with. The fp8 operands are by
default the codes `kjit-cli bench gemm_fp8` draws (random sign and mantissa, exponent field 4 ..
10: magnitudes 2^-3 .. 2^3), since under the power cap a GEMM's speed depends on its data;
--codes uniform converts uniform [-1, 1) to e4m3 instead."""
import argparse
import sys

import torch

from peer_timing import add_runs_argument, timed_row


def bench_codes(rows, cols):
    """e4m3 codes as kjit-cli bench gemm_fp8 draws them: sign and 3 mantissa bits random, the
    exponent field uniform in 4 .. 10 (never NaN's 15)."""
    r = torch.randint(0, 256, (rows, cols), device="cuda", dtype=torch.int32)
    e = torch.randint(4, 11, (rows, cols), device="cuda", dtype=torch.int32)
    codes = (r & 0x80) | (e << 3) | (r & 7)
    return codes.to(torch.uint8).view(torch.float8_e4m3fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x28672x4096,4096x28672x4096",
                    help="comma-separated MxNxK")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--scales", default="none", choices=["none", "tensor", "row"],
                    help="tensor / row: fp8 operands through torch._scaled_mm (bf16 out)")
    ap.add_argument("--codes", default="kjit", choices=["kjit", "uniform"],
                    help="fp8 operands: kjit-cli bench's codes (default) or uniform [-1, 1)")
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    out = open(args.json, "a") if args.json else None
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        a = (torch.rand(m, k, device="cuda") * 2 - 1).to(dt)
        b = (torch.rand(n, k, device="cuda") * 2 - 1).to(dt)
        fn = lambda: torch.nn.functional.linear(a, b)
        nbytes = a.nbytes + b.nbytes + m * n * a.element_size()
        op, dtype, shape = "gemm", args.dtype, {"m": m, "n": n, "k": k}
        if args.scales != "none":
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            if args.codes == "kjit":
                a8, b8 = bench_codes(m, k), bench_codes(n, k)
            rows = args.scales == "row"
            sa = torch.rand(m if rows else 1, 1, device="cuda") + 0.5
            sb = torch.rand(1, n if rows else 1, device="cuda") + 0.5
            if not rows:
                sa, sb = sa.reshape(()), sb.reshape(())
            fn = lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb,
                                          out_dtype=torch.bfloat16)
            nbytes = a8.nbytes + b8.nbytes + m * n * 2 + sa.nbytes + sb.nbytes
            op, dtype = "gemm_fp8", "e4m3"
            shape = {"m": m, "n": n, "k": k, "scales": args.scales, "out_dtype": "bf16"}
        for timer, flush in args.runs:
            row = {"op": op, "backend": "torch-cublas", "shape": shape,
                   "inputs": args.codes if args.scales != "none" else "uniform",
                   "dtype": dtype, "gpu": torch.cuda.get_device_name(),
                   "torch": torch.__version__}
            row = timed_row(row, fn, timer, flush, nbytes,
                            f"{op} {'torch-cublas':14s} m={m:5d} n={n:6d} k={k:6d}", out, warm=True)
            if "median_us" in row:
                tflops = 2.0 * m * n * k / (row["median_us"] * 1e6)
                row["tflops"] = tflops
                print(f"  {tflops:8.1f} TFLOP/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
