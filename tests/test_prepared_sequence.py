"""RNN, multi-head attention and CTC loss on the prepared call (cudnn_py.calls.prepared), on the CPU: the queuing C
calls stubbed, a Handle never created in cuDNN, arrays at made-up addresses, allocations and the lengths' upload stood
in for. A repeat call replays with the new addresses, uploads the lengths again into its own new array and zeroes its
own new weight gradients; host data (lengths, windows) is keyed by value, so other values are another prepared call
and equal values in a list or a NumPy array are the same one; CTC loss, whose labels are checked by value, is
validated on every call."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py
from cudnn_py import capi
from cudnn_py.core import memory
from cudnn_py.calls import prepared as P
from cudnn_py.errors import ClosedError, InvalidValueError
from cudnn_py.ops import attention as A, ctc as C, rnn as R, sequence_models as SM
from helpers import FakeCFunction, fake_array, fake_cudnn_handle, fake_prepared_outputs

arr = fake_array


@pytest.fixture(autouse=True)
def fake_memory(monkeypatch):
    """New arrays at made-up addresses: the validated path's (memory.empty) and a replay's (its allocator)."""
    def empty(shape, dtype=np.float32, stream=None, *, device=None):
        return arr(shape if isinstance(shape, tuple) else (shape,), dtype)

    monkeypatch.setattr(memory, "empty", empty)
    fake_prepared_outputs(monkeypatch)


@pytest.fixture
def uploads(monkeypatch):
    """The lengths' uploads: (device address, host values) of each, the validated path's and a replay's."""
    got: list = []
    monkeypatch.setattr(SM, "_upload", lambda handle, ptr, host: got.append((ptr, tuple(host.tolist()))))
    return got


@pytest.fixture
def stub(monkeypatch):
    def make(name, sizes=None):
        """A stand-in for ``capi.<name>``; ``sizes``: the values it writes into its trailing ``byref`` arguments."""
        fn = FakeCFunction()
        if sizes is not None:
            def call(*args):
                fn.calls.append(args)
                for a, v in zip(args[-len(sizes):], sizes):
                    a._obj.value = v
            monkeypatch.setattr(capi, name, call)
        else:
            monkeypatch.setattr(capi, name, fn)
        return fn
    return make


def entries(h):
    return len(h.cache.get(P.CACHE, {}))


@pytest.mark.parametrize("fn, inputs, outputs", [
    (R._forward, {"x", "weights", "hx", "cx"}, {"y", "hy", "cy"}),
    (R._backward_data, {"x", "y", "dy", "weights", "lengths", "hx", "cx", "dhy", "dcy"},
     {"reserve", "dx", "dhx", "dcx"}),
    (R._backward_weights, {"x", "y", "reserve", "lengths", "hx"}, {"dweights"}),
    (A._forward, {"q", "k", "v", "weights", "residuals"}, {"o"}),
    (A._backward_data, {"q", "k", "v", "dout", "weights", "lengths_q", "lengths_kv"}, {"reserve", "dq", "dk", "dv"}),
    (A._backward_weights, {"q", "k", "v", "dout", "weights", "reserve"}, {"dweights"}),
    (cudnn_py.ctc_loss, {"logits"}, {"costs", "gradients"}),
])
def test_the_calls_are_prepared_with_their_arrays_declared(fn, inputs, outputs):
    """The reserve a backward data call updates is an output; no output may be an input (cuDNN documents none)."""
    spec = fn.__prepared__
    assert spec.outputs == outputs and spec.arrays == inputs | outputs and spec.inplace is False


# ---------------------------------------------------------------- RNN

WORDS = 64  # the made-up weight space, in float32 elements


def _rnn(mode="lstm"):
    rnn = cudnn_py.RNN(mode, 4, 8)
    rnn._wsize[0] = WORDS * 4
    return rnn


def _rnn_stubs(stub):
    return (stub("cudnnGetRNNTempSpaceSizes", sizes=(256, 512)), stub("cudnnRNNForward"),
            stub("cudnnRNNBackwardData_v8"), stub("cudnnRNNBackwardWeights_v8"), stub("cudnnSetTensor"))


def _forward(h, rnn, lengths, **kw):
    T, B = 5, 3
    x, w, hx, cx = arr((T, B, 4)), arr((WORDS,)), arr((1, B, 8)), arr((1, B, 8))
    y, hy, cy = arr((T, B, 8)), arr((1, B, 8)), arr((1, B, 8))
    fwd = cudnn_py.rnn_forward(h, rnn, x, w, seq_lengths=lengths, hx=hx, cx=cx, y=y, hy=hy, cy=cy, **kw)
    return fwd, (x, w, hx, cx, y, hy, cy)


