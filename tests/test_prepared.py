"""The prepared call (cudnn_py.calls.prepared) on the CPU: a fake C function behind the legacy sink, a Handle that is
never created in cuDNN, arrays at made-up addresses. What a repeat call runs, when it is made again, what it refuses."""
from __future__ import annotations

import threading
import types
from typing import NamedTuple

import numpy as np
import pytest

from cudnn_py.calls import engine_choice, prepared as P
from cudnn_py.clib import recording
from cudnn_py.capi import cudnnHandle_t
from cudnn_py.errors import ClosedError, CudnnPyError, InvalidTypeError, InvalidValueError
from cudnn_py.core import blocks, memory
from cudnn_py.core.memory import DeviceArray
from cudnn_py.core.strided import shares_elements
from cudnn_py.ops import _common
from helpers import FakeCFunction, held_ms_stand_in, FakeWorkspace, fake_array, fake_cudnn_handle, fake_prepared_outputs, \
    fake_takers

arr, CFn, fake_handle = fake_array, FakeCFunction, fake_cudnn_handle


@pytest.fixture(autouse=True)
def fake_allocator(monkeypatch):
    fake_prepared_outputs(monkeypatch)


def make_op(inplace=True):
    fn, body = CFn(), []

    @P.prepared(inputs=("x",), outputs=("y",), inplace=inplace, scalars=("alpha",), moved=("y",))
    def op(handle, x, *, y=None, alpha=1.0, ws=0):
        body.append((x, y))
        ya = arr(x.shape, x.dtype) if y is None else y
        _common.launch(handle, fn, handle.ptr, alpha, x, recording.WorkspaceArg(ws) if ws else None, ya)
        return ya if y is None else y
    return op, fn, body


def test_repeat_call_replays_with_the_new_addresses_and_skips_the_body():
    op, fn, body = make_op()
    h = fake_handle()
    x1, y1 = arr(), arr()
    assert op(h, x1, y=y1, alpha=2.0) is y1
    x2, y2 = arr(), arr()
    assert op(h, x2, y=y2, alpha=2.0) is y2
    assert len(body) == 1  # the second call never ran the validated path
    assert [c[2] for c in fn.calls] == [x1.ptr, x2.ptr] and [c[4] for c in fn.calls] == [y1.ptr, y2.ptr]
    assert fn.calls[1][1] == 2.0 and fn.calls[1][0] is h.ptr
    assert h.cache_info()[P.CACHE] == 1


def test_new_outputs_are_allocated_per_call_and_returned():
    op, fn, body = make_op()
    h = fake_handle()
    y1 = op(h, arr())
    y2 = op(h, arr())
    assert len(body) == 1 and y1.ptr != y2.ptr and y2.shape == y1.shape
    assert fn.calls[1][4] == y2.ptr


@pytest.mark.parametrize("change", ["shape", "strides", "dtype", "device", "alignment", "option", "option type",
                                    "given output", "aliasing"])
def test_anything_but_the_addresses_changing_builds_again(change):
    op, fn, body = make_op()
    h = fake_handle()
    x = arr((2, 4))
    op(h, x, y=arr((2, 4)), alpha=1.0)
    other = {
        "shape": lambda: op(h, arr((4, 2)), y=arr((4, 2))),
        "strides": lambda: op(h, arr((2, 4), strides=(1, 2)), y=arr((2, 4))),
        "dtype": lambda: op(h, arr((2, 4), np.float16), y=arr((2, 4), np.float16)),
        "device": lambda: op(h, arr((2, 4), device=1), y=arr((2, 4), device=1)),
        "alignment": lambda: op(h, arr((2, 4), ptr=fake_array().ptr + 4), y=arr((2, 4))),
        "option": lambda: op(h, arr((2, 4)), y=arr((2, 4)), alpha=3.0),
        "option type": lambda: op(h, arr((2, 4)), y=arr((2, 4)), alpha=1),
        "given output": lambda: op(h, arr((2, 4))),
        "aliasing": lambda: op(h, x, y=x),
    }[change]
    other()
    assert len(body) == 2


