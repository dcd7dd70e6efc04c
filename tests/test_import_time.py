"""``import cudnn_py`` stays light: what each import loads (never a timing; benchmarks/import_time.py times it)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("cuda.core", "cuda.bindings", "numpy", "cudnn_py.graph", "cudnn_py.capi.backend_attributes")


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("statement", [
    "import cudnn_py",
    "import cudnn_py.capi",
    "from cudnn_py.capi import *",
    "import cudnn_py.core.memory, cudnn_py.core.streams, cudnn_py.core.workspace, cudnn_py.errors",
])
def test_import_loads_nothing_heavy(statement):
    """cuda.core, cuda.bindings, NumPy and the graph package come in on first use, not at import."""
    allowed = {"numpy"} if "memory" in statement else set()
    assert [m for m in _heavy(_loaded_after(statement)) if m.split(".")[0] not in allowed] == []


def test_import_cudnn_py_does_not_load_cudnn():
    assert "cudnn_py.capi" not in _loaded_after("import cudnn_py")


def test_first_use_loads_the_module_and_keeps_the_name():
    loaded = _loaded_after("import cudnn_py; cudnn_py.TensorDescriptor")
    assert "cudnn_py.core.descriptors" in loaded and "cudnn_py.graph" not in loaded


def test_lazy_table_and_type_checking_imports_agree():
    """Each lazily exported name is imported under TYPE_CHECKING from the same module (what mypy sees)."""
    import cudnn_py
    tree = ast.parse((ROOT / "cudnn_py" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    typed, submodules = {}, set()
    for node in block.body:
        for alias in node.names:  # a module (from . import ops, from .core import memory) or a name of one
            if node.module is None or alias.name in cudnn_py._SUBMODULES:
                submodules.add(alias.name)
            else:
                typed[alias.name] = "." + node.module
    assert typed == cudnn_py._WHERE
    assert submodules == set(cudnn_py._SUBMODULES)
    errors = {n for n in cudnn_py.__all__ if n not in cudnn_py._WHERE} - {"__version__", "version"}
    assert errors == {n for n in vars(cudnn_py.errors) if n.endswith("Error")}


def test_every_public_name_resolves():
    import cudnn_py
    for name in cudnn_py.__all__:
        assert getattr(cudnn_py, name) is not None, name
    assert cudnn_py.graph.Graph is cudnn_py.Graph and cudnn_py.capi.cudnnCreate
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        cudnn_py.no_such_name
