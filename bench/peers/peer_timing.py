"""Timers shared by the PyTorch peer scripts, named and behaving like `kjit-cli bench`'s
(docs/bench.md), so that a peer row and a kjit row of the same TIMER/FLUSH compare like with like.

Timers:
  events          one call per sample with CUDA events around it, after the flush; a sleep kernel
                  queued first keeps the GPU busy while the host queues the events and the call,
                  so Python's launch path stays out of the figure (kjit's blocking kernel).
  events-batched  events around a batch of back-to-back calls (about 200 us, at most 256 calls, as
                  kjit sizes it); per-call time = batch time / batch size. No flush.
  graph           the same batch captured once in a CUDA graph, events around each replay;
                  per-call time = replay time / batch size. No flush.
Flushes (before each sample of `events`):
  read   read a buffer twice the L2 size: L2 holds clean lines, none of the op's.
  dirty  zero a 256 MB buffer, as Triton's do_bench and FlashInfer's benchmarks do: L2 holds dirty
         lines the op pays to write back.
  none   nothing.
Every row records the timer and flush it was timed under."""
import json
import math

import torch

TIMERS = ("events", "events-batched", "graph")
FLUSHES = ("read", "dirty", "none")
DIRTY_BYTES = 256 << 20


def parse_runs(text):
    """"events/dirty,graph/none" -> [("events", "dirty"), ("graph", "none")]; ValueError if bad."""
    runs = []
    for item in text.split(","):
        timer, _, flush = item.partition("/")
        if timer not in TIMERS or flush not in FLUSHES:
            raise ValueError(f"run {item!r}: want TIMER/FLUSH with TIMER in {TIMERS}, "
                             f"FLUSH in {FLUSHES}")
        if timer != "events" and flush != "none":
            raise ValueError(f"run {item!r}: {timer} times back-to-back calls, so flush none")
        runs.append((timer, flush))
    return runs


def add_runs_argument(ap):
    ap.add_argument("--runs", type=parse_runs, default=[("events-batched", "none")],
                    help="comma-separated TIMER/FLUSH: events/read|dirty|none, "
                         "events-batched/none, graph/none (default events-batched/none)")


class Flusher:
    """The flush buffers, made on first use and kept for the process."""

    def __init__(self):
        self._read = None
        self._dirty = None

    def __call__(self, flush):
        if flush == "read":
            if self._read is None:
                l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
                self._read = torch.ones(max(2 * l2, 1 << 20) // 4, dtype=torch.int32,
                                        device="cuda")
            self._read.sum()
        elif flush == "dirty":
            if self._dirty is None:
                self._dirty = torch.empty(DIRTY_BYTES, dtype=torch.uint8, device="cuda")
            self._dirty.zero_()


FLUSH = Flusher()


def summary(us, timer, flush, batch):
    us = sorted(us)
    q = lambda p: us[int(p * (len(us) - 1) + 0.5)]
    return {"timer": timer, "flush": flush, "median_us": q(0.5), "min_us": us[0],
            "p10_us": q(0.1), "p90_us": q(0.9), "samples": len(us), "batch": batch}


def _batch_size(fn):
    """Calls per batch: about 200 us of device time, 1 to 256 (kjit's rule)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = math.inf
    for _ in range(3):
        torch.cuda._sleep(100_000)
        a.record(); fn(); b.record(); b.synchronize()
        best = min(best, 1000.0 * a.elapsed_time(b))
    return max(1, min(256, math.ceil(200.0 / max(best, 0.5))))


def time_fn(fn, timer, flush, warmup=10, samples=50):
    """Per-call device time of fn() under TIMER/FLUSH: a summary dict (timer and flush named)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    us = []
    if timer == "events":
        for _ in range(samples):
            FLUSH(flush)
            # Keeps the GPU busy (~50 us) while the host queues the events and the call.
            torch.cuda._sleep(100_000)
            a.record(); fn(); b.record(); b.synchronize()
            us.append(1000.0 * a.elapsed_time(b))
        return summary(us, timer, flush, 1)
    batch = _batch_size(fn)
    if timer == "events-batched":
        for _ in range(samples):
            torch.cuda._sleep(100_000)
            a.record()
            for _ in range(batch):
                fn()
            b.record(); b.synchronize()
            us.append(1000.0 * a.elapsed_time(b) / batch)
        return summary(us, timer, flush, batch)
    # graph: capture the batch once (after warming up on a side stream, as capture requires).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(batch):
            fn()
    for _ in range(2):  # the first replays upload the graph
        g.replay()
    torch.cuda.synchronize()
    for _ in range(samples):
        torch.cuda._sleep(100_000)
        a.record(); g.replay(); b.record(); b.synchronize()
        us.append(1000.0 * a.elapsed_time(b) / batch)
    return summary(us, timer, flush, batch)


def describe(t):
    return f"{t['timer']}/{t['flush']}"


def timed_row(row, fn, timer, flush, nbytes, label, out, copy_gbps=None, warm=False):
    """Times fn under timer/flush into `row` (its timings and GB/s, and % of copy_gbps when
    given), or records the first line of the error when fn cannot be timed so (a backend that
    refuses the shape, a graph that cannot capture it). Prints one line after `label` and appends
    the row to `out` (a file, or None). warm: one call and a synchronize first, inside the same
    error handling."""
    row.update({"timer": timer, "flush": flush})
    try:
        if warm:
            fn()
            torch.cuda.synchronize()
        t = time_fn(fn, timer, flush)
    except Exception as e:
        row["error"] = str(e).splitlines()[0][:300]
        print(f"{label} {timer}/{flush}: {row['error']}", flush=True)
    else:
        row.update(t)
        row["gbps"] = nbytes / (t["median_us"] * 1e3)
        line = f"{label} [{describe(t)}] {t['median_us']:9.2f} us {row['gbps']:7.0f} GB/s"
        if copy_gbps:
            row["copy_gbps"] = copy_gbps
            row["pct_of_copy"] = 100 * row["gbps"] / copy_gbps
            line += f" ({row['pct_of_copy']:.1f}% of copy {copy_gbps:.0f})"
        print(line, flush=True)
    if out:
        out.write(json.dumps(row) + "\n")
    return row