def test_the_last_prepared_call_runs_first_and_the_others_still_replay():
    """The handle's cache keeps, per function, the prepared call it ran last (its ``front``), whose guard runs before
    any key is built: calls alternating between two signatures replay both; an entry leaving the cache empties it."""
    op, fn, body = make_op()
    h = fake_handle()
    for _ in range(3):
        op(h, arr((2, 4)), y=arr((2, 4)))
        op(h, arr((4, 2)), y=arr((4, 2)), alpha=2.0)
    assert len(body) == 2 and len(fn.calls) == 6 and [c[1] for c in fn.calls] == [1.0, 2.0] * 3
    cache = h.cache[P.CACHE]
    assert list(cache.front.values()) == [list(cache.values())[1].fast]  # the (4, 2) call's
    cache.pop(next(iter(cache)))
    assert not cache.front
    op(h, arr((4, 2)), y=arr((4, 2)), alpha=2.0)
    assert len(body) == 2 and len(cache.front) == 1


def test_replay_runs_the_last_prepared_call_only_for_its_signature():
    """:func:`replay` (the torch ops' way to check arguments only where they are new) runs a function's last prepared
    call where a call has its signature, and answers MISS, running nothing, before any call, for another signature,
    in a recording and once the cache is cleared (as closing the handle does)."""
    op, fn, body = make_op()
    h = fake_handle()
    assert P.replay(op, h, (arr((2, 4)),), {"y": arr((2, 4))}) is P.MISS
    op(h, arr((2, 4)), y=arr((2, 4)))
    y = arr((2, 4))
    assert P.replay(op, h, (arr((2, 4)),), {"y": y}) is y and len(fn.calls) == 2 and len(body) == 1
    for args, kwargs in (((arr((4, 2)),), {"y": arr((4, 2))}), ((arr((2, 4)),), {"y": arr((2, 4)), "alpha": 2.0}),
                         ((arr((2, 4)),), {})):
        assert P.replay(op, h, args, kwargs) is P.MISS
    with recording.recording():
        assert P.replay(op, h, (arr((2, 4)),), {"y": arr((2, 4))}) is P.MISS
    h.cache.clear()
    assert P.replay(op, h, (arr((2, 4)),), {"y": arr((2, 4))}) is P.MISS
    assert len(fn.calls) == 2 and len(body) == 1


@pytest.mark.parametrize("first", ["aab", "abab", "abcde", "aaaa"])
def test_the_guard_replays_only_the_address_sharing_of_the_first_call(first):
    """The guard compares which arrays share an address (each with its pattern's first, the firsts apart): a call
    with the first call's sharing at new addresses replays it, any other sharing or alignment is keyed anew."""
    fn, body = CFn(), []

    @P.prepared(inputs=("a", "b", "c", "d", "e"), outputs=())
    def op(handle, a, b, c, d=None, e=None):
        body.append(a)
        _common.launch(handle, fn, handle.ptr, *(x for x in (a, b, c, d, e) if x is not None))

    def call(pattern, offset=0):
        made = {name: arr(ptr=arr().ptr + offset) for name in set(pattern)}
        op(h, *(made[n] for n in pattern))
    h = fake_handle()
    call(first)
    call(first)
    assert len(body) == 1 and len(fn.calls) == 2
    others = {"aab": ["abc", "aaa", "aba", "abb"], "abab": ["abcd", "aaaa", "abba", "abac"],
              "abcde": ["abcda", "abcdd", "aacde"], "aaaa": ["aaab", "abcd"]}[first]
    for other in others:
        call(first)
        call(other)
        assert len(body) == 2 and fn.calls[-1][1:].count(fn.calls[-1][1]) == other.count("a")
        del body[1:]
        h.cache[P.CACHE].pop(next(k for k in reversed(h.cache[P.CACHE])))  # the other's call, made again next time
    call(first)
    call(first, offset=4)  # misaligned: another key
    assert len(body) == 2


