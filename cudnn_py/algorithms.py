"""Convolution algorithm queries, records, the "fastest" cache and the port of the removed selectors.

Three directions, named as in the rest of the package: ``"forward"``, ``"backward_data"`` and
``"backward_filter"``. For each, cuDNN offers a heuristic query (``..._v7``), a measured one
(``Find...``, which allocates its own buffers, and ``Find...Ex``, which runs on the caller's buffers)
and a workspace-size query; this module calls them on raw descriptors (capi handles or objects with
``.ptr``) and returns :class:`AlgoPerf` records in cuDNN's order.

Port of the selectors removed in cuDNN 8 (one line each)::

    # C, cuDNN 7:
    #   cudnnGetConvolutionForwardAlgorithm(h, xD, wD, cD, yD, CUDNN_CONVOLUTION_FWD_PREFER_FASTEST, 0, &algo);
    from cudnn_py.algorithms import *
    algo = cudnnGetConvolutionForwardAlgorithm(h, xD, wD, cD, yD, CUDNN_CONVOLUTION_FWD_PREFER_FASTEST, 0)

or, with keywords, ``choose_forward_algorithm(h, xD, wD, cD, yD, preference, limit, measured=False)``.
The preference is applied to the ``_v7`` heuristic list (``measured=True`` applies it to ``Find``
timings instead): PREFER_FASTEST takes the first supported entry, NO_WORKSPACE the first needing no
workspace, SPECIFY_WORKSPACE_LIMIT the first needing at most ``memoryLimitInBytes``.
"""
from __future__ import annotations

import ctypes
import enum
import json
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from cudnn_py import capi
from cudnn_py.errors import CudnnError, CudnnNotSupportedError, InvalidTypeError, InvalidValueError, WorkspaceLimitError

if TYPE_CHECKING:
    from cudnn_py.handle import Handle

__all__ = [
    "DIRECTIONS", "AlgoPerf", "AlgorithmCache", "CacheFileError", "CONV_KEY_FIELDS", "algorithm_cache", "algorithm_enum", "parse_algo",
    "select_algorithm", "max_algorithm_count", "heuristic_algorithms", "find_algorithms", "find_algorithms_ex", "workspace_size",
    "cudnnConvolutionFwdPreference_t", "cudnnConvolutionBwdDataPreference_t", "cudnnConvolutionBwdFilterPreference_t",
    "CUDNN_CONVOLUTION_FWD_NO_WORKSPACE", "CUDNN_CONVOLUTION_FWD_PREFER_FASTEST",
    "CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT", "CUDNN_CONVOLUTION_BWD_DATA_NO_WORKSPACE",
    "CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST", "CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT",
    "CUDNN_CONVOLUTION_BWD_FILTER_NO_WORKSPACE", "CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST",
    "CUDNN_CONVOLUTION_BWD_FILTER_SPECIFY_WORKSPACE_LIMIT", "choose_forward_algorithm",
    "choose_backward_data_algorithm", "choose_backward_filter_algorithm", "cudnnGetConvolutionForwardAlgorithm",
    "cudnnGetConvolutionBackwardDataAlgorithm", "cudnnGetConvolutionBackwardFilterAlgorithm",
    "ALGO_CHOICES", "NONDETERMINISTIC", "is_choice", "allowed_by_math_type", "find_workspace",
    "measure_algorithms", "resolve_algorithm",
]

DIRECTIONS = ("forward", "backward_data", "backward_filter")


@dataclass(frozen=True)
class _Api:
    algo_enum: type
    perf: Any  # the ctypes struct of a record
    max_count: Any
    heuristic: Any
    find: Any
    find_ex: Any
    ws_size: Any
    execute: Any


def _api(direction: str) -> _Api:
    try:
        return _APIS[direction]
    except KeyError:
        raise InvalidValueError(f"direction {direction!r}: expected one of {DIRECTIONS}") from None


