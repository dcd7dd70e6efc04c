"""Racing model sweeps on a fake GPU (no device): a configuration far slower than the best is pruned after its
first sample, contenders are timed in full, --exhaustive times and checks everything, the progress line, and the
report naming the pruned configurations with their time."""
from __future__ import annotations

import re

import numpy as np
import pytest

from cudnn_py.cli import main
from cudnn_py.tuning import report as rp
from cudnn_py.tuning import sweep as sw
from cudnn_py.tuning.compare import MIN_CHECKED, PRUNE, Progress, race
from cudnn_py.tuning.models import model

GOOD = [np.linspace(-1, 1, 64, dtype=np.float32)]


class FakeGPU:
    """Stands for plans on a device: each tag's per-sample times (a float, or a list consumed in order), its
    output, and a log of what was built, timed (with its warm-up count) and checked."""

    def __init__(self, times: dict, outputs: dict | None = None, fail=()):
        self.times, self.outputs, self.fail = dict(times), outputs or {}, set(fail)
        self.built, self.timed, self.checked = [], [], []

    def build(self, row, tag):
        if tag in self.fail:
            raise RuntimeError(f"{tag}: not supported")
        self.built.append(tag)
        row["workspace"] = 0
        return tag

    def time_sample(self, tag, warmup):
        self.timed.append((tag, warmup))
        t = self.times[tag]
        return t.pop(0) if isinstance(t, list) else t

    def check(self, tag):
        self.checked.append(tag)
        return self.outputs.get(tag, GOOD)

    def samples(self, tag):
        return sum(1 for t, _ in self.timed if t == tag)


def rows(tags):
    return [({"tag": t, "ok": False, "ms": None, "reason": "", "build_ms": None, "diff": None, "agrees": None}, t)
            for t in tags]


def run_race(gpu, tags, orders=None, repeats=10, warmup=2, **kw):
    entries = rows(tags)
    account = race(entries, build=gpu.build, time_sample=gpu.time_sample, check=gpu.check,
                   orders=orders if orders is not None else {"A": list(tags)}, repeats=repeats, warmup=warmup,
                   dtype="float16", errors=(RuntimeError,), **kw)
    return {r["tag"]: r for r, _ in entries}, account


def test_a_configuration_far_slower_than_the_best_is_pruned_after_its_first_sample():
    gpu = FakeGPU({"fast": 1.0, "near": 1.4, "slow": 3.0, "slower": 40.0, "late_best": 0.8})
    got, account = run_race(gpu, ["fast", "near", "slow", "slower", "late_best"], orders={"A": ["fast"]})
    for tag in ("slow", "slower"):
        assert got[tag]["pruned"] and got[tag]["ok"] and got[tag]["samples"] == 1 and gpu.samples(tag) == 1
    assert got["slow"]["ms"] == 3.0 and got["slower"]["ms"] == 40.0       # the time each reached
    # contenders (within PRUNE of the best so far) are timed in full: repeats samples, warm-up before the first
    for tag in ("fast", "near", "late_best"):
        assert not got[tag]["pruned"] and got[tag]["samples"] == 10 and gpu.samples(tag) == 10
    # each timed sample follows warmup + 1 executions (the one the agreement check ran first before racing)
    assert [w for t, w in gpu.timed if t == "near"] == [3] + [0] * 9
    assert account["pruned"] == 2 and account["margin"] == PRUNE and account["pruned_within_margin"] == []
    assert gpu.built == ["fast", "near", "slow", "slower", "late_best"]       # each plan built once
    assert set(account["seconds"]) == {"build", "first_sample", "samples", "check", "agreement"}


def test_the_bar_is_the_best_median_so_far_and_a_noisy_first_sample_within_the_margin_is_timed_in_full():
    gpu = FakeGPU({"a": [1.0] * 10, "b": [1.45] + [0.9] * 9, "c": 1.4})
    got, _ = run_race(gpu, ["a", "b", "c"])
    assert not got["b"]["pruned"] and got["b"]["ms"] == 0.9 and got["b"]["samples"] == 10
    assert got["c"]["pruned"] and got["c"]["ms"] == 1.4          # 1.4 > 1.5 x 0.9: b's median is the bar now


