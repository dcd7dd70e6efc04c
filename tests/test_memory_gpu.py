"""Device memory on a real GPU: exact round trips, fills, copies, strided views, torch exchange, stream order."""
import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.core import blocks
from cudnn_py.core.dtypes import SUPPORTED_DTYPES
from cudnn_py.core.memory import DeviceArray, as_array
from cudnn_py.core.streams import new_stream, timer

pytestmark = pytest.mark.gpu


def _random(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -(2 ** 31)), min(info.max, 2 ** 31 - 1), shape, endpoint=True).astype(dtype)
    return (rng.standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=lambda d: d.name)
def test_round_trip_is_exact(dtype, rng):
    host = _random(rng, (3, 5, 7), dtype)
    a = cudnn.to_device(host)
    assert (a.shape, a.dtype, a.is_contiguous, a.device_id) == (host.shape, host.dtype, True, 0)
    assert a.ptr != 0
    back = a.to_numpy()
    assert back.dtype == host.dtype
    assert back.tobytes() == host.tobytes()


def test_to_device_packs_non_contiguous_host_data(rng):
    host = rng.standard_normal((6, 8)).astype(np.float32)[:, ::2].T
    np.testing.assert_array_equal(cudnn.to_device(host).to_numpy(), host)
    np.testing.assert_array_equal(cudnn.to_device([[1, 2], [3, 4]], dtype=np.float16).to_numpy(),
                                  np.array([[1, 2], [3, 4]], np.float16))


@pytest.mark.parametrize("dtype,value", [
    (np.float32, -1.25), (np.float64, 0.0), (np.float64, 0.1), (np.float16, 3.5), (np.int8, -7),
    (np.uint8, 200), (np.int32, 123456), (np.int64, -(2 ** 40) - 3), (np.bool_, True)])
def test_fill_and_zeros(dtype, value):
    a = cudnn.zeros((4, 33), dtype)
    np.testing.assert_array_equal(a.to_numpy(), np.zeros((4, 33), dtype))
    assert a.fill_(value) is a
    np.testing.assert_array_equal(a.to_numpy(), np.full((4, 33), value, dtype))


