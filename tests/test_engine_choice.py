"""engine="auto" by measurement (cudnn_py.calls.engine_choice): the choice logic on CPU with stubbed device times and a
stand-in tuning database; on the GPU, measured choices whose outputs and running statistics match one call."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from cudnn_py.calls import engine_choice as ec
from cudnn_py.errors import CudaError, InvalidValueError
from cudnn_py.graph import GraphNotSupportedError
from cudnn_py.graph.legacy import GraphPathRefused
from cudnn_py.core.handle import Handle
from cudnn_py.tuning import TuningDatabase
from helpers import NoCallHandle, held_ms_stand_in, fake
from reference import batchnorm as ref


class Engines:
    """A legacy and a graph callable with stubbed device (and host) times; ``calls`` lists what ran, in order;
    ``holds`` the ``hold`` each timed sample was given."""

    def __init__(self, legacy_ms=2.0, graph_ms=1.0, graph=None, legacy=None, host_ms=(0.0, 0.0)):
        self.ms = {"legacy": legacy_ms, "graph": graph_ms}
        self.host = dict(zip(("legacy", "graph"), host_ms))
        self.calls: list[str] = []
        self.behaviour = {"legacy": legacy, "graph": graph}
        self.timed: list[str] = []
        self.holds: list[tuple[str, bool]] = []

    def _run(self, name):
        self.calls.append(name)
        how = self.behaviour[name]
        if isinstance(how, BaseException):
            raise how
        return how

    def legacy(self):
        return self._run("legacy")

    def graph(self):
        return self._run("graph")

    def clock(self, stream, fn, hold):
        name = fn.__name__
        self.timed.append(name)
        self.holds.append((name, hold))
        fn()
        return self.ms[name], self.host[name], hold and name == "graph"  # the legacy run's hold 'timed out'


@pytest.fixture
def db(monkeypatch, tmp_path):
    """A tuning database file of its own (cudnn_py.tuning), measuring mode, no environment setting."""
    d = TuningDatabase(tmp_path / "tuning.sqlite")
    monkeypatch.setattr(ec, "_database", lambda: d)
    monkeypatch.setattr(ec, "_mode", [None])
    monkeypatch.delenv(ec.ENV, raising=False)
    yield d
    d.close()


def stored(d) -> dict:
    """key -> value of the database's engine_choice records."""
    return {r.key: r.value for r in d.records("engine_choice")}


def engines(monkeypatch, **kw) -> Engines:
    e = Engines(**kw)
    monkeypatch.setattr(ec, "held_ms", e.clock)
    return e


#: runs of a measured call: per engine one untimed, then one timed per round; the winner again
MEASURED = 2 * (1 + ec.ROUNDS) + 1
KEY = ("activation_forward", (((8, 3), (3, 1), "float16"), ("relu", 1.0, 0.0)))


def run(h, e, key=KEY, **kw):
    return ec.run(h, key, e.legacy, e.graph, refused=(GraphPathRefused, GraphNotSupportedError), **kw)


@pytest.mark.parametrize("legacy_ms, graph_ms, winner", [(2.0, 1.0, "graph"), (1.0, 2.0, "legacy")])
def test_faster_engine_wins_and_runs_last(db, monkeypatch, legacy_ms, graph_ms, winner):
    h, e = NoCallHandle(), engines(monkeypatch, legacy_ms=legacy_ms, graph_ms=graph_ms)
    assert run(h, e) == winner
    # one untimed run each (plans built), ROUNDS timed runs each, then the winner once more: its outputs stay
    assert e.calls == ["legacy", "graph"] * (1 + ec.ROUNDS) + [winner]
    assert len(e.calls) == MEASURED
    assert e.timed.count("legacy") == e.timed.count("graph") == ec.ROUNDS
    assert e.calls[-1] == winner
    assert ec.choices(h) == {KEY: ec.Choice(winner, legacy_ms, graph_ms, "measured")}


