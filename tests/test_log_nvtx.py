"""cuDNN's log through Python logging (cudnn_py.clib.log) and NVTX ranges around cuDNN calls (cudnn_py.clib.nvtx): on
the CPU with the real library (the log) and a recording stand-in for the nvtx package; on the GPU with the real
package."""
from __future__ import annotations

import ctypes
import gc
import logging
import subprocess
import sys
import textwrap
import threading
import types
from ctypes import byref
from pathlib import Path

import numpy as np
import pytest

import cudnn_py
from cudnn_py import capi
from cudnn_py.clib import log as cudnn_log
from cudnn_py.clib import nvtx as cudnn_nvtx
from cudnn_py.errors import CudnnBadParamError

ROOT = str(Path(cudnn_py.__file__).resolve().parent.parent)


class Records(logging.Handler):
    """The records emitted by the thread that made it. cuDNN's callback is process-wide: a cuDNN call of another
    thread (a handle or autotune thread left by an earlier test) is logged too, and must not count."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.thread = threading.get_ident()

    def emit(self, record):
        if record.thread == self.thread:
            self.records.append(record)


def _shown(records) -> list[tuple]:
    """What an assertion on records prints: each one's level, cuDNN function and thread."""
    return [(r.levelname, r.cudnn_function, r.cudnn_thread) for r in records]


@pytest.fixture
def records():
    """This thread's records on the ``cudnn_py`` logger; the garbage collector is paused meanwhile (after
    collecting): a collection would run finalizers of earlier tests' objects in this thread (cuDNN calls, logged when
    they fail) at a moment that depends on everything the process did before, i.e. on which tests share the shard.
    What made test_log_levels see one error twice in a loaded sharded GPU suite."""
    logger = logging.getLogger("cudnn_py")
    handler, old_level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    gc.collect()
    gc.disable()
    try:
        yield handler.records
    finally:
        gc.enable()
        cudnn_log.disable()
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _bad_param(d):
    with pytest.raises(CudnnBadParamError):
        capi.cudnnSetTensor4dDescriptor(d, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, -1, 3, 4, 4)


def test_log_info_reaches_the_logger(records, tensor):
    cudnn_log.enable("info")
    assert cudnn_log.level() == "info"
    capi.cudnnSetTensor4dDescriptor(tensor, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 1, 3, 4, 4)
    _bad_param(tensor)
    calls = [r for r in records if r.levelno == logging.INFO and r.cudnn_function == "cudnnSetTensor4dDescriptor"]
    assert len(calls) >= 2 and "n: type=int; val=-1;" in calls[-1].getMessage()
    errors = [r for r in records if r.levelno == logging.ERROR]
    assert [r.cudnn_function for r in errors] == ["cudnnSetTensor4dDescriptor"]
    assert errors[0].cudnn_status == capi.CUDNN_STATUS_BAD_PARAM
    assert "Reason: (n <= 0)" in errors[0].getMessage() and errors[0].name == "cudnn_py"
    cudnn_log.disable()
    assert cudnn_log.level() is None
    before = len(records)
    _bad_param(tensor)
    capi.cudnnSetTensor4dDescriptor(tensor, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 1, 3, 4, 4)
    assert len(records) == before


def test_log_levels(records, tensor):
    cudnn_log.enable(logging.ERROR)
    assert cudnn_log.level() == "error"
    capi.cudnnSetTensor4dDescriptor(tensor, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 1, 3, 4, 4)
    _bad_param(tensor)
    assert [r.levelno for r in records] == [logging.ERROR], _shown(records)
    cudnn_log.enable(logging.WARNING)
    assert cudnn_log.level() == "warning"
    with pytest.raises(ValueError, match="level must be one of"):
        cudnn_log.enable("verbose")
    mine = logging.getLogger("elsewhere")
    handler = Records()
    mine.addHandler(handler)
    try:
        cudnn_log.enable("error", logger=mine)
        _bad_param(tensor)
        assert len(handler.records) == 1, _shown(handler.records)
    finally:
        mine.removeHandler(handler)


