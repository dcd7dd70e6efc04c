"""SdpaOptions (checked once, hashable, shared by the entry points and the graph builder), the stateful Sdpa, and
the deprecated attention spellings (each warns once at the user's line; the package's own calls never warn)."""
from __future__ import annotations

import dataclasses
import inspect
import warnings

import ml_dtypes
import numpy as np
import pytest

from cudnn_py import Sdpa, SdpaOptions
from cudnn_py.errors import CudnnPyError
from cudnn_py.graph import Graph
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops import sdpa as S
from test_sdpa import _PlanHandle, _qkv, fake_exec  # noqa: F401 - the fixture

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("kw, err, match", [
    (dict(scale="0.1"), TypeError, "scale must be a real number"),
    (dict(scale=float("nan")), ValueError, "scale must be finite"),
    (dict(causal="yes"), TypeError, "causal must be True or False"),
    (dict(diagonal_alignment="left"), ValueError, "diagonal_alignment must be one of"),
    (dict(diagonal_alignment=1), TypeError, "diagonal_alignment must be one of"),
    (dict(left_bound=0), ValueError, "left_bound must be >= 1"),
    (dict(right_bound=2.0), TypeError, "right_bound must be an int"),
    (dict(causal=True, right_bound=3), ValueError, "causal=True means right_bound=0"),
    (dict(diagonal_alignment="bottom_right"), ValueError, "needs causal=True, right_bound or left_bound"),
    (dict(diagonal_alignment="bottom_right", causal=True, dropout=0.1), ValueError, "bottom-right alignment"),
    (dict(alibi=True), ValueError, "ALiBi needs causal"),
    (dict(alibi="steep", causal=True), TypeError, "alibi must be True, False or per-head slopes"),
    (dict(alibi=[1.0, float("inf")], causal=True), ValueError, "finite"),
    (dict(dropout=1.0), ValueError, r"dropout must be in \[0, 1\)"),
    (dict(dropout=None), TypeError, "dropout must be a real number"),
    (dict(max_seq_len_q=0), ValueError, "max_seq_len_q must be >= 1"),
    (dict(implementation="fast"), ValueError, "implementation must be one of"),
])
def test_options_are_checked_when_made(kw, err, match):
    with pytest.raises(err, match=match) as e:
        SdpaOptions(**kw)
    assert isinstance(e.value, CudnnPyError)


