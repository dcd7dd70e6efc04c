"""``engine="auto"`` by measurement: the first call of a configuration times the legacy call and the graph path on
its own arrays and keeps the faster engine, per handle (cache ``"engine.choice"``) and in the tuning database.
Families reach it through :func:`cudnn_py.graph.legacy.dispatch`; docs/graph_paths.md ("How auto decides") says the
order (handle, database, measurement), what is timed, when a choice is kept, and ``CUDNN_PY_AUTO_ENGINE=static``.
"""
from __future__ import annotations

import enum
import json
import logging
import math
import os
import warnings
from typing import Callable, Hashable, NamedTuple, Sequence, cast

import numpy as np

from cudnn_py.clib import recording
from cudnn_py.core.caches import handle_cache
from cudnn_py.core.streams import EVENT_RESOLUTION_MS, fastest_first, held_ms
from cudnn_py.errors import CudnnPyError, InvalidValueError

__all__ = ["Choice", "run", "run_static", "chosen", "choices", "signature", "set_mode", "mode", "on_mode_change",
           "ROUNDS", "MODES", "ENV", "CACHE"]

#: timed runs per engine when measuring (after one untimed run each); the best counts
ROUNDS = 3
#: what :func:`set_mode` and :data:`ENV` take: measure the first call of each configuration, or the static rules
MODES = ("measure", "static")
#: the environment variable read when no mode was set
ENV = "CUDNN_PY_AUTO_ENGINE"
#: the tuning database's kind for these records
KIND = "engine_choice"
#: the name of the handle cache of choices (a prepared call that ran a choice was built on it)
CACHE = _CACHE = "engine.choice"
_LISTENERS: list[Callable[[], None]] = []

_log = logging.getLogger("cudnn_py.calls.engine_choice")
_mode: list[str | None] = [None]


class Choice(NamedTuple):
    """The engine ``"auto"`` runs for one configuration, and why."""
    engine: str                 #: "legacy" or "graph"
    legacy_ms: float | None     #: best device time of the legacy call, None where it was left out or ran alone
    graph_ms: float | None      #: best device time of the graph path, None where it was left out or ran alone
    source: str                 #: "measured" (this process) or "database"


def set_mode(m: str | None) -> None:
    """``"measure"`` (the default) or ``"static"`` for every handle from now on; None: read :data:`ENV` again."""
    if m is not None and m not in MODES:
        raise InvalidValueError(f"engine choice mode {m!r}: expected one of {MODES} or None")
    _mode[0] = m
    for listener in _LISTENERS:
        listener()


def on_mode_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after each :func:`set_mode` (the prepared calls that ran a choice forget themselves)."""
    _LISTENERS.append(listener)


def mode() -> str:
    """The mode in force: what :func:`set_mode` set, else :data:`ENV`, else ``"measure"``."""
    m = _mode[0] or os.environ.get(ENV, "measure")
    if m not in MODES:
        raise InvalidValueError(f"{ENV}={m!r}: expected one of {MODES}")
    return m


def signature(*arrays, params: tuple = ()) -> tuple:
    """A key part: shape, strides and dtype of each array (the object: ``.name`` costs ~1.5 us), then ``params``."""
    return (*((a.shape, a.strides, a.dtype) for a in arrays), params)


def choices(handle) -> dict[Hashable, Choice]:
    """The choices ``handle`` holds, by key."""
    return dict(handle_cache(handle, _CACHE))


def chosen(handle, key: Hashable, static: str = "graph") -> str | None:
    """The engine ``"auto"`` runs for ``key`` without measuring (one dict lookup on a repeat call): the handle's
    choice, else the database's, else ``static`` in static mode; None where :func:`run` must measure first."""
    recording.uses(_CACHE)
    got = handle_cache(handle, _CACHE).get(key)
    if got is not None:
        return got.engine
    if mode() == "static":
        return static
    got = _stored(handle, key)
    if got is None:
        return None
    handle_cache(handle, _CACHE)[key] = got
    _log.debug("engine_choice %s: %s (database: legacy %s ms, graph %s ms)", key, got.engine, got.legacy_ms,
               got.graph_ms)
    return got.engine


def run(handle, key: Hashable | None, legacy: Callable[[], object], graph: Callable[[], object], *,
        mutated: Sequence | None = None, static: str = "graph",
        refused: tuple[type[BaseException], ...] = ()) -> str:
    """Run one ``engine="auto"`` call through ``legacy()`` or ``graph()`` (which answers False, or raises one of
    ``refused``, where it does not take the call: the legacy call then runs); answer "legacy" or "graph". ``key``:
    the operation's name and :func:`signature` (None: the prepared call's); ``mutated``: arrays restored between
    measured runs (None: the prepared call's); ``static``: the static rule's engine."""
    if key is None:
        if recording.state.call is None:
            raise InvalidValueError("engine choice: no key given outside a prepared operation call")
        key = recording.state.call.key()
    engine = chosen(handle, key, static)
    if engine is None:
        return _measure(handle, handle_cache(handle, _CACHE), key, legacy, graph, mutated, static, refused)
    return run_static(engine, legacy, graph, refused)


