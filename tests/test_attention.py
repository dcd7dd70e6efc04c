"""cudnn_py.ops.attention: descriptors and validation on CPU, numerics on the GPU against the float64
reference in tests/reference/attention.py."""
import numpy as np
import pytest

from helpers import NoCallHandle, fake

from cudnn_py import capi
from cudnn_py.errors import ClosedError, CudnnPyError
from cudnn_py.ops import attention as A
from reference import attention as ref


def _attn(**kw):
    args = dict(heads=2, q_size=6, k_size=5, v_size=7, q_proj_size=3, k_proj_size=3, v_proj_size=4,
                max_seq_q=5, max_seq_kv=6, max_batch=3)
    args.update(kw)
    return A.MultiHeadAttention(**args)


# --------------------------------------------------------------------------------------------------- CPU

def test_attention_descriptor_round_trip():
    with _attn(biases=True, scale=0.25, o_proj_size=8, dtype=np.float64) as a:
        p = a.params
        assert (p.heads, p.q_size, p.k_size, p.v_size) == (2, 6, 5, 7)
        assert (p.q_proj_size, p.k_proj_size, p.v_proj_size, p.o_proj_size) == (3, 3, 4, 8)
        assert (p.max_seq_q, p.max_seq_kv, p.max_batch, p.max_beam) == (5, 6, 3, 1)
        assert p.scale == 0.25 and p.biases and p.query_map == "all_to_one"
        assert p.dtype == np.float64 and p.compute_dtype == np.float64 and p.math_type == "default"
        assert a.expected_shapes() == {"wq": (2, 3, 6), "wk": (2, 3, 5), "wv": (2, 4, 7), "wo": (2, 8, 4),
                                       "bq": (2, 3), "bk": (2, 3), "bv": (2, 4), "bo": (8,)}
    with pytest.raises(ClosedError):
        a.params
    b = _attn(proj_size=None, q_proj_size=4, k_proj_size=4, query_map="one_to_one", dtype=np.float16)
    p = b.params
    assert p.o_proj_size == 6 and abs(p.scale - 0.5) < 1e-15 and p.query_map == "one_to_one"
    assert p.dtype == np.float16 and p.compute_dtype == np.float32 and not p.biases
    assert set(b.expected_shapes()) == {"wq", "wk", "wv", "wo"}


def test_seq_data_descriptor_round_trip():
    d = A.SeqDataDescriptor(np.float32, 3, 5, 7, [5, 2, 4])
    assert d.read_back() == {"dtype": np.dtype(np.float32), "dims": {"time": 5, "batch": 3, "beam": 1, "vector": 7},
                             "axes": ("batch", "beam", "time", "vector"), "seq_lengths": (5, 2, 4)}
    assert A.SeqDataDescriptor.shared(np.dtype(np.float32), 3, 5, 7, (5, 5, 5)) is \
        A.SeqDataDescriptor.shared(np.dtype(np.float32), 3, 5, 7, (5, 5, 5))
    d.close()
    with pytest.raises(ClosedError):
        d.ptr


@pytest.mark.parametrize("kw,exc,match", [
    (dict(k_proj_size=4), ValueError, "same size"),
    (dict(heads=0), ValueError, "heads must be a positive int"),
    (dict(v_proj_size=None), ValueError, "v_proj_size is needed"),
    (dict(max_seq_q=0), ValueError, "max_seq_q must be a positive int"),
    (dict(dtype=np.int32), TypeError, "float16, float32 or float64"),
    (dict(query_map="many"), ValueError, "query_map"),
    (dict(math_type="tf32"), ValueError, "math_type must be one of"),
    (dict(attn_dropout="0.1"), TypeError, "attn_dropout must be a dropout probability, a cudnn_py.Dropout or None"),
    (dict(post_dropout=-0.1), ValueError, "post_dropout probability must be >= 0"),
])
def test_attention_bad_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        _attn(**kw)