def test_only_contenders_possible_picks_and_the_first_few_are_checked():
    tags = ["a0", "a1", "a2", "a3", "b0", "f0", "x"]
    gpu = FakeGPU({"a0": 1.0, "a1": 5.0, "a2": 5.0, "a3": 5.0, "b0": 5.0, "f0": 5.0, "x": 1.2})
    got, account = run_race(gpu, tags, orders={"A": ["a0", "a1", "a2", "a3"], "B": ["a1", "b0"], "FALLBACK": ["f0"]})
    # a0: contender; a1, a2: the first MIN_CHECKED to run; b0 is not B's pick (a1 ran before it); f0 is FALLBACK's
    # possible pick; x a contender. a3 and b0: pruned and not checked
    assert MIN_CHECKED == 3
    assert gpu.checked == ["a0", "a1", "a2", "f0", "x"] and account["checked"] == 5
    assert not got["a3"]["checked"] and got["a3"]["agrees"] is None and got["a3"]["diff"] is None
    assert got["a0"]["agrees"] is True and got["x"]["agrees"] is True


def test_exhaustive_times_and_checks_every_configuration_in_full():
    gpu = FakeGPU({"fast": 1.0, "slow": 30.0, "slower": 40.0})
    got, account = run_race(gpu, ["fast", "slow", "slower"], exhaustive=True)
    assert all(not r["pruned"] and r["samples"] == 10 and r["checked"] for r in got.values())
    assert gpu.checked == ["fast", "slow", "slower"] and account["pruned"] == 0 and account["margin"] is None
    # as before racing: the check's execution first, then warmup and every sample
    assert [w for t, w in gpu.timed if t == "slow"] == [2] + [0] * 9


def test_an_unwritten_output_does_not_set_the_bar_and_failures_are_kept_with_their_reason():
    nan = [np.full(64, np.nan, np.float32)]
    gpu = FakeGPU({"broken": 0.1, "real": 1.0, "other": 1.3, "timerless": float("nan")},
                  outputs={"broken": nan}, fail={"unsupported"})
    got, account = run_race(gpu, ["broken", "unsupported", "real", "other", "timerless"])
    assert not got["real"]["pruned"] and not got["other"]["pruned"]      # 0.1 was never the bar
    assert got["broken"]["agrees"] is False
    assert not got["unsupported"]["ok"] and "not supported" in got["unsupported"]["reason"]
    assert not got["timerless"]["ok"] and got["timerless"]["reason"].startswith("timing gave")
    assert account["pruned"] == 0


def test_pruned_within_the_margin_of_a_best_that_agrees_are_reported():
    wrong = [GOOD[0] * -1.0]
    gpu = FakeGPU({"wrong_fast": 0.5, "ok1": 1.0, "ok2": 1.0, "ok3": 1.0},
                  outputs={"wrong_fast": wrong})
    # the bar 0.5 came from a configuration whose finite output disagrees with the majority: the pruned ones that
    # are within the margin of the best that agrees are listed
    got, account = run_race(gpu, ["wrong_fast", "ok1", "ok2", "ok3"])
    assert got["wrong_fast"]["agrees"] is False and got["ok1"]["pruned"]
    assert account["pruned_within_margin"] == []      # no contender that agrees: nothing to compare with
    gpu = FakeGPU({"wrong_fast": 0.5, "good": [0.74] + [1.0] * 9, "ok1": 1.2, "ok2": 1.2},
                  outputs={"wrong_fast": wrong})
    got, account = run_race(gpu, ["wrong_fast", "good", "ok1", "ok2"])
    assert not got["good"]["pruned"] and got["ok1"]["pruned"] and account["pruned_within_margin"] == ["ok1", "ok2"]


def test_progress_line_format_and_estimate():
    now = [100.0]
    lines: list[str] = []
    prog = Progress(lines.append, operations=2, clock=lambda: now[0], interval=0)
    prog.begin("conv.fprop|n=32", 4)            # starts the clock at 100; the other operation's count is a guess
    assert lines[-1] == "ops 0/2  built 0/~8  timed 0/~8 (0 pruned)  eta -  conv.fprop|n=32"
    prog.visit("eng1_k2=1", "build")
    now[0] = 110.0
    prog.built("eng1_k2=1")                     # 10 s for one of 16 steps: 15 left
    assert lines[-1] == "ops 0/2  built 1/~8  timed 0/~8 (0 pruned)  eta 2m30s  conv.fprop|n=32 eng1_k2=1"
    prog.config("eng1_k2=1", pruned=True)
    prog.end()                                  # the other three never built nor ran (e.g. a problem)
    assert lines[-1].startswith("ops 1/2  built 4/~8  timed 4/~8 (1 pruned)  eta ")
    prog.begin("conv.dgrad|n=32", 6)            # now the total is known
    assert re.fullmatch(r"ops 1/2  built 4/10  timed 4/10 \(1 pruned\)  eta \d+s  conv\.dgrad\|n=32", lines[-1])
    prog.forget("conv.dgrad|n=32")              # its worker died: counted again when it begins again
    assert (prog.known, prog.pruned, prog.total()) == (4, 1, (8, True))
    assert Progress(None, 1).line() == "ops 0/1  built 0  timed 0 (0 pruned)  eta -  "


