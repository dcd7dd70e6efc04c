"""Float64 NumPy references for pooling, forward and backward, 1 to 3 spatial dimensions.

Layout is NC<spatial>. ``mode`` is ``"max"`` (padding never wins: it counts as -inf),
``"avg_include"`` (divide by the full window, padded positions count as zeros) or
``"avg_exclude"`` (divide by the number of real elements in the window). The output size per
dimension is ``1 + (in + 2 * pad - window) // stride``, as cuDNN computes it.
"""
from __future__ import annotations

import itertools

import numpy as np


def output_shape(x_shape, window, padding, stride):
    n, c, *spatial = x_shape
    return (n, c) + tuple(1 + (s + 2 * p - w) // t for s, w, p, t in zip(spatial, window, padding, stride))


def _windows(x_shape, window, padding, stride):
    """Yield (output index, slices into the padded input) for every output position."""
    out = output_shape(x_shape, window, padding, stride)[2:]
    for o in itertools.product(*(range(k) for k in out)):
        yield o, tuple(slice(i * t, i * t + w) for i, t, w in zip(o, stride, window))


def _pad(a, padding, value):
    return np.pad(a, [(0, 0), (0, 0)] + [(p, p) for p in padding], constant_values=value)


def _real(x_shape, padding):
    """1 where the padded input holds a real element, 0 on padding (summed per window)."""
    return _pad(np.ones((1, 1) + tuple(x_shape[2:])), padding, 0.0)


def forward(x, mode, window, padding, stride):
    x = np.asarray(x, dtype=np.float64)
    y = np.empty(output_shape(x.shape, window, padding, stride), dtype=np.float64)
    xp = _pad(x, padding, -np.inf if mode == "max" else 0.0)
    real = _real(x.shape, padding)
    for o, sl in _windows(x.shape, window, padding, stride):
        patch = xp[(Ellipsis,) + sl]
        if mode == "max":
            y[(Ellipsis,) + o] = patch.reshape(patch.shape[:2] + (-1,)).max(axis=-1)
        else:
            count = np.prod(window) if mode == "avg_include" else real[(0, 0) + sl].sum()
            y[(Ellipsis,) + o] = patch.reshape(patch.shape[:2] + (-1,)).sum(axis=-1) / count
    return y


def backward(x, dy, mode, window, padding, stride):
    """dx for ``forward``; for max, each dy goes to the (first) maximum of its window."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    xp = _pad(x, padding, -np.inf if mode == "max" else 0.0)
    dxp = np.zeros_like(xp)
    real = _real(x.shape, padding)
    n, c = x.shape[:2]
    for o, sl in _windows(x.shape, window, padding, stride):
        g = dy[(Ellipsis,) + o]
        if mode == "max":
            patch = xp[(Ellipsis,) + sl].reshape(n, c, -1)
            arg = np.unravel_index(patch.argmax(axis=-1), window)
            idx = tuple(a + s.start for a, s in zip(arg, sl))
            nn, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
            np.add.at(dxp, (nn, cc) + idx, g)
        else:
            count = np.prod(window) if mode == "avg_include" else real[(0, 0) + sl].sum()
            dxp[(Ellipsis,) + sl] += (g / count)[(Ellipsis,) + (None,) * len(window)]
    inner = tuple(slice(p, p + s) for p, s in zip(padding, x.shape[2:]))
    return dxp[(Ellipsis,) + inner]


def distinct_values(shape, rng, dtype=np.float32):
    """Random inputs with no two equal values, exactly representable in float16 for < 2048 elements.

    Max pooling's backward routes each gradient to the window's maximum; ties would make the
    reference ambiguous, so the tests draw a shuffled ramp instead of normal noise.
    """
    size = int(np.prod(shape))
    ramp = (np.arange(size) - size / 2) / (2048 if size < 2048 else size)
    return rng.permutation(ramp).reshape(shape).astype(dtype)
