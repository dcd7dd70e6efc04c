"""The tuning database: one SQLite file (WAL journal) holding everything cudnn-py measures, shared by processes and
machines. A record is a JSON object under ``(kind, key, environment)``; a lookup sees only its own environment's
records. Schema, kinds, where the file lives and what is not trusted (digests, foreign or damaged files, read-only
locations): docs/tuning.md, "The database".
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from cudnn_py.errors import CudnnPyError, InvalidTypeError, InvalidValueError

from .fingerprint import Environment, environment

__all__ = ["TuningDatabase", "TuningDatabaseError", "TuningWarning", "Record", "default_database",
           "set_default_database", "default_path", "open_database", "SCHEMA_VERSION", "FILE_NAME"]

#: the layout this module reads and writes; a file with a larger number is refused
SCHEMA_VERSION = 1
#: ``PRAGMA application_id`` of our files ("cdTD"): another program's SQLite file is not mistaken for one
APPLICATION_ID = 0x63645444
#: the database's file name inside a directory (the plan store's)
FILE_NAME = "tuning.sqlite"
MAX_KEY_CHARS = 1 << 16
MAX_VALUE_BYTES = 64 << 20

_TABLES = {
    "environments": "CREATE TABLE environments(id INTEGER PRIMARY KEY, cudnn TEXT NOT NULL, gpu TEXT NOT NULL, "
                    "cc TEXT NOT NULL, driver TEXT NOT NULL, UNIQUE(cudnn, gpu, cc, driver))",
    "records": "CREATE TABLE records(kind TEXT NOT NULL, key TEXT NOT NULL, env INTEGER NOT NULL "
               "REFERENCES environments(id), value TEXT NOT NULL, digest TEXT NOT NULL, updated REAL NOT NULL, "
               "writer TEXT NOT NULL, PRIMARY KEY(kind, key, env)) WITHOUT ROWID",
    "imports": "CREATE TABLE imports(source TEXT PRIMARY KEY, records INTEGER NOT NULL, at REAL NOT NULL)",
}
#: writes one record (an upsert: a ``WHERE`` may follow, on the stored row ``records`` and the new one ``excluded``)
_PUT = ("INSERT INTO records(kind, key, env, value, digest, updated, writer) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(kind, key, env) DO UPDATE SET value = excluded.value, digest = excluded.digest, "
        "updated = excluded.updated, writer = excluded.writer")
#: an environment's id, by its four fields
_ENV_ID = "SELECT id FROM environments WHERE cudnn = ? AND gpu = ? AND cc = ? AND driver = ?"
_DEGRADE = ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_AUTH")


class TuningDatabaseError(CudnnPyError, RuntimeError):
    """A tuning database that cannot be used: not ours, damaged, truncated, from a newer schema, or locked."""


class TuningWarning(RuntimeWarning):
    """A record ignored (it did not answer its key) or a database kept in memory instead of its file."""


@dataclass(frozen=True)
class Record:
    """One stored measurement, as :meth:`TuningDatabase.records` lists them."""

    kind: str
    key: str
    environment: Environment
    value: dict
    updated: float   #: seconds since the epoch
    writer: str      #: ``host:pid`` of the process that wrote it


def _code(e: sqlite3.Error) -> str:
    """SQLite's error name (``SQLITE_BUSY``...) of an exception, guessed from the message before Python 3.11."""
    name = getattr(e, "sqlite_errorname", None)
    if name:
        return name
    text = str(e).lower()
    for words, code in (("locked", "SQLITE_BUSY"), ("readonly", "SQLITE_READONLY"), ("unable to open",
                        "SQLITE_CANTOPEN"), ("not a database", "SQLITE_NOTADB"), ("malformed", "SQLITE_CORRUPT"),
                        ("disk i/o", "SQLITE_IOERR"), ("full", "SQLITE_FULL")):
        if words in text:
            return code
    return "SQLITE_ERROR"


