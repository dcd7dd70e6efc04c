"""Helpers the legacy operation families share: argument and array checks, outputs, descriptors (shared: hold one in
a local while C runs), scalars, and the sinks (:func:`launch`; :func:`blend` for the alpha/beta calls). The raw C
calls behind the families: docs/ops.md.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence

import numpy as np

from cudnn_py import capi
from cudnn_py.core.args import scaling
from cudnn_py.clib import recording
from cudnn_py.core.caches import shared
from cudnn_py.core.descriptors import Descriptor, Settings, TensorDescriptor
from cudnn_py.clib.recording import Address, WorkspaceArg
from cudnn_py.core.strided import preserved_strides
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype, scalar
from cudnn_py.core.memory import DeviceArray, as_array
from cudnn_py.core.memory import Out as Out  # re-exported: the families take it from here
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph.runner import new_output as new_output  # re-exported: the families take it from here
from cudnn_py.calls.prepared import moved_outputs as moved_outputs  # re-exported

#: float16, float32, float64 (bfloat16 is accepted by ``check_array(..., floating=True)`` besides these)
FLOATS = frozenset(np.dtype(d) for d in ("float16", "float32", "float64"))


def enum_arg(value, table: dict, enum_type, what: str):
    """A table key (case-insensitive) or an enum member -> the enum member."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    if not isinstance(value, (str, int, np.integer)):
        raise InvalidTypeError(f"{what} must be a name or a {enum_type.__name__} member, got {type(value).__name__}")
    raise InvalidValueError(f"{what} {value!r}: expected one of {sorted(table)} or a {enum_type.__name__} member")


_SCALARS = shared("ops.scalars", maxsize=256)


def scalars(dtype, *values: float) -> tuple:
    """``byref`` host scalars (alpha/beta) for data of ``dtype``: double for float64, else float; shared."""
    try:
        return _SCALARS[dtype, values]
    except (KeyError, TypeError):  # not made yet, or an unhashable dtype spelling
        pass
    dt = cudnn_dtype(dtype)
    host = tuple(scalar(dt, v) for v in scaling(**{f"scaling factor {i}": v for i, v in enumerate(values, 1)}))
    if not all(math.isfinite(h.value) for h in host):
        raise InvalidValueError(f"scaling factors {values} overflow the single-precision float cuDNN reads them as "
                                f"for {np.dtype(dtype)} data (at most 3.4e38 in magnitude)")
    got = tuple(ctypes.byref(h) for h in host)
    try:
        _SCALARS[dtype, values] = got
    except TypeError:
        pass
    return got


def tensor_desc(shape: Sequence[int], dtype, strides: Sequence[int] | None = None) -> TensorDescriptor:
    """The shared tensor descriptor (packed when ``strides`` is None), padded to 4 dimensions with trailing 1s."""
    shape = tuple(shape)
    if len(shape) < 4:
        pad = 4 - len(shape)
        shape += (1,) * pad
        if strides is not None:
            strides = tuple(strides) + (1,) * pad
    return TensorDescriptor.shared(shape, np.dtype(dtype), None if strides is None else tuple(strides))


def desc(a: DeviceArray) -> TensorDescriptor:
    """The shared tensor descriptor for an array's shape, dtype and strides (hold it while C uses ``.ptr``)."""
    return tensor_desc(a.shape, a.dtype, None if a.is_contiguous else a.strides)


def read_tensor_desc(d) -> tuple[tuple[int, ...], tuple[int, ...], np.dtype]:
    """(shape, strides, dtype) of a raw ``cudnnTensorDescriptor_t`` that cuDNN filled in."""
    dt, n = ctypes.c_int(), ctypes.c_int()
    dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    capi.cudnnGetTensorNdDescriptor(d, 8, ctypes.byref(dt), ctypes.byref(n), dims, strides)
    return tuple(dims[:n.value]), tuple(strides[:n.value]), numpy_dtype(dt.value)


def with_tensor_descriptors(fn, count: int = 1):
    """``fn(*descs)`` on ``count`` new raw ``cudnnTensorDescriptor_t``, destroyed after."""
    descs = []
    try:
        for _ in range(count):
            d = capi.cudnnTensorDescriptor_t()
            capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
            descs.append(d)
        return fn(*descs)
    finally:
        for d in descs:
            capi.cudnnDestroyTensorDescriptor(d)


