"""Time the engine configurations of a model's operations and keep the records in the tuning database (docs/tuning.md,
"Model sweeps"): :func:`measure` races one problem's configurations into a record (kind :data:`KIND`) from which
:mod:`cudnn_py.tuning.report` computes any filter's picks; :func:`sweep` reuses the stored records that
:func:`covers` the settings, measures the rest (here or in :mod:`cudnn_py.tuning.workers`) and records the run.
"""
from __future__ import annotations

import functools
import os
import time
import warnings
from collections import Counter
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from cudnn_py.core.dtypes import as_numpy_dtype
from cudnn_py.tuning_records.database import TuningDatabase, finite
from cudnn_py.tuning_records.models import Attention, Conv, Linear, Norm, Problem

from .compare import Progress, config_row, header, race, sample

__all__ = ["KIND", "RUN_KIND", "MODES", "Settings", "build_graph", "header", "heuristics", "measure", "stored",
           "sweep", "valid_record", "covers", "time_summary", "kernel_cache", "kernel_cache_text"]

#: the tuning database's kind for model-sweep records
KIND = "layer_sweep"
#: the tuning database's kind for the record of one sweep run (key: its start time and the first problem's key)
RUN_KIND = "sweep_run"
#: the heuristics modes whose configurations a sweep collects
MODES = ("A", "B", "FALLBACK")


@dataclass(frozen=True)
class Settings:
    """How a sweep measures: the heuristics ``modes``, ``repeats`` samples after ``warmup``, at most ``max_configs``
    configurations of each mode (None: all), whether runtime-compiled engines are measured, ``exhaustive`` instead
    of racing, and ``cold_l2``: the L2 cache flushed before each sample, outside it."""

    modes: tuple[str, ...] = MODES
    repeats: int = 10
    warmup: int = 2
    max_configs: int | None = None
    runtime_compilation: bool = True
    exhaustive: bool = False
    cold_l2: bool = False


def covers(rec: dict, settings: Settings) -> bool:
    """Whether a stored record was measured at least as thoroughly as ``settings`` ask (then it is reused)."""
    got = rec.get("settings")
    if not isinstance(got, dict):
        return False
    cap = got.get("max_configs")
    return (isinstance(got.get("repeats"), int) and got["repeats"] >= settings.repeats
            and set(settings.modes) <= set(got.get("modes") or ())
            and (cap is None or (settings.max_configs is not None and cap >= settings.max_configs))
            and (got.get("runtime_compilation") is True or not settings.runtime_compilation)
            # a record from before racing (no "exhaustive") timed every configuration in full
            and (got.get("exhaustive", True) is True or not settings.exhaustive)
            # warm and cold L2 caches time different things: neither covers the other
            and bool(got.get("cold_l2", False)) == settings.cold_l2)


def _outputs(*tensors, layout: str | None = None) -> None:
    from cudnn_py.graph.graph import packed_strides
    for t in (t for t in tensors if t is not None):
        t.set_output(True)
        if layout and len(t.shape) == 4:
            t.strides = packed_strides(t.shape, layout)


