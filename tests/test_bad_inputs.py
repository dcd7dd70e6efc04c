"""One table of the inputs found accepted by a hostile user (issue 21), each refused before C with an error that names
the argument and the rule. CPU only: every call either raises before anything needs a GPU or reaches a stand-in handle
whose ``ptr`` raises :class:`Reached` (which fails the row). tests/fuzz/targets.py draws the same families at random
with an oracle; this table pins the cases themselves.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py import capi
from cudnn_py.core import descriptors as D
from cudnn_py.errors import CudnnPyError, InvalidTypeError, InvalidValueError, NoDeviceError
from cudnn_py.core.memory import DeviceArray
from helpers import Reached, StandIn, fake


def x4(dtype=np.float32, shape=(2, 4, 5, 5)):
    return fake(shape, dtype)


X = x4()  # one array the aliasing rows place others over


NAN, INF = float("nan"), float("inf")

#: (id, call(handle), exception class, regex the message must match)
CASES = [
    # set_tensor and fill_ values against the destination dtype's range
    ("set_tensor int8 300", lambda h: cudnn.set_tensor(h, x4(np.int8), 300), InvalidValueError,
     r"value 300 is out of range for int8"),
    ("set_tensor int32 nan", lambda h: cudnn.set_tensor(h, x4(np.int32), NAN), InvalidValueError,
     r"value nan is not a whole number"),
    ("set_tensor uint8 -1", lambda h: cudnn.set_tensor(h, x4(np.uint8), -1), InvalidValueError, r"out of range"),
    ("set_tensor float32 1e40", lambda h: cudnn.set_tensor(h, x4(), 1e40), InvalidValueError,
     r"1e\+40 is out of range for float32"),
    ("set_tensor float16 1e5", lambda h: cudnn.set_tensor(h, x4(np.float16), 1e5), InvalidValueError,
     r"out of range for float16"),
    ("set_tensor int8 2.5", lambda h: cudnn.set_tensor(h, x4(np.int8), 2.5), InvalidValueError, r"whole number"),
    ("set_tensor str", lambda h: cudnn.set_tensor(h, x4(), "one"), InvalidTypeError, r"value must be a real number"),
    # cuDNN's kernel writes non-dense integer tensors wrong (int8: zeros) or refuses them: memsets only
    ("set_tensor int8 slice", lambda h: cudnn.set_tensor(h, fake((2, 3, 2, 2), np.int8, (60, 20, 10, 2)), 7),
     InvalidValueError, r"int8 y must be dense"),
    ("set_tensor int64 7", lambda h: cudnn.set_tensor(h, fake((2, 3), np.int64, (6, 2)), 7), InvalidValueError,
     r"repeated 1-, 2- or 4-byte word"),
    ("fill_ int8 300", lambda h: x4(np.int8).fill_(300), InvalidValueError, r"fill_ value 300 is out of range"),
    ("fill_ float32 1e40", lambda h: x4().fill_(1e40), InvalidValueError, r"out of range for float32"),
    # scaling factors: finite, named
    ("scale_tensor alpha nan", lambda h: cudnn.scale_tensor(h, x4(), alpha=NAN), InvalidValueError,
     r"alpha \(a scaling factor\) must be finite"),
    ("add_tensor beta inf", lambda h: cudnn.add_tensor(h, x4(shape=(1, 4, 1, 1)), x4(), beta=INF),
     InvalidValueError, r"beta \(a scaling factor\) must be finite"),
    ("convolution_forward alpha nan", lambda h: cudnn.convolution_forward(
        h, cudnn.Convolution(padding=1), x4(), fake((3, 4, 3, 3)), alpha=NAN), InvalidValueError, r"alpha \(a scal"),
    ("convolution_forward beta -inf graph", lambda h: cudnn.convolution_forward(
        h, cudnn.Convolution(padding=1), x4(), fake((3, 4, 3, 3)), beta=-INF, engine="graph"), InvalidValueError,
     r"beta \(a scal"),
    ("convolution_bias_activation_forward alpha1= (old spelling) nan", lambda h: pytest.deprecated_call(
        cudnn.convolution_bias_activation_forward, h, cudnn.Convolution(padding=1), x4(), fake((3, 4, 3, 3)),
        fake((1, 3, 1, 1)), alpha1=NAN), InvalidValueError, r"alpha \(a scaling factor\)"),
    ("op_tensor alpha1 inf", lambda h: cudnn.op_tensor(h, "add", x4(), x4(), alpha1=INF), InvalidValueError,
     r"alpha1 \(a scaling factor\)"),
    ("op_tensor alpha2 nan", lambda h: cudnn.op_tensor(h, "mul", x4(), x4(), alpha2=NAN), InvalidValueError,
     r"alpha2 \(a scaling factor\)"),
    ("activation_forward beta nan", lambda h: cudnn.activation_forward(h, cudnn.Activation("relu"), x4(), beta=NAN),
     InvalidValueError, r"beta \(a scaling factor\)"),
    ("activation_backward alpha str", lambda h: cudnn.activation_backward(
        h, cudnn.Activation("relu"), x4(), x4(), x4(), alpha="2"), InvalidTypeError, r"alpha \(a scaling factor\)"),
    ("softmax_forward alpha inf", lambda h: cudnn.softmax_forward(h, x4(), alpha=INF), InvalidValueError,
     r"alpha \(a scal"),
    ("pooling_forward beta nan", lambda h: cudnn.pooling_forward(h, cudnn.Pooling("max", window=2), x4(), beta=NAN),
     InvalidValueError, r"beta \(a scal"),
    ("lrn_forward alpha nan", lambda h: cudnn.lrn_forward(h, cudnn.LRN(), x4(), alpha=NAN), InvalidValueError,
     r"alpha \(a scal"),
    ("transform_tensor beta inf", lambda h: cudnn.transform_tensor(h, x4(), beta=INF), InvalidValueError,
     r"beta \(a scal"),
    ("reduce_tensor alpha nan", lambda h: cudnn.reduce_tensor(h, "add", x4(), alpha=NAN), InvalidValueError,
     r"alpha \(a scal"),
    ("batchnorm_backward beta_param nan", lambda h: cudnn.batchnorm_backward(
        h, x4(), x4(), fake((1, 4, 1, 1)), beta_param=NAN), InvalidValueError, r"beta_param \(a scal"),
    ("spatial_tf_sampler_backward alpha_dgrid inf", lambda h: cudnn.spatial_tf_sampler_backward(
        h, x4(), fake((2, 5, 5, 2)), x4(), alpha_dgrid=INF), InvalidValueError, r"alpha_dgrid \(a scal"),
    # descriptors
    ("filter NCHW_VECT_C INT8x4 C=6", lambda h: D.FilterDescriptor((4, 6, 8, 8), capi.CUDNN_DATA_INT8x4,
                                                                  layout="NCHW_VECT_C"),
     InvalidValueError, r"C \(shape\[1\], here 6\) to be a multiple of 4"),
    ("filter NCHW_VECT_C UINT8x4 C=5", lambda h: D.FilterDescriptor((4, 5, 8, 8), capi.CUDNN_DATA_UINT8x4,
                                                                   layout="NCHW_VECT_C"),
     InvalidValueError, r"multiple of 4"),
    ("filter NCHW_VECT_C INT8x32 C=8", lambda h: D.FilterDescriptor((4, 8, 8, 8), capi.CUDNN_DATA_INT8x32,
                                                                   layout="NCHW_VECT_C"),
     InvalidValueError, r"multiple of 32"),
    ("tensor NCHW_VECT_C float32", lambda h: D.TensorDescriptor((2, 8, 4, 5), np.float32, layout="NCHW_VECT_C"),
     InvalidTypeError, r"NCHW_VECT_C .*dtype must be CUDNN_DATA_INT8x4"),
    ("filter NCHW_VECT_C int8 (not a vector type)", lambda h: D.FilterDescriptor((4, 8, 3, 3), np.int8,
                                                                                layout="NCHW_VECT_C"),
     InvalidTypeError, r"NCHW_VECT_C"),
    ("tensor strides overlap (1,1,1,1)", lambda h: D.TensorDescriptor((2, 3, 4, 5), np.float32, strides=(1, 1, 1, 1)),
     InvalidValueError, r"strides \(1, 1, 1, 1\) make elements of shape \(2, 3, 4, 5\) overlap"),
    ("tensor strides overlap (20,5,1,1)", lambda h: D.TensorDescriptor((2, 3, 4, 5), np.float32,
                                                                       strides=(60, 20, 5, 2)),
     InvalidValueError, r"overlap"),
    ("ReduceTensor add indices", lambda h: cudnn.ReduceTensor("add", indices=True), InvalidValueError,
     r"only the min, max and amax reductions have indices"),
    ("BackendDescriptor TENSOR data_type 9999", lambda h: cudnn.graph.BackendDescriptor("TENSOR", data_type=9999),
     InvalidValueError, r"9999 is not a cudnnDataType_t value"),
    ("BackendDescriptor TENSOR 2**66 elements", lambda h: cudnn.graph.BackendDescriptor(
        "TENSOR", dimensions=[2 ** 22, 2 ** 22, 2 ** 22]), InvalidValueError, r"fewer than 2\*\*63"),
    # aliasing: an output over its input's memory with other strides
    ("softmax y aliases x (other strides)", lambda h: cudnn.softmax_forward(
        h, X, y=DeviceArray(X.ptr, (2, 4, 5, 5), np.float32, (100, 1, 20, 4))), InvalidValueError,
     r"y shares memory with x but is not the same view"),
    ("softmax y overlaps x (offset)", lambda h: cudnn.softmax_forward(
        h, X, y=DeviceArray(X.ptr + 16, (2, 4, 5, 5), np.float32)), InvalidValueError, r"shares memory with x"),
    ("softmax_backward dx aliases dy", lambda h: cudnn.softmax_backward(
        h, fake((2, 4, 5, 5)), DeviceArray(0x90000, (2, 4, 5, 5), np.float32),
        dx=DeviceArray(0x90000, (2, 4, 5, 5), np.float32, (100, 1, 20, 4))), InvalidValueError,
     r"dx shares memory with dy"),
    # sizes
    ("DeviceArray (2**63,)", lambda h: DeviceArray(0x10000, (2 ** 63,), np.uint8), InvalidValueError,
     r"at most 2\*\*63 - 1"),
    ("DeviceArray (2**62, 8)", lambda h: DeviceArray(0x10000, (2 ** 62, 8), np.float32), InvalidValueError,
     r"at most 2\*\*63 - 1"),
    ("empty (2**62, 8)", lambda h: cudnn.empty((2 ** 62, 8), np.float32), InvalidValueError, r"at most 2\*\*63 - 1"),
    ("DeviceArray float strides", lambda h: DeviceArray(0x10000, (4,), np.float32, strides=(2.5,)), InvalidTypeError,
     r"strides must be a sequence of ints"),
    ("DeviceArray float device_id", lambda h: DeviceArray(0x10000, (4,), np.float32, device_id=1.9), InvalidTypeError,
     r"device_id must be a device ordinal"),
    ("DeviceArray NULL data", lambda h: DeviceArray(0, (4,), np.float32), InvalidValueError, r"NULL"),
    ("workspace_limit 2**64", lambda h: cudnn.convolution_forward(
        h, cudnn.Convolution(padding=1), x4(), fake((3, 4, 3, 3)), workspace_limit=2 ** 64), InvalidValueError,
     r"workspace_limit \(bytes\) must be <="),
    ("workspace_limit 1.5", lambda h: cudnn.convolution_forward(
        h, cudnn.Convolution(padding=1), x4(), fake((3, 4, 3, 3)), workspace_limit=1.5), InvalidTypeError,
     r"workspace_limit"),
    ("Workspace cap 2**64", lambda h: cudnn.workspace.Workspace(cap=2 ** 64), InvalidValueError, r"below 2\*\*63"),
    # order: shapes refused before the output is allocated (which would need a GPU here)
    ("op_tensor b does not broadcast", lambda h: cudnn.op_tensor(h, "add", x4(), x4(shape=(2, 4, 5, 6))),
     InvalidValueError, r"b has shape \(2, 4, 5, 6\).*broadcast"),
    ("pooling_forward not a handle", lambda h: cudnn.pooling_forward(x4(), cudnn.Pooling("max", window=2), x4()),
     InvalidTypeError, r"handle must be a cudnn_py.Handle"),
    ("op_tensor not a handle", lambda h: cudnn.op_tensor(None, "add", x4(), x4()), InvalidTypeError,
     r"handle must be a cudnn_py.Handle"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_before_c(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call(StandIn())


def test_the_same_calls_pass_validation_with_good_values():
    """The rows above fail for the bad value alone: with it corrected the call reaches C (the stand-in's ptr)."""
    h = StandIn()
    good = [
        lambda: cudnn.set_tensor(h, x4(np.int8), 127),
        lambda: cudnn.set_tensor(h, x4(np.int32), 3.0),
        lambda: cudnn.set_tensor(h, x4(), NAN),  # NaN is a float value (poisoning)
        lambda: cudnn.set_tensor(h, x4(np.float16), -INF),
        lambda: cudnn.scale_tensor(h, x4(), alpha=2.0, engine="legacy"),
        lambda: cudnn.add_tensor(h, x4(shape=(1, 4, 1, 1)), x4(), beta=1.0, engine="legacy"),
        lambda: cudnn.op_tensor(h, "add", x4(), x4(shape=(1, 4, 1, 1)), c=x4(), alpha1=np.float32(2), engine="legacy"),
        lambda: cudnn.softmax_forward(h, x4(), y=x4()),  # in place: the same view
        lambda: cudnn.softmax_forward(h, X, y=DeviceArray(X.ptr + 200 * 4, (2, 4, 5, 5), np.float32)),  # after x
    ]
    for call in good:
        with pytest.raises(Reached):
            call()
    D.FilterDescriptor((4, 8, 3, 3), capi.CUDNN_DATA_INT8x4, layout="NCHW_VECT_C")
    D.FilterDescriptor((4, 32, 3, 3), capi.CUDNN_DATA_INT8x32, layout="NCHW_VECT_C")
    assert D.TensorDescriptor((2, 3, 4, 5), np.float32, strides=(60, 1, 15, 3)).strides == (60, 1, 15, 3)  # NHWC
    assert D.TensorDescriptor((2, 1, 4, 5), np.float32, strides=(20, 7, 5, 1)).shape == (2, 1, 4, 5)  # unit dim
    cudnn.ReduceTensor("max", indices=True)
    DeviceArray(0x10000, (2 ** 40,), np.float32)
    cudnn.graph.BackendDescriptor("TENSOR", dimensions=[2 ** 20, 2 ** 20, 2 ** 20], data_type=capi.CUDNN_DATA_FLOAT)


class _CAI:
    def __init__(self, **over):
        host = np.zeros(8, np.float32)
        self._keep = host
        self.__cuda_array_interface__ = {"shape": (8,), "typestr": "<f4", "data": (host.ctypes.data, False),
                                         "strides": None, "version": 3, **over}


@pytest.mark.parametrize("over,exc,pattern", [
    ({"data": (0, False)}, InvalidValueError, r"NULL"),
    ({"typestr": ">f4"}, InvalidTypeError, r"typestr"),
    ({"typestr": "nonsense"}, InvalidTypeError, r"typestr"),
    ({"shape": (2, -4)}, InvalidValueError, r"shape"),
    ({"strides": (-4,)}, InvalidValueError, r"non-negative multiples"),
    ({"strides": (2,)}, InvalidValueError, r"non-negative multiples of the item size 4"),
    ({"shape": (4, 2), "strides": (4, 4)}, InvalidValueError, r"overlap"),
    ({"shape": (4, 2), "strides": (0, 4)}, InvalidValueError, r"overlap"),
    ({"data": "0x1000"}, InvalidValueError, r"data must be"),
    ({"mask": object()}, InvalidValueError, r"mask"),
    ({"shape": (2 ** 62, 8)}, InvalidValueError, r"2\*\*63"),
], ids=["null", "big-endian", "bad-typestr", "negative-dim", "negative-stride", "partial-element-stride",
        "overlap", "zero-stride", "data-not-tuple", "mask", "huge"])
def test_cuda_array_interface_refused_before_any_driver_call(over, exc, pattern):
    with pytest.raises(exc, match=pattern):
        cudnn.as_array(_CAI(**over))


def test_cuda_array_interface_host_pointer_is_a_cudnn_py_error():
    """A well-formed interface over host memory: refused as host memory where a driver runs, and as NoDeviceError
    where none does (it was cuda.pathfinder's DynamicLibNotFoundError)."""
    with pytest.raises(CudnnPyError) as e:
        cudnn.as_array(_CAI())
    if isinstance(e.value, NoDeviceError):
        return
    # with a driver: host memory, or the driver's refusal to describe the pointer, named as the array's problem
    assert isinstance(e.value, (TypeError, ValueError)) and "device array" in str(e.value), repr(e.value)


def test_scaling_and_element_value_helpers():
    from cudnn_py.core.args import element_value, scaling
    assert scaling(alpha=1, beta=np.float32(0.5)) == (1.0, 0.5)
    for bad in (NAN, INF, -INF, True, None, "1", 10 ** 400, complex(1, 0)):
        with pytest.raises((InvalidValueError, InvalidTypeError), match=r"beta \(a scaling factor\)"):
            scaling(alpha=1.0, beta=bad)
    assert element_value(-128, np.int8, "v")[0] == -128
    assert element_value(2 ** 63 - 1, np.int64, "v")[0] == 2 ** 63 - 1
    assert element_value(65519.0, np.float16, "v")[0] == 65504  # rounds to the largest half, not to infinity
    assert element_value(True, np.bool_, "v")[0]
    import ml_dtypes
    with pytest.raises(InvalidValueError, match="no infinity"):
        element_value(INF, ml_dtypes.float8_e4m3fn, "v")
    with pytest.raises(InvalidValueError, match="out of range for int64"):
        element_value(2 ** 63, np.int64, "v")
    with pytest.raises(InvalidValueError, match="bool"):
        element_value(2, np.bool_, "v")


def test_scalars_refuse_a_factor_that_overflows_float():
    """alpha = 1e39 is a finite double but infinite as the float cuDNN reads for float32 data."""
    from cudnn_py.ops._common import scalars
    with pytest.raises(InvalidValueError, match="overflow the single-precision float"):
        scalars(np.float32, 1e39, 0.0)
    assert ctypes.cast(scalars(np.float64, 1e39, 0.0)[0], ctypes.POINTER(ctypes.c_double)).contents.value == 1e39


@pytest.mark.gpu
@pytest.mark.parametrize("bad", ["bias", "z"])
def test_conv_bias_activation_checks_bias_and_z_before_allocating_y(handle, rng, monkeypatch, bad):
    """The legacy fused call refuses a bias of the wrong size or a z unlike y without allocating y first."""
    from cudnn_py.ops import conv_calls

    def no_allocation(*a, **k):
        raise AssertionError("y was allocated before the checks")
    conv = cudnn.Convolution(padding=1)
    x, w = (cudnn.to_device(rng.standard_normal(s).astype(np.float32)) for s in ((2, 4, 6, 6), (8, 4, 3, 3)))
    bias = cudnn.to_device(np.zeros(8 if bad == "z" else 5, np.float32))
    z = cudnn.to_device(np.zeros((2, 8, 6, 5) if bad == "z" else (2, 8, 6, 6), np.float32))
    cudnn.convolution_bias_activation_forward(handle, conv, x, w, cudnn.to_device(np.zeros(8, np.float32)),
                                              engine="legacy")  # the plan is cached: the next call allocates only y
    monkeypatch.setattr(conv_calls, "new_output", no_allocation)
    words = "bias must be a contiguous array of 8" if bad == "bias" else "z must look like y"
    with pytest.raises(InvalidValueError, match=words):
        cudnn.convolution_bias_activation_forward(handle, conv, x, w, bias, z=z, beta=1.0, engine="legacy")
