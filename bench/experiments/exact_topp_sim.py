#!/usr/bin/env python3
# A host model of the exact-mass top-p search (kernels/sampling/sampling.cuh, EXACT = 1, a row of
# probabilities without top-k): pass 0's u64 significand sums per `key >> 20` bin, the exact-mass
# find, the window updates (fit_shift / bins_of) and the level passes, checked against the rule
# itself (the largest key K with mass(keys >= K) >= p * mass) on softmax, all-equal, subnormal,
# tied and exponential rows. Written before any H200 run of the kernel, to check the algorithm's
# arithmetic (binade units, windows) apart from the device code: `python3 bench/experiments/
# exact_topp_sim.py` printed "cases 1200 mismatches 0" and 2 level passes after pass 0 on 40 rows
# of V 128256, sigma 2, p 0.9; the cluster path's list mode (the later levels on a list of the
# first window's keys) printed "list mode: 600 cases, mismatches 0". The top-k list's rank finish
# (a top-k row's candidates ranked, the top-k set's weights prefix-summed in weight-key order,
# the list shuffled first; ties as bf16 logits have them) printed "rank finish: 1350 cases,
# mismatches 0". Not a test of the kernel: the GPU tests "the exact-mass top-p search draws the
# counting search's tokens" and "the cluster path draws the one-block path's tokens" are.
import math
from collections import Counter

import numpy as np

def keys_of(w):  # float32 array -> u32 keys (nonneg_key)
    return w.astype(np.float32).view(np.uint32) & np.uint32(0x7fffffff)

def significand(k):
    k = int(k)
    return (k & 0x7fffff) | (0x800000 if k >= 0x800000 else 0)

def binade_unit(k):
    e = int(k) >> 23
    e = e if e > 0 else 1
    return math.ldexp(1.0, e - 150)

def fit_shift(lo, hi):
    d = (hi - lo) & 0xffffffff
    b = (d.bit_length()) - 11
    return b if b > 0 else 0

def bins_of(lo, hi, s):
    return ((hi - lo) >> s) + 1

def find_exact(sig, lo, s, nb, above, target):
    # descending scan over bins; b0 = largest b whose cumulative (from top) reaches target
    run = above
    b0 = -1
    for b in range(nb - 1, -1, -1):
        m = sig[b]
        mass = 0.0 if m == 0 else float(m) * binade_unit(lo + (b << s))
        nxt = run + mass
        if run < target and nxt >= target:
            b0 = max(b0, b)
        run = nxt
    return b0

def first_level(w, p):
    """Pass 0: the row's keys, the target p * mass and the first level's significand sums."""
    keys = keys_of(w)
    target = p * float(np.sum(w.astype(np.float64)))
    sig = [0] * 2048
    for k in keys:
        sig[int(k) >> 20] += significand(k)
    return keys, target, sig

def search(sig, target, level_pass):
    """The kernel's top-p loop from the first level's sums: a find per level and the window step;
    level_pass(lo, hi, s, level) gives the next window's sums and the exact mass above it.
    Returns (threshold key, level passes run)."""
    lo, hi, s, above = 0, 0x7fffffff, 20, 0.0
    levels = 0
    for level in range(9):
        nb = bins_of(lo, hi, s)
        b0 = find_exact(sig, lo, s, nb, above, target)
        b1 = b0 if b0 >= 0 else nb - 1
        if s == 0:
            return (lo + b0 if b0 >= 0 else lo), levels
        nlo = lo + (b0 << s) if b0 >= 0 else lo
        b1_last = lo + (b1 << s) + ((1 << s) - 1)
        nhi = hi if (hi - (b1 << s) - lo) < (1 << s) else b1_last
        if nhi == nlo or (nlo == lo and nhi == hi):
            return nlo, levels
        lo, hi = nlo, nhi
        s = fit_shift(lo, hi)
        levels += 1
        sig, above = level_pass(lo, hi, s, level)
    return lo, levels

def exact_threshold(w, p):
    """The one-block path: every level walks the whole row."""
    keys, target, sig = first_level(w, p)

    def row_pass(lo, hi, s, level):
        sig = [0] * 2048
        a = 0.0
        for k, x in zip(keys, w):
            d = (int(k) - lo) & 0xffffffff
            if d > hi - lo:
                if int(k) > lo:
                    a += float(x)
            else:
                sig[d >> s] += significand(k)
        return sig, a

    return search(sig, target, row_pass)

def reference_threshold(w, p):
    keys = keys_of(w).astype(np.int64)
    w64 = w.astype(np.float32).astype(np.float64)
    uk = np.unique(keys)[::-1]
    total = w64.sum()
    target = p * total
    # mass(keys >= K) for each distinct K, descending
    cum = 0.0
    kw = {}
    for k, x in zip(keys, w64):
        kw[k] = kw.get(k, 0.0) + x
    for K in uk:
        cum += kw[K]
        if cum >= target:
            return int(K)
    return int(uk[-1])

rng = np.random.default_rng(1)
bad = 0
cases = 0
for trial in range(300):
    V = int(rng.choice([7, 100, 4097, 32000]))
    kind = trial % 5
    if kind == 0:
        x = rng.normal(0, rng.choice([0.5, 2, 4]), V); w = np.exp(x - x.max()); w /= w.sum()
    elif kind == 1:
        w = np.full(V, 1.0 / V)
    elif kind == 2:
        w = rng.uniform(1e-44, 1e-39, V)
    elif kind == 3:
        w = np.where(np.arange(V) % 3 == 0, 0.25, np.where(np.arange(V) % 3 == 1, 0.125, 0.0))
    else:
        w = np.exp(4 * rng.uniform(0, 1, V))
    w = w.astype(np.float32)
    if not (w.astype(np.float64).sum() > 0):
        continue
    for p in (0.3, 0.5, 0.9, 0.999):
        t_ex, lv = exact_threshold(w, p)
        t_ref = reference_threshold(w, p)
        cases += 1
        if t_ex != t_ref:
            bad += 1
            if bad < 10:
                print("MISMATCH V", V, "kind", kind, "p", p, hex(t_ex), hex(t_ref), "levels", lv)
