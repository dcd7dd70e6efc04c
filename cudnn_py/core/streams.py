"""Streams, events and timing: helpers over :mod:`cuda.core` (whose ``Stream`` and ``Event`` cudnn-py uses) that
normalise what users pass as a stream, and a timer::

    with h.on_stream(s), cdp.timer(s) as t:   # s = cdp.new_stream(): a non-blocking stream on the current device
        y = cdp.convolution_forward(h, conv, x, w)
    print(t.ms)                               # device time between two events on s

A *stream* argument may be ``None`` (the device's default, legacy NULL stream, cuDNN's and PyTorch's default too),
a :class:`cuda.core.Stream`, an object with ``__cuda_stream__`` or a ``cuda_stream`` attribute (``torch.cuda.Stream``)
or a raw ``cudaStream_t`` int. :mod:`cuda.core` is imported on first use; without a usable GPU or driver, calls that
need one raise :class:`~cudnn_py.errors.NoDeviceError`.
"""
from __future__ import annotations

import ctypes
import functools
import gc
import math
import threading
import time
import types
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar, Union, cast

from cudnn_py import _imports
from cudnn_py.clib.install import missing_cuda
from cudnn_py.core.args import bool_arg, int_arg
from cudnn_py.errors import CudaError, InvalidTypeError, InvalidValueError, NoDeviceError, check_cuda, cuda_error

if TYPE_CHECKING:
    from cuda.core import Device, Stream

__all__ = ["StreamLike", "get_device", "as_stream", "stream_ptr", "new_stream", "synchronize", "timer", "Timer",
           "held_ms", "fastest_first", "cuda_core", "driver", "missing_device", "HOLD_TIMEOUT", "TIE",
           "EVENT_RESOLUTION_MS"]

#: seconds a held stream (``timer(hold=True)``) waits at most for a block that waits for the stream itself
HOLD_TIMEOUT = 2.0


class _HasCudaStream(Protocol):
    def __cuda_stream__(self) -> tuple[int, int]: ...


class _HasCudaStreamAttr(Protocol):
    @property
    def cuda_stream(self) -> int: ...


def annotation_only(alias: Any, name: str, instead: str) -> Any:
    """``alias`` (a ``typing.Union``) for annotations, whose call raises :class:`InvalidTypeError` naming ``name``
    and what to use ``instead`` (typing's own says only "Cannot instantiate typing.Union")."""
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise InvalidTypeError(f"{name} is a type alias for annotations and cannot be called; {instead}")

    def subclass(base: type) -> type:  # typing's classes take a subclass only with _root=True
        return types.new_class(base.__name__, (base,), {"_root": True},
                               lambda ns: ns.update(__call__=__call__, __module__="typing"))
    try:
        cls = subclass(type(alias))
    except TypeError:  # a class that cannot be subclassed (Python 3.14's typing.Union): the alias, annotated
        alias = Annotated[alias, name]
        cls = subclass(type(alias))
    made: Any = object.__new__(cls)
    made.__dict__.update(vars(alias))
    return made


#: what a ``stream`` argument may be (see the module doc)
if TYPE_CHECKING:
    StreamLike = Union["Stream", _HasCudaStream, _HasCudaStreamAttr, int, None]
else:
    StreamLike = annotation_only(Union["Stream", _HasCudaStream, _HasCudaStreamAttr, int, None], "StreamLike",
                                 "pass a cudnn_py.new_stream(), a cuda.core Stream, a torch/CuPy stream, an int "
                                 "cudaStream_t or None (cudnn_py.core.streams.as_stream() normalises one)")

_tls = threading.local()
_core: ModuleType | None = None
_driver: ModuleType | None = None
_StreamType: type = type("_NotLoaded", (), {})  # cuda.core.Stream once cuda.core is imported (nothing is of this one)


def cuda_core() -> ModuleType:
    """:mod:`cuda.core`, imported on first use (:class:`NoDeviceError` without cudnn-py's ``cu12``/``cu13`` extra)."""
    global _core, _StreamType, _driver
    if _core is not None:
        return _core
    # under the import lock: a second thread importing cuda.core at once got it half-filled (docs/design.md)
    with _imports.locked():
        if _core is None:
            try:
                import cuda.core as core
                from cuda.bindings import driver as drv
            except ImportError as e:
                raise NoDeviceError("cannot use a GPU", 0, "", missing_cuda(e)) from None
            _driver, _StreamType = drv, core.Stream
            _core = core
    return _core


def driver() -> ModuleType:
    """``cuda.bindings.driver``, imported with cuda.core on first use (:class:`NoDeviceError` where missing)."""
    if _driver is None:
        cuda_core()  # imports cuda.bindings.driver with cuda.core, under the import lock
    return cast(ModuleType, _driver)


