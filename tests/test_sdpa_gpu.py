"""Attention (SDPA) on the GPU, forward and backward, against the float64 reference of tests/reference/sdpa.py on
fresh random data with every output poisoned (NaN) first: dtypes, head dims, masks at sequence lengths that are
not tile multiples, grouped-query heads, layouts, bias and dBias, padding, ALiBi, dropout, the paged KV cache, the
unified descriptors, the Pythonic entry point and its plan cache, torch tensors, bad input."""
import numpy as np
import pytest

import cudnn_py.graph as G
from cudnn_py.core.caches import handle_cache
from cudnn_py.core.memory import DeviceArray, as_array, empty, to_device
from cudnn_py.ops import sdpa as S
from reference import sdpa as R

pytestmark = pytest.mark.gpu

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float16": np.dtype(np.float16), "bfloat16": BF16}
_q, _close = R.rounded, R.assert_close


_LAYOUTS = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3)}


def _dev(a, dt, layout="bhsd"):
    """Device copy of logical (B, H, S, D) host ``a`` stored in ``layout`` order."""
    perm = _LAYOUTS[layout]
    buf = to_device(np.ascontiguousarray(np.asarray(a).astype(dt).transpose(perm)))
    inv = np.argsort(perm)
    return DeviceArray(buf.ptr, np.asarray(a).shape, dt, tuple(buf.strides[i] for i in inv),
                       device_id=buf.device_id, owner=buf)


def _nan(shape, dt, strides=None):
    """A NaN-poisoned device array of logical ``shape`` (with ``strides`` if given)."""
    if strides is None:
        strides = tuple(int(x) for x in np.cumprod((1,) + tuple(shape[::-1]))[:-1][::-1])
    order = sorted(range(len(shape)), key=lambda i: -strides[i])
    buf = empty(tuple(shape[i] for i in order), dt)
    buf.fill_(np.nan)
    return DeviceArray(buf.ptr, shape, dt, strides, device_id=buf.device_id, owner=buf)


def _host(d):
    return d.to_numpy().astype(np.float64)


def _i32(a):
    return to_device(np.asarray(a, np.int32).reshape(-1, 1, 1, 1))


def _inputs(rng, b, hq, hk, sq, skv, d, dv=None):
    dv = d if dv is None else dv
    return (rng.standard_normal((b, hq, sq, d)), rng.standard_normal((b, hk, skv, d)),
            rng.standard_normal((b, hk, skv, dv)))


def _graph_fwd(h, dt, qa, ka, va, layout="bhsd", **opts):
    """Build and run a forward graph on poisoned outputs; returns ([o, stats, ...] on the host, graph)."""
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    arrs = {n: _dev(a, dt, layout) for n, a in (("q", qa), ("k", ka), ("v", va))}
    ts = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    for n in ("bias", "seq_len_q", "seq_len_kv", "seed", "offset", "alibi"):
        if n in opts:
            arrs[n] = opts[n]
            opts[n] = ts[n] = g.tensor_like(opts[n], n)
    res = g.sdpa(ts["q"], ts["k"], ts["v"], **opts)
    outs = [t.set_output(True) for t in res if t is not None]
    g.build(h)
    pack = {ts[n]: a for n, a in arrs.items()}
    for t in outs:
        pack[t] = _nan(t.shape, t.np_dtype, t.strides)
    g.execute(h, pack)
    got = [_host(pack[t]) for t in outs]
    return got, g


# -- forward ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["composite", "unified"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d", [64, 128, 256])
def test_forward_with_stats(handle, rng, dtype, d, impl):
    dt = DTYPES[dtype]
    qa, ka, va = _inputs(rng, 2, 8, 2, 100, 130, d)
    (o, st), _ = _graph_fwd(handle, dt, qa, ka, va, implementation=impl)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt))
    _close(o, ro, dtype)
    _close(st, rs, dtype)


MASKS = {
    "causal": dict(causal=True),
    "causal_bottom_right": dict(causal=True, diagonal_alignment="bottom_right"),
    "window": dict(left_bound=9, right_bound=3),
    "window_causal_bottom_right": dict(left_bound=16, causal=True, diagonal_alignment="bottom_right"),
}


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("s", [1, 17, 100, 257])
def test_forward_band_masks(handle, rng, mask, s):
    dt = BF16
    skv = s + 7 if "bottom_right" in mask else s
    qa, ka, va = _inputs(rng, 2, 2, 2, s, skv, 64)
    (o, st), _ = _graph_fwd(handle, dt, qa, ka, va, **MASKS[mask])
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), **MASKS[mask])
    _close(o, ro, "bfloat16")
    _close(st, rs, "bfloat16")


@pytest.mark.parametrize("s", [1, 17, 100, 257])
def test_forward_padding_mask(handle, rng, s):
    dt = BF16
    b = 3
    lq = np.array([s, max(1, s // 2), max(1, s - 3)])
    lk = np.array([max(1, s - 1), s, max(1, s // 3)])
    qa, ka, va = _inputs(rng, b, 2, 2, s, s, 64)
    (o, st), _ = _graph_fwd(handle, dt, qa, ka, va, seq_len_q=_i32(lq), seq_len_kv=_i32(lk), scale=0.3)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), seq_len_q=lq, seq_len_kv=lk, scale=0.3)
    rows = R.valid_rows(b, s, lq)
    _close(o, ro, "bfloat16", rows)
    _close(st, rs, "bfloat16", rows)


def test_forward_bias_alibi_gqa_layouts(handle, rng):
    dt = DTYPES["float16"]
    b, hq, hk, s = 2, 16, 2, 96
    qa, ka, va = _inputs(rng, b, hq, hk, s, s, 64)
    ba = rng.standard_normal((1, hq, s, s))
    (o, st), _ = _graph_fwd(handle, dt, qa, ka, va, layout="bshd", bias=_dev(ba, dt), causal=True,
                            alibi=to_device(R.alibi_slopes(hq).astype(np.float32).reshape(1, hq, 1, 1)))
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), bias=_q(ba, dt), alibi=R.alibi_slopes(hq), causal=True)
    _close(o, ro, "float16")
    _close(st, rs, "float16")


# -- backward --------------------------------------------------------------------------------------------------
def _graph_bwd(h, dt, qa, ka, va, doa, layout="bhsd", dbias=False, **opts):
    """Forward (for o and stats) then backward graphs, outputs poisoned; returns (o, dq, dk, dv[, dbias])."""
    (o, st, *_), _ = _graph_fwd(h, dt, qa, ka, va, layout=layout, **opts)
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    arrs = {n: _dev(a, dt, layout) for n, a in (("q", qa), ("k", ka), ("v", va), ("o", o), ("do", doa))}
    arrs["stats"] = to_device(st.astype(np.float32))
    ts = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    for n in ("bias", "seq_len_q", "seq_len_kv", "seed", "offset", "alibi"):
        if n in opts:
            arrs[n] = opts[n]
            opts[n] = ts[n] = g.tensor_like(opts[n], n)
    grads = g.sdpa_backward(*(ts[n] for n in ("q", "k", "v", "o", "do", "stats")), dbias=dbias, **opts)
    for t in grads:
        t.set_output(True)
    g.build(h)
    pack = {ts[n]: a for n, a in arrs.items()}
    for t in grads:
        pack[t] = _nan(t.shape, t.np_dtype, t.strides)
    # the scratch accumulators live in the plan's workspace: run on a NaN-poisoned one
    ws = empty((g.plan.workspace_size,), np.uint8)
    ws.fill_(0xFF)
    g.execute(h, pack, workspace=ws)
    return [o] + [_host(pack[t]) for t in grads]


def _check_grads(got, ref, dtype, rows_q=None, rows_kv=None, dbias_shape=None):
    o, dq, dk, dv, *db = got
    rdq, rdk, rdv, rds = ref
    _close(dq, rdq, dtype, rows_q, scale=2)
    _close(dk, rdk, dtype, rows_kv, scale=2)
    _close(dv, rdv, dtype, rows_kv, scale=2)
    if dbias_shape is not None:
        _close(db[0], R.reduce_to(rds, dbias_shape), dtype, scale=2)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("d,causal", [(64, False), (128, True), (256, False)])
def test_backward(handle, rng, dtype, d, causal):
    dt = DTYPES[dtype]
    qa, ka, va = _inputs(rng, 2, 4, 4, 100, 100, d)
    doa = rng.standard_normal(qa.shape)
    got = _graph_bwd(handle, dt, qa, ka, va, doa, causal=causal)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), causal=causal)
    _check_grads(got, ref, dtype)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_backward_gqa_8_to_1_layouts(handle, rng, layout):
    dt = BF16
    qa, ka, va = _inputs(rng, 2, 16, 2, 128, 128, 128)
    doa = rng.standard_normal(qa.shape)
    got = _graph_bwd(handle, dt, qa, ka, va, doa, layout=layout, causal=True)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), causal=True)
    _check_grads(got, ref, "bfloat16")