def test_each_engine_keeps_its_own_hold_and_a_host_bound_tie_goes_to_the_host_cheaper_engine(db, monkeypatch):
    """A sample whose hold timed out leaves that engine's next samples unheld, the other's held; where the faster
    engine's GPU time is below its host time, an engine within streams.TIE of it (or within the events' resolution)
    that costs the host less wins (a tiny legacy convolution: cuDNN's host time per call is several times the
    graph's)."""
    from cudnn_py.core.streams import EVENT_RESOLUTION_MS, TIE
    e = engines(monkeypatch, legacy_ms=0.050, graph_ms=0.050 * (1 + TIE / 2), host_ms=(0.400, 0.100))
    assert run(NoCallHandle(), e) == "graph"
    assert e.holds == [("legacy", True), ("graph", True)] + [("legacy", False), ("graph", True)] * (ec.ROUNDS - 1)
    e = engines(monkeypatch, legacy_ms=0.050, graph_ms=0.050 * (1 + 2 * TIE), host_ms=(0.400, 0.100))
    assert run(NoCallHandle(), e, key=("not tied",)) == "legacy"  # the GPU's time decides
    e = engines(monkeypatch, legacy_ms=0.050, graph_ms=0.050 * (1 + TIE / 2), host_ms=(0.040, 0.010))
    assert run(NoCallHandle(), e, key=("GPU-bound",)) == "legacy"  # the GPU's time decides
    # a 3 us kernel: 0.4 us apart is 13 %, but within the events' resolution (one run a sample): tied
    e = engines(monkeypatch, legacy_ms=0.0030, graph_ms=0.0034, host_ms=(0.020, 0.006))
    assert run(NoCallHandle(), e, key=("resolution",)) == "graph"
    e = engines(monkeypatch, legacy_ms=0.0030, graph_ms=0.0030 + 2 * EVENT_RESOLUTION_MS, host_ms=(0.020, 0.006))
    assert run(NoCallHandle(), e, key=("beyond it",)) == "legacy"


def test_choice_remembered_per_handle_and_shown_by_cache_info(db, monkeypatch):
    monkeypatch.setattr(ec, "_database", lambda: None)  # in memory only: no tuning database
    h, e = NoCallHandle(), engines(monkeypatch)
    run(h, e)
    e.calls.clear()
    assert run(h, e) == "graph" and e.calls == ["graph"]
    assert Handle.cache_info(h) == {"engine.choice": 1}
    other = NoCallHandle()
    run(other, e)
    assert len(e.calls) == 1 + MEASURED, "another handle measures again"
    other_key = (KEY[0], (((8, 4), (4, 1), "float16"), ("relu", 1.0, 0.0)))
    run(h, e, other_key)
    assert set(ec.choices(h)) == {KEY, other_key}


def test_chosen_answers_without_measuring(db, monkeypatch):
    h, e = NoCallHandle(), engines(monkeypatch, legacy_ms=1.0, graph_ms=2.0)
    assert ec.chosen(h, KEY) is None and e.calls == []
    run(h, e)
    assert ec.chosen(h, KEY) == "legacy"
    assert ec.chosen(NoCallHandle(), KEY) == "legacy", "another handle: from the database"
    ec.set_mode("static")
    assert ec.chosen(NoCallHandle(), KEY, static="graph") == "graph"
    assert ec.chosen(h, KEY, static="graph") == "legacy", "a handle's measured choice stands"
    ec.set_mode(None)
    assert e.calls.count("legacy") + e.calls.count("graph") == MEASURED


def test_choice_persisted_and_reloaded_by_a_new_process(db, monkeypatch, tmp_path):
    e = engines(monkeypatch, legacy_ms=0.5, graph_ms=0.7)
    run(NoCallHandle(), e)
    (key, rec), = stored(db).items()
    assert rec == {"engine": "legacy", "legacy_ms": 0.5, "graph_ms": 0.7}
    assert json.loads(key) == ec._plain(KEY)
    e.calls.clear()
    e.timed.clear()
    again = TuningDatabase(tmp_path / "tuning.sqlite")  # a new process: the same file, empty handle caches
    monkeypatch.setattr(ec, "_database", lambda: again)
    h = NoCallHandle()
    assert run(h, e) == "legacy" and e.calls == ["legacy"] and e.timed == []
    assert ec.choices(h)[KEY] == ec.Choice("legacy", 0.5, 0.7, "database")
    again.close()


