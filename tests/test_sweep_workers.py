"""A sweep in worker processes (cudnn_py.tuning.workers), on the CPU: stand-in workers (tests/sweep_standins.py)
that build, time, crash, hang, raise and exit, spawned as real processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import sweep_standins as si

from cudnn_py.cli import main
from cudnn_py.tuning import workers
from cudnn_py.tuning.compare import Progress
from cudnn_py.tuning.models import model

PROBLEMS = model("resnet50").problems(32, "float16", "NHWC")


def _run(problems, plan, *, jobs=3, devices=(0,), time_limit=60.0, opener=si.opener, starts=None):
    kept: dict[str, tuple[dict, int]] = {}
    lines: list[str] = []
    prog = Progress(lines.append, len(problems), interval=0)
    (starts if starts is not None else [])[:] = workers.run(problems, plan, devices=devices, jobs=jobs, work=si.work, opener=opener, progress=prog,
                keep=lambda p, rec, d: kept.__setitem__(p.key, (rec, d)), time_limit=time_limit)
    prog.close()
    return kept, lines


def _intervals(log: str, what: str, device: int | None = None) -> list[tuple[int, float, float]]:
    rows = [line.split() for line in open(log).read().splitlines()]
    return [(int(pid), float(a), float(b)) for pid, kind, a, b, d in rows
            if kind == what and device in (None, int(d))]


def _overlaps(a: list, b: list) -> int:
    """How many pairs of intervals of two processes, one from each list, overlap in time."""
    return sum(1 for p1, a1, b1 in a for p2, a2, b2 in b if p1 != p2 and a1 < b2 and a2 < b1)


def test_every_problem_is_measured_once_builds_overlap_and_timing_never_does(tmp_path):
    log = str(tmp_path / "events")
    problems = PROBLEMS[:8]
    starts: list[dict] = []
    kept, lines = _run(problems, si.Plan(seconds=0.05, log=log, gather=2), jobs=4, starts=starts)
    assert sorted(kept) == sorted(p.key for p in problems)
    assert all(rec["configs"][2]["ms"] == 3.0 and d == 0 for rec, d in kept.values())
    holds = sorted(_intervals(log, "hold"), key=lambda r: r[1])
    assert len(holds) == 8 and len({pid for pid, _, _ in holds}) > 1          # several workers timed
    assert all(a[2] <= b[1] for a, b in zip(holds, holds[1:]))               # one at a time on the device
    builds = _intervals(log, "build")
    assert _overlaps(builds, builds) > 0                                     # builds ran at once
    assert lines[-1].startswith("ops 8/8  built 24/24  timed 24/24 (0 pruned)  eta 0s")
    assert len(starts) == 4 and all(w["device"] == 0 for w in starts)   # each worker's start cost, by the parent
    built = [w for w in starts if w["first_build_s"] is not None]
    assert len(built) > 1 and all(0 < w["ready_s"] <= w["first_build_s"] for w in built)


def test_workers_spread_over_devices_each_with_its_own_lock(tmp_path):
    log = str(tmp_path / "events")
    kept, _ = _run(PROBLEMS[:6], si.Plan(seconds=0.1, log=log, gather=4), jobs=4, devices=(0, 1))
    assert {d for _, d in kept.values()} == {0, 1}
    assert all(rec["handle"] == f"handle on device {d}" for rec, d in kept.values())
    on0, on1 = _intervals(log, "hold", 0), _intervals(log, "hold", 1)
    assert on0 and on1 and _overlaps(on0, on0) == 0 and _overlaps(on1, on1) == 0   # one at a time on each device
    assert _overlaps(on0, on1) > 0                                                 # the two devices at once


def test_the_device_lock_settles_its_holders_work_before_it_lets_go(tmp_path):
    """``settle`` (a worker's handle's synchronize) runs while the lock is still held, on every release, an error
    inside the block included: what a worker queued under the lock finishes before another can time."""
    import fcntl
    path, held = str(tmp_path / "device0.lock"), []

    def settle():
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(True)
        else:
            held.append(False)
        finally:
            os.close(fd)
    lock = workers.DeviceLock(path, settle=settle)
    with lock:
        pass
    with pytest.raises(RuntimeError), lock:
        raise RuntimeError("a failed sample")
    assert held == [True, True]
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # free again
    os.close(fd)


def test_a_crash_while_building_loses_only_that_configuration(tmp_path):
    a, b = PROBLEMS[:2]
    kept, _ = _run([a, b], si.Plan(behaviour={a.key: "crash-build:eng1"}), jobs=2)
    rows = {r["tag"]: r for r in kept[a.key][0]["configs"]}
    assert rows["eng1"]["reason"] == "the worker process died (SIGSEGV) while building this configuration"
    assert rows["eng0"]["ok"] and rows["eng2"]["ok"]                         # measured again without it
    assert all(r["ok"] for r in kept[b.key][0]["configs"])


def test_a_worker_that_hangs_is_stopped_and_the_device_lock_is_free_again(tmp_path):
    a, b, c = PROBLEMS[:3]
    t0 = time.monotonic()
    kept, _ = _run([a, b, c], si.Plan(behaviour={a.key: "hang-time:eng2"}), jobs=2, time_limit=5.0)
    assert time.monotonic() - t0 < 30
    rows = {r["tag"]: r for r in kept[a.key][0]["configs"]}
    assert rows["eng2"]["reason"] == ("the worker process made no progress for 5 s and was stopped while timing "
                                      "this configuration")
    assert rows["eng0"]["ok"] and rows["eng1"]["ok"]
    assert all(r["ok"] for key in (b.key, c.key) for r in kept[key][0]["configs"])   # the lock was let go


@pytest.mark.parametrize("what, why", [
    ("raise", "RuntimeError: boom in "),
    ("exit", "the worker process exited with status 3 (prepare)"),
    ("kill", "the worker process died (SIGKILL: killed, perhaps for want of host memory) (prepare)"),
])
def test_a_worker_that_fails_outside_a_configuration_records_its_operation_as_failed(what, why):
    a, b = PROBLEMS[:2]
    kept, lines = _run([a, b], si.Plan(behaviour={a.key: what}), jobs=1)
    rec = kept[a.key][0]
    assert rec["problem"].startswith(why) and rec["configs"] == [] and rec["key"] == a.key
    assert all(r["ok"] for r in kept[b.key][0]["configs"])                   # the sweep went on
    assert lines[-1].startswith("ops 2/2 ")


def test_an_operation_whose_workers_keep_dying_is_recorded_as_failed():
    a, b = PROBLEMS[:2]
    kept, _ = _run([a, b], si.Plan(behaviour={a.key: "crash-build:*"}), jobs=1)
    rec = kept[a.key][0]
    assert workers.RETRIES == 3 and rec["problem"] == ("the worker process died (SIGSEGV) on configuration eng2 "
                                                       "(build)")
    assert [(r["tag"], r["ok"]) for r in rec["configs"]] == [("eng0", False), ("eng1", False)]
    assert all(r["reason"].endswith("while building this configuration") for r in rec["configs"])
    assert all(r["ok"] for r in kept[b.key][0]["configs"])


def test_no_handle_anywhere_refuses_in_one_line():
    with pytest.raises(SystemExit, match=r"cannot open a cuDNN handle on device 0: RuntimeError: no GPU 0 \(stand-in\) "
                                         r"\(a GPU is needed to measure 2 operations\)"):
        _run(PROBLEMS[:2], si.Plan(), jobs=2, opener=si.refuse)


def test_default_jobs_follow_cores_and_gpu_memory():
    assert workers.default_jobs([80.0], cores=16) == 16
    assert workers.default_jobs([6.0], cores=16) == 3
    assert workers.default_jobs([1.0, 1.0], cores=16) == 2       # at least one per device
    assert workers.default_jobs([80.0, 80.0], cores=64) == 64


def test_the_cli_sweeps_in_workers_into_the_database(tmp_path, monkeypatch, capsys):
    from cudnn_py.tuning import Environment, TuningDatabase, fingerprint
    from cudnn_py.tuning.sweep import KIND, RUN_KIND
    env = Environment("9.19.0", "Test GPU", "9.0", "13.0")
    monkeypatch.setitem(fingerprint._cache, 0, env)
    monkeypatch.setattr("cudnn_py.tuning.sweep.measure", si.work)
    monkeypatch.setattr(workers, "_open_handle", si.opener)
    monkeypatch.setattr("cudnn_py.cli.info.driver_and_gpus", lambda: {
        "cuda_version": "13.0", "gpus": [{"index": 0, "name": "Test GPU", "sm": 90, "memory_gib": 80.0}],
        "why_none": ""})
    db = tmp_path / "t.sqlite"
    assert main(["algos", "--model", "resnet50", "--layers", "5", "--jobs", "3", "--db", str(db), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "5 operations: 5 measured in 3 worker processes on device 0, 0 from" in out
    with TuningDatabase(db, environment=env) as t:
        assert len(t.records(KIND)) == 5
        (run,) = t.records(RUN_KIND)
    assert run.value["jobs"] == 3 and run.value["devices"] == [0]
    assert len(run.value["workers"]) == 3      # each worker's start cost (see the first test)


def test_interrupt_stops_every_worker_and_keeps_what_was_measured(tmp_path):
    """Ctrl-C (SIGINT to the process group) during a sweep in workers: exit 130, no worker left, records kept."""
    db, pids = tmp_path / "t.sqlite", tmp_path / "pids"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import sweep_standins as si
        import cudnn_py.cli.info as info
        from cudnn_py.cli import main
        from cudnn_py.tuning import Environment, fingerprint, sweep, workers
        fingerprint._cache[0] = Environment("9.19.0", "Test GPU", "9.0", "13.0")
        info.driver_and_gpus = lambda: {{"cuda_version": "13.0", "why_none": "",
                                          "gpus": [{{"index": 0, "name": "G", "sm": 90, "memory_gib": 80.0}}]}}
        sweep.measure, workers._open_handle = si.slow_work, si.opener
        sys.exit(main(["algos", "--model", "resnet50", "--layers", "6", "--jobs", "3", "--db", {str(db)!r},
                       "--quiet"]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "SWEEP_STANDIN_PIDS": str(pids)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (db.exists() and _count(db) >= 1):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:   # the sweep went on: stop it and show what it said
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the sweep did not stop within 60 s of the interrupt; its stderr:\n{proc.communicate()[1]}")
    assert proc.returncode == 130, err
    assert "interrupted; every operation measured before is kept in" in err and "Traceback" not in err
    assert _count(db) >= 1
    for pid in {int(p) for p in pids.read_text().split()}:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _count(db) -> int:
    import sqlite3
    try:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT COUNT(*) FROM records WHERE kind = 'layer_sweep'").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_without_a_gpu_a_sweep_refuses_in_one_line_and_writes_nothing(tmp_path):
    if __import__("cudnn_py.cli.info", fromlist=["x"]).driver_and_gpus()["gpus"]:
        pytest.skip("only without a GPU")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_PY_")}
    env.update(HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    got = subprocess.run([sys.executable, "-m", "cudnn_py", "algos", "--model", "resnet50", "--jobs", "8"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert got.returncode == 1 and got.stdout == ""
    assert got.stderr.count("\n") == 1 and got.stderr.startswith("algos --model: no GPU to measure on: ")
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_swallowed_on_its_way_still_stops_the_sweep():
    """Ctrl-C whose KeyboardInterrupt is raised inside code that swallows it (here the parent's ``keep``; a C
    extension clearing the error it finds does the same) stops the sweep on the loop's next turn: every worker
    stopped, KeyboardInterrupt raised, Python's own handler back. Without it the sweep would go on to the hang."""
    import multiprocessing
    problems = PROBLEMS[:4]
    plan = si.Plan(seconds=0.05, behaviour={p.key: "hang-time:eng0" for p in problems[1:]})
    kept: list[str] = []

    def keep(problem, rec, device):
        kept.append(problem.key)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)   # the handler runs here
        except KeyboardInterrupt:
            pass
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):  # a device each: the hanging worker holds no lock the other waits on
        workers.run(problems, plan, devices=(0, 1), jobs=2, work=si.work, opener=si.opener, keep=keep,
                    progress=Progress(lambda line: None, len(problems), interval=0), time_limit=60.0)
    assert kept and time.monotonic() - start < 30
    assert not multiprocessing.active_children()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
