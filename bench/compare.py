#!/usr/bin/env python3
"""Side by side medians of bench JSON lines: kjit-cli's rows (`--json`, a results folder's
bench.jsonl) and the peers' (peers.jsonl), one table row per measured thing and timer / flush, a
column per file, for an A/B of two builds or kernel trees run in one device call.

  python3 bench/compare.py [--flush read] [--timer cupti] [--match REGEX] FILE...

A row is keyed by the suite row's name (`workload`) or, for rows without one (the peers'), by
op, backend and shape. Each cell lists that file's medians in the order they were written (a file
a variant appended to in two rounds shows both), `!` after a median whose reference check
failed; the last column is the first file's best median over each other file's best (> 1: the
other file is faster). Exit 1 when a check failed, 2 on a usage error."""
import argparse
import json
import re
import sys


def row_key(r):
    if r.get("workload"):
        return r["workload"]
    shape = ",".join(f"{k}={v}" for k, v in sorted((r.get("shape") or {}).items()))
    return f"{r.get('op', '?')}[{r.get('backend', '?')}] {shape}"


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut short by a time-out
            if isinstance(r, dict) and "median_us" in r:
                rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--flush", default="", help="only rows of this flush (read, dirty, none)")
    ap.add_argument("--timer", default="", help="only rows of this timer (cupti, events, ...)")
    ap.add_argument("--match", default="", help="only rows whose key this regex finds")
    args = ap.parse_args()
    pattern = re.compile(args.match) if args.match else None
    table = {}  # (key, timer, flush) -> one list of (median, ok) per file
    failed = False
    for i, path in enumerate(args.files):
        try:
            rows = read(path)
        except OSError as e:
            print(f"compare: {e}", file=sys.stderr)
            return 2
        for r in rows:
            timer, flush = r.get("timer", "?"), r.get("flush", "?")
            if args.flush and flush != args.flush or args.timer and timer != args.timer:
                continue
            key = row_key(r)
            if pattern and not pattern.search(key):
                continue
            ok = (r.get("check") or {}).get("pass", True) is not False
            failed |= not ok
            cells = table.setdefault((key, timer, flush), [[] for _ in args.files])
            cells[i].append((float(r["median_us"]), ok))
    names = [p.rsplit("/", 1)[-1] for p in args.files]
    ratio = ["first / " + n for n in names[1:]]
    print("| row | timer / flush | " + " | ".join(names + ratio) + " |")
    print("|" + " --- |" * (2 + len(names) + len(ratio)))
    for (key, timer, flush), cells in table.items():
        text = [", ".join(f"{m:.1f}{'' if ok else '!'}" for m, ok in c) or "-" for c in cells]
        best = [min(m for m, _ in c) if c else None for c in cells]
        ratios = [f"{best[0] / b:.3f}" if best[0] and b else "-" for b in best[1:]]
        print(f"| {key} | {timer} / {flush} | " + " | ".join(text + ratios) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
