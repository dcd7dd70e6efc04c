"""What :class:`~cudnn_py.ops.rnn.RNN` and :class:`~cudnn_py.ops.attention.MultiHeadAttention` share: a descriptor
base owning a weight space and its dropouts, argument checks, per-sequence lengths, a training forward's saved state.
"""
from __future__ import annotations

import numpy as np

from cudnn_py import capi
from cudnn_py.core import memory
from cudnn_py.core.args import INT32_MAX, float_arg
from cudnn_py.core.descriptors import Descriptor
from cudnn_py.errors import ClosedError, InvalidStateError, InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops._common import host_step, launch, moved_outputs, scalars, tensor_desc
from cudnn_py.ops.convolution import MATH_TYPES as MATH_TYPES  # the descriptors' math_type names, as convolution's


def choice(table: dict, value, what: str) -> tuple[str, int]:
    """(name, C value) for a string name or a C enum value of ``table``."""
    if isinstance(value, str):
        key = value.lower()
        if key in table:
            return key, int(table[key])
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        for k, v in table.items():
            if int(v) == int(value):
                return k, int(v)
    names = ", ".join(repr(k) for k in table)
    raise InvalidValueError(f"{what} must be one of {names} (or the matching cuDNN enum), got {value!r}")


def name_of(table: dict, value: int) -> str:
    return next(k for k, v in table.items() if int(v) == int(value))


def positive_int(value, what: str) -> int:
    """``value`` as an int in ``[1, 2**31 - 1]`` (the C int range)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= INT32_MAX:
        raise InvalidValueError(f"{what} must be a positive int (at most 2**31 - 1), got {value!r}")
    return int(value)


def dropout_arg(value, what: str):
    """A :class:`~cudnn_py.Dropout` (anything whose ``.ptr`` is a ``cudnnDropoutDescriptor_t``) as it is, a
    probability as a new ``Dropout(cudnn_py.default_handle(), p=value)`` (seed 0; 0: None), or None."""
    if value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        p = float_arg(value, f"{what} probability", 0.0, 1.0)
        if p == 0.0:
            return None
        from cudnn_py.calls.defaults import default_handle
        from cudnn_py.ops.dropout import Dropout
        return Dropout(default_handle(), p=p)
    ptr = value.ptr if hasattr(type(value), "ptr") and not isinstance(value, DeviceArray) else None
    if not isinstance(ptr, capi.cudnnDropoutDescriptor_t):
        raise InvalidTypeError(f"{what} must be a dropout probability, a cudnn_py.Dropout or None, got "
                               f"{type(value).__name__}")
    return value


def check_lengths(seq_lengths, T: int, B: int, name: str = "seq_lengths", packed: bool = False) -> tuple[int, ...]:
    """``B`` per-sequence lengths in ``[1, T]`` as a tuple (all ``T`` when None); ``packed``: non-increasing, max T."""
    if seq_lengths is None:
        return (T,) * B
    try:
        arr = np.asarray(seq_lengths)
    except (TypeError, ValueError, OverflowError):
        arr = None
    if arr is None or arr.ndim != 1 or arr.shape[0] != B or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidValueError(f"{name} must be {B} ints (one per sequence), got {seq_lengths!r}")
    for i, n in enumerate(arr):
        if not 1 <= n <= T:
            raise InvalidValueError(f"{name}[{i}] = {int(n)}: each length must be between 1 and the max sequence "
                                    f"length {T}")
    if packed:
        if np.any(np.diff(arr) > 0):
            raise InvalidValueError(f"the 'packed' layout needs non-increasing {name}, got {arr.tolist()}; "
                             f"sort the batch by length or use a padded layout")
        if arr.max() != T:
            raise InvalidValueError(f"the 'packed' layout needs max({name}) == max_seq_length ({T}), got {arr.max()}")
    return tuple(int(n) for n in arr)


def by_value(value):
    """``value`` as a tuple of ints where it is a 1-D sequence or array of integers (so a prepared call keys it by
    value); anything else as it is, for the validated path to check."""
    t = type(value)
    if t is tuple or t is list:
        for v in value:
            if type(v) is not int:
                break
        else:
            return value if t is tuple else tuple(value)
    elif t is not np.ndarray:
        return value
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        return value
    return tuple(a.tolist()) if a.ndim == 1 and a.dtype.kind in "iu" else value


def device_lengths(handle: Handle, lengths: tuple[int, ...]) -> DeviceArray:
    """A new int32 device array of ``lengths``, uploaded on the handle's stream as a recorded step."""
    host = np.asarray(lengths, np.int32)
    a = memory.empty(host.shape, np.int32, stream=handle.stream, device=handle.device)
    host_step(_upload, (handle, a.ptr, host), (1,))
    return a


