"""The graph builder: tensors and operations in Python, lowered to a backend operation graph on build.

::

    g = cudnn.Graph(io_dtype="float16", compute_dtype="float32")
    x = g.tensor((8, 64, 56, 56), name="x", layout="NHWC")
    w = g.tensor((64, 64, 3, 3), name="w", layout="NHWC")
    b = g.tensor((1, 64, 1, 1), name="b")
    y = g.relu(g.add(g.conv_fprop(x, w, padding=1), b)).set_output(True)
    g.build(h)                                  # heuristics -> first plan that builds (cached)
    g.execute(h, {x: xa, w: wa, b: ba, y: ya})  # or by name: {"x": xa, ...}

Tensors get unique ids automatically; intermediates are virtual until ``set_output(True)``. Shapes are checked
and output shapes inferred in Python, so a wrong graph fails before cuDNN is asked.
"""
from __future__ import annotations

import ctypes
import math
from typing import Sequence

import numpy as np

from cudnn_py import capi
from cudnn_py.descriptors import _ints
from cudnn_py.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import ClosedError

from .descriptors import BackendDescriptor
from .ops import POINTWISE_ARITY, Op, lower, pointwise_mode

__all__ = ["Graph", "Tensor"]

_DT = capi.cudnnDataType_t


def _dtype(d) -> capi.cudnnDataType_t:
    return d if isinstance(d, _DT) else cudnn_dtype(d)


def _packed_strides(shape: Sequence[int], layout: str | None = None) -> tuple[int, ...]:
    """Row-major strides; ``layout='NHWC'`` (channels last) for 4-D/5-D shapes given in N, C, spatial order."""
    n = len(shape)
    if layout is None or layout.upper() in ("NCHW", "NCDHW", "ROW_MAJOR") or n < 3:
        order = list(range(n))
    elif layout.upper() in ("NHWC", "NDHWC", "CHANNELS_LAST"):
        order = [0] + list(range(2, n)) + [1]
    else:
        raise ValueError(f"layout must be 'NCHW' or 'NHWC' (or None), got {layout!r}")
    strides = [0] * n
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(int(shape[d]), 1)
    return tuple(strides)


def _is_channels_last(shape, strides) -> bool:
    return len(shape) >= 4 and tuple(strides) == _packed_strides(shape, "NHWC") and shape[1] > 1


class Tensor:
    """A graph tensor: shape, strides (in elements), dtype, unique id, name, virtual/by-value flags."""

    __slots__ = ("graph", "uid", "name", "shape", "strides", "dtype", "is_virtual", "is_by_value", "value",
                 "_dtype_set")

    def __init__(self, graph, uid, name, shape, strides, dtype, virtual, by_value=False, value=None,
                 dtype_set=True):
        self.graph, self.uid, self.name = graph, uid, name
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), dtype
        self.is_virtual, self.is_by_value, self.value = virtual, by_value, value
        self._dtype_set = dtype_set

    def set_output(self, is_output: bool = True) -> "Tensor":
        """Make this intermediate a real (non-virtual) output with device memory; returns self."""
        self.graph._check_open()
        self.is_virtual = not is_output
        if is_output and not self._dtype_set:
            self.dtype = self.graph.io_dtype
        return self

    def set_dtype(self, dtype) -> "Tensor":
        """Give this tensor its own dtype (before the graph is built); returns self."""
        self.graph._check_open()
        self.dtype, self._dtype_set = _dtype(dtype), True
        return self

    def set_name(self, name: str) -> "Tensor":
        self.graph._rename(self, name)
        return self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def np_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    def key(self) -> tuple:
        return (self.uid, self.shape, self.strides, int(self.dtype), self.is_virtual, self.is_by_value, self.value)

    def describe(self) -> str:
        kind = "virtual " if self.is_virtual else ("scalar " if self.is_by_value else "")
        return f"{self.name}:{kind}{list(self.shape)} {self.dtype.name[len('CUDNN_DATA_'):].lower()}"

    def __repr__(self):
        return f"<Tensor {self.describe()} uid={self.uid} strides={list(self.strides)}>"


