"""First calls from several threads import nothing half-way: the package's lazy names, the
handle's warm imports and the package ``__getattr__`` all under the one import lock."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cudnn_py

from helpers import threads_join

ROOT = Path(__file__).resolve().parents[1]


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

""") + threads_join("touch")


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


