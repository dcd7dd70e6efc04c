"""Convolution: forward, backward data, backward filter, backward bias, fused bias+activation.

Arrays are in logical ``N, C, *spatial`` order; their strides say the memory layout, so a
channels-last torch tensor (or ``layout="NHWC"`` on the :class:`Convolution` for arrays whose
*shape* is ``N, *spatial, C``) runs as NHWC. 1-D convolutions run as 2-D ones with a unit height
(``x`` of shape ``(N, C, L)`` becomes ``(N, C, 1, L)`` for cuDNN; the result keeps 3 dimensions).
Asymmetric padding (``padding=((1, 2), (0, 1))``) is done by explicit zero pre-padding on the device.

::

    conv = Convolution(padding=1, stride=1)
    y = convolution_forward(h, conv, x, w)                        # heuristic algorithm, y allocated
    y = convolution_forward(h, conv, x, w, algo="fastest")        # measured once, then cached
    dx = convolution_backward_data(h, conv, w, dy, x_shape=x.shape)
    dw = convolution_backward_filter(h, conv, x, dy, w_shape=w.shape)

``algo`` is an enum member, its name (``"IMPLICIT_PRECOMP_GEMM"``), ``"heuristic"`` (first
suitable ``_v7`` answer) or ``"fastest"`` (``Find...Ex`` under the workspace cap, remembered in
:data:`cudnn_py.algorithms.algorithm_cache`). Everything a call derives from its configuration
(descriptors, algorithm, workspace size) is cached, so a repeated call is a dictionary lookup and
one C call.

Where the parts live:

- this module: :class:`Convolution` (the parameters) and the geometry a call derives from them (layouts, shapes,
  :class:`Geometry`: a configuration resolved for cuDNN, with its descriptors);
- :mod:`cudnn_py.ops.conv_calls`: the calls (:func:`convolution_forward` and the others) and their plan cache; they
  are importable from here too;
- :mod:`cudnn_py.algorithms`: the algorithm queries and the choice a call makes (heuristic, fastest, named);
- :mod:`cudnn_py.graph.conv`: ``engine="graph"``, the same calls through cached backend-API plans.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from cudnn_py import capi
from cudnn_py import descriptors as _d
from cudnn_py.dtypes import cudnn_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.ops._common import enum_arg

if TYPE_CHECKING:
    from cudnn_py.ops.conv_calls import (convolution_algorithms, convolution_backward_bias, convolution_backward_data,
                                         convolution_backward_filter, convolution_bias_activation_forward,
                                         convolution_forward, convolution_workspace_size)

__all__ = [
    "Convolution", "convolution_forward", "convolution_backward_data", "convolution_backward_filter",
    "convolution_backward_bias", "convolution_bias_activation_forward", "convolution_algorithms",
    "convolution_workspace_size", "MATH_TYPES",
]

#: the calls, defined in :mod:`cudnn_py.ops.conv_calls` and importable from here
_CALLS = frozenset(__all__) - {"Convolution", "MATH_TYPES"}

MATH_TYPES = {"default": capi.CUDNN_DEFAULT_MATH, "tensor_op": capi.CUDNN_TENSOR_OP_MATH,
              "tensor_op_allow_conversion": capi.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, "fma": capi.CUDNN_FMA_MATH}
_MODES = {"cross_correlation": capi.CUDNN_CROSS_CORRELATION, "convolution": capi.CUDNN_CONVOLUTION}


def __getattr__(name: str) -> Any:
    """The calls of :mod:`cudnn_py.ops.conv_calls` (which imports this module) on first use, then cached here."""
    if name not in _CALLS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from cudnn_py.ops import conv_calls
    value = globals()[name] = getattr(conv_calls, name)
    return value


class Convolution:
    """The parameters of a convolution (what ``cudnnConvolutionDescriptor_t`` holds), hashable.

    ``padding``: an int, one int per spatial dimension, or one ``(low, high)`` pair per dimension.
    ``stride`` / ``dilation``: an int or one per dimension. ``mode``: ``"cross_correlation"`` (what deep
    learning calls convolution; default) or ``"convolution"`` (kernel flipped). ``math_type``:
    ``"auto"`` (default: tensor-op math for float16/bfloat16 data, whose ``"default"`` math would keep
    cuDNN off the tensor cores; default math otherwise, which on A100+ allows TF32 for float32),
    ``"default"``, ``"tensor_op"``, ``"tensor_op_allow_conversion"``, ``"fma"`` (exact float32), or the enum.
    ``compute_type``: the accumulation dtype; default double for float64, int32 for int8, else float32.
    ``layout``: ``"NCHW"`` (arrays are ``N, C, *spatial`` and their strides say the memory order) or
    ``"NHWC"`` (arrays are given as ``N, *spatial, C``; filters as ``K, *R, C``).
    """

    __slots__ = ("padding", "stride", "dilation", "groups", "mode", "math_type", "compute_type", "layout", "_key",
                 "_hash", "_per_nd")
    padding: int | tuple  # an int, or per dimension an int or a (low, high) pair

    def __init__(self, padding=0, stride=1, dilation=1, groups: int = 1, *, mode: str = "cross_correlation",
                 math_type: Any = "auto", compute_type=None, layout: str = "NCHW"):
        if _d._is_int(padding):
            self.padding = _d._int_or_ints(padding, "padding", 0)
        else:
            if isinstance(padding, (str, bytes, dict, set, frozenset)) or not hasattr(padding, "__iter__"):
                raise InvalidTypeError(f"padding must be an int, one int per spatial dimension or one (low, high) "
                                       f"pair per dimension, got {padding!r}")
            self.padding = tuple(_d._int_or_ints(p, "padding", 0) for p in padding)
            if any(isinstance(p, tuple) and len(p) != 2 for p in self.padding):
                raise InvalidValueError(f"padding pairs must be (low, high), got {padding!r}")
        self.stride = _d._int_or_ints(stride, "stride", 1)
        self.dilation = _d._int_or_ints(dilation, "dilation", 1)
        self.groups = _d._int(groups, "groups", 1)
        self.mode = enum_arg(mode, _MODES, capi.cudnnConvolutionMode_t, "mode")
        self.math_type = None if isinstance(math_type, str) and math_type == "auto" else enum_arg(
            math_type, MATH_TYPES, capi.cudnnMathType_t, "math_type")
        self.compute_type = None if compute_type is None else _d._legacy_dtype(compute_type, "compute_type")
        if not isinstance(layout, str) or layout not in ("NCHW", "NHWC"):
            raise InvalidValueError(f"layout {layout!r}: expected 'NCHW' or 'NHWC'")
        self.layout = layout
        self._key = (self.padding, self.stride, self.dilation, self.groups, self.mode.name, self._math_name,
                     None if self.compute_type is None else self.compute_type.name, layout)
        self._hash = hash(self._key)
        self._per_nd: dict[int, tuple] = {}

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Convolution) and other._key == self._key

    def __repr__(self):
        return (f"Convolution(padding={self.padding}, stride={self.stride}, dilation={self.dilation}, "
                f"groups={self.groups}, mode={self.mode.name}, math_type={self._math_name}, layout={self.layout})")

    @property
    def _math_name(self) -> str:
        return "auto" if self.math_type is None else self.math_type.name

    @property
    def key(self) -> tuple:
        """A JSON-representable tuple that identifies these parameters."""
        return self._key

    def output_shape(self, x_shape: Sequence[int], w_shape: Sequence[int]) -> tuple[int, ...]:
        """The output shape for input and filter shapes (all in this convolution's layout)."""
        xs, _ = logical(_d._dims(x_shape, "x_shape", 3, 5), None, self.layout)
        ws, _ = logical(_d._dims(w_shape, "w_shape", 3, 5), None, self.layout)
        return physical(_out_logical(self, xs, ws), self.layout)

    def input_shape(self, w_shape: Sequence[int], y_shape: Sequence[int]) -> tuple[int, ...]:
        """The smallest input shape whose output has ``y_shape`` with filters of ``w_shape`` (all in this
        convolution's layout): what ``convolution_backward_data`` allocates when no ``x_shape`` is given."""
        ws, _ = logical(tuple(w_shape), None, self.layout)
        ys, _ = logical(tuple(y_shape), None, self.layout)
        if len(ws) != len(ys) or not 3 <= len(ys) <= 5:
            raise InvalidValueError(f"w {tuple(w_shape)} and dy {tuple(y_shape)} must both have 3, 4 or 5 "
                                    f"dimensions")
        pads, st, dil = self.params(len(ys) - 2)
        sp = tuple((ys[2 + i] - 1) * st[i] - pads[i][0] - pads[i][1] + (ws[2 + i] - 1) * dil[i] + 1
                   for i in range(len(ys) - 2))
        return physical((ys[0], ws[1] * self.groups) + sp, self.layout)

    def params(self, nd: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...], tuple[int, ...]]:
        """((low, high) pads, strides, dilations) for ``nd`` spatial dimensions."""
        got = self._per_nd.get(nd)
        if got is None:
            def per_dim(v, what):
                t = (v,) * nd if isinstance(v, int) else v
                if len(t) != nd:
                    raise InvalidValueError(f"{what}={v!r} has {len(t)} entries but the data has {nd} spatial "
                                            f"dimensions")
                return t
            pads = tuple(p if isinstance(p, tuple) else (p, p) for p in per_dim(self.padding, "padding"))
            got = self._per_nd[nd] = (pads, per_dim(self.stride, "stride"), per_dim(self.dilation, "dilation"))
        return got


