"""Time callables the same way, interleaved, in one process.

Each repetition: flush L2 by writing a buffer larger than it, then CUDA events on
the current stream around one call. Median of many. A second, shorter pass
synchronizes the whole device before the end event; a candidate whose device-wide
time exceeds its stream time left work running elsewhere (a side stream) and is
flagged by the caller.
"""
from __future__ import annotations

import statistics

import torch

from state import Timing

FLUSH_BYTES = 256 * 1024 * 1024


class L2Flusher:
    def __init__(self, nbytes: int = FLUSH_BYTES):
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")

    def __call__(self):
        self.buf.fill_(0x5A5A5A5A)


def summarize(samples: list[float]) -> Timing:
    s = sorted(samples)
    q = lambda f: s[min(len(s) - 1, int(f * len(s)))]  # noqa: E731
    return Timing(median_ms=statistics.median(s), p10_ms=q(0.1), p90_ms=q(0.9), reps=len(s))


def time_interleaved(fns: dict[str, callable], reps: int = 50, warmup: int = 3,
                     flusher: L2Flusher | None = None, device_sync: bool = False) -> dict[str, Timing]:
    """Round-robin over `fns` `reps` times; returns a Timing per name."""
    flusher = flusher or L2Flusher()
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        for name, fn in fns.items():
            flusher()
            start.record()
            fn()
            if device_sync:
                torch.cuda.synchronize()
            end.record()
            end.synchronize()
            torch.cuda.synchronize()
            samples[name].append(start.elapsed_time(end))
    return {k: summarize(v) for k, v in samples.items()}