class _Apis(dict):
    """direction -> _Api, built on first use so importing this module never touches the library."""

    def __missing__(self, direction):
        c = capi
        table = {
            "forward": ("cudnnConvolutionFwdAlgo_t", "cudnnConvolutionFwdAlgoPerf_t", "ForwardAlgorithm", "Forward"),
            "backward_data": ("cudnnConvolutionBwdDataAlgo_t", "cudnnConvolutionBwdDataAlgoPerf_t",
                              "BackwardDataAlgorithm", "BackwardData"),
            "backward_filter": ("cudnnConvolutionBwdFilterAlgo_t", "cudnnConvolutionBwdFilterAlgoPerf_t",
                                "BackwardFilterAlgorithm", "BackwardFilter"),
        }
        if direction not in table:
            raise KeyError(direction)
        enum_name, perf_name, alg, ex = table[direction]
        api = _Api(getattr(c, enum_name), getattr(c, perf_name),
                   getattr(c, f"cudnnGetConvolution{alg}MaxCount"), getattr(c, f"cudnnGetConvolution{alg}_v7"),
                   getattr(c, f"cudnnFindConvolution{alg}"), getattr(c, f"cudnnFindConvolution{alg}Ex"),
                   getattr(c, f"cudnnGetConvolution{ex}WorkspaceSize"), getattr(c, f"cudnnConvolution{ex}"))
        self[direction] = api
        return api


_APIS = _Apis()


def algorithm_enum(direction: str) -> type[enum.IntEnum]:
    """The capi enum of algorithms for a direction (e.g. ``capi.cudnnConvolutionFwdAlgo_t``)."""
    return _api(direction).algo_enum


def real_members(direction: str) -> list:
    """The algorithms of a direction, without the enum's ``*_COUNT`` sentinel."""
    return [m for m in algorithm_enum(direction) if not m.name.endswith("_COUNT")]


def parse_algo(direction: str, algo: Any) -> enum.IntEnum:
    """An algorithm enum member from a member, an int, or a name (full C name or its tail, any case).

    ``parse_algo("forward", "implicit_precomp_gemm")`` -> ``CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM``.
    """
    members = real_members(direction)
    if isinstance(algo, enum.IntEnum):
        if type(algo) is not algorithm_enum(direction):
            raise InvalidTypeError(f"{algo!r} is not a {direction} algorithm; expected a "
                                   f"{algorithm_enum(direction).__name__}")
        return algo
    if isinstance(algo, int) and not isinstance(algo, bool):
        for m in members:
            if int(m) == algo:
                return m
        raise InvalidValueError(f"{direction} algorithm {algo} does not exist; valid: {[int(m) for m in members]}")
    if isinstance(algo, str):
        want = algo.strip().upper()
        for m in members:
            tail = m.name.split("_ALGO_")[1]
            if want in (m.name, tail, "ALGO_" + tail):
                return m
        raise InvalidValueError(f"{direction} algorithm {algo!r} does not exist; valid: "
                         f"{[m.name.split('_ALGO_')[1] for m in members]}")
    raise InvalidTypeError(f"algo must be an enum member, int or name, got {type(algo).__name__}")


@dataclass(frozen=True)
class AlgoPerf:
    """One entry of cuDNN's algorithm list (a ``cudnnConvolution*AlgoPerf_t`` as a Python record)."""

    direction: str
    algo: enum.IntEnum
    status: enum.IntEnum
    time_ms: float
    memory_bytes: int
    determinism: enum.IntEnum
    math_type: enum.IntEnum

    @property
    def supported(self) -> bool:
        return int(self.status) == int(capi.CUDNN_STATUS_SUCCESS)

    @property
    def deterministic(self) -> bool:
        return int(self.determinism) == int(capi.CUDNN_DETERMINISTIC)

    @classmethod
    def from_struct(cls, direction: str, s) -> "AlgoPerf":
        return cls(direction, algorithm_enum(direction)(s.algo), _enum(capi.cudnnStatus_t, s.status), float(s.time),
                   int(s.memory), capi.cudnnDeterminism_t(s.determinism), capi.cudnnMathType_t(s.mathType))

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("algo", "status", "determinism", "math_type"):
            d[k] = getattr(self, k).name
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "AlgoPerf":
        """The record :meth:`to_dict` wrote; :class:`ValueError` naming the field that is missing or wrong."""
        def field(name, kinds):
            if name not in d:
                raise InvalidValueError(f"field {name!r} is missing")
            v = d[name]
            if isinstance(v, bool) or not isinstance(v, kinds):
                raise InvalidValueError(f"field {name!r} must be {' or '.join(k.__name__ for k in kinds)}, got {v!r}")
            return v

        def member(name, kind):
            v = field(name, (str,))
            if v not in kind.__members__:
                raise InvalidValueError(f"field {name!r}: {v!r} is not a {kind.__name__} name")
            return kind[v]

        direction = field("direction", (str,))
        if direction not in DIRECTIONS:
            raise InvalidValueError(f"field 'direction': {direction!r} is not one of {DIRECTIONS}")
        return cls(direction, parse_algo(direction, field("algo", (str,))), member("status", capi.cudnnStatus_t),
                   float(field("time_ms", (int, float))), field("memory_bytes", (int,)),
                   member("determinism", capi.cudnnDeterminism_t), member("math_type", capi.cudnnMathType_t))

    def __str__(self) -> str:
        state = "ok" if self.supported else self.status.name
        det = "det" if self.deterministic else "nondet"
        return (f"{self.algo.name:<50} {state:<12} {self.time_ms:9.4f} ms {self.memory_bytes:>12} B "
                f"{det:<6} {self.math_type.name}")


