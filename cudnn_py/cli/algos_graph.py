"""``python -m cudnn_py algos --graph KIND``: sweep every engine configuration the graph heuristics offer.

For one convolution (``--preset`` / ``--input --filter``), matmul, layer norm or attention problem, each engine
config of heuristics modes A, B and FALLBACK is built, run on NaN-poisoned outputs, timed (``graph.time_plan``) and
checked against a float64 NumPy reference; the table marks mode A's pick (what ``Graph.build`` runs) and adds a
torch row for the same problem.

    python -m cudnn_py algos --graph conv --preset resnet50-conv2-3x3 --batch 32 --dtype float16 --layout NHWC
    python -m cudnn_py algos --graph matmul --mnk 4096,4096,4096 --dtype bfloat16 --csv mm.csv --plot mm.png
    python -m cudnn_py algos --graph norm --norm-shape 8192,4096 --dtype bfloat16
    python -m cudnn_py algos --graph attention --sdpa 4,16,1024,128 --dtype bfloat16 --causal
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from cudnn_py.cli import algos
from cudnn_py.cli.prerequisites import require_gpu
from cudnn_py.core.dtypes import as_numpy_dtype
from cudnn_py.tuning.sweep import MODES, heuristics

KINDS = ("conv", "matmul", "norm", "attention")
GRAPH_DTYPES = ("float32", "float16", "bfloat16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The graph-sweep options (``--graph`` switches the legacy sweep to this one)."""
    g = p.add_argument_group("graph engines (--graph)")
    g.add_argument("--graph", choices=KINDS, help="sweep the graph API's engine configs for this problem instead")
    g.add_argument("--modes", default="A,B,FALLBACK", help="heuristics modes to collect configs from")
    g.add_argument("--mnk", help="matmul M,N,K (optionally B,M,N,K)")
    g.add_argument("--norm-shape", help="layer norm rows,hidden (forward training)")
    g.add_argument("--sdpa", help="attention B,H,S,D (forward)")
    g.add_argument("--causal", action="store_true", help="attention with a causal mask")
    g.add_argument("--no-torch", action="store_true", help="leave out the torch row")


def wanted(args: argparse.Namespace) -> bool:
    """Whether the ``algos`` arguments ask for this sweep."""
    return bool(args.graph)


@dataclass
class Row(algos.Row):
    """One engine config (``algo`` its tag, ``math_type`` the heuristics modes that offered it, ``direction`` the
    problem's operation); ``pick`` says 'A' for mode A's choice, 'torch' for torch's row."""
    pick: str = ""

    def bar(self) -> tuple[str, str]:
        """Mode A's pick red, torch's green."""
        return ("C3" if self.pick == "A" else "C2" if self.pick == "torch" else "C0",
                f"{self.algo} ({self.math_type})" + (f" [{self.pick}]" if self.pick else ""))


@dataclass
class Problem:
    """A graph ``make()`` returns with its I/O tensors, host inputs, float64 reference of the output, flops."""
    kind: str
    title: str
    make: Callable        # () -> (graph, {tensor: host input}, output tensor)
    reference: Callable   # ({name: host input}) -> float64 output
    flops: float
    torch_fn: Callable | None = None   # () -> callable running torch's equivalent on its own device data
    extra: dict = field(default_factory=dict)  # name -> shape of host arrays the reference reads besides inputs


def heuristics_modes(text: str, prog: str) -> tuple[str, ...]:
    """The ``--modes`` list (any case, comma-separated); SystemExit naming ``prog`` for an empty or unknown one."""
    modes = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        raise SystemExit(f"{prog}: --modes takes {', '.join(MODES)}, got {text!r}")
    return modes


def _ints(text: str | None, n: tuple[int, ...], what: str) -> tuple[int, ...]:
    if not text:
        raise SystemExit(f"algos --graph: give {what}")
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"algos --graph: {what} must be comma-separated integers, got {text!r}") from None
    if len(vals) not in n or any(v < 1 for v in vals):
        raise SystemExit(f"algos --graph: {what} needs {' or '.join(map(str, n))} positive integers, got {text!r}")
    return vals