print("cases", cases, "mismatches", bad)
c = Counter()
for t in range(40):
    x = rng.normal(0, 2, 128256); w = np.exp(x - x.max()); w = (w / w.sum()).astype(np.float32)
    c[exact_threshold(w, 0.9)[1]] += 1
print("level passes after pass 0 at V 128256, sigma 2, p 0.9:", dict(c))

def list_threshold(w, p):
    """The cluster path's list mode: after the first find, the window's keys as a list, and the
    mass above the window summed once; the later levels over the list alone, with the list's
    keys above each window summed as significands (one binade)."""
    keys, target, sig = first_level(w, p)
    first = {}

    def list_pass(lo, hi, s, level):
        if level == 0:
            first["above"] = float(sum(float(x) for k, x in zip(keys, w) if int(k) > hi))
            first["list"] = [int(k) for k in keys if lo <= int(k) <= hi]
        sig = [0] * 2048
        above_sig = 0
        for k in first["list"]:
            d = (k - lo) & 0xffffffff
            if d > hi - lo:
                if k > lo:
                    above_sig += significand(k)
            else:
                sig[d >> s] += significand(k)
        return sig, first["above"] + float(above_sig) * binade_unit(lo)

    return search(sig, target, list_pass)[0]

bad = 0
for trial in range(200):
    V = int(rng.choice([100, 4097, 32000]))
    x = rng.normal(0, rng.choice([0.5, 2, 4]), V)
    w = np.exp(x - x.max())
    w = (w / w.sum()).astype(np.float32)
    for p in (0.3, 0.9, 0.999):
        if list_threshold(w, p) != reference_threshold(w, p):
            bad += 1
print("list mode: 600 cases, mismatches", bad)


# ---- The top-k list's rank finish (rank_finish in filter_kernel, cluster path, a top-k row) ----

def signed_keys(x):  # float32 array -> u32 keys with the float order (signed_key)
    b = (x.astype(np.float32) + np.float32(0.0)).view(np.uint32).astype(np.int64)
    return np.where(b & 0x80000000, (~b) & 0xffffffff, b | 0x80000000)

def rank_finish(lst, k, p, weight_of_key):
    """lst: the leader's list (logit keys >= the first level's bin start, in any order)."""
    n = len(lst)
    kk = None
    for i, key in enumerate(lst):  # unique ranks: descending key, then list index
        r = sum(1 for j, o in enumerate(lst) if o > key or (o == key and j < i))
        if r == k - 1:
            kk = key
    wk = [weight_of_key(key) for key in lst if key >= kk]
    m = len(wk)
    srt = [None] * m
    for i, w in enumerate(wk):
        srt[sum(1 for j, o in enumerate(wk) if o > w or (o == w and j < i))] = w
    prefix, run = [], 0.0
    for w in srt:
        prefix.append(run)
        run += float(np.uint32(w).view(np.float32))
    target = p * run
    last = -1
    for r in range(m):
        first = r
        while first > 0 and srt[first - 1] == srt[r]:
            first -= 1
        if prefix[first] < target:
            last = max(last, r)
    return kk, (srt[last] if last >= 0 else 0)

def topk_topp_reference(x, k, p, weights):
    """The rule on the whole row: keep logit keys >= the k-th largest (counting repeats), then
    weight keys whose mass strictly above (within the top-k set) is < p * the set's mass."""
    lk = signed_keys(x)
    kx = int(np.sort(lk)[::-1][k - 1])
    wk = keys_of(weights)
    inset = lk >= kx
    ws = weights.astype(np.float64)[inset]
    wks = wk[inset].astype(np.int64)
    mass = math.fsum(ws)
    kept = [int(K) for K in np.unique(wks) if math.fsum(ws[wks > K]) < p * mass]
    return kx, min(kept)

bad = cases = 0
for trial in range(150):
    V = int(rng.choice([64, 1000, 32000]))
    sigma = float(rng.choice([0.5, 2.0, 4.0]))
    x = rng.normal(0, sigma, V).astype(np.float32)
    if trial % 3 == 1:
        x = np.round(x * 4) / 4  # heavy ties, as bf16 logits have
    x = x.astype(np.float32)
    weights = np.exp((x.astype(np.float64) - float(x.max()))).astype(np.float32)
    wmap = dict(zip(signed_keys(x).tolist(), keys_of(weights).tolist()))
    for k in (1, 5, 50):
        if k > V:
            continue
        lk = signed_keys(x)
        kth = int(np.sort(lk)[::-1][k - 1])
        binstart = (kth >> 21) << 21  # the first top-k level's bin (signed keys >> 21)
        lst = [int(v) for v in lk if v >= binstart]
        rng.shuffle(lst)  # the list arrives in any order
        if len(lst) > 512:
            continue
        for p in (0.3, 0.9, 0.999):
            cases += 1
            got = rank_finish(lst, k, p, lambda key: wmap[key])
            ref = topk_topp_reference(x, k, p, weights)
            if got != ref:
                bad += 1
                if bad < 10:
                    print("MISMATCH V", V, "k", k, "p", p, [hex(v) for v in got], [hex(v) for v in ref])
print(f"rank finish: {cases} cases, mismatches {bad}")
