"""Float64 NumPy references for cudnnSoftmaxForward/Backward.

Layout NC<spatial>. ``mode`` ``"instance"`` normalises over every axis but N; ``"channel"`` over C
alone, for each N and spatial position. ``algo`` ``"fast"`` and ``"accurate"`` give the softmax
(same values in float64), ``"log"`` the log-softmax. Backward takes the forward's output y.
"""
from __future__ import annotations

import numpy as np


def _axes(ndim, mode):
    if mode == "instance":
        return tuple(range(1, ndim))
    if mode == "channel":
        return (1,)
    raise ValueError(f"unknown softmax mode {mode!r}")


def forward(x, algo, mode):
    x = np.asarray(x, dtype=np.float64)
    axes = _axes(x.ndim, mode)
    z = x - x.max(axis=axes, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axes, keepdims=True))
    return z - lse if algo == "log" else np.exp(z - lse)


def backward(y, dy, algo, mode):
    y = np.asarray(y, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    axes = _axes(y.ndim, mode)
    if algo == "log":
        return dy - np.exp(y) * dy.sum(axis=axes, keepdims=True)
    return y * (dy - (dy * y).sum(axis=axes, keepdims=True))
