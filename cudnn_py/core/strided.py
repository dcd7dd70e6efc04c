"""What lays out a strided array (shape, element strides, extent in memory, dtype), checked in pure Python for the
device arrays and the descriptors."""
from __future__ import annotations

import functools
import math
from collections.abc import Collection, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from cudnn_py.core.caches import shared
from cudnn_py.core.dtypes import SUPPORTED_DTYPES, SUPPORTED_NAMES, as_numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["c_strides", "is_c_contiguous", "non_overlapping", "check_layout", "memory_order", "preserved_strides",
           "normalize_shape", "check_extent", "extent", "sharing", "shares_elements", "array_dtype", "MAX_BYTES"]


@functools.lru_cache(maxsize=4096)
def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Packed (C-order) element strides of ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def is_c_contiguous(shape, strides) -> bool:
    """Whether element ``strides`` lay ``shape`` out packed in row-major order (unit dims' strides ignored)."""
    if 0 in shape:
        return True
    acc = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != acc:
            return False
        acc *= n
    return True


def normalize_shape(shape: Any, what: str = "shape") -> tuple[int, ...]:
    """A shape (an int or a sequence of ints) as a tuple of non-negative ints."""
    if type(shape) is tuple:  # fast path: a tuple of non-negative Python ints
        for n in shape:
            if type(n) is not int or n < 0:
                break
        else:
            return shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    items = None
    if not isinstance(shape, (str, bytes, bytearray)):  # a string is not read character by character
        try:
            items = tuple(shape)
        except TypeError:
            pass
    if items is None or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in items):
        raise InvalidTypeError(f"{what} must be an int or a sequence of ints, got {shape!r}")
    out = tuple(int(n) for n in items)
    if any(n < 0 for n in out):
        raise InvalidValueError(f"{what} must not have negative dimensions, got {out}")
    return out


_SUPPORTED = frozenset(SUPPORTED_DTYPES)
#: the largest byte count (and byte offset) an array may span: what a signed 64-bit size can hold
MAX_BYTES = 2 ** 63 - 1


def check_extent(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype, what: str) -> None:
    """Refuse an array whose bytes, or addressed bytes from ``ptr`` (NULL only if empty), do not fit in 64 bits."""
    item = dtype.itemsize
    size = math.prod(shape)
    if size * item > MAX_BYTES:
        raise InvalidValueError(f"{what} of shape {shape} and dtype {dtype} would hold {size * item} "
                                f"bytes; at most 2**63 - 1 can be addressed")
    if size == 0:
        return
    if ptr == 0:
        raise InvalidValueError(f"{what}: the data pointer is NULL for a non-empty array of shape {shape}")
    lo, hi = extent(shape, strides)
    lo, hi = lo * item, (hi + 1) * item
    if ptr + lo < 0 or ptr + hi > 2 ** 64 or hi - lo > MAX_BYTES:
        raise InvalidValueError(f"{what}: shape {shape} with strides {strides} (elements) from address {ptr:#x} "
                                f"addresses bytes outside the 64-bit address space")


