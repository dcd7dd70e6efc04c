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
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import sys
import threading
from typing import Any, Sequence

import numpy as np

from cudnn_py import algorithms as _alg
from cudnn_py import capi
from cudnn_py import descriptors as _d
from cudnn_py.dtypes import cudnn_dtype
from cudnn_py.errors import CudnnError, InvalidTypeError, InvalidValueError, WorkspaceLimitError
from cudnn_py.memory import DeviceArray, as_array, empty, zeros
from cudnn_py.ops._common import enum_arg

__all__ = [
    "Convolution", "convolution_forward", "convolution_backward_data", "convolution_backward_filter",
    "convolution_backward_bias", "convolution_bias_activation_forward", "convolution_algorithms",
    "convolution_workspace_size", "MATH_TYPES",
]

MATH_TYPES = {"default": capi.CUDNN_DEFAULT_MATH, "tensor_op": capi.CUDNN_TENSOR_OP_MATH,
              "tensor_op_allow_conversion": capi.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, "fma": capi.CUDNN_FMA_MATH}
_MODES = {"cross_correlation": capi.CUDNN_CROSS_CORRELATION, "convolution": capi.CUDNN_CONVOLUTION}
_ALGO_WORDS = ("heuristic", "fastest")


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

    def __init__(self, padding=0, stride=1, dilation=1, groups: int = 1, *, mode: str = "cross_correlation",
                 math_type: Any = "auto", compute_type=None, layout: str = "NCHW"):
        if _d._is_int(padding):
            self.padding = _d._int_or_ints(padding, "padding", 0)
        else:
            if isinstance(padding, (str, bytes, dict, set, frozenset)) or not hasattr(padding, "__iter__"):
                raise InvalidTypeError(f"padding must be an int, one int per spatial dimension or one (low, high) "
                                       f"pair per "
                                f"dimension, got {padding!r}")
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
        xs, _ = _logical(_d._dims(x_shape, "x_shape", 3, 5), None, self.layout)
        ws, _ = _logical(_d._dims(w_shape, "w_shape", 3, 5), None, self.layout)
        return _physical(_out_logical(self, xs, ws), self.layout)

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


# ---------------------------------------------------------------- geometry and validation

def _perm(ndim: int, layout: str):
    """For each logical axis (N, C, *spatial), its position in the given array (None: same order)."""
    return None if layout == "NCHW" else (0, ndim - 1) + tuple(range(1, ndim - 1))


def _logical(shape, strides, layout):
    p = _perm(len(shape), layout)
    if p is None:
        return tuple(shape), None if strides is None else tuple(strides)
    return tuple(shape[i] for i in p), None if strides is None else tuple(strides[i] for i in p)


def _physical(shape, layout):
    p = _perm(len(shape), layout)
    if p is None:
        return tuple(shape)
    out = [0] * len(shape)
    for logical_axis, given_axis in enumerate(p):
        out[given_axis] = shape[logical_axis]
    return tuple(out)


def _packed(shape, channels_last: bool):
    """Packed strides (elements) of a logical N, C, *spatial shape in NCHW or NHWC memory order."""
    order = ([0] + list(range(2, len(shape))) + [1]) if channels_last else list(range(len(shape)))
    strides, acc = [0] * len(shape), 1
    for ax in reversed(order):
        strides[ax] = acc
        acc *= shape[ax]
    return tuple(strides)


def _out_logical(conv, xs, ws):
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


def _unit(shape, strides):
    """1-D -> 2-D: a unit height in front of the length."""
    return shape[:2] + (1,) + shape[2:], strides[:2] + (strides[2] * shape[2],) + strides[2:]


#: data dtypes the legacy calls run, each checked against a float64 reference on the GPU (tests/matrix.py); int8
#: runs cuDNN's INT8 configurations (int32 accumulation, y int8 or float32; cuDNN needs channels-last data)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8")


def _check_dtypes(xd, wd, yd):
    if xd.name not in DTYPES:
        raise InvalidTypeError(f"x is {xd}; the legacy convolution runs {', '.join(DTYPES)} data")
    if xd != wd:
        raise InvalidTypeError(f"x is {xd} but w is {wd}; they must have the same dtype")
    if yd != xd and not (xd == np.int8 and yd == np.float32):
        raise InvalidTypeError(f"the output is {yd} but the inputs are {xd}; it must be {xd} (int8 may also give "
                               f"float32)")


