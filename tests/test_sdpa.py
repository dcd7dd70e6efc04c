"""Attention without a GPU: the float64 reference against finite differences and hand-made masks, the graph
operations' lowering (every option through real backend descriptors, with only finalize faked: no driver here),
the operation pattern the fused engines recognise, and every bad input refused before cuDNN is called."""
import types

import numpy as np
import pytest

import cudnn_py.graph as G
from cudnn_py.calls import prepared
from cudnn_py.graph import Graph
from cudnn_py.graph import runner as grunner
from cudnn_py.graph.ops import sdpa_builders as gsb
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops import sdpa as S
from cudnn_py.ops import sdpa_args as A
from helpers import FakeTorchTensor, NoCallHandle, fake, fake_cudnn_handle, fake_finalize, fake_torch, numeric_gradient
from reference import sdpa as R

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


# -- the reference -------------------------------------------------------------------------------------------------
def test_reference_masks_by_hand():
    causal = R.keep_mask(1, 1, 3, 5, causal=True)[0, 0]
    assert causal.tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]]
    br = R.keep_mask(1, 1, 3, 5, causal=True, diagonal_alignment="bottom_right")[0, 0]
    assert br.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    window = R.keep_mask(1, 1, 4, 4, left_bound=2, right_bound=1)[0, 0]
    assert window.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    pad = R.keep_mask(2, 1, 3, 3, seq_len_q=[3, 1], seq_len_kv=[2, 3])
    assert pad[0, 0].tolist() == [[1, 1, 0]] * 3 and pad[1, 0].tolist() == [[1, 1, 1], [0, 0, 0], [0, 0, 0]]


def test_reference_alibi_slopes():
    np.testing.assert_allclose(R.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_allclose(R.alibi_slopes(12)[8:], 2.0 ** (-8.0 * np.array([0.5, 1.5, 2.5, 3.5]) / 8))
    np.testing.assert_allclose(S.alibi_slopes(12), R.alibi_slopes(12), rtol=1e-7)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="heads must be an int >= 1"):
            S.alibi_slopes(bad)


def test_seed_offset_ints_beyond_int64_are_refused():
    with pytest.raises(ValueError, match="seed must fit int64"):
        A.device_scalar(None, 2 ** 63, "seed", np.int64)


def test_reference_softmax_and_stats(rng):
    q, k, v = rng.standard_normal((1, 2, 3, 8)), rng.standard_normal((1, 2, 4, 8)), rng.standard_normal((1, 2, 4, 8))
    o, st = R.forward(q, k, v, scale=0.5)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * 0.5
    p = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    np.testing.assert_allclose(o, p @ v)
    np.testing.assert_allclose(st[..., 0], np.log(np.exp(s).sum(-1)))


@pytest.mark.parametrize("opts", [
    dict(),
    dict(causal=True, alibi=True),
    dict(left_bound=2, right_bound=1, bias=True),
    dict(causal=True, diagonal_alignment="bottom_right"),
    dict(seq_len_q=[3, 2], seq_len_kv=[4, 2]),
    dict(dropout=0.4),
])
def test_reference_backward_matches_finite_differences(rng, opts):
    b, hq, hk, sq, skv, d = 2, 4, 2, 3, 4, 8
    q, k, v = rng.standard_normal((b, hq, sq, d)), rng.standard_normal((b, hk, skv, d)), rng.standard_normal(
        (b, hk, skv, d))
    do = rng.standard_normal((b, hq, sq, d))
    kw = dict(opts)
    if kw.pop("alibi", False):
        kw["alibi"] = R.alibi_slopes(hq)
    if kw.pop("bias", False):
        kw["bias"] = rng.standard_normal((1, hq, sq, skv))
    if "dropout" in kw:
        kw["dropout_mask"] = (rng.random((b, hq, sq, skv)) > kw["dropout"]).astype(float)
    if "seq_len_q" in kw:
        do = do * R.valid_rows(b, sq, kw["seq_len_q"])

    def loss():
        return float(np.nansum(R.forward(q, k, v, **kw)[0] * do))

    dq, dk, dv, ds = R.backward(q, k, v, do, **kw)
    for grad, arr in ((dq, q), (dk, k), (dv, v)):
        np.testing.assert_allclose(grad, numeric_gradient(loss, arr), atol=1e-6)
    if "bias" in kw:
        np.testing.assert_allclose(R.reduce_to(ds, kw["bias"].shape), numeric_gradient(loss, kw["bias"]),
                                   atol=1e-6)


# -- lowering on the CPU ----------------------------------------------------------------------------------------
@pytest.fixture
def faked(monkeypatch):
    """finalize faked (it needs the engines library, i.e. a driver); every attribute is still set in cuDNN.
    Records each operation descriptor's type and each pointwise mode in order."""
    modes: list = []
    fake_finalize(monkeypatch, lambda op: modes.append(op.params["mode"].name[16:]))

    def lower(g):
        modes.clear()
        g.lower(NoCallHandle())
        ctx = g._lowered[2]
        return [d.short_type[len("OPERATION_"):] for d in ctx.operations], list(modes)
    return lower


def _qkv(g, b=2, hq=4, hk=2, sq=64, skv=80, d=64, dtype=BF16):
    return (g.tensor((b, hq, sq, d), dtype, name="q"), g.tensor((b, hk, skv, d), dtype, name="k"),
            g.tensor((b, hk, skv, d), dtype, name="v"))


def test_forward_lowers_to_the_attention_pattern(faked):
    g = Graph(io_dtype=BF16)
    o, _ = g.sdpa(*_qkv(g), implementation="composite", return_stats=False)
    o.set_output(True)
    ops, modes = faked(g)
    # the statistics are computed (into a virtual tensor) even when not asked for: the engines need the pattern
    assert ops == ["MATMUL", "POINTWISE", "REDUCTION", "POINTWISE", "POINTWISE", "REDUCTION", "POINTWISE",
                   "POINTWISE", "POINTWISE", "MATMUL"]
    assert modes == ["MUL", "SUB", "EXP", "LOG", "ADD", "DIV"]


def test_auto_picks_unified_only_for_plain_forward(faked, monkeypatch):
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g)
    o, st = g.sdpa(q, k, v)
    o2, _ = g.sdpa(q, k, v, causal=True)
    assert [op.params["implementation"] for op in g.ops] == ["unified", "composite"]
    monkeypatch.setattr(gsb, "_version", lambda: (9, 13, 0))
    g.sdpa(q, k, v)
    assert g.ops[-1].params["implementation"] == "composite"


