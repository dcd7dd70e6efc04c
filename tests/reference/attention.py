"""Float64 NumPy reference for cuDNN's multi-head attention (cudnnMultiHeadAttnForward / BackwardData /
BackwardWeights semantics), beam size 1.

Shapes: ``q[B, Tq, qSize]``, ``k[B, Tk, kSize]``, ``v[B, Tk, vSize]``; ``lens_q[B]``, ``lens_k[B]``;
attention window per query time step ``lo[Tq]``, ``hi[Tq]``: query ``t`` of sequence ``b`` attends keys
``j`` with ``lo[t] <= j < hi[t]`` and ``j < lens_k[b]``.
Weights per head ``h``: ``wq[h] [qProj, qSize]``, ``wk[h] [kProj, kSize]``, ``wv[h] [vProj, vSize]``,
``wo[h] [oProj, vProj]`` (each acts as ``W @ vector``), biases ``bq[h]``, ``bk[h]``, ``bv[h]`` and one ``bo[oProj]``.

    out[b, t] = sum_h wo[h] @ (softmax_j(scale * <wq[h] q + bq[h], wk[h] k_j + bk[h]>) @ (wv[h] v_j + bv[h]))
                + bo (+ q[b, t] with residuals)

Rows ``t >= lens_q[b]`` of ``out`` are zero here. As in cuDNN, the data gradient of the queries does NOT
include the residual path (cuDNN leaves adding ``dout`` to ``dq`` to the caller).
"""
from __future__ import annotations

import numpy as np

WEIGHT_KEYS = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")


def random_weights(rng, heads, q_size, k_size, v_size, q_proj, k_proj, v_proj, o_proj, biases=True, scale=0.5):
    w = {
        "wq": rng.uniform(-scale, scale, (heads, q_proj, q_size)),
        "wk": rng.uniform(-scale, scale, (heads, k_proj, k_size)),
        "wv": rng.uniform(-scale, scale, (heads, v_proj, v_size)),
        "wo": rng.uniform(-scale, scale, (heads, o_proj, v_proj)),
    }
    if biases:
        w.update(bq=rng.uniform(-scale, scale, (heads, q_proj)), bk=rng.uniform(-scale, scale, (heads, k_proj)),
                 bv=rng.uniform(-scale, scale, (heads, v_proj)), bo=rng.uniform(-scale, scale, (o_proj,)))
    return w


def _mask(t_q, t_k, lo, hi, len_k):
    j = np.arange(t_k)[None, :]
    return (j >= np.asarray(lo)[:, None]) & (j < np.asarray(hi)[:, None]) & (j < len_k)


def forward(q, k, v, w, lens_q, lens_k, lo, hi, scale, residual=False):
    """Returns ``(out, cache)``."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, Tq, _ = q.shape
    Tk = k.shape[1]
    heads = w["wq"].shape[0]
    o_proj = w["wo"].shape[1]
    out = np.zeros((B, Tq, o_proj))
    cache = []
    for b in range(B):
        m = _mask(Tq, Tk, lo, hi, lens_k[b])
        per_head = []
        for h in range(heads):
            Q = q[b] @ w["wq"][h].T + (w["bq"][h] if "bq" in w else 0)
            K = k[b] @ w["wk"][h].T + (w["bk"][h] if "bk" in w else 0)
            V = v[b] @ w["wv"][h].T + (w["bv"][h] if "bv" in w else 0)
            S = np.where(m, scale * Q @ K.T, -np.inf)
            A = np.exp(S - S.max(axis=1, keepdims=True))
            A /= A.sum(axis=1, keepdims=True)
            H = A @ V
            out[b] += H @ w["wo"][h].T
            per_head.append((Q, K, V, A, H))
        if "bo" in w:
            out[b] += w["bo"]
        if residual:
            out[b] += q[b]
        out[b, lens_q[b]:] = 0
        cache.append(per_head)
    return out, (q, k, v, w, lens_q, scale, cache)


def backward(dout, cache):
    """``(dq, dk, dv, dw)`` for the loss ``sum(out * dout)``; ``dq`` without the residual term (like cuDNN)."""
    q, k, v, w, lens_q, scale, per_batch = cache
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dw = {key: np.zeros_like(val) for key, val in w.items()}
    for b, per_head in enumerate(per_batch):
        do = np.array(dout[b], np.float64)
        do[lens_q[b]:] = 0
        if "bo" in w:
            dw["bo"] += do.sum(0)
        for h, (Q, K, V, A, H) in enumerate(per_head):
            dH = do @ w["wo"][h]
            dw["wo"][h] += do.T @ H
            dA = dH @ V.T
            dV = A.T @ dH
            dS = A * (dA - (dA * A).sum(axis=1, keepdims=True))
            dQ = scale * dS @ K
            dK = scale * dS.T @ Q
            for name, dX, X, dIn in (("q", dQ, q[b], dq[b]), ("k", dK, k[b], dk[b]), ("v", dV, v[b], dv[b])):
                dw["w" + name][h] += dX.T @ X
                if "b" + name in w:
                    dw["b" + name][h] += dX.sum(0)
                dIn += dX @ w["w" + name][h]
    return dq, dk, dv, dw
