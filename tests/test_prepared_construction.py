"""A prepared call is right by construction, not by convention (issue 39 item 3), on the CPU with stand-ins: an
address C gets as a plain int, a queuing C call outside the sinks, a workspace refused in a later step, the graph
route's workspace after a stream change, cache clears and engine-mode changes, tracebacks through a replay."""
from __future__ import annotations

import traceback

import pytest

from cudnn_py import capi
from cudnn_py.calls import engine_choice, prepared as P
from cudnn_py.clib import recording
from cudnn_py.errors import CudnnPyError, InvalidValueError, WorkspaceLimitError
from cudnn_py.graph import runner
from cudnn_py.graph.plans import plan_cache_clear
from cudnn_py.ops import _common
from helpers import FakeCFunction, FakeWorkspace, fake_array, fake_cudnn_handle, fake_prepared_outputs

arr = fake_array


@pytest.fixture(autouse=True)
def fake_allocator(monkeypatch):
    fake_prepared_outputs(monkeypatch)


def test_an_address_passed_as_a_plain_int_is_never_replayed():
    """A family that hands C its output's address as an int would get a replay writing into the first call's
    output: the recording is spoiled instead, and every call runs the validated path."""
    fn, body = FakeCFunction(pointer_params=(1, 2)), []

    @P.prepared(inputs=("x",), outputs=("y",))
    def op(handle, x, *, y=None):
        body.append(x)
        ya = arr(x.shape, x.dtype) if y is None else y
        _common.launch(handle, fn, handle.ptr, x, ya.ptr)  # y's address as a plain int (equal to one of the arrays)
        return ya
    h = fake_cudnn_handle()
    y1, y2 = arr(), arr()
    op(h, arr(), y=y1)
    op(h, arr(), y=y2)
    assert len(body) == 2 and [c[2] for c in fn.calls] == [y1.ptr, y2.ptr]
    assert not h.cache.get(P.CACHE)


def test_a_queuing_c_function_outside_the_sinks_spoils_the_recording():
    assert capi.cudnnAddTensor.queues and capi.cudnnBackendExecute.queues
    assert not capi.cudnnGetConvolutionForwardWorkspaceSize.queues and not capi.cudnnCreateTensorDescriptor.queues
    with recording.recording() as rec:
        with pytest.raises(CudnnPyError):  # NULL handle and descriptors: refused, after the recording noted it
            capi.cudnnAddTensor(None, None, None, None, None, None, None)
    assert rec.spoiled is not None and "cudnnAddTensor" in rec.spoiled
    with recording.recording() as rec:
        recording.state.sink = True
        try:
            with pytest.raises(CudnnPyError):
                capi.cudnnAddTensor(None, None, None, None, None, None, None)
        finally:
            recording.state.sink = False
    assert rec.spoiled is None


class CappedWorkspace(FakeWorkspace):
    def __init__(self):
        super().__init__()
        self.cap, self.asked = 1 << 20, []

    def get(self, nbytes, stream=None):
        self.asked.append(nbytes)
        if nbytes > self.cap:
            raise WorkspaceLimitError(f"{nbytes} bytes over the cap")
        return self.ptr if nbytes else 0


def test_a_replay_fetches_every_workspace_before_its_first_step():
    first, second = FakeCFunction(), FakeCFunction()

    @P.prepared(inputs=("x",), outputs=("y",))
    def op(handle, x, *, y=None, big=1000):
        _common.launch(handle, first, x, recording.WorkspaceArg(100))
        _common.launch(handle, second, x, recording.WorkspaceArg(big), y)
        return y
    h = fake_cudnn_handle()
    h.workspace = CappedWorkspace()
    op(h, arr(), y=arr(), big=4096)
    assert len(first.calls) == 1 and h.cache_info()[P.CACHE] == 1
    h.workspace.asked.clear()
    op(h, arr(), y=arr(), big=4096)
    assert h.workspace.asked[0] == 4096  # the largest, before either step queued
    h.workspace.cap = 2048  # lowered: the replay refuses before its first step, then the call is made again
    with pytest.raises(WorkspaceLimitError):
        op(h, arr(), y=arr(), big=4096)
    assert len(first.calls) == 3 and len(second.calls) == 2  # the refused call's first step ran once (validated)


def test_the_graph_route_fetches_its_workspace_on_the_handles_current_stream():
    h = fake_cudnn_handle()
    seen = []
    h.workspace.get = lambda size, stream: seen.append(stream) or 0x7000
    r = runner.Runner.__new__(runner.Runner)
    r.handle, r.workspace_size, r.ws_get = h, 256, h.workspace.get
    r.workspace()
    h._stream = "other stream"
    r.workspace()
    assert seen == [None, "other stream"]


def _entry(uses):
    return P.Prepared("op", [], [], [], (("none", 0),), None, 0, frozenset(uses))


