"""Exceptions: one hierarchy for cuDNN statuses, plus the errors the Python layer raises itself.

A failed call raises the subclass of :class:`CudnnError` for its status family
(1xxx not initialised, 2xxx bad parameter, 3xxx not supported, 4xxx internal,
5xxx execution failed), carrying the status, the function name and cuDNN's own
last-error text::

    cudnnSetTensor4dDescriptor failed: CUDNN_STATUS_BAD_PARAM (2000): <cuDNN's reason>
"""
from __future__ import annotations

import enum


class CudnnError(RuntimeError):
    """A cuDNN call returned a status other than ``CUDNN_STATUS_SUCCESS``."""

    def __init__(self, function: str, status: int | enum.IntEnum, reason: str = ""):
        self.function = function
        self.status = status
        self.reason = reason
        name = getattr(status, "name", "CUDNN_STATUS_UNKNOWN")
        text = f"{function} failed: {name} ({int(status)})"
        super().__init__(f"{text}: {reason}" if reason else text)

    def __reduce__(self):
        return type(self), (self.function, self.status, self.reason)


class CudnnNotInitializedError(CudnnError):
    """1xxx: the library could not start (no GPU, no driver, a sub-library missing)."""


class CudnnBadParamError(CudnnError, ValueError):
    """2xxx: an argument was wrong."""


class CudnnNotSupportedError(CudnnError):
    """3xxx: a valid request that this library, GPU or configuration does not support."""


class CudnnInternalError(CudnnError):
    """4xxx: cuDNN failed internally (allocation, a device call, a bad state)."""


class CudnnExecutionFailedError(CudnnError):
    """5xxx: a kernel or a CUDA call failed while executing."""


_FAMILIES = {
    1000: CudnnNotInitializedError,
    2000: CudnnBadParamError,
    3000: CudnnNotSupportedError,
    4000: CudnnInternalError,
    5000: CudnnExecutionFailedError,
}


def error_class(status: int) -> type[CudnnError]:
    """The exception class for a status code, by its thousands family."""
    return _FAMILIES.get(int(status) // 1000 * 1000, CudnnError)


class FunctionNotAvailableError(AttributeError, NotImplementedError):
    """A function the headers declare is missing from the loaded library (or was removed)."""


class ClosedError(RuntimeError):
    """A handle, descriptor or plan was used after ``close()``."""


class WorkspaceLimitError(MemoryError):
    """A call needs more workspace than the workspace's cap allows."""


class LibraryNotFoundError(OSError):
    """libcudnn could not be found or loaded; the message lists every place tried."""
