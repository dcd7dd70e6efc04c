"""Convolution through cached graph plans: forward (optionally fused with bias and an activation), backward
data and backward filter. The first call with a new configuration builds a graph and a plan; every later call
with the same shapes, strides, dtypes and parameters is a dict lookup and an :class:`Executor` call.

::

    y = conv_forward(h, x, w, padding=1, bias=b, activation="relu")   # one fused kernel where cuDNN has one
"""
from __future__ import annotations

import numpy as np

from cudnn_py.handle import handle_cache
from cudnn_py.memory import DeviceArray, as_array, empty

from .graph import Graph, _packed_strides

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "ACTIVATIONS", "conv_cache_clear"]

#: activation name -> Graph method applied after the (bias-added) convolution
ACTIVATIONS = ("relu", "gelu", "silu", "tanh", "sigmoid")


def conv_cache_clear(handle) -> None:
    """Forget the convolution plans and executors built for ``handle``."""
    handle_cache(handle, "graph.conv").clear()


def _arr(obj, name) -> DeviceArray:
    return obj if type(obj) is DeviceArray else as_array(obj, name)


def _compute_dtype(dt: np.dtype):
    return "float64" if dt == np.float64 else "float32"


def _out(handle, shape, dtype, strides, out, name):
    if out is not None:
        a = _arr(out, name)
        if a.shape != tuple(shape) or a.dtype != dtype:
            raise ValueError(f"{name} must have shape {tuple(shape)} and dtype {dtype}, got {a.shape} {a.dtype}")
        return out
    order = sorted(range(len(shape)), key=lambda i: -strides[i])
    buf = empty(tuple(shape[i] for i in order), dtype, stream=getattr(handle, "stream", None))
    return DeviceArray(buf.ptr, shape, dtype, strides, device_id=buf.device_id, owner=buf)


def _runner(handle, key, make):
    runners = handle_cache(handle, "graph.conv")
    r = runners.get(key)
    if r is None:
        r = runners[key] = make()
    return r


def _build(g: Graph, handle, tensors, arrays, autotune: bool):
    """Plan ``g`` (heuristics' first plan, or with ``autotune`` the fastest of all plans timed on the call's
    inputs and a scratch output) and return its executor over ``tensors`` (the output last)."""
    if autotune:
        out = tensors[-1]
        scratch = _out(handle, out.shape, out.np_dtype, out.strides, None, out.name)
        g.autotune(handle, {**dict(zip(tensors[:-1], arrays)), out: scratch})
    else:
        g.build(handle)
    return g.executor(handle, *tensors, identity_cache=1)


