"""Throughput of float16 NHWC 64x256x56x56, 256 filters 3x3, pad 1: our "fastest" (and "heuristic") choice,
legacy and ``engine="graph"``, vs torch with ``cudnn.benchmark = True``; plus the autotune cost (first "fastest"
call vs a cached one).

Device time per call: CUDA events around ``--calls`` back-to-back calls, median of ``--repeats``; the variants
take turns for ``--rounds`` rounds (so a drift in clocks hits them alike) and the median round is reported.

    python benchmarks/conv_throughput.py [--batch 64] [--calls 20] [--repeats 7] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cudnn_py as cudnn  # noqa: E402
from cudnn_py.calls import algorithms as alg# noqa: E402
from cudnn_py.cli.prerequisites import script_args  # noqa: E402
from cudnn_py.ops import conv_calls as cv  # noqa: E402


def device_ms(fn, stream, calls, repeats) -> float:
    fn()
    res = []
    for _ in range(repeats):
        with cudnn.timer(stream) as t:
            for _ in range(calls):
                fn()
        res.append(t.ms / calls)
    return statistics.median(res)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    args = script_args(ap, argv)
    n, c, hw, k = args.batch, 256, 56, 256
    flops = 2.0 * n * k * hw * hw * c * 9
    rng = np.random.default_rng(0)
    with cudnn.Handle() as h:
        x = cudnn.to_device(rng.standard_normal((n, hw, hw, c)).astype(np.float16), h.stream)  # NHWC
        w = cudnn.to_device((0.05 * rng.standard_normal((k, 3, 3, c))).astype(np.float16), h.stream)
        y = cudnn.empty((n, hw, hw, k), np.float16, stream=h.stream)
        conv = cv.Convolution(padding=1, layout="NHWC")
        alg.algorithm_cache.clear()
        h.synchronize()
        t0 = time.perf_counter()
        cv.convolution_forward(h, conv, x, w, y=y, autotune=True, engine="legacy")
        h.synchronize()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(10):
            cv.convolution_forward(h, conv, x, w, y=y, autotune=True, engine="legacy")
        h.synchronize()
        cached = (time.perf_counter() - t0) / 10
        (_, rec), = alg.algorithm_cache.entries()
        variants = {
            f"cudnn_py fastest ({rec.algo.name.split('_ALGO_')[1]}, {rec.math_type.name})":
                lambda: cv.convolution_forward(h, conv, x, w, y=y, autotune=True, engine="legacy"),
            "cudnn_py heuristic": lambda: cv.convolution_forward(h, conv, x, w, y=y, engine="legacy"),
        }
        h.synchronize()
        t0 = time.perf_counter()
        cv.convolution_forward(h, conv, x, w, y=y, autotune=True, engine="graph")
        h.synchronize()
        graph_first = time.perf_counter() - t0
        variants["cudnn_py fastest, engine='graph' (autotuned plan)"] = \
            lambda: cv.convolution_forward(h, conv, x, w, y=y, autotune=True, engine="graph")
        torch_first = None
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            torch.backends.cudnn.benchmark = True
            xt = torch.from_dlpack(x).permute(0, 3, 1, 2)  # logical NCHW, channels_last memory
            wt = torch.from_dlpack(w).permute(0, 3, 1, 2)
            assert xt.is_contiguous(memory_format=torch.channels_last)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.nn.functional.conv2d(xt, wt, padding=1)
            torch.cuda.synchronize()
            torch_first = time.perf_counter() - t0
            # torch runs on its current stream; time it there with our events
            variants["torch conv2d, cudnn.benchmark=True"] = (lambda: torch.nn.functional.conv2d(xt, wt, padding=1),
                                                              torch.cuda.current_stream().cuda_stream)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, v in variants.items():
                fn, stream = v if isinstance(v, tuple) else (v, h.stream)
                times[name].append(device_ms(fn, stream, args.calls, args.repeats))
        rows = [(name, statistics.median(t)) for name, t in times.items()]
    print(f"cuDNN {cudnn.library().version_string}; x {n}x{c}x{hw}x{hw} fp16 NHWC, w {k}x{c}x3x3, pad 1")
    print(f"{'variant':<58}{'ms/call':>10}{'TFLOP/s':>10}")
    for name, ms in rows:
        print(f"{name:<58}{ms:10.4f}{flops / (ms * 1e-3) / 1e12:10.1f}")
    print(f"autotune: first 'fastest' call {first * 1e3:.1f} ms (Find + run), cached call {cached * 1e3:.3f} ms "
          f"(host+device, synchronised)")
    print(f"autotune, engine='graph': first call {graph_first * 1e3:.1f} ms (build and time every plan)")
    if torch_first is not None:
        print(f"torch first call with benchmark=True: {torch_first * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
