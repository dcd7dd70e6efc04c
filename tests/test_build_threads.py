"""Plans built on a pool of threads (no device: stand-ins for the builds), time_plan's L2 flush, the kernel cache's
state, and the algos command's frictions (short errors, no file left by a refused sweep)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cudnn_py import capi
from cudnn_py.errors import CudnnNotSupportedError, InvalidValueError
from cudnn_py.graph import plans
from cudnn_py.graph.plans import MAX_BUILD_THREADS, build_ahead, default_build_threads
from cudnn_py.tuning.sweep import kernel_cache, kernel_cache_text

ROOT = Path(__file__).resolve().parents[1]


def _unsupported(tag: str) -> CudnnNotSupportedError:
    return CudnnNotSupportedError("cudnnBackendFinalize", capi.CUDNN_STATUS_NOT_SUPPORTED, f"{tag}: no engine")


# ------------------------------------------------------------------------------------------- build_ahead

def test_results_come_back_in_the_order_given_whatever_order_the_builds_finish_in():
    def build(i):
        time.sleep(0.002 * (7 - i % 8))     # the first ones finish last
        return i, threading.current_thread().name
    done = build_ahead([lambda i=i: build(i) for i in range(24)], 6)
    got = [f.result() for f in done]
    assert [i for i, _ in got] == list(range(24))
    assert all(name.startswith("cudnn_py-build") for _, name in got) and len({n for _, n in got}) > 1


def test_the_builds_run_at_once():
    """threads=4 builds that each wait for the other three all finish (one at a time, they would time out)."""
    barrier = threading.Barrier(4, timeout=10)
    done = build_ahead([barrier.wait] * 4, 4)
    assert sorted(f.result() for f in done) == [0, 1, 2, 3]


def test_one_thread_builds_in_the_calling_thread_one_after_the_other():
    seen = []
    done = build_ahead([lambda i=i: seen.append((i, threading.get_ident())) or i for i in range(3)], 1)
    assert [f.result() for f in done] == [0, 1, 2] and seen == [(i, threading.get_ident()) for i in range(3)]


@pytest.mark.parametrize("threads", [1, 3])
def test_a_builders_error_is_raised_by_its_result_as_the_cudnn_py_error(threads):
    def build(i):
        if i == 1:
            raise _unsupported(f"eng{i}")
        return i
    done = build_ahead([lambda i=i: build(i) for i in range(4)], threads)
    assert [done[i].result() for i in (0, 2, 3)] == [0, 2, 3]
    with pytest.raises(CudnnNotSupportedError, match="eng1: no engine"):
        done[1].result()


def test_many_builds_on_few_threads_finish_and_the_worker_threads_end():
    before = threading.active_count()
    done = build_ahead([lambda i=i: i * i for i in range(200)], 3)
    assert [f.result() for f in done] == [i * i for i in range(200)]
    assert threading.active_count() == before


def test_each_worker_makes_the_handles_device_current(monkeypatch):
    made: list[tuple[int, str]] = []
    monkeypatch.setattr(plans, "_make_current", lambda d: made.append((d, threading.current_thread().name)))
    build_ahead([lambda: None] * 6, 2, device=3)
    assert len(made) == 2 and {d for d, _ in made} == {3} and all(n.startswith("cudnn_py-build") for _, n in made)


def test_thread_counts(monkeypatch):
    with pytest.raises(InvalidValueError, match="build threads must be >= 1"):
        build_ahead([lambda: None], 0)
    with pytest.raises(InvalidValueError, match="build threads"):
        build_ahead([lambda: None], MAX_BUILD_THREADS + 1)
    assert default_build_threads() == 1  # parallel builds are asked for (docs/tuning.md says why)


# ------------------------------------------------------------------------------------- build_plans("all")

class _Cfg:
    def __init__(self, i):
        self.tag, self.source, self.global_index = f"eng{i}", f"heuristics A #{i}", i


class _Handle:
    device = None

    def __init__(self):
        self.cache: dict = {}


class _Graph:
    name, ops = "g", ()

    def key(self):
        return ("g",)

    def lower(self, handle):
        return self


def _fake_candidates(monkeypatch, n, fail=(), delay=0.0):
    threads: set[str] = set()

    def candidates(graph, handle, modes, deterministic, runtime_compilation, reasons):
        yield from (_Cfg(i) for i in range(n))
        yield _Cfg(0)                             # offered twice (by another mode): built once

    def build(graph, handle, cfg):
        threads.add(threading.current_thread().name)
        time.sleep(delay * (n - cfg.global_index))
        if cfg.global_index in fail:
            raise _unsupported(cfg.tag)
        return cfg.tag
    monkeypatch.setattr(plans, "_candidates", candidates)
    monkeypatch.setattr(plans.Plan, "build", staticmethod(build))
    monkeypatch.setattr(plans, "default_build_threads", lambda: 4)
    return threads


def test_build_plans_all_builds_every_candidate_on_threads_in_the_candidates_order(monkeypatch):
    threads = _fake_candidates(monkeypatch, 8, fail={2}, delay=0.002)
    got = plans.build_plans(_Graph(), _Handle(), policy="all", cache=False)
    assert got == [f"eng{i}" for i in range(8) if i != 2] and len(threads) > 1
    assert plans.build_plans(_Graph(), _Handle(), policy="all", cache=False, max_plans=3) == ["eng0", "eng1", "eng3"]
    first = plans.build_plans(_Graph(), _Handle(), policy="first", cache=False)
    assert first == ["eng0"]


def test_build_plans_names_every_failure_when_none_builds(monkeypatch):
    from cudnn_py.graph.errors import GraphNotSupportedError
    _fake_candidates(monkeypatch, 3, fail={0, 1, 2})
    with pytest.raises(GraphNotSupportedError) as e:
        plans.build_plans(_Graph(), _Handle(), policy="all", cache=False)
    assert all(f"eng{i}: no engine" in str(e.value) for i in range(3))


# ------------------------------------------------------------------------------- time_plan's L2 flush

def test_time_plan_with_a_flush_times_one_execution_per_sample_after_it(monkeypatch):
    import contextlib

    import cudnn_py.streams as streams
    log: list[str] = []

    class FakePlan:
        def executor(self, handle, *io):
            return lambda *a: log.append("run")

    class T:
        ms = 6.0

    @contextlib.contextmanager
    def timer(stream, hold=False):
        log.append("start")
        yield T()
        log.append("end")
    monkeypatch.setattr(plans, "ordered_pack", lambda plan, pack: ((), ()))
    monkeypatch.setattr(streams, "timer", timer)
    handle = type("H", (), {"stream": None})()
    assert plans.time_plan(FakePlan(), handle, {}, warmup=1, iters=2, flush=lambda: log.append("flush")) == 6.0
    assert log == ["run"] + ["flush", "start", "run", "end"] * 2
    log.clear()
    assert plans.time_plan(FakePlan(), handle, {}, warmup=0, iters=1) == 6.0 / plans.SAMPLE_RUNS
    assert log == ["start"] + ["run"] * plans.SAMPLE_RUNS + ["end"]


# -------------------------------------------------------------------------------------- the kernel cache

def test_the_kernel_cache_is_named_cold_warm_or_disabled(tmp_path):
    fresh = tmp_path / "fresh"
    c = kernel_cache({"CUDA_CACHE_PATH": str(fresh)})
    assert c == {"state": "cold", "path": str(fresh), "bytes": 0, "max_bytes": None}
    assert "kernel cache: cold" in kernel_cache_text(c) and str(fresh) in kernel_cache_text(c)
    (fresh / "sm90").mkdir(parents=True)
    assert kernel_cache({"CUDA_CACHE_PATH": str(fresh)})["state"] == "cold"      # folders, no bytes
    (fresh / "sm90" / "k").write_bytes(b"x" * 3000)
    c = kernel_cache({"CUDA_CACHE_PATH": str(fresh), "CUDA_CACHE_MAXSIZE": str(1 << 30)})
    assert c["state"] == "warm" and c["bytes"] == 3000 and c["max_bytes"] == 1 << 30
    assert "warm" in kernel_cache_text(c) and "CUDA_CACHE_MAXSIZE 1024 MiB" in kernel_cache_text(c)
    c = kernel_cache({"CUDA_CACHE_PATH": str(fresh), "CUDA_CACHE_DISABLE": "1"})
    assert c["state"] == "disabled" and "CUDA_CACHE_DISABLE=1" in kernel_cache_text(c)
    home = kernel_cache({"HOME": str(tmp_path)})
    assert home["path"] == str(tmp_path / ".nv" / "ComputeCache") and home["state"] == "cold"


# ---------------------------------------------------------------------------------------- CLI frictions

def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)


@pytest.mark.parametrize("argv", [["--batch", "x"], ["--dtype", "float8"], ["--model", "nope"],
                                  ["--build-threads", "two"], ["--preset"]])
def test_an_argument_mistake_prints_a_short_usage_and_the_error(argv):
    r = _cli("algos", *argv)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and 2 <= len(lines) <= 6, r.stderr
    assert "error: argument" in lines[-1] and "--help" in r.stderr


def test_a_refused_sweep_leaves_no_database_behind(tmp_path, monkeypatch, capsys):
    import cudnn_py.handle
    from cudnn_py.cli import main
    from cudnn_py.tuning import TuningDatabase

    def no_gpu(device):
        raise RuntimeError("no GPU here")
    monkeypatch.setattr(cudnn_py.handle, "Handle", no_gpu)
    path = tmp_path / "new.sqlite"
    argv = ["algos", "--model", "resnet18", "--quick", "--quiet", "--db", str(path)]
    with pytest.raises(SystemExit, match="cannot open a cuDNN handle"):
        main(argv)
    assert list(tmp_path.iterdir()) == []
    db = TuningDatabase(path)
    db.clear()  # a write: the file exists from here on
    db.close()  # a database that was there stays
    with pytest.raises(SystemExit):
        main(argv)
    assert path.is_file()


# ------------------------------------------------------------------------------------------------ on a GPU

@pytest.mark.gpu
def test_plans_built_on_threads_are_the_ones_one_thread_builds_and_they_run(handle):
    """Builder threads (their own CUDA context current, the handle shared) build the plans one thread builds, and a
    sweep of them (built on 8 threads, timed with the L2 flushed before each sample) agrees with itself."""
    import functools

    from cudnn_py.graph.plans import Plan
    from cudnn_py.tuning.models import model
    from cudnn_py.tuning.sweep import Settings, measure, prepare, valid_record
    p = next(p for p in model("resnet18").problems(2, "float16", "NHWC") if p.kind == "conv" and "r=3" in p.key)
    prep = prepare(p, handle)
    builds = [functools.partial(Plan.build, prep.graph, handle, c) for c in prep.configs.values()]
    one, many = build_ahead(builds, 1, device=handle.device), build_ahead(builds, 8, device=handle.device)
    differ = [(i, a.exception(), b.exception()) for i, (a, b) in enumerate(zip(one, many))
              if (a.exception() is None) != (b.exception() is None)]
    # what 8 threads sharing the handle lose: only configurations whose runtime compilation cuDNN failed (9.19 on an
    # H200: one of 59), which is why builds run one at a time unless asked
    assert all(a is None and "COMPILATION_FAILED" in str(b) for _, a, b in differ), differ
    assert [f.result().workspace_size for f in many if f.exception() is None] == \
        [f.result().workspace_size for f in one if f.exception() is None]
    rec = measure(p, handle, Settings(repeats=2, warmup=1, cold_l2=True), build_threads=8)
    ok = [c for c in rec["configs"] if c["ok"]]
    assert valid_record(rec) and ok and rec["race"]["build_threads"] == 8 and rec["settings"]["cold_l2"] is True
    assert all(c["agrees"] for c in ok if c["checked"]), [(c["tag"], c["diff"]) for c in ok]
