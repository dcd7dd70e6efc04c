"""The graph tests' float64 references checked on CPU: convolution against a direct loop, dgrad/wgrad as the
adjoints of fprop, activation backward modes against finite differences."""
import itertools

import numpy as np
import pytest

from reference import graph as R


def _direct_conv(x, w, pad, stride, dil):
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])])
    p_ = (h_ + 2 * pad[0] - dil[0] * (r_ - 1) - 1) // stride[0] + 1
    q_ = (w_ + 2 * pad[1] - dil[1] * (s_ - 1) - 1) // stride[1] + 1
    y = np.zeros((n_, k_, p_, q_))
    for n, k, p, q in itertools.product(range(n_), range(k_), range(p_), range(q_)):
        y[n, k, p, q] = sum(xp[n, c, p * stride[0] + r * dil[0], q * stride[1] + s * dil[1]] * w[k, c, r, s]
                            for c in range(c_) for r in range(r_) for s in range(s_))
    return y


@pytest.mark.parametrize("pad,stride,dil", [((1, 1), (1, 1), (1, 1)), ((1, 0), (2, 1), (1, 2)), ((0, 2), (1, 3), (2, 1))])
def test_conv_reference(rng, pad, stride, dil):
    x = rng.standard_normal((2, 3, 7, 8))
    w = rng.standard_normal((4, 3, 3, 2))
    y = R.conv_fprop(x, w, pad, stride, dil)
    np.testing.assert_allclose(y, _direct_conv(x, w, pad, stride, dil), rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    dx = R.conv_dgrad(dy, w, x.shape, pad, stride, dil)
    dw = R.conv_wgrad(dy, x, w.shape, pad, stride, dil)
    assert np.isclose(np.sum(y * dy), np.sum(x * dx), rtol=1e-10)
    assert np.isclose(np.sum(y * dy), np.sum(w * dw), rtol=1e-10)


@pytest.mark.parametrize("mode", sorted(R.BACKWARD))
def test_backward_modes_are_derivatives(rng, mode):
    fwd = R.UNARY[mode.replace("_bwd", "_fwd")]
    x = rng.standard_normal(50) + 0.05  # keep away from relu's kink
    x[np.abs(x) < 1e-3] = 0.5
    h = 1e-6
    num = (fwd(x + h) - fwd(x - h)) / (2 * h)
    np.testing.assert_allclose(R.BACKWARD[mode](np.ones_like(x), x), num, rtol=1e-5, atol=1e-6)


def test_reduce_and_genstats(rng):
    x = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_allclose(R.reduce(x, "add", (2, 3))[:, :, 0, 0], x.sum(axis=(2, 3)))
    s, sq = R.genstats(x)
    assert s.shape == (1, 3, 1, 1)
    np.testing.assert_allclose(sq[0, :, 0, 0], (x ** 2).sum(axis=(0, 2, 3)))


@pytest.mark.parametrize("mode", ["layer", "instance", "batch", "rms"])
def test_norm_reference(rng, mode):
    x = rng.standard_normal((4, 3, 5, 2)) * 3 + 1
    y, mean, inv = R.norm_forward(x, 1.0, None, mode, 0.0)
    axes = {"layer": (1, 2, 3), "rms": (1, 2, 3), "instance": (2, 3), "batch": (0, 2, 3)}[mode]
    if mode == "rms":
        np.testing.assert_allclose((y * y).mean(axis=axes), 1, rtol=1e-10)
    else:
        np.testing.assert_allclose(y.mean(axis=axes), 0, atol=1e-10)
        np.testing.assert_allclose(y.var(axis=axes), 1, rtol=1e-10)
    assert mean.shape == inv.shape
