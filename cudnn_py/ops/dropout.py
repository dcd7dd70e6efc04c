"""Dropout: RNG states sized and initialised from a seed, forward and backward with a reserve space.

::

    d = Dropout(h, p=0.25, seed=1234)             # states allocated and initialised on the device
    y, reserve = dropout_forward(h, d, x)          # a DropoutOutputs NamedTuple; reserve holds the mask
    dx = dropout_backward(h, d, dy, reserve)       # the same mask, applied to dy
    d2 = Dropout(h, p=0.25, seed=1234, states=saved_states)   # restore saved states without re-initialising

Each forward call draws a new mask from the states (and advances them); the same seed (or restored states) gives the
same masks. Kept elements are scaled by ``1 / (1 - p)``. float16, float32 and float64 only (cuDNN 9 refuses the
others). Dense tensors run cuDNN's fast kernel in any memory order (docs/ops.md).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py._deprecation import alias, renamed_attribute, renamed_kwargs
from cudnn_py.core.args import float_arg, handle_ptr, int_arg, int_tuple
from cudnn_py.core.descriptors import Descriptor, read_back
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike, empty
from cudnn_py.ops._common import byte_buffer, check_array, host_step, instance_of, launch, output, tensor_desc
from cudnn_py.calls.prepared import prepared

__all__ = ["Dropout", "DropoutOutputs", "dropout_states_size", "dropout_reserve_size", "dropout_forward",
           "dropout_backward"]


def dropout_states_size(handle: Handle) -> int:
    """Bytes of RNG state cuDNN needs for dropout on this handle's device (``cudnnDropoutGetStatesSize``)."""
    handle = handle_arg(handle)
    n = ctypes.c_size_t()
    capi.cudnnDropoutGetStatesSize(handle.ptr, ctypes.byref(n))
    return n.value


#: the dtypes cuDNN's dropout runs (9.14 and 9.19: the others are CUDNN_STATUS_NOT_SUPPORTED)
_DTYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def _check_dtype(dtype: DTypeLike, name: str) -> None:
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        raise InvalidTypeError(f"{name} has dtype {dt}; cuDNN's dropout takes float16, float32 or float64 "
                               f"(cuDNN answers CUDNN_STATUS_NOT_SUPPORTED for {dt})")


def dropout_reserve_size(shape: Sequence[int] | DeviceArrayLike | np.ndarray, dtype: DTypeLike = np.float32) -> int:
    """Bytes of reserve space (the mask) for dropout on a packed tensor (``cudnnDropoutGetReserveSpaceSize``);
    ``shape`` may also be an array. Runs without a GPU."""
    if hasattr(shape, "shape") and hasattr(shape, "dtype"):
        shape, dtype = getattr(shape, "shape"), getattr(shape, "dtype")
    dims = int_tuple(shape, "shape")
    if not dims or any(d <= 0 for d in dims):
        raise InvalidValueError(f"dropout needs a non-empty shape with positive dimensions, got {dims}")
    _check_dtype(dtype, "the tensor")
    return _reserve_size(tensor_desc(dims, dtype))


def _reserve_size(d) -> int:
    n = ctypes.c_size_t()
    capi.cudnnDropoutGetReserveSpaceSize(d.ptr, ctypes.byref(n))
    return n.value