@pytest.mark.parametrize("lengths,match", [([5, 6, 1], r"seq_lengths\[1\] = 6"), ([0, 1, 1], r"seq_lengths\[0\] = 0"),
                                           ([1, 1], "must be 3 ints")])
def test_seq_data_bad_lengths(lengths, match):
    with pytest.raises(ValueError, match=match):
        A.SeqDataDescriptor(np.float32, 3, 5, 7, lengths)


def test_host_arrays_rejected_before_c():
    with pytest.raises(TypeError, match="host memory"):
        A.attention_forward(NoCallHandle(), _attn(), np.zeros((1, 2, 6), np.float32), None, None, None)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        A.attention_forward(NoCallHandle(), object(), None, None, None, None)
    with pytest.raises(ValueError, match="training=True"):
        A.attention_backward_data(NoCallHandle(), _attn(), A.AttentionForwardResult(o=None), None, None)


def test_results_are_named_tuples_and_out_is_the_deprecated_o():
    fwd = A.AttentionForwardResult(1, 2)
    o, reserve = fwd
    assert (o, reserve) == (fwd.o, fwd.reserve) == (1, 2) and fwd._ctx is None
    with pytest.warns(DeprecationWarning, match="AttentionForwardResult.out is deprecated, use .o"):
        assert fwd.out == 1
    dq, dk, dv = A.AttentionDataGrads(1, 2, 3)
    assert (dq, dk, dv) == (1, 2, 3)
    sizes = A.AttentionBufferSizes(10, 20, 0)
    assert tuple(sizes) == (sizes.weights, sizes.workspace, sizes.reserve) == (10, 20, 0)
    assert _attn(attn_dropout=0.0, post_dropout=None)._dropouts == (None, None)  # 0: no dropout, no GPU needed


def test_out_is_the_deprecated_spelling_of_o():
    a = _attn()
    with pytest.warns(DeprecationWarning, match="out= is deprecated, use o=") as w, \
            pytest.raises(TypeError, match="host memory"):  # the same checks follow
        A.attention_forward(NoCallHandle(), a, np.zeros((1, 2, 6), np.float32), None, None, None, out=None)
    assert w[0].filename == __file__
    with pytest.raises(TypeError, match="both o= and its old spelling out="):
        A.attention_forward(NoCallHandle(), a, None, None, None, None, o=fake((1, 2, 6)), out=fake((1, 2, 6)))


def test_seq_lengths_are_the_deprecated_spellings_of_seq_len():
    """attention_forward's lengths are spelled as sdpa's (seq_len_q / seq_len_kv); the old names warn and work."""
    a = _attn()
    q = np.zeros((1, 2, 6), np.float32)
    for old, new in (("seq_lengths_q", "seq_len_q"), ("seq_lengths_kv", "seq_len_kv")):
        with pytest.warns(DeprecationWarning, match=f"{old}= is deprecated, use {new}=") as w, \
                pytest.raises(TypeError, match="host memory"):
            A.attention_forward(NoCallHandle(), a, q, None, None, None, **{old: [2]})
        assert w[0].filename == __file__  # the user's line
        with pytest.raises(TypeError, match=f"both {new}= and its old spelling {old}="):
            A.attention_forward(NoCallHandle(), a, q, None, None, None, **{old: [2], new: [2]})
    with pytest.raises(CudnnPyError, match="unexpected keyword argument 'is_causal'$"):
        A.attention_forward(NoCallHandle(), a, q, None, None, None, is_causal=True)
    with pytest.raises(CudnnPyError, match="'seq_len'; did you mean seq_len_q="):
        A.attention_forward(NoCallHandle(), a, q, None, None, None, seq_len=[2])


def test_math_type_takes_enum_and_reads_back():
    assert _attn(math_type=capi.CUDNN_FMA_MATH).params.math_type == "fma"


