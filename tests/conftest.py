"""Shared fixtures. Tests marked ``gpu`` skip where no GPU is visible, unless CUDNN_PY_REQUIRE_GPU=1 (then they run and fail)."""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest

# every gpu-marked test runs with each device allocation poisoned (NaN / an int sentinel): an output element a call
# never writes, or scratch the library wrongly assumes zeroed, fails the comparison instead of passing on stale data
pytest_plugins = ["poison_plugin"]


@functools.cache
def gpu_count() -> tuple[int, str]:
    """(visible GPUs, why none can be used: '' when one can)."""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0, f"cuInit failed: {err.name}"
        _, count = driver.cuDeviceGetCount()
        return count, "" if count else "the CUDA driver sees no GPU"
    except Exception:  # no driver library at all
        return 0, "no CUDA driver on this machine"


def gpu_missing_reason() -> str:
    """Why no GPU can be used here ('' when one can)."""
    return gpu_count()[1]


def pytest_collection_modifyitems(config, items):
    _keep_shard(config, items)
    count, why = gpu_count()
    if count < 2:
        skip_multi = pytest.mark.skip(reason=f"needs two or more GPUs ({count} visible{': ' + why if why else ''})")
        for item in items:
            if "multi_gpu" in item.keywords:
                item.add_marker(skip_multi)
    if os.environ.get("CUDNN_PY_REQUIRE_GPU") == "1" or not why:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU ({why})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _keep_shard(config, items) -> None:
    """CUDNN_PY_SHARD=i/n keeps every n-th collected test starting at the i-th (tools/gpu_suite.py runs n at once)."""
    shard = os.environ.get("CUDNN_PY_SHARD")
    if not shard:
        return
    i, n = (int(v) for v in shard.split("/"))
    config.hook.pytest_deselected(items=[it for k, it in enumerate(items) if k % n != i])
    items[:] = [it for k, it in enumerate(items) if k % n == i]


@pytest.fixture(scope="session")
def handle():
    """One cuDNN handle on GPU 0 for the whole session."""
    from cudnn_py.handle import Handle
    with Handle() as h:
        yield h


@pytest.fixture
def rng():
    """A fresh random generator per test, seeded from the OS (the seed is printed when a test fails)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def tensor():
    """A raw C tensor descriptor (``cudnnTensorDescriptor_t``), destroyed after the test."""
    from ctypes import byref
    from cudnn_py import capi
    d = capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateTensorDescriptor(byref(d))
    yield d
    capi.cudnnDestroyTensorDescriptor(d)
