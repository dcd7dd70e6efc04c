"""matmul + bias + GELU as one cuDNN graph (float32 inputs, batched), checked against NumPy.

Run: python examples/graph_matmul_bias_gelu.py
"""
import math

import numpy as np

import cudnn_py.graph as G
from cudnn_py.cli.prerequisites import require_gpu
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import empty, to_device


def main():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 128, 64)).astype(np.float32)
    b = (rng.standard_normal((1, 64, 96)) / 8).astype(np.float32)   # broadcast over the batch
    bias = rng.standard_normal((1, 1, 96)).astype(np.float32)
    with Handle() as h:
        ad, bd, cd = to_device(a), to_device(b), to_device(bias)
        yd = empty((4, 128, 96), np.float32)
        g = G.Graph(io_dtype="float32", compute_dtype="float32", name="mlp_layer")
        ta, tb, tbias = g.tensor_like(ad, "a"), g.tensor_like(bd, "b"), g.tensor_like(cd, "bias")
        ty = g.gelu(g.bias(g.matmul(ta, tb), tbias)).set_output(True)
        g.build(h)
        print(g)
        print("plan:", g.plan)
        run = g.executor(h, ta, tb, tbias, ty)    # the fast path: arrays bound positionally
        run(ad, bd, cd, yd)
        got = yd.to_numpy().astype(np.float64)
    z = np.matmul(a.astype(np.float64), b.astype(np.float64)) + bias
    ref = 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"max relative error vs NumPy float64: {err:.2e} (TF32 tensor cores allowed)")
    assert err < 2e-3, err


if __name__ == "__main__":
    require_gpu()  # one line and exit where no GPU can be used, before any other work
    main()
