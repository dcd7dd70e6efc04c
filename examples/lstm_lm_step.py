"""A character-level LSTM language model trained with cuDNN's RNN calls: forward (training mode),
backward data, backward weights, and an SGD update applied to the whole weight space on the device.

The embedding table and the output softmax layer are small and live in NumPy; the 2-layer LSTM is
cuDNN's. The loss per character printed every 20 steps falls from about log(vocab) = 3.3 to well
under 1 within a few hundred steps as the model memorises the text.

    python examples/lstm_lm_step.py [--steps 300] [--dtype float32]
"""
from __future__ import annotations

import argparse

import numpy as np

import cudnn_py as cdp
from cudnn_py.cli.prerequisites import require_gpu

TEXT = ("the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. "
        "how vexingly quick daft zebras jump! sphinx of black quartz, judge my vow. ") * 4


def main(steps: int = 300, dtype: str = "float32", seq: int = 24, batch: int = 16, emb: int = 32,
         hidden: int = 128, layers: int = 2, lr: float = 0.1, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    vocab = sorted(set(TEXT))
    ids = np.array([vocab.index(c) for c in TEXT])
    V = len(vocab)
    dt = np.dtype(dtype)
    E = rng.normal(0, 0.1, (V, emb))                       # embedding (host)
    W_out = rng.normal(0, 1 / np.sqrt(hidden), (V, hidden))  # softmax layer (host)
    b_out = np.zeros(V)
    losses = []
    with cdp.Handle() as h:
        rnn = cdp.RNN("lstm", emb, hidden, layers, dtype=dt)
        w = rnn.new_weights(h, zero=False)
        w.copy_(rng.uniform(-1, 1, w.shape) / np.sqrt(hidden))
        for (pseudo, lin), p in rnn.weights(h, w).items():   # forget-gate biases 1 (input side, lin_id 1)
            if lin == 1:
                p.bias.fill_(1.0)
        for step in range(steps):
            starts = rng.integers(0, len(ids) - seq - 1, batch)
            tok = np.stack([ids[s:s + seq] for s in starts], axis=1)          # [T, B]
            target = np.stack([ids[s + 1:s + seq + 1] for s in starts], axis=1)
            x = cdp.to_device(E[tok].astype(dt))                           # [T, B, emb]
            fwd = cdp.rnn_forward(h, rnn, x, w, training=True)
            y = fwd.y.to_numpy().astype(np.float64)                          # [T, B, hidden]
            logits = y @ W_out.T + b_out
            logits -= logits.max(-1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(-1, keepdims=True)
            n = tok.size
            loss = -np.log(np.take_along_axis(p, target[..., None], -1)).sum() / n
            dlogits = p
            np.put_along_axis(dlogits, target[..., None], np.take_along_axis(p, target[..., None], -1) - 1, -1)
            dlogits /= batch                     # gradient of the per-sequence loss (sum over time, mean over batch)
            dy = dlogits @ W_out
            W_out -= lr * np.einsum("tbv,tbh->vh", dlogits, y)
            b_out -= lr * dlogits.sum((0, 1))
            dx, _, _ = cdp.rnn_backward_data(h, rnn, fwd, cdp.to_device(dy.astype(dt)), w)
            dw = cdp.rnn_backward_weights(h, rnn, fwd)                     # fresh zeroed buffer, gradients added
            cdp.add_tensor(h, dw.reshape(1, -1, 1, 1), w.reshape(1, -1, 1, 1), alpha=-lr, beta=1.0)  # SGD
            np.add.at(E, tok, -lr * dx.to_numpy().astype(np.float64))
            losses.append(float(loss))
            if step % 20 == 0 or step == steps - 1:
                print(f"step {step:4d}  loss {loss:.4f}  (uniform would be {np.log(V):.4f})")
    return losses


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "float64"])
    a = ap.parse_args()
    require_gpu(ap.prog)  # before any other work
    main(a.steps, a.dtype)
