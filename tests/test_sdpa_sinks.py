"""Attention sinks (gpt-oss): one float32 logit per head that joins each query row's softmax with no value.

CPU: the float64 reference (forward and its gradients, dsink included) against finite differences, the lowering
(cudnn-frontend's pattern: max with the sink, exp(sink - max) added to the sum; dsink from exp(sink - stats) times
rowsum(dO * O)), and every refusal (shape, dtype, the cuDNN version gate, the options not verified with a sink).
GPU: the graph and the entry points against the reference on fresh random data, outputs poisoned (NaN) first.
"""
import numpy as np
import pytest

import cudnn_py
from cudnn_py.graph import Graph, GraphNotSupportedError
from cudnn_py.graph.ops import sdpa_builders as gsb
from cudnn_py.core.memory import to_device
from cudnn_py.ops import sdpa as S
from helpers import NoCallHandle, fake, fake_finalize, numeric_gradient, poisoned
from reference import sdpa as R

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float16": np.dtype(np.float16), "bfloat16": BF16}


# -- the float64 reference -----------------------------------------------------------------------------------------
def ref_attention(q, k, v, sink, do=None, *, scale=None, bias=None, alibi=None, **mask):
    """(o, stats) with per-head ``sink`` logits, and with ``do`` also (dq, dk, dv, dsink, dbias_full).

    m = max(max_j s_ij, sink), z = sum_j exp(s_ij - m) + exp(sink - m), P = exp(s - m) / z, O = P V and
    stats = m + log z. The sink's gradient: d stats / d sink = exp(sink - stats) and dO/dsink = -exp(sink - stats) O,
    so dsink = -sum over batches and rows of exp(sink - stats) * rowsum(dO * O)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b, hq, sq, d = q.shape
    kk, vv = np.repeat(k, hq // k.shape[1], axis=1), np.repeat(v, hq // v.shape[1], axis=1)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    s = np.einsum("bhqd,bhkd->bhqk", q, kk) * scale
    if bias is not None:
        s = s + bias
    if alibi is not None:
        s = s + alibi.reshape(1, hq, 1, 1) * (np.arange(s.shape[3])[None, :] - np.arange(sq)[:, None])
    s = np.where(R.keep_mask(b, hq, sq, k.shape[2], **mask), s, -np.inf)
    sk = np.asarray(sink, np.float64).reshape(1, hq, 1, 1)
    m = np.maximum(s.max(axis=-1, keepdims=True), sk)
    e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True) + np.exp(sk - m)
    p, stats = e / z, m + np.log(z)
    o = np.einsum("bhqk,bhkd->bhqd", p, vv)
    if do is None:
        return o, stats
    do = np.asarray(do, np.float64)
    fold = lambda g, h: g.reshape(b, h, hq // h, *g.shape[2:]).sum(axis=2)  # noqa: E731
    dv = fold(np.einsum("bhqk,bhqd->bhkd", p, do), v.shape[1])
    delta = (do * o).sum(axis=-1, keepdims=True)
    ds = p * (np.einsum("bhqd,bhkd->bhqk", do, vv) - delta)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, kk) * scale
    dk = fold(np.einsum("bhqk,bhqd->bhkd", ds, q), k.shape[1]) * scale
    dsink = -(np.exp(sk - stats) * delta).sum(axis=(0, 2), keepdims=True)
    return o, stats, dq, dk, dv, dsink, ds


@pytest.mark.parametrize("opts", [dict(), dict(causal=True), dict(seq_len_q=[3, 2], seq_len_kv=[4, 2])])
def test_reference_gradients_match_finite_differences(rng, opts):
    b, hq, hk, sq, skv, d = 2, 4, 2, 3, 4, 8
    q, k, v = rng.standard_normal((b, hq, sq, d)), rng.standard_normal((b, hk, skv, d)), rng.standard_normal(
        (b, hk, skv, d))
    sink, bias = rng.uniform(-2, 3, (1, hq, 1, 1)), rng.standard_normal((1, hq, sq, skv))
    do = rng.standard_normal((b, hq, sq, d)) * R.valid_rows(b, sq, opts.get("seq_len_q"))

    def loss():
        return float(np.sum(ref_attention(q, k, v, sink, bias=bias, **opts)[0] * do))

    _, _, dq, dk, dv, dsink, ds = ref_attention(q, k, v, sink, do, bias=bias, **opts)
    for grad, arr in ((dq, q), (dk, k), (dv, v), (dsink, sink), (R.reduce_to(ds, bias.shape), bias)):
        np.testing.assert_allclose(grad, numeric_gradient(loss, arr), atol=1e-6)


def test_reference_without_sink_is_attention_and_a_sink_takes_mass(rng):
    q, k, v = (rng.standard_normal((1, 2, 5, 8)) for _ in range(3))
    o, st = ref_attention(q, k, v, np.full(2, -np.inf), causal=True)
    ro, rs = R.forward(q, k, v, causal=True)
    np.testing.assert_allclose(o, ro)
    np.testing.assert_allclose(st, rs)
    o2, st2 = ref_attention(q, k, v, np.array([0.0, 50.0]), causal=True)
    assert np.all(st2 > st) and np.abs(o2[:, 1]).max() < 1e-15  # a sink far above every score takes all the mass


# -- lowering on the CPU ---------------------------------------------------------------------------------------
@pytest.fixture
def lower(monkeypatch):
    """finalize faked (it needs a driver); returns g -> the pointwise modes and reductions in lowering order."""
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    seq: list = []
    fake_finalize(monkeypatch, lambda op: seq.append((op.params["mode"].name[16:],
                                                      [t.name for t in op.inputs.values()])))

    def run(g):
        seq.clear()
        g.lower(NoCallHandle())
        return [(m, ins) for m, ins in seq]
    return run


def _graph(b=2, hq=4, hk=2, sq=64, skv=80, d=64):
    g = Graph(io_dtype=BF16)
    return g, (g.tensor((b, hq, sq, d), BF16, name="q"), g.tensor((b, hk, skv, d), BF16, name="k"),
               g.tensor((b, hk, skv, d), BF16, name="v"), g.tensor((1, hq, 1, 1), "float32", name="sink"))


def test_forward_lowers_the_sink_into_the_softmax(lower):
    g, (q, k, v, sink) = _graph()
    o, st = g.sdpa(q, k, v, sink=sink, causal=True)
    assert g.ops[-1].params["implementation"] == "composite"  # 'auto' never picks the unified form with a sink
    o.set_output(True), st.set_output(True)
    seq = lower(g)
    modes = [m for m, _ in seq]
    soft = modes[modes.index("MAX"):]
    assert soft == ["MAX", "SUB", "EXP", "SUB", "EXP", "ADD", "LOG", "ADD", "DIV"]
    assert seq[modes.index("MAX")][1][1] == "sink" and seq[modes.index("MAX") + 3][1][0] == "sink"


def test_backward_lowers_dsink_from_the_statistics(lower):
    g, (q, k, v, sink) = _graph()
    o, do = g.tensor((2, 4, 64, 64), BF16, name="o"), g.tensor((2, 4, 64, 64), BF16, name="do")
    st = g.tensor((2, 4, 64, 1), "float32", name="st")
    dq, dk, dv, dsink = g.sdpa_backward(q, k, v, o, do, st, sink=sink, dsink=True, causal=True, name="bwd")
    assert dsink.shape == (1, 4, 1, 1) and dsink.dtype.name.endswith("FLOAT") and dsink.is_virtual
    for t in (dq, dk, dv, dsink):
        t.set_output(True)
    seq = lower(g)
    assert [m for m, _ in seq[:4]] == ["MUL", "SUB", "EXP", "MUL"]  # dO * O, then exp(sink - stats) * rowsum
    assert seq[1][1] == ["sink", "st"]
    assert [r.name for r in g.ops[-1].outputs.values()].count("bwd.dsink") == 1


# -- refusals ------------------------------------------------------------------------------------------------------
@pytest.fixture
def new_cudnn(monkeypatch):
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))


def _bwd(g, q, k, v, **kw):
    o, do = g.tensor((2, 4, 64, 64), BF16), g.tensor((2, 4, 64, 64), BF16)
    return g.sdpa_backward(q, k, v, o, do, g.tensor((2, 4, 64, 1), "float32"), **kw)


@pytest.mark.parametrize("build,err,match", [
    (lambda g, q, k, v, s: g.sdpa(q, k, v, sink=g.tensor((1, 8, 1, 1), "float32")), ValueError,
     r"sink must be \(1, Hq, 1, 1\) = \(1, 4, 1, 1\) float device tensor"),
    (lambda g, q, k, v, s: g.sdpa(q, k, v, sink=g.tensor((4,), "float32")), ValueError, "sink must be"),
    (lambda g, q, k, v, s: g.sdpa(q, k, v, sink=g.tensor((1, 4, 1, 1), BF16)), ValueError, "float device"),
    (lambda g, q, k, v, s: g.sdpa(q, k, v, sink=g.scalar(1.0, "float32")), ValueError, "sink must be"),
    (lambda g, q, k, v, s: g.sdpa(q, k, v, sink=s, implementation="unified"), GraphNotSupportedError,
     "takes no attention sink"),
    (lambda g, q, k, v, s: g.sdpa(q, k, v, sink=s, dropout=0.1, seed=g.tensor((1, 1, 1, 1), "int64"),
                                  offset=g.tensor((1, 1, 1, 1), "int64")), ValueError,
     "sink with dropout is not verified"),
    (lambda g, q, k, v, s: g.sdpa(g.tensor((2, 4, 1, 64), BF16), k, v, sink=s), GraphNotSupportedError,
     "S_q = 1"),
    (lambda g, q, k, v, s: _bwd(g, q, k, v, dsink=True), ValueError, "dsink=True needs the forward's sink"),
    (lambda g, q, k, v, s: _bwd(g, q, k, v, sink=s), ValueError, "sink is taken with dsink=True only"),
])
def test_bad_sink_is_refused(new_cudnn, build, err, match):
    g, (q, k, v, sink) = _graph()
    with pytest.raises(err, match=match):
        build(g, q, k, v, sink)


def test_paged_and_packed_attention_refuse_a_sink(new_cudnn):
    g = Graph(io_dtype=BF16)
    q = g.tensor((2, 4, 8, 64), BF16, name="q")
    kc, vc = g.tensor((8, 4, 16, 64), BF16, name="kc"), g.tensor((8, 4, 16, 64), BF16, name="vc")
    sink = g.tensor((1, 4, 1, 1), "float32", name="sink")
    pt = [g.tensor((2, 1, 4, 1), "int32") for _ in range(2)]
    sl = [g.tensor((2, 1, 1, 1), "int32") for _ in range(2)]
    with pytest.raises(ValueError, match="sink with a paged KV cache is not verified"):
        g.sdpa(q, kc, vc, seq_len_q=sl[0], seq_len_kv=sl[1], page_table_k=pt[0], page_table_v=pt[1],
               max_seq_len_kv=64, sink=sink)
    k, v = g.tensor((2, 4, 8, 64), BF16, strides=(2048, 64, 256, 1)), g.tensor((2, 4, 8, 64), BF16)
    offs = {f"ragged_offset_{n}": g.tensor((3, 1, 1, 1), "int32") for n in "qkvo"}
    with pytest.raises(ValueError, match="sink with ragged"):
        g.sdpa(g.tensor((2, 4, 8, 64), BF16, strides=(2048, 64, 256, 1)), k, v, seq_len_q=sl[0], seq_len_kv=sl[1],
               sink=sink, **offs)


@pytest.mark.parametrize("old", [(9, 12, 0), (9, 10, 2)])
def test_a_cudnn_older_than_9_13_refuses_sinks(monkeypatch, old):
    monkeypatch.setattr(gsb, "_version", lambda: old)
    g, (q, k, v, sink) = _graph()
    loaded = ".".join(map(str, old))
    with pytest.raises(GraphNotSupportedError, match=rf"take a sink from 9\.13\.0 on; loaded {loaded}"):
        g.sdpa(q, k, v, sink=sink)
    with pytest.raises(GraphNotSupportedError, match="9.13.0"):
        _bwd(g, q, k, v, sink=sink, dsink=True)
    o, _ = g.sdpa(q, k, v, implementation="composite")  # without a sink nothing changes
    assert o.shape == (2, 4, 64, 64)


def test_entry_points_refuse_bad_sinks_before_cudnn(new_cudnn):
    h = NoCallHandle()
    q = fake((1, 2, 16, 64), BF16)
    with pytest.raises(TypeError, match="host memory"):
        S.sdpa(h, q, q, q, sink=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"sink must be \(1, Hq, 1, 1\) = \(1, 2, 1, 1\)"):
        S.sdpa(h, q, q, q, sink=fake((3,), np.float32))
    with pytest.raises(ValueError, match="float device tensor"):
        S.sdpa(h, q, q, q, sink=fake((2,), np.float16))
    with pytest.raises(ValueError, match="dsink= needs return_dsink=True"):
        S.sdpa_backward(h, q, q, q, q, q, fake((1, 2, 16, 1), np.float32), sink=fake((2,), np.float32),
                        dsink=fake((1, 2, 1, 1), np.float32))
    with pytest.raises(TypeError, match="return_dsink must be True or False"):
        S.sdpa_backward(h, q, q, q, q, q, fake((1, 2, 16, 1), np.float32), return_dsink="yes")


# -- GPU ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def sinks_cudnn():
    """Skips (saying why) where the loaded cuDNN is older than the first whose engines take a sink."""
    v = gsb._version()
    if v < gsb._SINK_SINCE:
        pytest.skip(f"attention sinks need cuDNN >= 9.13.0; loaded {'.'.join(map(str, v))}")


_q, _close = R.rounded, R.assert_close


def _close_dsink(got, ref_dsink, terms, dtype):
    """dsink: each head's error within the tolerance times the sum of |terms| it adds up (rows of one sign, so a
    wrong sign or a missing term fails)."""
    got = np.asarray(got, np.float64).reshape(ref_dsink.shape)
    assert not np.isnan(got).any(), "dsink has NaN"
    bound = 2 * R.TOL[dtype] * np.abs(terms).sum(axis=(0, 2), keepdims=True) + R.TOL[dtype]
    assert np.all(np.abs(got - ref_dsink) <= bound), f"dsink {got.ravel()} vs reference {ref_dsink.ravel()}"


def _dev(a, dt):
    return to_device(np.ascontiguousarray(np.asarray(a).astype(dt)))


def _host(d):
    return d.to_numpy().astype(np.float64)


def _case(rng, b, hq, hk, sq, skv, d=64, **opts):
    """Random q, k, v, sinks spread over [-2, 6] (some above every score), and dO = 4 O + noise (rowsum(dO * O) > 0
    mostly, so dsink's terms share a sign)."""
    q, k, v = rng.standard_normal((b, hq, sq, d)), rng.standard_normal((b, hk, skv, d)), rng.standard_normal(
        (b, hk, skv, d))
    sink = rng.uniform(-2.0, 6.0, hq)
    o, _ = ref_attention(q, k, v, sink, **opts)
    return q, k, v, sink, np.nan_to_num(4 * o) + 0.5 * rng.standard_normal(o.shape)


def _graph_fwd_bwd(h, dt, qa, ka, va, sink, doa, bias=None, dbias=False, alibi=None, lens=None, **opts):
    """Forward (o, stats) then backward (dq, dk, dv[, dbias], dsink) graphs with a sink, outputs poisoned."""
    extra = {}
    if bias is not None:
        extra["bias"] = _dev(bias, dt)
    if alibi is not None:
        extra["alibi"] = to_device(np.asarray(alibi, np.float32).reshape(1, -1, 1, 1))
    if lens is not None:
        extra.update(seq_len_q=to_device(np.asarray(lens[0], np.int32).reshape(-1, 1, 1, 1)),
                     seq_len_kv=to_device(np.asarray(lens[1], np.int32).reshape(-1, 1, 1, 1)))
    arrs = {"q": _dev(qa, dt), "k": _dev(ka, dt), "v": _dev(va, dt),
            "sink": to_device(np.asarray(sink, np.float32).reshape(1, -1, 1, 1)), **extra}
    g = Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    ts = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    o, st = g.sdpa(ts["q"], ts["k"], ts["v"], sink=ts["sink"], **{n: ts[n] for n in extra}, **opts)
    outs = [o.set_output(True), st.set_output(True)]
    g.build(h)
    pack = {ts[n]: a for n, a in arrs.items()}
    pack.update({t: poisoned(t.shape, t.np_dtype) for t in outs})
    g.execute(h, pack)
    fwd = [pack[t] for t in outs]

    arrs.update(o=fwd[0], stats=fwd[1], do=_dev(doa, dt))
    g = Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    ts = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    grads = g.sdpa_backward(*(ts[n] for n in ("q", "k", "v", "o", "do", "stats")), sink=ts["sink"], dsink=True,
                            dbias=dbias, **{n: ts[n] for n in extra}, **opts)
    for t in grads:
        t.set_output(True)
    g.build(h)
    pack = {ts[n]: a for n, a in arrs.items()}
    pack.update({t: poisoned(t.shape, t.np_dtype) for t in grads})
    g.execute(h, pack)
    return [_host(a) for a in fwd] + [_host(pack[t]) for t in grads]


def _check(got, ref, dtype, rows_q=None, rows_kv=None, dbias_shape=None):
    o, st, dq, dk, dv, *rest = got
    ro, rs, rdq, rdk, rdv, rdsink, rds, terms = ref
    _close(o, ro, dtype, rows_q)
    _close(st, rs, dtype, rows_q)
    _close(dq, rdq, dtype, rows_q, scale=2)
    _close(dk, rdk, dtype, rows_kv, scale=2)
    _close(dv, rdv, dtype, rows_kv, scale=2)
    if dbias_shape is not None:
        _close(rest.pop(0), R.reduce_to(rds, dbias_shape), dtype, scale=2)
    _close_dsink(rest[0], rdsink, terms, dtype)


def _ref(qa, ka, va, sink, doa, dt, rows_q=None, **kw):
    """The reference on the inputs as the GPU sees them, with the dsink terms for the tolerance."""
    q, k, v = _q(qa, dt), _q(ka, dt), _q(va, dt)
    do = _q(doa, dt) * (1 if rows_q is None else rows_q)
    o, st, dq, dk, dv, dsink, ds = ref_attention(q, k, v, _q(sink, np.float32), do, **kw)
    terms = np.nan_to_num(np.exp(_q(sink, np.float32).reshape(1, -1, 1, 1) - st) * (do * o).sum(-1, keepdims=True))
    return o, st, dq, dk, dv, dsink, ds, terms


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)])
def test_forward_backward(handle, rng, sinks_cudnn, dtype, causal, heads):
    dt = DTYPES[dtype]
    qa, ka, va, sink, doa = _case(rng, 2, heads[0], heads[1], 100, 100 if causal else 130, causal=causal)
    got = _graph_fwd_bwd(handle, dt, qa, ka, va, sink, doa, causal=causal)
    _check(got, _ref(qa, ka, va, sink, doa, dt, causal=causal), dtype)


