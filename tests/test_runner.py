"""graph/runner.py on CPU (cuDNN's execute and pack finalization stubbed): the per-handle cache with remembered
refusals, the binding order with constants, variant-pack reuse by address, the workspace in the key."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.errors import InvalidValueError
from cudnn_py.graph import Graph
from cudnn_py.graph import runner as R
from cudnn_py.core.memory import DeviceArray


class _Handle:
    device, stream = 0, None

    def __init__(self, workspace=None):
        self.cache, self.ptr, self.workspace = {}, capi.cudnnHandle_t(), workspace


@pytest.fixture
def stubbed(monkeypatch):
    """Packs made and executions run, recorded: (made: [(uids, ptrs, ws)], ran: [pack address])."""
    made, ran = [], []
    monkeypatch.setattr(R, "VariantPack", lambda uids, ptrs, ws: made.append((list(uids), list(ptrs), ws))
                        or types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + len(made))))
    monkeypatch.setitem(R._BARE, "cudnnBackendExecute", lambda h, plan, vp: ran.append(vp.value) or 0)
    return made, ran


def _plan(workspace_size=0):
    """A relu graph with a by-value scalar (y = relu(x) * 2 + c) and a plan object for it."""
    g = Graph()
    x, c = g.tensor((1, 4, 4), name="x"), g.tensor((1, 4, 4), name="c")
    g.add(g.scale(g.relu(x), 2.0), c).set_output(True).set_name("y")
    return g, types.SimpleNamespace(graph=g, descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(7), closed=False),
                                    workspace_size=workspace_size, tag="fake")


def _a(addr, shape=(1, 4, 4)):
    return DeviceArray(addr, shape, np.float32)


def test_binding_order_puts_constants_after_the_inputs(stubbed):
    made, ran = stubbed
    g, plan = _plan()
    x, c, y = g["x"], g["c"], g["y"]
    const = _a(0x9000)
    r = R.Runner(plan, _Handle(), (x, c, y), consts=(const,), n_inputs=1)
    scalar = next(t for t in g.tensors if t.is_by_value)
    r.run([_a(0x1000), _a(0x3000)])  # x, then y: c is the constant
    assert made == [([x.uid, c.uid, y.uid, scalar.uid], [0x1000, 0x9000, 0x3000, g.scalar_pointer(scalar)], None)]
    assert r.const_ptrs == (0x9000,) and ran == [1001]
    with pytest.raises(InvalidValueError, match="must bind every I/O tensor"):
        R.Runner(plan, _Handle(), (x, y))
    with pytest.raises(ValueError, match="'c' expects shape"):  # each array checked against its tensor
        R.Runner(plan, _Handle(), (x, c, y)).run([_a(0x1000), _a(0x2000, (1, 4, 5)), _a(0x3000)])


def test_bound_tensors_resolves_names_uids_and_a_twin_graphs_tensors():
    g, plan = _plan()
    twin, _ = _plan()  # the same structure: its tensors stand for this graph's
    x, c, y = g["x"], g["c"], g["y"]
    assert R.bound_tensors(plan, ("y", c.uid, twin["x"])) == [y, c, x]
    with pytest.raises(InvalidValueError, match="missing c"):
        R.bound_tensors(plan, (x, y))
    with pytest.raises(InvalidValueError, match="does not use, or one twice"):
        R.bound_tensors(plan, (x, c, y, "x"))
    other = Graph()
    with pytest.raises(InvalidValueError, match="not part of graph"):
        R.bound_tensors(plan, (x, c, other.tensor((1, 4, 4), name="y")))


def test_variant_packs_are_reused_by_address(stubbed, monkeypatch):
    made, ran = stubbed
    g, plan = _plan()
    r = R.Runner(plan, _Handle())
    arrays = [_a(0x1000), _a(0x2000), _a(0x3000)]
    for _ in range(3):
        r.run(arrays)
    assert len(made) == 1 and ran == [1001] * 3
    r.run([_a(0x1000), _a(0x2000), _a(0x4000)])
    assert len(made) == 2 and made[1][1][:3] == [0x1000, 0x2000, 0x4000]
    monkeypatch.setattr(R, "MAX_PACKS", 2)
    r.run([_a(0x1000), _a(0x2000), _a(0x5000)])  # the cache is full: it starts afresh
    assert len(r.packs) == 1 and len(made) == 3


def test_run_pointers_makes_the_pack_of_new_addresses(stubbed):
    made, ran = stubbed
    _, plan = _plan()
    r = R.Runner(plan, _Handle())
    r.run([_a(0x1000), _a(0x2000), _a(0x3000)])
    r.run_pointers((0x1000, 0x2000, 0x3000))  # a known address set: its pack
    assert len(made) == 1 and ran == [1001, 1001]
    r.run_pointers((0x1000, 0x2000, 0x6000))  # a new one: a pack of it (the caller's key fixed the signatures)
    assert len(made) == 2 and made[1][1][:3] == [0x1000, 0x2000, 0x6000] and ran[-1] == 1002


def test_the_workspace_is_part_of_the_key(stubbed):
    made, ran = stubbed
    _, plan = _plan(workspace_size=512)
    with pytest.raises(InvalidValueError, match="512 bytes of workspace"):
        R.Runner(plan, _Handle()).run([_a(0x1000), _a(0x2000), _a(0x3000)])
    where = iter([0x80000, 0x80000, 0x90000])
    r = R.Runner(plan, _Handle(types.SimpleNamespace(get=lambda size, stream: next(where))))
    for _ in range(3):
        r.run([_a(0x1000), _a(0x2000), _a(0x3000)])
    assert [m[2] for m in made] == [0x80000, 0x90000] and len(ran) == 3


def test_executor_and_cuda_graph_packs_come_from_the_runner(stubbed):
    """The Executor is the runner's hot closure; a CUDA graph's pack is the runner's uncached one."""
    from cudnn_py.graph.execute import Executor
    made, ran = stubbed
    g, plan = _plan()
    ex = Executor(plan, _Handle(), identity_cache=2)
    arrays = (_a(0x1000), _a(0x2000), _a(0x3000))
    ex(*arrays)
    ex(*arrays)
    assert isinstance(ex.runner, R.Runner) and ex.cache_info == {"packs": 1, "recent": 1} and len(ran) == 2
    ex.runner.variant_pack(arrays, None)
    ex.runner.variant_pack(arrays, None)
    assert len(made) == 3  # uncached: a CUDA graph keeps its own


