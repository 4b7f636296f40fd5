"""Timers shared by the PyTorch peer scripts, matching the mechanisms of `kjit-cli bench`.

time_batches: CUDA events around back-to-back batches sized to ~1 ms (hot L2), per-call time =
batch time / batch size. time_cold: one call per sample after an L2 flush, queued behind a
sleep kernel so the events time the kernels rather than Python's launch path."""
import torch


def summary(us, samples, batch):
    us = sorted(us)
    q = lambda p: us[int(p * (len(us) - 1) + 0.5)]
    return {"median_us": q(0.5), "min_us": us[0], "p10_us": q(0.1), "p90_us": q(0.9),
            "samples": samples, "batch": batch}


def time_batches(fn, warmup=10, samples=30):
    for _ in range(warmup):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); fn(); b.record(); b.synchronize()
    batch = max(1, min(2000, int(1.0 / max(a.elapsed_time(b), 1e-4))))
    us = []
    for _ in range(samples):
        a.record()
        for _ in range(batch):
            fn()
        b.record(); b.synchronize()
        us.append(1000.0 * a.elapsed_time(b) / batch)
    return summary(us, samples, batch)


def time_cold(fn, flush, warmup=10, samples=50):
    for _ in range(warmup):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    us = []
    for _ in range(samples):
        flush.zero_()
        # Keeps the GPU busy (~50 us) while the host enqueues the events and the call.
        torch.cuda._sleep(100_000)
        a.record()
        fn()
        b.record()
        b.synchronize()
        us.append(1000.0 * a.elapsed_time(b))
    return summary(us, samples, 1)
