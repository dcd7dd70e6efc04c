"""Descriptor objects against the real library (no GPU needed): build, read back, shapes, caching, bad input."""
import ctypes
import gc

import numpy as np
import pytest

import cudnn_py
from cudnn_py.core import caches
from cudnn_py import capi
from cudnn_py.core import descriptors as D
from cudnn_py.ops import activation, convolution, lrn, pooling
from cudnn_py.ops.activation import Activation
from cudnn_py.ops.convolution import Convolution
from cudnn_py.ops.lrn import LRN
from cudnn_py.ops.pooling import Pooling
from cudnn_py.errors import ClosedError, CudnnBadParamError, InvalidValueError
from cudnn_py.core.memory import DeviceArray


def old(name, *args, **kw):
    """Call the deprecated name ``name`` of cudnn_py.core.descriptors: it must warn, then work as before."""
    with pytest.warns(DeprecationWarning, match=f"{name} is deprecated, use "):
        return getattr(D, name)(*args, **kw)


# --- tensor -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(7, 5), (2, 3, 4), (8, 3, 32, 32), (2, 3, 4, 5, 6), (1, 2, 1, 2, 1, 2, 1, 2)])
def test_tensor_packed(shape):
    d = D.TensorDescriptor(shape, np.float32)
    assert d.shape == shape
    assert d.strides == tuple(int(s) // 4 for s in np.empty(shape, np.float32).strides)
    assert d.dtype is capi.cudnnDataType_t.CUDNN_DATA_FLOAT
    assert d.numpy_dtype == np.float32
    assert d.ndim == len(shape)
    assert d.nbytes == 4 * int(np.prod(shape))
    assert isinstance(d.ptr, capi.cudnnTensorDescriptor_t) and d.ptr.value


def test_tensor_explicit_strides_read_back():
    d = D.TensorDescriptor((2, 3, 4, 5), np.float16, strides=(60, 1, 15, 3))
    assert d.strides == (60, 1, 15, 3)
    assert d.dtype is capi.cudnnDataType_t.CUDNN_DATA_HALF
    assert d.layout is None


def test_tensor_nhwc_layout_gives_nhwc_strides():
    d = D.TensorDescriptor((2, 3, 4, 5), np.float32, layout="NHWC")
    assert d.shape == (2, 3, 4, 5)
    assert d.strides == (60, 1, 15, 3)
    assert d.layout is capi.cudnnTensorFormat_t.CUDNN_TENSOR_NHWC
    assert "layout=CUDNN_TENSOR_NHWC" in repr(d)
    assert D.TensorDescriptor((2, 3, 4, 5), "fp16", layout="nhwc").layout is capi.CUDNN_TENSOR_NHWC


def test_format_is_the_old_spelling_of_layout():
    with pytest.warns(DeprecationWarning, match="TensorDescriptor\\(\\): format= is deprecated, use layout="):
        d = D.TensorDescriptor((2, 3, 4, 5), np.float32, format="NHWC")
    assert d.layout is capi.CUDNN_TENSOR_NHWC
    with pytest.warns(DeprecationWarning, match="TensorDescriptor.format is deprecated"):
        assert d.format is capi.CUDNN_TENSOR_NHWC
    with pytest.warns(DeprecationWarning, match="FilterDescriptor\\(\\): format= is deprecated"):
        w = D.FilterDescriptor((4, 3, 3, 3), format="NHWC")
    with pytest.warns(DeprecationWarning, match="FilterDescriptor.format is deprecated"):
        assert w.format is capi.CUDNN_TENSOR_NHWC
    with pytest.warns(DeprecationWarning, match="TensorDescriptor.shared\\(\\): format= is deprecated"):
        assert D.TensorDescriptor.shared((2, 3, 4, 5), format="NHWC") is D.TensorDescriptor.shared((2, 3, 4, 5),
                                                                                                  layout="NHWC")
    with pytest.warns(DeprecationWarning, match="FilterDescriptor.shared\\(\\): format= is deprecated"):
        assert D.FilterDescriptor.shared((4, 3, 3, 3), format="NHWC") is D.FilterDescriptor.shared((4, 3, 3, 3),
                                                                                                  layout="NHWC")
    for old_name in ("tensor_descriptor", "filter_descriptor"):  # the factories: deprecated spellings of .shared
        assert old(old_name, (4, 3, 3, 3)) is getattr(D, old_name.title().replace("_", "")).shared((4, 3, 3, 3))
    with pytest.raises(TypeError, match="both layout= and its old spelling format="):
        D.TensorDescriptor((2, 3, 4, 5), layout="NHWC", format="NHWC")
    with pytest.raises(TypeError, match="unexpected keyword argument 'fmt'"):
        D.FilterDescriptor((4, 3, 3, 3), fmt="NHWC")


def test_tensor_nchw_vect_c():
    d = D.TensorDescriptor((2, 8, 4, 5), capi.CUDNN_DATA_INT8x4, layout="nchw_vect_c")
    assert d.dtype is capi.cudnnDataType_t.CUDNN_DATA_INT8x4
    assert d.nbytes == 2 * 8 * 4 * 5


def test_tensor_like_array():
    a = DeviceArray(0x1000, (4, 2, 3), np.float32, strides=(1, 12, 4))
    d = D.TensorDescriptor.like(a)
    assert d.shape == (4, 2, 3) and d.strides == (1, 12, 4)


@pytest.mark.parametrize("dtype,expected", [
    (np.float64, "CUDNN_DATA_DOUBLE"), (np.int8, "CUDNN_DATA_INT8"), (np.int32, "CUDNN_DATA_INT32"),
    (np.uint8, "CUDNN_DATA_UINT8"), ("bfloat16", "CUDNN_DATA_BFLOAT16")])
def test_tensor_dtypes(dtype, expected):
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    assert D.TensorDescriptor((2, 3, 4, 5), dtype).dtype.name == expected


@pytest.mark.parametrize("shape,exc,msg", [
    ((5,), ValueError, "2 to 8"),
    ((1,) * 9, ValueError, "2 to 8"),
    ((2, 0, 3), ValueError, "zero or negative"),
    ((2, -1, 3), ValueError, "zero or negative"),
    ((2, 3.0), TypeError, "only ints"),
    (5, TypeError, "sequence"),
    ({1, 2, 3}, TypeError, "sequence"),
])
def test_tensor_bad_shape(shape, exc, msg):
    with pytest.raises(exc, match=msg):
        D.TensorDescriptor(shape, np.float32)


def test_tensor_bad_strides_and_dtype():
    with pytest.raises(ValueError, match="one entry per dimension"):
        D.TensorDescriptor((2, 3), np.float32, strides=(1,))
    with pytest.raises(ValueError, match="broadcast"):
        D.TensorDescriptor((2, 3), np.float32, strides=(0, 1))
    with pytest.raises(ValueError, match=">= 0"):
        D.TensorDescriptor((2, 3), np.float32, strides=(-3, 1))
    with pytest.raises(ValueError, match="either strides or layout"):
        D.TensorDescriptor((2, 3, 4, 5), np.float32, strides=(60, 20, 5, 1), layout="NCHW")
    with pytest.raises(ValueError, match="layout must be one of"):
        D.TensorDescriptor((2, 3, 4, 5), np.float32, layout="NWHC")
    with pytest.raises(TypeError, match="complex64"):
        D.TensorDescriptor((2, 3), np.complex64)


# --- filter -------------------------------------------------------------------------------------------

def test_filter_read_back():
    w = D.FilterDescriptor((16, 3, 3, 3), np.float32)
    assert w.shape == (16, 3, 3, 3)
    assert w.dtype is capi.cudnnDataType_t.CUDNN_DATA_FLOAT
    assert w.layout is capi.cudnnTensorFormat_t.CUDNN_TENSOR_NCHW
    assert w.nbytes == 16 * 27 * 4
    w2 = D.FilterDescriptor((8, 4, 3, 3, 3), np.float16, layout="NHWC")
    assert w2.shape == (8, 4, 3, 3, 3) and w2.layout is capi.cudnnTensorFormat_t.CUDNN_TENSOR_NHWC
    assert w2.ndim == 5


def test_filter_bad():
    with pytest.raises(ValueError, match="3 to 8"):
        D.FilterDescriptor((4, 3), np.float32)
    with pytest.raises(ValueError, match="zero or negative"):
        D.FilterDescriptor((4, 0, 3, 3), np.float32)


# --- convolution --------------------------------------------------------------------------------------

def test_old_convolution_descriptor_builds_a_convolution_with_its_old_defaults():
    c = old("ConvolutionDescriptor")
    assert type(c) is Convolution and c == Convolution(math_type="default", compute_dtype=np.float32)
    assert c.params(2) == (((0, 0), (0, 0)), (1, 1), (1, 1))
    assert c.mode is capi.cudnnConvolutionMode_t.CUDNN_CROSS_CORRELATION
    assert c.compute_dtype is capi.cudnnDataType_t.CUDNN_DATA_FLOAT
    assert c.groups == 1 and c.math_type is capi.cudnnMathType_t.CUDNN_DEFAULT_MATH


def test_convolution_3d_tuples_and_options():
    c = old("ConvolutionDescriptor", (1, 2, 3), (2, 1, 1), 2, mode="convolution", compute_type=np.float64,
            groups=4, math_type="fma", reorder="default")
    assert c.params(3) == (((1, 1), (2, 2), (3, 3)), (2, 1, 1), (2, 2, 2))
    assert c.mode is capi.cudnnConvolutionMode_t.CUDNN_CONVOLUTION
    assert c.compute_dtype is capi.cudnnDataType_t.CUDNN_DATA_DOUBLE
    assert c.groups == 4 and c.math_type is capi.cudnnMathType_t.CUDNN_FMA_MATH
    assert "groups=4" in repr(c)
    with pytest.raises(ValueError, match="reorder= is not a Convolution setting"), pytest.warns(DeprecationWarning):
        D.ConvolutionDescriptor(1, reorder="none")


def test_convolution_enum_members_accepted():
    c = old("ConvolutionDescriptor", 1, math_type=capi.CUDNN_TENSOR_OP_MATH, mode=capi.CUDNN_CONVOLUTION)
    assert c.math_type is capi.cudnnMathType_t.CUDNN_TENSOR_OP_MATH


@pytest.mark.parametrize("x,w,kw,expected", [
    ((8, 3, 32, 32), (16, 3, 3, 3), dict(padding=1), (8, 16, 32, 32)),
    ((8, 3, 32, 32), (16, 3, 3, 3), dict(padding=1, stride=2), (8, 16, 16, 16)),
    ((2, 4, 17, 9), (6, 2, 5, 3), dict(padding=(2, 0), stride=(3, 2), dilation=(1, 2), groups=2), (2, 6, 6, 3)),
    ((1, 2, 9, 10, 11), (4, 2, 3, 3, 3), dict(), (1, 4, 7, 8, 9)),
    ((1, 1, 7, 7), (1, 1, 3, 3), dict(dilation=3), (1, 1, 1, 1)),
])
def test_convolution_output_shape_from_cudnn(x, w, kw, expected):
    # the expected values are the textbook formula, worked out by hand for these cases
    assert D.convolution_output_shape(x, w, **kw) == expected  # cuDNN's answer (the old import path)
    conv = old("ConvolutionDescriptor", **{k: v for k, v in kw.items()}, ndim=len(x) - 2)
    assert conv.output_shape(x, w) == expected


def test_convolution_output_shape_bad():
    c = old("ConvolutionDescriptor")
    with pytest.raises(ValueError, match="channels"):
        c.output_shape((1, 3, 8, 8), (4, 2, 3, 3))
    with pytest.raises(ValueError, match="larger than input"):
        c.output_shape((1, 3, 2, 2), (4, 3, 5, 5))
    with pytest.raises(ValueError, match="dims"):
        D.convolution_output_shape((1, 3, 8, 8), (4, 3, 3))


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(padding=-1), ValueError, "padding must be >= 0"),
    (dict(stride=0), ValueError, "stride must be >= 1"),
    (dict(dilation=(1, 0)), ValueError, "dilation must be >= 1"),
    (dict(padding=(1, 1), stride=(1, 1, 1)), ValueError, "2 spatial dimensions"),
    (dict(groups=0), ValueError, "groups"),
    (dict(mode="corr"), ValueError, "mode 'corr'"),
    (dict(math_type="fast"), ValueError, "math_type 'fast'"),
    (dict(ndim=7), ValueError, "ndim"),
    (dict(padding=1.5), TypeError, "padding"),
    (dict(compute_type=np.complex64), TypeError, "complex64"),
])
def test_convolution_bad(kw, exc, msg):
    with pytest.raises(exc, match=msg), pytest.warns(DeprecationWarning):
        D.ConvolutionDescriptor(**kw)


