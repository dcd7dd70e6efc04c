"""Device arrays (:class:`DeviceArray`: strided, strides in elements) on :mod:`cuda.core`'s stream-ordered memory, freed
ordered on their stream when the last reference goes (small ones on the default stream kept for reuse:
:mod:`cudnn_py.core.blocks`), and zero-copy views of GPU tensors of torch, CuPy, JAX or numba (:func:`as_array`,
through DLPack / ``__cuda_array_interface__``); ``torch.from_dlpack(y)`` takes a DeviceArray. A NumPy array where
device memory is needed raises :class:`TypeError` saying how to move it.

Streams: ``stream=None`` is the device's default (legacy NULL) stream, PyTorch's and cuDNN's default too. An array
remembers its stream: ``to_numpy()`` waits on it and the memory is freed ordered on it; work on other streams that
reads an array is yours to order (keep it referenced or synchronise), as in PyTorch.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar, Union, cast

import numpy as np
import numpy.typing as npt

from cudnn_py.core.dlpack import KDL_CUDA, KDL_CUDA_MANAGED, capsule
from cudnn_py.core.dtypes import SUPPORTED_DTYPES
from cudnn_py.errors import CudnnPyError, InvalidTypeError, InvalidValueError, check_cuda as _check
from cudnn_py.core.args import element_value, is_int
from cudnn_py.core.contexts import driver, on_device, primary_context
import cudnn_py.core.foreign as _foreign  # its torch tables, read through the module (learn_torch replaces them)
from cudnn_py.clib.recording import device_work
from cudnn_py.core.blocks import taker
from cudnn_py.core.foreign import Signature as Signature, check_cuda_array_interface, is_torch_tensor as is_torch_tensor
from cudnn_py.core.streams import StreamLike, annotation_only, as_stream, cuda_core, get_device
from cudnn_py.core.strided import (MAX_BYTES, array_dtype, c_strides, check_extent, extent, is_c_contiguous,
                                   normalize_shape)

if TYPE_CHECKING:
    from cuda.core import Device, Stream

__all__ = ["DeviceArray", "DeviceArrayLike", "Shape", "to_device", "empty", "empty_like", "zeros", "as_array",
           "output_array", "array_signature", "allocator", "array_maker", "LayoutKey", "layout_key"]


class _DLPackTensor(Protocol):
    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


class _CudaArrayInterface(Protocol):
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


#: a shape: an int or a sequence of ints
Shape = Union[int, Sequence[int]]


_new = object.__new__


class LayoutKey:
    """An array layout (shape, strides in elements, dtype, device) as one object, compared and hashed by identity:
    :func:`layout_key` gives equal layouts the same one, so a prepared call's key holds one of these per array."""

    __slots__ = ("layout",)

    def __init__(self, layout: tuple):
        self.layout = layout

    def __repr__(self) -> str:
        return f"LayoutKey{self.layout}"


_KEYS: dict[tuple, LayoutKey] = {}
_MAX_KEYS = 1 << 16  # distinct layouts remembered; beyond, forgotten (arrays keep theirs; a new one is made)


def layout_key(a: DeviceArray) -> LayoutKey:
    """The :class:`LayoutKey` of ``a``'s layout (kept on ``a`` as ``a.layout_key``)."""
    k = a.layout_key
    if k is None:
        k = a.layout_key = _key_of(a.shape, a.strides, a.dtype, a.device_id)
    return k


def _key_of(shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype, device_id: int) -> LayoutKey:
    """The :class:`LayoutKey` of a layout: one object per distinct layout (while at most 65,536 are remembered)."""
    t = (shape, strides, dtype, device_id)
    k = _KEYS.get(t)
    if k is None:
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.clear()  # safe: a key stands for one layout, whichever object it is; calls miss their key once
        k = _KEYS.setdefault(t, LayoutKey(t))
    return k


