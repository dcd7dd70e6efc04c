"""Per-call host overhead of the core layer (handles, arrays, descriptors), as a table of medians.

    python benchmarks/core_overhead.py            # needs a GPU; rows that need torch are skipped without it

Each row times a callable over many calls (after a warm-up) and prints the median per call in microseconds;
``ctypes call`` (a raw cuDNN call through the generated layer) is the yardstick.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import time
import warnings

import numpy as np

import cudnn_py as cudnn
from cudnn_py import capi
from cudnn_py.cli.prerequisites import script_args
from cudnn_py.core.descriptors import TensorDescriptor
from cudnn_py.core.memory import as_array


def per_call_us(fn, calls: int = 2000, repeats: int = 7) -> float:
    for _ in range(100):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def main(argv=None) -> None:
    script_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]), argv)
    h = cudnn.Handle()
    x = cudnn.to_device(np.random.default_rng(0).standard_normal((8, 3, 32, 32)).astype(np.float32))
    desc = TensorDescriptor.shared(x.shape, x.dtype)
    one = ctypes.c_float(1.0)
    rows = [
        ("ctypes call: cudnnSetTensor 8x3x32x32", lambda: capi.cudnnSetTensor(h.ptr, desc.ptr, x.ptr, ctypes.byref(one))),
        ("Handle.ptr", lambda: h.ptr),
        ("as_array(DeviceArray)", lambda: as_array(x, "x")),
        ("TensorDescriptor.shared(shape, dtype) (cached)", lambda: TensorDescriptor.shared(x.shape, x.dtype)),
        ("TensorDescriptor.for_array(array) (cached)", lambda: TensorDescriptor.for_array(x)),
        ("Convolution(1, 1).descriptor() (cached)", lambda: cudnn.Convolution(1, 1).descriptor()),
        ("empty((8, 16, 32, 32), float32)", lambda: cudnn.empty((8, 16, 32, 32), np.float32)),
        ("workspace.get(1 MiB) (reused)", lambda: h.workspace.get(1 << 20, h.stream)),
        ("TensorDescriptor(...) uncached create+destroy", lambda: cudnn.TensorDescriptor(x.shape, x.dtype).close()),
    ]
    try:
        import torch

        t = torch.randn(8, 3, 32, 32, device="cuda")
        rows.append(("as_array(torch.Tensor)", lambda: as_array(t, "t")))
        rows.append(("torch.from_dlpack(DeviceArray)", lambda: torch.from_dlpack(x)))
    except ImportError:
        pass
    print(f"{'operation':<48} {'us/call':>9}")
    for name, fn in rows:
        print(f"{name:<48} {per_call_us(fn):>9.2f}")
    h.synchronize()
    h.close()


if __name__ == "__main__":
    # the raw-capi rows call C functions cuDNN 9 deprecates on purpose (the yardstick): no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    main()