def test_new_output_has_room_for_the_gaps_of_its_strides(monkeypatch):
    """runner.new_output allocates as many elements as the strides span on the handle's stream and device (a packed
    layout in any order: its elements; strides with gaps, e.g. an attention output in a (B, S, 3, H, D) buffer: the
    gaps too, so nothing cuDNN writes lands past the allocation) and views it with those strides."""
    import types
    from helpers import fake_takers
    made = fake_takers(monkeypatch).binds
    h = types.SimpleNamespace(stream="s", device=1, cache={})
    packed = R.new_output(h, (2, 3, 4), np.float16, (12, 1, 3))             # channels-last order, no gaps
    gapped = R.new_output(h, (1, 2, 4, 8), np.float16, (192, 8, 48, 1))     # (B, H, S, D) in (B, S, 3 * H, D)
    assert made == [(24 * 2, "as s", 1), ((1 + 8 + 144 + 7) * 2, "as s", 1)]
    assert (packed.shape, packed.strides, gapped.shape, gapped.strides) == ((2, 3, 4), (12, 1, 3), (1, 2, 4, 8),
                                                                            (192, 8, 48, 1))
    assert R.new_output(capi.cudnnHandle_t(), (2, 2), np.float32, (2, 1)).shape == (2, 2)  # a raw handle
    assert made[-1] == (16, "as None", 0)


