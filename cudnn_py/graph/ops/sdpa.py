"""Scaled dot-product attention forward and backward as graph operations, and their lowering.

:class:`SdpaForward` lowers to the "composite" form (the pattern of primitive operations cuDNN's fused engines
recognise) or the unified ``OPERATION_SDPA_FWD``, :class:`SdpaBackward` to the composite form only (docs/attention.md
says which form has engines for which option). :class:`SdpaFp8Forward` / :class:`SdpaFp8Backward` are the FP8 forms
with per-tensor descale/scale inputs and amax outputs (cudnn-frontend's pattern). Shapes are logical
``(B, H, S, D)`` with the head dim packed; packed ("THD") batches carry ragged offsets. :mod:`.sdpa_builders` holds
the ``Graph.sdpa*`` methods, :mod:`.sdpa_options` the options.
"""
from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np

from cudnn_py import capi

from ..descriptors import BackendDescriptor
from .base import LowerContext, Op
from .pointwise import Pointwise, pointwise_mode
from .reduction import Reduction
from .rng import Rng
from .sdpa_options import ALIGNMENTS, IMPLEMENTATIONS, SdpaOptions

__all__ = ["SdpaForward", "SdpaBackward", "SdpaFp8Forward", "SdpaFp8Backward", "SdpaOptions", "ALIGNMENTS",
           "IMPLEMENTATIONS", "FP8_FORWARD_SCALES", "FP8_BACKWARD_SCALES", "SdpaFp8OptionKeywords",
           "SdpaGraphOptionKeywords", "SdpaOptionKeywords"]

_DT = capi.cudnnDataType_t
_F, _I32, _BOOL = _DT.CUDNN_DATA_FLOAT, _DT.CUDNN_DATA_INT32, _DT.CUDNN_DATA_BOOLEAN

#: the (1, 1, 1, 1) float32 descale/scale inputs of the FP8 forward and backward, by keyword
FP8_FORWARD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
FP8_BACKWARD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
                       "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp")


# -- the options as keywords, for type checkers (``**kwargs: Unpack[...]``; tests/test_typing.py checks the fields)
class SdpaFp8OptionKeywords(TypedDict, total=False):
    """The options FP8 attention takes as keywords (see :class:`SdpaOptions`)."""
    scale: float | None
    causal: bool


class SdpaGraphOptionKeywords(SdpaFp8OptionKeywords, total=False):
    """The :class:`SdpaOptions` fields ``Graph.sdpa`` and ``Graph.sdpa_backward`` take as keywords: all but
    ``alibi`` (the graph takes the slopes as a tensor)."""
    diagonal_alignment: str
    left_bound: int | None
    right_bound: int | None
    dropout: float
    max_seq_len_q: int | None
    max_seq_len_kv: int | None
    implementation: str


class SdpaOptionKeywords(SdpaGraphOptionKeywords, total=False):
    """Every :class:`SdpaOptions` field as a keyword (what ``cudnn_py.sdpa`` and :class:`cudnn_py.Sdpa` take)."""
    alibi: bool | Sequence[float] | np.ndarray


def _swap_last(shape_or_strides) -> tuple:
    s = tuple(shape_or_strides)
    return (*s[:-2], s[-1], s[-2])


def _pw(ctx: LowerContext, mode, x, b=None, t=None, *, out=None, dtype=_F, compute=_F, **params):
    """One pointwise operation into ``out`` (default: a new virtual tensor of ``dtype``); returns the output."""
    if out is None:  # b broadcast against x
        out = ctx.virtual(x.shape if b is None else tuple(map(max, x.shape, b.shape)), dtype)
    ins = {r: v for r, v in (("x", x), ("b", b), ("t", t)) if v is not None}
    Pointwise(ins, {"y": out}, {"mode": pointwise_mode(mode), "compute_dtype": compute, **params}).lower(ctx)
    return out


def _gen_index(ctx, x, axis: int, compute=_F):
    return _pw(ctx, "gen_index", x, dtype=_I32, compute=compute, axis=axis)