# ---------------------------------------------------------------- layouts and shapes

def _perm(ndim: int, layout: str):
    """For each logical axis (N, C, *spatial), its position in the given array (None: same order)."""
    return None if layout == "NCHW" else (0, ndim - 1) + tuple(range(1, ndim - 1))


def logical(shape, strides, layout: str) -> tuple[tuple, Any]:
    """(shape, strides) of an array given in ``layout`` in logical ``N, C, *spatial`` order (strides may be None)."""
    p = _perm(len(shape), layout)
    if p is None:
        return tuple(shape), None if strides is None else tuple(strides)
    return tuple(shape[i] for i in p), None if strides is None else tuple(strides[i] for i in p)


def physical(shape, layout: str) -> tuple:
    """A logical ``N, C, *spatial`` shape (or strides) in the order arrays of ``layout`` are given in."""
    p = _perm(len(shape), layout)
    if p is None:
        return tuple(shape)
    out = [0] * len(shape)
    for logical_axis, given_axis in enumerate(p):
        out[given_axis] = shape[logical_axis]
    return tuple(out)


def packed_strides(shape, channels_last: bool) -> tuple[int, ...]:
    """Packed strides (elements) of a logical N, C, *spatial shape in NCHW or NHWC memory order."""
    order = ([0] + list(range(2, len(shape))) + [1]) if channels_last else list(range(len(shape)))
    strides, acc = [0] * len(shape), 1
    for ax in reversed(order):
        strides[ax] = acc
        acc *= shape[ax]
    return tuple(strides)