def test_cache_clears_forget_exactly_the_prepared_calls_built_on_them():
    h = fake_cudnn_handle()
    cache = P.handle_cache(h, P.CACHE)
    cache.update({"legacy": _entry({"graph.legacy"}), "conv": _entry({"graph.conv", engine_choice.CACHE}),
                  "plain": _entry(())})
    P._CACHES[id(cache)] = cache
    cache["plans"] = _entry({"graph.plans"})
    P.forget(h, "graph.legacy")
    assert sorted(cache) == ["conv", "plain", "plans"]
    plan_cache_clear(h)
    assert sorted(cache) == ["conv", "plain"]
    engine_choice.set_mode("static")
    try:
        assert sorted(cache) == ["plain"]
    finally:
        engine_choice.set_mode(None)


def test_a_traceback_through_a_replay_shows_its_source_lines():
    def boom(*args):
        raise RuntimeError("in the step")
    p = P.Prepared("op", [(boom, [1, None], ((1, 0),), (), ())], [], [], (("none", 0),), None, 1)
    with pytest.raises(RuntimeError) as e:
        p.run(fake_cudnn_handle(), (), {}, [0x1000])
    text = "".join(traceback.format_exception(e.value))
    assert "call0(k0_0, p0)" in text


def test_many_overlap_checks_are_skipped_only_at_the_last_passing_addresses():
    """A prepared call with four or more overlap checks compares the call's addresses with the last ones that passed
    first; any other addresses are checked in full, so an output moved onto an input is still refused (MISS)."""
    calls = []
    overlaps = [(o, i, 0, 64, 0, 64, None) for o in (2, 3) for i in (0, 1)]
    step = (lambda *a: calls.append(a), [None] * 4, ((0, 0), (1, 1), (2, 2), (3, 3)), (), ())
    p = P.Prepared("op", [step], [], overlaps, (("arg", 0),), None, 4)
    h, apart = fake_cudnn_handle(), [0x1000, 0x2000, 0x3000, 0x4000]
    assert p.run(h, ("x",), {}, list(apart)) == "x" and "passed[0]" in p.source
    for o, i in ((2, 0), (3, 1), (2, 1), (3, 0)):
        near = list(apart)
        near[o] = near[i] + 32
        assert p.run(h, ("x",), {}, near) is P.MISS
    assert p.run(h, ("x",), {}, list(apart)) == "x" and len(calls) == 2


def test_overlapping_extents_pass_at_the_offset_the_first_call_checked_element_by_element():
    """Output 1 and input 0 span 64 bytes each; the first call found them sharing no element 4 bytes apart (every
    other float of one buffer): only that offset passes, any other within the extents is checked again (MISS)."""
    step = (lambda *a: None, [None] * 2, ((0, 0), (1, 1)), (), ())
    p = P.Prepared("op", [step], [], [(1, 0, 0, 64, 0, 64, 4)], (("arg", 0),), None, 2)
    h = fake_cudnn_handle()
    assert p.run(h, ("x",), {}, [0x1000, 0x1004]) == "x" and p.run(h, ("x",), {}, [0x9000, 0x9004]) == "x"
    assert [p.run(h, ("x",), {}, [0x1000, 0x1000 + d]) for d in (8, -4, 60)] == [P.MISS] * 3
    assert p.run(h, ("x",), {}, [0x1000, 0x1040]) == "x"  # apart


class Foreign:
    """A producer of another package (``__cuda_array_interface__``), standing for the DeviceArray ``a``."""
    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": "<f4", "data": (a.ptr, False),
                                         "strides": None, "version": 3}


@pytest.mark.parametrize("kinds", [("foreign", "foreign"), ("foreign", "device"), ("device", "foreign")])
def test_an_output_partially_overlapping_an_input_is_refused_whatever_their_kinds(monkeypatch, kinds):
    """Issue 40 item 3: the overlap check after conversion, for inputs and outputs of other packages too."""
    monkeypatch.setattr(P.memory, "as_array", lambda v, *a, **k: v.a)  # the conversion needs a driver
    body: list = []

    @P.prepared(inputs=("x",), outputs=("y",))
    def op(handle, x, *, y=None):
        body.append(x)
        return y
    x = arr((8,))
    y = arr((8,), ptr=x.ptr + 16)  # elements 4..11 of x's memory: a partial overlap
    wrap = {"foreign": Foreign, "device": lambda a: a}
    with pytest.raises(InvalidValueError, match="shares memory with x"):
        op(fake_cudnn_handle(), wrap[kinds[0]](x), y=wrap[kinds[1]](y))
    assert body == []


def test_an_explicit_graph_engine_that_ran_nothing_refuses():
    """engine='graph' whose graph path answers that it did not take the call raises instead of returning with no
    work queued (and never falls back to the legacy call it was told not to use)."""
    from cudnn_py.graph import legacy as gl
    ran: list = []
    with pytest.raises(gl.GraphPathRefused, match="engine='graph'"):
        gl.dispatch("graph", None, None, lambda: ran.append("legacy"), lambda auto: False)
    assert ran == [] and gl.dispatch("auto", None, None, lambda: ran.append("legacy"), lambda auto: False,
                                     measure=False) == "legacy" and ran == ["legacy"]