def test_copy_from_host_and_device(rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    a = cudnn.empty((5, 6), np.float32).fill_(np.nan)
    a.copy_(x)
    np.testing.assert_array_equal(a.to_numpy(), x)
    b = cudnn.empty((5, 6), np.float32).fill_(np.nan)
    b.copy_(a)
    assert b.ptr != a.ptr
    np.testing.assert_array_equal(b.to_numpy(), x)
    with pytest.raises(ValueError, match="shape"):
        b.copy_(cudnn.empty((6, 5), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        b.copy_(cudnn.empty((5, 6), np.float64))
    with pytest.raises(ValueError, match="expected"):
        b.copy_(np.zeros((2, 2)))


def test_strided_and_reversed_views_read_back(rng):
    host = rng.standard_normal((4, 6)).astype(np.float32)
    base = cudnn.to_device(host)
    t = DeviceArray(base.ptr, (6, 4), np.float32, strides=(1, 6), owner=base)
    assert not t.is_contiguous
    np.testing.assert_array_equal(t.to_numpy(), host.T)
    flat = host.reshape(-1)
    rev = DeviceArray(base.ptr + (flat.size - 1) * 4, (flat.size,), np.float32, strides=(-1,), owner=base)
    np.testing.assert_array_equal(rev.to_numpy(), flat[::-1])
    with pytest.raises(ValueError, match="C-contiguous"):
        t.fill_(1.0)


def test_zero_size_arrays():
    a = cudnn.empty((0, 3), np.float32)
    assert a.ptr == 0 and a.nbytes == 0
    assert a.to_numpy().shape == (0, 3)
    assert cudnn.to_device(np.zeros((2, 0), np.int8)).shape == (2, 0)


def test_empty_like_keeps_shape_and_takes_dtype_and_stream():
    s = new_stream()
    a = cudnn.zeros((3, 4), np.float16)
    b = cudnn.empty_like(a, np.float32, s)  # stream positional, as for empty/zeros/to_device
    assert (b.shape, b.dtype, b.device_id, b.is_contiguous) == ((3, 4), np.float32, 0, True)
    assert b.stream == s and b.ptr != a.ptr
    c = cudnn.empty_like(a)
    assert (c.shape, c.dtype, c.stream) == (a.shape, a.dtype, a.stream)


def test_reshape_shares_device_memory(rng):
    host = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a = cudnn.to_device(host)
    b = a.reshape(6, 4)
    b.fill_(2.0)
    np.testing.assert_array_equal(a.to_numpy(), np.full((2, 3, 4), 2.0, np.float32))


def test_work_on_another_stream_is_seen_after_sync(rng):
    s = new_stream()
    big = cudnn.empty((1 << 24,), np.float32, stream=s)  # 64 MiB: the fill takes a while
    assert big.stream == s
    with timer(s) as t:
        big.fill_(3.0)
    assert t.ms is not None and t.ms > 0
    # to_numpy orders itself after the array's stream
    out = big.to_numpy()
    assert out[0] == 3.0 and out[-1] == 3.0 and np.all(out == 3.0)
    # a device copy onto the default stream waits for the stream the source was written on
    x = rng.standard_normal((1 << 20,)).astype(np.float32)
    src = cudnn.to_device(x, s)
    dst = cudnn.empty(x.shape, np.float32).fill_(np.nan)
    dst.copy_(src)
    np.testing.assert_array_equal(dst.to_numpy(), x)


def test_an_allocator_makes_what_empty_makes(rng):
    """``memory.allocator``: each call a new C-contiguous array of its layout on its stream (what ``empty`` makes),
    usable and freed like one; zero elements make a NULL array."""
    from cudnn_py.core.memory import allocator
    s = new_stream()
    new = allocator((3, 4, 5), np.float16, s)
    a, b = new(), new()
    for x in (a, b):
        ref = cudnn.empty((3, 4, 5), np.float16, stream=s)
        assert (x.shape, x.strides, x.dtype, x.stream, x.device_id, x.is_contiguous) == \
            (ref.shape, ref.strides, ref.dtype, s, 0, True)
    assert a.ptr != b.ptr and a.ptr and b.ptr
    host = rng.standard_normal((3, 4, 5)).astype(np.float16)
    a.copy_(host)
    np.testing.assert_array_equal(a.to_numpy(), host)
    z = allocator((0, 4), np.float32)()
    assert (z.ptr, z.shape, z.size) == (0, (0, 4), 0)


def test_a_small_arrays_block_is_reused_on_the_default_stream_only(rng):
    """Once a small array on the default stream is collected, the next array of its size there gets its block (the
    same address, holding the new data); an array on another stream gets its own memory, and its block is not kept;
    ``empty_cache`` frees what is kept."""
    host = rng.standard_normal(1000).astype(np.float32)
    a = cudnn.empty((1000,), np.float32)
    p = a.ptr
    del a
    b = cudnn.to_device(host)
    assert b.ptr == p
    np.testing.assert_array_equal(b.to_numpy(), host)
    s = new_stream()
    c = cudnn.empty((1000,), np.float32, stream=s)
    pc = c.ptr
    del c
    assert pc != p and all(ptr != pc for free in blocks._kept.values() for _, ptr in free)
    d = cudnn.empty((1000,), np.float32)  # b holds the default stream's block
    assert d.ptr != p
    d.copy_(host[::-1].copy())
    np.testing.assert_array_equal(b.to_numpy(), host)
    del b, d
    assert cudnn.empty_cache() >= 2 * 4000 and cudnn.empty_cache() == 0
    e = cudnn.to_device(host)
    np.testing.assert_array_equal(e.to_numpy(), host)


def test_a_held_timer_times_the_gpu_not_the_host():
    """``timer(hold=True)``: the host's pause between two fills is not timed (it is without the hold), and the work
    still runs in order."""
    import time
    s = new_stream()
    a = cudnn.empty((1 << 12,), np.float32, stream=s)
    for hold in (True, False):
        with timer(s, hold=hold) as t:
            a.fill_(1.0)
            time.sleep(0.05)
            a.fill_(2.0)
        assert t.held is hold
        assert (t.ms < 10.0) if hold else (t.ms > 45.0), (hold, t.ms)
        np.testing.assert_array_equal(a.to_numpy(), np.full(a.shape, 2.0, np.float32))


def test_a_held_block_that_waits_for_its_stream_is_let_go(monkeypatch):
    """A held block that synchronises its own stream is let go after ``HOLD_TIMEOUT`` (``held`` False); one that
    raises releases the stream at once."""
    import time
    from cudnn_py.core import streams
    monkeypatch.setattr(streams, "HOLD_TIMEOUT", 0.2)
    s = new_stream()
    a = cudnn.empty((1 << 12,), np.float32, stream=s)
    start = time.perf_counter()
    with timer(s, hold=True) as t:
        a.fill_(3.0)
        s.sync()
    assert not t.held and t.ms is not None and 0.1 < time.perf_counter() - start < 5.0
    np.testing.assert_array_equal(a.to_numpy(), np.full(a.shape, 3.0, np.float32))
    start = time.perf_counter()
    with pytest.raises(KeyError):
        with timer(s, hold=True):
            a.fill_(4.0)
            raise KeyError("inside")
    s.sync()
    assert time.perf_counter() - start < 0.15
    np.testing.assert_array_equal(a.to_numpy(), np.full(a.shape, 4.0, np.float32))


# --- torch ---------------------------------------------------------------------------------------------

def test_torch_takes_a_device_array_without_copy(rng):
    torch = pytest.importorskip("torch")
    host = rng.standard_normal((3, 4)).astype(np.float32)
    a = cudnn.to_device(host)
    t = torch.from_dlpack(a)
    assert t.is_cuda and t.data_ptr() == a.ptr and tuple(t.shape) == (3, 4)
    np.testing.assert_array_equal(t.cpu().numpy(), host)
    t.add_(1.0)  # writes through to the same memory
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.to_numpy(), host + 1.0)
    c = torch.as_tensor(a, device="cuda")  # through __cuda_array_interface__
    assert c.data_ptr() == a.ptr


def test_torch_strided_view_of_device_array():
    torch = pytest.importorskip("torch")
    base = cudnn.to_device(np.arange(12, dtype=np.float32))
    t = torch.from_dlpack(DeviceArray(base.ptr, (4, 3), np.float32, strides=(1, 4), owner=base))
    assert t.stride() == (1, 4)
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)


def test_device_array_views_torch_tensor_without_copy():
    torch = pytest.importorskip("torch")
    t = torch.randn(5, 7, device="cuda").t()  # strided
    a = as_array(t, "t")
    assert a.ptr == t.data_ptr() and a.shape == (7, 5) and a.strides == tuple(t.stride())
    assert a.dtype == np.float32 and a.device_id == t.device.index and not a.is_contiguous
    np.testing.assert_array_equal(a.to_numpy(), t.cpu().numpy())
    h = torch.zeros(4, device="cuda", dtype=torch.float16)
    a16 = as_array(h, "h", dtype=np.float16, contiguous=True)
    a16.fill_(1.5)
    torch.cuda.synchronize()
    assert h.tolist() == [1.5] * 4


def test_torch_bfloat16_both_ways():
    torch = pytest.importorskip("torch")
    ml = pytest.importorskip("ml_dtypes")
    t = torch.randn(6, device="cuda").to(torch.bfloat16)
    a = as_array(t, "t")
    assert a.dtype == ml.bfloat16 and a.ptr == t.data_ptr()
    back = torch.from_dlpack(a)
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)