def build_graph(p: Problem):
    """The cuDNN graph of problem ``p`` (nothing reaches cuDNN until it is lowered): convolutions as conv_fprop /
    dgrad / wgrad; a linear layer's passes as the matmuls ``x W^T``, ``dy W`` and ``dy^T x`` (a transposed view);
    batch norm over (N, C, H, W) in the problem's layout, layer and RMS norm over (tokens, features), group norm as
    a layer norm over (N * groups, C / groups * H * W); attention as cuDNN's SDPA forward and backward."""
    import cudnn_py.graph as G
    op, dt = p.op, as_numpy_dtype(p.dtype)
    g = G.Graph(io_dtype=dt, compute_dtype="float32", name=p.key.split("|")[0])
    if isinstance(op, Conv):
        layout = "NHWC" if p.layout == "NHWC" else None
        oh, ow = op.out_hw
        xs, ws, ys = (p.batch, op.c, op.h, op.w), (op.k, op.c, op.r, op.s), (p.batch, op.k, oh, ow)
        pad, stride = op.pad, op.stride
        x, w, dy = (functools.partial(g.tensor, s, name=n, layout=layout) for s, n in ((xs, "x"), (ws, "w"),
                                                                                         (ys, "dy")))
        if p.pass_ == "fprop":
            out = g.conv_fprop(x(), w(), pad, stride)
        elif p.pass_ == "dgrad":
            out = g.conv_dgrad(dy(), w(), pad, stride, x_shape=xs)
        else:
            out = g.conv_wgrad(dy(), x(), pad, stride, w_shape=ws)
        _outputs(out, layout=layout)
    elif isinstance(op, Linear):
        m, k, n = p.batch * op.tokens, op.k, op.n
        if p.pass_ == "fprop":
            out = g.matmul(g.tensor((1, m, k), name="x"), g.tensor((1, k, n), name="w_t"))
        elif p.pass_ == "dgrad":
            out = g.matmul(g.tensor((1, m, n), name="dy"), g.tensor((1, n, k), name="w"))
        else:
            out = g.matmul(g.tensor((1, n, m), strides=(m * n, 1, n), name="dy_t"), g.tensor((1, m, k), name="x"))
        _outputs(out)
    elif isinstance(op, Norm):
        _norm(g, p, op)
    elif isinstance(op, Attention):
        q = g.tensor((p.batch, op.heads, op.seq_q, op.d), name="q")
        kt, vt = (g.tensor((p.batch, op.kv_heads, op.seq_kv, op.d), name=n) for n in ("k", "v"))
        if p.pass_ == "forward":
            o, stats = g.sdpa(q, kt, vt, causal=op.causal)
            _outputs(o, stats.set_dtype("float32"))
        else:
            o, do = (g.tensor((p.batch, op.heads, op.seq_q, op.d), name=nm) for nm in ("o", "do"))
            stats = g.tensor((p.batch, op.heads, op.seq_q, 1), dtype="float32", name="stats")
            _outputs(*g.sdpa_backward(q, kt, vt, o, do, stats, causal=op.causal))
    else:
        raise TypeError(f"no graph for {type(op).__name__}")
    return g


def _norm(g, p: Problem, op: Norm) -> None:
    mode = "layer" if op.mode == "group" else op.mode
    if mode == "batch":
        layout = "NHWC" if p.layout == "NHWC" else None
        shape, param, stat = (p.batch, op.c, op.h, op.w), (1, op.c, 1, 1), (1, op.c, 1, 1)
    else:
        rows, feats = (p.batch * op.groups, op.c // op.groups * op.h * op.w) if op.mode == "group" else \
            (p.batch * op.h * op.w, op.c)
        layout, shape, param, stat = None, (rows, feats, 1, 1), (1, feats, 1, 1), (rows, 1, 1, 1)
    x = g.tensor(shape, name="x", layout=layout)
    scale = g.tensor(param, dtype="float32", name="scale")
    rms = mode == "rms"
    if p.pass_ == "forward":
        bias = g.tensor(param, dtype="float32", name="bias") if not rms or op.bias else None
        outs = (g.batch_norm(x, scale, bias)[:3] if mode == "batch" else  # y, mean, inv_variance
                g.norm_forward(x, scale, bias, mode=mode, training=True))
        _outputs(*outs, layout=layout)
    else:
        dy = g.tensor(shape, name="dy", layout=layout)
        mean = None if rms else g.tensor(stat, dtype="float32", name="mean")
        inv = g.tensor(stat, dtype="float32", name="inv_variance")
        _outputs(*g.norm_backward(dy, x, scale, mean=mean, inv_variance=inv, mode=mode,
                                  has_bias=op.bias or not rms), layout=layout)


#: the names build_graph gives the tensors it reads (the others are outputs)
_INPUTS = frozenset({"x", "w", "w_t", "dy", "dy_t", "q", "k", "v", "o", "do", "stats", "scale", "bias", "mean",
                     "inv_variance"})


def _bind(g, h, block: np.ndarray) -> tuple[dict, dict]:
    """(variant pack, {output tensor: its dense buffer}) for ``g``: inputs the random ``block`` tiled (statistics
    plausible), outputs as allocated."""
    from cudnn_py.core.memory import DeviceArray, empty, to_device
    pack, outputs = {}, {}
    scratch = {t.uid for op in g.ops for t in getattr(op, "scratch_tensors", tuple)()}  # in the plan's workspace
    for t in g.io_tensors():
        if t.is_by_value or t.uid in scratch:
            continue
        extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.strides))
        if t.name not in _INPUTS:   # an output
            buf = outputs[t] = empty((extent,), t.np_dtype, stream=h.stream, device=h.device)
        elif t.name == "inv_variance":
            buf = to_device(np.ones(extent, t.np_dtype), h.stream, device=h.device)
        else:
            data = np.abs(block) + 1.0 if t.name == "stats" else block
            buf = to_device(np.resize(data.astype(t.np_dtype), extent), h.stream, device=h.device)
        pack[t] = DeviceArray(buf.ptr, t.shape, t.np_dtype, t.strides, device_id=buf.device_id, owner=buf)
    return pack, outputs


