"""Issue 40 item 1: the first calls of a fresh process from several threads at once never meet a half-imported
cuda.core.

cuda.core's ``__init__`` copies its versioned module's namespace (``__spec__`` included) into its own and only then
imports its classes; Python's import lock for the module tests ``__spec__._initializing``, so a second thread's
``import cuda.core`` returns the half-filled module. The CPU test stands a module with that shape in for cuda.core; the
GPU test is the issue's own bar: N fresh processes (``CUDNN_PY_FIRST_CALLS_PROCS``, default 8; 100 for the bar), each
importing only torch and cudnn_py, 8 threads each making a handle and one first call at once.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import threads_join

ROOT = Path(__file__).resolve().parents[1]

# --- CPU: a cuda.core stand-in that fills its namespace late, imported through the package's helpers -------------

_SLOW_CORE = textwrap.dedent("""
    import importlib, time
    # what cuda.core does: the versioned module's namespace (its __spec__, whose _initializing is False) first ...
    globals().update(importlib.import_module(".cu99", __package__).__dict__)
    time.sleep(0.3)
    # ... its classes later
    class Stream:
        pass
""")

_RACE = textwrap.dedent("""
    import sys, threading, time
    import cudnn_py
    from cudnn_py.core import streams
    assert "cuda.core" not in sys.modules
    N = 8
    barrier = threading.Barrier(N)
    errors = []

    def first(i):
        barrier.wait()
        # the others arrive while thread 0 is inside the import, past the namespace copy (as on the GPU machine,
        # where a thread's first call comes within the hundreds of milliseconds cuda.core's classes take to import)
        while i and getattr(sys.modules.get("cuda.core"), "__name__", "") != "cuda.core.cu99":
            time.sleep(0.001)
        try:
            if i % 2:
                streams.driver()
            core = streams.cuda_core()
            assert core.Stream.__name__ == "Stream" and streams._StreamType is core.Stream
            assert core.__file__.endswith("cu99/__init__.py"), core.__file__  # the stand-in, not the real one
        except BaseException as e:
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

""") + threads_join("first")


def test_threads_importing_cuda_core_at_once_never_get_it_half_filled(tmp_path):
    """8 threads of a fresh process ask streams.cuda_core() / driver(), 7 of them while the first is inside the import
    (0.3 s between the namespace copy and the classes): every thread gets the complete module (the old code raised
    AttributeError 'Stream' in those 7 threads)."""
    core = tmp_path / "cuda" / "core"
    (core / "cu99").mkdir(parents=True)
    (core / "__init__.py").write_text(_SLOW_CORE)
    (core / "cu99" / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    r = subprocess.run([sys.executable, "-c", _RACE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


# --- GPU: the bar --------------------------------------------------------------------------------------------

_FIRST_CALLS = textwrap.dedent("""
    import faulthandler, sys, threading
    import torch
    import cudnn_py
    N = 8
    barrier = threading.Barrier(N)
    errors = []

    def convolution(h):
        x = torch.randn(2, 3, 8, 8, device="cuda")
        w = torch.randn(4, 3, 3, 3, device="cuda")
        y = cudnn_py.convolution_forward(h, cudnn_py.Convolution(padding=1), x, w)
        h.synchronize()
        ref = torch.nn.functional.conv2d(x, w, padding=1)
        return torch.as_tensor(y, device="cuda"), ref

    def sdpa(h):
        q, k, v = (torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        o = cudnn_py.sdpa(h, q, k, v)
        h.synchronize()
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return torch.as_tensor(o, device="cuda"), ref

    def pooling(h):
        x = torch.randn(2, 3, 8, 8, device="cuda")
        y = cudnn_py.pooling_forward(h, cudnn_py.Pooling("max", window=2), x)
        h.synchronize()
        return torch.as_tensor(y, device="cuda"), torch.nn.functional.max_pool2d(x, 2)

    def relu(h):
        x = torch.randn(2, 3, 8, 8, device="cuda")
        y = cudnn_py.activation_forward(h, "relu", x)
        h.synchronize()
        return torch.as_tensor(y, device="cuda"), torch.relu(x)

    FAMILIES = [convolution, sdpa, pooling, relu]

    def first(i):
        barrier.wait()
        try:
            with cudnn_py.Handle() as h:
                got, ref = FAMILIES[i % 4](h)
                got = got.float()
                assert got.shape == ref.shape, (got.shape, ref.shape)
                assert bool(torch.isfinite(got).all()), "not finite"
                torch.testing.assert_close(got, ref.float(), atol=2e-2, rtol=2e-2)
        except BaseException as e:
            errors.append(f"thread {i} ({FAMILIES[i % 4].__name__}): {type(e).__name__}: {e}")

    faulthandler.dump_traceback_later(HANG_S, exit=True)  # a hang shows every thread's stack, then exits
""") + threads_join("first")


#: seconds after which a process that has not finished dumps its threads' stacks and exits
HANG_S = int(os.environ.get("CUDNN_PY_FIRST_CALLS_HANG_S", "240"))


def _one_process(_: int) -> str:
    r = subprocess.run([sys.executable, "-c", _FIRST_CALLS.replace("HANG_S", str(HANG_S))], cwd=ROOT,
                       capture_output=True, text=True, timeout=HANG_S + 60)
    return "" if r.returncode == 0 else f"rc {r.returncode}: {(r.stdout + r.stderr).strip()[-6000:]}"


@pytest.mark.gpu
def test_first_calls_of_four_families_from_8_threads_in_fresh_processes():
    """CUDNN_PY_FIRST_CALLS_PROCS fresh processes (in parallel, CUDNN_PY_FIRST_CALLS_JOBS at once): 0 errors."""
    n = int(os.environ.get("CUDNN_PY_FIRST_CALLS_PROCS", "8"))
    jobs = int(os.environ.get("CUDNN_PY_FIRST_CALLS_JOBS", str(min(16, os.cpu_count() or 1))))
    with ThreadPoolExecutor(jobs) as pool:
        failures = [f for f in pool.map(_one_process, range(n)) if f]
    assert failures == [], f"{len(failures)} of {n} processes failed:\n" + "\n---\n".join(failures[:5])