class Graph:
    """An operation graph under construction (see the module doc). ``io_dtype`` is the default dtype of tensors
    and outputs, ``compute_dtype`` of operations, ``intermediate_dtype`` of virtual tensors."""

    def __init__(self, io_dtype="float32", compute_dtype="float32", intermediate_dtype=None, name: str = "graph"):
        self.io_dtype = _dtype(io_dtype)
        self.compute_dtype = _dtype(compute_dtype)
        self.intermediate_dtype = _dtype(intermediate_dtype) if intermediate_dtype is not None else self.compute_dtype
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self._names: dict[str, Tensor] = {}
        self._next_uid = 1
        self._scalar_bufs: dict[int, ctypes.Array] = {}
        self._frozen = False
        self.plans: list = []        # filled by build(); plans[0] is the one execute() uses
        self._lowered = None

    # -- tensors ------------------------------------------------------------------------------------------------
    def _check_open(self):
        if self._frozen:
            raise RuntimeError(f"graph {self.name!r} is built; build a new Graph to change it")

    def _new_uid(self) -> int:
        uid = self._next_uid
        self._next_uid += 1
        return uid

    def _add(self, t: Tensor) -> Tensor:
        if t.name in self._names:
            raise ValueError(f"graph {self.name!r} already has a tensor named {t.name!r}")
        self._names[t.name] = t
        self.tensors.append(t)
        return t

    def _rename(self, t: Tensor, name: str):
        if name in self._names and self._names[name] is not t:
            raise ValueError(f"graph {self.name!r} already has a tensor named {name!r}")
        self._names.pop(t.name, None)
        t.name = name
        self._names[name] = t

    def tensor(self, shape: Sequence[int], dtype=None, strides: Sequence[int] | None = None, name: str | None = None,
               layout: str | None = None) -> Tensor:
        """A graph input/output tensor with device memory. ``strides`` in elements (default packed row-major, or
        channels-last with ``layout='NHWC'``)."""
        self._check_open()
        shape = tuple(int(s) for s in shape)
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"tensor shape must be non-empty with positive sizes, got {shape}")
        if strides is None:
            strides = _packed_strides(shape, layout)
        else:
            strides = tuple(int(s) for s in strides)
            if len(strides) != len(shape):
                raise ValueError(f"strides {strides} do not match shape {shape} (need {len(shape)} values)")
        uid = self._new_uid()
        return self._add(Tensor(self, uid, name or f"t{uid}", shape, strides,
                                _dtype(dtype) if dtype is not None else self.io_dtype, False))

    def tensor_like(self, array, name: str | None = None) -> Tensor:
        """A tensor with the shape, strides and dtype of an array (DeviceArray, NumPy, torch, anything with
        ``shape``/``dtype``)."""
        shape = tuple(array.shape)
        dtype = getattr(array, "dtype", None)
        strides = getattr(array, "strides", None)
        if isinstance(array, np.ndarray):
            strides = tuple(s // array.itemsize for s in array.strides)
        elif callable(getattr(array, "stride", None)):  # torch
            strides = tuple(array.stride())
        if dtype is not None and not isinstance(dtype, (np.dtype, _DT)):
            dtype = str(dtype).replace("torch.", "")
        return self.tensor(shape, dtype=dtype, strides=strides, name=name)

    def scalar(self, value: float, dtype=None, name: str | None = None, ndim: int = 4) -> Tensor:
        """A by-value scalar (a host constant baked into the graph), broadcastable against ``ndim``-D tensors."""
        self._check_open()
        dt = _dtype(dtype) if dtype is not None else _DT.CUDNN_DATA_FLOAT
        uid = self._new_uid()
        t = Tensor(self, uid, name or f"scalar{uid}", (1,) * ndim, (1,) * ndim, dt, False, True, float(value))
        buf = np.array([value], dtype=numpy_dtype(dt))
        self._scalar_bufs[uid] = buf
        return self._add(t)

    def _virtual(self, shape, strides=None, name=None, like: Tensor | None = None) -> Tensor:
        if strides is None:
            cl = like is not None and _is_channels_last(like.shape, like.strides) and len(shape) == like.ndim
            strides = _packed_strides(shape, "NHWC" if cl else None)
        uid = self._new_uid()
        return self._add(Tensor(self, uid, name or f"v{uid}", shape, strides, self.intermediate_dtype, True,
                                dtype_set=False))

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._names[name]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no tensor named {name!r}; it has "
                           + ", ".join(self._names)) from None

    def _own(self, t, what: str) -> Tensor:
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            raise TypeError(f"{what}: use g.scalar(value) for a constant")
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} must be a Tensor of this graph, got {type(t).__name__}")
        if t.graph is not self:
            raise ValueError(f"{what} ({t.name}) belongs to another graph")
        return t

    @staticmethod
    def _same_dtype(kind: str, *ts: Tensor) -> None:
        """Non-virtual operands of a convolution or matmul must share one dtype (cuDNN has no mixed engines)."""
        real = [t for t in ts if not t.is_virtual]
        if len({int(t.dtype) for t in real}) > 1:
            raise TypeError(f"{kind}: operands have different dtypes ("
                            + ", ".join(f"{t.name}: {t.dtype.name}" for t in real) + "); give them one dtype")

    def _compute(self, compute_dtype) -> capi.cudnnDataType_t:
        return _dtype(compute_dtype) if compute_dtype is not None else self.compute_dtype

    def _op(self, kind, inputs, outputs, params, name) -> None:
        self._check_open()
        self.ops.append(Op(kind, inputs, outputs, params, name or f"{kind}{len(self.ops)}"))

    # -- convolution --------------------------------------------------------------------------------------------
    def _conv_params(self, nsp, padding, stride, dilation, post_padding, compute_dtype, alpha, beta, conv_mode):
        pad = _ints(padding, nsp, "padding", 0)
        post = pad if post_padding is None else _ints(post_padding, nsp, "post_padding", 0)
        mode = capi.cudnnConvolutionMode_t["CUDNN_" + conv_mode.upper()] if isinstance(conv_mode, str) else conv_mode
        return dict(padding=pad, post_padding=post, stride=_ints(stride, nsp, "stride", 1),
                    dilation=_ints(dilation, nsp, "dilation", 1), compute_dtype=self._compute(compute_dtype),
                    alpha=float(alpha), beta=float(beta), conv_mode=mode)

    def conv_fprop(self, x: Tensor, w: Tensor, padding=0, stride=1, dilation=1, *, post_padding=None,
                   compute_dtype=None, alpha: float = 1.0, beta: float = 0.0, conv_mode="cross_correlation",
                   name: str | None = None) -> Tensor:
        """y = conv(x, w): x (N, C, *spatial), w (K, C/groups, *kernel) -> y (N, K, *out), virtual."""
        x, w = self._own(x, "x"), self._own(w, "w")
        self._same_dtype("conv_fprop", x, w)
        if x.ndim < 3 or w.ndim != x.ndim:
            raise ValueError(f"conv_fprop needs x and w of the same rank >= 3, got {x.shape} and {w.shape}")
        p = self._conv_params(x.ndim - 2, padding, stride, dilation, post_padding, compute_dtype, alpha, beta,
                              conv_mode)
        if x.shape[1] % w.shape[1]:
            raise ValueError(f"conv_fprop: x has {x.shape[1]} channels, not a multiple of w's {w.shape[1]}")
        out = []
        for i, (n, k) in enumerate(zip(x.shape[2:], w.shape[2:])):
            o = (n + p["padding"][i] + p["post_padding"][i] - p["dilation"][i] * (k - 1) - 1) // p["stride"][i] + 1
            if o <= 0:
                raise ValueError(f"conv_fprop: spatial dim {i} gives output size {o} (input {n}, kernel {k})")
            out.append(o)
        y = self._virtual((x.shape[0], w.shape[0], *out), like=x, name=name and f"{name}.y")
        self._op("conv_fprop", {"x": x, "w": w}, {"y": y}, p, name)
        return y

    def conv_dgrad(self, dy: Tensor, w: Tensor, padding=0, stride=1, dilation=1, *, x_shape=None,
                   post_padding=None, compute_dtype=None, alpha: float = 1.0, beta: float = 0.0,
                   conv_mode="cross_correlation", name: str | None = None) -> Tensor:
        """dx = conv backward data(dy, w); ``x_shape`` where the forward output size is ambiguous (stride > 1)."""
        dy, w = self._own(dy, "dy"), self._own(w, "w")
        self._same_dtype("conv_dgrad", dy, w)
        if dy.ndim < 3 or w.ndim != dy.ndim:
            raise ValueError(f"conv_dgrad needs dy and w of the same rank >= 3, got {dy.shape} and {w.shape}")
        if dy.shape[1] != w.shape[0]:
            raise ValueError(f"conv_dgrad: dy has {dy.shape[1]} channels but w has {w.shape[0]} filters")
        p = self._conv_params(dy.ndim - 2, padding, stride, dilation, post_padding, compute_dtype, alpha, beta,
                              conv_mode)
        if x_shape is None:
            sp = [(o - 1) * p["stride"][i] - p["padding"][i] - p["post_padding"][i] + p["dilation"][i] * (k - 1) + 1
                  for i, (o, k) in enumerate(zip(dy.shape[2:], w.shape[2:]))]
            x_shape = (dy.shape[0], w.shape[1], *sp)
        dx = self._virtual(tuple(int(s) for s in x_shape), like=dy, name=name and f"{name}.dx")
        self._op("conv_dgrad", {"dy": dy, "w": w}, {"dx": dx}, p, name)
        return dx

    def conv_wgrad(self, dy: Tensor, x: Tensor, padding=0, stride=1, dilation=1, *, w_shape=None,
                   post_padding=None, compute_dtype=None, alpha: float = 1.0, beta: float = 0.0,
                   conv_mode="cross_correlation", name: str | None = None) -> Tensor:
        """dw = conv backward filter(dy, x); the kernel size is inferred unless ``w_shape`` is given."""
        dy, x = self._own(dy, "dy"), self._own(x, "x")
        self._same_dtype("conv_wgrad", dy, x)
        if dy.ndim < 3 or x.ndim != dy.ndim:
            raise ValueError(f"conv_wgrad needs dy and x of the same rank >= 3, got {dy.shape} and {x.shape}")
        p = self._conv_params(dy.ndim - 2, padding, stride, dilation, post_padding, compute_dtype, alpha, beta,
                              conv_mode)
        if w_shape is None:
            ks = [(n + p["padding"][i] + p["post_padding"][i] - (o - 1) * p["stride"][i] - 1) // p["dilation"][i] + 1
                  for i, (n, o) in enumerate(zip(x.shape[2:], dy.shape[2:]))]
            w_shape = (dy.shape[1], x.shape[1], *ks)
        dw = self._virtual(tuple(int(s) for s in w_shape), like=x, name=name and f"{name}.dw")
        self._op("conv_wgrad", {"dy": dy, "x": x}, {"dw": dw}, p, name)
        return dw

    # -- matmul -------------------------------------------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, *, compute_dtype=None, name: str | None = None) -> Tensor:
        """c = a @ b over the last two dims; batch dims broadcast (size 1 against n). Same rank (>= 2) needed."""
        a, b = self._own(a, "a"), self._own(b, "b")
        self._same_dtype("matmul", a, b)
        if a.ndim < 2 or a.ndim != b.ndim:
            raise ValueError(f"matmul needs a and b of the same rank >= 2, got {a.shape} and {b.shape}")
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"matmul: a is {a.shape} and b is {b.shape}; a's last dim must equal b's second-last")
        batch = []
        for i, (m, n) in enumerate(zip(a.shape[:-2], b.shape[:-2])):
            if m != n and 1 not in (m, n):
                raise ValueError(f"matmul: batch dim {i} does not broadcast ({m} vs {n})")
            batch.append(max(m, n))
        c = self._virtual((*batch, a.shape[-2], b.shape[-1]), name=name and f"{name}.c")
        self._op("matmul", {"a": a, "b": b}, {"c": c}, {"compute_dtype": self._compute(compute_dtype)}, name)
        return c

    # -- pointwise ----------------------------------------------------------------------------------------------
    def pointwise(self, mode, x: Tensor, b: Tensor | float | None = None, t: Tensor | None = None, *,
                  compute_dtype=None, name: str | None = None, **params) -> Tensor:
        """Any ``cudnnPointwiseMode_t`` (``'add'``, ``'relu_fwd'``, ``'cmp_gt'``, ``'binary_select'``...).
        Binary modes take ``b`` (a tensor that broadcasts to x, or a number: a by-value scalar); ``binary_select``
        takes ``b`` and the mask ``t``; backward modes take ``x`` = dy and ``b`` = the forward input.
        ``params``: relu_lower_clip, relu_upper_clip, relu_lower_clip_slope, elu_alpha, softplus_beta,
        swish_beta, axis."""
        mode = pointwise_mode(mode)
        arity = POINTWISE_ARITY[mode]
        x = self._own(x, "x")
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            b = self.scalar(b, ndim=x.ndim)
        need = {"unary": 0, "binary": 1, "ternary": 2, "backward": 1}[arity]
        given = (b is not None) + (t is not None)
        if given != need:
            raise ValueError(f"pointwise {mode.name} is {arity} and takes {need} tensor(s) besides x, got {given}")
        ins = [x] + [self._own(v, n) for v, n in ((b, "b"), (t, "t")) if v is not None]
        shape = self._broadcast(mode, ins)
        like = max(ins, key=lambda v: math.prod(v.shape))
        out = self._virtual(shape, strides=like.strides if like.shape == shape else None, like=like,
                            name=name and f"{name}.y")
        p = {"mode": mode, "compute_dtype": self._compute(compute_dtype),
             **{k: v for k, v in params.items() if v is not None}}
        if arity == "backward":
            self._op("pointwise", {"dy": x, "x": ins[1]}, {"dx": out}, p, name)
        else:
            self._op("pointwise", dict(zip(("x", "b", "t"), ins)), {"y": out}, p, name)
        return out

    @staticmethod
    def _broadcast(mode, ins: list[Tensor]) -> tuple[int, ...]:
        rank = ins[0].ndim
        if any(v.ndim != rank for v in ins):
            raise ValueError(f"pointwise {mode.name}: inputs need the same rank, got "
                             + ", ".join(str(v.shape) for v in ins))
        shape = []
        for i in range(rank):
            sizes = {v.shape[i] for v in ins} - {1}
            if len(sizes) > 1:
                raise ValueError(f"pointwise {mode.name}: dim {i} does not broadcast: "
                                 + ", ".join(str(v.shape) for v in ins))
            shape.append(sizes.pop() if sizes else 1)
        return tuple(shape)

    def add(self, a, b, **kw):
        return self.pointwise("add", a, b, **kw)

    def sub(self, a, b, **kw):
        return self.pointwise("sub", a, b, **kw)

    def mul(self, a, b, **kw):
        return self.pointwise("mul", a, b, **kw)

    def div(self, a, b, **kw):
        return self.pointwise("div", a, b, **kw)

    def bias(self, x, b, **kw):
        """x + b with b broadcast (e.g. (1, C, 1, 1) against (N, C, H, W))."""
        return self.pointwise("add", x, b, **kw)

    def scale(self, x, s, **kw):
        """x * s with s a broadcastable tensor or a number."""
        return self.pointwise("mul", x, s, **kw)

    def relu(self, x, *, negative_slope: float | None = None, lower_clip=None, upper_clip=None, **kw):
        return self.pointwise("relu_fwd", x, relu_lower_clip_slope=negative_slope, relu_lower_clip=lower_clip,
                              relu_upper_clip=upper_clip, **kw)

    def gelu(self, x, *, approximate: str = "none", **kw):
        return self.pointwise("gelu_approx_tanh_fwd" if approximate == "tanh" else "gelu_fwd", x, **kw)

    def silu(self, x, **kw):
        return self.pointwise("swish_fwd", x, swish_beta=1.0, **kw)

    def tanh(self, x, **kw):
        return self.pointwise("tanh_fwd", x, **kw)

    def sigmoid(self, x, **kw):
        return self.pointwise("sigmoid_fwd", x, **kw)

    def relu_backward(self, dy, x, **kw):
        """dx = dy * (x > 0)."""
        return self.pointwise("relu_bwd", dy, x, **kw)

    def gelu_backward(self, dy, x, **kw):
        return self.pointwise("gelu_bwd", dy, x, **kw)

    def tanh_backward(self, dy, x, **kw):
        return self.pointwise("tanh_bwd", dy, x, **kw)

    def sigmoid_backward(self, dy, x, **kw):
        return self.pointwise("sigmoid_bwd", dy, x, **kw)

    def silu_backward(self, dy, x, **kw):
        return self.pointwise("swish_bwd", dy, x, swish_beta=1.0, **kw)

    def cmp_gt(self, a, b, **kw):
        return self.pointwise("cmp_gt", a, b, **kw)

    def select(self, a, b, mask, **kw):
        """mask ? a : b (``binary_select``)."""
        return self.pointwise("binary_select", a, b, mask, **kw)

    # -- reductions and statistics ------------------------------------------------------------------------------
    def reduction(self, x: Tensor, mode="add", *, axes: Sequence[int] | None = None, out_shape=None,
                  compute_dtype=None, name: str | None = None) -> Tensor:
        """Reduce x over ``axes`` (kept as size-1 dims) or to ``out_shape``; mode: a ``cudnnReduceTensorOp_t``
        or 'add', 'mul', 'min', 'max', 'amax', 'avg', 'norm1', 'norm2'."""
        x = self._own(x, "x")
        op = mode if isinstance(mode, capi.cudnnReduceTensorOp_t) else capi.cudnnReduceTensorOp_t[
            "CUDNN_REDUCE_TENSOR_" + str(mode).upper()]
        if (axes is None) == (out_shape is None):
            raise ValueError("reduction needs exactly one of axes= or out_shape=")
        if out_shape is None:
            ax = {a % x.ndim for a in axes}
            out_shape = tuple(1 if i in ax else s for i, s in enumerate(x.shape))
        out_shape = tuple(int(s) for s in out_shape)
        if len(out_shape) != x.ndim or any(o not in (1, s) for o, s in zip(out_shape, x.shape)):
            raise ValueError(f"reduction output shape {out_shape} must keep x's rank with dims 1 or x's {x.shape}")
        y = self._virtual(out_shape, name=name and f"{name}.y")
        self._op("reduction", {"x": x}, {"y": y}, {"mode": op, "compute_dtype": self._compute(compute_dtype)}, name)
        return y

    def genstats(self, x: Tensor, *, compute_dtype=None, name: str | None = None) -> tuple[Tensor, Tensor]:
        """Per-channel sum and sum of squares of x (N, C, ...) -> two (1, C, 1, ...) tensors."""
        x = self._own(x, "x")
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        s = self._virtual(shape, name=name and f"{name}.sum")
        sq = self._virtual(shape, name=name and f"{name}.sqsum")
        self._op("genstats", {"x": x}, {"sum": s, "sqsum": sq}, {"compute_dtype": self._compute(compute_dtype)}, name)
        return s, sq

    _NORM_MODES = {"layer": "CUDNN_LAYER_NORM", "rms": "CUDNN_RMS_NORM", "instance": "CUDNN_INSTANCE_NORM",
                   "batch": "CUDNN_BATCH_NORM"}

    def norm_forward(self, x: Tensor, scale: Tensor, bias: Tensor | None = None, *, mode: str = "layer",
                     training: bool = True, epsilon: float = 1e-5, mean: Tensor | None = None,
                     inv_variance: Tensor | None = None, name: str | None = None):
        """Normalisation forward (``mode``: 'layer', 'rms', 'instance', 'batch'), where the loaded cuDNN has it.

        Statistics are over every dim but the batch (layer, rms), over spatial dims (instance) or over all but
        the channel (batch). Training returns ``(y, mean, inv_variance)`` (``mean`` is None for rms), the
        statistics float32 and virtual until ``set_output``; inference takes ``mean``/``inv_variance`` (not for
        rms: only ``inv_variance``) and returns ``y``."""
        x, scale = self._own(x, "x"), self._own(scale, "scale")
        if mode not in self._NORM_MODES:
            raise ValueError(f"mode must be one of {', '.join(self._NORM_MODES)}, got {mode!r}")
        if x.ndim < 3:
            raise ValueError(f"norm_forward needs x with a batch, a channel and at least one more dim, got {x.shape}")
        if mode in ("layer", "rms"):
            stat = (x.shape[0],) + (1,) * (x.ndim - 1)
        elif mode == "instance":
            stat = x.shape[:2] + (1,) * (x.ndim - 2)
        else:
            stat = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        for t, what in ((scale, "scale"), (bias, "bias")):
            if t is not None and (t.ndim != x.ndim or any(a not in (1, b) for a, b in zip(t.shape, x.shape))):
                raise ValueError(f"norm_forward: {what} {t.shape} does not broadcast to x {x.shape}")
        if bias is None and mode != "rms":
            raise ValueError(f"{mode} norm needs a bias tensor")
        inputs = {"x": x, "scale": scale}
        if bias is not None:
            inputs["bias"] = self._own(bias, "bias")
        inputs["epsilon"] = self.scalar(epsilon, ndim=x.ndim)
        outputs = {"y": self._virtual(x.shape, strides=x.strides, like=x, name=name and f"{name}.y")}
        if training:
            if mean is not None or inv_variance is not None:
                raise ValueError("training computes mean and inv_variance: do not pass them")
            if mode != "rms":
                outputs["mean"] = self._virtual(stat, name=name and f"{name}.mean")
            outputs["inv_variance"] = self._virtual(stat, name=name and f"{name}.inv_variance")
            for k in ("mean", "inv_variance"):
                if k in outputs:
                    outputs[k].set_dtype("float32")
        else:
            if mode == "batch":
                raise ValueError("cuDNN's norm forward has no batch-norm inference phase")
            needed = {"inv_variance": inv_variance} if mode == "rms" else {"mean": mean, "inv_variance": inv_variance}
            for k, t in needed.items():
                if t is None:
                    raise ValueError(f"{mode} norm inference needs {k}= (a tensor of shape {stat})")
                inputs[k] = self._own(t, k)
        self._op("norm_forward", inputs, outputs, {"mode": capi.cudnnBackendNormMode_t[self._NORM_MODES[mode]],
                                                   "training": bool(training)}, name)
        y = outputs["y"]
        if not training:
            return y
        return y, outputs.get("mean"), outputs["inv_variance"]

    # -- structure ----------------------------------------------------------------------------------------------
    def _used_uids(self) -> set[int]:
        return {t.uid for op in self.ops for t in (*op.inputs.values(), *op.outputs.values())}

    def key(self) -> tuple:
        """The graph's structure, shapes and dtypes: equal keys lower to equal operation graphs."""
        used = self._used_uids()
        return (tuple(t.key() for t in self.tensors if t.uid in used), tuple(op.key() for op in self.ops))

    def describe(self) -> str:
        """One line per operation, for error messages and printing."""
        return "; ".join(op.describe() for op in self.ops) or "(no operations)"

    def __repr__(self):
        return f"<Graph {self.name!r}: {self.describe()}>"

    def io_tensors(self) -> list[Tensor]:
        """The non-virtual tensors the operations use (what a variant pack must bind)."""
        used = self._used_uids()
        return [t for t in self.tensors if t.uid in used and not t.is_virtual]

    def validate(self) -> None:
        """Python-side checks before cuDNN sees the graph: at least one op and output; no dangling virtuals."""
        if not self.ops:
            raise ValueError(f"graph {self.name!r} has no operations")
        produced = {t.uid for op in self.ops for t in op.outputs.values()}
        consumed = {t.uid for op in self.ops for t in op.inputs.values()}
        for op in self.ops:
            for role, t in op.inputs.items():
                if t.is_virtual and t.uid not in produced:
                    raise ValueError(f"{op.describe()}: input {role} is virtual but no operation produces it")
        dangling = [t.name for t in self.tensors if t.is_virtual and t.uid in produced and t.uid not in consumed]
        if dangling:
            raise ValueError(f"graph {self.name!r}: {', '.join(dangling)} is computed but neither used nor an "
                             f"output; call .set_output(True) on it")
        if not any(not t.is_virtual for op in self.ops for t in op.outputs.values()):
            raise ValueError(f"graph {self.name!r} has no output: call .set_output(True) on a result")

    def scalar_pointer(self, t: Tensor) -> int:
        return self._scalar_bufs[t.uid].ctypes.data

    # -- lowering -----------------------------------------------------------------------------------------------
    @staticmethod
    def _backend_dims(t: Tensor) -> tuple[list[int], list[int]]:
        """Dims/strides as cuDNN sees them: padded with leading 1s to at least 3 dims (matmul needs a batch)."""
        shape, strides = list(t.shape), list(t.strides)
        while len(shape) < 3:
            strides.insert(0, shape[0] * strides[0])
            shape.insert(0, 1)
        return shape, strides

    def lower(self, handle=None) -> BackendDescriptor:
        """The finalized ``OPERATIONGRAPH`` descriptor for ``handle`` (cached for the last handle given; needs the
        cuDNN engines library, i.e. a CUDA driver). Freezes the graph."""
        if getattr(handle, "closed", False):
            raise ClosedError(f"graph {self.name!r}: the Handle is closed; use an open one")
        if self._lowered is not None and self._lowered[0] is handle:
            return self._lowered[1]
        self.validate()
        keep: list = []
        td: dict[int, BackendDescriptor] = {}
        for t in self.tensors:
            dims, strides = self._backend_dims(t)
            d = BackendDescriptor("TENSOR", data_type=t.dtype, dimensions=dims, strides=strides, unique_id=t.uid,
                                  byte_alignment=16 if not t.is_by_value else 4, is_virtual=t.is_virtual)
            if t.is_by_value:
                d.set("is_by_value", True)
            td[t.uid] = d.finalize()
        op_descs = []
        for op in self.ops:
            d, extra = lower(op, td)
            op_descs.append(d)
            keep.extend(extra)
        g = BackendDescriptor("OPERATIONGRAPH", ops=op_descs)
        if handle is not None:
            g.set("handle", handle)
        g.finalize()
        self._frozen = True
        self._lowered = (handle, g, td, op_descs, keep)  # the operation graph holds the handle: one per handle
        return g

    # -- plans and execution (see plans.py / execute.py) --------------------------------------------------------
    def build(self, handle, modes: Sequence[str] = ("A", "FALLBACK"), *, policy: str = "first", **filters):
        """Build plans (``policy='first'``: the first heuristic config that builds; ``'all'``: every one), using
        the handle's plan cache; returns self. Raises :class:`GraphNotSupportedError` naming the operations,
        the modes tried and cuDNN's reasons when no engine supports the graph."""
        from .plans import build_plans
        self.plans = build_plans(self, handle, modes=modes, policy=policy, **filters)
        return self

    def is_supported(self, handle, modes: Sequence[str] = ("A", "FALLBACK")) -> bool:
        """Whether some engine config of ``modes`` builds a plan for this graph (never raises for that)."""
        from .errors import GraphNotSupportedError
        try:
            self.build(handle, modes=modes)
        except (GraphNotSupportedError, ValueError):
            return False
        return True

    def autotune(self, handle, variant_pack: dict, *, modes: Sequence[str] = ("A", "B", "FALLBACK"),
                 warmup: int = 2, iters: int = 5, **filters):
        """Build every plan of ``modes``, time each on ``variant_pack`` with events, keep the fastest first.
        Returns the list of (plan, milliseconds) sorted fastest first."""
        from .plans import autotune
        return autotune(self, handle, variant_pack, modes=modes, warmup=warmup, iters=iters, **filters)

    @property
    def plan(self):
        if not self.plans:
            raise RuntimeError(f"graph {self.name!r} has no plan: call build(handle) or autotune(...) first")
        return self.plans[0]

    def workspace_size(self) -> int:
        return self.plan.workspace_size

    def execute(self, handle, variant_pack: dict, workspace=None) -> None:
        """Run the selected plan on ``handle``'s stream. ``variant_pack`` maps tensors (or their names) to device
        arrays (DeviceArray or any DLPack/CAI tensor); the workspace comes from ``handle.workspace`` unless a
        device pointer/array is given."""
        self.plan.execute(handle, variant_pack, workspace)

    def executor(self, handle, *tensors, identity_cache: int = 4):
        """A fast callable ``run(*arrays)`` binding arrays to ``tensors`` (or names) positionally; see
        :class:`cudnn_py.graph.execute.Executor`."""
        return self.plan.executor(handle, *tensors, identity_cache=identity_cache)
