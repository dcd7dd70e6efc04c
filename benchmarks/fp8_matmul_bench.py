"""FP8 matmul through a cudnn-py graph vs torch's ``_scaled_mm`` (prints a table; asserts nothing).

c (M x N, bfloat16) = (a @ b) * descale_a * descale_b with a (M x K, row-major) and b (K x N, column-major) in
float8 e4m3, float32 descale factors, float32 accumulation. cudnn-py: ``Graph.fp8_matmul``, autotuned over every
plan the heuristics offer, run through its executor; torch: ``torch._scaled_mm`` on the same buffers. Device time
from CUDA events: median of ``--repeats`` samples of ``--iters`` back-to-back calls, after a warm-up; TFLOP/s count
2 * M * N * K. The two outputs are compared (relative Frobenius difference), and each against a float64 product
of the same FP8 values on a 256 x 256 corner.

Run: python benchmarks/fp8_matmul_bench.py [--size 8192] [--iters 20] [--repeats 7]
"""
from __future__ import annotations

import argparse
import os
import sys

import ml_dtypes
import numpy as np

try:
    import torch
except ImportError:  # said by script_args, in one line
    torch = None

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cudnn_py.graph as G  # noqa: E402
from cudnn_py.core.handle import Handle  # noqa: E402
from cudnn_py.cli.prerequisites import script_args  # noqa: E402
from cudnn_py.core.memory import DeviceArray  # noqa: E402
from timing import event_ms  # noqa: E402

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def wrap(t, dtype) -> DeviceArray:
    """A DeviceArray over torch tensor ``t``'s memory, read as ``dtype`` (torch's FP8 tensors have no CAI)."""
    return DeviceArray(t.data_ptr(), tuple(t.shape), dtype, t.stride(), device_id=t.get_device(), owner=t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192, help="M = N = K")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    args = script_args(ap, modules=("torch",))
    n = args.size
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = (torch.randn(n, n, device=dev) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, n, device=dev) * 2).to(torch.float8_e4m3fn).t()   # column-major K x N
    sa, sb = torch.tensor(0.5, device=dev), torch.tensor(0.25, device=dev)
    c_torch = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    c_ours = torch.full((n, n), float("nan"), device=dev, dtype=torch.bfloat16)

    h = Handle()
    g = G.Graph(io_dtype="bfloat16", compute_dtype="float32", name="fp8_matmul")
    ga = g.tensor((1, n, n), name="a", dtype=E4M3)
    gb = g.tensor((1, n, n), name="b", dtype=E4M3, strides=(n * n, 1, n))
    da, db = g.tensor((1, 1, 1), name="da", dtype="float32"), g.tensor((1, 1, 1), name="db", dtype="float32")
    c = g.fp8_matmul(ga, gb, descale_a=da, descale_b=db, out_dtype="bfloat16").set_output(True)
    pack = {ga: wrap(a.view(1, n, n), E4M3), gb: wrap(b.unsqueeze(0), E4M3),
            da: wrap(sa.view(1, 1, 1), np.float32), db: wrap(sb.view(1, 1, 1), np.float32),
            c: wrap(c_ours.view(1, n, n), ml_dtypes.bfloat16)}
    g.autotune(h, pack)
    run = g.executor(h, *pack)
    bound = tuple(pack.values())

    def ours():
        run(*bound)

    def theirs():
        torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=c_torch)

    ours()
    theirs()
    torch.cuda.synchronize()
    diff = (c_ours.double() - c_torch.double()).norm() / c_torch.double().norm()
    corner = (a[:256].double().cpu() @ b[:, :256].double().cpu()).numpy() * 0.125
    err = [float(np.linalg.norm(t[:256, :256].double().cpu().numpy() - corner) / np.linalg.norm(corner))
           for t in (c_ours, c_torch)]
    flop = 2.0 * n ** 3
    rows = [(f"cudnn-py graph fp8_matmul ({g.plan.tag})", event_ms(ours, args.iters, args.repeats)),
            ("torch._scaled_mm", event_ms(theirs, args.iters, args.repeats))]
    print(f"FP8 e4m3 matmul {n}x{n}x{n}, bf16 out; {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"cudnn-py vs torch relative difference {diff:.2e}; vs float64 on a 256x256 corner: "
          f"cudnn-py {err[0]:.2e}, torch {err[1]:.2e}")
    for label, ms in rows:
        print(f"{label:<60} {ms:8.3f} ms  {flop / ms / 1e9:8.1f} TFLOP/s")
    h.close()


if __name__ == "__main__":
    main()