@pytest.mark.parametrize("junk", [None, object(), "junk", 1.5, float("nan"), 2 ** 100, True, [object()], (1, 2),
                                  np.zeros((2, 2)), np.float64(2.0), DeviceArray])
@pytest.mark.parametrize("where", ["x", "y", "alpha"])
def test_junk_after_a_prepared_call_misses_its_guard_and_is_refused_as_ever(where, junk):
    """The guard compares each argument with the signature by type first: junk where the last call passed an array
    or an option reaches the validated path, which refuses it with the package's errors, never a builtin one."""
    fn = CFn()

    @P.prepared(inputs=("x",), outputs=("y",), scalars=("alpha",))
    def op(handle, x, *, y=None, alpha=1.0):
        xa, ya = memory.as_array(x, "x"), memory.as_array(y, "y")
        _common.launch(handle, fn, handle.ptr, alpha, xa, ya)
        return y
    h = fake_handle()
    for _ in range(2):
        op(h, arr(), y=arr(), alpha=2.0)
    call = {"x": lambda: op(h, junk, y=arr(), alpha=2.0), "y": lambda: op(h, arr(), y=junk, alpha=2.0),
            "alpha": lambda: op(h, arr(), y=arr(), alpha=junk)}[where]
    try:
        call()
    except CudnnPyError:
        pass
    else:  # only a value the validated path takes (alpha a number): then it ran and queued the call
        assert where == "alpha" and len(fn.calls) == 3


def test_a_changed_epoch_misses_the_last_prepared_call():
    fn, body, era = CFn(), [], [0]

    @P.prepared(inputs=("x",), outputs=("y",), epoch=lambda: era[0])
    def op(handle, x, *, y=None):
        body.append(x)
        _common.launch(handle, fn, handle.ptr, x, y)
        return y
    h = fake_handle()
    for era[0] in (0, 0, 1, 1, 0):
        op(h, arr(), y=arr())
    assert len(body) == 2 and len(fn.calls) == 5


def test_arrays_passed_by_keyword_key_and_replay_as_positional_ones():
    """The generated wrapper reads each count of positional arguments: an input passed by keyword keys a prepared
    call of its own that replays; a keyword output's address alignment is keyed as a positional input's is."""
    op, fn, body = make_op()
    h = fake_handle()
    for _ in range(2):
        op(h, x=arr((2, 4)), y=arr((2, 4)))
    assert len(body) == 1 and h.cache_info()[P.CACHE] == 1
    op(h, arr((2, 4)), y=arr((2, 4)))
    assert len(body) == 2
    for _ in range(2):
        op(h, arr((2, 4)), y=arr((2, 4), ptr=fake_array().ptr + 4))
    assert len(body) == 3 and [c[4] % 16 for c in fn.calls[-2:]] == [4, 4]


def test_partial_overlap_is_refused_first_call_and_repeat():
    op, fn, body = make_op()
    h = fake_handle()
    x = arr((4, 4))
    with pytest.raises(InvalidValueError, match="shares memory with x"):
        op(h, x, y=DeviceArray.from_parts(x.ptr + 8, (4, 4), x.dtype, (4, 1), 0, None, None))
    op(h, arr((4, 4)), y=arr((4, 4)))  # a prepared call of this signature now exists
    calls = len(fn.calls)
    with pytest.raises(InvalidValueError, match="shares memory with x"):
        op(h, x, y=DeviceArray.from_parts(x.ptr + 16, (4, 4), x.dtype, (4, 1), 0, None, None))
    assert len(fn.calls) == calls  # nothing queued


@pytest.mark.parametrize("which", ["x", "y"])
def test_arrays_whose_elements_overlap_are_refused_before_any_call(which):
    op, fn, body = make_op()
    h = fake_handle()
    broadcast = arr((4, 4), strides=(0, 1))  # every row the same 4 elements (torch's expand)
    x, y = (broadcast, arr((4, 4))) if which == "x" else (arr((4, 4)), broadcast)
    for _ in range(2):
        with pytest.raises(InvalidValueError, match=rf"{which}'s strides \(0, 1\) make elements of shape \(4, 4\) "
                                                    r"overlap \(a broadcast view"):
            op(h, x, y=y)
    assert not fn.calls and not body
    op(h, arr((1, 4), strides=(0, 1)), y=arr((1, 4)))  # a size-1 dim's stride reaches nothing twice
    assert len(fn.calls) == 1


