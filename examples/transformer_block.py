"""One pre-norm transformer block, forward and backward, on cuDNN: layer norms, matmuls and GELU as graphs, attention
through ``cudnn_py.sdpa`` / ``sdpa_backward``; every output and gradient checked against the same block in NumPy
float64.

    h1 = LN1(x);  q, k, v = h1 Wqkv (one matmul, heads interleaved);  a = causal attention(q, k, v)
    y1 = x + a Wo;  h2 = LN2(y1);  u = h2 W1;  y = y1 + gelu(u) W2

The backward takes dy (random) and returns dx and the gradients of every weight (Wqkv, Wo, W1, W2, both layer
norms' scale and bias). Activations are (1, B*S, E) bfloat16 tensors (float32 math inside each kernel); q, k and v are
strided (B, H, S, D) views into the qkv matmul's output, and dq, dk, dv are written into one such buffer so that the
next matmul reads them as a single (B*S, 3E) matrix. Transposes are strides, not copies.

Run: python examples/transformer_block.py        (prints the max error of each tensor; exits 1 if one is too big)
"""
import sys
from math import erf, sqrt

import ml_dtypes
import numpy as np

import cudnn_py.graph as G
from cudnn_py.cli.prerequisites import require_gpu
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, empty, to_device
from cudnn_py.ops.sdpa import sdpa, sdpa_backward

B, S, E, H, MLP, EPS = 2, 128, 256, 4, 1024, 1e-5
D = E // H
BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = 4e-2  # max |error| / max |reference|: every tensor passes through a few bfloat16 roundings


def T(a: DeviceArray) -> DeviceArray:
    """(1, m, n) -> its transpose (1, n, m), same memory."""
    _, m, n = a.shape
    return DeviceArray(a.ptr, (1, n, m), a.dtype, (m * n, 1, n), device_id=a.device_id, owner=a)


def heads(buf: DeviceArray, part: int) -> DeviceArray:
    """The (B, H, S, D) view of part ``part`` (0 q, 1 k, 2 v) of a (1, B*S, 3E) buffer (BSHD, interleaved)."""
    return DeviceArray(buf.ptr + part * E * buf.dtype.itemsize, (B, H, S, D), buf.dtype, (S * 3 * E, D, 3 * E, 1),
                       device_id=buf.device_id, owner=buf)


def tokens(a: DeviceArray) -> DeviceArray:
    """A packed (B, H, S, D) tensor in BSHD order seen as (1, B*S, E)."""
    return DeviceArray(a.ptr, (1, B * S, E), a.dtype, device_id=a.device_id, owner=a)


def run(h, build, **inputs) -> dict:
    """Build a graph from ``build(g, tensors) -> {name: output tensor}``, run it once; returns the output arrays."""
    g = G.Graph(io_dtype="bfloat16", compute_dtype="float32", name=build.__name__)
    ts = {k: g.tensor_like(v, k) for k, v in inputs.items()}
    outs = build(g, ts)
    for n, t in outs.items():
        t.set_output(True).set_name(n)
    g.build(h)
    arrays = {n: empty(t.shape, t.np_dtype) for n, t in outs.items()}
    g.execute(h, {**{ts[k]: v for k, v in inputs.items()}, **{outs[n]: a for n, a in arrays.items()}})
    return arrays


# -- the graphs ------------------------------------------------------------------------------------------------
def layer_norm(g, t):
    y, mean, inv = g.norm_forward(t["x"], t["gamma"], t["beta"], mode="layer", epsilon=EPS)
    return {"y": y, "mean": mean, "inv": inv}


def matmul(g, t):
    return {"c": g.matmul(t["a"], t["b"])}


def matmul_residual(g, t):
    return {"c": g.add(g.matmul(t["a"], t["b"]), t["r"])}


def matmul_gelu(g, t):
    u = g.matmul(t["a"], t["b"])
    return {"u": u, "gelu": g.gelu(u)}


def matmul_gelu_backward(g, t):
    return {"du": g.gelu_backward(g.matmul(t["dy"], t["wT"]), t["u"])}


def layer_norm_backward(g, t):
    dx, dgamma, dbeta = g.norm_backward(t["dy"], t["x"], t["gamma"], mean=t["mean"], inv_variance=t["inv"])
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}


