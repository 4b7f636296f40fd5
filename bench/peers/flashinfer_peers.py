#!/usr/bin/env python3
"""FlashInfer peers of the kjit ops that have no PyTorch peer script of the same layout (the norms,
activations, RoPE and samplers are in torch_peers.py and torch_sampling.py), timed under the same
TIMER/FLUSH runs as `kjit-cli bench` times kjit (peer_timing.py; --runs). One JSON line per
result, backend "flashinfer", naming its timer and flush. FlashInfer is not checked here; kjit's
results are (kjit-cli bench). FlashInfer comes from flashinfer_env.load() (the packed .whl/ copy
first); one that does not load prints one line and the script writes no row and exits 0.

  --op decode_attention  BatchDecodeWithPagedKVCacheWrapper (backend fa2: the CUDA-core decode
                         kernel; --tensor-cores: its tensor-core path) on kjit-cli's shapes:
                         --shapes BATCHxKV_LEN, GQA 32 / 8, head_dim 128, NHD pages of 16 drawn
                         from a shuffled pool; planned once, run() timed (under the graph timer
                         the wrapper built with use_cuda_graph=True, as FlashInfer captures it).
                         bytes as kjit counts them: K and V once, q read and out written, the
                         page table.
  --op batch_prefill     BatchPrefillWithRaggedKVCacheWrapper (--page-size 0) or
                         BatchPrefillWithPagedKVCacheWrapper (--page-size N, NHD, shuffled pages),
                         backend fa3 (what "auto" picks on sm_90a) unless --backend says: --cases
                         CASE,... each one batch of requests joined by "+", each request Q (q = kv)
                         or Q/KV (Q new tokens at the end of KV keys); --causal 1,0. The causal
                         mask is aligned to the end of the keys, as kjit's. FLOPs as kjit counts
                         them (4 x attended pairs x heads x head_dim), printed as TFLOP/s.
  --op append_paged_kv   append_paged_kv_cache: --shapes TOKENSxBATCH, 8 kv heads of 128, NHD
                         pages of 16; each request appends its share after a prefix of up to
                         1023 tokens on distinct shuffled pages (kjit-cli's draw); bytes as kjit's.
  --op merge_state       merge_state(v_a, s_a, v_b, s_b): --shapes SEQ_LENxHEADS, head_dim 128,
                         bf16 v, fp32 s (kjit_merge_states' definition merge_states_h32_d128).
  --op llama31_rope      apply_llama31_rope_pos_ids: --shapes TOKENSxHEAD_DIM, q 32 / k 8 heads,
                         positions 0..tokens-1 (FlashInfer's defaults: scale 8, theta 5e5).

--check prints where flashinfer comes from and which of its modules are prebuilt (no GPU needed;
flashinfer_env.py)."""
import argparse
import json
import math
import sys

import torch

import flashinfer_env
from peer_timing import add_runs_argument, timed_row

WORKSPACE_BYTES = 256 << 20


def page_table(lens, page_size, gen):
    """indptr, shuffled page indices, last_page_len (int32 on the GPU) and the page count for
    requests of `lens` tokens."""
    pages = [max(1, math.ceil(n / page_size)) for n in lens]
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32)
    total = int(indptr[-1])
    indices = torch.randperm(total, generator=gen).to(torch.int32)
    last = torch.tensor([n - (p - 1) * page_size for n, p in zip(lens, pages)], dtype=torch.int32)
    return indptr.cuda(), indices.cuda(), last.cuda(), total


def base_row(op, shape, dtype, fi):
    return {"op": op, "backend": "flashinfer", "shape": shape, "dtype": dtype,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "flashinfer": fi.__version__}


def plan_refused(label, row, e, args, out):
    """A wrapper's plan (or its module load) refused the case: one line, and the row with its
    error under every run, so the case is not silently missing from peers.jsonl."""
    why = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
    row["error"] = f"plan: {why}"
    print(f"{label}: {row['error']}", flush=True)
    if out:
        for timer, flush in args.runs:
            out.write(json.dumps(dict(row, timer=timer, flush=flush)) + "\n")


