"""Issue 34 on CPU: first calls from threads, a second destroy in the C layer, the last leaks and silences, the
command line's hints, typing that tools find."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# --- 1. first calls from several threads: no lazy import entered half-way ---

_THREADS = textwrap.dedent("""
    import sys, threading
    import cudnn_py
    errors = []
    N = 8
    barrier = threading.Barrier(N)

    def handle():
        try:
            cudnn_py.Handle().close()
        except cudnn_py.CudnnPyError:  # no GPU here: NoDeviceError, after the warm imports
            pass

    def descriptors():
        d = cudnn_py.graph.descriptors
        assert d.BackendDescriptor and d.destroy_descriptor
        from cudnn_py.graph.descriptors import BackendDescriptor, destroy_descriptor

    TOUCH = [lambda: cudnn_py.sdpa, lambda: cudnn_py.pooling_forward, lambda: cudnn_py.Graph,
             lambda: cudnn_py.convolution_forward, lambda: cudnn_py.BackendDescriptor,
             lambda: cudnn_py.activation_forward, handle, descriptors]

    def touch(i):
        barrier.wait()
        try:
            TOUCH[i]()
        except BaseException as e:
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=touch, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("\\n".join(errors))
    sys.exit(1 if errors else 0)
""")


#: forks N processes, each running _THREADS in a fresh cudnn_py: the parent imports only numpy and ml_dtypes (0.6 s of
#: each fresh process's 0.9 s; 20 fresh processes took 17 s on 2 cores)
_FORKS = textwrap.dedent("""
    import os, sys, traceback
    import numpy, ml_dtypes
    assert not any(m.split(".")[0] == "cudnn_py" for m in sys.modules)
    code = compile(sys.argv[1], "<threads>", "exec")
    pids = []
    for _ in range(int(sys.argv[2])):
        pid = os.fork()
        if pid == 0:
            try:
                exec(code, {"__name__": "__main__"})
                status = 0
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
                status = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        pids.append(pid)
    failed = sum(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) != 0 for p in pids)
    print(f"{failed} of {len(pids)} processes failed")
    sys.exit(1 if failed else 0)
""")


def test_first_calls_from_threads_import_nothing_half_way():
    """20 processes, each importing cudnn_py afresh, 8 threads each touching a different lazy name at once (a
    barrier): 0 errors (the code before 7d30acd failed in every process: partially initialized
    cudnn_py.graph.descriptors, KeyError 'cudnn_py.graph'; forked as here, in 20 of 20)."""
    r = subprocess.run([sys.executable, "-c", _FORKS, _THREADS, "20"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr


def test_handle_warms_the_lazy_imports_under_the_one_lock():
    code = textwrap.dedent("""
        import sys, cudnn_py
        from cudnn_py import _imports
        assert "cudnn_py.graph" not in sys.modules
        try:
            cudnn_py.Handle()
        except cudnn_py.CudnnPyError:
            pass
        missing = [m for m in _imports.WARM if m not in sys.modules]
        assert missing == [], missing
        assert _imports._warm
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_package_getattr_imports_under_the_lock(monkeypatch):
    import cudnn_py
    from cudnn_py import _imports
    entered = []

    class Spy:
        def __enter__(self):
            entered.append(1)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(_imports, "locked", lambda: Spy())
    monkeypatch.delitem(vars(cudnn_py), "pooling_output_shape", raising=False)
    assert cudnn_py.pooling_output_shape is not None
    assert entered  # (the module import may meet further lazy names, each under the lock too)


# --- 2. the C layer: a second destroy of a typed object is refused before C ---

_DOUBLE_DESTROY = textwrap.dedent("""
    from ctypes import byref
    import cudnn_py
    from cudnn_py.capi import *
    d = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(d))
    cudnnDestroyTensorDescriptor(d)
    try:
        cudnnDestroyTensorDescriptor(d)
    except cudnn_py.InvalidStateError as e:
        assert "cudnnDestroyTensorDescriptor" in str(e) and "destroyed already" in str(e), e
        print("refused")
""")


