"""Pooling, forward and backward: max, deterministic max, average with or without padding; 1 to 3 spatial dims.

::

    pool = Pooling("max", window=2, stride=2)              # stride defaults to the window
    y = pooling_forward(h, pool, x)                         # x: N, C, *spatial; y allocated
    dx = pooling_backward(h, pool, x, y, dy)

Output size per spatial dimension: ``1 + (in + 2 * padding - window) // stride``. A new output keeps x's memory
order whichever engine runs.

``engine``: "legacy" (``cudnnPoolingForward/Backward``), "graph" (resample operations: float16, bfloat16, float32,
x, y, dy and dx in one memory order, alpha 1 and beta 0; a NaN in a max window wins whatever ``nan_propagation``
says; channels-last bfloat16 2-D pooling raises :class:`~cudnn_py.graph.GraphNotSupportedError`) or "auto" (the
default: the faster, measured once per configuration; with measuring off the graph for 2-D channels-last pooling
but max forward, else the legacy call; docs/graph_paths.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from ctypes import byref, c_int

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py._deprecation import alias
from cudnn_py.core.args import (DIM_MAX, INT32_MAX, dims, enum_member, int_or_ints, int_tuple, ints, nan_flag,
                           spatial_ndim)
from cudnn_py.core.descriptors import (Descriptor, Settings, TensorDescriptor, c_ints, c_nan, legacy_dtype, read_back,
                                  setting)
from cudnn_py.graph import legacy as gl
from cudnn_py.graph.ops.resample import channels_last
from cudnn_py.core.conv_layout import unit_height
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops._common import Out, blend, check_array, desc, instance_of, new_output, output
from cudnn_py.calls.prepared import prepared
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["Pooling", "pooling_forward", "pooling_backward", "pooling_output_shape", "POOLING_MODES"]

#: the mode names :class:`Pooling` takes (any case; also a ``cudnnPoolingMode_t`` member, its value or full name)
POOLING_MODES = {
    "max": capi.CUDNN_POOLING_MAX,
    "max_deterministic": capi.CUDNN_POOLING_MAX_DETERMINISTIC,
    "avg_include_padding": capi.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
    "avg_exclude_padding": capi.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
    # 'avg' excludes padding (torch's avg_pool2d includes it by default)
    "avg": capi.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
    "average": capi.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
    "average_count_include_padding": capi.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
    "average_count_exclude_padding": capi.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
}
_ALIASES = {name: mode.name for name, mode in POOLING_MODES.items()}
_NAMES = {v: k for k, v in reversed(POOLING_MODES.items())}


def _param(v, name: str, minimum: int) -> int | tuple[int, ...]:
    """An int (every spatial dim) or a tuple of 1 to 3 ints, each in ``[minimum, 2**31 - 1]``."""
    t = int_or_ints(v, name, minimum)
    if isinstance(t, tuple) and not 1 <= len(t) <= 3:
        raise InvalidValueError(f"{name} needs 1 to 3 values (one per spatial dimension), got {v!r}")
    return t


def _unit_height(params: tuple) -> tuple:
    """(window, padding, stride) of 1-D pooling as 2-D's with a unit height; others as they are."""
    win, pad, st = params
    return ((1,) + win, (0,) + pad, (1,) + st) if len(win) == 1 else params


class _PoolingDescriptor(Descriptor):
    """A ``cudnnPoolingDescriptor_t`` of the settings :class:`cudnn_py.Pooling` validated, read back from cuDNN."""

    _handle_type = capi.cudnnPoolingDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreatePoolingDescriptor", "cudnnDestroyPoolingDescriptor"
    _shown = ("mode", "window", "padding", "stride", "nan_propagation")
    _cache_name = "descriptors.pooling"

    def __init__(self, mode: capi.cudnnPoolingMode_t, nan_propagation: bool, window: tuple[int, ...],
                 padding: tuple[int, ...], stride: tuple[int, ...]):
        super().__init__()
        capi.cudnnSetPoolingNdDescriptor(self._ptr, mode, c_nan(nan_propagation), len(window), c_ints(window),
                                         c_ints(padding), c_ints(stride))

    def _get(self):
        mode, nan, n = c_int(), c_int(), c_int()
        win, pad, st = (c_int * DIM_MAX)(), (c_int * DIM_MAX)(), (c_int * DIM_MAX)()
        capi.cudnnGetPoolingNdDescriptor(self.ptr, DIM_MAX - 2, byref(mode), byref(nan), byref(n), win, pad, st)
        k = n.value
        return (capi.cudnnPoolingMode_t(mode.value), capi.cudnnNanPropagation_t(nan.value),
                tuple(win[:k]), tuple(pad[:k]), tuple(st[:k]))

    mode = read_back(0, "The ``cudnnPoolingMode_t``.")
    nan_propagation = read_back(1, "The ``cudnnNanPropagation_t``.")
    window = read_back(2, "Window per spatial dimension.")
    padding = read_back(3, "Padding per spatial dimension.")
    stride = read_back(4, "Stride per spatial dimension.")


