"""Streams, events and timing: thin helpers over :mod:`cuda.core`.

cudnn-py uses :class:`cuda.core.Stream` and :class:`cuda.core.Event` directly; this module only
normalises what users pass as a stream and adds a timer::

    s = cudnn.new_stream()                    # a fresh non-blocking stream on the current device
    with h.on_stream(s), cudnn.timer(s) as t:
        y = cudnn.convolution_forward(h, conv, x, w)
    print(t.ms)                               # device time between two events on s

A *stream* argument anywhere in cudnn-py may be ``None`` (the device's default stream, i.e. the
legacy NULL stream that cuDNN and PyTorch also use by default), a :class:`cuda.core.Stream`, an
object with ``__cuda_stream__`` or a ``cuda_stream`` attribute (``torch.cuda.Stream``), or a raw
``cudaStream_t`` as an int.
"""
from __future__ import annotations

import threading

from cuda.core import Device, EventOptions, Stream, StreamOptions

__all__ = ["get_device", "as_stream", "stream_ptr", "new_stream", "synchronize", "timer", "Timer"]

_tls = threading.local()


def get_device(device=None) -> Device:
    """The :class:`cuda.core.Device` for an ordinal (``None``: the current one), made current in this thread once."""
    cache = getattr(_tls, "devices", None)
    if cache is None:
        cache = _tls.devices = {}
    try:
        return cache[device]
    except (KeyError, TypeError):
        pass
    if isinstance(device, Device):
        dev = device
    elif device is None or (isinstance(device, int) and not isinstance(device, bool)):
        if device is not None and device < 0:
            raise ValueError(f"device ordinal must be >= 0, got {device}")
        try:
            dev = Device(device)
        except Exception as e:  # no driver, no GPU, ordinal out of range
            raise RuntimeError(f"cannot use CUDA device {device if device is not None else 0}: {e}") from e
    else:
        raise TypeError(f"device must be an int ordinal or a cuda.core.Device, got {type(device).__name__}")
    try:
        dev.set_current()
    except Exception as e:
        raise RuntimeError(f"cannot use CUDA device {dev.device_id}: {e}") from e
    cache[device] = cache[dev.device_id] = dev
    return dev


def as_stream(stream=None, device=None) -> Stream:
    """Normalise a stream argument (see the module doc) to a :class:`cuda.core.Stream`."""
    if type(stream) is Stream:
        return stream
    if stream is None:
        return get_device(device).default_stream
    if isinstance(stream, Stream):
        return stream
    if isinstance(stream, bool):
        raise TypeError("stream must be a cuda.core.Stream, a stream object or an int handle, not a bool")
    if isinstance(stream, int):
        get_device(device)
        return Stream.from_handle(stream)
    if hasattr(stream, "__cuda_stream__"):
        return get_device(device).create_stream(stream)
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        get_device(device)
        return Stream.from_handle(handle)
    raise TypeError(
        f"cannot use {type(stream).__name__} as a CUDA stream; pass None, a cuda.core.Stream, "
        "an object with __cuda_stream__ / cuda_stream (e.g. torch.cuda.Stream) or an int cudaStream_t"
    )


def stream_ptr(stream=None) -> int:
    """The ``cudaStream_t`` of a stream argument, as an int (what cuDNN's ``cudnnSetStream`` takes)."""
    return int(as_stream(stream).handle)


def new_stream(device=None, *, nonblocking: bool = True, priority: int | None = None) -> Stream:
    """Create a new stream on ``device`` (non-blocking: it does not synchronise with the NULL stream)."""
    return get_device(device).create_stream(options=StreamOptions(nonblocking=nonblocking, priority=priority))


def synchronize(stream=None) -> None:
    """Block the host until all work queued on ``stream`` (default: the default stream) has finished."""
    as_stream(stream).sync()


class Timer:
    """Device time between two events recorded on one stream; use through :func:`timer`.

    ``ms`` is ``None`` until the block has exited (the end event is synchronised then).
    """

    __slots__ = ("stream", "ms", "_start")

    _OPTIONS = EventOptions(timing_enabled=True)

    def __init__(self, stream=None):
        self.stream = as_stream(stream)
        self.ms: float | None = None
        self._start = None

    def __enter__(self) -> Timer:
        self.ms = None
        self._start = self.stream.record(options=self._OPTIONS)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        end = self.stream.record(options=self._OPTIONS)
        if exc_type is None:
            end.sync()
            self.ms = end - self._start

    def __repr__(self) -> str:
        return f"Timer(ms={self.ms})"


def timer(stream=None) -> Timer:
    """``with timer(stream) as t: ...`` then ``t.ms``: elapsed device milliseconds of the work queued on ``stream`` in the block."""
    return Timer(stream)
