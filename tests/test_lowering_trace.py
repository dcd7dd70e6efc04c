"""tools/lowering_trace.py, the CPU check that graph lowering hands cuDNN the same descriptors in two trees, runs and
shows every graph as a tree of descriptors (no GPU: cuDNN's descriptor calls are stand-ins)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_lowering_trace_prints_each_graph_as_one_descriptor_tree():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "lowering_trace.py")], env=env, check=True,
                         capture_output=True, text=True)
    assert f"lowering with {ROOT / 'cudnn_py' / '__init__.py'}" in out.stderr
    blocks = out.stdout.split("== ")[1:]
    assert [b.splitlines()[0] for b in blocks] == [
        "conv/matmul/pointwise", "norm", "resample", "rng/reshape", "fp8", "sdpa composite", "sdpa options",
        "sdpa bwd", "sdpa unified"]
    for b in blocks:
        lines = b.splitlines()
        assert lines[1].startswith("{OPERATIONGRAPH_DESCRIPTOR; CUDNN_ATTR_OPERATIONGRAPH_HANDLE")
        assert [ln.split()[0] for ln in lines[2:]] == ["key", "operations", "bound"]
    assert "OPERATION_RESAMPLE_BWD_DESCRIPTOR" in out.stdout and "OPERATION_SDPA_FWD_DESCRIPTOR" in out.stdout
