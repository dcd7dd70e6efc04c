"""Exceptions: everything cudnn_py raises on purpose derives from :class:`CudnnPyError` (docs/design.md, "Errors"):
a failed cuDNN call the :class:`CudnnError` subclass of its status family (1xxx not initialised, 2xxx bad parameter,
3xxx not supported, 4xxx internal, 5xxx execution failed), a failed CUDA driver call a :class:`CudaError`.
"""
from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "CudnnPyError", "CudnnError", "CudnnNotInitializedError", "CudnnBadParamError", "CudnnNotSupportedError",
    "CudnnInternalError", "CudnnExecutionFailedError", "error_class", "CudaError", "CudaOutOfMemoryError",
    "NoDeviceError", "cuda_error", "cuda_error_from", "check_cuda", "FunctionNotAvailableError", "ClosedError",
    "WorkspaceLimitError", "LibraryNotFoundError", "CArgumentError", "InvalidValueError", "InvalidTypeError",
    "InvalidStateError",
]


class CudnnPyError(Exception):
    """The root of every exception cudnn_py raises itself: ``except cudnn_py.CudnnPyError`` catches them all."""


class InvalidValueError(CudnnPyError, ValueError):
    """An argument's value refused before cuDNN is called, naming the parameter (a ``ValueError`` too)."""


class InvalidTypeError(CudnnPyError, TypeError):
    """An argument's type refused before cuDNN is called, naming the parameter (a ``TypeError`` too)."""


class InvalidStateError(CudnnPyError, RuntimeError):
    """A call the object's state does not allow yet or any more (a finalized descriptor set again, a built graph
    changed, a backward step out of order); the message says what to call first. A ``RuntimeError`` too."""


class CArgumentError(CudnnPyError, TypeError, ValueError):
    """An argument a C function's parameter cannot take (wrong type, out of the C type's range, an array shorter than
    its count, NULL where cuDNN dereferences it), naming the function and the parameter."""


def _code_text(code: object) -> str:
    """A status or result code as its int's text, else ``repr`` ("unknown" for None): a constructor never raises."""
    try:
        return str(int(code))  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return "unknown" if code is None else repr(code)


class CudnnError(CudnnPyError, RuntimeError):
    """A cuDNN call returned a status other than ``CUDNN_STATUS_SUCCESS``: ``function`` (its name), ``status`` (a
    ``cudnnStatus_t`` member, or the int no member names) and ``reason`` (cuDNN's last-error text)."""

    def __init__(self, function: str, status: int | enum.IntEnum, reason: str = ""):
        self.function = function
        self.status = status
        self.reason = reason
        name = getattr(status, "name", "CUDNN_STATUS_UNKNOWN")
        text = f"{function} failed: {name} ({_code_text(status)})"
        super().__init__(f"{text}: {reason}" if reason else text)

    def __reduce__(self) -> tuple[Any, ...]:
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


_FAMILIES = {1000: CudnnNotInitializedError, 2000: CudnnBadParamError, 3000: CudnnNotSupportedError,
             4000: CudnnInternalError, 5000: CudnnExecutionFailedError}


def error_class(status: int) -> type[CudnnError]:
    """The :class:`CudnnError` subclass to raise for a ``cudnnStatus_t`` value, by its thousands family."""
    try:
        family = int(status) // 1000 * 1000
    except (TypeError, ValueError, OverflowError):
        return CudnnError
    return _FAMILIES.get(family, CudnnError)


# --- CUDA -------------------------------------------------------------------------------------------

class CudaError(CudnnPyError, RuntimeError):
    """A CUDA driver call failed, or a CUDA device could not be used: ``function`` (the driver call or what was
    attempted), ``code`` (the ``CUresult`` as an int; 0 when the failure was no driver result, e.g. a missing driver
    library), ``name`` (``CUDA_ERROR_...``) and ``text`` (the driver's description)."""

    def __init__(self, function: str, code: int = 0, name: str = "", text: str = ""):
        self.function = function
        try:
            self.code = int(code)
        except (TypeError, ValueError, OverflowError):  # None (unknown) or no code: 0, "not a driver result"
            self.code = 0
        self.name = name
        self.text = text
        super().__init__(self._message())

    def _message(self) -> str:
        head = f"{self.function} failed: {self.name or 'CUresult'} ({self.code})" if self.code or self.name \
            else f"{self.function} failed"
        return f"{head}: {self.text}" if self.text else head

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.function, self.code, self.name, self.text)