@pytest.mark.parametrize("mask", ["causal", "window", "causal_bottom_right"])
@pytest.mark.parametrize("s", [17, 257])
def test_backward_band_masks(handle, rng, mask, s):
    dt = BF16
    skv = s + 7 if "bottom_right" in mask else s
    qa, ka, va = _inputs(rng, 2, 2, 2, s, skv, 64)
    doa = rng.standard_normal(qa.shape)
    got = _graph_bwd(handle, dt, qa, ka, va, doa, **MASKS[mask])
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), **MASKS[mask])
    _check_grads(got, ref, "bfloat16")


@pytest.mark.parametrize("s", [17, 100])
def test_backward_padding(handle, rng, s):
    dt = BF16
    lq, lk = np.array([s, s // 2 + 1]), np.array([s - 5, s])
    qa, ka, va = _inputs(rng, 2, 4, 4, s, s, 64)
    doa = rng.standard_normal(qa.shape)
    got = _graph_bwd(handle, dt, qa, ka, va, doa, seq_len_q=_i32(lq), seq_len_kv=_i32(lk))
    rows_q = R.valid_rows(2, s, lq)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt) * rows_q, seq_len_q=lq, seq_len_kv=lk)
    _check_grads(got, ref, "bfloat16", rows_q, R.valid_rows(2, s, lk))


@pytest.mark.parametrize("bias_shape", [(1, 4, 64, 80), (2, 1, 64, 80)])
def test_backward_bias_dbias(handle, rng, bias_shape):
    dt = BF16
    qa, ka, va = _inputs(rng, 2, 4, 4, 64, 80, 64)
    doa, ba = rng.standard_normal(qa.shape), rng.standard_normal(bias_shape)
    got = _graph_bwd(handle, dt, qa, ka, va, doa, bias=_dev(ba, dt), dbias=True)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), bias=_q(ba, dt))
    _check_grads(got, ref, "bfloat16", dbias_shape=bias_shape)


def test_backward_alibi(handle, rng):
    dt = BF16
    qa, ka, va = _inputs(rng, 2, 4, 4, 64, 64, 64)
    doa = rng.standard_normal(qa.shape)
    slopes = to_device(R.alibi_slopes(4).astype(np.float32).reshape(1, 4, 1, 1))
    got = _graph_bwd(handle, dt, qa, ka, va, doa, causal=True, alibi=slopes)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), causal=True, alibi=R.alibi_slopes(4))
    _check_grads(got, ref, "bfloat16")


def test_padding_with_bottom_right_window(handle, rng):
    """Bottom-right alignment under a padding mask shifts the diagonal per batch by seq_len_kv - seq_len_q."""
    dt, s = BF16, 100
    lq, lk = np.array([60, 100, 7]), np.array([100, 100, 50])
    opts = dict(causal=True, left_bound=16, diagonal_alignment="bottom_right")
    qa, ka, va = _inputs(rng, 3, 2, 2, s, s, 64)
    doa = rng.standard_normal(qa.shape)
    (o, st), _ = _graph_fwd(handle, dt, qa, ka, va, seq_len_q=_i32(lq), seq_len_kv=_i32(lk), **opts)
    rows_q, rows_kv = R.valid_rows(3, s, lq), R.valid_rows(3, s, lk)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), seq_len_q=lq, seq_len_kv=lk, **opts)
    _close(o, ro, "bfloat16", rows_q)
    _close(st, rs, "bfloat16", rows_q)
    got = _graph_bwd(handle, dt, qa, ka, va, doa, seq_len_q=_i32(lq), seq_len_kv=_i32(lk), **opts)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt) * rows_q, seq_len_q=lq, seq_len_kv=lk, **opts)
    _check_grads(got, ref, "bfloat16", rows_q, rows_kv)


# -- dropout -----------------------------------------------------------------------------------------------------
def _seed(v):
    return to_device(np.array([v], np.int64).reshape(1, 1, 1, 1))


def test_dropout_forward_backward_by_the_dumped_mask(handle, rng):
    dt, p = BF16, 0.25
    qa, ka, va = _inputs(rng, 2, 2, 2, 64, 96, 64)
    doa = rng.standard_normal(qa.shape)
    (o, st, mask), _ = _graph_fwd(handle, dt, qa, ka, va, dropout=p, seed=_seed(7), offset=_seed(3), rng_dump=True)
    assert set(np.unique(mask)) <= {0.0, 1.0}
    assert abs(mask.mean() - (1 - p)) < 0.02
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), dropout=p, dropout_mask=mask)
    _close(o, ro, "bfloat16")
    _close(st, rs, "bfloat16")
    # the backward regenerates the same mask from the same seed and offset
    got = _graph_bwd(handle, dt, qa, ka, va, doa, dropout=p, seed=_seed(7), offset=_seed(3))
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), dropout=p, dropout_mask=mask)
    _check_grads(got, ref, "bfloat16")


def test_dropout_is_deterministic_given_the_seed(handle, rng):
    dt = BF16
    q, k, v = (_dev(a, dt) for a in _inputs(rng, 1, 2, 2, 64, 64, 64))
    run = lambda seed, off: _host(S.sdpa(handle, q, k, v, dropout=0.3, seed=seed, offset=off))  # noqa: E731
    a, b, c, d = run(5, 0), run(5, 0), run(6, 0), run(5, 1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)


