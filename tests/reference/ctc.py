"""float64 NumPy reference for the CTC loss (Graves et al. 2006), blank = label 0.

``ctc_loss(logits, labels, label_lengths, input_lengths)`` returns the per-sequence cost
``-log p(l | x)`` and its gradient with respect to the pre-softmax activations ``logits``
(T, N, A) -- what cuDNN returns with ``CUDNN_LOSS_NORMALIZATION_SOFTMAX``:
``softmax(x)[t, a] - (1 / p) * sum_{s: l'_s = a} alpha_t(s) beta_t(s)`` for ``t < input_length``,
zero for later time steps.  ``labels`` is the concatenation of every sequence's labels.
"""
from __future__ import annotations

import numpy as np


def log_softmax(logits, axis=-1):
    x = np.asarray(logits, np.float64)
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def min_input_length(label) -> int:
    """Shortest input a label sequence fits in: its length plus one per repeated neighbour."""
    label = list(label)
    return len(label) + sum(1 for a, b in zip(label, label[1:]) if a == b)


def _one(logp, label):
    """logp (T, A) log-probabilities; returns (cost, dlogp-style posterior gamma (T, A))."""
    t_len, a = logp.shape
    ext = [0]
    for c in label:
        ext += [int(c), 0]
    s_len = len(ext)
    neg = -np.inf
    la = np.full((t_len, s_len), neg)
    lb = np.full((t_len, s_len), neg)
    la[0, 0] = logp[0, ext[0]]
    if s_len > 1:
        la[0, 1] = logp[0, ext[1]]
    for t in range(1, t_len):
        for s in range(s_len):
            v = [la[t - 1, s]]
            if s >= 1:
                v.append(la[t - 1, s - 1])
            if s >= 2 and ext[s] != 0 and ext[s] != ext[s - 2]:
                v.append(la[t - 1, s - 2])
            la[t, s] = np.logaddexp.reduce(v) + logp[t, ext[s]]
    lb[t_len - 1, s_len - 1] = logp[t_len - 1, ext[s_len - 1]]
    if s_len > 1:
        lb[t_len - 1, s_len - 2] = logp[t_len - 1, ext[s_len - 2]]
    for t in range(t_len - 2, -1, -1):
        for s in range(s_len):
            v = [lb[t + 1, s]]
            if s + 1 < s_len:
                v.append(lb[t + 1, s + 1])
            if s + 2 < s_len and ext[s] != 0 and ext[s] != ext[s + 2]:
                v.append(lb[t + 1, s + 2])
            lb[t, s] = np.logaddexp.reduce(v) + logp[t, ext[s]]
    ll = np.logaddexp(la[t_len - 1, s_len - 1], la[t_len - 1, s_len - 2]) if s_len > 1 else la[t_len - 1, 0]
    # alpha_t(s) beta_t(s) counts logp[t, ext[s]] twice; divide it out once.
    lab = la + lb - np.array([[logp[t, c] for c in ext] for t in range(t_len)])
    gamma = np.zeros((t_len, a))
    for s, c in enumerate(ext):
        gamma[:, c] += np.exp(lab[:, s] - ll)
    return -ll, gamma


def ctc_loss(logits, labels, label_lengths, input_lengths):
    """Costs (N,) and gradients w.r.t. logits (T, N, A), float64."""
    logp = log_softmax(logits)
    t_max, n, a = logp.shape
    costs = np.zeros(n)
    grads = np.zeros((t_max, n, a))
    offs = np.concatenate([[0], np.cumsum(label_lengths)]).astype(int)
    for b in range(n):
        label = np.asarray(labels[offs[b]:offs[b + 1]])
        t_len = int(input_lengths[b])
        cost, gamma = _one(logp[:t_len, b], label)
        costs[b] = cost
        grads[:t_len, b] = np.exp(logp[:t_len, b]) - gamma
    return costs, grads


def ctc_cost_bruteforce(logits, label, t_len=None):
    """-log p(label | x) by summing every path (tiny T and A only); for checking ctc_loss."""
    import itertools

    logp = log_softmax(logits)
    t_len = logp.shape[0] if t_len is None else t_len
    a = logp.shape[1]
    target = [int(c) for c in label]
    total = -np.inf
    for path in itertools.product(range(a), repeat=t_len):
        collapsed = [c for i, c in enumerate(path) if c != 0 and (i == 0 or c != path[i - 1])]
        if collapsed == target:
            total = np.logaddexp(total, sum(logp[t, c] for t, c in enumerate(path)))
    return -total
