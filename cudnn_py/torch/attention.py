"""Attention as torch custom ops: ``cudnn_py::sdpa_fwd`` and ``cudnn_py::sdpa_bwd``, with autograd.

:func:`sdpa` takes every option of :func:`cudnn_py.sdpa` that maps to tensors and numbers (scale, top-left and
bottom-right causal masks, sliding windows, an additive bias and its gradient, per-batch lengths, packed batches by
FlashAttention-style ``cu_seqlens`` or element offsets, ALiBi, dropout); :func:`scaled_dot_product_attention` has
``torch.nn.functional.scaled_dot_product_attention``'s signature. Both reach the ops through
:func:`~cudnn_py.torch.runtime.call` (eagerly their implementations directly, traced the registered ops), so they
run eagerly, under autograd, under ``torch.compile(fullgraph=True)`` and in CUDA graphs, on torch's current stream.

Tensors are logical (B, H, S, D) with the head dim packed (stride 1), any other strides (BHSD, BSHD as
``x.transpose(1, 2)``, slices of one QKV buffer); o gets q's layout, dq/dk/dv those of q/k/v. Packed batches are
(T, H, D). With a padding mask (``seq_len_q``/``seq_len_kv`` on padded tensors) the rows and gradients outside
the sequences are zero.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.graph import Graph

from .runtime import Prepared, call, context, dtype_name, eager, empty_like_layout, function, prepared

__all__ = ["sdpa", "scaled_dot_product_attention", "sdpa_fwd", "sdpa_bwd"]

_IO_DTYPES = (torch.float16, torch.bfloat16)
_N_TENSORS = 10  # q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed, offset


def _outputs(q: Tensor, v: Tensor, ragged_offset_q: Optional[Tensor], max_seq_len_q: Optional[int],
             zero: bool) -> tuple[Tensor, Tensor]:
    if ragged_offset_q is not None:
        b, hq = ragged_offset_q.shape[0] - 1, q.shape[1]
        o = torch.empty((q.shape[0], hq, v.shape[2]), dtype=q.dtype, device=q.device)
        return o, torch.empty((b, hq, max_seq_len_q, 1), dtype=torch.float32, device=q.device)
    b, hq, sq, _ = q.shape
    o = empty_like_layout(q, (b, hq, sq, v.shape[3]), zero=zero)
    return o, torch.zeros((b, hq, sq, 1), dtype=torch.float32, device=q.device) if zero else torch.empty(
        (b, hq, sq, 1), dtype=torch.float32, device=q.device)


def _meta(t: Optional[Tensor]):
    return None if t is None else (t.shape, t.stride(), t.dtype)


_NONE = (None,) * _N_TENSORS


def _signature(what: str, opts: tuple, args: tuple, n: int) -> tuple[tuple, tuple]:
    """(cache key, data pointers) of a call: ``args`` are ``n`` tensors then optional ones (mostly all None)."""
    head, extra = args[:n], args[n:]
    key = (what, opts, *[(t.shape, t.stride(), t.dtype) for t in head])
    ptrs = tuple([t.data_ptr() for t in head])
    if extra == _NONE[:len(extra)]:
        return key, ptrs
    return key + tuple(map(_meta, extra)), ptrs + tuple([t.data_ptr() for t in extra if t is not None])


class _Layout:
    """How the call's tensors are described to the graph: as they are, or (packed batches) as logical (B, H,
    S_max, D) views with token-major strides over the (T, H, D) memory."""

    def __init__(self, ragged: Optional[Tensor], max_q: Optional[int], max_kv: Optional[int]):
        self.b = -1 if ragged is None else ragged.shape[0] - 1   # -1: not packed
        self.max = {"q": max_q or 0, "kv": max_kv or 0}

    def tensor(self, g: Graph, t: Tensor, name: str, side: str | None = None):
        if side is not None and self.b >= 0:
            s = self.max[side]
            t_st, h_st, _ = t.stride()
            shape, strides = (self.b, t.shape[1], s, t.shape[2]), (s * t_st, h_st, t_st, 1)
        elif t.dim() == 1:  # per-batch vectors and Philox state: (N, 1, 1, 1)
            shape, strides = (t.shape[0], 1, 1, 1), (1, 1, 1, 1)
        else:
            shape, strides = tuple(t.shape), tuple(t.stride())
        return g.tensor(shape, dtype=dtype_name(t.dtype), strides=strides, name=name)


def _extras(g: Graph, lay: _Layout, args, hq: int, alibi: bool, device) -> tuple[dict, list, list]:
    """Graph kwargs, tensors (in call order) and constants for the optional inputs."""
    kw, tensors, consts = {}, [], []
    names = ("bias", "seq_len_q", "seq_len_kv", "ragged_offset_q", "ragged_offset_kv", "seed", "offset")
    for a, n in zip(args, names):
        if a is None:
            continue
        t = lay.tensor(g, a, n)
        tensors.append(t)
        if n == "ragged_offset_q":
            kw["ragged_offset_q"] = kw["ragged_offset_o"] = t
        elif n == "ragged_offset_kv":
            kw["ragged_offset_k"] = kw["ragged_offset_v"] = t
        else:
            kw[n] = t
    if alibi:  # cudnn-py device memory, outside torch's allocator and any CUDA-graph pool, copied on torch's stream
        from cudnn_py.memory import to_device
        from cudnn_py.ops.sdpa import alibi_slopes
        slopes = to_device(alibi_slopes(hq).reshape(1, hq, 1, 1), torch.cuda.current_stream(device).cuda_stream,
                           device=device.index)
        kw["alibi"] = g.tensor((1, hq, 1, 1), dtype="float32", name="alibi_slopes")
        consts.append((kw["alibi"], slopes))
    return kw, tensors, consts


def _options(scale, causal, bottom_right, left_bound, right_bound, dropout_p) -> dict:
    return dict(scale=scale, causal=causal, diagonal_alignment="bottom_right" if bottom_right else "top_left",
                left_bound=left_bound, right_bound=right_bound, dropout=dropout_p)


def _set_output(t, like: Tensor, lay: _Layout, side: str | None, name: str):
    """Make graph output ``t`` describe the torch tensor ``like`` (its strides; packed: its logical view)."""
    if side is not None and lay.b >= 0:
        s = lay.max[side]
        t_st, h_st, _ = like.stride()
        t.strides = (s * t_st, h_st, t_st, 1)
    else:
        t.strides = tuple(like.stride())
    return t.set_output(True).set_name(name)


def _build_fwd(h, args, o, stats, opts) -> Prepared:
    q, k, v = args[:3]
    scale, causal, bottom_right, lb, rb, alibi, p, msq, mskv = opts
    lay = _Layout(args[6], msq, mskv)
    g = Graph(io_dtype=dtype_name(q.dtype), compute_dtype="float32", intermediate_dtype="float32",
              name="torch.sdpa_fwd")
    tq, tk, tv = lay.tensor(g, q, "q", "q"), lay.tensor(g, k, "k", "kv"), lay.tensor(g, v, "v", "kv")
    kw, extra, consts = _extras(g, lay, args[3:], q.shape[1], alibi, q.device)
    to, ts = g.sdpa(tq, tk, tv, return_stats=True, **kw, **_options(scale, causal, bottom_right, lb, rb, p))
    outs = [_set_output(to, o, lay, "q", "o"), _set_output(ts, stats, lay, None, "stats")]
    g.build(h)
    return Prepared(h, g, [tq, tk, tv] + extra + outs, consts)


def _sdpa_fwd(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], seq_len_q: Optional[Tensor],
             seq_len_kv: Optional[Tensor], ragged_offset_q: Optional[Tensor], ragged_offset_kv: Optional[Tensor],
             seed: Optional[Tensor], offset: Optional[Tensor], scale: float, causal: bool, bottom_right: bool,
             left_bound: Optional[int], right_bound: Optional[int], alibi: bool, dropout_p: float,
             max_seq_len_q: Optional[int], max_seq_len_kv: Optional[int]) -> tuple[Tensor, Tensor]:
    """Attention forward: (o, the float32 log-sum-exp statistics (B, Hq, Sq, 1)). See :func:`sdpa`."""
    args = (q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed, offset)
    o, stats = _outputs(q, v, ragged_offset_q, max_seq_len_q, seq_len_q is not None and ragged_offset_q is None)
    opts = (scale, causal, bottom_right, left_bound, right_bound, alibi, dropout_p, max_seq_len_q, max_seq_len_kv)
    ctx = context(q.get_device())
    h = ctx.handle
    key, ptrs = _signature("sdpa_fwd", opts, args, 3)
    p = prepared(h, key, lambda: _build_fwd(h, args, o, stats, opts))
    p.run(ctx, ptrs + (o.data_ptr(), stats.data_ptr()))
    return o, stats


sdpa_fwd = torch.library.custom_op("cudnn_py::sdpa_fwd", _sdpa_fwd, mutates_args=(), device_types="cuda")


@sdpa_fwd.register_fake
def _(q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed, offset, scale, causal,
      bottom_right, left_bound, right_bound, alibi, dropout_p, max_seq_len_q, max_seq_len_kv):
    return _outputs(q, v, ragged_offset_q, max_seq_len_q, seq_len_q is not None and ragged_offset_q is None)


def _grads(q, k, v, bias, ragged, zero: bool, want_dbias: bool) -> list[Tensor]:
    if ragged:
        grads = [torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v)]
    else:
        grads = [empty_like_layout(x, x.shape, zero=zero) for x in (q, k, v)]
    grads.append(torch.empty_like(bias, memory_format=torch.contiguous_format) if want_dbias
                 else q.new_empty((0,)))
    return grads


def _build_bwd(h, args, grads, opts) -> Prepared:
    do, q, k, v, o, stats = args[:6]
    scale, causal, bottom_right, lb, rb, alibi, p, msq, mskv, want_dbias = opts
    lay = _Layout(args[9], msq, mskv)
    g = Graph(io_dtype=dtype_name(q.dtype), compute_dtype="float32", intermediate_dtype="float32",
              name="torch.sdpa_bwd")
    tq, tk, tv = lay.tensor(g, q, "q", "q"), lay.tensor(g, k, "k", "kv"), lay.tensor(g, v, "v", "kv")
    to, tdo, ts = lay.tensor(g, o, "o", "q"), lay.tensor(g, do, "do", "q"), lay.tensor(g, stats, "stats")
    kw, extra, consts = _extras(g, lay, args[6:], q.shape[1], alibi, q.device)
    made = g.sdpa_backward(tq, tk, tv, to, tdo, ts, dbias=want_dbias, name="sdpa_bwd", **kw,
                           **_options(scale, causal, bottom_right, lb, rb, p))
    sides = ("q", "kv", "kv", None)
    outs = [_set_output(t, x, lay, s, n) for t, x, s, n in zip(made, grads, sides, ("dq", "dk", "dv", "dbias"))]
    g.build(h)
    return Prepared(h, g, [tdo, tq, tk, tv, to, ts] + extra + outs, consts)


def _sdpa_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, stats: Tensor, bias: Optional[Tensor],
             seq_len_q: Optional[Tensor], seq_len_kv: Optional[Tensor], ragged_offset_q: Optional[Tensor],
             ragged_offset_kv: Optional[Tensor], seed: Optional[Tensor], offset: Optional[Tensor], scale: float,
             causal: bool, bottom_right: bool, left_bound: Optional[int], right_bound: Optional[int], alibi: bool,
             dropout_p: float, max_seq_len_q: Optional[int], max_seq_len_kv: Optional[int],
             want_dbias: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Attention backward: (dq, dk, dv, dbias); dbias is empty unless ``want_dbias``. See :func:`sdpa`."""
    args = (do, q, k, v, o, stats, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed, offset)
    grads = _grads(q, k, v, bias, ragged_offset_q is not None, seq_len_q is not None, want_dbias)
    opts = (scale, causal, bottom_right, left_bound, right_bound, alibi, dropout_p, max_seq_len_q, max_seq_len_kv,
            want_dbias)
    ctx = context(q.get_device())
    h = ctx.handle
    key, ptrs = _signature("sdpa_bwd", opts, args, 6)
    p = prepared(h, key, lambda: _build_bwd(h, args, grads, opts))
    p.run(ctx, ptrs + tuple([x.data_ptr() for x in grads[:3 + want_dbias]]))
    return tuple(grads)