def run_static(engine: str, legacy: Callable[[], object], graph: Callable[[], object],
               refused: tuple[type[BaseException], ...]) -> str:
    """Run ``engine``; the graph falls back to the legacy call where it refuses."""
    if engine == "graph":
        try:
            if graph() is not False:
                return "graph"
        except refused:
            pass
    legacy()
    return "legacy"


# ---------------------------------------------------------------- measuring

def _snapshot(handle, arrays: Sequence) -> Callable[[], None]:
    """A function restoring ``arrays``' memory (their whole span) to what it holds now."""
    if not arrays:
        return lambda: None
    from cudnn_py.core.memory import DeviceArray, empty
    pairs = []
    for a in arrays:
        lo, count = a.span()
        nbytes = count * a.dtype.itemsize
        if not nbytes:
            continue
        view = DeviceArray.from_parts(a.ptr + lo * a.dtype.itemsize, (nbytes,), np.dtype(np.uint8), (1,), a.device_id,
                                      a, handle.stream)
        pairs.append((view, empty((nbytes,), np.uint8, handle.stream).copy_(view, handle.stream)))

    def restore() -> None:
        for view, saved in pairs:
            view.copy_(saved, handle.stream)
    return restore


def _measure(handle, cache, key, legacy, graph, mutated, static: str,
             graph_refusals: tuple[type[BaseException], ...]) -> str:
    refused: tuple[type[BaseException], ...] = (*graph_refusals, CudnnPyError)
    before = recording.mark()
    call = recording.state.call if mutated is None else None
    try:
        restore = _snapshot(handle, mutated or () if call is None else call.mutated())
    except CudnnPyError as e:  # no room for the copies (or no device): no measurement this time
        _log.debug("engine_choice %s: not measured (%s); the static rule runs", key, e)
        return run_static(static, legacy, graph, graph_refusals)
    engines = {"legacy": legacy, "graph": graph}
    errors: dict[str, BaseException | None] = {}
    best = {name: (math.inf, math.inf) for name in engines}  # the best (GPU ms, host ms) of each engine's samples
    hold = dict.fromkeys(engines, True)
    for timed in (False,) + (True,) * ROUNDS:  # the first round untimed: plans are built, refusals found
        if timed and len(errors) == 1:
            break  # one engine left: nothing to compare
        for name, fn in engines.items():
            if name in errors:
                continue
            try:
                restore()
                if timed:
                    gpu, host, hold[name] = held_ms(handle.stream, fn, hold[name])
                    best[name] = min(best[name][0], cast(float, gpu)), min(best[name][1], host)
                elif fn() is False and name == "graph":
                    errors[name] = None
            except refused as e:
                errors[name] = e
    live = {name: (None if t[0] == math.inf else t[0]) for name, t in best.items() if name not in errors}
    if not live:
        raise errors["legacy"] or errors["graph"]  # type: ignore[misc]
    # one run a sample: GPU times closer than the events' resolution are a tie
    winner = fastest_first([(name, *best[name]) for name in live], EVENT_RESOLUTION_MS)[0][0]
    restore()
    recording.rewind(before)  # what a prepared call repeats is the winner's run alone
    engines[winner]()
    got = Choice(winner, live.get("legacy"), live.get("graph"), "measured")
    cache[key] = got
    _log.debug("engine_choice %s: %s (measured: legacy %s ms, graph %s ms%s)", key, winner, got.legacy_ms,
               got.graph_ms, "".join(f"; {n} left out: {e!r}" for n, e in errors.items()))
    if all(e is None or isinstance(e, graph_refusals) for e in errors.values()):  # a passing failure is not kept
        _store(handle, key, got)
    return winner


# ---------------------------------------------------------------- the tuning database

def _database():
    """The tuning database, or None where :mod:`cudnn_py.tuning_records` does not exist (choices stay in memory)."""
    try:
        from cudnn_py.tuning_records import default_database
    except ImportError:
        return None
    return default_database()


def _with_db(fn: Callable, default=None):
    """``fn(database)``; without a database, or one that cannot be used (which warns), ``default``."""
    try:
        from cudnn_py.tuning_records import TuningDatabaseError, TuningWarning
    except ImportError:
        return default
    try:
        db = _database()
        return default if db is None else fn(db)
    except TuningDatabaseError as e:
        warnings.warn(f"engine choice: choices stay in this process: {e}", TuningWarning, stacklevel=4)
        return default


def _plain(v):
    """``v`` as JSON-able values (tuples as lists, dtypes and enums by name, anything else by ``repr``)."""
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, enum.Enum):
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return getattr(v, "name", None) or repr(v)


def _db_key(key) -> str:
    """The key as the database's text (it adds the GPU, cuDNN and driver itself)."""
    return json.dumps(_plain(key), separators=(",", ":"))


def _stored(handle, key) -> Choice | None:
    rec = _with_db(lambda db: db.lookup(KIND, _db_key(key), device=handle.device))
    if not isinstance(rec, dict) or rec.get("engine") not in ("legacy", "graph"):
        return None
    return Choice(rec["engine"], rec.get("legacy_ms"), rec.get("graph_ms"), "database")


def _store(handle, key, got: Choice) -> None:
    _with_db(lambda db: db.record(KIND, _db_key(key), {"engine": got.engine, "legacy_ms": got.legacy_ms,
                                                        "graph_ms": got.graph_ms}, device=handle.device))
