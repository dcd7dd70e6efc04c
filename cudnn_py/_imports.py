"""One process-wide lock for cudnn_py's lazy imports (:data:`LOCK`; why: docs/design.md, "Threads and
devices"), and the paths modules had before they moved (:data:`MOVED`: ``import cudnn_py.memory`` gives
:mod:`cudnn_py.core.memory` itself). It imports nothing of cudnn_py, so the package and its handle module can use it.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

__all__ = ["LOCK", "import_module", "locked", "warm_imports", "WARM", "MOVED"]

#: the one lock every lazy import of cudnn_py runs under (reentrant: an import may import)
LOCK = threading.RLock()

#: what the operation families import at call time (in-function imports), imported by :func:`warm_imports`
WARM = tuple(f"cudnn_py.{m}" for m in (
    "capi", "clib.log", "clib.nvtx", "removed", "clib.status", "calls.defaults", "core.args", "core.memory",
    "core.streams", "calls.algorithms", "tuning_records", "tuning_records.database", "calls.fastest_cache",
    "calls.engine_choice", "graph", "graph.descriptors", "graph.errors", "graph.graph", "graph.plans", "graph.execute",
    "graph.runner", "graph.conv", "graph.legacy", "ops._common", "ops.dropout"))

_warm = False


def _importing_cudnn_py() -> bool:
    """Whether this thread is inside the import of a cudnn_py module (holding Python's lock of that module)."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib"):
            name = f.f_locals.get("name")
            if isinstance(name, str) and (name == "cudnn_py" or name.startswith("cudnn_py.")):
                return True
        f = f.f_back  # type: ignore[assignment]
    return False


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Hold :data:`LOCK` (one uncontended acquire, usually). Against a deadlock, a thread inside the plain ``import``
    of a cudnn_py module (holding Python's lock of it) goes on without :data:`LOCK` while another thread holds it:
    that thread may be waiting for that very module."""
    if LOCK.acquire(blocking=False):
        try:
            yield
        finally:
            LOCK.release()
        return
    if _importing_cudnn_py():
        yield
        return
    with LOCK:
        yield


def import_module(name: str, package: str | None = None) -> ModuleType:
    """:func:`importlib.import_module` under :data:`LOCK`."""
    module = sys.modules.get(name) if package is None else None
    if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
        return module
    with locked():
        return importlib.import_module(name, package)


def warm_imports() -> None:
    """Import, once per process and under :data:`LOCK`, every module the operation families import lazily."""
    global _warm
    if _warm:
        return
    with locked():
        if _warm:
            return
        for name in WARM:
            importlib.import_module(name)
        _warm = True


#: modules' paths before they moved into the C runtime, core and call packages -> where they are now
MOVED = {f"cudnn_py.{old}": f"cudnn_py.{new}" for old, new in (
    *((f"_{m}", f"clib.{m}") for m in ("binding", "install", "loader", "status")),
    *((m, f"clib.{m}") for m in ("log", "nvtx", "recording")),
    *((m, f"core.{m}") for m in ("args", "caches", "contexts", "conv_layout", "descriptors", "dlpack", "dtypes",
                                  "foreign", "handle", "memory", "streams", "strided", "workspace")),
    ("_defaults", "calls.defaults"),
    *((m, f"calls.{m}") for m in ("algorithm_queries", "algorithms", "engine_choice", "fastest_cache", "prepared")),
    *((f"tuning.{m}", f"tuning_records.{m}") for m in ("database", "fingerprint", "models")),
)}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a module by its path before the move and gives the moved module itself (one object, two names)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        module = import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import sets the old name's spec on the module: exec_module undoes it
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state


sys.meta_path.append(_Moved())