def _no_device(device: int | None, cause: BaseException | None) -> CudaError:
    """Why ``device`` cannot be used, as a :class:`NoDeviceError` (else :class:`CudaError`) to raise ``from None``:
    where no driver code names the reason, the cause's text ends the message; the cause is kept as ``err.cause``."""
    err = _diagnose(device, cause)
    if cause is not None and isinstance(err, NoDeviceError) and not err.name:  # a driver code says it all
        first = (str(cause).strip().splitlines() or [""])[0]
        text = f"{type(cause).__name__}: {first}" if first else type(cause).__name__
        err = type(err)(err.function, err.code, err.name,
                        f"{err.text} (cause: {text if len(text) <= 300 else text[:297] + '...'})")
    err.cause = cause  # type: ignore[attr-defined]
    return err


def _diagnose(device: int | None, cause: BaseException | None) -> CudaError:
    ordinal = 0 if device is None else device
    what = f"cannot use CUDA device {ordinal}"
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
    except ImportError as e:
        return NoDeviceError(what, 0, "", missing_cuda(e))
    except Exception:  # noqa: BLE001 - libcuda.so cannot be loaded: no NVIDIA driver on this machine
        return NoDeviceError(what, 0, "", "no NVIDIA driver was found on this machine (libcuda.so.1 could not be "
                                          "loaded); cuDNN descriptors and shapes work without one, running "
                                          "anything needs a GPU")
    if int(err):
        failed = cuda_error("cuInit", int(err), getattr(err, "name", ""))
        return NoDeviceError(what, failed.code, failed.name,
                             f"the CUDA driver did not start ({failed.text or 'cuInit failed'})")
    _, count = driver.cuDeviceGetCount()
    if count == 0:
        return NoDeviceError(what, 100, "CUDA_ERROR_NO_DEVICE",
                             "the CUDA driver sees no GPU (is CUDA_VISIBLE_DEVICES empty?)")
    if ordinal >= count:
        return NoDeviceError(what, 101, "CUDA_ERROR_INVALID_DEVICE",
                             f"there {'is' if count == 1 else 'are'} only {count} visible GPU{'s' * (count != 1)}")
    return CudaError(what, 0, "", str(cause) if cause else "unknown cause")


def missing_device(device: int = 0) -> NoDeviceError | None:
    """Why CUDA device ``device`` cannot be used, as the :class:`NoDeviceError` using it would raise; ``None`` when it
    can. Asks the driver only (milliseconds: no context, no cuda.core, no cuDNN), so a program can refuse first."""
    err = _no_device(device, None)
    return err if isinstance(err, NoDeviceError) else None


def get_device(device: int | Device | None = None) -> Device:
    """The :class:`cuda.core.Device` of ``device`` (an ordinal, a :class:`cuda.core.Device`, or ``None`` for this
    thread's current device, 0 where none is), made current in this thread the first time it is asked for.

    :raises NoDeviceError: no driver, no GPU, or no such ordinal.
    """
    cache = getattr(_tls, "devices", None)
    if cache is None:
        cache = _tls.devices = {}
    if device is None:
        device = _current_ordinal()
    try:
        return cache[device]
    except (KeyError, TypeError):
        pass
    core = cuda_core()
    if isinstance(device, core.Device):
        dev = device
    elif isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise InvalidValueError(f"device ordinal must be >= 0, got {device}")
        try:
            dev = core.Device(device)
        except Exception as e:  # no driver, no GPU, ordinal out of range
            raise _no_device(device, e) from None  # the cause's text is in the message
    else:
        raise InvalidTypeError(f"device must be an int ordinal or a cuda.core.Device, got {type(device).__name__}")
    try:
        dev.set_current()
    except Exception as e:
        raise _no_device(dev.device_id, e) from None
    cache[device] = cache[dev.device_id] = dev
    return dev


def _current_ordinal() -> int:
    """The ordinal of this thread's current device, 0 where it has no context (see docs/design.md)."""
    try:
        if not _has_context():
            return 0
        return cuda_core().Device().device_id
    except NoDeviceError:
        raise
    except Exception as e:  # no driver, no GPU
        raise _no_device(None, e) from None


def _has_context() -> bool:
    """Whether this thread has a current CUDA context (initialising the driver first where needed)."""
    drv = driver()
    err, ctx = drv.cuCtxGetCurrent()
    if err == drv.CUresult.CUDA_ERROR_NOT_INITIALIZED:
        drv.cuInit(0)
        err, ctx = drv.cuCtxGetCurrent()
    if err != drv.CUresult.CUDA_SUCCESS:
        raise cuda_error("cuCtxGetCurrent", int(err), err.name)
    return bool(int(ctx))


