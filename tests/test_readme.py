"""Every code block of README.md runs as written (or is skipped with the reason), and CI runs the README's commands.

A Python block runs as a script in a fresh interpreter. Where no GPU is visible, a block that needs one must get as
far as its first device call (every import and name before it is right) and stop there with ``NoDeviceError``: it
is then skipped with that reason (``CUDNN_PY_REQUIRE_GPU=1`` makes it fail instead); on a GPU it must finish, and any
``max error: X`` / ``max relative error: X`` it prints must be small. The install command's block runs what follows
the install (the main job); the test command's block is the suite itself, which CI runs.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_missing_reason

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: (language, code, line of the opening fence)
BLOCKS = [(m.group(1), m.group(2), README.count("\n", 0, m.start()) + 1)
          for m in re.finditer(r"^```(\w*)\n(.*?)^```$", README, re.M | re.S)]
INSTALL = re.compile(r"^python3 -m venv \.venv && \. \.venv/bin/activate && pip install -e \"\.\[([\w,]+)\]\""
                     r" --config-settings editable_mode=compat && ")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_the_readme_opens_with_the_install_command_and_runnable_programs():
    langs = [lang for lang, _, _ in BLOCKS]
    assert langs[:4] == ["bash", "python", "python", "bash"], langs
    assert INSTALL.match(BLOCKS[0][1]) and "examples/port_first_program.py" in BLOCKS[0][1]
    assert "convolution_forward" in BLOCKS[1][1] and "sdpa" in BLOCKS[2][1]
    assert BLOCKS[3][1].strip().endswith("python -m pytest -q")


def test_ci_runs_the_readme_commands():
    """.ci/run installs at least the README's extras and runs the main job and the test command, in step."""
    ci = (ROOT / ".ci" / "run").read_text()
    installed = set(re.search(r'pip install -e "\.\[([\w,]+)\]"', ci).group(1).split(","))
    for lang, code, _ in BLOCKS:
        if lang == "bash" and INSTALL.match(code):
            extras, rest = INSTALL.match(code).group(1), INSTALL.sub("", code.strip())
            assert set(extras.split(",")) <= installed, (extras, installed)
            assert rest in ci, f".ci/run does not run the README's {rest!r}"


@pytest.mark.parametrize("lang, code, line", BLOCKS, ids=[f"line{line}-{lang or 'text'}" for lang, _, line in BLOCKS])
def test_block(lang, code, line, tmp_path):
    if lang == "python":
        r = run([sys.executable, "-c", code], tmp_path)
    elif lang == "bash" and INSTALL.match(code):
        rest = INSTALL.sub("", code.strip())
        if rest == "python -m pytest -q":
            pytest.skip("the test command: this suite itself, which .ci/run runs")
        steps = [shlex.split(step) for step in rest.split(" && ")]
        assert all(s[0] == "python" for s in steps), rest
        for step in steps:  # the commands after the install, with this interpreter
            r = run([sys.executable, *step[1:]], ROOT)
            assert r.returncode == 0, r.stdout + r.stderr
        return
    else:
        pytest.skip(f"a {lang or 'plain text'} block, not a program")
    why = gpu_missing_reason()
    if r.returncode and why and os.environ.get("CUDNN_PY_REQUIRE_GPU") != "1":
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("cudnn_py.errors.NoDeviceError:"), r.stderr
        pytest.skip(f"needs a GPU ({why}); ran as far as its first device call")
    assert r.returncode == 0, r.stderr
    for value in re.findall(r"max (?:relative )?error: (\S+)", r.stdout):
        assert float(value) < 2e-2, r.stdout


#: README table rows quoted from a measurement's write-up in docs/ (the one source): row prefix -> that document
QUOTED = {"| S4k": "docs/attention.md", "| S16k": "docs/attention.md", "| ReLU": "docs/graph_paths.md",
          "| batch-norm": "docs/graph_paths.md", "| ResNet": "docs/graph_paths.md",
          "| channels_last ReLU": "docs/prepared.md"}


def test_figures_quoted_from_the_docs_are_the_docs_figures():
    rows = [(line, doc) for line in README.splitlines() for prefix, doc in QUOTED.items() if line.startswith(prefix)]
    assert len(rows) == 7, rows
    for line, doc in rows:
        source = (ROOT / doc).read_text()
        figures = re.findall(r"\d+\.\d+(?: / \d+\.\d+)?", line.split("|", 2)[2])
        assert figures and all(re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", source) for f in figures), \
            (line, [f for f in figures if f not in source], doc)


def test_python_blocks_pass_mypy_strict(tmp_path):
    """What a newcomer's type checker says of the README's programs: nothing (``mypy --strict`` over every block)."""
    pytest.importorskip("mypy", reason="mypy is not installed")
    files = []
    for lang, code, line in BLOCKS:
        if lang == "python":
            files.append(tmp_path / f"readme_line{line}.py")
            files[-1].write_text(code)
    r = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, files)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_docs_never_import_the_package_as_cudnn():
    """``cudnn`` is cudnn-frontend's import name: the docs and examples import cudnn-py under another."""
    paths = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.py")]
    bad = [p.name for p in paths if p.name != "tuning.md" and re.search(r"import cudnn_py as cudnn\b", p.read_text())]
    assert not bad, bad