sdpa_bwd = torch.library.custom_op("cudnn_py::sdpa_bwd", _sdpa_bwd, mutates_args=(), device_types="cuda")


@sdpa_bwd.register_fake
def _(do, q, k, v, o, stats, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed, offset, scale,
      causal, bottom_right, left_bound, right_bound, alibi, dropout_p, max_seq_len_q, max_seq_len_kv, want_dbias):
    return tuple(_grads(q, k, v, bias, ragged_offset_q is not None, seq_len_q is not None, want_dbias))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:_N_TENSORS], *output)
    ctx.opts = inputs[_N_TENSORS:]


def _backward(ctx, do, dstats):
    q, k, v, bias, slq, slkv, roq, rokv, seed, offset, o, stats = ctx.saved_tensors
    want_dbias = bias is not None and ctx.needs_input_grad[3]
    if do.stride(-1) != 1 or 0 in do.stride() or (roq is not None and not do.is_contiguous()):
        do = do.contiguous()
    bwd = _sdpa_bwd if eager(q) else sdpa_bwd
    dq, dk, dv, db = bwd(do, q, k, v, o, stats, bias, slq, slkv, roq, rokv, seed, offset, *ctx.opts, want_dbias)
    return (dq, dk, dv, db if want_dbias else None) + (None,) * (_N_TENSORS - 4 + len(ctx.opts))


