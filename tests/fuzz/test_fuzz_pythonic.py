"""Fuzz the Pythonic layer with hostile arguments (hypothesis); each target runs in its own subprocess so that a
crash (segfault, abort) is caught and names the example that caused it.

Pass condition per target: the subprocess exits normally and every example either succeeded or raised a cudnn_py
exception / a TypeError or ValueError from an explicit ``raise`` in cudnn_py (see ``runner.py``).

CI runs a bounded, seeded count; more on demand:

    CUDNN_PY_FUZZ_EXAMPLES=2000 CUDNN_PY_FUZZ_SEED=7 python -m pytest tests/fuzz -q -s   # 2000 per target
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

from child import run_child  # noqa: E402
from targets import TARGETS  # noqa: E402

_HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("CUDNN_PY_FUZZ_EXAMPLES", "100"))
SEED = int(os.environ.get("CUDNN_PY_FUZZ_SEED", "20261"))
TIMEOUT = float(os.environ.get("CUDNN_PY_FUZZ_TIMEOUT", str(60 + EXAMPLES * 0.2)))


def _run(target: str, tmp_path: Path) -> dict:
    return run_child(_HERE / "runner.py", target, EXAMPLES, SEED, TIMEOUT, tmp_path, "fuzz target")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz(target, tmp_path):
    result = _run(target, tmp_path)
    stats, findings = result["stats"], result["findings"]
    print(f"{target}: {stats}")
    assert stats.get("examples", 0) >= min(EXAMPLES, 10), stats
    assert not findings, (f"{stats.get('findings')} of {stats['examples']} examples of {target!r} raised something "
                          f"other than a cudnn_py error or an explicit TypeError/ValueError:\n"
                          + "\n".join(f"- {f['example']}\n  {f['why']}" for f in findings[:8]))
