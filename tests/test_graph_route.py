"""The graph route of the operation families (cudnn_py.graph.legacy) without a runner cache of its own, on the CPU
(plans and cuDNN's execute stubbed): a graph is built on a signature's validated call only (once for the engine
choice's repeated runs of that call), its prepared call replays it; repeatable() queues a first run's plan
executions again."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from cudnn_py.calls import engine_choice as ec
from cudnn_py.clib import recording
from cudnn_py.errors import InvalidValueError
from cudnn_py.graph import legacy as gl, runner as R
from helpers import held_ms_stand_in, fake_array, fake_cudnn_handle, fake_plan

SHAPE = (2, 64, 4, 4)


@pytest.fixture
def stubbed(monkeypatch):
    """Plans, variant packs and cuDNN's execute stubbed: (plans built, executions as their data pointers)."""
    built, runs = [], []
    packs: dict = {}

    def plan_graph(g, handle, inputs, outputs, autotune):
        built.append(g.name)
        return fake_plan(g)

    def pack(uids, ptrs, ws):
        vp = types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + len(packs)))
        packs[vp.ptr.value] = list(ptrs)
        return vp
    monkeypatch.setattr(R, "plan_graph", plan_graph)
    monkeypatch.setattr(R, "VariantPack", pack)
    monkeypatch.setitem(R._BARE, "cudnnBackendExecute", lambda h, plan, vp: runs.append(packs[vp.value]) or 0)
    return built, runs


def relu(handle, x, y, auto=False):
    return gl.run_graph(handle, "relu_test", (), [("x", x)], [("y", y)], lambda g, t, shape: g.relu(t["x"]),
                        auto=auto)


def test_run_graph_builds_on_each_validated_call_and_keeps_no_cache(stubbed):
    built, runs = stubbed
    h = fake_cudnn_handle()
    for _ in range(2):
        x, y = fake_array(SHAPE, np.float16), fake_array(SHAPE, np.float16)
        assert relu(h, x, y) is True
        assert runs[-1] == [x.ptr, y.ptr]
    assert built == ["relu_test"] * 2 and not any(n.startswith("graph.legacy") for n in h.cache)


def test_run_graph_notes_its_route_for_legacy_cache_clear(stubbed):
    h = fake_cudnn_handle()
    with recording.recording() as rec:
        relu(h, fake_array(SHAPE, np.float16), fake_array(SHAPE, np.float16))
    assert gl.ROUTE in rec.uses and len(rec.steps) == 1


NHWC = (64 * 16, 1, 4 * 64, 64)


def test_run_graph_refusal_answers_false_with_auto(stubbed):
    h = fake_cudnn_handle()
    x, y = fake_array(SHAPE, np.float16, NHWC), fake_array(SHAPE, np.float16)  # a layout change: no engine
    assert relu(h, x, y, auto=True) is False
    with pytest.raises(gl.GraphPathRefused, match="memory order"):
        relu(h, x, y)


def test_repeatable_runs_the_graph_once_then_its_executions(stubbed, monkeypatch):
    built, runs = stubbed
    workspaces, pack = [], R.VariantPack
    monkeypatch.setattr(R, "VariantPack", lambda uids, ptrs, ws: workspaces.append(ws) or pack(uids, ptrs, ws))
    h = fake_cudnn_handle()
    x, y = fake_array(SHAPE, np.float16), fake_array(SHAPE, np.float16)
    run = gl.repeatable(lambda: relu(h, x, y))
    with recording.recording() as rec:
        assert [run() for _ in range(3)] == [True] * 3
    assert built == ["relu_test"] and runs == [[x.ptr, y.ptr]] * 3
    assert workspaces == [None]  # one variant pack: the repeats fetch the (absent) workspace, not a WorkspaceArg
    assert len(rec.steps) == 3 and gl.ROUTE in rec.uses and rec.spoiled is None  # each run recorded for the call


def test_repeatable_runs_again_in_full_after_a_refusal(stubbed):
    built, _ = stubbed
    h = fake_cudnn_handle()
    x, y = fake_array(SHAPE, np.float16, NHWC), fake_array(SHAPE, np.float16)
    run = gl.repeatable(lambda: relu(h, x, y, auto=True))
    assert run() is False and run() is False  # nothing kept to repeat
    assert built == []


@pytest.fixture
def measured(monkeypatch):
    """The engine choice measuring in memory, the graph timed faster."""
    monkeypatch.setattr(ec, "_database", lambda: None)
    monkeypatch.setattr(ec, "_mode", [None])
    monkeypatch.setattr(ec, "held_ms", held_ms_stand_in(lambda fn: 1.0 if getattr(fn, "legacy", False) else 0.5))


def _legacy(runs):
    def legacy():
        runs.append("legacy")
    legacy.legacy = True  # type: ignore[attr-defined]
    return legacy


def test_dispatch_auto_builds_once_for_the_measured_runs_and_records_the_winner_once(stubbed, measured):
    built, runs = stubbed
    h = fake_cudnn_handle()
    x, y = fake_array(SHAPE, np.float16), fake_array(SHAPE, np.float16)
    with recording.recording() as rec:
        got = gl.dispatch("auto", h, ("relu_test", SHAPE), _legacy([]), lambda auto: relu(h, x, y, auto=auto))
    assert got == "graph" and built == ["relu_test"]  # planned once, though run 1 + 3 + 1 times
    assert runs == [[x.ptr, y.ptr]] * (1 + ec.ROUNDS + 1) and len(rec.steps) == 1  # the winner's run alone
    assert gl.ROUTE in rec.uses and gl._builds.memo is None  # nothing kept past the call
    relu(h, x, y)
    assert built == ["relu_test"] * 2  # a later validated call builds again


def test_dispatch_auto_runs_a_graph_path_with_scratch_on_fresh_scratch_each_time(stubbed, measured):
    """A graph path that allocates a scratch buffer per run (pooling's window index, reduce_tensor's float32
    accumulator) runs each time on the buffer it just allocated, never on one a previous run freed."""
    built, runs = stubbed
    h = fake_cudnn_handle()
    x, y = fake_array(SHAPE, np.float16), fake_array(SHAPE, np.float16)
    scratch: list = []

    def graph(auto):
        scratch.append(fake_array(SHAPE, np.float16))
        return relu(h, x, scratch[-1], auto=auto) and relu(h, scratch[-1], y, auto=auto)
    assert gl.dispatch("auto", h, ("two_step", SHAPE), _legacy([]), graph) == "graph"
    assert built == ["relu_test"] and len(scratch) == 1 + ec.ROUNDS + 1  # both steps share a configuration
    assert runs == [p for s in scratch for p in ([x.ptr, s.ptr], [s.ptr, y.ptr])]


def test_a_variant_pack_refused_before_c_leaves_nothing_to_destroy(monkeypatch):
    """A pack whose uids and pointers disagree is refused before any C call, and its collection destroys nothing
    (it raised AttributeError in __del__, printed as 'Exception ignored', where a benchmark made such a pack)."""
    import gc
    import sys
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(InvalidValueError, match="2 unique ids but 3 data pointers"):
        R.VariantPack([1, 2], [0, 0, 0], None)
    gc.collect()
    assert unraisable == []