# --- pooling ------------------------------------------------------------------------------------------

def test_old_pooling_descriptor_warns_and_builds_a_pooling():
    """The deprecated name lives with its family (cudnn_py.ops.pooling; this module forwards it) and builds the one
    class of the concept, Pooling."""
    p = old("PoolingDescriptor", "avg", 3, 1, 2)
    assert p == Pooling("avg", 3, 1, 2) and type(p) is Pooling
    assert p.mode is capi.cudnnPoolingMode_t.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
    assert p.params(2) == ((3, 3), (1, 1), (2, 2)) and p.nan_propagation is False
    q = old("PoolingDescriptor", "max", (2, 3, 4), nan_propagation=True)
    assert q.stride == (2, 3, 4) and q.nan_propagation is True  # stride defaults to the window
    assert D.PoolingDescriptor is pooling.PoolingDescriptor and cudnn_py.PoolingDescriptor is pooling.PoolingDescriptor
    assert "PoolingDescriptor" not in cudnn_py.__all__ and "PoolingDescriptor" not in D.__all__


@pytest.mark.parametrize("x,kw,expected", [
    ((1, 1, 7, 7), dict(window=2), (1, 1, 3, 3)),
    ((2, 3, 32, 32), dict(mode="avg", window=3, padding=1, stride=2), (2, 3, 16, 16)),
    ((2, 3, 5, 6, 7), dict(window=(1, 2, 3), stride=1), (2, 3, 5, 5, 5)),
])
def test_pooling_output_shape_from_cudnn(x, kw, expected):
    assert D.pooling_output_shape(x, **kw) == expected


