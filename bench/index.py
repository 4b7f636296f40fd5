#!/usr/bin/env python3
"""Writes bench/results/INDEX.md from the result folders: one line per folder (date, suite, GPU,
driver, commit, rows) and, for folders bench/run.sh wrote, a table of their headline rows.

Folders bench/run.sh writes are <date>-<gpu>-<suite>/ with meta.json, bench.jsonl and
peers.jsonl; the older <date>-h200-roundN/ folders (one per hand-run round) have no meta.json:
they are indexed as suite "roundN" from what their README.md and JSON rows say.

  python3 bench/index.py [--results DIR] [--check]

--check exits 1 when INDEX.md differs from what it would write (nothing is written)."""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def read_rows(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut short by a time-out
    except OSError:
        pass
    return rows


def bench_rows(folder):
    """Every kjit-cli row under the folder (round folders keep some in subfolders)."""
    rows = []
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            if name.endswith(".jsonl") and not name.startswith("peers"):
                rows += [r for r in read_rows(os.path.join(root, name))
                         if "op" in r and ("median_us" in r or "check" in r)]
    return rows


def shape_text(row):
    shape = row.get("shape") or {}
    parts = [f"{k}={v}" for k, v in sorted(shape.items()) if k != "launch"]
    return " ".join(parts)


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def suite_entry(name, folder, meta):
    rows = bench_rows(folder)
    failed = sum(1 for r in rows if (r.get("check") or {}).get("pass") is False)
    return {
        "folder": name,
        "date": meta.get("date", name[:10])[:10],
        "suite": meta.get("suite", "?"),
        "gpu": meta.get("gpu", "?"),
        "driver": meta.get("driver", "?"),
        "commit": meta.get("commit", "unknown"),
        "rows": len(rows),
        "failed": failed,
        "what": meta.get("about", ""),
        "headline": [r for r in rows if r.get("headline")],
        "arch": ", ".join(sorted({r["arch"] for r in rows if isinstance(r.get("arch"), str)})),
        "peers": len(read_rows(os.path.join(folder, "peers.jsonl"))),
    }


COMMIT = re.compile(r"(?:[Bb]inaries|[Cc]ommit|built from)[:\s`(]+([0-9a-f]{7,40})\b")


def round_entry(name, folder):
    readme = ""
    try:
        with open(os.path.join(folder, "README.md")) as f:
            readme = f.read()
    except OSError:
        pass
    title = readme.splitlines()[0].lstrip("# ").strip() if readme else ""
    m = COMMIT.search(readme)
    rows = bench_rows(folder)
    gpus = sorted({r["gpu"] for r in rows if isinstance(r.get("gpu"), str)})
    drivers = sorted({str(r["driver"]) for r in rows if isinstance(r.get("driver"), str)})
    named = re.search(r"\*\*(NVIDIA [^*]+)\*\*", readme)
    if not gpus and named:
        gpus = [named.group(1)]
    if not gpus and "H200" in readme:
        gpus = ["NVIDIA H200"]
    if not drivers:
        d = re.search(r"driver (\d+\.\d+\.\d+)", readme)
        drivers = [d.group(1)] if d else ["?"]
    timers = sorted({f"{r.get('timer')}/{r.get('flush', r.get('l2', '?'))}" for r in rows
                     if isinstance(r.get("timer"), str) and len(r["timer"]) < 20})
    failed = sum(1 for r in rows if (r.get("check") or {}).get("pass") is False)
    what = title + (f"; timers: {', '.join(timers)}" if timers else "")
    return {
        "folder": name, "date": name[:10], "suite": name.split("-")[-1],
        "gpu": ", ".join(gpus) or "?", "driver": ", ".join(drivers),
        "commit": m.group(1) if m else "unknown", "rows": len(rows), "failed": failed,
        "what": what, "headline": [], "peers": len(read_rows(os.path.join(folder, "peers.jsonl"))),
    }


def entries(results):
    out = []
    for name in sorted(os.listdir(results)):
        folder = os.path.join(results, name)
        if not os.path.isdir(folder) or not re.match(r"\d{4}-\d{2}-\d{2}-", name):
            continue
        meta_path = os.path.join(folder, "meta.json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                out.append(suite_entry(name, folder, json.load(f)))
        else:
            out.append(round_entry(name, folder))
    # Newest first; a date's folders by name.
    out.sort(key=lambda e: (e["date"], e["folder"]), reverse=True)
    return out


def headline_table(e):
    lines = ["| row | op, dtype, shape | timer/flush | median µs | p10-p90 µs | n | GB/s | "
             "% of copy | check |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in e["headline"]:
        chk = r.get("check") or {}
        check = "pass" if chk.get("pass") else ("FAIL" if chk.get("pass") is False else "none")
        med = r.get("median_us")
        if med is None:
            lines.append(f"| {cell(r.get('workload'))} | {cell(r.get('op'))} "
                         f"{cell(r.get('dtype'))} {cell(shape_text(r))} | "
                         f"{r.get('timer')}/{r.get('flush')} | not timed | | | | | {check} |")
            continue
        pct = r.get("pct_of_copy")
        lines.append(
            f"| {cell(r.get('workload'))} | {cell(r.get('op'))} {cell(r.get('dtype'))} "
            f"{cell(shape_text(r))} | {r.get('timer')}/{r.get('flush')} | {med:.2f} | "
            f"{r.get('p10_us', 0):.2f}-{r.get('p90_us', 0):.2f} | {r.get('iters')} | "
            f"{r.get('gbps', 0):.0f} | {'' if pct is None else f'{pct:.1f}'} | {check} |")
    return lines


def render(results):
    es = entries(results)
    lines = [
        "# Bench results",
        "",
        "Generated by `python3 bench/index.py` from the folders beside this file; do not edit it",
        "by hand. `bench/run.sh SUITE...` writes `<date>-<gpu>-<suite>/` folders (`meta.json`,",
        "`bench.jsonl`, `peers.jsonl`, `run.log`; docs/bench.md); the `roundN` folders are the",
        "earlier hand-run rounds, described by their README.md. Every figure below is a median of",
        "per-call device time from a checked run; each row names its timer and L2 flush.",
        "",
        "| date | suite | GPU | driver | commit | rows | what |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in es:
        rows = f"{e['rows']}" + (f" ({e['failed']} failed)" if e["failed"] else "")
        if e["peers"]:
            rows += f" + {e['peers']} peer"
        what = e["what"]
        if e["headline"]:
            what = f"[headline rows](#{e['folder']})" + (f": {what}" if what else "")
        lines.append(f"| {e['date']} | [{e['suite']}]({e['folder']}/) | {cell(e['gpu'])} | "
                     f"{cell(e['driver'])} | {cell(e['commit'])} | {rows} | {cell(what)} |")
    with_headlines = [e for e in es if e["headline"]]
    if with_headlines:
        lines += ["", "## Headline rows", ""]
        for e in with_headlines:
            lines += [f"### {e['folder']}", "",
                      f"{e['gpu']} ({e['arch'] or '?'}), driver {e['driver']}, commit "
                      f"{e['commit']}; a kjit row is timed only after its CPU reference check "
                      "passes.", ""] + headline_table(e) + [""]
    return "\n".join(lines).rstrip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when INDEX.md is not what this would write")
    args = ap.parse_args()
    text = render(args.results)
    path = os.path.join(args.results, "INDEX.md")
    if args.check:
        try:
            with open(path) as f:
                same = f.read() == text
        except OSError:
            same = False
        if not same:
            print(f"{path} is stale: run python3 bench/index.py", file=sys.stderr)
        return 0 if same else 1
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
