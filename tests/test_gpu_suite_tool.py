"""tools/gpu_suite.py: shards split the suite between processes and a summary comes back (CPU: a CPU-only file)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_shards_cover_the_selection_once(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_suite.py"), "--shards", "2", "--logs",
                          str(tmp_path), "tests/test_deprecation.py"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    passed = [int(line.split("exit 0: ")[1].split()[0]) for line in out.stdout.splitlines()
              if line.startswith("shard")]
    assert sum(passed) == 3 and len(passed) == 2  # the file's three tests, each in exactly one shard
    assert "serial   exit 5" in out.stdout  # no serial test selected
