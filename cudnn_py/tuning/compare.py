"""How a tuning run measures and checks: the race that times each engine configuration (pruning those clearly out
of it after their first sample), a sample of each output copied to the host, each checked configuration's
difference from the element-wise median of them all, and the progress line (the sweep of graph engines and the
legacy-algorithm run share it).

The race (:func:`race`), per operation, visits the configurations in the heuristics' order (mode A's first):

1. build it (a plan, or the legacy algorithm's workspace query);
2. time one sample after ``warmup + 1`` untimed executions (the one more standing for the agreement check's
   execution, which came first before racing: each timed sample follows as many executions as it did);
3. if that sample is above :data:`PRUNE` times the best median so far, stop: the configuration is *pruned* (its
   record keeps ``ms`` = that sample, ``samples`` = 1, ``pruned`` = True); else time the other ``repeats - 1``
   samples (a *contender*: timed in full, as an exhaustive run does);
4. check its outputs (NaN-poisoned, run once, sampled) if it is a contender, a possible pick of a heuristics mode
   (no configuration before it in that mode's order has run yet), or one of the first :data:`MIN_CHECKED` to run;
   pruned configurations are otherwise not checked (``checked`` False, ``agrees`` None).

The best so far is the lowest median of the contenders whose checked outputs are all finite (an engine that
leaves its output unwritten cannot set the bar). ``exhaustive`` times and checks every configuration in full (the
measurement before racing: check first, then ``warmup`` and ``repeats`` samples).
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["AGREEMENT", "PRUNE", "MIN_CHECKED", "np_dtype", "sample", "agreement", "race", "Progress"]


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a dtype name (``bfloat16`` through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


#: relative difference from the configurations' median output above which a configuration is marked as disagreeing
#: (a sanity bound that catches wrong or unwritten results, not a precision test): by data type
AGREEMENT = {"float32": 1e-2, "float16": 5e-2, "bfloat16": 5e-2}
_SAMPLE = 1 << 18


def sample(outputs: dict, stream) -> list[np.ndarray]:
    """Three contiguous runs (start, middle, end: a last partial tile is where engines go wrong) of each output,
    :data:`_SAMPLE` values in all, copied to the host as float32."""
    from cudnn_py.memory import DeviceArray
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


#: racing: a configuration whose first timed sample exceeds this many times the best median so far is pruned (no
#: more samples). Held samples of one plan differ by a few per cent from one another, so 1.5 leaves a margin of
#: about ten times that noise: a configuration that could win (or come within the 2 % that counts as the same
#: pick) is never pruned by a noisy first sample, while the many configurations that lose by 2x and more (the
#: slow ones, which cost the most samples) stop after one
PRUNE = 1.5
#: racing: at least this many configurations of an operation have their outputs checked, so the median they are
#: compared with is a majority's and not one configuration's own output
MIN_CHECKED = 3


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0


class Progress:
    """The progress line of a sweep on stderr: operations and configurations done of their totals (and how many
    were pruned), an estimate of the time left from the configurations' pace so far, then the configuration
    being measured::

        ops 3/95  configs 130/4012 (71 pruned)  eta 3m05s  conv.fprop|n=32,c=64,... [12/40] eng7_k2=1

    ``write`` receives each line (the CLI's writer rewrites one terminal line, or prints lines to a log);
    ``configurations`` may be None where the total is unknown (then no estimate)."""

    def __init__(self, write: Callable[[str], None] | None, operations: int, configurations: int | None,
                 clock: Callable[[], float] = time.monotonic):
        self.write, self.operations, self.configurations, self.clock = write, operations, configurations, clock
        self.ops_done = self.configs_done = self.pruned = 0
        self.key, self.op_configs, self.op_done = "", 0, 0
        self.start: float | None = None

    def begin(self, key: str, configs: int) -> None:
        """An operation of ``configs`` configurations starts."""
        if self.start is None:
            self.start = self.clock()
        self.key, self.op_configs, self.op_done = key, configs, 0
        self._emit("")

    def config(self, tag: str, pruned: bool = False) -> None:
        """A configuration of the current operation is done (measured, pruned, skipped or failed)."""
        self.configs_done += 1
        self.op_done += 1
        self.pruned += bool(pruned)
        self._emit(tag)

    def end(self) -> None:
        """The current operation is done (its configurations that were never visited count as done)."""
        self.configs_done += max(0, self.op_configs - self.op_done)
        self.ops_done += 1

    def eta(self) -> float | None:
        """Seconds left, by the configurations' pace so far (None before the first one, or with no total)."""
        if self.start is None or not self.configs_done or self.configurations is None:
            return None
        elapsed = self.clock() - self.start
        return elapsed / self.configs_done * max(0, self.configurations - self.configs_done)

    def line(self, tag: str = "") -> str:
        """The progress line (see the class doc)."""
        eta = self.eta()
        left = "-" if eta is None else (f"{int(eta // 60)}m{int(eta % 60):02d}s" if eta >= 60 else f"{eta:.0f}s")
        total = "" if self.configurations is None else f"/{self.configurations}"
        ops = min(self.ops_done + 1, self.operations)
        return (f"ops {ops}/{self.operations}  configs {self.configs_done}{total} ({self.pruned} pruned)  "
                f"eta {left}  {self.key} [{self.op_done}/{self.op_configs}]{' ' + tag if tag else ''}")

    def _emit(self, tag: str) -> None:
        if self.write:
            self.write(self.line(tag))


def race(entries: Sequence[tuple[dict, Any]], *, build: Callable[[dict, Any], Any],
         time_sample: Callable[[Any, int], float | None], check: Callable[[Any], list[np.ndarray]],
         orders: dict[str, list[str]], repeats: int, warmup: int, dtype: str, exhaustive: bool = False,
         errors: tuple[type[BaseException], ...] = (), progress: Progress | None = None,
         median: Callable[[list[float]], float] = statistics.median_high, margin: float = PRUNE) -> dict:
    """Time and check the configurations of one operation (see the module doc); fills each row in place.

    :param entries: (row, configuration) in the order to visit; a row whose ``reason`` is set is not measured.
    :param build: ``build(row, cfg)`` -> what ``time_sample`` and ``check`` take (a plan); sets the row's
        ``workspace`` (and may set ``build_ms``).
    :param time_sample: ``time_sample(plan, warmup)`` -> milliseconds of one timed sample after ``warmup`` untimed
        executions (None or NaN where the timer failed).
    :param check: ``check(plan)`` -> the sampled outputs of one execution on NaN-poisoned outputs.
    :param orders: each heuristics mode's order of tags (a config is a possible pick of a mode until a config
        before it in that order has run).
    :param errors: the exceptions that mean "this configuration does not run" (its row's ``reason``).
    :param median: how the samples make a time (the graph's :func:`time_plan` takes the upper median).
    :returns: the race's account for the record: the margin (None when exhaustive), how many configurations were
        pruned and checked, the seconds spent in builds, first samples, further samples, checks and the agreement,
        and the pruned configurations within the margin of the best that agrees (possible only where a faster
        contender's output disagreed: they were pruned against a bar that does not stand).
    """
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

    for row, cfg in entries:
        tag = row["tag"]
        row.setdefault("pruned", False)
        row.setdefault("checked", False)
        row.setdefault("samples", 0)
        if row.get("reason"):
            if progress:
                progress.config(tag)
            continue
        got = None
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
                if best is not None and _finite(times[0]) and times[0] > margin * best:
                    row["pruned"] = True
                else:
                    times += [timed("samples", lambda: time_sample(plan, 0)) for _ in range(repeats - 1)]
                if not row["pruned"] or possible_pick(tag) or len(samples) < MIN_CHECKED:
                    got = timed("check", lambda: check(plan))
        except errors as e:
            row["reason"], row["pruned"] = " ".join(str(e).split())[:300], False
            if progress:
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
        if progress:
            progress.config(tag, row["pruned"])
    timed("agreement", lambda: agreement(samples, checked_rows, dtype))
    standing = [r["ms"] for r in checked_rows.values() if r["agrees"] and not r["pruned"]]
    doubtful = [] if exhaustive or not standing else \
        [r["tag"] for r, _ in entries if r.get("pruned") and r["ms"] <= margin * min(standing)]
    return {"margin": None if exhaustive else margin, "pruned": pruned, "checked": len(samples),
            "seconds": {k: round(v, 4) for k, v in secs.items()}, "pruned_within_margin": doubtful}