def test_forward_options_lower(faked):
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g, hq=4, hk=4, sq=64, skv=64)
    i32 = lambda n: g.tensor((2, 1, 1, 1), "int32", name=n)  # noqa: E731
    i64 = lambda n: g.tensor((1, 1, 1, 1), "int64", name=n)  # noqa: E731
    o, st, mask = g.sdpa(q, k, v, scale=0.3, causal=True, left_bound=8, bias=g.tensor((1, 4, 64, 64), name="b"),
                         alibi=g.tensor((1, 4, 1, 1), "float32", name="al"), seq_len_q=i32("sq"),
                         seq_len_kv=i32("skv"), dropout=0.1, seed=i64("seed"), offset=i64("off"), rng_dump=True)
    for t in (o, st, mask):
        t.set_output(True)
    ops, modes = faked(g)
    assert ops.count("MATMUL") == 2 and ops.count("RNG") == 1
    assert modes[:3] == ["MUL", "ADD", "GEN_INDEX"]  # scale, bias, then ALiBi
    assert modes.count("BINARY_SELECT") == 3  # padding, right bound, left bound
    assert modes[-2:] == ["MUL", "MUL"]  # dropout mask, dropout scale


def test_bottom_right_and_paged_lower(faked):
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g, hq=4, hk=4, sq=32, skv=80)
    o, _ = g.sdpa(q, k, v, causal=True, left_bound=4, diagonal_alignment="bottom_right", return_stats=False)
    o.set_output(True)
    ops, modes = faked(g)
    assert modes.count("GEN_INDEX") == 4 and modes.count("CMP_GE") == 1 and modes.count("CMP_GT") == 1
    g2 = Graph(io_dtype=BF16)
    q2 = g2.tensor((2, 4, 1, 64), name="q")
    kc, vc = g2.tensor((8, 4, 16, 64), name="kc"), g2.tensor((8, 4, 16, 64), name="vc")
    pt = [g2.tensor((2, 1, 4, 1), "int32", name=n) for n in ("ptk", "ptv")]
    sl = [g2.tensor((2, 1, 1, 1), "int32", name=n) for n in ("sq", "skv")]
    o2, _ = g2.sdpa(q2, kc, vc, seq_len_q=sl[0], seq_len_kv=sl[1], page_table_k=pt[0], page_table_v=pt[1],
                    max_seq_len_kv=64, return_stats=False)
    o2.set_output(True)
    ops, _ = faked(g2)
    assert ops[:2] == ["PAGED_CACHE_LOAD", "MATMUL"] and ops.count("PAGED_CACHE_LOAD") == 2


def test_backward_lowers_with_scratch_and_gqa_reductions(faked):
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g)
    o, do = g.tensor((2, 4, 64, 64), name="o"), g.tensor((2, 4, 64, 64), name="do")
    st = g.tensor((2, 4, 64, 1), "float32", name="st")
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, st, causal=True, name="bwd")
    for t in (dq, dk, dv):
        t.set_output(True)
    assert [t.name for t in g.ops[-1].scratch_tensors()] == ["bwd.softmax_sum", "bwd.dq_accum"]
    assert dk.shape == k.shape and dq.strides == q.strides
    ops, modes = faked(g)
    assert ops.count("RESHAPE") == 3 and ops.count("MATMUL") == 5
    assert ops.count("REDUCTION") == 3  # rowsum(dO * O), and the dK and dV head-group reductions
    assert modes[-1] == "IDENTITY"  # dQ from the float32 accumulator


def test_backward_dbias_dropout_lower(faked):
    g = Graph(io_dtype="float16")
    q, k, v = _qkv(g, hk=4, dtype="float16")
    o, do = g.tensor((2, 4, 64, 64), name="o"), g.tensor((2, 4, 64, 64), name="do")
    st = g.tensor((2, 4, 64, 1), "float32", name="st")
    seeds = [g.tensor((1, 1, 1, 1), "int64", name=n) for n in ("seed", "off")]
    grads = g.sdpa_backward(q, k, v, o, do, st, bias=g.tensor((1, 4, 64, 80), name="b"), dbias=True,
                            dropout=0.2, seed=seeds[0], offset=seeds[1])
    for t in grads:
        t.set_output(True)
    assert grads[3].shape == (1, 4, 64, 80)
    assert [t.name.split(".")[-1] for t in g.ops[-1].scratch_tensors()] == ["softmax_sum"]  # dQ written directly
    ops, _ = faked(g)
    assert ops.count("RNG") == 1 and ops.count("REDUCTION") == 2


def test_unified_lowering(faked, monkeypatch):
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g)
    o, st = g.sdpa(q, k, v, implementation="unified")
    o.set_output(True), st.set_output(True)
    assert faked(g)[0] == ["SDPA_FWD"]


# -- refusals ------------------------------------------------------------------------------------------------------
def _g():
    g = Graph(io_dtype=BF16)
    return g, _qkv(g)


