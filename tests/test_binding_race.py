"""Issue 46 item 1: the C layer's first call of a function from several threads at once.

A ``CFunction`` binds on its first call; the old ``_bind`` set ``_fn`` (which tells other threads "bound") before
``_route`` set ``_inner``, so a second thread making the same first call meanwhile raised ``AttributeError: 'CFunction'
object has no attribute '_inner'`` (12 to 20 of 30 processes here at 834d57a). Each fresh process below has 8
threads make the first create/set/destroy calls of 12 descriptor kinds, each call started by a barrier, with a short
GIL switch interval so that a thread switch inside the binding is likely. Runs on a CPU: creating and setting these
descriptors needs no GPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import threads_join

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 30

_FIRST_CALLS = textwrap.dedent("""
    import sys, threading, warnings
    from ctypes import byref
    warnings.simplefilter("ignore")  # most of these functions are deprecated in cuDNN 9
    sys.setswitchinterval(1e-6)
    import cudnn_py.capi as c

    KINDS = [  # descriptor kind, its setter, the setter's arguments after the descriptor
        ("Tensor", "cudnnSetTensor4dDescriptor", (0, 0, 1, 2, 3, 4)),
        ("Filter", "cudnnSetFilter4dDescriptor", (0, 0, 1, 2, 3, 3)),
        ("Convolution", "cudnnSetConvolution2dDescriptor", (1, 1, 1, 1, 1, 1, 0, 0)),
        ("Pooling", "cudnnSetPooling2dDescriptor", (0, 0, 2, 2, 0, 0, 2, 2)),
        ("Activation", "cudnnSetActivationDescriptor", (1, 0, 0.0)),
        ("LRN", "cudnnSetLRNDescriptor", (5, 1e-4, 0.75, 2.0)),
        ("OpTensor", "cudnnSetOpTensorDescriptor", (0, 0, 0)),
        ("ReduceTensor", "cudnnSetReduceTensorDescriptor", (0, 0, 0, 0, 0)),
        ("CTCLoss", "cudnnSetCTCLossDescriptor", (0,)),
        ("SpatialTransformer", "cudnnSetSpatialTransformerNdDescriptor", (0, 0, 4, [1, 1, 2, 2])),
        ("SeqData", "cudnnSetSeqDataDescriptor", (0, 4, [2, 1, 1, 4], [0, 1, 2, 3], 1, [2], None)),
        ("RNNData", "cudnnSetRNNDataDescriptor", (0, 0, 2, 1, 4, [2], None)),
    ]
    N = 8
    barrier = threading.Barrier(N, timeout=60)
    errors = []

    def first_calls(i):
        for kind, setter, args in KINDS:
            d = getattr(c, f"cudnn{kind}Descriptor_t")()
            for name, call_args in ((f"cudnnCreate{kind}Descriptor", (byref(d),)), (setter, (d, *args)),
                                    (f"cudnnDestroy{kind}Descriptor", (d,))):
                try:
                    barrier.wait()  # the 8 threads make each first call at once
                    getattr(c, name)(*call_args)
                except BaseException as e:
                    errors.append(f"thread {i}, {name}: {type(e).__name__}: {e}")

""") + threads_join("first_calls")


def _process(_) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _FIRST_CALLS], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    return "" if r.returncode == 0 else (r.stdout + r.stderr).strip()


def test_first_calls_of_12_descriptor_kinds_from_8_threads_in_30_fresh_processes():
    """0 errors in 30 fresh processes, 8 threads each making the first create/set/destroy calls of 12 descriptor
    kinds at once."""
    failures = [f for f in map(_process, range(PROCESSES)) if f]  # one at a time: more races than two at once
    assert not failures, f"{len(failures)} of {PROCESSES} processes failed; the first:\n{failures[0]}"


def _cost() -> None:
    """The per-call cost of a bound call (checked and ``.raw``) and of a create/destroy pair, in thread CPU time (a
    loaded machine's wall time varies more than the difference): ``python tests/test_binding_race.py``."""
    import ctypes
    import time
    import timeit
    import warnings
    warnings.simplefilter("ignore")
    from cudnn_py import capi
    d, e = capi.cudnnTensorDescriptor_t(), capi.cudnnTensorDescriptor_t()
    create, destroy, set4d = (capi.cudnnCreateTensorDescriptor, capi.cudnnDestroyTensorDescriptor,
                              capi.cudnnSetTensor4dDescriptor)
    create(ctypes.byref(e))
    raw = set4d.raw

    def best(call, n=200_000):
        return min(timeit.repeat(call, number=n, repeat=7, timer=time.thread_time)) / n * 1e6
    print(f"cudnnSetTensor4dDescriptor: {best(lambda: set4d(e, 0, 0, 1, 2, 3, 4)):.3f} us checked, "
          f"{best(lambda: raw(e, 0, 0, 1, 2, 3, 4)):.3f} us raw; create/destroy pair: "
          f"{best(lambda: (create(ctypes.byref(d)), destroy(d)), 50_000):.3f} us")


if __name__ == "__main__":
    _cost()


def test_a_first_call_inside_another_binding_does_not_deadlock(monkeypatch):
    """A collected descriptor's finalizer can make a destroy's first call in the middle of another function's binding
    (which compiles code, so the garbage collector may run there): the bind lock must let its own thread in. With a
    plain Lock the suite hung in ``SpatialTransformer()``'s first call (its binding collected a descriptor)."""
    import threading

    from cudnn_py.clib import binding as _binding
    from cudnn_py import capi
    fn = capi.cudnnGetVersion
    monkeypatch.setattr(fn, "_fn", None)  # as if never called
    done: list = []

    def bind_inside_a_binding() -> None:
        with _binding._BIND_LOCK:
            fn._bind()
        done.append(fn())

    t = threading.Thread(target=bind_inside_a_binding, daemon=True)
    t.start()
    t.join(10)
    assert done and done[0] > 0