def test_closed_handle_raises_closed_error():
    class Closed(NoCallHandle):
        @property
        def ptr(self):
            raise ClosedError("this cudnn_py.Handle is closed")

    a = _attn()
    q, k, v, w = fake((2, 5, 6)), fake((2, 6, 5)), fake((2, 6, 7)), fake((100,))
    for call in (a.weight_space_size, a.buffer_sizes, a.new_weights, lambda h: a.weights(h, w),
                 lambda h: A.read_attention_weights(h, a, w), lambda h: A.attention_forward(h, a, q, k, v, w)):
        with pytest.raises(ClosedError, match="closed"):
            call(Closed())


def test_training_only_runs_all_query_steps():
    with pytest.raises(ValueError, match="curr_idx=-1"):
        A.attention_forward(NoCallHandle(), _attn(), fake((2, 5, 6)), fake((2, 6, 5)), fake((2, 6, 7)), fake((9,)),
                            training=True, curr_idx=0)


# --------------------------------------------------------------------------------------------------- GPU

def _tol(dtype, math_type):
    """float32 with default math may use TF32 tensor cores (seen on an H200: ~1e-3 of the scale)."""
    if np.dtype(dtype) == np.float32 and math_type == "fma":
        return 1e-4, 1e-5
    return {np.float64: (1e-9, 1e-10), np.float32: (1e-2, 2e-3), np.float16: (3e-2, 3e-2)}[np.dtype(dtype).type]


def _case(handle, rng, dtype=np.float64, biases=True, residual=False, window=True, heads=2, math_type="default",
          zero_padded_dout=True):
    from cudnn_py.core import memory
    B, Tq, Tk = 3, 4, 5
    q_size = 6
    attn = A.MultiHeadAttention(heads, q_size, 5, 7, q_proj_size=3, k_proj_size=3, v_proj_size=4,
                                o_proj_size=q_size, max_seq_q=Tq, max_seq_kv=Tk, max_batch=B, biases=biases,
                                scale=0.6, dtype=dtype, math_type=math_type)
    w_ref = ref.random_weights(rng, heads, q_size, 5, 7, 3, 3, 4, q_size, biases=biases)
    w_ref = {k: v.astype(dtype).astype(np.float64) for k, v in w_ref.items()}
    w = attn.new_weights(handle, zero=False)
    views = attn.weights(handle, w)
    assert {k: v.shape for k, v in views.items()} == attn.expected_shapes()
    A.load_attention_weights(handle, attn, w, w_ref)
    back = A.read_attention_weights(handle, attn, w)
    for k in w_ref:
        np.testing.assert_array_equal(back[k], w_ref[k].astype(dtype), err_msg=k)
    q = rng.standard_normal((B, Tq, q_size)).astype(dtype).astype(np.float64)
    k = rng.standard_normal((B, Tk, 5)).astype(dtype).astype(np.float64)
    v = rng.standard_normal((B, Tk, 7)).astype(dtype).astype(np.float64)
    lq, lk = np.array([4, 2, 3]), np.array([5, 3, 4])
    lo, hi = (np.array([0, 0, 1, 2]), np.array([2, 4, 5, 5])) if window else (np.zeros(Tq, int), np.full(Tq, Tk))
    want, cache = ref.forward(q, k, v, w_ref, lq, lk, lo, hi, 0.6, residual)
    dev = lambda a: memory.to_device(a.astype(dtype))  # noqa: E731
    qd = dev(q)
    out = memory.empty((B, Tq, q_size), dtype)
    out.fill_(np.nan)
    fwd = A.attention_forward(handle, attn, qd, dev(k), dev(v), w, seq_len_q=lq, seq_len_kv=lk,
                              lo_win=lo if window else None, hi_win=hi if window else None,
                              residuals=qd if residual else None, o=out, training=True)
    assert fwd.o is out
    valid = (np.arange(Tq)[None, :] < lq[:, None])[..., None]
    rtol, atol = _tol(dtype, math_type)

    def close(got, exp, what):
        np.testing.assert_allclose(got, exp, rtol=rtol, atol=atol * max(1.0, float(np.abs(exp).max())), err_msg=what)

    close(np.where(valid, out.to_numpy(), 0), want, "out")
    dout = rng.standard_normal(want.shape).astype(dtype).astype(np.float64)
    if zero_padded_dout:  # cuDNN's output-bias gradient sums dout over padded rows too (see test below)
        dout = np.where(valid, dout, 0.0)
    wdq, wdk, wdv, wdw = ref.backward(dout, cache)
    if biases and not zero_padded_dout:  # the quirk: padded rows of dout count in dbo
        wdw["bo"] = wdw["bo"] + np.where(valid, 0.0, dout).sum((0, 1))
    dq, dk, dv = A.attention_backward_data(handle, attn, fwd, dev(dout), w)
    close(np.where(valid, dq.to_numpy(), 0), wdq, "dq")
    kvalid = (np.arange(Tk)[None, :] < lk[:, None])[..., None]
    close(np.where(kvalid, dk.to_numpy(), 0), wdk, "dk")
    close(np.where(kvalid, dv.to_numpy(), 0), wdv, "dv")
    dw = A.attention_backward_weights(handle, attn, fwd, dev(dout), w)
    got = A.read_attention_weights(handle, attn, dw)
    for name in wdw:
        close(got[name], wdw[name], f"d{name}")
    return attn, w, fwd