def test_second_destroy_of_a_descriptor_is_refused_not_an_abort():
    """Today cuDNN aborts the process (double free); run in a child so that today's failure is a failure here."""
    r = subprocess.run([sys.executable, "-c", _DOUBLE_DESTROY], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "refused", (r.returncode, r.stdout, r.stderr)


def test_destroyed_typed_objects_read_null_and_can_be_created_again():
    from ctypes import byref
    import cudnn_py
    from cudnn_py import capi
    d = capi.cudnnTensorDescriptor_t()
    for _ in range(3):  # create, destroy, create again into the same object: each round is a live descriptor
        capi.cudnnCreateTensorDescriptor(byref(d))
        assert d.value
        capi.cudnnSetTensor4dDescriptor(d, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 1, 3, 4, 4)
        capi.cudnnDestroyTensorDescriptor(d)
        assert d.value is None
        with pytest.raises(cudnn_py.InvalidStateError, match="cudnnDestroyTensorDescriptor"):
            capi.cudnnDestroyTensorDescriptor(d)
    f = capi.cudnnFilterDescriptor_t()
    capi.cudnnCreateFilterDescriptor(byref(f))
    capi.cudnnDestroyFilterDescriptor(f)
    with pytest.raises(cudnn_py.InvalidStateError, match="cudnnDestroyFilterDescriptor"):
        capi.cudnnDestroyFilterDescriptor(f)
    b = capi.cudnnBackendDescriptor_t()
    capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_TENSOR_DESCRIPTOR, byref(b))
    capi.cudnnBackendDestroyDescriptor(b)
    with pytest.raises(cudnn_py.InvalidStateError, match="cudnnBackendDestroyDescriptor"):
        capi.cudnnBackendDestroyDescriptor(b)


def test_a_never_created_null_object_still_goes_to_c():
    """Only an object this layer destroyed is refused: a NULL one nobody destroyed is cuDNN's to judge."""
    from cudnn_py import capi
    capi.cudnnDestroyTensorDescriptor(capi.cudnnTensorDescriptor_t())  # cuDNN accepts NULL


def test_pythonic_descriptors_close_after_a_capi_destroy_is_refused():
    """The Pythonic owner's guard still comes first: capi refuses an owned address, close() destroys once."""
    import cudnn_py
    from cudnn_py import capi
    t = cudnn_py.TensorDescriptor((1, 3, 4, 4), "float32")
    with pytest.raises(cudnn_py.CArgumentError, match="belongs to a cudnn_py"):
        capi.cudnnDestroyTensorDescriptor(t.ptr)
    t.close()
    t.close()


# --- 3. the last leaks and silences: a CudnnPyError saying what is wrong, before C ---

@pytest.mark.parametrize("shape, error", [
    (None, "InvalidTypeError"), ("abc", "InvalidTypeError"), (b"abcd", "InvalidTypeError"),
    ((-1, 3, 8, 8), "InvalidValueError"), ((1, "3", 8, 8), "InvalidTypeError"), ((1, 3), "InvalidValueError"),
])
def test_batchnorm_param_shape_refuses_what_is_no_shape(shape, error):
    import cudnn_py
    with pytest.raises(getattr(cudnn_py, error), match="shape"):
        cudnn_py.batchnorm_param_shape(shape)
    assert cudnn_py.batchnorm_param_shape((2, 3, 8, 8)) == (1, 3, 1, 1)
    assert cudnn_py.batchnorm_param_shape([2, 3, 4, 8, 8], "per_activation") == (1, 3, 4, 8, 8)


@pytest.mark.parametrize("call", ["empty", "zeros", "DeviceArray", "normalize_shape"])
@pytest.mark.parametrize("shape", ["abc", b"ab", "12", bytearray(b"1")])
def test_a_string_shape_is_refused_not_read_character_by_character(call, shape):
    import cudnn_py
    from cudnn_py.strided import normalize_shape
    fn = {"empty": lambda: cudnn_py.empty(shape), "zeros": lambda: cudnn_py.zeros(shape),
          "DeviceArray": lambda: cudnn_py.DeviceArray(1 << 40, shape, "float32", device_id=0),
          "normalize_shape": lambda: normalize_shape(shape)}[call]
    with pytest.raises(cudnn_py.InvalidTypeError, match="shape must be an int or a sequence of ints"):
        fn()