def _reduce(ctx: LowerContext, x, mode: str, *, out=None, shape=None):
    """A reduction of ``x`` to ``out`` (or a new float virtual of ``shape``); returns the output."""
    out = ctx.virtual(shape, _F) if out is None else out
    Reduction({"x": x}, {"y": out}, {"mode": capi.cudnnReduceTensorOp_t[f"CUDNN_REDUCE_TENSOR_{mode.upper()}"],
                                     "compute_dtype": _F}).lower(ctx)
    return out


def _matmul(ctx: LowerContext, a, b, c, *, b_view=None, m=None, n=None, k=None) -> None:
    """c = a @ b (``b`` seen as ``b_view`` = (shape, strides) of its memory), with the GEMM M/N/K extents taken per
    batch from the sequence-length tensors ``m``/``n``/``k`` where given (padding masks)."""
    mm = BackendDescriptor("MATMUL", comp_type=_F).finalize()
    d = BackendDescriptor("OPERATION_MATMUL", adesc=ctx.tensor(a),
                          bdesc=ctx.view(b, *b_view) if b_view else ctx.tensor(b), cdesc=ctx.tensor(c), desc=mm)
    for attr, t in (("gemm_m_override_desc", m), ("gemm_n_override_desc", n), ("gemm_k_override_desc", k)):
        if t is not None:
            d.set(attr, ctx.tensor(t))
    ctx.add(d.finalize(), mm)


def _reshape(ctx: LowerContext, x, dtype, view=None):
    """A virtual copy of ``x`` through a reshape: of its memory seen as ``view`` (shape, strides) into x's layout,
    or of (B, H, S_q, S_kv) ``x`` as a (B, H, S_kv, S_q) one."""
    if view is None:
        b, h, sq, skv = x.shape
        y = ctx.virtual((b, h, skv, sq), dtype, strides=(h * sq * skv, sq * skv, 1, skv))
    else:
        y = ctx.virtual(x.shape, dtype, strides=x.strides)
    ctx.add(BackendDescriptor("OPERATION_RESHAPE", xdesc=ctx.view(x, *view) if view else ctx.tensor(x),
                              ydesc=ctx.tensor(y)).finalize())
    return y


def _rng(ctx: LowerContext, seed, offset, out, keep_probability: float) -> None:
    """Philox Bernoulli(``keep_probability``) mask into ``out`` from device ``seed``/``offset`` tensors."""
    Rng({"seed": seed, "offset": offset}, {"y": out}, {"distribution": "bernoulli", "probability": keep_probability,
                                                      "seed": None}).lower(ctx)


def _paged_load(ctx: LowerContext, ins, name: str, shape, strides=None):
    """Gather the paged K or V cache ``ins[name]`` into a new virtual tensor of ``shape``."""
    out = ctx.virtual(shape, ins[name].dtype, strides=strides)
    ctx.add(BackendDescriptor("OPERATION_PAGED_CACHE_LOAD", container_desc=ctx.tensor(ins[name]),
                              page_table_desc=ctx.tensor(ins[f"page_table_{name}"]),
                              sequence_desc=ctx.tensor(ins["seq_len_kv"]), ydesc=ctx.tensor(out)).finalize())
    return out


