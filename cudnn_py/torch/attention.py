"""Attention as torch custom ops: ``cudnn_py::sdpa_fwd`` and ``sdpa_bwd`` (its autograd formula), and
``sdpa_paged_fwd`` (a paged KV cache; inference only), running :func:`cudnn_py.sdpa` and
:func:`cudnn_py.sdpa_backward` with outputs from torch's allocator. :func:`sdpa` takes cuDNN's options,
:func:`scaled_dot_product_attention` torch's signature; a plain eager call needing no gradient skips the op. Tensors
are logical (B, H, S, D) with the head dim packed, any other strides (packed batches: (T, H, D)); o gets q's layout,
dq/dk/dv those of q/k/v.
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Optional

import torch
from torch import Tensor

from cudnn_py.calls.prepared import MISS
from cudnn_py.core.args import bool_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph.ops.sdpa_options import SdpaOptions, renamed, unexpected_keyword
from cudnn_py.ops.sdpa import sdpa as core_sdpa, sdpa_backward as core_sdpa_backward

from .runtime import call, context, define, eager, empty_like_layout, function, replay

__all__ = ["sdpa", "scaled_dot_product_attention", "sdpa_fwd", "sdpa_bwd", "sdpa_paged_fwd"]

_is_compiling = torch.compiler.is_compiling
_any_requires_grad = torch._C._any_requires_grad

_IO_DTYPES = (torch.float16, torch.bfloat16)
#: the forward's optional tensors in binding order (after q, k, v), by the graph builder's names
_FWD_NAMES = ("bias", "seq_len_q", "seq_len_kv", "ragged_offset_q", "ragged_offset_k", "seed", "offset", "sink")
_N_TENSORS = 3 + len(_FWD_NAMES)  # the forward's tensor arguments


def _fwd_outputs(q: Tensor, v: Tensor, seq_len_q: Optional[Tensor], ragged_offset_q: Optional[Tensor],
                 max_seq_len_q: Optional[int], return_stats: bool, **_: Any) -> tuple[Tensor, Tensor]:
    """(o in q's layout, zero-filled under a padding mask; float32 stats (B, Hq, Sq, 1), (0,) without them)."""
    zero = seq_len_q is not None and ragged_offset_q is None
    if ragged_offset_q is not None:
        b, sq = ragged_offset_q.shape[0] - 1, max_seq_len_q or 0
        o = torch.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=q.dtype, device=q.device)
    else:
        b, sq = q.shape[0], q.shape[2]
        o = empty_like_layout(q, (b, q.shape[1], sq, v.shape[3]), zero=zero)
    stats = (b, q.shape[1], sq, 1) if return_stats else (0,)
    return o, (torch.zeros if zero and return_stats else torch.empty)(stats, dtype=torch.float32, device=q.device)


def _keywords(bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_k, seed, offset, sink, scale, causal,
              bottom_right, left_bound, right_bound, alibi, dropout, max_seq_len_q, max_seq_len_kv) -> dict:
    """The ops' optional tensors (those given) and options as :func:`cudnn_py.sdpa`'s keywords."""
    tensors = (bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_k, seed, offset, sink)
    return dict({n: t for n, t in zip(_FWD_NAMES, tensors) if t is not None}, scale=scale, causal=causal,
                diagonal_alignment="bottom_right" if bottom_right else "top_left", left_bound=left_bound,
                right_bound=right_bound, alibi=alibi, dropout=dropout, max_seq_len_q=max_seq_len_q,
                max_seq_len_kv=max_seq_len_kv)


def _sdpa_fwd(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], seq_len_q: Optional[Tensor],
             seq_len_kv: Optional[Tensor], ragged_offset_q: Optional[Tensor], ragged_offset_k: Optional[Tensor],
             seed: Optional[Tensor], offset: Optional[Tensor], sink: Optional[Tensor], scale: float, causal: bool,
             bottom_right: bool, left_bound: Optional[int], right_bound: Optional[int], alibi: bool, dropout: float,
             max_seq_len_q: Optional[int], max_seq_len_kv: Optional[int],
             return_stats: bool = True) -> tuple[Tensor, Tensor]:
    """Attention forward: (o, stats (the backward needs them)). See :func:`sdpa`."""
    o, stats = _fwd_outputs(q, v, seq_len_q, ragged_offset_q, max_seq_len_q, return_stats)
    kw = _keywords(bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_k, seed, offset, sink, scale, causal,
                   bottom_right, left_bound, right_bound, alibi, dropout, max_seq_len_q, max_seq_len_kv)
    if return_stats:
        kw.update(stats=stats, return_stats=True)
    context(q.get_device()).run(core_sdpa, q, k, v, o=o, **kw)
    return o, stats


