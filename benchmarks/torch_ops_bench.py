"""cudnn-py's torch custom ops vs torch's own: host time per eager call, device time (prints tables; asserts nothing).

Host time: a tiny call (attention B1 H1 S64 D64 bf16; layer/RMS norm 64 x 512 bf16) queued ``--calls`` times behind
a sleep kernel (so the GPU never holds the host back), wall time per call, median of ``--repeats`` rounds with the
peers interleaved (one round times every peer once, in rotating order). Peers: torch's
``F.scaled_dot_product_attention`` (its own backend choice, and the cuDNN backend forced), the drop-in
``cudnn_py.torch.scaled_dot_product_attention``, ``cudnn_py.torch.sdpa``, the bare op
``torch.ops.cudnn_py.sdpa_fwd`` (through the dispatcher), the core entry point ``cudnn_py.sdpa`` on torch tensors
and, where it is installed, cudnn-frontend's torch op ``cudnn.sdpa_torch``; forward + backward through autograd
the same way, beside the training ops ``sdpa_fwd`` (with statistics) then ``sdpa_bwd`` called through
``torch.ops`` without autograd (the dispatcher path a compiled training step takes). The forward table ends with the issue's bars: ``cudnn_py.torch.sdpa`` at most 1.5x torch's
``F.scaled_dot_product_attention`` and 0.25x ``cudnn.sdpa_torch``, same run.

Device time: CUDA events around ``--iters`` calls queued behind a sleep kernel, median of repeats (benchmarks/
timing.py), at a training shape (attention B4 H16 S2048 D128 bf16, causal; norms 8192 x 4096 bf16).

Run: python benchmarks/torch_ops_bench.py [--calls 200] [--repeats 15] [--iters 20]
"""
from __future__ import annotations

import argparse
import statistics
import time

try:
    import torch
    import torch.nn.functional as F

    import cudnn_py.torch as ct
except ImportError:  # said by script_args, in one line
    torch = None

import cudnn_py
from cudnn_py.cli.prerequisites import script_args
from timing import event_ms

_SLEEP = int(1.5e9 * 0.05)  # ~50 ms of GPU time: longer than queueing a round of calls


def host_us(peers: dict, calls: int, repeats: int) -> dict[str, float]:
    """Median host microseconds per call of each peer, interleaved."""
    names = list(peers)
    for fn in peers.values():  # warm-up: plans built, caches filled
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn = peers[n]
            torch.cuda._sleep(_SLEEP)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[n].append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
    return {n: statistics.median(v) for n, v in times.items()}


def frontend_sdpa():
    """cudnn-frontend's ``cudnn.sdpa_torch``, or None where it is not installed or does not load."""
    try:
        import cudnn
        return cudnn.sdpa_torch
    except Exception:  # noqa: BLE001 - not installed, or its library does not load: the peer is left out
        return None