# -- the score modifiers shared by forward and backward ----------------------------------------------------------
def _band_masks(ctx, s, ins, p):
    """The causal / sliding-window bands: keep col <= row + shift + right_bound and col > row + shift - left_bound,
    where shift = s_kv - s_q (per batch under padding) for bottom-right alignment, else 0."""
    br = p["alignment"] == "bottom_right"
    sq = ins.get("seq_len_q", ins.get("s_q"))
    skv = ins.get("seq_len_kv", ins.get("s_kv"))
    if p["right_bound"] is not None:
        row, col = _gen_index(ctx, s, 2), _gen_index(ctx, s, 3)
        if br:
            row = _pw(ctx, "add", row, skv, dtype=_I32, compute=_I32, axis=3)
            row = _pw(ctx, "sub", row, sq, dtype=_I32, compute=_I32, axis=3)
        if p["right_bound"]:
            row = _pw(ctx, "add", row, ins["right_bound"], dtype=_I32, compute=_I32, axis=3)
        keep = _pw(ctx, "cmp_ge", row, col, dtype=_BOOL, compute=_BOOL)
        s = _pw(ctx, "binary_select", s, ins["neg_inf"], keep)
    if p["left_bound"] is not None:
        row, col = _gen_index(ctx, s, 2), _gen_index(ctx, s, 3)
        lb = ins["left_bound"]
        if lb.dtype == _I32:  # bottom-right with per-batch lengths
            col = _pw(ctx, "add", col, lb, dtype=_I32, compute=_I32, axis=3)
            col = _pw(ctx, "sub", col, skv, dtype=_I32, compute=_I32, axis=3)
            col = _pw(ctx, "add", col, sq, dtype=_I32, compute=_I32, axis=3)
        else:
            col = _pw(ctx, "add", col, lb, dtype=_F, compute=_F, axis=3)
        keep = _pw(ctx, "cmp_gt", col, row, dtype=_BOOL, compute=_BOOL)
        s = _pw(ctx, "binary_select", s, ins["neg_inf"], keep)
    return s


def _scores(ctx, ins, s_raw):
    """Scale (and FP8's descales), bias, ALiBi and the padding mask on the raw scores, in the engines' order."""
    s = _pw(ctx, "mul", s_raw, ins["scale"])
    if "descale_q" in ins:
        s = _pw(ctx, "mul", _pw(ctx, "mul", s, ins["descale_q"]), ins["descale_k"])
    if "bias" in ins:
        s = _pw(ctx, "add", s, ins["bias"])
    if "alibi_slopes" in ins:  # + slope * (col - row)
        row, col = _gen_index(ctx, s, 2, _I32), _gen_index(ctx, s, 3, _I32)
        dist = _pw(ctx, "sub", col, row, dtype=_I32, compute=_I32)
        s = _pw(ctx, "add", s, _pw(ctx, "mul", dist, ins["alibi_slopes"]))
    if "seq_len_q" in ins:  # the padding mask: -inf outside row < seq_len_q and col < seq_len_kv
        row, col = _gen_index(ctx, s, 2, _I32), _gen_index(ctx, s, 3, _I32)
        rm = _pw(ctx, "cmp_lt", row, ins["seq_len_q"], dtype=_BOOL, compute=_BOOL)
        cm = _pw(ctx, "cmp_lt", col, ins["seq_len_kv"], dtype=_BOOL, compute=_BOOL)
        s = _pw(ctx, "binary_select", s, ins["neg_inf"], _pw(ctx, "logical_and", rm, cm, dtype=_BOOL, compute=_BOOL))
    return s


