#!/usr/bin/env python3
"""kjit-engine against Hugging Face transformers, on tiny random-weight models.

Builds a LlamaForCausalLM (llama3 rope scaling, untied embeddings) and a Qwen3ForCausalLM (q/k
norm, tied embeddings) with transformers, saves them (safetensors, bf16), and for each:
  - teacher forcing: fixed token ids (batch 1 and a ragged batch of 8); transformers' logits of
    every position against the engine's --dump-logits (prefill rows, then --decode-steps decode
    steps replayed from a CUDA graph): max abs / relative error and top-1 agreement. The same
    comparison of transformers in fp32 against transformers in bf16 is the noise floor;
  - the engine's eager decode (--no-graph) against its graph replay: bitwise equal;
  - the same with --fp8 (batch 8): its errors beside the bf16 floor, rows with a clear top-2
    margin agreeing, graph replay bitwise equal to eager;
  - greedy continuation: the engine's tokens against transformers' generate(), token for token;
    a first divergence is excused only where transformers' top-2 margin there is within the
    tolerance;
  - continuous batching: requests with their own token budgets through fewer slots than
    requests (they join as others leave), each against generate() as above; then with an
    end-of-sequence id, each output ends at its first one or at its budget;
  - sampling: top-k / top-p with one seed twice (the same tokens) and with another seed.
Prints a report and exits 1 when a check fails.

  python3 check_transformers.py --engine PATH/kjit-engine --work DIR
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

DECODE_STEPS = 64
GREEDY_TOKENS = 32
FAILED = []


def log(msg):
    print(msg, flush=True)


def check(ok, what):
    log(("PASS " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def build(kind, folder, vocab):
    common = dict(vocab_size=vocab, hidden_size=1024, intermediate_size=2816,
                  num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
                  head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5)
    torch.manual_seed(29 if kind == "llama" else 30)
    if kind == "llama":
        cfg = LlamaConfig(rope_theta=500000.0, tie_word_embeddings=False,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8192},
                          **common)
        model = LlamaForCausalLM(cfg)
    else:
        from transformers import Qwen3Config, Qwen3ForCausalLM
        cfg = Qwen3Config(rope_theta=1000000.0, tie_word_embeddings=True, **common)
        model = Qwen3ForCausalLM(cfg)
    # Norm weights away from 1 so that a norm applied with the wrong weight shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model = model.to(torch.bfloat16).cuda().eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model


def run_engine(engine, args, what):
    t0 = time.time()
    r = subprocess.run([engine] + args, capture_output=True, text=True)
    log(f"  engine ({what}, {time.time() - t0:.1f} s): " + " ".join(args[1:]))
    for line in (r.stdout + r.stderr).splitlines():
        log("    | " + line)
    if r.returncode != 0:
        raise RuntimeError(f"kjit-engine failed ({r.returncode}) on {what}")
    return r.stdout


def write_prompts(path, seqs, budgets=None):
    with open(path, "w") as f:
        for i, s in enumerate(seqs):
            head = f"{budgets[i]}: " if budgets else ""
            f.write(head + " ".join(str(t) for t in s) + "\n")


@torch.no_grad()
def hf_logits(model, seq):
    ids = torch.tensor([seq], device="cuda")
    return model(input_ids=ids).logits[0].float().cpu().numpy()


def compare(name, want, got, ref_fp32):
    """Errors and top-1 agreement of rows `got` against `want` (transformers bf16)."""
    err = np.abs(got - want)
    scale = np.abs(want).max()
    top_w, top_g = want.argmax(-1), got.argmax(-1)
    agree = float((top_w == top_g).mean())
    srt = np.sort(want, -1)
    margin = srt[:, -1] - srt[:, -2]
    tol = 4 * float(err.max()) if err.size else 0.0
    clear = margin > tol
    agree_clear = float((top_w == top_g)[clear].mean()) if clear.any() else 1.0
    floor = float((ref_fp32.argmax(-1) == top_w).mean())
    floor_err = float(np.abs(ref_fp32 - want).max())
    log(f"  {name}: {len(want)} rows, max abs err {err.max():.4g} (logits up to {scale:.3g}, "
        f"max rel {err.max() / scale:.3g}), mean abs {err.mean():.3g}; top-1 agreement "
        f"{agree * 100:.2f}% ({agree_clear * 100:.2f}% of the {int(clear.sum())} rows with a "
        f"top-2 margin above {tol:.3g}); transformers fp32 vs bf16: max abs {floor_err:.4g}, "
        f"top-1 {floor * 100:.2f}%")
    return agree, agree_clear, floor, float(err.max()), floor_err


def teacher_forcing(kind, model, model32, folder, engine, work, batch, vocab, rng, fp8=False):
    lens = [rng.integers(17, 140) for _ in range(batch)] if batch > 1 else [100]
    seqs = [list(map(int, rng.integers(0, vocab, size=int(n) + DECODE_STEPS))) for n in lens]
    name = f"{kind} batch {batch}" + (" fp8" if fp8 else "")
    prompts = os.path.join(work, f"{kind}_b{batch}.txt")
    write_prompts(prompts, seqs)
    outs = {}
    for graph in (True, False):
        dump = os.path.join(work, f"{kind}_b{batch}{'_fp8' if fp8 else ''}_"
                                  f"{'graph' if graph else 'eager'}.f32")
        args = [folder, "--prompts", prompts, "--decode-steps", str(DECODE_STEPS),
                "--dump-logits", dump] + (["--stats"] if graph else ["--no-graph"])
        run_engine(engine, args + (["--fp8"] if fp8 else []),
                   f"{name} teacher forcing" + ("" if graph else ", eager"))
        outs[graph] = np.fromfile(dump, dtype=np.float32).reshape(-1, vocab)
    check(np.array_equal(outs[True], outs[False]),
          f"{name}: graph replay logits equal the eager decode's bit for bit")
    got = outs[True]
    prompt_lens = [len(s) - DECODE_STEPS for s in seqs]
    total = sum(prompt_lens)
    assert got.shape[0] == total + DECODE_STEPS * batch, got.shape
    want = [hf_logits(model, s) for s in seqs]
    want32 = [hf_logits(model32, s) for s in seqs]
    pre_w = np.concatenate([w[:p] for w, p in zip(want, prompt_lens)])
    pre_f = np.concatenate([w[:p] for w, p in zip(want32, prompt_lens)])
    dec_w = np.stack([w[p + s] for s in range(DECODE_STEPS) for w, p in zip(want, prompt_lens)])
    dec_f = np.stack([w[p + s] for s in range(DECODE_STEPS) for w, p in zip(want32, prompt_lens)])
    results = {}
    for phase, w, g, f in (("prefill", pre_w, got[:total], pre_f),
                           ("decode", dec_w, got[total:], dec_f)):
        agree, clear, floor, err, floor_err = compare(f"{name} {phase}", w, g, f)
        results[phase] = {"top1": agree, "top1_clear_margin": clear, "top1_fp32_vs_bf16": floor,
                          "max_abs_err": err, "max_abs_err_fp32_vs_bf16": floor_err}
        check(clear >= 0.995, f"{name} {phase}: top-1 agreement >= 99.5% where the margin "
              "exceeds the tolerance")
        if fp8:
            # fp8 weights and activations are not transformers' bf16 model: their error is
            # reported beside the bf16 noise floor, and only the clear-margin rows must agree.
            continue
        # The engine's logits must be as close to transformers bf16 as transformers fp32 is.
        check(err <= 2 * floor_err, f"{name} {phase}: max abs error <= 2x transformers' "
              "fp32-vs-bf16 error")
        # Random weights give near-ties that bf16 rounding flips either way: overall, the engine
        # must disagree with transformers bf16 about as often as transformers fp32 does. The
        # counts are small (64-600 rows), so the bound is the floor's count plus twice its Poisson
        # spread: one or two near-tied rows more are noise, a real defect is far more.
        rows = len(w)
        dis, floor_dis = round((1 - agree) * rows), round((1 - floor) * rows)
        allowed = floor_dis + math.ceil(2 * math.sqrt(max(floor_dis, 1)))
        check(dis <= allowed, f"{name} {phase}: top-1 disagreements {dis} <= "
              f"{allowed} (fp32-vs-bf16 has {floor_dis} of {rows}, + 2 sqrt of it)")
    return results


@torch.no_grad()
def generate(model, seq, n):
    """transformers' greedy continuation of `seq` (n tokens) and its scores per step."""
    ids = torch.tensor([seq], device="cuda")
    gen = model.generate(ids, max_new_tokens=n, do_sample=False, top_k=None, top_p=None,
                         temperature=None, output_scores=True, return_dict_in_generate=True)
    return gen.sequences[0, len(seq):].tolist(), gen.scores


