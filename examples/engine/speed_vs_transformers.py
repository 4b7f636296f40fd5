#!/usr/bin/env python3
"""kjit-engine's speed against transformers on a Llama-3-8B-shaped model with random weights.

Builds a LlamaForCausalLM with Llama-3-8B's shapes (32 layers, hidden 4096, 32 query and 8 KV
heads of 128, intermediate 14336, vocab 128256, llama3 rope scaling, untied embeddings), random
bf16 weights (fixed seed), saved with safetensors; then, on the same GPU and the same weights:
  - the floor: the bytes a decode step must read (every weight but the embedding table, and the
    KV cache at the step's context) over the bandwidth of a 1 GiB device-to-device copy
    (read + write counted);
  - kjit-engine --speed B,L,N: warm prefill of B random prompts of L tokens, then the per-step
    time of N greedy decode steps replayed from its CUDA graph; also with --fp8 (the layers'
    weights quantized to e4m3 at load) at a few shapes;
  - transformers: generate() with a static cache, which compiles the decode step with
    torch.compile (mode reduce-overhead); the per-step time is the difference of two warm
    generate() calls of N and 2N new tokens over N; the prefill is one eager forward of the
    prompt (logits of its last token only), timed with CUDA events.
Prints a table; --json writes every row.

  python3 speed_vs_transformers.py --engine PATH/kjit-engine --work DIR [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 rope_theta=500000.0, tie_word_embeddings=False,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192})


def log(msg):
    print(msg, flush=True)


def shapes(text):
    """'1x1024,64x4096' -> [(1, 1024), (64, 4096)]"""
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]


def build(folder):
    cfg = LlamaConfig(**LLAMA3_8B)
    if not os.path.exists(os.path.join(folder, "config.json")):
        torch.manual_seed(8)
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg).to(torch.bfloat16)
        t0 = time.time()
        model.save_pretrained(folder, safe_serialization=True)
        log(f"saved the model to {folder} in {time.time() - t0:.0f} s")
        del model
        torch.cuda.empty_cache()
    return cfg


def step_bytes(cfg, fp8=False):
    """The bytes a decode step reads: every weight but the embedding table (one row a token);
    fp8: the layers' linear weights at one byte and a 4-byte scale per output channel."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    linear = h * (q + 2 * kv) + q * h + 3 * h * i
    channels = (q + 2 * kv) + h + 2 * i + h
    per_layer = (linear + 4 * channels if fp8 else 2 * linear) + 2 * 2 * h
    return cfg.num_hidden_layers * per_layer + 2 * (h + v * h)


def kv_bytes(cfg, batch, context):
    return 2 * 2 * batch * context * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim


