"""Several GPUs (cuDNN's model: one handle per device, per host thread). Skipped with a reason where fewer than two
GPUs are visible; run them on a 2-GPU machine with ``CUDNN_PY_REQUIRE_GPU=1 python -m pytest tests/test_multi_gpu.py``.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import gpu_missing_reason


def _gpu_count() -> int:
    if gpu_missing_reason():
        return 0
    from cuda.bindings import driver
    err, n = driver.cuDeviceGetCount()
    return n if int(err) == 0 else 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_count() < 2, reason=f"needs 2 GPUs, "
                                                  f"{_gpu_count()} visible")]


@pytest.fixture(autouse=True)
def _device_0_current_after_each_test():
    """A test here leaves device 1 current in this thread (``get_device`` makes a device current the first time it
    is asked for); the tests after this module run on the current device and expect device 0."""
    yield
    from cuda.core import Device
    Device(0).set_current()


def _threads(work, devices):
    errors: dict[int, BaseException] = {}

    def body(d):
        try:
            work(d)
        except BaseException as e:  # noqa: BLE001 - asserted on
            errors[d] = e
    ts = [threading.Thread(target=body, args=(d,)) for d in devices]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, {d: repr(e) for d, e in errors.items()}


def test_a_thread_per_device_matches_the_single_threaded_results():
    """Legacy convolution, engine='graph' convolution, a Graph build+execute, an RNN forward, pooling and softmax on
    each device at once, each thread with its own Handle and stream: equal to the serial results of device 0."""
    import cudnn_py as cudnn
    from helpers import poisoned_allocations
    from workload import assert_same, inputs, run

    host = inputs(seed=3)
    with poisoned_allocations():
        with cudnn.Handle(device=0) as h:
            want = run(h, host)
        got: dict[int, list] = {}

        def work(d):
            with cudnn.Handle(device=d, stream=cudnn.new_stream(d)) as hh:
                got[d] = [run(hh, host) for _ in range(5)]
        devices = list(range(min(_gpu_count(), 4)))
        _threads(work, devices)
    for d in devices:
        for i, r in enumerate(got[d]):
            assert_same(r, want, f"device {d} round {i}")


def test_handle_on_device_1_made_while_device_0_is_current():
    import cudnn_py as cudnn
    from cuda.core import Device
    from helpers import poisoned
    from reference import conv as ref

    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 4, 7, 7)), rng.standard_normal((6, 4, 3, 3))
    with cudnn.Handle(device=1):  # device 1 has been made current in this thread before
        pass
    Device(0).set_current()
    with cudnn.Handle(device=1) as h:
        assert h.device == 1
        xd, wd = (cudnn.to_device(a, stream=h.stream, device=1) for a in (x, w))
        y = poisoned((2, 6, 7, 7), np.float64, h.stream, device=1)
        cudnn.convolution_forward(h, cudnn.Convolution(padding=1), xd, wd, y=y)
        y_new = cudnn.convolution_forward(h, cudnn.Convolution(padding=1), xd, wd)  # allocated by the library
        assert y_new.device_id == 1
        want = ref.conv_forward(x, w, 1)
        np.testing.assert_allclose(y.to_numpy(), want, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(y_new.to_numpy(), want, rtol=1e-10, atol=1e-10)


def _wrong_device_calls(cudnn, h, dev0):
    """(name, call) pairs: each passes arrays on device 0 to a handle on device 1."""
    from cudnn_py import graph as G
    x4 = dev0((2, 4, 8, 8))
    w4 = dev0((4, 4, 3, 3))
    conv = cudnn.Convolution(padding=1)
    rnn = cudnn.RNN("gru", 8, 8)
    return [
        ("convolution_forward", lambda: cudnn.convolution_forward(h, conv, x4, w4)),
        ("convolution_forward graph", lambda: cudnn.convolution_forward(h, conv, x4, w4, engine="graph")),
        ("convolution_backward_data", lambda: cudnn.convolution_backward_data(h, conv, w4, x4)),
        ("convolution_backward_filter", lambda: cudnn.convolution_backward_filter(h, conv, x4, x4,
                                                                                   w_shape=(4, 4, 3, 3))),
        ("pooling_forward", lambda: cudnn.pooling_forward(h, cudnn.Pooling("max", window=2), x4)),
        ("activation_forward", lambda: cudnn.activation_forward(h, cudnn.Activation("relu"), x4)),
        ("softmax_forward", lambda: cudnn.softmax_forward(h, x4)),
        ("add_tensor", lambda: cudnn.add_tensor(h, dev0((1, 4, 1, 1)), x4, beta=1.0)),
        ("op_tensor", lambda: cudnn.op_tensor(h, "mul", x4, x4)),
        ("lrn_forward", lambda: cudnn.lrn_forward(h, cudnn.LRN(), x4)),
        ("rnn_forward", lambda: cudnn.rnn_forward(h, rnn, dev0((3, 2, 8)), rnn.new_weights(h))),
        ("rnn_forward weights", lambda: cudnn.rnn_forward(h, rnn, cudnn.to_device(
            np.zeros((3, 2, 8), np.float32), stream=h.stream, device=1), dev0((rnn.weight_space_size(h) // 4,)))),
        ("graph execute", lambda: _graph_execute(G, h, dev0)),
    ]


def _graph_execute(G, h, dev0):
    g = G.Graph()
    a = g.tensor((1, 4, 4), name="a")
    c = g.matmul(a, a).set_output(True).set_name("c")
    g.build(h)
    g.execute(h, {a: dev0((1, 4, 4)), c: dev0((1, 4, 4))})


def test_arrays_on_another_device_are_refused_before_c():
    import cudnn_py as cudnn
    from cudnn_py.errors import CudnnError

    def dev0(shape):
        return cudnn.to_device(np.ones(shape, np.float32), device=0)
    problems = []
    with cudnn.Handle(device=1) as h:
        for name, call in _wrong_device_calls(cudnn, h, dev0):
            try:
                call()
            except CudnnError as e:
                problems.append(f"{name}: reached cuDNN ({e})")
            except (TypeError, ValueError) as e:
                if "device" not in str(e):
                    problems.append(f"{name}: refused without naming the device: {e}")
            else:
                problems.append(f"{name}: accepted arrays on device 0 with a handle on device 1")
    assert not problems, "\n".join(problems)


def _current_context() -> int:
    from cuda.bindings import driver
    err, ctx = driver.cuCtxGetCurrent()
    assert int(err) == 0
    return int(ctx)


def _memory_round(cudnn, device: int, rng) -> None:
    """Every memory operation on arrays of ``device``, whatever device is current (or none): values exact, the
    thread's current context unchanged by each."""
    import gc
    before = _current_context()  # (each device was used in this thread before: a first use makes it current)
    host = rng.standard_normal((5, 7)).astype(np.float32)
    a = cudnn.to_device(host, device=device)
    assert a.device_id == device and _current_context() == before
    np.testing.assert_array_equal(a.to_numpy(), host)
    z = cudnn.zeros((5, 7), np.float32, device=device)
    np.testing.assert_array_equal(z.to_numpy(), np.zeros((5, 7), np.float32))
    z.fill_(np.nan).fill_(2.5)
    np.testing.assert_array_equal(z.to_numpy(), np.full((5, 7), 2.5, np.float32))
    for dtype, value in ((np.float64, -0.5), (np.int8, -7), (np.float16, 3.0), (np.int64, 2 ** 40 + 1)):
        b = cudnn.empty((3, 33), dtype, device=device).fill_(value)
        np.testing.assert_array_equal(b.to_numpy(), np.full((3, 33), value, dtype))
    z.copy_(a)
    np.testing.assert_array_equal(z.to_numpy(), host)
    z.copy_(host * 2)
    np.testing.assert_array_equal(z.to_numpy(), host * 2)
    t = cudnn.DeviceArray(a.ptr, (7, 5), np.float32, strides=(1, 7), device_id=device, owner=a)
    np.testing.assert_array_equal(t.to_numpy(), host.T)
    e = cudnn.empty_like(a)
    assert e.device_id == device
    del a, z, e, t, b
    gc.collect()  # frees, ordered on each array's stream on its device
    assert _current_context() == before