# -- paged KV cache, what the unified descriptors lack --------------------------------------------------------
def test_paged_kv_cache_decode(handle, rng):
    dt = BF16
    b, h, d, block, pages = 2, 4, 64, 16, 4
    skv = block * pages
    nblocks = b * pages
    kc, vc = rng.standard_normal((nblocks, h, block, d)), rng.standard_normal((nblocks, h, block, d))
    table = rng.permutation(nblocks).reshape(b, 1, pages, 1).astype(np.int32)
    lq, lk = np.array([1, 1]), np.array([skv - 5, 23])
    qa = rng.standard_normal((b, h, 1, d))
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    arrs = {"q": _dev(qa, dt), "k": _dev(kc, dt), "v": _dev(vc, dt), "slq": _i32(lq), "slk": _i32(lk),
            "ptk": to_device(table), "ptv": to_device(table)}
    t = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    o, _ = g.sdpa(t["q"], t["k"], t["v"], seq_len_q=t["slq"], seq_len_kv=t["slk"], page_table_k=t["ptk"],
                  page_table_v=t["ptv"], max_seq_len_kv=skv, return_stats=False)
    o.set_output(True)
    g.build(handle)
    out = _nan(o.shape, dt, o.strides)
    g.execute(handle, {**{t[n]: a for n, a in arrs.items()}, o: out})
    # the reference reads the pages in table order
    kk = np.stack([np.concatenate([kc[table[i, 0, j, 0]] for j in range(pages)], axis=1) for i in range(b)])
    vv = np.stack([np.concatenate([vc[table[i, 0, j, 0]] for j in range(pages)], axis=1) for i in range(b)])
    ro, _ = R.forward(_q(qa, dt), _q(kk, dt), _q(vv, dt), seq_len_q=lq, seq_len_kv=lk)
    _close(_host(out), ro, "bfloat16")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pythonic_paged_kv_cache(handle, rng, dtype):
    """cudnn_py.sdpa with page tables ((B, pages) int32): grouped-query decode and a short prefill over cached
    lengths that are not block multiples, into poisoned outputs; a second table (other pages) reuses the plan."""
    dt = DTYPES[dtype]
    b, hq, hk, d, block, pages = 3, 8, 2, 128, 16, 5
    nblocks = b * pages + 3
    kc, vc = rng.standard_normal((nblocks, hk, block, d)), rng.standard_normal((nblocks, hk, block, d))
    kd, vd = _dev(kc, dt), _dev(vc, dt)
    lk = np.array([block * pages, 17, 1])
    G.plan_cache_clear(handle)
    for sq in (1, 7):
        lq = np.minimum(sq, lk)
        qa = rng.standard_normal((b, hq, sq, d))
        mask = dict(causal=True, diagonal_alignment="bottom_right") if sq > 1 else {}
        before = _plans(handle)
        for _ in range(2):
            table = rng.permutation(nblocks)[:b * pages].reshape(b, pages).astype(np.int32)
            o = _nan((b, hq, sq, d), dt)
            got = S.sdpa(handle, _dev(qa, dt), kd, vd, seq_len_q=_i32(lq), seq_len_kv=_i32(lk),
                         page_table_k=to_device(table), page_table_v=to_device(table), max_seq_len_kv=block * pages,
                         o=o, **mask)
            assert got is o
            kk = np.stack([np.concatenate([kc[table[i, j]] for j in range(pages)], axis=1) for i in range(b)])
            vv = np.stack([np.concatenate([vc[table[i, j]] for j in range(pages)], axis=1) for i in range(b)])
            ro, _ = R.forward(_q(qa, dt), _q(kk, dt), _q(vv, dt), seq_len_q=lq, seq_len_kv=lk, **mask)
            rows = (np.arange(sq)[None, None, :, None] < lq[:, None, None, None])
            _close(_host(o), ro, dtype, rows=rows)
        assert _plans(handle) == before + 1


def _plans(handle) -> int:
    """How many plan lists ``handle`` has cached: one per attention graph built (cleared at a test's start)."""
    return G.plan_cache_info(handle)["entries"]


def test_backward_scratch_is_in_the_workspace_not_bound(handle, rng):
    """The accumulators are neither bound nor accepted in a variant pack; the plan's workspace holds them."""
    dt = BF16
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    arrs = {n: _dev(rng.standard_normal((1, 2, 64, 64)), dt) for n in ("q", "k", "v", "o", "do")}
    arrs["stats"] = to_device(np.zeros((1, 2, 64, 1), np.float32))
    t = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    grads = g.sdpa_backward(*(t[n] for n in ("q", "k", "v", "o", "do", "stats")), name="bwd")
    for x in grads:
        x.set_output(True)
    g.build(handle)
    plan = g.plan
    assert plan.workspace_size >= plan.cudnn_workspace_size + 2 * 64 * 4 + 2 * 64 * 64 * 4
    assert [uid for uid, _ in plan.scratch] == [x.uid for x in g.ops[0].scratch_tensors()]
    pack = {t[n]: a for n, a in arrs.items()}
    pack.update({x: _nan(x.shape, dt) for x in grads})
    with pytest.raises(ValueError, match="does not use"):
        g.execute(handle, {**pack, g["bwd.softmax_sum"]: _nan((1, 2, 64, 1), np.float32)})
    g.execute(handle, pack)
    assert not np.isnan(_host(pack[grads[0]])).any()


def test_unified_refuses_what_it_lacks(handle):
    """What the unified descriptors of this cuDNN cannot do is refused before cuDNN is asked (on 9.19: masks,
    bias, dropout, the padding mask its engine ignores, and the whole backward, which has no engines)."""
    g = G.Graph(io_dtype=BF16)
    q = g.tensor((1, 2, 64, 64), name="q")
    with pytest.raises(G.GraphNotSupportedError, match="causal"):
        g.sdpa(q, q, q, causal=True, implementation="unified")
    sl = [g.tensor((1, 1, 1, 1), "int32") for _ in range(2)]
    with pytest.raises(G.GraphNotSupportedError, match="padding mask"):
        g.sdpa(q, q, q, seq_len_q=sl[0], seq_len_kv=sl[1], implementation="unified")
    with pytest.raises(G.GraphNotSupportedError, match="backward"):
        g.sdpa_backward(q, q, q, q, q, g.tensor((1, 2, 64, 1), "float32", name="st"), implementation="unified")


