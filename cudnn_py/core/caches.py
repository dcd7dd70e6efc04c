"""The one cache mechanism (docs/design.md, "Caches"): :class:`Cache`, a bounded, thread-safe ``dict``, bound to a
handle (:func:`handle_cache`) or shared by the process (:func:`shared`, :func:`info`, :func:`clear`)."""
from __future__ import annotations

import ctypes
import threading

from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["Cache", "handle_cache", "shared", "info", "clear"]

#: entries a cache keeps unless it is made with another bound
DEFAULT_MAXSIZE = 4096

_MISSING = object()


class Cache(dict):
    """A bounded, thread-safe ``dict`` called ``name``: inserting into a full cache (``maxsize``) drops its oldest
    entry first. Reads are plain ``dict`` reads; ``__setitem__``, ``setdefault``, ``pop`` and ``clear`` lock.

    ``front`` is a plain ``dict`` its user may keep beside the entries, holding shortcuts to them (the prepared
    calls' last hit per function): emptied whenever an entry leaves, so a shortcut never outlives its entry."""

    __slots__ = ("name", "maxsize", "front", "_lock", "__weakref__")

    def __init__(self, name: str, maxsize: int = DEFAULT_MAXSIZE):
        super().__init__()
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise InvalidValueError(f"maxsize must be a positive int, got {maxsize!r}")
        self.name = name
        self.maxsize = maxsize
        self.front: dict = {}
        self._lock = threading.Lock()

    def _insert(self, key, value) -> None:  # under the lock
        if key not in self:
            while len(self) >= self.maxsize:
                dict.__delitem__(self, next(iter(self)))
                self.front.clear()
        dict.__setitem__(self, key, value)

    def __setitem__(self, key, value) -> None:
        with self._lock:
            self._insert(key, value)

    def setdefault(self, key, default=None):
        """The value for ``key``, inserting ``default`` first if it is missing (atomically)."""
        got = self.get(key, _MISSING)
        if got is _MISSING:
            with self._lock:
                got = dict.get(self, key, _MISSING)
                if got is _MISSING:
                    self._insert(key, default)
                    got = default
        return got

    def pop(self, key, default=None):
        """Remove ``key`` and return its value (``default`` when missing)."""
        with self._lock:
            self.front.clear()
            return dict.pop(self, key, default)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self.front.clear()
            dict.clear(self)

    def update(self, *args, **kwargs) -> None:
        """Insert several entries, each as by ``cache[key] = value``."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __delitem__(self, key) -> None:
        with self._lock:
            self.front.clear()
            dict.__delitem__(self, key)

    def __repr__(self) -> str:
        return f"<cudnn_py.core.caches.Cache {self.name!r} {len(self)}/{self.maxsize}>"


_SHARED: dict[str, Cache] = {}
_RAW: dict[tuple[int | None, str], Cache] = {}
_REGISTRY_LOCK = threading.Lock()


def _cache_in(table: dict, key, name: str, maxsize: int) -> Cache:
    """``table[key]``, a :class:`Cache` called ``name`` made on first use (atomically)."""
    got = table.get(key)
    if got is None:
        with _REGISTRY_LOCK:
            got = table.get(key)
            if got is None:
                got = table[key] = Cache(name, maxsize)
    return got


def shared(name: str, maxsize: int = DEFAULT_MAXSIZE) -> Cache:
    """The process-wide cache called ``name`` (made on first use), for what no handle owns."""
    return _cache_in(_SHARED, name, name, maxsize)


def handle_cache(handle, name: str, maxsize: int = DEFAULT_MAXSIZE) -> Cache:
    """The cache called ``name`` of ``handle`` (made on first use), dropped when the handle closes: what is bound to
    a handle lives here, never keyed by a handle's address, which a new handle can reuse. A raw ``cudnnHandle_t``
    gets a process-wide cache keyed by its address, which its owner manages (:func:`clear` drops it)."""
    caches = getattr(handle, "cache", None)
    if caches is not None:
        return _cache_in(caches, name, name, maxsize)
    from cudnn_py import capi
    if not isinstance(handle, (capi.cudnnHandle_t, ctypes.c_void_p)):
        raise InvalidTypeError(f"handle must be a cudnn_py.Handle or a cudnnHandle_t, got {type(handle).__name__}")
    return _cache_in(_RAW, (ctypes.cast(handle, ctypes.c_void_p).value, name), name, maxsize)


def info() -> dict[str, int]:
    """Entries in each process-wide cache, by name (a handle's own caches: :meth:`Handle.cache_info`)."""
    return {name: len(c) for name, c in sorted(_SHARED.items())}


def clear() -> None:
    """Empty every process-wide cache and forget raw handles' caches (the C objects are freed once unreferenced)."""
    for c in list(_SHARED.values()):
        c.clear()
    with _REGISTRY_LOCK:
        _RAW.clear()
