"""No module of cudnn_py reads another module's private names (``_name``): what one module offers another is public and
documented. The import rules themselves (layers, no circles) are import-linter's contracts in ``.importlinter``.

The scan reads the source (no imports): for each hand-written module, every ``obj._name`` (not ``self._name`` or
``cls._name``) and every ``from module import _name`` whose ``_name`` the module does not define itself but another
module of the package does. The generated C layer (capi/) and its generator (codegen/) are left out.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cudnn_py"
SKIPPED = ("capi/", "codegen/")

#: (module, name) uses that remain, each to go with the change that renames it in the module holding the use
PENDING = {
    ("ops/attention.py", "_check_weights"), ("ops/rnn.py", "_check_weights"),  # ops/sequence_models.py's method
}


def _modules() -> dict[str, ast.Module]:
    return {p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(PACKAGE.rglob("*.py")) if not p.relative_to(PACKAGE).as_posix().startswith(SKIPPED)}


#: Python's own API with a leading underscore (named tuples'), not a module's private
PYTHON_API = {"_fields", "_field_defaults", "_replace", "_asdict", "_make"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PYTHON_API


def _defined(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, module and class attributes, ``self._x`` stores."""
    names: set[str] = set()

    def targets(body) -> None:
        for n in body:
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    names.update(e.id for e in ast.walk(t) if isinstance(e, ast.Name))
    targets(tree.body)
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            if isinstance(n, ast.ClassDef):
                targets(n.body)
        elif (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
              and n.value.id in ("self", "cls")):
            names.add(n.attr)
    return {n for n in names if _private(n)}


def _uses(tree: ast.Module):
    """(line, private name) of each ``obj._name`` and ``from module import _name`` in a module."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _private(n.attr):
            if not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")):
                yield n.lineno, n.attr
        elif isinstance(n, ast.ImportFrom):
            yield from ((n.lineno, a.name) for a in n.names if _private(a.name))


def _violations() -> list[str]:
    modules = _modules()
    defined = {path: _defined(tree) for path, tree in modules.items()}
    submodules = {Path(p).stem for p in modules} | {Path(p).parent.name for p in modules}
    found = []
    for path, tree in modules.items():
        others = set().union(*(names for p, names in defined.items() if p != path))
        for line, name in _uses(tree):
            if name in defined[path] or name in submodules or name not in others or (path, name) in PENDING:
                continue
            owners = sorted(p for p, names in defined.items() if name in names and p != path)
            found.append(f"cudnn_py/{path}:{line}: {name} (defined in {', '.join(owners)})")
    return found


def test_no_module_reads_another_modules_private_names():
    found = _violations()
    assert not found, "private names used across modules (give them a public, documented name):\n" + "\n".join(found)


def test_the_pending_uses_are_still_there():
    """An entry of PENDING whose use is gone is removed, so the list cannot hide a new one."""
    modules = _modules()
    gone = [entry for entry in PENDING
            if entry[0] not in modules or entry[1] not in {name for _, name in _uses(modules[entry[0]])}]
    assert not gone, f"remove from PENDING: {gone}"


@pytest.mark.parametrize("source, expected", [
    ("from cudnn_py.core.memory import DeviceArray\nDeviceArray._helper(1)\n", ["_helper"]),
    ("from cudnn_py.core.memory import _helper\n", ["_helper"]),
    ("class A:\n    def f(self):\n        return self._helper()\n", []),
    ("def _helper():\n    pass\nx = other._helper\n", []),
])
def test_the_scan_sees_a_foreign_private_name(source, expected):
    """The scan's two halves on small sources: what it reports as used, and what a module defining the name hides."""
    tree = ast.parse(source)
    used = [name for _, name in _uses(tree) if name not in _defined(tree)]
    assert used == expected


def test_no_module_shadows_a_public_name():
    """Importing ``cudnn_py.x`` sets the package's attribute ``x`` to the module: a module named like a public name
    that the package's lazy namespace finds in another module (``cudnn_py.algorithm_cache`` is an AlgorithmCache of
    cudnn_py.calls.algorithms) would replace that name once imported."""
    import cudnn_py
    lazy = cudnn_py._WHERE  # public name -> the module holding it
    modules = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()
               if p.suffix == ".py" or (p / "__init__.py").exists()}
    clashes = sorted(n for n in modules if n in lazy and lazy[n].lstrip(".") != n)
    assert not clashes, f"modules named like a public name of another module: {clashes}"


def test_the_tuning_records_old_import_paths_are_the_same_modules():
    """The records moved to cudnn_py.tuning_records (core); their old paths under cudnn_py.tuning (the runs, above the
    operation families) give the same module objects, so a monkeypatch through either name reaches both."""
    import importlib

    import cudnn_py.tuning as tuning
    import cudnn_py.tuning_records as records
    for name in ("database", "fingerprint", "models"):
        assert importlib.import_module(f"cudnn_py.tuning.{name}") is importlib.import_module(
            f"cudnn_py.tuning_records.{name}")
        assert getattr(tuning, name) is getattr(records, name)
    assert tuning.TuningDatabase is records.database.TuningDatabase and tuning.default_database is \
        records.default_database


def test_modules_that_moved_keep_their_old_paths():
    """``import cudnn_py.memory`` (and the attribute ``cudnn_py.memory``) gives :mod:`cudnn_py.core.memory` itself,
    so that code written against the flat layout keeps working; every old path's module exists and is the new one."""
    import importlib

    import cudnn_py
    from cudnn_py._imports import MOVED
    assert len(MOVED) == 29
    for old, new in MOVED.items():
        assert not (PACKAGE / (old.split(".", 1)[1] + ".py")).exists(), old  # moved, not copied
        module = importlib.import_module(old)
        assert module is importlib.import_module(new) and module.__name__ == new and module.__spec__.name == new
    assert cudnn_py.memory is importlib.import_module("cudnn_py.core.memory")
    from cudnn_py import prepared
    from cudnn_py.memory import DeviceArray
    assert prepared.prepared is importlib.import_module("cudnn_py.calls.prepared").prepared
    assert DeviceArray.__module__ == "cudnn_py.core.memory"
