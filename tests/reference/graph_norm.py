"""float64 NumPy references for the graph normalisation operations: forward and backward of layer, RMS, instance,
batch and adaptive layer norm (statistics keep x's rank), batch-norm finalize of per-channel sums, and batch-norm
backward weights with the dx coefficients. ``axes``: the normalised dims (cudnn_py.graph.ops.norm.norm_axes)."""
from __future__ import annotations

import numpy as np


def _f(a):
    return np.asarray(a, np.float64)


def _sum_to(v, shape):
    """Sum ``v`` over the dims where ``shape`` has 1 (and v does not)."""
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, v.shape)) if n == 1 and m != 1)
    return v.sum(axis=axes, keepdims=True) if axes else v


def norm_forward(x, scale, bias, mode, eps, axes):
    """(y, mean, inv_variance); rms: mean is zeros, variance the mean square."""
    x = _f(x)
    if mode == "rms":
        mean = np.zeros_like(x.mean(axis=axes, keepdims=True))
        var = (x * x).mean(axis=axes, keepdims=True)
    else:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    y = (x - mean) * inv * _f(scale) + (0 if bias is None else _f(bias))
    return y, mean, inv


def norm_backward(dy, x, scale, mean, inv, mode, axes):
    """(dx, dscale, dbias) of y = (x - mean) * inv * scale + bias, with mean/inv the statistics of x over
    ``axes`` (as the forward saved them); dscale/dbias in the scale's shape."""
    dy, x, scale, inv = _f(dy), _f(x), _f(scale), _f(inv)
    xhat = (x - (0 if mode == "rms" else _f(mean))) * inv
    g = dy * scale
    proj = (g * xhat).mean(axis=axes, keepdims=True)
    centred = 0 if mode == "rms" else g.mean(axis=axes, keepdims=True)
    dx = inv * (g - centred - xhat * proj)
    return dx, _sum_to(dy * xhat, scale.shape), _sum_to(dy, scale.shape)


def batch_norm_running(mean, var_biased, count, running_mean, running_var, momentum):
    """Running statistics after one step: (1 - momentum) * running + momentum * batch, the batch variance
    unbiased (count / (count - 1)), as cuDNN's legacy batch norm and torch do."""
    unbiased = _f(var_biased) * count / max(count - 1, 1)
    return ((1 - momentum) * _f(running_mean) + momentum * _f(mean),
            (1 - momentum) * _f(running_var) + momentum * unbiased)


def bn_finalize(s, sq, scale, bias, count, eps):
    """(eq_scale, eq_bias, mean, inv_std, biased variance) from per-channel sum and sum of squares."""
    mean = _f(s) / count
    var = _f(sq) / count - mean * mean
    inv = 1 / np.sqrt(var + eps)
    eq_scale = _f(scale) * inv
    return eq_scale, _f(bias) - mean * eq_scale, mean, inv, var


def bn_backward_weights(dy, x, mean, inv, scale):
    """(dscale, dbias, eq_dy_scale, eq_x_scale, eq_bias) of batch norm (per channel, dims 0 and 2.. reduced):
    dx = eq_dy_scale * dy + eq_x_scale * x + eq_bias."""
    dy, x, mean, inv, scale = _f(dy), _f(x), _f(mean), _f(inv), _f(scale)
    axes = (0,) + tuple(range(2, x.ndim))
    m = x.size // x.shape[1]
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * (x - mean) * inv).sum(axis=axes, keepdims=True)
    a = scale * inv
    b = -a * inv * dscale / m
    c = -a * dbias / m - b * mean
    return dscale, dbias, a, b, c
