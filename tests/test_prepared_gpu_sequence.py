"""RNN, multi-head attention and CTC loss on the prepared call, on the GPU: repeat calls (replayed from their prepared
calls) give what the validated path gives (a second handle with its caches cleared before each call) on fresh random
data at new addresses, with NaN-poisoned given outputs or allocated ones (new weight gradients zeroed by the replay),
and the handle's prepared calls do not grow. CTC loss checks its labels by value, so it is validated every call and
makes no prepared call. Positions past a sequence's length are compared as zero (cuDNN leaves some unwritten)."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.calls import prepared as P

pytestmark = pytest.mark.gpu
TOL = dict(rtol=1e-9, atol=1e-11)  # float64: the same kernels on the same data, up to their reductions' order
REPEATS = 3


def dev(a):
    return cudnn.to_device(np.ascontiguousarray(a))


def nan(shape, dtype=np.float64):
    return dev(np.full(shape, np.nan, dtype))


def entries(h) -> int:
    return len(h.cache.get(P.CACHE, {}))


def _compare(got: dict, want: dict, masks: dict) -> None:
    assert got.keys() == want.keys()
    for k, g in got.items():
        if g is None:
            assert want[k] is None, k
            continue
        m = masks.get(k, True)
        gv, wv = np.where(m, g.to_numpy(), 0.0), np.where(m, want[k].to_numpy(), 0.0)
        assert not np.isnan(gv).any(), f"{k}: NaN where the call writes"
        np.testing.assert_allclose(gv, wv, err_msg=k, **TOL)


def _repeat(rounds, make_inputs, masks) -> None:
    """The chain on ``h`` once with outputs given and once allocated (making their prepared calls), then ``REPEATS``
    times more each on fresh inputs, each against the validated chain on ``ref_h``."""
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        rounds(h, make_inputs(), given=True)
        rounds(h, make_inputs(), given=False)
        n = entries(h)
        for given in [True, False] * REPEATS:
            ins = make_inputs()
            got = rounds(h, ins, given=given)
            ref_h.clear_caches()
            want = rounds(ref_h, ins, given=False, validated=True)
            _compare(got, want, masks)
        assert entries(h) == n >= 1  # replayed, not rebuilt


# ---------------------------------------------------------------- RNN

@pytest.mark.parametrize("layout", ["seq_major", "batch_major", "packed"])
@pytest.mark.parametrize("mode", ["lstm", "gru", "tanh"])
def test_rnn_forward_and_backward_repeat_calls_equal_the_validated_path(mode, layout):
    rng = np.random.default_rng()
    T, B, I, H = 6, 3, 5, 7
    lengths = [6, 4, 3]
    rnn = cudnn.RNN(mode, I, H, num_layers=2, bidirectional=mode == "gru", dtype=np.float64)
    lstm, S = mode == "lstm", rnn.state_shape
    with cudnn.Handle() as h0:
        n_w = rnn.weight_space_size(h0) // 8
    xshape = {"seq_major": (T, B, I), "batch_major": (B, T, I), "packed": (sum(lengths), I)}[layout]
    yshape = xshape[:-1] + (rnn.dirs * H,)
    hshape = (S[0], B, S[1])
    valid = {"seq_major": np.arange(T)[:, None] < np.array(lengths)[None, :],
             "batch_major": np.arange(T)[None, :] < np.array(lengths)[:, None],
             "packed": np.ones(xshape[:1], bool)}[layout][..., None]

    def inputs():
        return {"x": dev(rng.standard_normal(xshape)), "w": dev(rng.standard_normal(n_w) * 0.3),
                "hx": dev(rng.standard_normal(hshape)), "cx": dev(rng.standard_normal(hshape)) if lstm else None,
                "dy": dev(np.where(valid, rng.standard_normal(yshape), 0.0)), "dhy": dev(rng.standard_normal(hshape)),
                "dcy": dev(rng.standard_normal(hshape)) if lstm else None, "dw0": rng.standard_normal(n_w)}

    def rounds(hh, a, given, validated=False):
        outs = {"y": nan(yshape), "hy": nan(hshape), "cy": nan(hshape) if lstm else None} if given else {}
        fwd = cudnn.rnn_forward(hh, rnn, a["x"], a["w"], seq_lengths=list(lengths), seq_layout=layout, hx=a["hx"],
                                cx=a["cx"], training=True, **outs)
        if given:
            assert fwd.y is outs["y"] and fwd.hy is outs["hy"] and fwd.cy is outs["cy"]
        if validated:
            hh.clear_caches()
        gouts = {"dx": nan(xshape), "dhx": nan(hshape), "dcx": nan(hshape) if lstm else None} if given else {}
        g = cudnn.rnn_backward_data(hh, rnn, fwd, a["dy"], a["w"], dhy=a["dhy"], dcy=a["dcy"], **gouts)
        if validated:
            hh.clear_caches()
        dw = cudnn.rnn_backward_weights(hh, rnn, fwd, dweights=dev(a["dw0"]) if given else None)
        dwv = dw.to_numpy() if given else dw.to_numpy() + a["dw0"]  # both: start values + gradients
        return {"y": fwd.y, "hy": fwd.hy, "cy": fwd.cy, "dx": g.dx, "dhx": g.dhx, "dcx": g.dcx, "dw": dev(dwv)}

    _repeat(rounds, inputs, {"y": valid, "dx": valid})


def test_rnn_with_torch_tensors_gives_torch_tensors_equal_to_the_validated_path():
    """Torch tensors in, torch tensors out: a replay's new outputs, reserve and device lengths come from torch's
    allocator (the new weight gradients zeroed by the replay itself)."""
    torch = pytest.importorskip("torch")
    rnn = cudnn.RNN("lstm", 5, 7, dtype=np.float64)
    T, B, lengths = 6, 3, [6, 6, 6]  # no padding: every output element is written
    with cudnn.Handle() as h0:
        n_w = rnn.weight_space_size(h0) // 8

    def inputs():
        t = lambda *shape: torch.randn(*shape, dtype=torch.float64, device="cuda")  # noqa: E731
        return {"x": t(T, B, 5), "w": t(n_w) * 0.3, "hx": t(1, B, 7), "cx": t(1, B, 7), "dy": t(T, B, 7)}

    def chain(hh, a, validated=False):
        fwd = cudnn.rnn_forward(hh, rnn, a["x"], a["w"], seq_lengths=lengths, hx=a["hx"], cx=a["cx"], training=True)
        if validated:
            hh.clear_caches()
        g = cudnn.rnn_backward_data(hh, rnn, fwd, a["dy"], a["w"])
        if validated:
            hh.clear_caches()
        assert isinstance(fwd.reserve, type(a["x"]))
        return [fwd.y, fwd.hy, fwd.cy, *g, cudnn.rnn_backward_weights(hh, rnn, fwd)]

    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        chain(h, inputs())
        n = entries(h)
        for _ in range(REPEATS):
            a = inputs()
            got = chain(h, a)
            ref_h.clear_caches()
            want = chain(ref_h, a, validated=True)
            for i, (g, w) in enumerate(zip(got, want)):
                assert isinstance(g, torch.Tensor), i
                np.testing.assert_allclose(g.cpu().numpy(), w.cpu().numpy(), err_msg=str(i), **TOL)
        assert entries(h) == n >= 1


# ---------------------------------------------------------------- multi-head attention

def test_attention_forward_and_backward_repeat_calls_equal_the_validated_path():
    rng = np.random.default_rng()
    B, Tq, Tk, q_size = 3, 4, 5, 6
    lq, lk = [4, 2, 3], [5, 3, 4]
    lo, hi = [0, 0, 1, 2], [2, 4, 5, 5]
    attn = cudnn.MultiHeadAttention(2, q_size, 5, 7, q_proj_size=3, k_proj_size=3, v_proj_size=4, max_seq_q=Tq,
                                    max_seq_kv=Tk, max_batch=B, biases=True, scale=0.6, dtype=np.float64)
    with cudnn.Handle() as h0:
        n_w = attn.weight_space_size(h0) // 8
    oshape = (B, Tq, q_size)
    valid_q = (np.arange(Tq)[None, :] < np.array(lq)[:, None])[..., None]
    valid_k = (np.arange(Tk)[None, :] < np.array(lk)[:, None])[..., None]

    def inputs():
        return {"q": dev(rng.standard_normal(oshape)), "k": dev(rng.standard_normal((B, Tk, 5))),
                "v": dev(rng.standard_normal((B, Tk, 7))), "w": dev(rng.standard_normal(n_w) * 0.3),
                "dout": dev(np.where(valid_q, rng.standard_normal(oshape), 0.0)), "dw0": rng.standard_normal(n_w)}

    def rounds(hh, a, given, validated=False):
        fwd = cudnn.attention_forward(hh, attn, a["q"], a["k"], a["v"], a["w"], seq_len_q=lq, seq_len_kv=lk,
                                      lo_win=lo, hi_win=hi, residuals=a["q"], o=nan(oshape) if given else None,
                                      training=True)
        if validated:
            hh.clear_caches()
        gouts = {"dq": nan(oshape), "dk": nan((B, Tk, 5)), "dv": nan((B, Tk, 7))} if given else {}
        g = cudnn.attention_backward_data(hh, attn, fwd, a["dout"], a["w"], **gouts)
        if validated:
            hh.clear_caches()
        dw = cudnn.attention_backward_weights(hh, attn, fwd, a["dout"], a["w"],
                                              dweights=dev(a["dw0"]) if given else None)
        dwv = dw.to_numpy() if given else dw.to_numpy() + a["dw0"]  # both: start values + gradients
        return {"o": fwd.o, "dq": g.dq, "dk": g.dk, "dv": g.dv, "dw": dev(dwv)}

    _repeat(rounds, inputs, {"o": valid_q, "dq": valid_q, "dk": valid_k, "dv": valid_k})


# ---------------------------------------------------------------- CTC loss

@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
def test_ctc_loss_repeat_calls_are_validated_and_equal_the_reference_handle(given):
    rng = np.random.default_rng()
    T, N, A = 12, 3, 6
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        for _ in range(REPEATS + 1):
            logits = dev(rng.standard_normal((T, N, A)).astype(np.float32))
            label_lengths = rng.integers(1, 5, N)
            labels = rng.integers(1, A, int(label_lengths.sum()))
            input_lengths = rng.integers(10, T + 1, N)
            outs = {"costs": nan((N,), np.float32), "gradients": nan((T, N, A), np.float32)} if given else {}
            got = cudnn.ctc_loss(h, logits, labels, label_lengths, input_lengths, **outs)
            ref_h.clear_caches()
            want = cudnn.ctc_loss(ref_h, logits, labels, label_lengths, input_lengths)
            # cuDNN writes the gradients of each sequence's first input_lengths[n] steps only
            valid = np.arange(T)[:, None, None] < input_lengths[None, :, None]
            for k in ("costs", "gradients"):
                g, w = getattr(got, k).to_numpy(), getattr(want, k).to_numpy()
                if k == "gradients":
                    g, w = np.where(valid, g, 0), np.where(valid, w, 0)
                assert not np.isnan(g).any(), k
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=k)
        assert entries(h) == 0  # every call validated: its labels' values decide what reaches cuDNN