def _enum(kind, value):
    try:
        return kind(value)
    except ValueError:  # a status newer than the headers we were generated from
        return value


def _raw(obj):
    """A capi handle from a capi handle, a Handle/descriptor object (``.ptr``) or None."""
    return getattr(obj, "ptr", obj)


def _perf_array(direction: str, count: int):
    return (_api(direction).perf * count)()


def max_algorithm_count(handle, direction: str) -> int:
    """``cudnnGetConvolution*AlgorithmMaxCount``."""
    n = ctypes.c_int()
    _api(direction).max_count(_raw(handle), ctypes.byref(n))
    return n.value


def _records(direction: str, arr, returned: ctypes.c_int) -> list[AlgoPerf]:
    return [AlgoPerf.from_struct(direction, arr[i]) for i in range(returned.value)]


def heuristic_algorithms(handle, direction: str, a, b, conv, c, count: int | None = None) -> list[AlgoPerf]:
    """``cudnnGetConvolution*Algorithm_v7`` on descriptors in C order.

    Descriptor order is cuDNN's: forward (x, w, conv, y); backward_data (w, dy, conv, dx);
    backward_filter (x, dy, conv, dw).
    """
    api = _api(direction)
    count = count or max_algorithm_count(handle, direction)
    arr, n = _perf_array(direction, count), ctypes.c_int()
    api.heuristic(_raw(handle), _raw(a), _raw(b), _raw(conv), _raw(c), count, ctypes.byref(n), arr)
    return _records(direction, arr, n)


def find_algorithms(handle, direction: str, a, b, conv, c, count: int | None = None) -> list[AlgoPerf]:
    """``cudnnFindConvolution*Algorithm``: runs every algorithm on buffers cuDNN allocates; sorted by time."""
    api = _api(direction)
    count = count or max_algorithm_count(handle, direction)
    arr, n = _perf_array(direction, count), ctypes.c_int()
    api.find(_raw(handle), _raw(a), _raw(b), _raw(conv), _raw(c), count, ctypes.byref(n), arr)
    return _records(direction, arr, n)


def find_algorithms_ex(handle, direction: str, a, a_ptr: int, b, b_ptr: int, conv, c, c_ptr: int,
                       workspace_ptr: int | None, workspace_bytes: int, count: int | None = None) -> list[AlgoPerf]:
    """``cudnnFindConvolution*AlgorithmEx`` on the caller's buffers (the direction's output is overwritten).

    Algorithms needing more than ``workspace_bytes`` are reported with a failing status.
    """
    api = _api(direction)
    count = count or max_algorithm_count(handle, direction)
    arr, n = _perf_array(direction, count), ctypes.c_int()
    api.find_ex(_raw(handle), _raw(a), a_ptr, _raw(b), b_ptr, _raw(conv), _raw(c), c_ptr, count, ctypes.byref(n),
                arr, workspace_ptr, workspace_bytes)
    return _records(direction, arr, n)


