"""Scaled dot-product attention (flash attention) forward and backward as graph operations.

cuDNN runs attention as fused engines that recognise a pattern of backend operations (the "composite" form:
``Q @ K^T``, scale, bias/ALiBi, masks built from ``gen_index``/compare/``binary_select``, a softmax spelled as
max/sub/exp/sum/div with the log-sum-exp statistics, Philox dropout through an RNG operation, ``P @ V``; the
backward likewise). cuDNN 9.13+ also has one unified ``OPERATION_SDPA_FWD`` descriptor that takes fewer options.
:class:`SdpaForward` lowers to either form, :class:`SdpaBackward` to the composite one (measured on cuDNN 9.19:
the unified ``OPERATION_SDPA_BWD`` has no engines, its operation graph fails to finalize); docs/attention.md
records which form has engines for which option.

Shapes are logical ``(B, H, S, D)`` with any strides whose head dim is packed (stride 1): BHSD, BSHD and
interleaved QKV are strides of the same logical tensors. K and V may have fewer heads than Q (grouped-query and
multi-query attention: ``Hq % Hk == 0``). Packed ("THD") batches are the same logical tensors with ragged offsets:
(B + 1, 1, 1, 1) int32/int64 tensors of each batch's first element (:meth:`Tensor.set_ragged_offset`), which
replace the batch stride, so sequences of different lengths lie back to back with no padding in memory.

:class:`SdpaFp8Forward` / :class:`SdpaFp8Backward` are the FP8 (e4m3/e5m2) forms with per-tensor descale/scale
inputs and amax outputs (cudnn-frontend's pattern: the float32 scores and gradients are descaled after each
matmul, and the probabilities and dS are scaled back to FP8 before the next).
"""
from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING

from cudnn_py import _loader, capi
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from ..errors import GraphNotSupportedError
from .base import Builder, LowerContext, Op
from .pointwise import Pointwise, pointwise_mode
from .reduction import Reduction

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import Tensor

__all__ = ["SdpaForward", "SdpaBackward", "SdpaFp8Forward", "SdpaFp8Backward", "SdpaBuilders", "ALIGNMENTS",
           "IMPLEMENTATIONS", "FP8_FORWARD_SCALES", "FP8_BACKWARD_SCALES"]

_DT = capi.cudnnDataType_t
_F, _I32, _I64, _BOOL = _DT.CUDNN_DATA_FLOAT, _DT.CUDNN_DATA_INT32, _DT.CUDNN_DATA_INT64, _DT.CUDNN_DATA_BOOLEAN
_IO_DTYPES = (_DT.CUDNN_DATA_HALF, _DT.CUDNN_DATA_BFLOAT16)
_FP8 = tuple(getattr(_DT, n) for n in ("CUDNN_DATA_FP8_E4M3", "CUDNN_DATA_FP8_E5M2") if hasattr(_DT, n))

#: diagonal alignments of the causal / sliding-window bands
ALIGNMENTS = ("top_left", "bottom_right")
#: ``implementation=`` values: 'composite' (the pattern of primitive operations), 'unified' (the one
#: ``OPERATION_SDPA_FWD`` descriptor: scale, grouped-query heads and the statistics only), 'auto' (unified where
#: it can, as cudnn-frontend does: the same speed, and its plan builds without runtime compilation)
IMPLEMENTATIONS = ("auto", "composite", "unified")
#: the (1, 1, 1, 1) float32 descale/scale inputs of the FP8 forward and backward, by keyword
FP8_FORWARD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
FP8_BACKWARD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
                       "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp")
#: the first cuDNN whose unified forward cudnn-frontend uses
_UNIFIED_SINCE = (9, 13, 1)
#: from this cuDNN on, the backward's dQ accumulator needs no zeroing (cudnn-frontend memsets it before)
_DQ_ACCUM_ANY_CONTENTS = (9, 6, 0)


def _version() -> tuple[int, int, int]:
    return _loader.library().version


def _vstr(v) -> str:
    return ".".join(str(x) for x in v)


def _strides_like(shape, ref_strides) -> tuple[int, ...]:
    """Packed strides for ``shape`` with the dimension order of ``ref_strides`` (largest stride outermost)."""
    order = sorted(range(len(shape)), key=lambda i: (-ref_strides[i], i))
    strides = [0] * len(shape)
    acc = 1
    for i in reversed(order):
        strides[i] = acc
        acc *= shape[i]
    return tuple(strides)


def _swap_last(shape_or_strides) -> tuple:
    s = tuple(shape_or_strides)
    return (*s[:-2], s[-1], s[-2])


# -- lowering helpers: one backend operation each ------------------------------------------------------------------
def _pw(ctx: LowerContext, mode, x, b=None, t=None, *, out=None, dtype=_F, compute=_F, **params):
    """One pointwise operation into ``out`` (default: a new virtual tensor of ``dtype``); returns the output."""
    mode = pointwise_mode(mode)
    if out is None:
        shape = x.shape
        if b is not None:
            shape = tuple(max(m, n) for m, n in zip(shape, b.shape))
        out = ctx.virtual(shape, dtype)
    ins = {"x": x}
    if b is not None:
        ins["b"] = b
    if t is not None:
        ins["t"] = t
    Pointwise(ins, {"y": out}, {"mode": mode, "compute_dtype": compute, **params}).lower(ctx)
    return out


def _gen_index(ctx, x, axis: int, compute=_F):
    return _pw(ctx, "gen_index", x, dtype=_I32, compute=compute, axis=axis)


def _reduce(ctx: LowerContext, x, mode: str, *, out=None, shape=None):
    """A reduction of ``x`` to ``out`` (or a new float virtual of ``shape``); returns the output."""
    if out is None:
        out = ctx.virtual(shape, _F)
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


def _reshape(ctx: LowerContext, x_desc: BackendDescriptor, y) -> None:
    """Reshape (here: a transposed view) of the tensor ``x_desc`` describes into virtual ``y``."""
    ctx.add(BackendDescriptor("OPERATION_RESHAPE", xdesc=x_desc, ydesc=ctx.tensor(y)).finalize())


def _rng(ctx: LowerContext, seed, offset, out, keep_probability: float) -> None:
    """Philox Bernoulli(``keep_probability``) mask into ``out`` from device ``seed``/``offset`` tensors."""
    rng = BackendDescriptor("RNG", distribution=capi.CUDNN_RNG_DISTRIBUTION_BERNOULLI,
                            bernoulli_dist_probability=float(keep_probability)).finalize()
    d = BackendDescriptor("OPERATION_RNG", ydesc=ctx.tensor(out), desc=rng, offset_desc=ctx.tensor(offset))
    # CUDNN_ATTR_OPERATION_RNG_SEED takes an INT64 constant or a tensor descriptor; the attribute table knows the
    # former only, so the descriptor form is set directly
    sd = ctx.tensor(seed)
    arr = (ctypes.c_void_p * 1)(sd.ptr.value)
    capi.cudnnBackendSetAttribute(d.ptr, capi.CUDNN_ATTR_OPERATION_RNG_SEED, capi.CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                  arr)
    ctx.add(d.finalize(), rng, sd)


