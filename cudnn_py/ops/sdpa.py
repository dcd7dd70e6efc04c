"""Scaled dot-product attention (flash attention) through cached graph plans::

    o, stats = cudnn_py.sdpa(h, q, k, v, causal=True, return_stats=True)     # torch tensors work too
    dq, dk, dv = cudnn_py.sdpa_backward(h, q, k, v, o, do, stats, causal=True)

    opts = cudnn_py.SdpaOptions(causal=True)                  # the same options as one checked, hashable object
    attn = cudnn_py.Sdpa(h, q, k, v, opts, return_stats=True)  # the stateful form: hold and inspect the plan
    attn.plan()                                                # or attn.autotune()
    o, stats = attn.execute()

Tensors are logical ``(B, H, S, D)`` (torch's order) with any strides whose head dim is packed: a (B, S, H, D)
buffer passed as ``x.transpose(1, 2)`` is BSHD, slices of one packed QKV buffer are interleaved QKV. Outputs get the
layout of their inputs (o follows q, dq/dk/dv follow q/k/v). Packed batches ("THD", as flash-attention's varlen
functions take them) are (T, H, D) tensors with per-batch offsets and lengths. The first call of a configuration
builds its graph, a repeat call replays it. :func:`sdpa_fp8` / :func:`sdpa_fp8_backward`: FP8 (Hopper and newer).
"""
from __future__ import annotations

import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Literal, NamedTuple, TypedDict, overload

from cudnn_py._deprecation import warn
from cudnn_py.core.args import bool_arg
from cudnn_py.errors import InvalidValueError
from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES, SdpaOptionKeywords
from cudnn_py.graph.ops.sdpa_options import SdpaOptions, fp8_only, renamed
from cudnn_py.graph.plans import Plan
from cudnn_py.graph.runner import Runner
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike, Out

from cudnn_py.calls.prepared import forget, prepared

from .sdpa_args import ROUTE, SdpaArgs, alibi_slopes, device_tensor

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Sdpa", "SdpaOptions", "sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward", "sdpa_cache_clear",
           "alibi_slopes", "SdpaOutputs", "SdpaGrads", "SdpaGradsWithBias", "SdpaGradsWithSink",
           "SdpaGradsWithBiasAndSink", "SdpaFp8Outputs", "SdpaFp8Grads"]

#: deprecated keyword -> its name now
_RENAMED = {"ragged_offset_kv": "ragged_offset_k"}
_OPTIONS = tuple(SdpaOptions.__dataclass_fields__)


class SdpaOutputs(NamedTuple):
    """What :meth:`Sdpa.execute` returns, and :func:`sdpa` with ``return_stats=True``."""
    o: DeviceArray               #: the attention output (the caller's ``o``, or a new array)
    stats: DeviceArray | None    #: the softmax statistics (log-sum-exp per query row) the backward takes, or None


class SdpaGrads(NamedTuple):
    """What :func:`sdpa_backward` returns."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray


class SdpaGradsWithBias(NamedTuple):
    """What :func:`sdpa_backward` returns with ``return_dbias=True``."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    dbias: DeviceArray


class SdpaGradsWithSink(NamedTuple):
    """What :func:`sdpa_backward` returns with ``return_dsink=True``."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    dsink: DeviceArray  #: (1, Hq, 1, 1) float32: the gradient of the sink


class SdpaGradsWithBiasAndSink(NamedTuple):
    """What :func:`sdpa_backward` returns with ``return_dbias=True`` and ``return_dsink=True``."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    dbias: DeviceArray
    dsink: DeviceArray


class _SdpaInputs(TypedDict, total=False):
    """The optional tensors of :func:`sdpa` and :func:`sdpa_backward` (see :func:`sdpa`), and ``autotune``."""
    bias: DeviceArrayLike | None
    seq_len_q: DeviceArrayLike | None
    seq_len_kv: DeviceArrayLike | None
    ragged_offset_q: DeviceArrayLike | None
    ragged_offset_k: DeviceArrayLike | None
    seed: int | DeviceArrayLike | None
    offset: int | DeviceArrayLike | None
    sink: DeviceArrayLike | None
    autotune: bool