def unit_height(shape, strides) -> tuple[tuple, tuple]:
    """1-D -> 2-D: a unit height in front of the length (logical shape and strides)."""
    return shape[:2] + (1,) + shape[2:], strides[:2] + (strides[2] * shape[2],) + strides[2:]


def _out_logical(conv: Convolution, xs, ws):
    if len(xs) != len(ws) or not 3 <= len(xs) <= 5:
        raise InvalidValueError(f"x {xs} and w {ws} must both have 3 (1-D), 4 (2-D) or 5 (3-D) dimensions")
    nd = len(xs) - 2
    pads, st, dil = conv.params(nd)
    if xs[1] != ws[1] * conv.groups:
        raise InvalidValueError(f"x has {xs[1]} channels but w {ws} with groups={conv.groups} expects "
                                f"w.shape[1] * groups = {ws[1] * conv.groups}")
    if ws[0] % conv.groups:
        raise InvalidValueError(f"w has {ws[0]} filters, which groups={conv.groups} does not divide")
    out = []
    for i in range(nd):
        span = xs[2 + i] + pads[i][0] + pads[i][1] - (ws[2 + i] - 1) * dil[i] - 1
        if span < 0:
            raise InvalidValueError(f"filter {ws} (dilation {dil}) is larger than input {xs} padded by {pads}")
        out.append(span // st[i] + 1)
    return (xs[0], ws[0]) + tuple(out)


# ---------------------------------------------------------------- a configuration resolved for cuDNN

#: data dtypes the legacy calls run, each checked against a float64 reference on the GPU (tests/matrix.py); int8
#: runs cuDNN's INT8 configurations (int32 accumulation, y int8 or float32; cuDNN needs channels-last data)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8")


def _check_dtypes(xd, wd, yd) -> None:
    if xd.name not in DTYPES:
        raise InvalidTypeError(f"x is {xd}; the legacy convolution runs {', '.join(DTYPES)} data")
    if xd != wd:
        raise InvalidTypeError(f"x is {xd} but w is {wd}; they must have the same dtype")
    if yd != xd and not (xd == np.int8 and yd == np.float32):
        raise InvalidTypeError(f"the output is {yd} but the inputs are {xd}; it must be {xd} (int8 may also give "
                               f"float32)")


def _default_compute(dtype: np.dtype):
    if dtype == np.float64:
        return capi.CUDNN_DATA_DOUBLE
    if dtype == np.int8:
        return capi.CUDNN_DATA_INT32
    return capi.CUDNN_DATA_FLOAT


def _tensor_desc(shape, strides, dtype):
    return _d.tensor_descriptor(tuple(shape), dtype, tuple(strides))


class Geometry:
    """A configuration resolved for cuDNN: logical 4-D/5-D shapes and strides, dtypes and (shared) descriptors."""

    def __init__(self, conv: Convolution, x, w, y, dtype, y_dtype):
        """``x``, ``w``, ``y``: (shape, strides) as given (y strides None: a new packed output)."""
        self.conv = conv
        xs, xst = logical(x[0], x[1], conv.layout)
        ws, wst = logical(w[0], w[1], conv.layout)
        ys = _out_logical(conv, xs, ws)
        if y[0] is not None:
            given, _ = logical(y[0], None, conv.layout)
            if given != ys:
                raise InvalidValueError(f"output shape {tuple(y[0])} does not match the convolution's "
                                        f"{physical(ys, conv.layout)} (x {tuple(x[0])}, w {tuple(w[0])}, {conv!r})")
        yst = logical(y[0], y[1], conv.layout)[1] if y[1] is not None else packed_strides(ys, conv.layout == "NHWC")
        if wst == packed_strides(ws, False):
            self.w_nhwc = False
        elif wst == packed_strides(ws, True):
            self.w_nhwc = True
        else:
            raise InvalidValueError(f"w must be packed NCHW or channels-last: strides {packed_strides(ws, False)} or "
                                    f"{packed_strides(ws, True)} (elements, logical order), got {wst}")
        nd = len(xs) - 2
        pads, st, dil = conv.params(nd)
        self.out_shape = physical(ys, conv.layout)  # what a caller-facing output looks like
        self.unit = nd == 1
        if self.unit:
            xs, xst = unit_height(xs, xst)
            ws, _ = unit_height(ws, packed_strides(ws, self.w_nhwc))
            ys, yst = unit_height(ys, yst)
            pads, st, dil = ((0, 0),) + pads, (1,) + st, (1,) + dil
        self.nd = len(xs) - 2
        self.dtype, self.y_dtype = cudnn_dtype(dtype), cudnn_dtype(y_dtype)
        self.np_dtype, self.np_y_dtype = np.dtype(dtype), np.dtype(y_dtype)
        self.compute = conv.compute_type if conv.compute_type is not None else _default_compute(self.np_dtype)
        self.math_type = conv.math_type if conv.math_type is not None else (
            capi.CUDNN_TENSOR_OP_MATH if self.np_dtype.itemsize == 2 else capi.CUDNN_DEFAULT_MATH)
        self.stride, self.dilation = st, dil
        self.x_shape, self.x_strides, self.w_shape, self.y_shape, self.y_strides = xs, xst, ws, ys, yst
        self.asym = any(lo != hi for lo, hi in pads)
        if self.asym:  # cuDNN sees an explicitly zero-padded copy of x and no padding
            self.pads = (0,) * self.nd
            self.lo_pads = tuple(lo for lo, _ in pads)
            self.xp_shape = xs[:2] + tuple(xs[2 + i] + pads[i][0] + pads[i][1] for i in range(self.nd))
            self.xp_strides = packed_strides(self.xp_shape, conv.layout == "NHWC")
            self.xp_size = math.prod(self.xp_shape)
            self.xp_desc = _tensor_desc(self.xp_shape, self.xp_strides, self.dtype)
            # x's own descriptor, and the interior of the padded buffer seen with x's shape
            self.x_orig_desc = _tensor_desc(xs, xst, self.dtype)
            self.interior_desc = _tensor_desc(xs, self.xp_strides, self.dtype)
            self.interior_offset = sum(lo * s for lo, s in zip(self.lo_pads, self.xp_strides[2:])) * \
                self.np_dtype.itemsize
            self.x_desc = self.xp_desc
        else:
            self.pads = tuple(lo for lo, _ in pads)
            self.x_desc = _tensor_desc(xs, xst, self.dtype)
        self.w_desc = _d.filter_descriptor(tuple(ws), self.dtype, "NHWC" if self.w_nhwc else "NCHW")
        self.y_desc = _tensor_desc(ys, yst, self.y_dtype)

    @classmethod
    def of(cls, conv: Convolution, x, w, y, device: int) -> Geometry:
        """Devices and dtypes checked, then the geometry; ``x``, ``w``, ``y``: (shape, strides, dtype, device) in
        their forward roles (``y`` None: a new packed output); ``device``: the handle's."""
        for name, s in (("x", x), ("w", w), ("y", y)):
            if s is not None and s[3] != device:
                raise InvalidValueError(f"{name} is on device {s[3]} but the handle is on device {device}")
        y_dtype = x[2] if y is None else y[2]
        _check_dtypes(x[2], w[2], y_dtype)
        return cls(conv, x[:2], w[:2], (None, None) if y is None else y[:2], x[2], y_dtype)

    def conv_desc(self, math_type):
        """The shared convolution descriptor of this geometry with ``math_type``."""
        return _d.convolution_descriptor(self.pads, self.stride, self.dilation, ndim=len(self.pads),
                                         mode=self.conv.mode, compute_type=self.compute, groups=self.conv.groups,
                                         math_type=math_type)

    def descs(self, direction: str) -> tuple:
        """(A, B, C) descriptors of a direction in cuDNN's argument order."""
        if direction == "forward":
            return self.x_desc, self.w_desc, self.y_desc
        if direction == "backward_data":
            return self.w_desc, self.y_desc, self.x_desc
        return self.x_desc, self.y_desc, self.w_desc

    def out_nbytes(self, direction: str) -> int:
        """Bytes of the direction's output buffer as cuDNN sees it."""
        if direction == "forward":
            shape, strides, item = self.y_shape, self.y_strides, self.np_y_dtype.itemsize
        elif direction == "backward_data":
            shape, strides = (self.xp_shape, self.xp_strides) if self.asym else (self.x_shape, self.x_strides)
            item = self.np_dtype.itemsize
        else:
            shape, strides, item = self.w_shape, packed_strides(self.w_shape, self.w_nhwc), self.np_dtype.itemsize
        return (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * item

    def cache_key(self, direction: str, device: int, deterministic: bool, limit) -> tuple:
        """The JSON-representable key of the "fastest" cache: the problem as cuDNN sees it (fields in the order of
        :data:`cudnn_py.algorithms.CONV_KEY_FIELDS`, which loaded files are checked against)."""
        xs, xst = (self.xp_shape, self.xp_strides) if self.asym else (self.x_shape, self.x_strides)
        return (direction, tuple(xs), tuple(xst), tuple(self.w_shape), self.w_nhwc,
                tuple(self.y_shape), tuple(self.y_strides), self.dtype.name, self.y_dtype.name, self.compute.name,
                tuple(self.pads), tuple(self.stride), tuple(self.dilation), self.conv.groups, self.conv.mode.name,
                self.math_type.name, bool(deterministic), limit, device)

    def describe(self) -> str:
        """The configuration in words (for error messages)."""
        return f"x {self.x_shape}, w {self.w_shape}, y {self.y_shape}, {self.dtype.name}, {self.conv!r}"
