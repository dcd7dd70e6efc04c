"""``python -m cudnn_py algos``: argument parsing, presets, configuration errors, the float64 reference it uses
(against tests/reference/conv.py), and the table/CSV/JSON/plot writers on CPU; the sweep itself on the GPU."""
from __future__ import annotations

import argparse
import csv
import json

import numpy as np
import pytest

from cudnn_py.cli import algos
from reference import conv as ref


def _parse(*argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    algos.add_parser(sub)
    return p.parse_args(["algos", *argv])


def test_defaults_and_lists():
    a = _parse("--input", "8,64,56,56", "--filter", "64,64,3,3", "--pad", "1")
    assert a.direction == algos.DIRECTIONS and a.math == algos.MATHS and a.repeats == 10
    cfg = algos.config_from_args(a)
    assert cfg.x_shape == (8, 64, 56, 56) and cfg.padding == 1 and cfg.stride == (1,)
    a = _parse("--input", "1,4,9", "--filter", "2,4,3", "--direction", "fwd,bwd_filter", "--math", "fma,default",
               "--pad", "1:2", "--stride", "2")
    assert a.direction == ("forward", "backward_filter") and a.math == ("fma", "default")
    assert algos.config_from_args(a).padding == ((1, 2),)


@pytest.mark.parametrize("text,want", [("1", 1), ("1,2", (1, 2)), ("1:2,0:1", ((1, 2), (0, 1))), ("1:2,3", ((1, 2), (3, 3)))])
def test_padding_forms(text, want):
    assert algos._padding(text) == want


@pytest.mark.parametrize("argv", [["--direction", "sideways"], ["--math", "tf32"], ["--input", "a,b"],
                                  ["--pad", "1:2:3"], ["--dtype", "int4"], ["--layout", "CHWN"]])
def test_bad_arguments_exit(argv, capsys):
    with pytest.raises(SystemExit):
        _parse(*argv)


@pytest.mark.parametrize("argv,match", [
    ([], "--preset"), (["--input", "1,3,8,8"], "--preset"),
    (["--preset", "resnet50-conv1", "--input", "1,3,8,8"], "not both"),
    (["--input", "1,3,8,8", "--filter", "4,3,3"], "3, 4 or 5"),
    (["--input", "1,3,8,8", "--filter", "4,2,3,3"], "channels"),
    (["--input", "1,3,2,2", "--filter", "4,3,3,3"], "larger than input"),
    (["--preset", "resnet50-conv1", "--batch", "0"], "batch"),
    (["--input", "1,3,8,8", "--filter", "4,3,3,3", "--repeats", "0"], "repeats"),
])
def test_incomplete_configurations(argv, match):
    with pytest.raises(SystemExit, match=match):
        algos.config_from_args(_parse(*argv))


def test_presets_are_valid_resnet_layers():
    for name in algos.PRESETS:
        cfg = algos.config_from_args(_parse("--preset", name, "--batch", "2"))
        assert cfg.flops() > 0
    cfg = algos.config_from_args(_parse("--preset", "resnet50-conv1", "--batch", "1"))
    assert cfg.x_shape == (1, 3, 224, 224) and cfg.w_shape == (64, 3, 7, 7)
    assert cfg.flops() == 2 * 64 * 112 * 112 * 3 * 7 * 7


def test_list_presets(capsys):
    assert algos.run(_parse("--list-presets")) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in algos.PRESETS)


@pytest.mark.parametrize("direction", algos.DIRECTIONS)
@pytest.mark.parametrize("mode", ["cross_correlation", "convolution"])
@pytest.mark.parametrize("xs,ws,pad,stride,dil,groups", [
    ((2, 4, 9, 8), (6, 2, 3, 2), ((1, 2), (0, 1)), (2, 1), (1, 2), 2),
    ((1, 3, 5, 6, 4), (2, 3, 2, 3, 2), 1, (1,), (1,), 1),
    ((3, 2, 11), (4, 2, 3), 2, (2,), (2,), 1),
])
def test_cli_reference_matches_test_reference(rng, direction, mode, xs, ws, pad, stride, dil, groups):
    cfg = algos.Config(xs, ws, pad, stride, dil, groups, mode, "float64", "NCHW")
    nd = len(xs) - 2
    full = lambda v: v * nd if len(v) == 1 else v  # noqa: E731
    rk = dict(pad=cfg.pads(), stride=full(stride), dilation=full(dil), groups=groups, mode=mode)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    dy = rng.standard_normal(ref.output_shape(xs, ws, rk["pad"], rk["stride"], rk["dilation"]))
    want = {"forward": lambda: ref.conv_forward(x, w, **rk),
            "backward_data": lambda: ref.conv_backward_data(dy, w, xs, **rk),
            "backward_filter": lambda: ref.conv_backward_filter(x, dy, ws, **rk)}[direction]()
    np.testing.assert_allclose(algos.reference(direction, cfg, x, w, dy), want, rtol=1e-12, atol=1e-12)