@pytest.mark.parametrize("build,err,match", [
    (lambda g, q, k, v: g.sdpa(q, g.tensor((2, 2, 80, 32), BF16), v), ValueError, "head dim is 64 and k's 32"),
    (lambda g, q, k, v: g.sdpa(q, g.tensor((2, 3, 80, 64), BF16), g.tensor((2, 3, 80, 64), BF16)), ValueError,
     "does not divide"),
    (lambda g, q, k, v: g.sdpa(q, k, g.tensor((2, 2, 81, 64), BF16)), ValueError, "80 keys and v 81"),
    (lambda g, q, k, v: g.sdpa(g.tensor((2, 4, 64, 64), "float32"), k, v), TypeError, "float16 or bfloat16"),
    (lambda g, q, k, v: g.sdpa(q, k, v, dropout=0.1), ValueError, "seed= and offset="),
    (lambda g, q, k, v: g.sdpa(q, k, v, dropout=1.0), ValueError, r"\[0, 1\)"),
    (lambda g, q, k, v: g.sdpa(q, k, v, left_bound=0), ValueError, "left_bound must be >= 1"),
    (lambda g, q, k, v: g.sdpa(q, k, v, causal=True, right_bound=2), ValueError, "right_bound=0"),
    (lambda g, q, k, v: g.sdpa(q, k, v, diagonal_alignment="bottom_right"), ValueError, "needs causal"),
    (lambda g, q, k, v: g.sdpa(q, k, v, diagonal_alignment="middle"), ValueError, "diagonal_alignment"),
    (lambda g, q, k, v: g.sdpa(q, k, v, seq_len_q=g.tensor((2, 1, 1, 1), "int32")), ValueError, "both seq_len_q"),
    (lambda g, q, k, v: g.sdpa(q, k, v, seq_len_q=g.tensor((2, 1, 1, 1), "int64"),
                               seq_len_kv=g.tensor((2, 1, 1, 1), "int32")), ValueError, "int32"),
    (lambda g, q, k, v: g.sdpa(q, k, v, seq_len_q=g.tensor((3, 1, 1, 1), "int32"),
                               seq_len_kv=g.tensor((3, 1, 1, 1), "int32")), ValueError, r"\(2, 1, 1, 1\)"),
    (lambda g, q, k, v: g.sdpa(q, k, v, bias=g.tensor((2, 4, 64, 64), BF16)), ValueError, "bias must be"),
    (lambda g, q, k, v: g.sdpa(q, k, v, alibi=g.tensor((1, 4, 1, 1), "float32")), ValueError,
     "ALiBi needs causal"),
    (lambda g, q, k, v: g.sdpa(q, k, v, implementation="fast"), ValueError, "implementation"),
    (lambda g, q, k, v: g.sdpa(q, k, v, bias=g.tensor((1, 4, 64, 80), BF16), causal=True,
                               diagonal_alignment="bottom_right"), ValueError, "does not combine"),
    (lambda g, q, k, v: g.sdpa(q, k, v, page_table_k=g.tensor((2, 1, 5, 1), "int32")), ValueError,
     "both page_table_k"),
    (lambda g, q, k, v: g.sdpa(q, k, v, max_seq_len_kv=64), ValueError, "logical sequence length is 80"),
    (lambda g, q, k, v: g.sdpa(q, k, v, rng_dump=True), ValueError, "rng_dump needs dropout"),
    (lambda g, q, k, v: g.sdpa(g.tensor((2, 4, 64, 64), BF16, strides=(16384, 4096, 1, 64)), k, v), ValueError,
     "packed"),
    (lambda g, q, k, v: g.sdpa(g.tensor((2, 4, 64, 264), BF16), g.tensor((2, 2, 80, 264), BF16),
                               g.tensor((2, 2, 80, 264), BF16)), ValueError, "at most 256"),
    (lambda g, q, k, v: g.sdpa_backward(q, k, v, g.tensor((2, 4, 64, 64), BF16), g.tensor((2, 4, 64, 64), BF16),
                                        g.tensor((2, 4, 64, 2), "float32")), ValueError, "stats must be"),
    (lambda g, q, k, v: g.sdpa_backward(q, k, v, g.tensor((2, 4, 64, 32), BF16), g.tensor((2, 4, 64, 64), BF16),
                                        g.tensor((2, 4, 64, 1), "float32")), ValueError, "o must be"),
    (lambda g, q, k, v: g.sdpa_backward(q, k, v, g.tensor((2, 4, 64, 64), BF16), g.tensor((2, 4, 64, 64), BF16),
                                        g.tensor((2, 4, 64, 1), "float32"), dbias=True), ValueError,
     "dbias needs"),
    (lambda g, q, k, v: g.sdpa_backward(*(g.tensor((1, 2, 1, 64), BF16) for _ in range(5)),
                                        g.tensor((1, 2, 1, 1), "float32")), ValueError, "S_q = S_kv = 1"),
])
def test_bad_graph_input_is_refused(build, err, match):
    g, (q, k, v) = _g()
    with pytest.raises(err, match=match):
        build(g, q, k, v)


def test_fp8_and_unified_gaps_are_refused_naming_the_option(monkeypatch):
    g, (q, k, v) = _g()
    f8 = g.tensor((2, 4, 64, 64), "float8_e4m3fn", name="q8")
    with pytest.raises(TypeError, match="use sdpa_fp8"):
        g.sdpa(f8, f8, f8)
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    with pytest.raises(G.GraphNotSupportedError, match="takes no bias"):
        g.sdpa(q, k, v, bias=g.tensor((1, 4, 64, 80), BF16), implementation="unified")
    i32 = [g.tensor((2, 1, 1, 1), "int32") for _ in range(2)]
    with pytest.raises(G.GraphNotSupportedError, match=r"takes no padding mask"):
        g.sdpa(q, k, v, seq_len_q=i32[0], seq_len_kv=i32[1], implementation="unified")
    o, do = g.tensor((2, 4, 64, 64), BF16), g.tensor((2, 4, 64, 64), BF16)
    with pytest.raises(G.GraphNotSupportedError, match="OPERATION_SDPA_BWD has no engines"):
        g.sdpa_backward(q, k, v, o, do, g.tensor((2, 4, 64, 1), "float32"), implementation="unified")
    monkeypatch.setattr(gsb, "_version", lambda: (9, 13, 0))
    with pytest.raises(G.GraphNotSupportedError, match=r"needs cuDNN >= 9\.13\.1; loaded 9\.13\.0"):
        g.sdpa(q, k, v, implementation="unified")


def test_pythonic_bad_input_never_reaches_cudnn():
    h = NoCallHandle()
    h.cache = {}  # the per-handle plan cache a Handle has
    q = fake((1, 2, 16, 64), BF16)
    with pytest.raises(TypeError, match="host memory"):
        S.sdpa(h, np.zeros((1, 2, 16, 64), BF16), q, q)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        S.sdpa(h, fake((1, 2, 16, 64), np.float32), fake((1, 2, 16, 64), np.float32), fake((1, 2, 16, 64),
                                                                                           np.float32))
    with pytest.raises(ValueError, match="seed= and offset="):
        S.sdpa(h, q, q, q, dropout=0.2)
    with pytest.raises(ValueError, match="alibi must be True or 2"):
        S.sdpa(h, q, q, q, alibi=[0.5, 0.25, 0.1], causal=True)
    with pytest.raises(TypeError, match="host memory"):
        S.sdpa(h, q, q, q, seq_len_q=np.array([16], np.int32), seq_len_kv=np.array([16], np.int32))
    with pytest.raises(ValueError, match="int32"):
        S.sdpa(h, q, q, q, seq_len_q=fake((1,), np.int64), seq_len_kv=fake((1,), np.int32))
    with pytest.raises(ValueError, match="stats must be"):
        S.sdpa_backward(h, q, q, q, q, q, fake((1, 2, 16), np.float32))


