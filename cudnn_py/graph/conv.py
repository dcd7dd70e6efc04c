"""Convolution as backend-API graphs: forward (optionally fused with bias and an activation), backward data and
backward filter, each a prepared function (a repeat call replays the plan's execution)::

    y = conv_forward(h, x, w, padding=1, bias=b, activation="relu")   # one fused kernel where cuDNN has one

:func:`convolution` is the ``engine="graph"`` of :mod:`cudnn_py.ops.conv_calls`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from cudnn_py.clib import recording
from cudnn_py.calls.algorithms import is_choice
from cudnn_py.core.args import float_arg, shape_arg
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike, Out, as_array
from cudnn_py.core.conv_layout import logical, physical, unit_height
from cudnn_py.calls.prepared import forget, prepared

from .graph import DataTypeLike, Graph, packed_strides
from .runner import Runner, new_output, plan_graph

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "convolution", "ACTIVATIONS", "DTYPES",
           "conv_cache_clear", "ROUTE"]

#: activation name -> Graph method applied after the (bias-added) convolution
ACTIVATIONS = ("relu", "gelu", "silu", "tanh", "sigmoid")

#: data dtypes these calls run, each checked against a float64 reference on the GPU (tests/matrix.py)
DTYPES = ("float32", "float16", "bfloat16", "float64")

#: what the prepared calls that ran a graph convolution note they were built on (:func:`conv_cache_clear`)
ROUTE = "conv graph paths"


def _check_dtypes(kind: str, dtypes, compute_dtype) -> None:
    """Refuse data dtypes outside :data:`DTYPES` and a compute dtype other than float32 (float64 for float64 data)."""
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
                                   f"None ({allowed[0]})")


def conv_cache_clear(handle: Handle) -> None:
    """Forget the prepared calls of ``handle`` that run a graph convolution (the plans stay in the plan cache)."""
    forget(handle, ROUTE)


def _arr(obj, name) -> DeviceArray:
    return obj if type(obj) is DeviceArray else as_array(obj, name)


def _compute_dtype(dt: np.dtype):
    return "float64" if dt == np.float64 else "float32"


def _run(g: Graph, handle, tensors, arrays, out, name, autotune: bool) -> DeviceArray:
    """Plan ``g`` and run it on ``arrays`` and ``out`` (checked against the graph's output, or a new array);
    returns the output."""
    plan_graph(g, handle, dict(zip(tensors, arrays)), tensors[len(arrays):], autotune)
    t = tensors[-1]
    if out is None:
        out = new_output(handle, t.shape, t.np_dtype, t.strides)
    elif out.shape != tuple(t.shape) or out.dtype != t.np_dtype:
        raise InvalidValueError(f"{name} must have shape {tuple(t.shape)} and dtype {t.np_dtype}, got {out.shape} "
                                f"{out.dtype}")
    recording.uses(ROUTE)
    Runner(g.plan, handle, tensors).run((*arrays, out))
    return out


@prepared(inputs=("x", "w", "bias"), outputs=("y",), inplace=False, scalars=("alpha", "beta"))
def conv_forward(handle: Handle, x: DeviceArrayLike, w: DeviceArrayLike, *, padding: int | Sequence[int] = 0,
                 stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                 bias: DeviceArrayLike | None = None, activation: str | None = None, y: Out | None = None,
                 alpha: float = 1.0, beta: float = 0.0,
                 compute_dtype: DataTypeLike | None = None, post_padding: int | Sequence[int] | None = None,
                 conv_mode: str = "cross_correlation", autotune: bool = False) -> DeviceArray | Out:
    """y = activation(alpha * conv(x, w) + beta * y + bias) as one graph; returns y. x (N, C, *spatial) and w
    (K, C/groups, *kernel) in any layout the strides describe (NCHW or NHWC); ``bias`` (1, K, 1, 1) (or (K,));
    ``activation``: None or one of :data:`ACTIVATIONS`. ``beta`` != 0 needs ``y`` (read and overwritten).
    ``autotune``: time every plan on the first call and keep the fastest."""
    xa, wa = _arr(x, "x"), _arr(w, "w")
    ya = None if y is None else _arr(y, "y")
    ba = None
    if bias is not None:
        ba = _arr(bias, "bias")
        if ba.ndim == 1:
            ba = ba.reshape(1, ba.shape[0], *([1] * (xa.ndim - 2)))
    if activation is not None and activation not in ACTIVATIONS:
        raise InvalidValueError(f"activation must be None or one of {ACTIVATIONS}, got {activation!r}")
    alpha, beta = float_arg(alpha, "alpha"), float_arg(beta, "beta")
    if beta and y is None:
        raise InvalidValueError("beta != 0 accumulates into y: pass y=")
    _check_dtypes("conv_forward", (("x", xa.dtype), ("w", wa.dtype)) + (() if ba is None else (("bias", ba.dtype),))
                  + (() if ya is None else (("y", ya.dtype),)), compute_dtype)
    g = Graph(io_dtype=xa.dtype, compute_dtype=compute_dtype or _compute_dtype(xa.dtype), name="conv_fprop")
    tx, tw = g.tensor_like(xa, "x"), g.tensor_like(wa, "w")
    fused = ba is not None or activation is not None
    res = g.conv_fprop(tx, tw, padding, stride, dilation, alpha=alpha, beta=beta if not fused else 0.0,
                       post_padding=post_padding, conv_mode=conv_mode)
    args, arrays = [tx, tw], [xa, wa]
    if ba is not None:
        tb = g.tensor_like(ba, "bias")
        res = g.bias(res, tb)
        args.append(tb)
        arrays.append(ba)
    if activation is not None:
        res = getattr(g, activation)(res)
    if ya is not None:
        if ya.shape != res.shape:
            raise InvalidValueError(f"y must have shape {res.shape}, got {ya.shape}")
        res.strides = ya.strides
    res.set_output(True).set_name("y")
    got = _run(g, handle, [*args, res], arrays, ya, "y", autotune)
    return got if y is None else y


def _backward(kind: str, handle, dy, other, out, out_shape, *, padding, stride, dilation, alpha, beta,
              compute_dtype, post_padding, conv_mode, autotune):
    """Backward data (``'dgrad'``: other = w, out = dx) or filter (``'wgrad'``: other = x, out = dw)."""
    other_name, out_name, shape_name = ("w", "dx", "x_shape") if kind == "dgrad" else ("x", "dw", "w_shape")
    dya, oa = _arr(dy, "dy"), _arr(other, other_name)
    outa = None if out is None else _arr(out, out_name)
    if out_shape is None and outa is not None:
        out_shape = outa.shape
    out_shape = None if out_shape is None else shape_arg(out_shape, shape_name)
    alpha, beta = float_arg(alpha, "alpha"), float_arg(beta, "beta")
    _check_dtypes(f"conv_{kind}", (("dy", dya.dtype), (other_name, oa.dtype))
                  + (() if outa is None else ((out_name, outa.dtype),)), compute_dtype)
    g = Graph(io_dtype=dya.dtype, compute_dtype=compute_dtype or _compute_dtype(dya.dtype), name=f"conv_{kind}")
    tdy, to = g.tensor_like(dya, "dy"), g.tensor_like(oa, other_name)
    res = getattr(g, f"conv_{kind}")(tdy, to, padding, stride, dilation, alpha=alpha, beta=beta,
                                     post_padding=post_padding, conv_mode=conv_mode, **{shape_name: out_shape})
    if outa is not None:
        res.strides = outa.strides
    elif kind == "wgrad" and oa.ndim >= 4 and packed_strides(oa.shape, "NHWC") == oa.strides:
        res.strides = packed_strides(res.shape, "NHWC")  # channels-last x: channels-last dw
    res.set_output(True).set_name(out_name)
    got = _run(g, handle, [tdy, to, res], [dya, oa], outa, out_name, autotune)
    return got if out is None else out


@prepared(inputs=("dy", "w"), outputs=("dx",), inplace=False, scalars=("alpha", "beta"))
def conv_backward_data(handle: Handle, dy: DeviceArrayLike, w: DeviceArrayLike, *, padding: int | Sequence[int] = 0,
                       stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1, dx: Out | None = None,
                       x_shape: Sequence[int] | None = None, alpha: float = 1.0, beta: float = 0.0,
                       compute_dtype: DataTypeLike | None = None, post_padding: int | Sequence[int] | None = None,
                       conv_mode: str = "cross_correlation", autotune: bool = False) -> DeviceArray | Out:
    """dx = alpha * conv_bwd_data(dy, w) + beta * dx as one graph; returns dx."""
    return _backward("dgrad", handle, dy, w, dx, x_shape, padding=padding, stride=stride, dilation=dilation,
                     alpha=alpha, beta=beta, compute_dtype=compute_dtype, post_padding=post_padding,
                     conv_mode=conv_mode, autotune=autotune)


@prepared(inputs=("dy", "x"), outputs=("dw",), inplace=False, scalars=("alpha", "beta"))
def conv_backward_filter(handle: Handle, dy: DeviceArrayLike, x: DeviceArrayLike, *,
                         padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1,
                         dilation: int | Sequence[int] = 1, dw: Out | None = None, w_shape: Sequence[int] | None = None,
                         alpha: float = 1.0, beta: float = 0.0, compute_dtype: DataTypeLike | None = None,
                         post_padding: int | Sequence[int] | None = None, conv_mode: str = "cross_correlation",
                         autotune: bool = False) -> DeviceArray | Out:
    """dw = alpha * conv_bwd_filter(dy, x) + beta * dw as one graph; returns dw."""
    return _backward("wgrad", handle, dy, x, dw, w_shape, padding=padding, stride=stride, dilation=dilation,
                     alpha=alpha, beta=beta, compute_dtype=compute_dtype, post_padding=post_padding,
                     conv_mode=conv_mode, autotune=autotune)


_ROLES = {"forward": ("x", "w", "y"), "backward_data": ("dy", "w", "dx"), "backward_filter": ("dy", "x", "dw")}


def _view(conv, a: DeviceArray) -> DeviceArray:
    """``a`` (in ``conv``'s layout) in logical (N, C, *spatial) order; 1-D as 2-D with a unit height."""
    shape, strides = logical(a.shape, a.strides, conv.layout)
    if len(shape) == 3:
        shape, strides = unit_height(shape, strides)
    if (shape, strides) == (a.shape, a.strides):
        return a
    return DeviceArray.from_parts(a.ptr, shape, a.dtype, strides, a.device_id, a, None)


def _view_shape(conv, shape) -> tuple[int, ...]:
    shape, _ = logical(tuple(shape), None, conv.layout)
    return shape[:2] + (1,) + shape[2:] if len(shape) == 3 else shape


def _result(conv, r: DeviceArray, ndim: int) -> DeviceArray:
    """A graph output as ``ndim`` dimensions in the convolution's layout."""
    shape, strides = r.shape, r.strides
    if ndim == 3:
        shape, strides = shape[:2] + shape[3:], strides[:2] + strides[3:]
    shape, strides = physical(shape, conv.layout), physical(strides, conv.layout)
    return r if (shape, strides) == (r.shape, r.strides) else \
        DeviceArray.from_parts(r.ptr, shape, r.dtype, strides, r.device_id, r, None)


def _params(conv, direction: str, a_shape, b_shape, out_shape) -> dict:
    """The graph parameters of ``conv``, after the checks the graph does not make (it infers the groups): ranks,
    channels, sizes, dy's shape (``out_shape``: the output's)."""
    if direction == "forward":
        x, w, dy = a_shape, b_shape, None
    elif direction == "backward_data":
        dy, w, x = a_shape, b_shape, out_shape
    else:
        dy, x, w = a_shape, b_shape, out_shape
    y = conv.output_shape(x, w)
    if dy is not None and tuple(dy) != y:
        raise InvalidValueError(f"dy {tuple(dy)} does not match the convolution's output {y} (x {tuple(x)}, w "
                                f"{tuple(w)}, {conv!r})")
    pads, stride, dil = conv.params(len(a_shape) - 2)
    if len(a_shape) == 3:
        pads, stride, dil = ((0, 0),) + pads, (1,) + stride, (1,) + dil
    return dict(padding=tuple(p[0] for p in pads), post_padding=tuple(p[1] for p in pads), stride=stride,
                dilation=dil, conv_mode=conv.mode.name[len("CUDNN_"):].lower(), compute_dtype=conv.compute_dtype)


def convolution(direction: str, handle, conv, a, b, out=None, *, engine: str = "graph", algo="heuristic",
                deterministic: bool = False, workspace_limit: int | None = None, alpha: float = 1.0,
                beta: float = 0.0, shape=None, bias=None, activation: str | None = None):
    """One direction of a :class:`~cudnn_py.ops.convolution.Convolution` as a graph (``engine="graph"`` of
    :mod:`cudnn_py.ops.conv_calls`); returns the output.
    :param direction: ``"forward"``, ``"backward_data"`` or ``"backward_filter"``.
    :param a, b, out: x, w, y (forward), dy, w, dx (backward_data) or dy, x, dw (backward_filter), in the
        convolution's layout; ``out`` None: allocated, of ``shape`` (backward_data: default the smallest input giving
        dy's shape; backward_filter: required).
    :param algo: ``"heuristic"`` (the first plan) or ``"fastest"`` (every plan timed once); named algorithms,
        ``deterministic=``, ``workspace_limit=`` and a ``math_type`` other than ``"auto"`` are refused.
    :param bias, activation: forward only, fused: one bias value per output channel, ``"relu"`` or None.
    """
    if engine != "graph":
        raise InvalidValueError(f"engine {engine!r}: expected 'legacy' or 'graph'")
    if not is_choice(algo):
        raise InvalidValueError(f"engine='graph' chooses among cuDNN's engines itself: algo must be 'heuristic' or "
                                f"'fastest', got {algo!r}")
    if deterministic or workspace_limit is not None or conv.math_type is not None:
        raise InvalidValueError("deterministic=, workspace_limit= and math_type apply to engine='legacy'; with "
                                "engine='graph' leave math_type 'auto' and cap the workspace with handle.workspace.cap")
    names = _ROLES[direction]
    a, b = _arr(a, names[0]), _arr(b, names[1])
    o = None if out is None else _arr(out, names[2])
    if o is None and shape is None:
        if direction == "backward_filter":
            raise InvalidValueError("convolution_backward_filter needs dw (an output array) or w_shape")
        if direction == "backward_data":
            shape = conv.input_shape(b.shape, a.shape)
    if bias is not None:
        k, ones = b.shape[0], [1] * (a.ndim - 2)
        bias = _arr(bias, "bias")
        if bias.size != k:
            raise InvalidValueError(f"bias must hold one value per output channel ({k}), got shape {bias.shape}")
        bias = _view(conv, bias.reshape(1, k, *ones) if conv.layout == "NCHW" else bias.reshape(1, *ones, k))
    kw = dict(_params(conv, direction, a.shape, b.shape, o.shape if o is not None else
                      None if shape is None else tuple(shape)),
              alpha=alpha, beta=beta, autotune=algo.lower() == "fastest")
    av, bv = _view(conv, a), _view(conv, b)
    ov = None if o is None else _view(conv, o)
    if direction == "forward":  # unwrapped: the caller is the prepared call
        r = conv_forward.__wrapped__(handle, av, bv, bias=bias, activation=activation, y=ov,  # type: ignore
                                     **kw)
    else:
        r = _backward("dgrad" if direction == "backward_data" else "wgrad", handle, av, bv, ov,
                      None if shape is None else _view_shape(conv, shape), **kw)
    return out if out is not None else _result(conv, r, a.ndim)