class DeviceArray:
    """A strided n-d array in device memory, strides in elements (NumPy's are in bytes). Build one with
    :func:`to_device`, :func:`empty`, :func:`zeros` or :func:`as_array`; the constructor wraps memory you already own
    (``owner`` is kept alive as long as the array). Its attributes are read-only: :meth:`reshape` or :func:`as_array`
    make views of another layout."""

    __slots__ = ("shape", "dtype", "strides", "ptr", "device_id", "size", "nbytes", "ndim", "layout_key",
                 "_contiguous", "_owner", "_stream", "__weakref__")

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    strides: tuple[int, ...]
    ptr: int
    device_id: int
    size: int
    nbytes: int
    ndim: int
    #: its :func:`layout_key` once asked for (None before)
    layout_key: LayoutKey | None
    _contiguous: bool | None
    _owner: Any
    _stream: Stream | None

    def __init__(self, ptr: int, shape: Shape, dtype: npt.DTypeLike, strides: Sequence[int] | None = None, *,
                 device_id: int = 0, owner: Any = None, stream: StreamLike = None):
        shape = normalize_shape(shape)
        dtype = array_dtype(dtype)
        if strides is None:
            strides = c_strides(shape)
        else:
            if isinstance(strides, (str, bytes)) or not all(is_int(s) for s in strides):
                raise InvalidTypeError(f"strides must be a sequence of ints (elements), got {strides!r}")
            strides = tuple(int(s) for s in strides)
            if len(strides) != len(shape):
                raise InvalidValueError(f"strides {strides} must have one entry per dimension of shape {shape}")
        if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr < 0:
            raise InvalidTypeError(f"ptr must be a device address as a non-negative int, got {ptr!r}")
        if not is_int(device_id) or device_id < 0:
            raise InvalidTypeError(f"device_id must be a device ordinal (an int >= 0), got {device_id!r}")
        check_extent(int(ptr), shape, strides, dtype, "DeviceArray")
        made = DeviceArray.from_parts(int(ptr), shape, dtype, strides, int(device_id), owner,
                                      None if stream is None else as_stream(stream, device_id))
        for name in DeviceArray.__slots__[:-1]:  # all but __weakref__
            setattr(self, name, getattr(made, name))

    @classmethod
    def from_parts(cls, ptr: int, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...], device_id: int,
                   owner: Any, stream: Stream | None, contiguous: bool | None = None,
                   key: LayoutKey | None = None) -> DeviceArray:
        """An array over memory whose layout is already checked (the package's own views and allocations; ``key``:
        its :func:`layout_key` where known)."""
        self = _new(cls)
        self.layout_key = key
        self.ptr = ptr
        self.shape = shape
        self.dtype = dtype
        self.strides = strides
        self.device_id = device_id
        self.ndim = len(shape)
        self.size = size = math.prod(shape)
        self.nbytes = size * dtype.itemsize
        self._contiguous = contiguous  # None: worked out when first asked (most views made per call never are)
        self._owner = owner
        self._stream = stream
        return self

    @property
    def is_contiguous(self) -> bool:
        """Whether the elements are packed in row-major (C) order (the strides of unit dimensions do not matter)."""
        c = self._contiguous
        if c is None:
            c = self._contiguous = is_c_contiguous(self.shape, self.strides)
        return c

    @property
    def owner(self) -> Any:
        """What keeps this array's memory alive: the array a view was made of, an allocation, or None."""
        return self._owner

    @property
    def stream(self) -> Stream:
        """The stream this array is ordered on: where it was allocated or given (else the default stream)."""
        if self._stream is None:
            self._stream = get_device(self.device_id).default_stream
        return self._stream

    def __len__(self) -> int:
        if not self.shape:
            raise InvalidTypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, strides={self.strides}, "
                f"device={self.device_id}, ptr={self.ptr:#x})")

    def __array__(self, *args, **kwargs):
        raise InvalidTypeError("a DeviceArray lives in device memory; call .to_numpy() to copy it to the host")

    def span(self) -> tuple[int, int]:
        """(offset of the lowest element, number of elements from it to the highest), for any strides."""
        if self.size == 0:
            return 0, 0
        lo, hi = extent(self.shape, self.strides)
        return lo, hi - lo + 1

    def _require_contiguous(self, what: str) -> None:
        if not self.is_contiguous:
            raise InvalidValueError(f"{what} needs a C-contiguous array; this one has shape {self.shape} "
                             f"and strides {self.strides} (elements)")

    def to_numpy(self, stream: StreamLike = None) -> np.ndarray:
        """A new C-contiguous NumPy array of this one's shape, dtype and data, copied on ``stream`` (default:
        :attr:`stream`) after the work already queued there, and waited for."""
        s = self.stream if stream is None else as_stream(stream, self.device_id)
        out = np.empty(self.shape, self.dtype)
        if self.size == 0:
            return out
        packed = self.is_contiguous
        lo, count = (0, self.size) if packed else self.span()
        host = out if packed else np.empty(count, self.dtype)
        item = self.dtype.itemsize
        with on_device(self.device_id):
            _queue("cuMemcpyDtoHAsync", host.ctypes.data, self.ptr + lo * item, count * item, s.handle)
            s.sync()
        if not packed:
            out[...] = np.lib.stride_tricks.as_strided(host[-lo:], self.shape, tuple(x * item for x in self.strides))
        return out

    def fill_(self, value: Any, stream: StreamLike = None) -> DeviceArray:
        """Set every element to ``value``, a scalar :attr:`dtype` holds exactly (300 for int8 or 1e40 for float32 is
        refused), asynchronously on ``stream`` (default: :attr:`stream`); returns this array."""
        v = element_value(value, self.dtype, "fill_ value").reshape(1)
        self._require_contiguous("fill_")
        s = self.stream if stream is None else as_stream(stream, self.device_id)
        if self.size == 0:
            return self
        with on_device(self.device_id):
            if not memset(self.ptr, v, self.size, s.handle):
                host = np.full(self.shape, v[0], self.dtype)
                _queue("cuMemcpyHtoDAsync", self.ptr, host.ctypes.data, self.nbytes, s.handle)
                s.sync()
        return self

    def copy_(self, src: DeviceArrayLike | npt.ArrayLike, stream: StreamLike = None) -> DeviceArray:
        """Copy ``src`` into this array on ``stream`` (default: :attr:`stream`); returns this array. ``src``: host
        data (anything ``np.asarray`` takes, converted to :attr:`dtype`) or a device array of the same dtype; of the
        same shape, and both C-contiguous."""
        self._require_contiguous("copy_")
        s = self.stream if stream is None else as_stream(stream, self.device_id)
        if _is_device_like(src):
            other = as_array(cast(DeviceArrayLike, src), "src")
            if other.shape != self.shape or other.dtype != self.dtype:
                raise InvalidValueError(f"copy_ source has shape {other.shape} and dtype {other.dtype}; "
                                 f"expected shape {self.shape} and dtype {self.dtype}")
            other._require_contiguous("copy_ (source)")
            if other._stream is not None and other._stream != s:
                s.wait(other._stream)
            if self.nbytes:
                with on_device(self.device_id):
                    if other.device_id == self.device_id:
                        _queue("cuMemcpyDtoDAsync", self.ptr, other.ptr, self.nbytes, s.handle)
                    else:  # another device's memory (pool allocations are not mapped for peers): a peer copy
                        _queue("cuMemcpyPeerAsync", self.ptr, primary_context(self.device_id), other.ptr,
                               primary_context(other.device_id), self.nbytes, s.handle)
            return self
        host = np.ascontiguousarray(src, dtype=self.dtype)
        if host.shape != self.shape:
            raise InvalidValueError(f"copy_ source has shape {host.shape}; expected {self.shape}")
        if self.nbytes:
            with on_device(self.device_id):
                _queue("cuMemcpyHtoDAsync", self.ptr, host.ctypes.data, self.nbytes, s.handle)
        return self

    def reshape(self, *shape: Any) -> DeviceArray:
        """A view of this C-contiguous array with a new shape (ints or one sequence; one dimension may be -1)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        if shape.count(-1) > 1:
            raise InvalidValueError(f"reshape: at most one dimension may be -1, got {shape}")
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            if known == 0 or self.size % known:
                raise InvalidValueError(f"reshape: cannot reshape an array of size {self.size} into {shape}")
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        shape = normalize_shape(shape, "reshape: the new shape")
        if math.prod(shape) != self.size:
            raise InvalidValueError(f"reshape: cannot reshape an array of size {self.size} into {shape}")
        self._require_contiguous("reshape")
        return DeviceArray.from_parts(self.ptr, shape, self.dtype, c_strides(shape), self.device_id, self, self._stream)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": [("", self.dtype.str)],
                "data": (self.ptr, False), "version": 3,
                "strides": None if self.is_contiguous else tuple(s * self.dtype.itemsize for s in self.strides),
                "stream": None if self._stream is None else int(self._stream.handle) or None}

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """DLPack export (zero-copy); the consumer's ``stream`` (None: legacy default, -1: no ordering) is made to
        wait for the work queued so far on this array's stream."""
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy; call with copy=None or False")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray is on {self.__dlpack_device__()}; cannot export to {dl_device}")
        if stream == 0:
            raise BufferError("stream=0 is ambiguous in DLPack; pass 1 for the legacy default stream")
        if stream != -1 and self._stream is not None:
            stream = 1 if stream is None else stream  # the DLPack spec: None means the legacy default stream
            if int(self._stream.handle) != stream:
                cuda_core().Stream.from_handle(stream).wait(self._stream.record())
        return capsule(self.ptr, self.shape, self.strides, self.dtype, self.__dlpack_device__(), self)