def test_pooling_bad():
    with pytest.raises(ValueError, match="mode must be one of"), pytest.warns(DeprecationWarning):
        D.PoolingDescriptor("maxx")
    with pytest.raises(ValueError, match="window must be >= 1"), pytest.warns(DeprecationWarning):
        D.PoolingDescriptor("max", 0)
    with pytest.raises(ValueError, match="pooling takes N, C and 1 to 3 spatial dimensions"):
        old("PoolingDescriptor", "max", 2).output_shape((1, 8))


# --- activation, LRN, op-tensor, reduce-tensor -----------------------------------------------------------

def test_old_activation_descriptor_warns_and_reads_back():
    a = old("ActivationDescriptor", "clipped_relu", 6.0, nan_propagation=True)
    assert a == Activation("clipped_relu", 6.0, nan_propagation=True) and type(a) is Activation
    assert a.mode is capi.cudnnActivationMode_t.CUDNN_ACTIVATION_CLIPPED_RELU and a.coef == 6.0
    assert a.nan_propagation is True
    s = old("ActivationDescriptor", "swish", swish_beta=1.5)
    assert s.swish_beta == 1.5
    with pytest.raises(ValueError, match="mode must be one of"), pytest.warns(DeprecationWarning):
        D.ActivationDescriptor("gelu")