class _SdpaKeywords(_SdpaInputs, SdpaOptionKeywords, total=False):
    """What :func:`sdpa` takes as keywords besides ``return_stats``, ``o`` and ``stats``."""
    page_table_k: DeviceArrayLike | None
    page_table_v: DeviceArrayLike | None


class _SdpaBackwardKeywords(_SdpaInputs, SdpaOptionKeywords, total=False):
    """What :func:`sdpa_backward` takes as keywords besides ``return_dbias``, ``dbias``, ``return_dsink``, ``dsink``."""
    dq: DeviceArrayLike | None
    dk: DeviceArrayLike | None
    dv: DeviceArrayLike | None


#: the array arguments of the forward (and, the first ten, of the backward), by name; those beside q, k and v
_SDPA_INPUTS = ("q", "k", "v", "bias", "seq_len_q", "seq_len_kv", "ragged_offset_q", "ragged_offset_k", "seed",
                "offset", "page_table_k", "page_table_v", "sink")
_TENSORS = _SDPA_INPUTS[3:]


def sdpa_cache_clear(handle: Handle) -> None:
    """Forget the prepared attention calls of ``handle`` (other families' stay): their graphs and runners are built
    again on their next call; the plans stay in the plan cache (:func:`cudnn_py.graph.plan_cache_clear`)."""
    forget(handle_arg(handle), ROUTE)


def _accepted(fn: Callable) -> list[str]:
    """The keywords ``fn`` takes (its parameters and the option fields), for a did-you-mean."""
    params = [n for n in inspect.signature(fn).parameters if n not in ("deprecated", "options_keywords")]
    return params + [n for n in _OPTIONS if n not in params]


class Sdpa:
    """Attention forward as an object: the checked arguments, the plan (:meth:`plan` / :meth:`autotune`) and its
    execution (:meth:`execute`); :func:`sdpa` is the function form. The arguments are :func:`sdpa`'s (``options``:
    an :class:`SdpaOptions`, or its fields as keywords); ``o``, ``stats``: outputs every :meth:`execute` writes
    (default: new arrays each call).
    """

    def __init__(self, handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
                 options: SdpaOptions | None = None, *, bias: DeviceArrayLike | None = None,
                 seq_len_q: DeviceArrayLike | None = None, seq_len_kv: DeviceArrayLike | None = None,
                 ragged_offset_q: DeviceArrayLike | None = None, ragged_offset_k: DeviceArrayLike | None = None,
                 seed: int | DeviceArrayLike | None = None, offset: int | DeviceArrayLike | None = None,
                 page_table_k: DeviceArrayLike | None = None, page_table_v: DeviceArrayLike | None = None,
                 sink: DeviceArrayLike | None = None, return_stats: bool = False, o: DeviceArrayLike | None = None,
                 stats: DeviceArrayLike | None = None, **options_keywords: Unpack[SdpaOptionKeywords]):
        handle = handle_arg(handle)
        keywords: dict[str, Any] = dict(options_keywords)  # with the deprecated spellings type checkers refuse
        deprecated = {n: keywords.pop(n) for n in list(keywords) if n not in _OPTIONS}
        if deprecated:
            ragged_offset_k = renamed("Sdpa", deprecated, _RENAMED, _accepted(Sdpa),
                                      {"ragged_offset_k": ragged_offset_k})["ragged_offset_k"]
        self.handle, self.options = handle, SdpaOptions.of(options, keywords, "Sdpa")
        values = locals()
        tensors: dict[str, Any] = {n: values[n] for n in _TENSORS}
        self.args = SdpaArgs(handle, q, k, v, self.options, **tensors)
        self._call = (q, k, v), {n: x for n, x in tensors.items() if x is not None}  # what execute() passes sdpa
        self._tuned = False
        self.return_stats = bool_arg(return_stats, "return_stats")
        if stats is not None and not self.return_stats:
            raise InvalidValueError("stats= needs return_stats=True")
        self.outputs = {"o": o, "stats": stats} if self.return_stats else {"o": o}
        self._given_o = None if o is None or self.args.ragged else device_tensor(o, "o")[1]  # its layout: the graph's
        self.runner: Runner | None = None

    def _runner(self, autotune: bool) -> Runner:
        self.runner = self.args.runner("sdpa", autotune, {"o": self._given_o, "stats": None},
                                       (0 if self.args.ragged else None,), return_stats=self.return_stats)
        return self.runner

    def plan(self) -> Plan:
        """The plan :meth:`execute` runs (on the first call the heuristics' first engine's)."""
        return (self.runner or self._runner(False)).plan

    def autotune(self) -> Plan:
        """Time every plan of heuristics modes A and B on these arrays (the outputs are written) and keep the
        fastest; returns it."""
        self._tuned = True
        return self._runner(True).plan

    def execute(self) -> SdpaOutputs:
        """Run the attention (planning first if :meth:`plan` / :meth:`autotune` was not called); returns the outputs,
        ``stats`` None without ``return_stats``."""
        if self.runner is None:
            self.plan()
        (q, k, v), tensors = self._call
        _executing.sdpa = self
        try:
            res: Any = sdpa(  # type: ignore[call-overload]  # return_stats is a bool, not a Literal
                self.handle, q, k, v, self.options, **tensors, return_stats=self.return_stats, autotune=self._tuned,
                **self.outputs)
        finally:
            _executing.sdpa = None
        return res if self.return_stats else SdpaOutputs(res, None)

    def _run(self) -> SdpaOutputs:
        """Run the attention on the validated arguments (:func:`sdpa`'s first call of a signature)."""
        res = self.args.run(self.runner or self._runner(self._tuned), self.outputs)
        return SdpaOutputs(res[0], res[1] if self.return_stats else None)

    def __repr__(self) -> str:
        plan = self.runner.plan.tag if self.runner else "not planned"
        return f"<Sdpa {self.options} {plan}>"