def test_given_outputs_sharing_memory_are_refused():
    fn = CFn()

    @P.prepared(inputs=("x",), outputs=("y", "z"))
    def op(handle, x, *, y=None, z=None):
        _common.launch(handle, fn, handle.ptr, x, y, z)
        return y, z
    h = fake_handle()
    y = arr((4, 4))
    at = lambda offset: DeviceArray.from_parts(y.ptr + offset, (4, 4), y.dtype, (4, 1), 0, None, None)  # noqa: E731
    for z in (y, at(32)):
        with pytest.raises(InvalidValueError, match="outputs y and z share memory"):
            op(h, arr((4, 4)), y=y, z=z)
    assert not fn.calls
    op(h, arr((4, 4)), y=y, z=at(64))  # adjacent: prepared
    with pytest.raises(InvalidValueError, match="outputs y and z share memory"):  # the repeat call's own check
        op(h, arr((4, 4)), y=y, z=at(48))
    assert len(fn.calls) == 1


def test_interleaved_views_of_one_buffer_share_no_element_and_repeat_unvalidated():
    fn, body = CFn(), []

    @P.prepared(inputs=("x",), outputs=("y", "z"))
    def op(handle, x, *, y=None, z=None):
        body.append(1)
        _common.launch(handle, fn, handle.ptr, x, y, z)
        return y, z
    h = fake_handle()
    column = lambda b, j: arr((4, 4), strides=(12, 3), ptr=b.ptr + 4 * j)  # noqa: E731 - column j of every three
    for _ in range(3):
        b = arr((4, 12))
        x, y, z = (column(b, j) for j in range(3))
        assert op(h, x, y=y, z=z) == (y, z)
    assert len(fn.calls) == 3 and len(body) == 1  # the repeats never ran the validated path
    b = arr((4, 12))
    for first in (True, False):  # z three elements on: z's elements are y's, every call refuses
        with pytest.raises(InvalidValueError, match="outputs y and z share memory"):
            op(h, column(b, 0), y=column(b, 1), z=column(b, 4))
        with pytest.raises(InvalidValueError, match="y shares memory with x but is not the same view"):
            op(h, column(b, 0), y=column(b, 3), z=column(b, 2))
    assert len(fn.calls) == 3


@pytest.mark.parametrize("a, b, shared", [
    ((64, (4,), (2,), 4), (68, (4,), (2,), 4), False),  # even and odd elements
    ((64, (4,), (2,), 4), (72, (4,), (2,), 4), True),
    ((100, (4,), (-1,), 4), (88, (1,), (1,), 4), True),  # runs backwards over it
    ((100, (4,), (-1,), 4), (84, (1,), (1,), 4), False),  # just below
    ((2 ** 64 - 64, (4,), (1,), 4), (2 ** 64 - 32, (4,), (1,), 4), False),  # at the top of the address space
    ((64, (3, 5), (10, 2), 2), (66, (3, 5), (10, 2), 2), False),  # every other 2-byte item, and the rest
    ((64, (3, 5), (10, 2), 2), (68, (3, 5), (10, 2), 4), True),  # 4-byte items over them
])
def test_shares_elements_reads_strides_not_extents(a, b, shared):
    assert shares_elements(a, b) is shared and shares_elements(b, a) is shared


def test_in_place_kept_where_allowed_and_refused_where_not():
    op, fn, body = make_op(inplace=True)
    h = fake_handle()
    x = arr()
    assert op(h, x, y=x) is x
    assert op(h, x, y=x) is x and len(body) == 1
    op2, fn2, _ = make_op(inplace=False)
    with pytest.raises(InvalidValueError, match="no in-place form"):
        op2(h, x, y=x)
    assert not fn2.calls


