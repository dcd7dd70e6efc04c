"""Spatial transformer: affine grid generator and bilinear sampler, forward and backward.

::

    grid = spatial_tf_grid_forward(h, theta, (n, c, ho, wo))      # theta (N, 2, 3) -> grid (N, Ho, Wo, 2)
    y = spatial_tf_sampler_forward(h, x, grid)                     # x (N, C, H, W) -> y (N, C, Ho, Wo)
    dx, dgrid = spatial_tf_sampler_backward(h, x, grid, dy)       # a SamplerGrads named tuple
    dtheta = spatial_tf_grid_backward(h, dgrid)

The grid holds (x, y) sampling positions in [-1, 1] (-1 and 1 are the centres of the first and last pixels);
positions outside read zeros. cuDNN samples 2-D (4-D tensors), bilinearly.
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from cudnn_py import capi
from cudnn_py.core.caches import shared
from cudnn_py._deprecation import alias
from cudnn_py.core.args import dims, int_tuple
from cudnn_py.core.descriptors import Descriptor
from cudnn_py.core.dtypes import cudnn_dtype, numpy_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops._common import FLOATS, check_array, desc, launch, output, scalars
from cudnn_py.calls.prepared import prepared

__all__ = ["SpatialTransformer", "SamplerGrads", "spatial_tf_grid_forward",
           "spatial_tf_grid_backward", "spatial_tf_sampler_forward", "spatial_tf_sampler_backward"]


class SamplerGrads(NamedTuple):
    """What :func:`spatial_tf_sampler_backward` returns."""
    dx: DeviceArray
    dgrid: DeviceArray


def _shape(shape) -> tuple[int, ...]:
    """The output shape checked: 4 positive ints in the C int range."""
    try:
        return dims(shape, "spatial transformer output shape", 4, 4)
    except ValueError as e:
        raise InvalidValueError(f"spatial transformer output shape must be 4 positive ints (N, C, H, W): {e}") from None


class SpatialTransformer(Descriptor):
    """A ``cudnnSpatialTransformerDescriptor_t`` (bilinear sampler) for output ``shape`` (N, C, H, W) and ``dtype``.
    Works without a GPU; ``close()`` (or the garbage collector) destroys it."""

    _handle_type = capi.cudnnSpatialTransformerDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateSpatialTransformerDescriptor", "cudnnDestroySpatialTransformerDescriptor"
    _shown = ("shape", "dtype")
    _cache_name = "ops.spatial_transformer"

    def __init__(self, shape: Sequence[int], dtype: DTypeLike = np.float32) -> None:
        shape = _shape(shape)
        dt = numpy_dtype(cudnn_dtype(dtype))
        if dt not in FLOATS:
            raise InvalidTypeError(f"spatial transformer dtype must be float16, float32 or float64, got {dt}")
        self.shape, self.dtype = tuple(int(d) for d in shape), dt
        super().__init__()
        capi.cudnnSetSpatialTransformerNdDescriptor(self._ptr, capi.CUDNN_SAMPLER_BILINEAR, cudnn_dtype(dt), 4,
                                                    (ctypes.c_int * 4)(*self.shape))

    @classmethod
    def shared(cls, shape: Sequence[int],  # type: ignore[override]
               dtype: DTypeLike = np.float32) -> SpatialTransformer:
        """The process-wide one for output ``shape`` and ``dtype`` (its ``close()`` does nothing)."""
        return super().shared(_shape(shape), numpy_dtype(cudnn_dtype(dtype)))

    @property
    def grid_shape(self) -> tuple[int, int, int, int]:
        n, _, h, w = self.shape
        return (n, h, w, 2)


#: the shared spatial transformer descriptors (:meth:`SpatialTransformer.shared`), by (shape, dtype)
_CACHE = shared(SpatialTransformer._cache_name, maxsize=256)


def _float_array(obj, name, handle: Handle, **kw) -> DeviceArray:
    """A C-contiguous float16/32/64 array (cuDNN reads theta and the grid as packed memory)."""
    a = check_array(obj, name, handle, contiguous=True, **kw)
    if a.dtype not in FLOATS:
        raise InvalidTypeError(f"{name} has dtype {a.dtype}; the spatial transformer needs float16, float32 or float64")
    return a


def _grid(obj, name, handle: Handle, dtype=None) -> DeviceArray:
    g = _float_array(obj, name, handle, dtype=dtype)
    if g.ndim != 4 or g.shape[3] != 2:
        raise InvalidValueError(f"{name} has shape {g.shape}; expected (N, H_out, W_out, 2)")
    return g


@prepared(inputs=("theta",), outputs=("grid",), inplace=False, moved=("grid",))
def spatial_tf_grid_forward(handle: Handle, theta: DeviceArrayLike, out_shape: Sequence[int] | SpatialTransformer,
                            *, grid: DeviceArrayLike | None = None) -> DeviceArray:
    """Sampling grid (N, H, W, 2) from affine matrices ``theta`` (N, 2, 3) for output ``out_shape``
    (N, C, H, W) (``cudnnSpatialTfGridGeneratorForward``); ``out_shape`` may be a :class:`SpatialTransformer` (its
    shape, and its dtype, which must be theta's)."""
    th = _float_array(theta, "theta", handle)
    given = out_shape if isinstance(out_shape, SpatialTransformer) else None
    if given is not None and given.dtype != th.dtype:
        raise InvalidTypeError(f"the SpatialTransformer is {given.dtype}; theta is {th.dtype}")
    shape = given.shape if given is not None else int_tuple(out_shape, "out_shape")
    if th.ndim != 3 or th.shape[1:] != (2, 3):
        raise InvalidValueError(f"theta has shape {th.shape}; expected (N, 2, 3) affine matrices")
    if len(shape) != 4 or shape[0] != th.shape[0]:
        raise InvalidValueError(f"out_shape {shape} must be (N, C, H, W) with N = {th.shape[0]} (theta's batch)")
    st = given if given is not None else SpatialTransformer.shared(shape, th.dtype)
    g = output(grid, "grid", handle, st.grid_shape, th.dtype, contiguous=True)
    launch(handle, capi.cudnnSpatialTfGridGeneratorForward, handle.ptr, st, th, g)
    return g


@prepared(inputs=("dgrid",), outputs=("dtheta",), inplace=False, moved=("dtheta",))
def spatial_tf_grid_backward(handle: Handle, dgrid: DeviceArrayLike, *,
                             dtheta: DeviceArrayLike | None = None) -> DeviceArray:
    """Gradient w.r.t. theta (N, 2, 3) from the grid gradient (N, H, W, 2) (``cudnnSpatialTfGridGeneratorBackward``)."""
    dg = _grid(dgrid, "dgrid", handle)
    n, h, w, _ = dg.shape
    st = SpatialTransformer.shared((n, 1, h, w), dg.dtype)
    dt = output(dtheta, "dtheta", handle, (n, 2, 3), dg.dtype, contiguous=True)
    launch(handle, capi.cudnnSpatialTfGridGeneratorBackward, handle.ptr, st, dg, dt)
    return dt


def _sampler_setup(handle: Handle, x, grid):
    xa = _float_array(x, "x", handle)
    if xa.ndim != 4:
        raise InvalidValueError(f"x has shape {xa.shape}; the spatial transformer samples 4-D (N, C, H, W) data")
    g = _grid(grid, "grid", handle, dtype=xa.dtype)
    if g.shape[0] != xa.shape[0]:
        raise InvalidValueError(f"grid has batch {g.shape[0]} but x has batch {xa.shape[0]}")
    y_shape = (xa.shape[0], xa.shape[1], g.shape[1], g.shape[2])
    return xa, g, y_shape, SpatialTransformer.shared(y_shape, xa.dtype)


@prepared(inputs=("x", "grid"), outputs=("y",), inplace=False, scalars=("alpha", "beta"), moved=("y",))
def spatial_tf_sampler_forward(handle: Handle, x: DeviceArrayLike, grid: DeviceArrayLike, *,
                               y: DeviceArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0) -> DeviceArray:
    """``y = alpha * bilinear(x, grid) + beta * y`` (``cudnnSpatialTfSamplerForward``); y is (N, C, H_out, W_out)."""
    xa, g, y_shape, st = _sampler_setup(handle, x, grid)
    ya = output(y, "y", handle, y_shape, xa.dtype, contiguous=True)
    al, be = scalars(xa.dtype, alpha, beta)
    launch(handle, capi.cudnnSpatialTfSamplerForward, handle.ptr, st, al, desc(xa), xa, g, be, desc(ya), ya)
    return ya


@prepared(inputs=("x", "grid", "dy"), outputs=("dx", "dgrid"), inplace=False,
          scalars=("alpha", "beta", "alpha_dgrid", "beta_dgrid"), moved=("dx", "dgrid"))
def spatial_tf_sampler_backward(handle: Handle, x: DeviceArrayLike, grid: DeviceArrayLike, dy: DeviceArrayLike,
                                *, dx: DeviceArrayLike | None = None,
                                dgrid: DeviceArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
                                alpha_dgrid: float = 1.0, beta_dgrid: float = 0.0) -> SamplerGrads:
    """:class:`SamplerGrads` ``(dx, dgrid)`` of the sampler (``cudnnSpatialTfSamplerBackward``):
    ``dx = alpha * dL/dx + beta * dx`` and ``dgrid = alpha_dgrid * dL/dgrid + beta_dgrid * dgrid`` (cuDNN's
    names); each allocated when not given."""
    xa, g, y_shape, st = _sampler_setup(handle, x, grid)
    dya = _float_array(dy, "dy", handle, dtype=xa.dtype, shape=y_shape)
    dxa = output(dx, "dx", handle, xa.shape, xa.dtype, contiguous=True)
    dga = output(dgrid, "dgrid", handle, g.shape, xa.dtype, contiguous=True)
    al, be, ag, bg = scalars(xa.dtype, alpha, beta, alpha_dgrid, beta_dgrid)
    launch(handle, capi.cudnnSpatialTfSamplerBackward, handle.ptr, st, al, desc(xa), xa, be, desc(dxa), dxa, ag,
           desc(dya), dya, g, bg, dga)
    return SamplerGrads(dxa, dga)


spatial_transformer = alias("spatial_transformer", SpatialTransformer.shared, use="cudnn_py.SpatialTransformer.shared")
