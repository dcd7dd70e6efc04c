"""The plan store: built and autotuned execution plans (cuDNN's JSON, autotuned times) kept in the tuning database
(kind ``"plan"``, docs/tuning.md), so a restarted program skips heuristics and autotuning.

It is opt-in: :func:`set_plan_cache_dir` (or ``CUDNN_PY_PLAN_CACHE_DIR``) keeps plans in ``tuning.sqlite`` there,
:func:`use_database` in any :class:`~cudnn_py.tuning.TuningDatabase`; with neither, ``CUDNN_PY_TUNING_DB`` set to a
file puts them in :func:`~cudnn_py.tuning.default_database`. A malformed record is dropped with a warning.
"""
from __future__ import annotations

import hashlib
import math
import os
import threading
import warnings
from pathlib import Path

from cudnn_py.errors import InvalidTypeError, InvalidValueError
from cudnn_py.tuning_records import database as _db

__all__ = ["set_plan_cache_dir", "plan_cache_dir", "use_database", "database", "load", "save", "KIND"]

#: the tuning database's kind for stored plans
KIND = "plan"
_lock = threading.Lock()
_dir: list = [None, False]   # [path or None, explicitly set]
_explicit: list = [None]     # a database given to use_database()


def set_plan_cache_dir(path: str | os.PathLike | None) -> None:
    """Keep plans in ``tuning.sqlite`` under ``path`` (created if missing), or stop with ``None``."""
    with _lock:
        if path is not None:
            p = Path(path)
            if p.exists() and not p.is_dir():
                raise NotADirectoryError(f"plan cache: {p} is not a directory")
            p.mkdir(parents=True, exist_ok=True)
        _dir[:] = [None if path is None else Path(path), True]
        _explicit[0] = None


def plan_cache_dir() -> Path | None:
    """The directory whose database holds the plans (:func:`set_plan_cache_dir` or ``CUDNN_PY_PLAN_CACHE_DIR``), or
    None."""
    if not _dir[1]:
        env = os.environ.get("CUDNN_PY_PLAN_CACHE_DIR")
        if env:
            set_plan_cache_dir(env)
        else:
            _dir[1] = True
    return _dir[0]


def use_database(db: _db.TuningDatabase | None) -> None:
    """Keep plans in ``db`` (None: back to :func:`plan_cache_dir` / the environment variables)."""
    if db is not None and not isinstance(db, _db.TuningDatabase):
        raise InvalidTypeError(f"use_database takes a TuningDatabase or None, got {type(db).__name__}")
    _explicit[0] = db


def database() -> _db.TuningDatabase | None:
    """The database plans go to, or None when the store is off (then nothing is read or written)."""
    if _explicit[0] is not None:
        return _explicit[0]
    directory = plan_cache_dir()
    if directory is not None:
        return _db.open_database(directory / _db.FILE_NAME)
    if os.environ.get("CUDNN_PY_TUNING_DB", ":memory:") != ":memory:":   # plans held in memory help no later process
        return _db.default_database()
    return None


def _key(graph_key: tuple, options: tuple) -> str:
    return hashlib.sha256(repr((graph_key, options)).encode()).hexdigest()


def _valid(plans) -> bool:
    return isinstance(plans, list) and bool(plans) and all(
        isinstance(p, dict) and isinstance(p.get("json"), str) and isinstance(p.get("tag"), str)
        and (p.get("ms") is None or _db.finite(p.get("ms"))) for p in plans)


def load(graph_key: tuple, options: tuple, handle) -> list[dict] | None:
    """The stored entries [{'json', 'tag', 'ms'}] for this graph and these options, or None (no store or entry, or
    an unusable entry, dropped with a warning)."""
    device = getattr(handle, "device_id", None)
    try:
        db = database()
        if db is None:
            return None
        key = _key(graph_key, options)
        value = db.lookup(KIND, key, device=device)
    except _db.TuningDatabaseError as e:
        warnings.warn(f"plan cache: {e}", RuntimeWarning, stacklevel=3)
        return None
    if value is None:
        return None
    plans = value.get("plans")
    if not _valid(plans):
        warnings.warn(f"plan cache: ignoring the record {key[:16]} in {db.path or '(memory)'}: 'plans' must be a "
                      f"non-empty list of {{json, tag, ms}}", RuntimeWarning, stacklevel=3)
        db.discard(KIND, key, device=device)
        return None
    return plans


def save(graph_key: tuple, options: tuple, handle, plans: list[dict]) -> None:
    """Store ``plans`` ([{'json', 'tag', 'ms'}]) for this graph and these options (no-op without a store; one that
    cannot be written warns). A time that is not a finite number is stored as None."""
    if isinstance(plans, list):
        plans = [dict(p, ms=None) if isinstance(p, dict) and isinstance(p.get("ms"), float)
                 and not math.isfinite(p["ms"]) else p for p in plans]
    if not _valid(plans):
        raise InvalidValueError("plans must be a non-empty list of {json: str, tag: str, ms: finite number or None}")
    try:
        db = database()
        if db is not None:
            db.record(KIND, _key(graph_key, options), {"plans": plans}, device=getattr(handle, "device_id", None))
    except _db.TuningDatabaseError as e:
        warnings.warn(f"plan cache: cannot write: {e}", RuntimeWarning, stacklevel=3)