#: ``.sdpa``: the :class:`Sdpa` whose :meth:`~Sdpa.execute` calls :func:`sdpa` on this thread (its plan runs)
_executing = threading.local()


@overload
def sdpa(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
         options: SdpaOptions | None = ..., *, return_stats: Literal[False] = ..., o: Out | None = ...,
         stats: None = ..., **kwargs: Unpack[_SdpaKeywords]) -> DeviceArray | Out: ...
@overload  # noqa: E302
def sdpa(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
         options: SdpaOptions | None = ..., *, return_stats: Literal[True], o: DeviceArrayLike | None = ...,
         stats: DeviceArrayLike | None = ..., **kwargs: Unpack[_SdpaKeywords]) -> SdpaOutputs: ...
@prepared(inputs=_SDPA_INPUTS, outputs=("o", "stats"), inplace=False)  # noqa: E302
def sdpa(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
         options: SdpaOptions | None = None, *, bias: Any = None, seq_len_q: Any = None, seq_len_kv: Any = None,
         ragged_offset_q: Any = None, ragged_offset_k: Any = None, seed: Any = None, offset: Any = None,
         page_table_k: Any = None, page_table_v: Any = None, sink: Any = None, return_stats: bool = False,
         o: Any = None, stats: Any = None, autotune: bool = False, scale: float | None = None, causal: bool = False,
         diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
         alibi: Any = False, dropout: float = 0.0, max_seq_len_q: int | None = None,
         max_seq_len_kv: int | None = None, implementation: str = "auto",
         **deprecated: Any) -> DeviceArrayLike | SdpaOutputs:
    """Attention forward: ``o = softmax(mask(scale * q k^T + bias)) v`` in one fused cuDNN kernel.

    :param handle: the :class:`~cudnn_py.Handle` (plans are cached on it).
    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 device tensors (DeviceArray,
        torch, anything with DLPack / ``__cuda_array_interface__``), head dim packed; Hq a multiple of Hk and Hv
        (grouped-query / multi-query attention). Packed batches: (T_q, Hq, D), (T_kv, Hk, D), (T_kv, Hv, D).
    :param options: an :class:`SdpaOptions`, or (not both) its fields as keywords: ``scale``, ``causal``,
        ``diagonal_alignment``, ``left_bound``, ``right_bound``, ``alibi``, ``dropout``, ``max_seq_len_q``,
        ``max_seq_len_kv``, ``implementation``.
    :param bias: additive (B or 1, Hq or 1, Sq, Skv) device tensor of q's dtype.
    :param seq_len_q, seq_len_kv: per-batch int32 lengths ((B,) or (B, 1, 1, 1) device tensors): padding mask;
        output rows at or beyond seq_len_q are not written.
    :param ragged_offset_q, ragged_offset_k: packed ("THD") batches: (B + 1,) int32/int64 device tensors of each
        sequence's first element in q (and o) and in k (and v), i.e. cumulative token counts times H * D; need the
        padding mask and the options ``max_seq_len_q``/``max_seq_len_kv``. o is then (T_q, Hq, D); the statistics
        stay (B, Hq, max_seq_len_q, 1). Needs Dv == D and Hk * D == Hv * Dv (v shares k's offsets, o q's).
        ``ragged_offset_kv=`` is the deprecated spelling of ``ragged_offset_k``.
    :param page_table_k, page_table_v: a paged KV cache (inference): k and v are then the page containers
        (blocks, Hk, block_size, D) and (blocks, Hv, block_size, Dv), and each table a (B, pages) or (B, 1, pages,
        1) int32 device tensor of the block index of each page of each sequence, pages = ceil(max_seq_len_kv /
        block_size); needs ``seq_len_q``/``seq_len_kv`` and the option ``max_seq_len_kv``.
    :param sink: per-head attention-sink logits (gpt-oss), an (Hq,) or (1, Hq, 1, 1) float32 device tensor: each
        query row's softmax gets one more logit that takes probability mass and adds no value (the statistics
        include it). Needs cuDNN >= 9.13 and Sq > 1; not with dropout, paged KV caches or packed tensors.
    :param seed, offset: with ``dropout``: ints or int64 device tensors (the same pair gives the same mask, which
        :func:`sdpa_backward` regenerates).
    :param return_stats: also return the (B, Hq, Sq, 1) float32 statistics :func:`sdpa_backward` needs.
    :param o, stats: outputs to write (default: new arrays; o gets q's layout); ``stats`` needs ``return_stats``.
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: o, or with ``return_stats=True`` an :class:`SdpaOutputs` (o, stats), which unpacks like a tuple.
    """
    planned = getattr(_executing, "sdpa", None)
    if planned is not None:
        _executing.sdpa = None
        res = planned._run()
        return res if return_stats else res.o
    if deprecated:
        ragged_offset_k = renamed("sdpa", deprecated, _RENAMED, _accepted(sdpa),
                                  {"ragged_offset_k": ragged_offset_k})["ragged_offset_k"]
    if stats is not None and return_stats is not True:
        warn("sdpa(): stats= without return_stats=True is deprecated (the return type follows return_stats): pass "
             "return_stats=True")
        return_stats = True
    values = locals()
    opts = SdpaOptions.of(options, {n: values[n] for n in _OPTIONS}, "sdpa")
    a = Sdpa(handle, q, k, v, opts, **{n: values[n] for n in _TENSORS}, return_stats=return_stats, o=o, stats=stats)
    if bool_arg(autotune, "autotune"):
        a.autotune()
    res = a._run()
    return res if return_stats else res.o


