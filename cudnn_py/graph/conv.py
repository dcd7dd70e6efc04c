"""Convolution through cached graph plans: forward (optionally fused with bias and an activation), backward
data and backward filter. The first call with a new configuration builds a graph and a plan; every later call
with the same shapes, strides, dtypes and parameters is a dict lookup and an :class:`Executor` call.

::

    y = conv_forward(h, x, w, padding=1, bias=b, activation="relu")   # one fused kernel where cuDNN has one
"""
from __future__ import annotations

import numpy as np

from cudnn_py.descriptors import _ints
from cudnn_py.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.caches import handle_cache
from cudnn_py.memory import DeviceArray, as_array, empty

from .execute import _handle_device
from .errors import GraphNotSupportedError
from .graph import Graph, _packed_strides

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "ACTIVATIONS", "DTYPES", "conv_cache_clear"]

#: activation name -> Graph method applied after the (bias-added) convolution
ACTIVATIONS = ("relu", "gelu", "silu", "tanh", "sigmoid")

#: data dtypes these calls run, each checked against a float64 reference on the GPU (tests/matrix.py); anything else
#: is refused before a graph is built
DTYPES = ("float32", "float16", "bfloat16", "float64")


def _check_dtypes(kind: str, dtypes, compute_dtype) -> None:
    """Refuse data or compute dtypes these graph convolutions are not verified for, before any graph is built:
    one data dtype from :data:`DTYPES`; compute float32 (float64 for float64 data, cuDNN's only double engines)."""
    names = {name: np.dtype(dt).name for name, dt in dtypes}
    for name, dname in names.items():
        if dname not in DTYPES:
            raise InvalidTypeError(f"{kind}: {name} is {dname}; the graph convolution runs {', '.join(DTYPES)} data")
    data = names[next(iter(names))]
    if compute_dtype is not None:
        allowed = ("float64",) if data == "float64" else ("float32",)
        cname = numpy_dtype(cudnn_dtype(compute_dtype)).name
        if cname not in allowed:
            raise InvalidTypeError(f"{kind}: compute_dtype {cname} with {data} data has no verified engine; leave it "
                                   f"None "
                            f"({allowed[0]})")


def conv_cache_clear(handle) -> None:
    """Forget the convolution plans and executors built for ``handle``."""
    handle_cache(handle, "graph.conv").clear()


def _arr(obj, name) -> DeviceArray:
    return obj if type(obj) is DeviceArray else as_array(obj, name)


def _compute_dtype(dt: np.dtype):
    return "float64" if dt == np.float64 else "float32"


def _conv_key(nsp: int, padding, stride, dilation, post_padding) -> tuple:
    """The convolution parameters checked and as tuples (part of every cache key)."""
    return (_ints(padding, nsp, "padding", 0), _ints(stride, nsp, "stride", 1), _ints(dilation, nsp, "dilation", 1),
            None if post_padding is None else _ints(post_padding, nsp, "post_padding", 0))


def _out(handle, shape, dtype, strides, out: DeviceArray | None, name) -> DeviceArray:
    """``out`` checked against the plan's output (its strides are in the cache key; the executor checks the rest),
    or a new array with those strides on the handle's device."""
    if out is not None:
        if out.shape != tuple(shape) or out.dtype != dtype:
            raise InvalidValueError(f"{name} must have shape {tuple(shape)} and dtype {dtype}, got {out.shape} "
                                    f"{out.dtype}")
        return out
    order = sorted(range(len(shape)), key=lambda i: -strides[i])
    buf = empty(tuple(shape[i] for i in order), dtype, stream=getattr(handle, "stream", None),
                device=_handle_device(handle))
    return DeviceArray(buf.ptr, shape, dtype, strides, device_id=buf.device_id, owner=buf)


def _runner(handle, key, make):
    runners = handle_cache(handle, "graph.conv")
    r = runners.get(key)
    if r is None:
        r = runners[key] = make()
    return r


def _autotune(g: Graph, handle, pack: dict) -> None:
    """Autotune ``g`` on ``pack`` over the plans of heuristics modes A and B (timing every fallback engine too
    costs seconds and never wins), or over the fallback plans when A and B have none. The cached entry points'
    autotuning (convolution, the operation modules' graph paths, attention) goes through here."""
    try:
        g.autotune(handle, pack, modes=("A", "B"))
    except GraphNotSupportedError:
        g.autotune(handle, pack, modes=("FALLBACK",))


def _build(g: Graph, handle, tensors, arrays, autotune: bool):
    """Plan ``g`` (heuristics' first plan, or with ``autotune`` the fastest of all plans timed on the call's
    inputs and a scratch output) and return its executor over ``tensors`` (the output last)."""
    if autotune:
        out = tensors[-1]
        scratch = _out(handle, out.shape, out.np_dtype, out.strides, None, out.name)
        _autotune(g, handle, {**dict(zip(tensors[:-1], arrays)), out: scratch})
    else:
        g.build(handle)
    return g.executor(handle, *tensors, identity_cache=1)