def test_progress_writes_at_most_one_line_per_interval_and_the_last_on_close():
    now = [0.0]
    lines: list[str] = []
    prog = Progress(lines.append, operations=1, clock=lambda: now[0])
    prog.begin("op", 100)
    for i in range(100):
        now[0] += 0.25                          # 4 events a second for 25 s
        prog.built(f"eng{i}")
    assert len(lines) == 1 + 25                 # the first, then one a second
    prog.end()
    prog.close()
    assert lines[-1].startswith("ops 1/1  built 100/100  timed 100/100 ")


# ------------------------------------------------------------------- measure / sweep on a fake graph API

class Cfg:
    def __init__(self, tag, index):
        self.tag, self.global_index, self.knobs = tag, index, {}
        self.is_deterministic, self.needs_runtime_compilation = True, False

    def notes(self):
        return []


class FakePlan:
    workspace_size = 0

    def __init__(self, tag):
        self.tag = tag

    def execute(self, handle, pack):
        return None


@pytest.fixture
def fake_graph_api(monkeypatch):
    """cudnn_py.graph's heuristics, plans and timing replaced: mode A offers eng0..eng3, FALLBACK eng4; eng0 runs in
    1 ms, eng1 1.2, the others 9 ms. Returns the log of timed samples."""
    import cudnn_py.graph as G
    times = {"eng0": 1.0, "eng1": 1.2, "eng2": 9.0, "eng3": 9.0, "eng4": 9.0}
    timed: list[tuple[str, int]] = []

    class Graph:
        def lower(self, h):
            return self

    monkeypatch.setattr(sw, "build_graph", lambda p: Graph())
    monkeypatch.setattr(G, "heuristics", lambda g, h, m: [Cfg(t, i) for i, t in enumerate(times)][:4] if m == "A"
                        else [Cfg("eng4", 4)] if m == "FALLBACK" else [])

    class Plan:
        @staticmethod
        def build(g, h, cfg):
            return FakePlan(cfg.tag)
    monkeypatch.setattr(G, "Plan", Plan)

    def time_plan(plan, h, pack, *, warmup, iters, flush=None):
        assert iters == 1
        if flush is not None:
            flush()
        timed.append((plan.tag, warmup))
        return times[plan.tag]
    monkeypatch.setattr(G, "time_plan", time_plan)
    monkeypatch.setattr(sw, "_bind", lambda g, h, block: ({}, {}))
    monkeypatch.setattr(sw, "sample", lambda outputs, stream: GOOD)
    return timed