def test_workspace_is_fetched_on_every_replay():
    op, fn, body = make_op()
    h = fake_handle()
    op(h, arr(), y=arr(), ws=128)
    h.workspace.ptr = 0x6000_0000  # the workspace grew: a new buffer
    op(h, arr(), y=arr(), ws=128)
    assert len(body) == 1 and fn.calls[1][3] == 0x6000_0000


def test_a_scratch_address_or_a_spoiled_recording_makes_no_prepared_call():
    fn, body = CFn(), []

    @P.prepared(inputs=("x",), outputs=("y",))
    def scratch_op(handle, x, *, y=None):
        body.append(1)
        _common.launch(handle, fn, x, arr(), y)  # an array that is none of the call's
        return y

    @P.prepared(inputs=("x",), outputs=("y",))
    def spoiled_op(handle, x, *, y=None):
        body.append(2)
        recording.spoil("test")
        _common.launch(handle, fn, x, y)
        return y
    h = fake_handle()
    for _ in range(3):
        scratch_op(h, arr(), y=arr())
        spoiled_op(h, arr(), y=arr())
    assert body == [1, 2] * 3 and P.CACHE not in h.cache_info()


def test_unhashable_option_and_foreign_arrays_are_validated_every_call():
    op, fn, body = make_op()
    h = fake_handle()
    for _ in range(2):
        op(h, arr(), y=arr(), ws=[8])
    assert len(body) == 2


def test_old_positional_outputs_and_stand_in_handles_take_the_validated_path():
    op, fn, body = make_op()
    h = fake_handle()
    with pytest.warns(DeprecationWarning, match="pass y= as keywords"):
        op(h, arr(), arr())  # an output passed positionally, as before keyword-only outputs
        op(h, arr(), arr())
    stand_in = type("H", (), {"device": 0, "ptr": cudnnHandle_t(1), "workspace": FakeWorkspace(), "stream": None})()
    op(stand_in, arr(), y=arr())
    op(stand_in, arr(), y=arr())
    assert len(body) == 4


class Pair(NamedTuple):
    a: object
    b: object


def test_the_shared_checks_run_before_the_function():
    op, fn, body = make_op()
    h = fake_handle()
    with pytest.raises(InvalidValueError, match="alpha"):
        op(h, arr(), y=arr(), alpha=float("nan"))
    with pytest.raises(InvalidTypeError, match="takes 1 output"):
        op(h, arr(), arr(), arr())
    with pytest.raises(InvalidTypeError, match="both positionally"):
        op(h, arr(), arr(), y=arr())
    h.close = None
    h._ptr = None
    with pytest.raises(ClosedError):
        op(h, arr(), y=arr())
    assert body == []


def test_results_are_rebuilt_in_shape_given_and_new_outputs_in_place():
    fn, body = CFn(), []

    @P.prepared(inputs=("x",), outputs=("y", "z"))
    def two(handle, x, *, y=None, z=None):
        body.append(1)
        ya = arr() if y is None else y
        za = arr() if z is None else z
        _common.launch(handle, fn, x, ya, za)
        return Pair(ya, None if z is None else z)
    h = fake_handle()
    z1 = arr()
    r1 = two(h, arr(), z=z1)
    z2 = arr()
    r2 = two(h, arr(), z=z2)
    assert type(r2) is Pair and r2.b is z2 and r1.b is z1 and len(body) == 1
    assert fn.calls[1][1] == r2.a.ptr and fn.calls[1][2] == z2.ptr


@pytest.fixture
def measuring(monkeypatch):
    """engine_choice measures both engines here: every timed run takes 1 ms, no tuning database."""
    monkeypatch.setattr(engine_choice, "held_ms", held_ms_stand_in(lambda fn: 1.0))
    monkeypatch.setattr(engine_choice, "_store", lambda *a: None)
    monkeypatch.setattr(engine_choice, "_stored", lambda *a: None)