@pytest.mark.parametrize("cls", ["CudnnError", "CudnnBadParamError", "CudnnNotSupportedError", "CudaError",
                                 "CudaOutOfMemoryError", "NoDeviceError"])
@pytest.mark.parametrize("status", [None, "x", 1.5])
def test_exception_constructors_take_an_unknown_status(cls, status):
    import pickle
    import cudnn_py
    e = getattr(cudnn_py, cls)("cudnnSomething", status)
    assert "cudnnSomething" in str(e)
    assert isinstance(pickle.loads(pickle.dumps(e)), getattr(cudnn_py, cls))
    from cudnn_py.errors import error_class
    assert error_class(status) is cudnn_py.CudnnError


@pytest.mark.parametrize("database", ["abc", b"abc", Path("x.sqlite"), 3, 1.5, ["a"]])
def test_algorithm_cache_refuses_what_is_no_database(database):
    import cudnn_py
    with pytest.raises(cudnn_py.InvalidTypeError, match="database must be"):
        cudnn_py.AlgorithmCache(database)
    with pytest.raises(cudnn_py.InvalidTypeError, match="database must be"):
        cudnn_py.AlgorithmCache().use_database(database)


def test_algorithm_cache_still_takes_a_database_a_callable_or_none():
    import cudnn_py
    from cudnn_py.tuning import TuningDatabase
    db = TuningDatabase()  # None: a private database in memory
    for database in (None, db, lambda: db):
        cudnn_py.AlgorithmCache(database)


def test_operations_on_a_closed_handle_raise_closed_error():
    """A closed Handle (the state close() leaves; made here without a GPU) is ClosedError for pooling and others."""
    import cudnn_py
    from cudnn_py.handle import Handle
    h = Handle.__new__(Handle)
    h._ptr, h.device, h.cache = None, 0, {}
    x = cudnn_py.DeviceArray(1 << 40, (1, 1, 4, 4), "float32", device_id=0)
    for call in (lambda: cudnn_py.pooling_forward(h, cudnn_py.Pooling("max", window=2), x),
                 lambda: cudnn_py.activation_forward(h, cudnn_py.Activation("relu"), x),
                 lambda: cudnn_py.softmax_forward(h, x)):
        with pytest.raises(cudnn_py.ClosedError, match="closed"):
            call()


def test_deprecated_convolution_descriptor_close_is_a_no_op():
    import cudnn_py
    from cudnn_py.ops.convolution import convolution_descriptor
    with pytest.warns(DeprecationWarning):
        conv = convolution_descriptor(padding=1)
    conv.close()
    conv.close()
    with pytest.warns(DeprecationWarning):
        with cudnn_py.ConvolutionDescriptor(padding=1) as c:
            assert c.padding == 1


@pytest.mark.parametrize("dtype", ["int8", "uint8", "bfloat16"])
def test_convolution_refuses_a_compute_type_cudnn_refuses(dtype):
    import warnings
    import cudnn_py
    with pytest.raises(cudnn_py.InvalidValueError, match="compute_dtype"):
        cudnn_py.Convolution(compute_dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(cudnn_py.InvalidValueError, match="compute_dtype"):
            cudnn_py.ConvolutionDescriptor(compute_type=dtype)
    for ok in ("float32", "float64", "float16", "int32", None):
        cudnn_py.Convolution(compute_dtype=ok)


# --- 4. command line and hints ---

def test_import_cudnn_py_torch_without_torch_names_the_matching_cuda_index():
    code = "import sys; sys.modules['torch'] = None\ntry:\n    import cudnn_py.torch\nexcept ImportError as e:\n" \
           "    print(e)\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--index-url https://download.pytorch.org/whl/cu1" in r.stdout, r.stdout
    assert "(pip install torch)" not in r.stdout


def test_torch_install_follows_the_installed_cuda_major(monkeypatch):
    from cudnn_py import _install
    monkeypatch.setattr(_install, "cuda_major", lambda: 13)
    assert "whl/cu130" in _install.torch_install()
    monkeypatch.setattr(_install, "cuda_major", lambda: 12)
    assert "whl/cu12" in _install.torch_install()
    monkeypatch.setattr(_install, "cuda_major", lambda: None)
    hint = _install.torch_install()
    assert "whl/cu12" in hint and "whl/cu130" in hint


def test_a_non_editable_install_from_a_checkout_names_the_checkout(tmp_path, monkeypatch):
    import importlib.metadata
    import json
    from cudnn_py import _install
    site = tmp_path / "site-packages"
    (site / "cudnn_py").mkdir(parents=True)
    checkout = tmp_path / "my checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text("[project]\nname = 'cudnn-py'\n")

    class Dist:
        def locate_file(self, name):
            return site / name

        def read_text(self, name):
            assert name == "direct_url.json"
            return json.dumps({"url": checkout.as_uri(), "dir_info": {}})

    monkeypatch.setattr(_install, "_ROOT", site)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())
    _install.installed_from.cache_clear()
    try:
        hint = _install.pip_install("cu12")
        assert hint == f'pip install "{checkout}[cu12]"', hint
        checkout.joinpath("pyproject.toml").unlink()  # the checkout is gone: the published package
        _install.installed_from.cache_clear()
        assert _install.pip_install("cu12") == "pip install 'cudnn-py[cu12]'"
    finally:
        _install.installed_from.cache_clear()