def test_writers(tmp_path):
    rows = [algos.Row("forward", "default", "IMPLICIT_GEMM", True, "", 0.5, 12.0, 0, True, 1e-6),
            algos.Row("forward", "fma", "FFT", False, "CUDNN_STATUS_NOT_SUPPORTED")]
    table = algos.format_table(rows)
    assert "IMPLICIT_GEMM" in table and "CUDNN_STATUS_NOT_SUPPORTED" in table and "1.00e-06" in table
    cfg = algos.Config((1, 3, 8, 8), (4, 3, 3, 3), 1, (1,), (1,), 1, "cross_correlation", "float32", "NCHW")
    algos.write_csv(rows, tmp_path / "a.csv")
    got = list(csv.DictReader(open(tmp_path / "a.csv")))
    assert [r["algo"] for r in got] == ["IMPLICIT_GEMM", "FFT"] and got[0]["time_ms"] == "0.5"
    algos.write_json(rows, cfg, tmp_path / "a.json")
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["config"]["x_shape"] == [1, 3, 8, 8] and doc["rows"][1]["supported"] is False
    png = tmp_path / "a.png"
    if algos.plot(rows, png, "test"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        pytest.importorskip("matplotlib")  # plot() only returns False without matplotlib


def test_plot_renders_a_png(tmp_path):
    """--plot on synthetic records: one bar per supported row (all directions and math types), a readable PNG."""
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread
    rows = [algos.Row(d, m, a, True, "", t, 10.0 / t, 1 << 20, True, 1e-6)
            for d, m, a, t in [("forward", "default", "IMPLICIT_GEMM", 0.8), ("forward", "tensor_op", "FFT", 0.3),
                               ("backward_data", "default", "ALGO_1", 1.2), ("backward_filter", "fma", "ALGO_0", 2.5),
                               ("backward_filter", "tensor_op", "WINOGRAD_NONFUSED", 0.6)]]
    rows.append(algos.Row("forward", "fma", "DIRECT", False, "CUDNN_STATUS_NOT_SUPPORTED"))  # no bar
    png = tmp_path / "algos.png"
    assert algos.plot(rows, str(png), "x=(8, 64, 56, 56) w=(64, 64, 3, 3) float32 NCHW")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = imread(png)
    assert img.shape[1] == 9 * 120 and img.shape[0] == round((0.28 * 5 + 1.5) * 120)  # figsize x dpi
    assert img[..., :3].std() > 0.05  # something was drawn, not a blank canvas
    import matplotlib.pyplot as plt
    assert not plt.get_fignums()  # rendered off-screen: no figure left open in pyplot


def test_every_flag_has_help():
    p = argparse.ArgumentParser()
    parser = algos.add_parser(p.add_subparsers())
    assert [a.option_strings for a in parser._actions if not a.help] == []


def test_plot_without_matplotlib_fails_before_the_sweep(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr(algos, "sweep", lambda *a, **k: pytest.fail("the sweep ran before --plot was checked"))
    with pytest.raises(SystemExit, match=r"--plot needs matplotlib.*pip install.*\[plot\]"):
        algos.run(_parse("--input", "1,3,8,8", "--filter", "4,3,3,3", "--plot", "x.png"))


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_uses_ansi_only_on_a_terminal(capsys, terminal):
    write = algos.progress_writer(terminal)
    write("[1/2] forward default GEMM")
    write("[2/2] forward default FFT")
    err = capsys.readouterr().err
    if terminal:
        assert err == "\r\033[K[1/2] forward default GEMM\r\033[K[2/2] forward default FFT"
    else:
        assert err == "[1/2] forward default GEMM\n[2/2] forward default FFT\n"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_sweep_times_and_checks_every_direction_in_both_layouts(layout):
    cfg = algos.Config((2, 8, 9, 9), (8, 8, 3, 3), 1, (1,), (1,), 1, "cross_correlation", "float32", layout)
    rows = algos.sweep(cfg, algos.DIRECTIONS, ("default",), repeats=2, warmup=1)
    ok = [r for r in rows if r.supported]
    assert {r.direction for r in ok} == set(algos.DIRECTIONS) and any(r.deterministic is not None for r in rows)
    assert all(r.time_ms > 0 and r.tflops and r.workspace_bytes is not None and r.max_rel_error < 1e-2 for r in ok)
    assert all(r.reason for r in rows if not r.supported)
