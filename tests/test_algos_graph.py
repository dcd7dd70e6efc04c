"""``algos --graph``: argument checks, table/CSV/JSON/plot from synthetic rows (CPU); the sweep of every engine
config the heuristics offer for a small convolution, matmul and layer norm, each checked against float64 (GPU)."""
from __future__ import annotations

import argparse
import csv
import json

import pytest

from cudnn_py.cli import algos, models
from cudnn_py.cli import algos_graph as AG


def _parse(argv: list[str]) -> argparse.Namespace:
    """``algos ARGV`` parsed by the command's parser."""
    parser = argparse.ArgumentParser(prog="cudnn-py")
    p = algos.add_parser(parser.add_subparsers(dest="command", required=True))
    AG.add_arguments(p)
    models.add_arguments(p)
    return parser.parse_args(["algos", *argv])


def test_problem_arguments_are_checked():
    with pytest.raises(SystemExit, match="--mnk"):
        AG.problem_from_args(_parse(["--graph", "matmul"]))
    with pytest.raises(SystemExit, match="3 or 4 positive integers"):
        AG.problem_from_args(_parse(["--graph", "matmul", "--mnk", "4,0,4"]))
    with pytest.raises(SystemExit, match="float32, float16, bfloat16"):
        AG.problem_from_args(_parse(["--graph", "norm", "--norm-shape", "4,8", "--dtype", "float64"]))
    with pytest.raises(SystemExit, match="one --direction"):
        AG.problem_from_args(_parse(["--graph", "conv", "--input", "1,4,8,8", "--filter", "4,4,3,3"]))
    with pytest.raises(SystemExit, match="float16 or bfloat16"):
        AG.problem_from_args(_parse(["--graph", "attention", "--sdpa", "1,2,64,64"]))
    with pytest.raises(SystemExit, match="--modes"):
        AG.run(_parse(["--graph", "matmul", "--mnk", "4,4,4", "--modes", "A,C"]))


def test_problems_describe_their_shapes_and_flops():
    p = AG.problem_from_args(_parse(["--graph", "matmul", "--mnk", "2,8,16,32", "--dtype", "float16"]))
    assert p.flops == 2.0 * 2 * 8 * 16 * 32 and "B=2 M=8 N=16 K=32 float16" in p.title
    c = AG.problem_from_args(_parse(["--graph", "conv", "--input", "2,4,8,8", "--filter", "6,4,3,3",
                                            "--pad", "1", "--direction", "fwd"]))
    assert c.flops == 2.0 * (2 * 6 * 8 * 8) * (4 * 3 * 3) and c.extra["dy"] == (2, 6, 8, 8)


def _rows():
    return [AG.Row("conv", "A,B", "eng0_k2=1", True, time_ms=0.5, tflops=1.0, workspace_bytes=0, deterministic=True,
                   max_rel_error=1e-4, pick="A"),
            AG.Row("conv", "B", "eng7", False, reason="CUDNN_STATUS_NOT_SUPPORTED"),
            AG.Row("conv", "torch", "torch (engine not exposed)", True, time_ms=0.4, pick="torch")]


def test_table_csv_json_and_plot(tmp_path):
    rows = _rows()
    text = AG.format_table(rows)
    assert "eng0_k2=1" in text and "CUDNN_STATUS_NOT_SUPPORTED" in text and "torch (engine not exposed)" in text
    algos.write_csv(rows, tmp_path / "r.csv")
    got = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert [r["algo"] for r in got] == ["eng0_k2=1", "eng7", "torch (engine not exposed)"] and got[0]["pick"] == "A"
    algos.write_json(rows, {"problem": "title"}, tmp_path / "r.json")
    assert json.load(open(tmp_path / "r.json"))["rows"][1]["reason"] == "CUDNN_STATUS_NOT_SUPPORTED"
    pytest.importorskip("matplotlib")
    assert algos.plot(rows, str(tmp_path / "r.png"), "title")
    assert (tmp_path / "r.png").stat().st_size > 1000


SMALL = {
    "conv": ["--graph", "conv", "--input", "2,8,9,9", "--filter", "16,8,3,3", "--pad", "1", "--direction", "fwd",
             "--dtype", "float16", "--layout", "NHWC"],
    "conv_dgrad": ["--graph", "conv", "--input", "2,8,9,9", "--filter", "16,8,3,3", "--pad", "1",
                   "--direction", "bwd_data", "--dtype", "float32"],
    "matmul": ["--graph", "matmul", "--mnk", "64,48,32", "--dtype", "bfloat16"],
    "norm": ["--graph", "norm", "--norm-shape", "64,256", "--dtype", "float16"],
}
TOL = {"float32": 5e-3, "float16": 1e-2, "bfloat16": 3e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SMALL))
def test_sweep_checks_every_config_and_marks_mode_a(handle, name):
    """Every config that runs answers within the dtype's tolerance; mode A's pick is the plan Graph.build makes
    from mode A; torch's row is timed."""
    args = _parse(SMALL[name] + ["--repeats", "3"])
    problem = AG.problem_from_args(args)
    rows = AG.sweep(problem, repeats=3, warmup=1)
    ran = [r for r in rows if r.supported and r.pick != "torch"]
    assert ran, AG.format_table(rows)
    assert all(r.max_rel_error is not None and r.max_rel_error < TOL[args.dtype] for r in ran), AG.format_table(rows)
    picks = [r for r in rows if r.pick == "A"]
    assert len(picks) == 1
    g, _, _ = problem.make()
    g.build(handle, modes=("A",))
    assert picks[0].algo == g.plan.tag
    torch_rows = [r for r in rows if r.pick == "torch"]
    if problem.torch_fn is None:  # torch's row is there for 2-D forward convolutions, matmul, norm, attention
        assert not torch_rows
    else:
        assert len(torch_rows) == 1 and torch_rows[0].supported and torch_rows[0].time_ms > 0, torch_rows