@pytest.fixture
def torch_like(monkeypatch):
    """The stand-in torch module (:func:`helpers.fake_torch`), as if the program had imported torch."""
    return fake_torch(monkeypatch)


def test_pythonic_reads_torch_tensors_up_to_the_builder(torch_like):
    h = NoCallHandle()
    h.cache = {}
    t = FakeTorchTensor((1, 2, 16, 64), torch_like.bfloat16)
    with pytest.raises(G.GraphNotSupportedError, match="causal"):  # the graph was made with bfloat16 I/O
        S.sdpa(h, t, t, t, causal=True, implementation="unified")
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        f = FakeTorchTensor((1, 2, 16, 64), torch_like.float32)
        S.sdpa(h, f, f, f)


# -- packed (ragged, "THD") batches ---------------------------------------------------------------------------------
def _thd_graph(b=3, h=4, s=64, d=64, stats=True):
    g = Graph(io_dtype=BF16)
    st = (s * h * d, d, h * d, 1)  # token-major: a packed (T, H, D) buffer seen as (B, H, S_max, D)
    q, k, v = (g.tensor((b, h, s, d), BF16, strides=st, name=n) for n in "qkv")
    offs = {n: g.tensor((b + 1, 1, 1, 1), "int64", name=f"ro_{n}") for n in ("q", "k", "v", "o")}
    if stats:
        offs["stats"] = g.tensor((b + 1, 1, 1, 1), "int32", name="ro_stats")
    sl = [g.tensor((b, 1, 1, 1), "int32", name=n) for n in ("slq", "slk")]
    return g, (q, k, v), offs, sl


def test_ragged_forward_backward_set_the_offsets(faked):
    g, (q, k, v), offs, sl = _thd_graph()
    o, st = g.sdpa(q, k, v, seq_len_q=sl[0], seq_len_kv=sl[1], causal=True,
                   **{f"ragged_offset_{n}": t for n, t in offs.items()})
    o.set_output(True), st.set_output(True)
    assert (q.ragged_offset, k.ragged_offset, v.ragged_offset) == (offs["q"], offs["k"], offs["v"])
    assert o.ragged_offset is offs["o"] and o.strides == q.strides
    assert st.ragged_offset is offs["stats"] and st.strides == (64 * 4, 1, 4, 1)  # token-major like q
    ops, _ = faked(g)
    assert ops.count("MATMUL") == 2
    assert {t.name for t in g.io_tensors()} >= {"ro_q", "ro_k", "ro_v", "ro_o", "ro_stats"}
    g2, (q, k, v), offs, sl = _thd_graph(stats=False)
    o, do = (g2.tensor(q.shape, BF16, strides=q.strides, name=n) for n in ("o", "do"))
    st = g2.tensor((3, 4, 64, 1), "float32", name="st")
    grads = g2.sdpa_backward(q, k, v, o, do, st, seq_len_q=sl[0], seq_len_kv=sl[1],
                             **{f"ragged_offset_{n}": t for n, t in offs.items()})
    for t in grads:
        t.set_output(True)
    assert [t.ragged_offset for t in grads] == [offs["q"], offs["k"], offs["v"]]
    assert o.ragged_offset is do.ragged_offset is offs["o"] and st.ragged_offset is None
    assert [t.ragged_offset for t in g2.ops[-1].scratch_tensors()] == [None, None]  # padded, as cuDNN's frontend
    faked(g2)


@pytest.mark.parametrize("kw,err,match", [
    (dict(o=False), ValueError, "missing ragged_offset_o"),
    (dict(padding=False), ValueError, "needs the padding mask"),
    (dict(bias=True), ValueError, "with bias is not verified"),
    (dict(offset_shape=(3, 1, 1, 1)), ValueError, r"must have shape \(4, 1, 1, 1\)"),
    (dict(offset_dtype="float32"), TypeError, "int32/int64"),
    (dict(offset_dtype="int8"), TypeError, "int32/int64"),
    (dict(implementation="unified"), G.GraphNotSupportedError, "takes no padding mask"),
])
def test_ragged_bad_input_is_refused(kw, err, match):
    g, (q, k, v), offs, sl = _thd_graph(stats=False)
    if "offset_shape" in kw or "offset_dtype" in kw:
        offs["q"] = g.tensor(kw.get("offset_shape", (4, 1, 1, 1)), kw.get("offset_dtype", "int64"), name="bad")
    if kw.get("o") is False:
        del offs["o"]
    extra = {}
    if kw.get("bias"):
        extra["bias"] = g.tensor((1, 4, 64, 64), BF16, name="b")
    if "implementation" in kw:
        extra["implementation"] = kw["implementation"]
    pad = {} if kw.get("padding") is False else dict(seq_len_q=sl[0], seq_len_kv=sl[1])
    with pytest.raises(err, match=match):
        g.sdpa(q, k, v, **pad, **extra, **{f"ragged_offset_{n}": t for n, t in offs.items()})


# -- FP8 ------------------------------------------------------------------------------------------------------------
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
E5 = np.dtype(ml_dtypes.float8_e5m2)
_FWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
_BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp", "scale_s",
               "scale_dq", "scale_dk", "scale_dv", "scale_dp")


def _scales(g, names):
    return {n: g.tensor((1, 1, 1, 1), "float32", name=n) for n in names}


def test_fp8_forward_backward_lower_to_the_frontend_pattern(faked):
    g = Graph(io_dtype=F8)
    q, k, v = _qkv(g, hq=8, hk=2, d=128, dtype=F8)
    outs = g.sdpa_fp8(q, k, v, causal=True, **_scales(g, _FWD_SCALES))
    for t in outs:
        t.set_output(True)
    assert outs[0].dtype == q.dtype and outs[2].shape == outs[3].shape == (1, 1, 1, 1)
    ops, modes = faked(g)
    assert ops.count("MATMUL") == 2 and ops.count("REDUCTION") == 4  # max, sum, amax_s, amax_o
    assert modes[:3] == ["MUL", "MUL", "MUL"]  # scale, descale_q, descale_k
    assert modes[-4:] == ["MUL", "MUL", "MUL", "MUL"]  # scale_s ... descale_s, descale_v, scale_o
    g2 = Graph(io_dtype=F8)
    q, k, v = _qkv(g2, hq=8, hk=2, skv=96, d=128, dtype=F8)
    o, do = g2.tensor((2, 8, 64, 128), F8, name="o"), g2.tensor((2, 8, 64, 128), E5, name="do")
    res = g2.sdpa_fp8_backward(q, k, v, o, do, g2.tensor((2, 8, 64, 1), "float32", name="st"), causal=True,
                               **_scales(g2, _BWD_SCALES))
    for t in res:
        t.set_output(True)
    assert [t.shape for t in res[:3]] == [q.shape, k.shape, v.shape] and all(t.dtype == q.dtype for t in res[:3])
    ops, _ = faked(g2)
    assert ops.count("MATMUL") == 5 and ops.count("RESHAPE") == 3
    assert ops.count("REDUCTION") == 7  # rowsum(dO*O), dV and dK head groups, amax dv/dp/dq/dk
    assert not hasattr(g2.ops[-1], "scratch_tensors")


