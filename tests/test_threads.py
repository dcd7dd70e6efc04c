"""Threads: the shared caches under contention (CPU), and 8 threads each with its own Handle and stream running a
mixed workload at once, results equal to a serial run (GPU). Sharing one Handle between threads that run at once is
unsupported (cuDNN's rule, documented in cudnn_py.core.handle) and not detected."""
from __future__ import annotations

import time

import numpy as np
import pytest

import cudnn_py.core.descriptors as D
from cudnn_py.core import caches
from cudnn_py.ops.convolution import Convolution
from cudnn_py.ops import ctc, spatial_transformer
from helpers import hammer

THREADS = 8


def test_descriptor_caches_under_8_threads_past_eviction():
    """> 4096 distinct shapes per cache (so entries are evicted while other threads insert and look up): no
    KeyError / 'dictionary changed size', and every descriptor handed out describes what was asked for."""
    caches.clear()
    per_thread = 700  # 8 * 700 = 5600 distinct shapes > the 4096-entry bound

    def work(i):
        for k in range(per_thread):
            n = 1 + i * per_thread + k
            shape = (n, 3, 4, 4)
            t = D.TensorDescriptor.shared(shape, np.float32)
            assert t.shape == shape
            f = D.FilterDescriptor.shared((n % 64 + 1, 3, 3, 3), np.float32)
            assert f.shape[0] == n % 64 + 1
            if k % 7 == 0:
                c = Convolution(padding=n % 5, stride=1 + n % 3)._shared_descriptor(2, "float32", None)
                assert c.padding == (n % 5, n % 5)
                assert spatial_transformer.SpatialTransformer.shared((1, 1, 1 + n % 300, 2)).shape[2] == 1 + n % 300
                assert ctc._ctc_desc("softmax", "zero_oob", 1 + n % 255).max_label_length == 1 + n % 255
            if k % 50 == 0 and i == 0:
                caches.clear()
    errors = hammer(work)
    assert not errors, f"{len(errors)} thread errors, first: {errors[0]!r}"
    assert all(n <= caches.DEFAULT_MAXSIZE for n in caches.info().values()) and len(spatial_transformer._CACHE) <= 256


def test_shared_cache_insert_is_safe_without_the_gil_yielding_luck():
    """The cache function itself: 8 threads inserting distinct keys into one small bounded cache."""
    cache = caches.Cache("test.descriptors", 64)

    class _Fake:
        _shared = False

    errors = hammer(lambda i: [D._shared(cache, (i, k), _Fake) for k in range(3000)])
    assert not errors, errors[:1]
    assert len(cache) <= 64


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_eight_threads_each_with_a_handle_and_stream_match_serial():
    import cudnn_py as cudnn
    from helpers import poisoned_allocations
    from workload import assert_same, inputs, run

    host = inputs()
    with poisoned_allocations():
        with cudnn.Handle() as h:
            want = run(h, host)
        results: dict[int, list] = {}
        deadline = time.monotonic() + 3.0

        def work(i):
            with cudnn.Handle(stream=cudnn.new_stream()) as hh:
                results[i] = []
                while True:
                    results[i].append(run(hh, host))
                    if time.monotonic() > deadline:
                        break
        errors = hammer(work)
    assert not errors, f"{len(errors)} thread errors, first: {errors[0]!r}"
    rounds = sum(len(r) for r in results.values())
    print(f"{THREADS} threads, {rounds} workload rounds in 3 s")
    assert len(results) == THREADS and rounds >= THREADS
    for i, rs in results.items():
        for j, got in enumerate(rs):
            assert_same(got, want, f"thread {i} round {j}")


def test_owner_registry_under_8_threads():
    """8 threads making, closing and dropping descriptors (legacy and backend) at once, and destroying raw ones of
    their own through capi: no owned descriptor is refused to its owner, no raw one refused to its maker, and the
    registry ends with none of theirs."""
    import ctypes
    import gc
    from cudnn_py.clib import binding as _binding
    from cudnn_py import capi
    from cudnn_py.graph import BackendDescriptor
    gc.collect()
    before = len(_binding._OWNED)

    def work(i):
        for k in range(400):
            d = D.TensorDescriptor((1 + (i * 400 + k) % 50, 3, 4, 4), np.float32)
            b = BackendDescriptor("TENSOR")
            raw = capi.cudnnTensorDescriptor_t()
            capi.cudnnCreateTensorDescriptor(ctypes.byref(raw))
            capi.cudnnDestroyTensorDescriptor(raw)  # not owned: C's rules, never refused
            if k % 2:
                d.close()
                b.close()
    errors = hammer(work, THREADS)
    assert not errors, errors[:3]
    gc.collect()
    assert len(_binding._OWNED) <= before
