"""Statuses become exceptions: class by family, function name, status member, cuDNN's own reason."""
from __future__ import annotations

import ctypes
import pickle
import re
from ctypes import byref

import pytest

import cudnn_py
from cudnn_py import capi, errors
from cudnn_py.clib.binding import function, status_error
from cudnn_py.capi import *  # noqa: F403
from conftest import gpu_missing_reason


@pytest.fixture
def tensor_desc():
    d = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(d))
    yield d
    cudnnDestroyTensorDescriptor(d)


def test_bad_param_message_has_function_status_and_reason(tensor_desc):
    with pytest.raises(errors.CudnnBadParamError) as e:
        cudnnSetTensor4dDescriptor(tensor_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 3, 8, 8)
    err = e.value
    assert err.function == "cudnnSetTensor4dDescriptor"
    assert err.status is capi.cudnnStatus_t.CUDNN_STATUS_BAD_PARAM
    assert err.reason  # cuDNN's own text, from cudnnGetLastErrorString
    assert re.match(r"cudnnSetTensor4dDescriptor failed: CUDNN_STATUS_BAD_PARAM \(2000\): .+", str(err))
    assert isinstance(err, ValueError) and isinstance(err, errors.CudnnError)


def test_not_supported_family():
    d = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(d))
    try:
        dims = (ctypes.c_int * 9)(*([2] * 9))
        with pytest.raises(errors.CudnnError) as e:
            cudnnSetTensorNdDescriptorEx(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 9, dims)
        assert type(e.value) in (errors.CudnnBadParamError, errors.CudnnNotSupportedError)
    finally:
        cudnnDestroyTensorDescriptor(d)


@pytest.mark.parametrize("code, cls", [
    (1001, errors.CudnnNotInitializedError), (2002, errors.CudnnBadParamError),
    (3000, errors.CudnnNotSupportedError), (4001, errors.CudnnInternalError),
    (5000, errors.CudnnExecutionFailedError), (9999, errors.CudnnError)])
def test_every_family_has_its_class(code, cls):
    err = status_error("cudnnSomething", code)
    assert type(err) is cls and err.function == "cudnnSomething" and f"({code})" in str(err)
    assert type(pickle.loads(pickle.dumps(err))) is cls


@pytest.mark.skipif(not gpu_missing_reason(), reason="only without a GPU: cudnnCreate succeeds where there is one")
def test_create_without_gpu_says_so():
    with pytest.raises(errors.CudnnNotInitializedError) as e:
        cudnnCreate(byref(cudnnHandle_t()))
    msg = str(e.value)
    assert msg.startswith("cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED (1001)")
    assert "no CUDA" in msg or "no usable CUDA" in msg


def test_removed_function_names_its_replacement():
    from cudnn_py.capi import cudnnGetConvolutionForwardAlgorithm as removed  # a C port's star import has it too
    with pytest.raises(errors.FunctionNotAvailableError) as e:
        removed(None, None, None, None, None, 0, 0, None)
    assert "removed in cuDNN 8" in str(e.value) and "cudnnGetConvolutionForwardAlgorithm_v7" in str(e.value)
    with pytest.raises(errors.FunctionNotAvailableError, match="cudnnRNNForward"):
        capi.cudnnRNNForwardTraining()
    with pytest.raises(AttributeError):
        capi.cudnnNoSuchFunction  # a name the C API never had


def test_removed_table_names_nothing_the_headers_declare():
    from cudnn_py.removed import REMOVED
    assert not set(REMOVED) & set(capi.FUNCTIONS)


def test_function_missing_from_the_loaded_library_fails_only_when_called():
    fn = function("cudnnFromTheFuture_v99", ctypes.c_int, (), "cudnnStatus_t cudnnFromTheFuture_v99(void)")
    assert not fn.available
    with pytest.raises(errors.FunctionNotAvailableError) as e:
        fn()
    assert "cudnnFromTheFuture_v99" in str(e.value) and library_version() in str(e.value)


def library_version() -> str:
    from cudnn_py import library
    return library().version_string


def test_function_not_available_is_not_an_attribute_error():
    """hasattr/getattr fallbacks must not swallow it: the name exists, the library lacks the symbol."""
    assert not issubclass(errors.FunctionNotAvailableError, AttributeError)
    assert issubclass(errors.FunctionNotAvailableError, NotImplementedError)
    assert hasattr(capi, "cudnnGetConvolutionForwardAlgorithm")  # the removed name is there, calling it raises


@pytest.mark.parametrize("cls", [
    errors.CudnnError, errors.CudnnBadParamError, errors.CudaError, errors.CudaOutOfMemoryError,
    errors.NoDeviceError, errors.FunctionNotAvailableError, errors.ClosedError, errors.WorkspaceLimitError,
    errors.LibraryNotFoundError])
def test_every_exception_is_a_cudnn_py_error(cls):
    assert issubclass(cls, errors.CudnnPyError)


@pytest.mark.parametrize("code, cls, base", [
    (2, errors.CudaOutOfMemoryError, MemoryError), (100, errors.NoDeviceError, RuntimeError),
    (803, errors.NoDeviceError, RuntimeError), (101, errors.NoDeviceError, RuntimeError),
    (700, errors.CudaError, RuntimeError)])
def test_cuda_results_map_to_their_class(code, cls, base):
    err = errors.cuda_error("cuSomething", code)
    assert type(err) is cls and isinstance(err, base) and err.code == code
    assert err.name.startswith("CUDA_ERROR_")  # from the binding's enum, no driver needed
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls and str(again) == str(err)


def test_cuda_core_errors_keep_their_code():
    class CUDAError(Exception):  # what cuda.core raises, by message
        pass
    err = errors.cuda_error_from(CUDAError("CUDA_ERROR_OUT_OF_MEMORY: out of memory"), "allocate", "4096 bytes")
    assert type(err) is errors.CudaOutOfMemoryError and err.code == 2
    assert str(err) == "allocate failed: CUDA_ERROR_OUT_OF_MEMORY (2): 4096 bytes: out of memory"
    other = errors.cuda_error_from(ValueError("bad pool"), "allocate")
    assert type(other) is errors.CudaError and str(other) == "allocate failed: bad pool"


@pytest.mark.parametrize("bad", [
    lambda: cudnn_py.Pooling("max", window=0),
    lambda: cudnn_py.Pooling("nope"),
    lambda: cudnn_py.Activation("relu", coef="a"),
    lambda: cudnn_py.Convolution(padding=-1),
    lambda: cudnn_py.TensorDescriptor((2 ** 32 + 1, 3, 4, 4)),
    lambda: cudnn_py.core.dtypes.cudnn_dtype("fp128"),
    lambda: cudnn_py.Graph().tensor((1.7, 2.2)),
    lambda: cudnn_py.Graph().scalar(-2, dtype="uint8"),
    lambda: cudnn_py.BackendDescriptor("TENSOR", dimensions=[2 ** 64, 2]),
])
def test_validation_errors_are_cudnn_py_errors(bad):
    """Issue 13: a refused argument raises the project's InvalidValueError/InvalidTypeError (still a ValueError or
    TypeError), so ``except cudnn_py.CudnnPyError`` catches validation too."""
    with pytest.raises((cudnn_py.InvalidValueError, cudnn_py.InvalidTypeError)) as e:
        bad()
    assert isinstance(e.value, cudnn_py.CudnnPyError) and isinstance(e.value, (ValueError, TypeError))