def add(g, t):
    return {"c": g.add(t["a"], t["b"])}


# -- the float64 reference ------------------------------------------------------------------------------------
_erf = np.vectorize(erf)


def ln_ref(x, gamma, beta):
    mu = x.mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(-1, keepdims=True) + EPS)
    return (x - mu) * inv * gamma + beta, (x - mu) * inv, inv


def ln_backward_ref(dy, xhat, inv, gamma):
    dxh = dy * gamma
    dx = inv * (dxh - dxh.mean(-1, keepdims=True) - xhat * (dxh * xhat).mean(-1, keepdims=True))
    return dx, (dy * xhat).sum((0, 1), keepdims=True), dy.sum((0, 1), keepdims=True)


def reference(p, x, dy):
    """Forward output and every gradient of the block in float64."""
    h1, xh1, inv1 = ln_ref(x, p["gamma1"], p["beta1"])
    qkv = (h1 @ p["Wqkv"]).reshape(B, S, 3, H, D)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / sqrt(D) + np.triu(np.full((S, S), -np.inf), 1)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    a = np.einsum("bhqk,bhkd->bhqd", pr, v).transpose(0, 2, 1, 3).reshape(1, B * S, E)
    y1 = x + a @ p["Wo"]
    h2, xh2, inv2 = ln_ref(y1, p["gamma2"], p["beta2"])
    u = h2 @ p["W1"]
    gl = 0.5 * u * (1 + _erf(u / sqrt(2)))
    y = y1 + gl @ p["W2"]
    g = {"W2": gl.transpose(0, 2, 1) @ dy}
    dgl = dy @ p["W2"].transpose(0, 2, 1)
    du = dgl * (0.5 * (1 + _erf(u / sqrt(2))) + u * np.exp(-u * u / 2) / sqrt(2 * np.pi))
    g["W1"] = h2.transpose(0, 2, 1) @ du
    dy1_ln, g["gamma2"], g["beta2"] = ln_backward_ref(du @ p["W1"].transpose(0, 2, 1), xh2, inv2, p["gamma2"])
    dy1 = dy + dy1_ln
    g["Wo"] = a.transpose(0, 2, 1) @ dy1
    da = (dy1 @ p["Wo"].transpose(0, 2, 1)).reshape(B, S, H, D).transpose(0, 2, 1, 3)
    dv = np.einsum("bhqk,bhqd->bhkd", pr, da)
    dp = np.einsum("bhqd,bhkd->bhqk", da, v)
    ds = pr * (dp - (dp * pr).sum(-1, keepdims=True)) / sqrt(D)
    dq, dk = np.einsum("bhqk,bhkd->bhqd", ds, k), np.einsum("bhqk,bhqd->bhkd", ds, q)
    dqkv = np.stack([t.transpose(0, 2, 1, 3) for t in (dq, dk, dv)], axis=2).reshape(1, B * S, 3 * E)
    g["Wqkv"] = h1.transpose(0, 2, 1) @ dqkv
    dx_ln, g["gamma1"], g["beta1"] = ln_backward_ref(dqkv @ p["Wqkv"].transpose(0, 2, 1), xh1, inv1, p["gamma1"])
    g["x"] = dy1 + dx_ln
    return y, g