def _randn(shape, dtype: str):
    """Random normal data of ``shape`` on the current CUDA device through torch (the torch rows)."""
    import torch
    return torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))


def _graph(dtype: str, name: str):
    import cudnn_py.graph as G
    return G.Graph(io_dtype=as_numpy_dtype(dtype), compute_dtype="float32", name=name)


def problem_from_args(args) -> Problem:
    """The problem the command line names (SystemExit with the reason where it is incomplete)."""
    if args.dtype not in GRAPH_DTYPES:
        raise SystemExit(f"algos --graph: --dtype must be one of {', '.join(GRAPH_DTYPES)}, got {args.dtype}")
    dt = args.dtype
    if args.graph == "conv":
        return _conv_problem(args)
    if args.graph == "matmul":
        v = _ints(args.mnk, (3, 4), "--mnk M,N,K")
        b, m, n, k = (1,) + v if len(v) == 3 else v
        return _matmul_problem(b, m, n, k, dt)
    if args.graph == "norm":
        rows, hidden = _ints(args.norm_shape, (2,), "--norm-shape rows,hidden")
        return _norm_problem(rows, hidden, dt)
    b, hh, s, d = _ints(args.sdpa, (4,), "--sdpa B,H,S,D")
    if dt == "float32":
        raise SystemExit("algos --graph attention: --dtype float16 or bfloat16 (cuDNN's attention engines)")
    return _sdpa_problem(b, hh, s, d, dt, args.causal)


def _conv_problem(args) -> Problem:
    cfg = algos.config_from_args(args)
    direction = args.direction[0] if len(args.direction) == 1 else None
    if direction is None:
        raise SystemExit("algos --graph conv: give one --direction (fwd, bwd_data or bwd_filter)")
    layout = "NHWC" if cfg.layout == "NHWC" else None
    pads, stride, dil, y_shape = cfg.pads(), cfg.full(cfg.stride), cfg.full(cfg.dilation), cfg.y_shape()
    kw = dict(padding=tuple(p[0] for p in pads), post_padding=tuple(p[1] for p in pads), stride=stride,
              dilation=dil, conv_mode=cfg.mode)

    def make():
        g = _graph(cfg.dtype, f"conv_{direction}")
        x, w, dy = (g.tensor(s, name=n, layout=layout) for s, n in ((cfg.x_shape, "x"), (cfg.w_shape, "w"),
                                                                    (y_shape, "dy")))
        if direction == "forward":
            out, ins = g.conv_fprop(x, w, **kw), (x, w)
        elif direction == "backward_data":
            out, ins = g.conv_dgrad(dy, w, x_shape=cfg.x_shape, **kw), (dy, w)
        else:
            out, ins = g.conv_wgrad(dy, x, w_shape=cfg.w_shape, **kw), (dy, x)
        out.set_output(True).set_name("out")
        if layout:
            from cudnn_py.graph.graph import packed_strides
            out.strides = packed_strides(out.shape, "NHWC")
        return g, ins, out

    def torch_conv():
        import torch
        torch.backends.cudnn.benchmark = True
        fmt = torch.channels_last if layout else torch.contiguous_format
        xt, wt = (_randn(s, cfg.dtype).to(memory_format=fmt) for s in (cfg.x_shape, cfg.w_shape))
        return lambda: torch.nn.functional.conv2d(xt, wt, None, stride, kw["padding"], dil, cfg.groups)
    return Problem("conv", f"conv {direction} x={cfg.x_shape} w={cfg.w_shape} pad={cfg.padding} "
                           f"stride={cfg.stride} {cfg.dtype} {cfg.layout}", make,
                   lambda h: algos.reference(direction, cfg, h["x"], h["w"], h["dy"]), cfg.flops(),
                   torch_conv if cfg.nd == 2 and direction == "forward" else None,
                   {"x": cfg.x_shape, "w": cfg.w_shape, "dy": y_shape})


