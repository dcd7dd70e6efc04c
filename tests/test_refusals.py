"""Inputs refused with a CudnnPyError saying what is wrong, before C: shapes that are no shapes, unknown
statuses, odd error arguments, closed handles, AlgoPerf's fields, compute types cuDNN refuses."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import cudnn_py
from cudnn_py import capi
from cudnn_py.calls.algorithm_queries import AlgoPerf
from cudnn_py.errors import CudnnNotSupportedError, CudnnPyError
from cudnn_py.graph.errors import GraphNotSupportedError
from cudnn_py.tuning import TuningDatabase, database


@pytest.mark.parametrize("shape, error", [
    (None, "InvalidTypeError"), ("abc", "InvalidTypeError"), (b"abcd", "InvalidTypeError"),
    ((-1, 3, 8, 8), "InvalidValueError"), ((1, "3", 8, 8), "InvalidTypeError"), ((1, 3), "InvalidValueError"),
])
def test_batchnorm_param_shape_refuses_what_is_no_shape(shape, error):
    import cudnn_py
    with pytest.raises(getattr(cudnn_py, error), match="shape"):
        cudnn_py.batchnorm_param_shape(shape)
    assert cudnn_py.batchnorm_param_shape((2, 3, 8, 8)) == (1, 3, 1, 1)
    assert cudnn_py.batchnorm_param_shape([2, 3, 4, 8, 8], "per_activation") == (1, 3, 4, 8, 8)


@pytest.mark.parametrize("call", ["empty", "zeros", "DeviceArray", "normalize_shape"])
@pytest.mark.parametrize("shape", ["abc", b"ab", "12", bytearray(b"1")])
def test_a_string_shape_is_refused_not_read_character_by_character(call, shape):
    import cudnn_py
    from cudnn_py.core.strided import normalize_shape
    fn = {"empty": lambda: cudnn_py.empty(shape), "zeros": lambda: cudnn_py.zeros(shape),
          "DeviceArray": lambda: cudnn_py.DeviceArray(1 << 40, shape, "float32", device_id=0),
          "normalize_shape": lambda: normalize_shape(shape)}[call]
    with pytest.raises(cudnn_py.InvalidTypeError, match="shape must be an int or a sequence of ints"):
        fn()


@pytest.mark.parametrize("cls", ["CudnnError", "CudnnBadParamError", "CudnnNotSupportedError", "CudaError",
                                 "CudaOutOfMemoryError", "NoDeviceError"])
@pytest.mark.parametrize("status", [None, "x", 1.5])
def test_exception_constructors_take_an_unknown_status(cls, status):
    import pickle
    import cudnn_py
    e = getattr(cudnn_py, cls)("cudnnSomething", status)
    assert "cudnnSomething" in str(e)
    assert isinstance(pickle.loads(pickle.dumps(e)), getattr(cudnn_py, cls))
    from cudnn_py.errors import error_class
    assert error_class(status) is cudnn_py.CudnnError


@pytest.mark.parametrize("database", ["abc", b"abc", Path("x.sqlite"), 3, 1.5, ["a"]])
def test_algorithm_cache_refuses_what_is_no_database(database):
    import cudnn_py
    with pytest.raises(cudnn_py.InvalidTypeError, match="database must be"):
        cudnn_py.AlgorithmCache(database)
    with pytest.raises(cudnn_py.InvalidTypeError, match="database must be"):
        cudnn_py.AlgorithmCache().use_database(database)


def test_algorithm_cache_still_takes_a_database_a_callable_or_none():
    import cudnn_py
    from cudnn_py.tuning import TuningDatabase
    db = TuningDatabase()  # None: a private database in memory
    for database in (None, db, lambda: db):
        cudnn_py.AlgorithmCache(database)


def test_operations_on_a_closed_handle_raise_closed_error():
    """A closed Handle (the state close() leaves; made here without a GPU) is ClosedError for pooling and others."""
    import cudnn_py
    from cudnn_py.core.handle import Handle
    h = Handle.__new__(Handle)
    h._ptr, h.device, h.cache = None, 0, {}
    x = cudnn_py.DeviceArray(1 << 40, (1, 1, 4, 4), "float32", device_id=0)
    for call in (lambda: cudnn_py.pooling_forward(h, cudnn_py.Pooling("max", window=2), x),
                 lambda: cudnn_py.activation_forward(h, cudnn_py.Activation("relu"), x),
                 lambda: cudnn_py.softmax_forward(h, x)):
        with pytest.raises(cudnn_py.ClosedError, match="closed"):
            call()


def test_deprecated_convolution_descriptor_close_is_a_no_op():
    import cudnn_py
    from cudnn_py.ops.convolution import convolution_descriptor
    with pytest.warns(DeprecationWarning):
        conv = convolution_descriptor(padding=1)
    conv.close()
    conv.close()
    with pytest.warns(DeprecationWarning):
        with cudnn_py.ConvolutionDescriptor(padding=1) as c:
            assert c.padding == 1


@pytest.mark.parametrize("dtype", ["int8", "uint8", "bfloat16"])
def test_convolution_refuses_a_compute_type_cudnn_refuses(dtype):
    import warnings
    import cudnn_py
    with pytest.raises(cudnn_py.InvalidValueError, match="compute_dtype"):
        cudnn_py.Convolution(compute_dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(cudnn_py.InvalidValueError, match="compute_dtype"):
            cudnn_py.ConvolutionDescriptor(compute_type=dtype)
    for ok in ("float32", "float64", "float16", "int32", None):
        cudnn_py.Convolution(compute_dtype=ok)


@pytest.mark.parametrize("args, shown", [
    ((None, None, None, None), ["graph 'None'", "operations: \n", "tried: none"]),
    (("abc", "abc", "abc", "abc"), ["graph 'abc'", "operations: abc", "tried: abc", "?: abc"]),
    ((1, 2.5, object, [("ok", "pair"), "lone", ["list", "pair"]], "x"), ["graph '1'", "operations: 2.5", "?: lone", "tried: <class 'object'>",
                                                                          "ok: pair", "list: pair", "UNKNOWN ('x')"]),
])
def test_graph_not_supported_error_takes_odd_arguments(args, shown):
    """An exception's constructor never raises: what it got is kept as text, and it still pickles."""
    e = GraphNotSupportedError(*args)
    assert isinstance(e, CudnnNotSupportedError)
    for part in shown:
        assert part in str(e) + "\n"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is GraphNotSupportedError and str(again) == str(e)


