"""A ResNet basic block trained one SGD step through cuDNN graphs, checked against float64 NumPy and the legacy API.

    out = relu(bn2(conv2(relu(bn1(conv1(x))))) + x)      3x3 convolutions, padding 1, NHWC float16

The step runs three ways from the same start, each checked against a float64 NumPy reference:

* ``fused``: :class:`FusedBlock`, fused backend graphs over preallocated buffers (batch-norm statistics from the
  convolutions' genstats epilogue and bn_finalize, ReLU backward and the dBN weights fused into the data gradient,
  the residual add into the last data gradient, one SGD graph per parameter dtype): 13 graphs and 2 updates;
* ``graph``: :class:`Block` with ``engine="graph"``, the Pythonic calls one cached graph each;
* ``legacy``: :class:`Block` with ``engine="legacy"``, the deprecated C calls.

``--bench`` times a step of each (and torch's, channels_last with ``cudnn.benchmark``) on a 32x64x56x56 block.

Run: python examples/graph_resnet_block.py [--bench] [--shape N,C,H,W]
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys

import numpy as np

from cudnn_py.cli.prerequisites import require_gpu

EPS, MOMENTUM, LR = 1e-5, 0.1, 0.05


# ---------------------------------------------------------------- float64 NumPy reference (logical NCHW)

def _conv(x, w):
    """3x3 convolution, stride 1, padding 1."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = x.shape[2:]
    return sum(np.einsum("nchw,kc->nkhw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
               for i in range(3) for j in range(3))


def _conv_bwd(x, w, dy):
    """(dx, dw) of :func:`_conv`."""
    h, wd = x.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + wd] += np.einsum("nkhw,kc->nchw", dy, w[:, :, i, j])
            dw[:, :, i, j] = np.einsum("nkhw,nchw->kc", dy, xp[:, :, i:i + h, j:j + wd])
    return dxp[:, :, 1:-1, 1:-1], dw


def _bn(x, g, b):
    mu = x.mean(axis=(0, 2, 3), keepdims=True)
    inv = 1.0 / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + EPS)
    xh = (x - mu) * inv
    return xh * g.reshape(mu.shape) + b.reshape(mu.shape), xh, inv


def _bn_bwd(dy, xh, inv, g):
    m = dy.size / dy.shape[1]
    db = dy.sum(axis=(0, 2, 3))
    dg = (dy * xh).sum(axis=(0, 2, 3))
    dx = g.reshape(1, -1, 1, 1) * inv / m * (m * dy - db.reshape(1, -1, 1, 1) - xh * dg.reshape(1, -1, 1, 1))
    return dx, dg, db


#: where a float64 pre-activation is within KINK * its largest magnitude of zero, float16 rounding decides which side
#: of the ReLU the device lands on; there the reference takes the device's side (see :func:`reference_step`)
KINK = 1e-2


def _relu_mask(z, device_mask):
    """``z > 0``, except near zero (:data:`KINK`) where ``device_mask`` (the device's ``activation > 0``) decides."""
    if device_mask is None:
        return z > 0
    return np.where(np.abs(z) <= KINK * np.abs(z).max(), device_mask, z > 0)


def reference_step(x, dout, p, masks=None):
    """Forward, backward and the SGD update in float64; returns (out, dx, updated parameters).

    ``masks``: the device's ``(a1 > 0, out > 0)``, taken only where a pre-activation rounds to either side of the
    ReLU (a flipped mask changes a gradient by the whole incoming gradient, which no tolerance should absorb)."""
    m1, m2 = masks or (None, None)
    y1 = _conv(x, p["w1"])
    z1, xh1, inv1 = _bn(y1, p["s1"], p["b1"])
    r1 = _relu_mask(z1, m1)
    a1 = z1 * r1
    y2 = _conv(a1, p["w2"])
    z2, xh2, inv2 = _bn(y2, p["s2"], p["b2"])
    r2 = _relu_mask(z2 + x, m2)
    out = (z2 + x) * r2
    d = dout * r2
    dy2, ds2, db2 = _bn_bwd(d, xh2, inv2, p["s2"])
    da1, dw2 = _conv_bwd(a1, p["w2"], dy2)
    dy1, ds1, db1 = _bn_bwd(da1 * r1, xh1, inv1, p["s1"])
    dxm, dw1 = _conv_bwd(x, p["w1"], dy1)
    grads = {"w1": dw1, "w2": dw2, "s1": ds1, "b1": db1, "s2": ds2, "b2": db2}
    return out, dxm + d, {k: p[k] - LR * grads[k] for k in p}