#: what an array argument in device memory may be: a :class:`DeviceArray` or a GPU tensor of another library
#: exposing DLPack or ``__cuda_array_interface__`` (defined after the class, so the alias holds the class itself)
if TYPE_CHECKING:
    DeviceArrayLike = Union[DeviceArray, _DLPackTensor, _CudaArrayInterface]
else:
    DeviceArrayLike = annotation_only(Union[DeviceArray, _DLPackTensor, _CudaArrayInterface], "DeviceArrayLike",
                                      "to make a device array use cudnn_py.to_device(), empty(), zeros() or "
                                      "as_array() (a view of a GPU tensor)")
#: an output array the caller passes, returned as given (a torch tensor in, the same tensor out)
Out = TypeVar("Out", bound=DeviceArrayLike)


def array_maker(shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...], device_id: int,
                contiguous: bool | None, key: LayoutKey | None) -> Callable[[int, Any, Any], DeviceArray]:
    """``make(ptr, owner, stream)``: :meth:`DeviceArray.from_parts` of one checked layout, its sizes worked out once
    (what a repeat call's new outputs are made with: about half the cost)."""
    ndim, size = len(shape), math.prod(shape)
    nbytes = size * dtype.itemsize

    def make(ptr: int, owner: Any, stream: Any) -> DeviceArray:
        self = _new(DeviceArray)
        self.layout_key, self.ptr, self.shape, self.dtype, self.strides = key, ptr, shape, dtype, strides
        self.device_id, self.ndim, self.size, self.nbytes, self._contiguous = device_id, ndim, size, nbytes, contiguous
        self._owner, self._stream = owner, stream
        return self
    return make