@pytest.mark.parametrize("old, args", [
    ("cudnn_py.ops.pooling.PoolingDescriptor", ("max",)), ("cudnn_py.ops.activation.ActivationDescriptor", ("relu",)),
    ("cudnn_py.ops.lrn.LRNDescriptor", ()), ("cudnn_py.core.descriptors.OpTensorDescriptor", ()),
    ("cudnn_py.core.descriptors.ReduceTensorDescriptor", ()), ("cudnn_py.ops.convolution.ConvolutionDescriptor", ()),
])
def test_deprecated_descriptor_names_close_and_work_in_with(old, args):
    """What the old names made could be closed and used in ``with``; the Settings they now make can too."""
    import importlib
    module, name = old.rsplit(".", 1)
    make = getattr(importlib.import_module(module), name)
    with pytest.warns(DeprecationWarning, match=f"{name} is deprecated"):
        made = make(*args)
    made.close()
    made.close()  # idempotent, as Descriptor.close
    with pytest.warns(DeprecationWarning):
        with make(*args) as inside:
            assert inside == made  # the object itself, still usable after close()
    assert hash(inside) == hash(made)


def _perf(**change):
    fields = dict(direction="forward", algo=capi.cudnnConvolutionFwdAlgo_t(1), status=capi.CUDNN_STATUS_SUCCESS,
                  time_ms=0.5, memory_bytes=64, determinism=capi.CUDNN_DETERMINISTIC, math_type=capi.CUDNN_DEFAULT_MATH)
    return AlgoPerf(**{**fields, **change})


@pytest.mark.parametrize("change, match", [
    (dict(direction=None), "direction None"), (dict(direction="sideways"), "direction 'sideways'"),
    (dict(algo=None), "algo must be a cudnnConvolutionFwdAlgo_t"), (dict(algo=1), "algo must be"),
    (dict(algo=capi.cudnnConvolutionBwdDataAlgo_t(1)), "algo must be a cudnnConvolutionFwdAlgo_t"),
    (dict(status="ok"), "status must be"), (dict(status=None), "status must be"),
    (dict(time_ms="1"), "time_ms must be a number"), (dict(time_ms=float("nan")), "time_ms is NaN"),
    (dict(time_ms=True), "time_ms must be"), (dict(memory_bytes=-1), "memory_bytes must be >= 0"),
    (dict(memory_bytes=1.5), "memory_bytes must be an int"), (dict(determinism=1), "determinism must be"),
    (dict(math_type=None), "math_type must be"),
])
def test_algo_perf_checks_its_fields(change, match):
    with pytest.raises(CudnnPyError, match=match):
        _perf(**change)


def test_algo_perf_keeps_what_cudnn_reports():
    assert _perf().supported and _perf(status=3000 + 999).status == 3999  # a status newer than the headers
    assert AlgoPerf.from_dict(_perf(time_ms=-1.0).to_dict()) == _perf(time_ms=-1.0)  # Find's "not timed"


