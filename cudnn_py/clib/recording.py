"""What a call's validated path queued on the GPU, written down for its prepared call to queue again with other
addresses: while a thread records, each sink (``ops._common.launch``, ``host_step``, ``Runner.run_pointers``) adds a
:class:`Step`, and anything a replay would not repeat :func:`spoil` s the recording (docs/prepared.md, "Correct by
construction"). The caches a recording was built on (:func:`uses`) are kept with its prepared call.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

__all__ = ["Step", "Recording", "Address", "WorkspaceArg", "state", "recording", "mark", "rewind", "add", "spoil",
           "uses", "measuring", "in_sink", "device_work"]


class Address(NamedTuple):
    """An argument that is the device address of one of the call's arrays, as a bare int."""
    value: int


class WorkspaceArg(NamedTuple):
    """An argument that is the handle's workspace (``size`` bytes from ``offset`` on), fetched on every replay."""
    size: int
    offset: int = 0


class Step(NamedTuple):
    """One queued call ``call(*args)``, ``args[i]`` a device address for ``i`` in ``pointers``; ``keep``: what the
    arguments belong to (descriptors), kept alive; ``workspace``: bytes of workspace the step fetches itself."""
    call: Callable[..., Any]
    args: tuple
    pointers: tuple[int, ...]
    keep: tuple = ()
    workspace: int = 0


class Recording:
    """The steps recorded so far, why they cannot be replayed (None while they can), the caches they were built on."""
    __slots__ = ("steps", "spoiled", "uses")

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.spoiled: str | None = None
        self.uses: set[str] = set()


class _Local(threading.local):
    rec: Recording | None = None
    sink: bool = False  # inside a sink's own C call (set by the sinks): queuing C functions leave the recording alone
    #: the operation call whose validated path runs (cudnn_py.calls.prepared): its declaration's key etc.
    call: Any = None


#: this thread's recording (``state.rec``; None while not recording): read directly on hot paths
state = _Local()


@contextmanager
def recording() -> Iterator[Recording]:
    """Record this thread's steps inside the block."""
    outer, rec = state.rec, Recording()
    state.rec = rec
    try:
        yield rec
    finally:
        state.rec = outer


def mark() -> tuple[int, str | None] | None:
    """Where this thread's recording stands (None when not recording), for :func:`rewind`."""
    rec = state.rec
    return None if rec is None else (len(rec.steps), rec.spoiled)


def rewind(to: tuple[int, str | None] | None) -> None:
    """Forget what was recorded since :func:`mark` answered ``to`` (the engines' measured runs, before the winner's)."""
    rec = state.rec
    if rec is not None and to is not None:
        del rec.steps[to[0]:]
        rec.spoiled = to[1]


def add(call: Callable[..., Any], args: tuple, pointers: tuple[int, ...], keep: tuple = (), workspace: int = 0) -> None:
    """Record one step (no-op when this thread is not recording)."""
    rec = state.rec
    if rec is not None:
        rec.steps.append(Step(call, args, pointers, keep, workspace))


def uses(name: str) -> None:
    """Note that this thread's recording was built on the handle cache ``name`` (no-op when not recording)."""
    rec = state.rec
    if rec is not None:
        rec.uses.add(name)


def spoil(reason: str) -> None:
    """Mark this thread's recording as not replayable (no-op when not recording)."""
    rec = state.rec
    if rec is not None and rec.spoiled is None:
        rec.spoiled = reason


def device_work(what: str) -> None:
    """Note a driver call on device memory (``what``): outside a sink it spoils this thread's recording."""
    if state.rec is not None and not state.sink:
        spoil(f"{what} queued device work outside a sink (ops._common.host_step records such a step)")


@contextmanager
def measuring() -> Iterator[None]:
    """Queue, inside the block, work a prepared call must not repeat (timed candidates) without spoiling it."""
    outer, state.sink = state.sink, True
    try:
        yield
    finally:
        state.sink = outer


def in_sink(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(*args)`` as a sink's own call (which the sink records): queuing C calls inside spoil nothing."""
    state.sink = True
    try:
        fn(*args)
    finally:
        state.sink = False