def copy_bandwidth():
    """GB/s of a 1 GiB device-to-device copy, read and write counted; the median of 20."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    times = []
    for _ in range(25):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    ms = sorted(times[5:])[len(times[5:]) // 2]
    del x, y
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def kjit_run(engine, folder, batch, context, steps, fp8=False):
    args = [engine, folder, "--speed", f"{batch},{context},{steps}"] + (["--fp8"] if fp8 else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    line = next(l for l in r.stdout.splitlines() if l.startswith("{"))
    return json.loads(line)


@torch.no_grad()
def hf_decode_step_ms(model, batch, context, steps):
    ids = torch.randint(0, model.config.vocab_size, (batch, context), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(batch * 100003 + context))
    mask = torch.ones_like(ids)

    def run(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                       do_sample=False, cache_implementation="static",
                       max_cache_len=context + 2 * steps + 8, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    t0 = time.time()
    run(2 * steps)  # compiles the decode step and records its graphs
    warm = time.time() - t0
    short, long_ = min(run(steps) for _ in range(2)), min(run(2 * steps) for _ in range(2))
    return (long_ - short) / steps * 1e3, warm


@torch.no_grad()
def hf_prefill_ms(model, context):
    ids = torch.randint(0, model.config.vocab_size, (1, context), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(context))
    times = []
    for _ in range(4):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        model(input_ids=ids, logits_to_keep=1)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return min(times[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--decode", default="1x1024,8x1024,64x1024,1x4096,8x4096,64x4096",
                    help="kjit decode shapes, BATCHxCONTEXT")
    ap.add_argument("--hf-decode", default="1x1024,64x1024,1x4096,64x4096",
                    help="transformers decode shapes (each compiles its own step)")
    ap.add_argument("--fp8-decode", default="1x1024,64x1024",
                    help="kjit --fp8 decode shapes (weights quantized at load)")
    ap.add_argument("--prefill", type=int, default=8192, help="one prompt of this many tokens")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--only", choices=("kjit", "transformers", "both"), default="both")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.cuda.get_device_name()}")
    folder = os.path.join(a.work, "llama3-8b-random")
    cfg = build(folder)
    bw = copy_bandwidth()
    weights = step_bytes(cfg)
    log(f"copy bandwidth {bw:.0f} GB/s; a decode step reads {weights / 1e9:.2f} GB of weights")
    rows = []

    def add(row, batch, context):
        if row.get("step_ms"):
            w = step_bytes(cfg, fp8=row["who"] == "kjit-fp8")
            floor_w = w / (bw * 1e9) * 1e3
            floor_kv = (w + kv_bytes(cfg, batch, context)) / (bw * 1e9) * 1e3
            row.update(floor_weights_ms=floor_w, floor_weights_kv_ms=floor_kv,
                       x_floor_weights=row["step_ms"] / floor_w,
                       x_floor_weights_kv=row["step_ms"] / floor_kv,
                       tokens_per_s=batch / row["step_ms"] * 1e3)
        rows.append(row)
        log(json.dumps(row))

    if a.only in ("kjit", "both"):
        for batch, context in shapes(a.decode):
            r = kjit_run(a.engine, folder, batch, context, a.steps)
            add({"who": "kjit", "phase": "decode", "batch": batch, "context": context,
                 "step_ms": r["step_ms"], "engine": r}, batch, context)
        r = kjit_run(a.engine, folder, 1, a.prefill, 0)
        add({"who": "kjit", "phase": "prefill", "batch": 1, "context": a.prefill,
             "prefill_ms": r["prefill_ms"], "engine": r}, 1, a.prefill)
        for batch, context in shapes(a.fp8_decode):
            r = kjit_run(a.engine, folder, batch, context, a.steps, fp8=True)
            add({"who": "kjit-fp8", "phase": "decode", "batch": batch, "context": context,
                 "step_ms": r["step_ms"], "engine": r}, batch, context)
    if a.only in ("transformers", "both"):
        model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()
        for batch, context in shapes(a.hf_decode):
            ms, warm = hf_decode_step_ms(model, batch, context, a.steps)
            add({"who": "transformers", "phase": "decode", "batch": batch, "context": context,
                 "step_ms": ms, "warmup_s": warm}, batch, context)
        add({"who": "transformers", "phase": "prefill", "batch": 1, "context": a.prefill,
             "prefill_ms": hf_prefill_ms(model, a.prefill)}, 1, a.prefill)
        del model
        torch.cuda.empty_cache()

    log(f"\n{'who':<13}{'phase':<9}{'batch':>6}{'context':>9}{'ms':>10}{'tok/s':>10}"
        f"{'x floor (w)':>13}{'x floor (w+kv)':>16}")
    for r in rows:
        ms = r.get("step_ms") or r.get("prefill_ms")
        tps = r.get("tokens_per_s") or r["context"] / ms * 1e3
        log(f"{r['who']:<13}{r['phase']:<9}{r['batch']:>6}{r['context']:>9}{ms:>10.3f}{tps:>10.0f}"
            + (f"{r['x_floor_weights']:>13.3f}{r['x_floor_weights_kv']:>16.3f}"
               if "x_floor_weights" in r else ""))
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(dict(r, copy_gbps=bw, gpu=torch.cuda.get_device_name())) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
