"""DLPack export: a DLPack 0.8 ``"dltensor"`` capsule for a strided view of device memory, built with ctypes
(:meth:`cudnn_py.DeviceArray.__dlpack__` hands it to ``torch.from_dlpack``, CuPy, JAX), and DLPack's device codes."""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

__all__ = ["capsule", "KDL_CPU", "KDL_CUDA", "KDL_CUDA_HOST", "KDL_CUDA_MANAGED"]

#: DLPack device types: host memory, device memory, pinned host memory, managed memory
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DLDeleter)]

# Exported tensors stay alive (struct, shape/strides storage, owner) until their deleter runs.
_EXPORTS: dict[int, tuple] = {}
_CAPSULE_NAME = b"dltensor"
_DL_CODES = {"bfloat16": 4, "float8_e4m3fn": 10, "float8_e5m2": 12, "float8_e8m0fnu": 14}
_DL_KIND = {"i": 0, "u": 1, "f": 2, "b": 6}


@_DLDeleter
def _dl_deleter(managed):
    _EXPORTS.pop(ctypes.addressof(managed.contents), None)


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype, _capsule_is_valid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype, _capsule_get.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]


_err_fetch = ctypes.pythonapi.PyErr_Fetch
_err_fetch.restype = None  # argtypes stay unset: checking arguments would trip on the pending error
_err_restore = ctypes.pythonapi.PyErr_Restore
_err_restore.restype, _err_restore.argtypes = None, [ctypes.c_void_p] * 3
_SAVED = (ctypes.c_void_p * 3)()
_SAVED_REFS = tuple(ctypes.byref(_SAVED, i * ctypes.sizeof(ctypes.c_void_p)) for i in range(3))


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A capsule nobody consumed still owns its tensor; a consumed one was renamed "used_dltensor".
    # A consumer may drop the capsule while raising: no Python code (this callback included) can run with
    # that exception pending, so it is set aside while the tensor is freed. Restoring it from ctypes makes
    # ctypes print it as unraisable, and the consumer then fails with a SystemError instead; handing it back
    # intact would take a destructor written in C.
    _err_fetch(*_SAVED_REFS)
    try:
        if _capsule_is_valid(capsule, _CAPSULE_NAME):
            _EXPORTS.pop(_capsule_get(capsule, _CAPSULE_NAME), None)
    finally:
        _err_restore(*_SAVED)


def capsule(ptr: int, shape: tuple, strides: tuple, dtype: np.dtype,
            device: tuple[int, int], owner: Any) -> Any:
    """A DLPack 0.8 capsule for a strided view of memory at ``ptr``; ``owner`` is kept alive until it is released."""
    code = _DL_CODES.get(dtype.name, _DL_KIND.get(dtype.kind))
    if code is None:
        raise BufferError(f"dtype {dtype} cannot be exported through DLPack")
    ndim = len(shape)
    dims = (ctypes.c_int64 * max(2 * ndim, 1))(*shape, *strides)
    int64_p = ctypes.POINTER(ctypes.c_int64)
    managed = _DLManagedTensor(_DLTensor(
        data=ptr or None, device=_DLDevice(*device), ndim=ndim, dtype=_DLDataType(code, dtype.itemsize * 8, 1),
        shape=ctypes.cast(dims, int64_p), strides=ctypes.cast(ctypes.byref(dims, 8 * ndim), int64_p)),
        deleter=_dl_deleter)
    address = ctypes.addressof(managed)
    _EXPORTS[address] = (managed, dims, owner)
    try:
        return _capsule_new(address, _CAPSULE_NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))
    except BaseException:
        _EXPORTS.pop(address, None)
        raise