def _grads(q, k, v, bias, sink, seq_len_q, ragged_offset_q, want_dbias: bool, want_dsink: bool,
           **_: Any) -> list[Tensor]:
    """[dq, dk, dv] (zero-filled under a padding mask), then dbias and dsink where wanted."""
    if ragged_offset_q is not None:
        grads = [torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
    else:
        grads = [empty_like_layout(x, x.shape, zero=seq_len_q is not None) for x in (q, k, v)]
    for x, want in ((bias, want_dbias), (sink, want_dsink)):
        if want:
            grads.append(torch.empty_like(x, memory_format=torch.contiguous_format))
    return grads


def _sdpa_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, stats: Tensor, bias: Optional[Tensor],
             seq_len_q: Optional[Tensor], seq_len_kv: Optional[Tensor], ragged_offset_q: Optional[Tensor],
             ragged_offset_k: Optional[Tensor], seed: Optional[Tensor], offset: Optional[Tensor],
             sink: Optional[Tensor], scale: float, causal: bool, bottom_right: bool, left_bound: Optional[int],
             right_bound: Optional[int], alibi: bool, dropout: float, max_seq_len_q: Optional[int],
             max_seq_len_kv: Optional[int], want_dbias: bool,
             want_dsink: bool) -> list[Tensor]:
    """Attention backward: :func:`_grads` (``sink`` is read only for dsink: the statistics include it)."""
    if not want_dsink:
        sink = None
    grads = _grads(q, k, v, bias, sink, seq_len_q, ragged_offset_q, want_dbias, want_dsink)
    kw = _keywords(bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_k, seed, offset, sink, scale, causal,
                   bottom_right, left_bound, right_bound, alibi, dropout, max_seq_len_q, max_seq_len_kv)
    names = ("dq", "dk", "dv") + ("dbias",) * want_dbias + ("dsink",) * want_dsink
    context(q.get_device()).run(core_sdpa_backward, q, k, v, o, do, stats, return_dbias=want_dbias,
                                return_dsink=want_dsink, **dict(zip(names, grads)), **kw)
    return grads


sdpa_bwd = define("sdpa_bwd", _sdpa_bwd, _grads)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:_N_TENSORS], *output)
    ctx.opts = inputs[_N_TENSORS:_N_TENSORS + 9]  # without return_stats


def _backward(ctx, do, dstats):
    q, k, v, bias, slq, slkv, roq, rok, seed, offset, sink, o, stats = ctx.saved_tensors
    if stats.numel() == 0:
        raise InvalidValueError("cudnn_py::sdpa_fwd ran with return_stats=False, so it has no backward")
    want_dbias = bias is not None and ctx.needs_input_grad[3]
    want_dsink = sink is not None and ctx.needs_input_grad[10]
    if do.stride(-1) != 1 or 0 in do.stride() or (roq is not None and not do.is_contiguous()):
        do = do.contiguous()
    bwd = _sdpa_bwd if eager(q) else sdpa_bwd
    dq, dk, dv, *more = bwd(do, q, k, v, o, stats, bias, slq, slkv, roq, rok, seed, offset, sink, *ctx.opts,
                            want_dbias, want_dsink)
    db = more.pop(0) if want_dbias else None
    ds = more.pop(0) if want_dsink else None
    return (dq, dk, dv, db) + (None,) * 6 + (ds,) + (None,) * (len(ctx.opts) + 1)


sdpa_fwd = define("sdpa_fwd", _sdpa_fwd, _fwd_outputs, _setup, _backward)
_SdpaFunction = function("_SdpaFunction", _sdpa_fwd, _setup, _backward)


# -- paged KV cache (inference: cuDNN has no paged backward) -------------------------------------------------------
def _paged_output(q: Tensor, v_cache: Tensor, **_: Any) -> Tensor:
    return empty_like_layout(q, (*q.shape[:3], v_cache.shape[3]), zero=True)