class SdpaForward(Op):
    """O = softmax(mask(scale * Q K^T + bias + alibi)) (dropout) V, and the statistics (row log-sum-exp, float32;
    a sink is one more logit per row, in the statistics, with no value). ``inputs``: q, k, v, scale and the optional
    tensors and constants the builder made; ``outputs``: o, stats, rng_dump (optional). ``params``: implementation,
    alignment, left/right bound, dropout, s_kv, batch."""

    kind = "sdpa_fwd"

    def lower(self, ctx: LowerContext) -> None:
        (self._lower_unified if self.params["implementation"] == "unified" else self._lower_composite)(ctx)

    def _lower_unified(self, ctx: LowerContext) -> None:
        ins, outs = self.inputs, self.outputs
        d = BackendDescriptor("OPERATION_SDPA_FWD", qdesc=ctx.tensor(ins["q"]), kdesc=ctx.tensor(ins["k"]),
                              vdesc=ctx.tensor(ins["v"]), odesc=ctx.tensor(outs["o"]),
                              scaledesc=ctx.tensor(ins["scale"]))
        if "stats" in outs:
            d.set("statsdesc", ctx.tensor(outs["stats"]))
        ctx.add(d.finalize())

    def _lower_composite(self, ctx: LowerContext) -> None:
        ins, outs, p = self.inputs, self.outputs, self.params
        q, k, v, o = ins["q"], ins["k"], ins["v"], outs["o"]
        (b, hq, sq, _), skv = q.shape, p["s_kv"]
        kt_view: tuple | None = (_swap_last(k.shape), _swap_last(k.strides))  # K^T: a view of K's memory
        if "page_table_k" in ins:  # or K^T (B, Hk, D, S_kv) gathered from the paged cache
            hk, d = k.shape[1], k.shape[3]
            k, kt_view = _paged_load(ctx, ins, "k", (b, hk, d, skv), (d * skv * hk, d * skv, 1, d)), None
        s_raw = ctx.virtual((b, hq, sq, skv), _F)
        _matmul(ctx, q, k, s_raw, b_view=kt_view, m=ins.get("seq_len_q"), n=ins.get("seq_len_kv"))
        s = _band_masks(ctx, _scores(ctx, ins, s_raw), ins, p)
        # softmax with the statistics max + log(sum(exp(s - max))), a sink in the max and sum (cudnn-frontend's order)
        mx = _reduce(ctx, s, "max", shape=(b, hq, sq, 1))
        sink = ins.get("sink")
        if sink is not None:
            mx = _pw(ctx, "max", mx, sink)
        e = _pw(ctx, "exp", _pw(ctx, "sub", s, mx))
        e_sink = None if sink is None else _pw(ctx, "exp", _pw(ctx, "sub", sink, mx))
        z = _reduce(ctx, e, "add", shape=(b, hq, sq, 1))
        if e_sink is not None:
            z = _pw(ctx, "add", z, e_sink)
        # the engines recognise the softmax with its statistics only: a virtual tensor when nobody reads them
        _pw(ctx, "add", mx, _pw(ctx, "log", z), out=outs.get("stats") or ctx.virtual((b, hq, sq, 1), _F))
        dropout, fp8 = p["dropout"] > 0, "scale_s" in ins
        prob = _pw(ctx, "div", e, z, dtype=_F if dropout or fp8 else q.dtype)
        if fp8:  # amax of P, P scaled to q's FP8 type, and the descaled P V scaled into o
            _reduce(ctx, prob, "amax", out=outs["amax_s"])
            p8 = _pw(ctx, "mul", prob, ins["scale_s"], dtype=q.dtype)
            _fp8_matmul(ctx, ins, outs, "o", p8, v, ("descale_s", "descale_v"))
            return
        if dropout:
            mask = outs.get("rng_dump") or ctx.virtual((b, hq, sq, skv), _F)
            _rng(ctx, ins["seed"], ins["offset"], mask, 1.0 - p["dropout"])
            prob = _pw(ctx, "mul", _pw(ctx, "mul", prob, mask), ins["dropout_scale"], dtype=q.dtype)
        if "page_table_v" in ins:  # V gathered from the paged cache
            v = _paged_load(ctx, ins, "v", (b, v.shape[1], skv, v.shape[3]))
        _matmul(ctx, prob, v, o, m=ins.get("seq_len_q"), k=ins.get("seq_len_kv"))