def test_no_device_error_keeps_its_cause_in_the_message_not_the_chain():
    code = textwrap.dedent("""
        import traceback, cudnn_py
        from cudnn_py.streams import missing_device
        if missing_device(0) is None:
            print("GPU")
            raise SystemExit(0)
        try:
            cudnn_py.Handle()
        except cudnn_py.NoDeviceError as e:
            assert e.__cause__ is None and e.__suppress_context__, (e.__cause__, e.__context__)
            assert "(cause: " in str(e), str(e)
            assert e.cause is not None
            print(len(traceback.format_exception(e)))
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.strip() == "GPU":
        pytest.skip("a GPU is visible: no NoDeviceError to look at")
    assert int(r.stdout.strip()) < 12, r.stdout  # was 35-39 lines with the chained cuda.pathfinder traceback


def test_readme_no_longer_says_set_tensor_4d_descriptor_warns():
    from cudnn_py import capi
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "`cudnnSetTensor4dDescriptor` is one of the functions cuDNN 9 marks deprecated" not in text
    assert not capi.cudnnSetTensor4dDescriptor.deprecated and not capi.cudnnCreateTensorDescriptor.deprecated
    assert capi.cudnnCreateConvolutionDescriptor.deprecated  # the example the README names instead


# --- 5. typing that tools find: the graph builder's pointwise ops, matmul and conv_fprop return Tensor ---

_GRAPH_SCRIPT = textwrap.dedent("""
    from __future__ import annotations

    import cudnn_py
    from cudnn_py.graph import Graph, Tensor


    def block(g: Graph, x: Tensor, w: Tensor, b: Tensor, m: Tensor) -> Tensor:
        y = g.conv_fprop(x, w, padding=1)
        y = g.bias(y, b)
        y = g.scale(y, 0.5)
        y = g.add(y, 1.0)
        y = g.sub(y, x)
        y = g.mul(y, y)
        y = g.div(y, 2.0)
        y = g.relu(y)
        y = g.gelu(y, approximate="tanh")
        y = g.silu(y)
        y = g.tanh(y)
        y = g.sigmoid(y)
        y = g.exp(y)
        y = g.log(y)
        z = g.matmul(m, m)
        reveal_type(g.conv_fprop(x, w))
        reveal_type(g.matmul(m, m))
        reveal_type(g.add(y, 1.0))
        reveal_type(g.relu(y))
        reveal_type(z)
        return y


    def build() -> Graph:
        return cudnn_py.Graph()
""")


def test_graph_builder_pointwise_ops_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extra: "
                        "pip install -e '.[test]' --config-settings editable_mode=compat")
    script = tmp_path / "user_graph.py"
    script.write_text(_GRAPH_SCRIPT)
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict",
                        "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), "--show-error-codes",
                        "--no-error-summary", str(script)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    out = r.stdout
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert errors == [], out
    revealed = [line for line in out.splitlines() if "Revealed type" in line]
    assert len(revealed) == 5 and all("cudnn_py.graph.graph.Tensor" in line for line in revealed), out
