"""Float64 NumPy references for cross-channel LRN and divisive normalisation, forward and backward.

Both use cuDNN's window: for size ``n`` the window around index i is
``[i - (n - 1) // 2, i + n - 1 - (n - 1) // 2]``, clipped to the tensor (zeros outside).

* Cross-channel LRN (over C):  ``y = x * (k + alpha / n * sum_window x**2) ** -beta``.
* Divisive normalisation (spatial, each channel apart), with ``d = x - means`` (means zero when
  not given): ``y = d * (k + alpha / n**S * sum_window d**2) ** -beta`` where S is the number of
  spatial dimensions and the window is n wide in each of them. The means are an independent
  input, so ``dmeans = -dx``.
"""
from __future__ import annotations

import numpy as np


def window_sum(a, axes, n, reverse=False):
    """Sum of ``a`` over cuDNN's size-n window along each of ``axes`` (the mirrored window if reverse)."""
    behind = (n - 1) // 2
    ahead = n - 1 - behind
    if reverse:
        behind, ahead = ahead, behind
    for ax in axes:
        pad = [(0, 0)] * a.ndim
        pad[ax] = (behind, ahead)
        c = np.cumsum(np.pad(a, pad), axis=ax)
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=ax)), c], axis=ax)
        length = a.shape[ax]
        a = np.take(c, np.arange(n, n + length), axis=ax) - np.take(c, np.arange(0, length), axis=ax)
    return a


def _normalize(d, axes, n, alpha, beta, k, scale):
    s = k + alpha / scale * window_sum(d * d, axes, n)
    return d * s ** -beta, s


def _normalize_backward(d, dy, axes, n, alpha, beta, k, scale):
    s = k + alpha / scale * window_sum(d * d, axes, n)
    g = dy * d * s ** (-beta - 1.0)
    return dy * s ** -beta - 2.0 * beta * alpha / scale * d * window_sum(g, axes, n, reverse=True)


def lrn_forward(x, n, alpha, beta, k):
    x = np.asarray(x, dtype=np.float64)
    return _normalize(x, (1,), n, alpha, beta, k, n)[0]


def lrn_backward(x, dy, n, alpha, beta, k):
    x = np.asarray(x, dtype=np.float64)
    return _normalize_backward(x, np.asarray(dy, np.float64), (1,), n, alpha, beta, k, n)


def _spatial(x):
    return tuple(range(2, x.ndim))


def divnorm_forward(x, means, n, alpha, beta, k):
    x = np.asarray(x, dtype=np.float64)
    d = x if means is None else x - np.asarray(means, dtype=np.float64)
    axes = _spatial(x)
    return _normalize(d, axes, n, alpha, beta, k, n ** len(axes))[0]


def divnorm_backward(x, means, dy, n, alpha, beta, k):
    """(dx, dmeans) of ``divnorm_forward``."""
    x = np.asarray(x, dtype=np.float64)
    d = x if means is None else x - np.asarray(means, dtype=np.float64)
    axes = _spatial(x)
    dx = _normalize_backward(d, np.asarray(dy, np.float64), axes, n, alpha, beta, k, n ** len(axes))
    return dx, -dx