def attention_peers(b, h, s, d, causal: bool, backward: bool) -> dict:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
               for _ in range(3))
    do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    cudnn_backend = torch.nn.attention.SDPBackend.CUDNN_ATTENTION
    handle = cudnn_py.Handle()

    def torch_cudnn():
        with torch.nn.attention.sdpa_kernel(cudnn_backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    peers = {"torch F.sdpa (auto)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
             "torch F.sdpa (cuDNN)": torch_cudnn,
             "cudnn_py.torch drop-in": lambda: ct.scaled_dot_product_attention(q, k, v, is_causal=causal),
             "cudnn_py.torch.sdpa": lambda: ct.sdpa(q, k, v, causal=causal)}
    fe = frontend_sdpa()
    if not backward:
        scale = d ** -0.5
        peers["op cudnn_py::sdpa_fwd"] = lambda: torch.ops.cudnn_py.sdpa_fwd(
            q, k, v, None, None, None, None, None, None, None, None, scale, causal, False, None, None, False, 0.0, None,
            None, False)
        peers["cudnn_py.sdpa (core)"] = lambda: cudnn_py.sdpa(handle, q, k, v, causal=causal)
        if fe is not None:
            peers["cudnn-frontend cudnn.sdpa_torch"] = lambda: fe(q, k, v, is_causal=causal)
        return peers
    peers = {n: (lambda f=f: f().backward(do)) for n, f in peers.items()}
    fwd, bwd = torch.ops.cudnn_py.sdpa_fwd.default, torch.ops.cudnn_py.sdpa_bwd.default
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    tail = (d ** -0.5, causal, False, None, None, False, 0.0, None, None)

    def ops_fwd_bwd():  # as a compiled training step calls them: no autograd, the statistics kept for the backward
        o, stats = fwd(qd, kd, vd, None, None, None, None, None, None, None, None, *tail, True)
        return bwd(do, qd, kd, vd, o, stats, None, None, None, None, None, None, None, None, *tail, False, False)
    peers["ops sdpa_fwd (stats) + sdpa_bwd"] = ops_fwd_bwd
    return peers


def norm_peers(rows, hidden, backward: bool) -> dict:
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    w, b = (torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=backward) for _ in range(2))
    dy = torch.randn_like(x)
    peers = {"torch F.layer_norm": lambda: F.layer_norm(x, (hidden,), w, b),
             "cudnn_py.torch.layer_norm": lambda: ct.layer_norm(x, w, b),
             "torch F.rms_norm": lambda: F.rms_norm(x, (hidden,), w),
             "cudnn_py.torch.rms_norm": lambda: ct.rms_norm(x, w)}
    return peers if not backward else {n: (lambda f=f: f().backward(dy)) for n, f in peers.items()}


def table(title: str, rows: dict[str, float], unit: str) -> None:
    print(f"\n{title}")
    width = max(map(len, rows))
    for n, t in rows.items():
        print(f"  {n:<{width}}  {t:9.1f} {unit}")


def main() -> None:
    p = argparse.ArgumentParser(prog="torch_ops_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200, help="calls per host-time round")
    p.add_argument("--repeats", type=int, default=15, help="rounds (host) / event repeats (device)")
    p.add_argument("--iters", type=int, default=20, help="calls per device-time repeat")
    args = script_args(p, modules=("torch",))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {cudnn_py.version()}")
    for bwd in (False, True):
        what = "forward + backward" if bwd else "forward"
        host = host_us(attention_peers(1, 1, 64, 64, True, bwd), args.calls, args.repeats)
        table(f"host time per eager call, attention {what}, B1 H1 S64 D64 bf16 causal", host, "us")
        if not bwd:
            ours = host["cudnn_py.torch.sdpa"]
            ratio = ours / host["torch F.sdpa (auto)"]
            line = f"  bars: cudnn_py.torch.sdpa / torch F.sdpa (auto) = {ratio:.2f} (at most 1.5)"
            fe = host.get("cudnn-frontend cudnn.sdpa_torch")
            if fe:
                line += f"; / cudnn.sdpa_torch = {ours / fe:.2f} (at most 0.25)"
            print(line)
        table(f"host time per eager call, norms {what}, 64 x 512 bf16",
              host_us(norm_peers(64, 512, bwd), args.calls, args.repeats), "us")
    for bwd in (False, True):
        what = "forward + backward" if bwd else "forward"
        peers = attention_peers(4, 16, 2048, 128, True, bwd)
        flops = 4 * 4 * 16 * 2048 * 2048 * 128 / 2 * (3.5 if bwd else 1)  # causal: half the scores
        ms = {n: event_ms(f, args.iters, args.repeats, sleep=True) for n, f in peers.items()}
        table(f"device time, attention {what}, B4 H16 S2048 D128 bf16 causal (TFLOP/s)",
              {n: flops / t / 1e9 for n, t in ms.items()}, "TFLOP/s")
        table(f"device time, norms {what}, 8192 x 4096 bf16",
              {n: event_ms(f, args.iters, args.repeats, sleep=True) * 1e3 for n, f in
               norm_peers(8192, 4096, bwd).items()}, "us")


if __name__ == "__main__":
    main()