def heuristics(g, h, modes: Sequence[str], limit: int | None = None) -> tuple[dict, dict[str, list[str]], dict]:
    """({tag: configuration} the heuristics ``modes`` offer for graph ``g`` on handle ``h``, first seen first; {mode:
    its order of tags}; {mode: the CudnnPyError it raised}), at most ``limit`` configurations of each mode."""
    import cudnn_py.graph as G
    from cudnn_py.errors import CudnnPyError
    configs: dict = {}
    orders: dict[str, list[str]] = {}
    errors: dict = {}
    for m in modes:
        try:
            found = G.heuristics(g, h, m)[:limit]
        except CudnnPyError as e:
            orders[m], errors[m] = [], e
            continue
        orders[m] = [c.tag for c in found]
        for c in found:
            configs.setdefault(c.tag, c)
    return configs, orders, errors


def measure(p: Problem, h, settings: Settings = Settings(), progress: Progress | None = None,
            hold: AbstractContextManager = nullcontext(), failed: Mapping[str, str] | None = None) -> dict:
    """The record :func:`sweep` stores of problem ``p`` on handle ``h`` (``legacy``: :mod:`~cudnn_py.tuning.legacy`'s):
    every configuration's plan built, then raced (or timed in full: ``settings.exhaustive``) holding ``hold`` (a
    worker's device lock). ``failed``: {tag: reason} of configurations not to build (a worker died on them).
    ``progress`` hears of the operation's begin and each step, not its end."""
    if p.legacy:
        from .legacy import measure_legacy
        with hold:
            return measure_legacy(p, h, settings, progress)
    import cudnn_py.graph as G
    from cudnn_py.errors import CudnnPyError
    from cudnn_py.graph.plans import l2_flush
    progress = progress or Progress(None, 0)  # (one that writes nothing)
    t0 = time.perf_counter()
    rec = header(p, settings)
    try:
        g = build_graph(p)
        g.lower(h)
    except CudnnPyError as e:
        rec["problem"] = " ".join(str(e).split())[:400]
        progress.begin(p.key, 0)
        return rec
    configs, rec["order"], errors = heuristics(g, h, settings.modes, settings.max_configs)
    if errors:
        rec["mode_errors"] = {m: " ".join(str(e).split())[:300] for m, e in errors.items()}
    seconds_heuristics = round(time.perf_counter() - t0, 4)
    progress.begin(p.key, len(configs))
    failed = failed or {}
    entries = []
    for tag, cfg in configs.items():
        knobs = {getattr(k, "name", str(k)).replace("CUDNN_KNOB_TYPE_", ""): int(v) for k, v in cfg.knobs.items()}
        row = config_row(tag, cfg.global_index, knobs, cfg.is_deterministic, cfg.notes(), failed.get(tag, ""))
        if not row["reason"] and cfg.needs_runtime_compilation and not settings.runtime_compilation:
            row["reason"] = "not measured: compiles at run time (--no-runtime-compilation)"
        rec["configs"].append(row)
        entries.append((row, cfg))
    plans: dict[str, Any] = {}
    t0 = time.perf_counter()
    for row, cfg in entries:
        if row["reason"]:
            continue
        progress.visit(row["tag"], "build")
        t1 = time.perf_counter()
        try:
            plan = plans[row["tag"]] = G.Plan.build(g, h, cfg)
            row["workspace"] = int(plan.workspace_size)
        except Exception as e:  # noqa: BLE001 - raised again when the race takes it, which records cuDNN's reason
            plans[row["tag"]] = e
        row["build_ms"] = (time.perf_counter() - t1) * 1e3
        progress.built(row["tag"])
    build_wall = time.perf_counter() - t0

    def take(row: dict, cfg) -> Any:    # the race takes each plan built (or raises its build's error)
        got = plans.pop(row["tag"])
        if isinstance(got, Exception):
            raise got
        return got

    block = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32) * 0.5
    with hold:
        pack, outputs = _bind(g, h, block)
        flush = l2_flush(h) if settings.cold_l2 else None

    def check(plan) -> list[np.ndarray]:
        for buf in outputs.values():
            buf.fill_(float("nan") if buf.dtype.kind == "f" or buf.dtype.name == "bfloat16" else 0)
        plan.execute(h, pack)
        return sample(outputs, h.stream)

    def time_sample(plan, warmup: int) -> float:
        return G.time_plan(plan, h, pack, warmup=warmup, iters=1, flush=flush)

    account = race(entries, build=take, time_sample=time_sample, check=check, orders=rec["order"],
                   repeats=settings.repeats, warmup=settings.warmup, dtype=p.dtype,
                   exhaustive=settings.exhaustive, errors=(CudnnPyError, MemoryError), progress=progress, hold=hold)
    seconds = account["seconds"]
    seconds["build"] = round(seconds["build"] + build_wall, 4)
    account["seconds"] = {"heuristics": seconds_heuristics, **seconds}
    rec["race"] = account
    return rec