@pytest.mark.multi_gpu
def test_memory_operations_on_an_array_of_another_device(rng):
    """Fill, copy, to_numpy, zeros, to_device and free of arrays on device 1 while device 0 is current, and the
    other way round (issue 21: filling an array of the other device raised CUDA_ERROR_INVALID_VALUE)."""
    import cudnn_py as cudnn
    from cuda.core import Device
    for d in (0, 1):
        cudnn.empty((1,), np.float32, device=d)
    for current, other in ((0, 1), (1, 0)):
        Device(current).set_current()
        _memory_round(cudnn, other, rng)
        _memory_round(cudnn, current, rng)
    # a copy between the devices (unified addressing), each side non-current in turn
    src = cudnn.to_device(rng.standard_normal((64,)).astype(np.float32), device=0)
    dst = cudnn.empty((64,), np.float32, device=1).fill_(np.nan)
    dst.copy_(src)
    np.testing.assert_array_equal(dst.to_numpy(), src.to_numpy())


@pytest.mark.multi_gpu
def test_a_thread_per_gpu_with_no_current_device(rng):
    """A thread per GPU, each with its own GPU current: its arrays, then its neighbour's (not current there)."""
    import cudnn_py as cudnn
    n = min(_gpu_count(), 4)
    seeds = {d: int(rng.integers(1 << 31)) for d in range(n)}

    def work(d):
        r = np.random.default_rng(seeds[d])
        for k in (d + 1, d):  # first uses: this thread's current device is then d
            cudnn.empty((1,), np.float32, device=k % n)
        for _ in range(3):
            _memory_round(cudnn, d, r)
            _memory_round(cudnn, (d + 1) % n, r)
    _threads(work, list(range(n)))