sdpa_fwd.register_autograd(_backward, setup_context=_setup)
_SdpaFunction = function("_SdpaFunction", _sdpa_fwd, _setup, _backward)


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


def _head_packed(x: Tensor) -> Tensor:
    """``x`` if its head dim is packed and no dim is broadcast (stride 0), else a packed copy."""
    st = x.stride()
    return x if st[-1] == 1 and 0 not in st else x.contiguous()


def _per_batch(x, name: str) -> Tensor:
    if not isinstance(x, Tensor) or not x.is_cuda or x.dtype != torch.int32:
        raise InvalidTypeError(f"{name} must be an int32 CUDA tensor of per-batch lengths")
    return x.reshape(-1).contiguous()


def sdpa(q: Tensor, k: Tensor, v: Tensor, *, scale: float | None = None, causal: bool = False,
         diagonal_alignment: str = "top_left", left_bound: int | None = None, right_bound: int | None = None,
         bias: Tensor | None = None, seq_len_q: Tensor | None = None, seq_len_kv: Tensor | None = None,
         cu_seqlens_q: Tensor | None = None, cu_seqlens_kv: Tensor | None = None,
         ragged_offset_q: Tensor | None = None, ragged_offset_kv: Tensor | None = None,
         max_seq_len_q: int | None = None, max_seq_len_kv: int | None = None, alibi: bool = False,
         dropout_p: float = 0.0, seed: Tensor | None = None, offset: Tensor | None = None,
         return_stats: bool = False):
    """Fused attention ``softmax(mask(scale * q k^T + bias)) v`` on torch tensors, differentiable in q, k, v and
    ``bias``.

    :param q, k, v: (B, Hq, Sq, D), (B, Hk, Skv, D), (B, Hv, Skv, Dv) float16/bfloat16 CUDA tensors (Hq a multiple
        of Hk and Hv); packed batches: (T_q, Hq, D), (T_kv, Hk, D), (T_kv, Hv, D).
    :param scale: default 1/sqrt(D).
    :param causal: query i sees keys <= i (relative to the aligned diagonal).
    :param diagonal_alignment: 'top_left' or 'bottom_right' (the diagonal ends at the last key).
    :param left_bound, right_bound: sliding window: keys in (i - left_bound, i + right_bound].
    :param bias: additive (B or 1, Hq or 1, Sq, Skv) tensor of q's dtype; gets a gradient when it requires one.
    :param seq_len_q, seq_len_kv: (B,) int32 lengths: padding mask on padded tensors (rows beyond are zero).
    :param cu_seqlens_q, cu_seqlens_kv: packed batches, FlashAttention's way: (B + 1,) int32 cumulative token
        counts (``[0, l0, l0 + l1, ...]``); need ``max_seq_len_q``/``max_seq_len_kv``; o is (T_q, Hq, Dv).
    :param ragged_offset_q, ragged_offset_kv: packed batches by (B + 1,) int32/int64 element offsets of each
        sequence in q (and o) and in k (and v), with ``seq_len_q``/``seq_len_kv`` (instead of ``cu_seqlens``).
    :param max_seq_len_q, max_seq_len_kv: the longest sequences of a packed batch.
    :param alibi: the standard ALiBi slopes (needs causal).
    :param dropout_p: drop probability of the attention weights; the Philox ``seed``/``offset`` ((1,) int64 CUDA
        tensors) default to a seed drawn from torch's generator.
    :param return_stats: also return the (B, Hq, Sq, 1) float32 log-sum-exp statistics.
    :returns: o, or (o, stats).
    """
    packed = cu_seqlens_q is not None or ragged_offset_q is not None
    _check_qkv(q, k, v, packed)
    if packed:
        if max_seq_len_q is None or max_seq_len_kv is None:
            raise InvalidValueError("packed batches need max_seq_len_q= and max_seq_len_kv= (the longest sequences)")
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if cu_seqlens_q is not None:
            if cu_seqlens_kv is None or ragged_offset_q is not None or ragged_offset_kv is not None:
                raise InvalidValueError("give cu_seqlens_q and cu_seqlens_kv, or ragged offsets with seq_len_q/kv")
            cq, ckv = _per_batch(cu_seqlens_q, "cu_seqlens_q"), _per_batch(cu_seqlens_kv, "cu_seqlens_kv")
            seq_len_q, seq_len_kv = cq[1:] - cq[:-1], ckv[1:] - ckv[:-1]
            wide = max(q.numel(), k.numel(), v.numel()) >= 2 ** 31
            ragged_offset_q = cq.to(torch.int64) * (q.shape[1] * q.shape[2]) if wide else cq * (
                q.shape[1] * q.shape[2])
            ragged_offset_kv = ckv.to(torch.int64) * (k.shape[1] * k.shape[2]) if wide else ckv * (
                k.shape[1] * k.shape[2])
        elif ragged_offset_kv is None or seq_len_q is None or seq_len_kv is None:
            raise InvalidValueError("ragged offsets need both ragged_offset_q and ragged_offset_kv and "
                                    "seq_len_q/seq_len_kv")
    elif cu_seqlens_kv is not None or ragged_offset_kv is not None:
        raise InvalidValueError("cu_seqlens_kv / ragged_offset_kv need their q counterparts")
    elif max_seq_len_q is not None or max_seq_len_kv is not None:
        raise InvalidValueError("max_seq_len_q/max_seq_len_kv are for packed batches")
    else:
        q, k, v = _head_packed(q), _head_packed(k), _head_packed(v)
    if seq_len_q is not None or seq_len_kv is not None:
        if seq_len_q is None or seq_len_kv is None:
            raise InvalidValueError("a padding mask needs both seq_len_q and seq_len_kv")
        seq_len_q, seq_len_kv = _per_batch(seq_len_q, "seq_len_q"), _per_batch(seq_len_kv, "seq_len_kv")
    if diagonal_alignment not in ("top_left", "bottom_right"):
        raise InvalidValueError(f"diagonal_alignment must be 'top_left' or 'bottom_right', got {diagonal_alignment!r}")
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.dtype != q.dtype or bias.dim() != 4:
            raise InvalidTypeError(f"bias must be a 4-D tensor of q's dtype {q.dtype}")
        bias = _head_packed(bias)
    if dropout_p:
        if not 0.0 < dropout_p < 1.0:
            raise InvalidValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
        if seed is None:
            seed = torch.randint(0, 2 ** 62, (1,), dtype=torch.int64, device=q.device)
        if offset is None:
            offset = torch.zeros((1,), dtype=torch.int64, device=q.device)
    elif seed is not None or offset is not None:
        seed = offset = None
    s = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    args = (q, k, v, bias, seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv, seed, offset, s, bool(causal),
            diagonal_alignment == "bottom_right", left_bound, right_bound, bool(alibi), float(dropout_p),
            max_seq_len_q, max_seq_len_kv)
    o, stats = call(sdpa_fwd, _sdpa_fwd, _SdpaFunction, args, (q, k, v, bias))
    return (o, stats) if return_stats else o


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` on cuDNN's fused attention, for what it can express:
    float16/bfloat16 CUDA tensors of 3 or 4 dims (..., L, E), a boolean or additive ``attn_mask`` broadcastable
    to (B or 1, H or 1, L, S) (an additive mask gets a gradient), ``is_causal`` (top-left, as torch's),
    grouped-query heads with ``enable_gqa``. Anything else raises :class:`~cudnn_py.errors.InvalidValueError`
    (or ``InvalidTypeError``) saying what."""
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    _check_qkv(query, key, value, False)
    if key.shape[1] != query.shape[1] and not enable_gqa:
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
        while bias.dim() < 4:
            bias = bias.unsqueeze(0)
        b, h, lq, lk = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
        if bias.shape[2:] != (lq, lk) or bias.shape[0] not in (1, b) or bias.shape[1] not in (1, h):
            bias = bias.expand(bias.shape[0] if bias.shape[0] in (1, b) else b,
                               bias.shape[1] if bias.shape[1] in (1, h) else h, lq, lk)
    o = sdpa(query, key, value, scale=scale, causal=is_causal, bias=bias, dropout_p=dropout_p)
    return o.squeeze(0) if squeeze else o