def test_torch_host_tensor_and_wrong_dtype_are_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="host memory"):
        as_array(torch.zeros(3), "x")
    with pytest.raises(TypeError, match="x has dtype float32; expected float16"):
        as_array(torch.zeros(3, device="cuda"), "x", dtype=np.float16)
    with pytest.raises(ValueError, match="C-contiguous"):
        as_array(torch.zeros(3, 4, device="cuda").t(), "x", contiguous=True)


class _CAIOnly:
    """A producer with only __cuda_array_interface__ (as numba and older CuPy expose)."""

    def __init__(self, owner):
        self.owner = owner
        self.__cuda_array_interface__ = owner.__cuda_array_interface__


def test_cuda_array_interface_producer_without_copy(rng):
    host = rng.standard_normal((4, 6)).astype(np.float32)
    base = cudnn.to_device(host)
    strided = DeviceArray(base.ptr, (6, 4), np.float32, strides=(1, 6), owner=base)
    for src, want in ((base, host), (strided, host.T)):
        a = as_array(_CAIOnly(src), "x")
        assert (a.ptr, a.shape, a.strides, a.device_id) == (src.ptr, src.shape, src.strides, 0)
        np.testing.assert_array_equal(a.to_numpy(), want)
    s = new_stream()
    a = as_array(_CAIOnly(base), "x", stream=s)  # ordered before work on s
    np.testing.assert_array_equal(a.to_numpy(stream=s), host)


