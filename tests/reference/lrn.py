"""Float64 NumPy references for cross-channel LRN and divisive normalisation, forward and backward.

Both use cuDNN's window: for size ``n`` the window around index i is
``[i - (n - 1) // 2, i + n - 1 - (n - 1) // 2]``, clipped to the tensor (zeros outside).

* Cross-channel LRN (over C):  ``y = x * (k + alpha / n * sum_window x**2) ** -beta``.
* Divisive normalisation (spatial, each channel apart; means zero when not given):
  ``y_i = x_i * (k + alpha / n**S * sum_{j in window(i)} (x_j - means_i)**2) ** -beta``, S the number
  of spatial dimensions, the window n wide in each (clipped at the borders). Fitted to what cuDNN
  9 computes on an H200 (the documentation gives no formula); see ``divnorm_backward`` for its
  backward's one deviation from the exact gradient.
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


def _divnorm_terms(x, means, n, alpha, k):
    """(c, window count, s) with ``s_i = k + c * sum_{j in W(i)} (x_j - m_i)**2`` and ``c = alpha / n**S``."""
    axes = _spatial(x)
    c = alpha / n ** len(axes)
    if means is None:
        return c, None, k + c * window_sum(x * x, axes, n)
    m = np.asarray(means, dtype=np.float64)
    count = window_sum(np.ones_like(x), axes, n)
    return c, count, k + c * (window_sum(x * x, axes, n) - 2 * m * window_sum(x, axes, n) + count * m * m)


def divnorm_forward(x, means, n, alpha, beta, k):
    """``y_i = x_i * s_i**-beta`` (the numerator is x itself; the means only centre the window's squares)."""
    x = np.asarray(x, dtype=np.float64)
    return x * _divnorm_terms(x, means, n, alpha, k)[2] ** -beta


def divnorm_backward(x, means, dy, n, alpha, beta, k):
    """(dx, dmeans) as cuDNN computes them.

    dmeans is the exact gradient. dx is the exact gradient for odd n; cuDNN sums the adjoint term over
    the forward's window instead of its mirror image, which differs for even n, and so does this.
    """
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    axes = _spatial(x)
    c, count, s = _divnorm_terms(x, means, n, alpha, k)
    g = dy * x * s ** (-beta - 1.0)
    if means is None:
        return dy * s ** -beta - 2.0 * beta * c * x * window_sum(g, axes, n), None
    m = np.asarray(means, dtype=np.float64)
    dx = dy * s ** -beta - 2.0 * beta * c * (x * window_sum(g, axes, n) - window_sum(g * m, axes, n))
    dmeans = 2.0 * beta * c * g * (window_sum(x, axes, n) - count * m)
    return dx, dmeans
