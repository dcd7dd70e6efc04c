"""Device time of a callable from CUDA events (torch's), for the benchmark scripts beside this file.

torch is imported on the first call: a benchmark imports this module even where torch is missing, and says so in
one line (``cudnn_py.cli.prerequisites.script_args``) instead of failing on the import.
"""
from __future__ import annotations

import statistics


#: a sleep kernel of about 6 ms at 1.5 GHz: longer than the host needs to queue a timed batch of calls
_SLEEP_CYCLES = int(1.5e9 * 0.006)


def event_ms(fn, iters: int = 20, repeats: int = 7, *, sleep: bool = False) -> float:
    """Median over ``repeats`` of the per-call time of ``iters`` back-to-back calls of ``fn`` between two CUDA events
    on torch's current stream, after three warm-up calls.

    :param sleep: queue the calls behind a sleep kernel that holds the stream until the host has queued them all,
        so the time is the GPU's alone (without it, a host-bound call measures its host time).
    """
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep:
            torch.cuda._sleep(_SLEEP_CYCLES)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / iters)
    return statistics.median(times)