def _spatial(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def _opt(v, n):
    return None if v is None else _spatial(v, n)


def conv_forward(handle, x, w, *, padding=0, stride=1, dilation=1, bias=None, activation: str | None = None,
                 y=None, alpha: float = 1.0, beta: float = 0.0, compute_dtype=None, post_padding=None,
                 conv_mode="cross_correlation", autotune: bool = False):
    """y = activation(alpha * conv(x, w) + beta * y + bias) as one cached graph; returns y.

    x (N, C, *spatial) and w (K, C/groups, *kernel) in any layout the strides describe (NCHW or NHWC);
    ``bias`` (1, K, 1, 1) (or (K,)); ``activation``: None or one of :data:`ACTIVATIONS`. ``beta`` != 0 needs
    ``y`` (read and overwritten). ``autotune``: time every plan on the first call and keep the fastest."""
    xa, wa = _arr(x, "x"), _arr(w, "w")
    ba = None
    if bias is not None:
        ba = _arr(bias, "bias")
        if ba.ndim == 1:
            ba = ba.reshape(1, ba.shape[0], *([1] * (xa.ndim - 2)))
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None or one of {ACTIVATIONS}, got {activation!r}")
    if beta and y is None:
        raise ValueError("beta != 0 accumulates into y: pass y=")
    nsp = xa.ndim - 2
    key = ("fprop", xa.shape, xa.strides, xa.dtype, wa.shape, wa.strides, wa.dtype,
           _spatial(padding, nsp), _spatial(stride, nsp), _spatial(dilation, nsp),
           None if ba is None else (ba.shape, ba.strides, ba.dtype), activation, float(alpha), float(beta),
           compute_dtype, None if y is None else (_arr(y, "y").strides,), _opt(post_padding, nsp), str(conv_mode),
           autotune)

    def make():
        g = Graph(io_dtype=xa.dtype, compute_dtype=compute_dtype or _compute_dtype(xa.dtype), name="conv_fprop")
        tx, tw = g.tensor_like(xa, "x"), g.tensor_like(wa, "w")
        fused = ba is not None or activation is not None
        out = g.conv_fprop(tx, tw, padding, stride, dilation, alpha=alpha, beta=beta if not fused else 0.0,
                           post_padding=post_padding, conv_mode=conv_mode)
        args, arrays = [tx, tw], [xa, wa]
        if ba is not None:
            tb = g.tensor_like(ba, "bias")
            out = g.bias(out, tb)
            args.append(tb)
            arrays.append(ba)
        if activation is not None:
            out = getattr(g, activation)(out)
        if y is not None:
            ya = _arr(y, "y")
            if ya.shape != out.shape:
                raise ValueError(f"y must have shape {out.shape}, got {ya.shape}")
            out.strides = ya.strides
        out.set_output(True).set_name("y")
        args.append(out)
        return _build(g, handle, args, arrays, autotune), out.shape, out.strides, xa.dtype

    ex, shape, strides, dt = _runner(handle, key, make)
    y = _out(handle, shape, dt, strides, y, "y")
    if ba is None:
        ex(xa, wa, y)
    else:
        ex(xa, wa, ba, y)
    return y


def conv_backward_data(handle, dy, w, *, padding=0, stride=1, dilation=1, dx=None, x_shape=None,
                       alpha: float = 1.0, beta: float = 0.0, compute_dtype=None, post_padding=None,
                       conv_mode="cross_correlation", autotune: bool = False):
    """dx = alpha * conv_bwd_data(dy, w) + beta * dx via a cached graph plan; returns dx."""
    dya, wa = _arr(dy, "dy"), _arr(w, "w")
    if dx is not None and x_shape is None:
        x_shape = _arr(dx, "dx").shape
    nsp = dya.ndim - 2
    key = ("dgrad", dya.shape, dya.strides, dya.dtype, wa.shape, wa.strides, wa.dtype,
           _spatial(padding, nsp), _spatial(stride, nsp), _spatial(dilation, nsp), x_shape, float(alpha),
           float(beta), compute_dtype, None if dx is None else _arr(dx, "dx").strides, _opt(post_padding, nsp),
           str(conv_mode), autotune)

    def make():
        g = Graph(io_dtype=dya.dtype, compute_dtype=compute_dtype or _compute_dtype(dya.dtype), name="conv_dgrad")
        tdy, tw = g.tensor_like(dya, "dy"), g.tensor_like(wa, "w")
        out = g.conv_dgrad(tdy, tw, padding, stride, dilation, x_shape=x_shape, alpha=alpha, beta=beta,
                           post_padding=post_padding, conv_mode=conv_mode)
        if dx is not None:
            out.strides = _arr(dx, "dx").strides
        out.set_output(True).set_name("dx")
        return _build(g, handle, [tdy, tw, out], [dya, wa], autotune), out.shape, out.strides, dya.dtype

    ex, shape, strides, dt = _runner(handle, key, make)
    dx = _out(handle, shape, dt, strides, dx, "dx")
    ex(dya, wa, dx)
    return dx


def conv_backward_filter(handle, dy, x, *, padding=0, stride=1, dilation=1, dw=None, w_shape=None,
                         alpha: float = 1.0, beta: float = 0.0, compute_dtype=None, post_padding=None,
                         conv_mode="cross_correlation", autotune: bool = False):
    """dw = alpha * conv_bwd_filter(dy, x) + beta * dw via a cached graph plan; returns dw."""
    dya, xa = _arr(dy, "dy"), _arr(x, "x")
    if dw is not None and w_shape is None:
        w_shape = _arr(dw, "dw").shape
    nsp = dya.ndim - 2
    key = ("wgrad", dya.shape, dya.strides, dya.dtype, xa.shape, xa.strides, xa.dtype,
           _spatial(padding, nsp), _spatial(stride, nsp), _spatial(dilation, nsp), w_shape, float(alpha),
           float(beta), compute_dtype, None if dw is None else _arr(dw, "dw").strides, _opt(post_padding, nsp),
           str(conv_mode), autotune)

    def make():
        g = Graph(io_dtype=dya.dtype, compute_dtype=compute_dtype or _compute_dtype(dya.dtype), name="conv_wgrad")
        tdy, tx = g.tensor_like(dya, "dy"), g.tensor_like(xa, "x")
        out = g.conv_wgrad(tdy, tx, padding, stride, dilation, w_shape=w_shape, alpha=alpha, beta=beta,
                           post_padding=post_padding, conv_mode=conv_mode)
        if dw is not None:
            out.strides = _arr(dw, "dw").strides
        elif _packed_strides(xa.shape, "NHWC") == xa.strides and xa.ndim >= 4:
            out.strides = _packed_strides(out.shape, "NHWC")
        out.set_output(True).set_name("dw")
        return _build(g, handle, [tdy, tx, out], [dya, xa], autotune), out.shape, out.strides, dya.dtype

    ex, shape, strides, dt = _runner(handle, key, make)
    dw = _out(handle, shape, dt, strides, dw, "dw")
    ex(dya, xa, dw)
    return dw