def conv_forward(handle, x, w, *, padding=0, stride=1, dilation=1, bias=None, activation: str | None = None,
                 y=None, alpha: float = 1.0, beta: float = 0.0, compute_dtype=None, post_padding=None,
                 conv_mode="cross_correlation", autotune: bool = False):
    """y = activation(alpha * conv(x, w) + beta * y + bias) as one cached graph; returns y.

    x (N, C, *spatial) and w (K, C/groups, *kernel) in any layout the strides describe (NCHW or NHWC);
    ``bias`` (1, K, 1, 1) (or (K,)); ``activation``: None or one of :data:`ACTIVATIONS`. ``beta`` != 0 needs
    ``y`` (read and overwritten). ``autotune``: time every plan on the first call and keep the fastest."""
    xa, wa = _arr(x, "x"), _arr(w, "w")
    ya = None if y is None else _arr(y, "y")
    ba = None
    if bias is not None:
        ba = _arr(bias, "bias")
        if ba.ndim == 1:
            ba = ba.reshape(1, ba.shape[0], *([1] * (xa.ndim - 2)))
    if activation is not None and activation not in ACTIVATIONS:
        raise InvalidValueError(f"activation must be None or one of {ACTIVATIONS}, got {activation!r}")
    alpha, beta = Graph._float(alpha, "alpha"), Graph._float(beta, "beta")
    if beta and y is None:
        raise InvalidValueError("beta != 0 accumulates into y: pass y=")
    key = ("fprop", xa.shape, xa.strides, xa.dtype, wa.shape, wa.strides, wa.dtype,
           _conv_key(xa.ndim - 2, padding, stride, dilation, post_padding),
           None if ba is None else (ba.shape, ba.strides, ba.dtype), activation, float(alpha), float(beta),
           compute_dtype, None if ya is None else ya.strides, str(conv_mode), autotune)

    def make():
        _check_dtypes("conv_forward", (("x", xa.dtype), ("w", wa.dtype)) + (() if ba is None else (("bias", ba.dtype),))
                      + (() if ya is None else (("y", ya.dtype),)), compute_dtype)
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
        if ya is not None:
            if ya.shape != out.shape:
                raise InvalidValueError(f"y must have shape {out.shape}, got {ya.shape}")
            out.strides = ya.strides
        out.set_output(True).set_name("y")
        args.append(out)
        return _build(g, handle, args, arrays, autotune), out.shape, out.strides, xa.dtype

    ex, shape, strides, dt = _runner(handle, key, make)
    ya = _out(handle, shape, dt, strides, ya, "y")
    if ba is None:
        ex(xa, wa, ya)
    else:
        ex(xa, wa, ba, ya)
    return ya if y is None else y


def _backward(kind: str, handle, dy, other, out, out_shape, *, padding, stride, dilation, alpha, beta,
              compute_dtype, post_padding, conv_mode, autotune):
    """Backward data (``kind='dgrad'``: other = w, out = dx) or filter (``'wgrad'``: other = x, out = dw)."""
    other_name, out_name, shape_arg = ("w", "dx", "x_shape") if kind == "dgrad" else ("x", "dw", "w_shape")
    dya, oa = _arr(dy, "dy"), _arr(other, other_name)
    outa = None if out is None else _arr(out, out_name)
    if out_shape is None and outa is not None:
        out_shape = outa.shape
    out_shape = None if out_shape is None else Graph._shape(out_shape, shape_arg)
    alpha, beta = Graph._float(alpha, "alpha"), Graph._float(beta, "beta")
    key = (kind, dya.shape, dya.strides, dya.dtype, oa.shape, oa.strides, oa.dtype,
           _conv_key(dya.ndim - 2, padding, stride, dilation, post_padding), out_shape, float(alpha), float(beta),
           compute_dtype, None if outa is None else outa.strides, str(conv_mode), autotune)

    def make():
        _check_dtypes(f"conv_{kind}", (("dy", dya.dtype), (other_name, oa.dtype))
                      + (() if outa is None else ((out_name, outa.dtype),)), compute_dtype)
        g = Graph(io_dtype=dya.dtype, compute_dtype=compute_dtype or _compute_dtype(dya.dtype), name=f"conv_{kind}")
        tdy, to = g.tensor_like(dya, "dy"), g.tensor_like(oa, other_name)
        res = getattr(g, f"conv_{kind}")(tdy, to, padding, stride, dilation, alpha=alpha, beta=beta,
                                         post_padding=post_padding, conv_mode=conv_mode, **{shape_arg: out_shape})
        if outa is not None:
            res.strides = outa.strides
        elif kind == "wgrad" and oa.ndim >= 4 and _packed_strides(oa.shape, "NHWC") == oa.strides:
            res.strides = _packed_strides(res.shape, "NHWC")  # channels-last x: channels-last dw
        res.set_output(True).set_name(out_name)
        return _build(g, handle, [tdy, to, res], [dya, oa], autotune), res.shape, res.strides, dya.dtype

    ex, shape, strides, dt = _runner(handle, key, make)
    outa = _out(handle, shape, dt, strides, outa, out_name)
    ex(dya, oa, outa)
    return outa if out is None else out


def conv_backward_data(handle, dy, w, *, padding=0, stride=1, dilation=1, dx=None, x_shape=None,
                       alpha: float = 1.0, beta: float = 0.0, compute_dtype=None, post_padding=None,
                       conv_mode="cross_correlation", autotune: bool = False):
    """dx = alpha * conv_bwd_data(dy, w) + beta * dx via a cached graph plan; returns dx."""
    return _backward("dgrad", handle, dy, w, dx, x_shape, padding=padding, stride=stride, dilation=dilation,
                     alpha=alpha, beta=beta, compute_dtype=compute_dtype, post_padding=post_padding,
                     conv_mode=conv_mode, autotune=autotune)


def conv_backward_filter(handle, dy, x, *, padding=0, stride=1, dilation=1, dw=None, w_shape=None,
                         alpha: float = 1.0, beta: float = 0.0, compute_dtype=None, post_padding=None,
                         conv_mode="cross_correlation", autotune: bool = False):
    """dw = alpha * conv_bwd_filter(dy, x) + beta * dw via a cached graph plan; returns dw."""
    return _backward("wgrad", handle, dy, x, dw, w_shape, padding=padding, stride=stride, dilation=dilation,
                     alpha=alpha, beta=beta, compute_dtype=compute_dtype, post_padding=post_padding,
                     conv_mode=conv_mode, autotune=autotune)
