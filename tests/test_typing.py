"""The public API is typed: mypy finds no error in a typed user script, and does catch misuse (so nothing is ``Any``)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "typing"


def _every_public_name() -> str:
    """A user script that imports every name of ``cudnn_py.__all__`` by name and uses it (generated, so a new public
    name is checked without being listed): under ``--strict`` each must be an explicit re-export."""
    import cudnn_py
    names = [n for n in cudnn_py.__all__ if n != "__version__"]
    return "\n".join([
        "from __future__ import annotations",
        "import cudnn_py",
        "from cudnn_py import __version__",
        *(f"from cudnn_py import {n}" for n in names),
        "",
        "def use() -> list[object]:",
        "    return [__version__, cudnn_py.version(), " + ", ".join(names) + "]",
        "",
    ])


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory) -> str:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    every = tmp_path_factory.mktemp("typing") / "every_public_name.py"
    every.write_text(_every_public_name())
    # --follow-imports=silent: the package is checked as the user's script sees it; errors inside the
    # package are CI's separate count (mypy cudnn_py), not this test's. --strict as a strict user would run it.
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict",
                        "--follow-imports=silent", "--cache-dir", str(tmp_path_factory.mktemp("mypy")),
                        "--no-error-summary", "--show-error-codes", str(SCRIPTS / "user_script.py"),
                        str(SCRIPTS / "misuse.py"), str(every)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode in (0, 1), r.stderr  # 1: errors found (misuse.py has them); anything else: mypy failed
    return r.stdout


def _errors(output: str, name: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for line in output.splitlines():
        m = re.match(rf".*{re.escape(name)}:(\d+): error: (.*)", line)
        if m:
            found.setdefault(int(m.group(1)), m.group(2))
    return found


def test_user_script_has_no_type_errors(mypy_output):
    assert _errors(mypy_output, "user_script.py") == {}, mypy_output


def test_every_public_name_is_an_explicit_typed_export(mypy_output):
    assert _errors(mypy_output, "every_public_name.py") == {}, mypy_output


def test_misuse_is_caught_line_by_line(mypy_output):
    source = (SCRIPTS / "misuse.py").read_text().splitlines()
    marked = {i for i, line in enumerate(source, 1) if line.endswith("# error")}
    assert len(marked) >= 8
    assert set(_errors(mypy_output, "misuse.py")) == marked, mypy_output


def test_the_package_is_marked_typed():
    assert (ROOT / "cudnn_py" / "py.typed").is_file()
    import cudnn_py
    assert set(cudnn_py.__all__) <= set(dir(cudnn_py)) and len(cudnn_py.__all__) == len(set(cudnn_py.__all__))


def test_the_installed_package_is_visible_to_mypy_outside_the_checkout(tmp_path):
    """Installed as the README says (an editable install in compat mode), ``mypy --strict`` on a user's script in
    another folder finds cudnn_py and its types (the default editable install's import hook hid it: 'Cannot find
    implementation or library stub for module named "cudnn_py"')."""
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    found = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('cudnn_py'))"],
                           cwd=tmp_path, capture_output=True, text=True, env=env).stdout.strip()
    if found in ("", "None"):
        pytest.skip("cudnn-py is not installed in this environment (run from a checkout on PYTHONPATH)")
    (tmp_path / "user.py").write_text("import cudnn_py\n\n\ndef f(h: cudnn_py.Handle) -> None:\n"
                                      "    reveal_type(cudnn_py.activation_forward)\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"], cwd=tmp_path,
                       capture_output=True, text=True, env=env)
    assert "Cannot find implementation" not in r.stdout and r.returncode == 0, r.stdout + r.stderr
    assert "def [Out" in r.stdout and "-> cudnn_py.memory.DeviceArray | Out" in r.stdout, r.stdout
