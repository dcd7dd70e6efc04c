"""Softmax: reference self-check and bad input (CPU); every algo and mode, forward and backward, on the GPU."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.ops.softmax import softmax_backward, softmax_forward
from reference import softmax as ref
from reference.tensor_ops import assert_close
from helpers import NoCallHandle, fake

SHAPES = [(4, 10), (2, 5, 3, 4), (2, 3, 2, 3, 4)]


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("algo", ["accurate", "log"])
@pytest.mark.parametrize("mode", ["instance", "channel"])
def test_reference_backward_is_the_gradient(rng, algo, mode):
    x = rng.standard_normal((2, 3, 2, 2))
    dy = rng.standard_normal(x.shape)
    y = ref.forward(x, algo, mode)
    fd = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += 1e-6
        xm[i] -= 1e-6
        fd[i] = ((ref.forward(xp, algo, mode) - ref.forward(xm, algo, mode)) * dy).sum() / 2e-6
    np.testing.assert_allclose(ref.backward(y, dy, algo, mode), fd, atol=1e-7)
    total = np.exp(y).sum(axis=(1,) if mode == "channel" else (1, 2, 3)) if algo == "log" else None
    if total is not None:
        np.testing.assert_allclose(total, 1.0)


@pytest.mark.parametrize("call,exc,words", [
    (lambda h: softmax_forward(h, fake((5,))), ValueError, "N and C"),
    (lambda h: softmax_forward(h, fake((2, 3)), algo="sparse"), ValueError, "softmax algo"),
    (lambda h: softmax_forward(h, fake((2, 3)), mode="spatial"), ValueError, "softmax mode"),
    (lambda h: softmax_forward(h, fake((2, 3)), y=fake((3, 2))), ValueError, "y has shape"),
    (lambda h: softmax_forward(h, fake((2, 3), np.int32)), TypeError, "float"),
    (lambda h: softmax_forward(h, np.ones((2, 3), np.float32)), TypeError, "to_device"),
    (lambda h: softmax_forward(h, fake((2, 3, 4, 5, 6), strides=(360, 120, 30, 1, 5))), ValueError, "packed"),
    (lambda h: softmax_backward(h, fake((2, 3)), fake((2, 3), np.float16)), TypeError, "dy has dtype"),
    (lambda h: softmax_backward(h, fake((2, 3)), fake((2, 3)), dx=fake((2, 4))), ValueError,
     "dx has shape"),
])
def test_bad_input_is_rejected_before_c(call, exc, words):
    with pytest.raises(exc, match=words):
        call(NoCallHandle())


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("algo", ["fast", "accurate", "log"])
@pytest.mark.parametrize("mode", ["instance", "channel"])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_backward_match_reference(handle, rng, dtype, algo, mode, shape):
    import cudnn_py as cudnn
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    y = softmax_forward(handle, cudnn.to_device(x), y=cudnn.to_device(np.full(shape, np.nan, dtype)), algo=algo, mode=mode)
    y_ref = ref.forward(x, algo, mode)
    assert_close(y.to_numpy(), y_ref, dtype)
    # backward from the exact forward output, so only the backward's own error is measured
    yin = y_ref.astype(dtype)
    dx = softmax_backward(handle, cudnn.to_device(yin), cudnn.to_device(dy),
                          dx=cudnn.to_device(np.full(shape, np.nan, dtype)), algo=algo, mode=mode)
    assert_close(dx.to_numpy(), ref.backward(yin, dy, algo, mode), dtype)


@pytest.mark.gpu
def test_accurate_survives_large_inputs_alpha_beta_and_allocation(handle, rng):
    import cudnn_py as cudnn
    x = (rng.standard_normal((3, 7, 2, 2)) * 30 + 200).astype(np.float32)  # exp would overflow without the max
    y = softmax_forward(handle, cudnn.to_device(x))  # accurate, channel, allocated
    assert_close(y.to_numpy(), ref.forward(x, "accurate", "channel"), np.float32)
    y0 = rng.standard_normal(x.shape).astype(np.float32)
    y2 = softmax_forward(handle, cudnn.to_device(x), y=cudnn.to_device(y0), algo="log", mode="instance",
                         alpha=-1.0, beta=3.0)
    assert_close(y2.to_numpy(), -ref.forward(x, "log", "instance") + 3.0 * y0, np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx0 = rng.standard_normal(x.shape).astype(np.float32)
    p = ref.forward(x, "accurate", "channel").astype(np.float32)
    dx = softmax_backward(handle, cudnn.to_device(p), cudnn.to_device(dy), dx=cudnn.to_device(dx0), alpha=0.5, beta=2.0)
    assert_close(dx.to_numpy(), 0.5 * ref.backward(p, dy, "accurate", "channel") + 2.0 * dx0, np.float32)


@pytest.mark.gpu
def test_raw_capi_path(handle, rng):
    import cudnn_py as cudnn
    x = rng.standard_normal((4, 10, 1, 1)).astype(np.float32)
    xd, yd = cudnn.to_device(x), cudnn.to_device(np.full(x.shape, np.nan, np.float32))
    td = capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateTensorDescriptor(ctypes.byref(td))
    capi.cudnnSetTensor4dDescriptor(td, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, *x.shape)
    capi.cudnnSoftmaxForward(handle.ptr, capi.CUDNN_SOFTMAX_ACCURATE, capi.CUDNN_SOFTMAX_MODE_CHANNEL,
                             ctypes.byref(ctypes.c_float(1.0)), td, xd.ptr, ctypes.byref(ctypes.c_float(0.0)), td, yd.ptr)
    assert_close(yd.to_numpy(), ref.forward(x, "accurate", "channel"), np.float32)
    capi.cudnnDestroyTensorDescriptor(td)
