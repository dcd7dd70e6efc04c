"""Every Pythonic operation family, forward and backward, in every dtype, layout and two sizes: device time through
the legacy call, the graph path, the call's default engine and ``engine_choice`` (the measured ``"auto"``), beside
torch's same work in the same process (prints a table, writes JSON; asserts nothing).

Rows: (operation, dtype, layout, size). "small" is a host-bound size (a few thousand elements), "large" a
bandwidth-bound one (tens of millions; the convolutions: compute-bound). Peers per row:

* ``legacy`` / ``graph``: the call with ``engine="legacy"`` / ``"graph"``;
* ``default``: the call without ``engine=`` (what a user gets);
* ``auto``: :func:`cudnn_py.calls.engine_choice.run` over the legacy and graph calls (its first call measures both and
  keeps the faster; the "auto" column names the engine it kept);
* ``tuned`` (the convolutions): the call with ``autotune=True``, its engine ``"auto"``: the legacy call with the
  algorithm ``Find...Ex`` measured fastest against the graph path's fastest plan, the faster kept: what torch's
  ``cudnn.benchmark`` does, so the fair peer of the torch column there;
* ``torch``: torch's function for the same work on the same memory (torch.backends.cudnn.benchmark on).

Device time: a sample is ``n`` back-to-back calls between CUDA events, queued behind a sleep kernel (torch's) long
enough for the host to queue them all, so it is the GPU's time, not the host's; ``n`` makes a sample about
``--sample-ms``. Every peer of a row is warmed up, then timed in ``--rounds`` rounds, each taking the peers in a new
seeded random order, each timed sample right after an untimed one of the same callable (``sdpa_bench.rounds_ms``,
the project's method); a figure is the median. Host time per call: wall time of ``n`` calls in a Python loop,
without synchronising (the launch cost). GB/s counts the bytes a call must read and write once; TFLOP/s the
convolution's 2 * N * K * C * R * S * P * Q. A cell is "-" where the peer refuses the configuration (why, under
the table). Without torch the device times are taken without the sleep kernel (host-bound rows then show host
time) and the torch column is empty.

    python benchmarks/ops_matrix.py --ops activation,pooling --dtypes float16 --sizes large --json out.json
    python benchmarks/ops_matrix.py --quick          # seconds: a few small rows
    python benchmarks/ops_matrix.py --smoke          # imports, arguments, the GPU check: one line
    python benchmarks/ops_matrix.py --probe --ops conv_fwd --dtypes float32 --layouts NCHW --sizes large
    python benchmarks/ops_matrix.py --markdown run1.json run2.json   # the rows of --json files as Markdown
    python benchmarks/ops_matrix.py --compare new1.json,new2.json old1.json,old2.json   # two trees' runs, cell by cell

``--compare`` sets two source trees side by side from their ``--json`` runs (take them interleaved on one warm machine:
old, new, old, new): per cell (row and cudnn-py peer) the median over each tree's runs, new over old, as measured
and at each run's torch level (every cell of a run divided by the median of its torch cells over their typical
times: torch runs the same kernels in both trees, so its level is the GPU's clock in that run); the cells more than
``--bar`` slower either way are listed, and so are the cells only the old tree measured.

``--probe`` (per selected row, after its peers): every engine configuration cuDNN offers for each graph the graph
path runs (heuristics modes A, B and FALLBACK, enumerated as ``algos --graph`` does, each built into a plan bound to
the arrays the graph path's call bound) and, for the convolutions, every legacy algorithm ``Find...Ex`` reports as
supported (elsewhere the legacy call), timed in interleaved rounds beside torch and the graph path's own call (the
same sampler). The row then says either "cuDNN limitation: best of N engines = X ms" (no configuration reaches
torch) or which configuration beats the one in use.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from cudnn_py.cli.prerequisites import script_args

#: operation families and the rows (operations) of each; ``--ops`` takes either
FAMILIES: dict[str, tuple[str, ...]] = {
    "convolution": ("conv_fwd", "conv_dgrad", "conv_wgrad"),
    "pooling": ("pool_max_fwd", "pool_max_bwd", "pool_avg_fwd", "pool_avg_bwd"),
    "activation": ("relu_fwd", "relu_bwd"),
    "softmax": ("softmax_fwd", "softmax_bwd"),
    "batchnorm": ("bn_train", "bn_infer", "bn_bwd", "bn_train_ex", "bn_bwd_ex"),
    "normalization": ("norm_train", "norm_infer", "norm_bwd"),
    "layer_norm": ("layer_norm_fwd", "layer_norm_bwd", "rms_norm_fwd", "rms_norm_bwd"),
    "lrn": ("lrn_fwd", "lrn_bwd"),
    "tensor_ops": ("op_tensor_add", "add_tensor_bias", "scale_tensor", "set_tensor", "reduce_add",
                   "transform_dtype", "transform_layout"),
    "dropout": ("dropout_fwd", "dropout_bwd"),
}
DTYPES = ("float16", "bfloat16", "float32", "float64")
LAYOUTS = ("NCHW", "NHWC")
SIZES = ("small", "large")
#: families whose arrays have no NCHW/NHWC layout (rows x hidden): their rows run under NCHW only
NO_LAYOUT = frozenset({"layer_norm"})
PEERS = ("legacy", "graph", "default", "auto", "tuned", "torch")
#: the cudnn-py peers whose best the "/torch" column compares
OURS = ("auto", "tuned", "default", "graph", "legacy")
#: the issue's bar: a row over this much torch's device time needs a probe naming the cuDNN limitation
BAR = 1.05
#: clock rate the sleep kernel's cycle count assumes (at or above the GPU's, so a sleep is never too short)
_SLEEP_HZ = 2.0e9

#: shapes per family and size: (x shape, extra) - NCHW logical order; the layout gives the strides
SHAPES = {
    "elementwise": {"small": (2, 32, 8, 8), "large": (32, 256, 56, 56)},
    "pooling": {"small": (2, 16, 16, 16), "large": (32, 128, 112, 112)},
    "conv": {"small": ((1, 8, 8, 8), (8, 8, 3, 3)), "large": ((32, 64, 56, 56), (64, 64, 3, 3))},
    "rows": {"small": (16, 64), "large": (8192, 4096)},
}


@dataclass
class Case:
    """One row's callables (None: the peer has no such call) and the work one call does."""
    nbytes: float
    flops: float = 0.0
    fns: dict[str, Callable[[], object] | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mutated: tuple = ()                 # arrays a call reads and writes (engine_choice restores them)
    algos: Callable[[], dict[str, Callable]] | None = None   # the legacy algorithms' calls, by name (--probe)


@dataclass
class Row:
    op: str
    dtype: str
    layout: str
    size: str
    shape: str
    gbytes: float
    gflop: float
    ms: dict[str, float | None] = field(default_factory=dict)        # device ms per call, by peer
    host_us: dict[str, float | None] = field(default_factory=dict)   # host µs per call, by peer
    auto_engine: str | None = None
    notes: list[str] = field(default_factory=list)
    probe: dict | None = None   # --probe: every engine configuration's ms beside torch's (see probe())

    def rate(self, peer: str) -> str:
        ms = self.ms.get(peer)
        if not ms:
            return "-"
        return f"{self.gflop / ms:.1f}T" if self.gflop else f"{self.gbytes / ms * 1e3:.0f}"


def selected(ops: list[str] | None, dtypes, layouts, sizes) -> list[tuple[str, str, str, str, str]]:
    """(family, op, dtype, layout, size) of every row the filters keep; ``ops``: family or op names."""
    out = []
    for fam, names in FAMILIES.items():
        for op in names:
            if ops and fam not in ops and op not in ops:
                continue
            for dt in dtypes:
                for lay in (("NCHW",) if fam in NO_LAYOUT else layouts):
                    if fam in NO_LAYOUT and "NCHW" not in layouts:
                        continue
                    out.extend((fam, op, dt, lay, sz) for sz in sizes)
    return out


def parse(argv=None, check=None) -> argparse.Namespace:
    """The arguments, checked; ``check(parser, argv)`` parses them (default: plain parsing; the script's main passes
    :func:`~cudnn_py.cli.prerequisites.script_args`, which adds ``--smoke`` and the GPU check)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)

    def names(allowed):
        def check(text: str) -> list[str]:
            got = [t.strip() for t in text.split(",") if t.strip()]
            bad = [t for t in got if t not in allowed]
            if bad or not got:
                raise argparse.ArgumentTypeError(f"{','.join(bad) or text!r}: expected some of {', '.join(allowed)}")
            return got
        return check
    ops = tuple(FAMILIES) + tuple(op for names_ in FAMILIES.values() for op in names_)
    p.add_argument("--ops", type=names(ops), help="families or operations, comma-separated (default: all)")
    p.add_argument("--dtypes", type=names(DTYPES), default=list(DTYPES))
    p.add_argument("--layouts", type=names(LAYOUTS), default=list(LAYOUTS))
    p.add_argument("--sizes", type=names(SIZES), default=list(SIZES))
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds per row (median of them)")
    p.add_argument("--sample-ms", type=float, default=4.0, help="device time a sample aims at")
    p.add_argument("--json", metavar="PATH", help="write the rows here (after every row)")
    p.add_argument("--no-torch", action="store_true", help="leave torch out even where it imports")
    p.add_argument("--quick", action="store_true", help="a few small rows, 2 rounds")
    p.add_argument("--probe", action="store_true", help="also time every engine configuration and legacy algorithm "
                                                         "of each row beside torch (slow: use the filters)")
    p.add_argument("--markdown", nargs="+", metavar="JSON", help="print the rows of these --json files as one "
                                                                  "Markdown table, then exit (no GPU needed)")
    p.add_argument("--compare", nargs=2, metavar=("NEW", "OLD"), help="two trees' --json runs (each comma-separated): "
                   "the cells of NEW more than --bar slower than OLD's, then exit (no GPU needed)")
    p.add_argument("--bar", type=float, default=0.02, help="--compare: the slowdown listed (default 0.02: 2 %%)")
    if check is not None and {"--markdown", "--compare"} & set(sys.argv[1:] if argv is None else argv):
        check = functools.partial(check, gpu=False)
    a = (check or argparse.ArgumentParser.parse_args)(p, argv)
    if a.rounds < 1 or a.sample_ms <= 0:
        p.error("--rounds must be >= 1 and --sample-ms > 0")
    if a.quick:
        a.ops = a.ops or ["relu_fwd", "pool_max_bwd", "bn_train", "conv_fwd", "op_tensor_add"]
        a.dtypes, a.layouts, a.sizes, a.rounds = ["float16"], ["NHWC"], ["small"], 2
    return a


# ---------------------------------------------------------------- arrays and timing

class Bench:
    """The handle, the arrays a row needs (a cudnn-py view and a torch view of the same memory) and the timers."""

    def __init__(self, h, torch, sample_ms: float, rounds: int):
        import numpy as np
        import cudnn_py
        from cudnn_py.calls import engine_choice
        from cudnn_py.core.dtypes import as_numpy_dtype
        self.dt = as_numpy_dtype
        self.h, self.torch, self.np, self.cudnn, self.ec = h, torch, np, cudnn_py, engine_choice
        self.rng = np.random.default_rng(0)
        self.rounds, self.sample_ms = rounds, sample_ms
        self._host: dict[int, float] = {}
        self._data: dict[tuple, object] = {}
        import sdpa_bench  # the project's interleaved-rounds sampler (benchmarks/ is on sys.path)
        self._rounds = sdpa_bench

    def arr(self, shape, dtype, layout="NCHW", positive=False):
        """(DeviceArray of logical ``shape`` stored in ``layout``, torch view of it or None)."""
        np = self.np
        a = self._data.get(shape)
        if a is None:  # drawn once per shape: drawing tens of millions of numbers per array would dominate a run
            a = self._data[shape] = self.rng.standard_normal(shape).astype(np.float32)
        a = np.abs(a) + 0.1 if positive else a
        order = list(range(len(shape)))
        if layout == "NHWC" and len(shape) > 2:
            order = [0, *range(2, len(shape)), 1]
        buf = self.cudnn.to_device(np.ascontiguousarray(a.transpose(order)).astype(self.dt(dtype)), self.h.stream)
        inv = np.argsort(order).tolist()
        strides = tuple(buf.strides[i] for i in inv)
        d = self.cudnn.DeviceArray(buf.ptr, shape, self.dt(dtype), strides, device_id=buf.device_id, owner=buf)
        t = self.torch.from_dlpack(buf).permute(*inv) if self.torch is not None else None
        return d, t

    def host_us(self, fn, calls: int = 20, samples: int = 5) -> float:
        """Median wall µs per call of ``fn`` in a Python loop (not synchronised: the launch cost)."""
        out = []
        for _ in range(samples):
            self.cudnn.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - t0) / calls * 1e6)
        self.cudnn.synchronize()
        us = statistics.median(out)
        self._host[id(fn)] = us
        return us

    def sample(self, fn, n: int) -> float:
        """Device ms per call over ``n`` calls between events, queued behind a sleep kernel that outlasts the host's
        queueing of them (at most as many calls as fit ``sample_ms`` of host time)."""
        host_ms = self._host.get(id(fn), 0.05) * 1e-3
        n = max(1, min(n, int(self.sample_ms / host_ms)))
        if self.torch is not None:
            self.torch.cuda._sleep(int((n * host_ms * 1.5 + 0.05) * 1e-3 * _SLEEP_HZ))
        with self.cudnn.timer() as t:
            for _ in range(n):
                fn()
        return t.ms / n

    def device_ms(self, fns: dict[str, Callable]) -> dict[str, float]:
        """Median device ms per call of each peer, sampled in interleaved rounds (sdpa_bench's method)."""
        self._rounds.SAMPLE_MS = self.sample_ms
        got = self._rounds.rounds_ms({k: (f,) for k, f in fns.items()}, (3, self.rounds, 1000), self.sample)
        return {k: statistics.median(v[0]) for k, v in got.items()}


# ---------------------------------------------------------------- the rows

def _engines(call: Callable[..., object]) -> dict[str, Callable]:
    """legacy / graph / default callables of ``call(engine=...)`` (``call()`` for the default)."""
    return {"legacy": lambda: call(engine="legacy"), "graph": lambda: call(engine="graph"), "default": call}


def build(b: Bench, fam: str, op: str, dtype: str, layout: str, size: str) -> tuple[str, Case]:
    """(shape text, the row's Case); no torch peer without torch."""
    shape, case = _build(b, fam, op, dtype, layout, size)
    if b.torch is None:
        case.fns["torch"] = None
    return shape, case


def _build(b: Bench, fam: str, op: str, dtype: str, layout: str, size: str) -> tuple[str, Case]:
    import cudnn_py as C
    np, h, torch = b.np, b.h, b.torch
    F = torch.nn.functional if torch is not None else None
    item = b.dt(dtype).itemsize
    pdt = "float64" if dtype == "float64" else "float32"  # batch-norm parameters
    if fam == "convolution":
        xs, ws = SHAPES["conv"][size]
        conv = C.Convolution(padding=1)
        x, xt = b.arr(xs, dtype, layout)
        w, wt = b.arr(ws, dtype, layout)
        y, yt = b.arr((xs[0], ws[0], *xs[2:]), dtype, layout)
        flops = 2.0 * xs[0] * ws[0] * xs[1] * ws[2] * ws[3] * xs[2] * xs[3]
        nbytes = (x.size + w.size + y.size) * item
        mask = {"conv_fwd": None, "conv_dgrad": [True, False, False], "conv_wgrad": [False, True, False]}[op]
        t = None
        if op == "conv_fwd":
            def call(**kw):
                return C.convolution_forward(h, conv, x, w, y=y, **kw)
            t = (lambda: F.conv2d(xt, wt, padding=1)) if torch is not None else None
        elif op == "conv_dgrad":
            def call(**kw):
                return C.convolution_backward_data(h, conv, w, y, dx=x, **kw)
        else:
            def call(**kw):
                return C.convolution_backward_filter(h, conv, x, y, dw=w, **kw)
        if mask and torch is not None:
            t = lambda: torch.ops.aten.convolution_backward(yt, xt, wt, None, [1, 1], [1, 1], [1, 1], False,  # noqa
                                                            [0, 0], 1, mask)
        direction = {"conv_fwd": "forward", "conv_dgrad": "backward_data", "conv_wgrad": "backward_filter"}[op]

        def algos() -> dict[str, Callable]:
            found = C.convolution_algorithms(h, conv, x, w, y, direction=direction, method="find_ex")
            names = dict.fromkeys(r.algo for r in found if r.supported)  # one per algorithm (math types merge)
            return {f"legacy {a.name}": (lambda a=a: call(engine="legacy", algo=a)) for a in names}
        return f"x{xs} w{ws}", Case(nbytes, flops, {**_engines(call), "tuned": lambda: call(autotune=True),
                                                    "torch": t}, algos=algos)
    if fam == "pooling":
        xs = SHAPES["pooling"][size]
        mode = "max" if "max" in op else "avg_include_padding"
        pool = C.Pooling(mode, 3, 1, 2)
        ys = pool.output_shape(xs)
        x, xt = b.arr(xs, dtype, layout)
        y, yt = b.arr(ys, dtype, layout)
        dy, dyt = b.arr(ys, dtype, layout)
        dx, _ = b.arr(xs, dtype, layout)
        C.pooling_forward(h, pool, x, y=y, engine="legacy")
        nbytes = (x.size + y.size) * item
        if op.endswith("fwd"):
            def call(**kw):
                return C.pooling_forward(h, pool, x, y=y, **kw)
            tf = (lambda: F.max_pool2d(xt, 3, 2, 1)) if mode == "max" else (lambda: F.avg_pool2d(xt, 3, 2, 1))
        else:
            def call(**kw):
                return C.pooling_backward(h, pool, x, y, dy, dx=dx, **kw)
            nbytes *= 2
            if torch is None:
                tf = None
            elif mode == "max":
                _, idx = F.max_pool2d(xt, 3, 2, 1, return_indices=True)
                tf = lambda: torch.ops.aten.max_pool2d_with_indices_backward(  # noqa: E731
                    dyt, xt, [3, 3], [2, 2], [1, 1], [1, 1], False, idx)
            else:
                tf = lambda: torch.ops.aten.avg_pool2d_backward(dyt, xt, [3, 3], [2, 2], [1, 1], False,  # noqa
                                                                True, None)
        return f"{xs} 3x3/2", Case(nbytes, 0.0, {**_engines(call), "torch": tf})
    xs = SHAPES["rows" if fam in NO_LAYOUT else "elementwise"][size]
    if fam == "layer_norm":
        return f"{xs[0]}x{xs[1]}", _norm_case(b, op, dtype, xs)
    n = int(np.prod(xs))
    x, xt = b.arr(xs, dtype, layout)
    y, yt = b.arr(xs, dtype, layout)
    dy, dyt = b.arr(xs, dtype, layout)
    dx, _ = b.arr(xs, dtype, layout)
    shape = str(xs)
    tf = None
    fns: dict[str, Callable | None] = {}
    mutated: tuple = ()
    if fam == "activation":
        act = C.Activation("relu")
        if op == "relu_fwd":
            def call(**kw):
                return C.activation_forward(h, act, x, y=y, **kw)
            tf, nb = (lambda: torch.relu(xt)) if torch else None, 2 * n * item
        else:
            def call(**kw):
                return C.activation_backward(h, act, x, y, dy, dx=dx, **kw)
            tf = (lambda: torch.ops.aten.threshold_backward(dyt, xt, 0)) if torch else None
            nb = 3 * n * item
        fns = _engines(call)
    elif fam == "softmax":
        if op == "softmax_fwd":
            fns, nb = {"legacy": lambda: C.softmax_forward(h, x, y=y)}, 2 * n * item
            tf = (lambda: torch.softmax(xt, 1)) if torch else None
        else:
            fns, nb = {"legacy": lambda: C.softmax_backward(h, y, dy, dx=dx)}, 3 * n * item
            tf = (lambda: torch.ops.aten._softmax_backward_data(dyt, yt, 1, yt.dtype)) if torch else None
    elif fam == "lrn":
        lrn = C.LRN()
        if op == "lrn_fwd":
            fns, nb = {"legacy": lambda: C.lrn_forward(h, lrn, x, y=y)}, 2 * n * item
            tf = (lambda: F.local_response_norm(xt, 5, 1e-4, 0.75, 2.0)) if torch else None
        else:
            fns, nb = {"legacy": lambda: C.lrn_backward(h, lrn, x, y, dy, dx=dx)}, 4 * n * item
    elif fam == "dropout":
        d = C.Dropout(h, 0.1, seed=1)
        out = C.dropout_forward(h, d, x, y=y)
        if op == "dropout_fwd":
            fns, nb = {"legacy": lambda: C.dropout_forward(h, d, x, y=y, reserve=out.reserve)}, 2 * n * item
            tf = (lambda: torch.ops.aten.native_dropout(xt, 0.1, True)) if torch else None
        else:
            fns, nb = {"legacy": lambda: C.dropout_backward(h, d, dy, out.reserve, dx=dx)}, 2 * n * item
            if torch:
                mask = torch.ops.aten.native_dropout(xt, 0.1, True)[1]
                tf = lambda: torch.ops.aten.native_dropout_backward(dyt, mask, 1 / 0.9)  # noqa: E731
    elif fam == "tensor_ops":
        fns, nb, tf, mutated = _tensor_op(b, op, dtype, layout, xs, x, xt, y, yt, dy, dyt)
    else:  # batchnorm, normalization
        fns, nb, tf, mutated, shape = _norm_api_case(b, fam, op, dtype, pdt, layout, xs, x, xt, y, dy, dyt, dx)
    return shape, Case(nb, 0.0, {**fns, "torch": tf}, mutated=mutated)


def _tensor_op(b, op, dtype, layout, xs, x, xt, y, yt, dy, dyt):
    import cudnn_py as C
    np, h, torch = b.np, b.h, b.torch
    n, item = int(np.prod(xs)), b.dt(dtype).itemsize
    mutated: tuple = ()
    tf = None
    if op == "op_tensor_add":
        def call(**kw):
            return C.op_tensor(h, "add", x, dy, c=y, **kw)
        tf, nb = (lambda: torch.add(xt, dyt, out=yt)) if torch else None, 3 * n * item
    elif op == "add_tensor_bias":
        bias, bt = b.arr((1, xs[1], 1, 1), dtype)

        def call(**kw):
            return C.add_tensor(h, bias, y, beta=1.0, **kw)
        tf, nb, mutated = (lambda: yt.add_(bt)) if torch else None, 2 * n * item, (y,)
    elif op == "scale_tensor":
        def call(**kw):
            return C.scale_tensor(h, y, alpha=1.0, **kw)
        tf, nb, mutated = (lambda: yt.mul_(1.0)) if torch else None, 2 * n * item, (y,)
    elif op == "set_tensor":
        return {"legacy": lambda: C.set_tensor(h, y, 0.5)}, n * item, (lambda: yt.fill_(0.5)) if torch else None, ()
    elif op == "reduce_add":
        red, _ = b.arr((1, xs[1], 1, 1), "float32" if dtype != "float64" else dtype)

        def call(**kw):
            return C.reduce_tensor(h, "add", x, c=red, **kw)
        tf, nb = (lambda: torch.sum(xt, dim=(0, 2, 3), keepdim=True, dtype=torch.float32)) if torch else None, n * item
    elif op == "transform_dtype":
        src, st = b.arr(xs, "float32", layout)

        def call(**kw):
            return C.transform_tensor(h, src, y=y, **kw)
        tf, nb = (lambda: yt.copy_(st)) if torch else None, n * (4 + item)
    else:  # transform_layout: from the other layout into this one
        src, st = b.arr(xs, dtype, "NCHW" if layout == "NHWC" else "NHWC")

        def call(**kw):
            return C.transform_tensor(h, src, y=y, **kw)
        tf, nb = (lambda: yt.copy_(st)) if torch else None, 2 * n * item
    return _engines(call), nb, tf, mutated


def _norm_api_case(b, fam, op, dtype, pdt, layout, xs, x, xt, y, dy, dyt, dx):
    """Batch norm and the normalization API: training (running statistics), inference, backward, the _ex pair."""
    import cudnn_py as C
    np, h, torch = b.np, b.h, b.torch
    F = torch.nn.functional if torch is not None else None
    c, n, item = xs[1], int(np.prod(xs)), b.dt(dtype).itemsize
    sc, sct = b.arr((c,), pdt, positive=True)
    bi, bit = b.arr((c,), pdt)
    rm, rmt = b.arr((c,), pdt)
    rv, rvt = b.arr((c,), pdt, positive=True)
    sm, smt = b.arr((c,), pdt)
    siv, sivt = b.arr((c,), pdt, positive=True)
    ds, _ = b.arr((c,), pdt)
    db, _ = b.arr((c,), pdt)
    z, zt = b.arr(xs, dtype, layout)
    tf, mutated = None, ()
    bwd_t = (lambda: torch.ops.aten.native_batch_norm_backward(dyt, xt, sct, rmt, rvt, smt, sivt, True, 1e-5,
                                                                [True, True, True])) if torch else None
    if fam == "batchnorm":
        train, infer, bwd = C.batchnorm_forward_training, C.batchnorm_forward_inference, C.batchnorm_backward
    else:
        train, infer, bwd = (C.normalization_forward_training, C.normalization_forward_inference,
                             C.normalization_backward)
    if op in ("bn_train", "norm_train"):
        def call(**kw):
            return train(h, x, sc, bi, factor=0.1, running_mean=rm, running_var=rv, y=y, saved_mean=sm,
                         saved_inv_var=siv, **kw)
        tf = (lambda: F.batch_norm(xt, rmt, rvt, sct, bit, training=True, momentum=0.1)) if torch else None
        nb, mutated = 2 * n * item, (rm, rv)
    elif op in ("bn_infer", "norm_infer"):
        def call(**kw):
            return infer(h, x, sc, bi, rm, rv, y=y, **kw)
        tf, nb = (lambda: F.batch_norm(xt, rmt, rvt, sct, bit, training=False)) if torch else None, 2 * n * item
    elif op == "bn_bwd":
        def call(**kw):
            return bwd(h, x, dy, sc, sm, siv, dx=dx, dscale=ds, dbias=db, **kw)
        tf, nb = bwd_t, 3 * n * item
    elif op == "norm_bwd":
        def call(**kw):
            return bwd(h, x, y, dy, sc, bi, sm, siv, dx=dx, dscale=ds, dbias=db, **kw)
        tf, nb = bwd_t, 3 * n * item
    elif op == "bn_train_ex":
        def call(**kw):
            return C.batchnorm_forward_training_ex(h, x, sc, bi, z=z, ops="bn_add_activation", activation="relu",
                                                   y=y, saved_mean=sm, saved_inv_var=siv, **kw)
        tf = (lambda: torch.relu_(F.batch_norm(xt, None, None, sct, bit, training=True).add_(zt))) if torch else None
        nb = 3 * n * item
    else:  # bn_bwd_ex: the legacy backward reads the legacy forward's reserve; the graph's reads none
        r = C.batchnorm_forward_training_ex(h, x, sc, bi, z=z, ops="bn_add_activation", activation="relu", y=y,
                                            saved_mean=sm, saved_inv_var=siv, engine="legacy")

        def call(engine="auto"):
            reserve = r.reserve if engine in ("legacy", "auto") else None
            return C.batchnorm_backward_ex(h, x, y, dy, sc, bi, sm, siv, reserve, ops="bn_add_activation",
                                           activation="relu", dx=dx, dz=z, dscale=ds, dbias=db, engine=engine)
        nb = 4 * n * item
    fns = _engines(call)
    if op in ("bn_train_ex", "bn_bwd_ex"):
        fns["auto"] = None  # the _ex pair stays on one engine (reserve space): no per-call measurement
    return fns, nb, tf, mutated, str(xs)


def _norm_case(b, op, dtype, xs) -> Case:
    """Layer / RMS norm over the hidden dim of (rows, hidden): a cudnn-py graph (autotuned) beside torch; no
    legacy call exists."""
    import cudnn_py.graph as G
    h, torch = b.h, b.torch
    rows, hidden = xs
    mode = "layer" if op.startswith("layer") else "rms"
    x, xt = b.arr((rows, hidden, 1, 1), dtype)
    dy, dyt = b.arr((rows, hidden, 1, 1), dtype)
    y, _ = b.arr((rows, hidden, 1, 1), dtype)
    dx, _ = b.arr((rows, hidden, 1, 1), dtype)
    w, wt = b.arr((1, hidden, 1, 1), dtype, positive=True)
    bb, bt = b.arr((1, hidden, 1, 1), dtype)
    dw, _ = b.arr((1, hidden, 1, 1), dtype)
    dbb, _ = b.arr((1, hidden, 1, 1), dtype)
    mean, _ = b.arr((rows, 1, 1, 1), "float32")
    inv, _ = b.arr((rows, 1, 1, 1), "float32")
    layer = mode == "layer"
    item = b.dt(dtype).itemsize
    g = G.Graph(io_dtype=dtype, compute_dtype="float32", name=op)
    if op.endswith("fwd"):
        gx, gw = g.tensor(x.shape, name="x"), g.tensor(w.shape, name="w")
        gb = g.tensor(w.shape, name="b") if layer else None
        gy, gm, gi = g.norm_forward(gx, gw, gb, mode=mode, epsilon=1e-5)
        pack = {gx: x, gw: w, gy.set_output(True): y, gi.set_output(True): inv}
        if layer:
            pack.update({gb: bb, gm.set_output(True): mean})
        nb = 2 * rows * hidden * item
    else:
        gx, gdy, gw = g.tensor(x.shape, name="x"), g.tensor(x.shape, name="dy"), g.tensor(w.shape, name="w")
        gm = g.tensor(mean.shape, name="mean", dtype="float32") if layer else None
        gi = g.tensor(inv.shape, name="inv", dtype="float32")
        gdx, gdw, gdb = g.norm_backward(gdy, gx, gw, mean=gm, inv_variance=gi, mode=mode, has_bias=layer)
        pack = {gx: x, gdy: dy, gw: w, gi: inv, gdx.set_output(True): dx, gdw.set_output(True): dw}
        if layer:
            pack.update({gm: mean, gdb.set_output(True): dbb})
        nb = 3 * rows * hidden * item
    g.autotune(h, pack)
    run, args = g.executor(h, *pack), tuple(pack.values())
    tf = None
    if torch is not None:
        F = torch.nn.functional
        xt2, wt1, bt1, dyt2 = xt.view(rows, hidden), wt.view(hidden), bt.view(hidden), dyt.view(rows, hidden)
        if op.endswith("fwd"):
            tf = (lambda: F.layer_norm(xt2, (hidden,), wt1, bt1)) if layer else (lambda: F.rms_norm(xt2, (hidden,),
                                                                                                  wt1))
        else:
            xr, wr = xt2.detach().requires_grad_(), wt1.detach().requires_grad_()
            br = bt1.detach().requires_grad_() if layer else None
            out = F.layer_norm(xr, (hidden,), wr, br) if layer else F.rms_norm(xr, (hidden,), wr)
            tf = lambda: torch.autograd.grad(out, [t for t in (xr, wr, br) if t is not None], dyt2,  # noqa: E731
                                             retain_graph=True)
    case = Case(nb, 0.0, {"graph": lambda: run(*args), "default": None, "torch": tf})
    case.notes.append(f"{mode} norm: graph API only (no legacy call); torch "
                      f"{'backward through autograd' if op.endswith('bwd') else 'forward'}")
    return case


# ---------------------------------------------------------------- running

def measure(b: Bench, sel, json_path: str | None, out=sys.stderr, meta: dict | None = None,
            probing: bool = False) -> list[Row]:
    """Every selected row, printed to ``out`` as it is measured (``probing``: and probed, :func:`probe`);
    ``json_path``: ``{"meta": meta, "rows": [...]}`` written after every row (a run stopped midway keeps what it
    measured)."""
    rows: list[Row] = []
    for fam, op, dtype, layout, size in sel:
        row = Row(op, dtype, layout, size, "", 0.0, 0.0)
        try:
            b.h.clear_caches()
            row.shape, case = build(b, fam, op, dtype, layout, size)
            row.gbytes, row.gflop, row.notes = case.nbytes / 1e9, case.flops / 1e9, list(case.notes)
            fns = {k: f for k, f in case.fns.items() if f is not None}
            if "legacy" in fns and "graph" in fns and case.fns.get("auto", True) is not None:
                key = (op, dtype, layout, size)
                lg, gr, mut = fns["legacy"], fns["graph"], case.mutated
                fns["auto"] = lambda: b.ec.run(b.h, key, lg, gr, mutated=mut)
            live = {}
            for name in PEERS:
                if name not in fns:
                    continue
                try:
                    fns[name]()
                    b.cudnn.synchronize()
                except Exception as e:  # noqa: BLE001 - the table says which peer refused and why
                    row.notes.append(f"{name}: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
                    continue
                live[name] = fns[name]
                row.host_us[name] = b.host_us(fns[name])
            row.ms.update(b.device_ms(live))
            got = b.ec.choices(b.h).get((op, dtype, layout, size))
            row.auto_engine = got.engine if got is not None else None
            if probing:
                row.probe = probe(b, case, live)
                print("  " + probe_line(row), file=out, flush=True)
        except Exception as e:  # noqa: BLE001 - a row that cannot be set up says why and the run goes on
            row.notes.append(f"setup: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
        rows.append(row)
        print("  " + _line(row), file=out, flush=True)
        if json_path:
            with open(json_path, "w") as fh:
                json.dump({"meta": meta or {}, "rows": [asdict(r) for r in rows]}, fh, indent=1)
    return rows


# ---------------------------------------------------------------- --probe: every engine configuration

def _graph_calls(h, call: Callable) -> list[tuple]:
    """(executor or runner, arguments) of each graph ``call()`` runs, in order, with the handle's caches cleared
    first (so its graphs are built now): the convolutions run every graph through an
    :class:`~cudnn_py.graph.Executor` call, the operation modules' graph paths their first call of a configuration
    through :meth:`Runner.run <cudnn_py.graph.runner.Runner.run>`; both are recorded here for this one call (each has
    ``plan`` and ``tensors``); per graph the last call (an autotuned graph's timing runs come first)."""
    from cudnn_py.graph import Executor
    from cudnn_py.graph.runner import Runner
    seen: dict[int, tuple] = {}

    def record(self, *args):
        seen[id(self.plan.graph)] = (self, args)
        return super(Executor, self).__call__(*args)

    run = Runner.run

    def record_run(self, arrays):
        seen[id(self.plan.graph)] = (self, tuple(arrays))
        return run(self, arrays)
    h.clear_caches()
    own = Executor.__dict__.get("__call__")
    Executor.__call__ = record  # type: ignore[method-assign]
    Runner.run = record_run  # type: ignore[method-assign]
    try:
        call()
    finally:
        Runner.run = run  # type: ignore[method-assign]
        if own is None:
            del Executor.__call__
        else:
            Executor.__call__ = own  # type: ignore[method-assign]
    return list(seen.values())


def probe(b: Bench, case: Case, live: dict[str, Callable]) -> dict:
    """Every engine configuration of the graph path's graphs (heuristics A, B, FALLBACK: ``algos --graph``'s
    enumeration), each bound to the arrays the graph path's call bound (timings of pooling's backward depend on
    them), and every legacy algorithm of the case (convolutions; elsewhere the legacy call), timed beside torch and
    the graph path's call in interleaved rounds; the best configuration per graph (a call of several graphs: their
    sum) against torch."""
    import cudnn_py.graph as G
    from cudnn_py.errors import CudnnPyError
    from cudnn_py.tuning import sweep
    h = b.h
    res: dict = {"graphs": [], "legacy": {}, "notes": []}
    fns: dict[str, Callable] = {k: live[k] for k in ("torch", "graph") if k in live}
    graphs = []
    if "graph" in live:
        for i, (ex, arrays) in enumerate(_graph_calls(h, live["graph"])):
            g, tensors = ex.plan.graph, ex.tensors
            configs, orders, errors = sweep.heuristics(g, h, ("A", "B", "FALLBACK"))
            res["notes"] += [f"heuristics {m}: {e}" for m, e in errors.items()]
            cfgs, sources = configs.values(), {tag: [m for m in orders if tag in orders[m]] for tag in configs}
            names: dict[str, str] = {}  # name in the timings -> config tag
            for cfg in cfgs:
                try:
                    run = G.Plan.build(g, h, cfg).executor(h, *tensors)
                    run(*arrays)
                except CudnnPyError as e:
                    res["notes"].append(f"{cfg.tag}: {' '.join(str(e).split())[:120]}")
                    continue
                name = f"g{i} {cfg.tag} [{','.join(sources[cfg.tag])}]"
                fns[name] = lambda run=run, args=arrays: run(*args)
                names[name] = cfg.tag
            in_use = next((n for n, tag in names.items() if ex.plan.tag.startswith(tag)), None)
            graphs.append({"graph": g.name, "in_use": ex.plan.tag, "in_use_name": in_use, "configs": names})
    if case.algos is not None:
        try:
            algos = case.algos()
        except CudnnPyError as e:
            algos, res["notes"] = {}, res["notes"] + [f"legacy algorithms: {e}"]
        fns.update(algos)
    elif "legacy" in live:  # one legacy kernel, no algorithms to choose from
        fns["legacy call"] = live["legacy"]
    for fn in fns.values():
        b.host_us(fn)
    ms = b.device_ms(fns)
    for g in graphs:
        got = {n: ms[n] for n in g.pop("configs")}
        best = min(got, key=got.__getitem__, default=None)
        res["graphs"].append({**g, "ms": got, "best": best, "best_ms": None if best is None else got[best],
                              "in_use_ms": got.get(g.pop("in_use_name"))})
    res["legacy"] = {n: ms[n] for n in fns if n.startswith("legacy ")}
    res["torch_ms"], res["graph_path_ms"] = ms.get("torch"), ms.get("graph")
    bests = [g["best_ms"] for g in res["graphs"]]
    graph_best = sum(bests) if bests and None not in bests else None
    legacy_best = min(res["legacy"].values(), default=None)
    res["engines"] = sum(len(g["ms"]) for g in res["graphs"]) + len(res["legacy"])
    res["best_ms"] = min((v for v in (graph_best, legacy_best) if v is not None), default=None)
    res["best_graph_ms"], res["best_legacy_ms"] = graph_best, legacy_best
    return res


def probe_line(r: Row) -> str:
    """The probe's verdict for row ``r``."""
    p = r.probe or {}
    best, t, n = p.get("best_ms"), p.get("torch_ms"), p.get("engines", 0)
    head = f"probe {r.op} {r.dtype} {r.layout} {r.size}: "
    if best is None:
        return head + "no engine configuration ran" + (f" ({'; '.join(p.get('notes', [])[:3])})" if p else "")
    which = "; ".join(f"{g['graph']}: best {g['best']} {_f(g['best_ms'])} ms (in use {g['in_use']}: "
                      f"{_f(g['in_use_ms'])} ms)" for g in p["graphs"])
    legacy = f"; legacy best {_f(p['best_legacy_ms'])} ms" if p.get("best_legacy_ms") is not None else ""
    if t is None:
        return head + f"best of {n} engines = {best:.4f} ms (no torch); {which}{legacy}"
    verdict = (f"cuDNN limitation: best of {n} engines = {best:.4f} ms, torch {t:.4f} ms ({best / t:.2f}x)"
               if best > t * BAR else f"best of {n} engines = {best:.4f} ms reaches torch {t:.4f} ms "
                                       f"({best / t:.2f}x)")
    return head + f"{verdict}; graph path as called {_f(p.get('graph_path_ms'))} ms; {which}{legacy}"


def _f(v, spec=".4f") -> str:
    return "-" if v is None else format(v, spec)


def _line(r: Row) -> str:
    ms = [_f(r.ms.get(p)) for p in PEERS]
    t = r.ms.get("torch")
    best = min((r.ms[p] for p in OURS if r.ms.get(p)), default=None)
    ratio = _f(best / t, ".2f") if best and t else "-"
    return (f"{r.op:<16}{r.dtype:<9}{r.layout:<5}{r.size:<6}" + "".join(f"{m:>9}" for m in ms) +
            f"{ratio:>7}{r.auto_engine or '-':>7}{r.rate('auto') if r.ms.get('auto') else r.rate('default'):>8}"
            f"{_f(r.host_us.get('default'), '.1f'):>8}{_f(r.host_us.get('torch'), '.1f'):>8}  {r.shape}")


def table(rows: list[Row]) -> str:
    head = (f"{'operation':<16}{'dtype':<9}{'lay':<5}{'size':<6}" + "".join(f"{p + ' ms':>9}" for p in PEERS) +
            f"{'/torch':>7}{'auto':>7}{'GB/s':>8}{'host us':>8}{'torch us':>8}  shape")
    notes = [f"  {r.op} {r.dtype} {r.layout} {r.size}: {n}" for r in rows for n in r.notes]
    return "\n".join([head, "-" * len(head), *(_line(r) for r in rows)] + (["", "notes:", *notes] if notes else []))


def probe_verdict(p: dict | None) -> str:
    """A probe's verdict in a few words: its best engine configuration over torch, and whether that is a cuDNN
    limitation (over :data:`BAR`); "-" without a probe."""
    if not p:
        return "-"
    best, t, n = p.get("best_ms"), p.get("torch_ms"), p.get("engines", 0)
    if best is None:
        return "no engine ran"
    if t is None:
        return f"best of {n}: {best:.4f} ms (no torch)"
    return f"{'cuDNN limitation' if best > t * BAR else 'reaches torch'}: best of {n} {best / t:.2f}x"


def markdown(paths: list[str]) -> str:
    """The rows of ``--json`` files as one Markdown table: device ms per peer (the engine "auto" kept beside its
    figure), "auto" over torch and the best cudnn-py peer over torch, and where the runs were probed each row's
    :func:`probe_verdict`; then each file's machine line."""
    runs = []
    for path in paths:
        with open(path) as fh:
            runs.append(json.load(fh))
    cols = [p for p in PEERS if any(r["ms"].get(p) for run in runs for r in run["rows"])]
    probed = any(r.get("probe") for run in runs for r in run["rows"])
    lines = ["| operation | dtype | layout | size | " + " | ".join(f"{p} ms" for p in cols) + " | auto / torch | "
             "best / torch |" + (" probe |" if probed else ""), "|---" * (6 + len(cols) + probed) + "|"]
    for run in runs:
        for r in run["rows"]:
            ms, t = r["ms"], r["ms"].get("torch")
            cells = [_f(ms.get(p)) + (f" ({r['auto_engine']})" if p == "auto" and r.get("auto_engine") else "")
                     for p in cols]
            mine = ms.get("auto") or ms.get("default")
            best = min((ms[p] for p in OURS if ms.get(p)), default=None)
            ratios = [_f(x / t, ".2f") if x and t else "-" for x in (mine, best)]
            lines.append(f"| {r['op']} | {r['dtype']} | {r['layout']} | {r['size']} | " + " | ".join(cells + ratios)
                         + " |" + (f" {probe_verdict(r.get('probe'))} |" if probed else ""))
    meta = [run.get("meta", {}) for run in runs]
    return "\n".join(lines + [""] + [f"{m.get('gpu')}, cuDNN {m.get('cudnn')}, torch {m.get('torch')}, "
                                     f"{m.get('rounds')} rounds, {m.get('date')}" for m in meta])


def compare(new: list[str], old: list[str], bar: float = 0.02) -> str:
    """The cells (row, cudnn-py peer) of the ``new`` tree's ``--json`` runs more than ``bar`` slower than the ``old``
    tree's, each the median over its tree's runs, as measured and at each run's torch level (every cell of a run
    divided by the median of its torch cells over their typical times: the GPU's clock in that run); the cells only
    the old tree measured (a configuration the new one lost); a summary line with each run's level."""
    def cells(path: str) -> dict[tuple, float]:
        with open(path) as fh:
            return {(r["op"], r["dtype"], r["layout"], r["size"], peer): ms
                    for r in json.load(fh)["rows"] for peer, ms in r["ms"].items() if ms}

    runs_new, runs_old = [cells(p) for p in new], [cells(p) for p in old]
    runs = runs_new + runs_old
    torch_cells = [k for k in set.intersection(*map(set, runs)) if k[-1] == "torch"]
    typical = {k: statistics.median(r[k] for r in runs) for k in torch_cells}
    levels = [statistics.median(r[k] / typical[k] for k in torch_cells) if torch_cells else 1.0 for r in runs]

    def medians(tree: list[dict], lv: list[float]) -> dict[tuple, float]:
        got: dict[tuple, list[float]] = {}
        for r, level in zip(tree, lv):
            for k, ms in r.items():
                got.setdefault(k, []).append(ms / level)
        return {k: statistics.median(v) for k, v in got.items()}

    a, b = medians(runs_new, [1.0] * len(new)), medians(runs_old, [1.0] * len(old))
    la, lb = medians(runs_new, levels[:len(new)]), medians(runs_old, levels[len(new):])
    ours = [(k, a[k] / b[k], la[k] / lb[k]) for k in sorted(a.keys() & b.keys()) if k[-1] != "torch"]
    slower = [(k, q, lq) for k, q, lq in ours if max(q, lq) > 1 + bar]
    lines = [f"{' '.join(k[:-1])} {k[-1]}: {a[k]:.5f} vs {b[k]:.5f} ms = {q:.3f}x ({lq:.3f}x at each run's torch "
             f"level)" for k, q, lq in slower]
    lines += [f"{' '.join(k[:-1])} {k[-1]}: {b[k]:.5f} ms in the old tree only" for k in sorted(b.keys() - a.keys())]
    shown = " / ".join(" ".join(f"{lv:.3f}" for lv in part) for part in (levels[:len(new)], levels[len(new):]))
    lines.append(f"{len(ours)} cells (runs: {len(new)} new, {len(old)} old): {sum(q > 1 + bar for _, q, _ in slower)} "
                 f"more than {bar:.0%} slower, {sum(lq > 1 + bar for _, _, lq in slower)} at each run's torch level "
                 f"(levels {shown})")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(argv, script_args)
    if args.markdown:
        print(markdown(args.markdown))
        return 0
    if args.compare:
        print(compare(*(paths.split(",") for paths in args.compare), bar=args.bar))
        return 0
    sel = selected(args.ops, args.dtypes, args.layouts, args.sizes)
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.backends.cudnn.benchmark = True
        except ImportError:
            torch = None
    import cudnn_py
    from cudnn_py.core.handle import Handle
    meta = {"gpu": cudnn_py.core.streams.get_device().name, "cudnn": ".".join(map(str, cudnn_py.version())),
            "torch": torch.__version__ if torch is not None else None, "rounds": args.rounds,
            "sample_ms": args.sample_ms, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"{meta['gpu']}; cuDNN {meta['cudnn']}; torch "
          f"{meta['torch'] or 'absent (no torch column, no sleep kernel)'}; device ms per call, median of "
          f"{args.rounds} interleaved rounds; '/torch': the best cudnn-py engine over torch; 'auto': the engine "
          f"engine_choice kept; GB/s (T: TFLOP/s) of 'auto' (else 'default'); host us per call", flush=True)
    with Handle() as h:
        rows = measure(Bench(h, torch, args.sample_ms, args.rounds), sel, args.json, meta=meta, probing=args.probe)
    print(table(rows))
    for r in rows:
        if r.probe is not None:
            print(probe_line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