def test_autotuned_order_is_kept_per_handle_and_structure(monkeypatch):
    """plan_graph(autotune=True) times the plans of a graph structure once per handle: a second graph of that structure
    takes the kept order untimed (its own plans bound to it); another handle, or plan_cache_clear, times again."""
    from cudnn_py.graph import plans as P
    timed, built = [], []

    class FakePlan:
        def __init__(self, tag, graph):
            self.tag, self.graph = tag, graph

        def bind(self, graph):
            return FakePlan(self.tag, graph)

    def build_plans(graph, handle, modes, **kw):
        built.append(graph.key())
        return [FakePlan("slow", graph), FakePlan("fast", graph)]

    monkeypatch.setattr(P, "build_plans", build_plans)
    monkeypatch.setattr(P, "_sample", lambda plan, *a: timed.append(plan.tag) or ((2.0, 0.1) if plan.tag == "slow"
                                                                                  else (1.0, 0.1)))
    monkeypatch.setattr(P, "_stored", lambda *a: None)
    monkeypatch.setattr(P, "_store", lambda *a: None)

    def tune(h):
        g = Graph()
        x = g.tensor((1, 4, 4), name="x")
        y = g.relu(x).set_output(True).set_name("y")
        return g, R.plan_graph(g, h, {x: None}, {y: None}, autotune=True)

    h, other = _Handle(), _Handle()
    g1, p1 = tune(h)
    g2, p2 = tune(h)
    assert timed == ["slow", "fast"] and len(built) == 1  # the second graph was neither built nor timed
    assert p1.tag == p2.tag == "fast" and p2.graph is g2 and [p.tag for p in g2.plans] == ["fast", "slow"]
    with pytest.raises(Exception, match="frozen|change"):
        g2.relu(g2["x"])  # frozen, as a lowered graph is
    tune(other)
    P.plan_cache_clear(h)
    tune(h)
    assert timed == ["slow", "fast"] * 3 and len(built) == 3


class _Event:
    def __init__(self, stream):
        self.stream, self.done, self.queries = stream, False, 0

    @property
    def is_done(self):
        self.queries += 1
        return self.done


class _Stream:
    def __init__(self, name):
        self.name, self.events, self.waits = name, [], []

    def record(self):
        self.events.append(_Event(self))
        return self.events[-1]

    def wait(self, event):
        self.waits.append(event)


def test_a_replay_on_another_stream_waits_for_the_constants_upload_until_it_is_done(monkeypatch, stubbed):
    """ALiBi slopes uploaded on the handle's stream A at the first call: the prepared call replaying on stream B
    makes B wait for the upload's event while it is not known complete, and once one query says it is, never waits
    (nor queries) again."""
    from helpers import fake_cudnn_handle
    from cudnn_py.ops import sdpa as S, sdpa_args as A
    made, ran = stubbed
    monkeypatch.setattr(A, "plan_graph", lambda g, handle, i, o, autotune: types.SimpleNamespace(
        graph=g, workspace_size=0, tag="fake", descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(2))))
    monkeypatch.setattr(A, "to_device", lambda a, stream=None, device=None: DeviceArray(0x700000, a.shape, a.dtype))
    h, a, b = fake_cudnn_handle(), _Stream("A"), _Stream("B")
    h.workspace, h._stream = None, a
    q = DeviceArray(0x100000, (1, 4, 64, 64), np.float16)
    o = DeviceArray(0x200000, q.shape, np.float16)
    S.sdpa(h, q, q, q, causal=True, alibi=True, o=o)
    (upload,) = a.events  # recorded after the slopes' upload, on the stream they were queued on
    h._stream = b
    S.sdpa(h, q, q, q, causal=True, alibi=True, o=o)
    assert b.waits == [upload] and len(ran) == 2  # the replay on B waited for the upload on A
    upload.done = True
    for _ in range(3):
        S.sdpa(h, q, q, q, causal=True, alibi=True, o=o)
    assert b.waits == [upload] and upload.queries == 3 and len(ran) == 5 and len(made) == 1


