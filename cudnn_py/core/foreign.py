"""Readers of foreign arrays that need no device array (:mod:`cudnn_py.core.memory` re-exports them): the torch
tables, the hot path of every prepared call's key (learnt once the program has imported torch, which cudnn_py never
imports), and :func:`check_cuda_array_interface`, refusing a malformed interface before ``cuda.core`` reads it."""
from __future__ import annotations

import sys

import numpy as np

from cudnn_py.core.dtypes import SUPPORTED_DTYPES
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.strided import c_strides, check_extent, check_layout

__all__ = ["TORCH_TYPES", "TORCH_DTYPES", "learn_torch", "is_torch_tensor", "Signature", "check_cuda_array_interface"]


#: torch's tensor types and its dtype -> NumPy dtype table (:data:`~cudnn_py.core.dtypes.SUPPORTED_DTYPES` by name),
#: filled by :func:`learn_torch` once the program has imported torch (replaced, never mutated, so readers need no
#: lock; read them as ``foreign.TORCH_TYPES``: a name imported from here keeps the empty table)
TORCH_TYPES: frozenset = frozenset()
TORCH_DTYPES: dict = {}


def learn_torch() -> bool:
    """Fill the torch tables once torch is imported (cudnn_py never imports it); whether it is."""
    global TORCH_TYPES, TORCH_DTYPES
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor") or not hasattr(torch, "dtype"):
        return False
    TORCH_DTYPES = {t: d for d in SUPPORTED_DTYPES if isinstance(t := getattr(torch, d.name, None), torch.dtype)}
    parameter = getattr(getattr(torch, "nn", None), "Parameter", torch.Tensor)
    TORCH_TYPES = frozenset({torch.Tensor, parameter})  # after the dtypes: a reader that sees these sees both
    return True


def is_torch_tensor(obj) -> bool:
    """Whether ``obj`` is a ``torch.Tensor`` or ``torch.nn.Parameter`` (no subclass); False until torch is imported."""
    t = type(obj)
    return t in TORCH_TYPES or (not TORCH_TYPES and learn_torch() and t in TORCH_TYPES)


#: what a cached call keys an array argument on: (shape, strides in elements, dtype, device ordinal)
Signature = tuple[tuple[int, ...], tuple[int, ...], np.dtype, int]


def check_cuda_array_interface(obj, name: str) -> None:
    """Refuse a malformed ``__cuda_array_interface__`` before cuda.core reads it: it must be a dict of ``shape``, a
    native ``typestr``, ``data`` (a non-NULL address unless empty, a flag), no ``mask``, and ``strides`` None or
    non-negative, whole elements and not overlapping."""
    try:
        cai = obj.__cuda_array_interface__
    except Exception as e:  # noqa: BLE001 - a producer's property may raise anything
        raise InvalidTypeError(f"{name}: reading __cuda_array_interface__ failed: {e!r}") from e
    if not isinstance(cai, dict):
        raise InvalidTypeError(f"{name}.__cuda_array_interface__ must be a dict, got {type(cai).__name__}")
    shape, typestr, data = cai.get("shape"), cai.get("typestr"), cai.get("data")
    if not isinstance(shape, (tuple, list)) or not all(type(n) is int and n >= 0 for n in shape):
        raise InvalidValueError(f"{name}: __cuda_array_interface__ shape must be a tuple of non-negative ints, got "
                                f"{shape!r}")
    try:
        dtype = np.dtype(typestr) if isinstance(typestr, str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.itemsize == 0 or (dtype.itemsize > 1 and not dtype.isnative):
        raise InvalidTypeError(f"{name}: __cuda_array_interface__ typestr {typestr!r} is not a native-endian array "
                               f"type string (such as '<f4')")
    if (not isinstance(data, tuple) or len(data) != 2 or type(data[0]) is not int or data[0] < 0
            or not isinstance(data[1], bool)):
        raise InvalidValueError(f"{name}: __cuda_array_interface__ data must be (address, read_only), got {data!r}")
    if cai.get("mask") is not None:
        raise InvalidValueError(f"{name}: masked arrays (__cuda_array_interface__ mask) are not supported")
    strides = cai.get("strides")
    if strides is None:
        strides = c_strides(tuple(shape))
    else:
        item = dtype.itemsize
        if (not isinstance(strides, (tuple, list)) or len(strides) != len(shape)
                or not all(type(b) is int for b in strides)):
            raise InvalidValueError(f"{name}: __cuda_array_interface__ strides must be None or one int per "
                                    f"dimension of {tuple(shape)}, got {strides!r}")
        if any(b < 0 or b % item for b in strides):
            raise InvalidValueError(f"{name}: __cuda_array_interface__ strides {tuple(strides)} (bytes) must be "
                                    f"non-negative multiples of the item size {item}")
        strides = tuple(b // item for b in strides)
        check_layout(shape, strides, f"{name}: __cuda_array_interface__ element")
    check_extent(data[0], tuple(shape), tuple(strides), dtype, name)