OPTIONS = {
    "causal_bottom_right": dict(causal=True, diagonal_alignment="bottom_right"),
    "window": dict(left_bound=9, right_bound=3),
    "scale": dict(scale=0.3),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(OPTIONS))
def test_masks_with_a_sink(handle, rng, sinks_cudnn, name):
    dt, opts = BF16, OPTIONS[name]
    qa, ka, va, sink, doa = _case(rng, 2, 4, 2, 70, 90, **opts)
    _check(_graph_fwd_bwd(handle, dt, qa, ka, va, sink, doa, **opts), _ref(qa, ka, va, sink, doa, dt, **opts),
           "bfloat16")


@pytest.mark.gpu
@pytest.mark.parametrize("d,sq,skv", [(128, 128, 128), (256, 64, 96), (64, 3, 5)])
def test_head_dims_and_short_sequences(handle, rng, sinks_cudnn, d, sq, skv):
    dt = BF16
    qa, ka, va, sink, doa = _case(rng, 2, 4, 4, sq, skv, d)
    _check(_graph_fwd_bwd(handle, dt, qa, ka, va, sink, doa), _ref(qa, ka, va, sink, doa, dt), "bfloat16")


@pytest.mark.gpu
def test_padding_with_a_sink(handle, rng, sinks_cudnn):
    dt, b, s = BF16, 3, 96
    lq, lk = np.array([96, 40, 7]), np.array([80, 96, 50])
    qa, ka, va, sink, doa = _case(rng, b, 4, 4, s, s, seq_len_q=lq, seq_len_kv=lk)
    rows_q, rows_kv = R.valid_rows(b, s, lq), R.valid_rows(b, s, lk)
    doa = doa * rows_q
    got = _graph_fwd_bwd(handle, dt, qa, ka, va, sink, doa, lens=(lq, lk))
    _check(got, _ref(qa, ka, va, sink, doa, dt, rows_q, seq_len_q=lq, seq_len_kv=lk), "bfloat16", rows_q, rows_kv)


