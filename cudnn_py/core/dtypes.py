"""NumPy dtypes <-> ``cudnnDataType_t`` (NumPy's float, int and bool types, and ml_dtypes' bfloat16, fp8 and fp4
types where installed; cuDNN's vectorised types map back to their storage element type), and the host scalar type
for alpha/beta."""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py.core.caches import shared
from cudnn_py.errors import InvalidTypeError

try:  # bfloat16 / fp8 / fp4 NumPy dtypes; optional
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - depends on the environment
    _ml = None  # type: ignore[assignment]

__all__ = ["cudnn_dtype", "numpy_dtype", "as_numpy_dtype", "scalar_type", "scalar", "SUPPORTED_DTYPES", "ALIASES"]

_DT = capi.cudnnDataType_t

_PAIRS: list[tuple[np.dtype, _DT]] = [(np.dtype(t), _DT.__members__[f"CUDNN_DATA_{m}"]) for t, m in (
    (np.float32, "FLOAT"), (np.float64, "DOUBLE"), (np.float16, "HALF"), (np.int8, "INT8"), (np.uint8, "UINT8"),
    (np.int32, "INT32"), (np.int64, "INT64"), (np.bool_, "BOOLEAN"))]
if _ml is not None:
    _PAIRS += [(np.dtype(getattr(_ml, t)), _DT.__members__[f"CUDNN_DATA_{m}"]) for t, m in (
        ("bfloat16", "BFLOAT16"), ("float8_e4m3fn", "FP8_E4M3"), ("float8_e5m2", "FP8_E5M2"),
        ("float8_e8m0fnu", "FP8_E8M0"), ("float4_e2m1fn", "FP4_E2M1"))
        if hasattr(_ml, t) and f"CUDNN_DATA_{m}" in _DT.__members__]

#: The NumPy dtypes that have a cuDNN data type, in table order (and their names, for messages).
SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(d for d, _ in _PAIRS)
SUPPORTED_NAMES = ", ".join(d.name for d in SUPPORTED_DTYPES)

_TO_CUDNN: dict = {d: c for d, c in _PAIRS}
_TO_NUMPY: dict = {int(c): d for d, c in _PAIRS}
for _vec, _elem in [("CUDNN_DATA_INT8x4", np.int8), ("CUDNN_DATA_INT8x32", np.int8),
                    ("CUDNN_DATA_UINT8x4", np.uint8)]:
    if hasattr(_DT, _vec):
        _TO_NUMPY[int(_DT.__members__[_vec])] = np.dtype(_elem)
#: short names the ML world uses, case-insensitive, beside NumPy's own spellings
ALIASES: dict[str, str] = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
                           "fp8_e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
                           "e5m2": "float8_e5m2"}
# Fast path: the spellings resolved so far (np.float32, "float32", dtype objects, ...).
_LOOKUP = shared("dtypes.spellings", maxsize=256)


def cudnn_dtype(dtype: DTypeLike | int) -> capi.cudnnDataType_t:
    """The ``cudnnDataType_t`` for a NumPy dtype-like (``np.float32``, ``"float16"``, ``ml_dtypes.bfloat16``) or a
    short name of :data:`ALIASES` (``"bf16"``, any case); a member passes through. :class:`TypeError` for a dtype
    cuDNN has no type for, and for ``None`` or a number (NumPy would read them as float64 or a type code)."""
    try:
        return _LOOKUP[dtype]
    except (KeyError, TypeError):
        pass
    if isinstance(dtype, _DT):
        return dtype
    if dtype is None or isinstance(dtype, (bool, int, float, np.bool_, np.number)):
        # np.dtype(None) is float64 and np.dtype(25) a type number: neither is a dtype a caller means
        raise InvalidTypeError(f"{dtype!r} is not a dtype; expected one of: {SUPPORTED_NAMES} (or a cudnnDataType_t)")
    try:
        npd = as_numpy_dtype(dtype)
    except (TypeError, ValueError, SyntaxError, AttributeError, RecursionError) as e:
        raise InvalidTypeError(f"{dtype!r} is not a dtype; expected one of: {SUPPORTED_NAMES}") from e
    result = _TO_CUDNN.get(npd)
    if result is None:
        raise InvalidTypeError(f"dtype {npd} ({dtype!r}) has no cuDNN data type; supported: {SUPPORTED_NAMES}")
    with contextlib.suppress(TypeError):  # an unhashable spelling is not remembered
        _LOOKUP[dtype] = result
    return result


def as_numpy_dtype(dtype) -> np.dtype:
    """``np.dtype(dtype)`` that also takes :data:`ALIASES` (any case) and the ml_dtypes names (``"bfloat16"``)."""
    if isinstance(dtype, str):
        dtype = ALIASES.get(dtype.lower(), dtype)
        if _ml is not None and hasattr(_ml, dtype):  # ml_dtypes types are not NumPy names
            dtype = getattr(_ml, dtype)
    return np.dtype(dtype)


def numpy_dtype(cudnn_dt: int) -> np.dtype:
    """The NumPy dtype for a ``cudnnDataType_t`` (or its int value); :class:`TypeError` if there is none."""
    try:
        return _TO_NUMPY[int(cudnn_dt)]
    except (KeyError, TypeError, ValueError, OverflowError):
        pass
    try:
        name = _DT(int(cudnn_dt)).name
    except (ValueError, TypeError, OverflowError):
        raise InvalidTypeError(f"{cudnn_dt!r} is not a cudnnDataType_t value") from None
    hint = "" if _ml is not None else " (install ml_dtypes for bfloat16/fp8/fp4)"
    raise InvalidTypeError(f"cuDNN data type {name} has no NumPy dtype{hint}")


def scalar_type(cudnn_dt) -> type[ctypes.c_float] | type[ctypes.c_double]:
    """The ctypes type of the host alpha/beta scalars: ``c_double`` for double data, else ``c_float``."""
    return ctypes.c_double if int(cudnn_dt) == _DT.CUDNN_DATA_DOUBLE else ctypes.c_float


def scalar(cudnn_dt, value: float) -> ctypes.c_float | ctypes.c_double:
    """A host scalar (alpha/beta) holding ``value`` for data of this type; pass it as ``ctypes.byref(...)``."""
    return ctypes.c_double(value) if int(cudnn_dt) == _DT.CUDNN_DATA_DOUBLE else ctypes.c_float(value)