def test_rnn_forward_replays_with_new_addresses_and_uploads_the_lengths_again(stub, uploads):
    sizes, fwd_c, *_ = _rnn_stubs(stub)
    h, rnn = fake_cudnn_handle(), _rnn()
    for lengths in ([5, 4, 2], (5, 4, 2), np.array([5, 4, 2], np.int64)):  # equal values: one prepared call
        fwd, (x, w, hx, cx, y, hy, cy) = _forward(h, rnn, lengths, training=True)
        assert (fwd.y, fwd.hy, fwd.cy) == (y, hy, cy) and fwd.reserve.nbytes == 512
        c = fwd_c.calls[-1]
        dev_lengths = fwd._ctx["dev_lengths"]
        assert c[3] == dev_lengths.ptr and uploads[-1] == (dev_lengths.ptr, (5, 4, 2))
        assert (c[5], c[7], c[9], c[10], c[12], c[13], c[15]) == tuple(a.ptr for a in (x, y, hx, hy, cx, cy, w))
        assert c[16:] == (256, h.workspace.ptr, 512, fwd.reserve.ptr)
        assert fwd._ctx["x"] is x and fwd._ctx["seq_lengths"] == (5, 4, 2)
    assert entries(h) == 1 and len(sizes.calls) == 1  # validated once
    assert len(fwd_c.calls) == len(uploads) == 3
    assert len({c[3] for c in fwd_c.calls}) == len({c[-1] for c in fwd_c.calls}) == 3  # new lengths and reserves

    _forward(h, rnn, [5, 5, 2], training=True)  # other lengths: another prepared call, validated
    _forward(h, rnn, [5, 4, 2])  # inference: another one, without a reserve
    assert entries(h) == 3 and len(sizes.calls) == 3
    assert uploads[-2][1] == (5, 5, 2) and fwd_c.calls[-1][-2:] == (0, None)


def test_rnn_lengths_are_still_checked_and_unhashable_ones_validated(stub, uploads):
    _, fwd_c, *_ = _rnn_stubs(stub)
    h, rnn = fake_cudnn_handle(), _rnn()
    with pytest.raises(InvalidValueError, match="seq_lengths"):
        _forward(h, rnn, [5, 6, 2])
    with pytest.raises(InvalidValueError, match="seq_lengths"):
        _forward(h, rnn, np.array([5.0, 4.0, 2.0]))  # not ints: not keyed by value, refused as before
    assert entries(h) == 0 and not fwd_c.calls


def test_rnn_backward_calls_replay_and_zero_their_new_weight_gradients(stub, uploads):
    sizes, _, data_c, weights_c, zero_c = _rnn_stubs(stub)
    h, rnn = fake_cudnn_handle(), _rnn()
    for _ in range(3):
        fwd, (x, w, hx, cx, *_) = _forward(h, rnn, [5, 4, 2], training=True)
        lengths = fwd._ctx["dev_lengths"]
        dy, dx, dhx, dcx = arr(fwd.y.shape), arr(x.shape), arr(hx.shape), arr(cx.shape)
        g = cudnn_py.rnn_backward_data(h, rnn, fwd, dy, w, dx=dx, dhx=dhx, dcx=dcx)
        assert g == (dx, dhx, dcx)
        c = data_c.calls[-1]
        assert (c[2], c[4], c[5], c[7], c[9], c[11], c[13], c[15], c[17]) == tuple(
            a.ptr for a in (lengths, fwd.y, dy, dx, hx, dhx, cx, dcx, w))
        assert c[10] is None and c[14] is None  # no dhy, dcy: NULL
        assert c[18:] == (256, h.workspace.ptr, 512, fwd.reserve.ptr)
        dw = cudnn_py.rnn_backward_weights(h, rnn, fwd)
        assert zero_c.calls[-1][2] == dw.ptr  # the new gradients are zeroed before cuDNN adds into them
        c = weights_c.calls[-1]
        assert (c[3], c[5], c[7], c[9], c[11], c[-1]) == tuple(a.ptr for a in (lengths, x, hx, fwd.y, dw, fwd.reserve))
    assert len(zero_c.calls) == len(weights_c.calls) == len(data_c.calls) == 3
    assert len({c[2] for c in zero_c.calls}) == 3
    assert entries(h) == 3 and len(sizes.calls) == 3  # forward, backward data, backward weights: validated once each


def test_a_closed_rnn_is_refused_on_a_replay(stub, uploads):
    _, fwd_c, *_ = _rnn_stubs(stub)
    h, rnn = fake_cudnn_handle(), _rnn()
    for _ in range(2):
        _forward(h, rnn, [5, 4, 2])
    rnn.close()
    with pytest.raises(ClosedError):
        _forward(h, rnn, [5, 4, 2])
    assert len(fwd_c.calls) == len(uploads) == 2  # neither the upload nor cuDNN ran


# ---------------------------------------------------------------- multi-head attention

B, TQ, TK = 3, 4, 5


def _attn():
    attn = cudnn_py.MultiHeadAttention(2, 6, 5, 7, proj_size=3, max_seq_q=TQ, max_seq_kv=TK, max_batch=B)
    for training in (False, True):
        attn._sizes[(0, training)] = A.AttentionBufferSizes(WORDS * 4, 128, 256 if training else 0)
    return attn


def _attn_forward(h, attn, lq=(4, 2, 3), lo=None, **kw):
    q, k, v, w, o = arr((B, TQ, 6)), arr((B, TK, 5)), arr((B, TK, 7)), arr((WORDS,)), arr((B, TQ, 6))
    fwd = cudnn_py.attention_forward(h, attn, q, k, v, w, seq_len_q=lq, seq_len_kv=[5, 3, 4], lo_win=lo,
                                     residuals=q, o=o, **kw)
    return fwd, (q, k, v, w, o)


