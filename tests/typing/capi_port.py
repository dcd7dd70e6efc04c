"""A C program ported line by line through the C layer's star import (the README's idiom): mypy must see every C
name, so this script has no type error.

tests/test_typing.py runs mypy on it (it is never executed, so it needs no GPU).
"""
from __future__ import annotations

from ctypes import byref, c_int

from cudnn_py.capi import *


def port() -> int:
    handle = cudnnHandle_t()
    cudnnCreate(byref(handle))
    x = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(x))
    cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 8, 8)
    mode: cudnnActivationMode_t = CUDNN_ACTIVATION_RELU
    status: cudnnStatus_t = CUDNN_STATUS_SUCCESS
    pref = CUDNN_CONVOLUTION_FWD_PREFER_FASTEST  # a removed enum's member: importable, so a port reaches its error
    n = c_int()
    cudnnGetConvolutionForwardAlgorithmMaxCount(handle, byref(n))
    cudnnDestroyTensorDescriptor(x)
    cudnnDestroy(handle)
    version: int = cudnnGetVersion()
    return int(mode) + int(status) + int(pref) + n.value + CUDNN_VERSION + version
