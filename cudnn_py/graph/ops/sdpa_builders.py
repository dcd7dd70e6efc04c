"""The ``Graph.sdpa*`` builder methods: the attention tensors checked against each other and the options, then the
operations of :mod:`.sdpa` added. ``alibi_slopes=`` and ``generate_stats=`` are deprecated spellings of ``alibi=`` and
``return_stats=``.
"""
from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload

from cudnn_py import capi
from cudnn_py._deprecation import renamed_kwargs
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..errors import GraphNotSupportedError
from .base import Builder, loaded_version as _version, version_text as _vstr
from .sdpa import (FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES, SdpaBackward, SdpaFp8Backward, SdpaFp8Forward,
                   SdpaFp8OptionKeywords, SdpaForward, SdpaGraphOptionKeywords)
from .sdpa_options import SdpaOptions, fp8_only, unexpected_keyword

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

    from ..graph import Tensor

__all__ = ["SdpaBuilders"]

_DT = capi.cudnnDataType_t
_F, _I32, _I64, _BOOL = _DT.CUDNN_DATA_FLOAT, _DT.CUDNN_DATA_INT32, _DT.CUDNN_DATA_INT64, _DT.CUDNN_DATA_BOOLEAN
_IO_DTYPES = (_DT.CUDNN_DATA_HALF, _DT.CUDNN_DATA_BFLOAT16)
_FP8 = tuple(getattr(_DT, n) for n in ("CUDNN_DATA_FP8_E4M3", "CUDNN_DATA_FP8_E5M2") if hasattr(_DT, n))
#: the first cuDNN whose unified forward cudnn-frontend uses
_UNIFIED_SINCE = (9, 13, 1)
#: from this cuDNN on, the backward's dQ accumulator needs no zeroing (cudnn-frontend memsets it before)
_DQ_ACCUM_ANY_CONTENTS = (9, 6, 0)
#: the first cuDNN whose attention engines take a sink (cudnn-frontend refuses sink_token before it)
_SINK_SINCE = (9, 13, 0)
#: deprecated keyword -> its name now
_RENAMED = {"alibi_slopes": "alibi", "generate_stats": "return_stats"}


def _strides_like(shape, ref_strides) -> tuple[int, ...]:
    """Packed strides for ``shape`` with the dimension order of ``ref_strides`` (largest stride outermost)."""
    order = sorted(range(len(shape)), key=lambda i: (-ref_strides[i], i))
    strides, acc = [0] * len(shape), 1
    for i in reversed(order):
        strides[i] = acc
        acc *= shape[i]
    return tuple(strides)


class _Inputs(TypedDict, total=False):
    """The optional tensors of ``Graph.sdpa`` and ``Graph.sdpa_backward`` and their ``name`` (for type checkers)."""
    bias: Tensor | None
    seq_len_q: Tensor | None
    seq_len_kv: Tensor | None
    alibi: Tensor | None
    seed: Tensor | None
    offset: Tensor | None
    ragged_offset_q: Tensor | None
    ragged_offset_k: Tensor | None
    ragged_offset_v: Tensor | None
    ragged_offset_o: Tensor | None
    ragged_offset_stats: Tensor | None
    sink: Tensor | None
    name: str | None


class _ForwardKeywords(_Inputs, SdpaGraphOptionKeywords, total=False):
    """What ``Graph.sdpa`` takes as keywords besides ``return_stats`` and ``rng_dump``."""
    page_table_k: Tensor | None
    page_table_v: Tensor | None


def _options(where: str, options, kwargs: dict, values: dict) -> SdpaOptions:
    """The call's :class:`SdpaOptions` from ``options=`` or the option keywords in ``kwargs``; deprecated spellings
    move to ``values`` (the new names' values) with a warning; an unknown keyword gets a did-you-mean."""
    for name in kwargs:
        if name not in _RENAMED and name not in SdpaOptions.__dataclass_fields__:
            method = getattr(SdpaBuilders, where.rpartition(".")[2])
            raise unexpected_keyword(where, name, [*SdpaOptions.__dataclass_fields__,
                                                   *list(inspect.signature(method).parameters)[1:-1]])
    renamed_kwargs(where, {k: kwargs.pop(k) for k in [k for k in kwargs if k in _RENAMED]}, _RENAMED, values, 5)
    return SdpaOptions.of(options, kwargs, where)


class SdpaBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add attention."""

    def _sdpa_common(self, what, q, k, v, opts: SdpaOptions, *, bias=None, seq_len_q=None, seq_len_kv=None,
                     alibi=None, seed=None, offset=None, paged=None, backward=False, ragged=None, fp8=False,
                     sink=None):
        """Check the tensors against each other and the options; returns (inputs, params, ragged offsets)
        (``ragged``: see :meth:`_sdpa_ragged`)."""
        q, k, v = self._own(q, "q"), self._own(k, "k"), self._own(v, "v")
        for t, n in ((q, "q"), (k, "k"), (v, "v")):
            if t.ndim != 4:
                raise InvalidValueError(f"{what}: {n} must be 4-D (B, H, S, D) in logical order (strides give the "
                                        f"layout), got shape {t.shape}")
            if fp8 and t.dtype not in _FP8:
                raise InvalidTypeError(f"{what}: {n} has dtype {t.dtype.name}; FP8 attention takes float8_e4m3fn or "
                                f"float8_e5m2 tensors")
            if not fp8 and t.dtype in _FP8:
                raise InvalidTypeError(f"{what}: {n} is FP8 ({t.dtype.name}): use sdpa_fp8 / sdpa_fp8_backward, which "
                                       f"take the descale and scale tensors FP8 attention needs")
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
        for val, n, length in ((opts.max_seq_len_q, "max_seq_len_q", sq), (opts.max_seq_len_kv, "max_seq_len_kv", skv)):
            if val is not None and val != length:
                raise InvalidValueError(f"{what}: {n}={val} but the tensors' logical sequence length is {length}")
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
        ins["scale"] = self.scalar(1.0 / math.sqrt(d) if opts.scale is None else opts.scale, "float32")
        left_bound, right_bound, dropout = opts.left_bound, opts.band_right, opts.dropout
        br = opts.diagonal_alignment == "bottom_right"
        if (seq_len_q is None) != (seq_len_kv is None):
            raise InvalidValueError(f"{what}: a padding mask needs both seq_len_q and seq_len_kv")
        padded = seq_len_q is not None
        if padded:
            for t, n in ((seq_len_q, "seq_len_q"), (seq_len_kv, "seq_len_kv")):
                ins[n] = self._device_input(what, t, n, (bq, 1, 1, 1), _I32, "(B, 1, 1, 1) = ")
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
        if opts.alibi is not False:
            raise InvalidValueError(f"{what}: the graph takes the ALiBi slopes as a tensor: alibi=<(1, Hq, 1, 1) "
                                    f"float32 Tensor>, not options.alibi")
        if alibi is not None:
            a = self._own(alibi, "alibi")
            if a.shape != (1, hq, 1, 1) or a.dtype != _F:
                raise InvalidValueError(f"{what}: alibi (the slopes) must be (1, Hq, 1, 1) float32, got {a.shape} "
                                        f"{a.dtype.name}")
            if right_bound != 0:
                raise InvalidValueError(f"{what}: ALiBi needs causal=True (right_bound=0), as in cuDNN")
            ins["alibi_slopes"] = a
        if dropout > 0:
            if seed is None or offset is None:
                raise InvalidValueError(f"{what}: dropout needs seed= and offset= (int64 device tensors of shape "
                                 f"(1, 1, 1, 1); the Philox seed and offset)")
            for t, n in ((seed, "seed"), (offset, "offset")):
                ins[n] = self._device_input(what, t, n, (1, 1, 1, 1), _I64)
            ins["dropout_scale"] = self.scalar(1.0 / (1.0 - dropout), "float32")
        elif seed is not None or offset is not None:
            raise InvalidValueError(f"{what}: seed/offset given but dropout is 0")
        if br and (bias is not None or alibi is not None):
            raise InvalidValueError(f"{what}: bottom-right alignment does not combine with bias, ALiBi or dropout in "
                                    f"cuDNN's attention engines")
        rag = self._sdpa_ragged(what, ragged or {}, q, k, v, padded)
        if rag:
            extra = [n for n, on in (("bias", bias is not None), ("ALiBi", alibi is not None),
                                     ("dropout", dropout > 0), ("a paged KV cache", paged is not None)) if on]
            if extra:
                raise InvalidValueError(f"{what}: ragged (packed) attention with {extra[0]} is not verified in "
                                        f"cudnn-py; pad the batch (seq_len_q/seq_len_kv without ragged offsets)")
        if sink is not None:
            ins["sink"] = self._sdpa_sink(what, sink, q, dict(dropout=dropout > 0, paged=paged is not None,
                                                             ragged=bool(rag)))
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
        if left_bound is not None:  # float32 (shifted for bottom-right), int32 for per-batch bottom-right shifts
            ins["left_bound"] = (self.scalar(left_bound, "int32") if br and padded else
                                 self.scalar(float(left_bound - (skv - sq if br else 0)), "float32"))
        params = {"alignment": opts.diagonal_alignment, "left_bound": left_bound, "right_bound": right_bound,
                  "dropout": dropout, "s_kv": skv, "batch": bq}
        features = {"padding mask (seq_len_q/seq_len_kv)": padded, "paged KV cache": paged is not None,
                    "bias": bias is not None, "alibi": alibi is not None, "dropout": dropout > 0,
                    "causal/sliding window": left_bound is not None or right_bound is not None,
                    "ragged offsets": bool(rag), "attention sink": sink is not None}
        params["implementation"] = "composite" if fp8 else self._sdpa_implementation(what, opts.implementation,
                                                                                     features, backward)
        return ins, params, rag

    def _sdpa_sink(self, what, sink, q, features: dict):
        """The attention sink checked: (1, Hq, 1, 1) float32, a cuDNN that takes it, no unverified ``features``."""
        hq, sq = q.shape[1], q.shape[2]
        sink = self._device_input(what, sink, "sink", (1, hq, 1, 1), _F, "(1, Hq, 1, 1) = ")
        if _version() < _SINK_SINCE:
            raise GraphNotSupportedError(self.name, [what], [], [("attention sink", (
                f"cuDNN's attention engines take a sink from {_vstr(_SINK_SINCE)} on; loaded {_vstr(_version())}"))])
        if sq == 1:
            raise GraphNotSupportedError(self.name, [what], [], [("attention sink with S_q = 1", (
                "cuDNN's attention engines take no sink for one query row (decode); cudnn-frontend refuses it too"))])
        names = {"dropout": "dropout", "paged": "a paged KV cache", "ragged": "ragged (packed) tensors"}
        extra = [names[n] for n, on in features.items() if on]
        if extra:
            raise InvalidValueError(f"{what}: an attention sink with {extra[0]} is not verified in cudnn-py")
        return sink

    def _device_input(self, what, t, n, shape, dtype, shape_text="a "):
        """``t`` as device input ``n``, refused unless of ``shape`` and ``dtype``."""
        t = self._own(t, n)
        if t.shape != shape or t.dtype != dtype or t.is_virtual or t.is_by_value:
            raise InvalidValueError(f"{what}: {n} must be {shape_text}{shape} {dtype.name[11:].lower()} device "
                                    f"tensor, got {t.describe()}")
        return t

    def _sdpa_out(self, q, v, name):
        """The forward's output (B, Hq, Sq, Dv) of q's dtype in q's layout."""
        shape = (*q.shape[:3], v.shape[3])
        o = self.virtual(shape, strides=_strides_like(shape, q.strides), name=name and f"{name}.o")
        return o.set_dtype(q.dtype)

    def _sdpa_bwd_io(self, what, ins, o, do, stats, name, fp8=False) -> dict:
        """Check the backward's ``o``, ``do`` and ``stats`` into ``ins``; returns dq, dk, dv (virtual, each with the
        layout and ragged offset of its input and q's dtype)."""
        q, k = ins["q"], ins["k"]
        b, hq, sq, _ = q.shape
        if sq == 1 and k.shape[2] == 1:
            raise InvalidValueError(f"{what}: cuDNN's attention backward does not take S_q = S_kv = 1")
        o_shape = (b, hq, sq, ins["v"].shape[3])
        for t, n in ((o, "o"), (do, "do")):
            t = ins[n] = self._own(t, n)
            if t.shape != o_shape or t.strides[3] != 1 or (t.dtype not in _FP8 if fp8 else t.dtype != q.dtype):
                raise InvalidValueError(f"{what}: {n} must be {'an FP8' if fp8 else q.dtype.name} {o_shape} tensor "
                                        f"with its head dim packed, got {t.describe()} strides {t.strides}")
        if fp8 and ins["o"].dtype != q.dtype:
            raise InvalidTypeError(f"{what}: o must have q's FP8 type {q.dtype.name}, got {ins['o'].dtype.name}")
        stats = ins["stats"] = self._own(stats, "stats")
        if stats.shape != (b, hq, sq, 1) or stats.dtype != _F:
            raise InvalidValueError(f"{what}: stats must be (B, Hq, Sq, 1) = {(b, hq, sq, 1)} float32 (the forward's), "
                                    f"got {stats.describe()}")
        grads = {}
        for n, t in (("dq", q), ("dk", k), ("dv", ins["v"])):
            g = grads[n] = self.virtual(t.shape, strides=_strides_like(t.shape, t.strides), name=name and f"{name}.{n}")
            g.set_dtype(q.dtype)
            if t.ragged_offset is not None:
                g.set_ragged_offset(t.ragged_offset)
        return grads

    @staticmethod
    def _sdpa_set_offset(what, t, off, n) -> None:
        """Give input ``t`` the ragged offset ``off`` (refusing another one already set)."""
        if t.ragged_offset is not None and t.ragged_offset is not off:
            raise InvalidValueError(f"{what}: {n} already has the ragged offset {t.ragged_offset.name}, not {off.name}")
        t.set_ragged_offset(off)

    def _sdpa_ragged(self, what, ragged: dict, q, k, v, padded: bool) -> dict:
        """The ragged offsets of a packed attention ({} when nothing is ragged): ``ragged`` maps 'q', 'k', 'v', 'o',
        'stats' to offset tensors or None, offsets already set on q/k/v count too; sets them on q, k and v. q, k, v
        and o must all be ragged, with the padding mask (cuDNN's rule)."""
        own: dict[str, Tensor | None] = {r: self._own(t, f"ragged_offset_{r}") for r, t in ragged.items()
                                          if t is not None}
        own.update({r: t.ragged_offset for r, t in (("q", q), ("k", k), ("v", v))
                    if r not in own and t.ragged_offset is not None})
        if not own:
            return {}
        missing = [r for r in ("q", "k", "v", "o") if r not in own]
        if missing:
            raise InvalidValueError(f"{what}: packed (ragged) attention needs the offsets of q, k, v and o; missing "
                             f"{', '.join('ragged_offset_' + r for r in missing)}")
        if not padded:
            raise InvalidValueError(f"{what}: packed (ragged) attention needs the padding mask (seq_len_q and "
                                    f"seq_len_kv): cuDNN takes ragged offsets only with it")
        for r, t in (("q", q), ("k", k), ("v", v)):
            self._sdpa_set_offset(what, t, own[r], r)
        own.setdefault("stats", None)
        return own

    def _sdpa_implementation(self, what, implementation, features, backward) -> str:
        """'composite' or 'unified' for ``implementation`` and the features asked for (cuDNN 9.19's limits)."""
        if implementation == "composite":
            return "composite"
        ver, on = _version(), [f for f, x in features.items() if x]
        why = (("unified attention backward", "cuDNN 9.19's OPERATION_SDPA_BWD has no engines (its operation graph "
                "does not finalize); cudnn-py lowers the backward to the composite form only") if backward else
               ("unified attention", f"OPERATION_SDPA_FWD needs cuDNN >= {_vstr(_UNIFIED_SINCE)}; loaded "
                f"{_vstr(ver)}") if ver < _UNIFIED_SINCE else
               (on[0], f"OPERATION_SDPA_FWD in cudnn-py takes no {on[0]} (on cuDNN 9.19 it takes no masks, bias or "
                "dropout, and its engine ignores the sequence-length tensors): use implementation='composite'")
               if on else None)
        if why and implementation == "unified":
            raise GraphNotSupportedError(self.name, [what], [], [why])
        return "composite" if why else "unified"

    @overload
    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, options: SdpaOptions | None = ..., *,
             rng_dump: Literal[False] = ..., return_stats: Literal[True] | None = ...,
             **kwargs: Unpack[_ForwardKeywords]) -> tuple[Tensor, Tensor]: ...
    @overload  # noqa: E301
    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, options: SdpaOptions | None = ..., *,
             rng_dump: Literal[False] = ..., return_stats: Literal[False],
             **kwargs: Unpack[_ForwardKeywords]) -> tuple[Tensor, None]: ...
    @overload  # noqa: E301
    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, options: SdpaOptions | None = ..., *,
             rng_dump: Literal[False] = ..., return_stats: bool | None = ...,
             **kwargs: Unpack[_ForwardKeywords]) -> tuple[Tensor, Tensor | None]: ...
    @overload  # noqa: E301
    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, options: SdpaOptions | None = ..., *,
             rng_dump: Literal[True], return_stats: bool | None = ...,
             **kwargs: Unpack[_ForwardKeywords]) -> tuple[Tensor, Tensor | None, Tensor]: ...
    def sdpa(self, q: Tensor, k: Tensor, v: Tensor, options: SdpaOptions | None = None, *,  # noqa: E301
             bias: Tensor | None = None, seq_len_q: Tensor | None = None, seq_len_kv: Tensor | None = None,
             alibi: Tensor | None = None, seed: Tensor | None = None, offset: Tensor | None = None,
             rng_dump: bool = False, page_table_k: Tensor | None = None, page_table_v: Tensor | None = None,
             ragged_offset_q: Tensor | None = None, ragged_offset_k: Tensor | None = None,
             ragged_offset_v: Tensor | None = None, ragged_offset_o: Tensor | None = None,
             ragged_offset_stats: Tensor | None = None, sink: Tensor | None = None, return_stats: bool | None = None,
             name: str | None = None,
             **kwargs: Any) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor]:
        """Scaled dot-product attention forward. Returns ``(o, stats)`` (``stats`` None with ``return_stats=False``),
        plus the dropout mask when ``rng_dump`` (all virtual until ``set_output(True)``).

        :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 tensors, head dim
            packed; Hq a multiple of Hk and Hv (grouped-query / multi-query attention). With a paged KV cache, k
            and v are the page containers (blocks, H, block_size, D).
        :param options: an :class:`SdpaOptions` (scale, causal, diagonal_alignment, left_bound, right_bound, dropout,
            max_seq_len_kv, implementation), or its fields as keywords.
        :param bias: additive (B or 1, Hq or 1, Sq, Skv) tensor.
        :param seq_len_q, seq_len_kv: (B, 1, 1, 1) int32 device tensors: padding mask with per-batch lengths
            (output rows at or beyond seq_len_q are not written).
        :param alibi: (1, Hq, 1, 1) float32 tensor of per-head ALiBi slopes (needs causal).
        :param seed, offset: with ``dropout``: (1, 1, 1, 1) int64 device tensors, the Philox state (the same seed and
            offset give the same mask).
        :param rng_dump: also return the dropout keep-mask (B, Hq, Sq, Skv) as a float32 tensor (for testing).
        :param page_table_k, page_table_v: (B, 1, pages, 1) int32 page tables of a paged KV cache (needs the
            padding mask and the option ``max_seq_len_kv``).
        :param ragged_offset_q, ragged_offset_k, ragged_offset_v, ragged_offset_o: packed ("THD") batches: (B + 1,
            1, 1, 1) int32/int64 tensors of each batch's first element in q, k, v and o (all four, with the padding
            mask); the tensors keep their logical (B, H, S_max, D) shapes with token-major (BSHD) strides, and o gets
            q's layout and ``ragged_offset_o``.
        :param ragged_offset_stats: optionally packs the statistics the same way (then (B, Hq, Sq, 1) with
            token-major strides (Sq * Hq, 1, Hq, 1)); without it they stay padded (B, Hq, Sq, 1).
        :param sink: (1, Hq, 1, 1) float32 device tensor of per-head attention-sink logits (gpt-oss): each row's
            softmax gets one more logit that takes probability mass and adds no value; the statistics include it.
            Needs cuDNN >= 9.13 and S_q > 1; not with dropout, a paged KV cache or ragged offsets.
        :param return_stats: also produce the (B, Hq, Sq, 1) float32 statistics the backward needs (default True).
        """
        what = name or "sdpa"
        values: dict[str, Any] = {"alibi": alibi, "return_stats": return_stats}
        opts = _options("Graph.sdpa", options, kwargs, values)
        alibi, return_stats = values["alibi"], values["return_stats"] is not False
        max_seq_len_kv, paged = opts.max_seq_len_kv, None
        if (page_table_k is None) != (page_table_v is None):
            raise InvalidValueError(f"{what}: a paged KV cache needs both page_table_k and page_table_v")
        if page_table_k is not None:
            if seq_len_q is None:
                raise InvalidValueError(f"{what}: a paged KV cache needs seq_len_q and seq_len_kv (the padding mask)")
            if max_seq_len_kv is None:
                raise InvalidValueError(f"{what}: a paged KV cache needs the option max_seq_len_kv (an int >= 1)")
            paged = max_seq_len_kv
        ins, params, rag = self._sdpa_common(
            what, q, k, v, opts, bias=bias, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv, alibi=alibi, seed=seed,
            offset=offset, paged=paged, ragged=dict(q=ragged_offset_q, k=ragged_offset_k, v=ragged_offset_v,
                                                    o=ragged_offset_o, stats=ragged_offset_stats), sink=sink)
        q, k, v = ins["q"], ins["k"], ins["v"]
        b, hq, sq, _ = q.shape
        if paged is not None:
            for t, n, c in ((page_table_k, "page_table_k", k), (page_table_v, "page_table_v", v)):
                ins[n] = self._device_input(what, t, n, (b, 1, -(-paged // c.shape[2]), 1), _I32,
                                            "(B, 1, ceil(max_seq_len_kv / block_size), 1) = ")
        if rng_dump and params["dropout"] == 0:
            raise InvalidValueError(f"{what}: rng_dump needs dropout > 0")
        o = self._sdpa_out(q, v, name)
        outs = {"o": o}
        if rag:
            o.set_ragged_offset(rag["o"])
        if rag.get("stats") is not None and not return_stats:
            raise InvalidValueError(f"{what}: ragged_offset_stats needs return_stats=True")
        if return_stats:
            st_shape = (b, hq, sq, 1)
            st = self.virtual(st_shape, strides=_strides_like(st_shape, q.strides) if rag.get("stats") else None,
                               name=name and f"{name}.stats")
            outs["stats"] = st.set_dtype("float32")
            if rag.get("stats") is not None:
                st.set_ragged_offset(rag["stats"])
        if rng_dump:
            outs["rng_dump"] = self.virtual((b, hq, sq, params["s_kv"]),
                                             name=name and f"{name}.dropout_mask").set_dtype("float32")
        self.add_op(SdpaForward(ins, outs, params, name))
        res = (o, outs.get("stats"))
        return res + (outs["rng_dump"],) if rng_dump else res

    def sdpa_backward(self, q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, stats: Tensor,
                      options: SdpaOptions | None = None, *, bias: Tensor | None = None, dbias: bool = False,
                      seq_len_q: Tensor | None = None, seq_len_kv: Tensor | None = None, alibi: Tensor | None = None,
                      seed: Tensor | None = None, offset: Tensor | None = None, ragged_offset_q: Tensor | None = None,
                      ragged_offset_k: Tensor | None = None, ragged_offset_v: Tensor | None = None,
                      ragged_offset_o: Tensor | None = None, ragged_offset_stats: Tensor | None = None,
                      sink: Tensor | None = None, dsink: bool = False, name: str | None = None,
                      **kwargs: Unpack[SdpaGraphOptionKeywords]) -> tuple[Tensor, ...]:
        """Attention backward: returns ``(dq, dk, dv)``, plus ``dbias`` (the bias's shape) when ``dbias`` and
        ``dsink`` ((1, Hq, 1, 1) float32, the gradient of the forward's ``sink``) when ``dsink``; all virtual until
        ``set_output(True)``, dq, dk, dv each with the layout of its input.

        Takes the forward's tensors and options (the same ``scale``, masks, bias, ``dropout`` with the same
        ``seed``/``offset``), its output ``o``, the output gradient ``do`` (o's shape) and its ``stats``
        (B, Hq, Sq, 1) float32. Packed batches take the forward's ragged offsets: dq, dk, dv get those of q, k, v,
        ``do`` that of o, ``stats`` ``ragged_offset_stats`` (if the forward packed them). The statistics include the
        forward's sink, so ``sink`` is taken only with ``dsink=True``. The float32 scratch tensors live in the plan's
        workspace (:meth:`SdpaBackward.scratch_tensors`)."""
        what = name or f"sdpa_bwd{len(self.ops)}"
        values = {"alibi": alibi}
        opts = _options("Graph.sdpa_backward", options, dict(kwargs), values)
        ins, params, rag = self._sdpa_common(
            what, q, k, v, opts, bias=bias, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv, alibi=values["alibi"],
            seed=seed, offset=offset, backward=True, sink=sink, ragged=dict(
                q=ragged_offset_q, k=ragged_offset_k, v=ragged_offset_v, o=ragged_offset_o, stats=ragged_offset_stats))
        outs = self._sdpa_bwd_io(what, ins, o, do, stats, name)
        b, hq, sq, d = ins["q"].shape
        if rag:
            self._sdpa_set_offset(what, ins["o"], rag["o"], "o")
            self._sdpa_set_offset(what, ins["do"], rag["o"], "do")
            if rag["stats"] is not None:
                self._sdpa_set_offset(what, stats, rag["stats"], "stats")
        if dbias and bias is None:
            raise InvalidValueError(f"{what}: dbias needs the forward's bias")
        if (sink is not None) != bool(dsink):
            raise InvalidValueError(f"{what}: dsink=True needs the forward's sink" if dsink else
                                    f"{what}: sink is taken with dsink=True only (the statistics already include "
                                    f"the sink; leave it out for dq, dk, dv alone)")
        if params["dropout"] > 0:
            ins["dropout_scale_inv"] = self.scalar(1.0 - params["dropout"], "float32")
        else:
            ins["one"] = self.scalar(1.0, "float32")
        if dbias:
            outs["dbias"] = self.virtual(ins["bias"].shape, name=name and f"{name}.dbias").set_dtype(ins["bias"].dtype)
        if dsink:
            outs["dsink"] = self.virtual((1, hq, 1, 1), name=name and f"{name}.dsink").set_dtype("float32")
        outs["softmax_sum"] = self.tensor((b, hq, sq, 1), "float32", name=f"{what}.softmax_sum")
        if not dbias:
            if _version() < _DQ_ACCUM_ANY_CONTENTS:
                raise GraphNotSupportedError(self.name, [what], [], [("attention backward", (
                    f"before cuDNN {_vstr(_DQ_ACCUM_ANY_CONTENTS)} its float32 dQ accumulator must be zeroed before "
                    f"each call, which cudnn-py does not do; loaded {_vstr(_version())}"))])
            outs["dq_accum"] = self.tensor((b, hq, sq, d), "float32", name=f"{what}.dq_accum")
        self.add_op(SdpaBackward(ins, outs, params, name or what))
        return tuple(outs[n] for n in ("dq", "dk", "dv", "dbias", "dsink") if n in outs)

    # -- FP8 ----------------------------------------------------------------------------------------------------
    def _fp8_scales(self, what, names, given: dict) -> dict:
        """The (1, 1, 1, 1) float32 descale/scale tensors ``names`` from ``given``."""
        missing = [n for n in names if given.get(n) is None]
        if missing:
            raise InvalidValueError(f"{what}: FP8 attention needs {missing[0]}= (a (1, 1, 1, 1) float32 device tensor)")
        return {n: self._device_input(what, given[n], n, (1, 1, 1, 1), _F) for n in names}

    def _fp8_amax(self, name, role):
        return self.virtual((1, 1, 1, 1), name=name and f"{name}.{role}").set_dtype("float32")

    def sdpa_fp8(self, q: Tensor, k: Tensor, v: Tensor, options: SdpaOptions | None = None, *, descale_q: Tensor,
                 descale_k: Tensor, descale_v: Tensor, descale_s: Tensor, scale_s: Tensor, scale_o: Tensor,
                 return_stats: bool | None = None, name: str | None = None,
                 **kwargs: Unpack[SdpaFp8OptionKeywords]) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """FP8 attention forward (Hopper and newer). Returns ``(o, stats, amax_s, amax_o)`` (``stats`` None with
        ``return_stats=False``), all virtual until ``set_output(True)``. Computes ``P = softmax(scale * descale_q *
        descale_k * Q K^T)`` in float32, ``amax_s = max|P|``, rounds ``P * scale_s`` to q's FP8 type, then ``O' = (P8
        V) * descale_s * descale_v``, ``amax_o = max|O'|`` and ``o = O' * scale_o`` in q's FP8 type.

        :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) tensors of one FP8 type (float8_e4m3fn or
            float8_e5m2), head dims multiples of 16 up to 256, head dim packed; Hq a multiple of Hk and Hv.
        :param descale_q, descale_k, descale_v, descale_s, scale_s, scale_o: (1, 1, 1, 1) float32 device tensors.
        :param scale, causal: the only options FP8 attention takes: ``scale`` multiplies Q K^T (default 1/sqrt(D)),
            ``causal`` the top-left causal mask (the only mask it takes).
        :param return_stats: also produce the (B, Hq, Sq, 1) float32 statistics the backward needs (default True).
        """
        what = name or "sdpa_fp8"
        values = {"return_stats": return_stats}
        opts = fp8_only(what, _options("Graph.sdpa_fp8", options, dict(kwargs), values))
        return_stats = values["return_stats"] is not False
        ins, params, _ = self._sdpa_common(what, q, k, v, opts, fp8=True)
        ins.update(self._fp8_scales(what, FP8_FORWARD_SCALES, locals()))
        q, v = ins["q"], ins["v"]
        b, hq, sq, _ = q.shape
        o = self._sdpa_out(q, v, name)
        outs = {"o": o, "amax_s": self._fp8_amax(name, "amax_s"), "amax_o": self._fp8_amax(name, "amax_o")}
        if return_stats:
            outs["stats"] = self.virtual((b, hq, sq, 1), name=name and f"{name}.stats").set_dtype("float32")
        self.add_op(SdpaFp8Forward(ins, outs, params, name))
        return o, outs.get("stats"), outs["amax_s"], outs["amax_o"]

    def sdpa_fp8_backward(self, q: Tensor, k: Tensor, v: Tensor, o: Tensor, do: Tensor, stats: Tensor,
                          options: SdpaOptions | None = None, *, descale_q: Tensor, descale_k: Tensor,
                          descale_v: Tensor, descale_o: Tensor, descale_do: Tensor, descale_s: Tensor,
                          descale_dp: Tensor, scale_s: Tensor, scale_dq: Tensor, scale_dk: Tensor, scale_dv: Tensor,
                          scale_dp: Tensor, name: str | None = None,
                          **kwargs: Unpack[SdpaFp8OptionKeywords]) -> tuple[Tensor, ...]:
        """FP8 attention backward (Hopper: head dim 128). Returns ``(dq, dk, dv, amax_dq, amax_dk, amax_dv,
        amax_dp)``, all virtual until ``set_output(True)``; dq, dk, dv have q's FP8 type and the layouts of q, k, v.

        Takes the forward's FP8 q, k, v, o, its float32 ``stats`` and the FP8 output gradient ``do`` (either FP8
        type); the descale of each FP8 input, ``descale_s``/``scale_s`` of the forward's probabilities, and the
        scale of each FP8 result: dS (``scale_dp``, with ``descale_dp`` its inverse) in do's type, dq, dk, dv.
        Each amax is the max |.| of that result before its scaling. ``scale``/``causal`` as in the forward."""
        what = name or f"sdpa_fp8_bwd{len(self.ops)}"
        opts = fp8_only(what, _options("Graph.sdpa_fp8_backward", options, dict(kwargs), {}))
        ins, params, _ = self._sdpa_common(what, q, k, v, opts, fp8=True, backward=True)
        q, k, v = ins["q"], ins["k"], ins["v"]
        b, hq, sq, d = q.shape
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
        outs = self._sdpa_bwd_io(what, ins, o, do, stats, name, fp8=True)
        ins.update(self._fp8_scales(what, FP8_BACKWARD_SCALES, locals()))
        for n in ("amax_dq", "amax_dk", "amax_dv", "amax_dp"):
            outs[n] = self._fp8_amax(name, n)
        self.add_op(SdpaFp8Backward(ins, outs, params, name or what))
        return tuple(outs[n] for n in ("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"))