class SdpaBackward(Op):
    """dQ, dK, dV (and dBias, dSink) of :class:`SdpaForward` from dO, O and the forward's statistics (the sink is an
    input only for its gradient). Its float32 scratch tensors ``softmax_sum`` (B, Hq, Sq, 1) and ``dq_accum``
    (B, Hq, Sq, D) (none with dBias) live in the plan's workspace (:meth:`scratch_tensors`)."""

    kind = "sdpa_bwd"

    def scratch_tensors(self) -> list:
        """The float32 accumulators cuDNN reads and writes (contents on entry do not matter, cuDNN >= 9.6)."""
        return [t for r, t in self.outputs.items() if r in ("softmax_sum", "dq_accum")]

    def lower(self, ctx: LowerContext) -> None:
        ins, outs, p = self.inputs, self.outputs, self.params
        q, k, v, o, do, stats = (ins[r] for r in ("q", "k", "v", "o", "do", "stats"))
        b, hq, sq, d = q.shape
        hk, skv, hv, dv = k.shape[1], k.shape[2], v.shape[1], v.shape[3]
        slq, slkv = ins.get("seq_len_q"), ins.get("seq_len_kv")
        io, dropout = q.dtype, p["dropout"] > 0
        # softmax_sum = rowsum(dO * O) (times the keep probability under dropout)
        t = _reduce(ctx, _pw(ctx, "mul", do, o, out=ctx.virtual((b, hq, sq, dv), _F)), "add", shape=(b, hq, sq, 1))
        if "dsink" in outs:  # cudnn-frontend's pattern: exp(sink - stats) * rowsum(dO * O) summed over batches and
            # queries; the engines write the gradient, -1 times that sum (GPU tests, cuDNN 9.14 and 9.19)
            e_sink = _pw(ctx, "exp", _pw(ctx, "sub", ins["sink"], stats))
            _reduce(ctx, _pw(ctx, "mul", e_sink, t), "add", out=outs["dsink"])
        _pw(ctx, "mul", t, ins["dropout_scale_inv"] if dropout else ins["one"], out=outs["softmax_sum"])
        # P = exp(mask(scores) - stats)
        s_raw = ctx.virtual((b, hq, sq, skv), _F)
        kt_view = (_swap_last(k.shape), _swap_last(k.strides))
        _matmul(ctx, q, k, s_raw, b_view=kt_view, m=slq, n=slkv)
        s = _pw(ctx, "sub", _scores(ctx, ins, s_raw), stats)
        e = _pw(ctx, "exp", _band_masks(ctx, s, ins, p))
        pd, mask = e, None
        if dropout:
            mask = ctx.virtual((b, hq, sq, skv), _F)
            _rng(ctx, ins["seed"], ins["offset"], mask, 1.0 - p["dropout"])
            pd = _pw(ctx, "mul", _pw(ctx, "mul", e, mask), ins["dropout_scale"])
        # dV = P^T dO (summed over the query heads of each K/V head)
        self._grad(ctx, _reshape(ctx, pd, io), do, outs["dv"], hq, hv, (b, hq, skv, dv), slkv, slq)
        # dS = P * (dP - softmax_sum) (dropout-masked), times the scale
        dp = ctx.virtual((b, hq, sq, skv), _F)
        _matmul(ctx, do, v, dp, b_view=(_swap_last(v.shape), _swap_last(v.strides)), m=slq, n=slkv)
        if dropout:
            dp = _pw(ctx, "mul", dp, mask)
        x = _pw(ctx, "mul", _pw(ctx, "sub", dp, outs["softmax_sum"]), e)
        if dropout:
            x = _pw(ctx, "mul", x, ins["dropout_scale"])
        if "dbias" in outs:
            _reduce(ctx, x, "add", out=outs["dbias"])
        ds = _pw(ctx, "mul", x, ins["scale"])
        # dK = dS^T Q
        self._grad(ctx, _reshape(ctx, ds, io), q, outs["dk"], hq, hk, (b, hq, skv, d), slkv, slq)
        # dQ = dS K (K read back through its transposed view), accumulated in float32 when dq_accum is given
        kk = _reshape(ctx, k, k.dtype, kt_view)
        if "dq_accum" in outs:
            _matmul(ctx, ds, kk, outs["dq_accum"], m=slq, k=slkv)
            _pw(ctx, "identity", outs["dq_accum"], out=outs["dq"])
        else:
            _matmul(ctx, ds, kk, outs["dq"], m=slq, k=slkv)

    @staticmethod
    def _grad(ctx, a, b, out, hq, h_out, full_shape, m, k) -> None:
        """out = a @ b, or for fewer heads than Q: a full-head product reduced over each head group."""
        full = out if hq == h_out else ctx.virtual(full_shape, out.dtype)
        _matmul(ctx, a, b, full, m=m, k=k)
        if full is not out:
            _reduce(ctx, full, "add", out=out)


