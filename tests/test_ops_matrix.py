"""benchmarks/ops_matrix.py on CPU: its arguments, its smoke mode, and that every row it builds calls the real API
with arguments the real signatures take (the calls themselves replaced by stand-ins)."""
from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import cudnn_py
from helpers import NoCallHandle, held_ms_stand_in, fake

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "ops_matrix.py"


@pytest.fixture(scope="module")
def om():
    spec = importlib.util.spec_from_file_location("ops_matrix", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ops_matrix"] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        del sys.modules["ops_matrix"]


def test_defaults_select_every_row(om):
    a = om.parse([])
    rows = om.selected(a.ops, a.dtypes, a.layouts, a.sizes)
    per_layout = sum(len(v) for f, v in om.FAMILIES.items() if f not in om.NO_LAYOUT)
    no_layout = sum(len(v) for f, v in om.FAMILIES.items() if f in om.NO_LAYOUT)
    assert len(rows) == (2 * per_layout + no_layout) * len(om.DTYPES) * len(om.SIZES)
    assert len(set(rows)) == len(rows)
    assert {r[1] for r in rows} == {op for v in om.FAMILIES.values() for op in v}


def test_filters_take_families_or_operations(om):
    a = om.parse(["--ops", "pooling,relu_bwd", "--dtypes", "float16,float32", "--layouts", "NHWC", "--sizes",
                  "large", "--rounds", "3", "--json", "x.json"])
    rows = om.selected(a.ops, a.dtypes, a.layouts, a.sizes)
    assert {r[1] for r in rows} == {*om.FAMILIES["pooling"], "relu_bwd"}
    assert {r[2] for r in rows} == {"float16", "float32"} and {(r[3], r[4]) for r in rows} == {("NHWC", "large")}
    assert len(rows) == 5 * 2 and a.rounds == 3 and a.json == "x.json"
    # rows x hidden families run under NCHW only, and not at all when NCHW is filtered out
    assert {r[3] for r in om.selected(["layer_norm"], ["bfloat16"], ["NCHW", "NHWC"], ["small"])} == {"NCHW"}
    assert om.selected(["layer_norm"], ["bfloat16"], ["NHWC"], ["small"]) == []


@pytest.mark.parametrize("argv, words", [
    (["--ops", "conv"], "'conv'"), (["--dtypes", "float8"], "float8"), (["--layouts", "CHWN"], "CHWN"),
    (["--sizes", "huge"], "huge"), (["--rounds", "0"], "--rounds"), (["--sample-ms", "-1"], "--sample-ms"),
    (["--dtypes", ","], "expected some of")])
def test_bad_arguments_refused(om, capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        om.parse(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_quick_selects_a_few_small_rows(om):
    a = om.parse(["--quick"])
    rows = om.selected(a.ops, a.dtypes, a.layouts, a.sizes)
    assert 1 <= len(rows) <= 8 and {r[4] for r in rows} == {"small"} and a.rounds == 2


# ---------------------------------------------------------------- every row's calls bind to the real API

class Stub:
    """A call of the real function ``name`` replaced: its arguments bound to the real signature (a TypeError for a
    keyword or argument count it does not take; outputs passed positionally where that is deprecated fail), nothing
    run."""

    def __init__(self, name, real, calls):
        self.name, self.sig, self.calls = name, inspect.signature(real), calls

    def __call__(self, *args, **kw):
        self.sig.bind(*args, **kw)
        params = list(self.sig.parameters.values())
        if any(p.kind is p.VAR_POSITIONAL for p in params[1:]):  # positional outputs past it are deprecated
            fixed = next(i for i, p in enumerate(params) if p.kind is p.VAR_POSITIONAL)
            assert len(args) <= fixed, f"{self.name}: outputs passed positionally (deprecated): {len(args)} args"
        self.calls.append((self.name, kw.get("engine")))
        return type("Out", (), {"reserve": fake((16,), np.uint8)})()


class FakeBench:
    """om.Bench's array factory without a GPU: fake device arrays, no torch."""

    def __init__(self, om):
        from cudnn_py.calls import engine_choice
        from cudnn_py.core.dtypes import as_numpy_dtype
        self.h, self.torch, self.np, self.ec = NoCallHandle(), None, np, engine_choice
        self.h.clear_caches = self.h.cache.clear
        self.dt = lambda d: np.dtype(np.float16) if d == "bfloat16" else as_numpy_dtype(d)

    def arr(self, shape, dtype, layout="NCHW", positive=False):
        order = [0, *range(2, len(shape)), 1] if layout == "NHWC" and len(shape) > 2 else list(range(len(shape)))
        st, acc = [0] * len(shape), 1
        for i in reversed(order):
            st[i], acc = acc, acc * shape[i]
        return fake(shape, self.dt(dtype), tuple(st)), None


CALLS = ("convolution_forward", "convolution_backward_data", "convolution_backward_filter", "pooling_forward",
         "pooling_backward", "activation_forward", "activation_backward", "softmax_forward", "softmax_backward",
         "lrn_forward", "lrn_backward", "dropout_forward", "dropout_backward", "op_tensor", "add_tensor",
         "scale_tensor", "set_tensor", "reduce_tensor", "transform_tensor", "batchnorm_forward_training",
         "batchnorm_forward_inference", "batchnorm_backward", "batchnorm_forward_training_ex",
         "batchnorm_backward_ex", "normalization_forward_training", "normalization_forward_inference",
         "normalization_backward")


def test_every_row_binds_to_the_real_signatures(om, monkeypatch):
    import cudnn_py.graph as G
    calls: list = []
    for name in CALLS:
        monkeypatch.setattr(cudnn_py, name, Stub(name, getattr(cudnn_py, name), calls))
    monkeypatch.setattr(cudnn_py, "Dropout", lambda h, p, seed=0: object())
    monkeypatch.setattr(G.Graph, "autotune", lambda self, h, pack: None)
    monkeypatch.setattr(G.Graph, "executor", lambda self, h, *ts: Stub("graph executor", lambda *a: None, calls))
    b = FakeBench(om)
    for fam, op, dtype, layout, size in om.selected(None, ["float16", "float64"], list(om.LAYOUTS), ["small"]):
        shape, case = om.build(b, fam, op, dtype, layout, size)
        assert shape and case.nbytes > 0 and case.fns["torch"] is None, op
        assert (case.flops > 0) == (fam == "convolution")
        for peer, fn in case.fns.items():
            if fn is not None:
                calls.clear()
                fn()
                assert calls, (op, peer)
                if peer in ("legacy", "graph") and case.fns.get("default") is not None:  # the engine= families
                    assert calls[-1][1] == peer, (op, peer, calls)
        engines = {p for p, f in case.fns.items() if f is not None}
        assert engines >= ({"graph"} if fam == "layer_norm" else {"legacy"}), op
        if op in ("bn_train", "norm_train", "add_tensor_bias", "scale_tensor"):
            assert case.mutated, op


def test_table_and_rates(om):
    r = om.Row("conv_fwd", "float16", "NHWC", "large", "x(32, 64, 56, 56)", 0.2, 14.8,
               ms={"legacy": 0.03, "graph": 0.02, "auto": 0.02, "default": 0.03, "torch": 0.021}, auto_engine="graph",
               host_us={"default": 20.0, "torch": 15.0}, notes=["graph: x"])
    e = om.Row("relu_fwd", "float64", "NHWC", "small", "(2, 32, 8, 8)", 0.001, 0.0, ms={"legacy": 0.002})
    text = om.table([r, e])
    assert "740.0T" in text and "0.95" in text and "graph: x" in text
    assert r.rate("torch") == "704.8T" and e.rate("legacy") == "500" and e.rate("auto") == "-"


def test_measure_rows_auto_choice_and_json(om, monkeypatch, tmp_path):
    """measure(): every peer probed, timed, the engine engine_choice kept named, JSON written after each row."""
    import io
    import json
    import types
    from cudnn_py.calls import engine_choice as ec
    calls: list = []
    for name in CALLS:
        monkeypatch.setattr(cudnn_py, name, Stub(name, getattr(cudnn_py, name), calls))
    monkeypatch.setattr(cudnn_py, "set_tensor", lambda h, y, v: 1 / 0)  # a peer that fails
    monkeypatch.setattr(ec, "_database", lambda: None)
    monkeypatch.setattr(ec, "_mode", ["measure"])

    # the graph path 'measures' faster
    monkeypatch.setattr(ec, "held_ms", held_ms_stand_in(lambda fn: {"graph": 1.0, "legacy": 2.0}[calls[-1][1]]))
    b = FakeBench(om)
    b.cudnn = types.SimpleNamespace(synchronize=lambda: None)
    b.host_us = lambda fn: 3.0
    b.device_ms = lambda fns: {k: 0.5 for k in fns}
    out = tmp_path / "rows.json"
    rows = om.measure(b, om.selected(["relu_fwd", "set_tensor"], ["float16"], ["NHWC"], ["small"]), str(out),
                      out=io.StringIO())
    relu, st = rows
    assert relu.auto_engine == "graph" and set(relu.ms) == {"legacy", "graph", "default", "auto"}
    assert relu.host_us["auto"] == 3.0 and not relu.notes
    assert st.ms == {} and st.auto_engine is None and "ZeroDivisionError" in st.notes[0]
    assert [r["op"] for r in json.loads(out.read_text())["rows"]] == ["relu_fwd", "set_tensor"]


def test_probe_times_every_configuration_and_names_the_limit(om, monkeypatch):
    """--probe: each configuration heuristics A/B/FALLBACK offer for the graph path's graph is built, run and timed
    beside torch (one that does not build is noted); legacy algorithms join where the case has them; the verdict
    names a cuDNN limitation only where no engine reaches torch."""
    import types
    import cudnn_py.graph as G
    from cudnn_py.tuning import sweep
    from cudnn_py.errors import InvalidValueError
    t = types.SimpleNamespace(shape=(2, 4), strides=(4, 1), np_dtype=np.dtype(np.float32), name="x")
    ex = types.SimpleNamespace(plan=types.SimpleNamespace(graph=types.SimpleNamespace(name="relu"), tag="eng0 k1"),
                               tensors=(t,))
    monkeypatch.setattr(om, "_graph_calls", lambda h, call: (call(), [(ex, (fake(t.shape),))])[1])
    cfgs = {tag: types.SimpleNamespace(tag=tag) for tag in ("eng0 k1", "eng3", "eng9")}
    orders = {"A": ["eng0 k1", "eng3"], "B": ["eng3"], "FALLBACK": ["eng9"]}
    monkeypatch.setattr(sweep, "heuristics", lambda g, h, modes: (cfgs, orders, {"B": "x"}))
    ran: list = []

    def build(g, h, cfg):
        if cfg.tag == "eng9":
            raise InvalidValueError("no engine")
        return types.SimpleNamespace(executor=lambda h, *ts: (lambda *a: ran.append(cfg.tag)))
    monkeypatch.setattr(G.Plan, "build", build)
    b = FakeBench(om)
    b.host_us = lambda fn: 3.0
    times = {"torch": 1.0, "graph": 1.31, "g0 eng0 k1 [A]": 1.3, "g0 eng3 [A,B]": 1.2, "legacy FFT": 0.9}
    b.device_ms = lambda fns: {k: times[k] for k in fns}
    live = {"graph": lambda: ran.append("graph path"), "torch": lambda: None}
    res = om.probe(b, om.Case(1.0, fns={}), live)
    assert ran == ["graph path", "eng0 k1", "eng3"]  # each built plan ran once before timing
    (g,) = res["graphs"]
    assert g["best"] == "g0 eng3 [A,B]" and g["best_ms"] == 1.2 and g["in_use_ms"] == 1.3
    assert res["engines"] == 2 and res["best_ms"] == 1.2 and res["torch_ms"] == 1.0
    assert any("eng9" in n for n in res["notes"]) and "heuristics B: x" in res["notes"]
    row = om.Row("relu_fwd", "float32", "NCHW", "large", "", 0.0, 0.0, probe=res)
    assert "cuDNN limitation: best of 2 engines = 1.2000 ms, torch 1.0000 ms (1.20x)" in om.probe_line(row)
    res = om.probe(b, om.Case(1.0, fns={}, algos=lambda: {"legacy FFT": lambda: None}), live)
    assert res["engines"] == 3 and res["best_legacy_ms"] == 0.9 and res["best_ms"] == 0.9
    row.probe = res
    assert "best of 3 engines = 0.9000 ms reaches torch" in om.probe_line(row)
    times["legacy call"] = 1.1  # a family without algorithms: its legacy call is one engine
    res = om.probe(b, om.Case(1.0, fns={}), {**live, "legacy": lambda: None})
    assert res["legacy"] == {"legacy call": 1.1} and res["engines"] == 3 and res["best_ms"] == 1.1


def test_graph_calls_records_each_executor_call_once(om):
    """The probe's record of what the graph path runs: every Executor call of one call, the executor and its
    arguments, per graph the last call (an autotuning run's timing executors come first); Executor's own call is
    back afterwards."""
    import types
    from cudnn_py.graph import Executor

    class Ex(Executor):  # an Executor over a plain function, with a plan of graph ``graph``
        def __new__(cls, fn, graph):
            self = functools.partial.__new__(cls, fn)
            self.runner = types.SimpleNamespace(plan=types.SimpleNamespace(graph=graph))
            return self
    got: list = []
    g1, g2 = object(), object()
    timing, a, b = Ex(lambda *x: None, g1), Ex(lambda *x: got.append(x), g1), Ex(lambda *x: None, g2)
    h = NoCallHandle()
    h.clear_caches = h.cache.clear
    rec = om._graph_calls(h, lambda: (timing(0), a(1, 2), b(3), a(4, 5)))
    assert [(e is a, args) for e, args in rec] == [(True, (4, 5)), (False, (3,))] and got == [(1, 2), (4, 5)]
    assert "__call__" not in Executor.__dict__
    # the operation modules' graph paths run a configuration's first call through Runner.run: recorded too
    from cudnn_py.graph.runner import Runner
    ran: list = []
    own = Runner.run
    Runner.run = lambda self, arrays: ran.append(arrays)  # the C call, stood in for
    try:
        r = Runner.__new__(Runner)
        r.plan = types.SimpleNamespace(graph=object())
        rec = om._graph_calls(h, lambda: (b(6), Runner.run(r, [7, 8])))
    finally:
        Runner.run = own
    assert [(e, args) for e, args in rec] == [(b, (6,)), (r, (7, 8))] and ran == [[7, 8]]


def test_markdown_table_from_json_files(om, tmp_path, capsys):
    """``--markdown`` renders --json files (no GPU): a column per peer any row has, the engine "auto" kept, auto and
    the best cudnn-py peer over torch."""
    rows = [{"op": "conv_fwd", "dtype": "float32", "layout": "NCHW", "size": "large", "auto_engine": "legacy",
             "ms": {"legacy": 0.083, "graph": 0.084, "default": 0.083, "auto": 0.084, "tuned": 0.0756, "torch": 0.078}},
            {"op": "relu_fwd", "dtype": "float16", "layout": "NHWC", "size": "large", "auto_engine": None,
             "ms": {"legacy": 0.057, "graph": None, "default": 0.057, "torch": None}}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"meta": {"gpu": "GPU", "cudnn": "9.19.0", "torch": "2.11", "rounds": 3,
                                         "date": "today"}, "rows": rows}))
    assert om.main(["--markdown", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("| operation | dtype | layout | size | legacy ms | graph ms | default ms | auto ms | tuned ms | "
                      "torch ms | auto / torch | best / torch |")
    assert out[2] == ("| conv_fwd | float32 | NCHW | large | 0.0830 | 0.0840 | 0.0830 | 0.0840 (legacy) | 0.0756 | "
                      "0.0780 | 1.08 | 0.97 |")
    assert out[3] == "| relu_fwd | float16 | NHWC | large | 0.0570 | - | 0.0570 | - | - | - | - | - |"
    assert out[-1] == "GPU, cuDNN 9.19.0, torch 2.11, 3 rounds, today"
    # probed rows add a verdict column: a cuDNN limitation past 1.05x torch, else "reaches torch"
    rows[0]["probe"] = {"best_ms": 0.0756, "torch_ms": 0.078, "engines": 47}
    rows[1]["probe"] = {"best_ms": 0.0570, "torch_ms": 0.050, "engines": 1}
    path.write_text(json.dumps({"meta": {}, "rows": rows}))
    assert om.main(["--markdown", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("| best / torch | probe |") and out[1] == "|---" * 13 + "|"
    assert out[2].endswith("| 1.08 | 0.97 | reaches torch: best of 47 0.97x |")
    assert out[3].endswith("| - | - | cuDNN limitation: best of 1 1.14x |")


def test_compare_two_trees_runs(om, tmp_path, capsys):
    """``--compare`` (no GPU): per cell the median over each tree's runs, new over old, as measured and at each run's
    torch level (its torch cells over their typical times); the cells more than --bar slower either way listed;
    torch's cells themselves never; a cell the new tree lost is."""
    def run(name, relu, conv, torch_relu, torch_conv, graph=None):
        rows = [{"op": "relu_fwd", "dtype": "float32", "layout": "NCHW", "size": "small",
                 "ms": {"legacy": relu, "graph": graph, "torch": torch_relu}},
                {"op": "conv_fwd", "dtype": "float32", "layout": "NCHW", "size": "small",
                 "ms": {"legacy": conv, "graph": 0.010, "torch": torch_conv}}]
        path = tmp_path / name
        path.write_text(json.dumps({"meta": {}, "rows": rows}))
        return str(path)
    old = [run("o1.json", 0.0020, 0.0100, 0.0030, 0.0100, graph=0.0025), run("o2.json", 0.0022, 0.0100, 0.0030, 0.0100)]
    # relu: median 0.00231 vs 0.0021 = 1.10x; conv legacy 1.03x; the old runs' torch cells at 0.962x and 0.943x of
    # their typical times (the new runs'): level 0.952, which takes relu's old median to 0.00220 (1.048x)
    new = [run("n1.json", 0.00231, 0.0103, 0.00312, 0.0106), run("n2.json", 0.00231, 0.0103, 0.00312, 0.0106),
           run("n3.json", 0.00900, 0.0103, 0.00312, 0.0106)]
    assert om.main(["--compare", ",".join(new), ",".join(old)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["conv_fwd float32 NCHW small legacy: 0.01030 vs 0.01000 ms = 1.030x (0.981x at each run's torch "
                   "level)",
                   "relu_fwd float32 NCHW small legacy: 0.00231 vs 0.00210 ms = 1.100x (1.048x at each run's torch "
                   "level)",
                   "relu_fwd float32 NCHW small graph: 0.00250 ms in the old tree only",
                   "3 cells (runs: 3 new, 2 old): 2 more than 2% slower, 1 at each run's torch level (levels 1.000 "
                   "1.000 1.000 / 0.952 0.952)"]
    assert om.main(["--compare", ",".join(new), ",".join(old), "--bar", "0.05"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("3 cells (runs: 3 new, 2 old): 1 more than 5% slower")
    # one slow run a tree (every cell, torch's too, 1.06x): the medians pick other runs in each tree, so conv reads
    # 1.03x as measured and 1.00x at each run's level
    old = [run("p1.json", 0.002, 0.0100, 0.003, 0.0100), run("p2.json", 0.002, 0.0100, 0.003, 0.0100),
           run("p3.json", 0.002, 0.0106, 0.00318, 0.0106)]
    new = [run("m1.json", 0.002, 0.0106, 0.00318, 0.0106), run("m2.json", 0.002, 0.0100, 0.003, 0.0100),
           run("m3.json", 0.002, 0.0103, 0.003, 0.0100)]
    assert om.main(["--compare", ",".join(new), ",".join(old)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "conv_fwd float32 NCHW small legacy: 0.01030 vs 0.01000 ms = 1.030x (1.000x at each run's torch level)",
        "3 cells (runs: 3 new, 3 old): 1 more than 2% slower, 0 at each run's torch level (levels 1.060 1.000 1.000 "
        "/ 1.000 1.000 1.060)"]


def test_docs_table_is_printed_from_the_stored_runs(om):
    """docs/graph_paths.md's large-size matrix is exactly what --markdown prints from the runs kept in docs/data (no
    hand-copied figure)."""
    root = BENCH.parent.parent
    runs = [str(root / "docs" / "data" / f"ops_matrix_h200_large_{n}.json") for n in ("convolution", "1", "2")]
    table = om.markdown(runs).split("\n\n")[0]
    assert len(table.splitlines()) == 2 + 256
    assert table in (root / "docs" / "graph_paths.md").read_text()


def test_docs_small_probe_table_is_printed_from_the_stored_probes(om):
    """docs/graph_paths.md's table of the probed small rows is exactly what --markdown prints from the probes kept in
    docs/data, each row with its verdict."""
    root = BENCH.parent.parent
    table = om.markdown([str(root / "docs" / "data" / "ops_matrix_h200_small_probes.json")])
    assert table.splitlines()[0].endswith("| probe |") and len(table.splitlines()) == 2 + 96 + 2
    assert all(line.endswith("x |") or "no engine ran" in line for line in table.splitlines()[2:98])
    assert table in (root / "docs" / "graph_paths.md").read_text()
