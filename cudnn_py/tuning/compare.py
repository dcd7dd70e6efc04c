"""How a tuning run measures and checks, shared by the graph and legacy sweeps: :func:`race` (visit order,
pruning, which outputs are checked: docs/tuning.md, "Model sweeps"), output samples and their :func:`agreement`,
and the :class:`Progress` line.
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from typing import Any

import numpy as np

from cudnn_py.tuning_records.database import finite as _finite

__all__ = ["AGREEMENT", "PRUNE", "MIN_CHECKED", "header", "config_row", "sample", "agreement", "race",
           "Progress"]


def header(p, settings) -> dict:
    """The start of problem ``p``'s record: what was measured and how (a sweep's ``Settings``)."""
    stored = {**asdict(settings), "modes": list(settings.modes)}
    return {"key": p.key, "op": p.kind, "pass": p.pass_, "dtype": p.dtype, "settings": stored, "order": {},
            "configs": [], "problem": "", "count": p.count}


def config_row(tag: str, engine: int, knobs: dict, deterministic: bool, notes: list, reason: str = "") -> dict:
    """A configuration's entry in a record's ``configs``, before :func:`race` measures it."""
    return {"tag": tag, "engine": engine, "knobs": knobs, "notes": notes, "deterministic": deterministic,
            "ok": False, "ms": None, "workspace": None, "build_ms": None, "diff": None, "agrees": None,
            "reason": reason, "samples": 0, "pruned": False, "checked": False}


#: relative difference from the configurations' median output above which a configuration is marked as disagreeing
#: (a sanity bound that catches wrong or unwritten results, not a precision test): by data type
AGREEMENT = {"float32": 1e-2, "float16": 5e-2, "bfloat16": 5e-2}
_SAMPLE = 1 << 18


def sample(outputs: dict, stream) -> list[np.ndarray]:
    """Three contiguous runs (start, middle, end: a last partial tile is where engines go wrong) of each output,
    :data:`_SAMPLE` values in all, copied to the host as float32."""
    from cudnn_py.core.memory import DeviceArray
    out = []
    for buf in outputs.values():
        n, run = buf.size, max(1, _SAMPLE // 3)
        starts = sorted({0, max(0, n // 2 - run // 2), max(0, n - run)}) if n > _SAMPLE else [0]
        parts = [DeviceArray(buf.ptr + s * buf.dtype.itemsize, (min(run if n > _SAMPLE else n, n - s),), buf.dtype,
                             device_id=buf.device_id, owner=buf, stream=stream).to_numpy() for s in starts]
        out.append(np.concatenate(parts).astype(np.float32))
    return out


def agreement(samples: dict[str, list[np.ndarray]], rows: dict[str, dict], dtype: str) -> None:
    """Each configuration's largest relative difference from the element-wise median of all of them ('diff') and
    whether it is within :data:`AGREEMENT` ('agrees'): a minority of wrong configurations cannot hide."""
    if not samples:
        return
    tags = list(samples)
    for i in range(len(samples[tags[0]])):
        stack = np.stack([samples[t][i] for t in tags])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # an element no configuration wrote: all NaN
            median = np.nanmedian(stack, axis=0)
            scale = float(np.nanmax(np.abs(median))) if np.isfinite(median).any() else 0.0
            for t, values in zip(tags, stack):
                diff = float(np.max(np.abs(values - median))) / (scale or 1.0)
                diff = diff if math.isfinite(diff) else float("inf")
                rows[t]["diff"] = max(rows[t].get("diff") or 0.0, diff)
    for t in tags:
        rows[t]["agrees"] = rows[t]["diff"] <= AGREEMENT.get(dtype, 5e-2)
        if not rows[t]["agrees"]:
            rows[t]["diff"] = min(rows[t]["diff"], 1e300)   # JSON has no infinity


#: racing: a configuration whose first timed sample exceeds this many times the best median so far is pruned (about
#: ten times the spread of held samples of one plan: docs/tuning.md)
PRUNE = 1.5
#: racing: at least this many configurations of an operation have their outputs checked, so the median they are
#: compared with is a majority's and not one configuration's own output
MIN_CHECKED = 3


class Progress:
    """A sweep's progress line (docs/tuning.md shows one). Several operations may be under way at once (worker
    processes); an event without a key means the one begun last. ``write`` receives at most one line per
    ``interval`` seconds, and :meth:`close` the last one."""

    def __init__(self, write: Callable[[str], None] | None, operations: int,
                 clock: Callable[[], float] = time.monotonic, interval: float = 1.0):
        self.write, self.operations, self.clock, self.interval = write, operations, clock, interval
        self.ops: dict[str, list[int]] = {}     # key -> [configurations, built, timed, pruned] while begun
        self.ops_done = self.built_total = self.timed_total = self.pruned = 0
        self.known = 0                          # configurations of every operation begun so far
        self.key = self.tag = ""
        self.start: float | None = None
        self._written: float | None = None

    def begin(self, key: str, configs: int) -> None:
        """Operation ``key``'s ``configs`` configurations are known (its heuristics answered)."""
        if self.start is None:
            self.start = self.clock()
        self.ops[key] = [configs, 0, 0, 0]
        self.known += configs
        self.key, self.tag = key, ""
        self._emit()

    def visit(self, tag: str, phase: str, key: str | None = None) -> None:
        """A configuration's ``phase`` (``"build"`` or ``"time"``) starts."""
        self.key, self.tag = (self.key if key is None else key), tag

    def built(self, tag: str = "", key: str | None = None) -> None:
        """A plan of the operation was built (or failed to build)."""
        self._count(key, 1, tag)
        self.built_total += 1
        self._emit()

    def config(self, tag: str, pruned: bool = False, key: str | None = None) -> None:
        """A configuration of the operation is done (timed, pruned, skipped or failed)."""
        self._count(key, 2, tag)
        self.timed_total += 1
        if pruned:
            self._count(key, 3, tag)
            self.pruned += 1
        self._emit()

    def end(self, key: str | None = None) -> None:
        """The operation is done: its configurations never built or timed count as done."""
        n, b, t, _ = self.ops.pop(self.key if key is None else key, [0, 0, 0, 0])
        self.built_total += max(0, n - b)
        self.timed_total += max(0, n - t)
        self.ops_done += 1
        self._emit()

    def forget(self, key: str) -> None:
        """Operation ``key`` starts again from nothing (its worker died): what it counted is taken back."""
        n, b, t, p = self.ops.pop(key, [0, 0, 0, 0])
        self.known -= n
        self.built_total -= b
        self.timed_total -= t
        self.pruned -= p

    def close(self) -> None:
        """Write the last line, whenever the one before was written."""
        self._written = None
        self._emit()

    def _count(self, key: str | None, field: int, tag: str) -> None:
        self.key, self.tag = (self.key if key is None else key), tag
        op = self.ops.get(self.key)
        if op is not None:
            op[field] += 1

    def total(self) -> tuple[int, bool]:
        """(configurations of the run, whether estimated: those not begun at the mean of those begun)."""
        begun = self.ops_done + len(self.ops)
        left = max(0, self.operations - begun)
        if not left or not begun:
            return self.known, bool(left)
        return self.known + round(left * self.known / begun), True

    def eta(self) -> float | None:
        """Seconds left, by the pace of builds and timings so far (None before any)."""
        total, _ = self.total()
        done = self.built_total + self.timed_total
        if self.start is None or not done or not total:
            return None
        return (self.clock() - self.start) / done * max(0, 2 * total - done)

    def line(self) -> str:
        eta = self.eta()
        left = "-" if eta is None else (f"{int(eta // 60)}m{int(eta % 60):02d}s" if eta >= 60 else f"{eta:.0f}s")
        total, estimated = self.total()
        of = "" if estimated and not total else f"/{'~' if estimated else ''}{total}"   # "": nothing known yet
        return (f"ops {self.ops_done}/{self.operations}  built {self.built_total}{of}  timed {self.timed_total}{of} "
                f"({self.pruned} pruned)  eta {left}  {self.key}{' ' + self.tag if self.tag else ''}")

    def _emit(self) -> None:
        if not self.write:
            return
        now = self.clock()
        if self._written is not None and now - self._written < self.interval:
            return
        self._written = now
        self.write(self.line())


