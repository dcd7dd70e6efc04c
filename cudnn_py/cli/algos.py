"""``python -m cudnn_py algos``: sweep every convolution algorithm and math type of one configuration.

For each direction, math type and algorithm: supported or not (with cuDNN's reason), median time
over ``--repeats`` runs timed with CUDA events, TFLOP/s, workspace bytes, determinism (cuDNN's
record) and the maximum error against a float64 NumPy reference, ``max|out - ref| / max|ref|``.

    python -m cudnn_py algos --preset resnet50-conv2-3x3 --batch 32 --dtype float16 --layout NHWC
    python -m cudnn_py algos --input 8,64,56,56 --filter 64,64,3,3 --pad 1 --csv out.csv --plot out.png
"""
from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import itertools
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from cudnn_py.clib.install import pip_install

from . import HelpFormatter
from .prerequisites import require_gpu

DIRECTIONS = ("forward", "backward_data", "backward_filter")
_DIR_ALIASES = {"fwd": "forward", "bwd_data": "backward_data", "bwd_filter": "backward_filter"}
MATHS = ("default", "tensor_op", "tensor_op_allow_conversion", "fma")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8")

#: name -> (C, H, W, K, R, S, pad, stride) per image; ResNet-50 v1.5 convolutions (NCHW logical)
PRESETS = {
    "resnet50-conv1": (3, 224, 224, 64, 7, 7, 3, 2),
    "resnet50-conv2-1x1-reduce": (64, 56, 56, 64, 1, 1, 0, 1),
    "resnet50-conv2-3x3": (64, 56, 56, 64, 3, 3, 1, 1),
    "resnet50-conv2-1x1-expand": (64, 56, 56, 256, 1, 1, 0, 1),
    "resnet50-conv3-3x3-stride2": (128, 56, 56, 128, 3, 3, 1, 2),
    "resnet50-conv3-3x3": (128, 28, 28, 128, 3, 3, 1, 1),
    "resnet50-conv3-1x1-expand": (128, 28, 28, 512, 1, 1, 0, 1),
    "resnet50-conv4-3x3": (256, 14, 14, 256, 3, 3, 1, 1),
    "resnet50-conv4-1x1-reduce": (1024, 14, 14, 256, 1, 1, 0, 1),
    "resnet50-conv5-3x3": (512, 7, 7, 512, 3, 3, 1, 1),
    "resnet50-conv5-1x1-expand": (512, 7, 7, 2048, 1, 1, 0, 1),
    "wide-3x3-256": (256, 56, 56, 256, 3, 3, 1, 1),
}


#: the usage line an argument mistake prints above its one-line error (``--help`` lists every option)
USAGE = ("%(prog)s [--preset NAME | --input N,C,H,W --filter K,C,R,S] [--graph KIND | --model NAME | --compare A B "
         "| --merge DB ...] [options]; every option: %(prog)s --help")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 8,64,56,56") from None
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: values must be >= 0")
    return vals


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
    return value