class Dropout(Descriptor):
    """A ``cudnnDropoutDescriptor_t`` with probability ``p`` (default 0.5) and RNG ``seed``, bound to ``handle``, and
    its device RNG :attr:`states`; ``close()``, a context manager or the garbage collector destroys it.

    Without ``states``, states of :func:`dropout_states_size` bytes are allocated and initialised from ``seed`` (a
    kernel launch). With ``states`` (a device uint8 buffer saved from another Dropout's :attr:`states`) the masks
    continue from where they were saved (``cudnnRestoreDropoutDescriptor``). ``dropout=`` is the deprecated ``p``.
    """

    _handle_type = capi.cudnnDropoutDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateDropoutDescriptor", "cudnnDestroyDropoutDescriptor"
    _shown = ("p", "seed", "states_size")

    def __init__(self, handle: Handle, p: float | None = None, seed: int = 0, *, states: DeviceArrayLike | None = None,
                 **old) -> None:
        if old:
            p = renamed_kwargs("Dropout", old, {"dropout": "p"}, {"p": p})["p"]
        p = float_arg(0.5 if p is None else p, "dropout probability p", 0.0, 1.0)
        seed = int_arg(seed, "seed", 0, 2 ** 64 - 1)
        hptr = handle_ptr(handle)
        need = dropout_states_size(handle)
        st = None if states is None else byte_buffer(states, "states", handle, need,
                                                      "pass the states of a Dropout on this device")
        super().__init__()
        self._handle = handle
        if st is None:
            self.states = empty((need,), np.uint8, stream=handle.stream, device=handle.device)
            capi.cudnnSetDropoutDescriptor(self._ptr, hptr, p, self.states.ptr, need, seed)
        else:
            self.states = st
            capi.cudnnRestoreDropoutDescriptor(self._ptr, hptr, p, st.ptr, st.nbytes, seed)

    def _get(self):
        p, states, seed = ctypes.c_float(), ctypes.c_void_p(), ctypes.c_ulonglong()
        capi.cudnnGetDropoutDescriptor(self.ptr, self._handle.ptr, ctypes.byref(p), ctypes.byref(states),
                                       ctypes.byref(seed))
        return p.value, seed.value

    p = read_back(0, "The dropout probability, as cuDNN stores it (float32).")
    seed = read_back(1, "The RNG seed.")

    @property
    def states_size(self) -> int:
        """Bytes of :attr:`states`."""
        return self.states.nbytes

    dropout = renamed_attribute("p", "Dropout.dropout is deprecated, use Dropout.p")


class DropoutOutputs(NamedTuple):
    """What :func:`dropout_forward` returns."""
    y: DeviceArray
    reserve: DeviceArray


_RESERVE_HINT = "pass the reserve dropout_forward returned for this tensor (dropout_reserve_size bytes)"

#: (device, reserve address) -> (shape, dimension order) of each forward that described its tensors in an order
#: other than the logical one; the backward reads its reserve's mask in that order
_ORDERS: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}


def _packed_in(a: DeviceArray | _Layout, order: Sequence[int]) -> bool:
    """Whether ``a`` is packed with its dimensions ``order`` outermost first (size-1 dimensions aside)."""
    expected = 1
    for i in reversed(order):
        if a.shape[i] != 1:
            if a.strides[i] != expected:
                return False
            expected *= a.shape[i]
    return True


def _shared_order(a: DeviceArray, b: DeviceArray) -> tuple[int, ...]:
    """The dimension order, outermost first, that ``a`` and ``b`` are both packed in, else the logical order."""
    logical = tuple(range(a.ndim))
    order = tuple(sorted(logical, key=lambda i: (a.shape[i] == 1, -a.strides[i], i)))
    return order if not _packed_in(a, logical) and _packed_in(a, order) and _packed_in(b, order) else logical


def _desc_in(a: DeviceArray | _Layout, order: Sequence[int]):
    """A descriptor of ``a`` with its dimensions in ``order``: packed when ``a`` is packed in that order."""
    shape = tuple(a.shape[i] for i in order)
    return tensor_desc(shape, a.dtype, None if _packed_in(a, order) else tuple(a.strides[i] for i in order))


class _Layout(NamedTuple):
    """What the backward's descriptors depend on of an array: its shape, element strides and dtype."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype


def _note_order(device: int, reserve_ptr: int, shape: tuple[int, ...], order: tuple[int, ...]) -> None:
    """Remember the dimension order a forward described its tensors in, by its reserve's address (a host step)."""
    key = (device, reserve_ptr)
    if order == tuple(range(len(shape))):
        _ORDERS.pop(key, None)
    else:
        _ORDERS[key] = (shape, order)