def test_attention_replays_with_new_addresses_lengths_and_the_windows_by_value(stub, uploads):
    fwd_c, data_c, weights_c, zero_c = (stub(n) for n in ("cudnnMultiHeadAttnForward", "cudnnMultiHeadAttnBackwardData",
                                                          "cudnnMultiHeadAttnBackwardWeights", "cudnnSetTensor"))
    h, attn = fake_cudnn_handle(), _attn()
    for lo in ([0, 0, 1, 1], (0, 0, 1, 1), np.array([0, 0, 1, 1])):
        fwd, (q, k, v, w, o) = _attn_forward(h, attn, lo=lo, training=True)
        assert fwd.o is o and fwd.reserve.nbytes == 256
        lq, lk = fwd._ctx["lengths"]
        c = fwd_c.calls[-1]
        assert list(c[3]) == [0, 0, 1, 1] and list(c[4]) == [TK] * TQ
        assert (c[5], c[6], c[8], c[9], c[11], c[13], c[15], c[17]) == tuple(
            a.ptr for a in (lq, lk, q, q, k, v, o, w))  # residuals = q
        assert c[18:] == (128, h.workspace.ptr, 256, fwd.reserve.ptr)
        assert uploads[-2:] == [(lq.ptr, (4, 2, 3)), (lk.ptr, (5, 3, 4))]
        dout, dq, dk, dv = arr(o.shape), arr(q.shape), arr(k.shape), arr(v.shape)
        assert cudnn_py.attention_backward_data(h, attn, fwd, dout, w, dq=dq, dk=dk, dv=dv) == (dq, dk, dv)
        c = data_c.calls[-1]
        assert list(c[2]) == [0, 0, 1, 1]
        assert (c[4], c[5], c[7], c[9], c[10], c[12], c[13], c[15], c[16], c[18]) == tuple(
            a.ptr for a in (lq, lk, dout, dq, q, dk, k, dv, v, w))
        assert c[19:] == (128, h.workspace.ptr, 256, fwd.reserve.ptr)
        dw = cudnn_py.attention_backward_weights(h, attn, fwd, dout, w)
        assert zero_c.calls[-1][2] == dw.ptr
        c = weights_c.calls[-1]
        assert (c[4], c[6], c[8], c[10], c[12], c[13], c[-1]) == tuple(a.ptr for a in (q, k, v, dout, w, dw,
                                                                                       fwd.reserve))
    assert entries(h) == 3 and len(fwd_c.calls) == len(data_c.calls) == len(weights_c.calls) == 3
    _attn_forward(h, attn, lo=[0, 1, 1, 1], training=True)  # other windows: another prepared call
    _attn_forward(h, attn, lq=[4, 4, 3], lo=[0, 0, 1, 1], training=True)  # other lengths: another one
    assert entries(h) == 5
    assert list(fwd_c.calls[-2][3]) == [0, 1, 1, 1] and uploads[-2][1] == (4, 4, 3)


def test_attention_windows_are_still_checked(stub, uploads):
    fwd_c = stub("cudnnMultiHeadAttnForward")
    h, attn = fake_cudnn_handle(), _attn()
    with pytest.raises(InvalidValueError, match="lo_win < hi_win"):
        _attn_forward(h, attn, lo=[0, 0, 5, 1])
    assert entries(h) == 0 and not fwd_c.calls


# ---------------------------------------------------------------- CTC loss

def test_ctc_loss_is_validated_on_every_call(stub, monkeypatch):
    """Its labels are checked by value and copied to the device each call: no prepared call is made, and labels
    that no longer fit are refused on a repeat call of the same signature."""
    loss = stub("cudnnCTCLoss_v8")
    stub("cudnnGetCTCLossWorkspaceSize_v8", sizes=(64,))
    copies: list = []

    def to_device(v, stream=None, *, device=None):
        copies.append(arr(v.shape, v.dtype))
        return copies[-1]
    monkeypatch.setattr(C, "to_device", to_device)
    h = fake_cudnn_handle()
    T, N, A_ = 6, 2, 5
    for labels in ((1, 2, 3, 4), (2, 2, 3, 1)):
        x, costs, grads = arr((T, N, A_)), arr((N,)), arr((T, N, A_))
        r = cudnn_py.ctc_loss(h, x, labels, (2, 2), (6, 6), costs=costs, gradients=grads)
        assert r == (costs, grads)
        c = loss.calls[-1]
        assert (c[4], c[5], c[6], c[7], c[8], c[10]) == tuple(a.ptr for a in (x, *copies[-3:], costs, grads))
        assert c[11:] == (64, h.workspace.ptr)
    with pytest.raises(InvalidValueError, match="labels"):
        cudnn_py.ctc_loss(h, arr((T, N, A_)), (1, 9, 3, 4), (2, 2), (6, 6), costs=arr((N,)), gradients=arr((T, N, A_)))
    assert entries(h) == 0 and len(loss.calls) == 2
