"""An opt-in on-disk store of execution plans, so a restarted program skips heuristics and autotuning.

``set_plan_cache_dir(path)`` (or the environment variable ``CUDNN_PY_PLAN_CACHE_DIR``) turns it on. Each entry is
one JSON file named by a hash of everything that changes the answer: the graph's structure, shapes, strides and
dtypes, the build options, the loaded cuDNN version and the GPU (name and compute capability). It holds cuDNN's own
serialisation of each plan (``CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION``) and, for autotuned entries, the
measured times. A file that is unreadable, of another format, or made for another cuDNN or GPU is ignored with a
warning and written again; files are written atomically (a private temporary file in the same directory, then
renamed), never through a symbolic link.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path
from cudnn_py.errors import InvalidValueError

__all__ = ["set_plan_cache_dir", "plan_cache_dir", "load", "save"]

_FORMAT = 1
_MAX_BYTES = 64 << 20
_lock = threading.Lock()
_dir: list = [None, False]   # [path or None, explicitly set]


def set_plan_cache_dir(path: str | os.PathLike | None) -> None:
    """Keep plans under ``path`` (created if missing), or stop with ``None``."""
    with _lock:
        if path is not None:
            p = Path(path)
            if p.exists() and not p.is_dir():
                raise NotADirectoryError(f"plan cache: {p} is not a directory")
            p.mkdir(parents=True, exist_ok=True)
        _dir[:] = [None if path is None else Path(path), True]


def plan_cache_dir() -> Path | None:
    """The directory plans are kept in, or None (then nothing is read or written)."""
    if not _dir[1]:
        env = os.environ.get("CUDNN_PY_PLAN_CACHE_DIR")
        if env:
            set_plan_cache_dir(env)
        else:
            _dir[1] = True
    return _dir[0]


def _device_tag(handle) -> str:
    from cuda.core import Device
    d = Device(handle.device_id)
    cc = d.compute_capability
    return f"{d.name}|sm_{cc.major}{cc.minor}"


def _identity(graph_key: tuple, options: tuple, handle) -> dict:
    from cudnn_py import version
    return {"cudnn": ".".join(map(str, version())), "device": _device_tag(handle),
            "key": hashlib.sha256(repr((graph_key, options)).encode()).hexdigest()}


def _path(directory: Path, ident: dict) -> Path:
    h = hashlib.sha256(f"{ident['cudnn']}|{ident['device']}|{ident['key']}".encode()).hexdigest()[:32]
    return directory / f"plan-{h}.json"


def load(graph_key: tuple, options: tuple, handle) -> list[dict] | None:
    """The stored entries [{'json': plan text, 'tag': engine tag, 'ms': time or None}] for this graph and these
    options, or None (no store, no entry, or an entry that is unusable, with a warning naming the file)."""
    directory = plan_cache_dir()
    if directory is None:
        return None
    ident = _identity(graph_key, options, handle)
    path = _path(directory, ident)
    try:
        if path.is_symlink() or not path.is_file():
            return None
        if path.stat().st_size > _MAX_BYTES:
            raise InvalidValueError(f"larger than {_MAX_BYTES} bytes")
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise InvalidValueError(f"not a format-{_FORMAT} plan file")
        for k in ("cudnn", "device", "key"):
            if data.get(k) != ident[k]:
                raise InvalidValueError(f"{k} is {data.get(k)!r}, this process has {ident[k]!r}")
        plans = data.get("plans")
        if not isinstance(plans, list) or not plans or not all(
                isinstance(p, dict) and isinstance(p.get("json"), str) and isinstance(p.get("tag"), str)
                and (p.get("ms") is None or isinstance(p.get("ms"), (int, float))) for p in plans):
            raise InvalidValueError("'plans' must be a non-empty list of {json, tag, ms}")
        return plans
    except (OSError, ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
        warnings.warn(f"plan cache: ignoring {path}: {e}", RuntimeWarning, stacklevel=3)
        return None


def save(graph_key: tuple, options: tuple, handle, plans: list[dict]) -> None:
    """Store ``plans`` ([{'json', 'tag', 'ms'}]) for this graph and these options (no-op without a store)."""
    directory = plan_cache_dir()
    if directory is None:
        return
    ident = _identity(graph_key, options, handle)
    path = _path(directory, ident)
    text = json.dumps({"format": _FORMAT, **ident, "plans": plans})
    try:
        fd, tmp = tempfile.mkstemp(prefix=".plan-", suffix=".tmp", dir=path.parent)
    except OSError as e:  # a store that cannot be written must not fail the call whose plans are built
        warnings.warn(f"plan cache: cannot write in {path.parent}: {e}", RuntimeWarning, stacklevel=3)
        return
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
