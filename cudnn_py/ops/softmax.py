"""Softmax, forward and backward: fast, accurate and log; over each instance or over channels.

::

    p = softmax_forward(h, x)                                      # accurate, over C, p allocated
    logp = softmax_forward(h, x, algo="log", mode="instance")      # log-softmax over C, H, W per N
    dx = softmax_backward(h, p, dp)                                # from the forward's output

``mode="channel"`` normalises over C for each N and spatial position; ``"instance"`` over every dimension but N.
``algo``: ``"fast"`` (no max subtraction), ``"accurate"`` or ``"log"``. x is N, C, *spatial with 2 to 8
dimensions, seen as 4-D (trailing spatial dimensions merged: they must be packed relative to each other).
"""
from __future__ import annotations

import math

from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py import capi
from cudnn_py.core.descriptors import TensorDescriptor
from cudnn_py.core.handle import Handle
from cudnn_py.ops._common import Out, check_array, desc, enum_arg, launch, output, scalars, tensor_desc
from cudnn_py.calls.prepared import prepared
from cudnn_py.errors import InvalidValueError

__all__ = ["softmax_forward", "softmax_backward", "SOFTMAX_ALGOS", "SOFTMAX_MODES"]

SOFTMAX_ALGOS = {"fast": capi.CUDNN_SOFTMAX_FAST, "accurate": capi.CUDNN_SOFTMAX_ACCURATE,
                 "log": capi.CUDNN_SOFTMAX_LOG}
SOFTMAX_MODES = {"instance": capi.CUDNN_SOFTMAX_MODE_INSTANCE, "channel": capi.CUDNN_SOFTMAX_MODE_CHANNEL}


def _desc4(a, name: str) -> TensorDescriptor:
    """A 4-D descriptor for an N, C, *spatial array: missing dims as 1, dims after the 4th merged into it."""
    if a.ndim < 2:
        raise InvalidValueError(f"softmax needs N and C dimensions (2 to 8 dims); {name} has shape {a.shape}")
    if a.ndim <= 4:
        return desc(a)
    tail = [(n, s) for n, s in zip(a.shape[3:], a.strides[3:]) if n != 1]
    if any(s0 != s1 * n1 for (_, s0), (n1, s1) in zip(tail, tail[1:])):
        raise InvalidValueError(f"{name} (shape {a.shape}, strides {a.strides}) has trailing spatial dimensions that "
                                f"are not packed together; softmax runs on a 4-D view: make it contiguous first")
    inner = tail[-1][1] if tail else 1
    return tensor_desc(a.shape[:3] + (math.prod(a.shape[3:]),), a.dtype, a.strides[:3] + (inner,))


def _algo_mode(algo, mode):
    return (enum_arg(algo, SOFTMAX_ALGOS, capi.cudnnSoftmaxAlgorithm_t, "softmax algo"),
            enum_arg(mode, SOFTMAX_MODES, capi.cudnnSoftmaxMode_t, "softmax mode"))


@prepared(inputs=("x",), outputs=("y",), scalars=("alpha", "beta"), moved=("y",))
def softmax_forward(handle: Handle, x: DeviceArrayLike, *, y: Out | None = None,
                    algo: str | int = "accurate", mode: str | int = "channel", alpha: float = 1.0,
                    beta: float = 0.0) -> DeviceArray | Out:
    """``y = alpha * softmax(x) + beta * y`` (``cudnnSoftmaxForward``); returns y (allocated if not given)."""
    a, m = _algo_mode(algo, mode)
    xa = check_array(x, "x", handle, floating=True)
    xd = _desc4(xa, "x")
    ya = output(y, "y", handle, xa.shape, xa.dtype, like=xa)
    yd = _desc4(ya, "y")
    al, be = scalars(xa.dtype, alpha, beta)
    launch(handle, capi.cudnnSoftmaxForward, handle.ptr, a, m, al, xd, xa, be, yd, ya)
    return ya if y is None else y


@prepared(inputs=("y", "dy"), outputs=("dx",), scalars=("alpha", "beta"), moved=("dx",))
def softmax_backward(handle: Handle, y: DeviceArrayLike, dy: DeviceArrayLike, *,
                     dx: Out | None = None, algo: str | int = "accurate", mode: str | int = "channel",
                     alpha: float = 1.0, beta: float = 0.0) -> DeviceArray | Out:
    """``dx = alpha * dL/dx + beta * dx`` from the forward's output y and its gradient dy (``cudnnSoftmaxBackward``).

    ``algo`` and ``mode`` must be the forward's (for ``"log"``, y is the log-probabilities).
    """
    a, m = _algo_mode(algo, mode)
    ya = check_array(y, "y", handle, floating=True)
    dya = check_array(dy, "dy", handle, dtype=ya.dtype, shape=ya.shape)
    yd, dyd = _desc4(ya, "y"), _desc4(dya, "dy")
    dxa = output(dx, "dx", handle, ya.shape, ya.dtype, like=dya)
    dxd = _desc4(dxa, "dx")
    al, be = scalars(ya.dtype, alpha, beta)
    launch(handle, capi.cudnnSoftmaxBackward, handle.ptr, a, m, al, yd, ya, dyd, dya, be, dxd, dxa)
    return dxa if dx is None else dx
