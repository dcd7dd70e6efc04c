"""One training step of a two-layer convolutional network on random data, with cuDNN doing every
convolution pass: forward (fused bias + ReLU, then a plain convolution), the three backward passes,
and an SGD update. Prints the loss before and after a few steps (it should fall).

    python examples/conv_training_step.py [--steps 20]
"""
from __future__ import annotations

import argparse

import numpy as np

import cudnn_py as cdp
from cudnn_py.cli.prerequisites import require_gpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()
    require_gpu(ap.prog)  # before any other work
    rng = np.random.default_rng(0)
    n, c, hw, k1, k2 = 16, 3, 16, 8, 4
    x_h = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    target_h = rng.standard_normal((n, k2, hw // 2, hw // 2)).astype(np.float32)
    w1_h = (rng.standard_normal((k1, c, 3, 3)) * 0.2).astype(np.float32)
    b1_h = np.zeros((1, k1, 1, 1), np.float32)
    w2_h = (rng.standard_normal((k2, k1, 3, 3)) * 0.2).astype(np.float32)
    conv1 = cdp.Convolution(padding=1)             # 16x16 -> 16x16
    conv2 = cdp.Convolution(padding=1, stride=2)   # 16x16 -> 8x8
    with cdp.Handle() as h:
        x, w1, b1, w2 = (cdp.to_device(a) for a in (x_h, w1_h, b1_h, w2_h))
        for step in range(args.steps):
            a1 = cdp.convolution_bias_activation_forward(h, conv1, x, w1, b1, activation="relu")
            y = cdp.convolution_forward(h, conv2, a1, w2, autotune=True, engine="legacy")
            diff = y.to_numpy() - target_h                       # loss = mean(diff^2) / 2
            loss = float((diff ** 2).mean() / 2)
            dy = cdp.to_device((diff / diff.size).astype(np.float32))
            dw2 = cdp.convolution_backward_filter(h, conv2, a1, dy, w_shape=w2.shape, autotune=True, engine="legacy")
            da1 = cdp.convolution_backward_data(h, conv2, w2, dy, x_shape=a1.shape, autotune=True, engine="legacy")
            dz1 = da1.to_numpy() * (a1.to_numpy() > 0)           # ReLU gradient on the host (small)
            dz1_d = cdp.to_device(dz1)
            dw1 = cdp.convolution_backward_filter(h, conv1, x, dz1_d, w_shape=w1.shape)
            db1 = cdp.convolution_backward_bias(h, dz1_d)
            for p, g in ((w1, dw1), (b1, db1), (w2, dw2)):
                p.copy_((p.to_numpy() - args.lr * 100 * g.to_numpy()).astype(np.float32))
            if step % 5 == 0 or step == args.steps - 1:
                print(f"step {step:3d}  loss {loss:.5f}")
    print(f"algorithm cache: {len(cdp.algorithm_cache)} measured configurations")


if __name__ == "__main__":
    main()