# ---------------------------------------------------------------- the block on the GPU

def _nhwc_view(buf, shape):
    """Logical (N, C, H, W) over a (N, H, W, C) buffer."""
    from cudnn_py.core.memory import DeviceArray
    n, c, h, w = shape
    return DeviceArray(buf.ptr, shape, buf.dtype, (h * w * c, 1, w * c, c), device_id=buf.device_id, owner=buf)


def _physical(a):
    """The (N, H, W, C) buffer under a logical NHWC-strided (N, C, H, W) array (what the NHWC convolution takes)."""
    from cudnn_py.core.memory import DeviceArray
    n, c, h, w = a.shape
    return DeviceArray(a.ptr, (n, h, w, c), a.dtype, device_id=a.device_id, owner=a)


class Block:
    """The block's device parameters (float16 NHWC weights, float32 batch-norm parameters and statistics)."""

    def __init__(self, h, params: dict, c: int):
        from cudnn_py.core.memory import to_device
        from cudnn_py.ops.convolution import Convolution
        self.h, self.c = h, c
        self.conv = Convolution(padding=1, layout="NHWC")
        self.w = {k: to_device(np.ascontiguousarray(params[k].transpose(0, 2, 3, 1)).astype(np.float16))
                  for k in ("w1", "w2")}
        pshape = (1, c, 1, 1)  # the shape batch norm's gradients come back in
        self.p = {k: to_device(params[k].reshape(pshape).astype(np.float32)) for k in ("s1", "b1", "s2", "b2")}
        self.stats = {k: to_device(np.full(pshape, 0.0 if k.startswith("m") else 1.0, np.float32))
                      for k in ("m1", "v1", "m2", "v2")}

    def host(self) -> dict:
        """The parameters as float64 NumPy arrays in the reference's layout."""
        out = {k: v.to_numpy().astype(np.float64).transpose(0, 3, 1, 2) for k, v in self.w.items()}
        out.update({k: v.to_numpy().astype(np.float64).reshape(-1) for k, v in self.p.items()})
        return out

    def step(self, x, dout, engine: str):
        """One forward + backward + SGD step; x and dout logical (N, C, H, W) NHWC float16. Returns (out, dx)."""
        from cudnn_py.core.memory import empty
        from cudnn_py.ops import batchnorm as bn
        from cudnn_py.ops import conv_calls as cv
        from cudnn_py.ops import tensor_ops as to
        h, conv, w, p, s = self.h, self.conv, self.w, self.p, self.stats
        y1 = _nhwc_view(cv.convolution_forward(h, conv, _physical(x), w["w1"], engine=engine), x.shape)
        r1 = bn.batchnorm_forward_training_ex(h, y1, p["s1"], p["b1"], ops="bn_activation", epsilon=EPS,
                                              factor=MOMENTUM, running_mean=s["m1"], running_var=s["v1"],
                                              engine=engine)
        y2 = _nhwc_view(cv.convolution_forward(h, conv, _physical(r1.y), w["w2"], engine=engine), x.shape)
        r2 = bn.batchnorm_forward_training_ex(h, y2, p["s2"], p["b2"], z=x, ops="bn_add_activation", epsilon=EPS,
                                              factor=MOMENTUM, running_mean=s["m2"], running_var=s["v2"],
                                              engine=engine)
        g2 = bn.batchnorm_backward_ex(h, y2, r2.y, dout, p["s2"], p["b2"], r2.saved_mean, r2.saved_inv_var,
                                      r2.reserve, ops="bn_add_activation", epsilon=EPS, engine=engine)
        dy2 = _physical(g2.dx)
        da1 = _nhwc_view(cv.convolution_backward_data(h, conv, w["w2"], dy2, engine=engine), x.shape)
        dw2 = cv.convolution_backward_filter(h, conv, _physical(r1.y), dy2, w_shape=w["w2"].shape, engine=engine)
        g1 = bn.batchnorm_backward_ex(h, y1, r1.y, da1, p["s1"], p["b1"], r1.saved_mean, r1.saved_inv_var,
                                      r1.reserve, ops="bn_activation", epsilon=EPS, engine=engine)
        dy1 = _physical(g1.dx)
        dxm = _nhwc_view(cv.convolution_backward_data(h, conv, w["w1"], dy1, engine=engine), x.shape)
        dw1 = cv.convolution_backward_filter(h, conv, _physical(x), dy1, w_shape=w["w1"].shape, engine=engine)
        dx = to.op_tensor(h, "add", dxm, g2.dz, c=_nhwc_view(empty(dy1.shape, np.float16), x.shape), engine=engine)
        for param, grad in ((w["w1"], dw1), (w["w2"], dw2), (p["s1"], g1.dscale), (p["b1"], g1.dbias),
                            (p["s2"], g2.dscale), (p["b2"], g2.dbias)):
            to.add_tensor(h, grad, param, alpha=-LR, beta=1.0, engine=engine)
        self.a1 = r1.y
        return r2.y, dx


