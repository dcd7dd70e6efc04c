"""Stand-ins for CPU tests of validation: they fail the test if a call ever reaches cuDNN."""
from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
import types

import numpy as np

from cudnn_py.core import blocks, foreign, memory
from cudnn_py.clib import recording
from cudnn_py.core.memory import DeviceArray


class NoCallHandle:
    """Stands in for a Handle on CPU: reaching C (``.ptr``) fails the test; it has a Handle's per-handle caches."""
    device = 0
    stream = None

    def __init__(self):
        self.cache: dict = {}

    @property
    def ptr(self):
        raise AssertionError("validation should have raised before any cuDNN call")


class Reached(Exception):
    """The call got past validation: cuDNN would have been called now."""


class StandIn:
    """A handle stand-in: device 0, no workspace cap; reading ``ptr`` (as every C call does) or ``stream`` (as a
    call queuing driver work does) raises :class:`Reached` (for tests of what a call does once validation has
    passed, where :class:`NoCallHandle` would fail them)."""
    device = 0

    class workspace:  # noqa: N801 - the attribute a Handle has
        cap = None

    def __init__(self):
        self.cache: dict = {}

    @property
    def ptr(self):
        raise Reached("validation passed")

    @property
    def stream(self):
        raise Reached("validation passed")


def fake(shape, dtype=np.float32, strides=None) -> DeviceArray:
    """A DeviceArray at a new dummy address (the first at 0x10000, 4 GiB apart): never dereferenced because
    validation fails first."""
    return DeviceArray(next(_fake_addresses), shape, dtype, strides)


_fake_addresses = __import__("itertools").count(0x10000, 1 << 32)


