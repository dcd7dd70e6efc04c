"""Run one fuzz target in a child process (so that a crash is caught) and read its JSON report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def run_child(script: Path, target: str, examples: int, seed: int, timeout: float, tmp_path: Path, what: str) -> dict:
    """``python script target examples seed log`` with the cudnn_py under test importable; the report the child
    prints last. A child that dies fails the test naming the last example it logged (``what``: the kind of target)."""
    log = tmp_path / f"{target}.last"
    import cudnn_py
    root = str(Path(cudnn_py.__file__).resolve().parent.parent)  # the child imports the same cudnn_py as we do
    env = {**os.environ, "PYTHONFAULTHANDLER": "1",
           "PYTHONPATH": os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    p = subprocess.run([sys.executable, str(script), target, str(examples), str(seed), str(log)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        last = log.read_text().strip() if log.exists() else "(none logged)"
        sig = f" (signal {signal.Signals(-p.returncode).name})" if p.returncode < 0 else ""
        pytest.fail(f"{what} {target!r} died with exit status {p.returncode}{sig} on example:\n  {last}\n"
                    f"stderr tail:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])
