"""Stand-ins for a sweep worker's cuDNN work (tests/test_sweep_workers.py): importable by name, as the spawned
worker processes need. ``settings`` carries each problem's behaviour by key (``plan``) and a log file the workers
append their builds and device-lock holds to."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

from cudnn_py.tuning.sweep import Settings

TAGS = ("eng0", "eng1", "eng2")


@dataclass(frozen=True)
class Plan(Settings):
    """A sweep's settings, and what each problem does (by key): ``ok`` (default), ``crash-build:TAG``, ``hang-time:TAG``, ``raise``,
    ``exit``, ``kill`` (``crash-build:*``: every build crashes); ``seconds`` each build and each timing take; ``log`` the file events are appended to."""

    behaviour: dict = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""
    gather: int = 0     # each problem starts once this many workers have started one (a slow machine's spawns)


class Handle:
    """A worker's stand-in handle: its device, and the ``synchronize`` the device lock calls before each release
    (nothing is queued: it returns at once)."""

    def __init__(self, device: int):
        self.device = device

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def __str__(self) -> str:
        return f"handle on device {self.device}"


def opener(device: int) -> Handle:
    return Handle(device)


def refuse(device: int):
    raise RuntimeError(f"no GPU {device} (stand-in)")


def _log(plan: Plan, what: str, start: float, device: int = 0) -> None:
    if plan.log:
        with open(plan.log, "a") as f:
            f.write(f"{os.getpid()} {what} {start!r} {time.monotonic()!r} {device}\n")


def work(problem, handle, plan: Plan, events, hold, failed) -> dict:
    what = plan.behaviour.get(problem.key, "ok")
    if what == "raise":
        raise RuntimeError(f"boom in {problem.key}")
    if what == "exit":
        os._exit(3)
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if plan.gather:
        _log(plan, "start", time.monotonic())
        deadline = time.monotonic() + 60
        while len({line.split()[0] for line in open(plan.log)}) < plan.gather and time.monotonic() < deadline:
            time.sleep(0.01)
    events.begin(problem.key, len(TAGS))
    rows = []
    for tag in TAGS:
        row = {"tag": tag, "ok": False, "ms": None, "reason": failed.get(tag, "")}
        rows.append(row)
        if row["reason"]:
            continue
        events.visit(tag, "build")
        if what in (f"crash-build:{tag}", "crash-build:*"):
            os.kill(os.getpid(), signal.SIGSEGV)
        t0 = time.monotonic()
        time.sleep(plan.seconds)
        _log(plan, "build", t0)
        events.built(tag)
    with hold:
        t0 = time.monotonic()
        for row in rows:
            events.visit(row["tag"], "time")
            if not row["reason"]:
                if what == f"hang-time:{row['tag']}":
                    time.sleep(3600)
                time.sleep(plan.seconds)
                row["ok"], row["ms"] = True, 1.0 + TAGS.index(row["tag"])
            events.config(row["tag"])
        _log(plan, "hold", t0, handle.device)
    return {"key": problem.key, "configs": rows, "order": {"A": list(TAGS)}, "problem": "", "handle": str(handle)}


def slow_work(problem, handle, settings, events, hold, failed) -> dict:
    """``work`` through the CLI (real Settings): each worker's pid appended to ``$SWEEP_STANDIN_PIDS``; the first
    operation takes a moment, every other one a minute (a sweep to interrupt)."""
    with open(os.environ["SWEEP_STANDIN_PIDS"], "a") as f:
        f.write(f"{os.getpid()}\n")
    quick = problem.key.startswith("conv.fprop|n=32,c=3,")
    return work(problem, handle, Plan(seconds=0.1 if quick else 60), events, hold, failed)