@overload
def sdpa_backward(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike, o: DeviceArrayLike,
                  do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = ..., *,
                  return_dbias: Literal[False] = ..., dbias: None = ..., return_dsink: Literal[False] = ...,
                  dsink: None = ..., **kwargs: Unpack[_SdpaBackwardKeywords]) -> SdpaGrads: ...
@overload  # noqa: E302
def sdpa_backward(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike, o: DeviceArrayLike,
                  do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = ..., *,
                  return_dbias: Literal[True], dbias: DeviceArrayLike | None = ...,
                  return_dsink: Literal[False] = ..., dsink: None = ...,
                  **kwargs: Unpack[_SdpaBackwardKeywords]) -> SdpaGradsWithBias: ...
@overload  # noqa: E302
def sdpa_backward(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike, o: DeviceArrayLike,
                  do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = ..., *,
                  return_dbias: Literal[False] = ..., dbias: None = ..., return_dsink: Literal[True],
                  dsink: DeviceArrayLike | None = ...,
                  **kwargs: Unpack[_SdpaBackwardKeywords]) -> SdpaGradsWithSink: ...
@overload  # noqa: E302
def sdpa_backward(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike, o: DeviceArrayLike,
                  do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = ..., *,
                  return_dbias: Literal[True], dbias: DeviceArrayLike | None = ..., return_dsink: Literal[True],
                  dsink: DeviceArrayLike | None = ...,
                  **kwargs: Unpack[_SdpaBackwardKeywords]) -> SdpaGradsWithBiasAndSink: ...
