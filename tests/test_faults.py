"""Faults in the middle of a call (CPU): a KeyboardInterrupt while ``algo="fastest"`` measures leaves the algorithm
cache and the handle's plan cache as they were, and the next call measures again and completes; out of memory on
the GPU is tests/test_memory_gpu.py's."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.calls import algorithms as alg
from cudnn_py import capi
from cudnn_py.core.caches import handle_cache
from cudnn_py.ops import conv_calls
from helpers import Reached, StandIn, fake


def _record(algo: int, time_ms: float) -> alg.AlgoPerf:
    return alg.AlgoPerf("forward", capi.cudnnConvolutionFwdAlgo_t(algo), capi.CUDNN_STATUS_SUCCESS, time_ms, 0,
                        capi.CUDNN_DETERMINISTIC, capi.CUDNN_DEFAULT_MATH)


def test_keyboard_interrupt_during_an_autotune_leaves_the_caches_consistent(monkeypatch):
    cache = alg.AlgorithmCache(None)  # a private, in-memory store
    monkeypatch.setattr(alg, "algorithm_cache", cache)
    timings = []

    def measure(handle, g, direction, limit, in_ptrs):
        timings.append(direction)
        if len(timings) == 1:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the timing runs
        return [_record(1, 0.2), _record(0, 0.5), _record(2, 0.9)]  # Find's order: fastest first
    monkeypatch.setattr(conv_calls, "_measure", measure)
    monkeypatch.setattr(alg, "workspace_size", lambda *args: 0)
    h, conv = StandIn(), cudnn.Convolution(padding=1)
    x, w = fake((2, 4, 8, 8)), fake((3, 4, 3, 3))
    generation = cache.generation

    with pytest.raises(KeyboardInterrupt):
        cudnn.convolution_forward(h, conv, x, w, y=fake((2, 3, 8, 8)), autotune=True, engine="legacy")
    assert not cache._data and cache.generation == generation  # nothing half-recorded
    assert len(handle_cache(h, conv_calls.PLANS)) == 0  # no plan made from an unfinished measurement

    with pytest.raises(Reached):  # measured again, completely, then the convolution runs
        cudnn.convolution_forward(h, conv, x, w, y=fake((2, 3, 8, 8)), autotune=True, engine="legacy")
    assert timings == ["forward", "forward"]
    (chosen,) = cache._data.values()
    assert chosen.algo == capi.cudnnConvolutionFwdAlgo_t(1)  # the fastest of the second measurement
    (plan,) = handle_cache(h, conv_calls.PLANS).values()
    assert plan.algo == chosen.algo

    with pytest.raises(Reached):  # and reused: no third measurement
        cudnn.convolution_forward(h, conv, x, w, y=fake((2, 3, 8, 8)), autotune=True, engine="legacy")
    assert timings == ["forward", "forward"]


def test_keyboard_interrupt_while_a_descriptor_is_made_leaks_nothing(monkeypatch):
    """Interrupted between cuDNN's create and set: the half-made descriptor is destroyed (its owner's finalizer),
    and the shared cache holds no entry for it."""
    import gc
    from cudnn_py.clib import binding as _binding
    from cudnn_py.core import descriptors as D
    calls = []
    real = capi.cudnnSetTensorNdDescriptor

    def interrupted(*args):
        calls.append(args)
        raise KeyboardInterrupt
    monkeypatch.setattr(capi, "cudnnSetTensorNdDescriptor", interrupted)
    with pytest.raises(KeyboardInterrupt):
        D.TensorDescriptor.shared((3, 5, 7, 11), np.float32)
    monkeypatch.setattr(capi, "cudnnSetTensorNdDescriptor", real)
    (args,) = calls
    address = args[0].value
    gc.collect()
    assert args[0].value is None and address not in _binding._OWNED  # destroyed, once, and forgotten
    d = D.TensorDescriptor.shared((3, 5, 7, 11), np.float32)  # made now, completely
    assert d.shape == (3, 5, 7, 11)
