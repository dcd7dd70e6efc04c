"""Dropout: reserve sizes, bad input, refused dtypes and the memory order tensors are described in (CPU); masks
statistically, reproducibility by seed and by restored states, backward reusing the stored mask, NHWC tensors
through the packed path and a backward in another layout than its forward (GPU)."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.core import descriptors
from cudnn_py.core.descriptors import Descriptor
from cudnn_py.errors import ClosedError, InvalidTypeError, InvalidValueError
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops import dropout as dropout_module
from cudnn_py.ops.dropout import (
    Dropout, DropoutOutputs, dropout_backward, dropout_forward, dropout_reserve_size, dropout_states_size,
)
from helpers import NoCallHandle, fake, poison, poisoned_allocations


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


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.int32, np.uint8, np.int8])
def test_dtypes_cudnn_refuses_are_refused_before_c(dtype):
    words = "cuDNN's dropout takes float16, float32 or float64"
    with pytest.raises(InvalidTypeError, match=words):
        dropout_forward(H, cpu_dropout(), fake((4, 5), dtype))
    with pytest.raises(InvalidTypeError, match=words):
        dropout_backward(H, cpu_dropout(), fake((4, 5), dtype), fake((4096,), np.uint8))
    with pytest.raises(InvalidTypeError, match=words):
        dropout_reserve_size((4, 5), dtype)


NHWC = (60, 1, 15, 3)  # strides of (2, 3, 4, 5) stored as N, H, W, C


@pytest.mark.parametrize("shape,strides,order", [
    ((2, 3, 4, 5), None, (0, 1, 2, 3)),
    ((2, 3, 4, 5), NHWC, (0, 2, 3, 1)),
    ((2, 3, 4, 5), (1, 2, 6, 24), (3, 2, 1, 0)),        # Fortran order
    ((2, 1, 4, 5), (20, 7, 5, 1), (0, 1, 2, 3)),        # a unit dimension's stride says nothing
    ((2, 3, 1, 5), (15, 1, 99, 3), (0, 3, 1, 2)),       # NHWC with H = 1: unit dimensions go last
    ((2, 3, 4, 5), (120, 1, 30, 6), (0, 1, 2, 3)),      # a channel slice: not dense, the logical order
    ((3, 4), (8, 1), (0, 1)),                           # rows of a wider array
])
def test_memory_order_of_dense_arrays_else_the_logical_one(shape, strides, order):
    a = fake(shape, strides=strides)
    assert dropout_module._shared_order(a, a) == order


def test_shared_order_needs_both_packed_in_it():
    nhwc, nchw = fake((2, 3, 4, 5), strides=NHWC), fake((2, 3, 4, 5))
    assert dropout_module._shared_order(nhwc, fake((2, 3, 4, 5), strides=NHWC)) == (0, 2, 3, 1)
    assert dropout_module._shared_order(nhwc, nchw) == (0, 1, 2, 3)  # layouts differ: the logical order
    assert dropout_module._shared_order(nchw, nhwc) == (0, 1, 2, 3)
    assert dropout_module._shared_order(fake((2, 3, 4, 5), strides=(120, 1, 30, 6)), nhwc) == (0, 1, 2, 3)


def test_descriptor_is_packed_in_memory_order_else_strided():
    from cudnn_py.ops._common import read_tensor_desc
    order = (0, 2, 3, 1)
    d = dropout_module._desc_in(fake((2, 3, 4, 5), strides=NHWC), order)
    assert read_tensor_desc(d.ptr)[:2] == ((2, 4, 5, 3), (60, 15, 3, 1))
    d = dropout_module._desc_in(fake((2, 3, 4, 5)), order)   # NCHW memory read in NHWC order: strided
    assert read_tensor_desc(d.ptr)[:2] == ((2, 4, 5, 3), (60, 5, 1, 20))


# ---------------------------------------------------------------- GPU


def _dev(a):
    import cudnn_py as cudnn
    return cudnn.to_device(np.ascontiguousarray(a))


def _nhwc(a):
    """A device array of ``a``'s (N, C, H, W) values stored as N, H, W, C."""
    buf = _dev(a.transpose(0, 2, 3, 1))
    n, c, h, w = a.shape
    return DeviceArray(buf.ptr, a.shape, a.dtype, (h * w * c, 1, w * c, c), device_id=buf.device_id, owner=buf)


def _nan_nhwc(shape, dtype):
    return _nhwc(np.full(shape, np.nan, dtype))


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


