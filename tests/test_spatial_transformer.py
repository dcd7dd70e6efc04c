"""Spatial transformer: descriptors and bad input (CPU); grid generator and sampler, forward and
backward, against the float64 reference (GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.ops.spatial_transformer import (
    SpatialTransformer, spatial_tf_grid_backward, spatial_tf_grid_forward, spatial_tf_sampler_backward,
    spatial_tf_sampler_forward,
)
from reference import spatial_transformer as ref
from helpers import NoCallHandle, fake


# ---------------------------------------------------------------- CPU


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_descriptor_created_and_cached(dtype):
    st = SpatialTransformer.shared((2, 3, 4, 5), dtype)
    assert st is SpatialTransformer.shared((2, 3, 4, 5), dtype)
    assert st.grid_shape == (2, 4, 5, 2) and st.dtype == np.dtype(dtype)
    assert isinstance(st.ptr, capi.cudnnSpatialTransformerDescriptor_t) and st.ptr.value
    own = SpatialTransformer((1, 1, 2, 2), dtype)
    own.close()
    with pytest.raises(Exception, match="closed"):
        own.ptr
    assert repr(own) == "<SpatialTransformer closed>"


def test_shared_descriptors_live_in_the_process_cache_and_die_when_dropped():
    import gc
    import weakref
    from cudnn_py.core import caches
    from cudnn_py.ops import spatial_transformer as S
    st = SpatialTransformer.shared((3, 1, 7, 9), np.float32)
    assert caches.shared("ops.spatial_transformer") is S._CACHE and caches.info()["ops.spatial_transformer"] >= 1
    st.close()  # shared: close() leaves it to the cache
    assert not st.closed and repr(st) == "SpatialTransformer(shape=(3, 1, 7, 9), dtype=float32)"
    raw, gone = st._ptr, weakref.ref(st)
    S._CACHE.clear()
    assert SpatialTransformer.shared((3, 1, 7, 9), np.float32) is not st  # made anew
    del st
    gc.collect()
    assert gone() is None and raw.value is None  # destroyed by its finalizer, never used again


def test_sampler_grads_is_a_named_tuple():
    from cudnn_py.ops.spatial_transformer import SamplerGrads
    g = SamplerGrads(1, 2)
    dx, dgrid = g
    assert (dx, dgrid) == (g.dx, g.dgrid) == (1, 2)


@pytest.mark.parametrize("args,exc,words", [
    (((2, 3, 4), np.float32), ValueError, "4 positive ints"),
    (((2, 3, 0, 4), np.float32), ValueError, "4 positive ints"),
    (((2, 3, 4, 4), np.int32), TypeError, "float16"),
])
def test_descriptor_bad_arguments(args, exc, words):
    with pytest.raises(exc, match=words):
        SpatialTransformer(*args)


H = NoCallHandle()


@pytest.mark.parametrize("call,exc,words", [
    (lambda: spatial_tf_grid_forward(H, fake((2, 3, 2)), (2, 1, 4, 4)), ValueError, "(N, 2, 3)"),
    (lambda: spatial_tf_grid_forward(H, fake((2, 2, 3)), (3, 1, 4, 4)), ValueError, "theta's batch"),
    (lambda: spatial_tf_grid_forward(H, fake((2, 2, 3), np.int32), (2, 1, 4, 4)), TypeError, "float"),
    (lambda: spatial_tf_grid_forward(H, fake((2, 2, 3)), (2, 1, 4, 4), grid=fake((2, 4, 4, 3))), ValueError,
     "grid has shape"),
    (lambda: spatial_tf_grid_backward(H, fake((2, 4, 4, 3))), ValueError, "(N, H_out, W_out, 2)"),
    (lambda: spatial_tf_sampler_forward(H, fake((2, 3, 8, 8)), fake((2, 4, 4, 3))), ValueError, "grid has shape"),
    (lambda: spatial_tf_sampler_forward(H, fake((2, 3, 8, 8)), fake((3, 4, 4, 2))), ValueError, "batch"),
    (lambda: spatial_tf_sampler_forward(H, fake((2, 3, 8)), fake((2, 4, 4, 2))), ValueError, "4-D"),
    (lambda: spatial_tf_sampler_forward(H, fake((2, 3, 8, 8)), fake((2, 4, 4, 2), np.float64)), TypeError,
     "dtype"),
    (lambda: spatial_tf_sampler_forward(H, fake((2, 3, 8, 8)), fake((2, 4, 4, 2)), y=fake((2, 3, 4, 5))),
     ValueError, "y has shape"),
    (lambda: spatial_tf_sampler_backward(H, fake((2, 3, 8, 8)), fake((2, 4, 4, 2)), fake((2, 3, 8, 8))),
     ValueError, "dy has shape"),
    (lambda: spatial_tf_sampler_backward(H, fake((2, 3, 8, 8)), fake((2, 4, 4, 2)), fake((2, 3, 4, 4)),
                                         dx=fake((2, 3, 4, 4)), dgrid=fake((2, 4, 4, 2))), ValueError,
     "dx has shape"),
])
def test_bad_input_caught_before_c(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


# ---------------------------------------------------------------- GPU

TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-10, atol=1e-10),
       np.float16: dict(rtol=1e-2, atol=3e-2)}


def _dev(a):
    import cudnn_py as cudnn
    return cudnn.to_device(np.ascontiguousarray(a))


def _theta(rng, n, dtype):
    """Affine maps near the identity (rotation, scale, shift), so most samples land inside the input."""
    ang = rng.uniform(-0.5, 0.5, n)
    sc = rng.uniform(0.7, 1.2, n)
    th = np.zeros((n, 2, 3))
    th[:, 0, 0], th[:, 0, 1] = sc * np.cos(ang), -sc * np.sin(ang)
    th[:, 1, 0], th[:, 1, 1] = sc * np.sin(ang), sc * np.cos(ang)
    th[:, :, 2] = rng.uniform(-0.3, 0.3, (n, 2))
    return th.astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_grid_generator_forward_backward(handle, rng, dtype):
    n, ho, wo = 3, 5, 7
    th = _theta(rng, n, dtype)
    grid = spatial_tf_grid_forward(handle, _dev(th), (n, 2, ho, wo), grid=_dev(np.full((n, ho, wo, 2), np.nan,
                                                                                      dtype)))
    np.testing.assert_allclose(grid.to_numpy().astype(np.float64), ref.grid_generator_forward(th, ho, wo),
                               **TOL[dtype])
    dgrid = rng.standard_normal((n, ho, wo, 2)).astype(dtype)
    dth = spatial_tf_grid_backward(handle, _dev(dgrid), dtheta=_dev(np.full((n, 2, 3), np.nan, dtype)))
    tol = TOL[dtype] if dtype != np.float16 else dict(rtol=2e-2, atol=0.2)
    np.testing.assert_allclose(dth.to_numpy().astype(np.float64), ref.grid_generator_backward(dgrid), **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_sampler_forward_backward(handle, rng, dtype):
    n, c, hi, wi, ho, wo = 2, 3, 9, 11, 6, 8
    th = _theta(rng, n, np.float64)
    grid = ref.grid_generator_forward(th, ho, wo).astype(dtype)
    x = rng.standard_normal((n, c, hi, wi)).astype(dtype)
    y0 = rng.standard_normal((n, c, ho, wo)).astype(dtype)
    y = spatial_tf_sampler_forward(handle, _dev(x), _dev(grid), y=_dev(y0), alpha=0.5, beta=2.0)
    want = 0.5 * ref.sampler_forward(x, grid) + 2.0 * y0.astype(np.float64)
    np.testing.assert_allclose(y.to_numpy().astype(np.float64), want, **TOL[dtype])

    dy = rng.standard_normal((n, c, ho, wo)).astype(dtype)
    dx, dgrid = spatial_tf_sampler_backward(
        handle, _dev(x), _dev(grid), _dev(dy), dx=_dev(np.full(x.shape, np.nan, dtype)),
        dgrid=_dev(np.full(grid.shape, np.nan, dtype)))
    wdx, wdg = ref.sampler_backward(x, grid, dy)
    tol = TOL[dtype] if dtype != np.float16 else dict(rtol=2e-2, atol=0.1)
    np.testing.assert_allclose(dx.to_numpy().astype(np.float64), wdx, **tol)
    np.testing.assert_allclose(dgrid.to_numpy().astype(np.float64), wdg, **dict(tol, atol=tol["atol"] * 10))


@pytest.mark.gpu
def test_sampler_backward_alpha_beta(handle, rng):
    n, c, hi, wi, ho, wo = 2, 2, 6, 7, 4, 5
    grid = ref.grid_generator_forward(_theta(rng, n, np.float64), ho, wo).astype(np.float32)
    x = rng.standard_normal((n, c, hi, wi)).astype(np.float32)
    dy = rng.standard_normal((n, c, ho, wo)).astype(np.float32)
    dx0, dg0 = rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(grid.shape).astype(np.float32)
    dx, dgrid = spatial_tf_sampler_backward(handle, _dev(x), _dev(grid), _dev(dy), dx=_dev(dx0), dgrid=_dev(dg0),
                                            alpha=2.0, beta=0.5, alpha_dgrid=-1.0, beta_dgrid=1.5)
    wdx, wdg = ref.sampler_backward(x, grid, dy)
    np.testing.assert_allclose(dx.to_numpy(), 2.0 * wdx + 0.5 * dx0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dgrid.to_numpy(), -wdg + 1.5 * dg0, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_end_to_end_identity_transform(handle, rng):
    """theta = identity resamples x onto itself (grid generator + sampler, through the raw C layer too)."""
    n, c, h, w = 2, 3, 6, 9
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    th = np.tile(np.array([[1, 0, 0], [0, 1, 0]], np.float32), (n, 1, 1))
    st = SpatialTransformer.shared((n, c, h, w), np.float32)
    grid = _dev(np.full((n, h, w, 2), np.nan, np.float32))
    capi.cudnnSpatialTfGridGeneratorForward(handle.ptr, st.ptr, _dev(th).ptr, grid.ptr)
    y = spatial_tf_sampler_forward(handle, _dev(x), grid)
    np.testing.assert_allclose(y.to_numpy(), x, rtol=1e-5, atol=1e-5)


def test_grid_forward_takes_its_configuration_object():
    """A SpatialTransformer stands for out_shape (its dtype must be theta's); a bad shape is our error, not a
    builtin one."""
    st = SpatialTransformer((2, 3, 4, 5), np.float64)
    with pytest.raises(TypeError, match="the SpatialTransformer is float64; theta is float32"):
        spatial_tf_grid_forward(NoCallHandle(), fake((2, 2, 3)), st)
    with pytest.raises(ValueError, match=r"out_shape \(2, 3, 4, 5\) must be \(N, C, H, W\) with N = 3"):
        spatial_tf_grid_forward(NoCallHandle(), fake((3, 2, 3), np.float64), st)
    with pytest.raises(TypeError, match="out_shape must be"):
        spatial_tf_grid_forward(NoCallHandle(), fake((2, 2, 3)), 7)