def workspace_size(handle, direction: str, a, b, conv, c, algo) -> int:
    """``cudnnGetConvolution*WorkspaceSize`` for one algorithm (bytes); raises if the algorithm is unsupported."""
    size = ctypes.c_size_t()
    _api(direction).ws_size(_raw(handle), _raw(a), _raw(b), _raw(conv), _raw(c), parse_algo(direction, algo),
                            ctypes.byref(size))
    return size.value


# ---------------------------------------------------------------- the "fastest" cache

def _tuplify(v):
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


#: the fields of the keys the convolution module stores, in order (see ``_Geometry.cache_key``); a loaded entry
#: with a key of this shape is checked against what the key asks for (direction, math type, determinism, limit)
CONV_KEY_FIELDS = ("direction", "x_shape", "x_strides", "w_shape", "w_nhwc", "y_shape", "y_strides", "dtype",
                   "y_dtype", "compute", "pads", "stride", "dilation", "groups", "mode", "math_type", "deterministic",
                   "limit", "device")
MAX_FILE_BYTES = 64 << 20  # a cache file larger than this is refused before it is read
_MAX_KEY_DEPTH = 4


class CacheFileError(ValueError):
    """An algorithm-cache file that cannot be loaded: the message names the file and what was wrong."""


def _json_value(v, depth: int = 0) -> bool:
    """Whether ``v`` is a key component: a JSON scalar (finite numbers) or a shallow list of them."""
    if v is None or isinstance(v, (bool, str)):
        return True
    if isinstance(v, int):
        return True
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    if isinstance(v, (list, tuple)) and depth < _MAX_KEY_DEPTH:
        return all(_json_value(x, depth + 1) for x in v)
    return False


def check_entry(key: tuple, perf: "AlgoPerf") -> None:
    """Refuse (``ValueError``) a record that could not be the answer to its key: a failed status, a negative or
    non-finite time, a negative workspace, and, for the convolution module's keys, another direction, a math type
    the key did not allow, a non-deterministic algorithm for a deterministic key, or more workspace than its limit."""
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
    if len(key) == len(CONV_KEY_FIELDS) and key[0] in DIRECTIONS and isinstance(key[-1], int) \
            and not isinstance(key[-1], bool):
        return key[-1]
    return None