def valid_record(rec) -> bool:
    """Whether ``rec`` has the shape :func:`measure` writes (one that has not is measured again)."""
    if not isinstance(rec, dict) or not isinstance(rec.get("configs"), list) or not isinstance(rec.get("order"), dict):
        return False
    for c in rec["configs"]:
        if not isinstance(c, dict) or not isinstance(c.get("tag"), str) or not isinstance(c.get("ok"), bool):
            return False
        if c["ok"] and not finite(c.get("ms")):
            return False
    return all(isinstance(v, list) and all(isinstance(t, str) for t in v) for v in rec["order"].values())


def stored(problems: Sequence[Problem], db: TuningDatabase, *, device: int = 0, settings: Settings = Settings(),
           remeasure: bool = False) -> tuple[dict[str, dict], list[Problem]]:
    """({key: record} of the problems whose stored record :func:`covers` ``settings``, the problems left to measure:
    those too where the record is malformed or made for another operation, with a warning)."""
    from cudnn_py.tuning_records.database import TuningWarning
    out, todo = {}, []
    for p in problems:
        rec = None if remeasure else db.lookup(KIND, p.key, device=device)
        if rec is not None and (not valid_record(rec) or rec.get("key") != p.key):
            warnings.warn(f"tuning database: the {KIND} record of {p.key} is malformed or made for another "
                          f"operation; measuring again", TuningWarning, stacklevel=3)
            rec = None
        if rec is None or not covers(rec, settings):
            todo.append(p)
        else:
            out[p.key] = rec
    return out, todo


def kernel_cache() -> dict:
    """CUDA's JIT cache of runtime-compiled kernels (what cuDNN's runtime-compiled engines fill): ``{"state",
    "path", "bytes", "max_bytes"}``; ``state``: ``"disabled"`` (``CUDA_CACHE_DISABLE=1``), ``"cold"`` (the folder
    missing or empty) or ``"warm"``; ``max_bytes``: ``CUDA_CACHE_MAXSIZE`` where a number (None: the default)."""
    env = os.environ
    if env.get("CUDA_CACHE_PATH"):
        path = Path(env["CUDA_CACHE_PATH"]).expanduser()
    elif os.name == "nt":
        path = Path(env.get("APPDATA", "~")).expanduser() / "NVIDIA" / "ComputeCache"
    else:
        path = Path(env.get("HOME") or Path.home()) / ".nv" / "ComputeCache"
    size = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                size += os.path.getsize(os.path.join(root, name))
            except OSError:  # removed meanwhile, or unreadable
                continue
    maxsize = env.get("CUDA_CACHE_MAXSIZE", "")
    state = "disabled" if env.get("CUDA_CACHE_DISABLE", "0").strip() == "1" else "warm" if size else "cold"
    return {"state": state, "path": str(path), "bytes": size,
            "max_bytes": int(maxsize) if maxsize.strip().isdigit() else None}


def kernel_cache_text(cache: dict) -> str:
    """One line on the kernel cache a sweep started with (a :func:`kernel_cache` dict)."""
    if cache["state"] == "disabled":
        return "kernel cache: disabled (CUDA_CACHE_DISABLE=1): every runtime-compiled kernel was compiled"
    cap = f"; CUDA_CACHE_MAXSIZE {cache['max_bytes'] / 2**20:.0f} MiB" if cache.get("max_bytes") else ""
    if cache["state"] == "cold":
        return f"kernel cache: cold ({cache['path']} empty{cap}): every runtime-compiled kernel was compiled"
    return f"kernel cache: warm ({cache['path']}, {cache['bytes'] / 2**20:.1f} MiB at the start{cap})"