def test_outputs_sharing_memory_are_refused_but_in_place_along_pointwise_steps(stubbed):
    """y = relu(x) * 2 + c: y may be x itself or c itself (each reaches y alone, element by element); not x shifted,
    and not another view of x's memory. Interleaved views of one buffer share no element: bound as they are."""
    made, _ = stubbed
    g, plan = _plan()
    x, c, y = g["x"], g["c"], g["y"]
    assert g.in_place_pairs() == {(x.uid, y.uid), (c.uid, y.uid)}
    r = R.Runner(plan, _Handle(), (x, c, y))
    a = _a(0x1000)
    r.checked_pack((a, _a(0x2000), a), None)  # y over x: in place
    r.checked_pack((_a(0x3000), a, a), None)  # y over c
    for bad in (_a(0x1000 + 16), _a(0x1000 - 60)):
        with pytest.raises(InvalidValueError, match="output and input y and x share memory"):
            r.checked_pack((a, _a(0x2000), bad), None)
        with pytest.raises(InvalidValueError, match="output and input y and x share memory"):
            r.variant_pack((a, _a(0x2000), bad), None)
    assert len(made) == 2
    g = Graph()  # the same graph over every other float of its buffers
    x, c = (g.tensor((1, 4, 4), strides=(32, 8, 2), name=n) for n in "xc")
    y = g.add(g.relu(x), c).set_output(True).set_name("y")
    r = R.Runner(types.SimpleNamespace(graph=g, descriptor=plan.descriptor, workspace_size=0, tag="fake"), _Handle(),
                 (x, c, y))
    half = lambda at: DeviceArray(at, (1, 4, 4), np.float32, (32, 8, 2))  # noqa: E731
    r.variant_pack((half(0x4000), half(0x4004), half(0x5000)), None)  # x and c interleaved
    r.checked_pack((half(0x4000), half(0x6000), half(0x4004)), None)  # y and x
    with pytest.raises(InvalidValueError, match="output and input y and x share memory"):
        r.checked_pack((half(0x4000), half(0x6000), half(0x4008)), None)  # y's elements are x's, one on
    assert len(made) == 4


def test_in_place_pairs_stop_at_operations_that_read_beyond_an_element():
    """Through a convolution (x, w), a reduction, or an input that reaches two outputs: no in-place pair; a bias
    and z added after the convolution, and a batch norm's running statistics: in place."""
    g = Graph()
    x, w = g.tensor((1, 4, 8, 8), name="x"), g.tensor((4, 4, 3, 3), name="w")
    z, b = g.tensor((1, 4, 8, 8), name="z"), g.tensor((1, 4, 1, 1), name="b")
    y = g.relu(g.add(g.add(g.conv_fprop(x, w, padding=1), z), b)).set_output(True)
    assert g.in_place_pairs() == {(z.uid, y.uid)}  # b broadcasts: its shape is not y's, so never its view
    g2 = Graph()
    x2 = g2.tensor((4, 8, 2, 2), name="x")
    s, bias, rm, rv = (g2.tensor((1, 8, 1, 1), name=n) for n in ("s", "b", "rm", "rv"))
    out = g2.batch_norm(x2, s, bias, running_mean=rm, running_var=rv)
    for t in out:
        t.set_output(True)
    assert g2.in_place_pairs() == {(rm.uid, out[3].uid), (rv.uid, out[4].uid)}
    g3 = Graph()
    x3 = g3.tensor((2, 4), name="x")
    y3, y4 = g3.relu(x3).set_output(True).set_name("y"), g3.scale(x3, 2.0).set_output(True).set_name("y2")
    assert g3.in_place_pairs() == frozenset()
    plan = types.SimpleNamespace(graph=g3, descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(7), closed=False),
                                 workspace_size=0, tag="fake")
    r = R.Runner(plan, _Handle(), (x3, y3, y4))
    for ptrs, why in (((0x1000, 0x1000, 0x2000), "output and input y and x"),
                      ((0x1000, 0x2000, 0x1000), "output and input y2 and x"),
                      ((0x1000, 0x2000, 0x2000), "outputs y and y2")):
        with pytest.raises(InvalidValueError, match=f"graph 'graph': {why} share memory"):
            r.checked_pack(tuple(_a(p_, (2, 4)) for p_ in ptrs), None)


def test_tensors_placed_by_ragged_offsets_are_left_out_of_the_memory_check(stubbed):
    """Their logical (B, ...) layouts span far more than the packed memory the offsets place them in, which only the
    device holds: a packed output next to a packed input is bound as it is."""
    made, _ = stubbed
    g = Graph()
    x, off = g.tensor((3, 4, 8), name="x"), g.tensor((4, 1, 1), "int64", name="off")
    y = g.relu(x.set_ragged_offset(off)).set_output(True).set_name("y").set_ragged_offset(off)
    plan = types.SimpleNamespace(graph=g, descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(7), closed=False),
                                 workspace_size=0, tag="fake")
    r = R.Runner(plan, _Handle(), (x, off, y))
    r.checked_pack((_a(0x1000, (3, 4, 8)), DeviceArray(0x9000, (4, 1, 1), np.int64), _a(0x1000 + 40 * 4, (3, 4, 8))),
                   None)
    assert len(made) == 1