def extent(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """The element offsets of the lowest and the highest element of a non-empty array, for any strides."""
    lo = hi = 0
    for n, s in zip(shape, strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi


def sharing(arrays: Sequence[tuple], outputs: Collection[int]) -> Iterator[tuple[int, int]]:
    """(output, other) of each pair of ``arrays`` (address, shape, element strides, itemsize) that reach a common
    byte (:func:`shares_elements`): every output (an index into ``arrays``) against every input and later output."""
    spans = [(p + lo * item, p + (hi + 1) * item) if 0 not in shape else (p, p)
             for p, shape, strides, item in arrays for lo, hi in [extent(shape, strides)]]
    for o in sorted(outputs):
        for i, a in enumerate(arrays):
            if (i != o and not (i in outputs and i < o) and spans[o][0] < spans[i][1] and spans[i][0] < spans[o][1]
                    and shares_elements(arrays[o], a)):
                yield o, i


def shares_elements(a: tuple, b: tuple) -> bool:
    """Whether two strided arrays ``(address, shape, element strides, itemsize)`` reach a common byte (interleaved
    views of one buffer reach none): NumPy's exact solver on byte views of the addresses (never read); too hard: yes."""
    base = min(ptr + extent(shape, strides)[0] * item for ptr, shape, strides, item in (a, b)) - 64
    x, y = (np.asarray(SimpleNamespace(__array_interface__={
        "data": (ptr - base, True), "shape": (*shape, item), "strides": (*(s * item for s in strides), 1),
        "typestr": "|u1", "version": 3})) for ptr, shape, strides, item in (a, b))
    try:
        return bool(np.shares_memory(x, y, max_work=1 << 20))  # type: ignore[arg-type]  # stubs: 0 or -1 only
    except np.exceptions.TooHardError:
        return True


#: the spellings :func:`array_dtype` has resolved (np.float32, "float16", ...)
_SPELLINGS = shared("strided.spellings", maxsize=256)


def array_dtype(dtype: Any) -> np.dtype:
    """``dtype`` (a NumPy dtype, type or name, the short names too) as a NumPy dtype cuDNN supports."""
    if isinstance(dtype, np.dtype) and dtype in _SUPPORTED:  # an np.dtype already
        return dtype
    try:
        return _SPELLINGS[dtype]
    except (KeyError, TypeError):
        pass
    if dtype is None:  # np.dtype(None) is float64: not what a caller who passed nothing means
        raise InvalidTypeError(f"dtype None is not a dtype; expected one of: {SUPPORTED_NAMES}")
    try:
        d = as_numpy_dtype(dtype)
    except TypeError as e:
        raise InvalidTypeError(f"{dtype!r} is not a dtype") from e
    if d not in _SUPPORTED:
        raise InvalidTypeError(f"dtype {d} is not supported by cuDNN; expected one of: {SUPPORTED_NAMES}")
    if isinstance(dtype, (str, type)):
        _SPELLINGS[dtype] = d
    return d


def memory_order(shape: Sequence[int], strides: Sequence[int]) -> list[int]:
    """The axes from outermost to innermost in memory (decreasing stride; unit axes first)."""
    return sorted(range(len(shape)), key=lambda i: (shape[i] > 1, -strides[i] if shape[i] > 1 else 0, i))


def non_overlapping(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether no two indices of ``shape`` reach the same element through non-negative ``strides``."""
    reach = 0
    for s, n in sorted((s, n) for n, s in zip(shape, strides) if n > 1):
        if s <= reach:
            return False
        reach += (n - 1) * s
    return True


def check_layout(shape: Sequence[int], strides: Sequence[int], name: str) -> None:
    """Refuse non-negative ``strides`` (elements) that reach one element twice (torch's ``expand`` makes them)."""
    if min(strides, default=0) >= 0 and not non_overlapping(shape, strides):
        raise InvalidValueError(f"{name} strides {tuple(strides)} make elements of shape {tuple(shape)} overlap (a "
                                f"broadcast view?); cuDNN needs a layout: pass a packed copy (torch: .contiguous())")


def preserved_strides(shape: Sequence[int], strides: Sequence[int],
                      new_shape: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """Strides of a new packed array of ``new_shape`` (default ``shape``, same rank) in the memory order of ``shape``
    and ``strides``: torch's ``preserve_format`` for outputs. None (C order) where that order is C order, or where
    the array broadcasts or runs backwards along an axis (a stride <= 0)."""
    new = tuple(shape if new_shape is None else new_shape)
    if any(s <= 0 for n, s in zip(shape, strides) if n > 1):
        return None
    out, acc = [0] * len(new), 1
    for i in reversed(memory_order(shape, strides)):
        out[i] = acc
        acc *= max(new[i], 1)
    return None if is_c_contiguous(new, out) else tuple(out)