def test_engine_measurement_keeps_only_the_winners_run(measuring):
    fn = CFn()
    h = fake_handle()

    @P.prepared(inputs=("x",), outputs=("y",))
    def measured(handle, x, *, y=None):
        engine_choice.run(handle, ("measured",), lambda: _common.launch(handle, fn, 1, x, y),
                          lambda: _common.launch(handle, fn, 2, x, y))
        return y
    measured(h, arr(), y=arr())
    n = len(fn.calls)
    assert n > 2
    measured(h, arr(), y=arr())
    assert len(fn.calls) == n + 1  # one step: the winner's


def test_threads_share_one_cache_safely():
    op, fn, body = make_op()
    h = fake_handle()
    errors = []

    def work():
        try:
            for _ in range(200):
                op(h, arr(), y=arr())
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(fn.calls) == 1600 and len(body) <= 8


FAMILIES = ["activation_forward", "activation_backward", "softmax_forward", "softmax_backward", "pooling_forward",
            "pooling_backward", "add_tensor", "op_tensor", "scale_tensor", "transform_tensor", "lrn_forward",
            "lrn_backward", "convolution_forward", "convolution_backward_data", "convolution_backward_filter",
            "convolution_backward_bias", "sdpa", "sdpa_backward", "sdpa_fp8", "sdpa_fp8_backward",
            "reduce_tensor"]


@pytest.mark.parametrize("name", FAMILIES)
def test_public_operation_functions_are_prepared_calls(name):
    """The function form is the prepared call's wrapper: a repeat call cannot bypass it."""
    import cudnn_py
    assert isinstance(getattr(getattr(cudnn_py, name), "__prepared__", None), P._Spec)


def test_first_call_outputs_reach_torch_through_dlpack_or_an_int_view(monkeypatch):
    """The configuration's first call hands its new DeviceArray to torch through DLPack; a dtype torch's DLPack
    import lacks (the float8 types) goes as same-width ints viewed as the dtype."""
    import importlib.util
    import sys
    import types
    got = []

    class T:
        def __init__(self, a):
            self.a = a

        def view(self, dt):
            got.append(("view", self.a.dtype, dt))
            return self

    def from_dlpack(a):
        if a.dtype.kind not in "iu":
            raise KeyError(a.dtype)
        return T(a)
    fake = types.SimpleNamespace(from_dlpack=from_dlpack, float8_e4m3fn="f8", int8="i8")
    monkeypatch.setitem(sys.modules, "torch", fake)
    spec = importlib.util.find_spec("cudnn_py.torch_outputs")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)  # a copy with the stand-in, gone after the test (a later test's torch is real)
    monkeypatch.setitem(sys.modules, "cudnn_py.torch_outputs", hooks)
    import ml_dtypes
    a = DeviceArray.from_parts(0x7000_0000, (2, 3), np.dtype(ml_dtypes.float8_e4m3fn), (3, 1), 0, None, object())
    t = P.to_package(a, "torch")
    assert t.a.ptr == a.ptr and t.a.dtype == np.int8 and t.a.shape == a.shape and got == [("view", np.int8, "f8")]
    b = arr((2, 3), np.int8)
    assert P.to_package(b, "torch").a is b and len(got) == 1


def test_a_returned_view_of_a_given_output_is_the_callers_object():
    """A function that returns its checked DeviceArray of a given output (a torch tensor's, say) returns the caller's
    own object, and its repeat calls are prepared (they were validated every time: 180-445 us a call for batch norm
    and dropout with torch outputs, H200)."""
    fn, body = CFn(), []

    @P.prepared(inputs=("x",), outputs=("y",), inplace=False)
    def viewing(handle, x, *, y):
        body.append(1)
        ya = DeviceArray.from_parts(y.ptr, y.shape, y.dtype, y.strides, 0, None, None)  # a new object, same view
        _common.launch(handle, fn, x, ya)
        return ya
    h = fake_handle()
    for _ in range(3):
        y = arr()
        assert viewing(h, arr(), y=y) is y
    assert len(body) == 1 and len(fn.calls) == 3