class AlgorithmCache:
    """Measured algorithm choices, keyed by configuration (thread-safe): a view on a tuning database.

    A key is a tuple of JSON-representable values (the convolution module builds it from direction, shapes,
    strides, dtypes, convolution parameters, math type, determinism, workspace cap and device:
    :data:`CONV_KEY_FIELDS`). Each choice is kept in the database as a record of kind :data:`KIND` under the
    device's environment (cuDNN version, GPU, driver), so another process on the same machine finds it without
    measuring; a stored record that cannot answer its key is dropped with a warning and measured again.
    ``entries()`` lists the choices of this environment; ``save(path)`` / ``load(path)`` export to and import from
    the earlier JSON file format (written atomically; a file that is corrupt, truncated, from another format or
    cuDNN version, or holds a record that cannot answer its key raises :class:`CacheFileError`).

    :param database: where the choices are kept: a :class:`~cudnn_py.tuning.TuningDatabase`, a callable giving one
        when first needed (the process-wide :data:`algorithm_cache` uses
        :func:`~cudnn_py.tuning.default_database`), or None for a private database in memory.
    """

    def __init__(self, database=None):
        self._source = database
        self._db = None
        self._data: dict[tuple, AlgoPerf] = {}  # the choices this process read or made: lookups stay a dict read
        self._lock = threading.Lock()
        self.generation = 0  # bumped by clear()/load() so callers can drop choices derived from old entries

    def database(self):
        """The :class:`~cudnn_py.tuning.TuningDatabase` behind this cache (opened on first use)."""
        if self._db is None:
            from cudnn_py.tuning import TuningDatabase
            src = self._source
            self._db = src if isinstance(src, TuningDatabase) else TuningDatabase() if src is None else src()
        return self._db

    def use_database(self, database) -> None:
        """Keep the choices in ``database`` from now on (a TuningDatabase; None: a private one in memory)."""
        with self._lock:
            self._source, self._db = database, None
            self._data.clear()
            self.generation += 1

    def _with_db(self, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """``fn(database)``; a database that cannot be used warns and gives ``default`` (choices stay in memory)."""
        from cudnn_py.tuning import TuningDatabaseError, TuningWarning
        try:
            return fn(self.database())
        except TuningDatabaseError as e:
            warnings.warn(f"algorithm cache: choices stay in this process: {e}", TuningWarning, stacklevel=4)
            return default

    def _stored(self, key: tuple) -> AlgoPerf | None:
        from cudnn_py.tuning import TuningWarning
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
        """Snapshot of (key, record) pairs: this process's in insertion order, then the database's other records of
        this environment (records that cannot answer their keys are left out)."""
        with self._lock:
            out = dict(self._data)
        for rec in self._with_db(lambda db: db.records(KIND, db.environment()), []):
            try:
                key = _tuplify(json.loads(rec.key))
                if isinstance(key, tuple) and key not in out:
                    perf = AlgoPerf.from_dict(rec.value.get("perf") if isinstance(rec.value.get("perf"), dict)
                                              else {})
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
        """Export the choices to a JSON file at ``path``, atomically: a private temporary file in the same folder
        (``mkstemp``, mode 0600), flushed to disk, then renamed over ``path`` (a symlink there is replaced, not
        followed). The database itself is the store; this is for reading or sharing the choices as text."""
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
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def load(self, path: str | os.PathLike, merge: bool = True) -> int:
        """Import a JSON file written by :meth:`save` (or an earlier cudnn-py) into this cache and its database;
        returns the number of entries read. Nothing is changed unless every entry is valid
        (:class:`CacheFileError` names the file, the entry and what is wrong); ``merge=False`` forgets every other
        choice first."""
        from cudnn_py.tuning import Record
        path = os.fspath(path)
        loaded = _read_cache_file(path)
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
    from cudnn_py.tuning import default_database
    return default_database()


algorithm_cache = AlgorithmCache(_default_database)
"""The process-wide cache that the legacy calls' ``autotune=True`` (``algo="fastest"``) fills, kept in
:func:`cudnn_py.tuning.default_database`."""


# ---------------------------------------------------------------- port of the removed selectors

# one definition of the removed preference enums, in removed.py (capi exports the same objects)
from .removed import (  # noqa: E402
    cudnnConvolutionBwdDataPreference_t, cudnnConvolutionBwdFilterPreference_t, cudnnConvolutionFwdPreference_t)

CUDNN_CONVOLUTION_FWD_NO_WORKSPACE, CUDNN_CONVOLUTION_FWD_PREFER_FASTEST, \
    CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT = cudnnConvolutionFwdPreference_t
CUDNN_CONVOLUTION_BWD_DATA_NO_WORKSPACE, CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST, \
    CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT = cudnnConvolutionBwdDataPreference_t
CUDNN_CONVOLUTION_BWD_FILTER_NO_WORKSPACE, CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST, \
    CUDNN_CONVOLUTION_BWD_FILTER_SPECIFY_WORKSPACE_LIMIT = cudnnConvolutionBwdFilterPreference_t

_PREF_TYPES = {"forward": cudnnConvolutionFwdPreference_t, "backward_data": cudnnConvolutionBwdDataPreference_t,
               "backward_filter": cudnnConvolutionBwdFilterPreference_t}


def select_algorithm(records: Iterable[AlgoPerf], limit: int | None = None, sizes=None,
                     deterministic: bool = False) -> AlgoPerf:
    """The first supported record (deterministic if asked) whose workspace is at most ``limit`` bytes.

    ``limit=None`` accepts any size; ``sizes(record)`` overrides the records' own workspace figures
    (a :class:`CudnnError` from it rejects that record). Raises :class:`WorkspaceLimitError` when only
    the limit stood in the way, else :class:`CudnnNotSupportedError` listing why each was rejected.
    """
    rejected, too_big, direction = [], False, "convolution"
    for r in records:
        direction = r.direction
        if not r.supported:
            rejected.append(f"{r.algo.name}: {getattr(r.status, 'name', r.status)}")
            continue
        if deterministic and not r.deterministic:
            rejected.append(f"{r.algo.name}: not deterministic")
            continue
        try:
            need = sizes(r) if sizes is not None else r.memory_bytes
        except CudnnError as e:
            rejected.append(f"{r.algo.name}: {e}")
            continue
        if limit is None or need <= limit:
            return r
        too_big = True
        rejected.append(f"{r.algo.name}: needs {need} B of workspace")
    detail = "; ".join(rejected) or "cuDNN returned no algorithm"
    if too_big:
        raise WorkspaceLimitError(f"no {direction} algorithm fits a workspace limit of {limit} B ({detail})")
    raise CudnnNotSupportedError(f"select {direction} algorithm", capi.CUDNN_STATUS_NOT_SUPPORTED,
                                 f"no usable algorithm ({detail})")


def _choose(direction, handle, a, b, conv, c, preference, memory_limit, measured):
    pref_type = _PREF_TYPES[direction]
    try:
        pref = pref_type(preference)
    except ValueError:
        raise InvalidValueError(f"preference {preference!r}: expected one of {[m.name for m in pref_type]}") from None
    if pref.name.endswith("SPECIFY_WORKSPACE_LIMIT"):
        if int(memory_limit) < 0:
            raise InvalidValueError(f"memory_limit must be >= 0 bytes, got {memory_limit}")
        limit = int(memory_limit)
    else:
        limit = 0 if pref.name.endswith("NO_WORKSPACE") else None
    records = (find_algorithms if measured else heuristic_algorithms)(handle, direction, a, b, conv, c)
    # _v7 does not promise a workspace figure per entry: ask for the real size when it matters.
    sizes = None if measured or limit is None else (lambda r: workspace_size(handle, direction, a, b, conv, c, r.algo))
    return select_algorithm(records, limit, sizes).algo


def choose_forward_algorithm(handle: Handle | capi.cudnnHandle_t, x_desc: Any, w_desc: Any, conv_desc: Any, y_desc: Any,
                             preference: int = cudnnConvolutionFwdPreference_t.CUDNN_CONVOLUTION_FWD_PREFER_FASTEST,
                             memory_limit: int = 0, *, measured: bool = False) -> enum.IntEnum:
    """The forward algorithm cuDNN 7's ``cudnnGetConvolutionForwardAlgorithm`` would have chosen.

    :param handle: a :class:`~cudnn_py.Handle` (or its ``cudnnHandle_t``).
    :param x_desc, w_desc, conv_desc, y_desc: the input, filter, convolution and output descriptors.
    :param preference: a :class:`cudnnConvolutionFwdPreference_t` (no workspace, fastest, or under a limit).
    :param memory_limit: bytes, used with ``..._SPECIFY_WORKSPACE_LIMIT``.
    :param measured: rank with ``Find`` timings instead of the ``..._v7`` heuristics.
    :returns: the chosen ``cudnnConvolutionFwdAlgo_t``.
    """
    return _choose("forward", handle, x_desc, w_desc, conv_desc, y_desc, preference, memory_limit, measured)


def choose_backward_data_algorithm(handle: Handle | capi.cudnnHandle_t, w_desc: Any, dy_desc: Any, conv_desc: Any,
                                   dx_desc: Any,
                                   preference: int = (cudnnConvolutionBwdDataPreference_t
                                                      .CUDNN_CONVOLUTION_BWD_DATA_PREFER_FASTEST),
                                   memory_limit: int = 0, *, measured: bool = False) -> enum.IntEnum:
    """Backward-data counterpart of :func:`choose_forward_algorithm`.

    :param handle, w_desc, dy_desc, conv_desc, dx_desc: the handle and the filter, output-gradient, convolution
        and input-gradient descriptors.
    :param preference, memory_limit, measured: as for :func:`choose_forward_algorithm`.
    :returns: the chosen ``cudnnConvolutionBwdDataAlgo_t``.
    """
    return _choose("backward_data", handle, w_desc, dy_desc, conv_desc, dx_desc, preference, memory_limit, measured)


def choose_backward_filter_algorithm(handle: Handle | capi.cudnnHandle_t, x_desc: Any, dy_desc: Any, conv_desc: Any,
                                     dw_desc: Any,
                                     preference: int = (cudnnConvolutionBwdFilterPreference_t
                                                        .CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST),
                                     memory_limit: int = 0, *, measured: bool = False) -> enum.IntEnum:
    """Backward-filter counterpart of :func:`choose_forward_algorithm`.

    :param handle, x_desc, dy_desc, conv_desc, dw_desc: the handle and the input, output-gradient, convolution and
        filter-gradient descriptors.
    :param preference, memory_limit, measured: as for :func:`choose_forward_algorithm`.
    :returns: the chosen ``cudnnConvolutionBwdFilterAlgo_t``.
    """
    return _choose("backward_filter", handle, x_desc, dy_desc, conv_desc, dw_desc, preference, memory_limit,
                   measured)


def _store(out, algo):
    if out is not None:
        getattr(out, "_obj", out).value = int(algo)
    return algo


def cudnnGetConvolutionForwardAlgorithm(handle, xDesc, wDesc, convDesc, yDesc, preference, memoryLimitInBytes, algo=None):
    """The C signature of the function removed in cuDNN 8, on :func:`choose_forward_algorithm`.

    Returns the algorithm; if ``algo`` (a ``ctypes.c_int`` or ``byref`` of one) is given it is written there too.
    """
    return _store(algo, choose_forward_algorithm(handle, xDesc, wDesc, convDesc, yDesc, preference, memoryLimitInBytes))


def cudnnGetConvolutionBackwardDataAlgorithm(handle, wDesc, dyDesc, convDesc, dxDesc, preference, memoryLimitInBytes,
                                             algo=None):
    """The C signature of the function removed in cuDNN 8, on :func:`choose_backward_data_algorithm`."""
    return _store(algo, choose_backward_data_algorithm(handle, wDesc, dyDesc, convDesc, dxDesc, preference,
                                                       memoryLimitInBytes))


def cudnnGetConvolutionBackwardFilterAlgorithm(handle, xDesc, dyDesc, convDesc, dwDesc, preference,
                                               memoryLimitInBytes, algo=None):
    """The C signature of the function removed in cuDNN 8, on :func:`choose_backward_filter_algorithm`."""
    return _store(algo, choose_backward_filter_algorithm(handle, xDesc, dyDesc, convDesc, dwDesc, preference,
                                                         memoryLimitInBytes))


# ---------------------------------------------------------------- choosing the algorithm of a call

#: the words ``algo=`` takes besides an algorithm: the first suitable heuristic record, or the fastest measured one
ALGO_CHOICES = ("heuristic", "fastest")

#: the algorithms cuDNN documents as non-deterministic, by direction (refused with ``deterministic=True``)
NONDETERMINISTIC = {"backward_data": frozenset({"CUDNN_CONVOLUTION_BWD_DATA_ALGO_0"}),
                    "backward_filter": frozenset({"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0",
                                                  "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3"})}


def is_choice(spec: Any) -> bool:
    """Whether ``algo=spec`` asks for a choice (:data:`ALGO_CHOICES`, any case) rather than naming an algorithm."""
    return isinstance(spec, str) and spec.lower() in ALGO_CHOICES


def allowed_by_math_type(records: Iterable[AlgoPerf], math_type) -> list[AlgoPerf]:
    """The records whose math type the requested ``math_type`` allows (DEFAULT also allows TENSOR_OP; FMA and the
    conversion mode only themselves); all records, relabelled ``math_type``, if cuDNN labelled none of them so."""
    records = list(records)
    allowed = {int(math_type)}
    if math_type == capi.CUDNN_DEFAULT_MATH:
        allowed.add(int(capi.CUDNN_TENSOR_OP_MATH))
    kept = [r for r in records if int(r.math_type) in allowed]
    return kept or [replace(r, math_type=math_type) for r in records]


def find_workspace(handle, needs: Iterable[int], limit: int | None) -> tuple[int | None, int]:
    """(pointer, bytes) of the workspace for ``Find...Ex``: the largest of the algorithms' ``needs``, capped at
    ``limit``, from ``handle.workspace``. When that much device memory cannot be had, the next smaller need is tried,
    down to none (cuDNN then reports the algorithms needing more as failing, and the choice falls on the others)."""
    for nbytes in sorted({n if limit is None else min(n, limit) for n in needs}, reverse=True):
        if nbytes == 0:
            break
        try:
            return handle.workspace.get(nbytes, handle.stream), nbytes
        except Exception:  # noqa: BLE001 - cuda.core's CUDAError (out of device memory): try a smaller need
            continue
    return None, 0


def measure_algorithms(handle, direction: str, a, a_ptr: int, b, b_ptr: int, conv, c, c_nbytes: int,
                       limit: int | None) -> list[AlgoPerf]:
    """``Find...Ex`` on the inputs at ``a_ptr``/``b_ptr``, a scratch output of ``c_nbytes`` bytes (on the handle's
    device and stream) and the workspace :func:`find_workspace` gets under ``limit``; descriptors in cuDNN's order."""
    from cudnn_py.memory import empty
    needs = []
    for algo in real_members(direction):
        try:
            needs.append(workspace_size(handle, direction, a, b, conv, c, algo))
        except CudnnError:  # unsupported here; Find will say so in its records
            continue
    scratch = empty((c_nbytes,), "uint8", stream=handle.stream, device=handle.device)
    ws_ptr, ws_bytes = find_workspace(handle, needs, limit)
    return find_algorithms_ex(handle, direction, a, a_ptr, b, b_ptr, conv, c, scratch.ptr, ws_ptr, ws_bytes)


def resolve_algorithm(handle, direction: str, spec: Any, descs: tuple, conv_desc: Callable[[Any], Any], math_type, *,
                      deterministic: bool = False, limit: int | None = None, cache_key: tuple | None = None,
                      measure: Callable[[], list[AlgoPerf]] | None = None, problem: str = "") -> tuple[Any, Any, int]:
    """The algorithm, math type and workspace bytes a call of ``direction`` runs with.

    :param spec: an algorithm (enum member, int or name), ``"heuristic"`` (the first suitable ``..._v7`` record) or
        ``"fastest"`` (the best record of ``measure()``, remembered in :data:`algorithm_cache` under ``cache_key``).
    :param descs: the (a, b, c) descriptors in cuDNN's argument order.
    :param conv_desc: the convolution descriptor for a math type (``conv_desc(math_type)``).
    :param math_type: the requested ``cudnnMathType_t``; records of other math types are used only as
        :func:`allowed_by_math_type` allows.
    :param deterministic: refuse non-deterministic algorithms.
    :param limit: the most workspace bytes allowed (None: any).
    :param problem: the configuration in words, for the error an unsupported explicit algorithm raises.
    :raises WorkspaceLimitError: when only the limit stands in the way.
    """
    a, b, c = descs
    if is_choice(spec):
        def size(r):
            return workspace_size(handle, direction, a, b, conv_desc(r.math_type), c, r.algo)
        if spec.lower() == "heuristic":
            records = heuristic_algorithms(handle, direction, a, b, conv_desc(math_type), c)
            chosen = select_algorithm(allowed_by_math_type(records, math_type), limit, size, deterministic)
            return chosen.algo, chosen.math_type, size(chosen)
        if measure is None or cache_key is None:
            raise InvalidValueError("algo='fastest' needs a measure() and a cache_key")
        best = algorithm_cache.get(cache_key)
        if best is None:
            best = select_algorithm(allowed_by_math_type(measure(), math_type), limit, None, deterministic)
            algorithm_cache.put(cache_key, best)
        return best.algo, best.math_type, size(best)
    algo = parse_algo(direction, spec)
    if deterministic and algo.name in NONDETERMINISTIC.get(direction, ()):
        raise InvalidValueError(f"{algo.name} is not deterministic; drop deterministic=True or choose another "
                                f"algorithm")
    try:
        need = workspace_size(handle, direction, a, b, conv_desc(math_type), c, algo)
    except CudnnError as e:  # cuDNN's way of saying "this algorithm does not do this configuration"
        raise type(e)(e.function, e.status, f"{algo.name} does not support this {direction} configuration "
                      f"({problem}, math {math_type.name}); cuDNN says: {e.reason or 'no reason given'}") from None
    if limit is not None and need > limit:
        raise WorkspaceLimitError(f"{algo.name} needs {need} B of workspace; the limit is {limit} B")
    return algo, math_type, need