@pytest.mark.parametrize("build,err,match", [
    (lambda g, q, s: g.sdpa_fp8(q, q, q, **{**s, "scale_o": None}), ValueError, "needs scale_o="),
    (lambda g, q, s: g.sdpa_fp8(q, q, q, **{**s, "scale_o": g.tensor((1, 1, 1, 2), "float32")}), ValueError,
     "scale_o must be a"),
    (lambda g, q, s: g.sdpa_fp8(q, q, g.tensor((2, 4, 64, 64), BF16), **s), TypeError, "FP8 attention takes"),
    (lambda g, q, s: g.sdpa_fp8(g.tensor((2, 4, 64, 72), F8), g.tensor((2, 4, 64, 72), F8),
                                g.tensor((2, 4, 64, 72), F8), **s), ValueError, "multiple of 16"),
])
def test_fp8_bad_input_is_refused(build, err, match):
    g = Graph(io_dtype=F8)
    q = g.tensor((2, 4, 64, 64), F8, name="q")
    with pytest.raises(err, match=match):
        build(g, q, _scales(g, _FWD_SCALES))


# -- the entry point's fast path ---------------------------------------------------------------------------------
def _PlanHandle():
    """A real Handle object (its prepared calls kept) never created in cuDNN: plans come from ``fake_exec``."""
    h = fake_cudnn_handle()
    h.workspace = None
    return h


@pytest.fixture
def fake_exec(monkeypatch):
    """Plans built without a GPU and executions recorded as the variant packs they used."""
    import ctypes
    import types
    packs, made = [], []

    def plan(g, handle, inputs, outputs, autotune):
        return types.SimpleNamespace(graph=g, workspace_size=0, tag="fake",
                                     descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(2)))

    def pack(uids, ptrs, ws):
        made.append(list(ptrs))
        return types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + len(made)))
    monkeypatch.setattr(A, "plan_graph", plan)
    monkeypatch.setattr(grunner, "VariantPack", pack)
    monkeypatch.setitem(grunner._BARE, "cudnnBackendExecute", lambda h, p, vp: packs.append(vp.value) or 0)
    addr = iter(range(0x10000000, 0x20000000, 0x100000))
    monkeypatch.setattr(A, "new_output", lambda handle, shape, dtype, strides: DeviceArray(next(addr), shape, dtype,
                                                                                         strides))
    monkeypatch.setattr(prepared, "_device_allocator", lambda a, viewed=False: lambda handle: (lambda x: (x, x.ptr))(
        DeviceArray(next(addr), a.shape, a.dtype, a.strides)))  # a replay's new outputs
    return packs, made


def test_repeat_calls_reuse_the_variant_pack_and_new_addresses_get_their_own(fake_exec):
    packs, made = fake_exec
    h = _PlanHandle()
    q, o = fake((1, 2, 64, 64), BF16), DeviceArray(0x20000, (1, 2, 64, 64), BF16)
    for _ in range(3):
        assert S.sdpa(h, q, q, q, o=o) is o
    assert len(made) == 1 and packs == [1001] * 3  # one pack, three executions
    o2 = DeviceArray(0x30000, (1, 2, 64, 64), BF16)
    S.sdpa(h, q, q, q, o=o2)
    assert len(made) == 2 and 0x30000 in made[1] and 0x20000 not in made[1]
    with pytest.raises(ValueError, match="must have shape"):  # another shape is another key: validated again
        S.sdpa(h, q, q, q, o=DeviceArray(0x30000, (1, 2, 64, 32), BF16))
    with pytest.raises(TypeError, match="host memory"):
        S.sdpa(h, q, q, np.zeros((1, 2, 64, 64), BF16), o=o)
    assert len(handle_cache_of(h)) == 1 and len(made) == 2


def test_a_new_output_address_on_the_fast_path_is_bound_as_it_is(fake_exec):
    """A repeat call whose new output lands at an address no pack has runs through a pack made for it: it does not
    fall back to the validated call, which would allocate a second output (and where the allocator hands the first
    address back on every call, does so every time: 76 against 17 us a call on an H200)."""
    packs, made = fake_exec
    h = _PlanHandle()
    q = fake((1, 2, 64, 64), BF16)
    outs = [S.sdpa(h, q, q, q) for _ in range(3)]
    assert [o.ptr for o in outs] == [0x10000000 + 0x100000 * i for i in range(3)]  # one allocation a call
    assert [m[3] for m in made] == [o.ptr for o in outs] and len(packs) == 3
    assert len(handle_cache_of(h)) == 1


def handle_cache_of(h):
    """The handle's prepared calls (one per configuration the tests call)."""
    return h.cache.get("prepared", {})