def _at(buf, offset: int, shape, strides=None):
    """A view of ``shape`` (and ``strides``, elements) into device buffer ``buf`` starting ``offset`` elements in."""
    from cudnn_py.core.memory import DeviceArray
    return DeviceArray(buf.ptr + offset * buf.dtype.itemsize, shape, buf.dtype, strides, device_id=buf.device_id,
                       owner=buf)


class FusedBlock:
    """The block as fused backend graphs over preallocated buffers, the way a training loop uses the graph API:

    forward   conv1 + genstats | bn_finalize1 | scale-bias-ReLU | conv2 + genstats | bn_finalize2 |
              scale-bias + residual add + ReLU
    backward  ReLU backward | batch-norm backward (bn2) | dgrad2 + ReLU backward (bn1 recomputed) + dBN1 weights |
              wgrad2 | dx coefficients of bn1 | dgrad1 + residual add | wgrad1
    update    one SGD graph per dtype over flat parameter / gradient buffers

    Batch-norm statistics come from the convolutions' epilogues (genstats) instead of a separate pass over their
    outputs. Every intermediate lives at a fixed address, so each execute is a variant-pack lookup and one
    ``cudnnBackendExecute``. The fusions are those cuDNN 9.19 has engines for on Hopper (measured); e.g. a
    scale-bias-ReLU prologue on the convolution and ReLU backward fused into the batch-norm backward have none.
    """

    def __init__(self, h, params: dict, shape):
        import cudnn_py.graph as G
        from cudnn_py.core.memory import empty, to_device
        n, c, hh, ww = shape
        self.h, self.shape, self.c = h, shape, c
        act = (hh * ww * c, 1, ww * c, c)  # NHWC strides of a logical (N, C, H, W) activation
        wst = (9 * c, 1, 3 * c, c)         # the same for (K, C, 3, 3) weights
        wsize = 9 * c * c
        self.wflat = to_device(np.concatenate([params[k].transpose(0, 2, 3, 1).ravel() for k in ("w1", "w2")])
                               .astype(np.float16))
        self.pflat = to_device(np.concatenate([params[k] for k in ("s1", "b1", "s2", "b2")]).astype(np.float32))
        self.gw, self.gp = empty(self.wflat.shape, np.float16), empty(self.pflat.shape, np.float32)
        a = {"w1": _at(self.wflat, 0, (c, c, 3, 3), wst), "w2": _at(self.wflat, wsize, (c, c, 3, 3), wst),
             "dw1": _at(self.gw, 0, (c, c, 3, 3), wst), "dw2": _at(self.gw, wsize, (c, c, 3, 3), wst)}
        for i, k in enumerate(("s1", "b1", "s2", "b2")):
            a[k], a["d" + k] = _at(self.pflat, i * c, (1, c, 1, 1)), _at(self.gp, i * c, (1, c, 1, 1))
        for k in ("y1", "a1", "y2", "out", "d", "dy2", "dr1", "dy1", "dx"):
            a[k] = _at(empty((n, hh, ww, c), np.float16), 0, shape, act)
        for k in ("sum1", "sq1", "eqs1", "eqb1", "mean1", "inv1", "sum2", "sq2", "eqs2", "eqb2", "mean2", "inv2",
                  "edy1", "ex1", "eb1"):
            a[k] = empty((1, c, 1, 1), np.float32)
        for k in ("rm1", "rm2"):
            a[k] = to_device(np.zeros((1, c, 1, 1), np.float32))
        for k in ("rv1", "rv2"):
            a[k] = to_device(np.ones((1, c, 1, 1), np.float32))
        a["x"] = a["dout"] = _at(a["y1"], 0, shape, act)  # stand-ins with the callers' strides while building
        self.a, self.runs = a, []
        self.a1 = a["a1"]  # the first ReLU's output (what the check reads the device's mask from)

        def graph(inputs: str, build, outputs: str, io="float16"):
            """Build ``build(g, *input tensors)`` -> output tensors, bound by role name to the arrays in ``a``."""
            g = G.Graph(io_dtype=io, compute_dtype="float32")
            ins = [g.tensor_like(a[r], name=r) for r in inputs.split()]
            res = build(g, *ins)
            res = res if isinstance(res, (tuple, list)) else (res,)
            roles = outputs.split()
            for t, r in zip(res, roles):  # an output updating an input in place (running statistics) is renamed
                t.set_output(True).set_name(r + "_next" if r in inputs.split() else r).set_dtype(a[r].dtype)
                t.strides = a[r].strides
            g.build(h)
            self.runs.append((g.executor(h, *ins, *res[:len(roles)]), tuple(inputs.split() + roles)))

        count = n * hh * ww

        def conv_stats(g, x, w):
            y = g.conv_fprop(x, w, padding=1)
            return (y, *g.genstats(y))

        def finalize(g, s, q, sc, b, rm, rv):
            return g.bn_finalize(s, q, sc, b, accum_count=count, running_mean=rm, running_var=rv, momentum=MOMENTUM,
                                 epsilon=EPS)

        graph("x w1", conv_stats, "y1 sum1 sq1")
        graph("sum1 sq1 s1 b1 rm1 rv1", finalize, "eqs1 eqb1 mean1 inv1 rm1 rv1", io="float32")
        graph("y1 eqs1 eqb1", lambda g, y, s, b: g.relu(g.add(g.mul(y, s), b)), "a1")
        graph("a1 w2", conv_stats, "y2 sum2 sq2")
        graph("sum2 sq2 s2 b2 rm2 rv2", finalize, "eqs2 eqb2 mean2 inv2 rm2 rv2", io="float32")
        graph("y2 eqs2 eqb2 x", lambda g, y, s, b, x: g.relu(g.add(g.add(g.mul(y, s), b), x)), "out")
        graph("dout out", lambda g, dy, o: g.relu_backward(dy, o), "d")
        graph("d y2 s2 mean2 inv2", lambda g, d, y, s, m, iv: g.norm_backward(d, y, s, mean=m, inv_variance=iv,
                                                                             mode="batch"), "dy2 ds2 db2")

        def dgrad_drelu_dbn(g, dy, w, y, m, iv, s, b):
            dr = g.relu_backward(g.conv_dgrad(dy, w, 1, x_shape=shape), g.add(g.mul(g.mul(g.sub(y, m), iv), s), b))
            return (dr, *g.bn_backward_weights(dr, y, m, iv, s))
        graph("dy2 w2 y1 mean1 inv1 s1 b1", dgrad_drelu_dbn, "dr1 ds1 db1 edy1 ex1 eb1")
        graph("dy2 a1", lambda g, dy, x: g.conv_wgrad(dy, x, 1, w_shape=(c, c, 3, 3)), "dw2")
        graph("dr1 y1 edy1 ex1 eb1", lambda g, d, y, p, q, r: g.add(g.add(g.mul(d, p), g.mul(y, q)), r), "dy1")
        graph("dy1 w1 d", lambda g, dy, w, d: g.add(g.conv_dgrad(dy, w, 1, x_shape=shape), d), "dx")
        graph("dy1 x", lambda g, dy, x: g.conv_wgrad(dy, x, 1, w_shape=(c, c, 3, 3)), "dw1")

    def host(self) -> dict:
        """The parameters as float64 NumPy arrays in the reference's layout."""
        c = self.c
        w = self.wflat.to_numpy().astype(np.float64).reshape(2, c, 3, 3, c).transpose(0, 1, 4, 2, 3)
        p = self.pflat.to_numpy().astype(np.float64).reshape(4, c)
        return {"w1": w[0], "w2": w[1], **dict(zip(("s1", "b1", "s2", "b2"), p))}

    def step(self, x, dout):
        """One forward + backward + SGD step; x and dout logical (N, C, H, W) NHWC float16. Returns (out, dx), the
        block's own buffers (overwritten by the next step)."""
        from cudnn_py.ops import tensor_ops as to
        a = {**self.a, "x": x, "dout": dout}
        for ex, roles in self.runs:
            ex(*[a[r] for r in roles])
        to.add_tensor(self.h, self.gw, self.wflat, alpha=-LR, beta=1.0, engine="graph")
        to.add_tensor(self.h, self.gp, self.pflat, alpha=-LR, beta=1.0, engine="graph")
        return a["out"], a["dx"]