@prepared(inputs=("o", "do", "stats", *_SDPA_INPUTS[:10], "sink"), outputs=("dq", "dk", "dv", "dbias", "dsink"),
          inplace=False)  # noqa: E302
def sdpa_backward(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
                  o: DeviceArrayLike, do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = None,
                  *, bias: Any = None, return_dbias: bool = False, seq_len_q: Any = None, seq_len_kv: Any = None,
                  ragged_offset_q: Any = None, ragged_offset_k: Any = None, seed: Any = None, offset: Any = None,
                  sink: Any = None, return_dsink: bool = False, dq: Any = None, dk: Any = None, dv: Any = None,
                  dbias: Any = None, dsink: Any = None, autotune: bool = False,
                  scale: float | None = None, causal: bool = False, diagonal_alignment: str = "top_left",
                  left_bound: int | None = None, right_bound: int | None = None, alibi: Any = False,
                  dropout: float = 0.0, max_seq_len_q: int | None = None, max_seq_len_kv: int | None = None,
                  implementation: str = "auto", **deprecated: Any) -> SdpaGrads | SdpaGradsWithBias | \
        SdpaGradsWithSink | SdpaGradsWithBiasAndSink:
    """Attention backward: the gradients of :func:`sdpa` for the output gradient ``do``.

    Takes the forward's inputs and options (the same seed/offset for dropout), its output ``o`` and statistics
    ``stats`` (``return_stats=True``), and ``do`` (o's shape and dtype; packed like o for packed batches).

    :param return_dbias: also return the gradient of ``bias`` (its shape).
    :param sink, return_dsink: the forward's sink, and whether to return its gradient ((1, Hq, 1, 1) float32). The
        statistics include the sink, so dq, dk, dv do not need it: without ``return_dsink`` it is not read.
    :param dq, dk, dv, dbias, dsink: outputs to write (default: new arrays in the layouts of q, k, v and bias);
        ``dbias`` needs ``return_dbias``, ``dsink`` ``return_dsink``.
    :returns: a :class:`SdpaGrads` (dq, dk, dv), with ``return_dbias`` a :class:`SdpaGradsWithBias` (+ dbias), with
        ``return_dsink`` a :class:`SdpaGradsWithSink` (+ dsink), with both a :class:`SdpaGradsWithBiasAndSink`.
    """
    if deprecated:
        ragged_offset_k = renamed("sdpa_backward", deprecated, _RENAMED, _accepted(sdpa_backward),
                                  {"ragged_offset_k": ragged_offset_k})["ragged_offset_k"]
    if dbias is not None and return_dbias is not True:
        warn("sdpa_backward(): dbias= without return_dbias=True is deprecated (the return type follows "
             "return_dbias): pass return_dbias=True")
        return_dbias = True
    return_dbias, return_dsink = bool_arg(return_dbias, "return_dbias"), bool_arg(return_dsink, "return_dsink")
    if dsink is not None and not return_dsink:
        raise InvalidValueError("sdpa_backward(): dsink= needs return_dsink=True")
    if not return_dsink:
        sink = None  # the statistics hold its share: only its gradient reads it
    outputs = {"dq": dq, "dk": dk, "dv": dv, **({"dbias": dbias} if return_dbias else {}),
               **({"dsink": dsink} if return_dsink else {})}
    values = locals()
    opts = SdpaOptions.of(options, {n: values[n] for n in _OPTIONS}, "sdpa_backward")
    args = SdpaArgs(handle, q, k, v, opts, **{n: values[n] for n in _TENSORS if not n.startswith("page")},
                    o=o, do=do, stats=stats)
    given = {n: None if x is None or (args.ragged and n in ("dq", "dk", "dv")) else device_tensor(x, n)[1]
             for n, x in outputs.items()}
    r = args.runner("sdpa_backward", bool_arg(autotune, "autotune"), given, (0, 1, 2) if args.ragged else (),
                    dbias=return_dbias, dsink=return_dsink, name="sdpa_bwd")
    outs = args.run(r, outputs)  # as the NamedTuple of the gradients asked for
    return {3: SdpaGrads, 5: SdpaGradsWithBiasAndSink}.get(len(outs), SdpaGradsWithSink if return_dsink else
                                                          SdpaGradsWithBias)(*outs)