def test_fast_key_is_each_arguments_signature(fake_exec, torch_like):
    """The fast path keys each tensor on its memory.array_signature (shape, strides, dtype, device) and binds the
    pointers read with it: a repeat call replays its variant pack; a DeviceArray where a torch tensor of one signature
    was, or another layout, dtype or device at the same addresses, is validated again (a new prepared call, or the
    error)."""
    packs, made = fake_exec
    h = _PlanHandle()
    shape, bf16, f16 = (1, 2, 64, 64), torch_like.bfloat16, torch_like.float16
    o = DeviceArray(0x200000, shape, BF16)
    q = FakeTorchTensor(shape, bf16, 0x100000)
    for _ in range(2):
        assert S.sdpa(h, q, q, q, o=o) is o
    assert len(made) == 1 and packs == [1001, 1001] and made[0][:4] == [0x100000] * 3 + [0x200000]
    qa = DeviceArray(0x100000, shape, BF16)
    S.sdpa(h, qa, qa, qa, o=o)
    assert len(handle_cache_of(h)) == 2 and len(made) == 2 and packs[-1] == 1002
    bshd = FakeTorchTensor(shape, bf16, 0x100000, strides=(64 * 2 * 64, 64, 2 * 64, 1))  # (B, S, H, D) seen as BHSD
    S.sdpa(h, bshd, bshd, bshd, o=o)
    assert len(handle_cache_of(h)) == 3 and len(made) == 3
    S.sdpa(h, *[FakeTorchTensor(shape, f16, 0x100000)] * 3, o=DeviceArray(0x200000, shape, np.float16))
    assert len(handle_cache_of(h)) == 4 and len(made) == 4
    with pytest.raises(ValueError, match="on device 1, the handle on device 0"):
        S.sdpa(h, *[FakeTorchTensor(shape, bf16, 0x100000, device=1)] * 3, o=o)
    with pytest.raises(TypeError, match="q must be a DeviceArray or a GPU tensor"):  # a CPU tensor: validated
        S.sdpa(h, *[FakeTorchTensor(shape, bf16, 0x100000, device=-1)] * 3, o=o)
    assert len(made) == 4 and packs == [1001] * 2 + [1002, 1003, 1004]


def test_pythonic_packed_batches_bind_logical_views(fake_exec):
    _, made = fake_exec
    h = _PlanHandle()
    b, hq, hk, d = 3, 4, 2, 64
    q = DeviceArray(0x100000, (50, hq, d), BF16)
    k, v = DeviceArray(0x200000, (70, hk, d), BF16), DeviceArray(0x300000, (70, hk, d), BF16)
    off_q, off_kv = DeviceArray(0x400000, (b + 1,), np.int64), DeviceArray(0x500000, (b + 1,), np.int64)
    sl = DeviceArray(0x600000, (b,), np.int32)
    kw = dict(seq_len_q=sl, seq_len_kv=sl, ragged_offset_q=off_q, ragged_offset_k=off_kv, max_seq_len_q=20,
              max_seq_len_kv=30, causal=True)
    o, st = S.sdpa(h, q, k, v, return_stats=True, **kw)
    assert o.shape == (50, hq, d) and st.shape == (b, hq, 20, 1)
    assert made[0][:3] == [0x100000, 0x200000, 0x300000]
    # another total token count (T): another prepared call, of the same logical (B, H, S_max, D) graph
    S.sdpa(h, DeviceArray(0x100000, (40, hq, d), BF16), k, v, return_stats=True, **kw)
    assert len(handle_cache_of(h)) == 2 and made[1][:3] == made[0][:3]
    with pytest.raises(ValueError, match="options max_seq_len_q and max_seq_len_kv"):
        S.sdpa(h, q, k, v, **{**kw, "max_seq_len_kv": None})
    with pytest.raises(ValueError, match=r"packed \(T, H, D\)"):
        S.sdpa(h, fake((b, hq, 20, d), BF16), k, v, **kw)
    with pytest.raises(ValueError, match="both ragged_offset_q and ragged_offset_k"):
        S.sdpa(h, q, k, v, **{**kw, "ragged_offset_k": None})
    with pytest.raises(ValueError, match="only for packed"):
        S.sdpa(h, fake((b, hq, 20, d), BF16), fake((b, hq, 20, d), BF16), fake((b, hq, 20, d), BF16),
               max_seq_len_q=20)
    with pytest.raises(ValueError, match="Dv == D"):
        S.sdpa(h, q, k, DeviceArray(0x300000, (70, hk, 32), BF16), **kw)
    # the offsets count H * D elements a token in every tensor sharing them: other token strides are refused
    interleaved = DeviceArray(0x700000, (50, hq, d), BF16, (3 * hq * d, d, 1))  # q of a packed (T, 3, H, D) qkv
    head_major = DeviceArray(0x700000, (50, hq, d), BF16, (d, 50 * d, 1))
    for bad in (interleaved, head_major):
        with pytest.raises(ValueError, match=r"q must be a C-contiguous packed \(T, H, D\) tensor"):
            S.sdpa(h, bad, k, v, **kw)
        with pytest.raises(ValueError, match=r"o must be a C-contiguous packed"):
            S.sdpa(h, q, k, v, o=bad, **kw)
    assert len(made) == 2


def test_backward_scratch_lives_in_the_plan_workspace(monkeypatch):
    """The accumulators are placed after cuDNN's own workspace, 256-byte aligned; executors bind them there."""
    from cudnn_py.graph.plans import scratch_layout
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g, hk=4)
    o, do = g.tensor((2, 4, 64, 64), name="o"), g.tensor((2, 4, 64, 64), name="do")
    grads = g.sdpa_backward(q, k, v, o, do, g.tensor((2, 4, 64, 1), "float32", name="st"), name="bwd")
    for t in grads:
        t.set_output(True)
    places, total = scratch_layout(g, 1000)
    ss, acc = g.ops[-1].scratch_tensors()
    assert places == ((ss.uid, 1024), (acc.uid, 1024 + 2048))  # softmax_sum: 2*4*64 floats; dq_accum after it
    assert total == 1024 + 2048 + 2 * 4 * 64 * 64 * 4
    assert scratch_layout(g, 0)[0][0] == (ss.uid, 0)
    plan = types.SimpleNamespace(graph=g, scratch=places)
    io, _ = grunner.plan_bindings(plan)
    assert {t.name for t in io} == {"q", "k", "v", "o", "do", "st", "bwd.dq", "bwd.dk", "bwd.dv"}
    assert grunner.scratch_pointers(plan, 1 << 20) == ([ss.uid, acc.uid], [(1 << 20) + 1024, (1 << 20) + 3072])
    monkeypatch.setattr(gsb, "_version", lambda: (9, 5, 1))
    with pytest.raises(G.GraphNotSupportedError, match=r"zeroed before each call.*loaded 9\.5\.1"):
        g2 = Graph(io_dtype=BF16)
        q, k, v = _qkv(g2, hk=4)
        g2.sdpa_backward(q, k, v, g2.tensor((2, 4, 64, 64)), g2.tensor((2, 4, 64, 64)),
                         g2.tensor((2, 4, 64, 1), "float32"))


def test_fp8_backward_refuses_head_dims_other_than_128():
    g = Graph(io_dtype=F8)
    q, k, v = _qkv(g, hq=8, hk=2, d=64, dtype=F8)
    o, do = g.tensor((2, 8, 64, 64), F8, name="o"), g.tensor((2, 8, 64, 64), E5, name="do")
    with pytest.raises(G.GraphNotSupportedError, match="head dim 128 only"):
        g.sdpa_fp8_backward(q, k, v, o, do, g.tensor((2, 8, 64, 1), "float32", name="st"),
                            **_scales(g, _BWD_SCALES))