# -- the Pythonic entry point ------------------------------------------------------------------------------------
def test_pythonic_forward_backward_interleaved_qkv_and_cache(handle, rng):
    dt = BF16
    b, s, h, d = 2, 100, 4, 64
    qkv = rng.standard_normal((b, s, 3, h, d))
    buf = to_device(qkv.astype(dt))
    st = (s * 3 * h * d, d, 3 * h * d, 1)  # (B, H, S, D) views into the (B, S, 3, H, D) buffer
    q, k, v = (DeviceArray(buf.ptr + i * h * d * 2, (b, h, s, d), dt, st, owner=buf) for i in range(3))
    host = [qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]
    bshd = (s * h * d, d, h * d, 1)
    G.plan_cache_clear(handle)
    assert S.sdpa(handle, q, k, v, causal=True).strides == bshd  # o follows q's (BSHD) order, packed
    o, stats = S.sdpa(handle, q, k, v, causal=True, return_stats=True, o=_nan((b, h, s, d), dt, bshd),
                      stats=_nan((b, h, s, 1), np.float32))
    o2, _ = S.sdpa(handle, q, k, v, causal=True, return_stats=True, o=_nan((b, h, s, d), dt, bshd),
                   stats=_nan((b, h, s, 1), np.float32))
    assert _plans(handle) == 2  # without and with the statistics (given outputs of o's layout: the same graph)
    ro, rs = R.forward(*(_q(x, dt) for x in host), causal=True)
    _close(_host(o), ro, "bfloat16")
    _close(_host(stats), rs, "bfloat16")
    np.testing.assert_array_equal(_host(o2), _host(o))
    doa = rng.standard_normal(ro.shape)
    grads = S.sdpa_backward(handle, q, k, v, o, _dev(doa, dt), stats, causal=True,
                            **{n: _nan((b, h, s, d), dt, bshd) for n in ("dq", "dk", "dv")})
    assert _plans(handle) == 3
    assert [g_.strides for g_ in grads] == [bshd] * 3
    ref = R.backward(*(_q(x, dt) for x in host), _q(doa, dt), causal=True)
    _check_grads([None, *(_host(g_) for g_ in grads)], ref, "bfloat16")


def test_backward_into_interleaved_views_of_one_gradient_buffer(handle, rng):
    """dq, dk, dv as the three interleaved views of one NaN-poisoned (B, S, 3, H, D) buffer (flash-attention's
    qkv-packed backward): their extents overlap but no element is shared, so the call takes them; the repeat call
    too (the prepared call, no new one), into a new buffer."""
    dt = BF16
    b, s, h, d = 2, 100, 4, 64
    st = (s * 3 * h * d, d, 3 * h * d, 1)
    views = lambda buf: [DeviceArray(buf.ptr + i * h * d * 2, (b, h, s, d), dt, st, owner=buf)  # noqa: E731
                         for i in range(3)]
    qkv = rng.standard_normal((b, s, 3, h, d))
    q, k, v = views(to_device(qkv.astype(dt)))
    doa = rng.standard_normal((b, h, s, d))
    o, stats = S.sdpa(handle, q, k, v, causal=True, return_stats=True)
    host = [qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]
    ref = R.backward(*(_q(x, dt) for x in host), _q(doa, dt), causal=True)
    do, made = _dev(doa, dt), []
    for _ in range(2):
        grads = views(_nan((b, s, 3, h, d), dt))
        got = S.sdpa_backward(handle, q, k, v, o, do, stats, causal=True, **dict(zip(("dq", "dk", "dv"), grads)))
        assert list(got) == grads
        made.append(handle.cache_info()["prepared"])
        _check_grads([None, *(_host(g_) for g_ in got)], ref, "bfloat16")
    assert made[0] == made[1]


def test_pythonic_torch_tensors_padding_dbias_autotune(handle, rng):
    torch = pytest.importorskip("torch")
    b, h, s, d = 2, 4, 64, 64
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    bias = torch.randn(1, h, s, s, device="cuda", dtype=torch.bfloat16)
    lq = torch.tensor([s, 40], device="cuda", dtype=torch.int32)
    lk = torch.tensor([30, s], device="cuda", dtype=torch.int32)
    o, st = S.sdpa(handle, q, k, v, bias=bias, seq_len_q=lq, seq_len_kv=lk, return_stats=True, autotune=True,
                   o=_nan((b, h, s, d), BF16), stats=_nan((b, h, s, 1), np.float32))
    dq, dk, dv, db = S.sdpa_backward(handle, q, k, v, o, do, st, bias=bias, seq_len_q=lq, seq_len_kv=lk,
                                     dq=_nan(q.shape, BF16), dk=_nan(k.shape, BF16), dv=_nan(v.shape, BF16),
                                     dbias=_nan(bias.shape, BF16), return_dbias=True)
    torch.cuda.synchronize()
    f = lambda t: t.float().cpu().double().numpy()  # noqa: E731
    kw = dict(bias=f(bias), seq_len_q=lq.cpu().numpy(), seq_len_kv=lk.cpu().numpy())
    rows_q, rows_kv = R.valid_rows(b, s, kw["seq_len_q"]), R.valid_rows(b, s, kw["seq_len_kv"])
    ro, _ = R.forward(f(q), f(k), f(v), **kw)
    _close(_host(o), ro, "bfloat16", rows_q)
    rdq, rdk, rdv, rds = R.backward(f(q), f(k), f(v), f(do) * rows_q, **kw)
    _check_grads([None, _host(dq), _host(dk), _host(dv)], (rdq, rdk, rdv, rds), "bfloat16", rows_q, rows_kv)
    # dBias over the padded region: the reference gradient is zero there too
    _close(_host(db), R.reduce_to(rds, (1, h, s, s)), "bfloat16", scale=2)


def test_pythonic_alibi_scale_gqa(handle, rng):
    dt = BF16
    qa, ka, va = _inputs(rng, 2, 8, 2, 80, 80, 64)
    doa = rng.standard_normal(qa.shape)
    q, k, v, do = (_dev(a, dt) for a in (qa, ka, va, doa))
    o, st = S.sdpa(handle, q, k, v, causal=True, alibi=True, scale=0.2, return_stats=True)
    grads = S.sdpa_backward(handle, q, k, v, o, do, st, causal=True, alibi=True, scale=0.2)
    kw = dict(causal=True, alibi=R.alibi_slopes(8), scale=0.2)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), **kw)
    _close(_host(o), ro, "bfloat16")
    _close(_host(st), rs, "bfloat16")
    _check_grads([None, *map(_host, grads)], R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt), **kw),
                 "bfloat16")


def test_sdpa_object_executes_as_the_prepared_call(handle, rng):
    """Sdpa.execute is sdpa's prepared call of its arguments: right on every execute, with a given output, new
    outputs and after autotune, one prepared call per configuration."""
    dt = BF16
    qa, ka, va = _inputs(rng, 1, 4, 4, 96, 96, 64)
    q, k, v = (_dev(a, dt) for a in (qa, ka, va))
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), causal=True)
    o = _nan(q.shape, dt)
    given = S.Sdpa(handle, q, k, v, causal=True, o=o)
    new = S.Sdpa(handle, q, k, v, S.SdpaOptions(causal=True), return_stats=True)
    new.autotune()
    before = len(handle_cache(handle, "prepared"))
    for _ in range(3):
        assert given.execute().o is o
        _close(_host(o), ro, "bfloat16")
        got, st = new.execute()
        _close(_host(got), ro, "bfloat16")
        _close(_host(st), rs, "bfloat16")
    assert len(handle_cache(handle, "prepared")) == before + 2


# -- bad input the GPU path sees ----------------------------------------------------------------------------------
def test_host_arrays_and_host_seq_lens_are_refused(handle, rng):
    q = _dev(rng.standard_normal((1, 2, 16, 64)), BF16)
    with pytest.raises(TypeError, match="host memory"):
        S.sdpa(handle, np.zeros((1, 2, 16, 64), BF16), q, q)
    with pytest.raises(TypeError, match="host memory"):
        S.sdpa(handle, q, q, q, seq_len_q=np.array([16], np.int32), seq_len_kv=np.array([16], np.int32))
    with pytest.raises(ValueError, match="int32"):
        S.sdpa(handle, q, q, q, seq_len_q=to_device(np.array([16], np.int64)), seq_len_kv=_i32([16]))
    with pytest.raises(ValueError, match="seed"):
        S.sdpa(handle, q, q, q, dropout=0.1)


