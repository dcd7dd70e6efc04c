"""tools/gpu_suite.py: shards split the suite between processes and a summary comes back (CPU: a CPU-only file)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_shards_cover_the_selection_once(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_suite.py"), "--shards", "2", "--logs",
                          str(tmp_path), "--no-gpu-check", "tests/test_deprecation.py"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    passed = [int(line.split("exit 0: ")[1].split()[0]) for line in out.stdout.splitlines()
              if line.startswith("shard")]
    tests = (ROOT / "tests" / "test_deprecation.py").read_text().count("\ndef test_")
    assert sum(passed) == tests and len(passed) == 2  # each of the file's tests in exactly one shard
    assert "serial   exit 5" in out.stdout  # no serial test selected


def test_without_a_gpu_it_refuses_in_one_line():
    from conftest import gpu_missing_reason
    if not gpu_missing_reason():
        pytest.skip("a GPU is visible: the suite would run")
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_suite.py")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("gpu_suite: cannot use CUDA device 0"), out.stderr


def test_library_is_what_every_process_loads(tmp_path):
    import cudnn_py
    lib = cudnn_py.library()
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_suite.py"), "--shards", "1", "--logs",
                          str(tmp_path), "--no-gpu-check", "--library", lib.path, "tests/test_loader.py"],
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.splitlines()[0] == f"cuDNN {lib.version_string} from {lib.path}", out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr
    missing = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_suite.py"), "--no-gpu-check", "--library",
                              str(tmp_path / "nowhere.so")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no such file" in missing.stderr
