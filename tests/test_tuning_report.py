"""Model-sweep reports on synthetic measurements (no GPU): picks, regret, filters, totals, table, CSV/JSON, plots,
the comparison of two databases, merging, and the CLI reporting from a database without measuring."""
from __future__ import annotations

import csv
import json

import pytest

from cudnn_py.cli import main
from cudnn_py.tuning import Environment, TuningDatabase, TuningWarning
from cudnn_py.tuning import report as rp
from cudnn_py.tuning.models import model
from cudnn_py.tuning.sweep import KIND, sweep

ENV = Environment("9.19.0", "Test GPU", "9.0", "13.0")


def cfg(tag, ms, *, ok=True, notes=(), det=True, ws=0, agrees=True):
    return {"tag": tag, "engine": int(tag[3:].split("_")[0]), "knobs": {}, "notes": list(notes), "deterministic": det,
            "ok": ok, "ms": ms if ok else None, "workspace": ws, "build_ms": 1.0, "diff": 0.0 if agrees else 1.0,
            "agrees": agrees if ok else None, "reason": "" if ok else "no"}


def record(p, configs, order, dtype="float16"):
    return {"key": p.key, "op": p.kind, "pass": p.pass_, "dtype": dtype, "problem": "", "order": order,
            "configs": configs, "settings": {"modes": ["A", "B", "FALLBACK"], "repeats": 10, "warmup": 2,
                                             "max_configs": None, "runtime_compilation": True}}


@pytest.fixture
def problems():
    return model("resnet50").problems(32, "float16", "NHWC")[:3]


def synthetic(problems):
    """First: the heuristic's pick is 25 % slow; second: right; third: A's pick fails to run, FALLBACK's runs."""
    a, b, c = problems
    return {a.key: record(a, [cfg("eng1", 1.25), cfg("eng2", 1.0, det=False, ws=1 << 30), cfg("eng3", 1.1)],
                          {"A": ["eng1", "eng2", "eng3"], "B": ["eng3", "eng1"], "FALLBACK": ["eng3"]}),
            b.key: record(b, [cfg("eng4", 2.0), cfg("eng5", 2.05)], {"A": ["eng4"], "B": ["eng5"], "FALLBACK": []}),
            c.key: record(c, [cfg("eng6", None, ok=False), cfg("eng7", 3.0, notes=("reduced_precision_reduction",)),
                              cfg("eng8", 2.5)], {"A": ["eng6"], "B": [], "FALLBACK": ["eng7", "eng8"]})}


def test_picks_regret_and_totals(problems):
    rows = rp.analyse(problems, synthetic(problems))
    first, second, third = rows
    assert first.best == "eng2" and first.picks["heuristic"] == ("eng1", 1.25)
    assert first.regret["heuristic"] == pytest.approx(0.25) and first.regret["B"] == pytest.approx(0.1)
    assert first.missed and not second.missed and second.regret["B"] == pytest.approx(0.025)
    assert third.picks["A"] is None and third.picks["heuristic"] == ("eng7", 3.0) and third.ran == 2
    assert third.regret["heuristic"] == pytest.approx(0.2) and third.picks["B"] is None
    t = rp.totals(rows)
    counts = [p.count for p in problems]
    assert t["heuristic_ms"] == pytest.approx(1.25 * counts[0] + 2.0 * counts[1] + 3.0 * counts[2])
    assert t["tuned_ms"] == pytest.approx(1.0 * counts[0] + 2.0 * counts[1] + 2.5 * counts[2])
    assert t["misses"] == 2 and t["tuned_ms"] <= t["heuristic_ms"] and t["nothing_usable"] == 0
    text = rp.format_table(rows) + "\n" + rp.format_totals(t)
    assert "MISS" in text and "25.0%" in text and "misses by > 5%: 2" in text


def test_filters_change_the_best_and_the_picks(problems):
    recs = synthetic(problems)
    first = rp.analyse(problems, recs, rp.Filters(deterministic=True))[0]
    assert first.best == "eng3" and first.picks["heuristic"] == ("eng1", 1.25)
    assert rp.analyse(problems, recs, rp.Filters(workspace_limit=1 << 20))[0].best == "eng3"
    third = rp.analyse(problems, recs, rp.Filters(no_reduced_precision=True))[2]
    assert third.picks["heuristic"] == ("eng8", 2.5) and third.regret["heuristic"] == 0
    tf32 = rp.Filters(no_tf32=True)
    assert not tf32.allows(cfg("eng1", 1.0, notes=("tensor_core",)), "float32")
    assert tf32.allows(cfg("eng1", 1.0, notes=("tensor_core",)), "float16")
    assert rp.Filters(True, True, True, 5).text() == ("deterministic, no TF32, no reduced-precision reduction, "
                                                      "workspace <= 5 B")
    nothing = rp.analyse(problems, recs, rp.Filters(workspace_limit=-1))
    assert all(r.best is None for r in nothing) and rp.totals(nothing)["nothing_usable"] == 3


