"""Fused convolution + bias + ReLU as one cuDNN graph (float16, channels-last), checked against NumPy.

Run: python examples/graph_conv_bias_relu.py
"""
import numpy as np

import cudnn_py.graph as G
from cudnn_py.cli.prerequisites import require_gpu
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, empty, to_device


def channels_last(a: np.ndarray) -> DeviceArray:
    """Copy NCHW host data to the device in NHWC memory order; the array keeps its logical NCHW shape."""
    n, c, h, w = a.shape
    buf = to_device(np.ascontiguousarray(a.transpose(0, 2, 3, 1)))
    return DeviceArray(buf.ptr, a.shape, a.dtype, (h * w * c, 1, w * c, c), device_id=buf.device_id, owner=buf)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32, 28, 28)).astype(np.float16)
    w = (rng.standard_normal((64, 32, 3, 3)) / 12).astype(np.float16)
    b = rng.standard_normal((1, 64, 1, 1)).astype(np.float16)
    with Handle() as h:
        xd, wd, bd = channels_last(x), channels_last(w), channels_last(b)
        out = empty((4, 28, 28, 64), np.float16)                       # NHWC memory
        yd = DeviceArray(out.ptr, (4, 64, 28, 28), np.float16, (28 * 28 * 64, 1, 28 * 64, 64), owner=out)

        g = G.Graph(io_dtype="float16", compute_dtype="float32", name="conv_bias_relu")
        tx, tw, tb = g.tensor_like(xd, "x"), g.tensor_like(wd, "w"), g.tensor_like(bd, "b")
        g.relu(g.bias(g.conv_fprop(tx, tw, padding=1), tb)).set_output(True).set_name("y")
        g.build(h)
        print(g)
        print("plan:", g.plan, "notes:", g.plan.config.notes())
        g.execute(h, {"x": xd, "w": wd, "b": bd, "y": yd})
        got = out.to_numpy().transpose(0, 3, 1, 2).astype(np.float64)

    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    ref = np.zeros((4, 64, 28, 28))
    for r in range(3):
        for s in range(3):
            ref += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 28, s:s + 28], w[:, :, r, s].astype(np.float64))
    ref = np.maximum(ref + b.astype(np.float64), 0)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"max relative error vs NumPy float64: {err:.2e}")
    assert err < 1e-2, err


if __name__ == "__main__":
    require_gpu()  # one line and exit where no GPU can be used, before any other work
    main()
