"""The float64 RNN reference checked against itself: hand-written backward vs central finite differences,
and against cuDNN's documented equations on a one-step case (CPU only)."""
import numpy as np
import pytest

from helpers import numeric_gradient
from reference import rnn as ref

CONFIGS = [
    ref.RNNConfig("relu", 3, 4),
    ref.RNNConfig("tanh", 3, 4, num_layers=2, bidirectional=True),
    ref.RNNConfig("lstm", 3, 4, num_layers=2),
    ref.RNNConfig("lstm", 3, 5, bidirectional=True, proj_size=3),
    ref.RNNConfig("gru", 3, 4, num_layers=2, bidirectional=True),
    ref.RNNConfig("gru", 4, 4, skip_input=True, bias_mode="recurrent"),
    ref.RNNConfig("lstm", 4, 4, bias_mode="input"),
    ref.RNNConfig("tanh", 3, 4, bias_mode="none"),
]


def _loss(cfg, x, lengths, mats, biases, hx, cx, dy, dhy, dcy):
    r = ref.forward(cfg, x, lengths, mats, biases, hx, cx)
    return (r.y * dy).sum() + (r.hy * dhy).sum() + (r.cy * dcy).sum()


@pytest.mark.parametrize("cfg", CONFIGS,
                         ids=lambda c: f"{c.mode}-L{c.num_layers}-D{c.dirs}-P{c.proj_size}-{c.bias_mode}")
def test_backward_matches_finite_differences(cfg, rng):
    T, B = 4, 3
    lengths = np.array([4, 2, 3])
    x = rng.standard_normal((T, B, cfg.input_size))
    mats, biases = ref.random_params(cfg, rng)
    L = cfg.num_layers * cfg.dirs
    hx = rng.standard_normal((L, B, cfg.out_size)) * 0.5
    cx = rng.standard_normal((L, B, cfg.hidden_size)) * 0.5
    res = ref.forward(cfg, x, lengths, mats, biases, hx, cx)
    dy, dhy, dcy = (rng.standard_normal(a.shape) for a in (res.y, res.hy, res.cy))
    dx, dhx, dcx, (dm, db) = ref.backward(res, dy, dhy, dcy)
    f = lambda: _loss(cfg, x, lengths, mats, biases, hx, cx, dy, dhy, dcy)  # noqa: E731

    valid = (np.arange(T)[:, None] < lengths)[..., None]
    np.testing.assert_allclose(dx, numeric_gradient(f, x) * valid, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dhx, numeric_gradient(f, hx), rtol=1e-5, atol=1e-7)
    if cfg.mode == "lstm":
        np.testing.assert_allclose(dcx, numeric_gradient(f, cx), rtol=1e-5, atol=1e-7)
    assert set(dm) == set(mats) and set(db) == set(biases)
    for k in mats:
        np.testing.assert_allclose(dm[k], numeric_gradient(f, mats[k]), rtol=1e-5, atol=1e-7, err_msg=f"matrix {k}")
    for k in biases:
        np.testing.assert_allclose(db[k], numeric_gradient(f, biases[k]), rtol=1e-5, atol=1e-7, err_msg=f"bias {k}")


def test_padding_is_zero_and_states_stop_at_length(rng):
    cfg = ref.RNNConfig("lstm", 3, 4, bidirectional=True)
    lengths = np.array([5, 2])
    x = rng.standard_normal((5, 2, 3))
    mats, biases = ref.random_params(cfg, rng)
    r = ref.forward(cfg, x, lengths, mats, biases)
    assert np.all(r.y[2:, 1] == 0) and np.all(r.y[:2, 1] != 0)
    # the second sequence alone, unpadded, gives the same outputs and states
    r2 = ref.forward(cfg, x[:2, 1:2], [2], mats, biases)
    np.testing.assert_allclose(r.y[:2, 1:2], r2.y, rtol=1e-12)
    np.testing.assert_allclose(r.hy[:, 1:2], r2.hy, rtol=1e-12)
    np.testing.assert_allclose(r.cy[:, 1:2], r2.cy, rtol=1e-12)


def test_one_step_matches_documented_equations(rng):
    """GRU and LSTM single step written out exactly as cuDNN documents them (independent of the reference code)."""
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    x, h, c = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal(4)
    for mode in ("gru", "lstm"):
        cfg = ref.RNNConfig(mode, 3, 4)
        M, Bs = ref.random_params(cfg, rng)
        r = ref.forward(cfg, x[None, None], [1], M, Bs, h[None, None], c[None, None])
        W = lambda k: M[(0, k)]  # noqa: E731
        b = lambda k: Bs[(0, k)]  # noqa: E731
        if mode == "gru":
            rt = sig(W(0) @ x + W(3) @ h + b(0) + b(3))
            it = sig(W(1) @ x + W(4) @ h + b(1) + b(4))
            ht_ = np.tanh(W(2) @ x + rt * (W(5) @ h + b(5)) + b(2))
            want_h = (1 - it) * ht_ + it * h
        else:
            g = [W(k) @ x + W(k + 4) @ h + b(k) + b(k + 4) for k in range(4)]
            ct = sig(g[1]) * c + sig(g[0]) * np.tanh(g[2])
            want_h = sig(g[3]) * np.tanh(ct)
            np.testing.assert_allclose(r.cy[0, 0], ct, rtol=1e-12)
        np.testing.assert_allclose(r.hy[0, 0], want_h, rtol=1e-12)


@pytest.mark.parametrize("layout", ["seq_major", "batch_major", "packed"])
def test_layout_round_trip(layout, rng):
    lengths = [3, 3, 1]
    a = rng.standard_normal((3, 3, 2)) * (np.arange(3)[:, None] < np.array(lengths))[..., None]
    b = ref.to_layout(a, lengths, layout)
    assert b.shape == {"seq_major": (3, 3, 2), "batch_major": (3, 3, 2), "packed": (7, 2)}[layout]
    np.testing.assert_array_equal(ref.from_layout(b, lengths, layout, 3), a)