class CudaOutOfMemoryError(CudaError, MemoryError):
    """``CUDA_ERROR_OUT_OF_MEMORY``: the device has no room for the allocation."""


class NoDeviceError(CudaError):
    """No usable CUDA GPU: no driver, a driver that does not start, no GPU visible, or no such device ordinal
    (``function``: what was attempted, ``text``: why). What needs no GPU keeps working without one."""

    def _message(self) -> str:
        why = f"{self.text} ({self.name})" if self.name else self.text
        return f"{self.function}: {why}" if why else self.function


#: CUresults meaning "no device to use here": CUDA_ERROR_NOT_INITIALIZED, _NO_DEVICE, _INVALID_DEVICE,
#: _SYSTEM_DRIVER_MISMATCH, _COMPAT_NOT_SUPPORTED_ON_DEVICE
_NO_DEVICE_CODES = frozenset({3, 100, 101, 803, 804})
_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY


def cuda_error(function: str, code: int, name: str = "", text: str = "") -> CudaError:
    """The :class:`CudaError` (subclass by ``code``) for driver call ``function`` failing with ``CUresult`` ``code``,
    not raised; an empty ``name`` or ``text`` is looked up from the driver."""
    code = int(code)
    if not name or not text:
        looked_name, looked_text = _describe(code)
        name, text = name or looked_name, text or looked_text
    cls = CudaOutOfMemoryError if code == _OUT_OF_MEMORY else NoDeviceError if code in _NO_DEVICE_CODES else CudaError
    return cls(function, code, name, text)


def check_cuda(result: Any, function: str) -> Any:
    """The values after the status of a ``cuda.bindings.driver`` call's ``result`` (None, one value, or a tuple); a
    failing status raises :func:`cuda_error`'s exception, naming ``function``."""
    status, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(status):
        raise cuda_error(function, int(status), getattr(status, "name", ""))
    return None if not values else values[0] if len(values) == 1 else values


def _describe(code: int) -> tuple[str, str]:
    """(CUDA_ERROR_... name, driver text) for a CUresult code; ('', '') when the driver cannot say."""
    try:
        from cuda.bindings import driver
        err = driver.CUresult(code)
    except Exception:  # noqa: BLE001 - no cuda-bindings, or a code this binding does not know
        return "", ""
    try:
        _, text = driver.cuGetErrorString(err)  # needs libcuda; the name does not
    except Exception:  # noqa: BLE001 - no driver library
        text = ""
    text = text.decode() if isinstance(text, bytes) else (text or "")
    return err.name, text


# --- the Python layer's own ---------------------------------------------------------------------------

class FunctionNotAvailableError(CudnnPyError, NotImplementedError):
    """A function the headers declare is missing from the loaded library (or was removed from cuDNN)."""


class ClosedError(CudnnPyError, RuntimeError):
    """A handle, descriptor or plan was used after ``close()``."""


class WorkspaceLimitError(CudnnPyError, MemoryError):
    """A call needs more workspace than the workspace's cap allows."""


class LibraryNotFoundError(CudnnPyError, OSError):
    """libcudnn could not be found or loaded; the message lists every place tried."""


def cuda_error_from(exc: BaseException, function: str, detail: str = "") -> CudaError:
    """The :class:`CudaError` (subclass by the ``CUDA_ERROR_...`` name its message begins with) for ``exc``, which
    cuda.core raised in ``function``; ``detail`` (e.g. the size asked for) goes before cuda.core's message."""
    if isinstance(exc, CudaError):
        return exc
    text = str(exc)
    name = text.split(":", 1)[0].strip() if text.startswith("CUDA_ERROR_") else ""
    code = 0
    if name:
        try:
            from cuda.bindings import driver
            code = int(getattr(driver.CUresult, name))
        except Exception:  # noqa: BLE001 - a name this binding does not know
            code = 2 if name == "CUDA_ERROR_OUT_OF_MEMORY" else 0
        text = text.split(":", 1)[1].strip() if ":" in text else ""
    if detail:
        text = f"{detail}: {text}" if text else detail
    return cuda_error(function, code, name, text or type(exc).__name__) if code else CudaError(function, 0, name, text)