@pytest.mark.gpu
@pytest.mark.parametrize("biases,residual,window", [(True, False, True), (False, True, True), (True, True, False)])
def test_attention_float64_vs_reference(handle, rng, biases, residual, window):
    _case(handle, rng, np.float64, biases, residual, window)


@pytest.mark.gpu
def test_attention_float32_vs_reference(handle, rng):
    _case(handle, rng, np.float32, True, True, True)


@pytest.mark.gpu
def test_attention_float32_fma_math_is_plain_fp32(handle, rng):
    from cudnn_py.errors import CudnnError
    try:
        _case(handle, rng, np.float32, True, True, True, math_type="fma")
    except CudnnError as e:
        if "NOT_SUPPORTED" not in str(e):
            raise
        pytest.skip(f"cuDNN refuses math_type='fma' for attention: {e}")


@pytest.mark.gpu
def test_attention_output_bias_grad_includes_padded_rows(handle, rng):
    """Documented quirk (measured on cuDNN 9.19): dbo is the sum of dout over ALL query rows, padding included;
    zero dout past each query length (every other gradient already ignores those rows)."""
    _case(handle, rng, np.float64, True, False, True, zero_padded_dout=False)


@pytest.mark.gpu
def test_attention_inference_and_dropout(handle, rng):
    from cudnn_py.core import memory
    from cudnn_py.ops.dropout import Dropout
    attn, w, fwd = _case(handle, rng, np.float32, True, False, False)
    q, k, v = fwd._ctx["q"], fwd._ctx["k"], fwd._ctx["v"]
    lq, lk = [4, 2, 3], [5, 3, 4]
    inf = A.attention_forward(handle, attn, q, k, v, w, seq_len_q=lq, seq_len_kv=lk)
    assert inf.reserve is None
    valid = (np.arange(4)[None, :] < np.array(lq)[:, None])[..., None]
    np.testing.assert_allclose(np.where(valid, inf.o.to_numpy(), 0), np.where(valid, fwd.o.to_numpy(), 0),
                               rtol=1e-3, atol=1e-3)
    drop = Dropout(handle, p=0.5, seed=7)
    dattn = A.MultiHeadAttention(2, 6, 5, 7, q_proj_size=3, k_proj_size=3, v_proj_size=4, max_seq_q=4,
                                 max_seq_kv=5, max_batch=3, biases=True, scale=0.6, attn_dropout=drop)
    wd = dattn.new_weights(handle)
    A.load_attention_weights(handle, dattn, wd, A.read_attention_weights(handle, attn, w))
    on = A.attention_forward(handle, dattn, q, k, v, wd, seq_len_q=lq, seq_len_kv=lk, training=True)
    off = A.attention_forward(handle, dattn, q, k, v, wd, seq_len_q=lq, seq_len_kv=lk)
    on_, off_ = np.where(valid, on.o.to_numpy(), 0), np.where(valid, off.o.to_numpy(), 0)
    assert np.all(np.isfinite(on_))
    np.testing.assert_allclose(off_, np.where(valid, fwd.o.to_numpy(), 0), rtol=1e-3, atol=1e-3)
    assert np.abs(on_ - off_).max() > 0.05, "attention dropout 0.5 in training changed nothing"
    dq, dk, dv = A.attention_backward_data(handle, dattn, on, memory.to_device(np.ones((3, 4, 6), np.float32)), wd)
    assert np.all(np.isfinite(dk.to_numpy()))


