"""A failed cuDNN call as an exception: the class by status family, the status as its enum member, and the
reason: cuDNN's own last-error text, and why the driver sees no GPU where that is the cause."""
from __future__ import annotations

import ctypes

from cudnn_py.clib import loader as _loader
from cudnn_py.errors import CudnnError, CudnnNotInitializedError, error_class

__all__ = ["status_error", "status_member", "last_error_text"]

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


def status_member(status: int) -> int:
    """The ``cudnnStatus_t`` member of ``status``; the int itself where none names it (a newer cuDNN's status)."""
    from cudnn_py.capi.graph import cudnnStatus_t
    try:
        return cudnnStatus_t(status)
    except ValueError:
        return status


def status_error(function: str, status: int) -> CudnnError:
    """The exception for a failed call: class by status family, enum member, cuDNN's last-error text."""
    status = status_member(status)
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
