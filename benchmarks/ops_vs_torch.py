"""Every Pythonic operation on a deprecated legacy entry point: device time through the legacy call, through
the graph path (``engine="graph"``) and through torch's equivalent, in one table (asserts nothing).

Device time: ``--calls`` calls queued behind a sleep kernel (``torch.cuda._sleep``) that holds the stream
until the host has queued them all, between two CUDA events, so the time is the GPU's alone and not the Python
call overhead; median over ``--repeats`` of the per-call time, after a warm-up. Every engine runs on the default
stream (the handle's and torch's). The "call" columns time the same calls without the sleep: per-call time of a
Python loop, which is the host overhead wherever it exceeds the device time. "GB/s" counts the bytes each call
must read and write once. A cell is "-" where that engine refuses the configuration (reason under the table).

Run: python benchmarks/ops_vs_torch.py [--repeats 7] [--calls 20] [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

import cudnn_py.ops.activation as A
import cudnn_py.ops.batchnorm as BN
import cudnn_py.ops.normalization as NM
import cudnn_py.ops.pooling as P
import cudnn_py.ops.tensor_ops as T
from cudnn_py.cli.prerequisites import script_args
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, to_device

try:
    import torch
    import torch.nn.functional as F
    from timing import event_ms  # this folder's CUDA-event timer (it needs torch)
except ImportError:  # pragma: no cover
    torch = None


@dataclass
class Row:
    op: str
    config: str
    gbytes: float                      # GB each call reads and writes
    legacy_ms: float | None = None
    graph_ms: float | None = None
    torch_ms: float | None = None
    legacy_call_ms: float | None = None
    graph_call_ms: float | None = None
    notes: list = field(default_factory=list)

    def ratio(self, a: str, b: str) -> float | None:
        x, y = getattr(self, a), getattr(self, b)
        return None if x is None or y is None else x / y


def _strides(shape, layout):
    n = len(shape)
    order = [0] + list(range(2, n)) + [1] if layout == "NHWC" else list(range(n))
    st, acc = [0] * n, 1
    for i in reversed(order):
        st[i] = acc
        acc *= shape[i]
    return tuple(st)


class Bench:
    def __init__(self, h, calls: int, repeats: int, json_path: str | None = None):
        self.h, self.calls, self.repeats, self.json_path = h, calls, repeats, json_path
        self.rng = np.random.default_rng(0)
        self.rows: list[Row] = []
        self._keep = []

    # -- data -------------------------------------------------------------------------------------------------
    def dev(self, shape, dtype="float16", layout="NCHW", positive=False):
        """A device array of logical ``shape`` in ``layout`` and the torch view of the same memory."""
        a = self.rng.standard_normal(shape).astype(np.float32)
        if positive:
            a = np.abs(a) + 0.1
        st = _strides(shape, layout)
        order = sorted(range(len(shape)), key=lambda i: -st[i])
        buf = to_device(np.ascontiguousarray(a.astype(dtype).transpose(order)), self.h.stream)
        d = DeviceArray(buf.ptr, shape, np.dtype(dtype), st, device_id=buf.device_id, owner=buf)
        t = torch.from_dlpack(buf).permute(*np.argsort(order).tolist()) if torch is not None else None
        self._keep.append(buf)
        return d, t

    # -- one row ----------------------------------------------------------------------------------------------
    def row(self, op: str, config: str, nbytes: float, legacy=None, graph=None, torch_fn=None):
        """Time one operation through each engine given (None: not timed); appends and returns its row."""
        r = Row(op, config, nbytes / 1e9)
        for name, fn in (("legacy", legacy), ("graph", graph), ("torch", torch_fn)):
            if fn is None:
                continue
            try:
                setattr(r, f"{name}_ms", event_ms(fn, self.calls, self.repeats, sleep=True))
                if name != "torch":
                    setattr(r, f"{name}_call_ms", event_ms(fn, self.calls, self.repeats))
            except Exception as e:  # noqa: BLE001 - the table says which engine refused and why
                r.notes.append(f"{name}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        self.rows.append(r)
        if self.json_path:  # written after every row: a crash keeps what was measured
            with open(self.json_path, "w") as fh:
                json.dump([asdict(x) for x in self.rows], fh, indent=1)
        print(f"  {op:<34}{config:<44}" + "".join(f"{'-' if v is None else f'{v:.4f}':>10}"
                                              for v in (r.legacy_ms, r.graph_ms, r.torch_ms)), file=sys.stderr)
        return r


def run_all(b: Bench, quick: bool) -> None:
    h = b.h
    N = 8 if quick else 32
    # ---- activations: the issue's ReLU case, and a transcendental one
    shp = (N, 256, 56, 56)
    nb = 2 * np.prod(shp) * 2
    for layout in ("NCHW", "NHWC"):
        x, xt = b.dev(shp, "float16", layout)
        y, yt = b.dev(shp, "float16", layout)
        b.row("activation_forward relu", f"fp16 {layout} {shp}", nb,
              lambda: A.activation_forward(h, "relu", x, y=y, engine="legacy"),
              lambda: A.activation_forward(h, "relu", x, y=y, engine="graph"),
              lambda: torch.relu(xt))
    x, xt = b.dev(shp, "float16", "NHWC")
    y, yt = b.dev(shp, "float16", "NHWC")
    dy, dyt = b.dev(shp, "float16", "NHWC")
    dx, _ = b.dev(shp, "float16", "NHWC")
    b.row("activation_forward sigmoid", f"fp16 NHWC {shp}", nb,
          lambda: A.activation_forward(h, "sigmoid", x, y=y, engine="legacy"),
          lambda: A.activation_forward(h, "sigmoid", x, y=y, engine="graph"), lambda: torch.sigmoid(xt))
    b.row("activation_backward relu", f"fp16 NHWC {shp}", 3 * np.prod(shp) * 2,
          lambda: A.activation_backward(h, "relu", x, y, dy, dx=dx, engine="legacy"),
          lambda: A.activation_backward(h, "relu", x, y, dy, dx=dx, engine="graph"),
          lambda: torch.ops.aten.threshold_backward(dyt, xt, 0))
    # ---- tensor ops
    c, ct = b.dev(shp, "float16", "NHWC")
    bias, biast = b.dev((1, 256, 1, 1), "float16")
    b.row("add_tensor bias (1,C,1,1)", f"fp16 NHWC {shp}", nb, lambda: T.add_tensor(h, bias, c, beta=1.0, engine="legacy"),
          lambda: T.add_tensor(h, bias, c, beta=1.0, engine="graph"), lambda: ct.add_(biast))
    b.row("op_tensor add", f"fp16 NHWC {shp}", 3 * np.prod(shp) * 2,
          lambda: T.op_tensor(h, "add", x, dy, c=c, engine="legacy"),
          lambda: T.op_tensor(h, "add", x, dy, c=c, engine="graph"), lambda: torch.add(xt, dyt, out=ct))
    b.row("op_tensor mul", f"fp16 NHWC {shp}", 3 * np.prod(shp) * 2,
          lambda: T.op_tensor(h, "mul", x, dy, c=c, engine="legacy"),
          lambda: T.op_tensor(h, "mul", x, dy, c=c, engine="graph"), lambda: torch.mul(xt, dyt, out=ct))
    b.row("scale_tensor", f"fp16 NHWC {shp}", nb, lambda: T.scale_tensor(h, c, 1.0, engine="legacy"),
          lambda: T.scale_tensor(h, c, 1.0, engine="graph"), lambda: ct.mul_(1.0))
    xn, xnt = b.dev(shp, "float16", "NCHW")
    b.row("transform_tensor NCHW->NHWC", f"fp16 {shp}", nb, lambda: T.transform_tensor(h, xn, y=y, engine="legacy"),
          lambda: T.transform_tensor(h, xn, y=y, engine="graph"),
          lambda: yt.copy_(xnt))
    x32, x32t = b.dev(shp, "float32", "NHWC")
    b.row("transform_tensor fp32->fp16", f"NHWC {shp}", np.prod(shp) * 6,
          lambda: T.transform_tensor(h, x32, y=y, engine="legacy"),
          lambda: T.transform_tensor(h, x32, y=y, engine="graph"), lambda: yt.copy_(x32t))
    red, redt = b.dev((1, 256, 1, 1), "float16")
    b.row("reduce_tensor add over N,H,W", f"fp16 NHWC {shp}", np.prod(shp) * 2,
          lambda: T.reduce_tensor(h, "add", x, c=red, engine="legacy"),
          lambda: T.reduce_tensor(h, "add", x, c=red, engine="graph"),
          lambda: torch.sum(xt, dim=(0, 2, 3), keepdim=True))
    red32, _ = b.dev((1, 256, 1, 1), "float32")
    b.row("reduce_tensor add -> float32", f"fp16 NHWC {shp}", np.prod(shp) * 2,
          lambda: T.reduce_tensor(h, "add", x, c=red32, engine="legacy"),
          lambda: T.reduce_tensor(h, "add", x, c=red32, engine="graph"),
          lambda: torch.sum(xt, dim=(0, 2, 3), keepdim=True, dtype=torch.float32))
    # ---- pooling: the issue's max pooling case (ResNet stem: 3x3, stride 2, padding 1)
    pshp = (N, 128, 112, 112)
    pool = P.Pooling("max", 3, 1, 2)
    px, pxt = b.dev(pshp, "float16", "NHWC")
    yshape = pool.output_shape(pshp)
    py, _ = b.dev(yshape, "float16", "NHWC")
    pdy, pdyt = b.dev(yshape, "float16", "NHWC")
    pdx, _ = b.dev(pshp, "float16", "NHWC")
    pb = (np.prod(pshp) + np.prod(yshape)) * 2
    b.row("pooling_forward max 3x3 s2 p1", f"fp16 NHWC {pshp}", pb,
          lambda: P.pooling_forward(h, pool, px, y=py, engine="legacy"),
          lambda: P.pooling_forward(h, pool, px, y=py, engine="graph"), lambda: F.max_pool2d(pxt, 3, 2, 1))
    qx, qxt = b.dev(pshp, "float16", "NCHW")
    qy, _ = b.dev(yshape, "float16", "NCHW")
    qdy, qdyt = b.dev(yshape, "float16", "NCHW")
    qdx, _ = b.dev(pshp, "float16", "NCHW")
    b.row("pooling_forward max 3x3 s2 p1", f"fp16 NCHW {pshp}", pb, lambda: P.pooling_forward(h, pool, qx, y=qy,
                                                                                              engine="legacy"),
          lambda: P.pooling_forward(h, pool, qx, y=qy, engine="graph"), lambda: F.max_pool2d(qxt, 3, 2, 1))
    _, qidx = F.max_pool2d(qxt, 3, 2, 1, return_indices=True)
    b.row("pooling_backward max 3x3 s2 p1", f"fp16 NCHW {pshp}", pb * 2,
          lambda: P.pooling_backward(h, pool, qx, qy, qdy, dx=qdx, engine="legacy"),
          lambda: P.pooling_backward(h, pool, qx, qy, qdy, dx=qdx, engine="graph"),
          lambda: torch.ops.aten.max_pool2d_with_indices_backward(qdyt, qxt, [3, 3], [2, 2], [1, 1], [1, 1], False,
                                                                  qidx))
    apool = P.Pooling("avg_include_padding", 3, 1, 2)
    b.row("pooling_forward avg 3x3 s2 p1", f"fp16 NHWC {pshp}", pb,
          lambda: P.pooling_forward(h, apool, px, y=py, engine="legacy"),
          lambda: P.pooling_forward(h, apool, px, y=py, engine="graph"), lambda: F.avg_pool2d(pxt, 3, 2, 1))
    # ---- batch normalisation (the ResNet block's shape)
    bshp = (N, 64, 56, 56)
    bx, bxt = b.dev(bshp, "float16", "NHWC")
    by, _ = b.dev(bshp, "float16", "NHWC")
    bz, bzt = b.dev(bshp, "float16", "NHWC")
    bdy, bdyt = b.dev(bshp, "float16", "NHWC")
    bdx, _ = b.dev(bshp, "float16", "NHWC")
    sc, sct = b.dev((64,), "float32", positive=True)
    bi, bit = b.dev((64,), "float32")
    rm, rmt = b.dev((64,), "float32")
    rv, rvt = b.dev((64,), "float32", positive=True)
    sm, smt = b.dev((64,), "float32")
    siv, sivt = b.dev((64,), "float32", positive=True)
    ds, _ = b.dev((64,), "float32")
    db, _ = b.dev((64,), "float32")
    bb = 2 * np.prod(bshp) * 2
    b.row("batchnorm_forward_training", f"fp16 NHWC {bshp}", bb,
          lambda: BN.batchnorm_forward_training(h, bx, sc, bi, factor=0.1, running_mean=rm, running_var=rv, y=by,
                                                saved_mean=sm, saved_inv_var=siv, engine="legacy"),
          lambda: BN.batchnorm_forward_training(h, bx, sc, bi, factor=0.1, running_mean=rm, running_var=rv, y=by,
                                                saved_mean=sm, saved_inv_var=siv, engine="graph"),
          lambda: F.batch_norm(bxt, rmt, rvt, sct, bit, training=True, momentum=0.1))
    b.row("batchnorm_forward_inference", f"fp16 NHWC {bshp}", bb,
          lambda: BN.batchnorm_forward_inference(h, bx, sc, bi, rm, rv, y=by, engine="legacy"),
          lambda: BN.batchnorm_forward_inference(h, bx, sc, bi, rm, rv, y=by, engine="graph"),
          lambda: F.batch_norm(bxt, rmt, rvt, sct, bit, training=False))
    b.row("batchnorm_backward", f"fp16 NHWC {bshp}", 3 * np.prod(bshp) * 2,
          lambda: BN.batchnorm_backward(h, bx, bdy, sc, sm, siv, dx=bdx, dscale=ds, dbias=db, engine="legacy"),
          lambda: BN.batchnorm_backward(h, bx, bdy, sc, sm, siv, dx=bdx, dscale=ds, dbias=db, engine="graph"),
          lambda: torch.ops.aten.native_batch_norm_backward(bdyt, bxt, sct, rmt, rvt, smt, sivt, True, 1e-5,
                                                            [True, True, True]))
    b.row("batchnorm_forward_training_ex add+relu", f"fp16 NHWC {bshp}", 3 * np.prod(bshp) * 2,
          lambda: BN.batchnorm_forward_training_ex(h, bx, sc, bi, z=bz, ops="bn_add_activation", y=by,
                                                   saved_mean=sm, saved_inv_var=siv, engine="legacy"),
          lambda: BN.batchnorm_forward_training_ex(h, bx, sc, bi, z=bz, ops="bn_add_activation", y=by,
                                                   saved_mean=sm, saved_inv_var=siv, engine="graph"),
          lambda: torch.relu_(F.batch_norm(bxt, None, None, sct, bit, training=True).add_(bzt)))
    r = BN.batchnorm_forward_training_ex(h, bx, sc, bi, z=bz, ops="bn_add_activation", y=by, saved_mean=sm,
                                         saved_inv_var=siv, engine="legacy")
    b.row("batchnorm_backward_ex add+relu", f"fp16 NHWC {bshp}", 4 * np.prod(bshp) * 2,
          lambda: BN.batchnorm_backward_ex(h, bx, by, bdy, sc, bi, sm, siv, r.reserve, ops="bn_add_activation",
                                           dx=bdx, dz=bz, dscale=ds, dbias=db, engine="legacy"),
          lambda: BN.batchnorm_backward_ex(h, bx, by, bdy, sc, bi, sm, siv, ops="bn_add_activation", dx=bdx, dz=bz,
                                           dscale=ds, dbias=db, engine="graph"))
    b.row("normalization_forward_training", f"fp16 NHWC {bshp}", bb,
          lambda: NM.normalization_forward_training(h, bx, sc, bi, factor=0.1, running_mean=rm, running_var=rv, y=by,
                                                    saved_mean=sm, saved_inv_var=siv, engine="legacy"),
          lambda: NM.normalization_forward_training(h, bx, sc, bi, factor=0.1, running_mean=rm, running_var=rv, y=by,
                                                    saved_mean=sm, saved_inv_var=siv, engine="graph"),
          lambda: F.batch_norm(bxt, rmt, rvt, sct, bit, training=True, momentum=0.1))
    b.row("normalization_forward_inference", f"fp16 NHWC {bshp}", bb,
          lambda: NM.normalization_forward_inference(h, bx, sc, bi, rm, rv, y=by, engine="legacy"),
          lambda: NM.normalization_forward_inference(h, bx, sc, bi, rm, rv, y=by, engine="graph"),
          lambda: F.batch_norm(bxt, rmt, rvt, sct, bit, training=False))
    b.row("normalization_backward", f"fp16 NHWC {bshp}", 3 * np.prod(bshp) * 2,
          lambda: NM.normalization_backward(h, bx, by, bdy, sc, bi, sm, siv, dx=bdx, dscale=ds, dbias=db,
              engine="legacy"),
          lambda: NM.normalization_backward(h, bx, by, bdy, sc, bi, sm, siv, dx=bdx, dscale=ds, dbias=db,
                                            engine="graph"),
          lambda: torch.ops.aten.native_batch_norm_backward(bdyt, bxt, sct, rmt, rvt, smt, sivt, True, 1e-5,
                                                            [True, True, True]))
    if torch is not None:
        _, idx = F.max_pool2d(pxt, 3, 2, 1, return_indices=True)
    b.row("pooling_backward max 3x3 s2 p1", f"fp16 NHWC {pshp}", pb * 2,
          lambda: P.pooling_backward(h, pool, px, py, pdy, dx=pdx, engine="legacy"),
          lambda: P.pooling_backward(h, pool, px, py, pdy, dx=pdx, engine="graph"),
          lambda: torch.ops.aten.max_pool2d_with_indices_backward(pdyt, pxt, [3, 3], [2, 2], [1, 1], [1, 1], False,
                                                                  idx))


def resnet_rows(b: Bench, quick: bool) -> None:
    """The ResNet basic block training step of examples/graph_resnet_block.py: fused graphs vs legacy vs torch."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "graph_resnet_block.py")
    spec = importlib.util.spec_from_file_location("graph_resnet_block", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shape = (8 if quick else 32, 64, 56, 56)
    r = Row("ResNet block train step (fwd+bwd+SGD)", f"fp16 NHWC {shape}", 0.0)
    try:
        t = mod.bench(b.h, shape, repeats=b.repeats)
        r.legacy_ms, r.graph_ms, r.torch_ms = t.get("legacy"), t.get("fused"), t.get("torch")
        r.notes.append(f"graph: the fused graphs (FusedBlock); the Pythonic engine='graph' calls {t.get('graph'):.3f} ms")
        r.notes.append("torch: channels_last, cudnn.benchmark, autocast float16, SGD")
    except Exception as e:  # noqa: BLE001 - the table says why
        r.notes.append(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    b.rows.append(r)
    print(f"  ResNet block step {shape}: legacy {r.legacy_ms} fused graphs {r.graph_ms} torch {r.torch_ms}",
          file=sys.stderr)


def plan_sweep(b: Bench) -> list[str]:
    """Device time of every plan the heuristics (A, B, FALLBACK) offer for the issue's two memory-bound cases
    through the graph API directly: ReLU fp16 NHWC 32x256x56x56 and max pooling 3x3 s2 p1 fp16 NHWC
    32x128x112x112 (heuristics mode A's first plan is what an un-tuned graph runs)."""
    import cudnn_py.graph as G
    from cudnn_py.core.memory import empty
    lines = []
    for name, shape in (("relu", (32, 256, 56, 56)), ("max_pool", (32, 128, 112, 112))):
        g = G.Graph(io_dtype="float16", name=name)
        x = g.tensor(shape, layout="NHWC", name="x")
        y = g.relu(x) if name == "relu" else g.resample(x, "max", 3, stride=2, padding=1)
        y.set_output(True)
        if name == "relu":
            y.strides = x.strides
        arrays = []
        for t in (x, y):
            order = sorted(range(4), key=lambda i: -t.strides[i])
            buf = empty(tuple(t.shape[i] for i in order), np.float16)
            buf.fill_(0.5)
            arrays.append(DeviceArray(buf.ptr, t.shape, np.float16, t.strides, device_id=buf.device_id, owner=buf))
        for plan in G.build_plans(g, b.h, ("A", "B", "FALLBACK"), policy="all", cache=False):
            ex = plan.executor(b.h, x, y)
            ms = event_ms(lambda: ex(*arrays), b.calls, b.repeats, sleep=True)
            lines.append(f"  {name:<9}{plan.tag:<28}{ms:.4f} ms")
    return lines


def format_table(rows: list[Row]) -> str:
    head = (f"{'operation':<40}{'configuration':<38}{'legacy ms':>10}{'graph ms':>10}{'torch ms':>10}"
            f"{'graph/leg':>10}{'graph/torch':>12}{'graph GB/s':>11}{'leg call':>10}{'graph call':>11}")
    lines = [head, "-" * len(head)]
    f = (lambda v, spec: "-" if v is None else format(v, spec))
    for r in rows:
        gbs = None if r.graph_ms is None or not r.gbytes > 0 else r.gbytes / (r.graph_ms * 1e-3)
        lines.append(f"{r.op:<40}{r.config:<38}{f(r.legacy_ms, '.4f'):>10}{f(r.graph_ms, '.4f'):>10}"
                     f"{f(r.torch_ms, '.4f'):>10}{f(r.ratio('graph_ms', 'legacy_ms'), '.2f'):>10}"
                     f"{f(r.ratio('graph_ms', 'torch_ms'), '.2f'):>12}{f(gbs, '.0f'):>11}"
                     f"{f(r.legacy_call_ms, '.4f'):>10}{f(r.graph_call_ms, '.4f'):>11}")
    notes = [f"  {r.op} ({r.config}): {n}" for r in rows for n in r.notes]
    return "\n".join(lines + (["", "refusals:"] + notes if notes else []))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=20, help="calls between two events (per-call time = total / calls)")
    p.add_argument("--quick", action="store_true", help="batch 8 instead of 32")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--resnet", action="store_true", help="also the ResNet block step (examples/graph_resnet_block.py)")
    p.add_argument("--plans", action="store_true", help="also every heuristics plan of the ReLU and pooling cases")
    args = script_args(p, argv, modules=("torch",))  # torch: its timings, and its sleep kernel for device times
    with Handle() as h:
        b = Bench(h, args.calls, args.repeats, args.json)
        if args.resnet:
            resnet_rows(b, args.quick)
        run_all(b, args.quick)
        plans = plan_sweep(b) if args.plans else []
    gpu = torch.cuda.get_device_name() if torch is not None else "?"
    print(f"{gpu}; torch {torch.__version__}; per-call device time (calls queued behind a sleep kernel) and "
          f"per-call time of a Python loop ('call'), median of {args.repeats} x {args.calls} calls")
    print(format_table(b.rows))
    if plans:
        print("\nevery heuristics plan (A, B, FALLBACK) through the graph API, device ms per call:")
        print("\n".join(plans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
