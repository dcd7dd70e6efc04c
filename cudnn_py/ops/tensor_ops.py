"""Tensor operations: add, op-tensor, scale, set, transform (layout/dtype), TransformTensorEx, reduce.

Arrays are any device arrays (DeviceArray, torch, CuPy); their strides are the memory layout cuDNN is told about::

    c = add_tensor(h, bias, c, beta=1.0)                      # c = bias (broadcast) + c
    c = op_tensor(h, "max", a, b)                             # c = max(a, b), allocated
    y16 = transform_tensor(h, x32, dtype=np.float16)          # dtype conversion
    y = transform_tensor(h, x, layout="NHWC")                 # same logical NCHW, channels-last memory
    s, idx = reduce_tensor(h, "max", a, axes=(2, 3), indices=True)

Scaling factors are keyword-only ``alpha``/``beta`` (defaults 1 and 0); :func:`op_tensor` keeps cuDNN's
``alpha1``/``alpha2``/``beta``.

``engine`` (add, op-tensor, scale, transform, reduce): "legacy" (the deprecated C call), "graph" (a cached
backend-API graph: float16, bfloat16 and float32 data of 1 to 5 dimensions, float32 compute, no NaN propagation, no
reduction indices) or "auto" (the default: the faster, measured once per configuration; docs/graph_paths.md).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Literal, NamedTuple, overload

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py._deprecation import renamed_kwargs, warn
from cudnn_py.core.args import bool_arg, element_value, ints, scaling
from cudnn_py.core.descriptors import Descriptor, OpTensor, ReduceTensor
from cudnn_py.core.dtypes import cudnn_dtype
from cudnn_py.graph import legacy as gl
from cudnn_py.core.handle import Handle
from cudnn_py.core.contexts import on_device
from cudnn_py.core.conv_layout import packed_strides
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike, as_array, empty, memset, memset_writes
from cudnn_py.core.strided import array_dtype, memory_order, non_overlapping
from cudnn_py.clib import recording
from cudnn_py.ops._common import (
    Out, blend, check_array, desc, enum_arg, new_output, host_step, launch, output, read_tensor_desc, scalars,
    tensor_desc, with_tensor_descriptors,
)
from cudnn_py.calls.prepared import prepared
from cudnn_py.clib.recording import WorkspaceArg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "add_tensor", "op_tensor", "scale_tensor", "set_tensor", "transform_tensor", "transform_tensor_ex",
    "reduce_tensor", "ReduceResult", "TensorTransformDescriptor", "OP_TENSOR_OPS", "REDUCE_OPS",
]

OP_TENSOR_OPS = {"add": capi.CUDNN_OP_TENSOR_ADD, "mul": capi.CUDNN_OP_TENSOR_MUL, "min": capi.CUDNN_OP_TENSOR_MIN,
                 "max": capi.CUDNN_OP_TENSOR_MAX, "sqrt": capi.CUDNN_OP_TENSOR_SQRT, "not": capi.CUDNN_OP_TENSOR_NOT}
REDUCE_OPS = {"add": capi.CUDNN_REDUCE_TENSOR_ADD, "mul": capi.CUDNN_REDUCE_TENSOR_MUL,
              "min": capi.CUDNN_REDUCE_TENSOR_MIN, "max": capi.CUDNN_REDUCE_TENSOR_MAX,
              "amax": capi.CUDNN_REDUCE_TENSOR_AMAX, "avg": capi.CUDNN_REDUCE_TENSOR_AVG,
              "norm1": capi.CUDNN_REDUCE_TENSOR_NORM1, "norm2": capi.CUDNN_REDUCE_TENSOR_NORM2,
              "mul_no_zeros": capi.CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS}
_INDEXED = {capi.CUDNN_REDUCE_TENSOR_MIN, capi.CUDNN_REDUCE_TENSOR_MAX, capi.CUDNN_REDUCE_TENSOR_AMAX}
_FORMATS = {"NCHW": capi.CUDNN_TENSOR_NCHW, "NHWC": capi.CUDNN_TENSOR_NHWC,
            "NCHW_VECT_C": capi.CUDNN_TENSOR_NCHW_VECT_C, "NCDHW": capi.CUDNN_TENSOR_NCHW,
            "NDHWC": capi.CUDNN_TENSOR_NHWC}
_DIRECTIONS = {"fold": capi.CUDNN_TRANSFORM_FOLD, "unfold": capi.CUDNN_TRANSFORM_UNFOLD}

# ---------------------------------------------------------------- add, op-tensor, scale, set


def _broadcastable(b: DeviceArray, c: DeviceArray, bname: str, cname: str) -> None:
    if b.ndim != c.ndim or any(bd not in (1, cd) for bd, cd in zip(b.shape, c.shape)):
        raise InvalidValueError(f"{bname} has shape {b.shape}; it must have {cname}'s {c.ndim} dimensions "
                                f"{c.shape}, each equal or 1 (broadcast)")


@prepared(inputs=("a",), outputs=("c",), scalars=("alpha", "beta"))
def add_tensor(handle: Handle, a: DeviceArrayLike, c: Out, *, alpha: float = 1.0, beta: float | None = None,
               engine: str = "auto") -> Out:
    """``c = alpha * a + beta * c`` in place (``cudnnAddTensor``); ``a`` broadcasts over dimensions where it has 1.

    ``beta``: pass ``beta=1.0`` to accumulate into c (left out, it accumulates but warns: the default becomes 0.0).
    ``engine``: "legacy", "graph" or "auto" (see the module doc). Returns c."""
    if beta is None:
        warn("add_tensor(): pass beta=1.0 to accumulate; the default becomes 0.0")
        recording.spoil("a deprecated default warns on every call")
        beta = 1.0
    ca = check_array(c, "c", handle, floating=True)
    aa = check_array(a, "a", handle, dtype=ca.dtype)
    _broadcastable(aa, ca, "a", "c")
    if ca.ndim > 5:
        raise InvalidValueError(f"cudnnAddTensor takes tensors of up to 5 dimensions; c has shape {ca.shape}")
    inputs = [("a", aa)] + ([("prior", ca)] if beta else [])
    gl.dispatch(engine, handle, None,
                lambda: blend(handle, capi.cudnnAddTensor, (), ca.dtype, alpha, beta, [aa], ca),
                lambda auto: gl.run_graph(handle, "add_tensor", (alpha, beta), inputs, [("c", ca)],
                                          lambda g, t, _: gl.blend(g, t["a"], t, alpha, beta), auto=auto))
    return c


def _settings(op, cls: type[OpTensor] | type[ReduceTensor], table: dict, enum_type, compute_dtype,
              nan_propagation) -> tuple:
    """(operation, compute_dtype, nan_propagation) from ``op`` (a ``cls``) or from an operation and the keywords."""
    if isinstance(op, cls):
        if compute_dtype is not None or nan_propagation:
            raise InvalidValueError(f"op is a {cls.__name__}: give compute_dtype and nan_propagation in it, not as "
                                    f"keywords too")
        return op.op, op.compute_dtype, op.nan_propagation
    return enum_arg(op, table, enum_type, "op"), compute_dtype, nan_propagation


def _compute(dtype, compute_dtype):
    if compute_dtype is not None:
        return cudnn_dtype(compute_dtype)
    return capi.CUDNN_DATA_DOUBLE if np.dtype(dtype) == np.float64 else capi.CUDNN_DATA_FLOAT


#: op-tensor operation -> the pointwise mode of its graph path ("not" is ``a == 0``)
_GRAPH_OPS = {op: "cmp_eq" if name == "not" else name for name, op in OP_TENSOR_OPS.items()}


def _graph_compute(compute_dtype, nan_propagation: bool) -> None:
    if nan_propagation:
        raise gl.GraphPathRefused("engine='graph' has no NaN-propagation setting; use engine='legacy'")
    if compute_dtype is not None and cudnn_dtype(compute_dtype) != capi.CUDNN_DATA_FLOAT:
        raise gl.GraphPathRefused(f"engine='graph' computes in float32; compute_dtype={compute_dtype!r} needs "
                                  f"engine='legacy'")


def _graph_op_tensor(handle: Handle, opv, aa, ba, ca, alpha1, alpha2, beta, compute_dtype, nan_propagation, unary,
                     auto):
    _graph_compute(compute_dtype, nan_propagation)
    mode = _GRAPH_OPS[opv]
    inputs = [("a", aa)] + ([] if unary else [("b", ba)]) + ([("prior", ca)] if beta else [])

    def build(g, t, _):
        a = g.scale(t["a"], float(alpha1)) if alpha1 != 1.0 else t["a"]
        if mode == "cmp_eq":
            r = g.pointwise("cmp_eq", a, 0.0)
        elif unary:
            r = g.pointwise(mode, a)
        else:
            r = g.pointwise(mode, a, g.scale(t["b"], float(alpha2)) if alpha2 != 1.0 else t["b"])
        return gl.blend(g, r, t, 1.0, beta)
    return gl.run_graph(handle, "op_tensor", (mode, float(alpha1), float(alpha2), float(beta)), inputs,
                        [("c", ca)], build, auto=auto)


@prepared(inputs=("a", "b"), outputs=("c",), scalars=("alpha1", "alpha2", "beta"), moved=("c",))
def op_tensor(handle: Handle, op: str | int | OpTensor, a: DeviceArrayLike, b: DeviceArrayLike | None = None,
              *, c: Out | None = None, alpha1: float = 1.0, alpha2: float = 1.0,
              beta: float = 0.0, compute_dtype: DTypeLike | int | None = None, nan_propagation: bool = False,
              engine: str = "auto") -> DeviceArray | Out:
    """``c = op(alpha1 * a, alpha2 * b) + beta * c`` (``cudnnOpTensor``); returns c (allocated like ``a`` if not given).

    ``op``: ``"add"``, ``"mul"``, ``"min"``, ``"max"`` (binary; ``b`` broadcasts over dimensions where it has 1) or
    ``"sqrt"``, ``"not"`` (unary; ``b`` unused). ``compute_dtype``: default float32 (float64 for float64 data).
    """
    opv, compute_dtype, nan_propagation = _settings(op, OpTensor, OP_TENSOR_OPS, capi.cudnnOpTensorOp_t,
                                                    compute_dtype, nan_propagation)
    aa = check_array(a, "a", handle, floating=True)
    unary = opv in (capi.CUDNN_OP_TENSOR_SQRT, capi.CUDNN_OP_TENSOR_NOT)
    if b is None and not unary:
        raise InvalidValueError(f"op_tensor {opv.name} is binary: pass b")
    ba = aa if b is None else check_array(b, "b", handle, dtype=aa.dtype)
    _broadcastable(ba, aa, "b", "c")  # c has a's shape (output() checks a given c): refused before c is allocated
    ca = output(c, "c", handle, aa.shape, aa.dtype, like=aa)
    args = (handle, opv, aa, ba, ca, alpha1, alpha2, beta, compute_dtype, nan_propagation)
    gl.dispatch(engine, handle, None, lambda: _legacy_op_tensor(*args),
                lambda auto: _graph_op_tensor(*args, unary, auto))
    return ca if c is None else c


def _legacy_op_tensor(handle: Handle, opv, aa, ba, ca, alpha1, alpha2, beta, compute_dtype, nan_propagation) -> None:
    od = OpTensor(opv, _compute(aa.dtype, compute_dtype), nan_propagation=nan_propagation)  # holds the descriptor
    a1, a2, be = scalars(aa.dtype, alpha1, alpha2, beta)
    launch(handle, capi.cudnnOpTensor, handle.ptr, od, a1, desc(aa), aa, a2, desc(ba), ba, be, desc(ca), ca)


@prepared(inputs=("y",), outputs=("y",))
def scale_tensor(handle: Handle, y: Out, *args, alpha: float = 1.0, engine: str = "auto") -> Out:
    """``y = alpha * y`` in place (``cudnnScaleTensor``); returns y. ``engine``: "legacy", "graph" or "auto".
    ``alpha`` is keyword-only (a positional alpha still works, with a :class:`DeprecationWarning`)."""
    if args:
        if len(args) > 1 or alpha != 1.0:
            raise InvalidTypeError(f"scale_tensor() takes alpha once, as a keyword (got {len(args)} positional "
                                   f"argument{'s' * (len(args) > 1)} after y{' and alpha=' if alpha != 1.0 else ''})")
        warn("scale_tensor(): pass alpha= as a keyword; positional alpha is deprecated")
        alpha = args[0]
    (alpha,) = scaling(alpha=alpha)
    ya = check_array(y, "y", handle, floating=True)
    gl.dispatch(engine, handle, None,
                lambda: _scale(handle, ya, alpha),
                lambda auto: gl.run_graph(handle, "scale_tensor", (alpha,), [("prior", ya)], [("y", ya)],
                                          lambda g, t, _: g.scale(t["prior"], alpha), auto=auto))
    return y


#: the dtypes cuDNN's cudnnSetTensor kernel fills right in any layout (verified on the GPU; int8 slices come back
#: zero, int32 ones are CUDNN_STATUS_NOT_SUPPORTED on 9.19)
_SET_KERNEL_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


@prepared(inputs=(), outputs=("y",))
def set_tensor(handle: Handle, y: Out, value: float) -> Out:
    """Every element of ``y`` = value, on the handle's stream; returns y.

    A dense ``y`` (packed in any dimension order, no negative stride) is filled by a driver memset of the value in
    y's dtype (much faster than ``cudnnSetTensor``: docs/ops.md). Otherwise ``cudnnSetTensor`` fills float16,
    bfloat16, float32 and float64 tensors (reading the value as float, double for float64; the memset writes the
    same bits); other dtypes need a dense ``y`` (and a float64/int64 value whose two 4-byte halves a 32-bit memset
    can write).
    """
    ya = check_array(y, "y", handle)
    # checked against y's own dtype (300 into int8, NaN into int32 are refused), then as the host type cuDNN reads
    kernel = ya.dtype.name in _SET_KERNEL_DTYPES
    host_type = ya.dtype if ya.dtype.itemsize == 8 or not kernel else np.dtype(np.float32)
    host = element_value(value, ya.dtype, "value").astype(host_type)
    yd = None
    if ya.span()[1] == ya.size and min(ya.strides, default=0) >= 0 and non_overlapping(ya.shape, ya.strides):
        element = host.astype(ya.dtype)
        if memset_writes(element):
            host_step(_fill, (handle, ya.ptr, element, ya.size), (1,))
            return y
        if kernel:  # no memset writes the value: y described packed in its memory order (docs/ops.md)
            yd = tensor_desc(tuple(ya.shape[i] for i in memory_order(ya.shape, ya.strides)), ya.dtype, None)
    if not kernel:
        raise InvalidValueError(f"set_tensor: a {ya.dtype.name} y must be dense (packed in some dimension order) and "
                                f"its value a repeated 1-, 2- or 4-byte word (cuDNN's cudnnSetTensor writes other "
                                f"{ya.dtype.name} tensors wrong or refuses them); got strides {ya.strides}, value "
                                f"{value!r}")
    scalar = (ctypes.c_double if host.dtype == np.float64 else ctypes.c_float)(host[0])
    launch(handle, capi.cudnnSetTensor, handle.ptr, desc(ya) if yd is None else yd, ya, ctypes.byref(scalar))
    return y


def _fill(handle: Handle, ptr: int, element: np.ndarray, count: int) -> None:
    """A driver memset of ``count`` copies of ``element`` from ``ptr`` on the handle's current stream."""
    stream = handle.stream.handle
    with on_device(handle.device):
        memset(ptr, element, count, stream)


