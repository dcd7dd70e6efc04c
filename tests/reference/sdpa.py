"""float64 NumPy reference for scaled dot-product attention, forward and backward, with the options cuDNN's
attention engines take: scale, causal / sliding-window bands in top-left or bottom-right alignment, an additive
bias, padding masks from per-batch sequence lengths, ALiBi, grouped-query heads and dropout by a given keep-mask.

Shapes are logical (B, H, S, D); K and V may have fewer heads than Q (each K/V head serves Hq / Hk query heads).
Rows a padding mask removes entirely (query index >= seq_len_q) are NaN in O and the statistics, and their
gradients are zero: compare only the valid region (:func:`valid_rows`).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np


def alibi_slopes(heads: int) -> np.ndarray:
    """The standard ALiBi slopes (the closest power of two n <= heads gets 2^(-8 i / n), i = 1..n; the rest
    interleave at half steps), as cuDNN's frontend computes them."""
    n = 1 << int(np.floor(np.log2(heads)))
    exps = list(range(1, n + 1)) + [0.5 * (i + 1) for i in range(0, 2 * (heads - n), 2)]
    return np.array([2.0 ** (-8.0 * e / n) for e in exps])


def _repeat_heads(x, hq):
    return np.repeat(x, hq // x.shape[1], axis=1)


def _fold_heads(g, h):
    b, hq = g.shape[:2]
    return g.reshape(b, h, hq // h, *g.shape[2:]).sum(axis=2)


def keep_mask(b, hq, sq, skv, *, causal=False, diagonal_alignment="top_left", left_bound=None, right_bound=None,
              seq_len_q=None, seq_len_kv=None):
    """Boolean (B, 1, Sq, Skv): which scores survive the band and padding masks."""
    if causal:
        right_bound = 0
    lq = np.full(b, sq) if seq_len_q is None else np.asarray(seq_len_q).reshape(b)
    lk = np.full(b, skv) if seq_len_kv is None else np.asarray(seq_len_kv).reshape(b)
    i = np.arange(sq)[None, :, None]
    j = np.arange(skv)[None, None, :]
    shift = (lk - lq)[:, None, None] if diagonal_alignment == "bottom_right" else np.zeros((b, 1, 1), int)
    keep = np.ones((b, sq, skv), bool)
    if right_bound is not None:
        keep &= j <= i + shift + right_bound
    if left_bound is not None:
        keep &= j > i + shift - left_bound
    if seq_len_q is not None:
        keep &= (i < lq[:, None, None]) & (j < lk[:, None, None])
    return keep[:, None]


def valid_rows(b, sq, seq_len_q=None) -> np.ndarray:
    """Boolean (B, 1, Sq, 1): the query rows a padding mask keeps."""
    lq = np.full(b, sq) if seq_len_q is None else np.asarray(seq_len_q).reshape(b)
    return (np.arange(sq)[None, :] < lq[:, None])[:, None, :, None]


def _probabilities(q, k, *, scale, bias, slopes, keep):
    hq = q.shape[1]
    s = np.einsum("bhqd,bhkd->bhqk", q, _repeat_heads(k, hq)) * scale
    if bias is not None:
        s = s + bias
    if slopes is not None:
        sq, skv = s.shape[2:]
        s = s + slopes.reshape(1, hq, 1, 1) * (np.arange(skv)[None, :] - np.arange(sq)[:, None])
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return e / z, m + np.log(z)


def forward(q, k, v, *, scale=None, bias=None, alibi=None, dropout=0.0, dropout_mask=None, **mask):
    """(o, stats): o (B, Hq, Sq, Dv), stats (B, Hq, Sq, 1) = row max + log(sum(exp(s - max))) of the masked
    scores. ``mask``: the keyword arguments of :func:`keep_mask`; ``alibi``: per-head slopes; ``dropout_mask``
    (B, Hq, Sq, Skv) of 0/1 with ``dropout`` the drop probability (the kept weights scale by 1/(1-dropout))."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b, hq, sq, d = q.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    keep = keep_mask(b, hq, sq, k.shape[2], **mask)
    p, stats = _probabilities(q, k, scale=scale, bias=bias, slopes=alibi, keep=keep)
    if dropout_mask is not None:
        p = p * dropout_mask / (1.0 - dropout)
    o = np.einsum("bhqk,bhkd->bhqd", p, _repeat_heads(v, hq))
    return o, stats


def backward(q, k, v, do, *, scale=None, bias=None, alibi=None, dropout=0.0, dropout_mask=None, o=None, **mask):
    """(dq, dk, dv, dbias_full) of :func:`forward` for the output gradient ``do``; ``dbias_full`` is the
    (B, Hq, Sq, Skv) score gradient (sum it over the dims a broadcast bias lacks). Fully masked rows give zero
    gradients. ``o``: the forward output to take the row term rowsum(dO * O) from (what flash-attention backward
    kernels do; default: the exact one, which is the same without dropout)."""
    q, k, v, do = (np.asarray(a, np.float64) for a in (q, k, v, do))
    b, hq, sq, d = q.shape
    hk, hv = k.shape[1], v.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    keep = keep_mask(b, hq, sq, k.shape[2], **mask)
    p, _ = _probabilities(q, k, scale=scale, bias=bias, slopes=alibi, keep=keep)
    p = np.nan_to_num(p)
    drop = 1.0 if dropout_mask is None else dropout_mask / (1.0 - dropout)
    pd = p * drop
    kk, vv = _repeat_heads(k, hq), _repeat_heads(v, hq)
    dv = _fold_heads(np.einsum("bhqk,bhqd->bhkd", pd, do), hv)
    dp = np.einsum("bhqd,bhkd->bhqk", do, vv) * drop
    delta = (dp * p).sum(axis=-1, keepdims=True) if o is None else (do * np.asarray(o, np.float64)).sum(
        axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, kk) * scale
    dk = _fold_heads(np.einsum("bhqk,bhqd->bhkd", ds, q), hk) * scale
    return dq, dk, dv, ds


def reduce_to(g, shape):
    """Sum ``g`` over the dims where ``shape`` has 1 (a broadcast bias's gradient)."""
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, g.shape)) if n == 1 and m != 1)
    return g.sum(axis=axes, keepdims=True)


