"""The "fastest" algorithm cache (:data:`algorithm_cache`, which ``autotune=True`` fills): the measured
:class:`AlgoPerf` of each convolution configuration, in memory and in the tuning database, and checked JSON files."""
from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from cudnn_py import capi
from cudnn_py.calls.algorithm_queries import DIRECTIONS, AlgoPerf
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["AlgorithmCache", "CacheFileError", "CONV_KEY_FIELDS", "MAX_FILE_BYTES", "KIND", "check_entry",
           "algorithm_cache"]


def _tuplify(v):
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


#: the fields of the convolution module's keys, in order; an entry under such a key is checked against it
CONV_KEY_FIELDS = ("direction", "x_shape", "x_strides", "w_shape", "w_nhwc", "y_shape", "y_strides", "dtype",
                   "y_dtype", "compute", "pads", "stride", "dilation", "groups", "mode", "math_type", "deterministic",
                   "limit", "device")
MAX_FILE_BYTES = 64 << 20  # a cache file larger than this is refused before it is read
_MAX_KEY_DEPTH = 4


class CacheFileError(ValueError):
    """An algorithm-cache file that cannot be loaded: the message names the file and what was wrong."""


def _json_value(v, depth: int = 0) -> bool:
    """Whether ``v`` is a key component: a JSON scalar (finite numbers) or a shallow list of them."""
    if v is None or isinstance(v, (bool, str, int)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)) and depth < _MAX_KEY_DEPTH:
        return all(_json_value(x, depth + 1) for x in v)
    return False


def check_entry(key: tuple, perf: "AlgoPerf") -> None:
    """Refuse (``ValueError``) a record that cannot answer its key: a failed status, a time or workspace out of
    range; for a convolution key also another direction or math type, non-determinism, or workspace over the limit."""
    if not perf.supported:
        raise InvalidValueError(f"the record's status is {getattr(perf.status, 'name', perf.status)}, not "
                                f"CUDNN_STATUS_SUCCESS")
    if not (isinstance(perf.time_ms, float) and 0.0 <= perf.time_ms < float("inf")):
        raise InvalidValueError(f"time_ms must be a finite number >= 0, got {perf.time_ms!r}")
    if not (isinstance(perf.memory_bytes, int) and 0 <= perf.memory_bytes < 2 ** 63):
        raise InvalidValueError(f"memory_bytes must be an int in [0, 2**63), got {perf.memory_bytes!r}")
    if len(key) != len(CONV_KEY_FIELDS) or key[0] not in DIRECTIONS:
        return
    k = dict(zip(CONV_KEY_FIELDS, key))
    if perf.direction != k["direction"]:
        raise InvalidValueError(f"a {perf.direction} record under a {k['direction']} key")
    allowed = {k["math_type"]}
    if k["math_type"] == "CUDNN_DEFAULT_MATH":
        allowed.add("CUDNN_TENSOR_OP_MATH")
    if perf.math_type.name not in allowed:
        raise InvalidValueError(f"math type {perf.math_type.name} where the key asks for {k['math_type']}")
    if k["deterministic"] is True and not perf.deterministic:
        raise InvalidValueError(f"{perf.algo.name} is not deterministic but the key asks for a deterministic algorithm")
    limit = k["limit"]
    if isinstance(limit, int) and not isinstance(limit, bool) and perf.memory_bytes > limit:
        raise InvalidValueError(f"{perf.algo.name} needs {perf.memory_bytes} B of workspace; the key's limit is "
                                f"{limit} B")


#: the tuning database's kind for legacy algorithm choices
KIND = "legacy_algorithm"


def _key_text(key: tuple) -> str:
    return json.dumps(list(key), separators=(",", ":"))


def _key_device(key: tuple) -> int | None:
    """The device ordinal a convolution module key names (its last field), else None (the current device)."""
    last = key[-1] if len(key) == len(CONV_KEY_FIELDS) and key[0] in DIRECTIONS else None
    return last if isinstance(last, int) and not isinstance(last, bool) else None


def _check_database(database: Any) -> None:
    """Refuse, when it is given, what cannot be an AlgorithmCache's database (a path, a number, ...)."""
    if database is None or callable(database) or hasattr(database, "lookup"):
        return
    hint = " (a path: pass cudnn_py.tuning.TuningDatabase(path))" if isinstance(database, (str, bytes, os.PathLike)) \
        else ""
    raise InvalidTypeError(f"AlgorithmCache: database must be a cudnn_py.tuning.TuningDatabase, a callable giving one, "
                           f"or None, got {type(database).__name__}{hint}")


