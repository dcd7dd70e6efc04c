"""Benchmarks are code: each runs here in its ``--smoke`` mode (imports, argument parsing, the GPU and package
checks, one line, exit 0) with no warning, so a broken import fails CI instead of the next GPU session; where no GPU
is visible, a real run refuses in one line, without a traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_missing_reason

ROOT = Path(__file__).resolve().parents[1]
#: every script in benchmarks/ (modules without a main block, such as timing.py, are helpers)
BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if '__name__ == "__main__"' in p.read_text())


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_every_benchmark_is_found():
    assert len(BENCHMARKS) >= 10 and "graph_bench.py" in BENCHMARKS and "timing.py" not in BENCHMARKS


@pytest.mark.parametrize("script", BENCHMARKS)
def test_smoke_mode_and_the_refusal(script):
    r = run(str(ROOT / "benchmarks" / script), "--smoke")
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 0, out
    assert "Traceback" not in out and "Warning" not in out, out
    assert len(out.splitlines()) == 1, out
    if gpu_missing_reason() and "a run would stop" in out:
        r = run(str(ROOT / "benchmarks" / script))
        out = (r.stdout + r.stderr).strip()
        assert r.returncode != 0 and len(out.splitlines()) == 1, out
        assert out.startswith(f"{script}: ") and "Traceback" not in out, out
