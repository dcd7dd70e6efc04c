"""Dropout: reserve sizes and bad input (CPU); masks statistically, reproducibility by seed and by
restored states, backward reusing the stored mask (GPU)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cudnn_py import capi, descriptors
from cudnn_py.descriptors import Descriptor
from cudnn_py.errors import ClosedError, InvalidTypeError, InvalidValueError
from cudnn_py.ops.dropout import (
    Dropout, DropoutOutputs, dropout_backward, dropout_forward, dropout_reserve_size, dropout_states_size,
)
from helpers import NoCallHandle, fake


def cpu_dropout() -> Dropout:
    """A Dropout whose descriptor exists but was never set (no GPU needed): enough to test validation."""
    d = object.__new__(Dropout)
    Descriptor.__init__(d)  # creates the C descriptor (and its finalizer) only
    d._handle = NoCallHandle()
    return d


class ClosedHandle:
    """A closed Handle: reading its ``ptr`` raises, as Handle's does."""
    @property
    def ptr(self):
        raise ClosedError("this Handle is closed")


# ---------------------------------------------------------------- CPU


def test_reserve_size_from_cudnn_grows_with_the_tensor():
    small = dropout_reserve_size((2, 3, 4, 5))
    assert small >= 2 * 3 * 4 * 5 // 8  # at least one bit per element
    assert dropout_reserve_size((4, 3, 4, 5)) > small
    assert dropout_reserve_size(fake((2, 3, 4, 5))) == small
    with pytest.raises(ValueError, match="non-empty"):
        dropout_reserve_size((2, 0, 3))


H = NoCallHandle()


def test_lifetime_is_the_descriptors_one():
    d = cpu_dropout()
    ptr = d.ptr
    assert ptr.value and not d.closed
    with d:
        pass
    assert d.closed and ptr.value is None  # destroyed by the shared finalizer; a stale holder passes NULL
    with pytest.raises(ClosedError):
        d.ptr
    assert repr(d) == "<Dropout closed>"
    finalizer = cpu_dropout()._finalizer  # dropped at once: the garbage collector destroyed it
    assert not finalizer.alive


@pytest.mark.parametrize("kw,exc,words", [
    (dict(p="0.5"), InvalidTypeError, "dropout probability p must be a real number"),
    (dict(p=float("nan")), InvalidValueError, "dropout probability p must be finite"),
    (dict(seed=1.0), InvalidTypeError, "seed must be an int"),
    (dict(seed=True), InvalidTypeError, "seed"),
])
def test_validation_names_the_parameter(kw, exc, words):
    with pytest.raises(exc, match=words):
        Dropout(H, **kw)


def test_handle_checked_after_the_settings():
    with pytest.raises(InvalidTypeError, match="handle must be a cudnn_py.Handle"):
        Dropout(fake((4,)), 0.5)
    with pytest.raises(ClosedError):
        Dropout(ClosedHandle(), 0.5)


def test_old_spellings_warn_and_still_work():
    with pytest.warns(DeprecationWarning, match="dropout= is deprecated, use p="):
        with pytest.raises(InvalidValueError, match="dropout probability p"):
            Dropout(H, dropout=1.5)
    with pytest.raises(InvalidTypeError, match="both p= and its old spelling dropout="):
        Dropout(H, 0.5, dropout=0.5)
    with pytest.warns(DeprecationWarning, match="DropoutDescriptor is deprecated, use cudnn_py.Dropout"):
        with pytest.raises(ClosedError):
            descriptors.DropoutDescriptor(ClosedHandle(), 0.5, seed=3)
    assert DropoutOutputs._fields == ("y", "reserve")