def _upload(handle: Handle, ptr: int, host: np.ndarray) -> None:
    """Copy ``host`` to ``ptr`` on the handle's current stream."""
    DeviceArray.from_parts(ptr, host.shape, host.dtype, (1,), handle.device, None, handle.stream, True).copy_(host)


class WeightedDescriptor(Descriptor):
    """A descriptor with a flat weight space of :attr:`dtype` and the dropout descriptors it points to (kept alive;
    :attr:`ptr` raises :class:`ClosedError` once one is closed, since cuDNN keeps their addresses)."""

    _dropouts: tuple = ()
    dtype: np.dtype

    @property
    def ptr(self):
        p = super().ptr
        if any(d is not None and d.closed for d in self._dropouts):
            raise ClosedError(f"the dropout descriptor this {type(self).__name__} uses is closed")
        return p

    @property
    def closed(self) -> bool:
        """Whether this descriptor, or a dropout descriptor it uses, is closed."""
        return super().closed or any(d is not None and d.closed for d in self._dropouts)

    def weight_space_size(self, handle: Handle) -> int:
        raise NotImplementedError

    def new_weights(self, handle: Handle, *, zero: bool = True) -> DeviceArray:
        """A 1-D device array of :attr:`dtype` holding the whole weight space (zeros unless ``zero=False``)."""
        handle = handle_arg(handle)
        n = self.weight_space_size(handle) // self.dtype.itemsize
        w = memory.empty((n,), self.dtype, stream=handle.stream, device=handle.device)
        if zero:
            launch(handle, capi.cudnnSetTensor, handle.ptr, tensor_desc((n,), self.dtype), w,
                   scalars(self.dtype, 0.0)[0])
        return w

    def _check_weights(self, handle: Handle, weights, name: str = "weights") -> DeviceArray:
        """``weights`` checked as this descriptor's weight space (packed, on the handle's device, as its dropouts)."""
        w = memory.as_array(weights, name, contiguous=True, device=handle.device)
        what = type(self).__name__
        for d in self._dropouts:
            states = getattr(d, "states", None)
            if states is not None and states.device_id != handle.device:
                raise InvalidValueError(f"this {what}'s dropout states are on device {states.device_id} but the handle "
                                        f"is on device {handle.device}: make the {what} (or its Dropout) with that "
                                        f"device current")
        if w.dtype != self.dtype:
            raise InvalidTypeError(f"{name} has dtype {w.dtype}; this {what}'s weights are {self.dtype}")
        need = self.weight_space_size(handle)
        if w.nbytes != need:
            raise InvalidValueError(f"{name} holds {w.nbytes} bytes but this {what}'s weight space is {need} bytes "
                             f"({need // self.dtype.itemsize} {self.dtype.name} elements); "
                             f"use .new_weights(handle)")
        return w


def training_ctx(fwd, result_type: type, desc, forward_name: str) -> dict:
    """The saved state of a training-mode forward result, checked to belong to ``desc``."""
    if not isinstance(desc, WeightedDescriptor):
        raise InvalidTypeError(f"the descriptor must be a cudnn_py.RNN or MultiHeadAttention, got "
                               f"{type(desc).__name__}")
    if not isinstance(fwd, result_type):
        raise InvalidTypeError(f"fwd must be the {result_type.__name__} {forward_name}(..., training=True) returned, "
                               f"got {type(fwd).__name__}")
    ctx = getattr(fwd, "_ctx", None)
    if ctx is None:
        raise InvalidValueError(f"backward calls need the result of {forward_name}(..., training=True)")
    if ctx["desc"] is not desc:
        raise InvalidValueError(f"fwd was computed with a different {type(desc).__name__} descriptor")
    return ctx


def weights_ctx(fwd, result_type: type, desc, forward_name: str, moved: tuple, dweights: DeviceArrayLike | None
                ) -> tuple[dict, DeviceArrayLike | None]:
    """(saved state, ``dweights``) of a backward-weights call (``moved``: a deprecated positional ``dweights``)."""
    where = forward_name.replace("forward", "backward_weights")
    if moved:
        dweights, = moved_outputs(where, moved, ("dweights",), (dweights,), stacklevel=5)
    ctx = training_ctx(fwd, result_type, desc, forward_name)
    if not ctx["data_done"]:
        raise InvalidStateError(f"call {forward_name.replace('forward', 'backward_data')}(...) on this forward result "
                                f"before {where}(...)")
    return ctx, dweights
