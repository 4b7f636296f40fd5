#!/usr/bin/env python3
"""The bench runner behind bench/run.sh: for each suite (bench/suites/NAME.jsonl), on a GPU
machine, runs its rows through `kjit-cli bench --suite` and its peers (bench/peers/), and writes
bench/results/<date>-<gpu>-<suite>/:

  meta.json    date, GPU, driver, max SM clock, commit, kjit-cli, torch and flashinfer versions
               (flashinfer: the copy the peers load, bench/peers/flashinfer_env.py), the
               TIMER/FLUSH runs and what each means, exit codes, seconds taken
  bench.jsonl  kjit-cli's rows (each names its timer, flush, suite and whether it is a headline)
  peers.jsonl  the peers' rows (each names its timer and flush)
  run.log      everything printed

A suite's runs go through kjit-cli in up to three processes: CUPTI, per-call events, and the
back-to-back timers (events-batched, graph), so that CUPTI's instrumentation is never active
while events time anything. Then bench/index.py rewrites bench/results/INDEX.md.

Environment: CLI (kjit-cli; default build-h200's, else build's), RESULTS (default
bench/results), KJIT_COMMIT (the commit the binaries were built from; default git's HEAD),
DEADLINE (seconds for the whole run, default 560: a step still running then is stopped, and the
steps after it are skipped and logged; a suite with either is exit 1), PEERS=0 to skip the
peers."""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# One process per group of timers (see the docstring).
TIMER_GROUPS = (("cupti",), ("events",), ("events-batched", "graph"))
TIMING = {
    "cupti": "CUPTI kernel timestamps, one call per sample, first kernel start to last kernel end",
    "events": "CUDA events around one call per sample, queued behind a blocking kernel (peers: "
              "behind a sleep kernel)",
    "events-batched": "CUDA events around a batch of back-to-back calls, per-call = batch / size",
    "graph": "CUDA-graph replay of a batch of back-to-back calls, per-call = replay / size",
}
FLUSH = {
    "read": "a kernel reads a buffer of twice the L2 size before each sample (clean lines)",
    "dirty": "a kernel writes zeros over 256 MB before each sample, as the peers' harnesses do "
             "(dirty lines the op pays to write back)",
    "none": "no flush (inputs that fit stay in L2)",
}


def now():
    return datetime.datetime.now(datetime.timezone.utc)


class Log:
    def __init__(self):
        self.files = []

    def __call__(self, text):
        line = f"[{now():%H:%M:%S}] {text}"
        print(line, flush=True)
        for f in self.files:
            f.write(line + "\n")
            f.flush()


log = Log()


class Clock:
    def __init__(self, seconds):
        self.end = time.time() + seconds

    def left(self):
        return self.end - time.time()