def _digest(kind: str, key: str, env: Environment, value: str) -> str:
    text = "\0".join((str(SCHEMA_VERSION), kind, key, *env.fields(), value))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _check_kind(kind) -> str:
    if not isinstance(kind, str):
        raise InvalidTypeError(f"kind must be a str, got {type(kind).__name__}")
    if not kind or len(kind) > 64 or not kind.replace("_", "").replace(".", "").isalnum() or not kind.isascii():
        raise InvalidValueError(f"kind must be 1-64 ASCII letters, digits, '_' or '.', got {kind!r}")
    return kind


def _check_key(key) -> str:
    if not isinstance(key, str):
        raise InvalidTypeError(f"key must be a str, got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_CHARS:
        raise InvalidValueError(f"key must be 1 to {MAX_KEY_CHARS} characters, got {len(key)}")
    return key


def _dump(value) -> str:
    if not isinstance(value, dict):
        raise InvalidTypeError(f"value must be a dict (a JSON object), got {type(value).__name__}")
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidValueError(f"value must be JSON data (str keys; numbers finite): {e}") from None
    if len(text) > MAX_VALUE_BYTES:
        raise InvalidValueError(f"value is {len(text)} characters as JSON; the most a record holds is "
                                f"{MAX_VALUE_BYTES}")
    return text


def _writer() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _current_device() -> int:
    """The device of the calling thread's current CUDA context (0 when none is current, or no driver)."""
    try:
        from cuda.bindings import driver
        err, dev = driver.cuCtxGetDevice()
        return int(dev) if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:  # noqa: BLE001 - no CUDA here
        return 0


class TuningDatabase:
    """An open tuning database (thread-safe; one connection per process, reopened after ``fork``).

    :param path: the file, or None / ``":memory:"`` for one held in memory. Its folder must exist; a file that does
        not exist yet is created by the first write (reads find nothing until then), so a refused call leaves none.
    :param environment: the fingerprint records are made and looked up under (default: the calling device's).
    :param timeout: seconds a write waits for another process's transaction before :class:`TuningDatabaseError`.
    :raises TuningDatabaseError: when the file is not a cudnn-py tuning database, is damaged or truncated, or was
        written by a newer schema; when ``path`` is a directory or its folder does not exist.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, environment: Environment | None = None,
                 timeout: float = 30.0):
        if environment is not None and not isinstance(environment, Environment):
            raise InvalidTypeError(f"environment must be an Environment, got {type(environment).__name__}")
        where = None if path is None else os.fspath(path)
        self._path: Path | None = None if where in (None, ":memory:") else Path(str(where)).expanduser().absolute()
        if self._path is not None:
            if self._path.is_dir():
                raise TuningDatabaseError(f"tuning database {where}: a directory; name a file, e.g. "
                                          f"{os.path.join(str(where), FILE_NAME)}")
            if not self._path.parent.is_dir():
                raise TuningDatabaseError(f"tuning database {where}: the folder {self._path.parent} does not exist "
                                          f"(create it first)")
        self._fixed_env = environment
        self._timeout = float(timeout)
        self._lock = threading.RLock()
        self._env_ids: dict[Environment, int] = {}
        #: why the database is kept in memory instead of its file ('' when it is not)
        self.degraded = ""
        self._closed = False
        #: None until a file that did not exist is first written (reads use _empty meanwhile)
        self._conn: sqlite3.Connection | None = None if self._path is not None and not self._path.exists() \
            else self._connect()
        self._empty: sqlite3.Connection | None = None
        self._pid = os.getpid()

    # -- opening ---------------------------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """The file, or None for a database held in memory."""
        return self._path

    @property
    def in_memory(self) -> bool:
        """Whether nothing reaches a file (asked for, or degraded: see :attr:`degraded`)."""
        return self._path is None or bool(self.degraded)

    def _raw_connect(self, target: str, uri: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=self._timeout, isolation_level=None, check_same_thread=False,
                               uri=uri)
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        return conn

    def _connect(self) -> sqlite3.Connection:
        if self._path is None:
            return self._prepare(self._raw_connect(":memory:"))
        try:
            conn = self._raw_connect(str(self._path))
        except sqlite3.Error as e:
            return self._degrade(str(e))
        try:
            return self._prepare(conn)
        except sqlite3.Error as e:
            conn.close()
            if _code(e).startswith(_DEGRADE):
                return self._degrade(str(e))
            raise self._refusal(e) from None
        except BaseException:
            conn.close()
            raise

    def _refusal(self, e: sqlite3.Error) -> TuningDatabaseError:
        code = _code(e)
        if code.startswith("SQLITE_BUSY"):
            return TuningDatabaseError(f"tuning database {self._path}: locked by another process for more than "
                                       f"{self._timeout:g} s")
        return TuningDatabaseError(f"tuning database {self._path}: damaged, truncated or not an SQLite file "
                                   f"({code}: {e}); move it away or delete it (it is only a cache of measurements)")

    def _degrade(self, reason: str) -> sqlite3.Connection:
        """Keep working in memory, starting from the file's content when it can still be read."""
        self.degraded = reason
        warnings.warn(f"tuning database {self._path} cannot be written ({reason}); this process keeps its "
                      f"measurements in memory", TuningWarning, stacklevel=4)
        mem = self._raw_connect(":memory:")
        if self._path is not None and self._path.is_file():
            try:
                src = self._raw_connect(f"file:{quote(str(self._path))}?mode=ro&immutable=1", uri=True)
                try:
                    self._check(src)
                    src.backup(mem)
                finally:
                    src.close()
            except sqlite3.Error as e:
                mem.close()
                raise self._refusal(e) from None
        return self._prepare(mem)

    def _check(self, conn: sqlite3.Connection) -> int:
        """The file's schema version, after refusing a foreign, newer or damaged file."""
        conn.execute("BEGIN")  # one snapshot: another process may be creating the file meanwhile
        try:
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        where = self._path or "(memory)"
        if app != APPLICATION_ID and (app != 0 or tables):
            raise TuningDatabaseError(f"tuning database {where}: an SQLite file of another program "
                                      f"(application_id {app:#x}); not a cudnn-py tuning database")
        if version > SCHEMA_VERSION:
            raise TuningDatabaseError(f"tuning database {where}: written with schema {version} by a newer cudnn-py; "
                                      f"this one reads schema {SCHEMA_VERSION} and below (upgrade cudnn-py, or use "
                                      f"another file)")
        if app == APPLICATION_ID and (version < 1 or not set(_TABLES) <= tables):
            raise TuningDatabaseError(f"tuning database {where}: incomplete (schema {version}, tables "
                                      f"{sorted(tables)}); damaged")
        problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise TuningDatabaseError(f"tuning database {where}: damaged or truncated ({'; '.join(problems[:3])}); "
                                      f"move it away or delete it")
        return version

    def _prepare(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        if self._check(conn) < 1:
            if self._path is not None and not self.degraded:
                self._wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute("PRAGMA user_version").fetchone()[0] < 1:   # not made meanwhile by another process
                    for sql in _TABLES.values():
                        conn.execute(sql)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: a killed process loses nothing committed
        return conn

    def _wal(self, conn: sqlite3.Connection) -> None:
        """``PRAGMA journal_mode = WAL`` (persistent; readers never block writers), retried for up to the timeout
        while another process creating the file holds it (SQLite answers ``SQLITE_BUSY`` at once, without waiting)."""
        end = time.monotonic() + self._timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if not _code(e).startswith("SQLITE_BUSY") or time.monotonic() > end:
                    raise
                time.sleep(0.005)

    def _connection(self, write: bool) -> sqlite3.Connection:
        if self._closed:
            raise TuningDatabaseError(f"tuning database {self._path or '(memory)'} is closed")
        if self._pid != os.getpid():  # a forked child: SQLite connections do not cross fork
            self._conn = self._empty = None
            self._pid = os.getpid()
        if self._conn is None:
            if not write and self._path is not None and not self._path.exists():  # not made yet, by us or others
                if self._empty is None:
                    self._empty = self._prepare(self._raw_connect(":memory:"))
                return self._empty
            self._conn = self._connect()
        return self._conn

    # -- environments ----------------------------------------------------------------------------------------

    def environment(self, device: int | None = None) -> Environment:
        """The fingerprint records are made under on ``device`` (default: the current context's device)."""
        if self._fixed_env is not None:
            return self._fixed_env
        return environment(_current_device() if device is None else int(device))

    def _env_id(self, conn: sqlite3.Connection, env: Environment) -> int:
        """The id of ``env`` (made where new: inside a write)."""
        got = self._env_ids.get(env)
        if got is None:
            conn.execute("INSERT OR IGNORE INTO environments(cudnn, gpu, cc, driver) VALUES (?, ?, ?, ?)", env.fields())
            got = self._env_ids[env] = conn.execute(_ENV_ID, env.fields()).fetchone()[0]
        return got

    def environments(self) -> list[Environment]:
        """Every environment the database holds records of."""
        rows = self._run(lambda c: c.execute("SELECT DISTINCT e.cudnn, e.gpu, e.cc, e.driver FROM records r "
                                             "JOIN environments e ON e.id = r.env ORDER BY 1, 2, 3, 4").fetchall())
        return [Environment(*r) for r in rows]

    # -- reading and writing ---------------------------------------------------------------------------------

    def _run(self, fn: Callable[[sqlite3.Connection], object], write: bool = False):
        """``fn(connection)``, in an immediate transaction when ``write``; SQLite errors become ours."""
        with self._lock:
            conn = self._connection(write)
            try:
                if not write:
                    return fn(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    self._env_ids.clear()   # ids made in the rolled-back transaction are gone
                    raise
                return out
            except sqlite3.Error as e:
                if write and _code(e).startswith(_DEGRADE) and not self.in_memory:
                    conn.close()
                    self._conn = self._degrade(str(e))
                    self._env_ids.clear()
                    return self._run(fn, write)
                raise self._refusal(e) from None

    def record(self, kind: str, key: str, value: dict, *, device: int | None = None) -> None:
        """Store ``value`` (a JSON object) under ``(kind, key)`` and the environment of ``device``, replacing what
        was there (one transaction); InvalidTypeError or InvalidValueError for what the database cannot hold."""
        kind, key, text = _check_kind(kind), _check_key(key), _dump(value)
        env = self.environment(device)
        rest = (text, _digest(kind, key, env, text), time.time(), _writer())
        self._run(lambda c: c.execute(_PUT, (kind, key, self._env_id(c, env), *rest)), write=True)

    def lookup(self, kind: str, key: str, *, device: int | None = None) -> dict | None:
        """The value stored under ``(kind, key)`` for the environment of ``device``, or None (also for a record
        whose digest does not match: it is deleted with a :class:`TuningWarning`, so the caller measures again)."""
        kind, key = _check_kind(kind), _check_key(key)
        env = self.environment(device)
        row = self._run(lambda c: c.execute(f"SELECT value, digest FROM records WHERE kind = ? AND key = ? AND env = "
                                            f"({_ENV_ID})", (kind, key, *env.fields())).fetchone())
        if row is None:
            return None
        value = self._verified(kind, key, env, *row)
        if value is None:
            self.discard(kind, key, device=device)
        return value

    def _verified(self, kind: str, key: str, env: Environment, text: str, digest: str) -> dict | None:
        if digest != _digest(kind, key, env, text):
            problem = "its digest does not match its kind, key, environment and value"
        else:
            try:
                value = json.loads(text)
                if isinstance(value, dict):
                    return value
                problem = "its value is not a JSON object"
            except (ValueError, RecursionError) as e:
                problem = f"its value is not JSON ({e})"
        warnings.warn(f"tuning database {self._path or '(memory)'}: ignoring the {kind} record for "
                      f"{key[:160]!r}: {problem}; it will be measured again", TuningWarning, stacklevel=4)
        return None

    def discard(self, kind: str, key: str, *, device: int | None = None) -> None:
        """Delete the record under ``(kind, key)`` for the environment of ``device`` (nothing if there is none)."""
        args = (_check_kind(kind), _check_key(key), *self.environment(device).fields())
        self._run(lambda c: c.execute(f"DELETE FROM records WHERE kind = ? AND key = ? AND env = ({_ENV_ID})", args),
                  write=True)

    def clear(self, kind: str | None = None) -> int:
        """Delete every record of ``kind`` (None: of every kind), in every environment; returns how many."""
        args = () if kind is None else (_check_kind(kind),)
        return self._run(lambda c: c.execute("DELETE FROM records" + (" WHERE kind = ?" if args else ""),
                                             args).rowcount, write=True)

    def records(self, kind: str | None = None, environment: Environment | None = None) -> list[Record]:
        """The verified records of ``kind`` (None: every kind) made under ``environment`` (None: any), ordered by
        kind and key; records that fail their digest are left out with a :class:`TuningWarning`."""
        sql = ("SELECT r.kind, r.key, e.cudnn, e.gpu, e.cc, e.driver, r.value, r.digest, r.updated, r.writer "
               "FROM records r JOIN environments e ON e.id = r.env")
        where, args = [], []
        if kind is not None:
            where.append("r.kind = ?")
            args.append(_check_kind(kind))
        if environment is not None:
            where.append("e.cudnn = ? AND e.gpu = ? AND e.cc = ? AND e.driver = ?")
            args.extend(environment.fields())
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.kind, r.key, e.id"
        rows = self._run(lambda c: c.execute(sql, args).fetchall())
        out = []
        for k, key, cudnn, gpu, cc, driver, text, digest, updated, writer in rows:
            env = Environment(cudnn, gpu, cc, driver)
            value = self._verified(k, key, env, text, digest)
            if value is not None:
                out.append(Record(k, key, env, value, updated, writer))
        return out

    def put_records(self, records: Iterable[Record], *, source: str | None = None, newer_only: bool = True) -> int:
        """Write ``records`` (each under its own environment) in one transaction; returns how many were written.
        ``source`` names the batch (an imported file or folder): one imported before is skipped. ``newer_only``:
        keep a stored record newer than the incoming one (what merging wants)."""
        batch = [(_check_kind(r.kind), _check_key(r.key), r.environment, _dump(r.value), float(r.updated), r.writer)
                 for r in records]

        def write(c):
            if source is not None and c.execute("SELECT 1 FROM imports WHERE source = ?", (source,)).fetchone():
                return 0
            sql = _PUT + (" WHERE excluded.updated > records.updated" if newer_only else "")
            n = sum(c.execute(sql, (kind, key, self._env_id(c, env), text, _digest(kind, key, env, text),
                                    updated, writer)).rowcount for kind, key, env, text, updated, writer in batch)
            if source is not None:
                c.execute("INSERT INTO imports(source, records, at) VALUES (?, ?, ?)", (source, n, time.time()))
            return n
        return self._run(write, write=True)

    def imported(self, source: str) -> bool:
        """Whether a batch named ``source`` was written by :meth:`put_records` before."""
        return self._run(lambda c: c.execute("SELECT 1 FROM imports WHERE source = ?", (source,)).fetchone()) \
            is not None

    def merge(self, other: str | os.PathLike | TuningDatabase) -> int:
        """Copy every verified record of another database (a path or an open one) in, the newer of two records of
        one key winning; returns how many records were written. A path that is not an existing file is refused
        (:class:`TuningDatabaseError`): opening it would create an empty database there."""
        if not isinstance(other, TuningDatabase) and not os.path.isfile(os.fspath(other)):
            raise TuningDatabaseError(f"tuning database {os.fspath(other)}: no such file to merge from")
        src = other if isinstance(other, TuningDatabase) else TuningDatabase(other)
        try:
            return self.put_records(src.records())
        finally:
            if src is not other:
                src.close()

    def count(self, kind: str | None = None) -> int:
        """How many records of ``kind`` (None: of every kind) the database holds, in every environment."""
        args = () if kind is None else (_check_kind(kind),)
        return self._run(lambda c: c.execute("SELECT COUNT(*) FROM records" + (" WHERE kind = ?" if args else ""),
                                             args).fetchone()[0])

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` of the file: ``"ok"``, or what it found."""
        return "; ".join(r[0] for r in self._run(lambda c: c.execute("PRAGMA integrity_check").fetchall()))

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise :class:`TuningDatabaseError`."""
        with self._lock:
            if self._pid == os.getpid():
                for conn in (self._conn, self._empty):
                    if conn is not None:
                        conn.close()
            self._conn = self._empty = None
            self._closed = True

    def __enter__(self) -> "TuningDatabase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self._path is None else str(self._path) + (" (in memory: read-only)" if self.degraded
                                                                         else "")
        return f"<TuningDatabase {where}>"


# -- the process-wide database ---------------------------------------------------------------------------------

_registry: dict[str, TuningDatabase] = {}
_default: list[TuningDatabase | None] = [None]
_registry_lock = threading.Lock()


def default_path() -> str:
    """Where :func:`default_database` lives: ``$CUDNN_PY_TUNING_DB``, else ``tuning.sqlite`` in
    ``$CUDNN_PY_PLAN_CACHE_DIR``, else in the per-user cache directory."""
    explicit = os.environ.get("CUDNN_PY_TUNING_DB")
    if explicit:
        return explicit
    plans = os.environ.get("CUDNN_PY_PLAN_CACHE_DIR")
    if plans:
        return os.path.join(plans, FILE_NAME)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudnn_py", FILE_NAME)


def open_database(path: str | os.PathLike) -> TuningDatabase:
    """The process's one open database for the file at ``path`` (opened on first use; ``":memory:"`` gives a new
    database each call)."""
    if os.fspath(path) == ":memory:":
        return TuningDatabase(None)
    where = str(Path(os.fspath(path)).expanduser().absolute())
    with _registry_lock:
        got = _registry.get(where)
        if got is None or got._closed:
            got = _registry[where] = TuningDatabase(where)
        return got


def default_database() -> TuningDatabase:
    """The process-wide tuning database (:func:`default_path`), opened on first use."""
    got = _default[0]
    if got is None or got._closed:
        path = default_path()
        if not os.environ.get("CUDNN_PY_TUNING_DB"):  # the plan store's folder or the per-user cache: ours to make
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            except OSError as e:
                warnings.warn(f"tuning database {path}: cannot create its folder ({e.strerror or e}); this process "
                              f"keeps its measurements in memory", TuningWarning, stacklevel=2)
                path = ":memory:"
        got = _default[0] = open_database(path)
    return got


def set_default_database(database: TuningDatabase | str | os.PathLike | None) -> None:
    """Make ``database`` (an open one, or a path) the process-wide one; None goes back to :func:`default_path`,
    read again at the next :func:`default_database`."""
    if database is not None and not isinstance(database, TuningDatabase):
        database = open_database(database)
    _default[0] = database


def finite(ms) -> bool:
    """Whether ``ms`` is a time a record may hold: a finite number >= 0 (a helper for the layers' validators)."""
    return isinstance(ms, (int, float)) and not isinstance(ms, bool) and math.isfinite(ms) and ms >= 0