def test_a_configuration_that_disagrees_is_never_picked(problems):
    recs = synthetic(problems)
    recs[problems[0].key]["configs"][1] = cfg("eng2", 0.5, agrees=False)     # fastest, and wrong
    first = rp.analyse(problems, recs)[0]
    assert first.best == "eng3" and first.disagree == 1 and "1 disagree" in rp.format_table([first])


def test_agreement_marks_the_configurations_that_differ_from_the_median():
    import numpy as np

    from cudnn_py.tuning.compare import agreement
    rng = np.random.default_rng(0)
    good = rng.standard_normal(1000).astype(np.float32)
    samples = {f"eng{i}": [good + rng.standard_normal(1000).astype(np.float32) * 1e-4, good[:10]] for i in range(4)}
    samples["eng7"] = [rng.standard_normal(1000).astype(np.float32), good[:10]]           # garbage
    samples["eng8"] = [good.copy(), np.full(10, np.nan, np.float32)]                      # one output unwritten
    rows = {t: {} for t in samples}
    agreement(samples, rows, "float16")
    assert [t for t in rows if not rows[t]["agrees"]] == ["eng7", "eng8"]
    assert rows["eng0"]["diff"] < 1e-3 and rows["eng8"]["diff"] == 1e300 and json.dumps(rows)
    lone = {"eng1": {}}
    agreement({"eng1": [np.full(4, np.nan, np.float32)]}, lone, "float32")
    assert lone["eng1"]["agrees"] is False


def test_unmeasured_and_unsupported_operations_are_listed(problems):
    recs = synthetic(problems)
    del recs[problems[1].key]
    recs[problems[2].key] = dict(recs[problems[2].key], configs=[], order={}, problem="no engine")
    rows = rp.analyse(problems, recs)
    assert rows[1].problem == "not measured" and rows[2].problem == "no engine" and rows[2].best is None
    assert rp.totals(rows)["compared"] == 1