# -- FP8 ----------------------------------------------------------------------------------------------------------
def _fp8_matmul(ctx, ins, outs, name: str, a, b, descales: tuple, heads_out=None) -> None:
    """cudnn-frontend's FP8 matmul: c = a @ b in float32 (summed per head group down to ``heads_out`` heads) times
    the ``descales``; output ``name`` = c times ``scale_<name>``, ``amax_<name>`` = max |c|."""
    full = (*a.shape[:3], b.shape[3])
    c = ctx.virtual(full, _F)
    _matmul(ctx, a, b, c)
    if heads_out is not None and heads_out != full[1]:
        c = _reduce(ctx, c, "add", shape=(full[0], heads_out, *full[2:]))
    c = _pw(ctx, "mul", _pw(ctx, "mul", c, ins[descales[0]]), ins[descales[1]])
    _pw(ctx, "mul", c, ins[f"scale_{name}"], out=outs[name])
    _reduce(ctx, c, "amax", out=outs[f"amax_{name}"])


class SdpaFp8Forward(SdpaForward):
    """FP8 attention forward: O (FP8), the statistics, amax_s (of the probabilities) and amax_o (of O before its
    scaling); lowered as :class:`SdpaForward`'s composite form, whose FP8 steps the scale inputs turn on."""

    kind = "sdpa_fp8_fwd"


class SdpaFp8Backward(Op):
    """FP8 attention backward: dQ, dK, dV (FP8), the amax of each before its scaling and amax_dp (of dS), with
    cudnn-frontend's descale/scale inputs. No scratch tensors."""

    kind = "sdpa_fp8_bwd"

    def lower(self, ctx: LowerContext) -> None:
        ins, outs, p = self.inputs, self.outputs, self.params
        q, k, v, o, do, stats = (ins[r] for r in ("q", "k", "v", "o", "do", "stats"))
        (b, hq, sq, _), (hk, skv, hv, dv) = q.shape, (k.shape[1], k.shape[2], v.shape[1], v.shape[3])
        # softmax_sum = rowsum(dO * O) descaled
        t = _reduce(ctx, _pw(ctx, "mul", do, o, out=ctx.virtual((b, hq, sq, dv), _F)), "add", shape=(b, hq, sq, 1))
        softmax_sum = _pw(ctx, "mul", _pw(ctx, "mul", t, ins["descale_do"]), ins["descale_o"])
        # P = exp(mask(scale * descaled Q K^T) - stats), scaled to FP8
        s = ctx.virtual((b, hq, sq, skv), _F)
        kt_view = (_swap_last(k.shape), _swap_last(k.strides))
        _matmul(ctx, q, k, s, b_view=kt_view)
        e = _pw(ctx, "exp", _pw(ctx, "sub", _band_masks(ctx, _scores(ctx, ins, s), ins, p), stats))
        p8 = _pw(ctx, "mul", e, ins["scale_s"], dtype=q.dtype)
        # dV = P^T dO
        _fp8_matmul(ctx, ins, outs, "dv", _reshape(ctx, p8, q.dtype), do, ("descale_s", "descale_do"), heads_out=hv)
        # dS = P * (descaled dO V^T - softmax_sum) * scale, scaled to FP8 (dO's type)
        dp = ctx.virtual((b, hq, sq, skv), _F)
        _matmul(ctx, do, v, dp, b_view=(_swap_last(v.shape), _swap_last(v.strides)))
        dp = _pw(ctx, "mul", _pw(ctx, "mul", dp, ins["descale_do"]), ins["descale_v"])
        dp = _pw(ctx, "mul", _pw(ctx, "sub", dp, softmax_sum), e)
        dp = _pw(ctx, "mul", dp, ins["scale"])
        _reduce(ctx, dp, "amax", out=outs["amax_dp"])
        ds8 = _pw(ctx, "mul", dp, ins["scale_dp"], dtype=do.dtype)
        # dQ = dS K
        _fp8_matmul(ctx, ins, outs, "dq", ds8, _reshape(ctx, k, k.dtype, kt_view), ("descale_dp", "descale_k"))
        # dK = dS^T Q
        _fp8_matmul(ctx, ins, outs, "dk", _reshape(ctx, ds8, do.dtype), q, ("descale_dp", "descale_q"), heads_out=hk)
