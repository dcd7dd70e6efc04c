"""The C layer refuses what C cannot take, before C runs: typed handles, integer ranges, enums, arrays and their
lengths, NULL where cuDNN would dereference it; errors name the function and the parameter; removed names for
porters; deprecation warnings for users (not for the Pythonic layer). Real library, no GPU needed."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap
import warnings
from ctypes import byref, c_int, c_int64
from pathlib import Path

import numpy as np
import pytest

from cudnn_py.clib import binding as _binding
from cudnn_py import capi
from cudnn_py.clib.binding import CArgumentError
from cudnn_py.codegen.lengths import LENGTHS
from cudnn_py.codegen.nonnull import NONNULL

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from nonnull_probe import plausible as _plausible  # noqa: E402

#: a cudnnHandle_t that is not NULL, for calls these tests expect refused before C for another reason (every
#: cudnnHandle_t parameter refuses NULL; no GPU is needed to make this one, and it is never dereferenced)
NOT_NULL_HANDLE = capi.cudnnHandle_t(0x10)
from cudnn_py.errors import ClosedError, CudnnBadParamError, CudnnError, CudnnPyError, FunctionNotAvailableError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _run_script(source: str) -> subprocess.CompletedProcess:
    import cudnn_py
    from pathlib import Path
    root = str(Path(cudnn_py.__file__).resolve().parent.parent)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin", "PYTHONFAULTHANDLER": "1"})


@pytest.fixture
def conv():
    d = capi.cudnnConvolutionDescriptor_t()
    capi.cudnnCreateConvolutionDescriptor(byref(d))
    yield d
    capi.cudnnDestroyConvolutionDescriptor(d)


def test_the_reported_crashes_are_clear_errors():
    """Issue 13's C-layer crashes (abort, silent success, segfaults), each now an exception; run in a child so that a
    regression fails this test instead of killing the test run."""
    p = _run_script("""
        import ctypes, json, warnings
        from ctypes import byref
        warnings.simplefilter("ignore")
        from cudnn_py.capi import *
        d = cudnnTensorDescriptor_t(); cudnnCreateTensorDescriptor(byref(d))
        out = []
        for label, call in [
            ("destroy str", lambda: cudnnDestroyTensorDescriptor("abc")),
            ("set str", lambda: cudnnSetTensor4dDescriptor("abcdefgh", 0, 0, 1, 3, 4, 4)),
            ("set int", lambda: cudnnSetTensor4dDescriptor(0x1234, 0, 0, 1, 3, 4, 4)),
            ("set bytes", lambda: cudnnSetTensor4dDescriptor(b"abcdefgh", 0, 0, 1, 3, 4, 4)),
            ("lrn NULL", lambda: cudnnSetLRNDescriptor(None, 5, 1e-4, 0.75, 2.0)),
            ("getter NULL output", lambda: cudnnGetFilter4dDescriptor(cudnnFilterDescriptor_t(), *[None] * 6)),
            ("getter short output", lambda: cudnnGetTensorNdDescriptor(d, 8, byref(ctypes.c_int()),
                                                                      byref(ctypes.c_int()), (ctypes.c_int * 2)(),
                                                                      (ctypes.c_int * 2)())),
            ("array int where descriptor", lambda: cudnnSetTensorNdDescriptor(d, 0, 4, 7, 8)),
        ]:
            try:
                call()
                out.append([label, "returned", ""])
            except Exception as e:
                out.append([label, type(e).__name__, str(e)])
        print(json.dumps(out))
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    results = {label: (cls, msg) for label, cls, msg in json.loads(p.stdout)}
    for label, (cls, msg) in results.items():
        assert cls == "CArgumentError", (label, cls, msg)
    assert "cudnnDestroyTensorDescriptor: parameter 1 (cudnnTensorDescriptor_t tensorDesc)" in results["destroy str"][1]
    assert "explicit cast" in results["set int"][1]
    assert "NULL" in results["lrn NULL"][1] and "NULL" in results["getter NULL output"][1]
    assert "has room for 2 element(s)" in results["getter short output"][1]