# -- packed (ragged, "THD") batches ---------------------------------------------------------------------------------
def _thd_view(a, b, s_max):
    """A (T, H, D) device array seen as the logical (B, H, s_max, D) tensor of its packed batches."""
    _, h, d = a.shape
    return DeviceArray(a.ptr, (b, h, s_max, d), a.dtype, (s_max * h * d, d, h * d, 1), device_id=a.device_id,
                       owner=a)


def _to_packed(host, dt, pad_tokens=64):
    """Packed host (T, H, D) -> device buffer of T + pad_tokens rows (the pad rows NaN); returns (view, buffer)."""
    full = np.full((host.shape[0] + pad_tokens,) + host.shape[1:], np.nan)
    full[:host.shape[0]] = host
    buf = to_device(full.astype(dt))
    return DeviceArray(buf.ptr, host.shape, dt, device_id=buf.device_id, owner=buf), buf


@pytest.mark.parametrize("stats_packed,offset_dtype", [(False, np.int64), (True, np.int32)])
def test_packed_batches_forward_backward(handle, rng, stats_packed, offset_dtype):
    """Sequences of different lengths back to back (THD) with per-tensor ragged offsets, GQA, causal: forward and
    backward against the reference on the padded equivalent; the rows after the last token stay unwritten."""
    dt = BF16
    b, hq, hk, d, s = 3, 4, 2, 64, 100
    lq, lk = np.array([17, 100, 1]), np.array([30, 100, 57])
    qa, ka, va = _inputs(rng, b, hq, hk, s, s, d)
    doa = rng.standard_normal(qa.shape)
    opts = dict(causal=True, diagonal_alignment="bottom_right")
    rows_q, rows_kv = R.valid_rows(b, s, lq), R.valid_rows(b, s, lk)
    host = {"q": R.pack(qa, lq), "k": R.pack(ka, lk), "v": R.pack(va, lk)}
    dev = {n: _to_packed(x, dt)[0] for n, x in host.items()}
    offs = {"q": R.offsets(lq, hq * d), "k": R.offsets(lk, hk * d), "v": R.offsets(lk, hk * d),
            "o": R.offsets(lq, hq * d), "stats": R.offsets(lq, hq)}
    offs_dev = {n: to_device(x.astype(offset_dtype).reshape(-1, 1, 1, 1)) for n, x in offs.items()}
    if not stats_packed:
        del offs_dev["stats"]
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    ts = {n: g.tensor_like(_thd_view(dev[n], b, s), n) for n in ("q", "k", "v")}
    ot = {n: g.tensor_like(a, f"off_{n}") for n, a in offs_dev.items()}
    sl = [g.tensor_like(_i32(x), n) for x, n in ((lq, "slq"), (lk, "slk"))]
    o, st = g.sdpa(ts["q"], ts["k"], ts["v"], seq_len_q=sl[0], seq_len_kv=sl[1], **opts,
                   **{f"ragged_offset_{n}": t for n, t in ot.items()})
    o.set_output(True), st.set_output(True)
    g.build(handle)
    o_dev, o_buf = _to_packed(np.full((lq.sum(), hq, d), np.nan), dt)
    if stats_packed:
        st_dev, st_buf = _to_packed(np.full((lq.sum(), hq, 1), np.nan), np.float32)
        st_arr = DeviceArray(st_dev.ptr, (b, hq, s, 1), np.float32, (s * hq, 1, hq, 1), owner=st_buf)
    else:
        st_arr = _nan((b, hq, s, 1), np.float32)
    pack = {ts[n]: _thd_view(dev[n], b, s) for n in ts}
    pack.update({ot[n]: a for n, a in offs_dev.items()})
    pack.update({sl[0]: _i32(lq), sl[1]: _i32(lk), o: _thd_view(o_dev, b, s), st: st_arr})
    g.execute(handle, pack)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), seq_len_q=lq, seq_len_kv=lk, **opts)
    o_all = _host(o_buf)
    _close(R.unpack(o_all[:lq.sum()], lq, s), ro, "bfloat16", rows_q)
    assert np.isnan(o_all[lq.sum():]).all(), "the packed output was written past its last token"
    stats_host = R.unpack(_host(st_buf)[:lq.sum()], lq, s) if stats_packed else _host(st_arr)
    _close(stats_host, rs, "bfloat16", rows_q)
    # backward: dq/dk/dv packed like q/k/v, do like o
    o_host = R.unpack(o_all[:lq.sum()], lq, s)
    do_dev = _to_packed(R.pack(doa, lq), dt)[0]
    st_in = to_device(np.asarray(st_arr.to_numpy(), np.float32)) if not stats_packed else st_arr
    g2 = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    ins = {n: _thd_view(dev[n], b, s) for n in ("q", "k", "v")}
    ins.update(o=_thd_view(o_dev, b, s), do=_thd_view(do_dev, b, s), stats=st_in)
    t2 = {n: g2.tensor_like(a, n) for n, a in ins.items()}
    ot2 = {n: g2.tensor_like(a, f"off_{n}") for n, a in offs_dev.items()}
    sl2 = [g2.tensor_like(_i32(x), n) for x, n in ((lq, "slq"), (lk, "slk"))]
    grads = g2.sdpa_backward(*(t2[n] for n in ("q", "k", "v", "o", "do", "stats")), seq_len_q=sl2[0],
                             seq_len_kv=sl2[1], **opts, **{f"ragged_offset_{n}": t for n, t in ot2.items()})
    for t in grads:
        t.set_output(True)
    g2.build(handle)
    outs = [_to_packed(np.full((n_tok, h_, d), np.nan), dt) for n_tok, h_ in ((lq.sum(), hq), (lk.sum(), hk),
                                                                               (lk.sum(), hk))]
    pack2 = {t2[n]: a for n, a in ins.items()}
    pack2.update({ot2[n]: a for n, a in offs_dev.items()})
    pack2.update({sl2[0]: _i32(lq), sl2[1]: _i32(lk)})
    for t, (view, _), sm in zip(grads, outs, (s, s, s)):
        pack2[t] = _thd_view(view, b, sm)
    g2.execute(handle, pack2)
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt) * rows_q, seq_len_q=lq, seq_len_kv=lk,
                     o=o_host * rows_q, **opts)
    got = []
    for (view, buf), lens in zip(outs, (lq, lk, lk)):
        full = _host(buf)
        assert np.isnan(full[lens.sum():]).all(), "a packed gradient was written past its last token"
        got.append(R.unpack(full[:lens.sum()], lens, s))
    _check_grads([None, *got], ref, "bfloat16", rows_q, rows_kv)


