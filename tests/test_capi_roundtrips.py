"""Create / set / get through the raw C layer against the real library (no GPU needed)."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_double, c_int

import pytest

from cudnn_py.capi import *  # noqa: F403

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the legacy calls, on purpose


def ints(*v):
    return (c_int * len(v))(*v)


def out_ints(n):
    return (c_int * n)()


@pytest.fixture
def make():
    made = []

    def make(kind):
        d = globals()[f"cudnn{kind}Descriptor_t"]()
        globals()[f"cudnnCreate{kind}Descriptor"](byref(d))
        made.append((kind, d))
        return d
    yield make
    for kind, d in reversed(made):
        globals()[f"cudnnDestroy{kind}Descriptor"](d)


def test_tensor_nd_with_strides(make):
    d = make("Tensor")
    dims, strides = (2, 3, 4, 5, 6), (360, 1, 90, 18, 3)   # NDHWC: channels innermost
    cudnnSetTensorNdDescriptor(d, CUDNN_DATA_HALF, 5, ints(*dims), ints(*strides))
    dt, nb, gd, gs = c_int(), c_int(), out_ints(8), out_ints(8)
    cudnnGetTensorNdDescriptor(d, 8, byref(dt), byref(nb), gd, gs)
    assert (dt.value, nb.value) == (CUDNN_DATA_HALF, 5)
    assert tuple(gd[:5]) == dims and tuple(gs[:5]) == strides
    size = ctypes.c_size_t()
    cudnnGetTensorSizeInBytes(d, byref(size))
    assert size.value == 2 * 360 * 2  # half precision


def test_tensor_4d_nhwc(make):
    d = make("Tensor")
    cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 2, 3, 4, 5)
    v = [c_int() for _ in range(9)]
    cudnnGetTensor4dDescriptor(d, *map(byref, v))
    assert [x.value for x in v] == [CUDNN_DATA_FLOAT, 2, 3, 4, 5, 60, 1, 15, 3]


def test_filter_4d_and_nd(make):
    f = make("Filter")
    cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 64, 3, 3, 3)
    v = [c_int() for _ in range(6)]
    cudnnGetFilter4dDescriptor(f, *map(byref, v))
    assert [x.value for x in v] == [CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 64, 3, 3, 3]
    g = make("Filter")
    cudnnSetFilterNdDescriptor(g, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, 5, ints(8, 4, 3, 3, 3))
    dt, fmt, nb, dims = c_int(), c_int(), c_int(), out_ints(8)
    cudnnGetFilterNdDescriptor(g, 8, byref(dt), byref(fmt), byref(nb), dims)
    assert (dt.value, fmt.value, nb.value, tuple(dims[:5])) == (CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, 5, (8, 4, 3, 3, 3))


def test_convolution_2d_groups_math(make):
    c = make("Convolution")
    cudnnSetConvolution2dDescriptor(c, 1, 2, 3, 1, 2, 2, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT)
    cudnnSetConvolutionGroupCount(c, 4)
    cudnnSetConvolutionMathType(c, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
    v = [c_int() for _ in range(8)]
    cudnnGetConvolution2dDescriptor(c, *map(byref, v))
    assert [x.value for x in v] == [1, 2, 3, 1, 2, 2, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT]
    groups, math = c_int(), c_int()
    cudnnGetConvolutionGroupCount(c, byref(groups))
    cudnnGetConvolutionMathType(c, byref(math))
    assert (groups.value, math.value) == (4, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)


def test_convolution_nd(make):
    c = make("Convolution")
    cudnnSetConvolutionNdDescriptor(c, 3, ints(1, 0, 2), ints(1, 2, 1), ints(1, 1, 2), CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_FLOAT)
    n, pad, stride, dil, mode, dt = c_int(), out_ints(3), out_ints(3), out_ints(3), c_int(), c_int()
    cudnnGetConvolutionNdDescriptor(c, 3, byref(n), pad, stride, dil, byref(mode), byref(dt))
    assert (n.value, tuple(pad), tuple(stride), tuple(dil)) == (3, (1, 0, 2), (1, 2, 1), (1, 1, 2))
    assert (mode.value, dt.value) == (CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)


def _expected(size, k, pad, stride, dil):
    return (size + 2 * pad - ((k - 1) * dil + 1)) // stride + 1


@pytest.mark.parametrize("n,c,h,w,k,r,s,pad,stride,dil", [
    (1, 3, 224, 224, 64, 3, 3, 1, 1, 1), (8, 16, 31, 17, 32, 5, 3, 2, 2, 1), (2, 4, 20, 20, 8, 3, 3, 0, 3, 2),
    (1, 1, 7, 9, 1, 7, 1, 0, 1, 1)])
def test_forward_output_dim_2d(make, n, c, h, w, k, r, s, pad, stride, dil):
    x, f, conv = make("Tensor"), make("Filter"), make("Convolution")
    cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w)
    cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, s)
    cudnnSetConvolution2dDescriptor(conv, pad, pad, stride, stride, dil, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)
    out = [c_int() for _ in range(4)]
    cudnnGetConvolution2dForwardOutputDim(conv, x, f, *map(byref, out))
    assert [o.value for o in out] == [n, k, _expected(h, r, pad, stride, dil), _expected(w, s, pad, stride, dil)]


def test_forward_output_dim_nd(make):
    x, f, conv = make("Tensor"), make("Filter"), make("Convolution")
    cudnnSetTensorNdDescriptorEx(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 5, ints(2, 4, 9, 10, 11))
    cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, ints(6, 4, 3, 3, 3))
    cudnnSetConvolutionNdDescriptor(conv, 3, ints(1, 0, 1), ints(2, 1, 1), ints(1, 1, 2), CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_FLOAT)
    out = out_ints(5)
    cudnnGetConvolutionNdForwardOutputDim(conv, x, f, 5, out)
    assert tuple(out) == (2, 6, _expected(9, 3, 1, 2, 1), _expected(10, 3, 0, 1, 1), _expected(11, 3, 1, 1, 2))


def test_pooling_2d_nd_and_output_dim(make):
    p = make("Pooling")
    cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 3, 2, 1, 0, 2, 1)
    v = [c_int() for _ in range(8)]
    cudnnGetPooling2dDescriptor(p, *map(byref, v))
    assert [x.value for x in v] == [CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 3, 2, 1, 0, 2, 1]
    q = make("Pooling")
    cudnnSetPoolingNdDescriptor(q, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN, 3,
                                ints(2, 2, 2), ints(0, 1, 0), ints(2, 2, 1))
    mode, nan, nb, win, pad, st = c_int(), c_int(), c_int(), out_ints(3), out_ints(3), out_ints(3)
    cudnnGetPoolingNdDescriptor(q, 3, byref(mode), byref(nan), byref(nb), win, pad, st)
    assert (mode.value, nb.value, tuple(win), tuple(pad), tuple(st)) == (
        CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, 3, (2, 2, 2), (0, 1, 0), (2, 2, 1))
    x = make("Tensor")
    cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 10, 7)
    out = [c_int() for _ in range(4)]
    cudnnGetPooling2dForwardOutputDim(p, x, *map(byref, out))
    assert [o.value for o in out] == [2, 3, (10 + 2 - 3) // 2 + 1, (7 + 0 - 2) // 1 + 1]


def test_activation(make):
    a = make("Activation")
    cudnnSetActivationDescriptor(a, CUDNN_ACTIVATION_CLIPPED_RELU, CUDNN_PROPAGATE_NAN, 6.0)
    mode, nan, coef = c_int(), c_int(), c_double()
    cudnnGetActivationDescriptor(a, byref(mode), byref(nan), byref(coef))
    assert (mode.value, nan.value, coef.value) == (CUDNN_ACTIVATION_CLIPPED_RELU, CUDNN_PROPAGATE_NAN, 6.0)
    cudnnSetActivationDescriptorSwishBeta(a, 1.5)
    beta = c_double()
    cudnnGetActivationDescriptorSwishBeta(a, byref(beta))
    assert beta.value == 1.5