# ---------------------------------------------------------------- transform


def _format_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Element strides of a packed array of logical N, C, *spatial shape stored in ``layout`` (any case)."""
    fmt = layout.upper() if isinstance(layout, str) else None
    if fmt in ("NCHW", "NCDHW", "C", "CONTIGUOUS"):
        return packed_strides(shape, False)
    if fmt not in ("NHWC", "NDHWC"):
        raise InvalidValueError(f"layout {layout!r}: expected 'NCHW' or 'NHWC' (any case)")
    if len(shape) < 3:
        raise InvalidValueError(f"layout {layout} needs N, C and at least one spatial dimension; got shape {shape}")
    return packed_strides(shape, True)


@prepared(inputs=("x",), outputs=("y",), scalars=("alpha", "beta"), moved=("y",))
def transform_tensor(handle: Handle, x: DeviceArrayLike, *, y: Out | None = None,
                     dtype: DTypeLike | None = None, layout: str | None = None, alpha: float = 1.0, beta: float = 0.0,
                     engine: str = "auto", **old) -> DeviceArray | Out:
    """``y = alpha * x + beta * y`` between layouts and dtypes (``cudnnTransformTensor``); returns y.

    ``y`` (x's logical shape, any strides, any dtype) or, when not given, a new array of ``dtype`` (default x's)
    whose memory is ``layout``: ``"NCHW"`` (packed) or ``"NHWC"`` (channels last; the logical shape stays N, C,
    *spatial), any case; by default x's memory order. ``engine``: "legacy", "graph" (floating dtypes) or "auto".
    ``memory_format=`` is the deprecated spelling of ``layout=``.
    """
    if old:
        layout = renamed_kwargs("transform_tensor", old, {"memory_format": "layout"}, {"layout": layout})["layout"]
        recording.spoil("a deprecated keyword warns on every call")
    xa = check_array(x, "x", handle)
    want = None if dtype is None else array_dtype(dtype)
    if y is None:
        out_dtype = xa.dtype if want is None else want
        ya = output(None, "y", handle, xa.shape, out_dtype, like=xa) if layout is None else \
            new_output(handle, xa.shape, out_dtype, _format_strides(xa.shape, layout))
    else:
        ya = check_array(y, "y", handle, shape=xa.shape)
        if want is not None and ya.dtype != want:
            raise InvalidTypeError(f"y has dtype {ya.dtype} but dtype={want} was asked for")
    inputs = [("x", xa)] + ([("prior", ya)] if beta else [])
    scalar_dtype = np.float64 if np.float64 in (xa.dtype, ya.dtype) else np.float32
    gl.dispatch(engine, handle, None,
                lambda: blend(handle, capi.cudnnTransformTensor, (), scalar_dtype, alpha, beta, [xa], ya),
                lambda auto: gl.run_graph(
                    handle, "transform_tensor", (alpha, beta), inputs, [("y", ya)],
                    lambda g, t, _: gl.blend(g, g.pointwise("identity", t["x"]), t, alpha, beta), auto=auto))
    return ya if y is None else y


def _scale(handle: Handle, ya: DeviceArray, alpha: float) -> None:
    (al,) = scalars(ya.dtype, alpha)
    launch(handle, capi.cudnnScaleTensor, handle.ptr, desc(ya), ya, al)


class TensorTransformDescriptor(Descriptor):
    """A ``cudnnTensorTransformDescriptor_t``: the destination ``layout`` of an ``nd``-dimensional transform, zero
    padding ``pad_before``/``pad_after`` per dimension, ``fold`` factors and the folding ``direction``, all parsed."""

    _handle_type = capi.cudnnTensorTransformDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateTensorTransformDescriptor", "cudnnDestroyTensorTransformDescriptor"
    _shown = ("layout", "pad_before", "pad_after", "fold", "direction")
    _cache_name = "ops.tensor_transform"

    def __init__(self, nd: int, layout: capi.cudnnTensorFormat_t, pad_before: tuple[int, ...],
                 pad_after: tuple[int, ...], fold: tuple[int, ...], direction: capi.cudnnFoldingDirection_t):
        self.nd, self.layout, self.direction = nd, layout, direction
        self.pad_before, self.pad_after, self.fold = tuple(pad_before), tuple(pad_after), tuple(fold)
        super().__init__()
        capi.cudnnSetTensorTransformDescriptor(self._ptr, nd, layout, (ctypes.c_int32 * nd)(*pad_before),
                                               (ctypes.c_int32 * nd)(*pad_after), (ctypes.c_uint32 * nd)(*fold),
                                               direction)


@prepared(inputs=("x",), outputs=("y",), inplace=False, scalars=("alpha", "beta"))
def transform_tensor_ex(handle: Handle, x: DeviceArrayLike, *, layout: str | None = None,
                        pad_before: int | Sequence[int] = 0, pad_after: int | Sequence[int] = 0,
                        fold: int | Sequence[int] = 1, direction: str = "fold", y: Out | None = None,
                        dtype: DTypeLike | None = None, alpha: float = 1.0, beta: float = 0.0,
                        **old) -> DeviceArray | Out:
    """Layout change with zero padding / folding (``cudnnTransformTensorEx``); returns y.

    ``x`` is 4-D or 5-D (logical N, C, *spatial). ``layout``: the destination's, ``"NHWC"`` (default), ``"NCHW"`` or
    ``"NCHW_VECT_C"``, any case; ``pad_before`` / ``pad_after``: zeros added before / after each dimension (an int or
    one per dimension); ``fold``: fold factors per dimension (1 = none) and ``direction`` ``"fold"``/``"unfold"``.
    A new ``y`` has the destination cuDNN derives (``cudnnInitTransformDest``; logical N, C, *spatial, the strides
    give the format). ``dest_format=`` is the deprecated spelling of ``layout=``.
    """
    if old:
        layout = renamed_kwargs("transform_tensor_ex", old, {"dest_format": "layout"}, {"layout": layout})["layout"]
        recording.spoil("a deprecated keyword warns on every call")
    xa = check_array(x, "x", handle)
    nd = xa.ndim
    if nd not in (4, 5):
        raise InvalidValueError(f"transform_tensor_ex takes 4-D or 5-D tensors; x has shape {xa.shape}")
    fmt = enum_arg("NHWC" if layout is None else layout, {k.lower(): v for k, v in _FORMATS.items()},
                   capi.cudnnTensorFormat_t, "layout")
    before = ints(pad_before, nd, "pad_before", 0)
    after = ints(pad_after, nd, "pad_after", 0)
    folds = ints(fold, nd, "fold", 1)
    dirv = enum_arg(direction, _DIRECTIONS, capi.cudnnFoldingDirection_t, "direction")
    out_dtype = array_dtype(dtype) if dtype is not None else (xa.dtype if y is None else as_array(y, "y").dtype)
    tdesc = TensorTransformDescriptor.shared(nd, fmt, before, after, folds, dirv)
    probe = tensor_desc(xa.shape, out_dtype, xa.strides)  # x's with the destination dtype, for InitTransformDest

    def derive(dest):
        capi.cudnnInitTransformDest(tdesc.ptr, probe.ptr, dest, ctypes.byref(ctypes.c_size_t()))
        return read_tensor_desc(dest)
    shape, strides, _ = with_tensor_descriptors(derive)
    if y is None:
        ya = new_output(handle, shape, out_dtype, strides)
    else:
        ya = check_array(y, "y", handle, shape=shape, dtype=out_dtype)
        if ya.strides != strides:
            raise InvalidValueError(f"y has strides {ya.strides}; this transform writes strides {strides}")
    scalar_dtype = np.float64 if np.float64 in (xa.dtype, ya.dtype) else np.float32
    blend(handle, capi.cudnnTransformTensorEx, (tdesc,), scalar_dtype, alpha, beta, [xa], ya)
    return ya if y is None else y


# ---------------------------------------------------------------- reduce


class ReduceResult(NamedTuple):
    """What :func:`reduce_tensor` returns with ``indices=True``."""
    c: DeviceArray
    indices: DeviceArray


#: reductions the graph path has (cuDNN's graph refuses MUL_NO_ZEROS)
_GRAPH_REDUCE = frozenset(REDUCE_OPS) - {"mul_no_zeros"}


def _graph_reduce(handle: Handle, opv, aa, ca, alpha, beta, compute_dtype, nan_propagation, indices, auto) -> bool:
    _graph_compute(compute_dtype, nan_propagation)
    name = opv.name[len("CUDNN_REDUCE_TENSOR_"):].lower()
    if indices or name not in _GRAPH_REDUCE:
        raise gl.GraphPathRefused(f"engine='graph' reduces with {', '.join(sorted(_GRAPH_REDUCE))} and gives no "
                                  f"indices; use engine='legacy' for {name}" + (" with indices" if indices else ""))
    # cuDNN 9.19's reduction engines write float32 and take no epilogue: reduce into float32, then blend into c
    direct = ca.dtype == np.float32 and alpha == 1.0 and beta == 0.0
    acc = ca if direct else new_output(handle, ca.shape, np.float32, ca.strides)
    ran = gl.run_graph(handle, "reduce_tensor", (name,), [("a", aa)], [("c", acc)],
                       lambda g, t, shape: g.reduction(t["a"], name, out_shape=shape), auto=auto, layout_of=aa,
                       autotune=True)
    if direct or not ran:
        return ran
    return gl.run_graph(handle, "reduce_blend", (float(alpha), float(beta)), [("acc", acc)] + (
        [("prior", ca)] if beta else []), [("c", ca)], lambda g, t, _: gl.blend(g, t["acc"], t, alpha, beta),
        auto=auto)


@overload
def reduce_tensor(handle: Handle, op: str | int | ReduceTensor, a: DeviceArrayLike, *,
                  c: Out | None = None, axes: int | Sequence[int] | None = None, indices: Literal[False] = False,
                  alpha: float = 1.0, beta: float = 0.0, compute_dtype: DTypeLike | int | None = None,
                  nan_propagation: bool = False, engine: str = "auto") -> DeviceArray | Out: ...


@overload
def reduce_tensor(handle: Handle, op: str | int | ReduceTensor, a: DeviceArrayLike, *,
                  c: DeviceArrayLike | None = None, axes: int | Sequence[int] | None = None, indices: Literal[True],
                  alpha: float = 1.0, beta: float = 0.0, compute_dtype: DTypeLike | int | None = None,
                  nan_propagation: bool = False, engine: str = "auto") -> ReduceResult: ...


@overload
def reduce_tensor(handle: Handle, op: str | int | ReduceTensor, a: DeviceArrayLike, *,
                  c: Out | None = None, axes: int | Sequence[int] | None = None, indices: bool = False,
                  alpha: float = 1.0, beta: float = 0.0, compute_dtype: DTypeLike | int | None = None,
                  nan_propagation: bool = False, engine: str = "auto") -> DeviceArray | Out | ReduceResult: ...


@prepared(inputs=("a",), outputs=("c",), inplace=False, scalars=("alpha", "beta"), moved=("c",))
def reduce_tensor(handle: Handle, op: str | int | ReduceTensor, a: DeviceArrayLike, *,
                  c: Out | None = None, axes: int | Sequence[int] | None = None, indices: bool = False,
                  alpha: float = 1.0, beta: float = 0.0, compute_dtype: DTypeLike | int | None = None,
                  nan_propagation: bool = False, engine: str = "auto") -> DeviceArray | Out | ReduceResult:
    """``c = alpha * reduce_op(a) + beta * c`` (``cudnnReduceTensor``); returns c, or a :class:`ReduceResult`
    ``(c, indices)`` with ``indices=True``.

    The reduced dimensions are ``axes`` (an int or ints; default all) or, when ``c`` is given, those where c has 1
    and a does not. ``op``: add, mul, min, max, amax, avg, norm1, norm2, mul_no_zeros. ``indices=True`` (min, max,
    amax only) also returns, as int32 shaped like c, the position of the chosen element flattened over the reduced
    dimensions (row-major). ``engine``: "legacy", "graph" or "auto".
    """
    indices = bool_arg(indices, "indices")
    if isinstance(op, ReduceTensor):
        if op.indices_type != capi.CUDNN_32BIT_INDICES:
            raise InvalidValueError(f"reduce_tensor returns int32 indices; this ReduceTensor asks for "
                                    f"{op.indices_type.name}")
        if (op.indices != capi.CUDNN_REDUCE_TENSOR_NO_INDICES) != bool(indices):
            raise InvalidValueError(f"indices={bool(indices)} but the ReduceTensor says {op.indices.name}: the "
                                    f"indices= flag decides what reduce_tensor returns, pass the same in both")
    opv, compute_dtype, nan_propagation = _settings(op, ReduceTensor, REDUCE_OPS, capi.cudnnReduceTensorOp_t,
                                                    compute_dtype, nan_propagation)
    aa = check_array(a, "a", handle, floating=True)
    if indices and opv not in _INDEXED:
        raise InvalidValueError(f"reduce_tensor gives indices only for min, max and amax, not {opv.name}")
    if c is None:
        ax = _axes(axes, aa)
        ca = output(None, "c", handle, tuple(1 if i in ax else n for i, n in enumerate(aa.shape)), aa.dtype)
    else:
        if axes is not None:
            raise InvalidValueError("give either c (its unit dimensions are the reduced ones) or axes, not both")
        ca = check_array(c, "c", handle, floating=True)
        if ca.ndim != aa.ndim or any(cd not in (1, ad) for ad, cd in zip(aa.shape, ca.shape)):
            raise InvalidValueError(f"c has shape {ca.shape}; each dimension must equal a's {aa.shape} or be 1")
    idx: list[DeviceArray] = []  # the legacy call's indices, with indices=True
    args = (handle, opv, aa, ca, alpha, beta, compute_dtype, nan_propagation, indices)
    gl.dispatch(engine, handle, None, lambda: idx.extend(_legacy_reduce(*args)),
                lambda auto: _graph_reduce(*args, auto), measure=not indices)
    if idx:
        return ReduceResult(ca, idx[-1])
    return ca if c is None else c


def _legacy_reduce(handle: Handle, opv, aa: DeviceArray, ca: DeviceArray, alpha: float, beta: float, compute_dtype,
                   nan_propagation: bool, indices: bool) -> list[DeviceArray]:
    """``cudnnReduceTensor``; the indices (with ``indices``) in a list."""
    compute = _compute(aa.dtype, compute_dtype)
    reduction = ReduceTensor(opv, compute, nan_propagation=nan_propagation, indices=indices)
    rd = reduction.descriptor
    ad, cd = desc(aa), desc(ca)
    ws_size, idx_size = ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnGetReductionWorkspaceSize(handle.ptr, rd, ad.ptr, cd.ptr, ctypes.byref(ws_size))
    idx, idx_ptr, idx_bytes = None, None, 0
    if indices:
        recording.spoil("the indices buffer is sized by cuDNN, larger than the index array returned")
        capi.cudnnGetReductionIndicesSize(handle.ptr, rd, ad.ptr, cd.ptr, ctypes.byref(idx_size))
        words = max(ca.size, -(-idx_size.value // 4))
        idx_buf = empty((words,), np.int32, stream=handle.stream, device=handle.device)
        idx = DeviceArray(idx_buf.ptr, ca.shape, np.int32, device_id=idx_buf.device_id, owner=idx_buf,
                          stream=idx_buf.stream)
        idx_ptr, idx_bytes = idx_buf.ptr, words * 4
    al, be = scalars(np.float64 if compute == capi.CUDNN_DATA_DOUBLE else np.float32, alpha, beta)
    launch(handle, capi.cudnnReduceTensor, handle.ptr, reduction, idx_ptr, idx_bytes, WorkspaceArg(ws_size.value),
           ws_size.value, al, ad, aa, be, cd, ca)
    return [] if idx is None else [idx]


def _axes(axes, a: DeviceArray) -> set[int]:
    """The reduced axes (default: all) as non-negative ints."""
    if axes is None:
        return set(range(a.ndim))
    out = set()
    for i in (tuple(axes) if hasattr(axes, "__iter__") else (axes,)):
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -a.ndim <= i < a.ndim:
            raise InvalidValueError(f"axes {axes!r}: each must be an int in [{-a.ndim}, {a.ndim}) for a of shape "
                                    f"{a.shape}")
        out.add(int(i) % a.ndim)
    return out