def run(cmd, timeout, env=None):
    """Runs cmd, its output to the console and every open log; returns its exit code (124 when
    it ran out of time, as timeout(1) says)."""
    log("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, cwd=ROOT, start_new_session=True)
    stopped = []

    def stop():
        stopped.append(True)
        os.killpg(p.pid, 9)  # its own session: the process and anything it started

    timer = threading.Timer(max(timeout, 1), stop)
    timer.start()
    for line in p.stdout:
        line = line.rstrip("\n")
        if "Warning" in line or "return F." in line:  # torch's per-call SDPA warnings
            continue
        print(line, flush=True)
        for f in log.files:
            f.write(line + "\n")
    p.wait()
    timer.cancel()
    if stopped:
        log(f"time box of {timeout:.0f} s reached: stopped")
        return 124
    return p.returncode


def capture(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_info():
    out = capture(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm",
                   "--format=csv,noheader,nounits", "-i", "0"]).strip().split(", ")
    if len(out) >= 3:
        return {"gpu": out[0], "driver": out[1], "sm_clock_max_mhz": int(out[2] or 0)}
    return {"gpu": "unknown", "driver": "unknown", "sm_clock_max_mhz": 0}


def gpu_slug(name):
    s = re.sub(r"^NVIDIA\s+", "", name).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def find_cli():
    if os.environ.get("CLI"):
        return os.environ["CLI"]
    for b in ("build-h200", "build"):
        p = os.path.join(ROOT, b, "tools", "kjit-cli", "kjit-cli")
        if os.path.exists(p):
            return p
    sys.exit("bench/run.sh: no kjit-cli: build it (build-h200/ or build/) or set CLI")


def result_folder(results, suite, gpu):
    base = f"{now():%Y-%m-%d}-{gpu_slug(gpu)}-{suite}"
    path, n = os.path.join(results, base), 2
    while os.path.exists(path):
        path, n = os.path.join(results, f"{base}-{n}"), n + 1
    os.makedirs(path)
    return path


# Kept back from each step's time box: meta.json, the index and the archive still get written.
RESERVE_S = 10


def run_suite(name, cli, results, info, clock):
    """One suite; returns (folder, exit code)."""
    plan = subprocess.run([cli, "bench", "--suite", name, "--dry-run"], capture_output=True,
                          text=True, cwd=ROOT)
    if plan.returncode != 0:
        log(f"suite {name}: {plan.stderr.strip() or plan.stdout.strip()}")
        return None, 2
    plan = json.loads(plan.stdout)
    folder = result_folder(results, plan["suite"], info["gpu"])
    logf = open(os.path.join(folder, "run.log"), "w")
    log.files.append(logf)
    t0 = time.time()
    runs = sorted({f"{r['options']['timer']}/{r['options']['flush']}" for r in plan["runs"]})
    log(f"suite {plan['suite']} ({plan['file']}): {len(plan['runs'])} rows to write, runs "
        f"{', '.join(runs)}; {len(plan['peers'])} peer lines; into {folder}")
    codes = {}
    timers = {r["options"]["timer"] for r in plan["runs"]}
    groups = [g for g in TIMER_GROUPS if timers & set(g)]
    peers = plan["peers"] if os.environ.get("PEERS", "1") != "0" else []
    steps = [("kjit-cli " + ",".join(g),
              [cli, "bench", "--suite", plan["file"], "--timers", ",".join(g), "--json",
               os.path.join(folder, "bench.jsonl")]) for g in groups]
    steps += [(f"peer {p['script']} {' '.join(p['args'])}",
               ["python3", os.path.join("bench", "peers", p["script"])] + p["args"] +
               ["--runs", ",".join(p["runs"]), "--json", os.path.join(folder, "peers.jsonl")])
              for p in peers]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    torch_version = flashinfer_version = ""
    for label, cmd in steps:
        box = clock.left() - RESERVE_S
        if box < 5:
            log(f"deadline: {label} skipped")
            codes[label] = "skipped"
            continue
        codes[label] = run(cmd, box, env)
        if label.startswith("peer") and not torch_version:
            torch_version = capture(["python3", "-c", "import torch; print(torch.__version__)"])
            flashinfer_version = capture(["python3", os.path.join("bench", "peers",
                                                                  "flashinfer_env.py"),
                                          "--version"])
    meta = {
        "suite": plan["suite"],
        "about": plan.get("about", ""),
        "file": os.path.relpath(plan["file"], ROOT) if os.path.isabs(plan["file"]) else plan["file"],
        "date": now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        **info,
        "commit": os.environ.get("KJIT_COMMIT") or
                  capture(["git", "rev-parse", "--short", "HEAD"]).strip() or "unknown",
        "kjit_cli": capture([cli, "--version"]).strip() or cli,
        "torch": torch_version.strip() or None,
        "flashinfer": flashinfer_version.strip() or None,
        "runs": runs,
        "peer_runs": sorted({r for p in peers for r in p["runs"]}),
        "timing": {t: TIMING[t] for t in sorted(timers | {r.split("/")[0] for p in peers
                                                          for r in p["runs"]})},
        "flush": {f: FLUSH[f] for f in sorted({r.split("/")[1] for r in runs} |
                                              {r.split("/")[1] for p in peers for r in p["runs"]})},
        "exit_codes": codes,
        "seconds": round(time.time() - t0),
    }
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    log(f"suite {plan['suite']}: done in {meta['seconds']} s, exit codes {codes}")
    log.files.remove(logf)
    logf.close()
    bad = [c for c in codes.values() if c not in (0, "skipped")]
    return folder, 1 if bad or "skipped" in codes.values() else 0


def main(argv):
    suites = argv or ["smoke"]
    results = os.environ.get("RESULTS", os.path.join(HERE, "results"))
    clock = Clock(float(os.environ.get("DEADLINE", "560")))
    os.environ.setdefault("KJIT_CACHE_DIR", "/tmp/kjit-cache")
    cli = find_cli()
    info = gpu_info()
    log(f"bench/run.sh {' '.join(suites)}: {info['gpu']}, driver {info['driver']}, kjit-cli {cli}")
    folders, code = [], 0
    for s in suites:
        folder, c = run_suite(s, cli, results, info, clock)
        code = max(code, c)
        if folder:
            folders.append(folder)
    subprocess.run(["python3", os.path.join(HERE, "index.py"), "--results", results])
    out = os.environ.get("OUT")
    if out and folders:
        # The device tool returns few files: the new folders travel as one archive.
        tgz = os.path.join(out, "results.tgz")
        subprocess.run(["tar", "czf", tgz, "-C", results] +
                       [os.path.basename(f) for f in folders], check=False)
        shutil.copy(os.path.join(results, "INDEX.md"), os.path.join(out, "INDEX.md"))
        log(f"packed {len(folders)} folders into {tgz}: tar xzf results.tgz -C bench/results")
    log(f"done: {', '.join(os.path.basename(f) for f in folders)}; exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