class FakeHandle:
    stream = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def test_measure_races_the_configurations_and_the_record_says_so(fake_graph_api):
    p = model("resnet50").problems(32, "float16", "NHWC")[0]
    rec = sw.measure(p, FakeHandle(), sw.Settings(repeats=5, warmup=1))
    assert sw.valid_record(rec) and rec["order"] == {"A": ["eng0", "eng1", "eng2", "eng3"], "B": [],
                                                     "FALLBACK": ["eng4"]}
    by = {c["tag"]: c for c in rec["configs"]}
    assert [t for t, c in by.items() if c["pruned"]] == ["eng2", "eng3", "eng4"]
    assert by["eng0"]["samples"] == by["eng1"]["samples"] == 5 and by["eng2"]["samples"] == 1
    assert by["eng4"]["checked"] and not by["eng3"]["checked"]       # FALLBACK's pick is checked, eng3 is not
    assert rec["race"]["pruned"] == 3 and rec["settings"]["exhaustive"] is False
    assert "heuristics" in rec["race"]["seconds"]
    # the report names the pruned configurations and the time each reached
    (res,) = rp.analyse([p], {p.key: rec})
    assert res.pruned == 3 and res.best == "eng0" and res.picks["FALLBACK"] == ("eng4", 9.0)
    assert res.pruned_picks == ["FALLBACK"]
    assert "3 pruned" in rp.format_table([res])
    details = rp.format_details(res, rec).splitlines()
    assert any(line.split()[:3] == ["eng3", "9.0000", "ms"] and "pruned after 1 sample, not checked" in line
               for line in details)
    assert any(line.split()[0] == "eng2" and line.endswith("pruned after 1 sample") for line in details)  # 3rd run
    assert "pruned" not in next(line for line in details if line.strip().startswith("eng0"))
    exhaustive = sw.measure(p, FakeHandle(), sw.Settings(repeats=5, warmup=1, exhaustive=True))
    assert all(c["samples"] == 5 and c["checked"] and not c["pruned"] for c in exhaustive["configs"])
    assert sw.covers(exhaustive, sw.Settings(exhaustive=True, repeats=5))
    assert sw.covers(rec, sw.Settings(repeats=5)) and not sw.covers(rec, sw.Settings(repeats=5, exhaustive=True))
    old = dict(rec, settings={k: v for k, v in rec["settings"].items() if k != "exhaustive"})
    assert sw.covers(old, sw.Settings(repeats=5, exhaustive=True))       # before racing: every one in full
    assert "3 pruned after their first sample" in sw.time_summary([rec])
    assert "every one in full (--exhaustive)" in sw.time_summary([exhaustive])


def test_sweep_progress_counts_operations_and_configurations_of_the_whole_run(fake_graph_api, monkeypatch, tmp_path):
    import cudnn_py.core.handle
    from cudnn_py.tuning import TuningDatabase
    monkeypatch.setattr(cudnn_py.core.handle, "Handle", lambda device: FakeHandle())
    problems = model("resnet50").problems(32, "float16", "NHWC")[:2]
    lines: list[str] = []
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        records, measured = sw.sweep(problems, db, settings=sw.Settings(repeats=3, warmup=0), progress=lines.append)
    assert measured == 2 and all(r["race"]["pruned"] == 3 for r in records.values())
    assert re.fullmatch(r"ops 0/2  built 0/~10  timed 0/~10 \(0 pruned\)  eta -  conv\.\S+", lines[0])
    assert re.fullmatch(r"ops 2/2  built 10/10  timed 10/10 \(6 pruned\)  eta 0s  conv\.\S+ eng4", lines[-1])


