"""Attention speed: cudnn-py's ``sdpa`` / ``sdpa_backward`` beside torch's ``scaled_dot_product_attention`` with the
cuDNN and flash backends, in one process on one GPU. Prints a table; asserts nothing.

TFLOP/s count 4 * B * Hq * Sq * Skv * D for the forward (half of it under a causal mask) and 2.5 times that for the
backward; a time is the median over ``--reps`` samples of the device time between events around ``--inner``
back-to-back calls, divided by ``--inner`` (so each binding's host cost overlaps the queued kernels, as in a real
training step), after warm-up. The host row is the wall time per call of a tiny problem (launch-bound: the
binding's own cost).

    python benchmarks/sdpa_bench.py                   # bf16 B4 H16 S4096 D128, and the llama3.1 shape
    python benchmarks/sdpa_bench.py --autotune        # cudnn-py also with autotuned plans
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import cudnn_py
from cudnn_py.ops import sdpa as S

#: (label, B, Hq, Hkv, S, D)
SHAPES = [("B4 H16 S4k D128", 4, 16, 16, 4096, 128), ("llama3.1 B1 H64/8 S4k D128", 1, 64, 8, 4096, 128)]


def median_ms(fn, timing: tuple[int, int, int]) -> float:
    """Median device ms per call of ``fn``; ``timing`` = (warm-up calls, samples, calls per sample)."""
    warmup, reps, inner = timing
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        with cudnn_py.timer() as t:
            for _ in range(inner):
                fn()
        times.append(t.ms / inner)
    return statistics.median(times)


def flops(b, hq, s, d, causal) -> float:
    return 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)


def cudnn_py_case(h, q, k, v, do, causal, autotune, timing) -> tuple[float, float]:
    """(forward ms, backward ms) through the cached-plan entry points, outputs preallocated. Prints the wall
    time of each first call (graph, heuristics, plan build with any runtime compilation, autotuning)."""
    t0 = time.perf_counter()
    o, st = S.sdpa(h, q, k, v, causal=causal, return_stats=True, autotune=autotune)
    cudnn_py.synchronize()
    t1 = time.perf_counter()
    grads = S.sdpa_backward(h, q, k, v, o, do, st, causal=causal, autotune=autotune)
    cudnn_py.synchronize()
    print(f"  first call{' (autotune)' if autotune else ''}{' causal' if causal else ''}: forward "
          f"{(t1 - t0) * 1e3:.0f} ms, backward {(time.perf_counter() - t1) * 1e3:.0f} ms")
    fwd = median_ms(lambda: S.sdpa(h, q, k, v, causal=causal, o=o, stats=st, autotune=autotune), timing)
    bwd = median_ms(lambda: S.sdpa_backward(h, q, k, v, o, do, st, causal=causal, dq=grads[0], dk=grads[1],
                                            dv=grads[2], autotune=autotune), timing)
    return fwd, bwd


def torch_case(torch, backend, q, k, v, do, causal, timing) -> tuple[float, float]:
    """(forward ms, backward ms) of torch's SDPA on one backend; grouped-query K/V through ``enable_gqa`` where
    the backend takes it, else repeated to Q's heads (same FLOPs, more K/V traffic)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    hq, hk = q.shape[1], k.shape[1]
    kw = {}
    if hk != hq:
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            kw = {"enable_gqa": True}
        except RuntimeError:
            k, v = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
    with sdpa_kernel(backend):
        fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw), timing)
        qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, **kw)
        bwd = median_ms(lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True), timing)
    return fwd, bwd


def host_us(fn, calls: int = 2000) -> float:
    for _ in range(50):
        fn()
    cudnn_py.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cudnn_py.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--inner", type=int, default=10, help="calls per timed sample")
    ap.add_argument("--autotune", action="store_true", help="also time cudnn-py with autotuned plans")
    ap.add_argument("--no-torch", action="store_true", help="cudnn-py only")
    args = ap.parse_args(argv)
    timing = (args.warmup, args.reps, max(1, args.inner))
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch is not installed: cudnn-py only")
    h = cudnn_py.Handle()
    print(f"cuDNN {cudnn_py.version()}, {h.device.name if hasattr(h.device, 'name') else 'GPU'}"
          + (f", torch {torch.__version__}" if torch else ""))
    rows = []
    for label, b, hq, hk, s, d in SHAPES:
        if torch is not None:
            mk = lambda *sh: torch.randn(*sh, device="cuda", dtype=torch.bfloat16)  # noqa: E731
        else:
            import ml_dtypes
            rng = np.random.default_rng(0)
            mk = lambda *sh: cudnn_py.to_device(rng.standard_normal(sh).astype(ml_dtypes.bfloat16))  # noqa: E731
        q, k, v, do = mk(b, hq, s, d), mk(b, hk, s, d), mk(b, hk, s, d), mk(b, hq, s, d)
        for causal in (False, True):
            f = flops(b, hq, s, d, causal)
            peers = {}
            for tuned in (False, True) if args.autotune else (False,):
                who = "cudnn-py" + (" autotuned" if tuned else "")
                try:
                    peers[who] = cudnn_py_case(h, q, k, v, do, causal, tuned, timing)
                except (RuntimeError, ValueError, TypeError) as e:  # a configuration this cuDNN refuses
                    print(f"{who} {label}: {e}")
            if torch is not None:
                from torch.nn.attention import SDPBackend
                for name, be in (("torch cuDNN", SDPBackend.CUDNN_ATTENTION), ("torch flash",
                                                                                SDPBackend.FLASH_ATTENTION)):
                    try:
                        peers[name] = torch_case(torch, be, q, k, v, do, causal, timing)
                    except RuntimeError as e:  # a backend that refuses this shape
                        print(f"{name} {label}: {str(e).splitlines()[0]}")
            for who, (fwd, bwd) in peers.items():
                rows.append((label + (" causal" if causal else ""), who, fwd, f / fwd / 1e9, bwd,
                             2.5 * f / bwd / 1e9, 3.5 * f / (fwd + bwd) / 1e9))
            del peers
    print(f"\n{'case':34s} {'who':20s} {'fwd ms':>8s} {'TFLOP/s':>8s} {'bwd ms':>8s} {'TFLOP/s':>8s} "
          f"{'fwd+bwd TFLOP/s':>16s}")
    for case, who, fwd, tf, bwd, tb, tfb in rows:
        print(f"{case:34s} {who:20s} {fwd:8.3f} {tf:8.1f} {bwd:8.3f} {tb:8.1f} {tfb:16.1f}")

    # host time per call of a tiny problem (the GPU is idle most of the time: the binding's cost shows)
    if torch is not None:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        S.sdpa(h, q, q, q, o=o)
        ours = host_us(lambda: S.sdpa(h, q, q, q, o=o))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            theirs = host_us(lambda: F.scaled_dot_product_attention(q, q, q))
        print(f"\nhost time per call, B1 H1 S128 D64 forward: cudnn-py {ours:.1f} us, torch cuDNN {theirs:.1f} us")


if __name__ == "__main__":
    main()