def agrees(what, want, scores, got):
    """`got` equals `want` (as long as `got` is), or first differs where transformers' top-2
    margin is within the tolerance."""
    same = 0
    while same < len(want) and same < len(got) and want[same] == got[same]:
        same += 1
    if same == len(got):
        log(f"  {what}: {same}/{len(want)} tokens agree")
        return True
    if same == len(want):
        log(f"  {what}: {len(got)} tokens where transformers made {len(want)}")
        return False
    top2 = torch.topk(scores[same][0].float(), 2).values
    margin = float(top2[0] - top2[1])
    log(f"  {what}: first {same}/{len(want)} tokens agree; at token {same} transformers' "
        f"top-2 margin is {margin:.4g}")
    return margin <= 0.05


def no_eos(model):
    # No end-of-sequence token: both sides generate their whole budget whatever they draw.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0


def greedy(kind, model, folder, engine, work, vocab, rng):
    seqs = [list(map(int, rng.integers(0, vocab, size=int(n)))) for n in (9, 33, 70, 5)]
    prompts = os.path.join(work, f"{kind}_greedy.txt")
    out = os.path.join(work, f"{kind}_greedy_out.txt")
    write_prompts(prompts, seqs)
    no_eos(model)
    run_engine(engine, [folder, "--prompts", prompts, "--max-new-tokens", str(GREEDY_TOKENS),
                        "--ignore-eos", "--out-tokens", out, "--stats"], f"{kind} greedy")
    got = [list(map(int, l.split())) for l in open(out)]
    ok = len(got) == len(seqs)
    for r, (s, g) in enumerate(zip(seqs, got)):
        want, scores = generate(model, s, GREEDY_TOKENS)
        ok = agrees(f"{kind} greedy request {r}", want, scores, g) and len(g) == len(want) and ok
    check(ok, f"{kind} greedy continuations agree wherever transformers' top-2 margin > 0.05")


