"""Guards where the work happens (issue 45 item 2), on the CPU with stand-ins: driver work outside a sink spoils a
recording, a replay checks the descriptors a caller may close, the engine choice's key and mutated arrays come from
the ``@prepared`` declaration, and every prepared function declares its array parameters."""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import numpy as np
import pytest

import cudnn_py
from cudnn_py.calls import engine_choice as ec, prepared as P
from cudnn_py.core import memory
from cudnn_py.clib import recording
from cudnn_py.core.descriptors import Descriptor
from cudnn_py.errors import ClosedError
from cudnn_py.graph import legacy as gl
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops import _common
from helpers import FakeCFunction, held_ms_stand_in, NoCallHandle, fake_array, fake_cudnn_handle, fake_prepared_outputs


@pytest.fixture(autouse=True)
def fake_allocator(monkeypatch):
    fake_prepared_outputs(monkeypatch)


# ---------------------------------------------------------------- driver work spoils a recording outside a sink

class FakeStream:
    handle = 0

    def sync(self) -> None:
        pass


class FakeDriver:
    """The CUDA driver bindings: each ``cu*`` call is noted and succeeds."""
    def __init__(self):
        self.calls: list[str] = []

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)
        return lambda *args: self.calls.append(name) or (0,)


STREAM = FakeStream()


def device_array(shape=(4,), dtype=np.float32) -> DeviceArray:
    a = fake_array(shape, dtype)
    return DeviceArray.from_parts(a.ptr, a.shape, a.dtype, a.strides, 0, None, STREAM)