def _matmul_problem(b, m, n, k, dt) -> Problem:
    def make():
        g = _graph(dt, "matmul")
        a, bb = g.tensor((b, m, k), name="a"), g.tensor((b, k, n), name="b")
        return g, (a, bb), g.matmul(a, bb).set_output(True).set_name("out")

    def torch_fn():
        import torch
        at, bt = _randn((b, m, k), dt), _randn((b, k, n), dt)
        return lambda: torch.matmul(at, bt)
    return Problem("matmul", f"matmul B={b} M={m} N={n} K={k} {dt}", make, lambda h: h["a"] @ h["b"],
                   2.0 * b * m * n * k, torch_fn)


def _norm_problem(rows, hidden, dt) -> Problem:
    def make():
        g = _graph(dt, "layer_norm")
        x = g.tensor((rows, hidden, 1, 1), name="x")
        s, bias = (g.tensor((1, hidden, 1, 1), name=nm, dtype="float32") for nm in ("scale", "bias"))
        y, mean, inv = g.norm_forward(x, s, bias, mode="layer", training=True, epsilon=1e-5)
        y.set_output(True).set_name("out")
        for t in (mean, inv):
            t.set_output(True)
        return g, (x, s, bias), y

    def reference(h):
        x = h["x"]
        mu = x.mean(axis=(1, 2, 3), keepdims=True)
        var = ((x - mu) ** 2).mean(axis=(1, 2, 3), keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * h["scale"] + h["bias"]

    def torch_fn():
        import torch
        xt, wt, bt = _randn((rows, hidden), dt), _randn(hidden, dt), _randn(hidden, dt)
        return lambda: torch.nn.functional.layer_norm(xt, (hidden,), wt, bt)
    # a norm is memory-bound: "TFLOP/s" counts ~8 flops per element
    return Problem("norm", f"layer norm forward rows={rows} hidden={hidden} {dt}", make, reference,
                   8.0 * rows * hidden, torch_fn)


def _sdpa_problem(b, hh, s, d, dt, causal) -> Problem:
    def make():
        g = _graph(dt, "sdpa")
        q, k, v = (g.tensor((b, hh, s, d), name=nm) for nm in ("q", "k", "v"))
        o, stats = g.sdpa(q, k, v, causal=causal)
        o.set_output(True).set_name("out")
        if stats is not None:
            stats.set_output(True).set_dtype("float32")
        return g, (q, k, v), o

    def reference(h):
        sc = np.einsum("bhsd,bhtd->bhst", h["q"], h["k"]) / np.sqrt(d)
        if causal:
            sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        return np.einsum("bhst,bhtd->bhsd", p / p.sum(-1, keepdims=True), h["v"])

    def torch_fn():
        import torch
        q, k, v = (_randn((b, hh, s, d), dt) for _ in range(3))
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    flops = 4.0 * b * hh * s * s * d * (0.5 if causal else 1.0)
    return Problem("attention", f"sdpa B={b} H={hh} S={s} D={d} causal={causal} {dt}", make, reference, flops,
                   torch_fn)


# ---------------------------------------------------------------- the sweep (needs a GPU)

def _device(a: np.ndarray, t, h):
    from cudnn_py.core.memory import DeviceArray, to_device
    order = sorted(range(len(t.shape)), key=lambda i: -t.strides[i])
    buf = to_device(np.ascontiguousarray(a.astype(t.np_dtype).transpose(order)), h.stream, device=h.device)
    return DeviceArray(buf.ptr, t.shape, t.np_dtype, t.strides, device_id=buf.device_id, owner=buf)


def _poison(d) -> None:
    """Fill a dense device array of any strides with NaN (through a flat alias of its memory)."""
    from cudnn_py.core.memory import DeviceArray
    DeviceArray(d.ptr, (d.size,), d.dtype, device_id=d.device_id, owner=d).fill_(float("nan"))


def sweep(problem: Problem, modes=MODES, repeats: int = 10, warmup: int = 2, check: bool = True, seed: int = 0,
          device: int = 0, torch_row: bool = True, progress=None) -> list[Row]:
    """Build, run, check and time every config the heuristics ``modes`` offer; returns one row per config."""
    import cudnn_py.graph as G
    from cudnn_py.errors import CudnnError
    rng = np.random.default_rng(seed)
    rows: list[Row] = []
    with algos.open_handle(device, "algos --graph") as h:
        g, ins, out = problem.make()
        shapes = {**{n: (s, out.np_dtype) for n, s in problem.extra.items()},
                  **{t.name: (t.shape, t.np_dtype) for t in ins}}
        host = {n: (rng.standard_normal(s) * (0.5 if problem.kind == "attention" else 1.0)).astype(dt).astype(
            np.float64) for n, (s, dt) in shapes.items()}
        ref = problem.reference(host) if check else None
        pack = {t: _device(host[t.name], t, h) for t in ins}
        outs = [t for t in g.io_tensors() if not t.is_by_value and t not in ins]
        for t in outs:
            pack[t] = _device(np.full(t.shape, np.nan), t, h)
        configs, orders, errors = heuristics(g, h, modes)
        sources = {t: [m for m in modes if t in orders[m]] for t in configs}
        a_pick = None
        for i, cfg in enumerate(configs.values()):
            if progress:
                progress(f"[{i + 1}/{len(configs)}] {cfg.tag}")
            row = Row(problem.kind, ",".join(sources[cfg.tag]), cfg.tag, False, deterministic=cfg.is_deterministic)
            rows.append(row)
            try:
                plan = G.Plan.build(g, h, cfg)
                row.workspace_bytes = plan.workspace_size
                for t in outs:
                    _poison(pack[t])
                plan.execute(h, pack)
                got = np.asarray(pack[out].to_numpy(), np.float64)
                row.time_ms = G.time_plan(plan, h, pack, warmup=warmup, iters=repeats)
            except CudnnError as e:
                row.reason = " ".join(str(e).split())[:300]
                continue
            row.supported = True
            row.tflops = problem.flops / (row.time_ms * 1e-3) / 1e12 if row.time_ms > 0 else None
            if check and ref is not None:
                row.max_rel_error = algos.rel_error(got, ref)
            if a_pick is None and "A" in sources[cfg.tag]:
                a_pick, row.pick = row, "A"
        for m, err in errors.items():
            rows.append(Row(problem.kind, "", "-", False, f"heuristics {m}: {err}"))
    if torch_row and problem.torch_fn is not None:
        rows.append(_torch_row(problem, problem.torch_fn, repeats, warmup))
    return rows


def _torch_row(problem: Problem, make: Callable, repeats: int, warmup: int) -> Row:
    row = Row(problem.kind, "torch", "torch (engine not exposed)", False, pick="torch")
    try:
        import torch
        fn = make()
        for _ in range(max(warmup, 3)):
            fn()
        times = []
        for _ in range(repeats):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    except Exception as e:  # noqa: BLE001 - torch missing or refusing: the row says so
        row.reason = f"{type(e).__name__}: {e}"[:300]
        return row
    row.supported, row.time_ms = True, statistics.median(times)
    row.tflops = problem.flops / (row.time_ms * 1e-3) / 1e12
    return row


# ---------------------------------------------------------------- output (the legacy sweep's formats)

def format_table(rows: list[Row]) -> str:
    return algos.format_table(rows, (10, 16, 44, 12), ("problem", "modes", "engine config"), pick=True)


def run(args) -> int:
    """The ``algos --graph`` command."""
    problem = problem_from_args(args)
    modes = heuristics_modes(args.modes, "algos --graph")
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("algos: --repeats must be >= 1 and --warmup >= 0")

    require_gpu("algos --graph", args.device)
    rows = sweep(problem, modes, args.repeats, args.warmup, not args.no_check, args.seed, args.device,
                 not args.no_torch, None if args.quiet else algos.progress_writer(False))
    algos.write_outputs(args, rows, problem.title, format_table(rows), {"problem": problem.title})
    return 0