def _backward_c(hptr, dp, dy: _Layout, dx: _Layout, device: int, dy_ptr: int, dx_ptr: int, reserve_ptr: int,
                reserve_size: int) -> None:
    """``cudnnDropoutBackward`` with dy and dx described in the order the forward that wrote this reserve used."""
    logical = tuple(range(len(dy.shape)))
    shape, order = _ORDERS.get((device, reserve_ptr), (dy.shape, logical))
    if shape != dy.shape:  # the forward that wrote this address last had another shape: not this mask's
        order = logical
    dyd, dxd = _desc_in(dy, order), _desc_in(dx, order)
    capi.cudnnDropoutBackward(hptr, dp, dyd.ptr, dy_ptr, dxd.ptr, dx_ptr, reserve_ptr, reserve_size)


@prepared(inputs=("x",), outputs=("y", "reserve"), inplace=False, moved=("y", "reserve"))
def dropout_forward(handle: Handle, dropout: Dropout, x: DeviceArrayLike, *,
                    y: DeviceArrayLike | None = None, reserve: DeviceArrayLike | None = None) -> DropoutOutputs:
    """``y = x * mask / (1 - p)`` with a fresh mask (``cudnnDropoutForward``); returns :class:`DropoutOutputs` ``(y,
    reserve)``, allocated when not given: ``y`` like x (float16/32/64; x's layout when dense), ``reserve`` the mask
    (uint8, :func:`dropout_reserve_size` bytes)."""
    instance_of(dropout, Dropout, "dropout")
    xa = check_array(x, "x", handle)
    _check_dtype(xa.dtype, "x")
    ya = output(y, "y", handle, xa.shape, xa.dtype, like=xa)
    order = _shared_order(xa, ya)
    xd, yd = _desc_in(xa, order), _desc_in(ya, order)
    need = _reserve_size(xd)
    ra = (empty((need,), np.uint8, stream=handle.stream, device=handle.device) if reserve is None
          else byte_buffer(reserve, "reserve", handle, need, _RESERVE_HINT))
    launch(handle, capi.cudnnDropoutForward, handle.ptr, dropout, xd, xa, yd, ya, ra, ra.nbytes)
    host_step(_note_order, (ra.device_id, ra.ptr, xa.shape, order), (1,))
    return DropoutOutputs(ya, ra)


@prepared(inputs=("dy", "reserve"), outputs=("dx",), inplace=False, moved=("dx",))
def dropout_backward(handle: Handle, dropout: Dropout, dy: DeviceArrayLike, reserve: DeviceArrayLike,
                     *, dx: DeviceArrayLike | None = None) -> DeviceArray:
    """``dx = dy * mask / (1 - p)`` with the mask the forward stored in ``reserve`` (``cudnnDropoutBackward``);
    ``dx`` is allocated in dy's layout when dy is dense and it is not given."""
    dp = instance_of(dropout, Dropout, "dropout").ptr
    dya = check_array(dy, "dy", handle)
    _check_dtype(dya.dtype, "dy")
    dxa = output(dx, "dx", handle, dya.shape, dya.dtype, like=dya)
    ra = byte_buffer(reserve, "reserve", handle, _reserve_size(tensor_desc(dya.shape, dya.dtype)), _RESERVE_HINT)
    # the descriptors' order depends on which forward wrote the reserve: the step picks them when it runs
    args = (handle.ptr, dp, _Layout(dya.shape, dya.strides, dya.dtype), _Layout(dxa.shape, dxa.strides, dxa.dtype),
            ra.device_id, dya.ptr, dxa.ptr, ra.ptr, ra.nbytes)
    host_step(_backward_c, args, (5, 6, 7), keep=(dropout,))
    return dxa


def _dropout(handle: Handle, dropout: float = 0.5, seed: int = 0) -> Dropout:
    """What the deprecated DropoutDescriptor makes: a :class:`Dropout`."""
    return Dropout(handle, dropout, seed)


_dropout.__qualname__ = "cudnn_py.Dropout"
DropoutDescriptor = alias("DropoutDescriptor", _dropout)