@pytest.mark.gpu
def test_attention_bad_input_on_device(handle):
    from cudnn_py.core import memory
    attn = _attn()
    w = attn.new_weights(handle)
    n = attn.weight_space_size(handle)
    q, k, v = (memory.zeros(s, np.float32) for s in ((2, 5, 6), (2, 6, 5), (2, 6, 7)))
    with pytest.raises(ValueError, match=f"weight space is {n} bytes"):
        A.attention_forward(handle, attn, q, k, v, memory.zeros((n // 4 + 1,), np.float32))
    with pytest.raises(ValueError, match="v has shape"):
        A.attention_forward(handle, attn, q, k, memory.zeros((2, 6, 6), np.float32), w)
    with pytest.raises(ValueError, match="exceed the descriptor"):
        A.attention_forward(handle, attn, memory.zeros((4, 5, 6), np.float32), memory.zeros((4, 6, 5), np.float32),
                            memory.zeros((4, 6, 7), np.float32), w)
    with pytest.raises(ValueError, match=r"seq_len_kv\[1\] = 7"):
        A.attention_forward(handle, attn, q, k, v, w, seq_len_kv=[6, 7])
    with pytest.raises(ValueError, match="lo_win < hi_win"):
        A.attention_forward(handle, attn, q, k, v, w, lo_win=[0, 0, 3, 0, 0], hi_win=[6, 6, 3, 6, 6])
    with pytest.raises(ValueError, match="residuals has shape"):
        A.attention_forward(handle, attn, q, k, v, w, residuals=k)
    fwd = A.attention_forward(handle, attn, q, k, v, w, training=True)
    with pytest.raises(RuntimeError, match="attention_backward_data"):
        A.attention_backward_weights(handle, attn, fwd, fwd.o, w)
    with pytest.raises(ValueError, match="unknown weight names"):
        A.load_attention_weights(handle, attn, w, {"wx": np.zeros(3)})
    with pytest.raises(ValueError, match="wq has shape"):
        A.load_attention_weights(handle, attn, w, {"wq": np.zeros((2, 6, 3))})


@pytest.mark.gpu
def test_attention_closed_handle_and_dropout_raise(handle):
    """A closed Handle or a closed dropout descriptor gives ClosedError, never a C call with a dead pointer."""
    import cudnn_py as cudnn
    from cudnn_py.core import memory
    from cudnn_py.ops.dropout import Dropout
    q, k, v = (memory.zeros(s, np.float32) for s in ((2, 5, 6), (2, 6, 5), (2, 6, 7)))
    h2 = cudnn.Handle()
    attn = _attn()
    w = attn.new_weights(h2)  # the buffer sizes are known from here on
    h2.close()
    for call in (lambda: attn.new_weights(h2), lambda: attn.weights(h2, w),
                 lambda: A.attention_forward(h2, attn, q, k, v, w)):
        with pytest.raises(ClosedError, match="closed"):
            call()
    drop = Dropout(handle, p=0.5, seed=2)
    dattn = _attn(attn_dropout=drop)
    dw = dattn.new_weights(handle)
    A.attention_forward(handle, dattn, q, k, v, dw, training=True)
    drop.close()
    with pytest.raises(ClosedError, match="dropout descriptor this MultiHeadAttention uses is closed"):
        A.attention_forward(handle, dattn, q, k, v, dw, training=True)