def test_torch_tensor_on_a_consumer_stream(rng):
    torch = pytest.importorskip("torch")
    s = new_stream()
    t = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    a = as_array(t, "t", stream=s)  # torch's stream is made to come before s
    assert a.ptr == t.data_ptr()
    np.testing.assert_array_equal(a.to_numpy(stream=s), np.arange(1 << 20, dtype=np.float32))


def test_export_to_torch_on_another_stream():
    torch = pytest.importorskip("torch")
    s = new_stream()
    a = cudnn.empty((1 << 22,), np.float32, stream=s)
    a.fill_(5.0)  # queued on s; torch's stream must wait for it
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        t = torch.from_dlpack(a)
        total = float(t.sum())
    assert t.data_ptr() == a.ptr
    assert total == 5.0 * (1 << 22)


# --- out of memory -----------------------------------------------------------------------------------------

def _device_bytes() -> tuple[int, int]:
    """(free, total) bytes of the current device."""
    from cuda.bindings import driver
    err, free, total = driver.cuMemGetInfo()
    assert int(err) == 0
    return free, total


def _relu_check(h, rng):
    """A small call on ``h`` that must still be right."""
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    y = cudnn.activation_forward(h, cudnn.Activation("relu"), cudnn.to_device(x, stream=h.stream), engine="legacy")
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x, 0))


@pytest.mark.serial  # fills the device: parallel shards would fail their own allocations meanwhile
def test_out_of_memory_is_an_error_and_leaves_everything_usable(handle, rng):
    """Asking for more than the card has: CudaOutOfMemoryError (a MemoryError), from an array, from the handle's
    workspace and from an output a call allocates; afterwards the handle, its workspace and allocation still work."""
    from cudnn_py.errors import CudaOutOfMemoryError
    _, total = _device_bytes()
    with pytest.raises(CudaOutOfMemoryError) as e:
        cudnn.empty((2 * total,), np.uint8)
    assert isinstance(e.value, MemoryError) and "bytes on device" in str(e.value)
    size = handle.workspace.size
    with pytest.raises(CudaOutOfMemoryError):
        handle.workspace.get(2 * total, handle.stream)
    assert handle.workspace.size in (0, size)
    _relu_check(handle, rng)
    assert handle.workspace.get(1 << 20, handle.stream) != 0

    # an output allocated inside a call: fill the device first (in 64 MiB pieces until an allocation fails, so that
    # memory the allocator keeps reserved is taken too: cuMemGetInfo's free count misses it, and on a 2-GPU H200
    # machine an output of 256 MiB still fitted after a hog of free - 64 MiB), then the call's output cannot fit
    x = cudnn.to_device(rng.standard_normal((64, 1024, 1024)).astype(np.float32), stream=handle.stream)  # 256 MiB
    handle.synchronize()
    hog = []
    try:
        with pytest.raises(CudaOutOfMemoryError):
            while True:
                hog.append(cudnn.empty((64 << 20,), np.uint8, stream=handle.stream))
        assert len(hog) * (64 << 20) > total // 2  # most of the device was free before
        with pytest.raises(CudaOutOfMemoryError):
            cudnn.activation_forward(handle, cudnn.Activation("relu"), x, engine="legacy")
    finally:
        hog.clear()
    handle.synchronize()
    y = cudnn.activation_forward(handle, cudnn.Activation("relu"), x, engine="legacy")
    np.testing.assert_array_equal(y.to_numpy()[:2], np.maximum(x.to_numpy()[:2], 0))
    _relu_check(handle, rng)
