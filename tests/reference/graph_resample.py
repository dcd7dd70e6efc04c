"""float64 NumPy references for graph resampling (pooling) with separate pre/post padding, 2-D or 3-D, NC<spatial>
layout: forward, backward, and the max-pooling window index. Modes: 'max' (padding is -inf, or the edge value with
padding mode 'edge'), 'avg' (divide by the full window), 'avg_exclude_padding' (by the real elements)."""
from __future__ import annotations

import itertools

import numpy as np


def output_shape(x_shape, window, stride, pre, post):
    return tuple(x_shape[:2]) + tuple((n + a + b - w) // s + 1
                                      for n, a, b, w, s in zip(x_shape[2:], pre, post, window, stride))


def _padded(x, pre, post, fill):
    widths = [(0, 0), (0, 0)] + list(zip(pre, post))
    if fill == "edge":
        return np.pad(x, widths, mode="edge")
    return np.pad(x, widths, constant_values=fill)


def _windows(x_shape, window, stride, pre, post):
    out = output_shape(x_shape, window, stride, pre, post)[2:]
    for o in itertools.product(*(range(k) for k in out)):
        yield o, tuple(slice(i * s, i * s + w) for i, s, w in zip(o, stride, window))


def _fill(mode, padding_mode):
    if padding_mode == "edge":
        return "edge"
    if padding_mode == "neg_inf" or (padding_mode is None and mode == "max"):
        return -np.inf
    return 0.0


def forward(x, mode, window, stride, pre, post, padding_mode=None):
    """(y, index): index = the row-major position of the (first) maximum inside its window (max mode)."""
    x = np.asarray(x, np.float64)
    xp = _padded(x, pre, post, _fill(mode, padding_mode))
    real = _padded(np.ones((1, 1) + x.shape[2:]), pre, post, 0.0)
    y = np.empty(output_shape(x.shape, window, stride, pre, post))
    idx = np.zeros(y.shape, np.int64)
    for o, sl in _windows(x.shape, window, stride, pre, post):
        patch = xp[(Ellipsis,) + sl].reshape(x.shape[:2] + (-1,))
        if mode == "max":
            y[(Ellipsis,) + o] = patch.max(axis=-1)
            idx[(Ellipsis,) + o] = patch.argmax(axis=-1)
        else:
            count = np.prod(window) if mode == "avg" else real[(0, 0) + sl].sum()
            y[(Ellipsis,) + o] = patch.sum(axis=-1) / count
    return y, idx


def backward(x_shape, dy, mode, window, stride, pre, post, x=None):
    """dx; max pooling routes each dy to its window's (first) maximum of ``x`` (padding never wins)."""
    dy = np.asarray(dy, np.float64)
    n, c = x_shape[:2]
    padded_shape = (n, c) + tuple(s + a + b for s, a, b in zip(x_shape[2:], pre, post))
    dxp = np.zeros(padded_shape)
    real = _padded(np.ones((1, 1) + tuple(x_shape[2:])), pre, post, 0.0)
    xp = None if x is None else _padded(np.asarray(x, np.float64), pre, post, -np.inf)
    nn, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    for o, sl in _windows(x_shape, window, stride, pre, post):
        g = dy[(Ellipsis,) + o]
        if mode == "max":
            arg = np.unravel_index(xp[(Ellipsis,) + sl].reshape(n, c, -1).argmax(axis=-1), window)
            np.add.at(dxp, (nn, cc) + tuple(a + s.start for a, s in zip(arg, sl)), g)
        else:
            count = np.prod(window) if mode == "avg" else real[(0, 0) + sl].sum()
            dxp[(Ellipsis,) + sl] += (g / count)[(Ellipsis,) + (None,) * len(window)]
    inner = tuple(slice(a, a + s) for a, s in zip(pre, x_shape[2:]))
    return dxp[(Ellipsis,) + inner]


def distinct(shape, rng):
    """Values with no ties, exact in float16 and bfloat16 for up to 256 distinct magnitudes per sign: a shuffled
    ramp of multiples of 1/64 (so max pooling's argmax is unambiguous in every dtype)."""
    size = int(np.prod(shape))
    ramp = (np.arange(size) - size // 2) / 64.0
    if size > 512:  # beyond what bf16 holds exactly: spread the ramp over [-4, 4) instead
        ramp = (np.arange(size) - size // 2) * (8.0 / size)
    return rng.permutation(ramp).reshape(shape)