def test_a_number_where_an_array_may_be_is_keyed_by_value():
    """An argument that may be an array or a number (sdpa's seed, the FP8 scales) is keyed by its value and type:
    another number builds again, and the number never takes part in the overlap checks."""
    fn, body = CFn(), []

    @P.prepared(inputs=("x", "seed"), outputs=("y",))
    def seeded(handle, x, *, seed, y):
        body.append(seed)
        _common.launch(handle, fn, x, y)
        return y
    h = fake_handle()
    seeded(h, arr(), seed=7, y=arr())
    seeded(h, arr(), seed=7, y=arr())
    seeded(h, arr(), seed=8, y=arr())
    seeded(h, arr(), seed=True, y=arr())
    assert body == [7, 8, True] and len(fn.calls) == 4


def test_a_reason_to_spoil_found_before_measuring_the_engines_stays(measuring):
    """Measuring the engines forgets the measured runs, not a reason found before them (a warning that must repeat)."""
    fn = CFn()
    h = fake_handle()

    @P.prepared(inputs=("x",), outputs=("y",))
    def warns(handle, x, *, y=None):
        recording.spoil("warns on every call")
        engine_choice.run(handle, ("warns",), lambda: _common.launch(handle, fn, 1, x, y),
                          lambda: _common.launch(handle, fn, 2, x, y))
        return y
    warns(h, arr(), y=arr())
    assert P.CACHE not in h.cache_info()


def test_a_replay_takes_its_new_outputs_blocks_on_the_handles_stream(monkeypatch):
    """A replay takes the blocks of its new DeviceArrays itself (``memory.Output``, bound once per handle stream and
    again when the handle's stream changes): each call new arrays of the recorded layouts at new addresses, those the
    C function got; views of one allocation own its block."""
    monkeypatch.undo()  # the real allocations, of stand-in blocks
    made = fake_takers(monkeypatch)
    fn = CFn(pointer_params=(1, 2, 3, 4))

    @P.prepared(inputs=("x",), outputs=())
    def op(handle, x):
        y = memory.Output((2, 3, 4), np.float32, (1, 2, 6)).on(handle.stream, handle.device)
        base = memory.Output((96,), np.float32).on(handle.stream, handle.device)
        a, b = (DeviceArray.from_parts(base.ptr + i * 256, (8,), base.dtype, (1,), 0, base, None) for i in (0, 1))
        _common.launch(handle, fn, handle.ptr, x, y, a, b)
        return y, a, b
    h, x = fake_handle(), arr((8,))
    h._stream = "s1"
    op(h, x)
    assert len(made.binds) == 2 and P.CACHE in h.cache
    for stream in ("s1", "s1", "s2"):
        h._stream = stream
        y, a, b = op(h, x)
        assert (y.shape, y.strides, y.stream, a.stream) == ((2, 3, 4), (1, 2, 6), stream, stream)
        assert type(y.owner) is type(a.owner) is blocks.Block and a.owner is b.owner and b.ptr - a.ptr == 256
        assert fn.calls[-1][1:] == (x.ptr, y.ptr, a.ptr, b.ptr) and y.ptr == made.blocks[-1].ptr
    assert len(fn.calls) == 4 and len(made.blocks) == 8  # two a call
    assert [bind[1:] for bind in made.binds[2:]] == [("as s1", 0)] * 2 + [("as s2", 0)] * 2  # the replay's own


def test_new_outputs_viewing_one_allocation_are_allocated_together_on_replay(monkeypatch):
    """A call whose new outputs are two views of one allocation it made (batch norm's saved statistics): a replay
    allocates that one allocation and views it alike (one allocation a call instead of two)."""
    made: list = []
    real = P._device_allocator
    monkeypatch.setattr(P, "_device_allocator", lambda a: (made.append(a.shape), real(a))[1])
    fn = CFn(pointer_params=(2, 3))

    @P.prepared(inputs=("x",), outputs=())
    def op(handle, x):
        base = arr((96,))
        a, b = (DeviceArray.from_parts(base.ptr + i * 256, (8,), base.dtype, (1,), 0, base, None) for i in (0, 1))
        _common.launch(handle, fn, handle.ptr, x, a, b)
        return a, b
    h = fake_handle()
    op(h, arr((8,)))
    a, b = op(h, arr((8,)))
    assert made == [(96,)]  # the prepared call's one allocator: the views' allocation
    assert b.ptr - a.ptr == 256 and a.owner is b.owner and (a.shape, b.shape) == ((8,), (8,))
    assert fn.calls[-1][2:] == (a.ptr, b.ptr)


