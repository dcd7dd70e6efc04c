"""Model sweeps and the tuning database on the GPU: a measured record has the shape reports read, a stored record
is not measured again (also by a fresh process), the CLI's quick check runs, and "fastest" choices reach another
process through the database."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cudnn_py.tuning import TuningDatabase
from cudnn_py.tuning import report as rp
from cudnn_py.tuning.models import model
from cudnn_py.tuning.sweep import KIND, Settings, measure, sweep, valid_record

pytestmark = pytest.mark.gpu


def _problems():
    """One of each kind, small: a 3x3 convolution (three passes), ViT's MLP matmul, a layer norm, attention."""
    r18 = [p for p in model("resnet18").problems(2, "float16", "NHWC") if p.kind == "conv" and "r=3" in p.key][:3]
    vit = [p for p in model("vit-b16").problems(1, "float16") if p.kind in ("linear", "norm", "attention")]
    picked = {p.kind + p.pass_: p for p in vit}
    return r18 + [picked["linearfprop"], picked["linearwgrad"], picked["normforward"], picked["normbackward"],
                  picked["attentionforward"], picked["attentionbackward"]]


def test_measured_records_have_every_config_and_each_modes_order(handle):
    for p in _problems():
        rec = measure(p, handle, Settings(repeats=2, warmup=1, exhaustive=True))
        assert valid_record(rec) and rec["key"] == p.key and rec["problem"] == "", (p.key, rec["problem"])
        ok = [c for c in rec["configs"] if c["ok"]]
        assert ok, (p.key, [c["reason"] for c in rec["configs"]])
        assert rec["order"]["A"], p.key
        assert all(c["ms"] > 0 and c["workspace"] >= 0 and c["build_ms"] > 0 for c in ok)
        # every configuration's output matches the others' (NaN-poisoned first: an unwritten output disagrees)
        assert all(c["agrees"] for c in ok), (p.key, [(c["tag"], c["diff"]) for c in ok if not c["agrees"]])
        (res,) = rp.analyse([p], {p.key: rec})
        assert res.best_ms == min(c["ms"] for c in ok) and res.picks["heuristic"] is not None
        assert res.regret["heuristic"] >= 0


@pytest.mark.serial  # compares two sweeps' timings within 5 %: other shards' kernels at once would be in the samples
def test_a_race_times_the_contenders_in_full_and_agrees_with_the_exhaustive_best(handle):
    """Racing (the default): pruned configurations have one sample above PRUNE x the best and no more; every
    contender and every checked configuration's output agrees; the best is an exhaustive run's best or within 5 %
    of its time (two measurements of one configuration differ by a few per cent)."""
    from cudnn_py.tuning.compare import PRUNE
    for p in _problems()[:4]:
        raced = measure(p, handle, Settings(repeats=5, warmup=1))
        full = measure(p, handle, Settings(repeats=5, warmup=1, exhaustive=True))
        ok = [c for c in raced["configs"] if c["ok"]]
        best = min(c["ms"] for c in ok if not c["pruned"])
        assert all(c["samples"] == 1 and c["ms"] > PRUNE * best for c in ok if c["pruned"]), p.key
        assert all(c["samples"] == 5 and c["checked"] for c in ok if not c["pruned"]), p.key
        assert all(c["agrees"] for c in ok if c["checked"]), (p.key, [(c["tag"], c["diff"]) for c in ok])
        (r,), (f,) = rp.analyse([p], {p.key: raced}), rp.analyse([p], {p.key: full})
        assert r.best == f.best or r.best_ms <= 1.05 * f.best_ms, (p.key, r.best, r.best_ms, f.best, f.best_ms)


def test_legacy_records_time_every_algorithm_beside_the_v7_order(handle):
    from cudnn_py.tuning.legacy import measure_legacy
    for p in model("resnet18").problems(2, "float16", "NHWC", legacy=True)[:3]:
        rec = measure_legacy(p, handle, Settings(repeats=2, warmup=1))
        assert valid_record(rec) and rec["problem"] == "" and rec["order"]["A"], p.key
        ok = [c for c in rec["configs"] if c["ok"]]
        assert ok and all(c["agrees"] for c in ok if c["checked"]), (p.key, [(c["tag"], c["diff"]) for c in ok])
        assert all(c["checked"] for c in ok if not c["pruned"])
        (res,) = rp.analyse([p], {p.key: rec})
        assert res.picks["heuristic"] is not None and res.regret["heuristic"] >= 0


def test_a_stored_sweep_is_not_measured_again(handle, tmp_path):
    problems = _problems()[:2]
    db = TuningDatabase(tmp_path / "t.sqlite")
    first, measured = sweep(problems, db, settings=Settings(repeats=2, warmup=1))
    assert measured == 2 and db.count(KIND) == 2
    again, measured = sweep(problems, TuningDatabase(tmp_path / "t.sqlite"),
                            settings=Settings(repeats=2, warmup=1))
    assert measured == 0 and again == first
    # asking for more repeats than were made measures again
    assert sweep(problems[:1], db, settings=Settings(repeats=3, warmup=1))[1] == 1


def test_cli_quick_check_and_a_fresh_process_reads_the_database(tmp_path):
    path, js = tmp_path / "t.sqlite", tmp_path / "r.json"
    argv = [sys.executable, "-m", "cudnn_py", "algos", "--model", "resnet18", "--batch", "4", "--dtype", "float16",
            "--layout", "NHWC", "--quick", "--db", str(path), "--json", str(js), "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "4 operations: 4 measured" in out.stdout and "tuned" in out.stdout
    doc = json.loads(js.read_text())
    assert doc["totals"]["tuned_ms"] <= doc["totals"]["heuristic_ms"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and "4 operations: 0 measured" in out.stdout


def test_fastest_choices_reach_another_process_through_the_database(handle, tmp_path):
    import cudnn_py.calls.fastest_cache as AC
    import cudnn_py.calls.algorithms as alg
    from cudnn_py.core.memory import to_device
    from cudnn_py.ops import conv_calls as cv
    path = tmp_path / "t.sqlite"
    alg.algorithm_cache.use_database(TuningDatabase(path))
    try:
        rng = np.random.default_rng(0)
        x, w = (to_device(rng.standard_normal(s).astype(np.float32)) for s in ((2, 8, 16, 16), (4, 8, 3, 3)))
        cv.convolution_forward(handle, cv.Convolution(padding=1), x, w, autotune=True, engine="legacy")
        ((key, rec),) = alg.algorithm_cache.entries()
    finally:
        alg.algorithm_cache.use_database(AC._default_database)
    fresh = alg.AlgorithmCache(TuningDatabase(path))
    assert fresh.get(key) == rec and TuningDatabase(path).count(AC.KIND) == 1
