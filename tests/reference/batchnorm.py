"""float64 NumPy references for batch normalisation (and the cudnnNormalization* API, same math).

Modes: ``"spatial"`` (statistics per channel over N and every spatial axis, parameters 1xCx1x1...)
and ``"per_activation"`` (statistics per element over N only, parameters 1xCxHxW...).
Spatial-persistent computes the same function as spatial.

Conventions follow cuDNN: the saved inverse variance is ``1/sqrt(var + eps)`` with the biased
(population) variance, the running variance is updated with the unbiased variance
``var * M/(M-1)`` where M is the number of elements reduced per statistic.
"""
from __future__ import annotations

import numpy as np


def reduce_axes(ndim: int, mode: str) -> tuple[int, ...]:
    if mode in ("spatial", "spatial_persistent", "per_channel"):
        return (0,) + tuple(range(2, ndim))
    if mode == "per_activation":
        return (0,)
    raise ValueError(f"unknown mode {mode!r}")


def param_shape(x_shape, mode: str) -> tuple[int, ...]:
    axes = reduce_axes(len(x_shape), mode)
    return tuple(1 if i in axes else d for i, d in enumerate(x_shape))


def _relu(v):
    return np.maximum(v, 0.0)


def forward_training(x, scale, bias, mode, eps=1e-5, factor=1.0, running_mean=None, running_var=None,
                     z=None, relu=False):
    """Returns dict(y, mean, inv_var, running_mean, running_var); y = relu(bn(x) + z) if asked."""
    x = np.asarray(x, np.float64)
    axes = reduce_axes(x.ndim, mode)
    m = int(np.prod([x.shape[a] for a in axes]))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv_var = 1.0 / np.sqrt(var + eps)
    y = np.asarray(scale, np.float64).reshape(mean.shape) * (x - mean) * inv_var \
        + np.asarray(bias, np.float64).reshape(mean.shape)
    if z is not None:
        y = y + np.asarray(z, np.float64)
    if relu:
        y = _relu(y)
    unbiased = var * m / max(m - 1, 1)
    rm = mean if running_mean is None else factor * mean + (1 - factor) * np.asarray(running_mean, np.float64).reshape(mean.shape)
    rv = unbiased if running_var is None else factor * unbiased + (1 - factor) * np.asarray(running_var, np.float64).reshape(mean.shape)
    return dict(y=y, mean=mean, inv_var=inv_var, running_mean=rm, running_var=rv)


def forward_inference(x, scale, bias, mean, var, mode, eps=1e-5, z=None, relu=False):
    x = np.asarray(x, np.float64)
    shp = param_shape(x.shape, mode)
    f = lambda a: np.asarray(a, np.float64).reshape(shp)  # noqa: E731
    y = f(scale) * (x - f(mean)) / np.sqrt(f(var) + eps) + f(bias)
    if z is not None:
        y = y + np.asarray(z, np.float64)
    return _relu(y) if relu else y


def backward(x, dy, scale, mode, eps=1e-5, mean=None, inv_var=None, y=None, relu=False, with_z=False):
    """Gradients of y = [relu](bn(x) [+ z]).  Returns dict(dx, dscale, dbias[, dz]).

    With ``relu`` the output ``y`` of the forward pass gates ``dy`` (as cuDNN does).
    """
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    if relu:
        if y is None:
            raise ValueError("relu backward needs the forward output y")
        dy = dy * (np.asarray(y, np.float64) > 0)
    axes = reduce_axes(x.ndim, mode)
    m = int(np.prod([x.shape[a] for a in axes]))
    if mean is None:
        mean = x.mean(axis=axes, keepdims=True)
    else:
        mean = np.asarray(mean, np.float64).reshape(param_shape(x.shape, mode))
    if inv_var is None:
        inv_var = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    else:
        inv_var = np.asarray(inv_var, np.float64).reshape(mean.shape)
    xhat = (x - mean) * inv_var
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    g = np.asarray(scale, np.float64).reshape(mean.shape)
    dx = g * inv_var / m * (m * dy - dbias - xhat * dscale)
    out = dict(dx=dx, dscale=dscale, dbias=dbias)
    if with_z:
        out["dz"] = dy
    return out