# -- the FP8 entry points ----------------------------------------------------------------------------------------
def _dev_scales(names, base=0x700000, shape=(1, 1, 1, 1)):
    """Device float32 scale arrays at distinct dummy addresses."""
    return {n: DeviceArray(base + 0x100 * i, shape, np.float32) for i, n in enumerate(names)}


def test_fp8_entry_points_cache_their_plans_and_bind_every_scale(fake_exec):
    packs, made = fake_exec
    h = _PlanHandle()
    shape = (1, 8, 64, 128)
    q, k, v = (DeviceArray(0x100000 * (i + 1), shape, F8) for i in range(3))
    sc = _dev_scales(_FWD_SCALES, shape=(1,))  # one-element tensors of any shape, seen as (1, 1, 1, 1)
    for _ in range(2):
        out = S.sdpa_fp8(h, q, k, v, causal=True, **sc)
    assert isinstance(out, S.SdpaFp8Outputs) and out.stats is None
    assert out.o.shape == shape and out.o.dtype == F8
    assert out.amax_s.shape == out.amax_o.shape == (1, 1, 1, 1) and out.amax_o.dtype == np.float32
    assert len(made) == 2 and len(handle_cache_of(h)) == 1  # fresh outputs: a pack each; one plan
    assert made[0][:9] == [0x100000, 0x200000, 0x300000] + [0x700000 + 0x100 * i for i in range(6)]
    o, st, am_s, am_o = S.sdpa_fp8(h, q, k, v, causal=True, return_stats=True, **sc)
    assert st.shape == (1, 8, 64, 1) and st.dtype == np.float32 and len(handle_cache_of(h)) == 2
    n = len(made)
    for _ in range(2):
        again = S.sdpa_fp8(h, q, k, v, causal=True, o=o, stats=st, amax_s=am_s, amax_o=am_o, **sc)
    assert again.o is o and again.stats is st
    assert len(made) == n + 1 and packs[-1] == packs[-2]  # given outputs: one pack, then the fast path
    do = DeviceArray(0x900000, shape, E5)
    bsc = _dev_scales(_BWD_SCALES, base=0xA00000)
    grads = S.sdpa_fp8_backward(h, q, k, v, o, do, st, causal=True, **bsc)
    assert isinstance(grads, S.SdpaFp8Grads) and len(grads) == 7
    assert [g.shape for g in grads[:3]] == [shape] * 3 and all(g.dtype == F8 for g in grads[:3])
    assert all(g.shape == (1, 1, 1, 1) and g.dtype == np.float32 for g in grads[3:])


def test_fp8_entry_points_refuse_bad_input_before_cudnn(fake_exec):
    _, made = fake_exec
    h = _PlanHandle()
    shape = (1, 8, 64, 128)
    q = DeviceArray(0x100000, shape, F8)
    sc = _dev_scales(_FWD_SCALES)
    with pytest.raises(TypeError, match="FP8 attention takes"):
        b = DeviceArray(0x100000, shape, BF16)
        S.sdpa_fp8(h, b, b, b, **sc)
    for bad, err, match in ((None, ValueError, "scale_o is required"), (-2.0, ValueError, "finite number > 0"),
                            (float("inf"), ValueError, "finite number > 0"),
                            (DeviceArray(0x800000, (1, 1, 1, 1), np.float16), TypeError, "float32 device tensor"),
                            (DeviceArray(0x800000, (2,), np.float32), TypeError, "one-element"),
                            (np.ones((1,), np.float32), TypeError, "host memory")):
        with pytest.raises(err, match=match):
            S.sdpa_fp8(h, q, q, q, **{**sc, "scale_o": bad})
    with pytest.raises(TypeError, match="scale must be a real number"):
        S.sdpa_fp8(h, q, q, q, scale="0.1", **sc)
    bsc = _dev_scales(_BWD_SCALES)
    st = DeviceArray(0x900000, (1, 8, 64, 1), np.float32)
    with pytest.raises(ValueError, match="stats must be"):
        S.sdpa_fp8_backward(h, q, q, q, q, q, DeviceArray(0x900000, (1, 8, 64), np.float32), **bsc)
    small = DeviceArray(0x100000, (1, 8, 64, 64), F8)
    with pytest.raises(G.GraphNotSupportedError, match="head dim 128 only"):
        S.sdpa_fp8_backward(h, small, small, small, small, small, st, **bsc)
    odd = DeviceArray(0x100000, (1, 8, 100, 128), F8)  # cuDNN 9.19 gets the last partial 32-row tile of dQ wrong
    with pytest.raises(G.GraphNotSupportedError, match="multiples of 32 only"):
        S.sdpa_fp8_backward(h, odd, odd, odd, odd, odd, DeviceArray(0x900000, (1, 8, 100, 1), np.float32), **bsc)
    with pytest.raises(ValueError, match="dq must have shape"):
        S.sdpa_fp8_backward(h, q, q, q, q, q, st, dq=DeviceArray(0x990000, (1, 8, 64, 64), F8), **bsc)
    assert made == []


def test_sdpa_cache_clear_forgets_the_prepared_calls_sdpa_objects_made(fake_exec):
    """An Sdpa planned before its first execute is built outside any recording; its prepared call still notes the
    attention route, so sdpa_cache_clear forgets it (it was kept, stale, when only planning noted the route)."""
    h, q = _PlanHandle(), fake((1, 2, 64, 64), BF16)
    o = DeviceArray(0x800000, q.shape, BF16)
    attn = S.Sdpa(h, q, q, q, causal=True, o=o)
    attn.plan()
    attn.execute()
    assert len(handle_cache_of(h)) == 1
    S.sdpa_cache_clear(h)
    assert len(handle_cache_of(h)) == 0


@pytest.mark.parametrize("which", ["k", "o"])
def test_sdpa_objects_refuse_broadcast_views_before_planning(fake_exec, which):
    """The stateful form reads its arrays itself (its autotune runs plans before any execute): k broadcast over the
    heads (torch's expand) or an o whose rows share memory is refused as the function form refuses it."""
    h, q = _PlanHandle(), fake((1, 2, 64, 64), BF16)
    bcast = DeviceArray(0x800000, q.shape, BF16, (64 * 64, 0, 64, 1))
    k, o = (bcast, None) if which == "k" else (q, bcast)
    with pytest.raises(ValueError, match=rf"{which}'s strides \(4096, 0, 64, 1\) make elements .* overlap"):
        S.Sdpa(h, q, k, q, causal=True, o=o)
    assert fake_exec[1] == []