def _padding(text: str):
    """``1`` / ``1,2`` (symmetric per dimension) / ``1:2,0:1`` (low:high per dimension)."""
    parts = text.split(",")
    try:
        vals = tuple(tuple(int(v) for v in p.split(":")) if ":" in p else int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pad {text!r}: expected e.g. 1, 1,2 or 1:2,0:1") from None
    if any(isinstance(p, tuple) and len(p) != 2 for p in vals):
        raise argparse.ArgumentTypeError(f"--pad {text!r}: each low:high pair needs exactly two numbers")
    if any(isinstance(p, tuple) for p in vals):
        return tuple(p if isinstance(p, tuple) else (p, p) for p in vals)
    return vals[0] if len(vals) == 1 else vals


def _choice_list(allowed, aliases=None):
    def parse(text: str) -> tuple[str, ...]:
        if text == "all":
            return tuple(allowed)
        out = []
        for t in text.split(","):
            t = (aliases or {}).get(t, t)
            if t not in allowed:
                raise argparse.ArgumentTypeError(f"{text!r}: {t!r} is not one of {', '.join(allowed)} (or 'all')")
            out.append(t)
        return tuple(dict.fromkeys(out))
    return parse


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``algos`` with the convolution sweep's flags; returns its parser (the graph and model sweeps add
    theirs: :data:`cudnn_py.cli.COMMANDS`)."""
    p = subparsers.add_parser("algos", help="time and check every convolution algorithm for one configuration",
                              description=__doc__, formatter_class=HelpFormatter, usage=USAGE)
    shape = p.add_argument_group("configuration (a preset, or --input and --filter)")
    shape.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                       help="a named layer (--list-presets lists them; shapes per image, see --batch)")
    shape.add_argument("--batch", type=int, default=32, help="batch size for a preset (default 32)")
    shape.add_argument("--list-presets", action="store_true", help="print the presets and exit")
    shape.add_argument("--input", type=_int_list, metavar="N,C,H,W",
                       help="x shape N,C,[D,]H,W or N,C,L (logical NCHW order)")
    shape.add_argument("--filter", type=_int_list, metavar="K,C,R,S", help="w shape K,C/groups,[T,]R,S (logical order)")
    shape.add_argument("--pad", type=_padding, default=None, help="padding: 1 | 1,2 | 1:2,0:1 (default 0)")
    shape.add_argument("--stride", type=_int_list, default=None, help="stride, one value or one per dim")
    shape.add_argument("--dilation", type=_int_list, default=(1,), help="dilation, one value or one per dim")
    shape.add_argument("--groups", type=int, default=1, help="grouped convolution: input channels / groups per "
                       "filter (default 1)")
    shape.add_argument("--mode", choices=("cross_correlation", "convolution"), default="cross_correlation",
                       help="cross_correlation (what deep learning calls convolution; default) or convolution "
                            "(the filter flipped)")
    shape.add_argument("--dtype", choices=DTYPES, default="float32",
                       help="data type of x, w and y (int8 computes into float32 y; default float32)")
    shape.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                       help="memory layout of x, w and y (default NCHW); shapes are given in NCHW order either way")
    sweep = p.add_argument_group("sweep")
    sweep.add_argument("--direction", type=_choice_list(DIRECTIONS, _DIR_ALIASES), default=DIRECTIONS,
                       help="fwd,bwd_data,bwd_filter or all (default all)")
    sweep.add_argument("--math", type=_choice_list(MATHS), default=MATHS, help=f"{','.join(MATHS)} or all")
    sweep.add_argument("--repeats", type=int, default=10, help="timed runs per algorithm (median reported)")
    sweep.add_argument("--warmup", type=int, default=2, help="untimed runs per algorithm first (default 2)")
    sweep.add_argument("--workspace-limit", type=_non_negative, default=None, help="skip algorithms needing more bytes")
    sweep.add_argument("--no-check", action="store_true", help="skip the float64 reference comparison")
    sweep.add_argument("--seed", type=_non_negative, default=0, help="seed of the random inputs (default 0)")
    sweep.add_argument("--device", type=_non_negative, default=0, help="CUDA device ordinal (default 0)")
    out = p.add_argument_group("output")
    out.add_argument("--csv", metavar="PATH", help="also write the table as CSV, one row per algorithm")
    out.add_argument("--json", metavar="PATH", help="also write the configuration and rows as JSON")
    out.add_argument("--plot", metavar="PNG", help="bar chart of the times (needs matplotlib: cudnn-py[plot])")
    out.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


@dataclass
class Config:
    """One convolution to sweep: shapes in logical NCHW order, geometry, dtype and memory layout."""

    x_shape: tuple
    w_shape: tuple
    padding: int | tuple[int | tuple[int, int], ...]
    stride: tuple
    dilation: tuple
    groups: int
    mode: str
    dtype: str
    layout: str

    @property
    def nd(self) -> int:
        """The number of spatial dimensions."""
        return len(self.x_shape) - 2

    def per_dim(self, v: tuple) -> int | tuple:
        """Stride or dilation values as :class:`~cudnn_py.Convolution` takes them (one value: the same for all)."""
        return v[0] if len(v) == 1 else v

    def full(self, v: tuple) -> tuple:
        """Stride or dilation values, one per spatial dimension."""
        return v * self.nd if len(v) == 1 else v

    def pads(self) -> tuple[tuple[int, int], ...]:
        """(low, high) padding per spatial dimension."""
        if isinstance(self.padding, int):
            return ((self.padding, self.padding),) * self.nd
        return tuple(p if isinstance(p, tuple) else (p, p) for p in self.padding)

    def y_shape(self) -> tuple:
        """The forward output's shape (logical NCHW); ValueError where the geometry is inconsistent."""
        from cudnn_py.ops.convolution import Convolution
        conv = Convolution(self.padding, self.per_dim(self.stride), self.per_dim(self.dilation), self.groups)
        return conv.output_shape(self.x_shape, self.w_shape)

    def flops(self) -> float:
        """2 * the forward convolution's multiply-adds (each direction's count); ValueError as :meth:`y_shape`."""
        return 2.0 * float(np.prod(self.y_shape(), dtype=np.float64)) * float(np.prod(self.w_shape[1:],
                                                                                       dtype=np.float64))


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration the ``algos`` arguments name; SystemExit with the reason where it is incomplete or
    inconsistent."""
    if args.preset:
        if args.input or args.filter:
            raise SystemExit("algos: give either --preset or --input/--filter, not both")
        c, h, w, k, r, s, pad, stride = PRESETS[args.preset]
        if args.batch < 1:
            raise SystemExit(f"algos: --batch must be >= 1, got {args.batch}")
        x_shape, w_shape = (args.batch, c, h, w), (k, c // args.groups, r, s)
    else:
        if not args.input or not args.filter:
            raise SystemExit("algos: give --preset NAME or both --input and --filter (see --list-presets)")
        x_shape, w_shape, pad, stride = args.input, args.filter, 0, 1
    padding = pad if args.pad is None else args.pad
    stride_v = (stride,) if args.stride is None else args.stride
    if len(x_shape) != len(w_shape) or not 3 <= len(x_shape) <= 5:
        raise SystemExit(f"algos: --input {x_shape} and --filter {w_shape} need 3, 4 or 5 values each, the same count")
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("algos: --repeats must be >= 1 and --warmup >= 0")
    cfg = Config(tuple(x_shape), tuple(w_shape), padding, tuple(stride_v), tuple(args.dilation), args.groups,
                 args.mode, args.dtype, args.layout)
    try:
        cfg.flops()  # validates the geometry (channels vs groups, sizes, per-dimension counts)
    except ValueError as e:
        raise SystemExit(f"algos: {e}") from None
    return cfg


# ---------------------------------------------------------------- float64 reference (logical NCHW)

def reference(direction: str, cfg: Config, x, w, dy):
    """float64 result of one direction, by a loop over kernel offsets (channels contracted with tensordot)."""
    nd, g = cfg.nd, cfg.groups
    pads, s, d = cfg.pads(), cfg.full(cfg.stride), cfg.full(cfg.dilation)
    if cfg.mode == "convolution":
        w = w[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    out = dy.shape[2:]
    xg = xp.reshape((n, g, cg) + xp.shape[2:])
    wg = w.reshape((g, k // g, cg) + w.shape[2:])
    dyg = dy.reshape((n, g, k // g) + out)
    res = np.zeros({"forward": dyg.shape, "backward_data": xg.shape, "backward_filter": wg.shape}[direction])
    for off in itertools.product(*(range(r) for r in w.shape[2:])):
        win = (Ellipsis,) + tuple(slice(o * dd, o * dd + (p - 1) * ss + 1, ss) for o, ss, dd, p in zip(off, s, d, out))
        wo = wg[(Ellipsis,) + off]  # g, k/g, cg
        for gi in range(g):
            if direction == "forward":   # n cg *out , k cg -> n k *out
                res[:, gi] += np.moveaxis(np.tensordot(xg[:, gi][win], wo[gi], axes=([1], [1])), -1, 1)
            elif direction == "backward_data":
                res[:, gi][win] += np.moveaxis(np.tensordot(dyg[:, gi], wo[gi], axes=([1], [0])), -1, 1)
            else:
                axes = [0] + list(range(2, 2 + nd))
                res[(gi, slice(None), slice(None)) + off] = np.tensordot(dyg[:, gi], xg[:, gi][win], axes=(axes, axes))
    if direction == "forward":
        return res.reshape(dy.shape)
    if direction == "backward_data":
        dx = res.reshape((n, c) + xp.shape[2:])
        return dx[(slice(None), slice(None)) + tuple(slice(lo, lo + x.shape[2 + i]) for i, (lo, _) in enumerate(pads))]
    dw = res.reshape(w.shape)
    return dw[(slice(None), slice(None)) + (slice(None, None, -1),) * nd] if cfg.mode == "convolution" else dw


# ---------------------------------------------------------------- the sweep (needs a GPU)

@dataclass
class Row:
    """One algorithm's result: supported or not (with cuDNN's reason), time, throughput, workspace, error."""

    direction: str
    math_type: str
    algo: str
    supported: bool
    reason: str = ""
    time_ms: float | None = None
    tflops: float | None = None
    workspace_bytes: int | None = None
    deterministic: bool | None = None
    max_rel_error: float | None = None

    def bar(self) -> tuple[str, str]:
        """(colour, label) of this row's bar in :func:`plot`: one colour per direction."""
        return f"C{DIRECTIONS.index(self.direction)}", f"{self.direction} / {self.math_type} / {self.algo}"