def test_torch_outputs_viewing_one_allocation_are_allocated_one_by_one(monkeypatch):
    """With torch inputs, the replay allocates each output that viewed one allocation on the first call by itself
    through torch's allocator, in its own layout (an allocation there costs less than an ``as_strided`` view)."""
    import types
    from helpers import FakeTorchTensor, fake_torch
    torch = fake_torch(monkeypatch)
    made: list = []

    def allocator(shape, strides, dtype, device):
        made.append((shape, strides, dtype, device))
        return lambda handle: (lambda t: (t, t.data_ptr()))(FakeTorchTensor(shape, torch.float32, arr().ptr, strides))
    monkeypatch.setattr(P, "_hooks", lambda pkg: types.SimpleNamespace(allocator=allocator, convert=lambda a: a))
    fn = CFn(pointer_params=(2, 3))

    @P.prepared(inputs=("x",), outputs=())
    def op(handle, x):
        base = arr((96,))
        a, b = (DeviceArray.from_parts(base.ptr + i * 256, (8,), base.dtype, (1,), 0, base, None) for i in (0, 1))
        _common.launch(handle, fn, handle.ptr, arr((8,), ptr=x.data_ptr()), a, b)
        return a, b
    h = fake_handle()
    op(h, FakeTorchTensor((8,), torch.float32, arr().ptr))
    x = FakeTorchTensor((8,), torch.float32, arr().ptr)
    a, b = op(h, x)
    assert made == [((8,), (1,), np.dtype(np.float32), 0)] * 2 and len(fn.calls) == 2
    assert type(a) is FakeTorchTensor and (a.shape, a.stride()) == ((8,), (1,)) == (b.shape, b.stride())
    assert fn.calls[-1][1:] == (x.data_ptr(), a.data_ptr(), b.data_ptr()) and a.data_ptr() != b.data_ptr()


def test_the_guard_reads_a_contiguous_torch_tensor_by_torchs_own_test(monkeypatch):
    """A torch tensor contiguous on the first call is checked by ``is_contiguous()`` on a repeat call: one whose
    strides differ only in dims of size 1 (which address no other element) replays the prepared call at its address;
    other strides, or a tensor not contiguous on the first call whose strides change, are keyed anew."""
    from helpers import FakeTorchTensor, fake_torch
    torch = fake_torch(monkeypatch)
    fn, strides = CFn(), []

    @P.prepared(inputs=("x",), outputs=())
    def op(handle, x):
        strides.append(x.stride())
        _common.launch(handle, fn, handle.ptr, arr(x.shape, ptr=x.data_ptr(), strides=x.stride()))

    def tensor(shape, st=None):
        return FakeTorchTensor(shape, torch.float32, arr().ptr, st)
    h = fake_handle()
    op(h, tensor((1, 4, 1, 8)))
    odd = tensor((1, 4, 1, 8), (5, 8, 3, 1))
    assert odd.is_contiguous()
    op(h, odd)
    assert strides == [(32, 8, 8, 1)] and fn.calls[-1][1] == odd.data_ptr()  # replayed at its address
    op(h, tensor((1, 4, 1, 8), (32, 1, 8, 4)))  # a dim of 4 and one of 8 strided otherwise: not contiguous
    assert strides[1:] == [(32, 1, 8, 4)]
    op(h, tensor((1, 4, 1, 8), (64, 1, 8, 8)))  # not contiguous first: its strides are compared
    assert strides[2:] == [(64, 1, 8, 8)]