def init_params(rng, c: int) -> dict:
    return {"w1": rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c), "w2": rng.standard_normal((c, c, 3, 3)) /
            np.sqrt(9 * c), "s1": 1 + 0.1 * rng.standard_normal(c), "b1": 0.1 * rng.standard_normal(c),
            "s2": 1 + 0.1 * rng.standard_normal(c), "b2": 0.1 * rng.standard_normal(c)}


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


ENGINES = ("fused", "graph", "legacy")  # FusedBlock; Block with engine="graph"; Block with engine="legacy"


def check(h, shape, rng) -> dict:
    """One step of each of :data:`ENGINES` from the same start, each against float64 NumPy; returns
    {what: (error per engine)} relative to the reference's largest magnitude."""
    from cudnn_py.core.memory import to_device
    n, c, hh, ww = shape
    params = init_params(rng, c)
    x = rng.standard_normal(shape).astype(np.float16).astype(np.float64)
    dout = rng.standard_normal(shape).astype(np.float16).astype(np.float64)
    q = {k: (v.astype(np.float16) if k.startswith("w") else v.astype(np.float32)).astype(np.float64)
         for k, v in params.items()}
    errors: dict = {}
    xd = _nhwc_view(to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(np.float16)), shape)
    dd = _nhwc_view(to_device(np.ascontiguousarray(dout.transpose(0, 2, 3, 1)).astype(np.float16)), shape)
    for engine in ENGINES:
        blk = FusedBlock(h, params, shape) if engine == "fused" else Block(h, params, c)
        out, dx = blk.step(xd, dd) if engine == "fused" else blk.step(xd, dd, engine)
        got_out = out.to_numpy().astype(np.float64)
        masks = (blk.a1.to_numpy() > 0, got_out > 0)
        out_ref, dx_ref, new_ref = reference_step(x, dout, q, masks)
        got = {"out": got_out, "dx": dx.to_numpy().astype(np.float64), **blk.host()}
        for what, ref in (("out", out_ref), ("dx", dx_ref), *new_ref.items()):
            errors.setdefault(what, []).append(rel(got[what], ref))
    return {k: tuple(v) for k, v in errors.items()}