class _Geometry:
    """A configuration resolved for cuDNN: logical 4-D/5-D shapes and strides, dtypes and descriptors."""

    def __init__(self, conv: Convolution, x, w, y, dtype, y_dtype):
        """``x``, ``w``, ``y``: (shape, strides) as given (y strides None: a new packed output)."""
        self.conv = conv
        xs, xst = _logical(x[0], x[1], conv.layout)
        ws, wst = _logical(w[0], w[1], conv.layout)
        ys = _out_logical(conv, xs, ws)
        if y[0] is not None:
            given, _ = _logical(y[0], None, conv.layout)
            if given != ys:
                raise InvalidValueError(f"output shape {tuple(y[0])} does not match the convolution's "
                                 f"{_physical(ys, conv.layout)} (x {tuple(x[0])}, w {tuple(w[0])}, {conv!r})")
        yst = _logical(y[0], y[1], conv.layout)[1] if y[1] is not None else _packed(ys, conv.layout == "NHWC")
        if wst == _packed(ws, False):
            self.w_nhwc = False
        elif wst == _packed(ws, True):
            self.w_nhwc = True
        else:
            raise InvalidValueError(f"w must be packed NCHW or channels-last: strides {_packed(ws, False)} or "
                             f"{_packed(ws, True)} (elements, logical order), got {wst}")
        nd = len(xs) - 2
        pads, st, dil = conv.params(nd)
        self.out_shape = _physical(ys, conv.layout)  # what a caller-facing output looks like
        self.unit = nd == 1
        if self.unit:
            xs, xst = _unit(xs, xst)
            ws, _ = _unit(ws, _packed(ws, self.w_nhwc))
            ys, yst = _unit(ys, yst)
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
            self.xp_strides = _packed(self.xp_shape, conv.layout == "NHWC")
            self.xp_size = math.prod(self.xp_shape)
            self.xp_desc = _tensor_desc(self.xp_shape, self.xp_strides, self.dtype)
            # x's own descriptor, and the interior of the padded buffer seen with x's shape
            self.x_orig_desc = _tensor_desc(xs, xst, self.dtype)
            self.interior_desc = _tensor_desc(xs, self.xp_strides, self.dtype)
            self.interior_offset = sum(lo * s for lo, s in zip(self.lo_pads, self.xp_strides[2:])) * self.np_dtype.itemsize
            self.x_desc = self.xp_desc
        else:
            self.pads = tuple(lo for lo, _ in pads)
            self.x_desc = _tensor_desc(xs, xst, self.dtype)
        self.w_desc = _filter_desc(ws, self.dtype, self.w_nhwc)
        self.y_desc = _tensor_desc(ys, yst, self.y_dtype)

    def conv_desc(self, math_type):
        return _conv_desc(self.pads, self.stride, self.dilation, self.conv.mode, self.compute, self.conv.groups,
                          math_type)

    def cache_key(self, direction: str, device: int, deterministic: bool, limit) -> tuple:
        """The JSON-representable key of the "fastest" cache: the problem as cuDNN sees it (fields in the order of
        :data:`cudnn_py.algorithms.CONV_KEY_FIELDS`, which loaded files are checked against)."""
        xs, xst = (self.xp_shape, self.xp_strides) if self.asym else (self.x_shape, self.x_strides)
        return (direction, tuple(xs), tuple(xst), tuple(self.w_shape), self.w_nhwc,
                tuple(self.y_shape), tuple(self.y_strides), self.dtype.name, self.y_dtype.name, self.compute.name,
                tuple(self.pads), tuple(self.stride), tuple(self.dilation), self.conv.groups, self.conv.mode.name,
                self.math_type.name, bool(deterministic), limit, device)


def _default_compute(dtype: np.dtype):
    if dtype == np.float64:
        return capi.CUDNN_DATA_DOUBLE
    if dtype == np.int8:
        return capi.CUDNN_DATA_INT32
    return capi.CUDNN_DATA_FLOAT


# ---------------------------------------------------------------- descriptors (the core's shared factories)

def _tensor_desc(shape, strides, dtype):
    return _d.tensor_descriptor(tuple(shape), dtype, tuple(strides))


def _filter_desc(shape, dtype, nhwc: bool):
    return _d.filter_descriptor(tuple(shape), dtype, "NHWC" if nhwc else "NCHW")


def _conv_desc(pads, stride, dilation, mode, compute, groups, math_type):
    return _d.convolution_descriptor(pads, stride, dilation, ndim=len(pads), mode=mode, compute_type=compute,
                                     groups=groups, math_type=math_type)


_SCALARS: dict = {}


def _scalars(double: bool, alpha: float, beta: float):
    """(byref alpha, byref beta) for the data type, cached for the common values."""
    key = (double, alpha, beta)
    got = _SCALARS.get(key)
    if got is None:
        t = ctypes.c_double if double else ctypes.c_float
        a, b = t(alpha), t(beta)
        got = (ctypes.byref(a), ctypes.byref(b), a, b)
        if len(_SCALARS) < 256:
            _SCALARS[key] = got
    return got


# ---------------------------------------------------------------- choosing an algorithm