def race(entries: Sequence[tuple[dict, Any]], *, build: Callable[[dict, Any], Any],
         time_sample: Callable[[Any, int], float | None], check: Callable[[Any], list[np.ndarray]],
         orders: dict[str, list[str]], repeats: int, warmup: int, dtype: str, exhaustive: bool = False,
         errors: tuple[type[BaseException], ...] = (), progress: Progress | None = None,
         median: Callable[[list[float]], float] = statistics.median_high,
         hold: AbstractContextManager = nullcontext()) -> dict:
    """Time and check the configurations of one operation (docs/tuning.md, "Model sweeps"), filling each row in
    place; ``exhaustive``: each checked first, then ``repeats`` samples after ``warmup`` executions, none pruned.
    ``entries``: (row, configuration) in visit order (a row with a ``reason`` is not measured); ``build(row, cfg)``:
    the plan the others take (sets ``workspace``); ``time_sample(plan, warmup)``: ms of one sample (None or NaN: the
    timer failed); ``check(plan)``: the sampled outputs of one execution; ``orders``: each mode's order of tags;
    ``errors``: what means "does not run"; ``hold``: held while configurations are visited (a worker's device lock).
    Returns the race's account: the margin (None when exhaustive), how many were pruned and checked, seconds by
    phase, and the pruned configurations within the margin of the best that agrees."""
    progress = progress or Progress(None, 0)  # (one that writes nothing)
    pos = {m: {t: i for i, t in enumerate(order)} for m, order in orders.items()}
    ran: set[str] = set()
    best: float | None = None
    samples: dict[str, list[np.ndarray]] = {}
    checked_rows: dict[str, dict] = {}
    secs = dict.fromkeys(("build", "first_sample", "samples", "check", "agreement"), 0.0)
    pruned = 0

    def possible_pick(tag: str) -> bool:
        for m, order in orders.items():
            i = pos[m].get(tag)
            if i is not None and not any(t in ran for t in order[:i]):
                return True
        return False

    def timed(key: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            secs[key] += time.perf_counter() - t0

    with hold:
        for row, cfg in entries:
            tag = row["tag"]
            row.setdefault("pruned", False)
            row.setdefault("checked", False)
            row.setdefault("samples", 0)
            if row.get("reason"):
                progress.config(tag)
                continue
            got = None
            progress.visit(tag, "time")
            try:
                t0 = time.perf_counter()
                plan = timed("build", lambda: build(row, cfg))
                if row.get("build_ms") is None:
                    row["build_ms"] = (time.perf_counter() - t0) * 1e3
                if exhaustive:
                    got = timed("check", lambda: check(plan))
                    times = [timed("first_sample", lambda: time_sample(plan, warmup))]
                    times += [timed("samples", lambda: time_sample(plan, 0)) for _ in range(repeats - 1)]
                else:
                    times = [timed("first_sample", lambda: time_sample(plan, warmup + 1))]
                    if best is not None and _finite(times[0]) and times[0] > PRUNE * best:
                        row["pruned"] = True
                    else:
                        times += [timed("samples", lambda: time_sample(plan, 0)) for _ in range(repeats - 1)]
                    if not row["pruned"] or possible_pick(tag) or len(samples) < MIN_CHECKED:
                        got = timed("check", lambda: check(plan))
            except errors as e:
                row["reason"], row["pruned"] = " ".join(str(e).split())[:300], False
                progress.config(tag)
                continue
            good = [float(t) for t in times if _finite(t)]
            row["samples"] = len(times)
            if not good:
                row["reason"], row["pruned"] = f"timing gave {times!r}", False
            else:
                row["ok"], row["ms"] = True, float(median(good))
                ran.add(tag)
                pruned += row["pruned"]
                if got is not None:
                    row["checked"] = True
                    samples[tag], checked_rows[tag] = got, row
                    if not row["pruned"] and all(np.isfinite(a).all() for a in got):
                        best = row["ms"] if best is None else min(best, row["ms"])
            progress.config(tag, row["pruned"])
    timed("agreement", lambda: agreement(samples, checked_rows, dtype))
    standing = [r["ms"] for r in checked_rows.values() if r["agrees"] and not r["pruned"]]
    doubtful = [] if exhaustive or not standing else \
        [r["tag"] for r, _ in entries if r.get("pruned") and r["ms"] <= PRUNE * min(standing)]
    return {"margin": None if exhaustive else PRUNE, "pruned": pruned, "checked": len(samples),
            "seconds": {k: round(v, 4) for k, v in secs.items()}, "pruned_within_margin": doubtful}