def test_old_lrn_descriptor_warns_reads_back_and_bounds():
    d = old("LRNDescriptor", 7, 2e-4, 0.5, 1.5)
    assert (d.n, d.alpha, d.beta, d.k) == (7, 2e-4, 0.5, 1.5) and type(d) is LRN
    with pytest.raises(ValueError, match="window n"), pytest.warns(DeprecationWarning):
        D.LRNDescriptor(n=17)
    with pytest.raises(ValueError, match="k must be"), pytest.warns(DeprecationWarning):
        D.LRNDescriptor(k=1e-9)


def test_op_tensor_settings_read_back():
    d = D.OpTensor("MUL", "fp64", nan_propagation=True)
    assert d.op is capi.cudnnOpTensorOp_t.CUDNN_OP_TENSOR_MUL
    assert d.compute_dtype is capi.cudnnDataType_t.CUDNN_DATA_DOUBLE
    assert d.nan_propagation is True
    assert repr(d) == "OpTensor('mul', compute_dtype=CUDNN_DATA_DOUBLE, nan_propagation=True)"
    e = D.OpTensor()
    assert (e.op, e.compute_dtype, e.nan_propagation) == (capi.CUDNN_OP_TENSOR_ADD, capi.CUDNN_DATA_FLOAT, False)
    assert D.OpTensor("add", np.float32) == e and hash(D.OpTensor("add", np.float32)) == hash(e)
    assert e.descriptor.value == D.OpTensor().descriptor.value != d.descriptor.value  # shared by settings
    got = (ctypes.c_int(), ctypes.c_int(), ctypes.c_int())
    capi.cudnnGetOpTensorDescriptor(d.descriptor, *(ctypes.byref(v) for v in got))
    assert [v.value for v in got] == [capi.CUDNN_OP_TENSOR_MUL, capi.CUDNN_DATA_DOUBLE, capi.CUDNN_PROPAGATE_NAN]
    with pytest.raises(ValueError, match="op must be one of"):
        D.OpTensor("sub")
    with pytest.raises(TypeError, match="compute_dtype: dtype complex64"):
        D.OpTensor("add", np.complex64)
    with pytest.raises(AttributeError):
        e.op = "mul"