# -- FP8 -----------------------------------------------------------------------------------------------------------
class SdpaFp8Outputs(NamedTuple):
    """What :func:`sdpa_fp8` returns."""
    o: DeviceArray              #: the output in q's FP8 type (the float32 result times ``scale_o``)
    stats: DeviceArray | None   #: the float32 softmax statistics (``return_stats=True``), else None
    amax_s: DeviceArray         #: (1, 1, 1, 1) float32: max |softmax probability| (before ``scale_s``)
    amax_o: DeviceArray         #: (1, 1, 1, 1) float32: max |o| before ``scale_o``


class SdpaFp8Grads(NamedTuple):
    """What :func:`sdpa_fp8_backward` returns: the FP8 gradients and the (1, 1, 1, 1) float32 max |.| of each
    before its scaling (``amax_dp``: of dS, the gradient of the scores)."""
    dq: DeviceArray
    dk: DeviceArray
    dv: DeviceArray
    amax_dq: DeviceArray
    amax_dk: DeviceArray
    amax_dv: DeviceArray
    amax_dp: DeviceArray


def _fp8_call(handle: Any, method: str, tensors: dict, scales: dict, outputs: dict, opts: SdpaOptions,
              autotune: bool, **builder: Any) -> list:
    """Run the FP8 attention graph of ``Graph.<method>``; returns the ``outputs`` (name -> array or None) in order."""
    args = SdpaArgs(handle, opts=opts, scales=scales, **tensors)
    given = {n: None if x is None else device_tensor(x, n)[1] for n, x in outputs.items()}
    return args.run(args.runner(method, autotune, given, **builder), outputs)


@prepared(inputs=("q", "k", "v", *FP8_FORWARD_SCALES), outputs=("o", "stats", "amax_s", "amax_o"), inplace=False)
def sdpa_fp8(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike,
             options: SdpaOptions | None = None, *, descale_q: Any, descale_k: Any, descale_v: Any, descale_s: Any,
             scale_s: Any, scale_o: Any, return_stats: bool = False, o: Any = None, stats: Any = None,
             amax_s: Any = None, amax_o: Any = None, autotune: bool = False, scale: float | None = None,
             causal: bool = False) -> SdpaFp8Outputs:
    """FP8 attention forward (Hopper and newer) through a cached plan, as :func:`sdpa`.

    Computes ``P = softmax(scale * descale_q * descale_k * q k^T)`` in float32, rounds ``P * scale_s`` to q's FP8
    type, and returns ``o = (P8 v) * descale_s * descale_v * scale_o`` in q's FP8 type, with the amax of P and of o
    before ``scale_o`` (what a delayed-scaling recipe feeds its next scales).

    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) device tensors of one FP8 type
        (float8_e4m3fn or float8_e5m2: ml_dtypes on DeviceArrays, or torch's), head dims multiples of 16 up to
        256 and packed; Hq a multiple of Hk and Hv.
    :param descale_q, descale_k, descale_v, descale_s, scale_s, scale_o: each a one-element float32 device tensor
        or a number > 0 (copied to the device once per configuration and value: the prepared call keeps it).
    :param options: an :class:`SdpaOptions` of ``scale`` (multiplies q k^T; default 1/sqrt(D)) and ``causal``
        (top-left causal mask, the only mask FP8 attention takes here), or those two as keywords.
    :param return_stats: also return the (B, Hq, Sq, 1) float32 statistics :func:`sdpa_fp8_backward` needs.
    :param o, stats, amax_s, amax_o: outputs to write (default: new arrays; o gets q's layout); ``stats`` implies
        ``return_stats``.
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: an :class:`SdpaFp8Outputs` (o, stats or None, amax_s, amax_o).
    """
    return_stats = bool_arg(return_stats, "return_stats") or stats is not None
    given = {"o": o, **({"stats": stats} if return_stats else {}), "amax_s": amax_s, "amax_o": amax_o}
    opts = fp8_only("sdpa_fp8", SdpaOptions.of(options, {"scale": scale, "causal": causal}, "sdpa_fp8"))

    scales = dict(zip(FP8_FORWARD_SCALES, (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o)))
    outs = _fp8_call(handle, "sdpa_fp8", {"q": q, "k": k, "v": v}, scales, given, opts, bool_arg(autotune, "autotune"),
                     return_stats=return_stats)
    if not return_stats:
        outs.insert(1, None)
    return SdpaFp8Outputs(*outs)


