"""Per-call host time of a tiny forward convolution (x 1x8x8x8, w 8x8x3x3, pad 1, float32, IMPLICIT_GEMM).

Rows: (a) the raw capi call with prepared arguments, (a') its bound ctypes function (``.raw``),
(b) ``convolution_forward`` with DeviceArrays (y given, and y allocated), (c) the same with torch
tensors, (d) ``torch.nn.functional.conv2d``, (e) the C program ``conv_overhead.c``, compiled here with
nvcc (or cc) against the loaded libcudnn. Host time per call = wall time of N back-to-back calls / N
(median of 7 repeats, warm-up first; the device is synchronised after each repeat, outside the timing).

    python benchmarks/conv_overhead.py [--iters 20000]
"""
from __future__ import annotations

import argparse
import ctypes
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
from cudnn_py.caches import handle_cache  # noqa: E402
from cudnn_py.cli.prerequisites import script_args  # noqa: E402
from cudnn_py.ops import conv_calls as cc  # noqa: E402
from cudnn_py.ops import conv_calls as cv  # noqa: E402


def per_call_us(fn, sync, iters: int, repeats: int = 7) -> float:
    for _ in range(min(iters, 500)):
        fn()
    sync()
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        t1 = time.perf_counter()
        sync()
        res.append((t1 - t0) / iters * 1e6)
    return statistics.median(res)


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
    args = script_args(ap, argv)
    rng = np.random.default_rng(0)
    rows = []
    with cudnn.Handle() as h:
        x = cudnn.to_device(rng.standard_normal((1, 8, 8, 8)).astype(np.float32))
        w = cudnn.to_device(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
        y = cudnn.empty((1, 8, 8, 8), np.float32)
        algo = capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
        conv = cv.Convolution(padding=1)
        sync = h.synchronize
        # (a) raw capi with prepared arguments (the same descriptors the Pythonic layer uses)
        cv.convolution_forward(h, conv, x, w, y=y, algo=algo)
        (p,) = handle_cache(h, cc.PLANS).values()  # the plan that call made (a new handle: the only one)
        one, zero = ctypes.byref(ctypes.c_float(1.0)), ctypes.byref(ctypes.c_float(0.0))
        hp, f, fr = h.ptr, capi.cudnnConvolutionForward, capi.cudnnConvolutionForward.raw
        xp, wp, yp = x.ptr, w.ptr, y.ptr
        ref = per_call_us(lambda: f(hp, one, p.a, xp, p.b, wp, p.conv_desc, algo, None, 0, zero, p.c, yp), sync,
                          args.iters)
        rows.append(("(a) raw capi call, prepared arguments", ref))
        rows.append(("(a') bound ctypes function (.raw)", per_call_us(
            lambda: fr(hp, one, p.a, xp, p.b, wp, p.conv_desc, algo, None, 0, zero, p.c, yp), sync, args.iters)))
        rows.append(("(b) convolution_forward, DeviceArrays, y given", per_call_us(
            lambda: cv.convolution_forward(h, conv, x, w, y=y, algo=algo), sync, args.iters)))
        rows.append(("(b') convolution_forward, DeviceArrays, y allocated", per_call_us(
            lambda: cv.convolution_forward(h, conv, x, w, algo=algo), sync, args.iters)))
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            xt = torch.from_dlpack(x).clone()
            wt = torch.from_dlpack(w).clone()
            yt = torch.empty((1, 8, 8, 8), device="cuda")
            torch.cuda.synchronize()
            rows.append(("(c) convolution_forward, torch tensors, y given", per_call_us(
                lambda: cv.convolution_forward(h, conv, xt, wt, y=yt, algo=algo), sync, args.iters)))
            torch.backends.cudnn.benchmark = False
            rows.append(("(d) torch.nn.functional.conv2d", per_call_us(
                lambda: torch.nn.functional.conv2d(xt, wt, padding=1), torch.cuda.synchronize, args.iters)))
        floor, how = c_floor(args.iters)
        rows.append(("(e) C program (conv_overhead.c)", floor))
    print(f"cuDNN {cudnn.library().version_string}  ({cudnn.library().path})")
    print(f"{'variant':<52}{'us/call':>10}{'x (a)':>8}")
    for name, us in rows:
        print(f"{name:<52}{'n/a' if us is None else format(us, '10.2f'):>10}"
              f"{'' if us is None else format(us / ref, '8.2f'):>8}")
    print(f"C floor: {how}")
    return 0


if __name__ == "__main__":
    # the raw-capi rows call C functions cuDNN 9 deprecates on purpose (the yardstick): no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    sys.exit(main())