def test_handle_parameters(tensor):
    size = ctypes.c_size_t()
    capi.cudnnSetTensor4dDescriptor(tensor, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 1, 2, 3, 4)
    capi.cudnnGetTensorSizeInBytes(capi.cudnnTensorDescriptor_t(tensor.value), byref(size))  # the explicit cast
    assert size.value == 96
    for bad, words in [(tensor.value, "explicit cast"), ("abc", "got str"), (b"ab", "got bytes"), (1.5, "got float"),
                       (capi.cudnnFilterDescriptor_t(), "cudnnFilterDescriptor_t where a cudnnTensorDescriptor_t"),
                       (ctypes.c_void_p(tensor.value), "got c_void_p"), (np.int64(5), "got int64")]:
        with pytest.raises(CArgumentError, match=words):
            capi.cudnnGetTensorSizeInBytes(bad, byref(size))
    for null in (None, 0):  # NULL reaches cuDNN, which refuses it here
        with pytest.raises(CudnnBadParamError):
            capi.cudnnGetTensorSizeInBytes(null, byref(size))


def test_objects_carrying_a_handle(tensor):
    from cudnn_py.core.descriptors import FilterDescriptor, TensorDescriptor
    size = ctypes.c_size_t()
    t = TensorDescriptor((2, 3, 4, 5), "float32")
    capi.cudnnGetTensorSizeInBytes(t, byref(size))  # its .ptr
    assert size.value == 2 * 3 * 4 * 5 * 4

    class Param:
        _as_parameter_ = tensor
    capi.cudnnGetTensorSizeInBytes(Param(), byref(size))
    with pytest.raises(CArgumentError, match="whose handle is a cudnnFilterDescriptor_t"):
        capi.cudnnGetTensorSizeInBytes(FilterDescriptor((4, 3, 3, 3), "float32"), byref(size))

    class DeviceArrayLike:
        ptr = 0x7F0000000000  # a device address is not a descriptor
    with pytest.raises(CArgumentError, match="cudnnTensorDescriptor_t"):
        capi.cudnnGetTensorSizeInBytes(DeviceArrayLike(), byref(size))
    t.close()
    with pytest.raises(ClosedError):
        capi.cudnnGetTensorSizeInBytes(t, byref(size))


def test_cuda_handles_take_int_handles():
    # the int stream is taken; what stops the call is the NULL cudnnHandle_t (refused for every function)
    with pytest.raises(CArgumentError, match=r"parameter 1 \(cudnnHandle_t handle\) is NULL"):
        capi.cudnnSetStream(None, 0x1234)
    with pytest.raises(CArgumentError, match="cudaStream_t"):
        capi.cudnnSetStream(None, "stream")


def test_integer_parameters_stay_in_range(tensor):
    set4d = capi.cudnnSetTensor4dDescriptor
    for n in (2 ** 31, -2 ** 31 - 1, 2 ** 32 + 1):
        with pytest.raises(CArgumentError, match=r"parameter 4 \(int n\).*outside"):
            set4d(tensor, 0, 0, n, 3, 4, 4)
    with pytest.raises(CArgumentError, match="float"):
        set4d(tensor, 0, 0, 1.0, 3, 4, 4)
    set4d(tensor, 0, 0, np.int32(1), c_int(3), True, 4)  # numpy and ctypes ints, bool: as C would
    with pytest.raises(CudnnBadParamError):  # the extremes pass the range check and reach cuDNN
        set4d(tensor, 0, 0, -2 ** 31, 3, 4, 4)
    with pytest.raises(CArgumentError, match="outside"):  # unsigned: no negative values
        capi.cudnnSetCallback(-1, None, None)
    with pytest.raises(CArgumentError, match="outside"):  # size_t
        capi.cudnnGetLastErrorString(ctypes.create_string_buffer(8), -1)
    b = capi.cudnnBackendDescriptor_t()
    capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, byref(b))
    try:
        with pytest.raises(CArgumentError, match=r"int64_t elementCount.*outside"):
            capi.cudnnBackendSetAttribute(b, capi.CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, capi.CUDNN_TYPE_INT64,
                                          2 ** 63, None)
    finally:
        capi.cudnnBackendDestroyDescriptor(b)


