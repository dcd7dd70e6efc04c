"""The float64 convolution references (tests/reference/conv.py) against direct loops and each other; CPU only."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from reference import conv as ref


def _direct(x, w, pad, stride, dilation, groups, mode):
    """y by the definition, one output element at a time (any spatial rank)."""
    nd = x.ndim - 2
    if mode == "convolution":
        w = w[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pad))
    out = ref.output_shape(x.shape, w.shape, pad, stride, dilation)
    y = np.zeros(out)
    kg, cg = w.shape[0] // groups, w.shape[1]
    for n, k in itertools.product(range(out[0]), range(out[1])):
        g = k // kg
        for p in itertools.product(*(range(o) for o in out[2:])):
            acc = 0.0
            for c in range(cg):
                for r in itertools.product(*(range(s) for s in w.shape[2:])):
                    idx = tuple(p[i] * stride[i] + r[i] * dilation[i] for i in range(nd))
                    acc += xp[(n, g * cg + c) + idx] * w[(k, c) + r]
            y[(n, k) + p] = acc
    return y


CASES = [
    ((2, 4, 7, 6), (6, 2, 3, 2), ((1, 2), (0, 1)), (2, 1), (1, 2), 2),
    ((1, 3, 5, 6, 4), (2, 3, 2, 3, 2), ((1, 0), (1, 1), (0, 2)), (1, 2, 1), (2, 1, 1), 1),
    ((3, 2, 9), (4, 1, 3), ((2, 2),), (3,), (2,), 2),
    ((2, 6, 6, 6), (6, 1, 3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), 6),
]


@pytest.mark.parametrize("mode", ["cross_correlation", "convolution"])
@pytest.mark.parametrize("xs,ws,pad,stride,dil,groups", CASES)
def test_forward_matches_definition(rng, xs, ws, pad, stride, dil, groups, mode):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    y = ref.conv_forward(x, w, pad, stride, dil, groups, mode)
    np.testing.assert_allclose(y, _direct(x, w, pad, stride, dil, groups, mode), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["cross_correlation", "convolution"])
@pytest.mark.parametrize("xs,ws,pad,stride,dil,groups", CASES)
def test_backward_passes_are_adjoints(rng, xs, ws, pad, stride, dil, groups, mode):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    y = ref.conv_forward(x, w, pad, stride, dil, groups, mode)
    dy = rng.standard_normal(y.shape)
    dx = ref.conv_backward_data(dy, w, xs, pad, stride, dil, groups, mode)
    dw = ref.conv_backward_filter(x, dy, ws, pad, stride, dil, groups, mode)
    assert dx.shape == xs and dw.shape == ws
    a = (y * dy).sum()
    assert np.isclose(a, (x * dx).sum(), rtol=1e-12) and np.isclose(a, (w * dw).sum(), rtol=1e-12)


def test_backward_filter_is_the_gradient(rng):
    """Finite differences on one filter element."""
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3))
    kw = dict(pad=1, stride=2)
    dy = rng.standard_normal(ref.conv_forward(x, w, **kw).shape)
    dw = ref.conv_backward_filter(x, dy, w.shape, **kw)
    e = np.zeros_like(w)
    e[1, 2, 0, 1] = 1e-6
    fd = ((ref.conv_forward(x, w + e, **kw) - ref.conv_forward(x, w - e, **kw)) * dy).sum() / 2e-6
    assert np.isclose(fd, dw[1, 2, 0, 1], rtol=1e-6)


def test_bias_and_fused(rng):
    dy = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_allclose(ref.conv_backward_bias(dy).reshape(-1), dy.sum(axis=(0, 2, 3)))
    x, w = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((3, 2, 3, 3))
    b, z = rng.standard_normal((1, 3, 1, 1)), rng.standard_normal((1, 3, 4, 4))
    conv = ref.conv_forward(x, w, pad=1)
    np.testing.assert_allclose(ref.conv_bias_activation(x, w, b, z, 2.0, 0.5, "relu", pad=1),
                               np.maximum(2.0 * conv + 0.5 * z + b, 0))
    np.testing.assert_allclose(ref.conv_bias_activation(x, w, b, None, activation="identity", pad=1), conv + b)
    with pytest.raises(ValueError, match="activation"):
        ref.conv_bias_activation(x, w, b, activation="tanh", pad=1)


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match="groups"):
        ref.conv_forward(np.ones((1, 3, 4, 4)), np.ones((2, 2, 3, 3)), groups=2)
    with pytest.raises(ValueError, match="dy shape"):
        ref.conv_backward_data(np.ones((1, 2, 3, 3)), np.ones((2, 3, 3, 3)), (1, 3, 4, 4))