def _paged_load(ctx: LowerContext, container, page_table, seq_len_kv, out) -> None:
    """Gather a paged K or V cache (``container`` (blocks, H, block, D)) into the virtual ``out``."""
    ctx.add(BackendDescriptor("OPERATION_PAGED_CACHE_LOAD", container_desc=ctx.tensor(container),
                              page_table_desc=ctx.tensor(page_table), sequence_desc=ctx.tensor(seq_len_kv),
                              ydesc=ctx.tensor(out)).finalize())


# -- the score modifiers shared by forward and backward ----------------------------------------------------------
def _padding_mask(ctx, s, ins):
    row, col = _gen_index(ctx, s, 2, _I32), _gen_index(ctx, s, 3, _I32)
    rm = _pw(ctx, "cmp_lt", row, ins["seq_len_q"], dtype=_BOOL, compute=_BOOL)
    cm = _pw(ctx, "cmp_lt", col, ins["seq_len_kv"], dtype=_BOOL, compute=_BOOL)
    keep = _pw(ctx, "logical_and", rm, cm, dtype=_BOOL, compute=_BOOL)
    return _pw(ctx, "binary_select", s, ins["neg_inf"], keep)


def _alibi(ctx, s, ins):
    row, col = _gen_index(ctx, s, 2, _I32), _gen_index(ctx, s, 3, _I32)
    dist = _pw(ctx, "sub", col, row, dtype=_I32, compute=_I32)
    return _pw(ctx, "add", s, _pw(ctx, "mul", dist, ins["alibi_slopes"]))


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
    """scale, bias, ALiBi and the padding mask applied to the raw scores (the order the engines recognise)."""
    s = _pw(ctx, "mul", s_raw, ins["scale"])
    if "bias" in ins:
        s = _pw(ctx, "add", s, ins["bias"])
    if "alibi_slopes" in ins:
        s = _alibi(ctx, s, ins)
    if "seq_len_q" in ins:
        s = _padding_mask(ctx, s, ins)
    return s


def _k_transposed(ctx, ins, p):
    """(tensor, view) of K seen as K^T (B, Hk, D, S_kv): a view of K's memory, or a paged-cache gather."""
    k = ins["k"]
    if "page_table_k" not in ins:
        return k, (_swap_last(k.shape), _swap_last(k.strides))
    b, hk, d, skv = p["batch"], k.shape[1], k.shape[3], p["s_kv"]
    kt = ctx.virtual((b, hk, d, skv), k.dtype, strides=(d * skv * hk, d * skv, 1, d))
    _paged_load(ctx, k, ins["page_table_k"], ins["seq_len_kv"], kt)
    return kt, None


def _v_loaded(ctx, ins, p):
    v = ins["v"]
    if "page_table_v" not in ins:
        return v
    b, hv, dv, skv = p["batch"], v.shape[1], v.shape[3], p["s_kv"]
    vc = ctx.virtual((b, hv, skv, dv), v.dtype)
    _paged_load(ctx, v, ins["page_table_v"], ins["seq_len_kv"], vc)
    return vc


class SdpaForward(Op):
    """O = softmax(mask(scale * Q K^T + bias + alibi)) (dropout) V, and the statistics (row log-sum-exp, float32).

    ``inputs``: q, k, v, scale (by-value) and the optional tensors of the options (bias, seq_len_q/seq_len_kv,
    alibi_slopes, seed/offset, page tables) plus the by-value constants the builder made; ``outputs``: o,
    stats, rng_dump (optional). ``params``: implementation, alignment, left/right bound, dropout, s_kv, batch."""

    kind = "sdpa_fwd"

    def lower(self, ctx: LowerContext) -> None:
        if self.params["implementation"] == "unified":
            self._lower_unified(ctx)
        else:
            self._lower_composite(ctx)

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
        q, o = ins["q"], outs["o"]
        b, hq, sq, _ = q.shape
        skv = p["s_kv"]
        kt, kt_view = _k_transposed(ctx, ins, p)
        s_raw = ctx.virtual((b, hq, sq, skv), _F)
        _matmul(ctx, q, kt, s_raw, b_view=kt_view, m=ins.get("seq_len_q"), n=ins.get("seq_len_kv"))
        s = _band_masks(ctx, _scores(ctx, ins, s_raw), ins, p)
        # softmax, with the statistics max + log(sum(exp(s - max)))
        mx = _reduce(ctx, s, "max", shape=(b, hq, sq, 1))
        e = _pw(ctx, "exp", _pw(ctx, "sub", s, mx))
        z = _reduce(ctx, e, "add", shape=(b, hq, sq, 1))
        # the engines recognise the softmax with its statistics only: a virtual tensor when nobody reads them
        _pw(ctx, "add", mx, _pw(ctx, "log", z), out=outs.get("stats") or ctx.virtual((b, hq, sq, 1), _F))
        dropout = p["dropout"] > 0
        prob = _pw(ctx, "div", e, z, dtype=_F if dropout else q.dtype)
        if dropout:
            mask = outs.get("rng_dump") or ctx.virtual((b, hq, sq, skv), _F)
            _rng(ctx, ins["seed"], ins["offset"], mask, 1.0 - p["dropout"])
            prob = _pw(ctx, "mul", _pw(ctx, "mul", prob, mask), ins["dropout_scale"], dtype=q.dtype)
        _matmul(ctx, prob, _v_loaded(ctx, ins, p), o, m=ins.get("seq_len_q"), k=ins.get("seq_len_kv"))