def test_reduce_tensor_settings_read_back():
    d = D.ReduceTensor("amax", indices="flattened", indices_type="uint16")
    assert d.op is capi.cudnnReduceTensorOp_t.CUDNN_REDUCE_TENSOR_AMAX
    assert d.indices is capi.cudnnReduceTensorIndices_t.CUDNN_REDUCE_TENSOR_FLATTENED_INDICES
    assert d.indices_type is capi.cudnnIndicesType_t.CUDNN_16BIT_INDICES
    assert d.compute_dtype is capi.cudnnDataType_t.CUDNN_DATA_FLOAT and d.nan_propagation is False
    assert "ReduceTensor('amax'" in repr(d) and "indices_type=CUDNN_16BIT_INDICES" in repr(d)
    e = D.ReduceTensor("norm2", np.float64, indices=False)
    assert e.indices is capi.cudnnReduceTensorIndices_t.CUDNN_REDUCE_TENSOR_NO_INDICES
    assert D.ReduceTensor("norm2", "float64").descriptor.value == e.descriptor.value != d.descriptor.value
    with pytest.raises(ValueError, match="indices_type must be one of"):
        D.ReduceTensor(indices_type="int32")
    with pytest.raises(TypeError, match="op must be"):
        D.ReduceTensor(op=2.5)


def test_compute_type_is_the_old_spelling_of_compute_dtype():
    with pytest.warns(DeprecationWarning, match="compute_type= is deprecated, use compute_dtype="):
        assert D.OpTensor("add", compute_type=np.float64).compute_dtype is capi.CUDNN_DATA_DOUBLE
    with pytest.warns(DeprecationWarning, match="compute_type= is deprecated, use compute_dtype="):
        assert D.ReduceTensor("add", compute_type="fp64").compute_dtype is capi.CUDNN_DATA_DOUBLE
    with pytest.raises(TypeError, match="both compute_dtype= and its old spelling compute_type="):
        D.OpTensor("add", np.float32, compute_type=np.float64)


def test_old_op_and_reduce_tensor_descriptors_warn_and_build_the_settings_classes():
    d = old("OpTensorDescriptor", "mul", np.float64, nan_propagation=True)
    assert d == D.OpTensor("mul", np.float64, nan_propagation=True) and type(d) is D.OpTensor
    with pytest.raises(ValueError, match="op must be one of"), pytest.warns(DeprecationWarning):
        D.OpTensorDescriptor("sub")
    r = old("ReduceTensorDescriptor", "amax", indices="flattened", indices_type="uint16")
    assert r == D.ReduceTensor("amax", indices="flattened", indices_type="uint16") and type(r) is D.ReduceTensor
    assert old("op_tensor_descriptor", "mul").descriptor.value == D.OpTensor("mul").descriptor.value
    assert old("reduce_tensor_descriptor", "max").descriptor.value == D.ReduceTensor("max").descriptor.value


