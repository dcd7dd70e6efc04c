"""One SGD step of a 2-layer MLP (x -> relu(x W1 + b1) -> W2 + b2, mean squared error) built from cuDNN graphs,
checked against the same step in NumPy float64.

Graphs: forward layer 1 (matmul + bias + ReLU), forward layer 2 (matmul + bias); backward dh = relu'(dy W2^T)
(matmul + ReLU backward); each parameter update W <- W - lr * (A^T B) is one matmul + scale + add graph, where A^T
is the same memory seen through transposed strides. The loss gradient dy = 2 (y - t) / B is computed on the host.

Run: python examples/graph_mlp_training.py
"""
import numpy as np

import cudnn_py.graph as G
from cudnn_py.cli.prerequisites import require_gpu
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, empty, to_device

B, IN, HID, OUT, LR = 64, 32, 48, 16, 0.1


def T(d: DeviceArray) -> DeviceArray:
    """(1, m, n) -> its transpose (1, n, m), same memory."""
    _, m, n = d.shape
    return DeviceArray(d.ptr, (1, n, m), d.dtype, (m * n, 1, n), device_id=d.device_id, owner=d)


def run_graph(h, build, arrays: dict, out_shape):
    """Build a graph from ``build(g, tensors) -> output tensor``; run it on ``arrays``; return the output array."""
    g = G.Graph(name=build.__name__)
    ts = {k: g.tensor_like(v, k) for k, v in arrays.items()}
    y = build(g, ts).set_output(True).set_name("out")
    g.build(h)
    out = empty(out_shape, np.float32)
    g.execute(h, {**{ts[k]: v for k, v in arrays.items()}, y: out})
    return out


def layer1(g, t):
    return g.relu(g.bias(g.matmul(t["x"], t["W1"]), t["b1"]))


def layer2(g, t):
    return g.bias(g.matmul(t["h"], t["W2"]), t["b2"])


def hidden_grad(g, t):
    return g.relu_backward(g.matmul(t["dy"], t["W2T"]), t["h"])   # relu'(z) = (h > 0)


def sgd(g, t):
    return g.add(g.scale(g.matmul(t["AT"], t["G"]), -LR), t["P"])


def main():
    rng = np.random.default_rng(0)
    p = {"W1": rng.standard_normal((1, IN, HID)) / 6, "b1": rng.standard_normal((1, 1, HID)) / 4,
         "W2": rng.standard_normal((1, HID, OUT)) / 7, "b2": rng.standard_normal((1, 1, OUT)) / 4}
    x, tgt = rng.standard_normal((1, B, IN)), rng.standard_normal((1, B, OUT))
    ones = np.ones((1, 1, B))
    with Handle() as h:
        d = {k: to_device(v.astype(np.float32)) for k, v in {**p, "x": x, "ones": ones}.items()}
        hid = run_graph(h, layer1, {"x": d["x"], "W1": d["W1"], "b1": d["b1"]}, (1, B, HID))
        y = run_graph(h, layer2, {"h": hid, "W2": d["W2"], "b2": d["b2"]}, (1, B, OUT))
        y_host = y.to_numpy().astype(np.float64)
        loss = np.mean((y_host - tgt) ** 2)
        dy = to_device((2 * (y_host - tgt) / (B * OUT)).astype(np.float32))
        dh = run_graph(h, hidden_grad, {"dy": dy, "W2T": T(d["W2"]), "h": hid}, (1, B, HID))
        new = {
            "W2": run_graph(h, sgd, {"AT": T(hid), "G": dy, "P": d["W2"]}, (1, HID, OUT)),
            "b2": run_graph(h, sgd, {"AT": d["ones"], "G": dy, "P": d["b2"]}, (1, 1, OUT)),
            "W1": run_graph(h, sgd, {"AT": T(d["x"]), "G": dh, "P": d["W1"]}, (1, IN, HID)),
            "b1": run_graph(h, sgd, {"AT": d["ones"], "G": dh, "P": d["b1"]}, (1, 1, HID)),
        }
        got = {k: v.to_numpy().astype(np.float64) for k, v in new.items()}

    # the same step in NumPy float64 (parameters rounded to float32 like the device copies)
    q = {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}
    xq = x.astype(np.float32).astype(np.float64)
    z1 = xq @ q["W1"] + q["b1"]
    hh = np.maximum(z1, 0)
    yy = hh @ q["W2"] + q["b2"]
    gy = 2 * (yy - tgt) / (B * OUT)
    gh = (gy @ q["W2"].transpose(0, 2, 1)) * (z1 > 0)
    ref = {"W2": q["W2"] - LR * hh.transpose(0, 2, 1) @ gy, "b2": q["b2"] - LR * gy.sum(1, keepdims=True),
           "W1": q["W1"] - LR * xq.transpose(0, 2, 1) @ gh, "b1": q["b1"] - LR * gh.sum(1, keepdims=True)}
    print(f"loss before the step: {loss:.5f} (NumPy: {np.mean((yy - tgt) ** 2):.5f})")
    for k in ref:
        err = np.abs(got[k] - ref[k]).max() / np.abs(ref[k]).max()
        print(f"{k}: max relative error vs NumPy float64 {err:.2e}")
        assert err < 2e-3, (k, err)


if __name__ == "__main__":
    require_gpu()  # one line and exit where no GPU can be used, before any other work
    main()