def _sdpa_paged_fwd(q: Tensor, k_cache: Tensor, v_cache: Tensor, page_table_k: Tensor, page_table_v: Tensor,
                    seq_len_q: Tensor, seq_len_kv: Tensor, bias: Optional[Tensor], scale: float, causal: bool,
                    bottom_right: bool, left_bound: Optional[int], right_bound: Optional[int], alibi: bool,
                    max_seq_len_kv: int) -> Tensor:
    """Attention over a paged KV cache: o (B, Hq, Sq, Dv), rows beyond ``seq_len_q`` zero. See :func:`sdpa`."""
    o = _paged_output(q, v_cache)
    kw = _keywords(bias, seq_len_q, seq_len_kv, None, None, None, None, None, scale, causal, bottom_right, left_bound,
                   right_bound, alibi, 0.0, None, max_seq_len_kv)
    context(q.get_device()).run(core_sdpa, q, k_cache, v_cache, page_table_k=page_table_k, page_table_v=page_table_v,
                                o=o, **kw)
    return o


sdpa_paged_fwd = define("sdpa_paged_fwd", _sdpa_paged_fwd, _paged_output)


# -- the Python face -----------------------------------------------------------------------------------------------
def _check_qkv(q, k, v, packed: bool) -> None:
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(x, Tensor):
            raise InvalidTypeError(f"{n} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _IO_DTYPES or not x.is_cuda:
            raise InvalidTypeError(f"{n} must be a float16 or bfloat16 CUDA tensor, got {x.dtype} on {x.device}")
        if x.dim() != (3 if packed else 4):
            raise InvalidValueError(f"{n} must be {'(T, H, D) with cu_seqlens' if packed else '(B, H, S, D)'}, got "
                                    f"shape {tuple(x.shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise InvalidTypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise InvalidValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")


def _as_they_are(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether cuDNN takes q, k, v as they are: float16/bfloat16 of one dtype on one CUDA device, 4-D, the head dim
    packed, nothing broadcast."""
    dev, dt, qs, ks, vs = q.get_device(), q.dtype, q.stride(), k.stride(), v.stride()
    return (dev >= 0 and dt in _IO_DTYPES and k.dtype is dt and v.dtype is dt and k.get_device() == v.get_device()
            == dev and len(qs) == len(ks) == len(vs) == 4 and qs[3] == ks[3] == vs[3] == 1 and 0 not in qs
            and 0 not in ks and 0 not in vs)


def _head_packed(x: Tensor) -> Tensor:
    """``x`` where its head dim is packed and no dim is broadcast (stride 0), else a packed copy."""
    st = x.stride()
    return x if st[-1] == 1 and 0 not in st else x.contiguous()


def _per_batch(x, name: str) -> Tensor:
    if not isinstance(x, Tensor) or not x.is_cuda or x.dtype != torch.int32:
        raise InvalidTypeError(f"{name} must be an int32 CUDA tensor of per-batch lengths")
    return x.reshape(-1).contiguous()


def _page_table(x, name: str, b: int) -> Tensor:
    if not isinstance(x, Tensor) or not x.is_cuda or x.dtype != torch.int32 or x.dim() not in (2, 4):
        raise InvalidTypeError(f"{name} must be a (B, pages) or (B, 1, pages, 1) int32 CUDA tensor")
    if x.shape[0] != b or (x.dim() == 4 and (x.shape[1] != 1 or x.shape[3] != 1)):
        raise InvalidValueError(f"{name} must be (B={b}, pages) or (B, 1, pages, 1), got {tuple(x.shape)}")
    return x.contiguous().reshape(b, 1, -1, 1)


def sdpa(q: Tensor, k: Tensor, v: Tensor, *, scale: float | None = None, causal: bool = False,
         diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
         bias: Tensor | None = None, seq_len_q: Tensor | None = None, seq_len_kv: Tensor | None = None,
         cu_seqlens_q: Tensor | None = None, cu_seqlens_kv: Tensor | None = None,
         ragged_offset_q: Tensor | None = None, ragged_offset_k: Tensor | None = None,
         max_seq_len_q: int | None = None, max_seq_len_kv: int | None = None, page_table_k: Tensor | None = None,
         page_table_v: Tensor | None = None, alibi: bool = False, dropout: float = 0.0, seed: Tensor | None = None,
         offset: Tensor | None = None, sink: Tensor | None = None, return_stats: bool = False, **old: Any):
    """Fused attention ``softmax(mask(scale * q k^T + bias)) v`` on torch tensors, differentiable in q, k, v,
    ``bias`` and ``sink`` (except over a paged KV cache).

    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 CUDA tensors (Hq a multiple
        of Hk and Hv); packed batches: (T_q, Hq, D), (T_kv, Hk, D), (T_kv, Hv, D); a paged KV cache: k and v are
        the caches (blocks, Hk, block_size, D) and (blocks, Hv, block_size, Dv).
    :param scale: default 1/sqrt(D).
    :param causal: query i sees keys <= i (relative to the aligned diagonal).
    :param diagonal_alignment: 'top_left' or 'bottom_right' (the diagonal ends at the last key).
    :param left_bound, right_bound: sliding window: keys in (i - left_bound, i + right_bound].
    :param bias: additive (B or 1, Hq or 1, Sq, Skv) tensor of q's dtype; gets a gradient when it requires one.
    :param seq_len_q, seq_len_kv: (B,) int32 lengths: padding mask on padded tensors (rows beyond are zero).
    :param cu_seqlens_q, cu_seqlens_kv: packed batches, FlashAttention's way: (B + 1,) int32 cumulative token
        counts (``[0, l0, l0 + l1, ...]``); need ``max_seq_len_q``/``max_seq_len_kv``; o is (T_q, Hq, Dv).
    :param ragged_offset_q, ragged_offset_k: packed batches by (B + 1,) int32/int64 element offsets of each
        sequence in q (and o) and k (and v), with ``seq_len_q``/``seq_len_kv``. Packed batches need Dv == D, Hv == Hk.
    :param max_seq_len_q, max_seq_len_kv: the longest sequences of a packed batch (``max_seq_len_kv``: the longest
        cached sequence of a paged cache).
    :param page_table_k, page_table_v: a paged KV cache: (B, pages) or (B, 1, pages, 1) int32 CUDA tensors of each
        sequence's block indices, with ``seq_len_q``/``seq_len_kv`` and ``max_seq_len_kv``.
    :param alibi: the standard ALiBi slopes (needs causal).
    :param dropout: drop probability of the attention weights; the Philox ``seed``/``offset`` ((1,) int64 CUDA
        tensors) default to a seed drawn from torch's generator.
    :param sink: attention sinks (gpt-oss): (Hq,) or (1, Hq, 1, 1) float32 CUDA tensor of per-head logits, one more
        column of each row's softmax that weighs no value; gets a gradient when it requires one. cuDNN 9.13+;
        refused with one query row, dropout, packed batches and paged KV caches.
    :param return_stats: also return the (B, Hq, Sq, 1) float32 log-sum-exp statistics.
    :returns: o, or (o, stats). ``dropout_p=`` is the deprecated spelling of ``dropout``.
    """
    if old:
        dropout = renamed("sdpa", old, _RENAMED, _PARAMS, {"dropout": dropout or None})["dropout"] or 0.0
    if (bias is seq_len_q is seq_len_kv is cu_seqlens_q is cu_seqlens_kv is ragged_offset_q is ragged_offset_k
            is max_seq_len_q is max_seq_len_kv is page_table_k is page_table_v is seed is offset is sink is None
            and not dropout and alibi is False and type(q) is Tensor and type(k) is Tensor and type(v) is Tensor
            and not _is_compiling() and not _any_requires_grad(q, k, v)):
        # the hot path (eager, no tensor needing a gradient): the options given go to cudnn_py.sdpa unchecked (its
        # prepared call's key holds each, and a new key checks them)
        kw: dict[str, Any] = {} if scale is None else {"scale": scale}
        if causal is not False:
            kw["causal"] = causal
        if left_bound is not None or right_bound is not None or diagonal_alignment != "top_left":
            kw.update(diagonal_alignment=diagonal_alignment, left_bound=left_bound, right_bound=right_bound)
        if return_stats:
            kw["return_stats"] = True
        got = replay(core_sdpa, (q, k, v), kw)  # where this is the last call's signature, checked below then
        if got is MISS and _as_they_are(q, k, v):
            got = context(q.get_device()).run(core_sdpa, q, k, v, **kw)
        if got is not MISS:
            return tuple(got) if return_stats else got  # (o, stats) from an SdpaOutputs
    return _checked(q, k, v, scale, causal, diagonal_alignment, left_bound, right_bound, bias, seq_len_q,
                    seq_len_kv, cu_seqlens_q, cu_seqlens_kv, ragged_offset_q, ragged_offset_k, max_seq_len_q,
                    max_seq_len_kv, page_table_k, page_table_v, alibi, dropout, seed, offset, sink, return_stats)


#: the deprecated keywords of :func:`sdpa` -> their names now; its parameters (for a did-you-mean)
_RENAMED = {"dropout_p": "dropout"}
_PARAMS = tuple(inspect.signature(sdpa).parameters)[:-1]


def _checked(q, k, v, scale, causal, diagonal_alignment, left_bound, right_bound, bias, seq_len_q,
             seq_len_kv, cu_seqlens_q, cu_seqlens_kv, ragged_offset_q, ragged_offset_k, max_seq_len_q, max_seq_len_kv,
             page_table_k, page_table_v, alibi, dropout, seed, offset, sink, return_stats):
    """:func:`sdpa` with every argument checked."""
    packed = cu_seqlens_q is not None or ragged_offset_q is not None
    _check_qkv(q, k, v, packed)
    opt = SdpaOptions(scale=scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]), causal=causal,
                      diagonal_alignment=diagonal_alignment, left_bound=left_bound, right_bound=right_bound,
                      alibi=bool_arg(alibi, "alibi"), dropout=dropout, max_seq_len_q=max_seq_len_q,
                      max_seq_len_kv=max_seq_len_kv)  # checks and normalises the options
    s, causal, bottom_right, alibi = opt.scale, opt.causal, opt.diagonal_alignment == "bottom_right", opt.alibi
    left_bound, right_bound, dropout = opt.left_bound, opt.right_bound, opt.dropout
    max_seq_len_q, max_seq_len_kv = opt.max_seq_len_q, opt.max_seq_len_kv
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.dtype != q.dtype or bias.dim() != 4:
            raise InvalidTypeError(f"bias must be a 4-D tensor of q's dtype {q.dtype}")
        bias = _head_packed(bias)
    if sink is not None:
        if not isinstance(sink, Tensor) or sink.dtype != torch.float32 or not sink.is_cuda:
            raise InvalidTypeError("sink must be a float32 CUDA tensor of per-head logits")
        if sink.numel() != q.shape[1] or sink.dim() not in (1, 4):
            raise InvalidValueError(f"sink must be (Hq,) or (1, Hq, 1, 1) with Hq = {q.shape[1]}, got "
                                    f"{tuple(sink.shape)}")
        if packed or dropout or page_table_k is not None or page_table_v is not None:
            raise InvalidValueError("an attention sink with packed batches, dropout or a paged KV cache is not "
                                    "verified in cudnn-py")
        sink = sink.reshape(1, -1, 1, 1).contiguous()
    need = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, bias, sink))
    if page_table_k is not None or page_table_v is not None:  # k and v are the caches
        if packed or dropout or max_seq_len_q is not None or return_stats:
            raise InvalidValueError("a paged KV cache takes no packed batches, dropout, max_seq_len_q or return_stats "
                                    "(it has no backward)")
        if page_table_k is None or page_table_v is None or seq_len_q is None or seq_len_kv is None:
            raise InvalidValueError("a paged KV cache needs page_table_k, page_table_v, seq_len_q and seq_len_kv")
        if max_seq_len_kv is None:
            raise InvalidValueError("a paged KV cache needs max_seq_len_kv= (the longest cached sequence)")
        if need:
            raise InvalidValueError("attention over a paged KV cache has no backward in cuDNN (inference only): run "
                                    "it under torch.no_grad() or torch.inference_mode(), or detach the inputs")
        b = q.shape[0]
        args = (_head_packed(q), _head_packed(k), _head_packed(v), _page_table(page_table_k, "page_table_k", b),
                _page_table(page_table_v, "page_table_v", b), _per_batch(seq_len_q, "seq_len_q"),
                _per_batch(seq_len_kv, "seq_len_kv"), bias, s, causal, bottom_right, left_bound, right_bound, alibi,
                max_seq_len_kv)
        return call(sdpa_paged_fwd, _sdpa_paged_fwd, None, args, ())
    if packed:
        if max_seq_len_q is None or max_seq_len_kv is None:
            raise InvalidValueError("packed batches need max_seq_len_q= and max_seq_len_kv= (the longest sequences)")
        if v.shape[2] != q.shape[2] or v.shape[1] != k.shape[1] or v.shape[2] != k.shape[2]:
            raise InvalidValueError(f"packed batches share q's offsets with o and k's with v, so they need Dv == D and "
                                    f"Hv == Hk; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if cu_seqlens_q is not None:
            if cu_seqlens_kv is None or ragged_offset_q is not None or ragged_offset_k is not None:
                raise InvalidValueError("give cu_seqlens_q and cu_seqlens_kv, or ragged offsets with seq_len_q/kv")
            cq, ckv = _per_batch(cu_seqlens_q, "cu_seqlens_q"), _per_batch(cu_seqlens_kv, "cu_seqlens_kv")
            seq_len_q, seq_len_kv = cq[1:] - cq[:-1], ckv[1:] - ckv[:-1]
            wide = max(q.numel(), k.numel(), v.numel()) >= 2 ** 31
            ragged_offset_q = (cq.to(torch.int64) if wide else cq) * (q.shape[1] * q.shape[2])
            ragged_offset_k = (ckv.to(torch.int64) if wide else ckv) * (k.shape[1] * k.shape[2])
        elif ragged_offset_k is None or seq_len_q is None or seq_len_kv is None:
            raise InvalidValueError("ragged offsets need both ragged_offset_q and ragged_offset_k and "
                                    "seq_len_q/seq_len_kv")
    elif cu_seqlens_kv is not None or ragged_offset_k is not None:
        raise InvalidValueError("cu_seqlens_kv / ragged_offset_k need their q counterparts")
    elif max_seq_len_q is not None or max_seq_len_kv is not None:
        raise InvalidValueError("max_seq_len_q/max_seq_len_kv are for packed batches and paged KV caches")
    else:
        q, k, v = _head_packed(q), _head_packed(k), _head_packed(v)
    if seq_len_q is not None or seq_len_kv is not None:
        if seq_len_q is None or seq_len_kv is None:
            raise InvalidValueError("a padding mask needs both seq_len_q and seq_len_kv")
        seq_len_q, seq_len_kv = _per_batch(seq_len_q, "seq_len_q"), _per_batch(seq_len_kv, "seq_len_kv")
    if dropout:
        if seed is None:
            seed = torch.randint(0, 2 ** 62, (1,), dtype=torch.int64, device=q.device)
        if offset is None:
            offset = torch.zeros((1,), dtype=torch.int64, device=q.device)
    elif seed is not None or offset is not None:
        seed = offset = None
    args = (q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_k, seed, offset, sink, s, causal,
            bottom_right, left_bound, right_bound, alibi, dropout, max_seq_len_q, max_seq_len_kv)
    o, stats = call(sdpa_fwd, _sdpa_fwd, _SdpaFunction, args + (bool(return_stats or need),), (q, k, v, bias, sink))
    return (o, stats) if return_stats else o


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, **unknown: Any) -> Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` on cuDNN for what it can express: float16/bfloat16 CUDA
    tensors of 3 or 4 dims, a boolean or additive ``attn_mask`` broadcastable to (B or 1, H or 1, L, S) (an additive
    one gets a gradient), top-left ``is_causal``, ``enable_gqa``. Anything else raises ``InvalidValueError`` (or
    ``InvalidTypeError``) saying what; an unknown keyword, with a did-you-mean."""
    if unknown:
        raise unexpected_keyword("scaled_dot_product_attention", next(iter(unknown)), _SDPA_PARAMS)
    if not (isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor)):
        _check_qkv(query, key, value, False)  # says which is not a tensor
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    if not enable_gqa and key.dim() > 1 and query.dim() > 1 and key.shape[1] != query.shape[1]:
        raise InvalidValueError(f"query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True")
    bias = None
    if attn_mask is not None:
        if is_causal:
            raise InvalidValueError("attn_mask and is_causal together are refused (as torch does)")
        if attn_mask.dim() > 4:
            raise InvalidValueError(f"attn_mask must have at most 4 dims, got {attn_mask.dim()}")
        if attn_mask.dtype == torch.bool:
            bias = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~attn_mask, float("-inf"))
        elif attn_mask.dtype == query.dtype:
            bias = attn_mask
        else:
            raise InvalidTypeError(f"attn_mask must be bool or {query.dtype}, got {attn_mask.dtype}")
        bias = bias[(None,) * (4 - bias.dim())]
        b, h, lq, lk = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
        if bias.shape[2:] != (lq, lk) or bias.shape[0] not in (1, b) or bias.shape[1] not in (1, h):
            bias = bias.expand(bias.shape[0] if bias.shape[0] in (1, b) else b,
                               bias.shape[1] if bias.shape[1] in (1, h) else h, lq, lk)
    o = sdpa(query, key, value, scale=scale, causal=is_causal, bias=bias, dropout=dropout_p)
    return o.squeeze(0) if squeeze else o


_SDPA_PARAMS = tuple(inspect.signature(scaled_dot_product_attention).parameters)[:-1]
