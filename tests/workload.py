"""A mixed GPU workload for the thread and multi-GPU tests: legacy convolution, engine="graph" convolution, a graph
built and executed with the Graph API, an RNN forward, pooling and softmax, each on fixed host inputs, returning host
results so that runs on different threads, streams and devices can be compared with a serial run."""
from __future__ import annotations

import numpy as np

import cudnn_py as cudnn
from cudnn_py import graph as G


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Fixed random host inputs (float32)."""
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.uniform(-1, 1, size=s).astype(np.float32)  # noqa: E731
    return {"x": f(2, 8, 12, 12), "w": f(16, 8, 3, 3), "a": f(2, 4, 16), "b": f(2, 16, 8),
            "seq": f(5, 3, 8)}


def run(handle: cudnn.Handle, host: dict[str, np.ndarray], which=("conv", "conv_graph", "graph", "rnn", "pool",
                                                                    "softmax")) -> dict[str, np.ndarray]:
    """Run the workload on ``handle`` (its device and stream); returns {name: host result}."""
    dev = handle.device
    s = handle.stream

    def up(a):
        return cudnn.to_device(a, stream=s, device=dev)
    out: dict[str, np.ndarray] = {}
    x, w = up(host["x"]), up(host["w"])
    conv = cudnn.Convolution(padding=1, math_type="fma")
    if "conv" in which:
        out["conv"] = cudnn.convolution_forward(handle, conv, x, w)
    if "conv_graph" in which:
        out["conv_graph"] = cudnn.convolution_forward(handle, cudnn.Convolution(padding=1), x, w, engine="graph")
    if "graph" in which:
        g = G.Graph(io_dtype="float32", compute_dtype="float32", name="mm_relu")
        ta, tb = g.tensor(host["a"].shape, name="a"), g.tensor(host["b"].shape, name="b")
        tc = g.relu(g.matmul(ta, tb)).set_output(True).set_name("c")
        g.build(handle)
        c = cudnn.empty(tc.shape, np.float32, stream=s, device=dev)
        g.execute(handle, {ta: up(host["a"]), tb: up(host["b"]), tc: c})
        out["graph"] = c
    if "rnn" in which:
        rnn = cudnn.RNN("lstm", 8, 6, math_type="fma")
        wts = rnn.new_weights(handle, zero=False)
        wts.copy_(np.linspace(-0.5, 0.5, wts.size, dtype=np.float32), stream=s)
        out["rnn"] = cudnn.rnn_forward(handle, rnn, up(host["seq"]), wts).y
    if "pool" in which:
        out["pool"] = cudnn.pooling_forward(handle, cudnn.Pooling("max", window=2), x)
    if "softmax" in which:
        out["softmax"] = cudnn.softmax_forward(handle, x)
    handle.synchronize()
    return {k: v.to_numpy() for k, v in out.items()}


def assert_same(got: dict, want: dict, where: str) -> None:
    """Results equal to the serial run's (identical kernels on identical data: up to float32 rounding)."""
    assert got.keys() == want.keys(), where
    for k in want:
        assert not np.isnan(got[k]).any(), f"{where}: {k} has NaN"
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=f"{where}: {k}")