class _FailsWhenCollected:
    """Garbage in a reference cycle whose finalizer makes a failing cuDNN call (logged at ERROR) on a descriptor of
    its own, as an earlier test's object might."""

    def __init__(self):
        self.desc, self.cycle = capi.cudnnTensorDescriptor_t(), self
        capi.cudnnCreateTensorDescriptor(byref(self.desc))

    def __del__(self):
        try:
            _bad_param(self.desc)
        finally:
            capi.cudnnDestroyTensorDescriptor(self.desc)


def test_log_records_are_this_threads_whatever_else_runs(records, tensor):
    """What made test_log_levels see ``[40, 40]`` in a loaded sharded suite: failing cuDNN calls of another thread,
    and garbage of earlier tests whose finalizer fails, while this thread's one error is logged."""
    _FailsWhenCollected()
    cudnn_log.enable("error")
    other = capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateTensorDescriptor(byref(other))
    stop, failed = threading.Event(), threading.Event()

    def fail_elsewhere():
        while not stop.is_set():
            _bad_param(other)
            failed.set()
    t = threading.Thread(target=fail_elsewhere)
    t.start()
    try:
        assert failed.wait(30)
        for _ in range(200):
            [object() for _ in range(50)]  # allocations that would trigger a collection
        _bad_param(tensor)
    finally:
        stop.set()
        t.join()
        capi.cudnnDestroyTensorDescriptor(other)
    assert [(r.levelname, r.cudnn_function) for r in records] == [("ERROR", "cudnnSetTensor4dDescriptor")], \
        _shown(records)
    gc.collect()  # the garbage was real: collected now, its failing call is logged here
    assert [r.levelname for r in records] == ["ERROR", "ERROR"], _shown(records)