class AlgorithmCache:
    """Measured algorithm choices, keyed by tuples of JSON values (:data:`CONV_KEY_FIELDS` for convolutions), kept
    as tuning database records of kind :data:`KIND` under the device's environment, so another process finds them
    without measuring; a stored record that cannot answer its key is dropped with a warning. Thread-safe.
    ``save(path)`` / ``load(path)``: the JSON file format. ``database``: a :class:`~cudnn_py.tuning.TuningDatabase`,
    a callable giving one when first needed, or None (private, in memory)."""

    def __init__(self, database=None):
        _check_database(database)
        self._source = database
        self._db = None
        self._data: dict[tuple, AlgoPerf] = {}  # the choices this process read or made: lookups stay a dict read
        self._lock = threading.Lock()
        self.generation = 0  # bumped by clear()/load() so callers can drop choices derived from old entries

    def database(self):
        """The :class:`~cudnn_py.tuning.TuningDatabase` behind this cache (opened on first use)."""
        if self._db is None:
            from cudnn_py.tuning_records import TuningDatabase
            src = self._source
            self._db = src if isinstance(src, TuningDatabase) else TuningDatabase() if src is None else src()
        return self._db

    def use_database(self, database) -> None:
        """Keep the choices in ``database`` from now on (a TuningDatabase; None: a private one in memory)."""
        _check_database(database)
        with self._lock:
            self._source, self._db = database, None
            self._data.clear()
            self.generation += 1

    def _with_db(self, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """``fn(database)``; a database that cannot be used warns and gives ``default`` (choices stay in memory)."""
        from cudnn_py.tuning_records import TuningDatabaseError, TuningWarning
        try:
            return fn(self.database())
        except TuningDatabaseError as e:
            warnings.warn(f"algorithm cache: choices stay in this process: {e}", TuningWarning, stacklevel=4)
            return default

    def _stored(self, key: tuple) -> AlgoPerf | None:
        from cudnn_py.tuning_records import TuningWarning
        if not isinstance(key, tuple) or not _json_value(key):
            return None
        value = self._with_db(lambda db: db.lookup(KIND, _key_text(key), device=_key_device(key)))
        if value is None:
            return None
        try:
            perf = AlgoPerf.from_dict(value.get("perf") if isinstance(value.get("perf"), dict) else {})
            check_entry(key, perf)
        except (TypeError, ValueError, OverflowError) as e:
            warnings.warn(f"algorithm cache: ignoring the stored choice for {str(key)[:120]}: {e}; it will be "
                          f"measured again", TuningWarning, stacklevel=3)
            self._with_db(lambda db: db.discard(KIND, _key_text(key), device=_key_device(key)))
            return None
        with self._lock:
            self._data[key] = perf
        return perf

    def get(self, key: tuple) -> AlgoPerf | None:
        """The choice stored for ``key`` (this process's, else the database's), or None."""
        got = self._data.get(key)
        return got if got is not None else self._stored(key)

    def put(self, key: tuple, perf: AlgoPerf) -> None:
        """Remember ``perf`` as the choice for ``key``, here and in the database."""
        if not isinstance(perf, AlgoPerf):
            raise InvalidTypeError(f"cache values are AlgoPerf records, got {type(perf).__name__}")
        if not isinstance(key, tuple) or not _json_value(key):
            raise InvalidTypeError(f"cache keys are tuples of JSON values (numbers, strings, bools, None, lists), got "
                                   f"{key!r}")
        check_entry(key, perf)
        with self._lock:
            self._data[key] = perf
        self._with_db(lambda db: db.record(KIND, _key_text(key), {"perf": perf.to_dict()}, device=_key_device(key)))

    def __len__(self) -> int:
        return len(self.entries())

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def clear(self) -> None:
        """Forget every choice, in this process and in the database (every environment)."""
        with self._lock:
            self._data.clear()
            self.generation += 1
        self._with_db(lambda db: db.clear(KIND))

    def entries(self) -> list[tuple[tuple, AlgoPerf]]:
        """(key, record) pairs: this process's, then the database's others of this environment that answer their key."""
        with self._lock:
            out = dict(self._data)
        for rec in self._with_db(lambda db: db.records(KIND, db.environment()), []):
            try:
                key = _tuplify(json.loads(rec.key))
                if isinstance(key, tuple) and key not in out:
                    perf = AlgoPerf.from_dict(rec.value.get("perf"))  # not a dict: InvalidTypeError, skipped
                    check_entry(key, perf)
                    out[key] = perf
            except (TypeError, ValueError, OverflowError):
                continue
        return list(out.items())

    def to_json(self) -> dict:
        return {"format": "cudnn_py.algorithm_cache", "version": 1,
                "cudnn_version": _cudnn_version(),
                "entries": [{"key": list(k), "perf": p.to_dict()} for k, p in self.entries()]}

    def save(self, path: str | os.PathLike) -> None:
        """Export the choices to a JSON file at ``path``, atomically (a temporary file renamed over ``path``: a
        symlink there is replaced, not followed)."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        text = json.dumps(self.to_json(), indent=1)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def load(self, path: str | os.PathLike, merge: bool = True) -> int:
        """Import a file :meth:`save` wrote (all or nothing: :class:`CacheFileError` names the entry and what is
        wrong); ``merge=False`` forgets every other choice first. Returns the number of entries read."""
        from cudnn_py.tuning_records import Record
        loaded = _read_cache_file(os.fspath(path))
        if not merge:
            self.clear()
        with self._lock:
            self._data.update(loaded)
            self.generation += 1
        now = time.time()
        self._with_db(lambda db: db.put_records([Record(KIND, _key_text(k), db.environment(_key_device(k)),
                                                        {"perf": p.to_dict()}, now, "import")
                                                 for k, p in loaded.items()], newer_only=False))
        return len(loaded)

    def __repr__(self) -> str:
        return f"<AlgorithmCache {len(self._data)} entries in this process, database {self._db!r}>"


def _read_cache_file(path: str) -> dict[tuple, AlgoPerf]:
    """The validated entries of an algorithm-cache file (see :meth:`AlgorithmCache.load`)."""
    def bad(what: str) -> CacheFileError:
        return CacheFileError(f"algorithm cache file {path}: {what}")

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise bad(f"is larger than {MAX_FILE_BYTES} bytes; not a cache file this library wrote")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise bad(f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise bad(f"is not valid JSON (truncated or corrupt?): {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # an integer with too many digits, nesting too deep
        raise bad(f"is not a JSON document this library can read: {type(e).__name__}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != "cudnn_py.algorithm_cache":
        raise bad("is not a cudnn_py algorithm cache file (no \"format\": \"cudnn_py.algorithm_cache\")")
    if doc.get("version") != 1:
        raise bad(f"unsupported cache version {doc.get('version')!r}; expected 1")
    written, ours = doc.get("cudnn_version"), _cudnn_version()
    if written is not None and (not isinstance(written, int) or isinstance(written, bool)):
        raise bad(f"cudnn_version must be an int, got {written!r}")
    if written is not None and ours is not None and written != ours:
        raise bad(f"was written with cuDNN {written}, this process runs cuDNN {ours}; its measurements do not carry "
                  f"over (delete it, or measure again and save)")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise bad("\"entries\" must be a list")
    out: dict[tuple, AlgoPerf] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), list) or \
                not isinstance(entry.get("perf"), dict):
            raise bad(f"entry {i} must be an object with a \"key\" list and a \"perf\" object")
        if not _json_value(entry["key"]):
            raise bad(f"entry {i}: the key holds values other than numbers, strings, bools, None and short lists")
        key = _tuplify(entry["key"])
        try:
            perf = AlgoPerf.from_dict(entry["perf"])
            check_entry(key, perf)
        except (TypeError, ValueError, OverflowError) as err:
            raise bad(f"entry {i} (key {str(key)[:120]}): {err}") from None
        out[key] = perf
    return out


def _cudnn_version() -> int | None:
    try:
        return int(capi.cudnnGetVersion())
    except Exception:  # noqa: BLE001 - the version is informative only
        return None


def _default_database():
    from cudnn_py.tuning_records import default_database
    return default_database()


algorithm_cache = AlgorithmCache(_default_database)
"""The process-wide cache that the legacy calls' ``autotune=True`` (``algo="fastest"``) fills, kept in
:func:`cudnn_py.tuning.default_database`."""
