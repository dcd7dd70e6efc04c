"""Lazy ctypes binding for the generated C layer: symbols resolve on first call, statuses become exceptions."""
from __future__ import annotations

import ctypes
import functools

from . import _loader
from .errors import CudnnError, CudnnNotInitializedError, FunctionNotAvailableError, error_class

_LAST_ERROR_SIZE = 4096


def last_error_text() -> str:
    """cuDNN's own description of this thread's most recent error (``cudnnGetLastErrorString``), or ''."""
    try:
        fn = _loader.library().cdll.cudnnGetLastErrorString
    except AttributeError:  # a cuDNN older than 9.0
        return ""
    fn.restype, fn.argtypes = None, (ctypes.c_char_p, ctypes.c_size_t)
    buf = ctypes.create_string_buffer(_LAST_ERROR_SIZE)
    fn(buf, _LAST_ERROR_SIZE)
    return buf.value.decode(errors="replace").strip()


def status_error(function: str, status: int) -> CudnnError:
    """The exception for a failed call: class by status family, enum member, cuDNN's last-error text."""
    from .capi.graph import cudnnStatus_t
    try:
        status = cudnnStatus_t(status)
    except ValueError:
        pass
    cls = error_class(status)
    reason = last_error_text()
    if cls is CudnnNotInitializedError:
        reason = "; ".join(filter(None, (reason, _gpu_hint())))
    return cls(function, status, reason)


def _gpu_hint() -> str:
    """Why the CUDA driver sees no GPU, if it sees none ('' when a GPU is there)."""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
    except ImportError:
        return ""
    except Exception as e:  # cuda.bindings could not load libcuda: no driver on this machine
        return f"no CUDA driver was found ({e})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"no usable CUDA GPU/driver was found (cuInit: {err.name})"
    err, count = driver.cuDeviceGetCount()
    return "" if count else "no CUDA GPU was found (the driver sees 0 devices)"


def _errcheck(status, func, args):
    if status:
        raise status_error(func.__name__, status)
    return status


class CFunction:
    """One C function of cuDNN, bound on first call. Call it with the C arguments."""

    __slots__ = ("__name__", "__qualname__", "__dict__", "prototype", "deprecated", "checked",
                 "_restype", "_argtypes", "_call")

    def __init__(self, name, restype, argtypes, prototype, doc, checked, deprecated):
        self.__name__ = self.__qualname__ = name
        self.prototype = prototype
        self.deprecated = deprecated
        self.checked = checked
        self._restype, self._argtypes = restype, argtypes
        self.__doc__ = "\n\n".join(s for s in (prototype, doc, deprecated and f"Deprecated: {deprecated}") if s)
        self._call = self._first_call

    def __call__(self, *args):
        return self._call(*args)

    def __repr__(self):
        return f"<cuDNN function {self.prototype}>"

    @property
    def available(self) -> bool:
        """Whether the loaded library exports this function."""
        return hasattr(_loader.library().cdll, self.__name__)

    @property
    def raw(self):
        """The bound ctypes function itself (status still checked): one Python frame less, for hot loops."""
        self._bind()
        return self._call

    def _bind(self):
        if self._call != self._first_call:  # already bound (bound methods compare equal, never identical)
            return
        lib = _loader.library()
        try:
            fn = getattr(lib.cdll, self.__name__)
        except AttributeError:
            self._call = self._missing
            return
        fn.restype, fn.argtypes = self._restype, self._argtypes
        if self.checked:
            fn.errcheck = _errcheck
        self._call = fn

    def _first_call(self, *args):
        self._bind()
        return self._call(*args)

    def _missing(self, *args):
        lib = _loader.library()
        raise FunctionNotAvailableError(
            f"{self.__name__} is declared by the cuDNN headers these bindings were generated from, but the "
            f"loaded cuDNN {lib.version_string} ({lib.path}) does not export it; it needs a newer cuDNN")


@functools.cache
def pointer(target):
    """``POINTER(target)`` for a parameter, also taking a plain int address (device arrays, ``labels[]``, ...).

    Typed ctypes objects are still checked: a ``byref(c_float())`` where ``int *`` belongs is refused.
    """
    base = ctypes.POINTER(target)

    def from_param(cls, obj):
        return ctypes.c_void_p(obj) if isinstance(obj, int) else base.from_param(obj)

    return type(base.__name__, (base,), {"from_param": classmethod(from_param)})


def function(name, restype, argtypes, prototype, doc="", checked=True, deprecated=""):
    """Declare a C function (used by the generated modules)."""
    return CFunction(name, restype, argtypes, prototype, doc, checked, deprecated)
