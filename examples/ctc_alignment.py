"""Learn frame-by-frame scores for a batch of label sequences with cuDNN's CTC loss (cudnnCTCLoss_v8):
cuDNN returns each sequence's cost and the gradient with respect to the pre-softmax scores, a plain
gradient step updates them, and the greedy (best-path) decoding converges to the target labels.

    python examples/ctc_alignment.py [--steps 100] [--algo deterministic|non_deterministic]
"""
from __future__ import annotations

import argparse

import numpy as np

import cudnn_py as cdp
from cudnn_py.cli.prerequisites import require_gpu

ALPHABET = "_abcdefg"  # index 0 is the CTC blank
TARGETS = ["bad", "cafe", "egg", "dab"]


def greedy_decode(scores: np.ndarray, length: int) -> str:
    """Best path: argmax per frame, merge repeats, drop blanks."""
    best = scores[:length].argmax(axis=-1)
    out = [c for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1])]
    return "".join(ALPHABET[c] for c in out)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--algo", default="deterministic", choices=["deterministic", "non_deterministic"])
    args = ap.parse_args(argv)
    require_gpu(ap.prog)  # before any other work
    rng = np.random.default_rng(0)
    t, n, a = 12, len(TARGETS), len(ALPHABET)
    labels = [ALPHABET.index(ch) for word in TARGETS for ch in word]
    label_lengths = [len(w) for w in TARGETS]
    input_lengths = [t, t - 2, t - 4, t]
    scores = (rng.standard_normal((t, n, a)) * 0.1).astype(np.float32)
    history = []
    with cdp.Handle() as h:
        x = cdp.to_device(scores)
        for step in range(args.steps + 1):
            costs, grads = cdp.ctc_loss(h, x, labels, label_lengths, input_lengths, algo=args.algo)
            total = float(costs.to_numpy().sum())
            history.append(total)
            if step % max(args.steps // 5, 1) == 0:
                print(f"step {step:4d}  total CTC cost {total:9.4f}")
            if step < args.steps:
                g = grads.to_numpy()
                for b, n_t in enumerate(input_lengths):
                    g[n_t:, b] = 0  # frames past a sequence's length take no part in its cost
                scores -= args.lr * g
                x.copy_(scores)
    decoded = [greedy_decode(scores[:, b], input_lengths[b]) for b in range(n)]
    for word, got in zip(TARGETS, decoded):
        print(f"target {word!r:8} decoded {got!r}")
    return {"first": history[0], "last": history[-1], "decoded": decoded, "targets": TARGETS}


if __name__ == "__main__":
    main()