def _cli_argv(tmp_path, *extra):
    return ["algos", "--model", "resnet50", "--batch", "32", "--dtype", "float16", "--layout", "NHWC", "--layers",
            "1", "--db", str(tmp_path / "t.sqlite"), "--quiet", "--jobs", "1", *extra]


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU as the driver reports it, and a handle on it that does nothing (with fake_graph_api: a whole sweep)."""
    import cudnn_py.cli.info
    import cudnn_py.core.handle
    monkeypatch.setattr(cudnn_py.core.handle, "Handle", lambda device: FakeHandle())
    monkeypatch.setattr(cudnn_py.cli.info, "driver_and_gpus", lambda: {
        "cuda_version": "13.0", "gpus": [{"index": 0, "name": "Test GPU", "sm": 90, "memory_gib": 80.0}],
        "why_none": ""})


def test_cli_races_by_default_and_exhaustive_times_all(fake_graph_api, fake_gpu, tmp_path, capsys):
    assert main(_cli_argv(tmp_path, "--details")) == 0
    out = capsys.readouterr().out
    assert "1 operations: 1 measured" in out and "3 pruned after their first sample" in out
    assert "3 pruned" in out and "pruned after 1 sample" in out
    n = len(fake_graph_api)
    assert main(_cli_argv(tmp_path, "--exhaustive")) == 0          # the raced record does not cover it
    out = capsys.readouterr().out
    assert "1 operations: 1 measured" in out and "every one in full (--exhaustive)" in out
    assert len(fake_graph_api) - n == 5 * 10
    assert main(_cli_argv(tmp_path)) == 0                          # the exhaustive record covers a race
    assert "1 operations: 0 measured" in capsys.readouterr().out


def test_compare_counts_the_same_picks_of_a_race_against_an_exhaustive_run(tmp_path):
    from cudnn_py.tuning import Environment, TuningDatabase
    from cudnn_py.tuning.sweep import KIND
    env = Environment("9.19.0", "Test GPU", "9.0", "13.0")
    p1, p2, p3 = model("resnet50").problems(32, "float16", "NHWC")[:3]

    def rec(p, times):
        return {"key": p.key, "op": p.kind, "pass": p.pass_, "dtype": "float16", "problem": "",
                "order": {"A": list(times)}, "settings": {},
                "configs": [{"tag": t, "ok": True, "ms": ms, "agrees": True, "notes": []} for t, ms in times.items()]}
    with TuningDatabase(tmp_path / "raced.sqlite", environment=env) as a, \
            TuningDatabase(tmp_path / "full.sqlite", environment=env) as b:
        for p, ra, rb in ((p1, {"e1": 1.0, "e2": 2.0}, {"e1": 1.0, "e2": 2.0}),          # same best
                          (p2, {"e1": 1.0, "e2": 2.0}, {"e1": 1.01, "e2": 1.0}),         # within 2 %
                          (p3, {"e1": 1.0, "e2": 2.0}, {"e1": 1.5, "e2": 1.0})):         # a miss
            a.record(KIND, p.key, rec(p, ra))
            b.record(KIND, p.key, rec(p, rb))
        changes, info = rp.compare(a, b, threshold=0.02)
    assert info["common"] == 3 and info["same_best"] == 1 and info["a_best_within"] == 2
    assert "same best configuration in 1 of 3; A's best within 2% of B's best as B timed it in 2 of 3" in \
        rp.format_compare(changes, info, 0.02)


# ------------------------------------------------------------------- build errors, --cold-l2, the run


def test_a_build_error_is_its_configurations_reason_and_the_others_are_measured(fake_graph_api, monkeypatch):
    import cudnn_py.graph as G
    from cudnn_py.errors import CudnnNotSupportedError

    class Plan:
        @staticmethod
        def build(g, h, cfg):
            if cfg.tag == "eng3":
                raise CudnnNotSupportedError("cudnnBackendFinalize", 3000, "eng3 does not build")
            return FakePlan(cfg.tag)
    monkeypatch.setattr(G, "Plan", Plan)
    p = model("resnet50").problems(32, "float16", "NHWC")[0]
    rec = sw.measure(p, FakeHandle(), sw.Settings(repeats=3, warmup=1), failed={"eng2": "a worker died on it"})
    by = {c["tag"]: c for c in rec["configs"]}
    assert not by["eng3"]["ok"] and "eng3 does not build" in by["eng3"]["reason"]      # cuDNN's reason
    assert not by["eng2"]["ok"] and by["eng2"]["reason"] == "a worker died on it" and by["eng2"]["build_ms"] is None
    assert by["eng0"]["ok"] and by["eng1"]["ok"] and all(c["build_ms"] > 0 for c in rec["configs"] if c["ok"])


def test_cold_l2_flushes_before_every_sample_and_warm_and_cold_records_do_not_cover_each_other(
        fake_graph_api, monkeypatch):
    import cudnn_py.graph.plans as plans
    flushes: list[int] = []
    made: list[object] = []

    def l2_flush(h):
        made.append(h)
        return lambda: flushes.append(1)
    monkeypatch.setattr(plans, "l2_flush", l2_flush)
    p = model("resnet50").problems(32, "float16", "NHWC")[0]
    warm = sw.measure(p, FakeHandle(), sw.Settings(repeats=3, warmup=1))
    assert not made and not flushes and warm["settings"]["cold_l2"] is False
    n = len(fake_graph_api)
    cold = sw.measure(p, FakeHandle(), sw.Settings(repeats=3, warmup=1, cold_l2=True))
    assert len(made) == 1 and len(flushes) == len(fake_graph_api) - n > 0 and cold["settings"]["cold_l2"] is True
    assert sw.covers(cold, sw.Settings(repeats=3, cold_l2=True)) and not sw.covers(cold, sw.Settings(repeats=3))
    assert not sw.covers(warm, sw.Settings(repeats=3, cold_l2=True))
    old = dict(warm, settings={k: v for k, v in warm["settings"].items() if k != "cold_l2"})
    assert sw.covers(old, sw.Settings(repeats=3)) and not sw.covers(old, sw.Settings(repeats=3, cold_l2=True))


def test_the_sweep_records_its_run_and_the_kernel_cache_it_started_with(fake_graph_api, monkeypatch, tmp_path):
    import cudnn_py.core.handle
    from cudnn_py.tuning import TuningDatabase
    monkeypatch.setattr(cudnn_py.core.handle, "Handle", lambda device: FakeHandle())
    monkeypatch.setenv("CUDA_CACHE_PATH", str(tmp_path / "kernels"))
    monkeypatch.delenv("CUDA_CACHE_DISABLE", raising=False)
    problems = model("resnet50").problems(32, "float16", "NHWC")[:2]
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        records, measured = sw.sweep(problems, db, settings=sw.Settings(repeats=3, warmup=0))
        (run,) = db.records(sw.RUN_KIND)
    assert measured == 2 and all(r["race"]["kernel_cache"] == "cold" for r in records.values())
    v = run.value
    assert v["measured"] == 2 and v["jobs"] == 1 and v["devices"] == [0] and v["kernel_cache"]["state"] == "cold"
    assert v["keys"] == [p.key for p in problems] and v["phases"]["build"] >= 0 and v["settings"]["repeats"] == 3
    assert "kernel cache cold" in sw.time_summary(list(records.values()))


def test_cli_cold_l2_reaches_the_sweep_and_bad_jobs_are_refused(fake_graph_api, fake_gpu, monkeypatch, tmp_path,
                                                                 capsys):
    from cudnn_py.tuning import TuningDatabase
    monkeypatch.setattr("cudnn_py.graph.plans.l2_flush", lambda h: lambda: None)
    assert main(_cli_argv(tmp_path, "--cold-l2")) == 0
    out = capsys.readouterr().out
    assert "1 measured on device 0" in out and "kernel cache: " in out
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        (rec,) = db.records(sw.KIND)
    assert rec.value["settings"]["cold_l2"] is True
    with pytest.raises(SystemExit, match="--jobs must be >= 1"):
        main(_cli_argv(tmp_path, "--jobs", "0"))
    with pytest.raises(SystemExit, match="--time-limit must be > 0"):
        main(_cli_argv(tmp_path, "--time-limit", "0"))


def test_compare_lists_faster_and_slower_operations_with_step_totals(tmp_path):
    from cudnn_py.tuning import Environment, TuningDatabase
    from cudnn_py.tuning.sweep import KIND
    p1, p2, p3 = model("resnet50").problems(32, "float16", "NHWC")[:3]

    def rec(p, times, count):
        return {"key": p.key, "op": p.kind, "pass": p.pass_, "dtype": "float16", "problem": "", "count": count,
                "order": {"A": list(times)}, "settings": {},
                "configs": [{"tag": t, "ok": True, "ms": ms, "agrees": True, "notes": []} for t, ms in times.items()]}
    with TuningDatabase(tmp_path / "a.sqlite", environment=Environment("9.14.0", "GPU", "9.0", "13.0")) as a, \
            TuningDatabase(tmp_path / "b.sqlite", environment=Environment("9.19.0", "GPU", "9.0", "13.0")) as b:
        for p, ra, rb, n in ((p1, {"e1": 1.0, "e2": 2.0}, {"e1": 0.5, "e2": 2.0}, 2),    # B faster
                             (p2, {"e1": 1.0, "e2": 2.0}, {"e1": 1.5, "e2": 2.0}, 1),    # B slower
                             (p3, {"e1": 1.0, "e2": 2.0}, {"e1": 1.01, "e2": 2.0}, 3)):  # the same
            a.record(KIND, p.key, rec(p, ra, n))
            b.record(KIND, p.key, rec(p, rb, n))
        changes, info = rp.compare(a, b, threshold=0.05)
    assert [c.key for c in changes] == [p1.key, p2.key] and info["faster"] == 1 and info["slower"] == 1
    assert info["totals"] == {"tuned_a": 6.0, "tuned_b": 5.53, "heuristic_a": 6.0, "heuristic_b": 5.53}
    text = rp.format_compare(changes, info, 0.05)
    assert "faster than A's by more than 5% in 1 operations, slower in 1" in text
    assert "tuned A 6.000 ms, B 5.530 ms (B/A 0.922)" in text
    lines = text.splitlines()
    assert lines[-2].endswith("faster") and lines[-1].endswith("slower")
