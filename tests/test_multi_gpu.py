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
        cudnn.convolution_forward(h, cudnn.Convolution(padding=1), xd, wd, y)
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