class SdpaBackward(Op):
    """dQ, dK, dV (and dBias) of :class:`SdpaForward` from dO, O and the forward's statistics.

    The composite form needs two float32 scratch tensors, ``softmax_sum`` (B, Hq, Sq, 1) and ``dq_accum``
    (B, Hq, Sq, D) (no dq_accum with dBias): real tensors whose contents on entry do not matter (cuDNN >= 9.6), which
    the plan carves from its workspace (:meth:`scratch_tensors`), so nobody binds them."""

    kind = "sdpa_bwd"

    def scratch_tensors(self) -> list:
        """The float32 accumulators cuDNN reads and writes (their contents on entry do not matter)."""
        return [t for r, t in self.outputs.items() if r in ("softmax_sum", "dq_accum")]

    def lower(self, ctx: LowerContext) -> None:
        ins, outs, p = self.inputs, self.outputs, self.params
        q, k, v, o, do, stats = (ins[r] for r in ("q", "k", "v", "o", "do", "stats"))
        b, hq, sq, d = q.shape
        hk, skv, hv, dv = k.shape[1], k.shape[2], v.shape[1], v.shape[3]
        slq, slkv = ins.get("seq_len_q"), ins.get("seq_len_kv")
        io = q.dtype
        dropout = p["dropout"] > 0
        # softmax_sum = rowsum(dO * O) (times the keep probability under dropout)
        t = _reduce(ctx, _pw(ctx, "mul", do, o, out=ctx.virtual((b, hq, sq, dv), _F)), "add", shape=(b, hq, sq, 1))
        _pw(ctx, "mul", t, ins["dropout_scale_inv"] if dropout else ins["one"], out=outs["softmax_sum"])
        # P = exp(mask(scores) - stats)
        s_raw = ctx.virtual((b, hq, sq, skv), _F)
        kt_view = (_swap_last(k.shape), _swap_last(k.strides))
        _matmul(ctx, q, k, s_raw, b_view=kt_view, m=slq, n=slkv)
        s = _pw(ctx, "sub", _scores(ctx, ins, s_raw), stats)
        e = _pw(ctx, "exp", _band_masks(ctx, s, ins, p))
        pd = e
        mask = None
        if dropout:
            mask = ctx.virtual((b, hq, sq, skv), _F)
            _rng(ctx, ins["seed"], ins["offset"], mask, 1.0 - p["dropout"])
            pd = _pw(ctx, "mul", _pw(ctx, "mul", e, mask), ins["dropout_scale"])
        # dV = P^T dO (summed over the query heads of each K/V head)
        pt = ctx.virtual((b, hq, skv, sq), io, strides=(hq * sq * skv, sq * skv, 1, skv))
        _reshape(ctx, ctx.tensor(pd), pt)
        self._grad(ctx, pt, do, outs["dv"], hq, hv, (b, hq, skv, dv), slkv, slq)
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
        dst = ctx.virtual((b, hq, skv, sq), io, strides=(hq * sq * skv, sq * skv, 1, skv))
        _reshape(ctx, ctx.tensor(ds), dst)
        self._grad(ctx, dst, q, outs["dk"], hq, hk, (b, hq, skv, d), slkv, slq)
        # dQ = dS K (K read back through its transposed view), accumulated in float32 when dq_accum is given
        kk = ctx.virtual(k.shape, k.dtype, strides=k.strides)
        _reshape(ctx, ctx.view(k, *kt_view), kk)
        if "dq_accum" in outs:
            _matmul(ctx, ds, kk, outs["dq_accum"], m=slq, k=slkv)
            _pw(ctx, "identity", outs["dq_accum"], out=outs["dq"])
        else:
            _matmul(ctx, ds, kk, outs["dq"], m=slq, k=slkv)

    @staticmethod
    def _grad(ctx, a, b, out, hq, h_out, full_shape, m, k) -> None:
        """out = a @ b, or for fewer heads than Q: a full-head product reduced over each head group."""
        if hq == h_out:
            _matmul(ctx, a, b, out, m=m, k=k)
            return
        full = ctx.virtual(full_shape, out.dtype)
        _matmul(ctx, a, b, full, m=m, k=k)
        _reduce(ctx, full, "add", out=out)



# -- FP8 ----------------------------------------------------------------------------------------------------------
def _fp8_matmul(ctx, a, b, full_shape, out, amax, descale_a, descale_b, scale_c, *, b_view=None, m=None, n=None,
                k=None, heads_out=None) -> None:
    """cudnn-frontend's FP8 matmul: c = a @ b in float32 (summed over each head group when ``heads_out`` is fewer
    heads), times ``descale_a * descale_b``; ``out`` = that times ``scale_c`` (FP8), ``amax`` = its max |.|."""
    c = ctx.virtual(full_shape, _F)
    _matmul(ctx, a, b, c, b_view=b_view, m=m, n=n, k=k)
    if heads_out is not None and heads_out != full_shape[1]:
        c = _reduce(ctx, c, "add", shape=(full_shape[0], heads_out, *full_shape[2:]))
    c = _pw(ctx, "mul", _pw(ctx, "mul", c, descale_a), descale_b)
    _pw(ctx, "mul", c, scale_c, out=out)
    _reduce(ctx, c, "amax", out=amax)


class SdpaFp8Forward(Op):
    """FP8 attention forward: O (FP8) and the float32 statistics, with amax of the probabilities (amax_s) and of O
    before its scaling (amax_o). ``inputs``: q, k, v (FP8), scale (by value), descale_q/k/v/s, scale_s, scale_o
    ((1, 1, 1, 1) float32 device tensors) and the mask constants; ``params`` as :class:`SdpaForward`'s."""

    kind = "sdpa_fp8_fwd"

    def lower(self, ctx: LowerContext) -> None:
        ins, outs, p = self.inputs, self.outputs, self.params
        q, k, v, o = ins["q"], ins["k"], ins["v"], outs["o"]
        b, hq, sq, _ = q.shape
        skv = p["s_kv"]
        s_raw = ctx.virtual((b, hq, sq, skv), _F)
        _matmul(ctx, q, k, s_raw, b_view=(_swap_last(k.shape), _swap_last(k.strides)))
        s = _pw(ctx, "mul", s_raw, ins["scale"])
        s = _pw(ctx, "mul", _pw(ctx, "mul", s, ins["descale_q"]), ins["descale_k"])
        s = _band_masks(ctx, s, ins, p)
        mx = _reduce(ctx, s, "max", shape=(b, hq, sq, 1))
        e = _pw(ctx, "exp", _pw(ctx, "sub", s, mx))
        z = _reduce(ctx, e, "add", shape=(b, hq, sq, 1))
        _pw(ctx, "add", mx, _pw(ctx, "log", z), out=outs.get("stats") or ctx.virtual((b, hq, sq, 1), _F))
        prob = _pw(ctx, "div", e, z)
        _reduce(ctx, prob, "amax", out=outs["amax_s"])
        p8 = _pw(ctx, "mul", prob, ins["scale_s"], dtype=q.dtype)
        _fp8_matmul(ctx, p8, v, (b, hq, sq, v.shape[3]), o, outs["amax_o"], ins["descale_s"], ins["descale_v"],
                    ins["scale_o"])