def test_pythonic_alibi_binds_its_slopes_as_a_constant(fake_exec, monkeypatch):
    packs, made = fake_exec
    copied = []
    monkeypatch.setattr(A, "to_device", lambda a, stream=None, device=None: copied.append(a) or DeviceArray(
        0x700000, a.shape, a.dtype))
    h, q = _PlanHandle(), fake((1, 4, 64, 64), BF16)
    attn = S.Sdpa(h, q, q, q, causal=True, alibi=True)
    op = attn.plan().graph.ops[0]
    assert attn.options.alibi is True and "alibi_slopes" in op.inputs and op.inputs["alibi_slopes"].shape == (1, 4, 1, 1)
    np.testing.assert_array_equal(copied[0], R.alibi_slopes(4).reshape(1, 4, 1, 1))
    attn.execute()
    assert made[0][3] == 0x700000 and packs == [1001]  # q, k, v, then the slopes


def test_pythonic_alibi_uploads_its_slopes_once_and_is_prepared(fake_exec, monkeypatch):
    """The slopes' upload (driver work, which spoils a recording outside a sink) is the runner's own, outside the
    recording: the first call of a configuration is its prepared call's, and a repeat call uploads nothing."""
    from cudnn_py.clib import recording
    packs, made = fake_exec
    copied = []

    def to_device(a, stream=None, device=None):
        recording.device_work("cuMemcpyHtoDAsync")  # as memory's copies do
        copied.append(a)
        return DeviceArray(0x700000, a.shape, a.dtype)
    monkeypatch.setattr(A, "to_device", to_device)
    h, q = _PlanHandle(), fake((1, 4, 64, 64), BF16)
    o = DeviceArray(0x800000, q.shape, BF16)
    for _ in range(3):
        assert S.sdpa(h, q, q, q, causal=True, alibi=True, o=o) is o
    assert len(copied) == 1 and len(made) == 1 and packs == [1001] * 3 and len(handle_cache_of(h)) == 1


def test_pythonic_paged_kv_cache_binds_the_page_tables(fake_exec):
    packs, made = fake_exec
    h = _PlanHandle()
    b, hq, hk, d, block, pages = 2, 8, 2, 64, 16, 4
    q = DeviceArray(0x100000, (b, hq, 1, d), BF16)
    kc, vc = (DeviceArray(a, (b * pages, hk, block, d), BF16) for a in (0x200000, 0x300000))
    sl = DeviceArray(0x400000, (b,), np.int32)
    table = DeviceArray(0x500000, (b, pages), np.int32)  # (B, pages): seen as (B, 1, pages, 1)
    o = DeviceArray(0x600000, (b, hq, 1, d), BF16)
    kw = dict(seq_len_q=sl, seq_len_kv=sl, page_table_k=table, page_table_v=table, max_seq_len_kv=block * pages)
    for _ in range(2):
        assert S.sdpa(h, q, kc, vc, o=o, **kw) is o
    assert len(made) == 1 and packs == [1001, 1001]  # the second call: the fast path, same pack
    assert made[0][:7] == [0x100000, 0x200000, 0x300000, 0x400000, 0x400000, 0x500000, 0x500000]
    with pytest.raises(ValueError, match="a paged KV cache needs the option max_seq_len_kv"):
        S.sdpa(h, q, kc, vc, **{**kw, "max_seq_len_kv": None})
    with pytest.raises(ValueError, match=r"page_table_k must be \(B, 1, ceil"):
        S.sdpa(h, q, kc, vc, **{**kw, "page_table_k": DeviceArray(0x500000, (b, pages), np.int64)})
    with pytest.raises(ValueError, match="needs both page_table_k and page_table_v"):
        S.sdpa(h, q, kc, vc, **{**kw, "page_table_v": None})
    with pytest.raises(ValueError, match="needs seq_len_q and seq_len_kv"):
        S.sdpa(h, q, kc, vc, **{**kw, "seq_len_q": None, "seq_len_kv": None})
    with pytest.raises(ValueError, match="only for packed"):
        S.sdpa(h, q, kc, vc, max_seq_len_kv=64)
    assert len(made) == 1


def test_pythonic_numbers_for_device_scalars_are_uploaded_once_per_value(fake_exec, monkeypatch):
    """A dropout seed/offset or an FP8 scale given as a number is uploaded once, outside the recording, as the
    runner's constant: a repeat call with the same numbers is its prepared call; another number is another one."""
    from cudnn_py.clib import recording
    packs, made = fake_exec
    copied = []

    def to_device(a, stream=None, device=None):
        recording.device_work("cuMemcpyHtoDAsync")  # as memory's copies do
        copied.append(a.ravel()[0].item())
        return DeviceArray(0x700000 + 0x100 * len(copied), a.shape, a.dtype)
    monkeypatch.setattr(A, "to_device", to_device)
    h, q = _PlanHandle(), fake((1, 2, 64, 64), BF16)
    o = DeviceArray(0x800000, q.shape, BF16)
    for _ in range(3):
        assert S.sdpa(h, q, q, q, dropout=0.1, seed=7, offset=3, o=o) is o
    assert copied == [7, 3] and len(made) == 1 and packs == [1001] * 3
    assert made[0][3:6] == [0x700100, 0x700200, 0x800000]  # q, k, v, the seed and offset, o
    S.sdpa(h, q, q, q, dropout=0.1, seed=8, offset=3, o=o)
    assert copied == [7, 3, 8, 3] and len(made) == 2 and len(handle_cache_of(h)) == 2
    q8 = DeviceArray(0x100000, (1, 8, 64, 128), F8)
    outs = dict(o=DeviceArray(0x900000, q8.shape, F8), amax_s=DeviceArray(0xA00000, (1, 1, 1, 1), np.float32),
                amax_o=DeviceArray(0xB00000, (1, 1, 1, 1), np.float32))
    for _ in range(2):
        S.sdpa_fp8(h, q8, q8, q8, causal=True, **dict.fromkeys(_FWD_SCALES, 0.5), **outs)
    assert copied[4:] == [0.5] * 6 and len(made) == 3 and packs[-1] == packs[-2]
