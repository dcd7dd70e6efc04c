"""Dropout: RNG states sized and initialised from a seed, forward and backward with a reserve space.

::

    d = Dropout(h, p=0.25, seed=1234)             # states allocated and initialised on the device
    y, reserve = dropout_forward(h, d, x)          # reserve holds the mask
    dx = dropout_backward(h, d, dy, reserve)       # the same mask, applied to dy
    d2 = Dropout(h, p=0.25, seed=1234, states=saved_states)   # restore saved states without re-initialising

Each forward call draws a new mask from the states (and advances them); the same seed (or restored
states) gives the same masks. Kept elements are scaled by ``1 / (1 - p)``.
A :class:`cudnn_py.DropoutDescriptor` (core) works wherever a :class:`Dropout` does.

Raw C path::

    capi.cudnnDropoutGetStatesSize(h.ptr, byref(n)); states = cudnn.empty((n.value,), np.uint8)
    capi.cudnnSetDropoutDescriptor(d, h.ptr, 0.25, states.ptr, n.value, 1234)
    capi.cudnnDropoutGetReserveSpaceSize(x_desc, byref(r))
    capi.cudnnDropoutForward(h.ptr, d, x_desc, x.ptr, y_desc, y.ptr, reserve.ptr, r.value)
"""
from __future__ import annotations

import ctypes
import weakref

import numpy as np

from cudnn_py import capi
from cudnn_py.descriptors import DropoutDescriptor
from cudnn_py.errors import ClosedError, InvalidTypeError, InvalidValueError
from cudnn_py.memory import DeviceArray, empty
from cudnn_py.ops._common import byte_buffer, check_array, desc, output, tensor_desc

__all__ = ["Dropout", "dropout_states_size", "dropout_reserve_size", "dropout_forward", "dropout_backward"]


def dropout_states_size(handle) -> int:
    """Bytes of RNG state cuDNN needs for dropout on this handle's device (``cudnnDropoutGetStatesSize``)."""
    n = ctypes.c_size_t()
    capi.cudnnDropoutGetStatesSize(handle.ptr, ctypes.byref(n))
    return n.value


def dropout_reserve_size(shape, dtype=np.float32) -> int:
    """Bytes of reserve space (the mask) for dropout on a packed tensor (``cudnnDropoutGetReserveSpaceSize``);
    ``shape`` may also be an array. Runs without a GPU."""
    if hasattr(shape, "shape") and hasattr(shape, "dtype"):
        shape, dtype = shape.shape, shape.dtype
    shape = tuple(int(d) for d in shape)
    if not shape or any(d <= 0 for d in shape):
        raise InvalidValueError(f"dropout needs a non-empty shape with positive dimensions, got {shape}")
    n = ctypes.c_size_t()
    d = tensor_desc(shape, dtype)
    capi.cudnnDropoutGetReserveSpaceSize(d.ptr, ctypes.byref(n))
    return n.value


def _check_p(p) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise InvalidValueError(f"dropout probability must be in [0, 1], got {p}")
    return p


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2 ** 64:
        raise InvalidValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


def _destroy(ptr) -> None:
    try:
        capi.cudnnDestroyDropoutDescriptor(ptr)
    except Exception:  # interpreter shutdown
        pass


