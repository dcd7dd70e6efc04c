"""The public API is typed: mypy finds no error in a typed user script, and does catch misuse (so nothing is ``Any``).

The scripts are checked as a user's: copied to a folder outside the checkout and run through ``mypy --strict`` there
(no project configuration), with this checkout's package first on the path.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "typing"
NEEDS_MYPY = "mypy is in the test extra: pip install -e '.[test]' --config-settings editable_mode=compat"


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


#: the scripts of tests/typing checked as a user's
USER_SCRIPTS = ("user_script.py", "misuse.py", "capi_port.py")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory) -> str:
    pytest.importorskip("mypy", reason=NEEDS_MYPY)
    user = tmp_path_factory.mktemp("user")  # outside the checkout: no pyproject.toml, the package found on the path
    for name in USER_SCRIPTS:
        shutil.copy(SCRIPTS / name, user / name)
    (user / "every_public_name.py").write_text(_every_public_name())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("MYPYPATH", None)
    # the package is found as an installed one (its own errors are not reported: that is CI's mypy cudnn_py);
    # --strict as a strict user would run it
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path_factory.mktemp("mypy")),
                        "--no-error-summary", "--show-error-codes", *USER_SCRIPTS, "every_public_name.py"],
                       capture_output=True, text=True, cwd=user, env=env, timeout=600)
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 1: errors found (misuse.py has them); else mypy failed
    assert "Cannot find implementation" not in r.stdout, r.stdout
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


def test_capi_star_import_type_checks(mypy_output):
    """``from cudnn_py.capi import *`` gives mypy every C name (no 'Name ... is not defined')."""
    assert _errors(mypy_output, "capi_port.py") == {}, mypy_output


def test_misuse_is_caught_line_by_line(mypy_output):
    """Each line marked ``# error`` gets an error, ``# error[code]`` one of that code (its first on the line)."""
    source = (SCRIPTS / "misuse.py").read_text().splitlines()
    marked = {i: m.group(1) for i, line in enumerate(source, 1) if (m := re.search(r"# error(?:\[([\w-]+)\])?$", line))}
    assert len(marked) >= 20
    found = _errors(mypy_output, "misuse.py")
    assert set(found) == set(marked), mypy_output
    wrong = {i: found[i] for i, code in marked.items() if code and not found[i].endswith(f"[{code}]")}
    assert not wrong, wrong


def test_misspelt_names_and_keywords_are_named(mypy_output):
    """The mistakes of issue 40 item 7, as mypy words them: the misspelt module attribute and keyword."""
    found = " ".join(_errors(mypy_output, "misuse.py").values())
    assert 'Module has no attribute "convolution_fowrard"' in found
    assert 'Unexpected keyword argument "casual" for overloaded function "sdpa"; did you mean "causal"?' in found
    assert 'Unexpected keyword argument "paddin" for "conv_forward"; did you mean "padding"?' in found


def test_option_keywords_match_sdpa_options():
    """The typed option keywords are SdpaOptions' fields (all but alibi for the graph builder; scale and causal for
    FP8), so the annotations cannot drift from what SdpaOptions takes."""
    import dataclasses
    from cudnn_py.graph.ops.sdpa import (SdpaFp8OptionKeywords, SdpaGraphOptionKeywords, SdpaOptionKeywords,
                                         SdpaOptions)
    fields = {f.name for f in dataclasses.fields(SdpaOptions)}
    assert set(SdpaOptionKeywords.__annotations__) == fields
    assert set(SdpaGraphOptionKeywords.__annotations__) == fields - {"alibi"}
    assert set(SdpaFp8OptionKeywords.__annotations__) == {"scale", "causal"}


def test_capi_all_is_a_literal_list_of_every_name():
    """The C layer's ``__all__`` is a literal list (what type checkers read for a star import) of names it defines:
    the headers' and the removed functions' stand-ins."""
    import cudnn_py.capi as capi
    tree = ast.parse(Path(capi.__file__).read_text())
    assigned = [n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "__all__" for t in n.targets)]
    assert len(assigned) == 1 and ast.literal_eval(assigned[0]) == capi.__all__
    assert set(capi._REMOVED) <= set(capi.__all__) and {"cudnnCreate", "cudnnHandle_t"} <= set(capi.__all__)
    assert all(hasattr(capi, n) for n in capi.__all__)


def test_the_package_is_marked_typed():
    assert (ROOT / "cudnn_py" / "py.typed").is_file()
    import cudnn_py
    assert set(cudnn_py.__all__) <= set(dir(cudnn_py)) and len(cudnn_py.__all__) == len(set(cudnn_py.__all__))


def test_the_installed_package_is_visible_to_mypy_outside_the_checkout(tmp_path):
    """Installed as the README says (an editable install in compat mode), ``mypy --strict`` on a user's script in
    another folder finds cudnn_py and its types (the default editable install's import hook hid it: 'Cannot find
    implementation or library stub for module named "cudnn_py"')."""
    pytest.importorskip("mypy", reason=NEEDS_MYPY)
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
    assert "def [Out" in r.stdout and "-> cudnn_py.core.memory.DeviceArray | Out" in r.stdout, r.stdout


def test_every_editable_install_line_uses_compat_mode(monkeypatch):
    """Each ``pip install -e`` the project shows (README, docs, comments, the package's hints, the tests' skip
    reasons) keeps the compat editable mode, without which the install hides cudnn_py from mypy (the test above)."""
    from cudnn_py.clib import install as _install
    files = [ROOT / "README.md", ROOT / "pyproject.toml", *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "docs").rglob("*.py"), *(ROOT / "cudnn_py").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "tests").rglob("*.py")]
    shown = re.compile(r"pip install (-e|--editable) [.'\"]")  # a command (a regex that reads one has "\.")
    lines = [f"{p.relative_to(ROOT)}:{i}: {line}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if shown.search(line) and "\\." not in line]
    assert len(lines) >= 8
    compat = (_install.EDITABLE_COMPAT, "EDITABLE_COMPAT}")  # written out, or _install's constant formatted in
    assert [line for line in lines if not any(c in line for c in compat)] == []
    monkeypatch.chdir(ROOT)  # the package's hints, from a checkout
    assert _install.pip_install("bench") == f'pip install -e ".[bench]" {_install.EDITABLE_COMPAT}'