def test_enum_parameters(conv):
    capi.cudnnSetConvolutionMathType(conv, capi.CUDNN_TENSOR_OP_MATH)
    capi.cudnnSetConvolutionMathType(conv, 1)  # a plain int, as C would take
    with pytest.raises(CArgumentError, match="got CUDNN_DATA_HALF, a member of cudnnDataType_t; this parameter "
                                             "takes a cudnnMathType_t"):
        capi.cudnnSetConvolutionMathType(conv, capi.CUDNN_DATA_HALF)
    with pytest.raises(CArgumentError, match="removed in cuDNN 8"):
        capi.cudnnSetConvolutionMathType(conv, capi.CUDNN_CONVOLUTION_FWD_PREFER_FASTEST)
    with pytest.raises(CudnnBadParamError):  # an int that names no member reaches cuDNN, which refuses it
        capi.cudnnSetConvolutionMathType(conv, 999)
    with pytest.raises(CArgumentError, match="outside"):
        capi.cudnnSetConvolutionMathType(conv, 2 ** 40)
    with pytest.raises(CArgumentError, match="member or an int"):
        capi.cudnnSetConvolutionMathType(conv, "CUDNN_TENSOR_OP_MATH")


@pytest.mark.parametrize("make", [list, tuple, lambda v: np.array(v, np.int64), lambda v: (c_int * len(v))(*v)])
def test_sequences_where_c_reads_an_array(tensor, make):
    capi.cudnnSetTensorNdDescriptor(tensor, capi.CUDNN_DATA_FLOAT, 4, make([2, 3, 4, 5]), make([60, 20, 5, 1]))
    dims, strides, dt, nb = (c_int * 8)(), (c_int * 8)(), c_int(), c_int()
    capi.cudnnGetTensorNdDescriptor(tensor, 8, byref(dt), byref(nb), dims, strides)
    assert nb.value == 4 and list(dims[:4]) == [2, 3, 4, 5] and list(strides[:4]) == [60, 20, 5, 1]


def test_array_arguments_are_checked(tensor):
    ok = [2, 3, 4, 5]
    with pytest.raises(CArgumentError, match=r"dimA\[\]\) has room for 3 element\(s\).*nbDims=4"):
        capi.cudnnSetTensorNdDescriptor(tensor, capi.CUDNN_DATA_FLOAT, 4, ok[:3], [60, 20, 5, 1])
    with pytest.raises(CArgumentError, match="element 2: 2147483648 is outside"):
        capi.cudnnSetTensorNdDescriptor(tensor, capi.CUDNN_DATA_FLOAT, 4, [2, 3, 2 ** 31, 5], [60, 20, 5, 1])
    with pytest.raises(CArgumentError, match="element 1"):
        capi.cudnnSetTensorNdDescriptor(tensor, capi.CUDNN_DATA_FLOAT, 4, [2, 3.5, 4, 5], [60, 20, 5, 1])
    dt, nb = c_int(), c_int()
    with pytest.raises(CArgumentError, match="C writes through this pointer"):  # a list would not get it
        capi.cudnnGetTensorNdDescriptor(tensor, 8, byref(dt), byref(nb), [0] * 8, [0] * 8)
    with pytest.raises(CArgumentError, match="LP_c_int|c_int"):
        capi.cudnnGetTensorNdDescriptor(tensor, 2, byref(dt), byref(ctypes.c_float()), (c_int * 2)(), (c_int * 2)())
    capi.cudnnSetTensorNdDescriptor(tensor, capi.CUDNN_DATA_FLOAT, 4, ok, [60, 20, 5, 1])
    buf = (c_int * 10)()
    capi.cudnnGetTensorNdDescriptor(tensor, 4, byref(dt), byref(nb), byref(buf, 24), (c_int * 4)())  # 4 left
    assert list(buf[6:]) == ok
    with pytest.raises(CArgumentError, match=r"room for 3 element\(s\)"):
        capi.cudnnGetTensorNdDescriptor(tensor, 4, byref(dt), byref(nb), byref(buf, 28), (c_int * 4)())
    capi.cudnnGetTensorNdDescriptor(tensor, 4, byref(dt), byref(nb), ctypes.addressof(buf), (c_int * 4)())
    assert list(buf[:4]) == ok  # an int address is taken as is: the caller vouches for its size