def test_unusable_record_is_measured_again(db, monkeypatch):
    e = engines(monkeypatch)
    run(NoCallHandle(), e)
    (k, rec), = stored(db).items()
    db.record("engine_choice", k, {"engine": "fastest"}, device=0)
    e.calls.clear()
    assert run(NoCallHandle(), e) == "graph" and len(e.calls) == MEASURED
    assert stored(db)[k]["engine"] == "graph"


def test_unusable_database_warns_and_keeps_choices_in_memory(db, monkeypatch):
    from cudnn_py.tuning import TuningDatabaseError, TuningWarning

    def broken():
        raise TuningDatabaseError("open", 0, "", "/x/tuning.sqlite is not a database")
    monkeypatch.setattr(ec, "_database", broken)
    h, e = NoCallHandle(), engines(monkeypatch)
    with pytest.warns(TuningWarning, match="choices stay in this process.*not a database"):
        assert run(h, e) == "graph"
    assert ec.choices(h)[KEY].engine == "graph"


@pytest.mark.parametrize("how", ["set_mode", "env"])
@pytest.mark.parametrize("static", ["legacy", "graph"])
def test_static_mode_runs_the_static_rule_without_measuring(db, monkeypatch, how, static):
    if how == "env":
        monkeypatch.setenv(ec.ENV, "static")
    else:
        ec.set_mode("static")
    h, e = NoCallHandle(), engines(monkeypatch)
    assert ec.mode() == "static"
    assert run(h, e, static=static) == static and e.calls == [static] and e.timed == []
    assert ec.choices(h) == {} and stored(db) == {}
    ec.set_mode(None)


def test_static_graph_falls_back_to_legacy_where_it_refuses(db, monkeypatch):
    ec.set_mode("static")
    for refusal in (False, GraphPathRefused("no"), GraphNotSupportedError("g", ["relu"], ["A"], [])):
        e = engines(monkeypatch, graph=refusal)
        assert run(NoCallHandle(), e, static="graph") == "legacy" and e.calls == ["graph", "legacy"]
    ec.set_mode(None)


def test_mode_values_checked(db, monkeypatch):
    with pytest.raises(InvalidValueError, match="'fast'"):
        ec.set_mode("fast")
    monkeypatch.setenv(ec.ENV, "sometimes")
    with pytest.raises(InvalidValueError, match="CUDNN_PY_AUTO_ENGINE='sometimes'"):
        ec.mode()


@pytest.mark.parametrize("graph", [False, GraphPathRefused("layout"), GraphNotSupportedError("g", ["relu"], ["A"], [])])
def test_refusing_graph_is_left_out_and_the_choice_kept(db, monkeypatch, graph):
    h, e = NoCallHandle(), engines(monkeypatch, legacy_ms=9.0, graph_ms=1.0, graph=graph)
    assert run(h, e) == "legacy"
    assert e.calls == ["legacy", "graph", "legacy"] and e.timed == [], "an engine left alone is not timed"
    assert ec.choices(h)[KEY] == ec.Choice("legacy", None, None, "measured")
    assert [r["engine"] for r in stored(db).values()] == ["legacy"]


def test_failing_engine_is_left_out_but_not_persisted(db, monkeypatch):
    h, e = NoCallHandle(), engines(monkeypatch, legacy_ms=1.0, legacy=CudaError("cudnnFoo", 2, "X", "busy"))
    assert run(h, e) == "graph"
    assert ec.choices(h)[KEY].engine == "graph" and stored(db) == {}, "a passing failure is not written down"


def test_both_engines_failing_raise_the_legacy_error_and_keep_nothing(db, monkeypatch):
    h = NoCallHandle()
    e = engines(monkeypatch, legacy=CudaError("cudnnFoo", 2, "X", "legacy failed"), graph=GraphPathRefused("no"))
    with pytest.raises(CudaError, match="legacy failed"):
        run(h, e)
    assert ec.choices(h) == {} and stored(db) == {}