@pytest.mark.parametrize("call,exc,words", [
    (lambda: Dropout(H, p=1.5), ValueError, "probability"),
    (lambda: Dropout(H, p=-0.1), ValueError, "probability"),
    (lambda: Dropout(H, p=0.5, seed=-1), ValueError, "seed"),
    (lambda: Dropout(H, p=0.5, seed=2 ** 64), ValueError, "seed"),
    (lambda: dropout_forward(H, "0.5", fake((4, 5))), TypeError, "Dropout"),
    (lambda: dropout_forward(H, cpu_dropout(), fake((4, 5)), y=fake((5, 4))), ValueError, "y has shape"),
    (lambda: dropout_forward(H, cpu_dropout(), fake((4, 5)), y=fake((4, 5), np.float16)), TypeError, "dtype"),
    (lambda: dropout_forward(H, cpu_dropout(), np.ones((4, 5), np.float32)), TypeError, "to_device"),
    (lambda: dropout_forward(H, cpu_dropout(), fake((64, 64)), y=fake((64, 64)), reserve=fake((3,), np.uint8)),
     ValueError, "reserve holds 3 bytes"),
    (lambda: dropout_backward(H, cpu_dropout(), fake((64, 64)), fake((3,), np.uint8), dx=fake((64, 64))),
     ValueError, "reserve holds 3 bytes"),
    (lambda: dropout_backward(H, cpu_dropout(), fake((4, 5)), fake((4096,), np.uint8), dx=fake((4, 6))),
     ValueError, "dx has shape"),
])
def test_bad_input_caught_before_c(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


# ---------------------------------------------------------------- GPU


def _dev(a):
    import cudnn_py as cudnn
    return cudnn.to_device(np.ascontiguousarray(a))


@pytest.mark.gpu
@pytest.mark.parametrize("p,dtype", [(0.3, np.float32), (0.5, np.float16), (0.8, np.float32)])
def test_forward_statistics_and_scaling(handle, rng, p, dtype):
    x = (rng.random((64, 32, 16, 16)) + 0.5).astype(dtype)  # never 0, so a 0 in y means dropped
    with Dropout(handle, p=p, seed=int(rng.integers(2 ** 63))) as d:
        assert abs(d.p - p) < 1e-7 and d.states_size == dropout_states_size(handle)
        y, reserve = dropout_forward(handle, d, _dev(x), y=_dev(np.full(x.shape, np.nan, dtype)))
    assert reserve.nbytes == dropout_reserve_size(x.shape, dtype)
    yh = y.to_numpy()
    kept = yh != 0
    n = x.size
    frac = 1 - kept.mean()
    assert abs(frac - p) < 6 * np.sqrt(p * (1 - p) / n), f"dropped {frac:.5f} of elements, expected {p}"
    tol = 1e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(yh[kept].astype(np.float64), x[kept].astype(np.float64) / (1 - p), rtol=tol)


@pytest.mark.gpu
def test_same_seed_same_mask_and_backward_reuses_it(handle, rng):
    x = (rng.random((8, 16, 32)) + 0.5).astype(np.float32)
    xd = _dev(x)
    d1, d2, d3 = Dropout(handle, 0.4, seed=77), Dropout(handle, 0.4, seed=77), Dropout(handle, 0.4, seed=78)
    y1, r1 = dropout_forward(handle, d1, xd)
    y2, _ = dropout_forward(handle, d2, xd)
    y3, _ = dropout_forward(handle, d3, xd)
    m1 = y1.to_numpy() != 0
    np.testing.assert_array_equal(m1, y2.to_numpy() != 0)
    assert (m1 != (y3.to_numpy() != 0)).any(), "a different seed gave the same mask"
    # the mask stored in the reserve is applied by backward, twice, to different gradients
    for _ in range(2):
        dy = rng.standard_normal(x.shape).astype(np.float32)
        dx = dropout_backward(handle, d1, _dev(dy), r1, dx=_dev(np.full(x.shape, np.nan, np.float32)))
        np.testing.assert_allclose(dx.to_numpy(), np.where(m1, dy / 0.6, 0.0), rtol=1e-6, atol=0)


@pytest.mark.gpu
def test_restored_states_reproduce_the_masks(handle, rng):
    import cudnn_py as cudnn

    x = _dev((rng.random((4, 8, 64)) + 0.5).astype(np.float32))
    d = Dropout(handle, 0.5, seed=5)
    saved = cudnn.empty((d.states_size,), np.uint8)
    saved.copy_(d.states)
    y_first, _ = dropout_forward(handle, d, x)
    restored = Dropout(handle, 0.5, seed=5, states=saved)
    assert restored.states.ptr == saved.ptr
    y_again, _ = dropout_forward(handle, restored, x)
    np.testing.assert_array_equal(y_first.to_numpy(), y_again.to_numpy())
    with pytest.raises(ValueError, match="states holds"):
        Dropout(handle, 0.5, states=_dev(np.zeros(16, np.uint8)))


@pytest.mark.gpu
def test_raw_capi_path(handle, rng):
    """Dropout through the C layer only, as a C program would do it."""
    import cudnn_py as cudnn

    x = (rng.random((16, 1024)) + 0.5).astype(np.float32)
    xd, yd = _dev(x), cudnn.empty(x.shape, np.float32)
    n, r = ctypes.c_size_t(), ctypes.c_size_t()
    capi.cudnnDropoutGetStatesSize(handle.ptr, ctypes.byref(n))
    states = cudnn.empty((n.value,), np.uint8)
    desc, xdesc = capi.cudnnDropoutDescriptor_t(), capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateDropoutDescriptor(ctypes.byref(desc))
    capi.cudnnCreateTensorDescriptor(ctypes.byref(xdesc))
    try:
        capi.cudnnSetDropoutDescriptor(desc, handle.ptr, 0.25, states.ptr, n.value, 99)
        capi.cudnnSetTensor4dDescriptor(xdesc, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 16, 1024, 1, 1)
        capi.cudnnDropoutGetReserveSpaceSize(xdesc, ctypes.byref(r))
        reserve = cudnn.empty((r.value,), np.uint8)
        capi.cudnnDropoutForward(handle.ptr, desc, xdesc, xd.ptr, xdesc, yd.ptr, reserve.ptr, r.value)
        y = yd.to_numpy()
        assert abs((y == 0).mean() - 0.25) < 0.02
        np.testing.assert_allclose(y[y != 0], x[y != 0] / 0.75, rtol=1e-6)
    finally:
        capi.cudnnDestroyTensorDescriptor(xdesc)
        capi.cudnnDestroyDropoutDescriptor(desc)