def test_every_length_rule_is_bound():
    for name, entries in LENGTHS.items():
        fn = getattr(capi, name)
        names = [p for p, _ in fn.params]
        assert [tuple(e) for e in entries] == [tuple(e) for e in fn.lengths]
        assert all(p in names for e in entries for p in e), name


def test_short_outputs_refused_before_c(conv):
    perf = (capi.cudnnConvolutionFwdAlgoPerf_t * 2)()
    n = c_int()
    with pytest.raises(CArgumentError, match=r"perfResults\) has room for 2"):
        capi.cudnnFindConvolutionForwardAlgorithm(NOT_NULL_HANDLE, None, None, conv, None, 8, byref(n), perf)
    with pytest.raises(CArgumentError, match="max_size=64"):
        capi.cudnnGetLastErrorString(ctypes.create_string_buffer(16), 64)
    pads = (c_int * 2)()
    with pytest.raises(CArgumentError, match=r"padA\[\]\) has room for 2"):
        capi.cudnnGetConvolutionNdDescriptor(conv, 3, byref(n), pads, (c_int * 3)(), (c_int * 3)(), byref(c_int()),
                                             byref(c_int()))


def test_backend_attributes_by_element_type():
    b = capi.cudnnBackendDescriptor_t()
    capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, byref(b))
    try:
        dil, n = capi.CUDNN_ATTR_CONVOLUTION_DILATIONS, c_int64()
        capi.cudnnBackendSetAttribute(b, dil, capi.CUDNN_TYPE_INT64, 3, [1, 2, 3])  # a list, as int64_t elements
        # (read back after finalize in test_backend_list_attributes_read_back: finalize needs a GPU)
        with pytest.raises(CArgumentError, match=r"room for 2 element\(s\) \(16 bytes\).*elementCount=3"):
            capi.cudnnBackendSetAttribute(b, dil, capi.CUDNN_TYPE_INT64, 3, (c_int64 * 2)(1, 2))
        with pytest.raises(CArgumentError, match=r"room for 1 element\(s\) \(8 bytes\).*requestedElementCount=3"):
            capi.cudnnBackendGetAttribute(b, dil, capi.CUDNN_TYPE_INT64, 3, byref(n), (ctypes.c_float * 2)())
        with pytest.raises(CArgumentError, match="element 0"):
            capi.cudnnBackendSetAttribute(b, dil, capi.CUDNN_TYPE_INT64, 1, ["x"])
        with pytest.raises(CArgumentError, match="9999 is not a cudnnBackendAttributeType_t"):
            capi.cudnnBackendSetAttribute(b, dil, 9999, 1, [1])
    finally:
        capi.cudnnBackendDestroyDescriptor(b)


@pytest.mark.parametrize("name,param", [(f, p) for f, ps in sorted(NONNULL.items()) for p in ps])
def test_null_refused_where_cudnn_would_dereference_it(name, param):
    fn = getattr(capi, name)
    params = [p for p, _ in fn.params]
    args = [NOT_NULL_HANDLE if a is capi.cudnnHandle_t else _plausible(a) for _, a in fn.params]
    i = params.index(param)
    argtype = fn.params[i][1]
    nulls = [None, 0] + ([argtype()] if isinstance(argtype, type) and issubclass(argtype, _binding.Handle) else [])
    for null in nulls:
        args[i] = null
        with pytest.raises(CArgumentError, match=f"{name}: parameter {i + 1} .* is NULL"):
            fn(*args)