def sweep(cfg: Config, directions: Sequence[str], maths: Sequence[str], repeats: int = 10, warmup: int = 2,
          workspace_limit: int | None = None, check: bool = True, seed: int = 0, device: int = 0,
          progress: Callable[[str], None] | None = None) -> list[Row]:
    """One :class:`Row` per direction (of :data:`DIRECTIONS`), math type (of :data:`MATHS`) and algorithm: each run
    ``max(warmup, 1)`` times untimed, then ``repeats`` times timed (the median kept; an algorithm needing more than
    ``workspace_limit`` bytes is unsupported), its output compared with a float64 NumPy reference where ``check``;
    random inputs of ``seed``; ``progress`` gets one short line per algorithm. SystemExit without a GPU."""
    import cudnn_py.calls.algorithms as alg
    from cudnn_py.errors import CudnnError, WorkspaceLimitError
    from cudnn_py.core.conv_layout import physical
    from cudnn_py.core.memory import empty, to_device
    from cudnn_py.ops import conv_calls as cv
    from cudnn_py.core.streams import held_ms
    from cudnn_py.tuning import legacy
    from cudnn_py.core.dtypes import as_numpy_dtype

    require_gpu("algos", device)  # before the float64 references, which take minutes for a large layer
    rng, dt = np.random.default_rng(seed), as_numpy_dtype(cfg.dtype)

    def make(shape):   # int8: small integers
        return rng.integers(-8, 9, size=shape).astype(dt) if dt == np.int8 else rng.standard_normal(shape).astype(dt)
    x_h, w_h = make(cfg.x_shape), make(cfg.w_shape)
    y_shape = cfg.y_shape()
    dy_h = make(y_shape)
    flops = cfg.flops()
    refs = {}
    if check:
        x64, w64, dy64 = (a.astype(np.float64) for a in (x_h, w_h, dy_h))
        refs = {d: reference(d, cfg, x64, w64, dy64) for d in directions}
    rows: list[Row] = []
    total = len(maths) * sum(len(alg.real_members(d)) for d in directions)
    done = 0
    with open_handle(device, "algos") as h:
        nhwc = cfg.layout == "NHWC"
        x, w, dy = (to_device(np.ascontiguousarray(np.moveaxis(a, 1, -1) if nhwc else a), h.stream, device=h.device)
                    for a in (x_h, w_h, dy_h))
        out_dtype = np.float32 if dt == np.int8 else dt
        for direction, math in itertools.product(directions, maths):
            conv = cv.Convolution(cfg.padding, cfg.per_dim(cfg.stride), cfg.per_dim(cfg.dilation), cfg.groups,
                                  mode=cfg.mode, math_type=math, layout=cfg.layout)
            shape = {"forward": y_shape, "backward_data": cfg.x_shape, "backward_filter": cfg.w_shape}[direction]
            out = empty(physical(shape, cfg.layout), out_dtype if direction == "forward" else dt,
                        stream=h.stream, device=h.device)
            xwd = (x if direction != "backward_data" else out, w if direction != "backward_filter" else out,
                   dy if direction != "forward" else out)   # the output in the place of what the direction computes
            reason_all = ""
            try:
                records = {r.algo: r for r in cv.convolution_algorithms(h, conv, *xwd, direction=direction,
                                                                       method="heuristic")}
            except CudnnError as e:
                records, reason_all = {}, str(e)
            for algo in alg.real_members(direction):
                done += 1
                if progress:
                    progress(f"[{done}/{total}] {direction} {math} {algo.name.split('_ALGO_')[1]}")
                row = Row(direction, math, algo.name.split("_ALGO_")[1], False, reason_all,
                          deterministic=getattr(records.get(algo), "deterministic", None))
                rows.append(row)
                call = functools.partial(legacy.call, h, conv, direction, x, w, dy, out, algo=algo,
                                         workspace_limit=workspace_limit)
                try:
                    row.workspace_bytes = cv.convolution_workspace_size(h, conv, *xwd, algo=algo, direction=direction)
                    out.fill_(0 if out.dtype == np.int8 else float("nan"))
                    for _ in range(max(warmup, 1)):
                        call()
                    times, hold = [], True
                    for _ in range(repeats):
                        ms, _, hold = held_ms(h.stream, call, hold)
                        times.append(ms)
                except (CudnnError, WorkspaceLimitError, ValueError) as e:
                    row.reason = " ".join(str(e).split())[:400]
                    continue
                row.supported, row.reason = True, ""
                row.time_ms = time_ms = statistics.median(t for t in times if t is not None)
                row.tflops = flops / (time_ms * 1e-3) / 1e12 if time_ms > 0 else None
                if check:
                    got = out.to_numpy().astype(np.float64)
                    row.max_rel_error = rel_error(np.moveaxis(got, -1, 1) if nhwc else got, refs[direction])
    return rows