@pytest.mark.gpu
@pytest.mark.parametrize("p,dtype", [(0.3, np.float32), (0.5, np.float16), (0.1, np.float64)])
def test_nhwc_through_the_packed_path_against_the_reference(handle, rng, p, dtype):
    """NHWC x, y, dy, dx: kept elements x / (1 - p), dropped 0, the fraction near p; the backward reproduces the
    mask in NHWC, in NCHW (another layout than the forward's) and into an output it allocates in dy's layout."""
    shape = (8, 24, 12, 10)
    x = (rng.random(shape) + 0.5).astype(dtype)  # never 0, so a 0 in y means dropped
    tol = 2e-3 if dtype == np.float16 else 1e-6
    with Dropout(handle, p=p, seed=int(rng.integers(2 ** 63))) as d:
        y, reserve = dropout_forward(handle, d, _nhwc(x), y=_nan_nhwc(shape, dtype))
        yh = y.to_numpy()
        assert not np.isnan(yh).any()
        kept = yh != 0
        frac = 1 - kept.mean()
        assert abs(frac - p) < 6 * np.sqrt(p * (1 - p) / x.size), f"dropped {frac:.5f} of elements, expected {p}"
        np.testing.assert_allclose(yh[kept].astype(np.float64), x[kept].astype(np.float64) / (1 - p), rtol=tol)

        with poisoned_allocations():  # the output it allocates is NHWC too, and every element written
            y_alloc, _ = dropout_forward(handle, d, _nhwc(x))
        assert y_alloc.strides == _nhwc(x).strides
        ya = y_alloc.to_numpy()
        np.testing.assert_allclose(ya[ya != 0].astype(np.float64), x[ya != 0].astype(np.float64) / (1 - p), rtol=tol)

        dy = rng.standard_normal(shape).astype(dtype)
        want = np.where(kept, dy.astype(np.float64) / (1 - p), 0.0)
        got = {
            "NHWC": dropout_backward(handle, d, _nhwc(dy), reserve, dx=_nan_nhwc(shape, dtype)),
            "NCHW dy and dx": dropout_backward(handle, d, _dev(dy), reserve,
                                               dx=_dev(np.full(shape, np.nan, dtype))),
            "NCHW dy, NHWC dx": dropout_backward(handle, d, _dev(dy), reserve, dx=_nan_nhwc(shape, dtype)),
        }
        with poisoned_allocations():
            got["dx allocated"] = dropout_backward(handle, d, _nhwc(dy), reserve)
        assert got["dx allocated"].strides == _nhwc(dy).strides
        for name, dx in got.items():
            np.testing.assert_allclose(dx.to_numpy().astype(np.float64), want, rtol=tol, atol=0, err_msg=name)


@pytest.mark.gpu
def test_nchw_forward_read_back_by_an_nhwc_backward(handle, rng):
    """The other direction: a mask the forward drew in the logical order, applied to NHWC dy and dx (into a reserve
    an NHWC forward wrote first: the last forward's order counts)."""
    shape = (4, 16, 8, 6)
    x = (rng.random(shape) + 0.5).astype(np.float32)
    with Dropout(handle, p=0.4, seed=11) as d:
        _, reserve = dropout_forward(handle, d, _nhwc(x))
        y, _ = dropout_forward(handle, d, _dev(x), y=poison(_dev(np.empty(shape, np.float32))), reserve=reserve)
        kept = y.to_numpy() != 0
        dy = rng.standard_normal(shape).astype(np.float32)
        dx = dropout_backward(handle, d, _nhwc(dy), reserve, dx=_nan_nhwc(shape, np.float32))
    np.testing.assert_allclose(dx.to_numpy(), np.where(kept, dy / 0.6, 0.0), rtol=1e-6, atol=0)


@pytest.mark.gpu
def test_nhwc_mask_matches_across_packed_descriptors(handle, rng):
    """The packed path's mask depends on the element count only: an NHWC forward and a C-contiguous forward of
    the same values in N, H, W, C order, from the same seed, drop the same elements."""
    shape = (4, 16, 8, 6)
    x = (rng.random(shape) + 0.5).astype(np.float32)
    with Dropout(handle, p=0.5, seed=3) as d1, Dropout(handle, p=0.5, seed=3) as d2:
        y_nhwc, _ = dropout_forward(handle, d1, _nhwc(x))
        y_flat, _ = dropout_forward(handle, d2, _dev(x.transpose(0, 2, 3, 1)))
    np.testing.assert_array_equal(y_nhwc.to_numpy().transpose(0, 2, 3, 1), y_flat.to_numpy())
