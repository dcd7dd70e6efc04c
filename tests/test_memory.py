"""DeviceArray metadata, exchange protocols and validation that need no GPU (pointers here are never dereferenced)."""
import gc
import re
import types

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.core import blocks, contexts, dlpack, foreign, memory as M, streams
from cudnn_py.core.memory import DeviceArray, as_array, output_array

from conftest import gpu_missing_reason
from helpers import fake_takers, fake_torch

FAKE = 0x7F0000000000  # a plausible device address; nothing here reads or writes it


class Foreign:
    """A foreign GPU tensor: DLPack only, so as_array goes through cuda.core's StridedMemoryView."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kw):
        return self.inner.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


class HostExport:
    """Host memory exported with our DLPack writer, so NumPy can consume it and check every byte."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        a = self.a
        return dlpack.capsule(a.ctypes.data, a.shape, tuple(s // a.itemsize for s in a.strides), a.dtype,
                                 (1, 0), a)


def test_metadata_packed():
    a = DeviceArray(FAKE, (2, 3, 4), np.float32)
    assert (a.shape, a.strides, a.dtype, a.ptr) == ((2, 3, 4), (12, 4, 1), np.float32, FAKE)
    assert (a.size, a.nbytes, a.ndim, a.device_id, len(a)) == (24, 96, 3, 0, 2)
    assert a.is_contiguous
    assert "shape=(2, 3, 4)" in repr(a) and "float32" in repr(a)


@pytest.mark.parametrize("shape, strides, contiguous", [((2, 3, 4), (12, 4, 1), True), ((2, 3), (1, 2), None)])
def test_array_maker_makes_what_from_parts_makes(shape, strides, contiguous):
    dt, owner, stream = np.dtype(np.float16), object(), object()
    key = M.layout_key(DeviceArray.from_parts(FAKE, shape, dt, strides, 1, None, None))
    made = M.array_maker(shape, dt, strides, 1, contiguous, key)(FAKE + 64, owner, stream)
    want = DeviceArray.from_parts(FAKE + 64, shape, dt, strides, 1, owner, stream, contiguous, key)
    slots = DeviceArray.__slots__[:-1]  # all but __weakref__
    assert [getattr(made, n) for n in slots] == [getattr(want, n) for n in slots]


@pytest.mark.parametrize("shape,strides,contiguous", [
    ((4, 3), (1, 4), False), ((3, 1, 4), (4, 99, 1), True), ((0, 5), (7, 3), True), ((5,), (2,), False),
    ((2, 3), (3, 1), True), ((2, 3), (-3, 1), False)])
def test_contiguity(shape, strides, contiguous):
    assert DeviceArray(FAKE, shape, np.float16, strides).is_contiguous is contiguous


def test_constructor_rejects_bad_input():
    with pytest.raises(ValueError, match="negative"):
        DeviceArray(FAKE, (2, -1), np.float32)
    with pytest.raises(ValueError, match="one entry per dimension"):
        DeviceArray(FAKE, (2, 3), np.float32, strides=(1,))
    with pytest.raises(TypeError, match="not supported by cuDNN"):
        DeviceArray(FAKE, (2,), np.complex128)
    with pytest.raises(TypeError, match="ptr"):
        DeviceArray(-5, (2,), np.float32)
    with pytest.raises(TypeError, match="ints"):
        DeviceArray(FAKE, (2.5,), np.float32)
    with pytest.raises(TypeError, match="None is not a dtype"):  # np.dtype(None) would be float64
        DeviceArray(FAKE, (2,), None)


def test_dtype_checks_take_the_short_names():
    a = DeviceArray(FAKE, (2,), np.float16)
    assert as_array(a, dtype="fp16") is a and cudnn.to_device(a, dtype="FP16") is a
    with pytest.raises(TypeError, match="x has dtype float16; expected bfloat16"):
        as_array(a, dtype="bf16")


def test_no_implicit_host_conversion():
    a = DeviceArray(FAKE, (3,), np.float32)
    with pytest.raises(TypeError, match="to_numpy"):
        np.asarray(a)


def test_reshape_views_same_memory():
    a = DeviceArray(FAKE, (2, 3, 4), np.float32)
    b = a.reshape(6, -1)
    assert b.shape == (6, 4) and b.ptr == a.ptr and b.strides == (4, 1)
    assert a.reshape((24,)).shape == (24,)
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(5, -1)
    with pytest.raises(ValueError, match="at most one"):
        a.reshape(-1, -1)
    with pytest.raises(ValueError, match="C-contiguous"):
        DeviceArray(FAKE, (4, 3), np.float32, (1, 4)).reshape(12)
    with pytest.raises(TypeError, match="new shape"):
        a.reshape(4, 6.0)  # never silently truncated


def test_cuda_array_interface():
    a = DeviceArray(FAKE, (2, 3), np.float16)
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (2, 3) and cai["typestr"] == "<f2" and cai["data"] == (FAKE, False)
    assert cai["version"] == 3 and cai["strides"] is None and cai["stream"] is None
    t = DeviceArray(FAKE, (3, 2), np.float32, (1, 3))
    assert t.__cuda_array_interface__["strides"] == (4, 12)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"])
def test_dlpack_writer_exact_on_host(dtype, rng):
    before = len(dlpack._EXPORTS)
    host = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
    for view in (host, host.transpose(2, 0, 1), host[:, ::2]):
        out = np.from_dlpack(HostExport(view))
        assert out.shape == view.shape and out.dtype == view.dtype
        assert out.ctypes.data == view.ctypes.data  # no copy
        np.testing.assert_array_equal(out, view)
        del out
    gc.collect()
    assert len(dlpack._EXPORTS) == before  # each consumer released its tensor


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool", "bfloat16"])
def test_dlpack_export_import_round_trip_keeps_pointer_and_strides(dtype):
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    before = len(dlpack._EXPORTS)
    base = DeviceArray(FAKE, (4, 2, 3), dtype)
    strided = DeviceArray(FAKE + 64, (3, 2), dtype, strides=(1, 3), owner=base)
    for a in (base, strided):
        v = as_array(Foreign(a))
        assert type(v) is DeviceArray and v is not a
        assert (v.ptr, v.shape, v.strides, v.dtype, v.device_id) == (a.ptr, a.shape, a.strides, a.dtype, 0)
        del v
    gc.collect()
    assert len(dlpack._EXPORTS) == before  # every capsule released its exporter


def test_fp8_foreign_tensor_is_refused_clearly():
    # cuda.core's DLPack reader has no fp8 codes: the error says so instead of misreading the data
    ml = pytest.importorskip("ml_dtypes")
    a = DeviceArray(FAKE, (2, 2), ml.float8_e4m3fn)
    with pytest.raises(TypeError, match="x: cannot view Foreign"):
        as_array(Foreign(a), "x")


def test_dlpack_unconsumed_capsule_is_freed():
    before = len(dlpack._EXPORTS)
    a = DeviceArray(FAKE, (2,), np.float32)
    cap = a.__dlpack__()
    assert len(dlpack._EXPORTS) == before + 1
    del cap
    gc.collect()
    assert len(dlpack._EXPORTS) == before


def test_dlpack_refusals():
    a = DeviceArray(FAKE, (2,), np.float32)
    assert a.__dlpack_device__() == (2, 0)
    with pytest.raises(BufferError, match="copy"):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot export"):
        a.__dlpack__(dl_device=(1, 0))


class _FakeStream:
    """Records the ordering __dlpack__ asks for; no CUDA involved."""
    waits: list = []

    def __init__(self, handle):
        self.handle = handle

    @classmethod
    def from_handle(cls, handle):
        return cls(handle)

    def record(self):
        return ("event on", self.handle)

    def wait(self, event):
        _FakeStream.waits.append((self.handle, event))


@pytest.mark.parametrize("consumer,waits", [
    (None, [(1, ("event on", 0x5000))]),  # DLPack: None is the legacy default stream, which must wait
    (1, [(1, ("event on", 0x5000))]),
    (0x6000, [(0x6000, ("event on", 0x5000))]),
    (0x5000, []),  # the array's own stream: already in order
    (-1, []),  # the consumer asked for no ordering
])
def test_dlpack_export_orders_the_consumer_stream_after_the_array_stream(monkeypatch, consumer, waits):
    monkeypatch.setattr(M, "cuda_core", lambda: types.SimpleNamespace(Stream=_FakeStream))
    monkeypatch.setattr(_FakeStream, "waits", [])
    a = DeviceArray.from_parts(FAKE, (2,), np.dtype(np.float32), (1,), 0, None, _FakeStream(0x5000), True)
    cap = a.__dlpack__(stream=consumer)
    assert _FakeStream.waits == waits
    del cap
    with pytest.raises(BufferError, match="ambiguous"):
        a.__dlpack__(stream=0)


def test_as_array_returns_device_array_itself():
    a = DeviceArray(FAKE, (2, 3), np.float32)
    assert as_array(a) is a


def test_to_device_of_device_data_is_a_view_that_never_ignores_dtype_or_device():
    a = DeviceArray(FAKE, (2, 3), np.float32)
    assert cudnn.to_device(a) is a and cudnn.to_device(a, dtype=np.float32, device=0) is a
    with pytest.raises(TypeError, match="obj has dtype float32; expected float16"):
        cudnn.to_device(a, dtype=np.float16)
    with pytest.raises(ValueError, match="on device 0; expected device 1"):
        cudnn.to_device(a, device=1)


@pytest.mark.parametrize("host", [np.zeros((2, 3), np.float32), np.float32(1.0)])
def test_host_array_raises_with_the_fix(host):
    with pytest.raises(TypeError, match=r"host memory.*to_device\(w\)"):
        as_array(host, "w")


def test_host_dlpack_tensor_raises():
    with pytest.raises(TypeError, match="host memory"):
        as_array(HostExport(np.zeros(3, np.float32)), "x")


@pytest.mark.parametrize("obj", [[1.0, 2.0], 3.0, "x", None])
def test_non_array_raises(obj):
    with pytest.raises(TypeError, match="must be a DeviceArray or a GPU tensor"):
        as_array(obj, "x")


def test_as_array_validation_messages():
    a = DeviceArray(FAKE, (2, 3), np.float32)
    t = DeviceArray(FAKE, (3, 2), np.float32, (1, 3))
    with pytest.raises(TypeError, match="dy has dtype float32; expected float16"):
        as_array(a, "dy", dtype=np.float16)
    with pytest.raises(ValueError, match="dy has 2 dimensions"):
        as_array(a, "dy", ndim=4)
    with pytest.raises(ValueError, match=r"shape \(2, 3\); expected \(3, 2\)"):
        as_array(a, "dy", shape=(3, 2))
    with pytest.raises(ValueError, match="C-contiguous"):
        as_array(t, "dy", contiguous=True)
    with pytest.raises(ValueError, match="on device 0; expected device 1"):
        as_array(a, "dy", device=1)
    assert as_array(a, "dy", dtype="float32", ndim=2, shape=(2, 3), contiguous=True, device=0) is a
    assert as_array(Foreign(a), "x", dtype=np.float32).ptr == FAKE


def test_output_array_validates_a_given_output():
    y = DeviceArray(FAKE, (2, 3), np.float32)
    assert output_array(y, (2, 3), np.float32) is y
    with pytest.raises(ValueError, match="y has shape"):
        output_array(y, (2, 4), np.float32)
    with pytest.raises(TypeError, match="y has dtype"):
        output_array(y, (2, 3), np.float64)
    with pytest.raises(TypeError, match="host memory"):
        output_array(np.empty((2, 3), np.float32), (2, 3), np.float32)


def test_as_array_identity_is_nearly_free():
    import timeit
    a = DeviceArray(FAKE, (8, 3, 32, 32), np.float32)
    per_call = min(timeit.repeat(lambda: as_array(a, "x"), number=5000, repeat=5)) / 5000
    assert per_call < 2e-6


@pytest.mark.skipif(not gpu_missing_reason(), reason="a GPU is present")
@pytest.mark.parametrize("call", [
    lambda: cudnn.empty((2, 3)), lambda: cudnn.zeros(3), lambda: cudnn.to_device(np.zeros(3, np.float32)),
    lambda: cudnn.Handle(), lambda: cudnn.default_handle(), lambda: cudnn.new_stream(), lambda: cudnn.timer(),
    lambda: cudnn.synchronize(), lambda: cudnn.Workspace().get(1 << 20),
])
def test_everything_that_needs_a_gpu_says_why_with_no_device_error(call):
    with pytest.raises(cudnn.NoDeviceError, match="cannot use CUDA device 0: ") as e:
        call()
    assert isinstance(e.value, cudnn.CudaError) and isinstance(e.value, cudnn.CudnnPyError)
    assert "\n" not in str(e.value)  # one line, fit for a script's exit message


class _Driver:
    """Stands in for cuda.bindings.driver in the no-device diagnosis (cuInit's result and the device count)."""

    def __init__(self, init=0, count=1):
        self.init, self.count = init, count

    def cuInit(self, flags):
        return (_Result(self.init),)

    def cuDeviceGetCount(self):
        return (_Result(0), self.count)


class _Result(int):
    @property
    def name(self):
        return {0: "CUDA_SUCCESS", 100: "CUDA_ERROR_NO_DEVICE", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"}[int(self)]


@pytest.mark.parametrize("driver, device, cls, text", [
    (_Driver(init=803), 0, cudnn.NoDeviceError, r"cannot use CUDA device 0: the CUDA driver did not start .*"
                                                r"\(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH\)"),
    (_Driver(count=0), 0, cudnn.NoDeviceError, "sees no GPU .*CUDA_VISIBLE_DEVICES.*CUDA_ERROR_NO_DEVICE"),
    (_Driver(count=1), 3, cudnn.NoDeviceError, r"cannot use CUDA device 3: there is only 1 visible GPU "
                                               r"\(CUDA_ERROR_INVALID_DEVICE\)"),
    (_Driver(count=2), 1, cudnn.CudaError, "cannot use CUDA device 1 failed: context creation failed"),
])
def test_the_no_device_diagnosis_names_the_cause(monkeypatch, driver, device, cls, text):
    import sys
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    err = streams._no_device(device, RuntimeError("context creation failed"))
    assert type(err) is cls
    assert re.search(text, str(err)), str(err)


def test_a_failed_driver_call_is_a_cuda_error():
    from cudnn_py.errors import check_cuda
    assert check_cuda((0, 5), "cuX") == 5 and check_cuda((0,), "cuX") is None and check_cuda((0, 1, 2), "cuX") == (1, 2)
    with pytest.raises(cudnn.CudaError, match=r"cuMemcpyHtoDAsync failed: .*\(1\)") as e:
        check_cuda((1,), "cuMemcpyHtoDAsync")
    assert e.value.code == 1 and e.value.function == "cuMemcpyHtoDAsync"
    with pytest.raises(cudnn.CudaOutOfMemoryError) as e:
        check_cuda((2, 0), "cuMemAlloc")
    assert isinstance(e.value, MemoryError)


def test_array_signature_reads_device_arrays_and_torch_tensors(monkeypatch):
    """The one fast path (convolution calls, graph executors): DeviceArrays and CUDA torch tensors are read
    directly, with torch's dtypes mapped through the table of cuDNN's dtypes; anything else goes through as_array."""
    a = DeviceArray(0x1000, (2, 3), np.float16, (1, 2), device_id=1)
    assert M.array_signature(a) == (((2, 3), (1, 2), np.dtype(np.float16), 1), 0x1000)
    torch = fake_torch(monkeypatch)
    t = torch.Tensor([4, 5], torch.float16, 0x2000, (5, 1))
    assert M.array_signature(t) == (((4, 5), (5, 1), np.dtype(np.float16), 0), 0x2000)
    p = torch.nn.Parameter((3,), torch.bool, 0x3000, (1,), device=2)
    assert M.array_signature(p) == (((3,), (1,), np.dtype(np.bool_), 2), 0x3000)
    assert foreign.TORCH_DTYPES[torch.int8] == np.int8 and torch.complex64 not in foreign.TORCH_DTYPES
    if "bfloat16" in {d.name for d in M.SUPPORTED_DTYPES}:
        assert foreign.TORCH_DTYPES[torch.bfloat16].name == "bfloat16"
    # a CPU tensor, or a dtype cuDNN has no type for, takes the general path, which says what is wrong
    with pytest.raises(TypeError, match="weights"):
        M.array_signature(torch.Tensor((4,), torch.float32, 0x4000, device=-1), "weights")
    with pytest.raises(TypeError, match="weights"):
        M.array_signature(torch.Tensor((4,), torch.complex64, 0x4000), "weights")


def test_array_signature_without_torch(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    monkeypatch.setattr(foreign, "TORCH_TYPES", frozenset())
    with pytest.raises(TypeError, match="w must be a DeviceArray or a GPU tensor"):
        M.array_signature(object(), "w")
    with pytest.raises(TypeError, match="to_device"):
        M.array_signature(np.ones(3, np.float32), "w")
    assert foreign.TORCH_TYPES == frozenset()


class _FakeDriver:
    """Stands in for cuda.bindings.driver: two devices with one primary context each, a per-thread context stack."""

    class CUcontext(int):
        pass

    def __init__(self, current=0):
        self.stack = [] if current is None else [self.CUcontext(100 + current)]
        self.calls: list[str] = []

    def cuDeviceGet(self, ordinal):
        return (0, ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        self.calls.append(f"retain {dev}")
        return (0, self.CUcontext(100 + dev))

    def cuCtxGetCurrent(self):
        return (0, self.stack[-1] if self.stack else self.CUcontext(0))

    def cuCtxPushCurrent(self, ctx):
        self.calls.append(f"push {int(ctx) - 100}")
        self.stack.append(ctx)
        return (0,)

    def cuCtxPopCurrent(self):
        self.calls.append("pop")
        return (0, self.stack.pop())


@pytest.mark.parametrize("current", [0, 1, None], ids=["same", "other", "none"])
def test_on_device_pushes_the_arrays_device_only_when_another_is_current(monkeypatch, current):
    """Driver memory calls on an array of device 0 run with device 0's primary context current: pushed (and popped,
    even when the call raises) where device 1 or no context is current, left alone where device 0 already is."""
    fake_driver = _FakeDriver(current)
    monkeypatch.setattr(streams, "_driver", fake_driver)
    monkeypatch.setattr(contexts, "_PRIMARY", {})
    monkeypatch.setattr(contexts, "_DEVICE_COUNT", [2])
    with contexts.on_device(0):
        assert int(fake_driver.cuCtxGetCurrent()[1]) == 100
    pushed = current != 0
    assert fake_driver.calls == ["retain 0"] + (["push 0", "pop"] if pushed else [])
    with pytest.raises(RuntimeError):
        with contexts.on_device(0):
            raise RuntimeError("a failed copy")
    assert fake_driver.calls[1:] == (["push 0", "pop"] * 2 if pushed else [])  # retained once, popped again
    assert fake_driver.stack == ([] if current is None else [100 + current])


def test_on_device_is_free_in_a_process_that_sees_one_device(monkeypatch):
    """With one device there is no other context to switch from: no driver call at all (the hot path of every
    allocation and free)."""
    fake_driver = _FakeDriver(None)
    monkeypatch.setattr(streams, "_driver", fake_driver)
    monkeypatch.setattr(contexts, "_PRIMARY", {})
    monkeypatch.setattr(contexts, "_DEVICE_COUNT", [1])
    with contexts.on_device(0):
        pass
    assert fake_driver.calls == [] and fake_driver.stack == []


@pytest.mark.parametrize("shape,strides,order", [
    ((2, 3, 4, 5), (60, 20, 5, 1), [0, 1, 2, 3]),
    ((2, 3, 4, 5), (60, 1, 15, 3), [0, 2, 3, 1]),      # NHWC
    ((2, 3, 4, 5), (1, 2, 6, 24), [3, 2, 1, 0]),       # Fortran order
    ((2, 1, 4, 5), (20, 99, 5, 1), [1, 0, 2, 3]),      # a unit axis first, whatever its stride
])
def test_memory_order_puts_unit_axes_first_then_decreasing_strides(shape, strides, order):
    from cudnn_py.core.strided import memory_order
    assert memory_order(shape, strides) == order


def test_a_layout_key_is_one_object_per_layout(monkeypatch):
    """``memory.layout_key``: arrays of one layout (shape, strides, dtype, device) share one key object, kept on the
    array; any difference makes another; a full table is forgotten, never merging two layouts (a new object for a
    layout seen before)."""
    from helpers import fake_array
    a, b = fake_array((2, 3)), fake_array((2, 3))
    others = [fake_array((3, 2)), fake_array((2, 3), np.float16), fake_array((2, 3), strides=(1, 2)),
              fake_array((2, 3), device=1)]
    assert M.layout_key(a) is M.layout_key(b) is a.layout_key is b.layout_key
    assert len({id(M.layout_key(x)) for x in [a, *others]}) == 5
    monkeypatch.setattr(M, "_MAX_KEYS", len(M._KEYS))
    M.layout_key(fake_array((5, 7)))  # a new layout: the full table is forgotten
    c = fake_array((2, 3))
    assert M.layout_key(c) is not a.layout_key and M.layout_key(c).layout == a.layout_key.layout
    assert M.layout_key(fake_array((2, 3))) is c.layout_key


@pytest.mark.parametrize("devices", [1, 2])
def test_allocator_checks_once_then_allocates_per_call(monkeypatch, kept_blocks, devices):
    """``memory.allocator`` resolves the device and stream and checks the layout once; each call allocates
    ``nbytes`` (rounded up to ``blocks.GRAIN``) on that stream while the last array lives (owned by a ``blocks.Block``,
    the allocation under the device's context with several devices), zero elements allocate nothing, and a failed
    allocation is a ``CudaError`` naming the size (a fake device)."""
    sizes, looked, entered = [], [], []

    class Buf:
        def __init__(self, n, stream):
            sizes.append((n, stream))
            self.handle = 4096 * len(sizes)

        def close(self):
            pass

    class Dev:
        device_id = devices - 1

        def allocate(self, n, stream=None):
            if n > 10 ** 6:
                raise RuntimeError("CUDA_ERROR_OUT_OF_MEMORY: out of memory")
            return Buf(n, stream)

    class Here:
        def __init__(self, i):
            entered.append(i)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(M, "get_device", lambda d=None: looked.append(d) or Dev())
    named = {}
    monkeypatch.setattr(M, "as_stream", lambda s, d=None: named.setdefault(s, types.SimpleNamespace(handle=0)))
    monkeypatch.setattr(contexts, "_DEVICE_COUNT", [devices])
    monkeypatch.setattr(blocks, "on_device", Here)
    new = M.allocator([2, 3, 4], "float16", "s1", device=devices - 1)
    assert looked == [devices - 1]
    a, b = new(), new()
    assert looked == [devices - 1] and sizes == [(blocks.GRAIN, named["s1"])] * 2 and a.ptr != b.ptr
    for x in (a, b):
        assert (x.shape, x.strides, x.dtype, x.device_id, x.is_contiguous) == \
            ((2, 3, 4), (12, 4, 1), np.dtype(np.float16), devices - 1, True)
        assert isinstance(x._owner, blocks.Block) and isinstance(x._owner.buffer, Buf)
    assert entered == ([] if devices == 1 else [1, 1])
    z = M.allocator((0, 5), np.float32)()
    assert (z.ptr, z.shape, len(sizes)) == (0, (0, 5), 2)
    with pytest.raises(cudnn.CudaOutOfMemoryError, match="4000000 bytes on device"):
        M.allocator((10 ** 6,), np.float32)()
    with pytest.raises(cudnn.InvalidValueError, match="2\\*\\*63"):
        M.allocator((2 ** 62, 4), np.float32)


def test_output_binds_once_per_stream_and_lays_out_strided_outputs(monkeypatch):
    """``memory.Output``: the device, stream and blocks worked out once per stream (again when the stream changes;
    None is a stream too, the default); packed strides allocate the shape, other strides the elements they span, the
    array owning its block directly, on the block's stream."""
    made = fake_takers(monkeypatch).binds
    packed = M.Output((2, 3, 4), np.dtype(np.float32), (12, 4, 1))
    x, y = packed.on("s1", 0), packed.on("s1", 0)
    assert packed.strides is None and (x.shape, x.strides, x.is_contiguous) == ((2, 3, 4), (12, 4, 1), True)
    assert made == [(96, "as s1", 0)] and isinstance(x.owner, blocks.Block) and x.owner is not y.owner
    assert x.ptr == x.owner.ptr != y.ptr
    packed.on("s2", 0)
    assert made[-1] == (96, "as s2", 0) and len(made) == 2
    bshd = M.Output((2, 3, 4, 5), np.dtype(np.float16), (60, 5, 15, 1))  # (B, H, S, D) over a (B, S, H, D) buffer
    y = bshd.on("s2", 0)
    assert made[-1] == (240, "as s2", 0) and bshd.n == 120 and isinstance(y.owner, blocks.Block)
    assert (y.shape, y.strides, y.dtype, y.ptr, y.is_contiguous) == \
        ((2, 3, 4, 5), (60, 5, 15, 1), np.dtype(np.float16), y.owner.ptr, False)
    assert y.stream == "as s2"  # ordered on the stream it was allocated on, as its block is (to_numpy waits there)
    assert M.Output((0, 4), np.dtype(np.float32), (1, 0)).n == 0
    assert M.Output((1, 4), np.dtype(np.float32), (1, 0)).on(None, 3).stream == "as None" and made[-1][2] == 3


def test_calls_allocate_their_outputs_through_one_output_per_layout(monkeypatch):
    """``graph.runner.new_output`` (what the calls' new outputs come from): one ``memory.Output`` per layout in the
    handle's cache, so a repeat call's output costs no binding; ``output(like=)`` keeps the input's memory order
    (NHWC in, NHWC out; a gapped view's too, packed) and packs a broadcast input in C order."""
    from cudnn_py.graph import runner as R
    from cudnn_py.ops import _common as C
    made = fake_takers(monkeypatch).binds
    h = types.SimpleNamespace(stream="s1", device=0, cache={})
    f32 = np.dtype(np.float32)
    a, b = R.new_output(h, (2, 3), f32), R.new_output(h, (2, 3), f32)
    assert made == [(24, "as s1", 0)] and a.shape == b.shape == (2, 3) and a.strides == (3, 1)
    nhwc = DeviceArray(1 << 20, (2, 3, 4, 5), f32, (60, 1, 15, 3))
    y = C.output(None, "y", h, nhwc.shape, f32, like=nhwc)
    assert (y.shape, y.strides, y.stream) == ((2, 3, 4, 5), (60, 1, 15, 3), "as s1") and made[-1] == (480, "as s1", 0)
    gapped = DeviceArray(1 << 20, (2, 3), f32, (8, 2))
    assert C.output(None, "y", h, (2, 3), f32, like=gapped).strides == (3, 1)  # packed: the first layout's Output
    broadcast = DeviceArray(1 << 20, (2, 3), f32, (0, 1))
    assert C.output(None, "y", h, (2, 3), f32, like=broadcast).strides == (3, 1)
    assert len(made) == 2 and len(h.cache[R.OUTPUTS]) == 2


@pytest.mark.parametrize("dtype, value, call", [
    (np.int8, -1, ("cuMemsetD8Async", 0xFF, 5)), (np.float16, 1.5, ("cuMemsetD16Async", 0x3E00, 5)),
    (np.float32, 2.0, ("cuMemsetD32Async", 0x40000000, 5)), (np.float64, 0.0, ("cuMemsetD32Async", 0, 10)),
    (np.float64, 1.0, None)])
def test_memset_writes_each_element_size_as_repeated_words(monkeypatch, dtype, value, call):
    """One driver memset per word size: 1-, 2- and 4-byte elements as themselves, an 8-byte element as twice as many
    4-byte words where its halves are equal; nothing is queued for one whose halves differ (1.0 as float64)."""
    calls = []
    monkeypatch.setattr(M, "driver", lambda: types.SimpleNamespace(
        **{f"cuMemsetD{n}Async": (lambda n: lambda *a: calls.append((f"cuMemsetD{n}Async", *a)) or (0,))(n)
           for n in (8, 16, 32)}))
    assert M.memset(FAKE, np.array([value], dtype), 5, 0) is (call is not None)
    assert calls == ([] if call is None else [(call[0], FAKE, call[1], call[2], 0)])


@pytest.mark.parametrize("shape, strides, extent", [
    ((2, 3), (3, 1), (0, 5)), ((2, 3), (-3, 1), (-3, 2)), ((4,), (0,), (0, 0)), ((2, 1, 5), (-1, 7, -2), (-9, 0))])
def test_extent_is_the_lowest_and_highest_element_offset(shape, strides, extent):
    from cudnn_py.core.strided import extent as extent_of
    assert extent_of(shape, strides) == extent
    a = DeviceArray(FAKE, shape, np.float32, strides)
    assert a.span() == (extent[0], extent[1] - extent[0] + 1)


def test_array_dtype_remembers_a_spelling_only_once_resolved():
    from cudnn_py.core import strided
    assert strided.array_dtype("fp16") == np.float16 and strided._SPELLINGS["fp16"] == np.float16
    for _ in range(2):  # an unsupported spelling is refused each time, never remembered
        with pytest.raises(cudnn.InvalidTypeError, match="not supported by cuDNN"):
            strided.array_dtype("complex64")
    assert "complex64" not in strided._SPELLINGS