def allocator(shape: Shape, dtype: npt.DTypeLike, stream: StreamLike = None, *,
              device: int | Device | None = None) -> Callable[[], DeviceArray]:
    """A function making a new :func:`empty` array of ``shape`` and ``dtype`` on ``stream`` per call, checked once.

    :raises NoDeviceError: where no GPU can be used.
    :raises CudaOutOfMemoryError: (from the function) when the device has no room.
    """
    out = Output(normalize_shape(shape), dtype)
    out.bind(stream, device)
    return functools.partial(out.on, stream, device)


def _allocate(shape: Shape, dtype: npt.DTypeLike, stream: StreamLike, device: int | Device | None) -> DeviceArray:
    return allocator(shape, dtype, stream, device=device)()


class Output:
    """New arrays of ``shape``, ``dtype`` and element ``strides`` (None or packed: C-contiguous; else non-negative,
    over the elements they span), each owning a :class:`~cudnn_py.core.blocks.Block` (:meth:`on`). The device,
    stream and layout are worked out once per stream (:meth:`bind`): then ``take()`` answers a block and ``make(ptr,
    block, s)`` an array over it, on ``s``, the stream bound."""

    __slots__ = ("shape", "dtype", "strides", "n", "stream", "s", "take", "make")

    def __init__(self, shape: tuple[int, ...], dtype: npt.DTypeLike, strides: tuple[int, ...] | None = None):
        self.shape, self.dtype = shape, array_dtype(dtype)
        self.strides = None if strides is None or is_c_contiguous(shape, strides) else tuple(strides)
        # the elements a new array holds: its shape's, or as many as the strides span
        self.n = math.prod(shape) if self.strides is None else 1 + extent(shape, self.strides)[1]
        self.stream: Any = Output  # as given to bind (none yet: not a stream); s: as a cuda.core Stream
        self.s: Any = None
        self.take: Any = None
        self.make: Any = None

    def on(self, stream: StreamLike, device: int | Device | None) -> DeviceArray:
        """A new array on ``stream`` of ``device``."""
        if self.stream is not stream:
            self.bind(stream, device)
        b = self.take()
        return self.make(b.ptr, b, self.s)

    def bind(self, stream: StreamLike, device: int | Device | None) -> None:
        """Make the arrays on ``stream`` of ``device`` from now on.

        :raises NoDeviceError: where no GPU can be used.
        """
        nbytes = self.n * self.dtype.itemsize
        if nbytes > MAX_BYTES:  # before any driver call: cuda.core would fail converting it to a size_t
            raise InvalidValueError(f"an array of shape {self.shape} and dtype {self.dtype} would take {nbytes} "
                                    f"bytes; at most 2**63 - 1 can be addressed")
        dev = get_device(device)
        s = as_stream(stream, dev)  # dev, not device: None would ask the driver for the current device again
        strides = self.strides or c_strides(self.shape)
        key = _key_of(self.shape, strides, self.dtype, dev.device_id)
        self.make = array_maker(self.shape, self.dtype, strides, dev.device_id, self.strides is None, key)
        self.take, self.s, self.stream = taker(dev, s, nbytes), s, stream  # the stream last: what on() tests