def test_every_handle_parameter_refuses_null():
    """No cuDNN function takes a NULL cudnnHandle_t, and some dereference it (cudnnLRNCrossChannelForward
    segfaulted on one): refused before C in every function."""
    takers = [f for f in capi.FUNCTIONS if any(a is capi.cudnnHandle_t for _, a in getattr(capi, f).params)]
    assert len(takers) > 90  # 93 in cuDNN 9.28
    for name in takers:
        fn = getattr(capi, name)
        i = [a for _, a in fn.params].index(capi.cudnnHandle_t)
        assert fn.params[i][0] in fn.nonnull, name
    with pytest.raises(CArgumentError, match=r"cudnnLRNCrossChannelForward: parameter 1 .* is NULL"):
        capi.cudnnLRNCrossChannelForward(None, None, 0, None, None, None, None, None, None)


def test_errors_name_function_and_parameter(tensor):
    assert issubclass(CArgumentError, TypeError) and issubclass(CArgumentError, ValueError)
    assert issubclass(CArgumentError, CudnnPyError)
    with pytest.raises(CArgumentError, match=r"cudnnAddTensor: parameter 2 \(const void \*alpha\) cannot take float"):
        capi.cudnnAddTensor(NOT_NULL_HANDLE, 1.0, tensor, 0, None, tensor, 0)
    with pytest.raises(CArgumentError, match=r"cudnnAddTensor: parameter 4 \(const void \*A\).*str"):
        capi.cudnnAddTensor(NOT_NULL_HANDLE, None, tensor, "x", None, tensor, 0)
    with pytest.raises(CArgumentError, match="cudnnSetTensor4dDescriptor: missing 2 required positional arguments"):
        capi.cudnnSetTensor4dDescriptor(tensor, 0, 0, 1, 3)
    with pytest.raises(CArgumentError, match="takes 7 positional arguments but 8"):
        capi.cudnnSetTensor4dDescriptor(tensor, 0, 0, 1, 3, 4, 4, 4)


def test_raw_is_the_ctypes_function(tensor):
    raw = capi.cudnnGetTensorSizeInBytes.raw
    assert isinstance(raw, ctypes._CFuncPtr)
    size = ctypes.c_size_t()
    capi.cudnnSetTensor4dDescriptor(tensor, 0, 0, 1, 1, 1, 3)
    assert raw(tensor, byref(size)) == 0 and size.value == 12
    with pytest.raises(ctypes.ArgumentError):  # ctypes' own checks remain: no str, no other handle type
        raw("abc", byref(size))
    with pytest.raises(ctypes.ArgumentError):
        raw(capi.cudnnFilterDescriptor_t(), byref(size))
    with pytest.raises(CudnnBadParamError):  # the status is still checked
        raw(None, byref(size))


def test_removed_names_for_porters():
    ns: dict = {}
    exec("from cudnn_py.capi import *", ns)
    for name in ("CUDNN_CONVOLUTION_FWD_PREFER_FASTEST", "CUDNN_CONVOLUTION_BWD_DATA_NO_WORKSPACE",
                 "CUDNN_CONVOLUTION_BWD_FILTER_SPECIFY_WORKSPACE_LIMIT", "cudnnConvolutionFwdPreference_t",
                 "cudnnGetConvolutionForwardAlgorithm", "cudnnAlgorithmDescriptor_t", "cudnnSaveAlgorithm",
                 "cudnnSetTensor4dDescriptor", "CUDNN_DATA_FLOAT"):
        assert name in ns and name in capi.__all__, name
    assert "graph" not in ns and "FUNCTIONS" not in ns  # the face exports C names only
    assert ns["CUDNN_CONVOLUTION_FWD_PREFER_FASTEST"] == 1
    with pytest.raises(FunctionNotAvailableError, match="removed in cuDNN 8; use cudnnGetConvolutionForwardAlgorithm_v7"):
        ns["cudnnGetConvolutionForwardAlgorithm"](None, None, None, None, None,
                                                  ns["CUDNN_CONVOLUTION_FWD_PREFER_FASTEST"], 0, None)
    with pytest.raises(FunctionNotAvailableError, match="algorithm descriptor API"):
        ns["cudnnCreateAlgorithmDescriptor"](byref(ns["cudnnAlgorithmDescriptor_t"]()))