def test_options_are_normalised_frozen_and_hashable():
    a = SdpaOptions(scale=1, causal=np.bool_(True), left_bound=np.int64(8), alibi=np.array([0.5, 0.25]))
    assert a.scale == 1.0 and type(a.scale) is float and a.causal is True and type(a.left_bound) is int
    assert a.alibi == (0.5, 0.25) and a.band_right == 0
    b = SdpaOptions(scale=1.0, causal=True, left_bound=8, alibi=(0.5, 0.25))
    assert a == b and hash(a) == hash(b) and len({a: 1, b: 2}) == 1  # the cache key
    assert SdpaOptions() != SdpaOptions(causal=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.causal = False


def test_options_or_keywords_not_both():
    opts = SdpaOptions(causal=True)
    assert SdpaOptions.of(opts, {"causal": False, "scale": None}) is opts  # defaults: nothing given twice
    assert SdpaOptions.of({"causal": True}) == opts and SdpaOptions.of(None, {"causal": True}) == opts
    with pytest.raises(TypeError, match="pass scale in options= or as keywords, not both"):
        SdpaOptions.of(opts, {"scale": 0.5})
    with pytest.raises(TypeError, match="unexpected keyword argument 'causual'"):
        SdpaOptions.of(None, {"causual": True})
    with pytest.raises(TypeError, match="options must be an SdpaOptions"):
        SdpaOptions.of("causal")


def test_the_builder_takes_the_same_options(monkeypatch):
    """Graph.sdpa* take an SdpaOptions or its fields as keywords and lower the same graph either way."""
    import cudnn_py.graph.ops.sdpa_builders as gsb
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    keys = []
    for call in (lambda g, q, k, v: g.sdpa(q, k, v, SdpaOptions(causal=True, scale=0.5, left_bound=16)),
                 lambda g, q, k, v: g.sdpa(q, k, v, causal=True, scale=0.5, left_bound=16)):
        g = Graph(io_dtype=BF16)
        o, st = call(g, *_qkv(g))
        o.set_output(True)
        st.set_output(True)
        keys.append(g.key())
    assert keys[0] == keys[1]
    g = Graph(io_dtype=BF16)
    with pytest.raises(ValueError, match="ALiBi slopes as a tensor"):
        g.sdpa(*_qkv(g), SdpaOptions(alibi=True, causal=True))
    with pytest.raises(ValueError, match="FP8 attention takes the options scale and causal only, not dropout"):
        f8 = [g.tensor((1, 2, 64, 64), "float8_e4m3fn", name=f"f{i}") for i in range(3)]
        sc = {n: g.tensor((1, 1, 1, 1), "float32", name=n) for n in
              ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
        g.sdpa_fp8(*f8, SdpaOptions(dropout=0.1), **sc)


def test_deprecated_builder_spellings_warn_and_work(monkeypatch):
    import cudnn_py.graph.ops.sdpa_builders as gsb
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g)
    slopes = g.tensor((1, 4, 1, 1), "float32", name="slopes")
    with pytest.warns(DeprecationWarning) as w:
        o, st = g.sdpa(q, k, v, causal=True, alibi_slopes=slopes, generate_stats=False)
    assert [str(r.message) for r in w] == ["Graph.sdpa(): alibi_slopes= is deprecated, use alibi=",
                                           "Graph.sdpa(): generate_stats= is deprecated, use return_stats="]
    assert st is None and all(r.filename == __file__ for r in w)  # the user's line
    assert g.ops[-1].inputs["alibi_slopes"] is slopes
    with pytest.raises(TypeError, match="both alibi= and its old spelling alibi_slopes="):
        g.sdpa(q, k, v, causal=True, alibi=slopes, alibi_slopes=slopes)


def test_sdpa_object_plans_once_and_executes(fake_exec):
    packs, made = fake_exec
    h = _PlanHandle()
    q, o = DeviceArray(0x10000, (1, 2, 64, 64), BF16), DeviceArray(0x20000, (1, 2, 64, 64), BF16)
    a = Sdpa(h, q, q, q, SdpaOptions(causal=True), o=o)
    assert "not planned" in repr(a) and a.runner is None
    plan = a.plan()
    assert a.plan() is plan and a.runner.plan is plan
    for _ in range(2):
        res = a.execute()
        assert res == S.SdpaOutputs(o, None)
    assert len(made) == 1 and packs == [1001, 1001]
    # the function form is a prepared call of its own (its runner's plan from the handle's plan cache), returning one
    # type per flag
    assert S.sdpa(h, q, q, q, SdpaOptions(causal=True), o=o) is o
    assert len(made) == 2
    o2, st = S.sdpa(h, q, q, q, causal=True, return_stats=True)
    assert st.shape == (1, 2, 64, 1)


def test_deprecated_entry_spellings_warn_once_and_internal_calls_never(fake_exec, monkeypatch):
    from cudnn_py.ops import sdpa_args as A
    packs, made = fake_exec
    monkeypatch.setattr(A, "to_device", lambda a, **kw: DeviceArray(0x50000, a.shape, a.dtype))  # the slopes
    h = _PlanHandle()
    q = DeviceArray(0x10000, (1, 2, 64, 64), BF16)
    st = DeviceArray(0x30000, (1, 2, 64, 1), np.float32)
    with pytest.warns(DeprecationWarning, match="stats= without return_stats=True") as w:
        res = S.sdpa(h, q, q, q, stats=st)
    assert isinstance(res, S.SdpaOutputs) and res.stats is st and w[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the package's own calls (alibi slopes, the builder) never warn
        S.sdpa(h, q, q, q, causal=True, alibi=True)
        S.sdpa(h, q, q, q, SdpaOptions(causal=True, alibi=(0.5, 0.25)))
    with pytest.raises(ValueError, match="alibi must be True or 2 per-head slopes"):
        S.sdpa(h, q, q, q, causal=True, alibi=(0.5, 0.25, 0.125))
    with pytest.warns(DeprecationWarning, match="sdpa\\(\\): ragged_offset_kv= is deprecated, use ragged_offset_k=") \
            as w:
        S.sdpa(h, q, q, q, ragged_offset_kv=None)
    assert w[0].filename == __file__
    with pytest.raises(TypeError, match="both ragged_offset_k= and its old spelling"):
        S.sdpa(h, q, q, q, ragged_offset_k=q, ragged_offset_kv=q)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ragged_offset_x'"):
        S.sdpa(h, q, q, q, ragged_offset_x=None)


# -- one vocabulary: torch's and cudnn-frontend's spellings get a did-you-mean --------------------------------------
@pytest.mark.parametrize("kw, hint", [
    ("dropout_p", "did you mean dropout="), ("is_causal", "did you mean causal="),
    ("attn_scale", "did you mean scale="), ("softmax_scale", "did you mean scale="),
    ("use_causal_mask", "did you mean causal="),
    ("use_causal_mask_bottom_right", "did you mean causal=True, diagonal_alignment='bottom_right'"),
    ("sliding_window_length", "did you mean left_bound="), ("casual", "did you mean causal="),
])
def test_options_name_the_package_spelling(kw, hint):
    with pytest.raises(TypeError, match=f"SdpaOptions\\(\\) got an unexpected keyword argument '{kw}'; {hint}") as e:
        SdpaOptions(**{kw: 0.1})
    assert isinstance(e.value, CudnnPyError)


def test_options_refuse_extra_and_repeated_fields_with_package_errors():
    with pytest.raises(CudnnPyError, match="takes 10 fields"):
        SdpaOptions(*range(11))
    with pytest.raises(CudnnPyError, match="got scale both positionally and as scale="):
        SdpaOptions(0.5, scale=0.25)
    with pytest.raises(CudnnPyError, match="unexpected keyword argument 'frobnicate'$"):  # nothing close: no hint
        SdpaOptions(frobnicate=1)
    assert dataclasses.replace(SdpaOptions(0.5), causal=True) == SdpaOptions(scale=0.5, causal=True)
    # help() and the API docs show the fields, not the checking __new__'s catch-all
    assert list(inspect.signature(SdpaOptions).parameters) == [f.name for f in dataclasses.fields(SdpaOptions)]


@pytest.mark.parametrize("kw, hint", [("dropout_p", "dropout="), ("is_causal", "causal="),
                                      ("attn_mask", "bias="), ("generate_stats", "return_stats="),
                                      ("paged_attention_k_table", "page_table_k="), ("max_seqlen_q", "max_seq_len_q=")])
def test_entry_points_name_the_package_spelling(kw, hint):
    h = _PlanHandle()
    q = DeviceArray(0x10000, (1, 2, 64, 64), BF16)
    calls = {"sdpa": lambda: S.sdpa(h, q, q, q, **{kw: 1}),
             "Sdpa": lambda: Sdpa(h, q, q, q, **{kw: 1}),
             "sdpa_backward": lambda: S.sdpa_backward(h, q, q, q, q, q, q, **{kw: 1})}
    for where, call in calls.items():
        if where == "sdpa_backward" and kw in ("generate_stats", "paged_attention_k_table"):
            continue  # the backward has neither
        with pytest.raises(CudnnPyError, match=f"{where}\\(\\) got an unexpected keyword argument '{kw}'; did you "
                                               f"mean {hint}"):
            call()


def test_the_builder_names_the_package_spelling(monkeypatch):
    import cudnn_py.graph.ops.sdpa_builders as gsb
    monkeypatch.setattr(gsb, "_version", lambda: (9, 19, 0))
    g = Graph(io_dtype=BF16)
    q, k, v = _qkv(g)
    for kw, hint in (("dropout_p", "dropout="), ("use_causal_mask", "causal="), ("attn_mask", "bias=")):
        with pytest.raises(CudnnPyError, match=f"Graph.sdpa\\(\\) got an unexpected keyword argument '{kw}'; did "
                                               f"you mean {hint}"):
            g.sdpa(q, k, v, **{kw: 0.1})
    with pytest.raises(CudnnPyError, match="Graph.sdpa_backward\\(\\) .* 'is_causal'; did you mean causal="):
        g.sdpa_backward(q, k, v, q, q, q, is_causal=True)
