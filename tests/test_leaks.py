"""Leaks: descriptors made and dropped by the hundred thousand keep the process's resident memory flat (CPU, real
library); 10,000 GPU operation cycles keep device memory flat."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import cudnn_py.core.descriptors as D
from cudnn_py.clib import binding as _binding
from cudnn_py.graph import BackendDescriptor

_PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20
#: allowed growth of resident memory after the warm-up (allocator noise, not a leak: a leak of 100,000 descriptors
#: of a few hundred bytes each on the C side would be tens of MiB)
SLACK = 4 * MIB


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _flat(make_and_drop, n: int, what: str) -> int:
    """Run ``make_and_drop(i)`` ``n`` times after a warm-up; returns the RSS growth, asserted below SLACK."""
    for i in range(n // 10):  # warm-up: caches, allocator arenas, lazy bindings
        make_and_drop(i)
    gc.collect()
    before, owned = _rss(), len(_binding._OWNED)
    for i in range(n):
        make_and_drop(i)
    gc.collect()
    grown = _rss() - before
    print(f"{what}: {n} made and dropped, RSS {before / MIB:.1f} MiB -> {(before + grown) / MIB:.1f} MiB")
    assert grown < SLACK, f"{what}: resident memory grew {grown / MIB:.1f} MiB over {n} descriptors"
    assert len(_binding._OWNED) <= owned, f"{what}: the C layer's owner registry kept destroyed descriptors"
    return grown


def _tensor_closed(i):
    D.TensorDescriptor((1 + i % 64, 3, 8, 8), np.float32).close()


def _tensor_with(i):
    with D.TensorDescriptor((1 + i % 64, 3, 8, 8), np.float16) as t:
        assert t.ptr


def _tensor_gc(i):
    D.TensorDescriptor((1 + i % 64, 3, 8, 8), np.float64)


@pytest.mark.parametrize("how", [_tensor_closed, _tensor_with, _tensor_gc], ids=["closed", "with", "gc"])
def test_100k_tensor_descriptors_keep_rss_flat(how):
    _flat(how, 100_000, f"tensor descriptors ({how.__name__})")


def _backend(i):
    # not finalized: finalizing a tensor needs the engines library (a driver); creating and setting does not
    return BackendDescriptor("TENSOR", data_type=0, dimensions=[1, 1 + i % 32, 4, 4],
                             strides=[16 * (1 + i % 32), 16, 4, 1], unique_id=1 + i, byte_alignment=16)


def _backend_closed(i):
    _backend(i).close()


def _backend_with(i):
    with _backend(i) as d:
        assert not d.closed


def _backend_gc(i):
    _backend(i)


@pytest.mark.parametrize("how", [_backend_closed, _backend_with, _backend_gc], ids=["closed", "with", "gc"])
def test_20k_backend_descriptors_keep_rss_flat(how):
    _flat(how, 20_000, f"backend descriptors ({how.__name__})")


@pytest.mark.gpu
@pytest.mark.serial
def test_10k_op_cycles_keep_device_memory_flat():
    """10,000 cycles of a legacy convolution, a graph executor run and an RNN forward: device memory in use (driver's
    total - free) is the same after as after the first 100 (the stream-ordered pool reuses its blocks)."""
    import cudnn_py as cudnn
    from cuda.bindings import driver
    from cudnn_py import graph as G

    def used():
        err, free, total = driver.cuMemGetInfo()
        assert int(err) == 0
        return total - free

    with cudnn.Handle() as h:
        s, rng = h.stream, np.random.default_rng(1)
        x = cudnn.to_device(rng.standard_normal((4, 8, 16, 16)).astype(np.float32), stream=s)
        w = cudnn.to_device(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), stream=s)
        conv = cudnn.Convolution(padding=1)
        g = G.Graph(io_dtype="float32", compute_dtype="float32")
        ta, tb = g.tensor((1, 16, 16), name="a"), g.tensor((1, 16, 16), name="b")
        tc = g.matmul(ta, tb).set_output(True).set_name("c")
        g.build(h)
        a = cudnn.to_device(rng.standard_normal((1, 16, 16)).astype(np.float32), stream=s)
        c = cudnn.empty((1, 16, 16), np.float32, stream=s)
        ex = g.executor(h, ta, tb, tc)
        rnn = cudnn.RNN("gru", 8, 8)
        wts = rnn.new_weights(h)
        seq = cudnn.to_device(rng.standard_normal((4, 2, 8)).astype(np.float32), stream=s)

        def cycle():
            cudnn.convolution_forward(h, conv, x, w)
            ex(a, a, c)
            cudnn.rnn_forward(h, rnn, seq, wts)
        for _ in range(100):
            cycle()
        h.synchronize()
        gc.collect()
        before = used()
        for _ in range(10_000):
            cycle()
        h.synchronize()
        gc.collect()
        after = used()
    print(f"device memory in use: {before / MIB:.1f} MiB after warm-up, {after / MIB:.1f} MiB after 10,000 cycles")
    assert after - before <= 8 * MIB, f"device memory grew {(after - before) / MIB:.1f} MiB over 10,000 cycles"