@prepared(inputs=("q", "k", "v", "o", "do", "stats", *FP8_BACKWARD_SCALES),
          outputs=("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp"), inplace=False)
def sdpa_fp8_backward(handle: Handle, q: DeviceArrayLike, k: DeviceArrayLike, v: DeviceArrayLike, o: DeviceArrayLike,
                      do: DeviceArrayLike, stats: DeviceArrayLike, options: SdpaOptions | None = None, *,
                      descale_q: Any, descale_k: Any, descale_v: Any, descale_o: Any, descale_do: Any,
                      descale_s: Any, descale_dp: Any, scale_s: Any, scale_dq: Any, scale_dk: Any, scale_dv: Any,
                      scale_dp: Any, dq: Any = None, dk: Any = None, dv: Any = None, amax_dq: Any = None,
                      amax_dk: Any = None, amax_dv: Any = None, amax_dp: Any = None, autotune: bool = False,
                      scale: float | None = None, causal: bool = False) -> SdpaFp8Grads:
    """FP8 attention backward (Hopper: head dim 128) through a cached plan: the gradients of :func:`sdpa_fp8`.

    :param q, k, v, o, stats: the forward's FP8 inputs, its FP8 output and its float32 statistics
        (``return_stats=True``).
    :param do: the output gradient (o's shape, either FP8 type).
    :param descale_q, descale_k, descale_v, descale_o, descale_do: the inverse scales of the FP8 inputs.
    :param descale_s, scale_s: the forward's probability scale and its inverse.
    :param scale_dp, descale_dp: the scale of dS (rounded to do's FP8 type inside the kernel) and its inverse.
    :param scale_dq, scale_dk, scale_dv: the scales of the FP8 results. Each scale is a one-element float32 device
        tensor or a number > 0 (copied to the device once per configuration and value).
    :param options: as in the forward (``scale`` and ``causal``, or those two as keywords).
    :param dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp: outputs to write (default: new arrays; dq, dk, dv in the
        layouts of q, k, v and q's FP8 type).
    :param autotune: on the first call of a configuration, time every plan and keep the fastest.
    :returns: an :class:`SdpaFp8Grads` (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp).
    """
    given = dict(dq=dq, dk=dk, dv=dv, amax_dq=amax_dq, amax_dk=amax_dk, amax_dv=amax_dv, amax_dp=amax_dp)
    opts = fp8_only("sdpa_fp8_backward", SdpaOptions.of(options, dict(scale=scale, causal=causal), "sdpa_fp8_backward"))
    scales = dict(zip(FP8_BACKWARD_SCALES, (descale_q, descale_k, descale_v, descale_o, descale_do, descale_s,
                                         descale_dp, scale_s, scale_dq, scale_dk, scale_dv, scale_dp)))
    tensors = {"q": q, "k": k, "v": v, "o": o, "do": do, "stats": stats}
    return SdpaFp8Grads(*_fp8_call(handle, "sdpa_fp8_backward", tensors, scales, given, opts,
                                   bool_arg(autotune, "autotune")))