def bench(h, shape, repeats: int = 10) -> dict:
    """Median ms of one training step (events on the handle's stream around the whole step, host time included) per
    :data:`ENGINES` and torch (channels_last, cudnn.benchmark, autocast float16)."""
    from cudnn_py.core.memory import to_device
    from cudnn_py.core.streams import timer
    rng = np.random.default_rng(0)
    n, c, hh, ww = shape
    params = init_params(rng, c)
    out = {}
    xd = _nhwc_view(to_device(rng.standard_normal((n, hh, ww, c)).astype(np.float16)), shape)
    dd = _nhwc_view(to_device(rng.standard_normal((n, hh, ww, c)).astype(np.float16)), shape)
    for engine in ENGINES:
        if engine == "fused":
            blk = FusedBlock(h, params, shape)
            step = functools.partial(blk.step, xd, dd)
        else:
            step = functools.partial(Block(h, params, c).step, xd, dd, engine)
        for _ in range(3):
            step()
        times = []
        for _ in range(repeats):
            with timer(h.stream) as t:
                step()
            times.append(t.ms)
        out[engine] = statistics.median(times)
    try:
        import torch
    except ImportError:
        return out
    torch.backends.cudnn.benchmark = True
    cl = torch.channels_last
    mods = torch.nn.ModuleDict({
        "c1": torch.nn.Conv2d(c, c, 3, padding=1, bias=False), "n1": torch.nn.BatchNorm2d(c),
        "c2": torch.nn.Conv2d(c, c, 3, padding=1, bias=False), "n2": torch.nn.BatchNorm2d(c)}).cuda()
    mods = mods.to(memory_format=cl)
    opt = torch.optim.SGD(mods.parameters(), lr=LR)
    xt = torch.randn(shape, device="cuda").to(memory_format=cl)
    gt = torch.randn(shape, device="cuda").to(memory_format=cl)

    def tstep():
        with torch.autocast("cuda", dtype=torch.float16):
            y = torch.relu(mods["n2"](mods["c2"](torch.relu(mods["n1"](mods["c1"](xt))))) + xt)
        opt.zero_grad(set_to_none=True)
        y.backward(gt)
        opt.step()
    for _ in range(5):
        tstep()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        tstep()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    out["torch"] = statistics.median(times)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="2,8,8,8", help="N,C,H,W of the checked step (default 2,8,8,8)")
    ap.add_argument("--bench", action="store_true", help="also time a 32x64x56x56 step (fused graphs, graph "
                    "calls, legacy calls, torch)")
    args = ap.parse_args(argv)
    require_gpu(ap.prog)  # before any other work
    from cudnn_py.core.handle import Handle
    with Handle() as h:
        shape = tuple(int(v) for v in args.shape.split(","))
        errors = check(h, shape, np.random.default_rng(0))
        print(f"one SGD step of a ResNet basic block {shape} float16 NHWC, max |got - ref| / max |ref| against "
              f"float64 NumPy:")
        print(f"  {'tensor':<8}" + "".join(f"{e:>12}" for e in ENGINES))
        for k, errs in errors.items():
            print(f"  {k:<8}" + "".join(f"{v:>12.2e}" for v in errs))
        worst = max(max(errs[:2]) for errs in errors.values())
        if args.bench:
            t = bench(h, (32, 64, 56, 56))
            print("training step 32x64x56x56 float16 NHWC, median device ms: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in t.items()))
    return 0 if worst < 2e-2 else 2


if __name__ == "__main__":
    sys.exit(main())
