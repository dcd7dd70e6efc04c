"""Handle lifetime and streams, workspaces, dropout descriptor and timer on a real GPU."""
import ctypes
import gc
import threading

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py import capi
from cudnn_py.core.descriptors import TensorDescriptor
from cudnn_py.errors import ClosedError, WorkspaceLimitError
from cudnn_py.core.memory import DeviceArray
from cudnn_py.core.streams import new_stream
from cudnn_py.core.workspace import Workspace

pytestmark = pytest.mark.gpu

MiB = 1 << 20


def _cudnn_stream(h) -> int:
    s = capi.cudaStream_t()
    capi.cudnnGetStream(h.ptr, ctypes.byref(s))
    return s.value or 0


def _set_tensor(h, a, value):
    """A real cuDNN kernel (cudnnSetTensor) writing ``value`` into ``a`` on the handle's stream."""
    d = TensorDescriptor(a.shape, a.dtype)
    capi.cudnnSetTensor(h.ptr, d.ptr, a.ptr, ctypes.byref(ctypes.c_float(value)))


def test_handle_lifetime():
    h = cudnn.Handle()
    assert h.ptr.value and h.device == 0 and not h.closed
    assert _cudnn_stream(h) == h.stream_ptr
    h.close()
    h.close()  # idempotent
    assert h.closed and "closed" in repr(h)
    with pytest.raises(ClosedError):
        h.ptr
    with pytest.raises(ClosedError):
        h.set_stream(None)
    with cudnn.Handle() as h2:
        assert h2.ptr.value
    assert h2.closed


def test_forgotten_handle_is_destroyed_by_gc():
    h = cudnn.Handle()
    finalizer = h._finalizer
    del h
    gc.collect()
    assert not finalizer.alive


def test_on_stream_switches_and_restores(rng):
    with cudnn.Handle() as h:
        default = h.stream_ptr
        s = new_stream()
        a = cudnn.empty((1 << 22,), np.float32, stream=s)
        with h.on_stream(s):
            assert h.stream is s and h.stream_ptr == int(s.handle) == _cudnn_stream(h)
            _set_tensor(h, a.reshape(1, 1, 1, -1), 0.75)
        assert h.stream_ptr == default == _cudnn_stream(h)
        out = a.to_numpy(stream=s)  # ordered after the cuDNN kernel on s
        assert np.all(out == 0.75)


def test_handle_on_a_torch_stream():
    torch = pytest.importorskip("torch")
    ts = torch.cuda.Stream()
    with cudnn.Handle(stream=ts) as h:
        assert h.stream_ptr == ts.cuda_stream == _cudnn_stream(h)
        x = torch.zeros(1, 1, 4, 4, device="cuda")
        torch.cuda.synchronize()
        _set_tensor(h, cudnn.as_array(x), 2.0)
        h.synchronize()
        assert torch.all(x == 2.0)


def test_bad_stream_argument():
    with cudnn.Handle() as h:
        with pytest.raises(TypeError, match="cannot use str as a CUDA stream"):
            h.set_stream("s")


def test_one_handle_per_thread():
    errors, results = [], []

    def work(value):
        try:
            with cudnn.Handle() as h:
                a = cudnn.empty((1, 1, 8, 8), np.float32, stream=h.stream)
                _set_tensor(h, a, value)
                results.append(float(a.to_numpy().mean()))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(float(i),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == [0.0, 1.0, 2.0, 3.0]


def test_workspace_grows_reuses_caps_and_releases():
    s = new_stream()
    ws = Workspace()
    assert ws.get(0, s) == 0 and ws.size == 0
    p1 = ws.get(1000, s)
    assert p1 and ws.size == MiB
    assert ws.get(MiB, s) == p1  # fits: reused
    p2 = ws.get(3 * MiB + 1, s)
    assert ws.size == 4 * MiB and ws.peak == 3 * MiB + 1 and ws.ptr == p2
    # the memory is real and writable
    view = DeviceArray(p2, (ws.size,), np.uint8, owner=ws, stream=s)
    view.fill_(7)
    assert np.all(view.to_numpy() == 7)
    ws.cap = 8 * MiB
    with pytest.raises(WorkspaceLimitError, match="cap is 8388608"):
        ws.get(9 * MiB, s)
    assert ws.size == 4 * MiB and ws.ptr == p2  # a refused call changes nothing
    ws.cap = 2 * MiB  # below the current size: frees the buffer
    assert ws.size == 0
    assert ws.get(2 * MiB, s) and ws.size == 2 * MiB
    # another stream waits for the previous user before reusing the buffer
    assert ws.get(MiB, new_stream()) == ws.ptr
    ws.release()
    assert ws.size == 0 and ws.ptr == 0
    with Workspace() as scoped:
        scoped.get(5, None)
        assert scoped.size == MiB
    assert scoped.size == 0


def test_handle_workspace_is_released_on_close():
    h = cudnn.Handle()
    h.workspace.get(10 * MiB, h.stream)
    assert h.workspace.size >= 10 * MiB
    h.close()
    assert h.workspace.size == 0


def test_dropout_descriptor(handle):
    d = cudnn.Dropout(handle, 0.25, seed=1234)
    assert d.p == pytest.approx(0.25) and d.seed == 1234
    assert d.states_size > 0 and d.states.ptr
    assert "p=0.25" in repr(d)
    d.close()
    with pytest.raises(ClosedError):
        d.ptr


def test_close_drops_the_handle_cache_and_nulls_the_pointer():
    from cudnn_py.core.caches import handle_cache
    h = cudnn.Handle()
    ptr = h.ptr
    handle_cache(h, "mine")["k"] = "built for h"
    assert h.cache == {"mine": {"k": "built for h"}}
    h.close()
    assert h.cache == {} and ptr.value is None  # a holder of the old pointer object passes NULL, not a freed handle
    with pytest.raises(ClosedError):
        h.ptr


def test_default_handle_runs_cudnn_work_and_is_per_thread(rng):
    h = cudnn.default_handle()
    assert isinstance(h, cudnn.Handle) and not h.closed and h.device == 0
    assert cudnn.default_handle(0) is h and cudnn.default_handle() is h
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    y = cudnn.pooling_forward(h, cudnn.Pooling("max", window=2, stride=2), cudnn.to_device(x, h.stream))
    ref = x.reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(y.to_numpy(), ref)
    other, errors = [], []

    def work():
        try:
            mine = cudnn.default_handle()
            a = cudnn.empty((1, 1, 4, 4), np.float32, stream=mine.stream)
            _set_tensor(mine, a, 5.0)
            other.append((mine, float(a.to_numpy().mean())))
        except Exception as e:  # reported below
            errors.append(e)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors and other[0][0] is not h and other[0][1] == 5.0
    with cudnn.Handle() as explicit:  # explicit handles keep working beside the default one
        assert explicit is not h and explicit.ptr.value != h.ptr.value


def test_default_handle_after_close_is_new_and_exit_is_clean():
    h = cudnn.default_handle()
    h.close()
    assert cudnn.default_handle() is not h and not cudnn.default_handle().closed
    code = ("import numpy as np, cudnn_py as cudnn\n"
            "h = cudnn.default_handle()\n"
            "y = cudnn.softmax_forward(h, cudnn.to_device(np.ones((1, 4, 1, 1), np.float32)))\n"
            "print(float(y.to_numpy().sum()))\n")
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0 and r.stderr == "" and abs(float(r.stdout) - 1.0) < 1e-6, (r.stdout, r.stderr)