def test_csv_json_and_plot(problems, tmp_path):
    rows = rp.analyse(problems, synthetic(problems))
    rp.write_csv(rows, tmp_path / "r.csv")
    got = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert [r["key"] for r in got] == [p.key for p in problems] and got[0]["heuristic_pick"] == "eng1"
    assert float(got[0]["heuristic_regret"]) == pytest.approx(0.25)
    rp.write_json(rows, rp.totals(rows), {"model": "resnet50"}, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["meta"]["model"] == "resnet50" and doc["totals"]["misses"] == 2 and len(doc["operations"]) == 3
    assert doc["records"] == {}
    details = rp.format_details(rows[0], synthetic(problems)[problems[0].key], rp.Filters(deterministic=True))
    lines = details.splitlines()
    assert lines[1].split()[:3] == ["eng2", "1.0000", "ms"] and "(filtered)" in lines[1] and "A#1 B#" not in lines[1]
    assert "A#0 B#1" in lines[3] and "eng1" in lines[3]
    pytest.importorskip("matplotlib")
    assert rp.plot(rows, tmp_path / "r.png", "title")
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _filled(path, problems, env, scale=1.0, swap=False, keep=3):
    db = TuningDatabase(path, environment=env)
    for key, rec in list(synthetic(problems).items())[:keep]:
        rec = json.loads(json.dumps(rec))
        for c in rec["configs"]:
            if c["ms"] is not None:
                c["ms"] *= scale
        if swap and key == problems[1].key:
            rec["configs"][1]["ms"] = 1.0
        db.record(KIND, key, rec)
    return db


def test_compare_two_databases(problems, tmp_path):
    a = _filled(tmp_path / "a.sqlite", problems, ENV)
    b = _filled(tmp_path / "b.sqlite", problems, Environment("9.19.0", "Other GPU", "10.0", "13.0"), 1.02,
                swap=True, keep=2)
    changes, info = rp.compare(a, b, threshold=0.05)
    assert info["common"] == 2 and info["only_a"] == 1 and info["only_b"] == 0
    (ch,) = changes                      # a 2 % change is under the threshold; the second's best moved
    assert ch.key == problems[1].key and ch.best_changed and (ch.best_a, ch.best_b) == ("eng4", "eng5")
    assert ch.ratio == pytest.approx(0.5)
    assert len(rp.compare(a, b, threshold=0.01)[0]) == 2
    text = rp.format_compare(changes, info, 0.05)
    assert "Other GPU" in text and "1 changed" in text


def test_sweep_uses_stored_records_without_a_gpu(problems, tmp_path, monkeypatch):
    db = _filled(tmp_path / "a.sqlite", problems, ENV)
    records, measured = sweep(problems, db)
    assert measured == 0 and records == synthetic(problems)
    import cudnn_py.core.handle

    def no_gpu(*a, **k):
        raise RuntimeError("no GPU here")
    monkeypatch.setattr(cudnn_py.core.handle, "Handle", no_gpu)
    db.record(KIND, problems[0].key, {"configs": "junk"})
    with pytest.warns(TuningWarning, match="malformed"), pytest.raises(SystemExit, match="1 operations"):
        sweep(problems, db)
    db.record(KIND, problems[0].key, synthetic(problems)[problems[1].key])     # well-formed, another operation's
    with pytest.warns(TuningWarning, match="another operation"), pytest.raises(SystemExit, match="1 operations"):
        sweep(problems, db)
    with pytest.raises(SystemExit, match="3 operations"):
        sweep(problems, db, remeasure=True)


def test_a_record_is_reused_only_when_measured_as_thoroughly(problems):
    from cudnn_py.tuning.sweep import Settings, covers
    rec = synthetic(problems)[problems[0].key]
    assert covers(rec, Settings()) and covers(rec, Settings(repeats=3, modes=("A",), max_configs=5))
    assert not covers(rec, Settings(repeats=11))
    quick = dict(rec, settings=dict(rec["settings"], repeats=3, max_configs=4, runtime_compilation=False))
    assert covers(quick, Settings(repeats=3, max_configs=2, runtime_compilation=False))
    for finer in (Settings(repeats=3, runtime_compilation=False), Settings(repeats=3, max_configs=8),
                  Settings(repeats=3, max_configs=2), Settings(repeats=10)):
        assert not covers(quick, finer), finer
    assert not covers(dict(rec, settings=None), Settings())


def test_cli_reports_from_the_database_and_merges_and_compares(problems, tmp_path, monkeypatch, capsys):
    from cudnn_py.tuning import fingerprint
    monkeypatch.setitem(fingerprint._cache, 0, ENV)
    path = tmp_path / "a.sqlite"
    _filled(path, problems, ENV).close()
    out = tmp_path / "out"
    argv = ["algos", "--model", "resnet50", "--batch", "32", "--dtype", "float16", "--layout", "NHWC", "--layers",
            "3", "--db", str(path), "--csv", f"{out}.csv", "--json", f"{out}.json", "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "3 operations: 0 measured" in text and "misses by > 5%: 2" in text
    assert json.loads(open(f"{out}.json").read())["records"][problems[0].key]["configs"][0]["tag"] == "eng1"
    assert json.loads(open(f"{out}.json").read())["meta"]["environment"] == ENV.text()
    assert main(argv[:-5] + ["--shard", "1/3", "--deterministic", "--details", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "1 operations (shard 1/3): 0 measured" in text and "  eng4" in text and "A#0" in text
    other = tmp_path / "b.sqlite"
    _filled(other, problems, ENV, 2.0, keep=2).close()
    assert main(["algos", "--compare", str(path), str(other)]) == 0
    assert "2 changed" in capsys.readouterr().out
    assert main(["algos", "--merge", str(tmp_path / "m.sqlite"), str(path), str(other)]) == 0
    assert "3 records merged" in capsys.readouterr().out
    assert TuningDatabase(tmp_path / "m.sqlite", environment=ENV).lookup(KIND, problems[0].key)["configs"][0]["ms"] \
        == 2.5
    with pytest.raises(SystemExit, match="--shard"):
        main(argv[:-5] + ["--shard", "3/3"])
    (tmp_path / "junk.sqlite").write_text("junk" * 100)
    with pytest.raises(SystemExit, match="algos: tuning database .*junk.sqlite: damaged"):
        main(["algos", "--compare", str(path), str(tmp_path / "junk.sqlite")])
    monkeypatch.setattr("cudnn_py.cli.info.driver_and_gpus",
                        lambda: {"cuda_version": None, "gpus": [], "why_none": "no GPU (test)"})
    with pytest.raises(SystemExit, match="no GPU to measure on: no GPU \\(test\\); nothing was written"):
        main(["algos", "--model", "resnet18", "--db", ":memory:", "--devices", "0"])