def run_cases(cases, args, out):
    """cases: [(label, row, fn, nbytes, flops or None)] timed under every run."""
    for label, row, fn, nbytes, flops in cases:
        for timer, flush in args.runs:
            r = timed_row(dict(row), fn, timer, flush, nbytes, label, None, warm=True)
            if flops and "median_us" in r:
                r["tflops"] = flops / (r["median_us"] * 1e6)
                print(f"  {r['tflops']:8.1f} TFLOP/s", flush=True)
            if out:
                out.write(json.dumps(r) + "\n")


def decode_attention(fi, args, out, dt, gen):
    hq, hk, d, ps = args.qo_heads, args.kv_heads, args.head_dim, 16
    ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for shape in args.shapes.split(","):
        b, l = map(int, shape.split("x"))
        indptr, indices, last, pages = page_table([l] * b, ps, gen)
        k = torch.randn(pages, ps, hk, d, device="cuda", dtype=dt)
        v = torch.randn(pages, ps, hk, d, device="cuda", dtype=dt)
        q = torch.randn(b, hq, d, device="cuda", dtype=dt)
        o = torch.empty_like(q)
        name = "fa2-tc" if args.tensor_cores else "fa2"
        row = base_row("decode_attention", {"batch": b, "kv_len": l, "qo_heads": hq,
                                            "kv_heads": hk, "head_dim": d, "page_size": ps,
                                            "layout": "NHD", "kernel": name}, args.dtype, fi)
        label = f"decode_attention flashinfer-{name:7s} {shape:>10s}"
        # Under the graph timer, the wrapper FlashInfer offers for capture (fixed buffers).
        graph = any(t == "graph" for t, _ in args.runs)
        bufs = {}
        if graph:
            row["shape"]["cuda_graph"] = True
            bufs = dict(use_cuda_graph=True, paged_kv_indptr_buffer=indptr.clone(),
                        paged_kv_indices_buffer=indices.clone(),
                        paged_kv_last_page_len_buffer=last.clone())
        try:
            w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=args.tensor_cores,
                                                      backend="fa2", **bufs)
            w.plan(indptr, indices, last, hq, hk, d, ps, q_data_type=dt, kv_data_type=dt)
        except Exception as e:  # the plan (or the module load) refused: one row says so
            plan_refused(label, row, e, args, out)
            continue
        nbytes = k.nbytes + v.nbytes + 2 * q.nbytes + 4 * (indices.numel() + indptr.numel() +
                                                           last.numel())
        run_cases([(label, row, lambda: w.run(q, (k, v), out=o), nbytes, None)], args, out)
        del k, v, w
        torch.cuda.empty_cache()


def parse_case(text):
    """'512+4096/8192' -> [(512, 512), (4096, 8192)]."""
    reqs = []
    for r in text.split("+"):
        q, _, kv = r.partition("/")
        reqs.append((int(q), int(kv or q)))
        if reqs[-1][1] < reqs[-1][0]:
            raise ValueError(f"case {text!r}: kv_len must be >= q_len")
    return reqs