def continuous(kind, model, folder, engine, work, vocab, rng):
    lens, budgets = (21, 5, 64, 9, 33, 2, 47), (24, 3, 17, 24, 1, 12, 20)
    seqs = [list(map(int, rng.integers(0, vocab, size=n))) for n in lens]
    prompts = os.path.join(work, f"{kind}_continuous.txt")
    write_prompts(prompts, seqs, budgets)
    no_eos(model)
    refs = [generate(model, s, n) for s, n in zip(seqs, budgets)]
    runs = {}
    for name, extra in (("no eos", ["--ignore-eos"]), ("eos", None)):
        if extra is None:
            # An id the first run produced mid-way through request 3: some requests end early.
            eos = runs["no eos"][3][3]
            extra = ["--eos", str(eos)]
        out = os.path.join(work, f"{kind}_continuous_{len(runs)}.txt")
        run_engine(engine, [folder, "--prompts", prompts, "--max-batch", "3",
                            "--max-new-tokens", "99", "--out-tokens", out] + extra,
                   f"{kind} continuous, {name}")
        got = [list(map(int, l.split())) for l in open(out)]
        runs[name] = got
        ok = len(got) == len(seqs)
        for r, g in enumerate(got):
            want, scores = refs[r]
            ok = agrees(f"{kind} continuous ({name}) request {r}", want, scores, g) and ok
            if name == "no eos":
                ok = ok and len(g) == budgets[r]
            else:
                ends = len(g) == budgets[r] or (len(g) > 0 and g[-1] == eos)
                ok = ok and ends and eos not in g[:-1]
        check(ok, f"{kind} continuous batching ({name}): 7 requests with their own budgets "
              "through 3 slots, each as generate() wherever transformers' top-2 margin > 0.05"
              + ("" if name == "no eos" else ", each ending at its first eos or its budget"))


def sampling(kind, folder, engine, work, vocab, rng):
    seqs = [list(map(int, rng.integers(0, vocab, size=int(n)))) for n in (12, 40)]
    prompts = os.path.join(work, f"{kind}_sample.txt")
    write_prompts(prompts, seqs)
    runs = []
    for seed in (1, 1, 2):
        out = os.path.join(work, f"{kind}_sample_{len(runs)}.txt")
        run_engine(engine, [folder, "--prompts", prompts, "--max-new-tokens", "16",
                            "--ignore-eos", "--top-k", "50", "--top-p", "0.9", "--temperature", "1.5",
                            "--seed", str(seed), "--out-tokens", out], f"{kind} sampling")
        runs.append(open(out).read())
    check(runs[0] == runs[1] and runs[0] != runs[2],
          f"{kind} sampling: one seed gives the same tokens, another seed others")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.cuda.get_device_name()}")
    summary = {}
    for kind in ("llama", "qwen3"):
        folder = os.path.join(a.work, kind)
        model = build(kind, folder, a.vocab)
        model32 = type(model).from_pretrained(folder).float().cuda().eval()
        rng = np.random.default_rng(2912 if kind == "llama" else 2913)
        log(f"{kind}: {model.config.architectures}, {model.config.num_hidden_layers} layers, "
            f"hidden {model.config.hidden_size}, vocab {a.vocab}")
        for batch in (1, 8):
            summary[f"{kind}_b{batch}"] = teacher_forcing(kind, model, model32, folder, a.engine,
                                                          a.work, batch, a.vocab, rng)
        summary[f"{kind}_b8_fp8"] = teacher_forcing(kind, model, model32, folder, a.engine, a.work,
                                                    8, a.vocab, rng, fp8=True)
        greedy(kind, model, folder, a.engine, a.work, a.vocab, rng)
        continuous(kind, model, folder, a.engine, a.work, a.vocab, rng)
        sampling(kind, folder, a.engine, a.work, a.vocab, rng)
        del model, model32
        torch.cuda.empty_cache()
    log("summary: " + json.dumps(summary))
    log("FAILED: " + "; ".join(FAILED) if FAILED else "all checks passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