_NONDETERMINISTIC = {"backward_data": {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_0"},
                     "backward_filter": {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0", "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3"}}


def _descs(g: _Geometry, direction: str):
    """(A, B, C) descriptors of a direction in cuDNN's argument order."""
    if direction == "forward":
        return g.x_desc, g.w_desc, g.y_desc
    if direction == "backward_data":
        return g.w_desc, g.y_desc, g.x_desc
    return g.x_desc, g.y_desc, g.w_desc


def _c_nbytes(g: _Geometry, direction: str) -> int:
    """Bytes of the direction's output buffer as cuDNN sees it."""
    if direction == "forward":
        shape, strides, item = g.y_shape, g.y_strides, g.np_y_dtype.itemsize
    elif direction == "backward_data":
        shape, strides = (g.xp_shape, g.xp_strides) if g.asym else (g.x_shape, g.x_strides)
        item = g.np_dtype.itemsize
    else:
        shape, strides, item = g.w_shape, _packed(g.w_shape, g.w_nhwc), g.np_dtype.itemsize
    return (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * item


def _limit(handle, workspace_limit):
    cap = handle.workspace.cap
    if workspace_limit is None:
        return cap
    if workspace_limit < 0:
        raise InvalidValueError(f"workspace_limit must be >= 0 bytes, got {workspace_limit}")
    return workspace_limit if cap is None else min(cap, workspace_limit)


def _resolve(handle, g: _Geometry, direction: str, spec, deterministic: bool, limit, in_ptrs):
    """(algo, math type, workspace bytes) for ``spec``: an algorithm, "heuristic" or "fastest"."""
    a, b, c = _descs(g, direction)
    requested = g.math_type
    if isinstance(spec, str) and spec.lower() in _ALGO_WORDS:
        def size(r):
            return _alg.workspace_size(handle, direction, a, b, g.conv_desc(r.math_type), c, r.algo)
        if spec.lower() == "heuristic":
            records = _alg.heuristic_algorithms(handle, direction, a, b, g.conv_desc(requested), c)
            chosen = _alg.select_algorithm(_honouring(records, requested), limit, size, deterministic)
            return chosen.algo, chosen.math_type, size(chosen)
        key = g.cache_key(direction, _device_id(handle), deterministic, limit)
        chosen = _alg.algorithm_cache.get(key)
        if chosen is None:
            chosen = _find(handle, g, direction, limit, deterministic, in_ptrs)
            _alg.algorithm_cache.put(key, chosen)
        return chosen.algo, chosen.math_type, size(chosen)
    algo = _alg.parse_algo(direction, spec)
    if deterministic and algo.name in _NONDETERMINISTIC.get(direction, ()):
        raise InvalidValueError(f"{algo.name} is not deterministic; drop deterministic=True or choose another "
                                f"algorithm")
    try:
        need = _alg.workspace_size(handle, direction, a, b, g.conv_desc(requested), c, algo)
    except CudnnError as e:  # cuDNN's way of saying "this algorithm does not do this configuration"
        raise type(e)(e.function, e.status, f"{algo.name} does not support this {direction} configuration "
                      f"(x {g.x_shape}, w {g.w_shape}, y {g.y_shape}, {g.dtype.name}, {g.conv!r}, "
                      f"math {requested.name}); cuDNN says: {e.reason or 'no reason given'}") from None
    if limit is not None and need > limit:
        raise WorkspaceLimitError(f"{algo.name} needs {need} B of workspace; the limit is {limit} B")
    return algo, requested, need


def _find(handle, g: _Geometry, direction: str, limit, deterministic: bool, in_ptrs):
    """Benchmark with ``Find...Ex`` and pick the best allowed record."""
    records = _find_records(handle, g, direction, limit, in_ptrs)
    return _alg.select_algorithm(_honouring(records, g.math_type), limit, None, deterministic)


def _honouring(records, requested):
    """The records whose math type the request allows (DEFAULT also allows TENSOR_OP; FMA and the
    conversion mode only themselves); all records if cuDNN labelled none of them so."""
    allowed = {int(requested)}
    if requested == capi.CUDNN_DEFAULT_MATH:
        allowed.add(int(capi.CUDNN_TENSOR_OP_MATH))
    kept = [r for r in records if int(r.math_type) in allowed]
    return kept or [dataclasses.replace(r, math_type=requested) for r in records]


def _find_workspace(handle, needs, limit) -> tuple[int | None, int]:
    """(pointer, bytes) of the workspace for ``Find...Ex``: the largest of the algorithms' ``needs``, capped
    at ``limit``. When that much device memory cannot be allocated, the next smaller need is tried, down to
    none (cuDNN then reports the algorithms needing more as failing, and the choice falls on the others)."""
    for nbytes in sorted({n if limit is None else min(n, limit) for n in needs}, reverse=True):
        if nbytes == 0:
            break
        try:
            return handle.workspace.get(nbytes, handle.stream), nbytes
        except Exception:  # noqa: BLE001 - cuda.core's CUDAError (out of device memory): try a smaller need
            continue
    return None, 0


def _find_records(handle, g: _Geometry, direction: str, limit, in_ptrs):
    """``Find...Ex`` on the given inputs, a scratch output and the workspace :func:`_find_workspace` gets."""
    a, b, c = _descs(g, direction)
    conv_desc = g.conv_desc(g.math_type)
    needs = []
    for algo in _alg._real_members(direction):
        try:
            needs.append(_alg.workspace_size(handle, direction, a, b, conv_desc, c, algo))
        except CudnnError:  # unsupported here; Find will say so in its records
            continue
    stream = handle.stream
    scratch = empty((_c_nbytes(g, direction),), np.uint8, stream=stream, device=handle.device)
    a_ptr, b_ptr = in_ptrs
    if g.asym and direction != "backward_data":
        pad_x = zeros((g.xp_size,), g.np_dtype, stream=stream, device=handle.device)
        a_ptr = pad_x.ptr
    ws_ptr, ws_bytes = _find_workspace(handle, needs, limit)
    return _alg.find_algorithms_ex(handle, direction, a, a_ptr, b, b_ptr, conv_desc, c, scratch.ptr,
                                   ws_ptr, ws_bytes)


def _device_id(handle) -> int:
    d = handle.device
    return int(getattr(d, "device_id", d))


# ---------------------------------------------------------------- plans: everything a call derives from its config

class _Plan:
    """What one call needs: raw descriptor handles (their objects kept alive), algorithm, workspace bytes."""
    __slots__ = ("g", "a", "b", "c", "conv_desc", "keep", "algo", "ws", "fn", "double", "gen", "one", "zero")


_PLANS: dict = {}  # call signature -> what calls derive from it (_Plan, bias plan, graph parameters), bounded
_PLANS_MAX = 4096
_FUNCS = {"forward": "cudnnConvolutionForward", "backward_data": "cudnnConvolutionBackwardData",
          "backward_filter": "cudnnConvolutionBackwardFilter"}


_PLANS_LOCK = threading.Lock()  # every change to _PLANS; lookups read without it (a dict read is atomic)


def _remember(key, value):
    """Store ``value`` in :data:`_PLANS`, dropping the oldest entry when the table is full (thread-safe)."""
    with _PLANS_LOCK:
        while len(_PLANS) >= _PLANS_MAX and key not in _PLANS:
            del _PLANS[next(iter(_PLANS))]
        _PLANS[key] = value
    return value


def _geometry(handle, conv: Convolution, x, w, y) -> _Geometry:
    """Devices and dtypes checked, then the geometry; x, w, y: (shape, strides, dtype, device) in their
    forward roles (y None: a new packed output)."""
    dev = _device_id(handle)
    for name, s in (("x", x), ("w", w), ("y", y)):
        if s is not None and s[3] != dev:
            raise InvalidValueError(f"{name} is on device {s[3]} but the handle is on device {dev}")
    y_dtype = x[2] if y is None else y[2]
    _check_dtypes(x[2], w[2], y_dtype)
    return _Geometry(conv, x[:2], w[:2], (None, None) if y is None else y[:2], x[2], y_dtype)


def _plan(handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs):
    """Build (validate, describe, choose the algorithm) and remember the plan for ``key``."""
    if direction != "forward" and arrays[0][2] == np.int8:
        raise InvalidTypeError(f"int8 convolutions run forward only (cuDNN's INT8 configurations); {direction} needs "
                        f"float16, bfloat16, float32 or float64 data")
    g = _geometry(handle, conv, *arrays)  # arrays: x, w, y signatures by forward roles (y may be None)
    p = _Plan()
    p.g = g
    limit = _limit(handle, workspace_limit)
    algo, math_type, p.ws = _resolve(handle, g, direction, spec, deterministic, limit, in_ptrs)
    p.keep = _descs(g, direction) + (g.conv_desc(math_type),)
    p.a, p.b, p.c, p.conv_desc = (d.ptr for d in p.keep)
    p.algo = algo
    p.fn = getattr(capi, _FUNCS[direction]).raw  # the bound ctypes function (status still checked)
    p.double = g.compute == capi.CUDNN_DATA_DOUBLE
    p.one, p.zero, _, _ = _scalars(p.double, 1.0, 0.0)
    p.gen = _alg.algorithm_cache.generation if isinstance(spec, str) and spec.lower() == "fastest" else None
    return _remember(key, p)


def _sig(arr):
    return arr.shape, arr.strides, arr.dtype, arr.device_id


_TORCH_TYPES: set = set()
_TORCH_DTYPES: dict = {}


def _learn_torch() -> bool:
    """Once torch is imported by the program: its tensor types and dtypes, for :func:`_arg`'s fast path."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        return False
    pairs = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int8": np.int8,
             "uint8": np.uint8, "int32": np.int32, "int64": np.int64}
    _TORCH_DTYPES.update({getattr(torch, k): np.dtype(v) for k, v in pairs.items()})
    try:
        import ml_dtypes
        _TORCH_DTYPES[torch.bfloat16] = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        pass
    _TORCH_TYPES.update({torch.Tensor, torch.nn.Parameter})
    return True


def _arg(obj, name: str):
    """(signature, device address) of an array argument; signature = (shape, strides, dtype, device).

    DeviceArrays and CUDA torch tensors are read directly (a few attribute reads: this is the hot
    path); anything else goes through :func:`cudnn_py.memory.as_array` (DLPack / CUDA array interface).
    """
    t = type(obj)
    if t is DeviceArray:
        return (obj.shape, obj.strides, obj.dtype, obj.device_id), obj.ptr
    if t in _TORCH_TYPES or (not _TORCH_TYPES and _learn_torch() and t in _TORCH_TYPES):
        dt = _TORCH_DTYPES.get(obj.dtype)
        if dt is not None and obj.is_cuda:
            return (tuple(obj.shape), obj.stride(), dt, obj.get_device()), obj.data_ptr()
    a = as_array(obj, name)
    return (a.shape, a.strides, a.dtype, a.device_id), a.ptr


def _ready(handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs):
    """(plan, workspace pointer) for a call: the remembered plan (unless "fastest" choices were cleared or
    reloaded since), else a new one. A plan whose workspace the handle's cap no longer admits (the cap was
    lowered, or a handle with a larger cap made the plan) is made again under this cap; an explicit
    algorithm that needs more then raises :class:`WorkspaceLimitError`. :func:`convolution_forward`
    inlines this."""
    p = _PLANS.get(key)
    if p is None or (p.gen is not None and p.gen != _alg.algorithm_cache.generation):
        p = _plan(handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs)
    try:
        return p, (handle.workspace.get(p.ws, handle.stream) if p.ws else None)
    except WorkspaceLimitError:
        p = _plan(handle, key, direction, conv, arrays, spec, deterministic, workspace_limit, in_ptrs)
        return p, (handle.workspace.get(p.ws, handle.stream) if p.ws else None)


def _pad_input(handle, g: _Geometry, x_ptr: int):
    """A zero-padded device copy of x for asymmetric padding (keep it alive until the work is queued)."""
    xp = zeros((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
    one, zero, _, _ = _scalars(g.dtype == capi.CUDNN_DATA_DOUBLE, 1.0, 0.0)
    capi.cudnnTransformTensor(handle.ptr, one, g.x_orig_desc.ptr, x_ptr, zero, g.interior_desc.ptr,
                              xp.ptr + g.interior_offset)
    return xp


def convolution_forward(handle, conv: Convolution, x, w, y=None, *, algo: Any = "heuristic", alpha: float = 1.0,
                        beta: float = 0.0, deterministic: bool = False, workspace_limit: int | None = None,
                        engine: str = "legacy"):
    """``y = alpha * conv(x, w) + beta * y`` (``cudnnConvolutionForward``); returns y (allocated if not given).

    ``engine="graph"`` runs it as a cached backend-API plan instead (see :func:`_graph_call`).
    """
    if engine != "legacy":
        return _graph_call("forward", handle, conv, x, w, y, engine, algo, deterministic, workspace_limit,
                           alpha=alpha, beta=beta)
    xs, x_ptr = _arg(x, "x")
    ws, w_ptr = _arg(w, "w")
    ys, y_ptr = (None, 0) if y is None else _arg(y, "y")
    key = ("forward", conv, xs, ws, ys, algo, deterministic, workspace_limit, handle.device)
    p = _PLANS.get(key)  # the hot path: _ready inlined
    if p is None or (p.gen is not None and p.gen != _alg.algorithm_cache.generation):
        p = _plan(handle, key, "forward", conv, (xs, ws, ys), algo, deterministic, workspace_limit, (x_ptr, w_ptr))
    try:
        ws_ptr = handle.workspace.get(p.ws, handle.stream) if p.ws else None
    except WorkspaceLimitError:  # the cap no longer admits this plan's workspace: see _ready
        p = _plan(handle, key, "forward", conv, (xs, ws, ys), algo, deterministic, workspace_limit, (x_ptr, w_ptr))
        ws_ptr = handle.workspace.get(p.ws, handle.stream) if p.ws else None
    if y is None:
        y = empty(p.g.out_shape, p.g.np_y_dtype, stream=handle.stream, device=handle.device)
        y_ptr = y.ptr
    xp = _pad_input(handle, p.g, x_ptr) if p.g.asym else None
    al, be = (p.one, p.zero) if alpha == 1.0 and beta == 0.0 else _scalars(p.double, alpha, beta)[:2]
    p.fn(handle.ptr, al, p.a, x_ptr if xp is None else xp.ptr, p.b, w_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, be,
         p.c, y_ptr)
    return y


def _shape_sig(shape, like, what):
    shape = tuple(int(n) for n in shape)
    if any(n < 1 for n in shape):
        raise InvalidValueError(f"{what} {shape} must have positive dimensions")
    return shape, _packed(shape, False), like[2], like[3]


def _input_shape(conv: Convolution, w_shape, dy_shape) -> tuple[int, ...]:
    """The smallest x shape whose forward output is dy's shape."""
    ws, _ = _logical(tuple(w_shape), None, conv.layout)
    ys, _ = _logical(tuple(dy_shape), None, conv.layout)
    if len(ws) != len(ys) or not 3 <= len(ys) <= 5:
        raise InvalidValueError(f"w {tuple(w_shape)} and dy {tuple(dy_shape)} must both have 3, 4 or 5 dimensions")
    pads, st, dil = conv.params(len(ys) - 2)
    sp = tuple((ys[2 + i] - 1) * st[i] - pads[i][0] - pads[i][1] + (ws[2 + i] - 1) * dil[i] + 1
               for i in range(len(ys) - 2))
    return _physical((ys[0], ws[1] * conv.groups) + sp, conv.layout)


def convolution_backward_data(handle, conv: Convolution, w, dy, dx=None, *, x_shape: Sequence[int] | None = None,
                              algo: Any = "heuristic", alpha: float = 1.0, beta: float = 0.0,
                              deterministic: bool = False, workspace_limit: int | None = None,
                              engine: str = "legacy"):
    """``dx = alpha * conv_transpose(dy, w) + beta * dx`` (``cudnnConvolutionBackwardData``); returns dx.

    Without ``dx``, one of shape ``x_shape`` is allocated (default: the smallest input giving dy's shape).
    ``engine="graph"``: a cached backend-API plan instead (see :func:`_graph_call`).
    """
    if engine != "legacy":
        if x_shape is None and dx is None:
            x_shape = _input_shape(conv, as_array(w, "w").shape, as_array(dy, "dy").shape)
        return _graph_call("backward_data", handle, conv, dy, w, dx, engine, algo, deterministic, workspace_limit,
                           alpha=alpha, beta=beta, shape=x_shape)
    ws, w_ptr = _arg(w, "w")
    dys, dy_ptr = _arg(dy, "dy")
    if dx is not None:
        xs, dx_ptr = _arg(dx, "dx")
    else:
        xs = _shape_sig(x_shape if x_shape is not None else _input_shape(conv, ws[0], dys[0]), ws, "x_shape")
    key = ("backward_data", conv, xs, ws, dys, dx is None, algo, deterministic, workspace_limit, handle.device)
    p, ws_ptr = _ready(handle, key, "backward_data", conv, (xs, ws, dys), algo, deterministic, workspace_limit,
                       (w_ptr, dy_ptr))
    g = p.g
    if dx is None:
        dx = empty(xs[0], xs[2], stream=handle.stream, device=handle.device)
        dx_ptr = dx.ptr
    if g.asym:  # gradient of the padded x, then its interior blended into dx
        dxp = empty((g.xp_size,), g.np_dtype, stream=handle.stream, device=handle.device)
        one, zero, _, _ = _scalars(p.double, 1.0, 0.0)
        p.fn(handle.ptr, one, p.a, w_ptr, p.b, dy_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, zero, p.c, dxp.ptr)
        al, be, _, _ = _scalars(g.dtype == capi.CUDNN_DATA_DOUBLE, alpha, beta)
        capi.cudnnTransformTensor(handle.ptr, al, g.interior_desc.ptr, dxp.ptr + g.interior_offset, be,
                                  g.x_orig_desc.ptr, dx_ptr)
        return dx
    al, be, _, _ = _scalars(p.double, alpha, beta)
    p.fn(handle.ptr, al, p.a, w_ptr, p.b, dy_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, be, p.c, dx_ptr)
    return dx


def convolution_backward_filter(handle, conv: Convolution, x, dy, dw=None, *, w_shape: Sequence[int] | None = None,
                                algo: Any = "heuristic", alpha: float = 1.0, beta: float = 0.0,
                                deterministic: bool = False, workspace_limit: int | None = None,
                                engine: str = "legacy"):
    """``dw = alpha * dL/dw + beta * dw`` (``cudnnConvolutionBackwardFilter``); returns dw.

    Pass ``dw`` or ``w_shape`` (the filter shape cannot be inferred when the stride is above 1).
    ``engine="graph"``: a cached backend-API plan instead (see :func:`_graph_call`).
    """
    if engine != "legacy":
        if dw is None and w_shape is None:
            raise InvalidValueError("convolution_backward_filter needs dw (an output array) or w_shape")
        return _graph_call("backward_filter", handle, conv, dy, x, dw, engine, algo, deterministic,
                           workspace_limit, alpha=alpha, beta=beta, shape=w_shape)
    xs, x_ptr = _arg(x, "x")
    dys, dy_ptr = _arg(dy, "dy")
    if dw is not None:
        ws, dw_ptr = _arg(dw, "dw")
    elif w_shape is None:
        raise InvalidValueError("convolution_backward_filter needs dw (an output array) or w_shape")
    else:
        ws = _shape_sig(w_shape, xs, "w_shape")
    key = ("backward_filter", conv, xs, ws, dys, dw is None, algo, deterministic, workspace_limit, handle.device)
    p, ws_ptr = _ready(handle, key, "backward_filter", conv, (xs, ws, dys), algo, deterministic, workspace_limit,
                       (x_ptr, dy_ptr))
    if dw is None:
        dw = empty(ws[0], ws[2], stream=handle.stream, device=handle.device)
        dw_ptr = dw.ptr
    xp = _pad_input(handle, p.g, x_ptr) if p.g.asym else None
    al, be, _, _ = _scalars(p.double, alpha, beta)
    p.fn(handle.ptr, al, p.a, x_ptr if xp is None else xp.ptr, p.b, dy_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, be,
         p.c, dw_ptr)
    return dw


def convolution_backward_bias(handle, dy, db=None, *, alpha: float = 1.0, beta: float = 0.0,
                              layout: str = "NCHW"):
    """``db = alpha * sum(dy over all but channels) + beta * db`` (``cudnnConvolutionBackwardBias``).

    db (allocated if not given) has shape ``(1, K, 1, ...)`` (``(1, ..., 1, K)`` for ``layout="NHWC"``).
    """
    dys, dy_ptr = _arg(dy, "dy")
    dbs, db_ptr = (None, 0) if db is None else _arg(db, "db")
    key = ("backward_bias", dys, dbs, layout, handle.device)
    got = _PLANS.get(key)
    if got is None:
        got = _remember(key, _bias_plan(handle, dys, dbs, layout, "db"))
    dy_desc, db_desc, db_shape, double, _ = got
    if db is None:
        db = empty(db_shape, dys[2], stream=handle.stream, device=handle.device)
        db_ptr = db.ptr
    al, be, _, _ = _scalars(double, alpha, beta)
    capi.cudnnConvolutionBackwardBias(handle.ptr, al, dy_desc, dy_ptr, be, db_desc, db_ptr)
    return db


def _bias_plan(handle, ysig, bsig, layout, name):
    """(y descriptor, bias descriptor, allocated bias shape, double?, objects) for a bias of y's channels."""
    if layout not in ("NCHW", "NHWC"):
        raise InvalidValueError(f"layout {layout!r}: expected 'NCHW' or 'NHWC'")
    shape, strides, dtype, device = ysig
    if device != _device_id(handle):
        raise InvalidValueError(f"the data is on device {device} but the handle is on device {_device_id(handle)}")
    ys, yst = _logical(shape, strides, layout)
    if not 3 <= len(ys) <= 5:
        raise InvalidValueError(f"dy/y {tuple(shape)} must have 3, 4 or 5 dimensions")
    if len(ys) == 3:
        ys, yst = _unit(ys, yst)
    k = ys[1]
    bshape = (1, k) + (1,) * (len(ys) - 2)
    if bsig is not None:
        if math.prod(bsig[0]) != k or tuple(bsig[1]) != _packed(bsig[0], False):
            raise InvalidValueError(f"{name} must be a contiguous array of {k} elements (one per channel), got shape "
                             f"{tuple(bsig[0])} strides {tuple(bsig[1])}")
        if bsig[3] != device:
            raise InvalidValueError(f"{name} is on device {bsig[3]} but the data is on device {device}")
    dt = cudnn_dtype(dtype)
    physical = _physical((1, k) + (1,) * (len(shape) - 2), layout)
    y_desc = _tensor_desc(ys, yst, dt)
    b_desc = _tensor_desc(bshape, _packed(bshape, False), dt if bsig is None else cudnn_dtype(bsig[2]))
    return y_desc.ptr, b_desc.ptr, physical, dt == capi.CUDNN_DATA_DOUBLE, (y_desc, b_desc)


_ACTIVATIONS = {"relu": capi.CUDNN_ACTIVATION_RELU, "identity": capi.CUDNN_ACTIVATION_IDENTITY}


def convolution_bias_activation_forward(handle, conv: Convolution, x, w, bias, *, z=None, activation: str = "relu",
                                        alpha1: float = 1.0, alpha2: float = 0.0, y=None, algo: Any = "heuristic",
                                        deterministic: bool = False, workspace_limit: int | None = None,
                                        engine: str = "legacy"):
    """``y = act(alpha1 * conv(x, w) + alpha2 * z + bias)`` (``cudnnConvolutionBiasActivationForward``).

    ``activation``: ``"relu"`` or ``"identity"`` (cuDNN runs identity only with IMPLICIT_PRECOMP_GEMM,
    which is then chosen for you). Without ``z`` (then ``alpha2`` must be 0) y is zeroed first and
    used as z; pass ``z=y`` to add y's current values instead. ``bias`` holds one value per channel.
    ``engine="graph"`` fuses conv, bias and activation into one backend-API graph (no ``z``).
    """
    act = enum_arg(activation, _ACTIVATIONS, capi.cudnnActivationMode_t, "activation")
    if engine != "legacy":
        if z is not None or alpha2 != 0.0:
            raise InvalidValueError("engine='graph' has no z input: use engine='legacy' for y = act(conv + alpha2*z + "
                                    "b)")
        b, k, ones = as_array(bias, "bias"), as_array(w, "w").shape[0], [1] * (as_array(x, "x").ndim - 2)
        if b.size != k:
            raise InvalidValueError(f"bias must hold one value per output channel ({k}), got shape {b.shape}")
        b = b.reshape(1, k, *ones) if conv.layout == "NCHW" else b.reshape(1, *ones, k)
        name = None if act == capi.CUDNN_ACTIVATION_IDENTITY else act.name[len("CUDNN_ACTIVATION_"):].lower()
        return _graph_call("forward", handle, conv, x, w, y, engine, algo, deterministic, workspace_limit,
                           alpha=alpha1, beta=0.0, bias=b, activation=name)
    if act == capi.CUDNN_ACTIVATION_IDENTITY:
        precomp = capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
        if isinstance(algo, str) and algo.lower() in _ALGO_WORDS:
            algo = precomp
        elif _alg.parse_algo("forward", algo) != precomp:
            raise InvalidValueError("cuDNN runs the identity activation only with IMPLICIT_PRECOMP_GEMM")
    if z is None and alpha2 != 0.0:
        raise InvalidValueError("alpha2 scales z; pass z (it may be y itself) or leave alpha2 at 0")
    xs, x_ptr = _arg(x, "x")
    ws, w_ptr = _arg(w, "w")
    bs, b_ptr = _arg(bias, "bias")
    ys, y_ptr = (None, 0) if y is None else _arg(y, "y")
    key = ("forward", conv, xs, ws, ys, algo, deterministic, workspace_limit, handle.device)
    p, ws_ptr = _ready(handle, key, "forward", conv, (xs, ws, ys), algo, deterministic, workspace_limit,
                       (x_ptr, w_ptr))
    if y is None:
        y = empty(p.g.out_shape, p.g.np_y_dtype, stream=handle.stream, device=handle.device)
        ys, y_ptr = _arg(y, "y")
    bkey = ("bias", ys, bs, conv.layout, handle.device)
    bplan = _PLANS.get(bkey)
    if bplan is None:
        bplan = _remember(bkey, _bias_plan(handle, ys, bs, conv.layout, "bias"))
    if z is None:  # z aliases y: clear y so that no stale value (or NaN) can leak in through z
        # cuDNN reads the value as y's data type; a double 0.0 is all zero bytes, so it reads 0 in any type
        capi.cudnnSetTensor(handle.ptr, p.c, y_ptr, _scalars(True, 0.0, 0.0)[0])
        z_ptr = y_ptr
    else:
        zs, z_ptr = _arg(z, "z")
        if zs != ys:
            raise InvalidValueError(f"z must look like y (shape, strides, dtype, device {ys}), got {zs}")
    xp = _pad_input(handle, p.g, x_ptr) if p.g.asym else None
    a1, a2, _, _ = _scalars(p.double, alpha1, alpha2)
    act_desc = _d.activation_descriptor(act, 0.0)  # held here: the shared cache may drop it during the call
    capi.cudnnConvolutionBiasActivationForward(
        handle.ptr, a1, p.a, x_ptr if xp is None else xp.ptr, p.b, w_ptr, p.conv_desc, p.algo, ws_ptr, p.ws, a2,
        p.c, z_ptr, bplan[1], b_ptr, act_desc.ptr, p.c, y_ptr)
    return y


# ---------------------------------------------------------------- algorithm queries on arrays

def _query_geometry(handle, conv, x, w, y, direction):
    """Geometry for a query: x, w, y are arrays or shapes (an output-only role may be a shape)."""
    def sig(obj, name, like):
        if isinstance(obj, (tuple, list)):
            return _shape_sig(obj, like, name)
        return _sig(as_array(obj, name))
    if direction == "backward_data":
        ws = sig(w, "w", None)
        ys = sig(y, "dy", ws)
        xs = sig(x if x is not None else _input_shape(conv, ws[0], ys[0]), "x", ws)
    else:
        xs = sig(x, "x", None)
        ws = sig(w, "w", xs)
        ys = None if y is None else sig(y, "y", xs)
    return _geometry(handle, conv, xs, ws, ys)


def convolution_algorithms(handle, conv: Convolution, x, w, y=None, *, direction: str = "forward",
                           method: str = "heuristic", workspace_limit: int | None = None) -> list[_alg.AlgoPerf]:
    """cuDNN's ranked algorithm records for one direction of this convolution.

    ``x``, ``w``, ``y`` keep their forward roles (for backward_data ``y`` is dy and ``x`` dx; for
    backward_filter ``w`` is dw); the direction's output may be given as a shape. ``method``:
    ``"heuristic"`` (``..._v7``), ``"find"`` (``Find...``, cuDNN's own buffers) or ``"find_ex"``
    (``Find...Ex`` on the given inputs, a scratch output and a workspace of at most ``workspace_limit``).
    """
    if direction not in _alg.DIRECTIONS:
        raise InvalidValueError(f"direction {direction!r}: expected one of {_alg.DIRECTIONS}")
    g = _query_geometry(handle, conv, x, w, y, direction)
    a, b, c = _descs(g, direction)
    cd = g.conv_desc(g.math_type)
    if method == "heuristic":
        return _alg.heuristic_algorithms(handle, direction, a, b, cd, c)
    if method == "find":
        return _alg.find_algorithms(handle, direction, a, b, cd, c)
    if method == "find_ex":
        ins = {"forward": (x, w), "backward_data": (w, y), "backward_filter": (x, y)}[direction]
        for name, obj in zip(("first input", "second input"), ins):
            if obj is None or isinstance(obj, (tuple, list)):
                raise InvalidValueError(f"method='find_ex' runs on device data: the {direction} {name} must be an "
                                        f"array")
        ptrs = tuple(as_array(o, "input").ptr for o in ins)
        return _find_records(handle, g, direction, _limit(handle, workspace_limit), ptrs)
    raise InvalidValueError(f"method {method!r}: expected 'heuristic', 'find' or 'find_ex'")


def convolution_workspace_size(handle, conv: Convolution, x, w, y=None, *, algo: Any,
                               direction: str = "forward") -> int:
    """Workspace bytes that ``algo`` needs (``cudnnGetConvolution*WorkspaceSize``); raises if unsupported."""
    g = _query_geometry(handle, conv, x, w, y, direction)
    a, b, c = _descs(g, direction)
    return _alg.workspace_size(handle, direction, a, b, g.conv_desc(g.math_type), c, algo)


# ---------------------------------------------------------------- engine="graph": cached backend-API plans

def _graph_view(conv: Convolution, a, name: str):
    """``a`` as the graph API sees it: logical (N, C, *spatial) order; 1-D as 2-D with a unit height."""
    a = a if type(a) is DeviceArray else as_array(a, name)
    shape, strides = _logical(a.shape, a.strides, conv.layout)
    if len(shape) == 3:
        shape, strides = _unit(shape, strides)
    if (shape, strides) == (a.shape, a.strides):
        return a
    return DeviceArray(a.ptr, shape, a.dtype, strides, device_id=a.device_id, owner=a)


def _graph_shape(conv: Convolution, shape):
    shape, _ = _logical(tuple(shape), None, conv.layout)
    return shape[:2] + (1,) + shape[2:] if len(shape) == 3 else shape


def _graph_result(conv: Convolution, r: DeviceArray, ndim: int) -> DeviceArray:
    """A graph output in the caller's convention: ``ndim`` dimensions, in the convolution's layout."""
    shape, strides = r.shape, r.strides
    if ndim == 3:
        shape, strides = shape[:2] + shape[3:], strides[:2] + strides[3:]
    shape, strides = _physical(shape, conv.layout), _physical(strides, conv.layout)
    return r if (shape, strides) == (r.shape, r.strides) else \
        DeviceArray(r.ptr, shape, r.dtype, strides, device_id=r.device_id, owner=r)


_GRAPH_ROLES = {"forward": ("x", "w", "y"), "backward_data": ("dy", "w", "dx"), "backward_filter": ("dy", "x", "dw")}


def _graph_check(conv: Convolution, direction: str, a_shape, b_shape, out_shape) -> None:
    """engine='legacy''s geometry checks (ranks, channels against ``groups``, sizes, dy's shape), which the graph,
    inferring the groups from the shapes, does not make. Shapes as given; ``out_shape``: the direction's output."""
    if direction == "forward":
        x, w, dy = a_shape, b_shape, None
    elif direction == "backward_data":
        dy, w, x = a_shape, b_shape, out_shape
    else:
        dy, x, w = a_shape, b_shape, out_shape
    y = conv.output_shape(x, w)
    if dy is not None and tuple(dy) != y:
        raise InvalidValueError(f"dy {tuple(dy)} does not match the convolution's output {y} (x {tuple(x)}, w "
                                f"{tuple(w)}, "
                         f"{conv!r})")


def _graph_call(direction, handle, conv: Convolution, a, b, out, engine, algo, deterministic, workspace_limit, *,
                alpha, beta, shape=None, bias=None, activation=None):
    """Run one convolution direction through :mod:`cudnn_py.graph.conv` (``engine="graph"``).

    ``a``, ``b``, ``out``: x, w, y (forward), dy, w, dx (backward_data) or dy, x, dw (backward_filter);
    ``shape``: the output's shape when ``out`` is None. The graph API picks among cuDNN's engines itself:
    ``algo`` is ``"heuristic"`` (the heuristics' first plan) or ``"fastest"`` (every plan timed once, the
    fastest kept), and ``math_type`` stays ``"auto"``. Plans are cached per configuration, so a repeated call
    is a lookup and one ``cudnnBackendExecute`` (about 6 us of host time for a tiny convolution against about
    27 us for the legacy call, on an H200).
    """
    from cudnn_py.graph import conv as gconv
    if engine != "graph":
        raise InvalidValueError(f"engine {engine!r}: expected 'legacy' or 'graph'")
    if not (isinstance(algo, str) and algo.lower() in _ALGO_WORDS):
        raise InvalidValueError(f"engine='graph' chooses among cuDNN's engines itself: algo must be 'heuristic' or "
                         f"'fastest', got {algo!r}")
    if deterministic or workspace_limit is not None or conv.math_type is not None:
        raise InvalidValueError("deterministic=, workspace_limit= and math_type apply to engine='legacy'; with "
                         "engine='graph' leave math_type 'auto' and cap the workspace with handle.workspace.cap")
    names = _GRAPH_ROLES[direction]
    a, b = as_array(a, names[0]), as_array(b, names[1])
    o = None if out is None else as_array(out, names[2])
    ndim = a.ndim
    key = ("graph", direction, conv, a.shape, b.shape, o.shape if o is not None else
           None if shape is None else tuple(shape))
    params = _PLANS.get(key)
    if params is None:  # checked and derived once per configuration
        _graph_check(conv, direction, a.shape, b.shape, key[-1])
        pads, stride, dil = conv.params(ndim - 2)
        if ndim == 3:
            pads, stride, dil = ((0, 0),) + pads, (1,) + stride, (1,) + dil
        params = _remember(key, dict(
            padding=tuple(p[0] for p in pads), post_padding=tuple(p[1] for p in pads), stride=stride, dilation=dil,
            conv_mode=conv.mode.name[len("CUDNN_"):].lower(), compute_dtype=conv.compute_type))
    kw = dict(params, alpha=alpha, beta=beta, autotune=algo.lower() == "fastest")
    av, bv = _graph_view(conv, a, names[0]), _graph_view(conv, b, names[1])
    ov = None if o is None else _graph_view(conv, o, names[2])
    if direction == "forward":
        r = gconv.conv_forward(handle, av, bv, y=ov, bias=None if bias is None else _graph_view(conv, bias, "bias"),
                               activation=activation, **kw)
    elif direction == "backward_data":
        r = gconv.conv_backward_data(handle, av, bv, dx=ov, x_shape=None if shape is None else
                                     _graph_shape(conv, shape), **kw)
    else:
        r = gconv.conv_backward_filter(handle, av, bv, dw=ov, w_shape=None if shape is None else
                                       _graph_shape(conv, shape), **kw)
    return out if out is not None else _graph_result(conv, r, ndim)