def open_handle(device: int, prog: str):
    """A cuDNN handle on ``device``; SystemExit naming ``prog`` where none opens (no GPU, no driver)."""
    from cudnn_py.core.handle import Handle
    try:
        return Handle(device)
    except Exception as e:  # noqa: BLE001 - no GPU, no driver, cuDNN cannot start
        raise SystemExit(f"{prog}: cannot open a cuDNN handle on device {device} (a GPU is needed): {e}") from None


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """``max|got - ref| / max|ref|`` (inf where ``got`` is not all finite)."""
    return float(np.abs(got - ref).max() / (float(np.abs(ref).max()) or 1.0)) if np.isfinite(got).all() else math.inf


# ---------------------------------------------------------------- output

def format_table(rows: Sequence[Row], widths: tuple[int, int, int, int] = (16, 27, 22, 14),
                 names: tuple[str, str, str] = ("direction", "math", "algo"), pick: bool = False) -> str:
    """The rows as a fixed-width text table: the first three columns' ``names`` and the widths of those and the
    workspace's; ``pick``: a column of each row's ``pick`` (the graph sweep's) before the reason."""
    a, b, c, ws = widths
    pw = 7 if pick else 0
    head = f"{names[0]:<{a}}{names[1]:<{b}}{names[2]:<{c}}{'ok':<4}{'time ms':>10}{'TFLOP/s':>9}{'workspace':>{ws}}" \
           f"{'det':>5}{'max rel err':>13}{'pick' if pick else '':>{pw}}  reason"
    lines = [head, "-" * len(head)]
    num = (lambda v, f: format(v, f) if v is not None else "-")
    for r in rows:
        det = "-" if r.deterministic is None else ("yes" if r.deterministic else "no")
        lines.append(f"{r.direction:<{a}}{r.math_type:<{b}}{r.algo:<{c}}{'yes' if r.supported else 'no':<4}"
                     f"{num(r.time_ms, '10.4f'):>10}{num(r.tflops, '9.2f'):>9}{num(r.workspace_bytes, 'd'):>{ws}}"
                     f"{det:>5}{num(r.max_rel_error, '13.2e'):>13}{getattr(r, 'pick', ''):>{pw}}  {r.reason}")
    return "\n".join(lines)