def batch_prefill(fi, args, out, dt, gen):
    hq, hk, d, ps = args.qo_heads, args.kv_heads, args.head_dim, args.page_size
    ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    for case in args.cases.split(","):
        reqs = parse_case(case)
        q_lens, kv_lens = [r[0] for r in reqs], [r[1] for r in reqs]
        qo_indptr = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(),
                                 dtype=torch.int32, device="cuda")
        total_q, total_kv = sum(q_lens), sum(kv_lens)
        q = torch.randn(total_q, hq, d, device="cuda", dtype=dt)
        o = torch.empty_like(q)
        if ps > 0:
            kv_indptr, indices, last, pages = page_table(kv_lens, ps, gen)
            k = torch.randn(pages, ps, hk, d, device="cuda", dtype=dt)
            v = torch.randn(pages, ps, hk, d, device="cuda", dtype=dt)
            kv_elems = total_kv * hk * d  # the keys read, not the pool
        else:
            kv_indptr = torch.tensor([0] + torch.tensor(kv_lens).cumsum(0).tolist(),
                                     dtype=torch.int32, device="cuda")
            k = torch.randn(total_kv, hk, d, device="cuda", dtype=dt)
            v = torch.randn(total_kv, hk, d, device="cuda", dtype=dt)
            kv_elems = k.numel()
        nbytes = 2 * kv_elems * k.element_size() + 2 * q.nbytes
        lens_text = ",".join(f"{a}/{b}" for a, b in reqs[:4]) + (",..." if len(reqs) > 4 else "")
        for causal in (c == "1" for c in args.causal.split(",")):
            pairs = sum(ql * (kl - ql) + ql * (ql + 1) / 2 if causal else ql * kl
                        for ql, kl in reqs)
            flops = 4.0 * pairs * hq * d
            row = base_row("batch_prefill", {"batch": len(reqs), "total_q": total_q,
                                             "qo_heads": hq, "kv_heads": hk, "head_dim": d,
                                             "page_size": ps, "layout": "NHD" if ps else "ragged",
                                             "causal": causal, "lens": lens_text, "pairs": pairs,
                                             "kernel": args.backend}, args.dtype, fi)
            label = (f"batch_prefill flashinfer-{args.backend} page={ps:2d} batch={len(reqs):3d} "
                     f"q/kv={lens_text} {'causal' if causal else 'full  '}")
            try:
                if ps > 0:
                    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=args.backend)
                    w.plan(qo_indptr, kv_indptr, indices, last, hq, hk, d, ps, causal=causal,
                           q_data_type=dt, kv_data_type=dt)
                    fn = lambda w=w: w.run(q, (k, v), out=o)
                else:
                    w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=args.backend)
                    w.plan(qo_indptr, kv_indptr, hq, hk, d, causal=causal, q_data_type=dt,
                           kv_data_type=dt)
                    fn = lambda w=w: w.run(q, k, v, out=o)
            except Exception as e:
                plan_refused(label, row, e, args, out)
                continue
            run_cases([(label, row, fn, nbytes, flops)], args, out)
        del q, k, v, o
        torch.cuda.empty_cache()