def _script(source: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": env.pop("PYTHONPATH", ROOT), **env})


BAD_PARAM_SCRIPT = """
    import logging, ctypes
    logging.basicConfig(level=logging.INFO, format="REC %(levelname)s %(cudnn_function)s")
    from cudnn_py import capi
    d = capi.cudnnTensorDescriptor_t(); capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
    try:
        capi.cudnnSetTensor4dDescriptor(d, 0, 0, -1, 3, 4, 4)
    except Exception:
        pass
"""


def test_log_from_the_environment():
    p = _script(BAD_PARAM_SCRIPT, CUDNN_PY_LOG="info")
    assert p.returncode == 0, p.stderr
    assert "REC INFO cudnnCreateTensorDescriptor" in p.stderr and "REC ERROR cudnnSetTensor4dDescriptor" in p.stderr
    p = _script(BAD_PARAM_SCRIPT, CUDNN_PY_LOG="error")
    assert "REC ERROR cudnnSetTensor4dDescriptor" in p.stderr and "REC INFO" not in p.stderr
    p = _script(BAD_PARAM_SCRIPT, CUDNN_PY_LOG="loud")
    assert p.returncode == 0 and "CUDNN_PY_LOG='loud' ignored" in p.stderr and "REC" not in p.stderr


def test_disable_leaves_cudnn_silent():
    """cuDNN answers a NULL callback with its own printer of errors: disable() must not turn that on."""
    p = _script("""
        import ctypes
        from cudnn_py import capi
        from cudnn_py.clib import log
        log.enable("error"); log.disable()
        d = capi.cudnnTensorDescriptor_t(); capi.cudnnCreateTensorDescriptor(ctypes.byref(d))
        try:
            capi.cudnnSetTensor4dDescriptor(d, 0, 0, -1, 3, 4, 4)
        except Exception as e:
            print(type(e).__name__)
    """)
    assert p.returncode == 0 and p.stdout.strip() == "CudnnBadParamError"
    assert "CUDNN_STATUS_BAD_PARAM" not in p.stderr, p.stderr


# ------------------------------------------------------------------------------------------------ NVTX

class Domain:
    """Records pushes and pops of the thread that made it; forwards them to a real nvtx domain when given one.

    Ranges are process-wide: while enabled, a cuDNN call from another thread (a handle or autotune thread left by
    an earlier test) is ranged too, so only this thread's events count."""

    def __init__(self, real=None):
        self.events: list[tuple] = []
        self.real = real
        self.thread = threading.get_ident()

    def get_event_attributes(self, message=None, color=None):
        return (message, self.real.get_event_attributes(message=message, color=color) if self.real else None)

    def push_range(self, attributes):
        if threading.get_ident() == self.thread:
            self.events.append(("push", attributes[0]))
        if self.real:
            self.real.push_range(attributes[1])

    def pop_range(self):
        if threading.get_ident() == self.thread:
            self.events.append(("pop",))
        if self.real:
            self.real.pop_range()

    def pushed(self) -> list[str]:
        return [e[1] for e in self.events if e[0] == "push"]

    def balanced(self) -> bool:
        depth = 0
        for e in self.events:
            depth += 1 if e[0] == "push" else -1
            if depth < 0:
                return False
        return depth == 0


@pytest.fixture
def recorder(monkeypatch):
    """A recording domain; the garbage collector is paused meanwhile: a collection would run the finalizers of
    descriptors that earlier tests left (cudnnDestroy... calls, ranged in this thread) at a moment that depends on
    everything the process did before, i.e. on which tests share the shard."""
    cudnn_nvtx.disable()  # ranges left on by anything before would go to that domain, not this one
    domain = Domain()
    monkeypatch.setitem(sys.modules, "nvtx", types.SimpleNamespace(get_domain=lambda name: domain))
    gc.collect()
    gc.disable()
    try:
        yield domain
    finally:
        cudnn_nvtx.disable()
        gc.enable()


def test_ranges_around_c_calls(recorder, tensor):
    fn = capi.cudnnSetTensor4dDescriptor
    fn(tensor, 0, 0, 1, 3, 4, 4)  # bound before: rerouted by enable()
    cudnn_nvtx.enable()
    assert cudnn_nvtx.enabled()
    fn(tensor, 0, 0, 1, 3, 4, 4)
    _bad_param(tensor)  # a failing call pops its range too
    size = ctypes.c_size_t()
    capi.cudnnGetTensorSizeInBytes.raw(tensor, byref(size))  # .raw read while enabled
    with cudnn_nvtx.scope("step"):
        capi.cudnnGetTensorSizeInBytes(tensor, byref(size))
    assert recorder.pushed() == ["cudnnSetTensor4dDescriptor", "cudnnSetTensor4dDescriptor",
                                 "cudnnGetTensorSizeInBytes", "step", "cudnnGetTensorSizeInBytes"]
    assert recorder.balanced()
    cudnn_nvtx.disable()
    fn(tensor, 0, 0, 1, 3, 4, 4)
    assert len(recorder.pushed()) == 5
    assert fn._call is fn._checked and not isinstance(capi.cudnnGetTensorSizeInBytes.raw, type(lambda: 0))


def test_ranges_are_this_threads_whatever_else_runs(recorder, tensor):
    """What made test_ranges_around_c_calls fail once in a parallel run: cuDNN calls of another thread, and garbage
    of earlier tests (a descriptor in a reference cycle, destroyed by a collection) while ranges are on."""
    from cudnn_py.core.descriptors import TensorDescriptor
    cycle: list = [TensorDescriptor((1, 2, 3, 4), "float32")]
    cycle.append(cycle)
    del cycle
    stop = threading.Event()

    def other():
        size = ctypes.c_size_t()
        while not stop.is_set():
            capi.cudnnGetTensorSizeInBytes(tensor, byref(size))
    t = threading.Thread(target=other)
    t.start()
    try:
        cudnn_nvtx.enable()
        for _ in range(200):
            [object() for _ in range(50)]  # allocations that would trigger a collection
            capi.cudnnSetTensor4dDescriptor(tensor, 0, 0, 1, 3, 4, 4)
    finally:
        stop.set()
        t.join()
    assert recorder.pushed() == ["cudnnSetTensor4dDescriptor"] * 200 and recorder.balanced()


def test_pythonic_operations_get_ranges(recorder):
    from cudnn_py.core.descriptors import TensorDescriptor
    cudnn_nvtx.enable()
    TensorDescriptor((2, 3, 4, 5), "float32").close()
    names = recorder.pushed()
    assert "cudnnCreateTensorDescriptor" in names and "cudnnDestroyTensorDescriptor" in names
    assert recorder.balanced()


def test_wrap_is_free_when_disabled():
    def f():
        return 1
    assert cudnn_nvtx.wrap("x", f) is f


def test_nvtx_from_the_environment(tmp_path):
    (tmp_path / "nvtx.py").write_text(textwrap.dedent("""
        class _D:
            def get_event_attributes(self, message=None, color=None):
                return message
            def push_range(self, a):
                print("PUSH", a)
            def pop_range(self):
                print("POP")
        def get_domain(name):
            return _D()
    """))
    source = "from cudnn_py import capi\ncapi.cudnnGetVersion()\n"
    p = _script(source, CUDNN_PY_NVTX="1", PYTHONPATH=f"{tmp_path}:{ROOT}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["PUSH", "cudnnGetVersion", "POP"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "nvtx.py").write_text("raise ImportError('not installed')\n")
    p = _script(source, CUDNN_PY_NVTX="1", PYTHONPATH=f"{broken}:{ROOT}")  # the variable must not break the program
    assert p.returncode == 0 and "CUDNN_PY_NVTX=1 ignored: NVTX ranges need the nvtx package" in p.stderr


def test_enable_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)
    with pytest.raises(ImportError, match="pip install nvtx"):
        cudnn_nvtx.enable()
    assert not cudnn_nvtx.enabled()


# ------------------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
def test_log_on_the_gpu(records, tensor):
    cudnn_log.enable("info")
    with cudnn_py.Handle():
        pass
    _bad_param(tensor)
    created = [r for r in records if r.cudnn_function == "cudnnCreate"]
    assert created and created[0].levelno == logging.INFO and created[0].cudnn_status == capi.CUDNN_STATUS_SUCCESS
    assert any(r.cudnn_function == "cudnnDestroy" for r in records)
    errors = [r for r in records if r.levelno == logging.ERROR]
    assert errors and errors[-1].cudnn_status == capi.CUDNN_STATUS_BAD_PARAM


@pytest.fixture
def real_recorder(monkeypatch):
    nvtx = pytest.importorskip("nvtx", reason="the GPU NVTX test needs the nvtx package")
    domain = Domain(nvtx.get_domain(cudnn_nvtx.DOMAIN))  # the real package's calls still happen
    monkeypatch.setattr(nvtx, "get_domain", lambda name: domain)
    cudnn_nvtx.enable()
    yield domain
    cudnn_nvtx.disable()


@pytest.mark.gpu
def test_nvtx_ranges_around_pythonic_operations(real_recorder, rng):
    with cudnn_py.Handle() as h:
        x = cudnn_py.to_device(rng.standard_normal((2, 4, 9, 9)).astype(np.float32))
        w = cudnn_py.to_device(rng.standard_normal((5, 4, 3, 3)).astype(np.float32))
        y = cudnn_py.convolution_forward(h, cudnn_py.Convolution(padding=1), x, w, engine="legacy")
        p = cudnn_py.pooling_forward(h, cudnn_py.Pooling("max", window=3), y)
        assert np.isfinite(p.to_numpy()).all()
    names = real_recorder.pushed()
    for name in ("cudnnCreate", "cudnnConvolutionForward", "cudnnPoolingForward", "cudnnDestroy"):
        assert name in names, (name, names)
    assert real_recorder.balanced()


@pytest.mark.gpu
def test_nvtx_range_around_graph_execute(real_recorder, rng):
    import cudnn_py.graph as G
    with cudnn_py.Handle() as h:
        g = G.Graph(io_dtype=np.float32, compute_dtype="float32")
        x, w = g.tensor((2, 4, 9, 9), name="x"), g.tensor((5, 4, 3, 3), name="w")
        y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
        g.build(h)
        out = cudnn_py.empty((2, 5, 9, 9), np.float32)
        out.fill_(np.nan)
        g.execute(h, {x: cudnn_py.to_device(rng.standard_normal(x.shape).astype(np.float32)),
                      w: cudnn_py.to_device(rng.standard_normal(w.shape).astype(np.float32)), y: out})
        assert np.isfinite(out.to_numpy()).all()
    assert "cudnnBackendExecute" in real_recorder.pushed() and real_recorder.balanced()