def _queue(name: str, *args: Any) -> None:
    """Call the driver's copy, memset or read ``name``, raising its error, as device work a recording notes."""
    device_work(name)
    _check(getattr(driver(), name)(*args), name)


def memset_writes(element: np.ndarray) -> bool:
    """Whether a driver memset can write the one-element array ``element`` (a repeated 1-, 2- or 4-byte word)."""
    item = element.dtype.itemsize
    return item <= 4 or item == 8 and element.view(np.uint32)[0] == element.view(np.uint32)[1]


def memset(ptr: int, element: np.ndarray, count: int, stream_handle: Any) -> bool:
    """Queue a memset of ``count`` copies of the one-element array ``element`` from ``ptr``, with the memory's device
    current; False (nothing queued) where no memset writes it (:func:`memset_writes`)."""
    if not memset_writes(element):
        return False
    item = element.dtype.itemsize
    word = min(item, 4)  # bytes per word the memset writes (an 8-byte element as two equal 4-byte words)
    _queue(f"cuMemsetD{8 * word}Async", ptr, int(element.view(f"u{word}")[0]), count * item // word, stream_handle)
    return True


def empty(shape: Shape, dtype: npt.DTypeLike = np.float32, stream: StreamLike = None, *,
          device: int | Device | None = None) -> DeviceArray:
    """A new uninitialised C-contiguous device array of ``shape`` (an int or ints) and ``dtype`` (one cuDNN supports),
    allocated and later freed on ``stream`` (``None``: the default stream) of ``device`` (``None``: the current one).

    :raises NoDeviceError: where no GPU can be used.
    :raises CudaOutOfMemoryError: when the device has no room.
    """
    return _allocate(shape, dtype, stream, device)


def zeros(shape: Shape, dtype: npt.DTypeLike = np.float32, stream: StreamLike = None, *,
          device: int | Device | None = None) -> DeviceArray:
    """A new C-contiguous device array zeroed on ``stream``; the parameters are :func:`empty`'s."""
    a = _allocate(shape, dtype, stream, device)
    if a.nbytes:
        with on_device(a.device_id):
            _queue("cuMemsetD8Async", a.ptr, 0, a.nbytes, a.stream.handle)
    return a


def empty_like(a: DeviceArrayLike, dtype: npt.DTypeLike | None = None, stream: StreamLike = None) -> DeviceArray:
    """A new uninitialised C-contiguous array shaped as ``a`` (a device array or GPU tensor), on its device and
    ``stream`` (default: ``a``'s), of ``dtype`` (default: ``a``'s)."""
    a = as_array(a, "a")
    return _allocate(a.shape, a.dtype if dtype is None else dtype, a._stream if stream is None else stream, a.device_id)


def to_device(obj: npt.ArrayLike | DeviceArrayLike, stream: StreamLike = None, *, dtype: npt.DTypeLike | None = None,
              device: int | None = None) -> DeviceArray:
    """A new C-contiguous device array holding ``obj`` (anything ``np.asarray`` takes, converted to ``dtype`` on the
    host), copied on ``stream`` (``None``: the default stream) of ``device`` (``None``: the current one). Device data
    is returned as a zero-copy :func:`as_array` view, checked against ``dtype`` and ``device`` where given.

    :raises NoDeviceError: where no GPU can be used.
    """
    if dtype is not None:
        dtype = array_dtype(dtype)  # the short names ("fp16", "bf16") too, which NumPy does not know
    if _is_device_like(obj):
        return as_array(cast(DeviceArrayLike, obj), "obj", dtype=dtype, device=device, stream=stream)
    host = np.ascontiguousarray(obj, dtype=dtype)
    return _allocate(host.shape, host.dtype, stream, device).copy_(host)


def _is_device_like(obj) -> bool:
    if type(obj) is DeviceArray:
        return True
    if isinstance(obj, np.ndarray):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return dev()[0] in (KDL_CUDA, KDL_CUDA_MANAGED)
    except Exception:
        return False


def _host_error(obj, name: str) -> InvalidTypeError:
    return InvalidTypeError(f"{name} is a {type(obj).__module__}.{type(obj).__name__} in host memory, but cuDNN needs "
                            f"device memory; copy it with cudnn_py.to_device({name}) (or pass a GPU tensor, e.g. "
                            f"torch's {name}.cuda())")


def _view(obj, name: str, stream) -> DeviceArray:
    """A DLPack / CUDA-array-interface object without a copy (a CUDA torch tensor read directly without ``stream``)."""
    if isinstance(obj, (np.ndarray, np.generic)):
        raise _host_error(obj, name)
    if stream is None:
        got = _torch_signature(obj)
        if got is not None:
            (shape, strides, dt, device), ptr = got
            return DeviceArray.from_parts(ptr, shape, dt, tuple(strides), device, obj, None)
    has_cai = hasattr(obj, "__cuda_array_interface__")
    dlpack = hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
    if dlpack:
        try:
            kind, _ = obj.__dlpack_device__()
        except Exception as e:
            raise InvalidTypeError(f"{name}: __dlpack_device__() failed: {e}") from e
        dlpack = kind in (KDL_CUDA, KDL_CUDA_MANAGED)
        if not dlpack and not has_cai:
            raise _host_error(obj, name)
    elif not has_cai:
        raise InvalidTypeError(f"{name} must be a DeviceArray or a GPU tensor (DLPack or __cuda_array_interface__), "
                               f"got {type(obj).__module__}.{type(obj).__name__}")
    if not dlpack:
        check_cuda_array_interface(obj, name)
    s = None if stream is None else as_stream(stream)
    sptr, view_of = -1 if s is None else int(s.handle), cuda_core().utils.StridedMemoryView
    try:
        view = view_of.from_dlpack(obj, sptr) if dlpack else view_of.from_cuda_array_interface(obj, sptr)
        dtype = view.dtype
    except (BufferError, NotImplementedError, TypeError, ValueError) as e:
        raise InvalidTypeError(f"{name}: cannot view {type(obj).__name__} as a device array: {e}") from e
    except CudnnPyError:
        raise
    except Exception as e:  # noqa: BLE001 - the driver could not be asked about the pointer (none on this machine),
        get_device(None)     # or the producer failed: NoDeviceError where no driver or GPU can be used
        raise InvalidValueError(f"{name}: cannot view {type(obj).__name__} as a device array (the producer or the "
                                f"CUDA driver failed): {e!r}") from e
    if not view.is_device_accessible or view.device_id < 0:
        raise _host_error(obj, name)
    if dtype is None or dtype not in SUPPORTED_DTYPES:
        raise InvalidTypeError(f"{name} has dtype {dtype}, which cuDNN does not support")
    shape = tuple(view.shape)
    strides = c_strides(shape) if view.strides is None else tuple(view.strides)
    return DeviceArray.from_parts(int(view.ptr), shape, np.dtype(dtype), strides, int(view.device_id), view, s)


def as_array(obj: DeviceArrayLike, name: str = "x", *, dtype: npt.DTypeLike | None = None, ndim: int | None = None,
             shape: Sequence[int] | None = None, contiguous: bool = False, device: int | None = None,
             stream: StreamLike = None) -> DeviceArray:
    """``obj`` as a :class:`DeviceArray` without a copy, checked before any C call sees it: ``dtype``, ``ndim``,
    ``shape`` and ``device`` where given (:class:`TypeError` for the dtype, :class:`ValueError` otherwise) and
    C-contiguity where ``contiguous``; the errors name ``name``.

    :param obj: a DeviceArray (returned as is) or a GPU tensor with ``__dlpack__`` / ``__cuda_array_interface__``
        (torch, CuPy, JAX, numba); a host array raises :class:`TypeError` saying how to move it.
    :param stream: the consumer stream foreign producers are ordered before (default: no ordering).
    """
    a = obj if type(obj) is DeviceArray else _view(obj, name, stream)
    if dtype is not None and a.dtype != dtype and a.dtype != array_dtype(dtype):  # the second: "fp16", ...
        raise InvalidTypeError(f"{name} has dtype {a.dtype}; expected {array_dtype(dtype)}")
    if ndim is not None and a.ndim != ndim:
        raise InvalidValueError(f"{name} has {a.ndim} dimensions (shape {a.shape}); expected {ndim}")
    if shape is not None and a.shape != tuple(shape):
        raise InvalidValueError(f"{name} has shape {a.shape}; expected {tuple(shape)}")
    if contiguous and not a.is_contiguous:
        raise InvalidValueError(f"{name} must be C-contiguous (packed); it has shape {a.shape} and strides "
                         f"{a.strides} (elements): make a packed copy first (e.g. torch .contiguous())")
    if device is not None and a.device_id != device:
        raise InvalidValueError(f"{name} is on device {a.device_id}; expected device {device} (the handle's)")
    return a


def array_signature(obj: DeviceArrayLike, name: str = "x") -> tuple[Signature, int]:
    """``((shape, strides in elements, dtype, device_id), data pointer)`` of a device-array argument: what a cached
    call keys on. A DeviceArray and a CUDA torch tensor are read from attributes, anything else by :func:`as_array`
    (which raises naming ``name`` where ``obj`` is not device memory)."""
    if type(obj) is DeviceArray:
        return (obj.shape, obj.strides, obj.dtype, obj.device_id), obj.ptr
    got = _torch_signature(obj)
    if got is not None:
        return got
    a = as_array(obj, name)
    return (a.shape, a.strides, a.dtype, a.device_id), a.ptr


def _torch_signature(obj: Any) -> tuple[Signature, int] | None:
    """:func:`array_signature` of a CUDA torch tensor of a dtype cuDNN has, from its attributes; else None."""
    if not is_torch_tensor(obj):
        return None
    dt = _foreign.TORCH_DTYPES.get(obj.dtype)
    if dt is None or not obj.is_cuda:
        return None
    return (tuple(obj.shape), obj.stride(), dt, obj.get_device()), obj.data_ptr()


def output_array(out: DeviceArrayLike | None, shape: Shape, dtype: npt.DTypeLike, name: str = "y", *,
                 device: int | None = None, stream: StreamLike = None, contiguous: bool = False) -> DeviceArray:
    """The array to write an output to: a new C-contiguous one of ``shape`` and ``dtype`` on ``device`` and
    ``stream`` when ``out`` is None, else ``out`` checked by :func:`as_array` to have them (and ``contiguous``)."""
    if out is None:
        return _allocate(shape, dtype, stream, device)
    return as_array(out, name, dtype=dtype, shape=cast(Sequence[int], shape), contiguous=contiguous, device=device,
                    stream=stream)
