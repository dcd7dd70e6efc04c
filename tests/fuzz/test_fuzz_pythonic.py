"""Fuzz the Pythonic layer with hostile arguments (hypothesis); each target runs in its own subprocess so that a
crash (segfault, abort) is caught and names the example that caused it.

Pass condition per target: the subprocess exits normally and every example either succeeded or raised a cudnn_py
exception / a TypeError or ValueError from an explicit ``raise`` in cudnn_py (see ``runner.py``).

CI runs a bounded, seeded count; more on demand:

    CUDNN_PY_FUZZ_EXAMPLES=2000 CUDNN_PY_FUZZ_SEED=7 python -m pytest tests/fuzz -q -s   # 2000 per target
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

from targets import TARGETS  # noqa: E402

_HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("CUDNN_PY_FUZZ_EXAMPLES", "100"))
SEED = int(os.environ.get("CUDNN_PY_FUZZ_SEED", "20261"))
TIMEOUT = float(os.environ.get("CUDNN_PY_FUZZ_TIMEOUT", str(60 + EXAMPLES * 0.2)))


def _run(target: str, tmp_path: Path) -> dict:
    log = tmp_path / f"{target}.last"
    import cudnn_py
    root = str(Path(cudnn_py.__file__).resolve().parent.parent)  # the child imports the same cudnn_py as we do
    env = {**os.environ, "PYTHONFAULTHANDLER": "1",
           "PYTHONPATH": os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    p = subprocess.run([sys.executable, str(_HERE / "runner.py"), target, str(EXAMPLES), str(SEED), str(log)],
                       capture_output=True, text=True, timeout=TIMEOUT, env=env)
    if p.returncode != 0:
        last = log.read_text().strip() if log.exists() else "(none logged)"
        sig = f" (signal {signal.Signals(-p.returncode).name})" if p.returncode < 0 else ""
        pytest.fail(f"fuzz target {target!r} died with exit status {p.returncode}{sig} on example:\n  {last}\n"
                    f"stderr tail:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz(target, tmp_path):
    result = _run(target, tmp_path)
    stats, findings = result["stats"], result["findings"]
    print(f"{target}: {stats}")
    assert stats.get("examples", 0) >= min(EXAMPLES, 10), stats
    assert not findings, (f"{stats.get('findings')} of {stats['examples']} examples of {target!r} raised something "
                          f"other than a cudnn_py error or an explicit TypeError/ValueError:\n"
                          + "\n".join(f"- {f['example']}\n  {f['why']}" for f in findings[:8]))
