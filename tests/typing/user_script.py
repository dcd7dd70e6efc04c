"""A short user script written against cudnn_py's public API with type annotations; mypy must find no error.

tests/test_typing.py runs mypy on it (it is never executed, so it needs no GPU).
"""
from __future__ import annotations

import numpy as np

import cudnn_py as cudnn


def pool_and_time(x_host: np.ndarray, h: cudnn.Handle) -> tuple[np.ndarray, float]:
    x: cudnn.DeviceArray = cudnn.to_device(x_host, h.stream)
    y = cudnn.empty((x.shape[0], x.shape[1], x.shape[2] // 2, x.shape[3] // 2), x.dtype, h.stream)
    y.fill_(float("nan"))
    with cudnn.timer(h.stream) as t:
        cudnn.pooling_forward(h, cudnn.Pooling("max", window=2, stride=2), x, y=y)
    ms: float | None = t.ms
    return y.to_numpy(), ms if ms is not None else 0.0


def main() -> int:
    major, minor, patch = cudnn.version()
    print(f"cuDNN {major}.{minor}.{patch}, cudnn-py {cudnn.__version__}")
    try:
        h = cudnn.default_handle()
    except cudnn.NoDeviceError as e:
        print(f"no GPU: {e}")
        return 1
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    y, ms = pool_and_time(x, h)
    s = cudnn.new_stream(h.device)
    with h.on_stream(s):
        z = cudnn.zeros(4, np.float16, s).reshape(2, 2)
        w = cudnn.empty_like(z)
        w.copy_(z, s)
    cudnn.synchronize(s)
    view: cudnn.DeviceArray = cudnn.as_array(w, "w", dtype=np.float16, ndim=2)
    ws = cudnn.Workspace(cap=1 << 20, device=h.device)
    ptr: int = ws.get(4096, h.stream)
    ws.release()
    with cudnn.Handle(h.device) as explicit:
        explicit.synchronize()
    try:
        cudnn.empty(1 << 62)
    except cudnn.CudaOutOfMemoryError as e:
        print(e.function, e.code, e.name)
    except cudnn.CudaError:
        raise
    red = cudnn.reduce_tensor(h, "max", view, indices=True)  # the flag's Literal picks the overload
    where: cudnn.DeviceArray = red.indices
    total: cudnn.DeviceArray = cudnn.reduce_tensor(h, "add", view)
    print(y.shape, ms, view.nbytes, ptr, cudnn.library().path, where.shape, total.shape)
    return 0


def attention(h: cudnn.Handle, q: cudnn.DeviceArray, k: cudnn.DeviceArray, v: cudnn.DeviceArray) -> float:
    """The attention entry points typed with their options and outputs (tuples unpack, fields are arrays)."""
    o: cudnn.DeviceArray = cudnn.sdpa(h, q, k, v, causal=True, scale=0.125, dropout=0.0)
    out, stats = cudnn.sdpa(h, q, k, v, cudnn.SdpaOptions(causal=True), return_stats=True)
    assert stats is not None
    dq, dk, dv = cudnn.sdpa_backward(h, q, k, v, out, o, stats, causal=True)
    grads = cudnn.sdpa_backward(h, q, k, v, out, o, stats, bias=q, return_dbias=True, left_bound=8)
    attn = cudnn.Sdpa(h, q, k, v, alibi=True, causal=True)
    attn.plan()
    g = cudnn.Graph(io_dtype="float16")
    tq = g.tensor(q.shape, "float16")
    to, ts = g.sdpa(tq, tq, tq, causal=True, diagonal_alignment="bottom_right")
    ts.set_output(True)
    gq, gk, gv = g.sdpa_backward(tq, tq, tq, to, to, ts, causal=True)
    y = cudnn.graph.conv_forward(h, q, k, padding=(1, 1), stride=1, activation="relu")
    return float(dq.nbytes + dk.nbytes + dv.nbytes + grads.dbias.nbytes + attn.execute().o.nbytes + gq.ndim
                 + y.nbytes)