class SdpaFp8Backward(Op):
    """FP8 attention backward: dQ, dK, dV (FP8) and the amax of each before its scaling, plus amax of dS (amax_dp),
    from the forward's q, k, v, o, its statistics and dO (FP8). Inputs as cudnn-frontend's ``sdpa_fp8_backward``:
    descale_q/k/v/o/do/s/dp and scale_s/dq/dk/dv/dp ((1, 1, 1, 1) float32 device tensors). No scratch tensors."""

    kind = "sdpa_fp8_bwd"

    def lower(self, ctx: LowerContext) -> None:
        ins, outs, p = self.inputs, self.outputs, self.params
        q, k, v, o, do, stats = (ins[r] for r in ("q", "k", "v", "o", "do", "stats"))
        b, hq, sq, d = q.shape
        hk, skv, hv, dv = k.shape[1], k.shape[2], v.shape[1], v.shape[3]
        # softmax_sum = rowsum(dO * O) descaled
        t = _reduce(ctx, _pw(ctx, "mul", do, o, out=ctx.virtual((b, hq, sq, dv), _F)), "add", shape=(b, hq, sq, 1))
        softmax_sum = _pw(ctx, "mul", _pw(ctx, "mul", t, ins["descale_do"]), ins["descale_o"])
        # P = exp(mask(scale * descaled Q K^T) - stats), scaled to FP8
        s = ctx.virtual((b, hq, sq, skv), _F)
        kt_view = (_swap_last(k.shape), _swap_last(k.strides))
        _matmul(ctx, q, k, s, b_view=kt_view)
        s = _pw(ctx, "mul", s, ins["scale"])
        s = _pw(ctx, "mul", _pw(ctx, "mul", s, ins["descale_q"]), ins["descale_k"])
        s = _band_masks(ctx, s, ins, p)
        e = _pw(ctx, "exp", _pw(ctx, "sub", s, stats))
        p8 = _pw(ctx, "mul", e, ins["scale_s"], dtype=q.dtype)
        pt = ctx.virtual((b, hq, skv, sq), q.dtype, strides=(hq * sq * skv, sq * skv, 1, skv))
        _reshape(ctx, ctx.tensor(p8), pt)
        # dV = P^T dO
        _fp8_matmul(ctx, pt, do, (b, hq, skv, dv), outs["dv"], outs["amax_dv"], ins["descale_s"], ins["descale_do"],
                    ins["scale_dv"], heads_out=hv)
        # dS = P * (descaled dO V^T - softmax_sum) * scale, scaled to FP8 (dO's type)
        dp = ctx.virtual((b, hq, sq, skv), _F)
        _matmul(ctx, do, v, dp, b_view=(_swap_last(v.shape), _swap_last(v.strides)))
        dp = _pw(ctx, "mul", _pw(ctx, "mul", dp, ins["descale_do"]), ins["descale_v"])
        dp = _pw(ctx, "mul", _pw(ctx, "sub", dp, softmax_sum), e)
        dp = _pw(ctx, "mul", dp, ins["scale"])
        _reduce(ctx, dp, "amax", out=outs["amax_dp"])
        ds8 = _pw(ctx, "mul", dp, ins["scale_dp"], dtype=do.dtype)
        # dQ = dS K
        kk = ctx.virtual(k.shape, k.dtype, strides=k.strides)
        _reshape(ctx, ctx.view(k, *kt_view), kk)
        _fp8_matmul(ctx, ds8, kk, (b, hq, sq, d), outs["dq"], outs["amax_dq"], ins["descale_dp"], ins["descale_k"],
                    ins["scale_dq"])
        # dK = dS^T Q
        dst = ctx.virtual((b, hq, skv, sq), do.dtype, strides=(hq * sq * skv, sq * skv, 1, skv))
        _reshape(ctx, ctx.tensor(ds8), dst)
        _fp8_matmul(ctx, dst, q, (b, hq, skv, d), outs["dk"], outs["amax_dk"], ins["descale_dp"], ins["descale_q"],
                    ins["scale_dk"], heads_out=hk)


