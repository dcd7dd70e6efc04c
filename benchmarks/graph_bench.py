"""Graph API benchmarks (prints tables; asserts nothing).

1. Per-call host time of a tiny convolution (1x8x8x8 float32, 8 filters 3x3) through the cached graph plan
   (Executor and graph.conv_forward), the legacy call, torch.nn.functional.conv2d, and the C floor
   (benchmarks/graph_floor.c, cudnnBackendExecute in a loop; built with nvcc when --floor-bin is not given).
   Also a 64x64x64 matmul vs torch.matmul.
2. Fusion: conv + bias + ReLU (float16 NHWC 32x128x56x56, 128 3x3) as one graph vs three legacy calls vs torch.
3. Throughput: the autotuned plan for 64x256x56x56 float16 NHWC, 256 3x3 vs torch with cudnn.benchmark=True.
4. CUDA graph replay: host cost per convolution of replaying a captured graph of 10 small convolutions.

Run: python benchmarks/graph_bench.py [--floor-bin PATH] [--iters N]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import time
import warnings

import numpy as np

import cudnn_py.graph as G
from cudnn_py import capi
from cudnn_py.cli.prerequisites import script_args
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, empty, to_device
from cudnn_py.core.streams import timer

try:
    import torch
    from timing import event_ms
except ImportError:  # pragma: no cover
    torch = None


def host_us(fn, n: int, sync, repeats: int = 5) -> float:
    """Median over ``repeats`` of the host microseconds per call of ``n`` calls (GPU synchronised around)."""
    for _ in range(min(n, 500)):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        sync()
        out.append((t1 - t0) / n * 1e6)
    return statistics.median(out)


def device_ms(fn, h, n: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(5):
        with timer(h.stream) as t:
            for _ in range(n):
                fn()
        times.append(t.ms / n)
    return statistics.median(times)


def nhwc(shape, dtype, rng):
    """A device array with logical NCHW ``shape`` laid out channels-last, random data."""
    n, c, hh, ww = shape
    buf = to_device(rng.standard_normal((n, hh, ww, c)).astype(dtype))
    return DeviceArray(buf.ptr, shape, np.dtype(dtype), (hh * ww * c, 1, ww * c, c), device_id=buf.device_id,
                       owner=buf)


def floor_us(args, iters: int) -> str:
    lib = os.path.dirname(capi_path())
    exe = args.floor_bin
    if exe is None:
        inc = None
        for root in (os.path.join(os.path.dirname(lib), "include"), "/usr/include", "/usr/local/cuda/include"):
            if os.path.isfile(os.path.join(root, "cudnn_graph.h")):
                inc = root
                break
        exe = "/tmp/graph_floor"
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graph_floor.c")
        cmd = ["nvcc", "-O2", src, f"-I{inc}", f"-L{lib}", "-l:libcudnn.so.9", "-o", exe]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            return f"nvcc failed ({' '.join(cmd)}): {r.stderr.strip()[-300:]}"
    env = dict(os.environ, LD_LIBRARY_PATH=lib + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    r = subprocess.run([exe, str(iters)], capture_output=True, text=True, env=env)
    return (r.stdout + r.stderr).strip()


def capi_path() -> str:
    from cudnn_py import library
    return library().path


def tiny_conv(h, rng, iters, args):
    print("\n## 1. per-call host time, tiny convolution 1x8x8x8 float32, 8 filters 3x3, pad 1")
    x = to_device(rng.standard_normal((1, 8, 8, 8)).astype(np.float32))
    w = to_device(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    y = empty((1, 8, 8, 8), np.float32)
    g = G.Graph(name="tiny_conv")
    tx, tw = g.tensor_like(x, "x"), g.tensor_like(w, "w")
    ty = g.conv_fprop(tx, tw, padding=1).set_output(True)
    g.build(h)
    run = g.executor(h, tx, tw, ty)
    sync = h.synchronize
    rows = [("graph Executor run(x, w, y) (cached plan)", host_us(lambda: run(x, w, y), iters, sync))]
    rows.append(("graph.conv_forward(h, x, w, padding=1, y=y)",
                 host_us(lambda: G.conv_forward(h, x, w, padding=1, y=y), iters, sync)))
    try:
        from cudnn_py.ops.conv_calls import Convolution, convolution_forward
        conv = Convolution(padding=1)
        rows.append(("legacy convolution_forward(h, conv, x, w, y=y)",
                     host_us(lambda: convolution_forward(h, conv, x, w, y=y, engine="legacy"), iters, sync)))
    except Exception as e:  # noqa: BLE001 - report, do not fail the benchmark
        rows.append((f"legacy convolution_forward: unavailable ({type(e).__name__}: {e})"[:110], float("nan")))
    if torch is not None:
        xt = torch.randn(1, 8, 8, 8, device="cuda")
        wt = torch.randn(8, 8, 3, 3, device="cuda")
        F = torch.nn.functional
        rows.append(("torch.nn.functional.conv2d(x, w, padding=1)",
                     host_us(lambda: F.conv2d(xt, wt, padding=1), iters, torch.cuda.synchronize)))
    for name, us in rows:
        print(f"{name:<64} {us:8.2f} us/call")
    print(f"plan: {g.plan.tag}, workspace {g.plan.workspace_size} B")
    floor = floor_us(args, iters)
    print("C floor (benchmarks/graph_floor.c):")
    print("  " + floor.replace("\n", "\n  "))
    import re
    m = re.search(r"cached variant pack: ([0-9.]+) us", floor)
    if m:
        print(f"Executor / C floor: {rows[0][1] / float(m.group(1)):.2f}x (bar: <= 1.3x)")

    print("\n## 1b. per-call host time, matmul 64x64x64 float32")
    a = to_device(rng.standard_normal((1, 64, 64)).astype(np.float32))
    b = to_device(rng.standard_normal((1, 64, 64)).astype(np.float32))
    c = empty((1, 64, 64), np.float32)
    gm = G.Graph(name="mm64")
    ta, tb = gm.tensor_like(a, "a"), gm.tensor_like(b, "b")
    tc = gm.matmul(ta, tb).set_output(True)
    gm.build(h)
    mrun = gm.executor(h, ta, tb, tc)
    ours = host_us(lambda: mrun(a, b, c), iters, sync)
    print(f"{'graph Executor run(a, b, c) (cached plan ' + gm.plan.tag + ')':<64} {ours:8.2f} us/call")
    if torch is not None:
        at, bt = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        ct = torch.empty(64, 64, device="cuda")
        theirs = host_us(lambda: torch.matmul(at, bt), iters, torch.cuda.synchronize)
        print(f"{'torch.matmul(a, b)':<64} {theirs:8.2f} us/call")
        print(f"{'torch.matmul(a, b, out=c)':<64} "
              f"{host_us(lambda: torch.matmul(at, bt, out=ct), iters, torch.cuda.synchronize):8.2f} us/call")
        print(f"Executor / torch.matmul: {ours / theirs:.2f}x (bar: <= 0.8x)")
    print("every plan of the matmul (heuristics modes A, B and the fallback list), host time of its Executor:")
    per_plan = {}
    for p in G.build_plans(gm, h, modes=("A", "B", "FALLBACK"), policy="all"):
        try:
            prun = p.executor(h, ta, tb, tc)
            per_plan[p.tag] = host_us(lambda: prun(a, b, c), max(1, iters // 4), sync)
            print(f"  {p.tag:<62} {per_plan[p.tag]:8.2f} us/call")
        except Exception as e:  # noqa: BLE001 - report, do not fail the benchmark
            print(f"  {p.tag:<62} failed: {type(e).__name__}: {e}"[:120])
    if per_plan and torch is not None:
        tag = min(per_plan, key=per_plan.__getitem__)
        print(f"least host time: {tag} {per_plan[tag]:.2f} us/call, {per_plan[tag] / theirs:.2f}x torch.matmul")
    timed = gm.autotune(h, {ta: a, tb: b, tc: c})
    print("gm.autotune (GPU time; of the plans within streams.TIE of the fastest, the least host time):")
    for p, ms in timed[:4]:
        print(f"  {p.tag:<62} {ms * 1e3:8.2f} us GPU")
    trun = gm.executor(h, ta, tb, tc)
    tuned = host_us(lambda: trun(a, b, c), iters, sync)
    print(f"{'graph Executor run(a, b, c) (autotuned plan ' + gm.plan.tag + ')':<64} {tuned:8.2f} us/call"
          + (f", {tuned / theirs:.2f}x torch.matmul" if torch is not None else ""))


def legacy_conv_bias_relu(h, x, w, b, y):
    """Three legacy calls (cudnnConvolutionForward, cudnnAddTensor, cudnnActivationForward), NHWC half."""
    from ctypes import byref
    n, c, hh, ww = x.shape
    k = w.shape[0]
    xd, yd, bd = capi.cudnnTensorDescriptor_t(), capi.cudnnTensorDescriptor_t(), capi.cudnnTensorDescriptor_t()
    for d in (xd, yd, bd):
        capi.cudnnCreateTensorDescriptor(byref(d))
    capi.cudnnSetTensor4dDescriptor(xd, capi.CUDNN_TENSOR_NHWC, capi.CUDNN_DATA_HALF, n, c, hh, ww)
    capi.cudnnSetTensor4dDescriptor(yd, capi.CUDNN_TENSOR_NHWC, capi.CUDNN_DATA_HALF, n, k, hh, ww)
    capi.cudnnSetTensor4dDescriptor(bd, capi.CUDNN_TENSOR_NHWC, capi.CUDNN_DATA_HALF, 1, k, 1, 1)
    fd = capi.cudnnFilterDescriptor_t()
    capi.cudnnCreateFilterDescriptor(byref(fd))
    capi.cudnnSetFilter4dDescriptor(fd, capi.CUDNN_DATA_HALF, capi.CUDNN_TENSOR_NHWC, k, c, 3, 3)
    cd = capi.cudnnConvolutionDescriptor_t()
    capi.cudnnCreateConvolutionDescriptor(byref(cd))
    capi.cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, capi.CUDNN_CROSS_CORRELATION, capi.CUDNN_DATA_FLOAT)
    capi.cudnnSetConvolutionMathType(cd, capi.CUDNN_TENSOR_OP_MATH)
    perf = (capi.cudnnConvolutionFwdAlgoPerf_t * 8)()
    got = ctypes.c_int()
    capi.cudnnFindConvolutionForwardAlgorithm(h.ptr, xd, fd, cd, yd, 8, byref(got), perf)
    algo = perf[0].algo
    wsz = ctypes.c_size_t()
    capi.cudnnGetConvolutionForwardWorkspaceSize(h.ptr, xd, fd, cd, yd, algo, byref(wsz))
    ws = h.workspace.get(wsz.value, h.stream)
    ad = capi.cudnnActivationDescriptor_t()
    capi.cudnnCreateActivationDescriptor(byref(ad))
    capi.cudnnSetActivationDescriptor(ad, capi.CUDNN_ACTIVATION_RELU, capi.CUDNN_PROPAGATE_NAN, 0.0)
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def run():
        capi.cudnnConvolutionForward(h.ptr, byref(one), xd, x.ptr, fd, w.ptr, cd, algo, ws, wsz.value, byref(zero),
                                     yd, y.ptr)
        capi.cudnnAddTensor(h.ptr, byref(one), bd, b.ptr, byref(one), yd, y.ptr)
        capi.cudnnActivationForward(h.ptr, ad, byref(one), yd, y.ptr, byref(zero), yd, y.ptr)
    return run, f"algo {int(algo)}"


def fusion(h, rng):
    print("\n## 2. fusion: conv + bias + ReLU, float16 NHWC 32x128x56x56, 128 filters 3x3 (device ms per call)")
    x = nhwc((32, 128, 56, 56), np.float16, rng)
    w = nhwc((128, 128, 3, 3), np.float16, rng)
    b = nhwc((1, 128, 1, 1), np.float16, rng)
    y = nhwc((32, 128, 56, 56), np.float16, rng)
    g = G.Graph(io_dtype="float16", compute_dtype="float32", name="conv_bias_relu")
    tx, tw, tb = g.tensor_like(x, "x"), g.tensor_like(w, "w"), g.tensor_like(b, "b")
    ty = g.relu(g.bias(g.conv_fprop(tx, tw, padding=1), tb)).set_output(True)
    pack = {tx: x, tw: w, tb: b, ty: y}
    res = g.autotune(h, pack, modes=("A", "B"), iters=3)
    run = g.executor(h, tx, tw, tb, ty)
    fused = device_ms(lambda: run(x, w, b, y), h)
    legacy, algo = legacy_conv_bias_relu(h, x, w, b, y)
    three = device_ms(legacy, h)
    print(f"{'graph conv+bias+relu (autotuned ' + g.plan.tag + f', {len(res)} plans timed)':<64} {fused:8.3f} ms")
    print(f"{'legacy conv (' + algo + ') + cudnnAddTensor + cudnnActivationForward':<64} {three:8.3f} ms")
    print(f"{'ratio legacy / fused':<64} {three / fused:8.2f}x")
    if torch is not None:
        torch.backends.cudnn.benchmark = True
        xt = torch.randn(32, 128, 56, 56, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
        wt = torch.randn(128, 128, 3, 3, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
        bt = torch.randn(128, device="cuda", dtype=torch.half)
        F = torch.nn.functional
        t = event_ms(lambda: F.relu(F.conv2d(xt, wt, bt, padding=1)), 20, repeats=5)
        print(f"{'torch relu(conv2d(x, w, b)) channels_last, cudnn.benchmark':<64} {t:8.3f} ms")


def throughput(h, rng):
    print("\n## 3. throughput: 64x256x56x56 float16 NHWC, 256 filters 3x3, pad 1")
    x = nhwc((64, 256, 56, 56), np.float16, rng)
    w = nhwc((256, 256, 3, 3), np.float16, rng)
    y = nhwc((64, 256, 56, 56), np.float16, rng)
    g = G.Graph(io_dtype="float16", compute_dtype="float32", name="big_conv")
    tx, tw = g.tensor_like(x, "x"), g.tensor_like(w, "w")
    ty = g.conv_fprop(tx, tw, padding=1).set_output(True)
    t0 = time.perf_counter()
    res = g.autotune(h, {tx: x, tw: w, ty: y}, modes=("A", "B"), iters=3)
    tune_s = time.perf_counter() - t0
    run = g.executor(h, tx, tw, ty)
    ms = device_ms(lambda: run(x, w, y), h, n=10)
    flops = 2 * 64 * 256 * 256 * 9 * 56 * 56
    print(f"{'graph autotuned ' + g.plan.tag + f' ({len(res)} plans, {tune_s:.1f} s to tune)':<64} {ms:8.3f} ms "
          f"{flops / ms / 1e9:8.1f} TFLOP/s")
    if torch is not None:
        torch.backends.cudnn.benchmark = True
        xt = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
        wt = torch.randn(256, 256, 3, 3, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
        F = torch.nn.functional
        t = event_ms(lambda: F.conv2d(xt, wt, padding=1), 10, repeats=5)
        print(f"{'torch conv2d channels_last, cudnn.benchmark=True':<64} {t:8.3f} ms {flops / t / 1e9:8.1f} TFLOP/s")


def graph_replay(h, rng, iters):
    from cuda.bindings import runtime as rt

    from cudnn_py.core.streams import new_stream
    print("\n## 4. CUDA graph replay: 10 chained small convolutions (1x8x8x8 float32)")
    s = new_stream()
    bufs = [to_device(rng.standard_normal((1, 8, 8, 8)).astype(np.float32)) for _ in range(11)]
    w = to_device(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8)
    with h.on_stream(s):
        g = G.Graph(name="chain")
        tx, tw = g.tensor_like(bufs[0], "x"), g.tensor_like(w, "w")
        ty = g.conv_fprop(tx, tw, padding=1).set_output(True)
        g.build(h)
        run = g.executor(h, tx, tw, ty)
        for i in range(10):
            run(bufs[i], w, bufs[i + 1])
        s.sync()
        rt.cudaStreamBeginCapture(int(s.handle), rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
        for i in range(10):
            run(bufs[i], w, bufs[i + 1])
        err, cg = rt.cudaStreamEndCapture(int(s.handle))
        err, exe = rt.cudaGraphInstantiate(cg, 0)
        sh = int(s.handle)
        replay = host_us(lambda: rt.cudaGraphLaunch(exe, sh), max(iters // 10, 200), s.sync)
        direct = host_us(lambda: [run(bufs[i], w, bufs[i + 1]) for i in range(10)], max(iters // 10, 200), s.sync)
        rt.cudaGraphExecDestroy(exe)
        rt.cudaGraphDestroy(cg)
    print(f"{'replay (cudaGraphLaunch) per convolution':<64} {replay / 10:8.2f} us")
    print(f"{'direct Executor calls per convolution':<64} {direct / 10:8.2f} us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floor-bin", default=None)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--only", default="1,2,3,4")
    args = script_args(ap)
    rng = np.random.default_rng(0)
    with Handle() as h:
        from cudnn_py import library
        lib = library()
        print(f"cuDNN {lib.version_string} from {lib.path}; torch {torch.__version__ if torch else 'absent'}")
        parts = set(args.only.split(","))
        if "1" in parts:
            tiny_conv(h, rng, args.iters, args)
        if "4" in parts:
            graph_replay(h, rng, args.iters)
        if "2" in parts:
            fusion(h, rng)
        if "3" in parts:
            throughput(h, rng)


if __name__ == "__main__":
    # the raw-capi rows call C functions cuDNN 9 deprecates on purpose (the yardstick): no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    main()
