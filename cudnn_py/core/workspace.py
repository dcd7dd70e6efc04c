"""Workspaces: one device scratch buffer per :class:`~cudnn_py.Handle` (``handle.workspace``), grown on demand in
whole MiB and reused call after call; users never size one by hand::

    h.workspace.cap = 64 << 20          # never grow past 64 MiB: a call needing more raises WorkspaceLimitError
    print(h.workspace.peak)             # the most any call asked for

Growth reallocates ordered on the call's stream; moving to another stream makes it wait for the previous one first.
Callers that can fall back catch :class:`~cudnn_py.errors.WorkspaceLimitError` (nothing is allocated, nothing runs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cudnn_py.errors import InvalidTypeError, InvalidValueError, WorkspaceLimitError
from cudnn_py.core.blocks import new_buffer
from cudnn_py.core.contexts import on_device
from cudnn_py.core.streams import StreamLike, as_stream, get_device

if TYPE_CHECKING:
    from cuda.core import Device, Stream

__all__ = ["Workspace"]

_GRANULE = 1 << 20  # grow in whole MiB so slightly larger requests reuse the buffer


class Workspace:
    """A growable device scratch buffer (``cap``: see :attr:`cap`); ``with Workspace() as ws:`` frees its memory at
    the end of the block (it stays usable, allocating again on the next :meth:`get`)."""

    __slots__ = ("_device", "_buffer", "_ptr", "_size", "_stream", "_cap", "peak", "__weakref__")

    def __init__(self, cap: int | None = None, *, device: int | Device | None = None):
        self._device = device
        self._buffer: Any = None
        self._ptr = self._size = 0
        self._stream: Stream | None = None
        self._cap: int | None = None
        self.cap = cap
        #: the largest number of bytes any :meth:`get` asked for
        self.peak = 0

    @property
    def cap(self) -> int | None:
        """The most bytes this workspace may grow to (None: no limit); a cap below :attr:`size` frees the buffer."""
        return self._cap

    @cap.setter
    def cap(self, value: int | None) -> None:
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"workspace cap must be an int number of bytes or None, got {value!r}")
            if not 0 <= value < 2 ** 63:  # compared with and passed as a size_t
                raise InvalidValueError(f"workspace cap must be >= 0 and below 2**63 bytes, got {value}")
            if self._size > value:
                self.release()
        self._cap = value

    @property
    def size(self) -> int:
        """Bytes currently allocated (0 before the first :meth:`get` and after :meth:`release`)."""
        return self._size

    @property
    def ptr(self) -> int:
        """The device address of the current buffer (0 when none is allocated)."""
        return self._ptr

    def get(self, nbytes: int, stream: StreamLike = None) -> int:
        """The device address of at least ``nbytes`` bytes (0 for 0: cuDNN accepts a NULL workspace of size 0), valid
        for work queued on ``stream`` (default: the default stream) until the next ``get``.

        :raises WorkspaceLimitError: when ``nbytes`` exceeds :attr:`cap`.
        :raises CudaOutOfMemoryError: when the device has no room.
        """
        if stream is self._stream and 0 < nbytes <= self._size and nbytes <= self.peak:
            return self._ptr  # a repeat on the stream that used it last (the size never exceeds the cap)
        if nbytes < 0:
            raise InvalidValueError(f"workspace size must be >= 0 bytes, got {nbytes}")
        if nbytes > self.peak:
            self.peak = nbytes
        if nbytes == 0:
            return 0
        if self._cap is not None and nbytes > self._cap:
            raise WorkspaceLimitError(
                f"this call needs a {nbytes}-byte workspace but the workspace cap is {self._cap} bytes; "
                f"raise the cap (workspace.cap = {nbytes}) or choose an algorithm that needs less"
            )
        previous = self._stream
        s: Stream = previous if previous is not None and stream is previous else as_stream(stream, self._device)
        if previous is not None and s is not previous and s != previous:
            s.wait(previous)  # the previous user of the buffer must be done before s reuses it
        self._stream = s
        if nbytes > self._size:
            size = -(-nbytes // _GRANULE) * _GRANULE
            if self._cap is not None:
                size = min(size, self._cap)
            self.release()  # ordered on s, the stream now using the buffer
            self._buffer, self._ptr = new_buffer(get_device(self._device), s, size, size, "a {}-byte workspace")
            self._size = size
        return self._ptr

    def release(self) -> None:
        """Give the buffer back, ordered on the stream that last used it; the next :meth:`get` allocates again."""
        if self._buffer is not None:
            with on_device(self._buffer.device_id):
                self._buffer.close(self._stream)
            self._buffer, self._ptr, self._size = None, 0, 0

    close = release

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Workspace(size={self._size}, peak={self.peak}, cap={self._cap})"