def write_csv(rows: Sequence[Row], path: str) -> None:
    """Write the rows (of :func:`sweep` or the graph sweep) as CSV with a header line of their class's fields."""
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=[fd.name for fd in fields(type(rows[0]) if rows else Row)])
        wr.writeheader()
        wr.writerows(asdict(r) for r in rows)


def write_json(rows: Sequence[Row], cfg: Config | dict, path: str) -> None:
    """Write ``{"config": cfg, "rows": [...]}`` as JSON (``cfg`` a :class:`Config`, or what stands first)."""
    with open(path, "w") as f:
        json.dump({**(cfg if isinstance(cfg, dict) else {"config": asdict(cfg)}), "rows": [asdict(r) for r in rows]},
                  f, indent=1)


def plot(rows: Sequence[Row], path: str, title: str) -> bool:
    """Write a horizontal bar chart (off-screen, pyplot's state untouched) of the supported rows' times, coloured
    and labelled by :meth:`Row.bar`; False when matplotlib is missing (nothing written)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False
    ok = [r for r in rows if r.supported]
    fig = Figure(figsize=(9, 0.28 * len(ok) + 1.5))
    ax = fig.subplots()
    ax.barh(range(len(ok)), [r.time_ms or 0.0 for r in ok], color=[r.bar()[0] for r in ok])
    ax.set_yticks(range(len(ok)), [r.bar()[1] for r in ok], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("median time (ms)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def run(args: argparse.Namespace) -> int:
    """Sweep (or list the presets) and print the table; write CSV / JSON / PNG when asked; returns 0."""
    if args.list_presets:
        for name, (c, h, w, k, r, s, pad, stride) in sorted(PRESETS.items()):
            print(f"{name:<28} x=N,{c},{h},{w}  w={k},{c},{r},{s}  pad={pad} stride={stride}")
        return 0
    cfg = config_from_args(args)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise SystemExit(f"algos: --plot needs matplotlib, which is not installed: {pip_install('plot')} "
                         "(or leave --plot out)")
    terminal = sys.stderr.isatty()
    rows = sweep(cfg, args.direction, args.math, args.repeats, args.warmup, args.workspace_limit,
                 not args.no_check, args.seed, args.device, None if args.quiet else progress_writer(terminal))
    if not args.quiet and terminal:
        sys.stderr.write("\r\033[K")
    title = (f"x={cfg.x_shape} w={cfg.w_shape} pad={cfg.padding} stride={cfg.stride} dil={cfg.dilation} "
             f"groups={cfg.groups} {cfg.dtype} {cfg.layout}")
    write_outputs(args, rows, title, format_table(rows), {"config": asdict(cfg)})
    return 0


def write_outputs(args: argparse.Namespace, rows: Sequence[Row], title: str, table: str, head: dict) -> None:
    """Print ``title`` and ``table``; write the rows as CSV, as JSON (``head`` first) and as a chart where asked."""
    print(title)
    print(table)
    if args.csv:
        write_csv(rows, args.csv)
    if args.json:
        write_json(rows, head, args.json)
    if args.plot and not plot(rows, args.plot, title):
        print("--plot: matplotlib is not installed; no chart written", file=sys.stderr)


def progress_writer(terminal: bool) -> Callable[[str], None]:
    """A progress callback writing to stderr: on a ``terminal`` one line rewritten in place (ANSI erase-line), else
    one plain line per step (a log file, CI)."""
    if terminal:
        return lambda msg: print("\r\033[K" + msg, end="", file=sys.stderr, flush=True)
    return lambda msg: print(msg, file=sys.stderr, flush=True)