def check_array(obj, name: str, handle, *, dtype=None, shape=None, floating: bool = False,
                contiguous: bool = False) -> DeviceArray:
    """``obj`` as a non-empty DeviceArray of 1 to 8 dimensions on the handle's device, checked before any C call."""
    a = as_array(obj, name, dtype=dtype, shape=shape, contiguous=contiguous, device=handle.device)
    if floating and a.dtype not in FLOATS and a.dtype.name != "bfloat16":
        raise InvalidTypeError(f"{name} has dtype {a.dtype}; this operation needs float16, bfloat16, float32 or "
                               f"float64")
    if not 1 <= a.ndim <= 8:
        raise InvalidValueError(f"{name} has {a.ndim} dimensions (shape {a.shape}); cuDNN takes 1 to 8")
    if a.size == 0:
        raise InvalidValueError(f"{name} is empty (shape {a.shape}); cuDNN needs at least one element")
    return a


def instance_of(obj, cls: type, name: str):
    """``obj``, refused (:class:`InvalidTypeError`) unless it is a ``cls`` (a cudnn_py settings or descriptor class)."""
    if not isinstance(obj, cls):
        raise InvalidTypeError(f"{name} must be a cudnn_py.{cls.__name__}, got {type(obj).__name__}")
    return obj


def output(out, name: str, handle, shape, dtype, *, like: DeviceArray | None = None,
           contiguous: bool = False) -> DeviceArray:
    """``out`` checked to be exactly ``shape`` and ``dtype`` (and ``contiguous``), or a new array packed in ``like``'s
    memory order (torch's ``preserve_format``), C-contiguous where ``like`` is None."""
    if out is None:
        return new_output(handle, shape, dtype, None if like is None else preserved_strides(like.shape, like.strides,
                                                                                            shape))
    return check_array(out, name, handle, dtype=dtype, shape=shape, contiguous=contiguous)


def launch(handle, fn, *args) -> None:
    """Call the :mod:`cudnn_py.capi` function ``fn`` with ``args`` (the families' sink, which a prepared call repeats
    with other addresses): a DeviceArray or ``Address`` stands for its address, a Descriptor or ``Settings`` for its C
    descriptor, a ``WorkspaceArg`` for the handle's workspace; a plain int where C takes a ``void *`` spoils the
    recording."""
    c_args, pointers = list(args), []
    for i, a in enumerate(args):
        t = type(a)
        if t is DeviceArray:
            c_args[i] = a.ptr
            pointers.append(i)
        elif t is Address:
            c_args[i] = a.value
            pointers.append(i)
        elif t is WorkspaceArg:
            c_args[i] = handle.workspace.get(a.size, handle.stream) + a.offset if a.size else None
        elif isinstance(a, Descriptor):
            c_args[i] = a.ptr
        elif isinstance(a, Settings):
            c_args[i] = a.descriptor
    if recording.state.rec is None:
        fn(*c_args)
        return
    recording.in_sink(fn, *c_args)
    for i in fn.pointer_params:
        if type(args[i]) is int or isinstance(args[i], ctypes.c_void_p):
            recording.spoil(f"{fn.__name__} was given a device address as a plain int (argument {i}): pass the "
                            f"array, or recording.Address")
    for i, a in enumerate(args):
        if type(a) is WorkspaceArg:
            c_args[i] = a
    recording.add(fn.raw, tuple(c_args), tuple(pointers),
                  keep=tuple(a for a in args if isinstance(a, (Descriptor, Settings))))


def blend(handle, fn, settings: tuple, dtype, alpha: float, beta: float, ins: Sequence[DeviceArray],
          out: DeviceArray, describe=desc) -> None:
    """``fn(handle, *settings, alpha, (descriptor, array) of each input, beta, out's descriptor, out)``: the legacy
    calls of the form ``out = alpha * f(ins) + beta * out`` (the scaling factors typed for ``dtype`` data)."""
    al, be = scalars(dtype, alpha, beta)
    launch(handle, fn, handle.ptr, *settings, al, *(v for a in ins for v in (describe(a), a)), be, describe(out), out)


def host_step(fn, args: tuple, pointers: tuple[int, ...], keep: tuple = ()) -> None:
    """Run ``fn(*args)``, a step making its own C or driver calls, as a sink (``pointers``: device address indices)."""
    if recording.state.rec is None:
        fn(*args)
        return
    recording.in_sink(fn, *args)
    recording.add(fn, args, pointers, keep)


def byte_buffer(obj, name: str, handle, nbytes: int, hint: str) -> DeviceArray:
    """A contiguous device buffer (reserve, RNG states) of at least ``nbytes`` bytes; ``hint``: where to get one."""
    b = check_array(obj, name, handle, contiguous=True)
    if b.nbytes < nbytes:
        raise InvalidValueError(f"{name} holds {b.nbytes} bytes but cuDNN needs {nbytes} for this call; {hint}")
    return b
