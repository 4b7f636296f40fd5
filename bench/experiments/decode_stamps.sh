#!/usr/bin/env bash
# Phase timestamps of decode-attention launches (H200; see KJIT_DSTAMP in
# kernels/attention/decode.cuh). Copies kernels/ with KJIT_DECODE_STAMPS defined, points kjit-cli
# at the copy through KJIT_KERNEL_DIR (a fresh cache), runs one `kjit-cli bench decode_attention`
# with the given arguments, and prints, as medians over the launches (the first, cold, dropped),
# when each phase ended in ns from the earliest printed CTA's entry: the first and last split
# CTAs of every head set print (entry, page ids and q in, first stage in, last stage computed,
# the warps' states in shared memory, outputs computed, stored: the last three also as each CTA's
# step, median and the CTA whose loop ended last), and the merge kernel's block 0 (entry, after
# griddepcontrol.wait, stored). The printf at a CTA's end delays the merge's wait a little; the
# phases before it are as timed. MERGE_ONLY=1: only the merge block prints (its wait and its work).
# DEFINES="NAME[=VALUE] ...": experiment macros defined in the copy as well (value 1 by default).
#   bash bench/experiments/decode_stamps.sh --set dtype=bf16 --set batch=1 --set kv_len=8192 \
#     --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16
# Needs a GPU; CLI defaults to build-h200's kjit-cli.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLI=${CLI:-build-h200/tools/kjit-cli/kjit-cli}
dir=$(mktemp -d)
cp -r kernels "$dir/kernels"
mode=1
[ -n "${MERGE_ONLY:-}" ] && mode=2
sed -i "1i #define KJIT_DECODE_STAMPS $mode" "$dir/kernels/attention/decode.cuh"
for m in ${DEFINES:-}; do
  v=1
  [[ $m == *=* ]] && v=${m#*=}
  sed -i "1i #define ${m%%=*} $v" "$dir/kernels/attention/decode.cuh"
done
KJIT_KERNEL_DIR="$dir/kernels" KJIT_CACHE_DIR="$dir/cache" "$CLI" bench decode_attention "$@" \
  --no-check > "$dir/out.log" 2>&1 || { tail -5 "$dir/out.log"; exit 1; }
grep -E '^kjit-(d|m)stamps' "$dir/out.log" | python3 -c '
import sys, statistics as st
ev = []  # (entry, kind, stamps)
for l in sys.stdin:
    f = l.split()
    if f[0] == "kjit-dstamps":
        ev.append((int(f[6]), "cta", [int(f[i]) for i in (6, 8, 10, 12, 14, 16, 18)]))
    else:
        ev.append((int(f[2]), "merge", [int(f[i]) for i in (2, 4, 6, 8, 10)]))
if not ev:
    sys.exit("no stamp lines: did the launch take the decode kernel?")
ev.sort()
launches, cur = [], [ev[0]]
for e in ev[1:]:
    if e[0] - cur[-1][0] > 10000:  # launches are tens of us apart (an L2 flush between)
        launches.append(cur)
        cur = []
    cur.append(e)
launches.append(cur)
rows = {}
def add(k, v):
    rows.setdefault(k, []).append(v)
for L in launches[1:]:
    ctas = [s for _, k, s in L if k == "cta"]
    if not ctas:  # MERGE_ONLY: the merge block phases alone
        for _, k, s in L:
            add("merge waited (from its entry)", s[1] - s[0])
            add("merge warp 0 folded (from waited)", s[3] - s[1])
            add("merge states combined (from folded)", s[4] - s[3])
            add("merge stored (from combined)", s[2] - s[4])
        continue
    t0 = min(s[0] for s in ctas)
    add("last CTA entry", max(s[0] for s in ctas) - t0)
    add("ids+q in (median CTA, from its entry)", st.median(s[1] - s[0] for s in ctas))
    add("first stage in (median CTA, from ids)", st.median(s[2] - s[1] for s in ctas if s[2]))
    add("first stage in (latest CTA)", max(s[2] for s in ctas) - t0)
    add("loop done (median CTA)", st.median(s[3] for s in ctas) - t0)
    add("loop done (latest CTA)", max(s[3] for s in ctas) - t0)
    add("stored (latest CTA)", max(s[4] for s in ctas) - t0)
    # The epilogue steps, per CTA (median and the CTA whose loop ended last).
    late = max(ctas, key=lambda s: s[3])
    for name, i, j in (("loop -> states in smem", 3, 5), ("states -> computed", 5, 6),
                       ("computed -> stored", 6, 4)):
        add(f"{name} (median CTA)", st.median(s[j] - s[i] for s in ctas))
        add(f"{name} (latest loop CTA)", late[j] - late[i])
    for _, k, s in L:
        if k == "merge":
            add("merge entry", s[0] - t0)
            add("merge waited", s[1] - t0)
            add("merge stored", s[2] - t0)
for k, v in rows.items():
    print(f"{k:40s} {st.median(v):8.0f} ns (median of {len(v)} launches)")
'
grep -v -E '^kjit-(d|m)stamps' "$dir/out.log" | tail -2
rm -rf "$dir"
