"""Typing that tools find: the graph builder's pointwise ops, matmul and conv_fprop return Tensor under
``mypy --strict``."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


_GRAPH_SCRIPT = textwrap.dedent("""
    from __future__ import annotations

    import cudnn_py
    from cudnn_py.graph import Graph, Tensor


    def block(g: Graph, x: Tensor, w: Tensor, b: Tensor, m: Tensor) -> Tensor:
        y = g.conv_fprop(x, w, padding=1)
        y = g.bias(y, b)
        y = g.scale(y, 0.5)
        y = g.add(y, 1.0)
        y = g.sub(y, x)
        y = g.mul(y, y)
        y = g.div(y, 2.0)
        y = g.relu(y)
        y = g.gelu(y, approximate="tanh")
        y = g.silu(y)
        y = g.tanh(y)
        y = g.sigmoid(y)
        y = g.exp(y)
        y = g.log(y)
        z = g.matmul(m, m)
        reveal_type(g.conv_fprop(x, w))
        reveal_type(g.matmul(m, m))
        reveal_type(g.add(y, 1.0))
        reveal_type(g.relu(y))
        reveal_type(z)
        return y


    def build() -> Graph:
        return cudnn_py.Graph()
""")


def test_graph_builder_pointwise_ops_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extra: "
                        "pip install -e '.[test]' --config-settings editable_mode=compat")
    script = tmp_path / "user_graph.py"
    script.write_text(_GRAPH_SCRIPT)
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict",
                        "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), "--show-error-codes",
                        "--no-error-summary", str(script)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    out = r.stdout
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert errors == [], out
    revealed = [line for line in out.splitlines() if "Revealed type" in line]
    assert len(revealed) == 5 and all("cudnn_py.graph.graph.Tensor" in line for line in revealed), out