class Dropout:
    """A dropout descriptor with probability ``p``, bound to ``handle``, and its device RNG ``states``.

    Without ``states``: states of :func:`dropout_states_size` bytes are allocated and initialised from
    ``seed`` (``cudnnSetDropoutDescriptor``; this launches a kernel). With ``states`` (a device uint8
    buffer saved from another Dropout, e.g. a copy of its :attr:`states`): they are used as they are
    (``cudnnRestoreDropoutDescriptor``), so the masks continue from where they were saved.
    """

    def __init__(self, handle, p: float = 0.5, seed: int = 0, *, states=None):
        p, seed = _check_p(p), _check_seed(seed)
        need = dropout_states_size(handle)
        if states is not None:
            st = byte_buffer(states, "states", handle, need, "pass the states of a Dropout on this device")
        ptr = capi.cudnnDropoutDescriptor_t()
        capi.cudnnCreateDropoutDescriptor(ctypes.byref(ptr))
        self._finalizer = weakref.finalize(self, _destroy, ptr)
        self._ptr = ptr
        self._handle = handle
        if states is None:
            self.states = empty((need,), np.uint8, stream=handle.stream, device=handle.device)
            capi.cudnnSetDropoutDescriptor(ptr, handle.ptr, p, self.states.ptr, need, seed)
        else:
            self.states = st
            capi.cudnnRestoreDropoutDescriptor(ptr, handle.ptr, p, st.ptr, st.nbytes, seed)

    @property
    def ptr(self) -> capi.cudnnDropoutDescriptor_t:
        if self._ptr is None:
            raise ClosedError("this Dropout is closed")
        return self._ptr

    def _get(self):
        p, states, seed = ctypes.c_float(), ctypes.c_void_p(), ctypes.c_ulonglong()
        capi.cudnnGetDropoutDescriptor(self.ptr, self._handle.ptr, ctypes.byref(p), ctypes.byref(states),
                                       ctypes.byref(seed))
        return p.value, states.value or 0, seed.value

    @property
    def p(self) -> float:
        """The dropout probability, as cuDNN stores it (float32)."""
        return self._get()[0]

    @property
    def seed(self) -> int:
        return self._get()[2]

    @property
    def states_size(self) -> int:
        return self.states.nbytes

    def close(self) -> None:
        if self._ptr is not None:
            self._ptr = None
            self._finalizer()

    def __enter__(self) -> Dropout:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._ptr is None:
            return "<Dropout closed>"
        p, _, seed = self._get()
        return f"Dropout(p={p}, seed={seed}, states_size={self.states.nbytes})"


_RESERVE_HINT = "pass the reserve dropout_forward returned for this tensor (dropout_reserve_size bytes)"


def _dropout_ptr(d):
    if isinstance(d, (Dropout, DropoutDescriptor)):
        return d.ptr
    raise InvalidTypeError(f"dropout must be a Dropout or a DropoutDescriptor, got {type(d).__name__}")


def dropout_forward(handle, dropout, x, y=None, reserve=None) -> tuple[DeviceArray, DeviceArray]:
    """``y = x * mask / (1 - p)`` with a fresh mask (``cudnnDropoutForward``); returns (y, reserve).

    ``y`` and ``reserve`` (uint8, :func:`dropout_reserve_size` bytes, holds the mask) are allocated
    when not given. ``x`` and ``y`` must have the same shape and dtype.
    """
    dp = _dropout_ptr(dropout)
    xa = check_array(x, "x", handle)
    ya = output(y, "y", handle, xa.shape, xa.dtype)
    xd, yd = desc(xa), desc(ya)
    need = ctypes.c_size_t()
    capi.cudnnDropoutGetReserveSpaceSize(xd.ptr, ctypes.byref(need))
    ra = (empty((need.value,), np.uint8, stream=handle.stream, device=handle.device) if reserve is None
          else byte_buffer(reserve, "reserve", handle, need.value, _RESERVE_HINT))
    capi.cudnnDropoutForward(handle.ptr, dp, xd.ptr, xa.ptr, yd.ptr, ya.ptr, ra.ptr, ra.nbytes)
    return ya, ra


def dropout_backward(handle, dropout, dy, reserve, dx=None) -> DeviceArray:
    """``dx = dy * mask / (1 - p)`` with the mask the forward stored in ``reserve`` (``cudnnDropoutBackward``)."""
    dp = _dropout_ptr(dropout)
    dya = check_array(dy, "dy", handle)
    dxa = output(dx, "dx", handle, dya.shape, dya.dtype)
    dyd, dxd = desc(dya), desc(dxa)
    need = ctypes.c_size_t()
    capi.cudnnDropoutGetReserveSpaceSize(dyd.ptr, ctypes.byref(need))
    ra = byte_buffer(reserve, "reserve", handle, need.value, _RESERVE_HINT)
    capi.cudnnDropoutBackward(handle.ptr, dp, dyd.ptr, dya.ptr, dxd.ptr, dxa.ptr, ra.ptr, ra.nbytes)
    return dxa
