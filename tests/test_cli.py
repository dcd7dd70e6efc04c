"""The command line and the first example, run as a user runs them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_info_runs_and_reports():
    from cudnn_py import library
    r = run("-m", "cudnn_py", "info")
    assert r.returncode == 0, r.stderr
    assert f"cuDNN         {library().version_string}" in r.stdout
    assert library().path in r.stdout and "GPUs" in r.stdout and "cuda-core" in r.stdout


@pytest.mark.gpu
def test_first_program_port_matches_reference():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import port_first_program
    finally:
        sys.path.pop(0)
    error = port_first_program.main()
    assert error is not None and error < 2e-3