def as_stream(stream: StreamLike = None, device: int | Device | None = None) -> Stream:
    """A stream argument (see the module doc) as a :class:`cuda.core.Stream` (``None``: ``device``'s default stream);
    :class:`InvalidTypeError` for anything else."""
    if type(stream) is _StreamType:
        return stream
    if stream is None:
        return get_device(device).default_stream
    stream_type = cuda_core().Stream
    if isinstance(stream, stream_type):
        return stream
    if isinstance(stream, bool):
        raise InvalidTypeError("stream must be a cuda.core.Stream, a stream object or an int handle, not a bool")
    if not isinstance(stream, int) and hasattr(stream, "__cuda_stream__"):
        return get_device(device).create_stream(stream)
    handle = stream if isinstance(stream, int) else getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        if not 0 <= handle < 1 << 64:  # cuda.core would raise OverflowError
            raise InvalidValueError(f"stream handle {handle}: a cudaStream_t is an address, 0 <= handle < 2**64")
        get_device(device)
        return stream_type.from_handle(handle)
    raise InvalidTypeError(f"cannot use {type(stream).__name__} as a CUDA stream; pass None, a cuda.core.Stream, "
                           "an object with __cuda_stream__ / cuda_stream (e.g. torch.cuda.Stream) or an int "
                           "cudaStream_t")


def stream_ptr(stream: StreamLike = None) -> int:
    """The ``cudaStream_t`` of a stream argument (``None``: the current device's default stream) as an int."""
    return int(as_stream(stream).handle)


def new_stream(device: int | Device | None = None, *, nonblocking: bool = True,
               priority: int | None = None) -> Stream:
    """A new :class:`cuda.core.Stream` on ``device`` (``None``: the current one).

    :param nonblocking: when true the stream does not synchronise with the legacy NULL stream.
    :param priority: the CUDA stream priority (lower is more urgent); ``None`` for the default.
    :raises NoDeviceError: where no GPU can be used.
    """
    nonblocking = bool_arg(nonblocking, "nonblocking")
    priority = None if priority is None else int_arg(priority, "priority", -(1 << 31))
    dev = get_device(device)
    try:
        return dev.create_stream(options=cuda_core().StreamOptions(nonblocking=nonblocking, priority=priority))
    except ValueError as e:   # cuda.core: a priority outside the device's range
        raise InvalidValueError(f"new_stream: {e}") from None


def synchronize(stream: StreamLike = None) -> None:
    """Block the host until all work queued on ``stream`` (default: the default stream) has finished."""
    as_stream(stream).sync()