def test_keyboard_interrupt_mid_measure_leaves_no_record(db, monkeypatch):
    h, e = NoCallHandle(), engines(monkeypatch)
    clock = e.clock

    def interrupted(stream, fn, hold):
        if len(e.timed) == 3:
            raise KeyboardInterrupt
        return clock(stream, fn, hold)
    monkeypatch.setattr(ec, "held_ms", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(h, e)
    assert ec.choices(h) == {} and stored(db) == {}
    monkeypatch.setattr(ec, "held_ms", clock)
    assert run(h, e) == "graph" and len(stored(db)) == 1


def test_mutated_arrays_restored_before_every_run(db, monkeypatch):
    h, e = NoCallHandle(), engines(monkeypatch)
    events: list[str] = []
    snapped = []

    def snapshot(handle, arrays):
        snapped.append(tuple(arrays))
        return lambda: events.append("restore")
    monkeypatch.setattr(ec, "_snapshot", snapshot)
    legacy, graph = e.legacy, e.graph
    e.legacy = lambda: (events.append("legacy"), legacy())[1]
    e.graph = lambda: (events.append("graph"), graph())[1]
    e.legacy.__name__, e.graph.__name__ = "legacy", "graph"
    y = fake((4,))
    run(h, e, mutated=(y,))
    assert snapped == [(y,)]
    assert events[0::2] == ["restore"] * (MEASURED) and events[-1] == "graph"


def test_no_room_for_the_copies_runs_the_static_rule_unmeasured(db, monkeypatch):
    from cudnn_py.errors import CudaOutOfMemoryError
    h, e = NoCallHandle(), engines(monkeypatch)

    def no_room(handle, arrays):
        raise CudaOutOfMemoryError("allocate", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    monkeypatch.setattr(ec, "_snapshot", no_room)
    assert run(h, e, mutated=(fake((4,)),), static="legacy") == "legacy" and e.calls == ["legacy"]
    assert ec.choices(h) == {} and stored(db) == {}


def test_choice_logged_at_debug(db, monkeypatch, caplog):
    e = engines(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="cudnn_py.calls.engine_choice"):
        run(NoCallHandle(), e)
        run(NoCallHandle(), e)
    measured, loaded = (r.getMessage() for r in caplog.records)
    assert "activation_forward" in measured and ": graph (measured: legacy 2.0 ms, graph 1.0 ms)" in measured
    assert ": graph (database" in loaded


def test_signature_and_database_key():
    x, y = fake((2, 3, 4, 5), np.float16), fake((2, 3, 4, 5), np.float32)
    sig = ec.signature(x, y, params=("relu", 0.5))
    assert sig == (((2, 3, 4, 5), (60, 20, 5, 1), "float16"), ((2, 3, 4, 5), (60, 20, 5, 1), "float32"),
                   ("relu", 0.5))
    hash(sig)
    from cudnn_py.capi import CUDNN_ACTIVATION_RELU
    assert ec._plain(("op", np.dtype(np.float16), CUDNN_ACTIVATION_RELU, None, 1.5)) == \
        ["op", "float16", "CUDNN_ACTIVATION_RELU", None, 1.5]


def test_without_the_tuning_module_choices_stay_in_memory(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_tuning(name, *args, **kw):
        if name in ("cudnn_py.tuning", "cudnn_py.tuning_records"):
            raise ImportError(f"no module named {name}")
        return real_import(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", no_tuning)
    assert ec._database() is None


# ---------------------------------------------------------------- convolution through engine_choice

class ConvEngines:
    """The convolution calls' two engines stubbed (the legacy bodies, the graph path and its runner), each recording
    what ran in ``ran``; the device clock gives ``ms`` of the engine that ran last."""

    def __init__(self, monkeypatch, legacy_ms=2.0, graph_ms=1.0, graph_refuses=False):
        import types
        from cudnn_py.core import memory
        from cudnn_py.core.memory import DeviceArray
        from cudnn_py.ops import conv_calls as cv
        self.ran: list = []
        self.ms = {"legacy": legacy_ms, "graph": graph_ms}
        from cudnn_py.clib import recording
        from cudnn_py.graph.runner import Runner

        class FakeRunner(Runner):
            def __init__(self):
                pass

            def run_pointers(inner, ptrs):
                self.ran.append(("runner", ptrs))
        runner = FakeRunner()

        def graph(direction, handle, conv, a, b, out, **kw):
            self.ran.append("graph")
            if graph_refuses:
                raise GraphPathRefused("no engine for this")
            res = DeviceArray(5 << 30, (1, 2, 5, 5), np.float32) if out is None else out
            recording.add(runner.replay, (recording.WorkspaceArg(0), *(v.ptr for v in (a, b, res))),
                          (1, 2, 3))  # what its runner's sink adds
            return res
        monkeypatch.setattr(cv, "graph_conv", types.SimpleNamespace(convolution=graph))
        monkeypatch.setattr(cv, "new_output", lambda handle, shape, dtype: DeviceArray(6 << 30, shape, dtype))
        monkeypatch.setattr(memory, "allocator", lambda shape, dtype, *a, **kw: lambda: DeviceArray(6 << 30, shape,
                                                                                                   dtype))
        monkeypatch.setattr(cv, "_legacy", lambda *a: self.ran.append("legacy") or a[6])  # a[6]: the output
        # a runner entry: the graph route (what engine_choice times after the graph's first, untimed run)
        monkeypatch.setattr(ec, "held_ms", held_ms_stand_in(lambda fn: self.ms[
            "graph" if isinstance(self.ran[-1], tuple) else self.ran[-1]]))


def conv_call(direction, h, **kw):
    """One call of ``direction`` on arrays at distinct addresses (x 1<<30, w 2<<30, dy/y 3<<30, out 4<<30)."""
    from cudnn_py.core.memory import DeviceArray
    from cudnn_py.ops import conv_calls as cv
    conv = cv.Convolution(padding=1)
    x, w = DeviceArray(1 << 30, (1, 2, 5, 5), np.float32), DeviceArray(2 << 30, (3, 2, 3, 3), np.float32)
    dy = DeviceArray(3 << 30, (1, 3, 5, 5), np.float32)
    if direction == "forward":
        return cv.convolution_forward(h, conv, x, w, y=dy, **kw), (1 << 30, 2 << 30, 3 << 30)
    if direction == "backward_data":
        dx = DeviceArray(4 << 30, x.shape, np.float32)
        return cv.convolution_backward_data(h, conv, w, dy, dx=dx, **kw), (3 << 30, 2 << 30, 4 << 30)
    dw = DeviceArray(4 << 30, w.shape, np.float32)
    return cv.convolution_backward_filter(h, conv, x, dy, dw=dw, **kw), (3 << 30, 1 << 30, 4 << 30)


DIRECTIONS = ["forward", "backward_data", "backward_filter"]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("legacy_ms, graph_ms, winner", [(2.0, 1.0, "graph"), (1.0, 2.0, "legacy")])
def test_convolution_auto_measures_once_then_runs_its_route(db, monkeypatch, direction, legacy_ms, graph_ms,
                                                             winner):
    from cudnn_py.ops import conv_calls as cv
    e = ConvEngines(monkeypatch, legacy_ms, graph_ms)
    h = NoCallHandle()
    _, ptrs = conv_call(direction, h)
    route = ("runner", ptrs)  # the graph's timed runs go through the route a repeat call takes
    assert e.ran == ["legacy", "graph"] + ["legacy", route] * ec.ROUNDS + [
        "legacy" if winner == "legacy" else route]
    (key, choice), = ec.choices(h).items()
    assert key[0] == f"convolution_{direction}" and choice == ec.Choice(winner, legacy_ms, graph_ms, "measured")
    assert Handle.cache_info(h) == {"engine.choice": 1}
    e.ran.clear()
    conv_call(direction, h)
    # the choice, unmeasured (a stand-in handle has no prepared calls: the validated path runs the chosen engine)
    assert e.ran == [winner]
    assert [r["engine"] for r in stored(db).values()] == [winner]
    e.ran.clear()
    conv_call(direction, NoCallHandle())  # another handle (a new process alike): the database's choice, unmeasured
    assert e.ran == [winner]


def test_convolution_auto_refused_by_the_graph_keeps_legacy(db, monkeypatch):
    e = ConvEngines(monkeypatch, graph_refuses=True)
    h = NoCallHandle()
    conv_call("forward", h)
    assert e.ran == ["legacy", "graph", "legacy"]
    assert [c.engine for c in ec.choices(h).values()] == ["legacy"]
    e.ran.clear()
    conv_call("forward", h)
    assert e.ran == ["legacy"]


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_convolution_static_mode_and_explicit_engines_do_not_measure(db, monkeypatch, direction):
    e = ConvEngines(monkeypatch, legacy_ms=1.0, graph_ms=5.0)
    ec.set_mode("static")
    h = NoCallHandle()
    conv_call(direction, h)
    assert e.ran == ["graph"] and ec.choices(h) == {} and stored(db) == {}  # the static rule: the graph
    ec.set_mode(None)
    for engine in ("legacy", "graph"):
        e.ran.clear()
        conv_call(direction, NoCallHandle(), engine=engine)
        assert e.ran == [engine]
    e.ran.clear()
    conv_call(direction, h, deterministic=True)  # an option only the legacy call has: no graph to measure
    assert e.ran == ["legacy"] and stored(db) == {}


@pytest.mark.parametrize("x_shape", [[1, 2, 5, 5], (1, 2, 5, 5), np.array([1, 2, 5, 5])])
def test_convolution_backward_data_shape_spellings(db, monkeypatch, x_shape):
    """x_shape as a list, a tuple or a NumPy array: one choice key (plain ints); an unhashable spelling keeps no
    route (the next call looks the choice up again) but runs."""
    from cudnn_py.core.memory import DeviceArray
    from cudnn_py.ops import conv_calls as cv
    e = ConvEngines(monkeypatch)
    h = NoCallHandle()
    w, dy = DeviceArray(2 << 30, (3, 2, 3, 3), np.float32), DeviceArray(3 << 30, (1, 3, 5, 5), np.float32)
    for _ in range(2):
        cv.convolution_backward_data(h, cv.Convolution(padding=1), w, dy, x_shape=x_shape)
    (key,) = ec.choices(h)
    assert key[6] == (1, 2, 5, 5)
    assert e.ran[-1] == "graph"  # the choice, unmeasured; dx allocated


def test_convolution_choice_key_is_a_database_key(db, monkeypatch):
    ConvEngines(monkeypatch)
    h = NoCallHandle()
    conv_call("backward_filter", h)
    (key,) = ec.choices(h)
    assert json.loads(ec._db_key(key))[:3] == ["convolution_backward_filter", "route", ec._plain(key[2])]
    assert key[3:6] == (((1, 3, 5, 5), (75, 25, 5, 1), "float32"), ((1, 2, 5, 5), (50, 25, 5, 1), "float32"),
                        ((3, 2, 3, 3), (18, 9, 3, 1), "float32"))


# ---------------------------------------------------------------- on the GPU

@pytest.mark.gpu
def test_measured_activation_writes_the_winners_output(handle, rng):
    from cudnn_py.core.memory import to_device
    from cudnn_py.ops.activation import activation_forward
    handle.clear_caches()
    x_host = rng.standard_normal((8, 64, 32, 32)).astype(np.float32)
    x, y = to_device(x_host), to_device(np.full(x_host.shape, np.nan, np.float32))
    key = ("test.relu", ec.signature(x, y))
    got = ec.run(handle, key, lambda: activation_forward(handle, "relu", x, y=y, engine="legacy"),
                 lambda: activation_forward(handle, "relu", x, y=y, engine="graph"))
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x_host, 0))
    choice = ec.choices(handle)[key]
    assert choice.engine == got and choice.legacy_ms > 0 and choice.graph_ms > 0
    assert handle.cache_info()["engine.choice"] == 1


@pytest.mark.gpu
def test_measured_batchnorm_training_updates_running_statistics_once(handle, rng):
    """Measuring runs the call 2 * (1 + ROUNDS) + 1 times; restoring the running statistics before each run leaves
    them as one call leaves them (float64 reference)."""
    from cudnn_py.core.memory import to_device
    from cudnn_py.ops.batchnorm import batchnorm_forward_training
    handle.clear_caches()
    shape, c = (4, 16, 8, 8), 16
    xh = rng.standard_normal(shape).astype(np.float32)
    sc, bi = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    rm_h, rv_h = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    x, s, b = to_device(xh), to_device(sc), to_device(bi)
    rm, rv, y = to_device(rm_h), to_device(rv_h), to_device(np.full(shape, np.nan, np.float32))

    def call(engine):
        return lambda: batchnorm_forward_training(handle, x, s, b, factor=0.1, running_mean=rm, running_var=rv,
                                                  y=y, engine=engine)
    ec.run(handle, ("test.bn", ec.signature(x, rm)), call("legacy"), call("graph"), mutated=(rm, rv))
    want = ref.forward_training(xh, sc, bi, "spatial", factor=0.1, running_mean=rm_h, running_var=rv_h)
    np.testing.assert_allclose(rm.to_numpy(), want["running_mean"].ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.to_numpy(), want["running_var"].ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.to_numpy(), want["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_normalization_inference_auto_hands_both_engines_to_engine_choice(monkeypatch, beta):
    """normalization_forward_inference(engine="auto"), ops "norm": graph.legacy.dispatch gets the legacy call (the
    C call on the validated arrays), a key of the operation and its signature, and y as mutated where beta blends
    it; the fused-activation ops stay on the legacy call without measuring."""
    from cudnn_py.graph import legacy as gl
    from cudnn_py.ops import normalization as nz
    got: dict = {}

    def dispatch(engine, handle, key, legacy, graph, **kw):
        got.update(engine=engine, handle=handle, key=key, legacy=legacy, **kw)
        return "graph"
    monkeypatch.setattr(gl, "dispatch", dispatch)
    from cudnn_py.core.memory import DeviceArray
    h = NoCallHandle()
    x, y = DeviceArray(1 << 30, (2, 3, 4, 4), np.float32), DeviceArray(2 << 30, (2, 3, 4, 4), np.float32)
    p = [fake((1, 3, 1, 1)) for _ in range(4)]
    assert nz.normalization_forward_inference(h, x, *p, y=y, beta=beta) is y
    assert got["engine"] == "auto" and got["handle"] is h
    assert got["key"][0] == "normalization_forward_inference" and got["key"][-1][0] == ((2, 3, 4, 4), x.strides,
                                                                                      "float32")
    assert json.loads(ec._db_key(got["key"]))[0] == "normalization_forward_inference"
    assert got["mutated"] == ((y,) if beta else ())
    legacy_calls = []
    monkeypatch.setattr(nz, "launch", lambda handle, fn, *args: legacy_calls.append((fn, args)))
    monkeypatch.setattr(NoCallHandle, "ptr", None)  # the C call itself is the stand-in above
    got["legacy"]()
    (fn, args), = legacy_calls
    assert fn is nz.capi.cudnnNormalizationForwardInference and args[-3] is y and args[7] is x


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_measured_normalization_inference_matches_reference(handle, rng, layout):
    """normalization_forward_inference with its default engine: measured (both engines run, the faster kept), the
    output poisoned before the call matches float64, once measured and once from the remembered choice; a beta blend
    blends once."""
    from cudnn_py.core.memory import DeviceArray, to_device
    from cudnn_py.ops.normalization import normalization_forward_inference
    handle.clear_caches()
    shape, c = (4, 16, 8, 8), 16
    xh = rng.standard_normal(shape).astype(np.float32)
    sc, bi = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    me, va = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    want = ref.forward_inference(xh, sc, bi, me, va, "spatial")
    perm = (0, 2, 3, 1) if layout == "NHWC" else (0, 1, 2, 3)

    def dev(a):  # logical NCHW, stored in ``layout``
        buf = to_device(np.ascontiguousarray(a.transpose(perm)))
        strides = tuple(buf.strides[i] for i in np.argsort(perm))
        return DeviceArray(buf.ptr, shape, np.float32, strides, device_id=buf.device_id, owner=buf)
    params = [to_device(p.reshape(1, c, 1, 1)) for p in (sc, bi, me, va)]
    x = dev(xh)
    for _ in range(2):
        y = dev(np.full(shape, np.nan, np.float32))
        normalization_forward_inference(handle, x, *params, y=y)
        np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-4, atol=1e-4)
    (key, choice), = ((k, c) for k, c in ec.choices(handle).items() if k[0] == "normalization_forward_inference")
    assert choice.engine in ("legacy", "graph")
    y0 = rng.standard_normal(shape).astype(np.float32)
    y = dev(y0)
    normalization_forward_inference(handle, x, *params, y=y, beta=0.5)
    np.testing.assert_allclose(y.to_numpy(), want + 0.5 * y0, rtol=1e-4, atol=1e-4)