def sweep(problems: Sequence[Problem], db: TuningDatabase, *, device: int = 0, devices: Sequence[int] | None = None,
          jobs: int = 1, settings: Settings = Settings(), remeasure: bool = False,
          progress: Callable[[str], None] | None = None, time_limit: float = 600.0) -> tuple[dict[str, dict], int]:
    """({problem key: record}, how many were measured): each record from ``db`` where one :func:`covers`
    ``settings``, else measured and stored as it arrives; then a record of the run (kind :data:`RUN_KIND`). ``jobs``
    1 with no ``devices`` measures here on ``device``, else in :func:`cudnn_py.tuning.workers.run`'s processes
    (``time_limit``: seconds a worker may spend on one step). ``progress`` gets the progress line, at most once a
    second. SystemExit where no cuDNN handle opens; KeyboardInterrupt keeps what was measured."""
    out, todo = stored(problems, db, device=device, settings=settings, remeasure=remeasure)
    if not todo:
        return out, 0
    cache = kernel_cache()     # before anything is built: the builds fill it
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%S"), time.monotonic()
    prog = Progress(progress, len(todo))

    def keep(p: Problem, rec: dict, dev: int) -> None:
        rec = {**header(p, settings), **rec}     # (a worker's failed operation has no header of its own)
        if isinstance(rec.get("race"), dict):
            rec["race"]["kernel_cache"] = cache["state"]
        db.record(KIND, p.key, rec, device=dev)
        out[p.key] = rec

    where, starts = list(devices) if devices else [device], []
    if jobs == 1 and not devices:
        from cudnn_py.core.handle import Handle
        try:
            handle = Handle(device)
        except Exception as e:  # noqa: BLE001 - no GPU, no driver
            raise SystemExit(f"algos --model: cannot open a cuDNN handle on device {device} (a GPU is needed to "
                             f"measure {len(todo)} operations): {e}") from None
        with handle as h:
            for p in todo:
                keep(p, measure(p, h, settings, prog), device)
                prog.end(p.key)
    else:
        from . import workers
        jobs = max(jobs, len(where))
        starts = workers.run(todo, settings, devices=where, jobs=jobs, work=measure, keep=keep, progress=prog,
                             time_limit=time_limit)
    prog.close()
    secs: Counter = Counter()
    for p in todo:
        secs.update({k: float(v) for k, v in (out[p.key].get("race") or {}).get("seconds", {}).items()})
    db.record(RUN_KIND, f"{started}|{todo[0].key}", {
        "started": started, "seconds": round(time.monotonic() - t0, 3), "operations": len(problems),
        "measured": len(todo), "keys": [p.key for p in todo], "settings": header(todo[0], settings)["settings"],
        "jobs": jobs, "devices": where, "kernel_cache": cache,
        "phases": {k: round(v, 4) for k, v in secs.items()}, "workers": starts}, device=device)
    return out, len(todo)


def time_summary(records: Sequence[dict]) -> str:
    """How ``records`` were measured, their race accounts summed: configurations, how many pruned and checked, the
    seconds by phase; empty where no record has an account (all measured before racing)."""
    raced = [r for r in records if isinstance(r.get("race"), dict) and "pruned" in r["race"]]
    if not raced:
        return ""
    acc, configs = [r["race"] for r in raced], sum(len(r.get("configs") or ()) for r in raced)
    secs: Counter = Counter()
    for a in acc:
        secs.update({k: float(v) for k, v in (a.get("seconds") or {}).items()})
    margin = {a.get("margin") for a in acc}
    caches = sorted({a["kernel_cache"] for a in acc if a.get("kernel_cache")})
    how = "every one in full (--exhaustive)" if margin == {None} else \
        f"racing, pruned above {'/'.join(str(m) for m in sorted(m for m in margin if m is not None))}x the best"
    doubtful = sum(len(a.get("pruned_within_margin") or ()) for a in acc)
    return (f"measurement of {len(acc)} operations, {configs} configurations ({how}): "
            f"{sum(a['pruned'] for a in acc)} pruned after their first sample, {sum(a['checked'] for a in acc)} "
            f"outputs checked" + (f", {doubtful} pruned against a bar whose output disagreed" if doubtful else "")
            + "; seconds: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in secs.items())
            + (f"; kernel cache {'/'.join(caches)}" if caches else ""))