class Pooling(Settings):
    """Pooling settings: validated once, hashable, with one shared ``cudnnPoolingDescriptor_t`` per spatial rank.

    ``mode``: a key of :data:`POOLING_MODES` (``"max"``, ``"max_deterministic"``, ``"avg"`` = ``"avg_exclude_padding"``,
    ``"avg_include_padding"``; any case) or a ``cudnnPoolingMode_t``. ``window``, ``padding``, ``stride``: an int (every
    spatial dimension) or 1 to 3 ints; ``stride`` defaults to the window. ``nan_propagation``: whether a NaN in a max
    window wins (default False). The settings read back as properties.
    """

    __slots__ = ("_mode", "_window", "_padding", "_stride", "_nan", "_descs")

    def __init__(self, mode: str | int = "max", window: int | Sequence[int] = 2, padding: int | Sequence[int] = 0,
                 stride: int | Sequence[int] | None = None, *, nan_propagation: bool = False) -> None:
        self._mode = enum_member(capi.cudnnPoolingMode_t, mode, "CUDNN_POOLING_", "pooling mode", _ALIASES)
        self._window = _param(window, "window", 1)
        self._padding = _param(padding, "padding", 0)
        self._stride = self._window if stride is None else _param(stride, "stride", 1)
        self._nan = nan_flag(nan_propagation)
        self._descs: dict[int, _PoolingDescriptor] = {}

    mode: capi.cudnnPoolingMode_t = setting("_mode")
    window: int | tuple[int, ...] = setting("_window", "As given: an int (every spatial dimension) or one int per "
                                                       "spatial dimension.")
    padding: int | tuple[int, ...] = setting("_padding")
    stride: int | tuple[int, ...] = setting("_stride")
    nan_propagation: bool = setting("_nan")

    def params(self, nd: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(window, padding, stride) for ``nd`` spatial dimensions, validated."""
        win, pad = ints(self._window, nd, "window", 1), ints(self._padding, nd, "padding", 0)
        for i, (w, p) in enumerate(zip(win, pad)):
            if w + 2 * p > INT32_MAX:
                raise InvalidValueError(f"window {win} and padding {pad} in spatial dim {i} exceed cuDNN's int range")
        return win, pad, ints(self._stride, nd, "stride", 1)

    def output_shape(self, x_shape) -> tuple[int, ...]:
        """The output shape for input ``x_shape`` (N, C, *spatial); ValueError if a window does not fit."""
        x_shape = int_tuple(x_shape, "x_shape", minimum=1)
        nd = len(x_shape) - 2
        if not 1 <= nd <= 3:
            raise InvalidValueError(f"pooling takes N, C and 1 to 3 spatial dimensions; got shape {x_shape}")
        win, pad, st = self.params(nd)
        out = tuple(1 + (s + 2 * p - w) // t for s, w, p, t in zip(x_shape[2:], win, pad, st))
        if any(s + 2 * p < w for s, w, p in zip(x_shape[2:], win, pad)):
            raise InvalidValueError(f"pooling window {win} (padding {pad}) does not fit input of shape {x_shape}")
        return x_shape[:2] + out

    def descriptor(self, nd: int) -> capi.cudnnPoolingDescriptor_t:
        """The shared ``cudnnPoolingDescriptor_t`` for ``nd`` (1 to 3) spatial dimensions (1-D is set as 2-D)."""
        d = self._descs.get(nd) or self._descs.setdefault(
            nd, _PoolingDescriptor.shared(self._mode, self._nan, *_unit_height(self.params(nd))))
        return d.ptr

    def _key(self):
        return (int(self._mode), self._window, self._padding, self._stride, self._nan)

    def __repr__(self):
        nan = ", nan_propagation=True" if self._nan else ""
        return (f"Pooling({_NAMES[self._mode]!r}, window={self._window}, padding={self._padding}, "
                f"stride={self._stride}{nan})")


def _resolve(pool, x_shape) -> tuple[capi.cudnnPoolingDescriptor_t, tuple[int, ...]]:
    """(descriptor handle, output shape) for a :class:`Pooling`."""
    instance_of(pool, Pooling, "pool")
    y_shape = pool.output_shape(x_shape)  # checked first: 1 to 3 spatial dimensions
    return pool.descriptor(len(x_shape) - 2), y_shape


#: legacy pooling mode -> resample mode of the graph path
_GRAPH_MODES = {capi.CUDNN_POOLING_MAX: "max", capi.CUDNN_POOLING_MAX_DETERMINISTIC: "max",
                capi.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING: "avg",
                capi.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING: "avg_exclude_padding"}


def _view(a: DeviceArray) -> DeviceArray:
    """An N, C, L array as N, C, 1, L (what cuDNN's pooling takes: 1-D runs as 2-D); others as they are."""
    if a.ndim != 3:
        return a
    shape, strides = unit_height(a.shape, a.strides)
    return DeviceArray(a.ptr, shape, a.dtype, strides, device_id=a.device_id, owner=a)


def _same_layout(*arrays: DeviceArray) -> bool:
    """Whether the arrays share a memory order (all channels-last or none); refuses mixed ones for the graph."""
    cl = {channels_last(a) for a in arrays if a.shape[1] > 1}
    if len(cl) > 1:
        raise gl.GraphPathRefused("engine='graph' pools arrays of one memory order (all NCHW or all channels-last); "
                                  "use engine='legacy' to change layouts")
    return cl == {True}


def _static(x: DeviceArray, direction: str, pool: Pooling) -> str:
    """The engine ``engine='auto'`` runs without measuring."""
    legacy = x.ndim != 4 or not channels_last(x) or (direction == "forward" and _GRAPH_MODES[pool.mode] == "max")
    return "legacy" if legacy else "graph"


def _graph(handle: Handle, pool: Pooling, xa, ya, dya, dxa, alpha, beta, auto) -> bool:
    """The graph path, forward (``dya`` None) or backward: channels-last max pooling runs backward from an int8 window
    index (cuDNN 9.19's backward from x and y crashes there), channels-last average pooling from dy alone."""
    if alpha != 1.0 or beta != 0.0:
        raise gl.GraphPathRefused("engine='graph' pools with alpha 1 and beta 0; use engine='legacy' to blend")
    mode, (win, pad, st) = _GRAPH_MODES[pool.mode], _unit_height(pool.params(xa.ndim - 2))
    params, kw = (mode, win, pad, st), dict(stride=st, padding=pad, post_padding=pad)
    xv, yv = _view(xa), _view(ya)
    if dya is None:
        _same_layout(xv, yv)
        return gl.run_graph(handle, "pooling_forward", params, [("x", xv)], [("y", yv)],
                            lambda g, t, _: g.resample(t["x"], mode, win, **kw), auto=auto, relabel=False,
                            autotune=True)
    dyv, dxv = _view(dya), _view(dxa)
    cl = _same_layout(xv, yv, dyv, dxv)
    if mode == "max" and cl:
        idx = new_output(handle, yv.shape, np.int8, yv.strides)
        scratch = new_output(handle, yv.shape, yv.dtype, yv.strides)
        if not gl.run_graph(handle, "pooling_index", params, [("x", xv)], [("y", scratch), ("index", idx)],
                            lambda g, t, _: g.resample(t["x"], mode, win, index=True, **kw), auto=auto,
                            relabel=False, autotune=True):
            return False
        inputs = [("dy", dyv), ("index", idx)]
    else:
        inputs = [("dy", dyv)] + ([] if cl else [("x", xv), ("y", yv)])

    def build(g, t, _):
        return g.resample_backward(t["dy"], mode, win, x=t.get("x"), y=t.get("y"), index=t.get("index"),
                                   x_shape=dxv.shape, **kw)
    return gl.run_graph(handle, "pooling_backward", params, inputs, [("dx", dxv)], build, auto=auto, relabel=False,
                        autotune=True)


def _legacy(handle: Handle, pd, xa, ya, dya, dxa, alpha: float, beta: float) -> None:
    """``cudnnPoolingForward`` (``dya`` None) or ``cudnnPoolingBackward``."""
    ins, out = ([xa], ya) if dya is None else ([ya, dya, xa], dxa)
    blend(handle, capi.cudnnPoolingForward if dya is None else capi.cudnnPoolingBackward, (pd,), xa.dtype, alpha, beta,
          ins, out, lambda a: desc(_view(a)))


@prepared(inputs=("x",), outputs=("y",), inplace=False, scalars=("alpha", "beta"), moved=("y",))
def pooling_forward(handle: Handle, pool: Pooling, x: DeviceArrayLike, *, y: Out | None = None,
                    alpha: float = 1.0, beta: float = 0.0, engine: str = "auto") -> DeviceArray | Out:
    """``y = alpha * pool(x) + beta * y`` (``cudnnPoolingForward``, ``pool`` a :class:`Pooling`); returns y (allocated
    if not given). ``engine``: "legacy", "graph" or "auto" (the default: see the module doc)."""
    xa = check_array(x, "x", handle, floating=True)
    pd, y_shape = _resolve(pool, xa.shape)
    ya = output(y, "y", handle, y_shape, xa.dtype, like=xa)
    gl.dispatch(engine, handle, None,
                lambda: _legacy(handle, pd, xa, ya, None, None, alpha, beta),
                lambda auto: _graph(handle, pool, xa, ya, None, None, alpha, beta, auto),
                static=_static(xa, "forward", pool))
    return ya if y is None else y


@prepared(inputs=("x", "y", "dy"), outputs=("dx",), inplace=False, scalars=("alpha", "beta"), moved=("dx",))
def pooling_backward(handle: Handle, pool: Pooling, x: DeviceArrayLike, y: DeviceArrayLike, dy: DeviceArrayLike,
                     *, dx: Out | None = None, alpha: float = 1.0, beta: float = 0.0,
                     engine: str = "auto") -> DeviceArray | Out:
    """``dx = alpha * dL/dx + beta * dx`` from the forward's x and y and the gradient dy (``cudnnPoolingBackward``)."""
    xa = check_array(x, "x", handle, floating=True)
    pd, y_shape = _resolve(pool, xa.shape)
    ya = check_array(y, "y", handle, dtype=xa.dtype, shape=y_shape)
    dya = check_array(dy, "dy", handle, dtype=xa.dtype, shape=y_shape)
    dxa = output(dx, "dx", handle, xa.shape, xa.dtype, like=xa)
    gl.dispatch(engine, handle, None,
                lambda: _legacy(handle, pd, xa, ya, dya, dxa, alpha, beta),
                lambda auto: _graph(handle, pool, xa, ya, dya, dxa, alpha, beta, auto),
                static=_static(xa, "backward", pool))
    return dxa if dx is None else dx


def pooling_output_shape(x_shape: Sequence[int], mode: str | int = "max", window: int | Sequence[int] = 2,
                         padding: int | Sequence[int] = 0, stride: int | Sequence[int] | None = None, *,
                         dtype: DTypeLike = np.float32) -> tuple[int, ...]:
    """The forward output shape of pooling input ``x_shape`` (N, C, spatial...), as cuDNN computes it
    (``cudnnGetPoolingNdForwardOutputDim``; :meth:`Pooling.output_shape` computes the same in Python)."""
    if isinstance(mode, Pooling):
        raise InvalidTypeError(f"pooling_output_shape takes a pooling's settings (mode, window, padding, stride), "
                               f"not a Pooling: use Pooling.output_shape, here {mode!r}.output_shape({x_shape!r})")
    x_shape = dims(x_shape, "x_shape", 3)
    pool = Pooling(mode, window, padding, stride)
    pool.output_shape(x_shape)  # checked first: 1 to 3 spatial dimensions, each window fits its padded input
    nd = len(x_shape)
    win, pad, st = pool.params(nd - 2)
    if any(n + 2 * p > INT32_MAX for n, p in zip(x_shape[2:], pad)):
        raise InvalidValueError(f"the padded input ({x_shape} padded by {pad}) exceeds cuDNN's int range")
    d, xd, out = (_PoolingDescriptor.shared(pool.mode, False, win, pad, st),
                  TensorDescriptor.shared(x_shape, legacy_dtype(dtype, "pooling")), (c_int * nd)())
    capi.cudnnGetPoolingNdForwardOutputDim(d.ptr, xd.ptr, nd, out)
    return tuple(out)


def _pooling(mode="max", window=2, padding=0, stride=None, *, ndim=None, nan_propagation=False) -> Pooling:
    """What the deprecated PoolingDescriptor and pooling_descriptor make (``ndim``, when given, checked)."""
    pool = Pooling(mode, window, padding, stride, nan_propagation=nan_propagation)
    if ndim is not None:
        pool.params(spatial_ndim(ndim, ()))
    return pool


_pooling.__qualname__ = "cudnn_py.Pooling"
PoolingDescriptor = alias("PoolingDescriptor", _pooling)
pooling_descriptor = alias("pooling_descriptor", _pooling)