def test_packed_head_major_q_and_o_with_offsets_of_their_own(handle, rng):
    """A head-major packed q ((H, T, D) in memory: token stride D, head stride T * D) and o (the graph's layout for
    it: B * S_max rows a head) with offsets of their own (cumulative tokens times D) beside token-major packed k and
    v: the graph takes these layouts, so they are checked against the reference; no row of o past T is written."""
    dt = BF16
    b, h, d, s = 3, 2, 64, 80
    lq, lk = np.array([80, 5, 33]), np.array([64, 80, 7])
    qa, ka, va = _inputs(rng, b, h, h, s, s, d)
    t = int(lq.sum())
    q_buf = to_device(np.ascontiguousarray(R.pack(qa, lq).transpose(1, 0, 2)).astype(dt))
    q = DeviceArray(q_buf.ptr, (b, h, s, d), dt, (s * d, t * d, d, 1), owner=q_buf)
    k, v = (_thd_view(_to_packed(R.pack(x, lk), dt)[0], b, s) for x in (ka, va))
    offs = {"q": R.offsets(lq, d), "o": R.offsets(lq, d), "k": R.offsets(lk, h * d), "v": R.offsets(lk, h * d)}
    offs_dev = {n: to_device(x.astype(np.int64).reshape(-1, 1, 1, 1)) for n, x in offs.items()}
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    ts = {n: g.tensor_like(a, n) for n, a in (("q", q), ("k", k), ("v", v))}
    ot = {n: g.tensor_like(a, f"off_{n}") for n, a in offs_dev.items()}
    sl = [g.tensor_like(_i32(x), n) for x, n in ((lq, "slq"), (lk, "slk"))]
    o, st = g.sdpa(ts["q"], ts["k"], ts["v"], seq_len_q=sl[0], seq_len_kv=sl[1],
                   **{f"ragged_offset_{n}": x for n, x in ot.items()})
    o.set_output(True), st.set_output(True)
    assert o.strides == (s * d, b * s * d, d, 1)  # o follows q's order, packed: B * S_max rows a head
    g.build(handle)
    o_buf = to_device(np.full((h, b * s, d), np.nan).astype(dt))
    o_arr = DeviceArray(o_buf.ptr, (b, h, s, d), dt, o.strides, owner=o_buf)
    st_arr = _nan((b, h, s, 1), np.float32)
    pack = {ts["q"]: q, ts["k"]: k, ts["v"]: v, o: o_arr, st: st_arr, sl[0]: _i32(lq), sl[1]: _i32(lk)}
    pack.update({ot[n]: a for n, a in offs_dev.items()})
    g.execute(handle, pack)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), seq_len_q=lq, seq_len_kv=lk)
    o_all = _host(o_buf)
    _close(R.unpack(o_all[:, :t].transpose(1, 0, 2), lq, s), ro, "bfloat16", R.valid_rows(b, s, lq))
    assert np.isnan(o_all[:, t:]).all(), "o was written past a head's last token"
    _close(_host(st_arr), rs, "bfloat16", R.valid_rows(b, s, lq))


def test_pythonic_packed_batches(handle, rng):
    dt = BF16
    b, h, d, s = 3, 2, 64, 80
    lq, lk = np.array([80, 5, 33]), np.array([64, 80, 7])
    qa, ka, va = _inputs(rng, b, h, h, s, s, d)
    doa = rng.standard_normal(qa.shape)
    q, k, v, do = (_to_packed(R.pack(x, n), dt)[0] for x, n in ((qa, lq), (ka, lk), (va, lk), (doa, lq)))
    kw = dict(seq_len_q=_i32(lq).reshape(b), seq_len_kv=_i32(lk).reshape(b), max_seq_len_q=s, max_seq_len_kv=s,
              ragged_offset_q=to_device(R.offsets(lq, h * d).astype(np.int64)),
              ragged_offset_k=to_device(R.offsets(lk, h * d).astype(np.int64)))
    o, st = S.sdpa(handle, q, k, v, return_stats=True, **kw)
    assert o.shape == (lq.sum(), h, d)
    rows_q, rows_kv = R.valid_rows(b, s, lq), R.valid_rows(b, s, lk)
    ro, rs = R.forward(_q(qa, dt), _q(ka, dt), _q(va, dt), seq_len_q=lq, seq_len_kv=lk)
    o_host = R.unpack(_host(o), lq, s)
    _close(o_host, ro, "bfloat16", rows_q)
    _close(_host(st), rs, "bfloat16", rows_q)
    dq, dk, dv = S.sdpa_backward(handle, q, k, v, o, do, st, **kw)
    assert (dq.shape, dk.shape) == ((lq.sum(), h, d), (lk.sum(), h, d))
    ref = R.backward(_q(qa, dt), _q(ka, dt), _q(va, dt), _q(doa, dt) * rows_q, seq_len_q=lq, seq_len_kv=lk,
                     o=o_host * rows_q)
    got = [R.unpack(_host(x), n, s) for x, n in ((dq, lq), (dk, lk), (dv, lk))]
    _check_grads([None, *got], ref, "bfloat16", rows_q, rows_kv)


# -- FP8 ------------------------------------------------------------------------------------------------------------
F8 = {"e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2": np.dtype(ml_dtypes.float8_e5m2)}
FP8_TOL = {"e4m3": 0.05, "e5m2": 0.1}  # relative RMS error bound; max error bound 3x that (of max |ref|)


def _f32(x):
    return to_device(np.array(x, np.float32).reshape(1, 1, 1, 1))


def _fp8_close(got, ref, tol, what):
    rms, mx = R.rel_errors(got, ref)
    print(f"{what}: relative RMS error {rms:.4f}, max error / max |ref| {mx:.4f}")
    assert not np.isnan(got).any(), f"{what} has NaN: an element was not written"
    assert rms <= tol and mx <= 3 * tol, f"{what}: relative RMS error {rms:.4f}, max {mx:.4f} (bound {tol})"


def _fp8_forward(handle, rng, fmt, b, hq, hk, s, d, causal):
    """Quantized inputs, the FP8 forward graph run on them; returns everything the tests compare."""
    dt = F8[fmt]
    qa, ka, va = _inputs(rng, b, hq, hk, s, s, d)
    sc = {n: 16.0 for n in ("q", "k", "v")}
    (q8, qd), (k8, kd), (v8, vd) = (R.quantize(x, dt, sc[n]) for x, n in ((qa, "q"), (ka, "k"), (va, "v")))
    ro, rs = R.forward(qd, kd, vd, causal=causal)
    scale_s, scale_o = 256.0 if fmt == "e4m3" else 4096.0, R.pow2_scale(np.abs(ro).max(), dt)
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    arrs = {"q": to_device(q8), "k": to_device(k8), "v": to_device(v8)}
    scales = {"descale_q": 1 / sc["q"], "descale_k": 1 / sc["k"], "descale_v": 1 / sc["v"],
              "descale_s": 1 / scale_s, "scale_s": scale_s, "scale_o": scale_o}
    arrs.update({n: _f32(x) for n, x in scales.items()})
    t = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    outs = g.sdpa_fp8(t["q"], t["k"], t["v"], causal=causal, **{n: t[n] for n in scales})
    for x in outs:
        x.set_output(True)
    g.build(handle)
    res = [_nan(x.shape, x.np_dtype, x.strides) for x in outs]
    g.execute(handle, {**{t[n]: a for n, a in arrs.items()}, **dict(zip(outs, res))})
    o8, st, amax_s, amax_o = (x.to_numpy() for x in res)
    return dict(dt=dt, q=(q8, qd, sc["q"]), k=(k8, kd, sc["k"]), v=(v8, vd, sc["v"]), ro=ro, rs=rs, o8=o8,
                stats=st, amax_s=float(amax_s.ravel()[0]), amax_o=float(amax_o.ravel()[0]), scale_s=scale_s,
                scale_o=scale_o)