@pytest.mark.gpu
def test_bias_dbias_and_alibi_with_a_sink(handle, rng, sinks_cudnn):
    dt = BF16
    qa, ka, va, sink, doa = _case(rng, 2, 4, 4, 64, 80)
    bias = rng.standard_normal((1, 4, 64, 80))
    got = _graph_fwd_bwd(handle, dt, qa, ka, va, sink, doa, bias=bias, dbias=True)
    _check(got, _ref(qa, ka, va, sink, doa, dt, bias=_q(bias, dt)), "bfloat16", dbias_shape=(1, 4, 64, 80))
    slopes = R.alibi_slopes(4)
    qa, ka, va, sink, doa = _case(rng, 2, 4, 4, 64, 64, causal=True, alibi=slopes)
    got = _graph_fwd_bwd(handle, dt, qa, ka, va, sink, doa, alibi=slopes, causal=True)
    _check(got, _ref(qa, ka, va, sink, doa, dt, causal=True, alibi=_q(slopes, np.float32)), "bfloat16")


@pytest.mark.gpu
def test_entry_points_take_a_per_head_sink(handle, rng, sinks_cudnn):
    dt = BF16
    qa, ka, va, sink, doa = _case(rng, 2, 8, 2, 96, 96, causal=True)
    q, k, v, do = (_dev(a, dt) for a in (qa, ka, va, doa))
    for shift in (0.0, 1.0):  # the second call takes the fast path: a fresh sink buffer bound by its address
        sk = to_device(np.asarray(sink + shift, np.float32))  # (Hq,)
        ref = _ref(qa, ka, va, sink + shift, doa, dt, causal=True)
        o, st = cudnn_py.sdpa(handle, q, k, v, causal=True, sink=sk, return_stats=True)
        grads = S.sdpa_backward(handle, q, k, v, o, do, st, causal=True, sink=sk, return_dsink=True)
        assert isinstance(grads, S.SdpaGradsWithSink) and grads.dsink.shape == (1, 8, 1, 1)
        _check([_host(o), _host(st), *map(_host, grads)], ref, "bfloat16")
    # without return_dsink the sink is not read (the statistics hold its share)
    plain = S.sdpa_backward(handle, q, k, v, o, do, st, causal=True, sink=sk)
    assert type(plain) is S.SdpaGrads
    for a, r in zip(plain, ref[2:5]):
        _close(_host(a), r, "bfloat16", scale=2)


