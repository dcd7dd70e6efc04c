"""A model sweep in worker processes (docs/tuning.md, "Sweeps in worker processes"): plan builds in parallel, each
GPU's samples and output checks one worker at a time under its :class:`DeviceLock`. The parent alone writes the
database and keeps the progress line; a worker that dies or hangs is replaced, the configuration it was on recorded
as failed and its operation measured again without it (:data:`RETRIES` deaths fail the operation).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from cudnn_py.tuning_records.models import Problem

__all__ = ["DeviceLock", "run", "default_jobs", "RETRIES", "WORKER_GIB"]

#: how many times an operation's workers may die before the operation is recorded as failed
RETRIES = 3
#: GPU memory set aside per worker when choosing how many to start (a context, the buffers and workspaces of one
#: operation)
WORKER_GIB = 2.0


def default_jobs(gpu_gib: Sequence[float], cores: int | None = None) -> int:
    """How many workers a sweep starts unless told: one per core this process may run on, at most one per
    :data:`WORKER_GIB` of the devices' memory, at least one per device."""
    cores = cores or len(os.sched_getaffinity(0))
    by_memory = sum(int(g // WORKER_GIB) for g in gpu_gib)
    return max(len(gpu_gib), min(cores, by_memory))


class DeviceLock:
    """An exclusive lock on one GPU for the processes of a sweep: ``fcntl.flock`` on a file, which the kernel lets go
    when the holder dies, so a crash while timing blocks no one. ``waiting(True)`` is called before blocking on it
    and ``waiting(False)`` once it is held; ``settle()`` before each release (a worker's handle's ``synchronize``:
    what it queued under the lock, its uploads included, finishes under it, so no other worker's sample overlaps it)."""

    def __init__(self, path: str, waiting: Callable[[bool], None] | None = None,
                 settle: Callable[[], None] | None = None):
        self.path, self.waiting, self.settle = path, waiting or (lambda held: None), settle or (lambda: None)
        self._fd: int | None = None

    def __enter__(self) -> DeviceLock:
        import fcntl
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self.waiting(True)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.waiting(False)
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl
        assert self._fd is not None
        try:
            self.settle()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------ the worker

class _Events:
    """A worker's side of :class:`~cudnn_py.tuning.compare.Progress` and of :class:`DeviceLock`'s ``waiting``: each
    call a message ``(method, *args)`` to the parent."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args: self.conn.send((name, *args))


def _open_handle(device: int) -> Any:
    from cudnn_py.core.handle import Handle
    return Handle(device)


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:400]


def _worker(conn: Connection, device: int, lock_path: str, settings: Any, work: Callable, opener: Callable) -> None:
    """A worker process: open a handle on ``device``, then measure each task the parent sends until it sends None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # an interrupt is the parent's to handle: it stops the workers
    events = _Events(conn)
    try:
        handle = opener(device)
    except Exception as e:  # noqa: BLE001 - no GPU, no driver: said once, by the parent
        conn.send(("fatal", f"cannot open a cuDNN handle on device {device}: {_one_line(e)}"))
        return
    conn.send(("ready",))
    with handle as h:
        hold = DeviceLock(lock_path, events.waiting, h.synchronize)
        while (task := conn.recv()) is not None:
            problem, failed = task
            try:
                rec = work(problem, h, settings, events, hold, failed)
            except Exception as e:  # noqa: BLE001 - recorded as the operation's failure; the worker goes on
                conn.send(("error", _one_line(e)))
            else:
                conn.send(("record", rec))


# ------------------------------------------------------------------------------------------------ the parent

@dataclass
class _Task:
    problem: Problem
    failed: dict[str, str] = field(default_factory=dict)   # tag -> why it is not measured (a worker died on it)
    deaths: int = 0


@dataclass
class _Slot:
    """One worker process as the parent sees it."""

    device: int
    proc: Any
    conn: Connection
    ready: bool = False
    task: _Task | None = None
    tag: str = ""
    phase: str = "start"
    since: float = field(default_factory=time.monotonic)
    born: float = field(default_factory=time.monotonic)
    ready_s: float | None = None        # seconds from its start to its handle opened
    first_build_s: float | None = None  # ... to its first plan built


def _how_it_ended(proc: Any) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"died ({name}{': killed, perhaps for want of host memory' if name == 'SIGKILL' else ''})"
    return f"exited with status {code}"


def run(problems: Sequence[Problem], settings: Any, *, devices: Sequence[int], jobs: int,
        work: Callable, keep: Callable[[Problem, dict, int], None], progress: Any, time_limit: float = 600.0,
        opener: Callable | None = None) -> list[dict]:
    """Measure ``problems`` in ``jobs`` worker processes over ``devices``, calling ``keep(problem, record, device)``
    here as each record arrives and telling ``progress`` every worker's steps; a worker stuck on one step (the lock's
    wait aside) for ``time_limit`` seconds is stopped. ``work(problem, handle, settings, events, hold, failed)``
    (:func:`cudnn_py.tuning.sweep.measure`) and ``opener(device)`` (a context manager with ``synchronize()``; default
    a Handle) must be importable by name: the workers are spawned. A failed operation's record holds only ``key``,
    ``problem`` (the reason), ``order`` and ``configs`` (those its workers died on): ``keep`` completes it. Returns
    each worker's ``{"device", "ready_s", "first_build_s"}`` (seconds to its handle and first plan; None: never).
    SystemExit when no worker could open a handle; KeyboardInterrupt after stopping every worker."""
    opener = opener or _open_handle
    ctx = multiprocessing.get_context("spawn")
    queue = deque(_Task(p) for p in problems)
    started: list[_Slot] = []
    fatal: list[str] = []

    def start(device: int, locks: str) -> _Slot:
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=_worker, name=f"cudnn_py-sweep-{device}", daemon=True,
                           args=(theirs, device, os.path.join(locks, f"device{device}.lock"), settings, work, opener))
        proc.start()
        theirs.close()
        started.append(_Slot(device, proc, mine))
        return started[-1]

    def finish(s: _Slot, rec: dict) -> None:
        assert s.task is not None
        keep(s.task.problem, rec, s.device)
        progress.end(s.task.problem.key)
        s.task, s.tag, s.phase = None, "", "idle"

    def failed_record(task: _Task, why: str) -> dict:
        return {"key": task.problem.key, "problem": why, "order": {},
                "configs": [{"tag": t, "ok": False, "ms": None, "reason": r} for t, r in task.failed.items()]}

    def lost(s: _Slot, how: str) -> None:
        """Worker ``s`` died or was stopped: its configuration (if any) is recorded as failed and its operation
        measured again without it, or the operation recorded as failed."""
        task = s.task
        if task is None:
            return
        key = task.problem.key
        if s.tag and s.phase in ("build", "time") and task.deaths + 1 < RETRIES and not task.problem.legacy:
            doing = "building" if s.phase == "build" else "timing"
            queue.appendleft(_Task(task.problem, {**task.failed, s.tag: f"the worker process {how} while {doing} "
                                                  f"this configuration"}, task.deaths + 1))
            progress.forget(key)
            s.task = None
        else:
            where = f" on configuration {s.tag} ({s.phase})" if s.tag else f" ({s.phase})"
            finish(s, failed_record(task, f"the worker process {how}{where}"))

    def take(s: _Slot, msg: tuple) -> None:
        kind, key = msg[0], s.task.problem.key if s.task else ""
        s.since = time.monotonic()
        if kind == "ready":
            s.ready, s.phase, s.ready_s = True, "idle", s.since - s.born
        elif kind == "fatal":
            fatal.append(msg[1])
        elif kind == "begin":
            progress.begin(key, msg[2])
        elif kind == "visit":
            s.tag, s.phase = msg[1], msg[2]
            progress.visit(*msg[1:], key=key)
        elif kind == "waiting":   # for the device lock; once it is held, no configuration until the race visits one
            s.tag, s.phase = "", "wait" if msg[1] else "hold"
        elif kind == "built":
            s.first_build_s = s.since - s.born if s.first_build_s is None else s.first_build_s
            progress.built(*msg[1:], key=key)
        elif kind == "config":
            progress.config(*msg[1:], key=key)
        elif kind == "record":
            finish(s, msg[1])
        elif kind == "error":
            assert s.task is not None
            finish(s, failed_record(s.task, msg[1]))

    def drain(s: _Slot) -> None:
        try:
            while s.conn.poll():
                take(s, s.conn.recv())
        except (EOFError, OSError):
            pass            # it ended: its sentinel says how

    def stop(s: _Slot) -> None:
        if s.proc.is_alive():
            s.proc.kill()
        s.proc.join()
        s.conn.close()

    interrupts = []  # Ctrl-C noted here stops the sweep where its exception is swallowed (a C extension clearing it)

    def interrupted(*_: Any) -> None:
        interrupts.append(1)
        raise KeyboardInterrupt
    own = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with tempfile.TemporaryDirectory(prefix="cudnn_py-sweep-") as locks:
        try:
            if own:
                signal.signal(signal.SIGINT, interrupted)
            slots = [start(devices[i % len(devices)], locks) for i in range(min(jobs, len(queue)))]
            while slots and (queue or any(s.task for s in slots)):
                if interrupts:
                    raise KeyboardInterrupt
                by_conn = {s.conn: s for s in slots}
                for ready in wait([*by_conn, *(s.proc.sentinel for s in slots)], timeout=0.5):
                    if ready in by_conn:   # (a sentinel: the loop below sees how it ended)
                        drain(by_conn[ready])   # type: ignore[index]
                now = time.monotonic()
                for s in list(slots):
                    ended = not s.proc.is_alive()
                    hung = not ended and s.phase not in ("wait", "idle") and now - s.since > time_limit
                    if hung:   # what it sent since the wait: a record that came just now is kept, not measured again
                        drain(s)
                        hung = s.phase not in ("wait", "idle") and time.monotonic() - s.since > time_limit
                    if not ended and not hung:
                        if s.ready and s.task is None and queue:
                            s.task, s.tag, s.phase, s.since = queue.popleft(), "", "prepare", now
                            s.conn.send((s.task.problem, s.task.failed))
                        continue
                    if hung:
                        stop(s)
                    else:
                        drain(s)   # what it said before it ended
                        s.proc.join()
                    how = f"made no progress for {time_limit:g} s and was stopped" if hung else _how_it_ended(s.proc)
                    if not s.ready and not fatal:
                        fatal.append(f"a worker process {how} before it was ready")
                    lost(s, how)
                    slots.remove(s)
                    if queue and not fatal:
                        slots.append(start(s.device, locks))
            if queue and fatal:
                raise SystemExit(f"algos --model: {fatal[0]} (a GPU is needed to measure {len(queue)} operations)")
            for s in slots:
                s.conn.send(None)
            for s in slots:
                s.proc.join(timeout=10)
        finally:   # done, interrupted or failed: no worker outlives the sweep
            for s in started:
                stop(s)
            if own:
                signal.signal(signal.SIGINT, signal.default_int_handler)
    return [{"device": s.device, "ready_s": s.ready_s, "first_build_s": s.first_build_s} for s in started]