def test_dropout_needs_an_open_handle():
    class Closed:
        @property
        def ptr(self):
            raise ClosedError("closed handle")
    with pytest.raises(ClosedError):
        old("DropoutDescriptor", Closed(), 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        old("DropoutDescriptor", Closed(), 1.5)


# --- lifetime & caching ----------------------------------------------------------------------------------

ALL = [  # the C descriptor classes (the settings classes share these; the deprecated names make them)
    lambda: D.TensorDescriptor((2, 3)), lambda: D.FilterDescriptor((2, 3, 3)),
    lambda: convolution._ConvolutionDescriptor((0, 0), (1, 1), (1, 1), capi.CUDNN_CROSS_CORRELATION,
                                               capi.CUDNN_DATA_FLOAT, 1, capi.CUDNN_DEFAULT_MATH),
    lambda: pooling._PoolingDescriptor(capi.CUDNN_POOLING_MAX, False, (2, 2), (0, 0), (2, 2)),
    lambda: activation._ActivationDescriptor(capi.CUDNN_ACTIVATION_RELU, False, 0.0, 1.0),
    lambda: lrn._LRNDescriptor(5, 1e-4, 0.75, 2.0),
    lambda: D._OpTensorDescriptor(capi.CUDNN_OP_TENSOR_ADD, capi.CUDNN_DATA_FLOAT, False),
    lambda: D._ReduceTensorDescriptor(capi.CUDNN_REDUCE_TENSOR_ADD, capi.CUDNN_DATA_FLOAT, False,
                                      capi.CUDNN_REDUCE_TENSOR_NO_INDICES, capi.CUDNN_32BIT_INDICES),
]


@pytest.mark.parametrize("make", ALL)
def test_close_is_idempotent_and_closed_raises(make):
    d = make()
    assert not d.closed and d.ptr.value
    d.close()
    d.close()
    assert d.closed
    with pytest.raises(ClosedError):
        d.ptr
    with pytest.raises(ClosedError):
        repr(d) and d.ptr
    assert "closed" in repr(d)


@pytest.mark.parametrize("make", ALL)
def test_a_destroyed_descriptor_pointer_is_nulled(make):
    d = make()
    ptr = d.ptr
    d.close()
    assert ptr.value is None  # a stale holder passes NULL to cuDNN (an error), never a freed descriptor


def test_a_stale_pointer_is_an_error_not_a_use_after_free():
    d = D.TensorDescriptor((2, 3))
    ptr = d.ptr
    del d
    gc.collect()
    with pytest.raises(CudnnBadParamError):
        capi.cudnnGetTensorSizeInBytes(ptr, ctypes.byref(ctypes.c_size_t()))


@pytest.mark.parametrize("make", ALL)
def test_context_manager_and_gc(make):
    with make() as d:
        assert d.ptr.value
    assert d.closed
    finalizer = make()._finalizer  # the object is dropped at once: the finalizer must have run
    gc.collect()
    assert not finalizer.alive


@pytest.mark.parametrize("make", ALL)
def test_repr_shows_the_settings_read_back(make):
    d = make()
    text = repr(d)
    assert text.startswith(type(d).__name__ + "(") and d._shown
    for name in d._shown:
        value = getattr(d, name)
        if value is not None:
            assert f"{name}={getattr(value, 'name', value)}" in text


def test_ndim_comes_from_the_first_sequence_argument():
    assert old("ConvolutionDescriptor", 1, (2, 2, 2)).params(3)[1] == (2, 2, 2)
    assert old("PoolingDescriptor", "max", 2, ndim=np.int64(1)).params(1)[0] == (2,)
    with pytest.raises(ValueError, match="ndim"), pytest.warns(DeprecationWarning):
        D.PoolingDescriptor("max", 2, ndim=True)
    with pytest.raises(ValueError, match="expected 3"), pytest.warns(DeprecationWarning):
        D.PoolingDescriptor("max", (2, 2), ndim=3)


def test_cached_factories_share_and_ignore_close():
    a = D.TensorDescriptor.shared((2, 3, 4, 5), np.float32)
    assert D.TensorDescriptor.shared((2, 3, 4, 5), np.float32) is a
    assert D.TensorDescriptor.shared([2, 3, 4, 5], np.float32).shape == (2, 3, 4, 5)  # unhashable spelling works
    assert D.TensorDescriptor.shared((2, 3, 4, 5), np.float16) is not a
    a.close()
    assert not a.closed  # shared descriptors outlive close()
    assert D.FilterDescriptor.shared((4, 3, 3, 3)) is D.FilterDescriptor.shared((4, 3, 3, 3))
    assert old("convolution_descriptor", 1, 2) == old("convolution_descriptor", 1, 2)
    assert old("convolution_descriptor", 1, 2) != old("convolution_descriptor", 1, 1)
    assert old("pooling_descriptor", "max", 2) == Pooling("max", 2)
    assert old("activation_descriptor", "relu") == Activation("relu")
    assert old("lrn_descriptor") == LRN()
    assert old("op_tensor_descriptor", "add") == old("op_tensor_descriptor", "add")
    assert old("reduce_tensor_descriptor", "max") == old("reduce_tensor_descriptor", "max")


def test_tensor_descriptor_for_array():
    packed = DeviceArray(0x1000, (2, 3, 4, 5), np.float32)
    assert D.TensorDescriptor.for_array(packed) is D.TensorDescriptor.shared((2, 3, 4, 5), np.dtype(np.float32))
    strided = DeviceArray(0x1000, (2, 3), np.float32, strides=(1, 2))
    assert D.TensorDescriptor.for_array(strided).strides == (1, 2)


def test_shared_descriptors_live_in_the_process_wide_caches():
    a = D.TensorDescriptor.shared((3, 3), np.float32)
    pool = Pooling("max", 3)
    pool.descriptor(2)
    listed = caches.info()
    for name in ("descriptors.tensor", "descriptors.pooling"):
        assert listed[name] >= 1
    caches.clear()
    assert D.TensorDescriptor.shared((3, 3), np.float32) is not a
    assert not a.closed  # still referenced here, so still alive
    assert pool.descriptor(2).value  # a Pooling keeps the descriptors it uses


def test_old_clear_cache_warns_and_clears():
    a = D.TensorDescriptor.shared((3, 3), np.float32)
    old("clear_cache")
    assert D.TensorDescriptor.shared((3, 3), np.float32) is not a


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(D._TENSORS, "maxsize", 4)
    caches.clear()
    for n in range(2, 12):
        D.TensorDescriptor.shared((n, n), np.float32)
    assert len(D._TENSORS) == 4


def test_cached_lookup_is_cheap():
    import timeit
    D.TensorDescriptor.shared((8, 3, 32, 32), np.float32)
    per_call = min(timeit.repeat(lambda: D.TensorDescriptor.shared((8, 3, 32, 32), np.float32), number=2000,
                                 repeat=5)) / 2000
    assert per_call < 5e-6  # a dict lookup, not a create/set/destroy (which costs several microseconds)


def test_cudnn_status_errors_still_surface():
    # what only cuDNN checks comes back as the status's exception, naming the function and cuDNN's reason (a zero
    # dimension set through the C layer on a Pythonic descriptor: every cuDNN 9.x refuses it)
    with D.TensorDescriptor((2, 3, 4, 5), np.float32) as d:
        with pytest.raises(CudnnBadParamError, match="cudnnSetTensor4dDescriptor.*BAD_PARAM"):
            capi.cudnnSetTensor4dDescriptor(d.ptr, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 0, 3, 4, 5)


def test_a_layout_needs_four_or_five_dimensions():
    # cuDNN 9.28 refuses a layout for a 2-d tensor, 9.19 takes it: refused here, the same on every version
    with pytest.raises(InvalidValueError, match="4 or 5 dimensions"):
        D.TensorDescriptor((2, 3), np.float32, layout="NHWC")
