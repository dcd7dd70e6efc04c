"""Convolution settings and geometry: :class:`Convolution` (the parameters) and :class:`Geometry` (a configuration
resolved for cuDNN, with its descriptors).

Arrays are in logical ``N, C, *spatial`` order and their strides say the memory layout (a channels-last torch tensor
runs as NHWC; ``layout="NHWC"`` takes arrays *shaped* ``N, *spatial, C``). 1-D convolutions run as 2-D ones with a
unit height; asymmetric padding (``padding=((1, 2), (0, 1))``) runs on an explicitly zero-padded copy of x.

::

    conv = Convolution(padding=1, stride=1)
    y = convolution_forward(h, conv, x, w)                        # heuristic algorithm, y allocated
    y = convolution_forward(h, conv, x, w, autotune=True)         # measured once, then cached
    dx = convolution_backward_data(h, conv, w, dy, x_shape=x.shape)
    dw = convolution_backward_filter(h, conv, x, dy, w_shape=w.shape)   # the calls: cudnn_py.ops.conv_calls
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from ctypes import byref, c_int
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py.core import args
from cudnn_py import capi
from cudnn_py._deprecation import alias, renamed_kwargs, warn
from cudnn_py.core.args import DIM_MAX, INT32_MAX, dims, enum_member, int_arg, ints, spatial_ndim
from cudnn_py.core.conv_layout import logical, packed_strides, physical, unit_height
from cudnn_py.core.descriptors import (Descriptor, FilterDescriptor, TensorDescriptor, c_ints, legacy_dtype, read_back,
                                  setting)
from cudnn_py.core.dtypes import as_numpy_dtype, cudnn_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.ops._common import enum_arg

__all__ = ["Convolution", "MATH_TYPES", "convolution_output_shape"]

MATH_TYPES = {"default": capi.CUDNN_DEFAULT_MATH, "tensor_op": capi.CUDNN_TENSOR_OP_MATH,
              "tensor_op_allow_conversion": capi.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, "fma": capi.CUDNN_FMA_MATH}
_MODES = {"cross_correlation": capi.CUDNN_CROSS_CORRELATION, "convolution": capi.CUDNN_CONVOLUTION}


class _ConvolutionDescriptor(Descriptor):
    """A ``cudnnConvolutionDescriptor_t`` of validated :class:`cudnn_py.Convolution` settings, read back."""

    _handle_type = capi.cudnnConvolutionDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateConvolutionDescriptor", "cudnnDestroyConvolutionDescriptor"
    _shown = ("padding", "stride", "dilation", "mode", "compute_type", "groups", "math_type")
    _cache_name = "descriptors.convolution"

    def __init__(self, padding: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                 mode: capi.cudnnConvolutionMode_t, compute_type: capi.cudnnDataType_t, groups: int,
                 math_type: capi.cudnnMathType_t):
        super().__init__()
        capi.cudnnSetConvolutionNdDescriptor(self._ptr, len(padding), c_ints(padding), c_ints(stride),
                                             c_ints(dilation), mode, compute_type)
        capi.cudnnSetConvolutionGroupCount(self._ptr, groups)
        capi.cudnnSetConvolutionMathType(self._ptr, math_type)

    def _get(self):
        n, mode, ct, groups, math = c_int(), c_int(), c_int(), c_int(), c_int()
        pad, st, dil = (c_int * DIM_MAX)(), (c_int * DIM_MAX)(), (c_int * DIM_MAX)()
        capi.cudnnGetConvolutionNdDescriptor(self.ptr, DIM_MAX - 2, byref(n), pad, st, dil, byref(mode), byref(ct))
        capi.cudnnGetConvolutionGroupCount(self.ptr, byref(groups))
        capi.cudnnGetConvolutionMathType(self.ptr, byref(math))
        k = n.value
        return (tuple(pad[:k]), tuple(st[:k]), tuple(dil[:k]), capi.cudnnConvolutionMode_t(mode.value),
                capi.cudnnDataType_t(ct.value), groups.value, capi.cudnnMathType_t(math.value))

    padding = read_back(0, "Padding per spatial dimension.")
    stride = read_back(1, "Stride per spatial dimension.")
    dilation = read_back(2, "Dilation per spatial dimension.")
    mode = read_back(3, "The ``cudnnConvolutionMode_t``.")
    compute_type = read_back(4, "The accumulation ``cudnnDataType_t``.")
    compute_dtype = read_back(4, "The accumulation ``cudnnDataType_t`` (the same as :attr:`compute_type`).")
    groups = read_back(5, "The number of filter groups.")
    math_type = read_back(6, "The ``cudnnMathType_t``.")


#: the accumulation types cuDNN's convolution descriptor takes (cudnnSetConvolutionNdDescriptor refuses the others)
_COMPUTE_DTYPES = frozenset({capi.CUDNN_DATA_FLOAT, capi.CUDNN_DATA_DOUBLE, capi.CUDNN_DATA_HALF,
                             capi.CUDNN_DATA_INT32})
#: the accumulation type of data whose own is not float32
_DEFAULT_COMPUTE = {np.dtype(np.float64): capi.CUDNN_DATA_DOUBLE, np.dtype(np.int8): capi.CUDNN_DATA_INT32}


class Convolution:
    """A convolution's settings (a ``cudnnConvolutionDescriptor_t``'s, plus the layout): validated once, hashable, read
    back as properties, with its shared C descriptors (:meth:`descriptor`).

    :param padding: an int, one int per spatial dimension, or one ``(low, high)`` pair per dimension (asymmetric
        padding runs on an explicitly zero-padded copy of x).
    :param stride, dilation: an int or one per spatial dimension.
    :param groups: the number of filter groups (the input channels are ``w.shape[1] * groups``).
    :param mode: ``"cross_correlation"`` (default; deep learning's convolution) or ``"convolution"`` (kernel flipped),
        any case, or the ``cudnnConvolutionMode_t``.
    :param math_type: ``"auto"`` (default; or None: tensor-op math for float16/bfloat16 data, default math otherwise,
        which on A100+ allows TF32 for float32), ``"default"``, ``"tensor_op"``, ``"tensor_op_allow_conversion"``,
        ``"fma"`` (exact float32), or the ``cudnnMathType_t``.
    :param compute_dtype: the accumulation dtype (None: double for float64 data, int32 for int8, else float32).
        ``compute_type=`` is its deprecated spelling.
    :param layout: ``"NCHW"`` (arrays are ``N, C, *spatial`` and their strides say the memory order) or ``"NHWC"``
        (arrays are given as ``N, *spatial, C``; filters as ``K, *R, C``); any case.
    """

    __slots__ = ("_padding", "_stride", "_dilation", "_groups", "_mode", "_math_type", "_compute_dtype", "_layout",
                 "_key", "_hash", "_per_nd", "_descs")

    def __init__(self, padding: int | Sequence[int | Sequence[int]] = 0, stride: int | Sequence[int] = 1,
                 dilation: int | Sequence[int] = 1, groups: int = 1, *, mode: Any = "cross_correlation",
                 math_type: Any = "auto", compute_dtype: Any = None, layout: str = "NCHW", **old: Any) -> None:
        compute_dtype = renamed_kwargs("Convolution", old, {"compute_type": "compute_dtype"},
                                       {"compute_dtype": compute_dtype})["compute_dtype"]
        if args.is_int(padding):
            self._padding: int | tuple = args.int_or_ints(padding, "padding", 0)
        else:
            if isinstance(padding, (str, bytes, dict, set, frozenset)) or not hasattr(padding, "__iter__"):
                raise InvalidTypeError(f"padding must be an int, one int per spatial dimension or one (low, high) "
                                       f"pair per dimension, got {padding!r}")
            self._padding = tuple(args.int_or_ints(p, "padding", 0) for p in padding)
            if any(isinstance(p, tuple) and len(p) != 2 for p in self._padding):
                raise InvalidValueError(f"padding pairs must be (low, high), got {padding!r}")
        self._stride = args.int_or_ints(stride, "stride", 1)
        self._dilation = args.int_or_ints(dilation, "dilation", 1)
        self._groups = args.int_arg(groups, "groups", 1)
        self._mode = enum_arg(mode, _MODES, capi.cudnnConvolutionMode_t, "mode")
        auto = math_type is None or (isinstance(math_type, str) and math_type.lower() == "auto")
        self._math_type = None if auto else enum_arg(math_type, MATH_TYPES, capi.cudnnMathType_t, "math_type")
        self._compute_dtype = None if compute_dtype is None else legacy_dtype(compute_dtype, "compute_dtype")
        if self._compute_dtype is not None and self._compute_dtype not in _COMPUTE_DTYPES:
            raise InvalidValueError(f"compute_dtype {self._compute_dtype.name}: a convolution accumulates in "
                                    f"float32, float64, float16 or int32 (for int8 data); None picks the data's")
        if not isinstance(layout, str) or layout.upper() not in ("NCHW", "NHWC"):
            raise InvalidValueError(f"layout {layout!r}: expected 'NCHW' or 'NHWC' (any case)")
        self._layout = layout.upper()
        self._key = (self._padding, self._stride, self._dilation, self._groups, self._mode.name, self._math_name,
                     None if self._compute_dtype is None else self._compute_dtype.name, self._layout)
        self._hash = hash(self._key)
        self._per_nd: dict[int, tuple] = {}
        self._descs: dict[tuple, _ConvolutionDescriptor] = {}

    def close(self) -> None:
        """Nothing to release (its C descriptors are shared); kept for code written for ``ConvolutionDescriptor``."""

    def __enter__(self) -> Convolution:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    padding: int | tuple = setting("_padding", "As given: an int, or per spatial dimension an int or a ``(low, high)`` "
                                               "pair.")
    stride: int | tuple[int, ...] = setting("_stride", "As given: an int or one per spatial dimension.")
    dilation: int | tuple[int, ...] = setting("_dilation", "As given: an int or one per spatial dimension.")
    groups: int = setting("_groups")
    mode: capi.cudnnConvolutionMode_t = setting("_mode")
    math_type: capi.cudnnMathType_t | None = setting("_math_type", 'The ``cudnnMathType_t``, or None for ``"auto"`` '
                                                                   "(see :meth:`math_for`).")
    compute_dtype: capi.cudnnDataType_t | None = setting("_compute_dtype", "The accumulation ``cudnnDataType_t``, or "
                                                         "None for the data's default (see :meth:`compute_for`).")
    layout: str = setting("_layout", '``"NCHW"`` or ``"NHWC"``.')
    key: tuple = setting("_key", "A JSON-representable tuple that identifies these settings.")

    @property
    def compute_type(self) -> capi.cudnnDataType_t | None:
        """Deprecated spelling of :attr:`compute_dtype`."""
        warn("Convolution.compute_type is deprecated, use compute_dtype", stacklevel=3)
        return self._compute_dtype

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Convolution) and other._key == self._key

    def __repr__(self):
        compute = "" if self._compute_dtype is None else f", compute_dtype={self._compute_dtype.name}"
        return (f"Convolution(padding={self._padding}, stride={self._stride}, dilation={self._dilation}, "
                f"groups={self._groups}, mode={self._mode.name}, math_type={self._math_name}{compute}, "
                f"layout={self._layout})")

    @property
    def _math_name(self) -> str:
        return "auto" if self._math_type is None else self._math_type.name

    def compute_for(self, dtype) -> capi.cudnnDataType_t:
        """The accumulation type for data of ``dtype``: :attr:`compute_dtype` if set, else double for float64, int32
        for int8, float32 otherwise."""
        if self._compute_dtype is not None:
            return self._compute_dtype
        return _DEFAULT_COMPUTE.get(as_numpy_dtype(dtype), capi.CUDNN_DATA_FLOAT)

    def math_for(self, dtype) -> capi.cudnnMathType_t:
        """The math type for data of ``dtype``: :attr:`math_type` if set, else (``"auto"``) tensor-op math for
        2-byte data (float16, bfloat16) and default math otherwise."""
        if self._math_type is not None:
            return self._math_type
        return capi.CUDNN_TENSOR_OP_MATH if as_numpy_dtype(dtype).itemsize == 2 else capi.CUDNN_DEFAULT_MATH

    def output_shape(self, x_shape: Sequence[int], w_shape: Sequence[int]) -> tuple[int, ...]:
        """The output shape for input and filter shapes (all in this convolution's layout)."""
        xs, _ = logical(args.dims(x_shape, "x_shape", 3, 5), None, self._layout)
        ws, _ = logical(args.dims(w_shape, "w_shape", 3, 5), None, self._layout)
        return physical(_out_logical(self, xs, ws), self._layout)

    def input_shape(self, w_shape: Sequence[int], y_shape: Sequence[int]) -> tuple[int, ...]:
        """The smallest input shape whose output has ``y_shape`` with filters of ``w_shape`` (all in this
        convolution's layout): what ``convolution_backward_data`` allocates when no ``x_shape`` is given."""
        ws, _ = logical(tuple(w_shape), None, self._layout)
        ys, _ = logical(tuple(y_shape), None, self._layout)
        if len(ws) != len(ys) or not 3 <= len(ys) <= 5:
            raise InvalidValueError(f"w {tuple(w_shape)} and dy {tuple(y_shape)} must both have 3, 4 or 5 "
                                    f"dimensions")
        pads, st, dil = self.params(len(ys) - 2)
        sp = tuple((ys[2 + i] - 1) * st[i] - pads[i][0] - pads[i][1] + (ws[2 + i] - 1) * dil[i] + 1
                   for i in range(len(ys) - 2))
        return physical((ys[0], ws[1] * self._groups) + sp, self._layout)

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
            pads = tuple(p if isinstance(p, tuple) else (p, p) for p in per_dim(self._padding, "padding"))
            got = self._per_nd[nd] = (pads, per_dim(self._stride, "stride"), per_dim(self._dilation, "dilation"))
        return got

    def cudnn_params(self, nd: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(pads, strides, dilations) as cuDNN gets them for data of ``nd`` spatial dimensions: 1-D as 2-D with a
        unit height in front, and no padding at all where it is asymmetric (x is then padded explicitly)."""
        pairs, st, dil = self.params(nd)
        pads = (0,) * nd if any(lo != hi for lo, hi in pairs) else tuple(lo for lo, _ in pairs)
        if nd == 1:
            pads, st, dil = (0,) + pads, (1,) + st, (1,) + dil
        return pads, st, dil

    def descriptor(self, nd: int = 2, *, dtype: Any = "float32", math_type: Any = None
                   ) -> capi.cudnnConvolutionDescriptor_t:
        """The shared ``cudnnConvolutionDescriptor_t`` for data of ``nd`` (1 to 3) spatial dimensions and ``dtype``
        (see :meth:`cudnn_params`, :meth:`compute_for`, :meth:`math_for`; ``math_type`` overrides the latter), for
        ``capi`` calls such as ``cudnnConvolutionForward``; made once and held by this object.
        """
        return self._shared_descriptor(nd, dtype, math_type).ptr

    def _shared_descriptor(self, nd: int, dtype: Any, math_type: Any) -> _ConvolutionDescriptor:
        """The descriptor object behind :meth:`descriptor`."""
        key = (nd, dtype, math_type)
        got = self._descs.get(key)
        if got is None:
            if not isinstance(nd, int) or not 1 <= nd <= 3:
                raise InvalidValueError(f"nd must be 1, 2 or 3 spatial dimensions, got {nd!r}")
            math = self.math_for(dtype) if math_type is None else enum_arg(math_type, MATH_TYPES, capi.cudnnMathType_t,
                                                                           "math_type")
            got = self._descs[key] = _ConvolutionDescriptor.shared(
                *self.cudnn_params(nd), self._mode, self.compute_for(dtype), self._groups, math)
        return got


# ---------------------------------------------------------------- layouts and shapes

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


class Geometry:
    """A configuration resolved for cuDNN: logical 4-D/5-D shapes and strides, dtypes and (shared) descriptors."""

    def __init__(self, conv: Convolution, x, w, y, dtype, y_dtype):
        """``x``, ``w``, ``y``: (shape, strides) (y strides None: a new packed output)."""
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
        self.w_nhwc = wst != packed_strides(ws, False)
        if self.w_nhwc and wst != packed_strides(ws, True):
            raise InvalidValueError(f"w must be packed NCHW or channels-last: strides {packed_strides(ws, False)} or "
                                    f"{packed_strides(ws, True)} (elements, logical order), got {wst}")
        self.data_nd = nd = len(xs) - 2  # spatial dimensions as given
        pads, _, _ = conv.params(nd)
        self.out_shape = physical(ys, conv.layout)  # what a caller-facing output looks like
        if nd == 1:
            xs, xst = unit_height(xs, xst)
            ws, _ = unit_height(ws, packed_strides(ws, self.w_nhwc))
            ys, yst = unit_height(ys, yst)
            pads = ((0, 0),) + pads
        self.dtype, self.y_dtype = cudnn_dtype(dtype), cudnn_dtype(y_dtype)
        self.np_dtype, self.np_y_dtype = np.dtype(dtype), np.dtype(y_dtype)
        self.compute, self.math_type = conv.compute_for(self.np_dtype), conv.math_for(self.np_dtype)
        self.pads, self.stride, self.dilation = conv.cudnn_params(nd)
        self.x_shape, self.x_strides, self.w_shape, self.y_shape, self.y_strides = xs, xst, ws, ys, yst
        self.asym = any(lo != hi for lo, hi in pads)
        if self.asym:  # cuDNN sees an explicitly zero-padded copy of x and no padding
            self.xp_shape = xs[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(xs[2:], pads))
            self.xp_strides = packed_strides(self.xp_shape, conv.layout == "NHWC")
            self.xp_size = math.prod(self.xp_shape)
            self.x_desc = TensorDescriptor.shared(self.xp_shape, self.dtype, self.xp_strides)
            self.x_orig_desc = TensorDescriptor.shared(xs, self.dtype, xst)
            self.interior_desc = TensorDescriptor.shared(xs, self.dtype, self.xp_strides)
            self.interior_offset = sum(lo * s for (lo, _), s in zip(pads, self.xp_strides[2:])) * self.np_dtype.itemsize
        else:
            self.x_desc = TensorDescriptor.shared(xs, self.dtype, xst)
        self.w_desc = FilterDescriptor.shared(tuple(ws), self.dtype, "NHWC" if self.w_nhwc else "NCHW")
        self.y_desc = TensorDescriptor.shared(ys, self.y_dtype, yst)

    @classmethod
    def of(cls, conv: Convolution, x, w, y, device: int) -> Geometry:
        """Devices and dtypes checked, then the geometry; ``x``, ``w``, ``y``: (shape, strides, dtype, device) in
        their forward roles (``y`` None: a new packed output); ``device``: the handle's."""
        for name, s in (("x", x), ("w", w), ("y", y)):
            if s is not None and s[3] != device:
                raise InvalidValueError(f"{name} is on device {s[3]} but the handle is on device {device}")
        xd, wd, yd = x[2], w[2], x[2] if y is None else y[2]
        if xd.name not in DTYPES:
            raise InvalidTypeError(f"x is {xd}; the legacy convolution runs {', '.join(DTYPES)} data")
        if xd != wd:
            raise InvalidTypeError(f"x is {xd} but w is {wd}; they must have the same dtype")
        if yd != xd and not (xd == np.int8 and yd == np.float32):
            raise InvalidTypeError(f"the output is {yd} but the inputs are {xd}; it must be {xd} (int8 may also give "
                                   f"float32)")
        return cls(conv, x[:2], w[:2], (None, None) if y is None else y[:2], xd, yd)

    def conv_desc(self, math_type) -> _ConvolutionDescriptor:
        """The convolution's shared C descriptor for this geometry with ``math_type``."""
        return self.conv._shared_descriptor(self.data_nd, self.np_dtype, math_type)

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
        :data:`cudnn_py.calls.algorithms.CONV_KEY_FIELDS`, which loaded files are checked against)."""
        xs, xst = (self.xp_shape, self.xp_strides) if self.asym else (self.x_shape, self.x_strides)
        return (direction, tuple(xs), tuple(xst), tuple(self.w_shape), self.w_nhwc,
                tuple(self.y_shape), tuple(self.y_strides), self.dtype.name, self.y_dtype.name, self.compute.name,
                tuple(self.pads), tuple(self.stride), tuple(self.dilation), self.conv.groups, self.conv.mode.name,
                self.math_type.name, bool(deterministic), limit, device)

    def describe(self) -> str:
        """The configuration in words (for error messages)."""
        return f"x {self.x_shape}, w {self.w_shape}, y {self.y_shape}, {self.dtype.name}, {self.conv!r}"


#: the data types cuDNN's filter descriptor takes among legacy_dtype's (cudnnSetFilterNdDescriptor refuses int32)
_DATA_DTYPES = frozenset({capi.CUDNN_DATA_FLOAT, capi.CUDNN_DATA_DOUBLE, capi.CUDNN_DATA_HALF, capi.CUDNN_DATA_BFLOAT16,
                          capi.CUDNN_DATA_INT8, capi.CUDNN_DATA_UINT8})


def convolution_output_shape(x_shape: Sequence[int], w_shape: Sequence[int], padding: int | Sequence[int] = 0,
                             stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1, *, groups: int = 1,
                             mode: str | int = "cross_correlation", dtype: DTypeLike = np.float32) -> tuple[int, ...]:
    """The forward output shape of a convolution of input ``x_shape`` (N, C, spatial...) with filter
    ``w_shape`` (K, C/groups, spatial...), as cuDNN computes it."""
    given = (x_shape, w_shape, padding)
    misplaced = next((a for a in given if isinstance(a, Convolution)), None)
    if misplaced is not None:
        xs, ws = (getattr(a, "shape", a) for a in given if a is not misplaced)  # an array: its shape
        raise InvalidTypeError(f"convolution_output_shape takes shapes and a convolution's settings (padding, stride, "
                               f"dilation), not a Convolution: use Convolution.output_shape, here "
                               f"{misplaced!r}.output_shape({xs!r}, {ws!r})")
    x_shape, w_shape = dims(x_shape, "x_shape", 3), dims(w_shape, "w_shape", 3)
    dt = legacy_dtype(dtype, "convolution")
    if dt not in _DATA_DTYPES:
        raise InvalidTypeError(f"convolution_output_shape: dtype {dt.name} is no convolution data type; cuDNN "
                               f"convolves float32, float64, float16, bfloat16, int8 and uint8 data (int32 is an "
                               f"accumulation type: a Convolution's compute_dtype)")
    if len(w_shape) != len(x_shape):
        raise InvalidValueError(f"input shape {x_shape} and filter shape {w_shape} must have the same number of dims")
    n, xs, ws = len(x_shape) - 2, x_shape, w_shape
    pad, st, dil = ints(padding, n, "padding", 0), ints(stride, n, "stride", 1), ints(dilation, n, "dilation", 1)
    mode = enum_member(capi.cudnnConvolutionMode_t, mode, "CUDNN_", "mode")
    groups = int_arg(groups, "groups", 1)
    if xs[1] != ws[1] * groups:
        raise InvalidValueError(f"input {xs} has {xs[1]} channels but filter {ws} with {groups} group(s) expects "
                                f"{ws[1] * groups}")
    if ws[0] % groups:
        raise InvalidValueError(f"filter {ws} has {ws[0]} output channels, which groups={groups} does not divide")
    for i in range(n):
        padded, extent = xs[2 + i] + 2 * pad[i], (ws[2 + i] - 1) * dil[i] + 1
        if padded < extent:
            raise InvalidValueError(f"spatial dim {i}: the filter ({ws[2 + i]}, dilation {dil[i]}) is larger than "
                                    f"the padded input ({xs[2 + i]} + 2*{pad[i]})")
        if max(padded, extent) > INT32_MAX:
            raise InvalidValueError(f"spatial dim {i}: the padded input ({xs[2 + i]} + 2*{pad[i]}) or the dilated "
                                    f"filter ({ws[2 + i]}, dilation {dil[i]}) exceeds cuDNN's int range (2**31 - 1)")
    conv = _ConvolutionDescriptor.shared(pad, st, dil, mode, capi.CUDNN_DATA_DOUBLE if dt == capi.CUDNN_DATA_DOUBLE
                                         else capi.CUDNN_DATA_FLOAT, groups, capi.CUDNN_DEFAULT_MATH)
    xd, wd, out = TensorDescriptor.shared(xs, dt), FilterDescriptor.shared(ws, dt), (c_int * len(xs))()
    capi.cudnnGetConvolutionNdForwardOutputDim(conv.ptr, xd.ptr, wd.ptr, len(xs), out)
    return tuple(out)


# ---------------------------------------------------------------- deprecated names

def _convolution(padding=0, stride=1, dilation=1, *, ndim=None, mode="cross_correlation", compute_type=np.float32,
                 groups=1, math_type="default", reorder=None) -> Convolution:
    """What the deprecated ConvolutionDescriptor and convolution_descriptor make: the :class:`Convolution` of these
    settings, with their defaults (float32 accumulation, default math; ``ndim`` checked against the tuples)."""
    if reorder is not None and enum_member(capi.cudnnReorderType_t, reorder, "CUDNN_", "reorder", {
            "default": "CUDNN_DEFAULT_REORDER", "none": "CUDNN_NO_REORDER"}) != capi.CUDNN_DEFAULT_REORDER:
        raise InvalidValueError("reorder= is not a Convolution setting; call capi.cudnnSetConvolutionReorderType on "
                                "a descriptor of your own")
    conv = Convolution(padding, stride, dilation, groups, mode=mode, math_type=math_type, compute_dtype=compute_type)
    conv.params(spatial_ndim(ndim, (padding, stride, dilation)))
    return conv


_convolution.__qualname__ = "cudnn_py.Convolution"
ConvolutionDescriptor = alias("ConvolutionDescriptor", _convolution)
convolution_descriptor = alias("convolution_descriptor", _convolution)
