"""The cuDNN handle (:class:`Handle`: one device, one stream, its own workspace and caches; one per thread and
device, docs/design.md, "Threads and devices"), :class:`CObject` (the base of every object owning a C object:
``close()``, ``with``, the garbage collector) and :func:`handle_arg`.
"""
from __future__ import annotations

import contextlib
import ctypes
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cudnn_py.clib import binding as _binding
from cudnn_py import _imports, capi
from cudnn_py.core.caches import Cache
from cudnn_py.errors import ClosedError, InvalidTypeError, InvalidValueError
from cudnn_py.core.streams import StreamLike, as_stream, get_device
from cudnn_py.core.workspace import Workspace

if TYPE_CHECKING:  # annotations only: cuda.core is imported on first device use (streams.cuda_core)
    from cuda.core import Device, Stream

__all__ = ["CObject", "Handle", "handle_arg"]


def _destroy(fn: Callable, ptr: Any, keep: tuple) -> None:
    """Destroy ``ptr`` with ``fn`` (``keep``, what must outlive it, such as a handle's stream, goes after)."""
    _binding.disown(ptr)
    try:
        fn(ptr)
    except Exception:  # at interpreter exit the library may be unloading; nothing left to free
        pass
    ptr.value = None  # whoever still holds this ctypes object now passes NULL (an error), never a freed object


_PtrT = TypeVar("_PtrT")


class CObject(Generic[_PtrT]):
    """The base of the objects owning a cuDNN C object (:class:`Handle`, the descriptors): :attr:`ptr`, an idempotent
    :meth:`close` that destroys it (the garbage collector does for a forgotten one), ``with``."""

    _ptr: _PtrT | None = None
    _closed_message = "this {} is closed"  # formatted with the class name

    def _own(self, ptr: _PtrT, destroy: Callable, *keep: Any) -> None:
        """Own ``ptr``: ``destroy(ptr)`` on :meth:`close` or collection, ``keep`` referenced until then."""
        self._finalizer = weakref.finalize(self, _destroy, destroy, ptr, keep)
        _binding.own(ptr, type(self).__name__)
        self._ptr = ptr

    @property
    def ptr(self) -> _PtrT:
        """The C object (``cudnnHandle_t``, ``cudnn*Descriptor_t``) for C calls; :class:`ClosedError` once closed."""
        p = self._ptr
        if p is None:
            raise ClosedError(self._closed_message.format(type(self).__name__))
        return p

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has destroyed the C object."""
        return self._ptr is None

    def close(self) -> None:
        """Destroy the C object (idempotent)."""
        if self._ptr is not None:
            self._ptr = None
            self._finalizer()

    def __enter__(self: _CObjectT) -> _CObjectT:
        self.ptr  # raises if closed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CObjectT = TypeVar("_CObjectT", bound=CObject)


class Handle(CObject[capi.cudnnHandle_t]):
    """A ``cudnnHandle_t`` on ``device`` (an ordinal or :class:`cuda.core.Device`), bound to ``stream``: None for the
    device's default (NULL) stream, a :class:`cuda.core.Stream`, a ``torch.cuda.Stream`` or an int ``cudaStream_t``.
    """

    _closed_message = "this cudnn_py.Handle is closed; create a new Handle()"

    def __init__(self, device: int | Device = 0, stream: StreamLike | None = None) -> None:
        _imports.warm_imports()  # so that threads whose first calls run at once import nothing half-way
        dev = get_device(device)
        dev.set_current()  # cudnnCreate binds the handle to the current device, which may have changed since
        #: the :class:`cuda.core.Device` of this handle
        self.cuda_device: Device = dev
        #: the device ordinal
        self.device: int = dev.device_id
        s = as_stream(stream, self.device)
        ptr = capi.cudnnHandle_t()
        capi.cudnnCreate(ctypes.byref(ptr))
        self._state = [s]  # the stream, which must outlive the handle bound to it
        self._own(ptr, capi.cudnnDestroy, self._state)
        #: the scratch buffer execute calls draw from (see :class:`~cudnn_py.core.workspace.Workspace`)
        self.workspace = Workspace(device=self.device)
        #: what other modules built for this handle, by module (see :func:`handle_cache`); dropped by close()
        self.cache: dict[str, Cache] = {}
        self.set_stream(s)

    @property
    def device_id(self) -> int:
        """The device ordinal (same as :attr:`device`)."""
        return self.device

    @property
    def stream(self) -> Stream:
        """The :class:`cuda.core.Stream` cuDNN work of this handle is queued on."""
        return self._stream

    @property
    def stream_ptr(self) -> int:
        """:attr:`stream` as an int ``cudaStream_t``."""
        return self._stream_ptr

    def set_stream(self, stream) -> None:
        """Queue this handle's future work on ``stream`` (see the class doc for what a stream may be)."""
        s = as_stream(stream, self.device)
        try:
            sdev = s.device.device_id
        except Exception:  # a foreign stream whose device cannot be queried: trust the caller
            sdev = self.device
        if sdev != self.device:
            raise InvalidValueError(f"stream is on device {sdev} but this handle is on device {self.device}")
        sptr = int(s.handle)
        capi.cudnnSetStream(self.ptr, sptr)
        self._stream, self._stream_ptr = s, sptr
        self._state[:] = [s]

    @contextlib.contextmanager
    def on_stream(self, stream) -> Iterator[Handle]:
        """``with h.on_stream(s):`` queue work on ``s`` inside the block, then restore the previous stream."""
        previous = self._stream
        self.set_stream(stream)
        try:
            yield self
        finally:
            if self._ptr is not None:
                self.set_stream(previous)

    def synchronize(self) -> None:
        """Block until all work queued on this handle's stream has finished."""
        self._stream.sync()

    def cache_info(self) -> dict[str, int]:
        """Entries in each of this handle's caches, by name (process-wide ones: :func:`cudnn_py.core.caches.info`)."""
        return {name: len(entries) for name, entries in self.cache.items()}

    def clear_caches(self) -> None:
        """Forget every plan, executor and graph built for this handle; they are built again on next use."""
        self.cache.clear()

    def close(self) -> None:
        """Release the workspace and destroy the cuDNN handle. Idempotent."""
        if self._ptr is not None:
            self.cache.clear()
            self.workspace.release()
            super().close()

    def __repr__(self) -> str:
        if self._ptr is None:
            return f"<cudnn_py.Handle device={self.device} closed>"
        return f"<cudnn_py.Handle device={self.device} stream={self._stream_ptr:#x} {self.workspace!r}>"


def handle_arg(handle: Handle, name: str = "handle") -> Handle:
    """``handle`` checked to be an open :class:`Handle` (or a stand-in with an int ``device``, as tests use), first
    thing in every call: :class:`InvalidTypeError` for None, an array or anything else, :class:`ClosedError` for a
    closed handle."""
    if type(handle) is Handle or isinstance(handle, Handle):
        if handle._ptr is None:
            raise ClosedError(f"{name} is a closed cudnn_py.Handle; create a new Handle()")
        return handle
    if isinstance(getattr(handle, "device", None), int) and not hasattr(handle, "__cuda_array_interface__") \
            and not hasattr(handle, "__dlpack__"):
        return handle
    raise InvalidTypeError(f"{name} must be a cudnn_py.Handle, got {type(handle).__name__}"
                           + (" (pass cudnn_py.Handle() or cudnn_py.default_handle())" if handle is None else ""))