# -- packed batches and FP8 -------------------------------------------------------------------------------------
def pack(x, lens):
    """(B, H, S, D) -> the packed (T, H, D) tokens of each batch's first ``lens[b]`` rows."""
    return np.concatenate([x[b, :, :n].transpose(1, 0, 2) for b, n in enumerate(lens)], axis=0)


def unpack(t, lens, s_max):
    """Packed (T, H, D) -> (B, H, s_max, D) with zeros beyond each batch's length."""
    out = np.zeros((len(lens), t.shape[1], s_max, t.shape[2]))
    start = 0
    for b, n in enumerate(lens):
        out[b, :, :n] = t[start:start + n].transpose(1, 0, 2)
        start += n
    return out


def offsets(lens, per_token):
    """Ragged offsets: each batch's first element, (B + 1,) = cumulative tokens times elements per token."""
    return np.concatenate([[0], np.cumsum(lens)]) * per_token


def quantize(x, dtype, scale):
    """``x * scale`` rounded to FP8 ``dtype`` (saturating, as cuDNN does), and the value it stands for
    (dequantized with 1/scale, float64)."""
    big = float(ml_dtypes.finfo(dtype).max)
    q = np.clip(np.asarray(x, np.float64) * scale, -big, big).astype(dtype)
    return q, q.astype(np.float64) / scale


def pow2_scale(amax, dtype, headroom=0.5):
    """The power-of-two scale that maps ``amax`` to at most ``headroom`` times the FP8 type's largest value."""
    return float(2.0 ** np.floor(np.log2(headroom * float(ml_dtypes.finfo(dtype).max) / max(float(amax), 1e-30))))


def rel_errors(got, ref):
    """(relative RMS error, max |error| / max |ref|)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    err = got - ref
    return float(np.sqrt((err ** 2).mean() / (ref ** 2).mean())), float(np.abs(err).max() / np.abs(ref).max())


#: bound relative to the reference's magnitude, per input dtype (float32 accumulation, float16/bfloat16 inputs)
TOL = {"float16": 1e-2, "bfloat16": 2e-2}


def rounded(a, dt) -> np.ndarray:
    """``a`` rounded to dtype ``dt`` (what the GPU sees), as float64."""
    return np.asarray(a).astype(dt).astype(np.float64)


def assert_close(got, ref, dtype: str, rows=None, scale: float = 1.0) -> None:
    """|got - ref| <= tol * max(1, max |ref|) (``tol``: :data:`TOL` of ``dtype`` times ``scale``) over the valid
    ``rows`` mask (see :func:`valid_rows`); a NaN in ``got`` (an element not written) fails."""
    got = np.asarray(got, np.float64)
    if rows is not None:
        rows = np.broadcast_to(rows, got.shape)
        got, ref = got[rows], ref[rows]
    assert not np.isnan(got).any(), "output has NaN: an element was not written"
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))