class _Latch:
    """A host-mapped word held streams wait on (``cuStreamWaitValue32``); each hold waits for its own ticket."""

    def __init__(self) -> None:
        d = driver()
        host = check_cuda(d.cuMemHostAlloc(4, d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE),
                          "cuMemHostAlloc")
        self.address = check_cuda(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
        self.word = ctypes.c_uint32.from_address(int(host))
        self.word.value = self.ticket = 0
        self.lock = threading.Lock()

    def hold(self, stream: Stream) -> int | None:
        """Make ``stream`` wait until :meth:`release` of the returned ticket (None: the driver cannot hold streams)."""
        with self.lock:
            ticket = self.ticket = (self.ticket + 1) & 0xFFFFFFFF
        err, = driver().cuStreamWaitValue32(stream.handle, self.address, ticket, 0)
        return None if err else ticket

    def release(self, ticket: int) -> bool:
        """Let go of every hold up to ``ticket``; False where it already was (the watchdog, or a later ticket)."""
        with self.lock:
            if (self.word.value - ticket) & 0x80000000 == 0:  # cyclic: the word is at or past the ticket
                return False
            self.word.value = ticket
            return True


@functools.cache  # made by a held timer, which runs only where no other thread does (see _alone)
def _the_latch() -> _Latch:
    return _Latch()


class Timer:
    """Device time between two events recorded on one stream; use through :func:`timer`. ``ms``: None until the
    block has exited; ``held``: whether the stream was held until the block had queued its work; ``timed_out``:
    whether the watchdog let it go at :data:`HOLD_TIMEOUT` (the block waited for the held stream: :func:`held_ms`)."""

    __slots__ = ("stream", "ms", "held", "timed_out", "_start", "_options", "_hold", "_holding", "_ticket",
                 "_watchdog", "_collecting")

    def __init__(self, stream: StreamLike = None, hold: bool = False):
        self._hold = self._holding = bool_arg(hold, "hold")
        self.stream: Stream = as_stream(stream)
        self.ms: float | None = None
        self.held = self.timed_out = self._collecting = False
        self._ticket: int | None = None
        self._watchdog: threading.Timer | None = None
        self._start: Any = None
        self._options = cuda_core().EventOptions(timing_enabled=True)

    def __enter__(self) -> Timer:
        self.ms, self.held, self.timed_out, self._ticket = None, False, False, None
        # only where no other thread runs, which could deadlock with the hold (docs/design.md)
        self._holding = self._hold and _alone()
        try:
            if self._holding:
                # no garbage collection while held, and the watchdog started first: see docs/design.md
                self._collecting = gc.isenabled()
                gc.disable()
                self._watchdog = threading.Timer(HOLD_TIMEOUT, self._let_go)
                self._watchdog.name, self._watchdog.daemon = _WATCHDOG, True
                self._watchdog.start()
                self._ticket = _the_latch().hold(self.stream)
            self._start = self.stream.record(options=self._options)
        except BaseException:
            if self._holding:
                self._unhold()
            raise
        return self

    def _let_go(self) -> None:
        ticket = self._ticket
        if ticket is not None:
            self.timed_out = _the_latch().release(ticket)

    def _unhold(self) -> None:
        """Let the stream go (``held``: whether the hold lasted until now), stop the watchdog, collect again."""
        if self._ticket is not None:
            self.held = _the_latch().release(self._ticket)
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._collecting:
            gc.enable()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        end = self.stream.record(options=self._options)
        if self._holding:
            self._unhold()
        if exc_type is None:
            end.sync()
            self.ms = end - self._start

    def __repr__(self) -> str:
        return f"Timer(ms={self.ms}, held={self.held})"


#: the name of a held timer's watchdog thread
_WATCHDOG = "cudnn_py-hold-watchdog"


def _alone() -> bool:
    """Whether this is the process's only thread (earlier timers' cancelled watchdogs, still ending, aside)."""
    return threading.active_count() == 1 or all(
        t is threading.current_thread() or t.name == _WATCHDOG for t in threading.enumerate())


def held_ms(stream: StreamLike, queue: Callable[[], Any], hold: bool = True) -> tuple[float | None, float, bool]:
    """(device ms of the work ``queue()`` queues on ``stream``, the host's ms to queue it, whether to hold the next
    sample): timed held while ``hold``; a sample whose hold timed out (the work synchronises inside) is taken again
    unheld, as are the next."""
    with timer(stream, hold=hold) as t:
        start = time.perf_counter()
        queue()
        host = (time.perf_counter() - start) * 1e3
    return held_ms(stream, queue, False) if t.timed_out else (t.ms, host, hold)


_T = TypeVar("_T")

#: where the fastest of several timed alternatives is host-bound, those within this fraction of its GPU time count as
#: tied and :func:`fastest_first` puts first the one costing the host least (a loop of them runs at the host's pace)
TIE = 0.05
#: the resolution CUDA gives for the time between two events (``cudaEventElapsedTime``: about 0.5 us), in ms
EVENT_RESOLUTION_MS = 0.0005


def fastest_first(timed: Sequence[tuple[_T, float, float]], resolution: float = 0.0) -> list[tuple[_T, float]]:
    """[(item, GPU ms)] of [(item, GPU ms, host ms)] by GPU time (NaN last), a host-bound tie broken: within
    :data:`TIE` of the fastest GPU time, or ``resolution`` ms of it (what one sample cannot tell apart)."""
    timed = sorted(timed, key=lambda r: r[1] if not math.isnan(r[1]) else math.inf)
    first = timed[0]
    if first[2] > first[1]:
        bound = max(first[1] * (1 + TIE), first[1] + resolution)
        first = min((r for r in timed if r[1] <= bound), key=lambda r: r[2])
    return [(p, ms) for p, ms, _ in [first] + [r for r in timed if r is not first]]


def timer(stream: StreamLike = None, *, hold: bool = False) -> Timer:
    """Time the device work queued on ``stream`` (``None``: the default stream) inside ``with cdp.timer(s) as t:``,
    then read ``t.ms``.

    :param hold: hold ``stream`` until the block has queued its work, so ``ms`` is the GPU's time even where the host
        queues slower than the GPU runs (only while this is the process's only thread; the garbage collector is off
        meanwhile). A block that waits for the stream itself is let go after :data:`HOLD_TIMEOUT` seconds; ``held``
        then reads False, as where the driver cannot hold streams.
    :raises NoDeviceError: where no GPU can be used.
    """
    return Timer(stream, hold)