@pytest.mark.multi_gpu
def test_handles_and_graph_plans_on_the_second_device(rng):
    """A Handle, a legacy call with a library-allocated output and a graph plan (build, execute, executor cache)
    on device 1 while device 0 is current, checked against NumPy; nothing of it lands on device 0."""
    import cudnn_py as cudnn
    from cuda.core import Device
    from cudnn_py import graph as G
    Device(0).set_current()
    a_host = rng.integers(-3, 4, (2, 8, 16)).astype(np.float32)  # small ints: exact under TF32 too
    b_host = rng.integers(-3, 4, (2, 16, 4)).astype(np.float32)
    with cudnn.Handle(device=1) as h:
        assert h.device == 1
        x = cudnn.to_device(a_host, stream=h.stream, device=1)
        y = cudnn.activation_forward(h, cudnn.Activation("relu"), x)
        assert y.device_id == 1
        np.testing.assert_array_equal(y.to_numpy(), np.maximum(a_host, 0))
        g = G.Graph()
        ta, tb = g.tensor(a_host.shape, name="a"), g.tensor(b_host.shape, name="b")
        tc = g.matmul(ta, tb).set_output(True).set_name("c")
        g.build(h)
        for _ in range(2):  # the second execute goes through the cached plan
            out = cudnn.empty((2, 8, 4), np.float32, stream=h.stream, device=1).fill_(np.nan)
            g.execute(h, {ta: x, tb: cudnn.to_device(b_host, stream=h.stream, device=1), tc: out})
            h.synchronize()
            np.testing.assert_array_equal(out.to_numpy(), a_host @ b_host)
        assert h.workspace.size == 0 or h.workspace.ptr != 0
