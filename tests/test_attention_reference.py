"""The float64 multi-head attention reference checked on CPU: backward vs finite differences, window and
length masking, residuals."""
import numpy as np
import pytest

from helpers import numeric_gradient
from reference import attention as ref


def _setup(rng, biases=True, residual=False):
    B, Tq, Tk, heads = 2, 3, 4, 2
    q_size = 4
    q = rng.standard_normal((B, Tq, q_size))
    k = rng.standard_normal((B, Tk, 3))
    v = rng.standard_normal((B, Tk, 5))
    w = ref.random_weights(rng, heads, q_size, 3, 5, 2, 2, 3, q_size, biases=biases)
    lens_q, lens_k = np.array([3, 2]), np.array([4, 3])
    lo, hi = np.array([0, 0, 1]), np.array([2, 4, 4])
    return q, k, v, w, lens_q, lens_k, lo, hi


@pytest.mark.parametrize("biases,residual", [(True, False), (False, True), (True, True)])
def test_backward_matches_finite_differences(rng, biases, residual):
    q, k, v, w, lq, lk, lo, hi = _setup(rng, biases, residual)
    out, cache = ref.forward(q, k, v, w, lq, lk, lo, hi, 0.7, residual)
    dout = rng.standard_normal(out.shape)
    dq, dk, dv, dw = ref.backward(dout, cache)
    f = lambda: (ref.forward(q, k, v, w, lq, lk, lo, hi, 0.7, residual)[0] * dout).sum()  # noqa: E731

    dq_num = numeric_gradient(f, q)
    if residual:  # cuDNN's dq leaves out the residual path; add it back to compare
        valid = (np.arange(q.shape[1])[None, :] < lq[:, None])[..., None]
        dq = dq + dout * valid
    np.testing.assert_allclose(dq, dq_num, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dk, numeric_gradient(f, k), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dv, numeric_gradient(f, v), rtol=1e-5, atol=1e-7)
    assert set(dw) == set(w)
    for key in w:
        np.testing.assert_allclose(dw[key], numeric_gradient(f, w[key]), rtol=1e-5, atol=1e-7, err_msg=key)


def test_window_and_lengths_restrict_keys(rng):
    q, k, v, w, lq, lk, lo, hi = _setup(rng)
    out, _ = ref.forward(q, k, v, w, lq, lk, lo, hi, 0.7)
    # keys outside every window/length do not matter: change them, output unchanged
    k2, v2 = k.copy(), v.copy()
    k2[1, 3], v2[1, 3] = 9.0, -9.0         # past lens_k[1] = 3
    out2, _ = ref.forward(q, k2, v2, w, lq, lk, lo, hi, 0.7)
    np.testing.assert_array_equal(out, out2)
    assert np.all(out[1, 2] == 0) and np.all(out[0, 2] != 0)  # past lens_q[1] = 2
    # query 0 sees only keys 0, 1: a single-key window gives plain projection of that value
    one = ref.forward(q, k, v, w, lq, lk, [2, 2, 2], [3, 3, 3], 0.7)[0]
    want = sum((w["wv"][h] @ v[0, 2] + w["bv"][h]) @ w["wo"][h].T for h in range(2)) + w["bo"]
    np.testing.assert_allclose(one[0, 0], want, rtol=1e-12)