@pytest.mark.parametrize("fmt,causal,d", [("e4m3", False, 128), ("e4m3", True, 64), ("e5m2", True, 128)])
def test_fp8_forward(handle, rng, fmt, causal, d):
    r = _fp8_forward(handle, rng, fmt, 2, 4, 2, 128, d, causal)
    o = r["o8"].astype(np.float64) / r["scale_o"]
    _fp8_close(o, r["ro"], FP8_TOL[fmt], f"FP8 {fmt} O")
    _close(r["stats"], r["rs"], "float16")  # float32 statistics of exactly representable scores
    # amax of the probabilities (max over rows of 1/rowsum-ish, <= 1) and of O before its scaling
    s_all = np.exp(np.einsum("bhqd,bhkd->bhqk", r["q"][1], np.repeat(r["k"][1], 2, 1)) / np.sqrt(d) - r["rs"])
    p_ref = np.where(R.keep_mask(2, 4, 128, 128, causal=causal), s_all, 0).max()
    np.testing.assert_allclose(r["amax_s"], p_ref, rtol=0.02)
    np.testing.assert_allclose(r["amax_o"], np.abs(r["ro"]).max(), rtol=2 * FP8_TOL[fmt])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_backward(handle, rng, fmt):
    b, hq, hk, s, d = 2, 4, 2, 128, 128
    r = _fp8_forward(handle, rng, fmt, b, hq, hk, s, d, True)
    dt = r["dt"]
    doa = rng.standard_normal(r["ro"].shape)
    do8, dod = R.quantize(doa, dt, 16.0)
    od = r["o8"].astype(np.float64) / r["scale_o"]
    (q8, qd, sq_), (k8, kd, sk), (v8, vd, sv) = r["q"], r["k"], r["v"]
    rdq, rdk, rdv, rds = R.backward(qd, kd, vd, dod, causal=True, o=od)
    scale_dp = R.pow2_scale(np.abs(rds / np.sqrt(d)).max(), dt)
    scale = {n: R.pow2_scale(np.abs(x).max(), dt) for n, x in (("dq", rdq), ("dk", rdk), ("dv", rdv))}
    g = G.Graph(io_dtype=dt, compute_dtype="float32", intermediate_dtype="float32")
    arrs = {"q": to_device(q8), "k": to_device(k8), "v": to_device(v8), "o": to_device(r["o8"]),
            "do": to_device(do8), "stats": to_device(r["stats"])}
    scales = {"descale_q": 1 / sq_, "descale_k": 1 / sk, "descale_v": 1 / sv, "descale_o": 1 / r["scale_o"],
              "descale_do": 1 / 16.0, "descale_s": 1 / r["scale_s"], "descale_dp": 1 / scale_dp,
              "scale_s": r["scale_s"], "scale_dq": scale["dq"], "scale_dk": scale["dk"], "scale_dv": scale["dv"],
              "scale_dp": scale_dp}
    arrs.update({n: _f32(x) for n, x in scales.items()})
    t = {n: g.tensor_like(a, n) for n, a in arrs.items()}
    outs = g.sdpa_fp8_backward(*(t[n] for n in ("q", "k", "v", "o", "do", "stats")), causal=True,
                               **{n: t[n] for n in scales})
    for x in outs:
        x.set_output(True)
    g.build(handle)
    res = [_nan(x.shape, x.np_dtype, x.strides) for x in outs]
    g.execute(handle, {**{t[n]: a for n, a in arrs.items()}, **dict(zip(outs, res))})
    dq8, dk8, dv8, amax_dq, amax_dk, amax_dv, amax_dp = (x.to_numpy() for x in res)
    tol = 2 * FP8_TOL[fmt]
    for n, got, ref, am in (("dQ", dq8, rdq, amax_dq), ("dK", dk8, rdk, amax_dk), ("dV", dv8, rdv, amax_dv)):
        _fp8_close(got.astype(np.float64) / scale[n.lower()], ref, tol, f"FP8 {fmt} {n}")
        np.testing.assert_allclose(float(am.ravel()[0]), np.abs(ref).max(), rtol=tol)
    np.testing.assert_allclose(float(amax_dp.ravel()[0]), np.abs(rds / np.sqrt(d)).max(), rtol=tol)


def _fp8_pythonic_case(rng, fmt, b, hq, hk, s, d):
    """Quantized random inputs and their float64 forward/backward references, with the scales a delayed-scaling
    recipe would pick (powers of two from the reference's amax)."""
    dt = F8[fmt]
    qa, ka, va = _inputs(rng, b, hq, hk, s, s, d)
    (q8, qd), (k8, kd), (v8, vd) = (R.quantize(x, dt, 16.0) for x in (qa, ka, va))
    ro, rs = R.forward(qd, kd, vd, causal=True)
    return dict(dt=dt, q8=q8, k8=k8, v8=v8, qd=qd, kd=kd, vd=vd, ro=ro, rs=rs,
                scale_s=256.0 if fmt == "e4m3" else 4096.0, scale_o=R.pow2_scale(np.abs(ro).max(), dt))