@pytest.fixture
def driver(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(memory, "driver", lambda: d)
    monkeypatch.setattr(memory, "on_device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(memory, "_allocate", lambda shape, dtype, stream, device: device_array(shape, dtype))
    return d


DRIVER_WORK = {
    "zeros": lambda: memory.zeros((4,)),
    "fill_": lambda: device_array().fill_(1.0),
    "copy_ from the device": lambda: device_array().copy_(device_array()),
    "copy_ from the host": lambda: device_array().copy_(np.ones(4, np.float32)),
    "to_device": lambda: memory.to_device(np.ones(4, np.float32)),
    "to_numpy": lambda: device_array().to_numpy(),
    "memset": lambda: memory.memset(0x1000, np.ones(1, np.float32), 4, 0),
}


@pytest.mark.parametrize("what", sorted(DRIVER_WORK))
def test_driver_work_outside_a_sink_spoils_the_recording(driver, what):
    with recording.recording() as rec:
        DRIVER_WORK[what]()
    assert driver.calls and rec.spoiled is not None and driver.calls[-1] in rec.spoiled
    with recording.recording() as rec:
        recording.in_sink(DRIVER_WORK[what])  # a host step's own work is recorded by its sink
    assert rec.spoiled is None


#: modules that reach the driver's memory calls themselves, with why that is safe (none: the sequence models' upload
#: of their lengths is memory's copy_, in a host step)
OWN_DRIVER_MEMORY_CALLS: dict[str, str] = {}


def test_every_driver_memory_call_goes_through_the_guard():
    source = inspect.getsource(memory)
    assert re.findall(r"driver\(\)\.cu\w+", source) == []
    assert len(re.findall(r'_queue\("cu\w+"', source)) >= 6
    root = Path(cudnn_py.__file__).parent
    direct = {p.relative_to(root).as_posix() for p in root.rglob("*.py")
              if "capi" not in p.parts and re.search(r"driver\(\)\.cuMem", p.read_text())}
    assert direct == set(OWN_DRIVER_MEMORY_CALLS)


def test_the_sequence_lengths_upload_is_memorys_copy_as_a_recorded_host_step(driver):
    """RNN and attention upload their lengths through memory's one host-to-device copy (the guard sees it), as a host
    step: a recording keeps it (not spoiled) and its replay uploads into the new array's address."""
    from cudnn_py.ops import sequence_models as SM
    handle = type("H", (), {"stream": STREAM, "device": 0})()
    with recording.recording() as rec:
        a = SM.device_lengths(handle, (3, 2))
    assert rec.spoiled is None and driver.calls == ["cuMemcpyHtoDAsync"]
    step = rec.steps[-1]
    assert a.shape == (2,) and step.call is SM._upload and step.args[1] == a.ptr and step.pointers == (1,)


def test_a_new_output_zeroed_before_an_accumulating_call_is_zeroed_on_every_call(driver):
    """The zeroing is driver work: the recording of a call that does it is no prepared call, so a repeat call
    zeroes again instead of accumulating into a replay's unzeroed output."""
    fn = FakeCFunction()

    @P.prepared(inputs=("x",), outputs=("y",))
    def op(handle, x, *, y=None):
        ya = memory.zeros(x.shape, x.dtype) if y is None else y
        _common.launch(handle, fn, handle.ptr, x, ya)  # accumulates into ya
        return ya
    h, x = fake_cudnn_handle(), device_array()
    op(h, x)
    op(h, x)
    assert driver.calls == ["cuMemsetD8Async"] * 2 and len(fn.calls) == 2
    assert not h.cache.get(P.CACHE)


# ---------------------------------------------------------------- closed descriptors

class Closable(Descriptor):
    """A descriptor a caller owns and may close, never created in cuDNN."""
    def __init__(self, shared: bool = False):
        self._ptr, self._shared, self._finalizer = ctypes.c_void_p(0x77), shared, lambda: None


def _descriptor_op(fn):
    @P.prepared(inputs=("x",), outputs=("y",))
    def op(handle, d, x, *, y=None):
        d.ptr  # noqa: B018 - the validated path refuses a closed descriptor
        _common.launch(handle, fn, handle.ptr, d, x, y)
        return y
    return op


def test_a_replay_refuses_a_descriptor_closed_since_as_the_validated_path_does():
    fn = FakeCFunction()
    op, h, d = _descriptor_op(fn), fake_cudnn_handle(), Closable()
    op(h, d, fake_array(), y=fake_array())
    op(h, d, fake_array(), y=fake_array())
    assert len(fn.calls) == 2 and h.cache_info()[P.CACHE] == 1  # the second call was the replay
    d.close()
    with pytest.raises(ClosedError):
        op(h, d, fake_array(), y=fake_array())
    assert len(fn.calls) == 2  # nothing queued with the destroyed descriptor


def test_only_descriptors_a_caller_may_close_are_checked():
    """A shared descriptor's close() does nothing: the replay of a call passing one checks nothing."""
    fn = FakeCFunction()
    op, h = _descriptor_op(fn), fake_cudnn_handle()
    op(h, Closable(shared=True), fake_array(), y=fake_array())
    (p,) = h.cache[P.CACHE].values()
    assert ".closed" not in p.source
    d = Closable()
    op(h, d, fake_array(), y=fake_array())
    assert any(".closed" in p.source for p in h.cache[P.CACHE].values())


def test_no_family_of_this_tree_checks_by_hand_where_the_replay_does():
    """The families whose calls pass their closable descriptors through the sinks leave the check to the replay."""
    from cudnn_py.ops import _common, attention, dropout, rnn, spatial_transformer
    for mod in (_common, attention, dropout, rnn, spatial_transformer):
        assert "replay_checks_open" not in inspect.getsource(mod), mod.__name__


# ---------------------------------------------------------------- the engine choice from the declaration

@pytest.fixture
def measured(monkeypatch):
    """engine_choice measuring on stand-ins: what it snapshots (the mutated arrays) and the keys it keeps."""
    seen: dict = {}

    def snapshot(handle, arrays):
        seen["mutated"] = tuple(arrays)
        return lambda: None
    monkeypatch.setattr(ec, "_snapshot", snapshot)
    monkeypatch.setattr(ec, "held_ms", held_ms_stand_in(lambda fn: 1.0))
    monkeypatch.setattr(ec, "_stored", lambda handle, key: None)
    monkeypatch.setattr(ec, "_store", lambda handle, key, got: None)
    monkeypatch.setattr(ec, "mode", lambda: "measure")
    return seen


@P.prepared(inputs=("x",), outputs=("y",), scalars=("alpha", "beta"))
def blend_op(handle, x, *, y=None, alpha=1.0, beta=0.0, engine="auto"):
    gl.dispatch(engine, handle, None, lambda: None, lambda auto: None)
    return y


@P.prepared(inputs=("y",), outputs=("y",))
def rescale_op(handle, y, *, engine="auto"):
    gl.dispatch(engine, handle, None, lambda: None, lambda auto: None)
    return y


@pytest.mark.parametrize("case", ["new output", "beta 0", "beta 0.5", "in place", "read and written"])
def test_what_a_measured_call_mutates_comes_from_the_declaration(measured, case):
    h, x = NoCallHandle(), fake_array((4,))
    y = {"new output": None, "in place": x}.get(case, fake_array((4,)))
    if case == "read and written":
        rescale_op(h, y)
    else:
        blend_op(h, x, y=y, beta=0.5 if case == "beta 0.5" else 0.0)
    want = [] if case in ("new output", "beta 0") else [y.ptr]
    assert [a.ptr for a in measured["mutated"]] == want


def test_the_engine_choice_key_comes_from_the_declaration(measured):
    h, x, y = NoCallHandle(), fake_array((2, 3)), fake_array((2, 3))
    blend_op(h, x, y=y, beta=0.5)
    (key,) = ec.choices(h)
    sig = ((2, 3), (3, 1), np.dtype(np.float32))
    assert key == ("blend_op", ("x", sig), ("y", "out"), ("alpha", 1.0), ("beta", 0.5), ("engine", "auto"))
    blend_op(h, x, y=y, beta=0.5)
    blend_op(h, x, y=None, beta=0.5)  # a new output shares the given one's choice: the same engine, the same numbers
    blend_op(h, fake_array((2, 4)), y=fake_array((2, 4)), beta=0.5)
    assert len(ec.choices(h)) == 2  # the same signature chose once; another shape is another key
    h2 = NoCallHandle()
    rescale_op(h2, x)
    assert list(ec.choices(h2)) == [("rescale_op", ("y", sig), ("engine", "auto"))]   # an output also read
    assert ec._db_key(key).startswith('["blend_op",["x",[[2,3],[3,1],"float32"]]')


@P.prepared(inputs=("a",), outputs=("c",), scalars=("alpha", "beta"))
def broadcast_op(handle, a, c, *, alpha=1.0, beta=None, engine="auto"):
    gl.dispatch(engine, handle, None, lambda: None, lambda auto: None)
    return c


def test_a_required_output_is_keyed_by_its_signature(measured):
    """A required output (add_tensor's c: its shape sets the broadcast) has no allocated twin to share a choice
    with: two shapes of it are two engine choices."""
    h, a = NoCallHandle(), fake_array((1, 3))
    broadcast_op(h, a, fake_array((2, 3)))
    broadcast_op(h, a, fake_array((4, 3)))
    keys = list(ec.choices(h))
    assert len(keys) == 2 and ("c", ((2, 3), (3, 1), np.dtype(np.float32))) in keys[0]


def test_the_families_of_this_tree_write_no_key_or_mutated_arrays_by_hand():
    from cudnn_py.ops import activation, pooling, tensor_ops
    for mod in (activation, pooling, tensor_ops):
        assert "mutated=" not in inspect.getsource(mod), mod.__name__


# ---------------------------------------------------------------- every array parameter declared

def test_an_array_parameter_left_undeclared_is_refused_where_the_function_is_declared():
    with pytest.raises(TypeError, match=r"takes arrays \['w'\] that are neither inputs nor outputs"):
        @P.prepared(inputs=("x",), outputs=("y",))
        def op(handle, x: DeviceArrayLike, w: DeviceArrayLike, *, y: DeviceArrayLike | None = None):
            return y


#: parameters that hold arrays but are not the call's device arrays, with why
NOT_DEVICE_ARRAYS = {
    ("ctc_loss", "labels"): "host data, validated on every call (ctc_loss is never prepared)",
    ("ctc_loss", "label_lengths"): "host data, as labels",
    ("ctc_loss", "input_lengths"): "host data, as labels",
}


def _prepared_functions() -> dict[str, P._Spec]:
    found = {}
    for m in pkgutil.walk_packages(cudnn_py.__path__, "cudnn_py."):
        if m.name.startswith(("cudnn_py.capi", "cudnn_py.codegen", "cudnn_py.__main__", "cudnn_py.torch")):
            continue
        for v in vars(importlib.import_module(m.name)).values():
            spec = getattr(v, "__prepared__", None)
            if spec is not None:
                found[f"{v.__module__}.{v.__qualname__}"] = spec
    return found


def test_every_prepared_function_declares_each_array_parameter():
    """A parameter annotated as an array (device arrays, NumPy-like array data), or unannotated and named as some
    prepared function's declared array (or its gradient), is an input or an output unless listed above with its
    reason."""
    specs = _prepared_functions()
    assert len(specs) >= 40
    names = set().union(*(s.arrays for s in specs.values()))
    names |= {"d" + n for n in names} | {n[1:] for n in names if n.startswith("d")}  # an array's gradient too
    array_types = {"DeviceArrayLike", "DeviceArray", "Out", "Tensor", "ArrayLike", "ndarray"}
    wrong = []
    for where, spec in specs.items():
        for p in list(inspect.signature(spec.fn).parameters.values())[1:]:
            text = p.annotation if isinstance(p.annotation, str) else "" if p.annotation is p.empty else repr(
                p.annotation)
            looks = array_types & set(re.findall(r"\w+", text)) if text else p.name in names
            if looks and p.name not in spec.arrays and (spec.name, p.name) not in NOT_DEVICE_ARRAYS:
                wrong.append(f"{where}({p.name})")
    assert wrong == []


# ---------------------------------------------------------------- on the GPU: measured calls take effect once

@pytest.fixture
def measuring(monkeypatch, tmp_path, handle):
    """A fresh handle cache, measuring mode, a tuning database of its own (every configuration measured here)."""
    from cudnn_py.tuning import TuningDatabase
    d = TuningDatabase(tmp_path / "tuning.sqlite")
    monkeypatch.setattr(ec, "_database", lambda: d)
    monkeypatch.setattr(ec, "_mode", [None])
    monkeypatch.delenv(ec.ENV, raising=False)
    handle.clear_caches()
    yield handle
    d.close()


def _gpu_cases():
    from cudnn_py.ops import activation as act, pooling as pool, tensor_ops as t
    return {
        "activation_forward, beta 0.5": lambda h, x, y0, y: (
            act.activation_forward(h, "relu", x, y=y, beta=0.5), np.maximum(x.to_numpy(), 0) + 0.5 * y0)[1],
        "activation_forward in place": lambda h, x, y0, y: (
            np.maximum(x.to_numpy(), 0), act.activation_forward(h, "relu", x, y=x))[0],
        "scale_tensor": lambda h, x, y0, y: (t.scale_tensor(h, y, alpha=2.0), 2 * y0)[1],
        "op_tensor add, beta 1": lambda h, x, y0, y: (
            t.op_tensor(h, "add", x, x, c=y, beta=1.0), 2 * x.to_numpy() + y0)[1],
        "transform_tensor, beta 0.5": lambda h, x, y0, y: (
            t.transform_tensor(h, x, y=y, beta=0.5), x.to_numpy() + 0.5 * y0)[1],
        "pooling_forward max, beta 0.5": lambda h, x, y0, y: (
            pool.pooling_forward(h, pool.Pooling("max", (1, 1), stride=(1, 1)), x, y=y, beta=0.5),
            x.to_numpy() + 0.5 * y0)[1],
    }


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["activation_forward, beta 0.5", "activation_forward in place", "scale_tensor",
                                  "op_tensor add, beta 1", "transform_tensor, beta 0.5",
                                  "pooling_forward max, beta 0.5"])
def test_a_measured_call_that_reads_its_output_takes_effect_once(measuring, rng, case):
    """engine='auto' measures both engines on the call's own arrays: the outputs its declaration says it reads are
    restored before every run, so the result is one call's, measured and then replayed."""
    shape = (2, 8, 4, 4)
    for _ in range(2):  # measured, then the prepared call
        x = memory.to_device(rng.standard_normal(shape).astype(np.float32))
        y0 = rng.standard_normal(shape).astype(np.float32)
        y = memory.to_device(y0)
        want = _gpu_cases()[case](measuring, x, y0, y)
        got = (x if "in place" in case else y).to_numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert ec.choices(measuring)


def test_a_replay_refuses_a_weighted_descriptor_whose_dropout_closed_since():
    """An RNN or attention descriptor points C at its dropout descriptor: closing the dropout closes it for the replay
    too, so the call goes to its validated path (ClosedError) instead of queuing a dead address (GPU: test_rnn's and
    test_attention's closed-handle-and-dropout tests)."""
    from cudnn_py.ops.sequence_models import WeightedDescriptor

    class Weighted(WeightedDescriptor):
        def __init__(self, dropout):
            Closable.__init__(self)
            self._dropouts = (None, dropout)

    fn, drop = FakeCFunction(), Closable()
    op, h, d = _descriptor_op(fn), fake_cudnn_handle(), Weighted(drop)
    op(h, d, fake_array(), y=fake_array())
    op(h, d, fake_array(), y=fake_array())
    assert len(fn.calls) == 2 and not d.closed
    drop.close()
    assert d.closed
    with pytest.raises(ClosedError, match="dropout descriptor this Weighted uses is closed"):
        op(h, d, fake_array(), y=fake_array())
    assert len(fn.calls) == 2