def test_deprecation_warnings_once_per_function_for_users_only():
    p = _run_script("""
        import json, warnings, ctypes
        from ctypes import byref
        from cudnn_py import capi
        log = []
        def calls(fn, *a):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                fn(*a)
            return [(str(x.category.__name__), x.filename, str(x.message)) for x in w]
        a = capi.cudnnActivationDescriptor_t()
        # the Pythonic layer's own calls of deprecated functions warn nothing and do not use the warning up
        ns = {"__name__": "cudnn_py.somewhere", "capi": capi, "byref": byref, "a": a}
        exec("def inside():\\n    capi.cudnnCreateActivationDescriptor(byref(a))\\n", ns)
        log.append(calls(ns["inside"]))
        from cudnn_py.ops.activation import Activation
        log.append(calls(lambda: Activation("relu").descriptor))
        log.append(calls(capi.cudnnSetActivationDescriptor, a, 1, 0, 0.0))  # the user's first call: warns
        log.append(calls(capi.cudnnSetActivationDescriptor, a, 1, 0, 0.0))  # once per function
        log.append(calls(capi.cudnnCreateTensorDescriptor, byref(capi.cudnnTensorDescriptor_t())))  # not deprecated
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("ignore")  # silenceable
            capi.cudnnGetActivationDescriptorSwishBeta(a, byref(ctypes.c_double()))
        log.append(len(w))
        log.append(calls(lambda: capi.cudnnDestroyActivationDescriptor.raw))  # reaching for .raw warns too
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                capi.cudnnSetActivationDescriptorSwishBeta(a, 1.0)
                log.append("no error")
            except DeprecationWarning as e:
                log.append("error: " + str(e))
        print(json.dumps(log))
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    inside, pythonic, first, second, plain, silenced, raw, error = json.loads(p.stdout)
    assert inside == [] and pythonic == [] and second == [] and plain == [] and silenced == 0
    assert len(first) == 1 and first[0][0] == "DeprecationWarning" and first[0][1] == "<string>"
    assert first[0][2].startswith("cudnnSetActivationDescriptor is deprecated in cuDNN 9 (CUDNN_DEPRECATED in the "
                                  "headers): Since cuDNN 9.0.0. Use graph API instead.")
    assert len(raw) == 1 and "cudnnDestroyActivationDescriptor" in raw[0][2]
    assert error.startswith("error: cudnnSetActivationDescriptorSwishBeta is deprecated")


def test_status_errors_still_name_the_function(tensor):
    with pytest.raises(CudnnError, match=r"^cudnnSetTensor4dDescriptor failed: CUDNN_STATUS_BAD_PARAM"):
        capi.cudnnSetTensor4dDescriptor(tensor, 0, 0, -1, 3, 4, 4)


def test_no_warning_machinery_on_plain_calls(tensor):
    """A function that is not deprecated goes straight to its checked call (no frame inspection)."""
    fn = capi.cudnnGetTensorSizeInBytes
    fn(tensor, byref(ctypes.c_size_t()))
    assert fn._call is fn._checked
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(tensor, byref(ctypes.c_size_t()))


@pytest.mark.gpu
def test_backend_list_attributes_read_back():
    """Sequences given to cudnnBackendSetAttribute arrive as the element type attributeType names."""
    b = capi.cudnnBackendDescriptor_t()
    capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, byref(b))
    try:
        i64 = capi.CUDNN_TYPE_INT64
        for attr, values in [("SPATIAL_DIMS", [2]), ("DILATIONS", [1, 2]), ("FILTER_STRIDES", [3, 1]),
                             ("PRE_PADDINGS", [0, 1]), ("POST_PADDINGS", [1, 0])]:
            capi.cudnnBackendSetAttribute(b, getattr(capi, f"CUDNN_ATTR_CONVOLUTION_{attr}"), i64, len(values), values)
        capi.cudnnBackendSetAttribute(b, capi.CUDNN_ATTR_CONVOLUTION_COMP_TYPE, capi.CUDNN_TYPE_DATA_TYPE, 1,
                                      [capi.CUDNN_DATA_FLOAT])
        capi.cudnnBackendSetAttribute(b, capi.CUDNN_ATTR_CONVOLUTION_CONV_MODE, capi.CUDNN_TYPE_CONVOLUTION_MODE, 1,
                                      [capi.CUDNN_CROSS_CORRELATION])
        capi.cudnnBackendFinalize(b)
        # (the CONV_MODE getter of cuDNN 9.19 answers BAD_PARAM_ATTRIBUTE_TYPE "CUDNN_TYPE_DATA_TYPE != attrType"
        # for CUDNN_TYPE_CONVOLUTION_MODE, measured on an H200: not read back here)
        for attr, values in [("FILTER_STRIDES", [3, 1]), ("PRE_PADDINGS", [0, 1]), ("POST_PADDINGS", [1, 0])]:
            got, n = (c_int64 * 2)(), c_int64()
            capi.cudnnBackendGetAttribute(b, getattr(capi, f"CUDNN_ATTR_CONVOLUTION_{attr}"), i64, 2, byref(n), got)
            assert n.value == 2 and list(got) == values, attr
    finally:
        capi.cudnnBackendDestroyDescriptor(b)


def test_pythonic_owners_make_a_double_destroy_impossible():
    """A descriptor (legacy or backend) owned by a Pythonic object: close() twice is a no-op; destroying it through
    capi behind its owner's back is refused (it would be destroyed again by close() or the collector, and a second
    destroy aborts inside cuDNN); once closed, its stale pointer object is NULL. In a child process: a regression
    aborts the child, not the test run."""
    p = _run_script("""
        import gc, json, warnings
        warnings.simplefilter("ignore")
        from cudnn_py.clib import binding as _binding
        from cudnn_py import capi, graph
        from cudnn_py.core.descriptors import FilterDescriptor, TensorDescriptor
        out = {}
        for label, make, destroy in [
                ("tensor", lambda: TensorDescriptor((1, 2, 3, 4), "float32"), capi.cudnnDestroyTensorDescriptor),
                ("filter", lambda: FilterDescriptor((2, 2, 3, 3), "float32"), capi.cudnnDestroyFilterDescriptor),
                ("backend", lambda: graph.BackendDescriptor("TENSOR"), capi.cudnnBackendDestroyDescriptor)]:
            d = make()
            ptr = d.ptr
            try:
                destroy(ptr)
                out[label] = "destroyed behind its owner's back"
            except Exception as e:
                out[label] = type(e).__name__ + ": " + str(e)
            d.close()
            d.close()
            out[label + " after close"] = [ptr.value, d.closed]
            try:
                destroy(ptr)  # NULL now: cuDNN's status, or a refusal; never a second destroy
            except Exception:
                pass
        made = [TensorDescriptor((1, 2, 3, 4), "float32") for _ in range(3)]
        del made
        gc.collect()
        out["owned left"] = len(_binding._OWNED)
        print(json.dumps(out))
    """)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for label, owner in (("tensor", "TensorDescriptor"), ("filter", "FilterDescriptor"),
                         ("backend", "graph.BackendDescriptor")):
        assert out[label].startswith("CArgumentError") and f"belongs to a cudnn_py {owner}" in out[label], out[label]
        assert out[label + " after close"] == [None, True]
    assert out["owned left"] == 0  # owners forget what they destroyed (collected ones too)


def test_a_backend_descriptor_set_into_an_open_one_outlives_its_close():
    """Closing a tensor that an operation still holds only marks it closed; the C descriptor goes with the holder."""
    from cudnn_py import graph
    t = graph.BackendDescriptor("TENSOR")
    ptr = t.ptr
    holder = graph.BackendDescriptor("VARIANT_PACK")
    t._holders.add(holder)  # as set() records it (setting needs a finalized tensor, which needs a GPU)
    holder._refs[0] = [t]
    address = ptr.value
    t.close()
    assert t.closed and ptr.value == address  # not destroyed: the holder is open and cuDNN reads it through it
    del t
    import gc
    gc.collect()
    assert ptr.value == address
    holder.close()  # lets the tensor go: now it is destroyed, once
    gc.collect()
    assert ptr.value is None and address not in _binding._OWNED