@pytest.mark.parametrize("fmt,s", [("e4m3", 128), ("e5m2", 128), ("e4m3", 96), ("e4m3", 160)])
def test_pythonic_fp8_forward_backward(handle, rng, fmt, s):
    """cudnn_py.sdpa_fp8 / sdpa_fp8_backward with scales given as numbers and as device tensors, into poisoned
    outputs, twice each (the second call reuses the plan), against the float64 reference."""
    b, hq, hk, d = 2, 4, 2, 128
    r = _fp8_pythonic_case(rng, fmt, b, hq, hk, s, d)
    dt = r["dt"]
    q, k, v = to_device(r["q8"]), to_device(r["k8"]), to_device(r["v8"])
    fwd = dict(descale_q=1 / 16, descale_k=_f32(1 / 16), descale_v=1 / 16, descale_s=_f32(1 / r["scale_s"]),
               scale_s=r["scale_s"], scale_o=_f32(r["scale_o"]))
    G.plan_cache_clear(handle)
    for _ in range(2):
        outs = (_nan((b, hq, s, d), dt), _nan((b, hq, s, 1), np.float32), _nan((1, 1, 1, 1), np.float32),
                _nan((1, 1, 1, 1), np.float32))
        res = S.sdpa_fp8(handle, q, k, v, causal=True, o=outs[0], stats=outs[1], amax_s=outs[2], amax_o=outs[3],
                         **fwd)
        assert all(x is y for x, y in zip(res, outs))
        o8, st = res.o.to_numpy(), res.stats.to_numpy()
        _fp8_close(o8.astype(np.float64) / r["scale_o"], r["ro"], FP8_TOL[fmt], f"sdpa_fp8 {fmt} O")
        _close(st, r["rs"], "float16")
        np.testing.assert_allclose(float(res.amax_o.to_numpy().ravel()[0]), np.abs(r["ro"]).max(),
                                   rtol=2 * FP8_TOL[fmt])
        # the largest softmax probability: query 0 sees key 0 alone under the causal mask, so P = 1 there
        np.testing.assert_allclose(float(res.amax_s.to_numpy().ravel()[0]), 1.0, rtol=1e-5)
    assert _plans(handle) == 1

    doa = rng.standard_normal(r["ro"].shape)
    do8, dod = R.quantize(doa, dt, 16.0)
    od = o8.astype(np.float64) / r["scale_o"]
    rdq, rdk, rdv, rds = R.backward(r["qd"], r["kd"], r["vd"], dod, causal=True, o=od)
    scale_dp = R.pow2_scale(np.abs(rds / np.sqrt(d)).max(), dt)
    sc = {n: R.pow2_scale(np.abs(x).max(), dt) for n, x in (("dq", rdq), ("dk", rdk), ("dv", rdv))}
    bwd = dict(descale_q=1 / 16, descale_k=1 / 16, descale_v=_f32(1 / 16), descale_o=1 / r["scale_o"],
               descale_do=_f32(1 / 16), descale_s=1 / r["scale_s"], descale_dp=1 / scale_dp, scale_s=r["scale_s"],
               scale_dq=_f32(sc["dq"]), scale_dk=sc["dk"], scale_dv=sc["dv"], scale_dp=scale_dp)
    o_dev, st_dev, do_dev = res.o, res.stats, to_device(do8)
    for _ in range(2):
        given = (_nan((b, hq, s, d), dt), _nan((b, hk, s, d), dt), _nan((b, hk, s, d), dt))
        g = S.sdpa_fp8_backward(handle, q, k, v, o_dev, do_dev, st_dev, causal=True, dq=given[0], dk=given[1],
                                dv=given[2], **bwd)
        assert all(x is y for x, y in zip(g, given))
        tol = 2 * FP8_TOL[fmt]
        for n, got, ref, am in (("dq", g.dq, rdq, g.amax_dq), ("dk", g.dk, rdk, g.amax_dk), ("dv", g.dv, rdv,
                                                                                             g.amax_dv)):
            _fp8_close(got.to_numpy().astype(np.float64) / sc[n], ref, tol, f"sdpa_fp8_backward {fmt} {n}")
            np.testing.assert_allclose(float(am.to_numpy().ravel()[0]), np.abs(ref).max(), rtol=tol)
        np.testing.assert_allclose(float(g.amax_dp.to_numpy().ravel()[0]), np.abs(rds / np.sqrt(d)).max(), rtol=tol)
    assert _plans(handle) == 2


def test_fp8_backward_into_interleaved_views_of_one_gradient_buffer(handle, rng):
    """FP8 dq, dk, dv as the three interleaved views of one NaN-poisoned (B, S, 3, H, D) float8 buffer, taken as the
    bfloat16 backward takes them, first call and repeat (the prepared call, no new one), against float64."""
    b, h, s, d = 2, 4, 128, 128
    r = _fp8_pythonic_case(rng, "e4m3", b, h, h, s, d)
    dt = r["dt"]
    q, k, v = to_device(r["q8"]), to_device(r["k8"]), to_device(r["v8"])
    fwd = S.sdpa_fp8(handle, q, k, v, causal=True, return_stats=True, descale_q=1 / 16, descale_k=1 / 16,
                     descale_v=1 / 16, descale_s=1 / r["scale_s"], scale_s=r["scale_s"], scale_o=r["scale_o"])
    o8 = fwd.o.to_numpy()
    do8, dod = R.quantize(rng.standard_normal(r["ro"].shape), dt, 16.0)
    rdq, rdk, rdv, rds = R.backward(r["qd"], r["kd"], r["vd"], dod, causal=True, o=o8.astype(np.float64) / r["scale_o"])
    scale_dp = R.pow2_scale(np.abs(rds / np.sqrt(d)).max(), dt)
    sc = {n: R.pow2_scale(np.abs(x).max(), dt) for n, x in (("dq", rdq), ("dk", rdk), ("dv", rdv))}
    st = (s * 3 * h * d, d, 3 * h * d, 1)
    views = lambda buf: [DeviceArray(buf.ptr + i * h * d, (b, h, s, d), dt, st, owner=buf)  # noqa: E731
                         for i in range(3)]
    made = []
    for _ in range(2):
        grads = views(_nan((b, s, 3, h, d), dt))
        g = S.sdpa_fp8_backward(handle, q, k, v, fwd.o, to_device(do8), fwd.stats, causal=True,
                                **dict(zip(("dq", "dk", "dv"), grads)), descale_q=1 / 16, descale_k=1 / 16,
                                descale_v=1 / 16, descale_o=1 / r["scale_o"], descale_do=1 / 16,
                                descale_s=1 / r["scale_s"], descale_dp=1 / scale_dp, scale_s=r["scale_s"],
                                scale_dq=sc["dq"], scale_dk=sc["dk"], scale_dv=sc["dv"], scale_dp=scale_dp)
        assert all(x is y for x, y in zip((g.dq, g.dk, g.dv), grads))
        made.append(handle.cache_info()["prepared"])
        for n, got, ref in (("dq", g.dq, rdq), ("dk", g.dk, rdk), ("dv", g.dv, rdv)):
            _fp8_close(got.to_numpy().astype(np.float64) / sc[n], ref, 2 * FP8_TOL["e4m3"], f"interleaved FP8 {n}")
    assert made[0] == made[1]


def test_pythonic_fp8_takes_torch_tensors(handle, rng):
    """torch float8 tensors (read without DLPack) give the same bits as DeviceArrays of the same data."""
    torch = pytest.importorskip("torch")
    b, hq, hk, s, d = 1, 4, 1, 128, 128
    r = _fp8_pythonic_case(rng, "e4m3", b, hq, hk, s, d)
    scales = {n: _f32(x) for n, x in (("descale_q", 1 / 16), ("descale_k", 1 / 16), ("descale_v", 1 / 16),
                                      ("descale_s", 1 / r["scale_s"]), ("scale_s", r["scale_s"]),
                                      ("scale_o", r["scale_o"]))}
    want = S.sdpa_fp8(handle, to_device(r["q8"]), to_device(r["k8"]), to_device(r["v8"]), causal=True, **scales)
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(r[n]).view(np.uint8)).cuda().view(torch.float8_e4m3fn)
                  for n in ("q8", "k8", "v8"))
    got = S.sdpa_fp8(handle, tq, tk, tv, causal=True, **scales)
    torch.cuda.synchronize()
    assert isinstance(got.o, torch.Tensor) and got.o.dtype == torch.float8_e4m3fn  # torch in, torch out
    o = as_array(got.o).to_numpy()
    assert np.array_equal(o.view(np.uint8), want.o.to_numpy().view(np.uint8))
    _fp8_close(o.astype(np.float64) / r["scale_o"], r["ro"], FP8_TOL["e4m3"], "torch FP8 O")
