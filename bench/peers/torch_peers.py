#!/usr/bin/env python3
"""PyTorch peers (rmsnorm, fused add + rmsnorm, layernorm, silu / gelu / gelu-tanh and mul, RoPE
written in torch ops, and those norms / silu-and-mul followed by an fp8 e4m3 quantization with
per-row / 1 x 128 group scales), timed under the same TIMER/FLUSH runs as `kjit-cli bench` times kjit
(peer_timing.py; --runs). PyTorch is the reference implementation here, so it is not checked;
kjit's results are (kjit-cli bench). One JSON line per result, naming its timer and flush."""
import argparse
import sys

import torch

from peer_timing import add_runs_argument, time_fn, timed_row


def make_case(op, rows, hidden, dt, eps):
    """Inputs, the peer's eager function, bytes moved, and the bytes a same-traffic copy reads."""
    f = torch.nn.functional
    rnd = lambda *shape: (torch.rand(*shape, device="cuda") * 4 - 2).to(dt)
    if op == "rmsnorm":
        x, w = rnd(rows, hidden), rnd(hidden)
        return (lambda: f.rms_norm(x, (hidden,), w, eps)), 2 * x.nbytes + w.nbytes, x
    if op == "fused_add_rmsnorm":
        x, r, w = rnd(rows, hidden), rnd(rows, hidden), rnd(hidden)

        def fused():  # what engines do without a fused kernel: add, store, normalize
            r.add_(x)
            x.copy_(f.rms_norm(r, (hidden,), w, eps))
        return fused, 4 * x.nbytes + w.nbytes, torch.cat([x, r])
    if op == "layernorm":
        x, g, b = rnd(rows, hidden), rnd(hidden), rnd(hidden)
        return (lambda: f.layer_norm(x, (hidden,), g, b, eps)), 2 * x.nbytes + 2 * g.nbytes, x
    if op == "silu_and_mul":
        x = rnd(rows, 2 * hidden)
        return (lambda: f.silu(x[:, :hidden]) * x[:, hidden:]), x.nbytes * 3 // 2, x
    if op in ("gelu_and_mul", "gelu_tanh_and_mul"):
        x = rnd(rows, 2 * hidden)
        approx = "tanh" if op == "gelu_tanh_and_mul" else "none"
        return ((lambda: f.gelu(x[:, :hidden], approximate=approx) * x[:, hidden:]),
                x.nbytes * 3 // 2, x)
    if op in ("rmsnorm_quant_fp8", "fused_add_rmsnorm_quant_fp8"):
        # What an engine writes without a fused kernel: the norm in the dtype, then the per-row
        # amax / 448 scale and the e4m3 cast (two more passes over the row).
        x, r, w = rnd(rows, hidden), rnd(rows, hidden), rnd(hidden)
        q = torch.empty(rows, hidden, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(rows, 1, device="cuda", dtype=torch.float32)
        residual = op.startswith("fused_add")

        def norm_quant():
            if residual:
                r.add_(x)
            y = f.rms_norm(r if residual else x, (hidden,), w, eps).float()
            s.copy_(y.abs().amax(dim=1, keepdim=True) / 448.0)
            q.copy_((y / s).to(torch.float8_e4m3fn))
        moved = x.nbytes * (3 if residual else 1) + w.nbytes + q.nbytes + s.nbytes
        return norm_quant, moved, torch.cat([x, r]) if residual else x
    if op == "silu_and_mul_quant_fp8":
        x = rnd(rows, 2 * hidden)
        groups = (hidden + 127) // 128
        q = torch.empty(rows, hidden, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(rows, groups, device="cuda", dtype=torch.float32)

        def silu_quant():
            y = (f.silu(x[:, :hidden]) * x[:, hidden:]).float()
            pad = f.pad(y, (0, groups * 128 - hidden)).view(rows, groups, 128)
            s.copy_(pad.abs().amax(dim=2) / 448.0)
            q.copy_((pad / s[:, :, None]).view(rows, -1)[:, :hidden].to(torch.float8_e4m3fn))
        return silu_quant, x.nbytes + q.nbytes + s.nbytes, x
    if op in ("rope", "rope_indptr"):
        # NeoX RoPE in place on q [rows, 32, hidden] and k [rows, 8, hidden] (GQA 32/8, the kjit
        # bench's shape) at positions 0..rows-1, theta 1e4, angles in fp32: PyTorch has no RoPE
        # op, so this is what an engine without a kernel writes. rope_indptr: FlashInfer's
        # apply_rope positions (offsets[b] + t - indptr[b]) formed in torch ops each call, for
        # one token a request up to 128 rows (decode) and requests of 4096 tokens beyond
        # (`kjit-cli bench rope --set batch=...` with the same split).
        half = hidden // 2
        q, k = rnd(rows, 32, hidden), rnd(rows, 8, hidden)
        pos = torch.arange(rows, device="cuda", dtype=torch.int32)
        inv = 1.0 / (1e4 ** (torch.arange(0, hidden, 2, device="cuda", dtype=torch.float32) / hidden))
        batch = rows if rows <= 128 else max(1, rows // 4096)
        lens = torch.full((batch,), rows // batch, device="cuda", dtype=torch.int32)
        lens[: rows % batch] += 1
        indptr = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int32), lens.cumsum(0)])
        offsets = torch.randint(0, 65536, (batch,), device="cuda", dtype=torch.int32)

        def positions():
            if op == "rope":
                return pos
            start = (offsets - indptr[:-1]).repeat_interleave(lens, output_size=rows)
            return start + pos

        def rope():
            ang = positions()[:, None].float() * inv[None, :]
            c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
            for t in (q, k):
                x1, x2 = t[..., :half].float(), t[..., half:].float()
                t.copy_(torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(dt))
        index_bytes = pos.nbytes if op == "rope" else indptr.nbytes + offsets.nbytes
        return rope, 2 * (q.nbytes + k.nbytes) + index_bytes, torch.cat([q.flatten(), k.flatten()])
    if op == "rope_append":
        # The fused RoPE + paged KV append in torch ops (what an engine without the kernel
        # writes): the RoPE above into q_out and a rotated k, then k and v scattered into NHD
        # caches of 16-slot pages, one request per 512 tokens after a prefix, pages shuffled.
        half, ps = hidden // 2, 16
        q, k, v = rnd(rows, 32, hidden), rnd(rows, 8, hidden), rnd(rows, 8, hidden)
        q_out = torch.empty_like(q)
        batch = max(1, rows // 512)
        req = torch.arange(rows, device="cuda") * batch // rows
        prefix = torch.randint(0, 1024, (batch,), device="cuda")
        start = torch.searchsorted(req, torch.arange(batch, device="cuda"))
        pos = (prefix[req] + torch.arange(rows, device="cuda") - start[req]).to(torch.int32)
        pages_per = (prefix + torch.bincount(req, minlength=batch) + ps - 1) // ps
        first_page = torch.cumsum(pages_per, 0) - pages_per
        num_pages = int(pages_per.sum())
        perm = torch.randperm(num_pages, device="cuda")
        slot = (perm[first_page[req] + pos.long() // ps] * ps + pos.long() % ps)
        k_cache = torch.empty(num_pages * ps, 8, hidden, device="cuda", dtype=dt)
        v_cache = torch.empty_like(k_cache)
        inv = 1.0 / (1e4 ** (torch.arange(0, hidden, 2, device="cuda", dtype=torch.float32) / hidden))

        def rope_append():
            ang = pos[:, None].float() * inv[None, :]
            c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
            rot = []
            for t in (q, k):
                x1, x2 = t[..., :half].float(), t[..., half:].float()
                rot.append(torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(dt))
            q_out.copy_(rot[0])
            k_cache[slot] = rot[1]
            v_cache[slot] = v
        nbytes = 2 * (q.nbytes + k.nbytes + v.nbytes) + 3 * pos.nbytes
        return rope_append, nbytes, torch.cat([q.flatten(), k.flatten(), v.flatten()])
    if op == "qk_norm_rope":
        # Qwen3's per-head q / k RMSNorm then NeoX RoPE, in place on the q and k views of a fused
        # qkv row (32 / 8 / 8 heads of `hidden`), positions 0..rows-1, theta 1e6: rms_norm over
        # the last dim, then the rotation above.
        half, nq, nkv = hidden // 2, 32, 8
        qkv = rnd(rows, (nq + 2 * nkv) * hidden)
        q = qkv[:, : nq * hidden].view(rows, nq, hidden)
        k = qkv[:, nq * hidden : (nq + nkv) * hidden].view(rows, nkv, hidden)
        qw, kw = rnd(hidden) + 1, rnd(hidden) + 1
        pos = torch.arange(rows, device="cuda", dtype=torch.int32)
        inv = 1.0 / (1e6 ** (torch.arange(0, hidden, 2, device="cuda", dtype=torch.float32) / hidden))

        def qk_norm_rope():
            ang = pos[:, None].float() * inv[None, :]
            c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
            for t, w in ((q, qw), (k, kw)):
                n = f.rms_norm(t.float(), (hidden,), w.float(), 1e-6)
                x1, x2 = n[..., :half], n[..., half:]
                t.copy_(torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(dt))
        nbytes = 2 * (q.numel() + k.numel()) * q.element_size() + pos.nbytes
        return qk_norm_rope, nbytes, torch.cat([q.flatten(), k.flatten()])
    raise ValueError(op)


# Ops FlashInfer has a kernel for; the others get no flashinfer row.
FLASHINFER_OPS = ("rmsnorm", "fused_add_rmsnorm", "layernorm", "silu_and_mul", "gelu_and_mul",
                  "gelu_tanh_and_mul", "rope", "rope_indptr")


def flashinfer_case(fi, op, rows, hidden, dt, eps):
    """FlashInfer's call of `op` on inputs of make_case's shapes (its own tensors), or None when
    FlashInfer has no such op. Outputs go to preallocated tensors where the API takes `out`
    (rmsnorm, the activations); fused_add_rmsnorm works in place; layernorm and RoPE return new
    tensors from torch's caching allocator."""
    rnd = lambda *shape: (torch.rand(*shape, device="cuda") * 4 - 2).to(dt)
    if op == "rmsnorm":
        x, w = rnd(rows, hidden), rnd(hidden)
        out = torch.empty_like(x)
        return lambda: fi.rmsnorm(x, w, eps, out=out)
    if op == "fused_add_rmsnorm":
        x, r, w = rnd(rows, hidden), rnd(rows, hidden), rnd(hidden)
        return lambda: fi.fused_add_rmsnorm(x, r, w, eps)
    if op == "layernorm":
        # FlashInfer's layernorm takes bf16 input and fp32 gamma / beta.
        x = rnd(rows, hidden)
        g, b = rnd(hidden).float(), rnd(hidden).float()
        return lambda: fi.layernorm(x, g, b, eps)
    if op in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        x = rnd(rows, 2 * hidden)
        out = torch.empty(rows, hidden, device="cuda", dtype=dt)
        f = getattr(fi, op)
        return lambda: f(x, out=out)
    if op in ("rope", "rope_indptr"):
        # make_case's RoPE: NeoX (interleave=False), theta 1e4, q [rows, 32, hidden] and
        # k [rows, 8, hidden]; q_rope / k_rope written to new tensors (kjit writes q_out / k_out).
        q, k = rnd(rows, 32, hidden), rnd(rows, 8, hidden)
        if op == "rope":
            pos = torch.arange(rows, device="cuda", dtype=torch.int32)
            return lambda: fi.apply_rope_pos_ids(q, k, pos, interleave=False, rope_theta=1e4)
        batch = rows if rows <= 128 else max(1, rows // 4096)
        lens = torch.full((batch,), rows // batch, device="cuda", dtype=torch.int32)
        lens[: rows % batch] += 1
        indptr = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int32),
                            lens.cumsum(0).to(torch.int32)])
        offsets = torch.randint(0, 65536, (batch,), device="cuda", dtype=torch.int32)
        return lambda: fi.apply_rope(q, k, indptr, offsets, interleave=False, rope_theta=1e4)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="rmsnorm",
                    help="rmsnorm, fused_add_rmsnorm, layernorm, silu_and_mul, gelu_and_mul, "
                         "gelu_tanh_and_mul, rope, rope_indptr, rope_append, qk_norm_rope (shapes: tokens x "
                         "head_dim), "
                         "rmsnorm_quant_fp8, fused_add_rmsnorm_quant_fp8, "
                         "silu_and_mul_quant_fp8 (shapes: rows x d)")
    ap.add_argument("--shapes", default="1x4096,64x4096,4096x4096,16384x4096,16384x8192")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--json", default="")
    add_runs_argument(ap)
    # Small shapes are launch-bound and torch.compile adds Python guard time per call there;
    # compile only where bandwidth is what is compared.
    ap.add_argument("--compile-min-bytes", type=int, default=16 << 20)
    ap.add_argument("--no-flashinfer", action="store_true", help="no flashinfer rows")
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    eps = 1e-6
    out = open(args.json, "a") if args.json else None
    fi = None
    if args.op in FLASHINFER_OPS and not args.no_flashinfer:
        fi = flashinfer_env.load()
    for shape in args.shapes.split(","):
        rows, hidden = map(int, shape.split("x"))
        eager, nbytes, copy_src = make_case(args.op, rows, hidden, dt, eps)
        half = copy_src.reshape(-1)[: nbytes // 2 // copy_src.element_size()]
        dst = torch.empty_like(half)
        peers = {"torch-eager": eager}
        if nbytes >= 2 * args.compile_min_bytes:
            # A fresh, static-shape compile per shape: one function reused across shapes turns
            # dynamic after the second shape and loses its specialized kernel.
            torch._dynamo.reset()
            peers["torch-compile"] = torch.compile(eager, dynamic=False)
        if fi is not None:
            try:
                fi_fn = flashinfer_case(fi, args.op, rows, hidden, dt, eps)
            except Exception as e:  # inputs FlashInfer refuses: its rows only are skipped
                print(f"{args.op} flashinfer rows={rows} hidden={hidden}: {e}", flush=True)
            else:
                if fi_fn is not None:
                    peers["flashinfer"] = fi_fn
        for timer, flush in args.runs:
            # The copy of the same bytes, timed the same way in the same process.
            copy = time_fn(lambda: dst.copy_(half), timer, flush)
            copy_gbps = 2 * half.nbytes / (copy["median_us"] * 1e3)
            for name, fn in peers.items():
                flashinfer = name == "flashinfer"
                if not flashinfer:
                    fn()
                row = {"op": args.op, "backend": name, "shape": {"rows": rows, "hidden": hidden},
                       "dtype": args.dtype, "gpu": torch.cuda.get_device_name(),
                       "torch": torch.__version__}
                if flashinfer:
                    row["flashinfer"] = fi.__version__
                # FlashInfer's first call (module load, a refused shape) inside the row's error
                # handling: a failure is its row's error, not the script's.
                timed_row(row, fn, timer, flush, nbytes,
                          f"{args.op:18s} {name:14s} rows={rows:6d} hidden={hidden:6d}", out,
                          copy_gbps, warm=flashinfer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