# -- the builder methods -------------------------------------------------------------------------------------------
class SdpaBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add attention."""

    def _sdpa_common(self, what, q, k, v, *, scale, causal, diagonal_alignment, left_bound, right_bound, bias,
                     seq_len_q, seq_len_kv, alibi_slopes, dropout, seed, offset, implementation, paged=None,
                     backward=False, ragged=None, fp8=False):
        """Check the tensors and options shared by forward and backward; returns (inputs, params).
        ``ragged``: {'q', 'k', 'v', 'o', 'stats'} -> offset tensor or None (see :meth:`_sdpa_ragged`)."""
        q, k, v = self._own(q, "q"), self._own(k, "k"), self._own(v, "v")
        for t, n in ((q, "q"), (k, "k"), (v, "v")):
            if t.ndim != 4:
                raise InvalidValueError(f"{what}: {n} must be 4-D (B, H, S, D) in logical order (strides give the "
                                        f"layout), "
                                 f"got shape {t.shape}")
            if fp8 and t.dtype not in _FP8:
                raise InvalidTypeError(f"{what}: {n} has dtype {t.dtype.name}; FP8 attention takes float8_e4m3fn or "
                                f"float8_e5m2 tensors")
            if not fp8 and t.dtype in _FP8:
                raise InvalidTypeError(f"{what}: {n} is FP8 ({t.dtype.name}): use sdpa_fp8 / sdpa_fp8_backward, which "
                                       f"take "
                                f"the descale and scale tensors FP8 attention needs")
            if not fp8 and t.dtype not in _IO_DTYPES:
                raise InvalidTypeError(f"{what}: {n} has dtype {t.dtype.name}; attention takes float16 or bfloat16")
            if t.strides[3] != 1:
                raise InvalidValueError(f"{what}: {n}'s head dim must be packed (stride 1), got strides {t.strides}")
        self._same_dtype(what, q, k, v)
        bq, hq, sq, d = q.shape
        if paged is None:
            bk, hk, skv, dk = k.shape
            bv, hv, skv_v, dv = v.shape
            if bk != bq or bv != bq:
                raise InvalidValueError(f"{what}: batch sizes differ: q {bq}, k {bk}, v {bv}")
            if skv != skv_v:
                raise InvalidValueError(f"{what}: k has {skv} keys and v {skv_v} values; they must match")
        else:
            hk, dk, hv, dv = k.shape[1], k.shape[3], v.shape[1], v.shape[3]
            skv = paged
        if dk != d:
            raise InvalidValueError(f"{what}: q's head dim is {d} and k's {dk}; they must match")
        for h, n in ((hk, "k"), (hv, "v")):
            if hq % h:
                raise InvalidValueError(f"{what}: {n} has {h} heads, which does not divide q's {hq} (grouped-query "
                                 f"attention needs Hq % Hk == 0)")
        mult = 16 if fp8 else 8
        for dim, n in ((d, "q/k"), (dv, "v")):
            if dim % mult or dim > 256:
                raise InvalidValueError(f"{what}: the {n} head dim must be a multiple of {mult} and at most 256, got "
                                        f"{dim}")

        ins = {"q": q, "k": k, "v": v}
        scale = 1.0 / math.sqrt(d) if scale is None else self._float(scale, "scale")
        ins["scale"] = self.scalar(scale, "float32")
        if implementation not in IMPLEMENTATIONS:
            raise InvalidValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
        if diagonal_alignment not in ALIGNMENTS:
            raise InvalidValueError(f"diagonal_alignment must be one of {ALIGNMENTS}, got {diagonal_alignment!r}")
        if causal:
            if right_bound not in (None, 0):
                raise InvalidValueError(f"causal=True means right_bound=0; got right_bound={right_bound}")
            right_bound = 0
        for val, n, lo in ((left_bound, "left_bound", 1), (right_bound, "right_bound", 0)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < lo):
                raise InvalidValueError(f"{what}: {n} must be an int >= {lo} (or None), got {val!r}")
        br = diagonal_alignment == "bottom_right"
        if br and left_bound is None and right_bound is None:
            raise InvalidValueError("diagonal_alignment='bottom_right' needs causal=True, right_bound or left_bound")
        if (seq_len_q is None) != (seq_len_kv is None):
            raise InvalidValueError(f"{what}: a padding mask needs both seq_len_q and seq_len_kv")
        padded = seq_len_q is not None
        if padded:
            for t, n in ((seq_len_q, "seq_len_q"), (seq_len_kv, "seq_len_kv")):
                t = self._own(t, n)
                if t.is_virtual or t.is_by_value:
                    raise InvalidValueError(f"{what}: {n} must be a device tensor (B, 1, 1, 1) of int32")
                if t.shape != (bq, 1, 1, 1) or t.dtype != _I32:
                    raise InvalidValueError(f"{what}: {n} must be (B, 1, 1, 1) = {(bq, 1, 1, 1)} int32, got {t.shape} "
                                     f"{t.dtype.name}")
                ins[n] = t
        elif br and sq > skv:
            raise InvalidValueError(f"{what}: bottom-right alignment needs S_q <= S_kv without a padding mask "
                             f"(got {sq} > {skv})")
        if bias is not None:
            bias = self._own(bias, "bias")
            full = (bq, hq, sq, skv)
            if bias.ndim != 4 or any(x not in (1, f) for x, f in zip(bias.shape, full)) or bias.shape[2:] != full[2:]:
                raise InvalidValueError(f"{what}: bias must be (B or 1, Hq or 1, S_q, S_kv) = {full}, got {bias.shape}")
            if bias.dtype == _BOOL:
                raise InvalidTypeError(f"{what}: bias must be a float tensor (a boolean mask is not a bias)")
            ins["bias"] = bias
        if alibi_slopes is not None:
            a = self._own(alibi_slopes, "alibi_slopes")
            if a.shape != (1, hq, 1, 1) or a.dtype != _F:
                raise InvalidValueError(f"{what}: alibi_slopes must be (1, Hq, 1, 1) float32, got {a.shape} "
                                        f"{a.dtype.name}")
            if right_bound != 0:
                raise InvalidValueError(f"{what}: ALiBi needs causal=True (right_bound=0), as in cuDNN")
            ins["alibi_slopes"] = a
        dropout = self._float(dropout, "dropout")
        if not 0.0 <= dropout < 1.0:
            raise InvalidValueError(f"{what}: dropout must be in [0, 1), got {dropout}")
        if dropout > 0:
            if seed is None or offset is None:
                raise InvalidValueError(f"{what}: dropout needs seed= and offset= (int64 device tensors of shape "
                                 f"(1, 1, 1, 1); the Philox seed and offset)")
            for t, n in ((seed, "seed"), (offset, "offset")):
                t = self._own(t, n)
                if t.shape != (1, 1, 1, 1) or t.dtype != _I64 or t.is_virtual or t.is_by_value:
                    raise InvalidValueError(f"{what}: {n} must be a (1, 1, 1, 1) int64 device tensor, got {t.shape} "
                                     f"{t.dtype.name}")
                ins[n] = t
            ins["dropout_scale"] = self.scalar(1.0 / (1.0 - dropout), "float32")
        elif seed is not None or offset is not None:
            raise InvalidValueError(f"{what}: seed/offset given but dropout is 0")
        if br and (bias is not None or alibi_slopes is not None or dropout > 0):
            raise InvalidValueError(f"{what}: bottom-right alignment does not combine with bias, ALiBi or dropout in "
                             f"cuDNN's attention engines")
        rag = self._sdpa_ragged(what, ragged or {}, q, k, v, padded)
        if rag:
            extra = [n for n, on in (("bias", bias is not None), ("ALiBi", alibi_slopes is not None),
                                     ("dropout", dropout > 0), ("a paged KV cache", paged is not None)) if on]
            if extra:
                raise InvalidValueError(f"{what}: ragged (packed) attention with {extra[0]} is not verified in "
                                        f"cudnn-py; "
                                 f"pad the batch instead (seq_len_q/seq_len_kv without ragged offsets)")
        if fp8 and rag:
            raise GraphNotSupportedError(self.name, [what], [], [("FP8 attention with ragged offsets", (
                "not verified in cudnn-py (cuDNN's FP8 backward has no ragged form on Hopper)"))])
        if padded or left_bound is not None or right_bound is not None:
            ins["neg_inf"] = self.scalar(-math.inf, "float32")
        if br and not padded:
            ins["s_q"] = self.scalar(sq, "int32")
            ins["s_kv"] = self.scalar(skv, "int32")
        if right_bound:
            ins["right_bound"] = self.scalar(right_bound, "int32")
        if left_bound is not None:
            if not br:
                ins["left_bound"] = self.scalar(float(left_bound), "float32")
            elif not padded:
                ins["left_bound"] = self.scalar(float(left_bound - skv + sq), "float32")
            else:
                ins["left_bound"] = self.scalar(left_bound, "int32")
        params = {"alignment": diagonal_alignment, "left_bound": left_bound, "right_bound": right_bound,
                  "dropout": dropout, "s_kv": skv, "batch": bq}
        features = {"padding mask (seq_len_q/seq_len_kv)": padded, "paged KV cache": paged is not None,
                    "bias": bias is not None,
                    "alibi": alibi_slopes is not None, "dropout": dropout > 0,
                    "causal/sliding window": left_bound is not None or right_bound is not None,
                    "ragged offsets": bool(rag)}
        params["implementation"] = "composite" if fp8 else self._sdpa_implementation(what, implementation, features,
                                                                                     backward)
        return ins, params, rag

    def _sdpa_stats(self, what, stats, shape):
        """The backward's ``stats`` input: the forward's float32 softmax statistics of ``shape`` (B, Hq, Sq, 1)."""
        stats = self._own(stats, "stats")
        if stats.shape != shape or stats.dtype != _F:
            raise InvalidValueError(f"{what}: stats must be (B, Hq, Sq, 1) = {shape} float32 (the forward's), got "
                                    f"{stats.describe()}")
        return stats

    @staticmethod
    def _sdpa_set_offset(what, t, off, n) -> None:
        """Give input ``t`` the ragged offset ``off`` (refusing another one already set)."""
        if t.ragged_offset is not None and t.ragged_offset is not off:
            raise InvalidValueError(f"{what}: {n} already has the ragged offset {t.ragged_offset.name}, not {off.name}")
        t.set_ragged_offset(off)

    def _sdpa_ragged(self, what, ragged: dict, q, k, v, padded: bool) -> dict:
        """The ragged offsets of a packed ("THD") attention: ``ragged`` maps 'q', 'k', 'v', 'o', 'stats' to offset
        tensors (or None); offsets already set on q/k/v with :meth:`Tensor.set_ragged_offset` count too. Sets them on
        q, k and v (which checks each: an int32/int64 (B + 1, 1, 1, 1) graph input) and returns the complete dict
        ({} when nothing is ragged). q, k, v and o must all be ragged, with the padding mask (cuDNN's rule)."""
        own: dict[str, Tensor | None] = {r: self._own(t, f"ragged_offset_{r}") for r, t in ragged.items()
                                          if t is not None}
        for r, t in (("q", q), ("k", k), ("v", v)):
            if t.ragged_offset is not None:
                if r in own and own[r] is not t.ragged_offset:
                    raise InvalidValueError(f"{what}: {r} already has the ragged offset {t.ragged_offset.name}; "
                                     f"ragged_offset_{r} gives another")
                own[r] = t.ragged_offset
        if not own:
            return {}
        missing = [r for r in ("q", "k", "v", "o") if r not in own]
        if missing:
            raise InvalidValueError(f"{what}: packed (ragged) attention needs the offsets of q, k, v and o; missing "
                             f"{', '.join('ragged_offset_' + r for r in missing)}")
        if not padded:
            raise InvalidValueError(f"{what}: packed (ragged) attention needs the padding mask (seq_len_q and "
                                    f"seq_len_kv): "
                             f"cuDNN takes ragged offsets only with it")
        for r, t in (("q", q), ("k", k), ("v", v)):
            t.set_ragged_offset(own[r])
        own.setdefault("stats", None)
        return own

    def _sdpa_implementation(self, what, implementation, features, backward) -> str:
        """'composite' or 'unified' for ``implementation`` and the features asked for; refuses (naming the
        option) what the unified descriptor cannot take, measured on cuDNN 9.19."""
        if implementation == "composite":
            return "composite"
        why = None
        ver = _version()
        if backward:
            why = ("unified attention backward", "cuDNN 9.19's OPERATION_SDPA_BWD has no engines (its operation "
                   "graph does not finalize); cudnn-py lowers the backward to the composite form only")
        elif ver < _UNIFIED_SINCE:
            why = ("unified attention", f"OPERATION_SDPA_FWD needs cuDNN >= {_vstr(_UNIFIED_SINCE)}; loaded "
                   f"{_vstr(ver)}")
        else:
            on = [f for f, x in features.items() if x]
            if on:
                why = (on[0], f"OPERATION_SDPA_FWD in cudnn-py takes no {on[0]} (on cuDNN 9.19 it takes no masks, "
                       "bias or dropout, and its engine ignores the sequence-length tensors): use "
                       "implementation='composite'")
        if implementation == "unified":
            if why:
                raise GraphNotSupportedError(self.name, [what], [], [why])
            return "unified"
        return "composite" if why else "unified"

    def sdpa(self, q, k, v, *, scale: float | None = None, causal: bool = False,
             diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
             bias=None, seq_len_q=None, seq_len_kv=None, alibi_slopes=None, dropout: float = 0.0, seed=None,
             offset=None, rng_dump: bool = False, page_table_k=None, page_table_v=None,
             max_seq_len_kv: int | None = None, ragged_offset_q=None, ragged_offset_k=None, ragged_offset_v=None,
             ragged_offset_o=None, ragged_offset_stats=None, generate_stats: bool = True,
             implementation: str = "auto", name: str | None = None):
        """Scaled dot-product attention forward. Returns ``(o, stats)`` (``stats`` None without
        ``generate_stats``), plus the dropout mask when ``rng_dump`` (all virtual until ``set_output(True)``).

        :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 tensors, head dim
            packed; Hq a multiple of Hk and Hv (grouped-query / multi-query attention). With a paged KV cache, k
            and v are the page containers (blocks, H, block_size, D).
        :param scale: multiplies Q K^T (default 1/sqrt(D)).
        :param causal: mask keys after the query (``right_bound=0``).
        :param diagonal_alignment: 'top_left' (query i sees keys <= i) or 'bottom_right' (the diagonal ends at
            the last key: query i sees keys <= i + Skv - Sq).
        :param left_bound: sliding window: query i sees keys > i - left_bound (relative to the aligned diagonal).
        :param right_bound: query i sees keys <= i + right_bound (relative to the aligned diagonal).
        :param bias: additive (B or 1, Hq or 1, Sq, Skv) tensor.
        :param seq_len_q, seq_len_kv: (B, 1, 1, 1) int32 device tensors: padding mask with per-batch lengths
            (output rows at or beyond seq_len_q are not written).
        :param alibi_slopes: (1, Hq, 1, 1) float32 tensor of per-head ALiBi slopes (needs causal).
        :param dropout: drop probability of the attention weights (Philox; needs ``seed``/``offset``, (1, 1, 1,
            1) int64 device tensors; the same seed and offset give the same mask).
        :param rng_dump: also return the dropout keep-mask (B, Hq, Sq, Skv) as a float32 tensor (for testing).
        :param page_table_k, page_table_v: (B, 1, pages, 1) int32 page tables of a paged KV cache (needs the
            padding mask and ``max_seq_len_kv``).
        :param ragged_offset_q, ragged_offset_k, ragged_offset_v, ragged_offset_o: packed ("THD") batches: (B + 1,
            1, 1, 1) int32/int64 tensors of each batch's first element in q, k, v and o (all four, with the padding
            mask); the tensors keep their logical (B, H, S_max, D) shapes with token-major (BSHD) strides, and o gets
            q's layout and ``ragged_offset_o``.
        :param ragged_offset_stats: optionally packs the statistics the same way (then (B, Hq, Sq, 1) with
            token-major strides (Sq * Hq, 1, Hq, 1)); without it they stay padded (B, Hq, Sq, 1).
        :param generate_stats: also produce the (B, Hq, Sq, 1) float32 statistics the backward needs.
        :param implementation: 'auto', 'composite' or 'unified' (see module doc).
        """
        what = name or "sdpa"
        paged = None
        if (page_table_k is None) != (page_table_v is None):
            raise InvalidValueError(f"{what}: a paged KV cache needs both page_table_k and page_table_v")
        if page_table_k is not None:
            if seq_len_q is None:
                raise InvalidValueError(f"{what}: a paged KV cache needs seq_len_q and seq_len_kv (the padding mask)")
            if max_seq_len_kv is None or isinstance(max_seq_len_kv, bool) or not isinstance(max_seq_len_kv, int) \
                    or max_seq_len_kv < 1:
                raise InvalidValueError(f"{what}: a paged KV cache needs max_seq_len_kv= (an int >= 1)")
            paged = max_seq_len_kv
        elif max_seq_len_kv is not None:
            raise InvalidValueError(f"{what}: max_seq_len_kv is only for a paged KV cache")
        ins, params, rag = self._sdpa_common(
            what, q, k, v, scale=scale, causal=causal, diagonal_alignment=diagonal_alignment, left_bound=left_bound,
            right_bound=right_bound, bias=bias, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv,
            alibi_slopes=alibi_slopes, dropout=dropout, seed=seed, offset=offset, implementation=implementation,
            paged=paged, ragged=dict(q=ragged_offset_q, k=ragged_offset_k, v=ragged_offset_v, o=ragged_offset_o,
                                     stats=ragged_offset_stats))
        q, k, v = ins["q"], ins["k"], ins["v"]
        b, hq, sq, _ = q.shape
        if paged is not None:
            for t, n, c in ((page_table_k, "page_table_k", k), (page_table_v, "page_table_v", v)):
                t = self._own(t, n)
                pages = -(-paged // c.shape[2])
                if t.shape != (b, 1, pages, 1) or t.dtype != _I32:
                    raise InvalidValueError(f"{what}: {n} must be (B, 1, ceil(max_seq_len_kv / block_size), 1) = "
                                     f"{(b, 1, pages, 1)} int32, got {t.shape} {t.dtype.name}")
                ins[n] = t
        if rng_dump and params["dropout"] == 0:
            raise InvalidValueError(f"{what}: rng_dump needs dropout > 0")
        o_shape = (b, hq, sq, v.shape[3])
        o = self._virtual(o_shape, strides=_strides_like(o_shape, q.strides), name=name and f"{name}.o")
        o.set_dtype(q.dtype)
        outs = {"o": o}
        if rag:
            o.set_ragged_offset(rag["o"])
        if rag.get("stats") is not None and not generate_stats:
            raise InvalidValueError(f"{what}: ragged_offset_stats needs generate_stats=True")
        if generate_stats:
            st_shape = (b, hq, sq, 1)
            st = self._virtual(st_shape, strides=_strides_like(st_shape, q.strides) if rag.get("stats") else None,
                               name=name and f"{name}.stats")
            outs["stats"] = st.set_dtype("float32")
            if rag.get("stats") is not None:
                st.set_ragged_offset(rag["stats"])
        if rng_dump:
            outs["rng_dump"] = self._virtual((b, hq, sq, params["s_kv"]),
                                             name=name and f"{name}.dropout_mask").set_dtype("float32")
        self._add_op(SdpaForward(ins, outs, params, name))
        res = (o, outs.get("stats"))
        return res + (outs["rng_dump"],) if rng_dump else res

    def sdpa_backward(self, q, k, v, o, do, stats, *, scale: float | None = None, causal: bool = False,
                      diagonal_alignment: str = "top_left", left_bound: int | None = None,
                      right_bound: int | None = None, bias=None, dbias: bool = False, seq_len_q=None,
                      seq_len_kv=None, alibi_slopes=None, dropout: float = 0.0, seed=None, offset=None,
                      ragged_offset_q=None, ragged_offset_k=None, ragged_offset_v=None, ragged_offset_o=None,
                      ragged_offset_stats=None, implementation: str = "auto", name: str | None = None):
        """Attention backward: returns ``(dq, dk, dv)``, plus ``dbias`` (the bias's shape) when ``dbias``; all
        virtual until ``set_output(True)``, each with the layout of its input.

        Takes the forward's tensors and options (the same ``scale``, masks, bias, ``dropout`` with the same
        ``seed``/``offset``), its output ``o``, the output gradient ``do`` (o's shape) and its ``stats``
        (B, Hq, Sq, 1) float32. Packed batches take the forward's ragged offsets: dq, dk and dv get those of q, k
        and v, ``do`` that of o, ``stats`` ``ragged_offset_stats`` (if the forward packed them). The composite form's
        float32 scratch tensors live in the plan's workspace (:meth:`SdpaBackward.scratch_tensors`)."""
        what = name or f"sdpa_bwd{len(self.ops)}"
        ins, params, rag = self._sdpa_common(
            what, q, k, v, scale=scale, causal=causal, diagonal_alignment=diagonal_alignment, left_bound=left_bound,
            right_bound=right_bound, bias=bias, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv,
            alibi_slopes=alibi_slopes, dropout=dropout, seed=seed, offset=offset, implementation=implementation,
            backward=True, ragged=dict(q=ragged_offset_q, k=ragged_offset_k, v=ragged_offset_v, o=ragged_offset_o,
                                       stats=ragged_offset_stats))
        q, k, v = ins["q"], ins["k"], ins["v"]
        b, hq, sq, d = q.shape
        if sq == 1 and k.shape[2] == 1:
            raise InvalidValueError(f"{what}: cuDNN's attention backward does not take S_q = S_kv = 1")
        o_shape = (b, hq, sq, v.shape[3])
        for t, n in ((o, "o"), (do, "do")):
            t = self._own(t, n)
            if t.shape != o_shape or t.dtype != q.dtype or t.strides[3] != 1:
                raise InvalidValueError(f"{what}: {n} must be {o_shape} {q.dtype.name} with its head dim packed, got "
                                 f"{t.shape} {t.dtype.name} strides {t.strides}")
            ins[n] = t
        ins["stats"] = self._sdpa_stats(what, stats, (b, hq, sq, 1))
        if rag:
            self._sdpa_set_offset(what, ins["o"], rag["o"], "o")
            self._sdpa_set_offset(what, ins["do"], rag["o"], "do")
            if rag["stats"] is not None:
                self._sdpa_set_offset(what, stats, rag["stats"], "stats")
        if dbias and bias is None:
            raise InvalidValueError(f"{what}: dbias needs the forward's bias")
        if params["dropout"] > 0:
            ins["dropout_scale_inv"] = self.scalar(1.0 - params["dropout"], "float32")
        else:
            ins["one"] = self.scalar(1.0, "float32")
        outs = {}
        for n, t in (("dq", q), ("dk", k), ("dv", v)):
            g = self._virtual(t.shape, strides=_strides_like(t.shape, t.strides), name=name and f"{name}.{n}")
            outs[n] = g.set_dtype(q.dtype)
            if rag:
                g.set_ragged_offset(t.ragged_offset)
        if dbias:
            outs["dbias"] = self._virtual(ins["bias"].shape, name=name and f"{name}.dbias").set_dtype(
                ins["bias"].dtype)
        outs["softmax_sum"] = self.tensor((b, hq, sq, 1), "float32", name=f"{what}.softmax_sum")
        if not dbias:
            if _version() < _DQ_ACCUM_ANY_CONTENTS:
                raise GraphNotSupportedError(self.name, [what], [], [("attention backward", (
                    f"before cuDNN {_vstr(_DQ_ACCUM_ANY_CONTENTS)} its float32 dQ accumulator must be zeroed before "
                    f"each call, which cudnn-py does not do; loaded {_vstr(_version())}"))])
            outs["dq_accum"] = self.tensor((b, hq, sq, d), "float32", name=f"{what}.dq_accum")
        self._add_op(SdpaBackward(ins, outs, params, name or what))
        res = (outs["dq"], outs["dk"], outs["dv"])
        return res + (outs["dbias"],) if dbias else res


    # -- FP8 ----------------------------------------------------------------------------------------------------
    def _fp8_scales(self, what, names, given: dict) -> dict:
        """The descale/scale tensors ``names`` from ``given``: each a (1, 1, 1, 1) float32 device tensor."""
        res = {}
        for n in names:
            t = given.get(n)
            if t is None:
                raise InvalidValueError(f"{what}: FP8 attention needs {n}= (a (1, 1, 1, 1) float32 device tensor)")
            t = self._own(t, n)
            if t.shape != (1, 1, 1, 1) or t.dtype != _F or t.is_virtual or t.is_by_value:
                raise InvalidValueError(f"{what}: {n} must be a (1, 1, 1, 1) float32 device tensor, got {t.describe()}")
            res[n] = t
        return res

    def _fp8_amax(self, name, role):
        return self._virtual((1, 1, 1, 1), name=name and f"{name}.{role}").set_dtype("float32")

    def sdpa_fp8(self, q, k, v, *, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
                 scale: float | None = None, causal: bool = False, generate_stats: bool = True,
                 name: str | None = None):
        """FP8 attention forward (Hopper and newer). Returns ``(o, stats, amax_s, amax_o)`` (``stats`` None without
        ``generate_stats``), all virtual until ``set_output(True)``.

        Computes ``P = softmax(scale * descale_q * descale_k * Q K^T)`` in float32, ``amax_s = max|P|``, rounds
        ``P * scale_s`` to q's FP8 type, then ``O' = (P8 V) * descale_s * descale_v``, ``amax_o = max|O'|`` and
        ``o = O' * scale_o`` in q's FP8 type.

        :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) tensors of one FP8 type (float8_e4m3fn or
            float8_e5m2), head dims multiples of 16 up to 256, head dim packed; Hq a multiple of Hk and Hv.
        :param descale_q, descale_k, descale_v, descale_s, scale_s, scale_o: (1, 1, 1, 1) float32 device tensors.
        :param scale: multiplies Q K^T (default 1/sqrt(D)).
        :param causal: top-left causal mask (the only mask cudnn-py's FP8 attention takes).
        :param generate_stats: also produce the (B, Hq, Sq, 1) float32 statistics the backward needs.
        """
        what = name or "sdpa_fp8"
        ins, params, _ = self._sdpa_common(
            what, q, k, v, scale=scale, causal=causal, diagonal_alignment="top_left", left_bound=None,
            right_bound=None, bias=None, seq_len_q=None, seq_len_kv=None, alibi_slopes=None, dropout=0.0,
            seed=None, offset=None, implementation="composite", fp8=True)
        ins.update(self._fp8_scales(what, FP8_FORWARD_SCALES, locals()))
        q, v = ins["q"], ins["v"]
        b, hq, sq, _ = q.shape
        o_shape = (b, hq, sq, v.shape[3])
        o = self._virtual(o_shape, strides=_strides_like(o_shape, q.strides), name=name and f"{name}.o")
        outs = {"o": o.set_dtype(q.dtype), "amax_s": self._fp8_amax(name, "amax_s"),
                "amax_o": self._fp8_amax(name, "amax_o")}
        if generate_stats:
            outs["stats"] = self._virtual((b, hq, sq, 1), name=name and f"{name}.stats").set_dtype("float32")
        self._add_op(SdpaFp8Forward(ins, outs, params, name))
        return o, outs.get("stats"), outs["amax_s"], outs["amax_o"]

    def sdpa_fp8_backward(self, q, k, v, o, do, stats, *, descale_q, descale_k, descale_v, descale_o, descale_do,
                          descale_s, descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
                          scale: float | None = None, causal: bool = False, name: str | None = None):
        """FP8 attention backward (Hopper: head dim 128). Returns ``(dq, dk, dv, amax_dq, amax_dk, amax_dv,
        amax_dp)``, all virtual until ``set_output(True)``; dq, dk, dv have q's FP8 type and the layouts of q, k, v.

        Takes the forward's FP8 q, k, v, o, its float32 ``stats`` and the FP8 output gradient ``do`` (either FP8
        type); the descale of each FP8 input, ``descale_s``/``scale_s`` of the forward's probabilities, and the
        scale of each FP8 result: dS (``scale_dp``, with ``descale_dp`` its inverse) in do's type, dq, dk, dv.
        Each amax is the max |.| of that result before its scaling. ``scale``/``causal`` as in the forward."""
        what = name or f"sdpa_fp8_bwd{len(self.ops)}"
        ins, params, _ = self._sdpa_common(
            what, q, k, v, scale=scale, causal=causal, diagonal_alignment="top_left", left_bound=None,
            right_bound=None, bias=None, seq_len_q=None, seq_len_kv=None, alibi_slopes=None, dropout=0.0,
            seed=None, offset=None, implementation="composite", fp8=True, backward=True)
        q, k, v = ins["q"], ins["k"], ins["v"]
        b, hq, sq, d = q.shape
        if sq == 1 and k.shape[2] == 1:
            raise InvalidValueError(f"{what}: cuDNN's attention backward does not take S_q = S_kv = 1")
        if d != 128 or v.shape[3] != 128:
            raise GraphNotSupportedError(what, [f"FP8 attention backward with head dims {d}/{v.shape[3]}"], [],
                                         [("head dim", "cuDNN 9.19's FP8 attention backward on Hopper takes head "
                                                       "dim 128 only (the one verified)")])
        if sq % 32 or k.shape[2] % 32:
            raise GraphNotSupportedError(what, [f"FP8 attention backward with S_q = {sq}, S_kv = {k.shape[2]}"], [],
                                         [("sequence length", (
                                             "cuDNN 9.19's FP8 attention backward on Hopper gives wrong dQ rows in a "
                                             "last partial tile of 32 queries (measured: S = 100 and 130 wrong; 64, "
                                             "96, 128, 160, 192 right); cudnn-py takes multiples of 32 only"))])
        o_shape = (b, hq, sq, v.shape[3])
        for t, n in ((o, "o"), (do, "do")):
            t = self._own(t, n)
            if t.shape != o_shape or t.dtype not in _FP8 or t.strides[3] != 1:
                raise InvalidValueError(f"{what}: {n} must be an FP8 {o_shape} tensor with its head dim packed, got "
                                 f"{t.describe()} strides {t.strides}")
            ins[n] = t
        if ins["o"].dtype != q.dtype:
            raise InvalidTypeError(f"{what}: o must have q's FP8 type {q.dtype.name}, got {ins['o'].dtype.name}")
        ins["stats"] = self._sdpa_stats(what, stats, (b, hq, sq, 1))
        ins.update(self._fp8_scales(what, FP8_BACKWARD_SCALES, locals()))
        outs = {}
        for n, t in (("dq", q), ("dk", k), ("dv", v)):
            g = self._virtual(t.shape, strides=_strides_like(t.shape, t.strides), name=name and f"{name}.{n}")
            outs[n] = g.set_dtype(q.dtype)
        for n in ("amax_dq", "amax_dk", "amax_dv", "amax_dp"):
            outs[n] = self._fp8_amax(name, n)
        self._add_op(SdpaFp8Backward(ins, outs, params, name or what))
        return tuple(outs[n] for n in ("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"))
