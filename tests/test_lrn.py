"""LRN and divisive normalisation: reference self-checks, descriptor, bad input (CPU); forward/backward on the GPU."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.core import descriptors
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.ops.lrn import (LRN, divisive_normalization_backward, divisive_normalization_forward, lrn_backward,
                              lrn_forward)
from reference import lrn as ref
from reference.tensor_ops import assert_close
from helpers import NoCallHandle, fake, numeric_gradient

PARAMS = [dict(n=5, alpha=1e-4, beta=0.75, k=2.0), dict(n=3, alpha=0.8, beta=0.6, k=1.5),
          dict(n=4, alpha=2.0, beta=1.1, k=1.0), dict(n=1, alpha=0.5, beta=0.5, k=3.0)]




def LRNDescriptor(*args, **kw):
    """The deprecated cudnn_py.core.descriptors.LRNDescriptor: it warns, then makes the settings object of the
    concept."""
    with pytest.warns(DeprecationWarning, match="LRNDescriptor is deprecated, use cudnn_py.LRN"):
        return descriptors.LRNDescriptor(*args, **kw)


# ---------------------------------------------------------------- CPU

@pytest.mark.parametrize("p", PARAMS)
def test_reference_backwards_are_the_gradients(rng, p):
    x, m, dy = (rng.standard_normal((2, 6, 3, 4)) for _ in range(3))
    args = (p["n"], p["alpha"], p["beta"], p["k"])
    np.testing.assert_allclose(ref.lrn_backward(x, dy, *args), numeric_gradient(lambda: (ref.lrn_forward(x, *args) * dy).sum(), x),
                               atol=1e-7)
    dx, dm = ref.divnorm_backward(x, m, dy, *args)
    np.testing.assert_allclose(dm, numeric_gradient(lambda: (ref.divnorm_forward(x, m, *args) * dy).sum(), m), atol=1e-7)
    if p["n"] % 2:  # for even n cuDNN's dx (and so the reference's) is not the exact gradient: see reference.lrn
        np.testing.assert_allclose(dx, numeric_gradient(lambda: (ref.divnorm_forward(x, m, *args) * dy).sum(), x), atol=1e-7)
        dx0, _ = ref.divnorm_backward(x, None, dy, *args)
        np.testing.assert_allclose(dx0, numeric_gradient(lambda: (ref.divnorm_forward(x, None, *args) * dy).sum(), x), atol=1e-7)


def test_reference_lrn_matches_the_written_out_formula(rng):
    x = rng.standard_normal((1, 7, 2, 3))
    y = np.empty_like(x)
    for c in range(7):  # n = 4: (n - 1) // 2 = 1 channel behind, 2 ahead
        lo, hi = max(0, c - 1), min(7, c + 3)
        y[:, c] = x[:, c] / (1.5 + 0.3 / 4 * (x[:, lo:hi] ** 2).sum(axis=1)) ** 0.7
    np.testing.assert_allclose(ref.lrn_forward(x, 4, 0.3, 0.7, 1.5), y)


@pytest.mark.parametrize("p", PARAMS)
def test_descriptor_round_trip(p):
    lrn = LRN(**p)
    n, a, b, k = ctypes.c_uint(), ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
    capi.cudnnGetLRNDescriptor(lrn.descriptor, *(ctypes.byref(v) for v in (n, a, b, k)))
    assert (n.value, a.value, b.value, k.value) == (p["n"], p["alpha"], p["beta"], p["k"])
    assert LRN(**p) == lrn and hash(LRN(**p)) == hash(lrn)


@pytest.mark.parametrize("bad,exc,words", [
    (dict(n=0), InvalidValueError, "LRN window n must be >= 1"),
    (dict(n=17), InvalidValueError, "LRN window n must be <= 16"),
    (dict(n=2.0), InvalidTypeError, "LRN window n must be an int"),
    (dict(k=0.0), InvalidValueError, "LRN k must be >= 1e-05"),
    (dict(beta=0.001), InvalidValueError, "LRN beta must be >= 0.01"),
    (dict(alpha="1"), InvalidTypeError, "LRN alpha"),
])
def test_lrn_parameters_outside_cudnn_limits(bad, exc, words):
    with pytest.raises(exc, match=words):
        LRN(**bad)


def test_settings_read_back_and_shared_descriptor():
    lrn = LRN(7, 2e-4, 0.5, 1)
    assert (lrn.n, lrn.alpha, lrn.beta, lrn.k) == (7, 2e-4, 0.5, 1.0) and type(lrn.k) is float
    assert repr(lrn) == "LRN(n=7, alpha=0.0002, beta=0.5, k=1.0)"
    assert LRN(7, 2e-4, 0.5, 1.0).descriptor.value == lrn.descriptor.value
    assert LRN().descriptor.value != lrn.descriptor.value
    with pytest.raises(AttributeError):
        lrn.n = 3


def test_old_names_warn_and_still_work():
    d = LRNDescriptor(7, 2e-4, 0.5, 1.5)
    assert d == LRN(7, 2e-4, 0.5, 1.5) and d.descriptor.value
    with pytest.warns(DeprecationWarning, match="lrn_descriptor is deprecated"):
        shared = descriptors.lrn_descriptor()
    assert shared.descriptor.value == LRN().descriptor.value  # the one shared descriptor
    with pytest.raises(ValueError, match="4-D or 5-D"):  # still taken by the calls
        lrn_forward(NoCallHandle(), d, fake((2, 3, 4)))


@pytest.mark.parametrize("call,exc,words", [
    (lambda h: lrn_forward(h, LRN(), fake((2, 3, 4))), ValueError, "4-D or 5-D"),
    (lambda h: lrn_forward(h, LRN(), fake((2, 3, 4, 4)), y=fake((2, 3, 4, 5))), ValueError, "y has shape"),
    (lambda h: lrn_forward(h, {"n": 5}, fake((2, 3, 4, 4))), TypeError, "LRN"),
    (lambda h: lrn_forward(h, LRN(), np.ones((2, 3, 4, 4), np.float32)), TypeError, "to_device"),
    (lambda h: lrn_backward(h, LRN(), fake((2, 3, 4, 4)), fake((2, 3, 4, 4), np.float16),
                            fake((2, 3, 4, 4))), TypeError, "y has dtype"),
    (lambda h: lrn_backward(h, LRN(), fake((2, 3, 4, 4)), fake((2, 3, 4, 4)),
                            fake((2, 3, 4, 3))), ValueError, "dy has shape"),
    (lambda h: divisive_normalization_forward(h, LRN(), fake((2, 3, 4, 4)), fake((2, 3, 4, 3))),
     ValueError, "means has shape"),
    (lambda h: divisive_normalization_forward(h, LRN(), fake((2, 3, 4, 4)),
                                              fake((2, 3, 4, 4), strides=(48, 1, 12, 3))), ValueError, "strides"),
    (lambda h: divisive_normalization_backward(h, LRN(), fake((2, 3, 4, 4)), fake((2, 3, 4, 4)),
                                               dx=fake((2, 3, 4, 4)), dmeans=fake((2, 3, 4, 4),
                                                                                              strides=(48, 1, 12, 3))),
     ValueError, "dmeans"),
])
def test_bad_input_is_rejected_before_c(call, exc, words):
    with pytest.raises(exc, match=words):
        call(NoCallHandle())


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("p", PARAMS)
@pytest.mark.parametrize("shape", [(2, 9, 5, 4), (2, 7, 3, 4, 2)])
def test_lrn_forward_backward_match_reference(handle, rng, dtype, p, shape):
    import cudnn_py as cudnn
    lrn = LRN(**p)
    args = (p["n"], p["alpha"], p["beta"], p["k"])
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    xd = cudnn.to_device(x)
    y = lrn_forward(handle, lrn, xd, y=cudnn.to_device(np.full(shape, np.nan, dtype)))
    y_ref = ref.lrn_forward(x, *args)
    assert_close(y.to_numpy(), y_ref, dtype)
    dx = lrn_backward(handle, lrn, xd, cudnn.to_device(y_ref.astype(dtype)), cudnn.to_device(dy),
                      dx=cudnn.to_device(np.full(shape, np.nan, dtype)))
    assert_close(dx.to_numpy(), ref.lrn_backward(x, dy, *args), dtype, tol_scale=3)


def _divnorm_case(rng, with_means):
    import cudnn_py as cudnn
    shape = (2, 3, 6, 5)
    x, dy = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    m = (rng.standard_normal(shape) * 0.5).astype(np.float32) if with_means else None
    return x, dy, m, cudnn.to_device(x), (cudnn.to_device(m) if with_means else None), np.full(shape, np.nan, np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("with_means", [False, True])
@pytest.mark.parametrize("p", PARAMS[:3])
def test_divisive_normalization_forward_matches_reference(handle, rng, with_means, p):
    import cudnn_py as cudnn
    x, _, m, xd, md, nan = _divnorm_case(rng, with_means)
    y = divisive_normalization_forward(handle, LRN(**p), xd, md, y=cudnn.to_device(nan))
    assert_close(y.to_numpy(), ref.divnorm_forward(x, m, p["n"], p["alpha"], p["beta"], p["k"]), np.float32,
                 tol_scale=3)


@pytest.mark.gpu
@pytest.mark.parametrize("with_means", [False, True])
@pytest.mark.parametrize("p", PARAMS[:3])
def test_divisive_normalization_backward_matches_reference(handle, rng, with_means, p):
    import cudnn_py as cudnn
    x, dy, m, xd, md, nan = _divnorm_case(rng, with_means)
    dx, dm = divisive_normalization_backward(handle, LRN(**p), xd, cudnn.to_device(dy), md, dx=cudnn.to_device(nan),
                                             dmeans=cudnn.to_device(nan) if with_means else None)
    dx_ref, dm_ref = ref.divnorm_backward(x, m, dy, p["n"], p["alpha"], p["beta"], p["k"])
    if with_means:  # printed on failure: enough to fit another formula offline
        print("dx[0,0,0]", dx.to_numpy()[0, 0, 0], "dmeans[0,0,0]", dm.to_numpy()[0, 0, 0])
        assert_close(dm.to_numpy(), dm_ref, np.float32, tol_scale=3)
    else:
        assert dm is None
    assert_close(dx.to_numpy(), dx_ref, np.float32, tol_scale=3)


@pytest.mark.gpu
@pytest.mark.parametrize("given", ["dx", "dmeans"])
def test_divisive_normalization_backward_allocates_the_missing_output_in_the_given_ones_layout(handle, rng, given):
    import cudnn_py as cudnn
    x, dy, m, _, _, _ = _divnorm_case(rng, True)
    channels_last = (90, 1, 15, 3)  # (2, 3, 6, 5) stored N, H, W, C: cuDNN runs the backward in one layout

    def nhwc(a):
        buf = cudnn.to_device(np.ascontiguousarray(a.transpose(0, 2, 3, 1)))
        return cudnn.DeviceArray(buf.ptr, x.shape, a.dtype, channels_last, device_id=buf.device_id, owner=buf)
    out = nhwc(np.full(x.shape, np.nan, np.float32))  # poisoned
    dx, dm = divisive_normalization_backward(handle, LRN(**PARAMS[1]), nhwc(x), nhwc(dy), nhwc(m), **{given: out})
    assert dx.strides == dm.strides == channels_last  # one descriptor describes both
    dx_ref, dm_ref = ref.divnorm_backward(x, m, dy, PARAMS[1]["n"], PARAMS[1]["alpha"], PARAMS[1]["beta"],
                                          PARAMS[1]["k"])
    assert_close(dx.to_numpy(), dx_ref, np.float32, tol_scale=3)
    assert_close(dm.to_numpy(), dm_ref, np.float32, tol_scale=3)


@pytest.mark.gpu
def test_alpha_beta_allocation_core_descriptor_and_raw_capi(handle, rng):
    import cudnn_py as cudnn
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    y0 = rng.standard_normal(x.shape).astype(np.float32)
    xd = cudnn.to_device(x)
    y = lrn_forward(handle, LRN(), xd)  # defaults n=5, alpha=1e-4, beta=0.75, k=2; allocated
    assert_close(y.to_numpy(), ref.lrn_forward(x, 5, 1e-4, 0.75, 2.0), np.float32)
    y2 = lrn_forward(handle, LRNDescriptor(3, 0.5, 0.8, 1.2), xd, y=cudnn.to_device(y0), alpha=0.5, beta=1.5)
    assert_close(y2.to_numpy(), 0.5 * ref.lrn_forward(x, 3, 0.5, 0.8, 1.2) + 1.5 * y0, np.float32)

    ld, td = capi.cudnnLRNDescriptor_t(), capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateLRNDescriptor(ctypes.byref(ld))
    capi.cudnnSetLRNDescriptor(ld, 5, 1e-4, 0.75, 1.0)
    capi.cudnnCreateTensorDescriptor(ctypes.byref(td))
    capi.cudnnSetTensor4dDescriptor(td, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, *x.shape)
    yraw = cudnn.to_device(np.full(x.shape, np.nan, np.float32))
    capi.cudnnLRNCrossChannelForward(handle.ptr, ld, capi.CUDNN_LRN_CROSS_CHANNEL_DIM1,
                                     ctypes.byref(ctypes.c_float(1.0)), td, xd.ptr,
                                     ctypes.byref(ctypes.c_float(0.0)), td, yraw.ptr)
    assert_close(yraw.to_numpy(), ref.lrn_forward(x, 5, 1e-4, 0.75, 1.0), np.float32)
    capi.cudnnDestroyTensorDescriptor(td)
    capi.cudnnDestroyLRNDescriptor(ld)