def main():
    rng = np.random.default_rng(0)
    p = {"Wqkv": rng.standard_normal((1, E, 3 * E)) / sqrt(E), "Wo": rng.standard_normal((1, E, E)) / sqrt(E),
         "W1": rng.standard_normal((1, E, MLP)) / sqrt(E), "W2": rng.standard_normal((1, MLP, E)) / sqrt(MLP),
         "gamma1": 1 + 0.1 * rng.standard_normal((1, 1, E)), "beta1": 0.1 * rng.standard_normal((1, 1, E)),
         "gamma2": 1 + 0.1 * rng.standard_normal((1, 1, E)), "beta2": 0.1 * rng.standard_normal((1, 1, E))}
    x, dy = rng.standard_normal((1, B * S, E)), rng.standard_normal((1, B * S, E))
    # what the GPU sees: weights and activations in bfloat16, layer-norm parameters in float32
    p = {k: v.astype(np.float32 if k.startswith(("gamma", "beta")) else BF16).astype(np.float64) for k, v in p.items()}
    x, dy = (a.astype(BF16).astype(np.float64) for a in (x, dy))
    with Handle() as h:
        d = {k: to_device(v.astype(np.float32 if k.startswith(("gamma", "beta")) else BF16)) for k, v in p.items()}
        xd, dyd = to_device(x.astype(BF16)), to_device(dy.astype(BF16))
        # forward
        ln1 = run(h, layer_norm, x=xd, gamma=d["gamma1"], beta=d["beta1"])
        qkv = run(h, matmul, a=ln1["y"], b=d["Wqkv"])["c"]
        q, k, v = (heads(qkv, i) for i in range(3))
        a, stats = sdpa(h, q, k, v, causal=True, return_stats=True)
        y1 = run(h, matmul_residual, a=tokens(a), b=d["Wo"], r=xd)["c"]
        ln2 = run(h, layer_norm, x=y1, gamma=d["gamma2"], beta=d["beta2"])
        mlp = run(h, matmul_gelu, a=ln2["y"], b=d["W1"])
        y = run(h, matmul_residual, a=mlp["gelu"], b=d["W2"], r=y1)["c"]
        # backward
        grads = {"W2": run(h, matmul, a=T(mlp["gelu"]), b=dyd)["c"]}
        du = run(h, matmul_gelu_backward, dy=dyd, wT=T(d["W2"]), u=mlp["u"])["du"]
        grads["W1"] = run(h, matmul, a=T(ln2["y"]), b=du)["c"]
        dh2 = run(h, matmul, a=du, b=T(d["W1"]))["c"]
        ln2b = run(h, layer_norm_backward, dy=dh2, x=y1, gamma=d["gamma2"], mean=ln2["mean"], inv=ln2["inv"])
        grads["gamma2"], grads["beta2"] = ln2b["dgamma"], ln2b["dbeta"]
        dy1 = run(h, add, a=dyd, b=ln2b["dx"])["c"]
        grads["Wo"] = run(h, matmul, a=T(tokens(a)), b=dy1)["c"]
        da = run(h, matmul, a=dy1, b=T(d["Wo"]))["c"]
        da_heads = DeviceArray(da.ptr, (B, H, S, D), BF16, (S * E, D, E, 1), device_id=da.device_id, owner=da)
        dqkv = empty((1, B * S, 3 * E), BF16)
        sdpa_backward(h, q, k, v, a, da_heads, stats, causal=True, dq=heads(dqkv, 0), dk=heads(dqkv, 1),
                      dv=heads(dqkv, 2))
        grads["Wqkv"] = run(h, matmul, a=T(ln1["y"]), b=dqkv)["c"]
        dh1 = run(h, matmul, a=dqkv, b=T(d["Wqkv"]))["c"]
        ln1b = run(h, layer_norm_backward, dy=dh1, x=xd, gamma=d["gamma1"], mean=ln1["mean"], inv=ln1["inv"])
        grads["gamma1"], grads["beta1"] = ln1b["dgamma"], ln1b["dbeta"]
        grads["x"] = run(h, add, a=dy1, b=ln1b["dx"])["c"]
        got = {"y": y.to_numpy()} | {k: v.to_numpy() for k, v in grads.items()}

    ref_y, ref = reference(p, x, dy)
    ref = {"y": ref_y, **ref}
    worst = 0.0
    for k in ("y", "x", "Wqkv", "Wo", "W1", "W2", "gamma1", "beta1", "gamma2", "beta2"):
        g, r = got[k].astype(np.float64), ref[k]
        err = float(np.abs(g - r).max() / np.abs(r).max())
        worst = max(worst, err)
        print(f"{'d' + k if k != 'y' else 'y':8s} {str(r.shape):16s} max |error| / max |float64 ref| = {err:.2e}")
    print(f"worst {worst:.2e} (bound {TOL:.0e}): {'OK' if worst <= TOL else 'TOO LARGE'}")
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    require_gpu()  # one line and exit where no GPU can be used, before any other work
    sys.exit(main())