@pytest.mark.gpu
def test_entry_points_bias_and_sink(handle, rng, sinks_cudnn):
    dt = DTYPES["float16"]
    qa, ka, va, sink, doa = _case(rng, 2, 4, 2, 64, 72)
    ba = rng.standard_normal((1, 4, 64, 72))
    q, k, v, do, bias = (_dev(a, dt) for a in (qa, ka, va, doa, ba))
    sk = to_device(sink.astype(np.float32).reshape(1, 4, 1, 1))
    attn = S.Sdpa(handle, q, k, v, bias=bias, sink=sk, return_stats=True)
    o, st = attn.execute()
    grads = S.sdpa_backward(handle, q, k, v, o, do, st, bias=bias, return_dbias=True, sink=sk, return_dsink=True)
    assert type(grads) is S.SdpaGradsWithBiasAndSink and grads.dbias.shape == (1, 4, 64, 72)
    _check([_host(o), _host(st), *map(_host, grads)], _ref(qa, ka, va, sink, doa, dt, bias=_q(ba, dt)), "float16",
           dbias_shape=(1, 4, 64, 72))


@pytest.mark.gpu
def test_entry_points_take_torch_sinks(handle, rng, sinks_cudnn):
    torch = pytest.importorskip("torch")
    b, h, s, d = 2, 4, 64, 64
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    sink = torch.rand(h, device="cuda", dtype=torch.float32) * 8 - 2
    o, st = S.sdpa(handle, q, k, v, sink=sink, return_stats=True, o=poisoned((b, h, s, d), np.float16),
                   stats=poisoned((b, h, s, 1)))
    do = torch.from_numpy(4 * _host(o) + 0.5 * rng.standard_normal((b, h, s, d))).half().cuda()
    grads = S.sdpa_backward(handle, q, k, v, o, do, st, sink=sink, return_dsink=True,
                            **{n: poisoned(tuple(t.shape), np.float16) for n, t in (("dq", q), ("dk", k), ("dv", v))},
                            dsink=poisoned((1, h, 1, 1)))
    torch.cuda.synchronize()
    f = lambda t: t.float().cpu().double().numpy()  # noqa: E731
    ref = _ref(f(q), f(k), f(v), f(sink), f(do), np.float16)
    _check([_host(o), _host(st), *map(_host, grads)], ref, "float16")
