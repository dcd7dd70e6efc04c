"""Argument checks shared by the Pythonic layer: each takes a value and the parameter's name, returns the value in the
form C takes, and raises :class:`~cudnn_py.errors.InvalidTypeError` / :class:`~cudnn_py.errors.InvalidValueError`
naming the parameter (never a builtin error from inside); ranges are the C types'.
"""
from __future__ import annotations

import math
import sys
from enum import IntEnum
from typing import TypeVar

import numpy as np

from cudnn_py import capi
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["INT32_MAX", "INT64_MAX", "DIM_MAX", "is_int", "int_arg", "float_arg", "bool_arg", "scaling",
           "element_value", "enum_member", "nan_flag", "int_tuple", "ints", "int_or_ints",
           "spatial_ndim", "dims", "handle_ptr"]

DIM_MAX = 8  # CUDNN_DIM_MAX
#: the range of the C ``int`` every legacy size, stride, padding and count is passed as
INT32_MAX = 2 ** 31 - 1
INT64_MAX = 2 ** 63 - 1
_MAX_LEN = 64  # longer sequences are refused before they are converted (no rank is near it)


def is_int(value) -> bool:
    """Whether ``value`` is an int (Python's or NumPy's), a bool not counting as one."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def int_arg(value, what: str, minimum: int | None = None, maximum: int = INT32_MAX) -> int:
    """``value`` as a Python int in ``[minimum, maximum]``; a float, bool or string is refused."""
    if not is_int(value):
        raise InvalidTypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")
    v = int(value)
    if minimum is not None and v < minimum:
        raise InvalidValueError(f"{what} must be >= {minimum}, got {v}")
    if v > maximum:
        raise InvalidValueError(f"{what} must be <= {maximum} (the C type's range), got {v}")
    return v


def float_arg(value, what: str, minimum: float | None = None, maximum: float | None = None) -> float:
    """``value`` as a finite Python float in ``[minimum, maximum]``; a string, None or a bool is refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidTypeError(f"{what} must be a real number, got {value!r} ({type(value).__name__})")
    try:
        v = float(value)
    except OverflowError:
        raise InvalidValueError(f"{what} = {value} does not fit in a double") from None
    if not math.isfinite(v):
        raise InvalidValueError(f"{what} must be finite, got {v}")
    low = minimum is not None and v < minimum
    if low or maximum is not None and v > maximum:
        both = f" (in [{minimum:g}, {maximum:g}])" if minimum is not None and maximum is not None else ""
        bound = f"{'>=' if low else '<='} {minimum if low else maximum:g}"
        raise InvalidValueError(f"{what} must be {bound}{both}, got {v}")
    return v


_DOUBLE_MAX = sys.float_info.max


def scaling(**factors) -> tuple[float, ...]:
    """A call's host blend scalars as finite floats, in order: ``alpha, beta = scaling(alpha=alpha, beta=beta)``
    (NaN or infinity would blend NaN into every output element, ``0 * inf``)."""
    return tuple([v if type(v) is float and -_DOUBLE_MAX <= v <= _DOUBLE_MAX  # a finite float (NaN fails the test)
                  else float_arg(v, f"{what} (a scaling factor)") for what, v in factors.items()])


def element_value(value, dtype, what: str) -> np.ndarray:
    """``value`` as a one-element array of ``dtype`` (what a fill writes to every element), refused where the
    conversion would change it: out of an integer type's range, not whole for an integer type, beyond a float
    type's range, or a NaN/infinity the type cannot hold (float8_e4m3fn has no infinity)."""
    dtype = np.dtype(dtype)
    if isinstance(value, np.ndarray) and value.shape in ((), (1,)):
        value = value.reshape(()).item()
    if dtype == np.bool_:
        if isinstance(value, (bool, np.bool_)) or (is_int(value) and value in (0, 1)):
            return np.array([bool(value)])
        raise InvalidValueError(f"{what} {value!r} does not fit a bool tensor: pass True/False or 0/1")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidTypeError(f"{what} must be a real number, got {value!r} ({type(value).__name__})")
    if dtype.kind in "iu":
        if not is_int(value):
            v = float(value)
            if not v.is_integer():
                raise InvalidValueError(f"{what} {v} is not a whole number; a {dtype} tensor holds integers")
            value = int(v)
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise InvalidValueError(f"{what} {int(value)} is out of range for {dtype}: [{info.min}, {info.max}]")
        return np.array([int(value)], dtype)
    try:
        v = float(value)
    except OverflowError:
        raise InvalidValueError(f"{what} {value} does not fit in a double, let alone {dtype}") from None
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.array([v]).astype(dtype)
    back = float(out.astype(np.float64)[0])
    if math.isnan(v):
        if not math.isnan(back):
            raise InvalidValueError(f"{what} NaN: {dtype} has no NaN")
    elif math.isinf(v):
        if back != v:
            raise InvalidValueError(f"{what} {v}: {dtype} has no {'-' * (v < 0)}infinity")
    elif not math.isfinite(back):
        raise InvalidValueError(f"{what} {v} is out of range for {dtype} (it would be stored as {back})")
    return out


def bool_arg(value, what: str) -> bool:
    """A flag: ``True``/``False`` (NumPy's too) or 0/1; anything else (``"no"`` would be true) is refused."""
    if isinstance(value, (bool, np.bool_)) or (is_int(value) and value in (0, 1)):
        return bool(value)
    raise InvalidTypeError(f"{what} must be True or False, got {value!r}")


_E = TypeVar("_E", bound=IntEnum)