def numeric_gradient(loss, arr: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``loss()`` with respect to ``arr``, which is perturbed in place (and restored)."""
    g = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        old = arr[i]
        arr[i] = old + eps
        up = loss()
        arr[i] = old - eps
        down = loss()
        arr[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


def poison_byte(dtype) -> int:
    """The byte a fresh allocation of ``dtype`` is filled with: 0xFF makes every float format NaN (float64/32/16,
    bfloat16, fp8), 0x7F makes ints a large sentinel (int8 127, int32 0x7F7F7F7F) no test expects."""
    return 0xFF if np.dtype(dtype).kind == "f" else 0x7F


def poison(a: DeviceArray) -> DeviceArray:
    """Fill the bytes ``a`` spans with :func:`poison_byte` on its stream; returns ``a``."""
    if a.size:
        span = 1 + sum((n - 1) * s for n, s in zip(a.shape, a.strides))  # non-negative strides (DeviceArray's rule)
        raw = DeviceArray(a.ptr, (span * a.dtype.itemsize,), np.uint8, device_id=a.device_id, owner=a,
                          stream=a.stream)
        raw.fill_(poison_byte(a.dtype))
    return a


def poisoned(shape, dtype=np.float32, stream=None, *, device=None) -> DeviceArray:
    """A new device array filled with NaN (floats) or the int sentinel: an output element the call under test
    does not write fails the comparison instead of passing on stale memory."""
    return poison(memory.empty(shape, dtype, stream, device=device))


@contextlib.contextmanager
def poisoned_allocations():
    """Inside the block every device allocation of cudnn_py (``empty``, the outputs and scratch buffers the library
    allocates itself, workspaces) is poisoned first, so that an output cuDNN never writes cannot pass by holding
    stale values of an earlier run (the memory pool hands freed blocks back)."""
    real = memory._allocate

    def allocate(shape, dtype, stream, device):
        a = real(shape, dtype, stream, device)
        with recording.measuring():   # the test's own fill: no step of the call under test, and no spoiling of it
            return poison(a)

    memory._allocate = allocate
    try:
        yield
    finally:
        memory._allocate = real


def hammer(work, n_threads: int = 8) -> list[BaseException]:
    """Run ``work(thread_index)`` on ``n_threads`` threads at once with a 1 µs switch interval; their exceptions."""
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def body(i):
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 - collected and asserted on
            errors.append(e)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        ts = [threading.Thread(target=body, args=(i,)) for i in range(n_threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return errors


class FakeTorchDtype:
    """A torch dtype: ``str()`` gives ``torch.<name>``."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class FakeTorchTensor:
    """What cudnn_py reads of a torch tensor without a DLPack view (memory.array_signature, Graph.tensor_like):
    shape, stride(), is_contiguous(), dtype, is_cuda, get_device(), data_ptr(); device -1 is the CPU."""

    def __init__(self, shape, dtype, ptr=None, strides=None, device=0):
        self.shape, self.dtype, self._device = tuple(shape), dtype, device
        self._ptr = next(_fake_addresses) if ptr is None else ptr
        self._strides = memory.c_strides(self.shape) if strides is None else tuple(strides)
        self.is_cuda = device >= 0

    def stride(self):
        return self._strides

    def is_contiguous(self):
        """torch's test: C-contiguous strides but in dims of size 1."""
        want = memory.c_strides(self.shape)
        return 0 in self.shape or all(n == 1 or s == w for n, s, w in zip(self.shape, self._strides, want))

    def get_device(self):
        return self._device

    def data_ptr(self):
        return self._ptr


def fake_torch(monkeypatch):
    """Install a stand-in torch module as if the program had imported torch (cudnn_py.core.foreign learns its tables
    from it afresh): ``Tensor`` is :class:`FakeTorchTensor` (``nn.Parameter`` a subclass), dtypes as torch spells them
    (``float32`` ... ``complex64``, which cuDNN has no type for). Returns the module."""
    import types
    torch = types.ModuleType("torch")
    torch.Tensor, torch.dtype = FakeTorchTensor, FakeTorchDtype
    torch.nn = types.SimpleNamespace(Parameter=type("Parameter", (FakeTorchTensor,), {}))
    for name in ("float32", "float16", "bfloat16", "int8", "int32", "int64", "bool", "complex64"):
        setattr(torch, name, FakeTorchDtype(name))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(foreign, "TORCH_TYPES", frozenset())
    monkeypatch.setattr(foreign, "TORCH_DTYPES", {})
    return torch


def fake_finalize(monkeypatch, record) -> None:
    """Lower graphs on the CPU: ``finalize`` faked (it needs the engines library, i.e. a driver) and the handle and
    operation-list attributes skipped; every other attribute is still set in cuDNN. ``record(op)`` is called with
    each pointwise operation as it is lowered."""
    from cudnn_py.graph.descriptors import BackendDescriptor
    from cudnn_py.graph.ops.pointwise import Pointwise
    monkeypatch.setattr(BackendDescriptor, "finalize", lambda self: (setattr(self, "finalized", True), self)[1])
    real_set, real_lower = BackendDescriptor.set, Pointwise.lower
    monkeypatch.setattr(BackendDescriptor, "set", lambda self, attr, value, attr_type=None: self if attr in (
        "handle", "ops") else real_set(self, attr, value, attr_type))
    monkeypatch.setattr(Pointwise, "lower", lambda self, ctx: (record(self), real_lower(self, ctx))[1])


# ---------------------------------------------------------------- prepared calls on the CPU (tests/test_prepared*.py)

_addresses = __import__("itertools").count(0x7F00_0000_0000, 0x10_0000)


def fake_array(shape=(2, 3), dtype=np.float32, strides=None, ptr=None, device=0) -> DeviceArray:
    """A DeviceArray at a new made-up address (C-contiguous unless ``strides``): for calls whose C is stubbed."""
    shape = tuple(shape)
    if strides is None:
        strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return DeviceArray.from_parts(next(_addresses) if ptr is None else ptr, shape, np.dtype(dtype), tuple(strides),
                                  device, None, None)


class FakeWorkspace:
    """A handle's workspace at a made-up address (``ptr``: set it to see a grown workspace)."""
    def __init__(self):
        self.ptr = 0x5000_0000

    def get(self, nbytes, stream=None):
        return self.ptr if nbytes else 0


def fake_cudnn_handle():
    """A real :class:`cudnn_py.Handle` object never created in cuDNN (its C calls must be stubbed)."""
    from cudnn_py.capi import cudnnHandle_t
    from cudnn_py.core.handle import Handle
    h = Handle.__new__(Handle)
    h._ptr = cudnnHandle_t(1)
    h.cache = {}
    h.workspace = FakeWorkspace()
    h._stream = None
    h._stream_ptr = 0
    h.device = 0
    return h


def fake_takers(monkeypatch) -> types.SimpleNamespace:
    """``memory.Output``'s device, stream and blocks as stand-ins: ``binds``, each bind as (bytes, stream as given,
    device); ``blocks``, each block taken (16 MiB apart at made-up addresses, its size as its buffer)."""
    made, addresses = types.SimpleNamespace(binds=[], blocks=[]), iter(range(1 << 32, 1 << 46, 1 << 24))

    def taker(dev, stream, nbytes):
        made.binds.append((nbytes, stream, dev.device_id))
        return lambda: made.blocks.append(blocks.Block(nbytes, next(addresses), [])) or made.blocks[-1]
    monkeypatch.setattr(memory, "get_device", lambda d=None: types.SimpleNamespace(device_id=d or 0))
    monkeypatch.setattr(memory, "as_stream", lambda s, d=None: f"as {s}")
    monkeypatch.setattr(memory, "taker", taker)
    return made


def fake_prepared_outputs(monkeypatch) -> None:
    """New outputs of prepared calls as :func:`fake_array` s at made-up addresses (no device memory)."""
    from cudnn_py.calls import prepared

    def alloc(a):
        def new(handle):
            x = fake_array(a.shape, a.dtype, a.strides)
            return x, x.ptr
        return new
    monkeypatch.setattr(prepared, "_device_allocator", alloc)


class FakeCFunction:
    """Stands in for a capi function: records its calls (as ``fn`` and as ``fn.raw``). ``pointer_params``: the
    positions of its ``void *`` parameters (none unless given)."""
    __name__ = "FakeCFunction"

    def __init__(self, pointer_params: tuple[int, ...] = ()):
        self.calls: list = []
        self.raw = self
        self.pointer_params = pointer_params

    def __call__(self, *args):
        self.calls.append(args)


def held_ms_stand_in(ms_of):
    """A stand-in for ``streams.held_ms`` in engine_choice: runs ``fn`` and answers ``ms_of(fn)`` as its GPU time,
    no host time."""
    def held_ms(stream, fn, hold):
        fn()
        return ms_of(fn), 0.0, hold
    return held_ms


def fake_plan(g):
    """A stand-in plan of graph ``g`` (no workspace, an open descriptor at address 7), kept as its only plan."""
    g.plans = [types.SimpleNamespace(graph=g, descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(7), closed=False),
                                     workspace_size=0, tag="fake")]
    return g.plans[0]


def threads_join(target: str) -> str:
    """The end of a fresh-process script: ``target(i)`` in ``N`` threads, started together and joined, then the
    ``errors`` they collected printed and exit status 1 where there are any."""
    return (f"threads = [threading.Thread(target={target}, args=(i,)) for i in range(N)]\n"
            "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
            'print("\\n".join(errors))\nsys.exit(1 if errors else 0)\n')
