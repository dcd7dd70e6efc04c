"""Per-call host time of a tiny forward convolution (x 1x8x8x8, w 8x8x3x3, pad 1, float32).

Rows: (a) the raw capi call with prepared arguments (IMPLICIT_GEMM), (a') its bound ctypes function (``.raw``),
(b) ``convolution_forward`` with that named algorithm (the legacy call) on DeviceArrays (y given, and y allocated),
(c) the same with torch tensors, (d) ``torch.nn.functional.conv2d``, (f) ``convolution_forward`` with its defaults
(``engine="auto"``: measured on the first call, then the kept engine's route) on DeviceArrays and (g) on torch
tensors, y given and allocated, (h) ``graph.conv_forward``, (i) / (j) an output's allocation and free alone
(``cudnn_py.empty`` / ``torch.empty``), (e) the C program ``conv_overhead.c``, compiled here with nvcc (or cc)
against the loaded libcudnn. Host time per call = wall time of N back-to-back calls / N; the rows are
timed in interleaved rounds (every row once per round, the device synchronised after each, outside the timing),
median of 7 rounds, warm-up first. ``--json`` writes the figures (and the engine "auto" kept).

    python benchmarks/conv_overhead.py [--iters 20000] [--json out.json]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cudnn_py as cudnn  # noqa: E402
from cudnn_py import capi  # noqa: E402
from cudnn_py.core.caches import handle_cache  # noqa: E402
from cudnn_py.cli.prerequisites import script_args  # noqa: E402
from cudnn_py.ops import conv_calls as cc  # noqa: E402
from cudnn_py.ops import conv_calls as cv  # noqa: E402


def per_call_us(rows: dict, sync, iters: int, rounds: int = 7) -> dict[str, float]:
    """Median µs per call of each callable in ``rows`` (name -> fn): warmed up, then ``rounds`` rounds that each time
    every row once (``iters`` calls, then ``sync()`` outside the timing), rows interleaved."""
    for fn in rows.values():
        for _ in range(min(iters, 500)):
            fn()
    sync()
    res: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t1 = time.perf_counter()
            sync()
            res[name].append((t1 - t0) / iters * 1e6)
    return {name: statistics.median(v) for name, v in res.items()}


def c_floor(iters: int) -> tuple[float | None, str]:
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_overhead.c")
    lib = cudnn.library().path
    libdir = os.path.dirname(lib)
    cc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    cc = cc or shutil.which("cc")
    if cc is None:
        return None, "no nvcc or cc found"
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "conv_overhead")
        cmd = [cc, "-O2", src, "-o", exe, f"-L{libdir}", f"-l:{os.path.basename(lib)}", "-l:libcuda.so.1",
               f"-Wl,-rpath,{libdir}" if not cc.endswith("nvcc") else f"-Xlinker=-rpath={libdir}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            return None, f"compile failed: {' '.join(cmd)}\n{r.stderr[-2000:]}"
        env = dict(os.environ, LD_LIBRARY_PATH=libdir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
        r = subprocess.run([exe, str(iters)], capture_output=True, text=True, env=env)
        if r.returncode:
            return None, f"run failed: {r.stderr[-2000:]}"
        return float(r.stdout.split()[-1]), f"{os.path.basename(cc)} {' '.join(cmd[1:])}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--json", metavar="PATH", help="write the rows here")
    args = script_args(ap, argv)
    rng = np.random.default_rng(0)
    from cudnn_py.calls import engine_choice
    from cudnn_py.graph import conv as gconv
    with cudnn.Handle() as h:
        x = cudnn.to_device(rng.standard_normal((1, 8, 8, 8)).astype(np.float32))
        w = cudnn.to_device(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
        y = cudnn.empty((1, 8, 8, 8), np.float32)
        algo = capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
        conv = cv.Convolution(padding=1)
        # (a) raw capi with prepared arguments (the same descriptors the Pythonic layer uses)
        cv.convolution_forward(h, conv, x, w, y=y, algo=algo)
        (p,) = handle_cache(h, cc.PLANS).values()  # the plan that call made (a new handle: the only one)
        one, zero = ctypes.byref(ctypes.c_float(1.0)), ctypes.byref(ctypes.c_float(0.0))
        hp, f, fr = h.ptr, capi.cudnnConvolutionForward, capi.cudnnConvolutionForward.raw
        xp, wp, yp = x.ptr, w.ptr, y.ptr
        fwd = cv.convolution_forward
        rows = {
            "(a) raw capi call, prepared arguments":
                lambda: f(hp, one, p.a, xp, p.b, wp, p.conv_desc, algo, None, 0, zero, p.c, yp),
            "(a') bound ctypes function (.raw)":
                lambda: fr(hp, one, p.a, xp, p.b, wp, p.conv_desc, algo, None, 0, zero, p.c, yp),
            "(b) convolution_forward IMPLICIT_GEMM, DeviceArrays, y given": lambda: fwd(h, conv, x, w, y=y, algo=algo),
            "(b') convolution_forward IMPLICIT_GEMM, DeviceArrays, y new": lambda: fwd(h, conv, x, w, algo=algo),
            "(f) convolution_forward default, DeviceArrays, y given": lambda: fwd(h, conv, x, w, y=y),
            "(f') convolution_forward default, DeviceArrays, y new": lambda: fwd(h, conv, x, w),
            "(h) graph.conv_forward, DeviceArrays, y given": lambda: gconv.conv_forward(h, x, w, padding=1, y=y),
            "(i) the output's allocation alone: cudnn_py.empty, freed": lambda: cudnn.empty((1, 8, 8, 8), np.float32,
                                                                                             h.stream),
        }
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            torch.backends.cudnn.benchmark = False
            xt = torch.from_dlpack(x).clone()
            wt = torch.from_dlpack(w).clone()
            yt = torch.empty((1, 8, 8, 8), device="cuda")
            torch.cuda.synchronize()
            rows.update({
                "(c) convolution_forward IMPLICIT_GEMM, torch, y given": lambda: fwd(h, conv, xt, wt, y=yt, algo=algo),
                "(g) convolution_forward default, torch, y given": lambda: fwd(h, conv, xt, wt, y=yt),
                "(g') convolution_forward default, torch, y new": lambda: fwd(h, conv, xt, wt),
                "(d) torch.nn.functional.conv2d (y new)": lambda: torch.nn.functional.conv2d(xt, wt, padding=1),
                "(j) torch.empty, freed": lambda: torch.empty((1, 8, 8, 8), device="cuda"),
            })
        us = per_call_us(rows, cudnn.synchronize, args.iters)
        kept = {str(k[0]): c.engine for k, c in engine_choice.choices(h).items()}
        floor, how = c_floor(args.iters)
        us["(e) C program (conv_overhead.c)"] = floor  # type: ignore[assignment]
    ref = us["(a) raw capi call, prepared arguments"]
    print(f"cuDNN {cudnn.library().version_string}  ({cudnn.library().path}); engine='auto' kept: {kept}")
    print(f"{'variant':<62}{'us/call':>10}{'x (a)':>8}")
    for name, t in us.items():
        cells = ("n/a", "") if t is None else (format(t, "10.2f"), format(t / ref, "8.2f"))
        print(f"{name:<62}{cells[0]:>10}{cells[1]:>8}")
    print(f"C floor: {how}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cudnn": cudnn.library().version_string, "gpu": cudnn.streams.get_device().name,
                       "torch": None if torch is None else torch.__version__, "auto_engine": kept, "us_per_call": us},
                      fh, indent=1)
    return 0


if __name__ == "__main__":
    # the raw-capi rows call C functions cuDNN 9 deprecates on purpose (the yardstick): no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    sys.exit(main())