def enum_member(cls: type[_E], value, prefix: str, what: str, aliases: dict | None = None) -> _E:
    """An enum member from a member, its int value, its full name or its short name (``prefix`` dropped, any
    case, or an ``aliases`` key); the error names ``what`` and the choices."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if aliases and key in aliases:
            return cls[aliases[key]]
        for name in (value.strip(), prefix + key.upper()):
            if name in cls.__members__:
                return cls[name]
    elif is_int(value):
        try:
            return cls(int(value))
        except ValueError:
            pass
    else:
        raise InvalidTypeError(f"{what} must be a {cls.__name__} member, its value or its name, got "
                               f"{type(value).__name__}")
    names = sorted({m.name[len(prefix):].lower() for m in cls if m.name.startswith(prefix)} | set(aliases or ()))
    raise InvalidValueError(f"unknown {what} {value!r}: {what} must be one of {names} (or a {cls.__name__} member)")


def nan_flag(value) -> bool:
    """``nan_propagation`` as a bool: True/False (or 0/1), a ``cudnnNanPropagation_t`` member or its name."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return bool(enum_member(capi.cudnnNanPropagation_t, value, "CUDNN_", "nan_propagation",
                      {"propagate": "CUDNN_PROPAGATE_NAN", "not_propagate": "CUDNN_NOT_PROPAGATE_NAN"}))


def int_tuple(value, what: str, expected: str = "a sequence of ints", minimum: int | None = None,
               maximum: int = INT32_MAX) -> tuple[int, ...]:
    """A sequence of ints, each in ``[minimum, maximum]``, as a tuple (a string, a float entry, a set or dict,
    whose order is not the dimensions', are refused)."""
    if isinstance(value, (str, bytes, dict, set, frozenset)) or not hasattr(value, "__iter__"):
        raise InvalidTypeError(f"{what} must be {expected}, got {value!r}")
    if hasattr(value, "__len__") and len(value) > _MAX_LEN:
        raise InvalidValueError(f"{what} has {len(value)} entries; cuDNN takes at most {DIM_MAX}")
    try:
        out = tuple(value)
    except TypeError:
        raise InvalidTypeError(f"{what} must be {expected}, got {value!r}") from None
    if not all(is_int(v) for v in out):
        raise InvalidTypeError(f"{what} must contain only ints, got {value!r}")
    out = tuple(int(v) for v in out)
    if minimum is not None and any(v < minimum for v in out):
        raise InvalidValueError(f"{what} must be >= {minimum} in every dimension, got {out}")
    if any(v > maximum for v in out):
        raise InvalidValueError(f"{what} must be <= {maximum} (the C type's range) in every dimension, got {out}")
    return out


def ints(value, n: int | None, what: str, minimum: int, maximum: int = INT32_MAX) -> tuple[int, ...]:
    """An int or a sequence of ints as an n-tuple (n=None: the sequence's length), each in ``[minimum, maximum]``."""
    if is_int(value):
        if n is None:
            raise InvalidValueError(f"{what}: cannot tell the number of dimensions from a single int")
        out = (int_arg(value, what, minimum, maximum),) * n
    else:
        out = int_tuple(value, what, "an int or a sequence of ints", minimum, maximum)
        if n is not None and len(out) != n:
            raise InvalidValueError(f"{what} has {len(out)} entries; expected {n} (one per dimension it applies to)")
    return out


def int_or_ints(value, what: str, minimum: int) -> int | tuple[int, ...]:
    """An int, or a sequence of ints as a tuple of any length (checked later against the data's rank)."""
    if is_int(value):
        return int_arg(value, what, minimum)
    return int_tuple(value, what, "an int or a sequence of ints", minimum)


def shape_arg(shape, what: str) -> tuple[int, ...]:
    """A shape of positive ints below 2**63 (floats and bools refused)."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise InvalidTypeError(f"{what} must be a sequence of ints, got {shape!r}") from None
    for s in dims:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise InvalidTypeError(f"{what} must hold ints, got {s!r} in {dims}")
        if not 0 < s < 2 ** 63:
            raise InvalidValueError(f"{what} sizes must be positive and below 2**63, got {dims}")
    return tuple(int(s) for s in dims)


def spatial_ndim(ndim, values) -> int:
    """``ndim`` if given, else the length of the first sequence in ``values`` (2 when all are ints); checked."""
    if ndim is None:
        ndim = next((len(v) for v in values
                     if v is not None and not is_int(v) and not isinstance(v, (str, bytes)) and hasattr(v, "__len__")),
                    2)
    if not is_int(ndim) or not 1 <= ndim <= DIM_MAX - 2:
        raise InvalidValueError(f"ndim (spatial dimensions) must be an int from 1 to {DIM_MAX - 2}, got {ndim!r}")
    return int(ndim)


def dims(shape, what: str, lo: int, hi: int = DIM_MAX) -> tuple[int, ...]:
    out = int_tuple(shape, what)
    if not lo <= len(out) <= hi:
        raise InvalidValueError(f"{what} {out} has {len(out)} dimensions; cuDNN accepts {lo} to {hi} "
                         f"(pad with 1s, e.g. (1, n, 1, 1) for a vector)")
    if any(v <= 0 for v in out):
        raise InvalidValueError(f"{what} {out} has a zero or negative dimension; every dimension must be >= 1")
    return out


def handle_ptr(handle):
    """``handle.ptr`` of a :class:`cudnn_py.Handle` (or a stand-in with a ``ptr`` property); arrays refused."""
    ptr = handle.ptr if hasattr(type(handle), "ptr") else None
    if not isinstance(ptr, capi.cudnnHandle_t):  # an int or another object's pointer would reach C as a handle
        raise InvalidTypeError(f"handle must be a cudnn_py.Handle, got {type(handle).__name__}")
    return ptr
