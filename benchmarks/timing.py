"""Device time of a callable from CUDA events (torch's), for the benchmark scripts beside this file."""
from __future__ import annotations

import statistics

import torch


def event_ms(fn, iters: int = 20, repeats: int = 7) -> float:
    """Median over ``repeats`` of the per-call device time of ``iters`` back-to-back calls of ``fn`` on torch's
    current stream, after three warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / iters)
    return statistics.median(times)