def append_paged_kv(fi, args, out, dt, gen):
    hk, d, ps = args.kv_heads, args.head_dim, 16
    for shape in args.shapes.split(","):
        tokens, batch = map(int, shape.split("x"))
        prefix = torch.randint(0, 1024, (batch,), generator=gen)
        share = torch.full((batch,), tokens // batch, dtype=torch.int64)
        share[: tokens % batch] += 1
        kv_indptr, indices, last, pages = page_table((prefix + share).tolist(), ps, gen)
        batch_indices = torch.repeat_interleave(torch.arange(batch), share).to(torch.int32)
        starts = torch.cumsum(share, 0) - share
        positions = (torch.arange(tokens) - torch.repeat_interleave(starts, share) +
                     torch.repeat_interleave(prefix, share)).to(torch.int32)
        batch_indices, positions = batch_indices.cuda(), positions.cuda()
        k = (torch.rand(tokens, hk, d, device="cuda") * 8 - 4).to(dt)
        v = (torch.rand(tokens, hk, d, device="cuda") * 8 - 4).to(dt)
        k_cache = torch.empty(pages, ps, hk, d, device="cuda", dtype=dt)
        v_cache = torch.empty_like(k_cache)
        index_bytes = 4 * (2 * tokens + indices.numel() + kv_indptr.numel())
        nbytes = 2 * (k.nbytes + v.nbytes) + index_bytes
        row = base_row("append_paged_kv", {"tokens": tokens, "kv_heads": hk, "head_dim": d,
                                           "page_size": ps, "batch": batch, "layout": "NHD"},
                       args.dtype, fi)

        def fn():
            fi.append_paged_kv_cache(k, v, batch_indices, positions, (k_cache, v_cache), indices,
                                     kv_indptr, last, kv_layout="NHD")
        run_cases([(f"append_paged_kv flashinfer tokens={tokens:6d} batch={batch:4d}", row, fn,
                    nbytes, None)], args, out)


def merge_state(fi, args, out, dt, gen):
    d = args.head_dim
    for shape in args.shapes.split(","):
        n, h = map(int, shape.split("x"))
        va = torch.randn(n, h, d, device="cuda", dtype=dt)
        vb = torch.randn(n, h, d, device="cuda", dtype=dt)
        sa = torch.randn(n, h, device="cuda", dtype=torch.float32)
        sb = torch.randn(n, h, device="cuda", dtype=torch.float32)
        nbytes = 3 * va.nbytes + 3 * sa.nbytes  # two states read, one written
        row = base_row("merge_state", {"seq_len": n, "heads": h, "head_dim": d}, args.dtype, fi)
        run_cases([(f"merge_state flashinfer seq_len={n:6d} heads={h}", row,
                    lambda: fi.merge_state(va, sa, vb, sb), nbytes, None)], args, out)


def llama31_rope(fi, args, out, dt, gen):
    for shape in args.shapes.split(","):
        rows, hd = map(int, shape.split("x"))
        q = (torch.rand(rows, 32, hd, device="cuda") * 4 - 2).to(dt)
        k = (torch.rand(rows, 8, hd, device="cuda") * 4 - 2).to(dt)
        pos = torch.arange(rows, device="cuda", dtype=torch.int32)
        nbytes = 2 * (q.nbytes + k.nbytes) + pos.nbytes
        row = base_row("llama31_rope", {"rows": rows, "hidden": hd}, args.dtype, fi)
        run_cases([(f"llama31_rope flashinfer rows={rows:6d} head_dim={hd}", row,
                    lambda: fi.apply_llama31_rope_pos_ids(q, k, pos), nbytes, None)], args, out)


OPS = {"decode_attention": decode_attention, "batch_prefill": batch_prefill,
       "append_paged_kv": append_paged_kv, "merge_state": merge_state,
       "llama31_rope": llama31_rope}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", choices=sorted(OPS), default="decode_attention")
    ap.add_argument("--shapes", default="", help="decode_attention BxL, append_paged_kv "
                    "TOKENSxBATCH, merge_state SEQ_LENxHEADS, llama31_rope TOKENSxHEAD_DIM")
    ap.add_argument("--cases", default="2048,8192",
                    help="batch_prefill: CASE,... with CASE = REQ+REQ..., REQ = Q or Q/KV")
    ap.add_argument("--causal", default="1,0", help="batch_prefill: which masks, 1, 0 or both")
    ap.add_argument("--page-size", type=int, default=0,
                    help="batch_prefill: 0 = ragged k / v, else a paged cache of these pages")
    ap.add_argument("--backend", default="fa3", help="batch_prefill: fa3 (what auto picks on "
                    "sm_90a) or fa2 (fa2 needs FI_PREBUILD_FA2=1 at pack time)")
    ap.add_argument("--tensor-cores", action="store_true",
                    help="decode_attention: the tensor-core decode (the fa2 prefill module)")
    ap.add_argument("--qo-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--json", default="")
    ap.add_argument("--check", action="store_true",
                    help="print where flashinfer comes from and which modules are prebuilt")
    add_runs_argument(ap)
    args = ap.parse_args()
    if args.check:
        return flashinfer_env.main([])
    defaults = {"decode_attention": "1x8192,64x4096", "append_paged_kv": "1x1,64x1,64x64",
                "merge_state": "1x32,64x32,4096x32", "llama31_rope": "1x128,64x128,65536x128"}
    if not args.shapes:
        args.shapes = defaults.get(args.op, "")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    fi = flashinfer_env.load()
    if fi is None:
        return 0
    print(f"{flashinfer_env.describe()}", flush=True)
    out = open(args.json, "a") if args.json else None
    gen = torch.Generator()
    gen.manual_seed(1234)
    OPS[args.op](fi, args, out, dt, gen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
